"""Data-parallel PyTorch on terascale (the second talk, and the GPU half of the first).

>>> import torch, terascale.torch as tt
>>> model = torch.nn.Linear(4, 2)
>>> tt.broadcast_parameters(model)                       # every worker starts identical
>>> opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model)
>>> model(torch.ones(3, 4)).sum().backward(); _ = opt.step()

Gradient averaging with bucketed allreduce overlapped with backward
(:class:`DistributedOptimizer`), compression hooks (:mod:`terascale.torch.hooks`: fp16,
1-bit SGD with error feedback), half-batch, model averaging (:class:`ModelAverager`), a
parameter-server baseline (:class:`ParameterServer`), :class:`DistributedSampler` and the
large-minibatch recipes (:mod:`terascale.torch.recipes`).
"""

from .averaging import ModelAverager, average_buffers
from .broadcast import broadcast_buffers, broadcast_optimizer_state, broadcast_parameters
from .hooks import OneBitState, allreduce_hook, fp16_hook, onebit_hook
from .optimizer import DistributedOptimizer
from .ps import ParameterServer
from .recipes import (
    GhostBatchNorm,
    GradualWarmup,
    MomentumCorrectedSGD,
    clip_grad_norm,
    scale_lr,
)
from .sampler import DistributedSampler

__all__ = [
    "DistributedOptimizer",
    "DistributedSampler",
    "GhostBatchNorm",
    "GradualWarmup",
    "ModelAverager",
    "MomentumCorrectedSGD",
    "OneBitState",
    "ParameterServer",
    "allreduce_hook",
    "average_buffers",
    "broadcast_buffers",
    "broadcast_optimizer_state",
    "broadcast_parameters",
    "clip_grad_norm",
    "fp16_hook",
    "onebit_hook",
    "scale_lr",
]
