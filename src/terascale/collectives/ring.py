r"""Ring allreduce: reduce-scatter, then allgather, chunked and fully pipelined.

**What it does.**
The buffer is cut into ``size`` segments. In ``size - 1`` reduce-scatter steps each rank
sends one segment to its right neighbour and adds the segment arriving from its left, so
that rank ``r`` ends up owning the full reduction of one segment; ``size - 1`` allgather
steps then pass the finished segments around. Segments are cut into chunks
(``CHUNK_BYTES``), and a chunk is forwarded the moment it is reduced, so the steps overlap.
With ``scatter_only`` it stops after the reduce-scatter (``Communicator.reduce_scatter``;
:meth:`RingAllreduce.scatter_rows` says which rows a rank holds).

**When to pick it.**
Large messages: every rank sends and receives ``2 (p-1)/p`` of the data, the least any
allreduce can (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of
workstations", JPDC 2009), and each link carries one flow at a time, which keeps
rate-limited TCP links busy. Its ``2 (p-1)`` message latencies make it a poor choice for
small messages or many ranks; there the tree (small) or halving/doubling (``2 sum(r_k-1)``
latencies, same bytes) do better. ``auto`` picks it above the crossover in :mod:`.select`.

**Cost model.**
Thakur, Rabenseifner & Gropp (IJHPCA 2005), alpha-beta-gamma:
:math:`2(p-1)\alpha + 2\frac{p-1}{p} m\beta + \frac{p-1}{p} m\gamma`
(:func:`ring_time`); ``ranks_per_host`` ranks sharing one host's link divide its rate.

**Determinism.**
The order of additions for every segment is fixed by the ring, and the allgather copies
the same final bytes to every rank: bitwise identical on every rank and run.

**Two ranks.**
Two ranks and a small message (:func:`~._pair.is_pair`) swap their whole buffers at once
(:mod:`._pair`) and reduce each segment as the ring would: segment 1 ``rank 0's op rank
1's``, segment 0 ``rank 1's op rank 0's`` -- one latency, the same bits.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np

from .._arrays import ReduceOp
from ..transport import Exchange
from ..transport.base import scratch_array
from ._chunks import bounds, chunk_bounds, view
from ._cost import settle
from ._pair import PAIR_MAX_BYTES, Pieces, is_pair, swap_in
from .registry import AllreduceCall

__all__ = ["RingAllreduce", "ring_cost", "ring_time"]

CHUNK_BYTES = 1024 * 1024


class RingAllreduce:
    """Allreduce (or, with ``scatter_only``, reduce-scatter) of a flat buffer, in place.

    With ``scatter_only`` the allgather phase is skipped and rank ``r`` holds the reduced
    segment ``r`` (rows :meth:`scatter_rows`); other segments hold partial sums.

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
    scatter_only
        Stop after the reduce-scatter (default False).
    row_elems
        Elements per row: segments hold whole rows (default 1).
    chunk_bytes
        Bytes per message (default 1 MiB).
    swap
        Two ranks and a small message run as one swap (default True); False: the general schedule.
    """

    @staticmethod
    def pair_pieces(count: int, itemsize: int) -> Pieces | None:
        """Two ranks: how the swap reduces ``count`` elements (:mod:`._pair`), None when
        the message is not that small. Rank ``r`` reduces segment ``r - 1`` into its own
        buffer (reduce-scatter step 0 of :meth:`run`); the allgather copies it.

        Parameters
        ----------
        count
            Elements of the message.
        itemsize
            Bytes per element.
        """
        if not is_pair(2, count, itemsize):
            return None
        (lo0, hi0), (lo1, hi1) = bounds(count, 2)
        return ((lo0, hi0, 1), (lo1, hi1, 0))

    @classmethod
    def for_call(cls, call: AllreduceCall) -> RingAllreduce:
        """Built from the registry's description of one allreduce (``src`` is ``dst``).

        Parameters
        ----------
        call
            The allreduce as the registry describes it.
        """
        return cls(call.ex, call.ex.rank, call.ex.size, call.dst, call.op)

    @staticmethod
    def scatter_rows(rows: int, size: int, rank: int) -> tuple[int, int]:
        """The rows ``[lo, hi)`` of ``rows`` that ``rank`` of ``size`` holds reduced after a
        reduce-scatter (``scatter_only``): contiguous parts as ``numpy.array_split`` cuts
        them.

        Parameters
        ----------
        rows
            The buffer's rows (elements divided by ``row_elems``).
        size
            The number of ranks.
        rank
            The rank whose part is asked for.
        """
        return bounds(rows, size)[rank]

    def __init__(self, ex: Exchange, rank: int, size: int, buf: np.ndarray, reduce: ReduceOp,
                 *, scatter_only: bool = False, row_elems: int = 1,
                 chunk_bytes: int = CHUNK_BYTES, swap: bool = True) -> None:
        """``swap=False``: two ranks and a small message still run the ring's two steps
        (what the swap reproduces bit for bit: for comparisons)."""
        self.ex = ex
        self.rank = rank
        self.size = size
        self.buf = buf
        self.reduce = reduce
        self.scatter_only = scatter_only
        self.left = (rank - 1) % size
        self.right = (rank + 1) % size
        # Rank r finishes the reduce-scatter owning segment (r + 1 + shift) mod n.
        self.shift = -1 if scatter_only else 0
        # Segments hold whole rows of ``row_elems`` elements (reduce_scatter splits by rows).
        rows = buf.size // row_elems if row_elems else 0
        self.segments = [chunk_bounds(lo * row_elems, hi * row_elems, buf.itemsize, chunk_bytes)
                         for lo, hi in bounds(rows, size)]
        longest = max(hi - lo for seg in self.segments for lo, hi in seg)
        # Two ranks, a small allreduce: one swap (module docstring); no scratch then.
        self.pair = None if not swap or scatter_only or size != 2 or row_elems != 1 else \
            self.pair_pieces(buf.size, buf.itemsize)
        self.scratch = scratch_array(ex, longest if self.pair is None else 0, buf.dtype)

    def _seg(self, step: int) -> int:
        """Segment this rank sends at reduce-scatter step ``step`` (and receives at step-1)."""
        return (self.rank - step + self.shift) % self.size

    def run(self) -> None:
        n, ex = self.size, self.ex
        if n == 1:
            return
        if self.pair is not None:
            swap_in(ex, self.rank, self.buf, self.reduce, self.pair)
            return
        # Reduce-scatter, step 0: send our own contribution of the first segment.
        for lo, hi in self.segments[self._seg(0)]:
            ex.send(self.right, view(self.buf, lo, hi))
        # Every receive from the left, in the order the left neighbour sends: reduce-scatter
        # steps 0..n-2, then allgather steps 0..n-2. Callbacks forward each chunk onwards.
        for step in range(n - 1):
            seg = self._seg(step + 1)
            for j, (lo, hi) in enumerate(self.segments[seg]):
                into = self.scratch[: hi - lo].data.cast("B")
                ex.recv(self.left, into, then=partial(self._reduce, step, seg, j))
        if not self.scatter_only:
            for step in range(n - 1):
                seg = self._seg(step)  # allgather step t receives segment (r - t) mod n
                for j, (lo, hi) in enumerate(self.segments[seg]):
                    ex.recv(self.left, view(self.buf, lo, hi),
                            then=partial(self._gathered, step, seg, j))
        ex.run()

    def _reduce(self, step: int, seg: int, j: int) -> None:
        lo, hi = self.segments[seg][j]
        self.reduce(self.buf[lo:hi], self.scratch[: hi - lo])
        if step + 1 < self.size - 1 or not self.scatter_only:
            # Next reduce-scatter step, or (after the last) the first allgather step.
            self.ex.send(self.right, view(self.buf, lo, hi))

    def _gathered(self, step: int, seg: int, j: int) -> None:
        if step + 1 < self.size - 1:
            lo, hi = self.segments[seg][j]
            self.ex.send(self.right, view(self.buf, lo, hi))


# -- cost (the registry's formula; terascale.sim.model) --------------------------------------
def ring_time(nbytes: float, p: int, c: Any, *, ranks_per_host: int = 1) -> float:
    r"""Ring allreduce (Patarasuk & Yuan): :math:`2(p-1)\alpha + 2\frac{p-1}{p} m\beta +
    \frac{p-1}{p} m\gamma`; two ranks and a small message: the swap.

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
    return float(2 * (p - 1) * c.alpha + 2 * f * nbytes * c.beta + f * nbytes * c.gamma)


def ring_cost(nbytes: float, nodes: int, per_host: int, c: Any, **_: Any) -> float:
    """The registry's cost of the ring over ``nodes`` hosts of ``per_host`` ranks.

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
    return ring_time(nbytes, nodes * per_host, c, ranks_per_host=per_host)
