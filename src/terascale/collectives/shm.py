r"""Shared-memory allreduce for the ranks of one host (and the pieces hierarchical uses).

Three schedules over a :class:`~terascale.transport.shmgroup.ShmGroup` (``n`` members, two
areas each):

* **flat** (two ranks, or ``n`` times the message at most ``FLAT_MAX_BYTES``): in rounds of
  ``FLAT_ROUND_BYTES`` (cache-sized: the round is still in L2 when it is reduced), every
  rank copies its input into its area, one barrier, then every rank reduces all ``n``
  areas in rank order into its output. With the compiled core one call runs every round
  (:meth:`ShmGroup.core_flat`), and the communicator's fast path (:mod:`.fastpath`)
  needs no exchange unless a member is late. One barrier per round is what
  makes 4 KiB cost a few microseconds; the redundant reduction costs less than a second
  barrier while ``n`` is small.
* **scatter** (otherwise): the message streams through the areas in rounds of
  ``area_bytes``. In a round, rank ``r`` copies the slices the others own into its area,
  barrier, reduces slice ``r`` of all inputs (its own straight from its input buffer) into
  its area and its output, barrier, and copies the other slices out while copying the next
  round's input in. Per rank that is ``(n-1)/n`` of the data in, one read of ``n`` slices,
  ``(n-1)/n`` out: the reduce-scatter + allgather of the ring, with the "network" being
  one memcpy.

* **direct** (large messages, where every member can reach the others' memory): no copy
  through the areas; members read and write each other's buffers in place (cross-memory
  attach), reduce-scatter + allgather in two barriers; see :mod:`._shmdirect`.

When to pick it: every rank on one host (``auto`` does whenever the segment exists); the
schedule is chosen per call by size and member count. Across hosts it is the first and last
phase of the hierarchical allreduce. Its cost (:func:`shm_time`): per call two barriers'
latency plus, per byte, a copy in and out and the ``(q-1)/q`` fold,
:math:`s(2\alpha_{shm} + m(2\delta + \frac{q-1}{q}\gamma))` for ``q`` members, ``s``
the slow-down of members sharing cores -- memory bandwidth, not the network, in the
alpha-beta terms of Thakur, Rabenseifner & Gropp (IJHPCA 2005).

Every element is reduced in rank order (``x0 op x1 op ... op x{n-1}``), elementwise: the
flat schedule has every rank do the same operations on the same bytes, the scatter one has
one rank do them and the others copy the result. Either way results are bitwise identical
on every rank, across runs and between the two schedules.

``src`` and ``dst`` may be the same buffer (in-place allreduce).

The flat schedule's round size, when it is chosen, and the communicator's fast path are
:mod:`._shmflat`'s. A communicator's segments live in one :class:`ShmGroups` (one per member list, created
collectively on first use, unmapped when the communicator closes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._arrays import ReduceOp
from .._errors import ConfigError
from ..transport import Exchange
from ..transport.shmgroup import ShmGroup, core_codes
from ._chunks import bounds
from ._cost import check
from ._shmdirect import direct_allreduce, takes_direct
from ._shmflat import (
    FLAT_MAX_BYTES,
    FLAT_MAX_N,
    FLAT_ROUND_BYTES,
    finish_flat,
    flat_rounds,
)
from .registry import AllreduceCall

__all__ = ["AREA_BYTES", "FLAT_MAX_BYTES", "FLAT_ROUND_BYTES", "ShmAllreduce", "ShmGroups",
           "shm_barrier", "shm_broadcast", "shm_cost", "shm_time"]

AREA_BYTES = 2 << 20


class ShmGroups:
    """One communicator's segments, by member list (ranks as its exchanges number them).

    The collectives own them; the communicator holds one and closes it. ``whole`` is the
    segment of every member once ``algorithm="shm"`` set it up (barriers then use it).

    Parameters
    ----------
    job
        The job id (names the segments).
    context
        The communicator's context id (default 0).
    """

    def __init__(self, job: str, context: int = 0) -> None:
        self.job = job
        self.context = context
        self.whole: ShmGroup | None = None
        self._groups: dict[tuple[int, ...], ShmGroup] = {}

    def get(self, ex: Exchange, members: Sequence[int]) -> ShmGroup:
        """The segment of ``members``, created collectively over them on first use.

        Parameters
        ----------
        ex
            The collective's exchange (links to the peers, deadline, failure reporting).
        members
            The ranks of the segment, as ``ex`` numbers them.
        """
        key = tuple(members)
        g = self._groups.get(key)
        if g is None:
            g = ShmGroup.create(ex, key, self.job, AREA_BYTES, context=self.context)
            self._groups[key] = g
        return g

    def close(self) -> None:
        for g in self._groups.values():
            g.close()
        self._groups.clear()
        self.whole = None


class ShmAllreduce:
    """Allreduce (or, with ``to_leader``, reduce to member 0 only) of flat ``src`` into ``dst``.

    Parameters
    ----------
    g
        The shared-memory group (segment) of the ranks.
    ex
        The collective's exchange (links to the peers, deadline, failure reporting).
    src
        This rank's input, flat and C-contiguous.
    dst
        Where the result goes (same size; may be ``src``).
    op
        The reduction (op and dtype).
    deadline
        ``time.monotonic()`` by which it must complete.
    to_leader
        Reduce to member 0 only (default False).
    """

    @classmethod
    def for_call(cls, call: AllreduceCall) -> ShmAllreduce:
        """``algorithm="shm"``: one segment for every rank of the exchange (one host).

        Parameters
        ----------
        call
            The allreduce as the registry describes it.
        """
        if len(set(call.hosts)) > 1:
            raise ConfigError(f"rank {call.ex.origin}: algorithm='shm' needs every rank on one "
                              f"host, but they are on {len(set(call.hosts))}; use "
                              "'hierarchical' or 'auto'")
        assert call.shm is not None, "shared memory needs the communicator's segments"
        g = call.shm.whole
        if g is None:
            g = call.shm.whole = call.shm.get(call.ex, range(call.ex.size))
        return cls(g, call.ex, call.src, call.dst, call.op, call.ex.deadline)

    def __init__(self, g: ShmGroup, ex: Exchange, src: np.ndarray, dst: np.ndarray,
                 op: ReduceOp, deadline: float, *, to_leader: bool = False) -> None:
        self.g = g
        self.ex = ex
        self.src = src
        self.dst = dst
        self.op = op
        self.deadline = deadline
        self.to_leader = to_leader

    def run(self) -> None:
        g = self.g
        if g.n == 1:
            if self.dst is not self.src:
                np.copyto(self.dst, self.src)
            return
        kind, opcode = core_codes(self.src.dtype, self.op.name) or (-1, -1)
        if not self.to_leader and takes_direct(g, self.src.nbytes, kind):
            direct_allreduce(g, self.ex, self.deadline, self.src, self.dst, kind, opcode)
            return
        flat = g.n <= FLAT_MAX_N or self.src.nbytes * g.n <= FLAT_MAX_BYTES
        if flat and g.core is not None:
            self._flat_core()
            return
        g.announce(self.ex)
        if flat:
            self._flat()
        else:
            self._scatter()

    def _flat_core(self) -> None:
        """The flat schedule with its rounds in the compiled core: cache-sized rounds
        (``FLAT_ROUND_BYTES``) in one call while every member keeps up; the Python wait
        only for late members."""
        g, src, dst, ex = self.g, self.src, self.dst, self.ex
        kind, opcode = core_codes(src.dtype, self.op.name) or (-1, -1)
        reduce = not self.to_leader or g.index == 0
        # The core reads our part from src block by block before it writes that block of
        # dst, so src may be dst; only a partial overlap would break that.
        own = src is dst or not np.may_share_memory(src, dst)
        if kind >= 0:  # (a member that does not fold: op -1)
            op = opcode if reduce else -1
            pending = g.core_flat(src, dst, g.tag_of(ex), kind, op, own, FLAT_ROUND_BYTES,
                                  running=False)
            if pending is not None:
                finish_flat(g, ex, self.deadline, pending, src, dst, kind, op, own)
            return
        # A dtype the core does not fold (float16, bool, complex): numpy folds each round.
        first = True
        for lo, hi in flat_rounds(src.size, src.itemsize):
            s, d = src[lo:hi], dst[lo:hi]
            tag = g.tag_of(ex) if first else None
            status = g.core_round(s, d, tag, max(kind, 0), -1, own, running=not first)
            if status != -1:
                g.finish(ex, self.deadline, check=first, running=not first, spun=status >= 0)
            if reduce:
                self.op.fold(g.areas(g.round & 1, src.dtype, hi - lo), d)
            first = False
            g.round += 1

    def _flat(self) -> None:
        g, src, dst, dt = self.g, self.src, self.dst, self.src.dtype
        # Our own part is read from src, not from the copy we just published: one pass less
        # over memory, and the same bytes (so the same bits as every other rank's fold).
        # Not when src is dst and we fold third or later: the fold writes dst before
        # reading our part.
        own = g.index < 2 or (src is not dst and not np.may_share_memory(src, dst))
        reduce = not self.to_leader or g.index == 0
        if src.nbytes <= FLAT_ROUND_BYTES:
            # The small-message fast path: one round, one barrier, cached views.
            parity = g.round % 2
            parts = g.areas(parity, dt, src.size)
            np.copyto(parts[g.index], src)
            g.barrier(self.ex, self.deadline, check=True)
            g.round += 1
            if reduce:
                if own:
                    parts = parts.copy()
                    parts[g.index] = src
                self.op.fold(parts, dst)
            return
        first = True
        for lo, hi in flat_rounds(src.size, dt.itemsize):
            parity = g.round % 2
            parts = g.areas(parity, dt, hi - lo)
            np.copyto(parts[g.index], src[lo:hi])
            g.barrier(self.ex, self.deadline, check=first, running=not first)
            first = False
            g.round += 1
            if reduce:
                if own:
                    parts = parts.copy()
                    parts[g.index] = src[lo:hi]
                self.op.fold(parts, dst[lo:hi])

    def _scatter(self) -> None:
        g, src, dst, ex, n, me = self.g, self.src, self.dst, self.ex, self.g.n, self.g.index
        dt = src.dtype
        per = max(n, g.area_bytes // dt.itemsize)
        per -= per % n
        rounds = bounds(src.size, -(-src.size // per))
        pending: tuple[int, int, list[tuple[int, int]]] | None = None
        first = True
        for lo, hi in rounds:
            parity = g.round % 2
            sl = bounds(hi - lo, n)
            mine = g.area(me, parity, dt, hi - lo)
            a, b = sl[me]
            # Copy in the slices the others reduce (not our own: we read it from src).
            mine[:a] = src[lo: lo + a]
            mine[b:] = src[lo + b: hi]
            if pending is not None:
                self._copy_out(*pending)
            g.barrier(ex, self.deadline, check=first, running=not first)
            first = False
            parts = [src[lo + a: lo + b] if j == me else g.area(j, parity, dt, hi - lo)[a:b]
                     for j in range(n)]
            self.op.fold(parts, mine[a:b])
            if not self.to_leader or me == 0:
                dst[lo + a: lo + b] = mine[a:b]
            g.barrier(ex, self.deadline, running=True)  # everyone passed the one above
            g.round += 1
            pending = (parity, lo, sl)
        if pending is not None:
            self._copy_out(*pending)

    def _copy_out(self, parity: int, lo: int, sl: list[tuple[int, int]]) -> None:
        g = self.g
        if self.to_leader and g.index != 0:
            return
        count = sl[-1][1]
        for j, (a, b) in enumerate(sl):
            if j != g.index:
                self.dst[lo + a: lo + b] = g.area(j, parity, self.dst.dtype, count)[a:b]


def shm_broadcast(g: ShmGroup, ex: Exchange, buf: np.ndarray, deadline: float) -> None:
    """Copy member 0's ``buf`` into every member's ``buf``, one barrier per round.

    Parameters
    ----------
    g
        The shared-memory group (segment) of the ranks.
    ex
        The collective's exchange (links to the peers, deadline, failure reporting).
    buf
        Member 0's data, or where the others receive it.
    deadline
        ``time.monotonic()`` by which it must complete.
    """
    if g.n == 1:
        return
    dt = buf.dtype
    per = max(1, g.area_bytes // dt.itemsize)
    for lo, hi in bounds(buf.size, max(1, -(-buf.size // per))):
        parity = g.round % 2
        if g.index == 0:
            np.copyto(g.area(0, parity, dt, hi - lo), buf[lo:hi])
        g.barrier(ex, deadline)
        g.round += 1
        if g.index != 0:
            np.copyto(buf[lo:hi], g.area(0, parity, dt, hi - lo))


def shm_barrier(groups: ShmGroups, ex: Exchange) -> bool:
    """A barrier through the communicator's whole segment, if it has one; else False.

    Only once shared-memory allreduces set the segment up (the same on every rank): a job
    that never uses shared memory does not get a segment for its barriers.

    Parameters
    ----------
    groups
        The communicator's segments.
    ex
        The collective's exchange (links to the peers, deadline, failure reporting).
    """
    g = groups.whole
    if g is None:
        return False
    g.announce(ex)
    g.barrier(ex, ex.deadline, check=True)
    g.round += 1
    return True


# -- cost (the registry's formula; terascale.sim.model) --------------------------------------
def shm_time(nbytes: float, q: int, c: Any) -> float:
    r"""Shared-memory allreduce of ``q`` ranks on one host (copy in, reduce-scatter of the
    ``q`` slices, copy out): :math:`s(2\alpha_{shm} + m(2\delta + \frac{q-1}{q}\gamma))`,
    ``s`` the slow-down of ranks sharing cores.

    Parameters
    ----------
    nbytes
        The message size in bytes.
    c
        The machine's :class:`terascale.sim.CostParams`.
    q
        Ranks on the host.
    """
    check(nbytes, q)
    if q == 1:
        return 0.0
    s = c.slowdown(q)
    c = c.for_message(nbytes)
    return float(s * (2 * c.alpha_shm + nbytes * (2 * c.delta + (q - 1) / q * c.gamma)))


def shm_cost(nbytes: float, nodes: int, per_host: int, c: Any, **_: Any) -> float:
    """The registry's cost of one host's segment of ``per_host`` ranks (``nodes`` is 1).

    Parameters
    ----------
    nbytes
        The message size in bytes.
    nodes
        Hosts (1).
    per_host
        Ranks on each host.
    c
        The machine's :class:`terascale.sim.CostParams`.
    """
    return shm_time(nbytes, per_host, c)
