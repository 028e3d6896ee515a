"""The public :class:`Communicator`: collectives over numpy arrays and CPU torch tensors."""

from __future__ import annotations

import math
import pickle
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ._arrays import OPS, as_array, check_plain, describe, reducer, restore, write_back
from ._async import Handle, Progress
from ._errors import ConfigError
from .collectives import (
    ALLREDUCE_ALGORITHMS,
    HalvingDoublingAllreduce,
    RingAllgather,
    RingAllreduce,
    TreeAllreduce,
    TreeBroadcast,
    choose_allreduce,
)
from .collectives._chunks import bounds
from .collectives.hierarchical import run_shm_allreduce, shm_barrier
from .transport import Exchange, TcpMesh

__all__ = ["Communicator"]


def _same_buffer(a: np.ndarray, b: np.ndarray) -> bool:
    ia, ib = a.__array_interface__, b.__array_interface__
    return bool(ia["data"] == ib["data"] and a.strides == b.strides)

Tracer = Callable[[str, int, float, float, dict[str, Any]], None]


def _pickle(obj: Any) -> tuple[bytes, Exception | None]:
    """``(pickle bytes, None)``, or ``(the error's text, the error)`` when ``obj`` cannot be pickled."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), None
    except Exception as e:  # pickling runs arbitrary __reduce__ code: any error is possible
        return f"{type(e).__name__}: {e}".encode(), e


class Communicator:
    """A group of ``size`` ranks that run collectives together.

    Create it with :func:`terascale.init`. Every rank must call the same collectives in the
    same order with matching shapes and dtypes; a disagreement raises
    :class:`~terascale.CollectiveMismatch` on every rank instead of hanging. Results are
    bitwise identical on every rank and across runs with the same inputs, world size and
    algorithm.
    """

    def __init__(self, *, rank: int = 0, size: int = 1, local_rank: int = 0, local_size: int = 1,
                 mesh: TcpMesh | None = None, timeout: float = 60.0, job: str = "local",
                 hosts: list[str] | None = None, tracer: Tracer | None = None) -> None:
        if size > 1 and mesh is None:
            raise ConfigError("a communicator of several ranks needs a transport")
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.timeout = timeout
        self.job = job
        self.hosts = hosts or ["localhost"] * size
        self.tracer = tracer
        self._mesh = mesh
        self._seq = 0
        self._progress = Progress()
        self._shm_groups: dict[tuple[int, ...], Any] = {}  # shared-memory segments, by group
        self._closed = False
        self._order = threading.Lock()  # held while a collective is numbered and started

    def __repr__(self) -> str:
        return f"Communicator(rank={self.rank}, size={self.size}, job={self.job!r})"

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank has written to its peer connections (headers included)."""
        return 0 if self._mesh is None else self._mesh.bytes_sent

    @property
    def bytes_received(self) -> int:
        return 0 if self._mesh is None else self._mesh.bytes_received

    # -- the machinery shared by every collective ---------------------------------------------
    def _schedule(self, name: str, detail: str, body: Callable[[Exchange | None], Any],
                  timeout: float | None, asynchronous: bool) -> Any:
        """Number the collective, then run ``body`` now or on the progress thread.

        Numbering and starting happen under one lock, so collectives called from several
        threads run in the order of their sequence numbers (the order peers check).
        """
        with self._order:
            return self._schedule_locked(name, detail, body, timeout, asynchronous)

    def _schedule_locked(self, name: str, detail: str, body: Callable[[Exchange | None], Any],
                         timeout: float | None, asynchronous: bool) -> Any:
        if self._closed:
            raise ConfigError(f"rank {self.rank}: {name} on a closed communicator")
        try:
            limit = self.timeout if timeout is None else float(timeout)
        except (TypeError, ValueError):
            limit = math.nan  # reported below, like any other unusable timeout
        if not (limit > 0 and math.isfinite(limit)):
            raise ConfigError(f"rank {self.rank}: {name} timeout={timeout!r} must be positive "
                              "and finite (seconds)")
        seq = self._seq
        self._seq += 1
        what = f"{name} #{seq} ({detail})"
        desc = f"{name}({detail})"

        submitted = time.monotonic()

        def run() -> Any:
            start = time.monotonic()
            ex = None
            if self.size > 1:
                assert self._mesh is not None
                ex = self._mesh.exchange(seq, desc, what, start + limit)
            result = body(ex)
            if self.tracer is not None:
                end = time.monotonic()
                # Phases for the timeline: waiting behind earlier async collectives, then
                # moving and reducing the data.
                phases = [("queued", submitted, start)] if asynchronous else []
                phases.append(("transfer+reduce", start, end))
                self.tracer(name, seq, submitted if asynchronous else start, end,
                            {"detail": detail, "phases": phases})
            return result

        if asynchronous:
            return self._progress.submit(Handle(f"rank {self.rank}: {what}"), run)
        if not self._progress.idle():
            self._progress.drain()  # keep program order behind queued async collectives
        with self._progress.exec_lock:
            return run()

    @staticmethod
    def _check_op(op: str) -> None:
        if op not in OPS:
            raise ConfigError(f"op={op!r} is not supported; use one of {', '.join(OPS)}")

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
          (:func:`terascale.collectives.select.choose_allreduce`);
        * ``tree``: pipelined binary tree, latency ``2 log2 n`` messages: small messages;
        * ``ring``: reduce-scatter + allgather, bandwidth-optimal: large messages;
        * ``halving_doubling``: Rabenseifner's recursive halving/doubling (Thakur et al.
          2005), bandwidth-optimal in ``2 log2 n`` latencies, any world size;
        * ``shm``: shared memory, every rank on one host;
        * ``hierarchical``: shared memory inside each host, then across hosts.
        """
        return self._allreduce(x, op, out, algorithm, timeout, asynchronous=False)

    def allreduce_async(self, x: Any, op: str = "sum", *, out: Any = None,
                        algorithm: str = "auto", timeout: float | None = None) -> Handle:
        """Start an allreduce that progresses in the background; ``handle.wait()`` returns it.

        ``x`` is copied when the call is made, so the caller may reuse it at once (unless
        ``out`` is ``x``). Handles may be waited in any order.
        """
        return self._allreduce(x, op, out, algorithm, timeout, asynchronous=True)

    def _allreduce(self, x: Any, op: str, out: Any, algorithm: str, timeout: float | None,
                   asynchronous: bool) -> Any:
        self._check_op(op)
        a, token = as_array(x)
        reduce = reducer(op, a.dtype)
        if algorithm not in ALLREDUCE_ALGORITHMS:
            raise ConfigError(f"algorithm={algorithm!r} is not known; use one of "
                              f"{', '.join(ALLREDUCE_ALGORITHMS)}")
        algo = choose_allreduce(a.nbytes, self.size, self.hosts) if algorithm == "auto" else algorithm
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
        # Shared-memory algorithms read x where it is: no defensive copy of the input.
        direct = algo in ("shm", "hierarchical") and not asynchronous and self.size > 1
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
            if ex is not None and algo in ("shm", "hierarchical"):
                run_shm_allreduce(self, ex, algo, src, work, op)
            elif ex is not None:
                impl = {"tree": TreeAllreduce, "ring": RingAllreduce,
                        "halving_doubling": HalvingDoublingAllreduce}[algo]
                impl(ex, self.rank, self.size, work, reduce).run()
            if target is None:
                return restore(work.reshape(a.shape), token)
            if not in_place:
                np.copyto(target, work.reshape(a.shape))
            write_back(out, out_token, target)
            return out

        return self._schedule("allreduce", f"{algo},{describe(a)},{op}", body, timeout,
                              asynchronous)

    # -- other collectives -------------------------------------------------------------------
    def broadcast(self, x: Any, root: int = 0, *, timeout: float | None = None) -> Any:
        """Copy ``x`` from ``root`` to every rank, in place where ``x`` is writable; returns it."""
        self._check_root(root)
        a, token = as_array(x)
        check_plain(a, f"rank {self.rank}: broadcast")
        # In place only into the caller's own buffer: a list or scalar was copied by as_array.
        in_place = a.flags.writeable and (isinstance(x, np.ndarray) or token is not None)
        direct = in_place and a.flags.c_contiguous
        work = a.reshape(-1) if direct else np.array(a, order="C", copy=True).reshape(-1)

        def body(ex: Exchange | None) -> Any:
            if ex is not None:
                TreeBroadcast(ex, self.rank, self.size, work, root).run()
            if not in_place:
                return restore(work.reshape(a.shape), token)
            if not direct:  # a strided or Fortran-order view: write the result through it
                np.copyto(a, work.reshape(a.shape))
            write_back(x, token, a)  # an accelerator tensor: a is its host copy
            return x

        return self._schedule("broadcast", f"{describe(a)},root={root}", body, timeout, False)

    def allgather(self, x: Any, *, timeout: float | None = None) -> Any:
        """Stack every rank's ``x`` (same shape and dtype everywhere): shape ``(size, *x.shape)``."""
        a, token = as_array(x)
        check_plain(a, f"rank {self.rank}: allgather")
        out = np.empty((self.size, *a.shape), a.dtype)
        out.reshape(self.size, -1)[self.rank] = a.reshape(-1)

        def body(ex: Exchange | None) -> Any:
            if ex is not None:
                RingAllgather(ex, self.rank, self.size, out.reshape(-1), [a.size] * self.size).run()
            return restore(out, token)

        return self._schedule("allgather", describe(a), body, timeout, False)

    def reduce_scatter(self, x: Any, op: str = "sum", *, timeout: float | None = None) -> Any:
        """Reduce ``x`` over all ranks and return this rank's block of rows.

        The first axis is split into ``size`` blocks as ``numpy.array_split`` does (block
        ``r`` goes to rank ``r``); a 0-d input is treated as a vector of one element.
        """
        self._check_op(op)
        a, token = as_array(x)
        reduce = reducer(op, a.dtype)
        rows = a.reshape(1) if a.ndim == 0 else a
        row_elems = int(np.prod(rows.shape[1:], dtype=np.int64))
        work = np.array(rows, order="C", copy=True).reshape(-1)
        lo, hi = bounds(rows.shape[0], self.size)[self.rank]

        def body(ex: Exchange | None) -> Any:
            if ex is not None:
                ring = RingAllreduce(ex, self.rank, self.size, work, reduce, scatter_only=True,
                                     row_elems=row_elems)
                ring.run()
            block = work[lo * row_elems: hi * row_elems].reshape(hi - lo, *rows.shape[1:])
            return restore(block.copy(), token)

        return self._schedule("reduce_scatter", f"{describe(a)},{op}", body, timeout, False)

    def barrier(self, *, timeout: float | None = None) -> None:
        """Return only when every rank has entered the barrier."""
        empty = np.empty(0, np.uint8)

        def body(ex: Exchange | None) -> None:
            if ex is not None and not shm_barrier(self, ex):
                TreeAllreduce(ex, self.rank, self.size, empty, reducer("sum", empty.dtype)).run()

        self._schedule("barrier", "", body, timeout, False)

    def broadcast_object(self, obj: Any = None, root: int = 0, *,
                         timeout: float | None = None) -> Any:
        """Pickle ``obj`` on ``root`` and return a copy of it on every rank.

        An object the root cannot pickle raises ConfigError on every rank (the root sends
        the reason instead of the payload), so nobody waits for bytes that never come.
        """
        self._check_root(root)
        payload, failed = (_pickle(obj) if self.rank == root else (b"", None))
        # A negative length announces that the payload is the root's pickling error.
        n = len(payload) if failed is None else -len(payload)
        n = int(self.broadcast(np.array([n], np.int64), root, timeout=timeout)[0])
        buf = np.frombuffer(payload, np.uint8).copy() if self.rank == root else \
            np.empty(abs(n), np.uint8)
        self.broadcast(buf, root, timeout=timeout)
        if n < 0:
            raise ConfigError(f"rank {self.rank}: broadcast_object: root rank {root} could not "
                              f"pickle its object: {buf.tobytes().decode()}") from failed
        return obj if self.rank == root else pickle.loads(buf.tobytes())

    def allgather_object(self, obj: Any, *, timeout: float | None = None) -> list[Any]:
        """Pickle ``obj`` on every rank; return the list of all ranks' objects in rank order.

        When some rank cannot pickle its object, every rank raises ConfigError naming it.
        """
        payload, failed = _pickle(obj)
        n = len(payload) if failed is None else -len(payload)  # negative: an error message
        signed = [int(s) for s in self.allgather(np.array(n, np.int64), timeout=timeout)]
        sizes = [abs(s) for s in signed]
        out = np.empty(sum(sizes), np.uint8)
        off = sum(sizes[: self.rank])
        out[off: off + len(payload)] = np.frombuffer(payload, np.uint8)

        def body(ex: Exchange | None) -> list[Any]:
            if ex is not None:
                RingAllgather(ex, self.rank, self.size, out, sizes).run()
            starts = [sum(sizes[:i]) for i in range(self.size)]
            blobs = [out[s: s + k].tobytes() for s, k in zip(starts, sizes)]
            bad = [f"rank {r}: {b.decode()}" for r, (b, k) in enumerate(zip(blobs, signed)) if k < 0]
            if bad:
                raise ConfigError(f"rank {self.rank}: allgather_object: could not pickle the "
                                  f"object of {'; '.join(bad)}") from failed
            return [pickle.loads(b) for b in blobs]

        return self._schedule("allgather_object", f"bytes[{sum(sizes)}]", body, timeout, False)

    def _check_root(self, root: int) -> None:
        if not isinstance(root, (int, np.integer)) or not 0 <= root < self.size:
            raise ConfigError(f"root={root!r} is not a rank of this communicator (0..{self.size - 1})")

    # -- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        """Finish queued collectives and close the connections; idempotent."""
        if self._closed:
            return
        try:
            if not self._progress.idle():
                self._progress.drain(time.monotonic() + self.timeout)
        finally:
            self._closed = True
            self._progress.close()
            for g in self._shm_groups.values():
                g.close()
            if self._mesh is not None:
                self._mesh.close()

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
