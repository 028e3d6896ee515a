"""Recursive halving/doubling allreduce for any world size (Rabenseifner's algorithm).

Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
MPICH" (IJHPCA 2005), section 4.4: a reduce-scatter by *recursive vector halving* followed
by an allgather by *recursive doubling*. With ``p`` a power of two, ``log2 p`` steps each
way: at reduce-scatter step ``s`` a rank swaps half of its current range with the partner at
distance ``p / 2^(s+1)`` and reduces the half it keeps, so it ends up owning block ``v`` of
``p``; the allgather mirrors that with doubling distances. Every rank moves ``2 (p-1)/p``
of the data (bandwidth-optimal, like the ring) in only ``2 log2 p`` message latencies
(instead of the ring's ``2 (p-1)``).

Other world sizes fold the ``r = n - p`` extra ranks in first (the MPICH pre-step): rank
``2i`` (``i < r``) sends its whole vector to rank ``2i+1`` and sits out; it gets the result
back from ``2i+1`` at the end. Extra ranks pay one full-vector transfer each way.

Everything is pipelined at chunk granularity with completion callbacks on the
:class:`~terascale.transport.Exchange`: a chunk moves on to the next step the moment its
reduction for this step is done, and an incoming chunk is received only once the chunk it
is added to is ready (until then it waits in the socket buffer), so one chunk of scratch per
peer suffices. Each halving step (and the fold) sends its blocks in the order the receiver
passes them on -- the blocks it sends at its next step first, its own block last -- so the
receiver's next sends overlap this step's transfer; over rate-limited TCP links (4 emulated
hosts, 100 and 200 Mbit/s) that raised busbw from 79-84% to 84-93% of TCP goodput. Every block is
reduced by exactly one rank in a fixed order and copied
everywhere else, so results are bitwise identical on all ranks and across runs.

The order of the halving steps comes from the host layout (:func:`halving_bits`): the steps
whose pairs share a host go first, the allgather mirrors them. The first step moves half the
vector, the last ``1/p`` of it, so on 2 hosts x 2 workers the half-vector exchange stays
inside each host and each NIC carries half a vector each way instead of a whole one
(63-74% -> 122-141% of TCP goodput in busbw terms at 100 and 200 Mbit/s, on a par with the
hierarchical allreduce). Without several ranks per host it is the textbook order.

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
from .registry import AllreduceCall

__all__ = ["HalvingDoublingAllreduce", "halving_bits"]

CHUNK_BYTES = 512 * 1024
_REDUCE, _COPY = 0, 1


def halving_bits(hosts: Sequence[Hashable]) -> list[int]:
    """The bits of the virtual rank the halving steps flip, in step order (doubling: reversed).

    ``hosts`` is the host of each of the ``p`` (a power of two) active ranks in virtual-rank
    order. Without a layout (every rank its own host) this is the textbook order, distances
    ``p/2, p/4, ..., 1``. Otherwise the steps whose pairs share a host most often come first:
    the first halving step moves half the vector, the last only ``1/p`` of it, so pairing the
    early steps inside a host keeps the big transfers off the NICs (2 hosts x 2 workers: each
    NIC carries half a vector each way instead of a whole one). A pure function of the
    layout, so every rank derives the same schedule.
    """
    p = len(hosts)
    bits = [p >> (s + 1) for s in range(p.bit_length() - 1)]
    same = {b: sum(hosts[v] == hosts[v ^ b] for v in range(p)) for b in bits}
    return sorted(bits, key=lambda b: (-same[b], -b))


class _Box:
    """One peer's ordered stream of units (sends or receives) and how far it has got."""

    __slots__ = ("items", "cur", "busy", "scratch")

    def __init__(self) -> None:
        self.items: list[tuple[int, int, int]] = []  # (unit, required state, mode)
        self.cur = 0
        self.busy = False
        self.scratch: np.ndarray | None = None


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
        p = 1
        while p * 2 <= size:
            p *= 2
        extra = size - p
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
        steps = p.bit_length() - 1

        def real_v(v: int) -> int:
            return 2 * v + 1 if v < extra else v + extra

        # The schedule below is the textbook one over relabelled virtual ranks w, whose bit
        # p >> (s+1) is the bit of the virtual rank v that halving step s flips.
        order = halving_bits([hosts[real_v(v)] for v in range(p)] if hosts is not None
                             else list(range(p)))

        def to_w(v: int) -> int:
            return sum(p >> (s + 1) for s, b in enumerate(order) if v & b)

        from_w = {to_w(v): v for v in range(p)}

        def real(w: int) -> int:
            return real_v(from_w[w])

        def units_of(blocks: Sequence[int]) -> list[int]:
            return [u for b in blocks for u in block_units[b]]

        def gather_order(v: int, t: int) -> list[int]:
            """Blocks vrank ``v`` holds after ``t`` allgather steps, in the order it sent them."""
            if t == 0:
                return [v]
            return gather_order(v, t - 1) + gather_order(v ^ (1 << (t - 1)), t - 1)

        if rank < 2 * extra and rank % 2 == 0:
            # An extra rank: hand everything to the right neighbour, get the result back.
            partner = rank + 1
            vpartner = to_w((partner - 1) // 2)
            for u in units_of(sorted(range(p), key=lambda b: -(b ^ vpartner))):
                self._out(partner, u, 0)  # in the order the partner sends them on
            for u in units_of(gather_order(vpartner, steps)):
                self._in(partner, u, 0, _COPY)
            self.final = 0
            return
        vrank = to_w(rank // 2 if rank < 2 * extra else rank - extra)
        folded = 1 if rank < 2 * extra else 0
        if folded:  # the extra rank's vector, in the order the halving steps send it on
            for u in units_of(sorted(range(p), key=lambda b: -(b ^ vrank))):
                self._in(rank - 1, u, 0, _REDUCE)

        # Reduce-scatter by recursive halving: distances p/2, p/4, ..., 1 (between w's).
        lo_block = 0
        for s in range(steps):
            d = p >> (s + 1)
            partner = real(vrank ^ d)
            if vrank & d:
                send, keep = range(lo_block, lo_block + d), range(lo_block + d, lo_block + 2 * d)
            else:
                send, keep = range(lo_block + d, lo_block + 2 * d), range(lo_block, lo_block + d)
            # Blocks in the order the receiver passes them on: those it sends at its next
            # halving step first, its own final block last (larger xor with the receiver's
            # vrank = sent on sooner), so that its next step's sends overlap this step's
            # receives instead of waiting for the tail of this step.
            for u in units_of(sorted(send, key=lambda b: -(b ^ vrank ^ d))):
                self._out(partner, u, folded + s)
            for u in units_of(sorted(keep, key=lambda b: -(b ^ vrank))):
                self._in(partner, u, folded + s, _REDUCE)
            lo_block = keep.start
        self.final = folded + steps
        # Allgather by recursive doubling: distances 1, 2, ..., p/2.
        for t in range(steps):
            partner = real(vrank ^ (1 << t))
            for u in units_of(gather_order(vrank, t)):
                self._out(partner, u, self.final)
            for u in units_of(gather_order(vrank ^ (1 << t), t)):
                self._in(partner, u, 0, _COPY)
        if folded:
            for u in units_of(gather_order(vrank, steps)):
                self._out(rank - 1, u, self.final)

    def _out(self, peer: int, unit: int, required: int) -> None:
        self.outbox.setdefault(peer, _Box()).items.append((unit, required, _COPY))

    def _in(self, peer: int, unit: int, required: int, mode: int) -> None:
        self.inbox.setdefault(peer, _Box()).items.append((unit, required, mode))

    def run(self) -> None:
        if not self.inbox and not self.outbox:
            return
        longest = max(hi - lo for lo, hi in self.units)
        for box in self.inbox.values():
            if any(mode == _REDUCE for _, _, mode in box.items):
                box.scratch = np.empty(longest, self.buf.dtype)
        self._pump()
        self.ex.run()
        if any(b.cur < len(b.items) or b.busy for b in (*self.inbox.values(), *self.outbox.values())):
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
            while box.cur < len(items) and not box.busy:
                unit, required, mode = items[box.cur]
                lo, hi = self.units[unit]
                if mode == _COPY:
                    ex.recv(peer, view(buf, lo, hi), then=partial(self._copied, unit))
                else:
                    if state[unit] < required:
                        break
                    assert box.scratch is not None
                    box.busy = True
                    ex.recv(peer, box.scratch[: hi - lo].data.cast("B"),
                            then=partial(self._reduced, unit, box))
                box.cur += 1

    def _reduced(self, unit: int, box: _Box) -> None:
        lo, hi = self.units[unit]
        assert box.scratch is not None
        self.reduce(self.buf[lo:hi], box.scratch[: hi - lo])
        self.state[unit] += 1
        box.busy = False
        self._pump()

    def _copied(self, unit: int) -> None:
        self.state[unit] = self.final
        self._pump()
