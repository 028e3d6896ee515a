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

To ask for compression, pass ``DistributedOptimizer(..., compression="auto")``: it uses
:func:`onebit_hook` only where the link is slower than compression's own work (see
:func:`terascale.torch.compression_pays`; on one host, never). A hook given here is used as
given. Choosing a hook (bytes per step for ``d`` float32 gradient values on ``n`` workers, ring
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

from .._errors import ConfigError
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
    (one worker, an empty bucket), so callers wait on every bucket alike.

    Parameters
    ----------
    value
        The result ``wait()`` returns.
    """

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
    """Plain sum with ``comm.allreduce_async``: exact and bitwise identical on every worker.

    Every hook takes these arguments (like PyTorch's communication hooks) and returns a
    handle whose ``wait()`` gives the summed gradient.

    Parameters
    ----------
    state
        The ``hook_state`` given to ``DistributedOptimizer`` (the hook's own state object, or
        None).
    comm
        The communicator.
    index
        The bucket's number, the same on every worker.
    grad
        The bucket's flattened gradient.
    """
    return comm.allreduce_async(grad)


def fp16_hook(state: Any, comm: Communicator, index: int, grad: torch.Tensor) -> Waitable:
    """Send float16: half the bytes of float32, and the summation happens in float16.

    The gradient is pre-divided by the number of workers (as PyTorch's
    ``fp16_compress_hook`` does) so that the float16 sum stays within range; the result is
    scaled back and returned in the gradient's dtype. Every worker receives the same
    float16 bytes, so parameters stay bitwise identical across workers.

    Every hook takes these arguments (like PyTorch's communication hooks) and returns a
    handle whose ``wait()`` gives the summed gradient.

    Parameters
    ----------
    state
        The ``hook_state`` given to ``DistributedOptimizer`` (the hook's own state object, or
        None).
    comm
        The communicator.
    index
        The bucket's number, the same on every worker.
    grad
        The bucket's flattened gradient.
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

    Measurements behind the defaults: ``docs/benchmarks/torch-onebit.md``; what else was
    tried, and why it is not the default: :mod:`terascale.torch._onebit`.

    Parameters
    ----------
    warmup_steps
        Steps per bucket sent in full precision before compressing (default 20), the
        warm-up stage of 1-bit Adam: the first steps move the weights most and their
        gradients change fastest, so a residual started then is large and stale. Raise it
        when the first epochs of 1-bit training diverge or lag.
    block
        Values per scale (default 256). Each block is sent as its signs times one float32
        scale, its mean absolute value: ``1 + 32/block`` bits per value, 28x fewer bytes
        than float32 at 256, 16x at 64. Lower it if 1-bit training lags full precision;
        raise it to squeeze bytes.
    momentum
        The momentum that is compressed (default None: DistributedOptimizer fills in the
        wrapped optimizer's). Compressing the *gradient* of momentum SGD puts the residual
        inside the momentum recursion, where each delayed error is amplified by
        ``1/(1-momentum)``; with ``momentum > 0`` the hook compresses the *momentum* instead,
        as DeepSpeed's 1-bit Adam does: every worker keeps the momentum of its exact
        gradients, the compressed allreduce averages them, and the wrapped optimizer gets
        the gradient whose momentum buffer is exactly that average. ``momentum=0``: plain
        error feedback on the gradient.
    precondition
        Divide every value by a per-value magnitude frozen at the end of the warm-up before
        quantizing, and multiply it back on arrival, as 1-bit Adam divides by its frozen
        second moment (default True): one sign and one scale per block then fit values that
        span orders of magnitude (layers, biases). Needs ``warmup_steps >= 1``.
    floor
        With ``precondition``: each magnitude is at least this fraction of its bucket's mean
        (default 0.1, in (0, 1]), so a value that was near zero during the warm-up cannot set
        the scale of its whole block later.
    lookahead
        Compute each gradient near the weights full precision would have reached (default
        True): with error feedback the weights trail the exact run by ``lr`` times what the
        residuals hold back (the "virtual iterate" of Karimireddy et al. 2019), so after
        every step :class:`~terascale.torch.DistributedOptimizer` moves the model by ``-lr``
        times :meth:`unpaid` and puts the true weights back before the next step and in
        ``flush()``: **call ``opt.flush()`` before evaluating or saving**. Only for SGD whose
        momentum is the one compressed.
    start_step
        The old name of ``warmup_steps`` (the larger of the two applies).
    worker_error
        Per bucket, this worker's quantization residual (state, filled in by the hook).
    server_error
        Per bucket, the residual of the chunk this worker averages (state).
    steps
        Per bucket, the steps seen so far (state).
    local_momentum
        Per bucket, this worker's momentum of its exact gradients (state).
    average_momentum
        Per bucket, the averaged momentum of the previous step (state).
    second_moment
        Per bucket, the warm-up's sum of squares and its count (state).
    magnitude
        Per bucket, the frozen magnitudes ``precondition`` divides by (state).
    """

    warmup_steps: int = 20
    block: int = 256
    momentum: float | None = None
    precondition: bool = True
    floor: float = 0.1
    lookahead: bool = True
    start_step: int = 0
    worker_error: dict[int, torch.Tensor] = field(default_factory=dict)
    server_error: dict[int, Any] = field(default_factory=dict)
    steps: dict[int, int] = field(default_factory=dict)
    local_momentum: dict[int, torch.Tensor] = field(default_factory=dict)
    average_momentum: dict[int, torch.Tensor] = field(default_factory=dict)
    second_moment: dict[int, tuple[torch.Tensor, int]] = field(default_factory=dict)
    magnitude: dict[int, torch.Tensor | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.warmup_steps < 0 or self.start_step < 0:
            raise ConfigError(f"warmup_steps={self.warmup_steps} must be >= 0")
        if not 0.0 < self.floor <= 1.0:
            raise ConfigError(f"floor={self.floor} must be in (0, 1]")

    def looks_past(self, optimizer: torch.optim.Optimizer) -> bool:
        """Whether the optimizer should move the model past the residuals (``lookahead``):
        only where a step moves the weights by ``lr`` times the compressed quantity, i.e.
        SGD whose momentum is the one compressed (or none, with ``momentum=0``).

        Parameters
        ----------
        optimizer
            The wrapped optimizer.
        """
        from ._predict import SGD_FAMILY

        mu = self.momentum or 0.0
        return (self.lookahead and isinstance(optimizer, SGD_FAMILY)
                and all(float(g.get("momentum", 0.0) or 0.0) == mu
                        for g in optimizer.param_groups))

    def unpaid(self, index: int, rank: int, numel: int) -> torch.Tensor | None:
        """This worker's estimate of what the residuals of bucket ``index`` still hold back,
        in the units of the averaged (compressed) momentum: its own worker residual, plus its
        server residual on the chunk it owns. None before compression starts.

        Parameters
        ----------
        index
            The bucket's number.
        rank
            This worker's rank (which chunk it owns).
        numel
            The bucket's number of values.
        """
        err = self.worker_error.get(index)
        if err is None:
            return None
        held = err[:numel].clone()
        serr = self.server_error.get(index)
        if serr is not None:
            m = serr.shape[1]
            lo, hi = rank * m, min(numel, (rank + 1) * m)
            if lo < hi:
                held[lo:hi] += torch.from_numpy(serr[0, :hi - lo]).to(held.device)
        sigma = self.magnitude.get(index)
        if sigma is not None and sigma.numel() == numel:
            held.mul_(sigma.reshape(-1).to(held.device))
        return held

    def _observe(self, index: int, total: torch.Tensor) -> None:
        """Warm-up: add the square of an exact (allreduced, so identical) sum."""
        if not self.precondition:
            return
        acc, count = self.second_moment.get(index, (None, 0))
        sq = total.to(torch.float32).square()
        self.second_moment[index] = (sq if acc is None else acc + sq, count + 1)

    def _frozen(self, index: int) -> torch.Tensor | None:
        """The per-value magnitude the compressed values are divided by (None: plain)."""
        if index not in self.magnitude:
            acc, count = self.second_moment.pop(index, (None, 0))
            sigma = None
            if acc is not None and count:
                sigma = (acc / count).sqrt()
                sigma = torch.maximum(sigma, self.floor * sigma.mean())
                if not bool(sigma.gt(0).all()):  # an all-zero bucket: nothing to scale by
                    sigma = None
            self.magnitude[index] = sigma
        return self.magnitude[index]


def onebit_hook(state: OneBitState, comm: Communicator, index: int,
                grad: torch.Tensor) -> Waitable:
    """1-bit SGD with error feedback, exchanged as DeepSpeed's compressed allreduce.

    Bytes per worker and step: ``2 (n-1)/n * d (1 + 32/block) / 8`` against
    ``8 (n-1)/n * d`` for a float32 ring allreduce: ~28x fewer with ``block=256``. Quantization runs on
    the gradient's device, where the quantization error is kept and added back next step
    (Seide et al., Interspeech 2014). See :class:`OneBitState`.

    Every hook takes these arguments (like PyTorch's communication hooks) and returns a
    handle whose ``wait()`` gives the summed gradient.

    Parameters
    ----------
    state
        The ``hook_state`` given to ``DistributedOptimizer`` (here a :class:`OneBitState`).
    comm
        The communicator.
    index
        The bucket's number, the same on every worker.
    grad
        The bucket's flattened gradient.
    """
    step = state.steps.get(index, 0)
    state.steps[index] = step + 1
    mu = state.momentum or 0.0
    warm = step < max(state.warmup_steps, state.start_step)
    if mu == 0.0:
        if warm:
            return _Then(allreduce_hook(None, comm, index, grad),
                         lambda total: _observed(state, index, total))
        return _compressed(state, comm, index, grad, lambda total: total)
    # Momentum compression: m_i = mu m_i + g_i here; S = sum_i m_i travels; the optimizer gets
    # S_t - mu S_(t-1), so that its own momentum buffer (times the total weight) is S_t.
    local = state.local_momentum.get(index)
    if local is None or local.shape != grad.shape or local.device != grad.device:
        local = state.local_momentum[index] = torch.zeros_like(grad, dtype=torch.float32)
    local.mul_(mu).add_(grad.to(torch.float32))
    previous = state.average_momentum.get(index)
    if previous is None or previous.shape != grad.shape or previous.device != grad.device:
        previous = state.average_momentum[index] = torch.zeros_like(grad, dtype=torch.float32)

    def to_gradient(total: torch.Tensor) -> torch.Tensor:
        momentum_sum = total.to(torch.float32)
        if momentum_sum is total:  # a float32 sum of our own: keep it, no copy
            momentum_sum = total.clone() if total.data_ptr() == local.data_ptr() else total
        # S_t - mu S_(t-1), written over S_(t-1), and S_t kept for the next step
        out = torch.sub(momentum_sum, previous.mul_(mu), out=previous)
        state.average_momentum[index] = momentum_sum
        return out.to(grad.dtype)

    if warm:
        # full precision: the sum of the exact local momenta is the momentum of the summed
        # gradients, so the optimizer's buffer and S agree when compression starts
        return _Then(comm.allreduce_async(local),
                     lambda total: to_gradient(_observed(state, index, total)))
    return _compressed(state, comm, index, local, to_gradient)


def _observed(state: OneBitState, index: int, total: torch.Tensor) -> torch.Tensor:
    state._observe(index, total)
    return total


def _compressed(state: OneBitState, comm: Communicator, index: int, values: torch.Tensor,
                then: Any) -> Waitable:
    """The 1-bit exchange of ``values / magnitude``, multiplied back on arrival."""
    sigma = state._frozen(index)
    if sigma is None or sigma.shape != values.shape or sigma.device != values.device:
        return _Then(compressed_allreduce(comm, values, index, state.worker_error,
                                          state.server_error, state.block), then)
    scaled = values.to(torch.float32) / sigma
    return _Then(compressed_allreduce(comm, scaled, index, state.worker_error,
                                      state.server_error, state.block),
                 lambda total: then((total.to(torch.float32) * sigma).to(values.dtype)))
