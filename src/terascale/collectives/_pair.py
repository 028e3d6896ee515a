"""Two ranks and a small message: every allreduce algorithm is one swap.

With two ranks the tree (child to root, root back), the ring (reduce-scatter step, then
allgather step) and halving/doubling (one halving step, one doubling step) each cost two
message latencies in a row, though each moves the same bytes as one frame of the whole
buffer each way: a ring or halving/doubling step of two ranks sends half the buffer twice.
Below one tree chunk (``tree.CHUNK_BYTES``, where one message's latency, not its bytes,
is the cost) all three instead send their whole buffer at once and each rank reduces the
whole vector itself -- the short-message exchange of MPICH's recursive doubling (Thakur,
Rabenseifner & Gropp, IJHPCA 2005, section 4.4), what Open MPI's TCP BTL does for a 4 KiB
allreduce between two hosts.

Every algorithm keeps its own bits: each element is computed with the operand order and
the in-place form the algorithm uses for it (``acc = acc op other``, ``acc`` the buffer of
the rank that reduces it there), given as :data:`Pieces` by the algorithm's
``pair_pieces`` -- the tree reduces everything on rank 0 (rank 0's op rank 1's), the ring
and halving/doubling one half on each rank, each its own way round. Both ranks compute the
same expression per element, so results stay bitwise identical on both, and identical to
what the algorithm computes for more ranks' worth of calls of the same shape.

:class:`PairAllreduce` is that swap as a blocking call's fast path over the transport's
:class:`~terascale.transport.base.Swap` (the communicator's ``_schedule_fast`` protocol: no
exchange while all goes well); :func:`swap_in` is the same frames through an exchange
(asynchronous calls, a timeout, a first call, a sub-group view), so either rank may take
either path.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._arrays import ReduceOp
from ..transport import Exchange, Transport
from ..transport.base import Swap, scratch_array
from ._chunks import chunk_bounds

__all__ = ["PAIR_MAX_BYTES", "PairAllreduce", "Pieces", "fold", "is_pair", "swap_in"]

# Up to one chunk of the tree's pipeline (collectives/tree.py's CHUNK_BYTES): above it the
# tree pipelines and the ring and halving/doubling halve the reductions per rank.
PAIR_MAX_BYTES = 256 * 1024

# ``(lo, hi, first)``: elements ``[lo, hi)`` are ``rank first's op the other's``, reduced in
# place into rank ``first``'s operand, as the algorithm reduces them; covering the buffer.
Pieces = tuple[tuple[int, int, int], ...]


def is_pair(size: int, count: int, itemsize: int) -> bool:
    """Whether an allreduce of ``count`` elements over ``size`` ranks is the swap.

    Parameters
    ----------
    size
        The number of ranks.
    count
        Elements of the message.
    itemsize
        Bytes per element.
    """
    return size == 2 and len(chunk_bounds(0, count, itemsize, PAIR_MAX_BYTES)) == 1


def fold(rank: int, ufunc: np.ufunc, pieces: Pieces, src: np.ndarray, theirs: np.ndarray,
         dst: np.ndarray) -> None:
    """``dst`` = the reduction of ``src`` (ours) and ``theirs`` by ``pieces``, all flat.

    ``dst`` is ``src`` or disjoint from it; ``theirs`` is overwritten. The piece reduced
    into our operand is reduced in ``dst`` (after a copy of ``src``); the one reduced into
    theirs in ``theirs``, then copied: numpy's loops for ``out=`` the first operand and for
    a separate ``out=`` may round differently (complex products)."""
    for lo, hi, first in pieces:
        if lo == hi:
            continue
        if first == rank:
            acc = dst[lo:hi]
            if dst is not src:
                np.copyto(acc, src[lo:hi])
            ufunc(acc, theirs[lo:hi], out=acc)
        else:
            acc = theirs[lo:hi]
            ufunc(acc, src[lo:hi], out=acc)
            np.copyto(dst[lo:hi], acc)


def swap_in(ex: Exchange, rank: int, buf: np.ndarray, reduce: ReduceOp, pieces: Pieces) -> None:
    """The swap through ``ex``: reduce the flat ``buf`` in place with the peer's."""
    peer = 1 - rank
    theirs = scratch_array(ex, buf.shape, buf.dtype)
    ex.send(peer, buf.data.cast("B"))
    ex.recv(peer, theirs.data.cast("B"))
    ex.run()  # buf is written only once its send has completed
    fold(rank, reduce.ufunc, pieces, buf, theirs, buf)


