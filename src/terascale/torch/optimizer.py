"""``DistributedOptimizer``: gradient averaging with bucketed allreduce overlapped with backward.

The design of Goyal et al. 2017 ("gradient aggregation in parallel with backprop") and of
Horovod/DDP: parameters are grouped at construction into buckets of about ``bucket_mb``
megabytes, in reverse registration order (roughly the order backward produces gradients).
A post-accumulate-grad hook on every parameter counts arrivals; when a bucket is complete,
its gradients are copied into one flat buffer and its allreduce is *submitted*
(``comm.allreduce_async``) while backward continues on earlier layers. ``step()`` only waits
for what is still in flight, writes the averaged gradients back and runs the wrapped
optimizer.

Ordering. The communicator runs asynchronous collectives in submission order, so every
worker must submit the same buckets in the same order. Buckets are therefore launched
strictly by index: a bucket that becomes ready early waits for its predecessors, and any
bucket left incomplete by backward (a parameter without gradient this step) is launched by
``step()``, together with all its successors. The schedule is thus identical on every
worker whatever the hooks' firing order.

Weights and uneven inputs. Each worker multiplies its gradient by a weight (by default 1,
or its real batch size via :meth:`DistributedOptimizer.set_batch_size`) and a few metadata
values are summed in float64, never in a gradient dtype (a float16 sum of batch sizes
overflows at 65,504 and rounds above 2,048): the weight, whether the worker is still active
and, per parameter, whether it had a gradient. They travel inside the last bucket when that
bucket is float64, else as one small allreduce of their own. The result is ``sum_i w_i g_i / sum_i w_i``: the
gradient of the concatenated batch. A worker that runs out of data calls :meth:`join`; it
keeps taking part in the collectives with weight 0 (and applies the same updates, so it
stays identical) until every worker has joined, so nobody hangs. A parameter that had no
gradient on any worker keeps ``grad = None`` everywhere (optimizers skip it).

Half-batch (communication one step behind compute: one minibatch's gradients travel while
the next computes on parameters one step older; the bounded delay of Langford, Smola &
Zinkevich, "Slow Learners are Fast", NIPS 2009): with ``half_batch=True`` the step applies the averaged gradient of the
*previous* minibatch, whose allreduce ran during this minibatch's forward and backward. The
first step only launches; :meth:`flush` applies the last pending gradient. The delay is
compensated by weight prediction (:mod:`terascale.torch._predict`): between steps the model
holds the weights the next step will reach, so each gradient is computed where it is
applied; :meth:`flush` (or :meth:`close`) puts the true weights back, so call it before
evaluating or saving the model. The older remedy, a momentum correction
(:mod:`terascale.torch._delay`), is there as ``half_batch_momentum``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

from .._errors import ConfigError
from ..communicator import Communicator
from ._buckets import Bucket as _Bucket
from ._buckets import assign_buckets
from ._comm import resolve
from ._delay import DelayCorrection
from ._predict import WeightPrediction
from .hooks import Done, Hook, OneBitState, Waitable

__all__ = ["DistributedOptimizer", "compression_pays"]

# The link rate (bits/s) below which 1-bit pays for its own work: on CPU, 1-bit's passes
# over the gradient (compensate, quantize, pack, decode, residual, momentum) cost some
# 5-10 ns per value (docs/benchmarks/torch-onebit.md), while a float32 allreduce moves
# ~64 bits per value: ~6 ns at 10 Gbit/s.
_PAYING_RATE = 10e9


def compression_pays(comm: Communicator) -> bool:
    """Whether ``compression="auto"`` compresses on ``comm``: its ranks span more than one
    host, and the link rate the job states (``comm.link_rate``, bits/s; unknown counts as
    slow) is below 10 Gbit/s.

    Why: between processes of one host the allreduce runs through shared memory at memory
    speed (~4 ms for the 7.5 MB of an MLP of 1.9M parameters, 2 workers), while 1-bit must
    read the gradient several times to compensate, quantize, pack and decode it, which
    costs more than the whole exact allreduce (``docs/benchmarks/torch-onebit.md``: 1-bit
    several times slower than the uncompressed path there). Between hosts a float32
    allreduce sends ~64 bits per value and 1-bit ~2.3: at 1-10 Gbit/s that is the time
    that compression saves. Tuning: ask for ``compression="onebit"`` to compress anyway (a
    slow or shared link the job does not know of), or state the link rate
    (``terascale run --link-rate 25Gbit``, ``init(link_rate=)``) so that ``auto`` knows a
    fast one. The decision depends only on what every rank holds
    alike (the host list and the link rate), so all ranks take the same one.

    Parameters
    ----------
    comm
        The communicator the optimizer reduces over.
    """
    if len(set(comm.hosts)) <= 1:
        return False
    return comm.link_rate is None or comm.link_rate < _PAYING_RATE


def _compression_hook(name: str, comm: Communicator, state: Any) -> tuple[Hook | None, Any]:
    """The hook and state of ``compression=name``."""
    from .hooks import fp16_hook, onebit_hook

    if name not in ("auto", "onebit", "fp16", "none"):
        raise ConfigError(f"compression={name!r}: expected 'auto', 'onebit', 'fp16' or 'none'")
    if state is not None and not isinstance(state, OneBitState):
        raise ConfigError(f"hook_state={state!r} with compression={name!r}: only a "
                          "OneBitState (or None)")
    if name == "fp16":
        return fp16_hook, None
    if name == "onebit" or (name == "auto" and compression_pays(comm)):
        return onebit_hook, state if state is not None else OneBitState()
    return None, None


def _name(hook: Hook | None) -> str:
    from .hooks import fp16_hook, onebit_hook

    return {None: "none", onebit_hook: "onebit", fp16_hook: "fp16"}.get(hook, "custom")


class DistributedOptimizer:
    """Wrap ``optimizer`` so that every ``step()`` uses gradients averaged over all workers.

    Use it like the wrapped optimizer (``zero_grad()``, ``loss.backward()``, ``step()``).
    All workers must construct it with the same model and options.

    Parameters
    ----------
    optimizer
        The local optimizer (any ``torch.optim.Optimizer``); it steps on the averaged
        gradients.
    model
        The module whose parameters' gradients are averaged (those with
        ``requires_grad``).
    comm
        The communicator (default None: the process's ``terascale.init()``, made once on
        first use and shared by every object of ``terascale.torch``).
    bucket_mb
        Target bucket size in MB (default 25, as DDP). Smaller buckets start communicating
        earlier, larger ones pay fewer per-message costs; ~1 MB suits small models on slow
        links.
    first_bucket_mb
        The size of the first bucket, which holds the last layers and should start early
        (default 1 MB, as DDP).
    hook
        A communication hook of one's own (see :mod:`terascale.torch.hooks`; default None:
        the exact sum); ``hook=onebit_hook`` always compresses, as asked. Excludes
        ``compression``.
    hook_state
        The hook's state, passed to every call (e.g. a :class:`OneBitState` to tune the
        1-bit exchange; default None).
    backward_passes_per_step
        Gradient accumulation: communication starts only on the last of that many
        backward passes (default 1; scale the loss by ``1/k`` as usual).
    half_batch
        Apply gradients one step late, overlapping their communication with the next
        minibatch (default False).
    max_grad_norm
        Clip the *averaged* gradient to this global L2 norm before every step (default
        None: no clipping; Hoffer et al. 2017 against early divergence of large batches; the
        same on every worker because the averaged gradient is).
    algorithm
        The allreduce algorithm of the uncompressed path (default ``"auto"``; ``ring``,
        ``tree``, ``shm``...).
    half_batch_momentum
        With ``half_batch``: lower the momentum for the delay: ``"auto"``, a momentum, or
        None (the default; see :mod:`terascale.torch._delay`).
    half_batch_predict
        With ``half_batch``: compute each gradient on the predicted weights of the step it
        is applied in (default True).
    compression
        ``"auto"`` (the way to ask for compression), ``"onebit"``, ``"fp16"`` or None (the
        default: exact sums). ``"auto"`` compresses with 1-bit only where the link is slower
        than compression's own cost (see :func:`compression_pays`); elsewhere it is the
        uncompressed path, bitwise. The choice made is in ``self.compression``.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, model: torch.nn.Module, *,
                 comm: Communicator | None = None, bucket_mb: float = 25.0,
                 first_bucket_mb: float = 1.0,
                 hook: Hook | None = None, hook_state: Any = None,
                 backward_passes_per_step: int = 1, half_batch: bool = False,
                 max_grad_norm: float | None = None, algorithm: str = "auto",
                 half_batch_momentum: float | str | None = None,
                 half_batch_predict: bool = True, compression: str | None = None) -> None:
        if bucket_mb <= 0 or first_bucket_mb <= 0:
            raise ConfigError(f"bucket_mb={bucket_mb} and first_bucket_mb={first_bucket_mb} "
                              "must be positive")
        if backward_passes_per_step < 1:
            raise ConfigError(f"backward_passes_per_step={backward_passes_per_step} must be >= 1")
        self.optimizer = optimizer
        self.comm = resolve(comm)
        if compression is not None:
            if hook is not None:
                raise ConfigError(f"compression={compression!r} and hook={hook!r}: give one "
                                  "of them")
            hook, hook_state = _compression_hook(compression, self.comm, hook_state)
        self.compression = _name(hook)
        self.hook = hook
        self.hook_state = hook_state
        if isinstance(hook_state, OneBitState) and hook_state.momentum is None:
            # 1-bit compresses the momentum of momentum SGD: it needs the optimizer's value
            found = {float(g.get("momentum", 0.0)) for g in optimizer.param_groups}
            if len(found) > 1:
                raise ConfigError(f"the parameter groups use different momenta {sorted(found)}; "
                                  "pass OneBitState(momentum=...) explicitly (0 compresses "
                                  "gradients instead)")
            hook_state.momentum = found.pop()
        self.passes = backward_passes_per_step
        self.half_batch = half_batch
        self.max_grad_norm = max_grad_norm
        self.algorithm = algorithm
        self.weight = 1.0
        self._sync = True
        seen: set[int] = set()
        params: list[torch.nn.Parameter] = []
        for p in model.parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                params.append(p)
        if not params:
            raise ConfigError("the model has no parameters that require gradients")
        self.params = params
        self.buckets = self._assign(params, int(bucket_mb * 1024 * 1024),
                                    int(min(first_bucket_mb, bucket_mb) * 1024 * 1024))
        self._where: dict[int, tuple[_Bucket, int]] = {}
        for b in self.buckets:
            for _, p in b.params:
                self._where[id(p)] = (b, 0)
        self._counts: dict[int, int] = {id(p): 0 for p in params}
        self._fired: dict[int, bool] = {id(p): False for p in params}
        self._next = 0
        self._handles: list[Waitable] = []
        self._meta_handle: Waitable | None = None
        self._pending: tuple[list[Waitable], Waitable | None] | None = None  # half-batch
        self._hooks = [p.register_post_accumulate_grad_hook(self._on_grad) for p in params]
        self._delay = DelayCorrection(optimizer, half_batch_momentum if half_batch else None)
        # the model is moved between steps: ahead of half-batch's delay, and/or past 1-bit's
        # residuals (the true weights are put back before every step)
        self._ahead = half_batch and half_batch_predict
        self._look_past = isinstance(hook_state, OneBitState) and hook_state.looks_past(optimizer)
        self._held = (WeightPrediction(optimizer, params, ahead=self._ahead)
                      if self._ahead or self._look_past else None)
        self._total_weight = float(self.comm.size)

    # -- construction ------------------------------------------------------------------------
    _assign = staticmethod(assign_buckets)

    # -- user API ----------------------------------------------------------------------------
    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load the wrapped optimizer's state (as ``torch.optim.Optimizer.load_state_dict``).

        Parameters
        ----------
        state
            What :meth:`state_dict` returned.
        """
        self.optimizer.load_state_dict(state)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients (as the wrapped optimizer's ``zero_grad``).

        Parameters
        ----------
        set_to_none
            Set them to None instead of zero (default True, as torch).
        """
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def set_batch_size(self, n: int | float) -> None:
        """Weight this worker's gradient by ``n`` (its real batch size) from now on.

        Call it before ``backward`` of a step whose batch differs from the others'; the
        averaged gradient is then ``sum_i n_i g_i / sum_i n_i``, i.e. the mean over all
        samples of the step when every ``g_i`` is a per-worker mean.

        Parameters
        ----------
        n
            This worker's number of samples in the coming step (> 0).
        """
        if n <= 0:
            raise ConfigError(f"batch size {n} must be positive (call join() when out of data)")
        self.weight = float(n)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """Accumulate gradients locally inside this block (like DDP's ``no_sync``)."""
        old, self._sync = self._sync, False
        try:
            yield
        finally:
            self._sync = old

    def step(self, closure: Callable[[], float] | None = None) -> Any:
        """Finish the averaging (wait for what is in flight) and step the wrapped optimizer.

        Parameters
        ----------
        closure
            Re-evaluates the model and returns the loss, as for ``torch.optim.Optimizer.step``
            (default None).
        """
        handles, meta = self._launch_rest(active=True)
        held = self._held
        # this worker's own gradients (the averaging assigns new tensors to p.grad, so these
        # stay as they are until the prediction has used them)
        local = [p.grad for p in self.params] if self._ahead else []
        if self.half_batch:
            previous, self._pending = self._pending, (handles, meta)
            if previous is None:  # the first step only launches; the model moves ahead
                if held is not None and self._ahead:
                    held.restore()
                    held.hold()
                    held.step_ahead(local)
                return None
            handles, meta = previous
        if self._apply(handles, meta) == 0:
            return None
        self._delay.apply(self.params)
        self._clip()
        if held is not None:
            held.restore()
        out = self.optimizer.step(closure) if closure is not None else self.optimizer.step()
        if held is not None:
            held.hold()
            if self._ahead:
                held.step_ahead(local)
            if self._look_past:
                self._move_past_residuals(held)
        return out

    def _move_past_residuals(self, held: WeightPrediction) -> None:
        """1-bit: move the model by what this worker's residuals still hold back, toward the
        weights full precision would have reached (see :class:`OneBitState`)."""
        assert isinstance(self.hook_state, OneBitState)
        per_weight = self.comm.size / self._total_weight  # residuals are weighted sums
        for b in self.buckets:
            unpaid = self.hook_state.unpaid(b.index, self.comm.rank, b.numel)
            if unpaid is None:
                continue
            for (_, p), (off, n) in zip(b.params, b.offsets):
                held.move(p, unpaid[off:off + n], per_weight)

    def flush(self) -> None:
        """Apply half-batch's gradient still in flight and put the true weights back into
        the model (half-batch and 1-bit move it between steps): call after the last step, and
        before evaluating or saving."""
        if self._held is not None:
            self._held.restore()
        if self._pending is not None:
            handles, meta = self._pending
            self._pending = None
            if self._apply(handles, meta) > 0:
                self._delay.apply(self.params)
                self._clip()
                self.optimizer.step()

    def join(self) -> int:
        """Call when this worker is out of data; returns after every worker has joined.

        Until then it mirrors the others' steps with zero weight: same collectives, same
        averaged gradients, same optimizer updates (parameters stay bitwise identical).
        Returns the number of steps it mirrored.
        """
        self.flush()
        mirrored = 0
        self.optimizer.zero_grad(set_to_none=True)
        while True:
            handles, meta = self._launch_rest(active=False)
            self._pending = None
            active = self._apply(handles, meta)
            if active == 0:
                return mirrored
            self._clip()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            mirrored += 1

    def close(self) -> None:
        """Remove the gradient hooks (the wrapped optimizer keeps working alone)."""
        for h in self._hooks:
            h.remove()
        self._hooks = []
        if self._held is not None:
            self._held.restore()  # the true weights, not the moved ones

    def _clip(self) -> None:
        if self.max_grad_norm is not None:
            grads = [p for p in self.params if p.grad is not None]
            torch.nn.utils.clip_grad_norm_(grads, self.max_grad_norm)

    # -- the machinery -----------------------------------------------------------------------
    def _on_grad(self, p: torch.Tensor) -> None:
        if not self._sync:
            return
        key = id(p)
        self._counts[key] += 1
        if self._counts[key] > self.passes:
            raise ConfigError(f"a parameter received {self._counts[key]} backward passes before "
                              f"step(), more than backward_passes_per_step={self.passes}; "
                              "its bucket was already sent (accumulate with no_sync() or "
                              "backward_passes_per_step)")
        if self._counts[key] != self.passes:
            return
        self._fired[key] = True
        bucket = self._where[key][0]
        bucket.ready += 1
        while self._next < len(self.buckets) and \
                self.buckets[self._next].ready == len(self.buckets[self._next].params):
            self._launch(self.buckets[self._next], active=True)

    def _launch_rest(self, *, active: bool) -> tuple[list[Waitable], Waitable | None]:
        while self._next < len(self.buckets):
            self._launch(self.buckets[self._next], active=active)
        handles, meta = self._handles, self._meta_handle
        self._handles, self._meta_handle, self._next = [], None, 0
        for b in self.buckets:
            b.ready = 0
        for key in self._counts:
            self._counts[key] = 0
            self._fired[key] = False
        return handles, meta

    def _launch(self, bucket: _Bucket, *, active: bool) -> None:
        last = bucket.index == len(self.buckets) - 1
        inline_meta = last and self.hook is None and bucket.wire == torch.float64
        extra = len(self.params) + 2 if inline_meta else 0
        buf = torch.zeros(bucket.numel + extra, dtype=bucket.wire, device=bucket.device)
        if active:
            for (_, p), (off, n) in zip(bucket.params, bucket.offsets):
                if p.grad is not None:
                    buf[off:off + n].copy_(p.grad.reshape(-1))
            if self.weight != 1.0:
                buf[:bucket.numel].mul_(self.weight)
        self._next = bucket.index + 1
        if last:
            meta = self._meta(active)
            if inline_meta:
                buf[bucket.numel:].copy_(meta)
        if self.hook is None:
            self._handles.append(self._allreduce(buf))
        else:
            self._handles.append(self.hook(self.hook_state, self.comm, bucket.index, buf))
        if last and not inline_meta:
            self._meta_handle = Done(meta) if self.comm.size == 1 else \
                self.comm.allreduce_async(meta)

    def _allreduce(self, buf: torch.Tensor) -> Waitable:
        if self.comm.size == 1:
            return Done(buf)  # nothing to exchange: skip the progress thread
        if buf.device.type == "cpu":
            # in place: no extra copy
            return self.comm.allreduce_async(buf, out=buf, algorithm=self.algorithm)
        return self.comm.allreduce_async(buf, algorithm=self.algorithm)  # via a host copy

    def _meta(self, active: bool) -> torch.Tensor:
        """[had-gradient flag per parameter..., weight, active] of this worker."""
        flags = [float(active and (self._fired[id(p)] or p.grad is not None)) for p in self.params]
        return torch.tensor([*flags, self.weight if active else 0.0, float(active)],
                            dtype=torch.float64)

    def _apply(self, handles: list[Waitable], meta_handle: Waitable | None) -> int:
        """Wait, divide by the total weight, write ``p.grad``; returns the active worker count."""
        results = [h.wait() for h in handles]
        last = self.buckets[-1]
        if meta_handle is None:
            meta = results[-1][last.numel:].to(torch.float64).cpu()
        else:
            meta = meta_handle.wait().to(torch.float64).cpu()
        flags = meta.tolist()  # plain floats: cheaper than indexing a tensor per parameter
        total, active = flags[-2], int(round(flags[-1]))
        if active == 0:
            return 0
        self._total_weight = total
        for bucket, flat in zip(self.buckets, results):
            flat = flat[:bucket.numel]
            flat.div_(total)
            if flat.dtype != bucket.dtype:
                flat = flat.to(bucket.dtype)  # the one rounding of a half-precision gradient
            for (num, p), (off, n) in zip(bucket.params, bucket.offsets):
                if flags[num] > 0:
                    p.grad = flat[off:off + n].view_as(p)
                else:
                    p.grad = None
        return active

