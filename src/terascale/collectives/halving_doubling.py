"""Recursive halving/doubling allreduce for any world size, mixed radix (recursive multiplying).

Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
MPICH" (IJHPCA 2005), section 4.4: a reduce-scatter by *recursive vector halving* followed
by an allgather by *recursive doubling*, ``log2 p`` steps each way for ``p`` a power of
two. Ruefenacht, Bull & Booth, "Generalisation of recursive doubling for AllReduce"
(Parallel Computing 2017) extend it to every ``p``: factor ``p = r_1 r_2 ... r_m``; at step
``k`` a rank exchanges with the ``r_k - 1`` other members of its group, sending
``(r_k - 1)/r_k`` of its current segment and keeping one part; the allgather mirrors it.
Every rank moves ``2 (p-1)/p`` of the data (bandwidth-optimal, like the ring) in
``2 sum(r_k - 1)`` messages (the ring: ``2 (p-1)``); a prime ``p`` is one direct exchange
each way. (MPICH's fold for other sizes -- an extra rank hands its whole vector to a
partner -- doubles the bytes on the partner's link: 42% of TCP goodput on 3 and 6 emulated
hosts at 100 Mbit/s, where the ring reached 86-94%.) The schedule is in :mod:`._radix`.

Everything is pipelined at chunk granularity with completion callbacks on the
:class:`~terascale.transport.Exchange`: a chunk moves on to the next step the moment its
reductions for this step are done. Each peer has one chunk of scratch: its next chunk is
received once the previous one was reduced (until then it waits in the socket buffer). A
step sends a part in the order its receiver passes the blocks on -- those that leave it
soonest first, its own block last -- so the receiver's next sends overlap this step's
transfer; over rate-limited TCP links (4 emulated hosts, 100 and 200 Mbit/s) that raised
busbw from 79-84% to 84-93% of TCP goodput. Every block is reduced by exactly one rank, its
contributions in a fixed order (its own, then the group members by digit after its own,
whatever order they arrive in), and copied everywhere else, so results are bitwise
identical on all ranks and across runs.

The order of the steps comes from the host layout (:func:`radix_steps`): the steps whose
groups share a host go first. The first step moves most of the vector, the last ``1/p``
of it, so on 2 hosts x 2 workers the half-vector exchange stays inside each host and each
NIC carries half a vector each way instead of a whole one (63-74% -> 122-141% of TCP
goodput in busbw terms at 100 and 200 Mbit/s, on a par with the hierarchical allreduce).
Without several ranks per host it is the textbook order.

Over a subset of the communicator (one leader per host in the hierarchical allreduce) it
runs on a sub-group view of the exchange (:meth:`~terascale.transport.base.Exchange.subgroup`).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from functools import partial

import numpy as np

from .._arrays import ReduceOp
from ..transport import Exchange
from ._chunks import bounds, chunk_bounds, view
from ._radix import digit, group, held_order, radix_steps, segment, traffic
from .registry import AllreduceCall

__all__ = ["HalvingDoublingAllreduce", "radix_steps", "traffic"]

CHUNK_BYTES = 512 * 1024
SCRATCH_DEPTH = 4  # chunks of scratch per peer whose contributions this rank reduces
SCRATCH_BYTES = 16 << 20  # ... and at most this much scratch in all
_REDUCE, _COPY = 0, 1


class _Box:
    """One peer's ordered stream of units (sends or receives) and how far it has got."""

    __slots__ = ("items", "cur", "free", "parked")

    def __init__(self) -> None:
        self.items: list[tuple[int, int, int]] = []  # (unit, required state, mode)
        self.cur = 0
        self.free: list[np.ndarray] = []  # scratch chunks not holding a contribution
        # Contributions received, each waiting until its unit has the reductions before it:
        # (unit, required state, scratch).
        self.parked: list[tuple[int, int, np.ndarray]] = []


