"""What every collective of a communicator shares: numbering, scheduling, sub-groups, lifetime.

One process holds one transport (its links to the job's ranks), one progress thread and one
ordering lock; the job's communicator and every sub-communicator split from it share the
three, so collectives of all of them run one at a time in program order, and a failure of
the transport (a lost peer, a mismatch, an ABORT) reaches every communicator this process
belongs to. Each communicator numbers its own collectives (``seq``) under its own context
id, which every message carries, so a sub-communicator's collectives are checked against
its members only.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ._arrays import OPS
from ._async import Handle, Progress
from ._errors import ConfigError

if TYPE_CHECKING:
    from .collectives.shm import ShmGroups
    from .transport import Exchange, Transport

__all__ = ["CommCore", "Tracer"]

Tracer = Callable[[str, int, float, float, dict[str, Any]], None]


class _Shared:
    """Per process: the transport, the progress thread, the lock that orders collectives."""

    def __init__(self, transport: Transport | None) -> None:
        self.transport = transport
        self.progress = Progress()
        self.order = threading.Lock()  # held while a collective is numbered and started


class CommCore:
    """The machinery under :class:`terascale.Communicator` (see there for the public API)."""

    def __init__(self, *, rank: int = 0, size: int = 1, local_rank: int = 0, local_size: int = 1,
                 transport: Transport | None = None, timeout: float = 60.0, job: str = "local",
                 hosts: list[str] | None = None, tracer: Tracer | None = None,
                 addresses: list[str] | None = None, link_rate: float | None = None,
                 mesh: Transport | None = None) -> None:
        """A communicator over ``transport``; :func:`terascale.init` builds the job's.

        Parameters
        ----------
        rank
            This rank, 0 to ``size - 1`` (default 0).
        size
            The number of ranks (default 1: a communicator of one process).
        local_rank
            This rank's place among the ranks of its host (default 0).
        local_size
            The number of ranks on this host (default 1).
        transport
            This rank's links to the others (a :class:`~terascale.transport.Transport`); required
            when ``size > 1``.
        timeout
            The default deadline of every collective, in seconds (default 60).
        job
            The job id; names the job's shared-memory segments (default ``"local"``).
        hosts
            Every rank's host identity, in rank order (ranks with the same one share memory);
            default: all ``"localhost"``.
        tracer
            Called once per collective (what timelines record); default None: none.
        addresses
            Every rank's address, in rank order (default loopback).
        link_rate
            The links' rate between hosts in bits/s, for ``auto``'s cost model (default None:
            unknown).
        mesh
            The former name of ``transport`` (deprecated: a DeprecationWarning).
        """
        if mesh is not None:  # the keyword's name before transports were called transports
            warnings.warn("Communicator(mesh=) is deprecated: use transport=", DeprecationWarning,
                          stacklevel=2)
            transport = transport or mesh
        if size > 1 and transport is None:
            raise ConfigError("a communicator of several ranks needs a transport")
        self.rank = rank
        self.size = size
        self.local_rank = local_rank
        self.local_size = local_size
        self.timeout = timeout
        self.job = job
        self.hosts = hosts or ["localhost"] * size
        # Bits/s of the links between hosts, the same on every rank (the rendezvous hands out
        # one value): ``auto`` prices the algorithms with the link model at this rate.
        self.link_rate = link_rate
        # Each rank's address as the rendezvous handed it out (where its peers reach it):
        # what a rank listens on for extra connections of its own (the parameter server).
        self.addresses = addresses or ["127.0.0.1"] * size
        self.tracer = tracer
        self._shared = _Shared(transport)
        self._transport = transport
        self._members: tuple[int, ...] | None = None  # transport ranks of ours (None: all)
        self._context = 0
        self._seq = 0
        self._splits = 0
        self._progress = self._shared.progress
        self._order = self._shared.order
        # Shared-memory segments, for ranks that have peers: a communicator of one process
        # neither needs them nor imports the collectives (a tenth of a second of start-up).
        self._shm: ShmGroups | None = None
        if size > 1:
            from .collectives.shm import ShmGroups

            self._shm = ShmGroups(job)
        self._plans: dict[Any, Any] = {}  # allreduce's per-shape plans (communicator.py)
        self._fast: dict[Any, Any] = {}   # ... and their fast paths, where they have one
        self._children: weakref.WeakSet[CommCore] = weakref.WeakSet()
        self._closed = False
        self._owner = True  # closes the transport (the job's communicator, not a split)

    def __repr__(self) -> str:
        sub = "" if self._owner else f", context={self._context:#x}"
        return f"{type(self).__name__}(rank={self.rank}, size={self.size}, job={self.job!r}{sub})"

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank has written to its peer connections (headers included; the
        whole process: sub-communicators share the connections)."""
        return 0 if self._transport is None else self._transport.bytes_sent

    @property
    def bytes_received(self) -> int:
        return 0 if self._transport is None else self._transport.bytes_received

    @property
    def _mesh(self) -> Transport | None:
        """The transport under its former name (read by code written before the rename)."""
        return self._transport

    # -- sub-communicators -------------------------------------------------------------------
    def _derive(self, group: list[int], color: int, index: int) -> Any:
        """The sub-communicator of ``group`` (our ranks, in its order) from split ``index``."""
        child = object.__new__(type(self))
        hosts = [self.hosts[r] for r in group]
        me = group.index(self.rank)
        same_host = [i for i, h in enumerate(hosts) if h == hosts[me]]
        # Same id on every member: a 64-bit hash of what they all share (the parent's id, the
        # split's number, the color), odd so that it is never the job's 0. Communicators that
        # share a pair of ranks get different ids (barring a hash collision), so their
        # messages on that pair's link are told apart.
        digest = hashlib.blake2b(f"{self._context}/{index}/{color}".encode(), digest_size=8)
        context = int.from_bytes(digest.digest(), "little") | 1
        CommCore.__init__(child, rank=me, size=len(group), local_rank=same_host.index(me),
                          local_size=len(same_host), transport=self._transport,
                          timeout=self.timeout,
                          job=self.job, hosts=hosts, tracer=self.tracer,
                          addresses=[self.addresses[r] for r in group],
                          link_rate=self.link_rate)
        child._shared = self._shared
        child._transport = self._transport
        child._progress = self._shared.progress
        child._order = self._shared.order
        child._members = tuple(self._transport_rank(r) for r in group)
        child._context = context
        from .collectives.shm import ShmGroups

        child._shm = ShmGroups(self.job, context)
        child._owner = False
        self._children.add(child)
        return child

    def _transport_rank(self, r: int) -> int:
        return r if self._members is None else self._members[r]

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
        if not self._owner:
            what = f"{what} on a sub-communicator of {self.size}"

        submitted = time.monotonic()

        def run() -> Any:
            start = time.monotonic()
            ex = None
            if self.size > 1:
                assert self._transport is not None
                ex = self._transport.exchange(seq, desc, what, start + limit, context=self._context,
                                         members=self._members)
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

    def _schedule_fast(self, name: str, detail: str, call: Any, src: Any, dst: Any) -> bool:
        """Run a blocking collective whose first attempt needs no exchange; False (nothing
        done, nothing numbered) when it cannot run that way now.

        ``call.start(seq, src, dst)`` returns None when it completed; otherwise the
        exchange is built as :meth:`_schedule` would and ``call.finish(ex, pending, src,
        dst)`` completes the collective with every failure check. Only when nothing is queued,
        nothing failed and no tracer is set; with the communicator's default timeout.
        """
        with self._order:
            links = self._transport
            if self._closed or self.tracer is not None or links is None or \
                    links.broken is not None or not self._progress.idle():
                return False
            seq = self._seq
            self._seq += 1
            start = time.monotonic()
            # No exec_lock: the progress thread is idle and, while we hold the ordering
            # lock, nothing can be queued for it.
            pending = call.start(seq, src, dst)
            if pending is not None:
                what = f"{name} #{seq} ({detail})"
                if not self._owner:
                    what = f"{what} on a sub-communicator of {self.size}"
                ex = links.exchange(seq, f"{name}({detail})", what, start + self.timeout,
                                   context=self._context, members=self._members)
                call.finish(ex, pending, src, dst)
        return True

    def _check_op(self, op: str) -> None:
        if op not in OPS:
            raise ConfigError(f"op={op!r} is not supported; use one of {', '.join(OPS)}")

    def _check_root(self, root: int) -> None:
        if not isinstance(root, (int, np.integer)) or not 0 <= root < self.size:
            raise ConfigError(f"root={root!r} is not a rank of this communicator (0..{self.size - 1})")

    # -- lifetime ----------------------------------------------------------------------------
    def close(self) -> None:
        """Finish queued collectives and release what this communicator holds; idempotent.

        Closing the job's communicator also closes every sub-communicator split from it
        and the connections; closing a sub-communicator leaves its parent working.
        """
        if self._closed:
            return
        try:
            if not self._progress.idle():
                self._progress.drain(time.monotonic() + self.timeout)
        finally:
            self._closed = True
            for child in list(self._children):
                child.close()
            if self._shm is not None:
                self._shm.close()
            if self._owner:
                self._progress.close()
                if self._transport is not None:
                    self._transport.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

