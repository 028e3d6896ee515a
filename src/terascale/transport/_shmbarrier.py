"""The pure-Python wait at a shared-memory barrier, and the failures it raises.

:class:`~terascale.transport.shmgroup.ShmGroup` inherits these. After a member arrived (its
epoch stored, by :meth:`ShmGroup.barrier` or a compiled-core call that handed the round
back), :meth:`PythonWaits.finish` waits for every other member's epoch: it spins as
:class:`.SpinBudget` says, then blocks on the member's epoch word (futex, at most
``BLOCK_S`` at a time, its sleeping flag set so the member wakes it), checking the links
every ``CHECK_S`` (:class:`.LinkWatch`) and the deadline, so a dead, failed, stalled or
mismatched member is an exception on every rank, never a hang. A member that fails
withdraws its arrival (epoch 0) and aborts the exchange, so no late member passes the
barrier with it gone.
"""

from __future__ import annotations

import errno
import os
import struct
import time
from collections.abc import Sequence
from typing import NoReturn

from .._errors import CollectiveError, PeerLost, PeerTimeout
from . import _spin
from ._frames import show_desc
from ._futex import Timespec, futex_wait
from ._shmlayout import DESC, DESC_BYTES, EPOCH, SLEEPING, SLOT
from ._shmlinks import LinkWatch
from ._shmwait import SpinBudget
from ._spin import CHECK_S, RUNNING_SPIN_S, YIELD_WHILE_SPINNING
from .base import Exchange

__all__ = ["PythonWaits"]


class PythonWaits:
    """Waiting for the members of a barrier in Python, over the group's mapping."""

    index: int  # our member index
    group: list[int]  # the members' ranks in the exchange
    epoch: int  # barriers arrived at
    round: int  # rounds run so far: the set of round r is r % 2
    descriptor: bytes  # what we announced for the current collective
    oversubscribed: bool
    spin: SpinBudget
    _q: memoryview  # the mapping as u64 words
    _mv: memoryview  # the mapping as bytes
    _others: Sequence[int]  # every member index but ours
    _epoch_addr: list[int]  # address of each member's epoch word (the futex)
    _block: Timespec  # the longest single futex wait
    _links: LinkWatch

    def finish(self, ex: Exchange, deadline: float, *, check: bool = False,
               running: bool = False, spun: bool = False) -> None:
        """Wait for the members of the barrier we arrived at (:meth:`.ShmGroup.barrier`, or a
        :meth:`core_round` that did not complete), then compare descriptors (``check``).

        Parameters
        ----------
        spun
            The core already spent the spin budget, block at once. Failures are raised on every
            member as :meth:`.ShmGroup.barrier` describes.
        ex
            The collective's exchange (its peers, deadline and failure reporting).
        deadline
            ``time.monotonic()`` by which every member must arrive.
        check
            Compare the announced collectives (the first barrier after :meth:`ShmGroup.announce`;
            default False).
        running
            Every member already passed a barrier of this collective (a later round), so the wait
            may spin for it.
        """
        target = self.epoch
        q = self._q
        try:
            for i in self._others:
                if q[(i * SLOT + EPOCH) // 8] < target:
                    self._wait(i, target, ex, deadline, running=running, announced=check,
                               spun=spun)
            if check:
                self._check_desc(ex)
        except CollectiveError as err:
            # Withdraw our arrival (a late member must not pass this barrier with us gone),
            # then tell every rank, as a failed TCP exchange does.
            q[(self.index * SLOT + EPOCH) // 8] = 0
            ex.abort(err)
            raise
        self._links.rewatch()

    def _arrived(self, target: int) -> bool:
        q = self._q
        return all(q[(i * SLOT + EPOCH) // 8] >= target for i in self._others)

    def _running(self, i: int) -> bool:
        """Whether member ``i`` announced the collective we are in (it is copying its part)."""
        off = i * SLOT + DESC + (self.round % 2) * DESC_BYTES
        return self._mv[off: off + DESC_BYTES] == self.descriptor

    def _wait(self, i: int, target: int, ex: Exchange, deadline: float, *,
              running: bool = False, announced: bool = False, spun: bool = False) -> None:
        """Wait until member ``i`` reaches ``target``: spin while it is known to be running
        this collective (``running``: a later barrier of it; with ``announced``, once it
        has announced it too), spin the adaptive budget otherwise (unless ``spun``: the
        compiled core already did), then block in the kernel with link and deadline
        checks."""
        q, idx = self._q, (i * SLOT + EPOCH) // 8
        sleeping = (self.index * SLOT + SLEEPING) // 8
        start = time.monotonic()
        spin_until, extended = self.spin.python_spin(start, running, announced, spun)
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
                self._links.check(ex, lambda: self._arrived(target))
            if now > deadline and q[idx] < target:
                peer = ex.peer_name(self.group[i])
                raise PeerTimeout(
                    f"rank {ex.origin}: {ex.what} timed out after {now - ex.started:.1f} s "
                    f"waiting for rank {peer} (shared memory)", rank=ex.origin, peer=peer,
                    operation=ex.what)
        if not running:
            self.spin.learn(blocked)

    def read_failed(self, ex: Exchange, member: int, err: int) -> NoReturn:
        """Reading or writing ``member``'s buffers failed (errno ``err``; we have not arrived
        at the barrier after it): raise why, on every member, as :meth:`finish` does.

        The member's link usually says it first (closed: it died; ABORT: it left the
        collective, withdrawing its arrival, maybe freeing its buffer), so it is watched for
        up to a second before the read's own error is raised, past the deadline if need be
        (a barrier may complete just before it, with a member that withdrew in the
        meantime).

        Parameters
        ----------
        ex
            The collective's exchange (its peers, deadline and failure reporting).
        member
            The member whose buffers could not be read or written.
        err
            The errno of the failed read or write.
        """
        q = self._q
        try:
            until = time.monotonic() + 1.0
            while time.monotonic() < until:
                self._links.check(ex, lambda: False, 10)
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
            q[(self.index * SLOT + EPOCH) // 8] = 0  # as finish() withdraws
            ex.abort(error)
            raise

    def _check_desc(self, ex: Exchange) -> None:
        parity = self.round % 2
        mine = self.descriptor
        for i in self._others:
            off = i * SLOT + DESC + parity * DESC_BYTES
            if self._mv[off: off + DESC_BYTES] == mine:
                continue
            theirs = self._mv[off: off + DESC_BYTES].tobytes()
            if theirs != mine:
                seq = struct.unpack_from("<Q", theirs)[0]
                err = ex.mismatch(self.group[i], f"called #{seq} {show_desc(theirs[16:])} "
                                                 "(shared memory)")
                ex.abort(err)
                raise err