class HalvingDoublingAllreduce:
    """Allreduce of a flat contiguous buffer in place; :meth:`run` moves the data."""

    @classmethod
    def for_call(cls, call: AllreduceCall) -> HalvingDoublingAllreduce:
        """Built from the registry's description of one allreduce (``src`` is ``dst``)."""
        return cls(call.ex, call.ex.rank, call.ex.size, call.dst, call.op, hosts=call.hosts)

    def __init__(self, ex: Exchange, rank: int, size: int, buf: np.ndarray, reduce: ReduceOp,
                 *, chunk_bytes: int = CHUNK_BYTES,
                 hosts: Sequence[Hashable] | None = None) -> None:
        self.ex = ex
        self.buf = buf
        self.reduce = reduce
        p = size
        steps = radix_steps(list(hosts) if hosts is not None and len(hosts) == p
                            else list(range(p)))
        # Blocks of the final distribution, cut into chunks ("units") that move independently.
        self.units: list[tuple[int, int]] = []
        block_units: list[list[int]] = []
        for lo, hi in bounds(buf.size, p):
            pieces = chunk_bounds(lo, hi, buf.itemsize, chunk_bytes)
            block_units.append(list(range(len(self.units), len(self.units) + len(pieces))))
            self.units.extend(pieces)
        self.state = [0] * len(self.units)  # reductions applied to each unit so far
        self.inbox: dict[int, _Box] = {}
        self.outbox: dict[int, _Box] = {}
        m = len(steps)
        widths = [p]
        for _, r in steps:
            widths.append(widths[-1] // r)

        def units_of(blocks: Sequence[int]) -> list[int]:
            return [u for b in blocks for u in block_units[b]]

        def arrival_order(v: int, k: int, blocks: range) -> list[int]:
            """``blocks`` (``v``'s part at step ``k``) in the order ``v`` passes them on:
            the blocks that leave it at step k+1 first (then k+2, ...; its own block last),
            the destinations of one step interleaved, so that its next sends overlap."""
            later = steps[k + 1:]
            mine = [digit(v, s) for s in later]

            def key(b: int) -> tuple[tuple[bool, ...], tuple[int, ...]]:
                d = [(b // w) % s[1] for s, w in zip(later, widths[k + 2:])]
                return tuple(x == y for x, y in zip(d, mine)), tuple(reversed(d))

            return sorted(blocks, key=key)

        # Reduce-scatter: at step k, part j of the segment goes to the group member of digit
        # j; the part of our own digit comes in from the r-1 others and is reduced, their
        # contributions in a fixed order (digit after ours first), which ``required`` encodes.
        base = 0
        for k, s in enumerate(steps):
            members, a, r = group(rank, s), digit(rank, s), s[1]
            lo = segment(rank, steps, p, k)
            w = widths[k + 1]
            for j, peer in enumerate(members):
                if j != a:
                    part = range(lo + j * w, lo + (j + 1) * w)
                    for u in units_of(arrival_order(peer, k, part)):
                        self._out(peer, u, base)
            mine = arrival_order(rank, k, range(lo + a * w, lo + (a + 1) * w))
            for i in range(1, r):
                for u in units_of(mine):
                    self._in(members[(a + i) % r], u, base + i - 1, _REDUCE)
            base += r - 1
        self.final = base
        # Allgather: the steps in reverse; send all we hold, get each member's holdings.
        for k in reversed(range(m)):
            members, a = group(rank, steps[k]), digit(rank, steps[k])
            ours = units_of(held_order(rank, steps, p, k + 1))
            for j, peer in enumerate(members):
                if j != a:
                    for u in ours:
                        self._out(peer, u, self.final)
                    for u in units_of(held_order(peer, steps, p, k + 1)):
                        self._in(peer, u, 0, _COPY)

    def _out(self, peer: int, unit: int, required: int) -> None:
        self.outbox.setdefault(peer, _Box()).items.append((unit, required, _COPY))

    def _in(self, peer: int, unit: int, required: int, mode: int) -> None:
        self.inbox.setdefault(peer, _Box()).items.append((unit, required, mode))

    def run(self) -> None:
        if not self.inbox and not self.outbox:
            return
        longest = max(hi - lo for lo, hi in self.units)
        reducing = [b for b in self.inbox.values() if any(m == _REDUCE for _, _, m in b.items)]
        # A few chunks of scratch per peer (SCRATCH_BYTES in all at most), so that a peer
        # whose contribution must wait for another's keeps streaming for a while instead of
        # stalling its link at once.
        depth = max(1, min(SCRATCH_DEPTH, SCRATCH_BYTES // max(1, longest * self.buf.itemsize
                                                               * max(1, len(reducing)))))
        for box in reducing:
            box.free = [np.empty(longest, self.buf.dtype) for _ in range(depth)]
        self._pump()
        self.ex.run()
        if any(b.cur < len(b.items) or b.parked
               for b in (*self.inbox.values(), *self.outbox.values())):
            raise RuntimeError("halving/doubling schedule did not complete (internal error)")

    def _pump(self) -> None:
        """Post every send whose unit is ready and every receive that may start now."""
        ex, buf, state = self.ex, self.buf, self.state
        for peer, box in self.outbox.items():
            items = box.items
            while box.cur < len(items):
                unit, required, _ = items[box.cur]
                if state[unit] < required:
                    break
                lo, hi = self.units[unit]
                ex.send(peer, view(buf, lo, hi))
                box.cur += 1
        for peer, box in self.inbox.items():
            items = box.items
            while box.cur < len(items):
                unit, required, mode = items[box.cur]
                lo, hi = self.units[unit]
                if mode == _COPY:
                    ex.recv(peer, view(buf, lo, hi), then=partial(self._copied, unit))
                else:
                    # Into scratch now; added once the unit has the ``required`` reductions
                    # before it (the fixed order), see _arrived.
                    if not box.free:
                        break
                    scratch = box.free.pop()
                    ex.recv(peer, scratch[: hi - lo].data.cast("B"),
                            then=partial(self._arrived, box, (unit, required, scratch)))
                box.cur += 1

    def _arrived(self, box: _Box, item: tuple[int, int, np.ndarray]) -> None:
        box.parked.append(item)
        state, reduced = self.state, True
        while reduced:  # one reduction may let another parked contribution in
            reduced = False
            for b in self.inbox.values():
                for entry in b.parked:
                    unit, required, scratch = entry
                    if state[unit] == required:
                        lo, hi = self.units[unit]
                        self.reduce(self.buf[lo:hi], scratch[: hi - lo])
                        state[unit] += 1
                        b.parked.remove(entry)
                        b.free.append(scratch)
                        reduced = True
                        break
        self._pump()

    def _copied(self, unit: int) -> None:
        self.state[unit] = self.final
        self._pump()
