r"""Pipelined binary-tree allreduce: reduce toward rank 0, then broadcast back.

**What it does.**
Ranks form a heap-ordered binary tree (the children of ``r`` are ``2r+1`` and ``2r+2``).
The buffer streams through in chunks (``CHUNK_BYTES``): a node reduces chunk ``k`` as soon
as both children sent it and passes it up while chunk ``k+1`` is still arriving, and the
root starts the broadcast of chunk ``k`` at once -- the AllReduce of Hadoop AllReduce
(Agarwal, Chapelle, Dudik & Langford, "A Reliable Effective Terascale Linear Learning
System", JMLR 2014). Each node sends and receives at most 3x the data.

**When to pick it.**
Small and medium messages at any world size: its latency grows with ``log2 p`` where the
ring's grows with ``p``. ``auto`` picks it below the crossover in :mod:`.select` (tens to
hundreds of KiB on one host's loopback; larger over slow links, where latency dominates
longer). For large messages the ring and halving/doubling move less: each tree node moves
up to 3x the data against their ``2 (p-1)/p``.

**Cost model.**
Hockney's alpha-beta model with a reduction term (Thakur, Rabenseifner & Gropp,
"Optimization of Collective Communication Operations in MPICH", IJHPCA 2005): without a
pipeline a reduce and a broadcast along a tree of height ``h = log2 p`` cost
:math:`2h(\alpha + m\beta) + h\,m\gamma`. Pipelined in ``K`` chunks of ``c`` bytes:
:math:`h(2\alpha + (r+1)c\beta + rc\gamma) + (K-1)(kc\beta + rc\gamma)` (``h, r, k``
from :func:`tree_shape`), so the bandwidth term stops growing with ``p`` (:func:`tree_time`).

**Determinism.**
The reduction order is fixed (own + left child, then + right child) whatever the arrival
order, and every rank receives the root's bytes: bitwise identical on every rank and run.

**Two ranks.**
Two ranks and a message of one chunk swap their whole buffers at once and each reduces
``rank 0's op rank 1's`` itself (:mod:`._pair`): one latency instead of two in a row, the
same bits. The communicator's blocking call of the same shape again takes the per-call
fast path (no exchange); an empty buffer (the two-rank barrier) is the same swap of two
headers.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

from .._arrays import ReduceOp
from ..transport import Exchange
from ..transport.base import scratch_array
from ._chunks import chunk_bounds, view
from ._cost import settle
from ._pair import PAIR_MAX_BYTES, Pieces, is_pair, swap_in
from .registry import AllreduceCall

__all__ = ["TreeAllreduce", "is_pair", "tree_cost", "tree_links", "tree_shape", "tree_time"]

CHUNK_BYTES = PAIR_MAX_BYTES  # one chunk of two ranks is the swap (._pair)
_DEPTH = 4  # chunks in flight per child (scratch slots)


def tree_links(vrank: int, size: int) -> tuple[int | None, list[int]]:
    """Parent and children of virtual rank ``vrank`` in the heap-ordered binary tree.

    Parameters
    ----------
    vrank
        The virtual rank (rank relative to the root).
    size
        The number of ranks.
    """
    parent = None if vrank == 0 else (vrank - 1) // 2
    return parent, [c for c in (2 * vrank + 1, 2 * vrank + 2) if c < size]


class TreeAllreduce:
    """Set up with the buffer (flat, contiguous, reduced in place); :meth:`run` moves data.

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
        The pipeline's chunk in bytes (default 256 KiB).
    swap
        Two ranks and a small message run as one swap (default True); False: the general schedule.
    """

    @staticmethod
    def pair_pieces(count: int, itemsize: int) -> Pieces | None:
        """Two ranks: how the swap reduces ``count`` elements (:mod:`._pair`), None when
        the message is not one chunk: everything on rank 0, rank 0's op rank 1's.

        Parameters
        ----------
        count
            Elements of the message.
        itemsize
            Bytes per element.
        """
        return ((0, count, 0),) if is_pair(2, count, itemsize) else None

    @classmethod
    def for_call(cls, call: AllreduceCall) -> TreeAllreduce:
        """Built from the registry's description of one allreduce (``src`` is ``dst``).

        Parameters
        ----------
        call
            The allreduce as the registry describes it.
        """
        return cls(call.ex, call.ex.rank, call.ex.size, call.dst, call.op)

    def __init__(self, ex: Exchange, rank: int, size: int, buf: np.ndarray, reduce: ReduceOp,
                 *, chunk_bytes: int = CHUNK_BYTES, swap: bool = True) -> None:
        """``swap=False``: two ranks in one chunk still run the tree's two steps (what the
        swap reproduces bit for bit: for comparisons)."""
        self.ex = ex
        self.buf = buf
        self.reduce = reduce
        self.parent, self.children = tree_links(rank, size)
        self.chunks = chunk_bounds(0, buf.size, buf.itemsize, chunk_bytes)
        self.rank = rank
        # Two ranks, one chunk: one swap (the pieces the communicator's fast path uses too).
        self.pair = self.pair_pieces(buf.size, buf.itemsize) if swap and size == 2 and \
            len(self.chunks) == 1 else None
        longest = max(hi - lo for lo, hi in self.chunks)
        depth = min(_DEPTH, len(self.chunks))
        # (the pair exchange needs no per-child slots: it receives into one buffer)
        self.scratch = {} if self.pair is not None else {c: scratch_array(ex, (depth, longest), buf.dtype)
                                             for c in self.children}
        self.depth = depth
        self.arrived = [0] * len(self.chunks)

    def run(self) -> None:
        ex, buf = self.ex, self.buf
        if self.pair is not None:  # both ranks reduce rank 0's op rank 1's
            swap_in(ex, self.rank, buf, self.reduce, self.pair)
            return
        # Phase 1 (reduce): ask each child for the first chunks; more are asked for as slots free.
        for k in range(min(self.depth, len(self.chunks))):
            self._post_child_recvs(k)
        if not self.children:
            for k in range(len(self.chunks)):
                self._reduced(k)
        # Phase 2 (broadcast): the parent's final chunks land in place, then go to the children.
        if self.parent is not None:
            for k, (lo, hi) in enumerate(self.chunks):
                ex.recv(self.parent, view(buf, lo, hi), then=partial(self._final, k))
        ex.run()

    def _post_child_recvs(self, k: int) -> None:
        lo, hi = self.chunks[k]
        for c in self.children:
            slot = self.scratch[c][k % self.depth, : hi - lo]
            self.ex.recv(c, slot.data.cast("B"), then=partial(self._child_chunk, k))

    def _child_chunk(self, k: int) -> None:
        self.arrived[k] += 1
        if self.arrived[k] < len(self.children):
            return
        lo, hi = self.chunks[k]
        for c in self.children:  # fixed order: deterministic whatever arrived first
            self.reduce(self.buf[lo:hi], self.scratch[c][k % self.depth, : hi - lo])
        if k + self.depth < len(self.chunks):
            self._post_child_recvs(k + self.depth)
        self._reduced(k)

    def _reduced(self, k: int) -> None:
        lo, hi = self.chunks[k]
        if self.parent is not None:
            self.ex.send(self.parent, view(self.buf, lo, hi))
        else:
            self._final(k)

    def _final(self, k: int) -> None:
        lo, hi = self.chunks[k]
        for c in self.children:
            self.ex.send(c, view(self.buf, lo, hi))


# -- cost (the registry's formula; terascale.sim.model) --------------------------------------
def tree_shape(p: int) -> tuple[int, int, int]:
    """(depth h, most children r, most messages per chunk through one link direction k).

    Parameters
    ----------
    p
        The number of ranks.
    """
    h = p.bit_length() - 1
    r = k = 0
    for v in range(p):
        kids = sum(1 for ch in (2 * v + 1, 2 * v + 2) if ch < p)
        r = max(r, kids)
        k = max(k, kids + (v > 0))
    return h, r, k


def tree_time(nbytes: float, p: int, c: Any, *, chunk: int | None = CHUNK_BYTES,
              ranks_per_host: int = 1) -> float:
    r"""Pipelined binary tree (reduce + broadcast); ``chunk=None``: not pipelined.

    :math:`h(2\alpha + (r+1)c\beta + rc\gamma) + (K-1)(kc\beta + rc\gamma)` for ``K``
    chunks of ``c`` bytes (:func:`tree_shape` gives ``h, r, k``); two ranks and one chunk:
    the swap.

    Parameters
    ----------
    nbytes
        The message size in bytes.
    p
        Ranks.
    c
        The machine's :class:`terascale.sim.CostParams`.
    chunk
        The pipeline's chunk in bytes (None: not pipelined).
    ranks_per_host
        Ranks sharing one host's link (default 1).
    """
    # two ranks and one chunk: the swap, one message each way at once
    done, c = settle(nbytes, p, c, ranks_per_host, math.inf if chunk is None else chunk)
    if done is not None:
        return done
    h, r, k = tree_shape(p)
    size = nbytes if chunk is None or nbytes <= chunk else chunk
    chunks = 1 if chunk is None or nbytes <= chunk else math.ceil(nbytes / chunk)
    fill = h * (2 * c.alpha + (r + 1) * size * c.beta + r * size * c.gamma)
    return float(fill + (chunks - 1) * (k * size * c.beta + r * size * c.gamma))


def tree_cost(nbytes: float, nodes: int, per_host: int, c: Any, *,
              chunk: int | None = CHUNK_BYTES, **_: Any) -> float:
    """The registry's cost of the tree over ``nodes`` hosts of ``per_host`` ranks.

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
    chunk
        The pipeline's chunk in bytes (None: not pipelined).
    """
    return tree_time(nbytes, nodes * per_host, c, chunk=chunk, ranks_per_host=per_host)
