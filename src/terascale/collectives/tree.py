"""Pipelined binary-tree allreduce: reduce toward rank 0, then broadcast back (the MPI-style
AllReduce of Agarwal, Chapelle, Dudík & Langford, "A Reliable Effective Terascale Linear
Learning System", JMLR 2014).

Ranks form a heap-ordered binary tree (children of ``r`` are ``2r+1`` and ``2r+2``). The
buffer streams through in chunks: a node reduces chunk ``k`` as soon as both children sent
it and passes it up while chunk ``k+1`` is still arriving, and the root starts the broadcast
of chunk ``k`` at once. Each node sends at most 3x and receives at most 3x the data (6n in
all, the bound of Agarwal et al.), and latency is ``2 log2(n)`` message times plus the pipeline fill,
which makes the tree the right choice for small and medium messages.

Reduction order is fixed (own + left child, then + right child) whatever the arrival order,
so results are bitwise reproducible and identical on every rank (the root's result is what
everyone receives).

Two ranks and a message of one chunk: the tree would cost two message latencies in a row
(child to root, root back); instead both ranks send their whole buffer at once and each
reduces ``rank 0's op rank 1's`` itself -- one latency, the short-message exchange of
MPICH's recursive doubling (Thakur, Rabenseifner & Gropp, IJHPCA 2005, section 4.4) and
what Open MPI's TCP BTL does for a 4 KiB allreduce between two hosts. Each rank moves the
same bytes as in the tree, and both compute the same expression with the same operand
order, so the result is still bitwise identical on both. A blocking call of the same shape
again takes :class:`PairAllreduce` (no exchange, a receive buffer kept from call to call);
an empty buffer (the two-rank barrier) is the same swap of two headers, so both ranks leave
it together, one latency after the later one entered.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from .._arrays import ReduceOp
from ..transport import Exchange, Transport
from ..transport.base import Swap
from ._chunks import chunk_bounds, view
from .registry import AllreduceCall

__all__ = ["PairAllreduce", "TreeAllreduce", "is_pair", "tree_links"]

CHUNK_BYTES = 256 * 1024
_DEPTH = 4  # chunks in flight per child (scratch slots)


def tree_links(vrank: int, size: int) -> tuple[int | None, list[int]]:
    """Parent and children of virtual rank ``vrank`` in the heap-ordered binary tree."""
    parent = None if vrank == 0 else (vrank - 1) // 2
    return parent, [c for c in (2 * vrank + 1, 2 * vrank + 2) if c < size]


def is_pair(size: int, count: int, itemsize: int, chunk_bytes: int = CHUNK_BYTES) -> bool:
    """Whether the tree of ``size`` ranks over ``count`` elements is the two-rank swap."""
    return size == 2 and len(chunk_bounds(0, count, itemsize, chunk_bytes)) == 1


class TreeAllreduce:
    """Set up with the buffer (flat, contiguous, reduced in place); :meth:`run` moves data."""

    @classmethod
    def for_call(cls, call: AllreduceCall) -> TreeAllreduce:
        """Built from the registry's description of one allreduce (``src`` is ``dst``)."""
        return cls(call.ex, call.ex.rank, call.ex.size, call.dst, call.op)

    def __init__(self, ex: Exchange, rank: int, size: int, buf: np.ndarray, reduce: ReduceOp,
                 *, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.ex = ex
        self.buf = buf
        self.reduce = reduce
        self.parent, self.children = tree_links(rank, size)
        self.chunks = chunk_bounds(0, buf.size, buf.itemsize, chunk_bytes)
        self.rank = rank
        self.pair = size == 2 and len(self.chunks) == 1
        longest = max(hi - lo for lo, hi in self.chunks)
        depth = min(_DEPTH, len(self.chunks))
        # (the pair exchange needs no per-child slots: it receives into one buffer)
        self.scratch = {} if self.pair else {c: np.empty((depth, longest), buf.dtype)
                                             for c in self.children}
        self.depth = depth
        self.arrived = [0] * len(self.chunks)

    def run(self) -> None:
        ex, buf = self.ex, self.buf
        if self.pair:
            self._exchange()
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

    def _exchange(self) -> None:
        """Two ranks, one chunk: swap whole buffers, both reduce rank 0's op rank 1's."""
        ex, buf = self.ex, self.buf
        peer = 1 - self.rank
        theirs = np.empty_like(buf)
        ex.send(peer, buf.data.cast("B"))
        ex.recv(peer, theirs.data.cast("B"))
        ex.run()  # buf is written only once its send has completed
        if self.rank == 0:
            self.reduce(buf, theirs)
        else:
            self.reduce(theirs, buf)
            buf[...] = theirs

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


class PairAllreduce:
    """The two-rank swap as a blocking call's fast path: :meth:`start` and :meth:`finish`
    (the communicator's ``_schedule_fast`` protocol) over the transport's :class:`Swap`.

    Same frames as :meth:`TreeAllreduce._exchange` (either rank may take either path) and
    the same bits: rank 0's buffer op rank 1's, computed on both.
    """

    __slots__ = ("_link", "_rank", "_theirs", "_ufunc")

    def __init__(self, link: Swap, rank: int, reduce: ReduceOp, theirs: np.ndarray) -> None:
        self._link = link
        self._rank = rank
        self._ufunc = reduce.ufunc
        self._theirs = theirs

    @classmethod
    def plan(cls, mesh: Transport, rank: int, size: int, reduce: ReduceOp, shape: tuple[int, ...],
             desc: str, context: int, members: tuple[int, ...] | None) -> PairAllreduce | None:
        """The fast path of collective ``desc`` over arrays of ``shape`` (``reduce.dtype``),
        or None where the tree is not the swap or the transport has no :class:`Swap`."""
        count = int(np.prod(shape, dtype=np.int64))
        if not is_pair(size, count, reduce.dtype.itemsize):
            return None
        link = mesh.swap(1 - rank, desc, count * reduce.dtype.itemsize, context=context,
                         members=members)
        return None if link is None else cls(link, rank, reduce, np.empty(shape, reduce.dtype))

    def start(self, seq: int, src: np.ndarray, dst: np.ndarray) -> object:
        """Collective ``seq`` of ``src`` into ``dst`` (the same array or disjoint ones):
        None when done, else what :meth:`finish` continues from."""
        pending = self._link.start(seq, src, self._theirs)
        if pending is None:
            self._fold(src, dst)
        return pending

    def finish(self, ex: Exchange, pending: object, src: np.ndarray, dst: np.ndarray) -> None:
        self._link.finish(ex, pending, src, self._theirs)
        self._fold(src, dst)

    def _fold(self, src: np.ndarray, dst: np.ndarray) -> None:
        # In place into the first operand, as _exchange does: numpy's loops for out= the
        # first operand and for a separate out= may round differently (complex products).
        theirs = self._theirs
        if self._rank == 0:
            if dst is not src:
                np.copyto(dst, src)
            self._ufunc(dst, theirs, out=dst)
        else:
            self._ufunc(theirs, src, out=theirs)
            np.copyto(dst, theirs)
