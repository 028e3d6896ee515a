"""The public :class:`Communicator`: collectives over numpy arrays and CPU torch tensors.

The algorithms (:mod:`terascale.collectives`) and the links (:mod:`terascale.transport`) are
imported by the first collective that has peers to reach: a communicator of size 1, whose
collectives are copies, never loads them (a tenth of a second of a one-worker run's start).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

import numpy as np

from ._arrays import ReduceOp, as_array, check_plain, describe, restore, write_back
from ._async import Handle
from ._comm_core import CommCore
from ._comm_objects import ObjectCollectives
from ._errors import ConfigError

if TYPE_CHECKING:
    from .collectives.registry import AllreduceSpec
    from .transport import Exchange

__all__ = ["Communicator"]


def _same_buffer(a: np.ndarray, b: np.ndarray) -> bool:
    if a is b:  # out=x on a numpy array: the common in-place call, decided without a dict
        return True
    ia, ib = a.__array_interface__, b.__array_interface__
    return bool(ia["data"] == ib["data"] and a.strides == b.strides)


_NOTHING = np.empty(0, np.float32)  # what a barrier through shared memory "reduces"

# Per-call work that depends only on (algorithm, op, dtype, shape) is done once per
# communicator and kept here: the reduction op, auto's choice, the registry entry and the
# descriptor string (numpy's dtype names alone cost several microseconds, as much as a
# 4 KiB shared-memory allreduce moving its data). Bounded, so varying shapes cannot grow it.
_PLANS_MAX = 256


class Communicator(ObjectCollectives, CommCore):
    """A group of ``size`` ranks that run collectives together.

    Create it with :func:`terascale.init`, or from another one with :meth:`split`. Every
    rank must call the same collectives in the same order with matching shapes and dtypes;
    a disagreement raises :class:`~terascale.CollectiveMismatch` on every rank instead of
    hanging. Results are bitwise identical on every rank and across runs with the same
    inputs, world size and algorithm.
    """

    # -- allreduce ---------------------------------------------------------------------------
    def allreduce(self, x: Any, op: str = "sum", *, out: Any = None, algorithm: str = "auto",
                  timeout: float | None = None) -> Any:
        """Elementwise reduction of ``x`` over all ranks; every rank gets the same result.

        Returns a new array (or tensor) unless ``out`` is given, in which case the result is
        written there and ``out`` is returned (``out=x`` reduces in place). ``op`` is one of
        ``sum``, ``prod``, ``min``, ``max`` (on bool: or, and, and, or).

        ``algorithm`` (every one gives the same bits on every rank; see
        :mod:`terascale.collectives` for each one's cost):

        * ``auto`` (default): chosen by size and host layout from measured costs
          (:func:`terascale.collectives.select.choose_allreduce`), and across hosts by the
          TCP link model at the job's link rate when one was given (``init(link_rate=)``,
          ``terascale run --link-rate``, TERASCALE_LINK_RATE; :attr:`link_rate`);
        * ``tree``: pipelined binary tree, latency ``2 log2 n`` messages: small messages;
        * ``ring``: reduce-scatter + allgather, bandwidth-optimal: large messages;
        * ``halving_doubling``: Rabenseifner's recursive halving/doubling (Thakur et al.
          2005), bandwidth-optimal in ``2 log2 n`` latencies; mixed radix for other world
          sizes (Ruefenacht et al. 2017);
        * ``shm``: shared memory, every rank on one host;
        * ``hierarchical``: shared memory inside each host, then across hosts.

        The names are those of the one registry, :data:`terascale.collectives.ALLREDUCE`.

        Parameters
        ----------
        x
            The array (numpy, or anything with ``__array__``/``__dlpack__``: a CPU tensor) to
            reduce; the same shape and dtype on every rank.
        op
            The reduction: ``"sum"`` (default), ``"prod"``, ``"min"`` or ``"max"`` (on bool: or,
            and, and, or).
        out
            Where to write the result (same shape and dtype as ``x``); ``out=x`` reduces in place
            and saves a copy. Default None: a new array.
        algorithm
            Which allreduce runs (see above); ``"auto"`` is right unless a benchmark of your sizes
            says otherwise. Every rank must pass the same one.
        timeout
            Seconds this call may wait for a peer before raising :class:`~terascale.PeerTimeout`
            (default None: the communicator's deadline, ``init(timeout=)``, 60 s unless set).
        """
        if timeout is None and type(x) is np.ndarray and (out is None or out is x):
            # The per-call fast path (shared memory, compiled core): a dict lookup, then one
            # call that publishes, waits and folds; see FastAllreduce.
            fast = self._fast.get((algorithm, op, x.dtype, x.shape))
            if fast is not None and x.flags.c_contiguous and (out is None or x.flags.writeable):
                dst = x if out is x else np.empty_like(x)
                if self._schedule_fast("allreduce", fast[1], fast[0], x, dst):
                    return dst
        return self._allreduce(x, op, out, algorithm, timeout, asynchronous=False)

    def allreduce_async(self, x: Any, op: str = "sum", *, out: Any = None,
                        algorithm: str = "auto", timeout: float | None = None) -> Handle:
        """Start an allreduce that progresses in the background; ``handle.wait()`` returns it.

        ``x`` is copied when the call is made, so the caller may reuse it at once (unless
        ``out`` is ``x``). Handles may be waited in any order.

        Parameters
        ----------
        x
            As for :meth:`allreduce`; copied at the call.
        op
            As for :meth:`allreduce`.
        out
            As for :meth:`allreduce`; ``out=x`` makes the call read ``x`` in the background, so
            leave it alone until ``wait()`` returns.
        algorithm
            As for :meth:`allreduce`.
        timeout
            Seconds this call may wait for a peer before raising :class:`~terascale.PeerTimeout`
            (default None: the communicator's deadline, ``init(timeout=)``, 60 s unless set).
        """
        return self._allreduce(x, op, out, algorithm, timeout, asynchronous=True)

    def _allreduce(self, x: Any, op: str, out: Any, algorithm: str, timeout: float | None,
                   asynchronous: bool) -> Any:
        self._check_op(op)
        a, token = as_array(x)
        key = (algorithm, op, a.dtype, a.shape)
        plan: tuple[ReduceOp, AllreduceSpec | None, str] | None = self._plans.get(key)
        if plan is None:
            rop = ReduceOp(op, a.dtype)
            if self.size == 1 and algorithm == "auto":  # one rank: a copy, no algorithm runs
                plan = (rop, None, f"{algorithm},{describe(a)},{op}")
            else:
                from .collectives.registry import allreduce_spec
                from .collectives.select import choose_allreduce

                algo = choose_allreduce(a.nbytes, self.size, self.hosts, self.link_rate) \
                    if algorithm == "auto" else algorithm
                chosen = allreduce_spec(algo)
                if not chosen.runs_with(self.size):
                    raise ConfigError(f"rank {self.rank}: algorithm={algo!r} needs a world "
                                      f"size that is a power of two, not {self.size}")
                plan = (rop, chosen, f"{algo},{describe(a)},{op}")
            if len(self._plans) >= _PLANS_MAX:
                self._plans.clear()
            self._plans[key] = plan
        rop, spec, detail = plan
        segment = spec is not None and spec.fast_path == "segment"
        if key not in self._fast and self.size > 1 and (segment or self.size == 2):
            from .collectives.fastpath import plan_allreduce

            assert self._transport is not None and self._shm is not None and spec is not None
            # a segment: the compiled core's one call; two ranks and a small message (every
            # algorithm with fast_path="swap" alike): the TCP swap.
            fast = plan_allreduce(spec, transport=self._transport, shm=self._shm,
                                  rank=self.rank, size=self.size, reduce=rop, shape=a.shape,
                                  desc=f"allreduce({detail})", context=self._context,
                                  members=self._members)
            if fast is not None:
                if len(self._fast) >= _PLANS_MAX:
                    self._fast.clear()
                self._fast[key] = (fast, detail)
        target, out_token = (None, None) if out is None else as_array(out)
        if target is not None and out_token is None and not isinstance(out, np.ndarray):
            # as_array copied it (a list, a scalar): the result would go nowhere
            raise ConfigError(f"rank {self.rank}: allreduce out= must be a numpy array or a "
                              f"torch tensor, not {type(out).__name__}")
        if target is not None and (target.shape != a.shape or target.dtype != a.dtype):
            raise ConfigError(f"rank {self.rank}: allreduce out= has {describe(target)}, the "
                              f"input is {describe(a)}")
        if target is not None and not target.flags.writeable:
            raise ConfigError(f"rank {self.rank}: allreduce out= is read-only")
        in_place = target is not None and target.flags.c_contiguous and target.flags.writeable
        # Algorithms that read x where it is (shared memory) need no defensive copy.
        direct = spec is not None and spec.reads_input and not asynchronous and self.size > 1
        if in_place:
            assert target is not None
            if not _same_buffer(target, a):
                np.copyto(target, a)
            work = target.reshape(-1)
        elif direct:
            work = np.empty(a.size, a.dtype)
        else:
            work = np.array(a, order="C", copy=True).reshape(-1)
        src = np.ascontiguousarray(a).reshape(-1) if direct and not in_place else work

        def body(ex: Exchange | None) -> Any:
            if ex is not None:
                from .collectives.registry import AllreduceCall

                assert spec is not None  # (ranks to reach)
                spec.build(AllreduceCall(ex, src, work, rop, self.hosts, self._shm,
                                         self.link_rate)).run()
            if target is None:
                return restore(work.reshape(a.shape), token)
            if not in_place:
                np.copyto(target, work.reshape(a.shape))
            write_back(out, out_token, target)
            return out

        return self._schedule("allreduce", detail, body, timeout, asynchronous)

    # -- other collectives -------------------------------------------------------------------
    def broadcast(self, x: Any, root: int = 0, *, timeout: float | None = None) -> Any:
        """Copy ``x`` from ``root`` to every rank, in place where ``x`` is writable; returns it.

        Parameters
        ----------
        x
            On ``root``, the array to send; elsewhere an array of the same shape and dtype to
            receive into (in place when writable).
        root
            The rank whose ``x`` every rank gets (default 0).
        timeout
            Seconds this call may wait for a peer before raising :class:`~terascale.PeerTimeout`
            (default None: the communicator's deadline, ``init(timeout=)``, 60 s unless set).
        """
        self._check_root(root)
        a, token = as_array(x)
        check_plain(a, f"rank {self.rank}: broadcast")
        # In place only into the caller's own buffer: a list or scalar was copied by as_array.
        in_place = a.flags.writeable and (isinstance(x, np.ndarray) or token is not None)
        direct = in_place and a.flags.c_contiguous
        work = a.reshape(-1) if direct else np.array(a, order="C", copy=True).reshape(-1)

        def body(ex: Exchange | None) -> Any:
            if ex is not None:
                from .collectives.broadcast import TreeBroadcast

                TreeBroadcast(ex, self.rank, self.size, work, root).run()
            if not in_place:
                return restore(work.reshape(a.shape), token)
            if not direct:  # a strided or Fortran-order view: write the result through it
                np.copyto(a, work.reshape(a.shape))
            write_back(x, token, a)  # an accelerator tensor: a is its host copy
            return x

        return self._schedule("broadcast", f"{describe(a)},root={root}", body, timeout, False)

    def allgather(self, x: Any, *, timeout: float | None = None) -> Any:
        """Stack every rank's ``x`` (same shape and dtype everywhere): shape ``(size, *x.shape)``.

        Parameters
        ----------
        x
            This rank's array; the same shape and dtype on every rank.
        timeout
            Seconds this call may wait for a peer before raising :class:`~terascale.PeerTimeout`
            (default None: the communicator's deadline, ``init(timeout=)``, 60 s unless set).
        """
        return self._allgather(x, "allgather", timeout, asynchronous=False)

    def allgather_async(self, x: Any, *, timeout: float | None = None) -> Handle:
        """:meth:`allgather` in the background; ``x`` is copied at the call, ``wait()`` returns
        the stacked array.

        Parameters
        ----------
        x
            This rank's array; the same shape and dtype on every rank (copied at the call).
        timeout
            Seconds this call may wait for a peer before raising :class:`~terascale.PeerTimeout`
            (default None: the communicator's deadline, ``init(timeout=)``, 60 s unless set).
        """
        return self._allgather(x, "allgather", timeout, asynchronous=True)

    def _allgather(self, x: Any, name: str, timeout: float | None, asynchronous: bool) -> Any:
        a, token = as_array(x)
        check_plain(a, f"rank {self.rank}: {name}")
        out = np.empty((self.size, *a.shape), a.dtype)
        out.reshape(self.size, -1)[self.rank] = a.reshape(-1)  # the copy async relies on

        def body(ex: Exchange | None) -> Any:
            if ex is not None:
                from .collectives.allgather import RingAllgather

                RingAllgather(ex, self.rank, self.size, out.reshape(-1), [a.size] * self.size).run()
            return restore(out, token)

        return self._schedule(name, describe(a), body, timeout, asynchronous)

    def alltoall(self, x: Any, *, timeout: float | None = None) -> Any:
        """Send block ``j`` of ``x`` to rank ``j``; return the blocks received, block ``i``
        from rank ``i`` (``MPI_Alltoall`` with equal blocks).

        The first axis of ``x`` holds ``size`` equal blocks: its length must be a multiple of
        ``size``, and block ``j`` is ``x[j*b:(j+1)*b]`` with ``b = len(x) // size``. The
        result has the shape and dtype of ``x`` (the same on every rank); its block ``i`` is
        rank ``i``'s block for this rank. With ``x`` of shape ``(size, ...)`` row ``j`` goes
        to rank ``j`` and row ``i`` of the result came from rank ``i``: a transpose of the
        ranks' rows.

        Parameters
        ----------
        x
            ``size`` equal blocks along the first axis, block ``j`` for rank ``j``; the same shape
            and dtype on every rank.
        timeout
            Seconds this call may wait for a peer before raising :class:`~terascale.PeerTimeout`
            (default None: the communicator's deadline, ``init(timeout=)``, 60 s unless set).
        """
        return self._alltoall(x, timeout, asynchronous=False)

    def alltoall_async(self, x: Any, *, timeout: float | None = None) -> Handle:
        """:meth:`alltoall` in the background; ``x`` is copied at the call.

        Parameters
        ----------
        x
            As for :meth:`alltoall`; copied at the call.
        timeout
            Seconds this call may wait for a peer before raising :class:`~terascale.PeerTimeout`
            (default None: the communicator's deadline, ``init(timeout=)``, 60 s unless set).
        """
        return self._alltoall(x, timeout, asynchronous=True)

    def _alltoall(self, x: Any, timeout: float | None, asynchronous: bool) -> Any:
        a, token = as_array(x)
        check_plain(a, f"rank {self.rank}: alltoall")
        if a.ndim == 0 or a.shape[0] % self.size:
            raise ConfigError(f"rank {self.rank}: alltoall needs the first axis of x to hold "
                              f"{self.size} equal blocks (a multiple of the communicator size "
                              f"{self.size}); x is {describe(a)}")
        # The send buffer is read while the exchange runs: copy unless we wait for it here.
        src = np.array(a, order="C", copy=True) if asynchronous else np.ascontiguousarray(a)
        out = np.empty(a.shape, a.dtype)

        def body(ex: Exchange | None) -> Any:
            if ex is None:
                np.copyto(out, src)
            else:
                from .collectives.alltoall import PairwiseAlltoall

                PairwiseAlltoall(ex, self.rank, self.size, src.reshape(-1), out.reshape(-1),
                                 a.size // self.size).run()
            return restore(out, token)

        return self._schedule("alltoall", describe(a), body, timeout, asynchronous)

    def reduce_scatter(self, x: Any, op: str = "sum", *, timeout: float | None = None) -> Any:
        """Reduce ``x`` over all ranks and return this rank's block of rows.

        The first axis is split into ``size`` blocks as ``numpy.array_split`` does (block
        ``r`` goes to rank ``r``); a 0-d input is treated as a vector of one element.

        Parameters
        ----------
        x
            The array to reduce; the same shape and dtype on every rank.
        op
            The reduction: ``"sum"`` (default), ``"prod"``, ``"min"`` or ``"max"`` (on bool: or,
            and, and, or).
        timeout
            Seconds this call may wait for a peer before raising :class:`~terascale.PeerTimeout`
            (default None: the communicator's deadline, ``init(timeout=)``, 60 s unless set).
        """
        self._check_op(op)
        a, token = as_array(x)
        rop = ReduceOp(op, a.dtype)
        rows = a.reshape(1) if a.ndim == 0 else a
        row_elems = int(np.prod(rows.shape[1:], dtype=np.int64))
        work = np.array(rows, order="C", copy=True).reshape(-1)
        from .collectives.ring import RingAllreduce

        lo, hi = RingAllreduce.scatter_rows(rows.shape[0], self.size, self.rank)

        def body(ex: Exchange | None) -> Any:
            if ex is not None:
                ring = RingAllreduce(ex, self.rank, self.size, work, rop, scatter_only=True,
                                     row_elems=row_elems)
                ring.run()
            block = work[lo * row_elems: hi * row_elems].reshape(hi - lo, *rows.shape[1:])
            return restore(block.copy(), token)

        return self._schedule("reduce_scatter", f"{describe(a)},{op}", body, timeout, False)

    def barrier(self, *, timeout: float | None = None) -> None:
        """Return only when every rank has entered the barrier.

        Parameters
        ----------
        timeout
            Seconds this call may wait for a peer before raising :class:`~terascale.PeerTimeout`
            (default None: the communicator's deadline, ``init(timeout=)``, 60 s unless set).
        """
        if timeout is None and self._shm is not None and self._shm.whole is not None:
            # Through the compiled core: a flat allreduce of nothing is a barrier (the same
            # descriptor as shm_barrier's, so either path meets the other).
            fast = self._fast.get("barrier")
            if fast is None:
                from .collectives.fastpath import plan_barrier

                fast = plan_barrier(transport=self._transport, shm=self._shm, rank=self.rank,
                                    size=self.size, context=self._context, members=self._members)
                if fast is not None:
                    self._fast["barrier"] = (fast, "")
            else:
                fast = fast[0]
            if fast is not None and self._schedule_fast("barrier", "", fast, _NOTHING, _NOTHING):
                return
        elif timeout is None and self.size == 2 and self._transport is not None:
            # Two ranks over TCP: one swap of two headers (the tree's pair exchange below).
            pair = self._fast.get("pair-barrier", False)
            if pair is False:  # (None: planned, the transport has no swap)
                from .collectives.fastpath import plan_barrier

                assert self._shm is not None  # (two ranks)
                pair = self._fast["pair-barrier"] = plan_barrier(
                    transport=self._transport, shm=self._shm, rank=self.rank, size=self.size,
                    context=self._context, members=self._members)
            if pair is not None and self._schedule_fast("barrier", "", pair, _NOTHING, _NOTHING):
                return
        empty = np.empty(0, np.uint8)

        def body(ex: Exchange | None) -> None:
            if ex is None:
                return
            from .collectives.shm import shm_barrier
            from .collectives.tree import TreeAllreduce

            assert self._shm is not None  # (ranks to meet)
            if not shm_barrier(self._shm, ex):
                TreeAllreduce(ex, self.rank, self.size, empty, ReduceOp("sum", empty.dtype)).run()

        self._schedule("barrier", "", body, timeout, False)

    # -- sub-communicators -------------------------------------------------------------------
    def split(self, color: int | None, key: int | None = None, *,
              timeout: float | None = None) -> Communicator | None:
        """Partition the ranks into sub-communicators, as ``MPI_Comm_split`` does.

        Every rank calls it. Ranks that pass the same ``color`` (an int >= 0) form one new
        communicator, ranked by ``key`` (default: this rank), ties broken by the rank here;
        a rank whose ``color`` is None or negative (``MPI_UNDEFINED``) joins none and gets
        None. A sub-communicator runs every collective (async ones too) with its own
        sequence numbers and mismatch checks, over the same connections; a failure of any
        member reaches every communicator that contains it. Closing it leaves this one
        working; closing this one closes it too.

        Parameters
        ----------
        color
            Which sub-communicator this rank joins (an int >= 0); None or negative: none (the call
            returns None).
        key
            Orders the ranks of the new communicator (default None: this rank's rank); ties are
            broken by the rank here.
        timeout
            Seconds this call may wait for a peer before raising :class:`~terascale.PeerTimeout`
            (default None: the communicator's deadline, ``init(timeout=)``, 60 s unless set).
        """
        for name, v in (("color", color), ("key", key)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer))):
                raise ConfigError(f"rank {self.rank}: split {name}={v!r} must be an int or None")
        mine = -1 if color is None or color < 0 else int(color)
        order = self.rank if key is None else int(key)
        index = self._splits
        self._splits += 1
        table = self._allgather(np.array([mine, order], np.int64), "split", timeout, False)
        colors: list[Hashable | None] = [int(c) if c >= 0 else None for c in table[:, 0]]
        from .collectives.groups import split_groups

        groups = split_groups(colors, [int(k) for k in table[:, 1]])
        if mine < 0:
            return None
        return self._derive(groups[mine], mine, index)  # type: ignore[no-any-return]
