"""Communication hooks: how one bucket of gradients travels (plain, fp16, 1-bit).

A hook is a plain function ``hook(state, comm, index, grad) -> handle`` in the style of
PyTorch's DDP comm hooks: ``grad`` is the flat gradient of bucket ``index`` (already
multiplied by this worker's weight), ``state`` is whatever small object the hook needs
across steps (error-feedback buffers, counters), and ``handle.wait()`` returns a tensor of
the same shape, dtype and device holding the **sum** over all workers. The
:class:`~terascale.torch.DistributedOptimizer` divides by the total weight afterwards.

A hook is called on the training thread, as soon as its bucket is full during backward; it
must only *submit* communication (``comm.allreduce_async`` or the compressed exchange below),
which the communicator runs in submission order on its progress thread while backward goes
on. Every worker calls the hooks for the same buckets in the same order, so the collectives
always line up.

Choosing a hook (bytes per step for ``d`` float32 gradient values on ``n`` workers, ring
allreduce ``~ 8 d (n-1)/n``):

* :func:`allreduce_hook` (default): exact, bitwise identical on every worker.
* :func:`fp16_hook`: half the bytes; gradients are divided by ``n`` before the cast so the
  sum cannot overflow float16. Safe for most CNN/MLP training; watch for gradients below
  ``6e-8`` (they flush to zero).
* :func:`onebit_hook` with a :class:`OneBitState`: ~28x fewer bytes, 1-bit SGD with error
  feedback (Seide et al. 2014), run as DeepSpeed's compressed allreduce (Tang et al. 2021).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..communicator import Communicator
from ._onebit import compressed_allreduce

__all__ = ["Done", "Hook", "OneBitState", "Waitable", "allreduce_hook", "fp16_hook",
           "onebit_hook"]


class Waitable(Protocol):
    def wait(self) -> torch.Tensor: ...


class Hook(Protocol):
    def __call__(self, state: Any, comm: Communicator, index: int,
                 grad: torch.Tensor) -> Waitable: ...


class Done:
    """A handle whose result is already there: what a hook returns when nothing travels
    (one worker, an empty bucket), so callers wait on every bucket alike."""

    def __init__(self, value: torch.Tensor) -> None:
        self.value = value

    def wait(self) -> torch.Tensor:
        return self.value


class _Then:
    """``handle.wait()`` followed by a conversion of its result."""

    def __init__(self, handle: Any, convert: Any) -> None:
        self.handle = handle
        self.convert = convert

    def wait(self) -> torch.Tensor:
        return self.convert(self.handle.wait())


def allreduce_hook(state: Any, comm: Communicator, index: int, grad: torch.Tensor) -> Waitable:
    """Plain sum with ``comm.allreduce_async``: exact and bitwise identical on every worker."""
    return comm.allreduce_async(grad)


def fp16_hook(state: Any, comm: Communicator, index: int, grad: torch.Tensor) -> Waitable:
    """Send float16: half the bytes of float32, and the summation happens in float16.

    The gradient is pre-divided by the number of workers (as PyTorch's
    ``fp16_compress_hook`` does) so that the float16 sum stays within range; the result is
    scaled back and returned in the gradient's dtype. Every worker receives the same
    float16 bytes, so parameters stay bitwise identical across workers.
    """
    n = comm.size
    half = (grad / n).to(torch.float16)
    return _Then(comm.allreduce_async(half), lambda r: r.to(grad.dtype) * n)


@dataclass(kw_only=True)
class OneBitState:
    """Error-feedback memory of :func:`onebit_hook`, one entry per bucket.

    1-bit SGD (Seide, Fu, Droppo, Li, Yu 2014, "1-Bit Stochastic Gradient Descent and its
    Application to Data-Parallel Distributed Training of Speech DNNs") sends only the sign of
    every gradient value plus one scale per block of values, and *keeps the quantization error on the
    worker*, adding it to the next gradient before quantizing. Nothing is lost, only delayed:
    after ``T`` steps the sum of what was sent equals the sum of the true gradients minus the
    current residual, which stays bounded. That is what lets the model converge although each
    message carries 1 bit per value.

    The exchange follows DeepSpeed's compressed allreduce (Tang et al. 2021, "1-bit Adam"):
    each worker quantizes its compensated gradient in ``n`` chunks and sends chunk ``j`` to
    worker ``j`` (all-to-all); worker ``j`` averages the ``n`` decoded chunks, adds its own
    *server* residual, quantizes again and the 1-bit chunks are all-gathered. Two residuals
    (``worker_error``, ``server_error``) are therefore kept per bucket.

    Tuning guide:

    * ``start_step``: number of steps per bucket sent uncompressed first. Error feedback
      needs a gradient scale to settle; 1-bit Adam uses a full-precision warmup for the same
      reason. 0 is fine for SGD with momentum on small CNNs; raise it (a few hundred) when the
      first epochs diverge.
    * ``block``: values per scale. Each block of ``block`` consecutive gradient values is
      sent as its signs times one float32 scale, the block's mean absolute value (the value
      that minimizes the squared error of a sign code; Seide et al. use one or two per matrix
      column). Cost: ``1 + 32/block`` bits per value, i.e. 28x fewer bytes than float32 at
      256, 25.6x at 128, 16x at 64. Smaller blocks follow the gradient's scale more closely
      (layers and biases differ by orders of magnitude): lower it if 1-bit training lags
      full precision; raise it to squeeze bytes.
    * Momentum and learning rate: the residual re-enters later, so error feedback behaves
      like an extra momentum term. On the Fashion-MNIST CNN with 4 workers x 64 (5 epochs,
      LR 0.1, warmup), 1-bit with momentum 0.9 failed (29.9% test accuracy) while momentum
      0.5 matched full precision (88.90% vs 88.91%; ``terascale bench torch``,
      benchmarks/RESULTS.md): lower the momentum first (0.5), then the LR (~2x) if the loss
      still plateaus higher.
    """

    start_step: int = 0
    block: int = 256
    worker_error: dict[int, torch.Tensor] = field(default_factory=dict)
    server_error: dict[int, Any] = field(default_factory=dict)
    steps: dict[int, int] = field(default_factory=dict)


def onebit_hook(state: OneBitState, comm: Communicator, index: int,
                grad: torch.Tensor) -> Waitable:
    """1-bit SGD with error feedback, exchanged as DeepSpeed's compressed allreduce.

    Bytes per worker and step: ``2 (n-1)/n * d (1 + 32/block) / 8`` against
    ``8 (n-1)/n * d`` for a float32 ring allreduce: ~28x fewer with ``block=256``. Quantization runs on
    the gradient's device, where the quantization error is kept and added back next step
    (Seide et al., Interspeech 2014). See :class:`OneBitState`.
    """
    step = state.steps.get(index, 0)
    state.steps[index] = step + 1
    if step < state.start_step:
        return allreduce_hook(None, comm, index, grad)
    return compressed_allreduce(comm, grad, index, state.worker_error, state.server_error,
                                state.block)