class PairAllreduce:
    """The swap as a blocking call's fast path: :meth:`start` and :meth:`finish` (the
    communicator's ``_schedule_fast`` protocol) over the transport's :class:`Swap`.

    Same frames as :func:`swap_in` (either rank may take either path) and the same bits.

    Parameters
    ----------
    link
        The transport's :class:`~terascale.transport.base.Swap` with the other rank.
    rank
        This rank (0 or 1).
    reduce
        The reduction (op and dtype).
    theirs
        The receive buffer for the other rank's frame.
    pieces
        How the swap reduces the message (the algorithm's ``pair_pieces``).
    """

    __slots__ = ("_link", "_pieces", "_rank", "_theirs", "_ufunc")

    def __init__(self, link: Swap, rank: int, reduce: ReduceOp, theirs: np.ndarray,
                 pieces: Pieces) -> None:
        self._link = link
        self._rank = rank
        self._ufunc = reduce.ufunc
        self._theirs = theirs
        self._pieces = pieces

    @classmethod
    def plan(cls, transport: Transport, rank: int, size: int, reduce: ReduceOp, shape: tuple[int, ...],
             desc: str, context: int, members: Sequence[int] | None,
             pieces: Pieces | None) -> PairAllreduce | None:
        """The fast path of collective ``desc`` over arrays of ``shape`` (``reduce.dtype``)
        reduced by ``pieces`` (the algorithm's ``pair_pieces``; None: not a swap), or None
        where the transport has no :class:`Swap`.

        Parameters
        ----------
        transport
            The communicator's transport.
        rank
            This rank.
        size
            The communicator's size (2 for a swap).
        reduce
            The reduction (op and dtype).
        shape
            The arrays' shape.
        desc
            The collective's descriptor (name, shape, dtype, op), compared across ranks.
        context
            The communicator's context id.
        members
            The transport's ranks of the communicator (None: all).
        pieces
            The algorithm's ``pair_pieces`` (None: not a swap).
        """
        if pieces is None or size != 2:
            return None
        count = int(np.prod(shape, dtype=np.int64))
        link = transport.swap(1 - rank, desc, count * reduce.dtype.itemsize, context=context,
                         members=members)
        return None if link is None else cls(link, rank, reduce, scratch_array(transport, shape, reduce.dtype),
                                             pieces)

    def start(self, seq: int, src: np.ndarray, dst: np.ndarray) -> object:
        """Collective ``seq`` of ``src`` into ``dst`` (the same array or disjoint ones):
        None when done, else what :meth:`finish` continues from.

        Parameters
        ----------
        seq
            The collective's number.
        src
            This rank's input, flat and C-contiguous.
        dst
            Where the result goes (same size; may be ``src``).
        """
        pending = self._link.start(seq, src, self._theirs)
        if pending is None:
            self._fold(src, dst)
        return pending

    def finish(self, ex: Exchange, pending: object, src: np.ndarray, dst: np.ndarray) -> None:
        """Complete a swap :meth:`start` left pending, in ``ex`` (raises as ``ex.run()`` does).

        Parameters
        ----------
        ex
            The exchange that completes it.
        pending
            What :meth:`start` returned.
        src
            This rank's input, flat and C-contiguous.
        dst
            Where the result goes (same size; may be ``src``).
        """
        self._link.finish(ex, pending, src, self._theirs)
        self._fold(src, dst)

    def _fold(self, src: np.ndarray, dst: np.ndarray) -> None:
        theirs = self._theirs
        pieces = self._pieces
        if len(pieces) == 1 and pieces[0][2] == self._rank:  # the tree on rank 0
            if dst is not src:
                np.copyto(dst, src)
            self._ufunc(dst, theirs, out=dst)
        elif len(pieces) == 1:  # the tree on rank 1
            self._ufunc(theirs, src, out=theirs)
            np.copyto(dst, theirs)
        else:
            flat = src.reshape(-1)  # (views: the arrays are contiguous)
            fold(self._rank, self._ufunc, pieces, flat, theirs.reshape(-1),
                 flat if dst is src else dst.reshape(-1))
