r"""Recursive halving/doubling allreduce for any world size (mixed radix).

**What it does.**
A reduce-scatter by *recursive vector halving*, then an allgather by *recursive doubling*
(Rabenseifner's algorithm; Thakur, Rabenseifner & Gropp, "Optimization of Collective
Communication Operations in MPICH", IJHPCA 2005, section 4.4), generalized to every ``p``
by recursive multiplying (Ruefenacht, Bull & Booth, "Generalisation of recursive doubling
for AllReduce", Parallel Computing 2017): factor ``p = r_1 r_2 ... r_m``; at step ``k`` a
rank exchanges with the ``r_k - 1`` other members of its group, sending ``(r_k - 1)/r_k``
of its current segment and keeping one part; the allgather mirrors it. A prime ``p`` is
one direct exchange each way. The schedule, and the order of its steps, is
:mod:`._radix`'s (:func:`radix_steps`).

A step of radix ``r > 2`` whose parts are large (``RING_PART_BYTES``) runs as a ring among
its group (one TCP flow per link direction at a time; small parts keep the direct
exchange's single latency). Everything is pipelined at chunk granularity across steps: a
chunk goes on as soon as it holds what the schedule needs. A step sends a part in the
order its receiver passes the blocks on, so the receiver's next sends overlap this step's
transfer. Over a subset of the communicator (the leaders of the hierarchical allreduce) it
runs on a sub-group view of the exchange.

**When to pick it.**
Medium and large messages where the ring's ``2 (p-1)`` latencies hurt: it moves the same
``2 (p-1)/p`` of the data as the ring in ``2 sum(r_k - 1)`` messages (``2 log2 p`` for a
power of two). On several hosts of several workers the steps whose groups share a host go
first: the first step moves most of the vector and stays inside each host, so each NIC
carries half a vector each way instead of a whole one -- on a par with the hierarchical
allreduce without its shared-memory phases. A large prime ``p`` degenerates to one direct
exchange with every rank (``p - 1`` concurrent flows); the ring is then the safer choice.

**Cost model.**
:math:`2\sum_k (r_k - 1)\alpha + 2\frac{p-1}{p} m\beta + \frac{p-1}{p} m\gamma`
(Thakur et al. for a power of two, ``2 log2 p`` latencies); on several hosts of several
workers only the busiest host link's bytes pay ``beta`` (:func:`traffic`), the rest
``delta`` (:func:`halving_doubling_time`).

**Determinism.**
Every block is reduced by exactly one rank per step, its contributions in a fixed order (in
a direct exchange: member ``a-1`` first, then ``a-2``, ..., whatever order they arrive in;
round a ring: the ring's order), and copied everywhere else: bitwise identical on all
ranks and across runs.

**Two ranks.**
Two ranks and a small message (:func:`~._pair.is_pair`) swap their whole buffers at once
(:mod:`._pair`), and each block is reduced as the schedule reduces it: by the rank that
owns it, its own operand first.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from functools import partial
from typing import Any

import numpy as np

from .._arrays import ReduceOp
from ..transport import Exchange
from ..transport.base import scratch_array
from ._chunks import bounds, chunk_bounds, view
from ._cost import settle
from ._pair import PAIR_MAX_BYTES, Pieces, is_pair, swap_in
from ._radix import (
    arrival_order,
    block_of,
    digit,
    group,
    held_order,
    radix_steps,
    segment,
    traffic,
    widths,
)
from .registry import AllreduceCall

__all__ = ["HalvingDoublingAllreduce", "as_ring", "halving_doubling_cost", "halving_doubling_time",
           "radix_steps", "traffic"]

CHUNK_BYTES = 512 * 1024
SCRATCH_DEPTH = 4  # chunks of scratch per peer whose contributions this rank reduces
SCRATCH_BYTES = 16 << 20  # ... and at most this much scratch in all
RING_PART_BYTES = 256 * 1024  # from this part size on a radix > 2 step runs as a ring
_REDUCE, _COPY = 0, 1
_FINAL = 1 << 30  # the state of a unit that holds the result


def as_ring(radix: int, part_bytes: int) -> bool:
    """Whether a step of ``radix`` whose parts are ``part_bytes`` runs as a ring.

    Parameters
    ----------
    radix
        The step's radix.
    part_bytes
        Bytes of each part of the step.
    """
    return radix > 2 and part_bytes >= RING_PART_BYTES


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
    """Allreduce of a flat contiguous buffer in place; :meth:`run` moves the data.

    Parameters
    ----------
    ex
        The collective's exchange (links to the peers, deadline, failure reporting).
    rank
        This rank, as ``ex`` numbers ranks.
    size
        The number of ranks of ``ex``.
    buf
        The flat, C-contiguous buffer, reduced in place.
    reduce
        The reduction (op and dtype).
    chunk_bytes
        Bytes per message of the ring-like steps (default 512 KiB).
    hosts
        Each rank's host, which orders the steps (default None: one host).
    swap
        Two ranks and a small message run as one swap (default True); False: the general schedule.
    """

    @staticmethod
    def pair_pieces(count: int, itemsize: int) -> Pieces | None:
        """Two ranks: how the swap reduces ``count`` elements (:mod:`._pair`), None when
        the message is not that small. One step of radix 2 (whatever the hosts): rank ``v``
        reduces the block it owns after it into its own buffer; the doubling copies it.

        Parameters
        ----------
        count
            Elements of the message.
        itemsize
            Bytes per element.
        """
        if not is_pair(2, count, itemsize):
            return None
        steps = radix_steps([0, 1])
        blocks = bounds(count, 2)
        return tuple((*blocks[block_of(v, steps, 2)], v) for v in (0, 1))

    @classmethod
    def for_call(cls, call: AllreduceCall) -> HalvingDoublingAllreduce:
        """Built from the registry's description of one allreduce (``src`` is ``dst``).

        Parameters
        ----------
        call
            The allreduce as the registry describes it.
        """
        return cls(call.ex, call.ex.rank, call.ex.size, call.dst, call.op, hosts=call.hosts)

    def __init__(self, ex: Exchange, rank: int, size: int, buf: np.ndarray, reduce: ReduceOp,
                 *, chunk_bytes: int = CHUNK_BYTES,
                 hosts: Sequence[Hashable] | None = None, swap: bool = True) -> None:
        """``swap=False``: two ranks and a small message still run the halving and the
        doubling step (what the swap reproduces bit for bit: for comparisons)."""
        self.ex = ex
        self.buf = buf
        self.reduce = reduce
        self.rank = rank
        # Two ranks, a small message: one swap (module docstring), no schedule.
        self.pair = self.pair_pieces(buf.size, buf.itemsize) if swap and size == 2 else None
        self.inbox: dict[int, _Box] = {}
        self.outbox: dict[int, _Box] = {}
        if self.pair is not None:
            return
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
        self.steps, self.p, self.block_units = steps, p, block_units
        # Reduce-scatter: at step k, part j of the segment ends at the group member of digit
        # j. Two ways to get it there (every rank picks the same: it depends on the size):
        # * direct: send part j to member j, the r-1 parts of our digit come in at once and
        #   are reduced in a fixed order (member a-1 first, then a-2, ...), which
        #   ``required`` encodes; one message latency per step.
        # * ring (large parts, radix > 2): a ring reduce-scatter among the group: r-1
        #   sub-steps, each sending one partly reduced part to member a+1, so every link
        #   direction carries one TCP flow at a time. r-1 flows sharing a rate-limited link
        #   at once left it idle part of the time (under BBR): 79-87% of the link rate
        #   on 3 emulated hosts at 100 Mbit/s, against the ring's 94%.
        base = 0
        ring = []
        for k, (_, r) in enumerate(steps):
            members, a = group(rank, steps[k]), digit(rank, steps[k])
            ring.append(as_ring(r, buf.nbytes * widths(p, steps)[k] // p))
            if ring[k]:
                nxt, prv = members[(a + 1) % r], members[(a - 1) % r]
                for i in range(r - 1):  # send part a-1-i, get part a-2-i and reduce it
                    for u in self._part(k, a - 1 - i):
                        self._out(nxt, u, base + (i > 0))
                    for u in self._part(k, a - 2 - i):
                        self._in(prv, u, base, _REDUCE)
                base += 1
            else:
                for j, peer in enumerate(members):
                    if j != a:
                        for u in self._part(k, j):
                            self._out(peer, u, base)
                for i in range(1, r):
                    for u in self._part(k, a):
                        self._in(members[(a - i) % r], u, base + i - 1, _REDUCE)
                base += r - 1
        # A unit is final once it holds every contribution: ours after the last reduction
        # (_arrived), the others when copied in. (A count of reductions alone cannot say
        # it: a part forwarded round a ring may have had as many.)
        self.last = base
        self.own = set(self.block_units[block_of(rank, steps, p)])
        # Allgather: the steps in reverse, each the same way as its reduce-scatter step;
        # send all we hold (to every member, or on round the ring), get each member's.
        for k in reversed(range(len(steps))):
            members, a, r = group(rank, steps[k]), digit(rank, steps[k]), steps[k][1]
            if ring[k]:
                nxt, prv = members[(a + 1) % r], members[(a - 1) % r]
                for i in range(r - 1):
                    for u in self._held(members[(a - i) % r], k):
                        self._out(nxt, u, _FINAL)
                    for u in self._held(members[(a - 1 - i) % r], k):
                        self._in(prv, u, 0, _COPY)
            else:
                for j, peer in enumerate(members):
                    if j != a:
                        for u in self._held(rank, k):
                            self._out(peer, u, _FINAL)
                        for u in self._held(peer, k):
                            self._in(peer, u, 0, _COPY)

    def _part(self, k: int, j: int) -> list[int]:
        """The units of part ``j`` (mod the radix) of our segment at step ``k``, in the order
        its final owner passes them on (all ranks forward them in that order)."""
        steps, p = self.steps, self.p
        r, rank = steps[k][1], self.rank
        w = widths(p, steps)[k]
        lo = segment(rank, steps, p, k) + (j % r) * w
        owner = group(rank, steps[k])[j % r]
        return [u for b in arrival_order(owner, steps, p, k, range(lo, lo + w))
                for u in self.block_units[b]]

    def _held(self, v: int, k: int) -> list[int]:
        """The units rank ``v`` holds before the allgather undoes step ``k``, in its order."""
        return [u for b in held_order(v, self.steps, self.p, k + 1) for u in self.block_units[b]]

    def _out(self, peer: int, unit: int, required: int) -> None:
        self.outbox.setdefault(peer, _Box()).items.append((unit, required, _COPY))

    def _in(self, peer: int, unit: int, required: int, mode: int) -> None:
        self.inbox.setdefault(peer, _Box()).items.append((unit, required, mode))

    def run(self) -> None:
        if self.pair is not None:
            swap_in(self.ex, self.rank, self.buf, self.reduce, self.pair)
            return
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
            box.free = [scratch_array(self.ex, longest, self.buf.dtype) for _ in range(depth)]
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
                        if state[unit] == self.last and unit in self.own:
                            state[unit] = _FINAL
                        b.parked.remove(entry)
                        b.free.append(scratch)
                        reduced = True
                        break
        self._pump()

    def _copied(self, unit: int) -> None:
        self.state[unit] = _FINAL
        self._pump()


# -- cost (the registry's formula; terascale.sim.model) --------------------------------------
def halving_doubling_time(nbytes: float, p: int, c: Any, *, ranks_per_host: int = 1) -> float:
    r"""Rabenseifner's reduce-scatter by halving + allgather by doubling (Thakur et al.), in
    the mixed-radix schedule of :func:`radix_steps` (Ruefenacht, Bull & Booth 2017):
    :math:`2\sum_k (r_k - 1)\alpha + 2\frac{p-1}{p} m\beta + \frac{p-1}{p} m\gamma`; on
    several hosts of several workers only the busiest host link's bytes pay ``beta``
    (:func:`traffic`), the rest ``delta``. Two ranks and a small message: the swap.

    Parameters
    ----------
    nbytes
        The message size in bytes.
    p
        Ranks.
    c
        The machine's :class:`terascale.sim.CostParams`.
    ranks_per_host
        Ranks sharing one host's link (default 1).
    """
    done, c = settle(nbytes, p, c, ranks_per_host, PAIR_MAX_BYTES)
    if done is not None:
        return done
    f = (p - 1) / p
    nodes = p // ranks_per_host if ranks_per_host > 0 and p % ranks_per_host == 0 else p
    host = [v // (p // nodes) for v in range(p)]
    steps = radix_steps(host if 1 < nodes < p else list(range(p)))
    t = 2 * sum(r - 1 for _, r in steps) * c.alpha + f * nbytes * c.gamma
    if 1 < nodes < p:  # several hosts of several workers: only the NIC's bytes pay beta
        link, _, local = traffic(steps, host)
        return float(t + nbytes * (link * c.beta + local * c.delta))
    return float(t + 2 * f * nbytes * c.beta)


def halving_doubling_cost(nbytes: float, nodes: int, per_host: int, c: Any, **_: Any) -> float:
    """The registry's cost of halving/doubling over ``nodes`` hosts of ``per_host`` ranks.

    Parameters
    ----------
    nbytes
        The message size in bytes.
    nodes
        Hosts.
    per_host
        Ranks on each host.
    c
        The machine's :class:`terascale.sim.CostParams`.
    """
    return halving_doubling_time(nbytes, nodes * per_host, c, ranks_per_host=per_host)
