"""Pipelined binary-tree broadcast from any root.

Ranks are renumbered so that the root is virtual rank 0 of the same heap-ordered tree the
tree allreduce uses; the buffer streams down in chunks, each node forwarding chunk ``k`` to
its children while chunk ``k+1`` arrives. Depth is ``log2(n)``, and every node sends at most
twice the data.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ..transport import Exchange
from ._chunks import chunk_bounds, view
from .tree import CHUNK_BYTES, tree_links

__all__ = ["TreeBroadcast"]


class TreeBroadcast:
    """Broadcast a flat contiguous byte buffer in place from ``root``.

    Parameters
    ----------
    ex
        The collective's exchange (links to the peers, deadline, failure reporting).
    rank
        This rank, as ``ex`` numbers ranks.
    size
        The number of ranks of ``ex``.
    buf
        The byte buffer: the data on ``root``, received in place elsewhere.
    root
        The rank whose buffer every rank gets.
    chunk_bytes
        The pipeline's chunk in bytes (default 256 KiB).
    """

    def __init__(self, ex: Exchange, rank: int, size: int, buf: np.ndarray, root: int,
                 *, chunk_bytes: int = CHUNK_BYTES) -> None:
        self.ex = ex
        self.buf = buf
        vrank = (rank - root) % size
        vparent, vchildren = tree_links(vrank, size)
        self.parent = None if vparent is None else (vparent + root) % size
        self.children = [(c + root) % size for c in vchildren]
        self.chunks = chunk_bounds(0, buf.size, buf.itemsize, chunk_bytes)

    def run(self) -> None:
        for k, (lo, hi) in enumerate(self.chunks):
            if self.parent is None:
                self._forward(k)
            else:
                self.ex.recv(self.parent, view(self.buf, lo, hi), then=partial(self._forward, k))
        self.ex.run()

    def _forward(self, k: int) -> None:
        lo, hi = self.chunks[k]
        for c in self.children:
            self.ex.send(c, view(self.buf, lo, hi))
