"""Shared-memory transport for the ranks of one host: one segment, epoch barriers.

Layout of the segment (``memfd:terascale-<job>-shm-<group>``)::

    control: one 512-byte slot per member
        +0    epoch     u64   barriers this member has arrived at (written only by it)
        +128  pid       u64
        +136  base      u64   where this member mapped the segment (the attach probe)
        +144  src, dst  u64   the direct schedule's buffers, in this member's address space
        +160  direct    u64   1: this member can reach every other member's memory
        +256  2 x 128   (seq u64, descriptor 120 bytes), by parity of the round
    data: per member, two areas ("sets") of ``area_bytes`` each

A member writes only its own control slot and its own areas; everyone reads everything.
Barriers are epoch counters (arrive = store ``epoch+1``; wait = until every member's
epoch reached ours), which needs no atomic read-modify-write, only x86's ordered stores
(total store order: the data written before the epoch store is visible to whoever sees
the epoch). Collectives alternate between the two sets so that one barrier per round
suffices: a set is rewritten only after a barrier that every reader of its previous
contents has passed.

Waiting spins, then blocks in the kernel (futex on the awaited member's epoch word, woken
by the member when it arrives; bounded waits): :mod:`._spin` has the policy and its
measurements. While not spinning it checks the deadline (:class:`PeerTimeout`) and, every few tens of
milliseconds, the members' TCP links: a closed link is a dead process
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

import errno
import mmap
import os
import select
import struct
import time
from collections.abc import Sequence
from typing import NoReturn

import numpy as np

from .._errors import CollectiveError, PeerLost, PeerTimeout
from . import _core, _spin
from ._frames import collective_tag, pack_desc, show_desc
from ._futex import Timespec, futex_wait, futex_wake
from ._memfd import HAVE_MEMFD, share_anonymous
from ._named import share_named
from ._spin import (
    BLOCK_S,
    CHECK_S,
    CORE_SLEEP_S,
    MIN_SPIN_S,
    RUNNING_SPIN_S,
    SPIN_S,
    YIELD_WHILE_SPINNING,
)
from .base import Exchange
from .segments import SHM_DIR, segment_name

__all__ = ["ShmGroup", "compiled_core", "core_codes", "segment_name", "slot_tag", "tag_field"]

_SLOT = 512
_EPOCH, _SLEEPING, _PID, _DIRECT, _DESC = 0, 64, 128, 160, 256
_DESC_BYTES = 128
_ALIGN = 4096

class ShmGroup:
    """A mapped segment shared by ``group`` (ranks of the exchange on one host); ``index``
    is ours."""

    def __init__(self, mm: mmap.mmap, rank: int, group: Sequence[int], area_bytes: int,
                 ex: Exchange) -> None:
        self.mm = mm
        self.rank = rank
        self.group = list(group)
        self.n = len(group)
        self.index = self.group.index(rank)
        self.area_bytes = area_bytes
        self.epoch = 0
        self.round = 0  # rounds run so far: the set of round r is r % 2
        self._mv = memoryview(mm)
        self._q = self._mv.cast("Q")
        self._field = b""
        self._ctl = control_bytes(self.n)
        self._bytes = np.frombuffer(mm, np.uint8)
        self._areas = [[self._bytes[self._area_off(i, k): self._area_off(i, k) + area_bytes]
                        for k in (0, 1)] for i in range(self.n)]
        self._others = [i for i in range(self.n) if i != self.index]
        self._views: dict[tuple[int, np.dtype, int], list[np.ndarray]] = {}
        self._poll = select.poll()
        self._fd_peer = {}
        for i in self._others:
            fd = ex.waitable(self.group[i])
            self._poll.register(fd, select.POLLIN)
            self._fd_peer[fd] = self.group[i]
        self.oversubscribed = self.n > _spin.CORES
        # The core's yield mode while it spins (see _shmcore.c, spin_wait).
        self._yield = 2 if self.oversubscribed else int(YIELD_WHILE_SPINNING)
        base = self._bytes.ctypes.data
        self._epoch_addr = [base + i * _SLOT + _EPOCH for i in range(self.n)]
        self._sleeping_idx = [(i * _SLOT + _SLEEPING) // 8 for i in self._others]
        self._block = Timespec(0, int(BLOCK_S * 1e9))
        # Adaptive spinning (as adaptive mutexes do): waits that end while spinning double
        # the budget, waits that had to block halve it. On an idle host every rank has a
        # core and spinning wins; on a loaded one the member we wait for may need ours.
        self._spin_s = SPIN_S
        self._spin_cap = _spin.OVERSUBSCRIBED_SPIN_S if self.oversubscribed else SPIN_S
        # Whether our yields reach the other members (set once their pids are known).
        self._share_cores = False
        self._q[(self.index * _SLOT + _PID) // 8] = os.getpid()
        self._quiet: set[int] = set()
        # The compiled core (None: the pure-Python path), over the same mapping.
        core = _core.load()
        self.core = None if core is None else core.Group(self._bytes, self.n, self.index,
                                                         self._ctl, area_bytes)
        # Every member can read every other's memory (set by agree_direct, collectively).
        self.direct = False

    # -- layout ------------------------------------------------------------------------------
    def _area_off(self, member: int, parity: int) -> int:
        return self._ctl + (2 * member + parity) * self.area_bytes

    def area(self, member: int, parity: int, dtype: np.dtype, count: int) -> np.ndarray:
        """The first ``count`` elements of ``member``'s area ``parity`` as ``dtype``."""
        return self._areas[member][parity][: count * dtype.itemsize].view(dtype)

    def areas(self, parity: int, dtype: np.dtype, count: int) -> list[np.ndarray]:
        """:meth:`area` of every member, in member order; cached (do not modify the list).

        A loop of same-shaped allreduces then builds no views: slicing and viewing three
        arrays costs more than moving 4 KiB.
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
        ``TERASCALE_NO_CMA``. Two barriers, once per segment."""
        self.barrier(ex, ex.deadline)  # every member's pid and mapping are in its slot
        core, q = self.core, self._q
        self._share_cores = _spin.share_scheduler(
            [int(q[(i * _SLOT + _PID) // 8]) for i in range(self.n)])
        ok = core is not None and not _core.attach_disabled() and \
            all(core.probe(i) == 0 for i in self._others)
        q[(self.index * _SLOT + _DIRECT) // 8] = int(ok)
        self.barrier(ex, ex.deadline)
        self.direct = all(q[(i * _SLOT + _DIRECT) // 8] for i in range(self.n))

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
        """Write this collective's sequence number and descriptor for the others to check."""
        off = self.index * _SLOT + _DESC + (self.round % 2) * _DESC_BYTES
        self._field = _desc_field(ex)
        self._mv[off: off + _DESC_BYTES] = self._field

    @staticmethod
    def tag_of(ex: Exchange) -> bytes:
        """The descriptor :meth:`announce` writes for ``ex``'s collective (128 bytes)."""
        return _desc_field(ex)

    def barrier(self, ex: Exchange, deadline: float, *, check: bool = False,
                running: bool = False) -> None:
        """Arrive and wait for every member; with ``check``, compare the announced collectives.

        ``check`` is for the first barrier after :meth:`announce`; ``running`` says that
        every member has already passed a barrier of this collective (a later round), so
        the wait may spin for it (see :data:`terascale.transport._spin.RUNNING_SPIN_S`).
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
                elif self._quiet:
                    self._rewatch()
                return
            self.finish(ex, deadline, check=check, running=running, spun=True)
            return
        q = self._q
        q[(self.index * _SLOT + _EPOCH) // 8] = target
        for k in self._sleeping_idx:
            if q[k]:
                futex_wake(self._epoch_addr[self.index])
                break
        self.finish(ex, deadline, check=check, running=running)

    # -- the compiled core's rounds ------------------------------------------------------------
    def spin_budget(self, running: bool) -> float:
        """Seconds the core may spin before it sleeps (see :mod:`._spin`)."""
        if self.oversubscribed:
            return min(self._spin_s, _spin.OVERSUBSCRIBED_SPIN_S) if self._share_cores else 0.0
        if running and not _spin.host_busy():
            return RUNNING_SPIN_S
        return self._spin_s

    def wait_policy(self, running: bool) -> tuple[float, int, float]:
        """How the core waits: (spin seconds, yield mode, sleep seconds before it hands the
        wait back to :meth:`finish`)."""
        return self.spin_budget(running), self._yield, CORE_SLEEP_S

    def settle(self, running: bool, slept: bool = False) -> None:
        """A wait of the core completed: the adaptive budget grows if it ended while
        spinning, shrinks if the core had to sleep (see :meth:`_wait`)."""
        if not running:
            self._spin_s = max(self._spin_s / 2, MIN_SPIN_S) if slept else \
                min(self._spin_s * 2, self._spin_cap)

    def core_round(self, src: np.ndarray, dst: np.ndarray, tag: bytes | None, kind: int,
                   op: int, own: bool, *, running: bool) -> int:
        """One round of the flat allreduce in the compiled core (:attr:`core` is set).

        Publishes ``src`` into our area of this round's set (and ``tag``, the collective's
        descriptor, unless None), arrives, spins, and when every member arrived (and, with
        ``tag``, announced the same collective) folds the set into ``dst`` (``op`` < 0:
        no fold) and returns -1. Otherwise it returns the first member that has not
        arrived (or ``-2 - i`` for a member ``i`` that announced something else): then
        call :meth:`finish` (which waits, checks and raises as :meth:`barrier` does) and
        fold. Either way the caller advances :attr:`round` afterwards.
        """
        self.epoch += 1
        if tag is not None:
            self._field = tag
        core = self.core
        assert core is not None
        slept = core.sleeps
        status: int = core.allreduce(src, dst, tag, self.epoch, self.round & 1, kind, op, own,
                                     *self.wait_policy(running))
        if status == -1:
            self.settle(running, core.sleeps != slept)
        return status

    def core_flat(self, src: np.ndarray, dst: np.ndarray, tag: bytes | None, kind: int,
                  op: int, own: bool, chunk: int, *,
                  running: bool) -> tuple[int, int, int] | None:
        """Rounds of ``chunk`` bytes of the flat allreduce in the compiled core, folding
        each (``op`` >= 0); ``tag`` as in :meth:`core_round` (round 0 only).

        None when every round completed (:attr:`round` advanced past them). Otherwise
        ``(status, lo, hi)``: the elements ``[lo, hi)`` of the round we arrived at but
        that did not complete (``status`` as :meth:`core_round` returns it): call
        :meth:`finish`, fold it, advance :attr:`round`, go on from ``hi``.
        """
        if tag is not None:
            self._field = tag
        core = self.core
        assert core is not None
        later = self.spin_budget(True) if src.nbytes > chunk else 0.0  # one round: unused
        # Yield while spinning only on a loaded host: on an idle one a yield is a syscall
        # that delays seeing the member arrive.
        yield_mode = self._yield if self.oversubscribed else int(_spin.host_busy())
        slept = core.sleeps
        done, status = core.flat(src, dst, tag, self.epoch, self.round, chunk, kind, op, own,
                                 self.spin_budget(running), later, yield_mode, CORE_SLEEP_S)
        self.round += done
        if status == -1:
            self.epoch += done
            self.settle(running, core.sleeps != slept)
            return None
        self.epoch += done + 1
        per = chunk // src.itemsize
        return status, done * per, min((done + 1) * per, src.size)

    def core_direct(self, src: np.ndarray, dst: np.ndarray, tag: bytes | None, kind: int,
                    op: int, chunk: int, phases: int, phase: int = 0, *,
                    running: bool = False) -> tuple[int, int, int] | None:
        """The direct schedule's ``phases`` phases from ``phase`` in the compiled core
        (``collectives/_shmdirect.py`` drives it); ``tag`` as in :meth:`core_round`.

        None when the collective completed (:attr:`epoch` and :attr:`round` advanced past
        it). Otherwise ``(phase, status, errno)`` as ``Group.direct`` returns it, with
        :attr:`epoch` at the last barrier we arrived at (so :meth:`finish` waits for it
        when ``errno`` is 0; else see :meth:`read_failed`).
        """
        core = self.core
        assert core is not None
        if tag is not None:
            self._field = tag
        base = self.epoch - phase  # phase k's barrier is at base + 1 + k
        slept = core.sleeps
        if phase < phases:
            later = self.spin_budget(True)
            yield_mode = self._yield if self.oversubscribed else int(_spin.host_busy())
            done, status, err = core.direct(
                src, dst, tag, base, self.round, phase, kind, op, chunk,
                self.spin_budget(running) if phase == 0 else later, later, yield_mode,
                CORE_SLEEP_S)
            if status != -1:
                self.epoch = base + done + (0 if err else 1)
                return done, status, err
        self.epoch = base + phases
        self.round += phases
        if phase == 0 and core.sleeps == slept:  # (sleeps of the long phases say nothing
            self.settle(running)                  # about idle members: no shrinking)
        return None

    def finish(self, ex: Exchange, deadline: float, *, check: bool = False,
               running: bool = False, spun: bool = False) -> None:
        """Wait for the members of the barrier we arrived at (:meth:`barrier`, or a
        :meth:`core_round` that did not complete), then compare descriptors (``check``).

        ``spun``: the core already spent the spin budget, block at once. Failures are
        raised on every member as :meth:`barrier` describes.
        """
        target = self.epoch
        q = self._q
        try:
            for i in self._others:
                if q[(i * _SLOT + _EPOCH) // 8] < target:
                    self._wait(i, target, ex, deadline, running=running, announced=check,
                               spun=spun)
            if check:
                self._check_desc(ex)
        except CollectiveError as err:
            # Withdraw our arrival (a late member must not pass this barrier with us gone),
            # then tell every rank, as a failed TCP exchange does.
            q[(self.index * _SLOT + _EPOCH) // 8] = 0
            ex.abort(err)
            raise
        if self._quiet:
            self._rewatch()

    def _rewatch(self) -> None:
        for fd in self._quiet:
            self._poll.register(fd, select.POLLIN)
        self._quiet.clear()

    def _arrived(self, target: int) -> bool:
        q = self._q
        return all(q[(i * _SLOT + _EPOCH) // 8] >= target for i in self._others)

    def _running(self, i: int) -> bool:
        """Whether member ``i`` announced the collective we are in (it is copying its part)."""
        off = i * _SLOT + _DESC + (self.round % 2) * _DESC_BYTES
        return self._mv[off: off + _DESC_BYTES] == self._field

    def _wait(self, i: int, target: int, ex: Exchange, deadline: float, *,
              running: bool = False, announced: bool = False, spun: bool = False) -> None:
        """Wait until member ``i`` reaches ``target``: spin while it is known to be running
        this collective (``running``: a later barrier of it; with ``announced``, once it
        has announced it too), spin the adaptive budget otherwise (unless ``spun``: the
        compiled core already did), then block in the kernel with link and deadline
        checks."""
        q, idx = self._q, (i * _SLOT + _EPOCH) // 8
        sleeping = (self.index * _SLOT + _SLEEPING) // 8
        start = time.monotonic()
        # ``extended``: the spin may no longer be lengthened for a running member.
        if self.oversubscribed:  # spinning takes the core a member needs
            spin_until, extended = start, True
        elif spun:  # only the once-only extension for a member that announced late is left
            spin_until, extended = start, running or not announced
        elif running and not _spin.host_busy():
            spin_until, extended = start + RUNNING_SPIN_S, True
        else:
            spin_until, extended = start + self._spin_s, not announced
        next_check = start + CHECK_S
        spins = 0
        blocked = False
        while q[idx] < target:
            spins += 1
            if spins & 31:
                continue
            now = time.monotonic()
            if now >= spin_until and not extended:
                extended = True  # once: a member that announced late still gets its spin
                if self._running(i) and not _spin.host_busy():
                    spin_until = now + RUNNING_SPIN_S
                    running = True
            if now < spin_until:
                if YIELD_WHILE_SPINNING:
                    os.sched_yield()  # the member may be waiting for our core
                continue
            blocked = True
            q[sleeping] = 1  # ask the member to wake us, then re-check before blocking
            seen = q[idx]
            if seen < target:
                futex_wait(self._epoch_addr[i], seen, self._block)
            q[sleeping] = 0
            now = time.monotonic()
            if now >= next_check:
                next_check = now + CHECK_S
                self._check_links(ex, target)
            if now > deadline and q[idx] < target:
                peer = ex.peer_name(self.group[i])
                raise PeerTimeout(
                    f"rank {ex.origin}: {ex.what} timed out after {now - ex.started:.1f} s "
                    f"waiting for rank {peer} (shared memory)", rank=ex.origin, peer=peer,
                    operation=ex.what)
        if not running:  # the budget learns how long idle members take, not copies
            self._spin_s = max(self._spin_s / 2, MIN_SPIN_S) if blocked else \
                min(self._spin_s * 2, SPIN_S)

    def _check_links(self, ex: Exchange, target: int) -> None:
        """A member that cannot arrive: dead (EOF), failed (ABORT) or in another collective."""
        for fd, _ in self._poll.poll(0):
            if ex.check_peer(self._fd_peer[fd], lambda: self._arrived(target)):
                # This collective's own traffic (a leader's TCP phase of hierarchical): not
                # watched until the next barrier.
                self._poll.unregister(fd)
                self._quiet.add(fd)
            elif self._arrived(target):
                return

    def read_failed(self, ex: Exchange, member: int, err: int) -> NoReturn:
        """Reading or writing ``member``'s buffers failed (errno ``err``; we have not arrived
        at the barrier after it): raise why, on every member, as :meth:`finish` does.

        The member's link usually says it first (closed: it died; ABORT: it left the
        collective, withdrawing its arrival, maybe freeing its buffer), so it is watched for
        up to a second before the read's own error is raised, past the deadline if need be
        (a barrier may complete just before it, with a member that withdrew in the
        meantime)."""
        q = self._q
        try:
            until = time.monotonic() + 1.0
            while time.monotonic() < until:
                for fd, _ in self._poll.poll(10):
                    if ex.check_peer(self._fd_peer[fd], lambda: False):
                        self._poll.unregister(fd)  # this collective's traffic: no news
                        self._quiet.add(fd)
            peer = ex.peer_name(self.group[member])
            why = f"reaching its buffers failed: {os.strerror(err)} (shared memory)"
            if err == errno.ECANCELED:
                why = "it left the collective (shared memory)"
            if err == errno.ESRCH:  # its process is gone
                raise PeerLost(f"rank {ex.origin}: {ex.what}: rank {peer} is gone; {why}",
                               rank=ex.origin, peer=peer, operation=ex.what)
            raise CollectiveError(f"rank {ex.origin}: {ex.what}: rank {peer}: {why}",
                                  rank=ex.origin, peer=peer, operation=ex.what)
        except CollectiveError as error:
            q[(self.index * _SLOT + _EPOCH) // 8] = 0  # as finish() withdraws
            ex.abort(error)
            raise

    def _check_desc(self, ex: Exchange) -> None:
        parity = self.round % 2
        mine = self._field
        for i in self._others:
            off = i * _SLOT + _DESC + parity * _DESC_BYTES
            if self._mv[off: off + _DESC_BYTES] == mine:
                continue
            theirs = self._mv[off: off + _DESC_BYTES].tobytes()
            if theirs != mine:
                seq = struct.unpack_from("<Q", theirs)[0]
                err = ex.mismatch(self.group[i], f"called #{seq} {show_desc(theirs[16:])} "
                                                 "(shared memory)")
                ex.abort(err)
                raise err


def compiled_core() -> str | None:
    """Where the compiled core was loaded from (None: the pure-Python path runs, because
    ``TERASCALE_NO_CEXT`` is set or the extension was not built; ``pip install -e .``
    builds it)."""
    core = _core.load()
    return None if core is None else str(getattr(core, "__file__", core.__name__))


def core_codes(dtype: np.dtype, op: str) -> tuple[int, int] | None:
    """The compiled core's codes for folding ``dtype`` with ``op`` (None: numpy folds)."""
    kind = _core.KINDS.get(dtype)
    return None if kind is None else (kind, _core.OPS[op])


def tag_field(desc: str) -> bytes:
    """A collective's descriptor ``desc`` as :func:`slot_tag` takes it (computed once)."""
    return pack_desc(desc).ljust(_DESC_BYTES - 16, b"\0")


def slot_tag(seq: int, context: int, field: bytes) -> bytes:
    """What :meth:`ShmGroup.announce` writes for collective ``seq`` of communicator
    ``context``, without an exchange (the same bytes as ``Exchange.tag``, padded)."""
    return collective_tag(seq, context, field)


def control_bytes(n: int) -> int:
    return -(-n * _SLOT // _ALIGN) * _ALIGN


def _desc_field(ex: Exchange) -> bytes:
    return ex.tag[:_DESC_BYTES].ljust(_DESC_BYTES, b"\0")
