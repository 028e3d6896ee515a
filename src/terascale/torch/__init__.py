"""Data-parallel PyTorch on terascale: allreduce SGD with the large-minibatch recipes of Goyal
et al. ("Accurate, Large Minibatch SGD", 2017) and 1-bit SGD (Seide et al., Interspeech 2014).

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

Importing the package registers the ``torch.distributed`` backend ``"terascale"``
(:mod:`terascale.torch.backend`): ``dist.init_process_group("terascale")`` runs unchanged
``DistributedDataParallel`` code and every ``dist.*`` collective on terascale.
"""

from __future__ import annotations

import importlib
import typing

# Names are imported on first use (PEP 562): the package loads only torch.distributed and
# the backend (which torch code must find before init_process_group), not every module.
_WHERE = {
    "DistributedOptimizer": "optimizer", "DistributedSampler": "sampler",
    "GhostBatchNorm": "recipes", "GradualWarmup": "recipes", "ModelAverager": "averaging",
    "MomentumCorrectedSGD": "recipes", "OneBitState": "hooks", "ParameterServer": "ps",
    "allreduce_hook": "hooks", "average_buffers": "averaging", "broadcast_buffers": "broadcast",
    "broadcast_optimizer_state": "broadcast", "broadcast_parameters": "broadcast",
    "clip_grad_norm": "recipes", "compression_pays": "optimizer", "fp16_hook": "hooks", "onebit_hook": "hooks",
    "scale_lr": "recipes", "TerascaleProcessGroup": "backend",
}


from . import backend as _backend  # noqa: E402, F401 (registers the torch.distributed backend)


def __getattr__(name: str) -> typing.Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'terascale.torch' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "DistributedOptimizer",
    "DistributedSampler",
    "GhostBatchNorm",
    "GradualWarmup",
    "ModelAverager",
    "MomentumCorrectedSGD",
    "OneBitState",
    "ParameterServer",
    "TerascaleProcessGroup",
    "allreduce_hook",
    "average_buffers",
    "broadcast_buffers",
    "broadcast_optimizer_state",
    "broadcast_parameters",
    "clip_grad_norm",
    "compression_pays",
    "fp16_hook",
    "onebit_hook",
    "scale_lr",
]
