"""Shared-memory transport for the ranks of one host: one segment, epoch barriers.

The segment's layout (a control slot per member, then two data areas per member) is
:mod:`._shmlayout`'s. A member writes only its own control slot and its own areas;
everyone reads everything.
Barriers are epoch counters (arrive = store ``epoch+1``; wait = until every member's
epoch reached ours), which needs no atomic read-modify-write, only x86's ordered stores
(total store order: the data written before the epoch store is visible to whoever sees
the epoch). Collectives alternate between the two sets so that one barrier per round
suffices: a set is rewritten only after a barrier that every reader of its previous
contents has passed.

Waiting spins, then blocks in the kernel (futex on the awaited member's epoch word, woken
by the member when it arrives; bounded waits): :mod:`._spin` has the policy and its
measurements, :mod:`._shmwait` the adaptive budget, :mod:`._shmbarrier` the pure-Python
wait. While not spinning it checks the deadline (:class:`PeerTimeout`) and, every few
tens of milliseconds, the members' TCP links (:mod:`._shmlinks`): a closed link is a dead process
(:class:`PeerLost`, within about 50 ms), an ABORT frame is a failure elsewhere, and a
frame of another collective means the member called something else
(:class:`CollectiveMismatch`) -- so nothing ever hangs past its deadline.

The segment is created by the group's first member and announced over TCP. On Linux it
is anonymous (``memfd_create``; its descriptor is passed to the members over a Unix
socket, ``transport/_memfd.py``): nothing in /dev/shm, so nothing can leak under any
launcher. Elsewhere it is a named file, unlinked as soon as every member has mapped it,
and ``terascale run`` removes what a crash before that left
(:func:`~terascale.transport.segments.remove_job_segments`).

Large messages need not move through the segment: where every member can reach every
other member's memory (Linux cross-memory attach, ``process_vm_readv``/``writev``: same user, no
ptrace restriction, no seccomp filter, one pid namespace), the members agree on it once,
when the segment is mapped (:meth:`ShmGroup.agree_direct`), and the direct schedule of
``collectives/_shmdirect.py`` reads and writes their buffers in place; the slots then
carry each call's buffer addresses.

The segment moves the data; the group's point-to-point :class:`~terascale.transport.base.
Exchange` (the TCP links) is its failure detector, through the exchange's public failure
state only (``check_peer``, ``lost``, ``mismatch``, ``abort``), so the same code runs over
any point-to-point transport.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Sequence

import numpy as np

from . import _core, _spin
from ._futex import Timespec, futex_wake
from ._memfd import HAVE_MEMFD, share_anonymous
from ._named import share_named
from ._shmbarrier import PythonWaits
from ._shmlayout import (
    DESC,
    DESC_BYTES,
    DIRECT,
    EPOCH,
    PID,
    SLEEPING,
    SLOT,
    control_bytes,
    desc_field,
    slot_tag,
    tag_field,
)
from ._shmlinks import LinkWatch
from ._shmrounds import CoreRounds, Counts
from ._shmwait import SpinBudget
from ._spin import BLOCK_S
from .base import Exchange
from .segments import SHM_DIR, segment_name

__all__ = ["FAULTED_AREA_BYTES", "ShmGroup", "compiled_core", "core_codes", "segment_name",
           "slot_tag", "tag_field"]

# The part of every area faulted in when the segment is mapped: a flat round's
# (collectives/_shmflat.FLAT_ROUND_BYTES), all that calls of up to that size, the
# latency-bound ones, ever touch. The rest of an area becomes resident in a process only
# once a call moves that much through it (the scatter schedule, three members or more);
# two members never do (their large calls go direct or in flat rounds), so a two-worker
# job holds 1 MiB of the segment, not the 8 MiB of its four 2 MiB areas.
FAULTED_AREA_BYTES = 256 << 10
MADV_POPULATE_WRITE = 23  # <linux/mman.h>, Linux 5.14+ (not in Python's mmap module)


def _fault_in(mm: mmap.mmap, ctl: int, area_bytes: int, n: int) -> None:
    """Fault in the control block and the first :data:`FAULTED_AREA_BYTES` of each of the
    ``2 * n`` areas (``madvise(MADV_POPULATE_WRITE)``: zeroed pages, nothing written, so no
    member's data can be overwritten). Where the kernel lacks it (before 5.14) the pages
    fault in on first use instead."""
    page = mmap.PAGESIZE
    head = -(-min(area_bytes, FAULTED_AREA_BYTES) // page) * page
    parts = [(0, ctl)] + [(ctl + k * area_bytes, head) for k in range(2 * n)]
    for start, length in parts:
        start_page = start // page * page
        length = min(length + start - start_page, len(mm) - start_page)
        if length <= 0:
            continue
        try:
            mm.madvise(MADV_POPULATE_WRITE, start_page, length)
        except (OSError, ValueError):
            return


class ShmGroup(CoreRounds, PythonWaits):
    """A mapped segment shared by ``group`` (ranks of the exchange on one host); ``index``
    is ours. The Python waits are :class:`.PythonWaits`', the compiled core's multi-round
    calls :class:`.CoreRounds`'; this class owns the mapping and the barriers.

    Parameters
    ----------
    mm
        The mapped segment.
    rank
        Our index in ``group``.
    group
        The exchange's ranks that share the segment, in member order.
    area_bytes
        Bytes of each member's data area.
    ex
        The exchange of the collective that created it.
    """

    def __init__(self, mm: mmap.mmap, rank: int, group: Sequence[int], area_bytes: int,
                 ex: Exchange) -> None:
        self.mm = mm
        self.rank = rank
        self.group = list(group)
        self.n = len(group)
        self.index = self.group.index(rank)
        self.area_bytes = area_bytes
        self._mv = memoryview(mm)
        self._q = self._mv.cast("Q")
        self.descriptor = b""
        self._ctl = control_bytes(self.n)
        self._bytes = np.frombuffer(mm, np.uint8)
        _fault_in(mm, self._ctl, area_bytes, self.n)
        self._areas = [[self._bytes[self._area_off(i, k): self._area_off(i, k) + area_bytes]
                        for k in (0, 1)] for i in range(self.n)]
        self._others = [i for i in range(self.n) if i != self.index]
        self._views: dict[tuple[int, np.dtype, int], list[np.ndarray]] = {}
        self._links = LinkWatch(ex, [self.group[i] for i in self._others])
        base = self._bytes.ctypes.data
        self._epoch_addr = [base + i * SLOT + EPOCH for i in range(self.n)]
        self._sleeping_idx = [(i * SLOT + SLEEPING) // 8 for i in self._others]
        self._block = Timespec(0, int(BLOCK_S * 1e9))
        self._q[(self.index * SLOT + PID) // 8] = os.getpid()
        # The compiled core (None: the pure-Python path), over the same mapping.
        core = _core.load()
        self.core = None if core is None else core.Group(self._bytes, self.n, self.index,
                                                         self._ctl, area_bytes)
        # The counters and the spin budget: the core's when there is one (its prepared
        # calls advance them), shared by its waits and ours.
        self._counts = Counts() if self.core is None else self.core
        self.epoch = 0
        self.round = 0  # rounds run so far: the set of round r is r % 2
        self.spin = SpinBudget(self.n, self.core)
        self.oversubscribed = self.spin.oversubscribed
        # Every member can read every other's memory (set by agree_direct, collectively).
        self.direct = False

    # -- layout ------------------------------------------------------------------------------
    def _area_off(self, member: int, parity: int) -> int:
        return self._ctl + (2 * member + parity) * self.area_bytes

    def area(self, member: int, parity: int, dtype: np.dtype, count: int) -> np.ndarray:
        """The first ``count`` elements of ``member``'s area ``parity`` as ``dtype``.

        Parameters
        ----------
        member
            The member's index.
        parity
            Which of the two alternating area sets (0 or 1).
        dtype
            The elements' dtype.
        count
            Elements wanted.
        """
        return self._areas[member][parity][: count * dtype.itemsize].view(dtype)

    def areas(self, parity: int, dtype: np.dtype, count: int) -> list[np.ndarray]:
        """:meth:`area` of every member, in member order; cached (do not modify the list).

        A loop of same-shaped allreduces then builds no views: slicing and viewing three
        arrays costs more than moving 4 KiB.

        Parameters
        ----------
        parity
            Which of the two alternating area sets (0 or 1).
        dtype
            The elements' dtype.
        count
            Elements wanted.
        """
        key = (parity, dtype, count)
        views = self._views.get(key)
        if views is None:
            if len(self._views) >= 64:
                self._views.clear()
            views = self._views[key] = [self.area(i, parity, dtype, count)
                                        for i in range(self.n)]
        return views

    # -- setup -------------------------------------------------------------------------------
    @classmethod
    def create(cls, ex: Exchange, group: Sequence[int], job: str, area_bytes: int, *,
               context: int = 0) -> ShmGroup:
        """Collective over ``group``: the first member creates, the others map, then unlink.

        ``group`` numbers ranks as ``ex`` does; the segment is named by the job's ranks
        (``ex.peer_name``) and the communicator ``context``, the same on every member.

        A segment that cannot be created or mapped (``/dev/shm`` full or missing) fails the
        collective on every rank with a :class:`CollectiveError` naming the path.

        Parameters
        ----------
        ex
            The collective's exchange (its peers, deadline and failure reporting).
        group
            The members, numbered as ``ex`` numbers ranks.
        job
            The job id (names the segment).
        area_bytes
            Bytes of each member's data area.
        context
            The communicator's context id (default 0).
        """
        group = list(group)
        rank = ex.rank
        size = control_bytes(len(group)) + 2 * len(group) * area_bytes
        names = [ex.peer_name(p) for p in group]
        path = os.path.join(SHM_DIR, segment_name(job, names, context))
        if HAVE_MEMFD:  # nothing in /dev/shm: cannot leak whoever dies when
            mm = share_anonymous(ex, group, os.path.basename(path), size)
        else:
            mm = share_named(ex, group, path, size)
        g = cls(mm, rank, group, area_bytes, ex)
        try:
            g.agree_direct(ex)
        except BaseException:
            g.close()
            raise
        return g

    def agree_direct(self, ex: Exchange) -> None:
        """Collective: set :attr:`direct` on every member alike, True when every member has
        the compiled core and could read every other member's slot back through its own
        process and write it back unchanged (``process_vm_readv``/``writev``) and none set
        ``TERASCALE_NO_CMA``. Two barriers, once per segment.

        Parameters
        ----------
        ex
            The collective's exchange (its peers, deadline and failure reporting).
        """
        self.barrier(ex, ex.deadline)  # every member's pid and mapping are in its slot
        core, q = self.core, self._q
        self.spin.share_cores = _spin.share_scheduler(
            [int(q[(i * SLOT + PID) // 8]) for i in range(self.n)])
        ok = core is not None and not _core.attach_disabled() and \
            all(core.probe(i) == 0 for i in self._others)
        q[(self.index * SLOT + DIRECT) // 8] = int(ok)
        self.barrier(ex, ex.deadline)
        self.direct = all(q[(i * SLOT + DIRECT) // 8] for i in range(self.n))

    def close(self) -> None:
        """Unmap (idempotent); the segment's name is long gone."""
        if not self._areas:
            return
        self._areas = []
        self._views.clear()
        if self.core is not None:
            self.core.release()
            self.core = None
        self._bytes = np.empty(0, np.uint8)
        try:
            self._q.release()
            self._mv.release()
            self.mm.close()
        except (BufferError, ValueError):
            pass  # a result view still points into it; unmapped when collected

    # -- barriers ----------------------------------------------------------------------------
    def announce(self, ex: Exchange) -> None:
        """Write this collective's sequence number and descriptor for the others to check.

        Parameters
        ----------
        ex
            The collective's exchange (its peers, deadline and failure reporting).
        """
        off = self.index * SLOT + DESC + (self.round % 2) * DESC_BYTES
        self.descriptor = desc_field(ex)
        self._mv[off: off + DESC_BYTES] = self.descriptor

    @staticmethod
    def tag_of(ex: Exchange) -> bytes:
        """The descriptor :meth:`announce` writes for ``ex``'s collective (128 bytes).

        Parameters
        ----------
        ex
            The collective's exchange (its peers, deadline and failure reporting).
        """
        return desc_field(ex)

    def barrier(self, ex: Exchange, deadline: float, *, check: bool = False,
                running: bool = False) -> None:
        """Arrive and wait for every member; with ``check``, compare the announced collectives.

        Parameters
        ----------
        check
            Compare the announced collectives: for the first barrier after
            :meth:`announce` (default False).
        running
            Every member has already passed a barrier of this collective (a later round), so
            the wait may spin for it (see :data:`terascale.transport._spin.RUNNING_SPIN_S`);
            default False.
        ex
            The collective's exchange (its peers, deadline and failure reporting).
        deadline
            ``time.monotonic()`` by which every member must arrive.
        """
        self.epoch += 1
        target = self.epoch
        core = self.core
        if core is not None:
            core.arrive(target)
            slept = core.sleeps
            if core.wait(target, *self.wait_policy(running)) < 0:
                self.settle(running, core.sleeps != slept)
                if check:
                    self.finish(ex, deadline, check=True, running=running)
                else:
                    self._links.rewatch()
                return
            self.finish(ex, deadline, check=check, running=running, spun=True)
            return
        q = self._q
        q[(self.index * SLOT + EPOCH) // 8] = target
        for k in self._sleeping_idx:
            if q[k]:
                futex_wake(self._epoch_addr[self.index])
                break
        self.finish(ex, deadline, check=check, running=running)


def compiled_core() -> str | None:
    """Where the compiled core was loaded from (None: the pure-Python path runs, because
    ``TERASCALE_NO_CEXT`` is set or the extension was not built; ``pip install -e .``
    builds it)."""
    core = _core.load()
    return None if core is None else str(getattr(core, "__file__", core.__name__))


def core_codes(dtype: np.dtype, op: str) -> tuple[int, int] | None:
    """The compiled core's codes for folding ``dtype`` with ``op`` (None: numpy folds).

    Parameters
    ----------
    dtype
        The elements' dtype.
    op
        The reduction (``"sum"``...).
    """
    kind = _core.KINDS.get(dtype)
    return None if kind is None else (kind, _core.OPS[op])

