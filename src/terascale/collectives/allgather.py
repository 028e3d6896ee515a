"""Ring allgather of one block per rank, blocks of any (agreed) sizes.

In ``size - 1`` steps each rank passes the block it received last to its right neighbour,
so every block travels the ring once: each rank sends and receives ``(n-1)/n`` of the
total, the bandwidth optimum.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from ..transport import Exchange
from ._chunks import view

__all__ = ["RingAllgather"]


class RingAllgather:
    """``out`` holds the blocks back to back (block ``i`` at ``offsets[i]``, ``sizes[i]`` long).

    The caller fills block ``rank``; :meth:`run` fills the others.

    Parameters
    ----------
    ex
        The collective's exchange (links to the peers, deadline, failure reporting).
    rank
        This rank, as ``ex`` numbers ranks.
    size
        The number of ranks of ``ex``.
    out
        The blocks back to back; the caller fills block ``rank``.
    sizes
        Each block's length in elements.
    """

    def __init__(self, ex: Exchange, rank: int, size: int, out: np.ndarray,
                 sizes: list[int]) -> None:
        self.ex = ex
        self.rank = rank
        self.size = size
        self.out = out
        self.offsets = [sum(sizes[:i]) for i in range(size)]
        self.sizes = sizes
        self.left = (rank - 1) % size
        self.right = (rank + 1) % size

    def _block(self, i: int) -> memoryview:
        return view(self.out, self.offsets[i], self.offsets[i] + self.sizes[i])

    def run(self) -> None:
        if self.size == 1:
            return
        # Step t sends block (r - t) and receives block (r - t - 1), forwarded at step t + 1.
        self.ex.send(self.right, self._block(self.rank))
        for step in range(self.size - 1):
            blk = (self.rank - step - 1) % self.size
            self.ex.recv(self.left, self._block(blk), then=partial(self._got, step, blk))
        self.ex.run()

    def _got(self, step: int, blk: int) -> None:
        if step + 1 < self.size - 1:
            self.ex.send(self.right, self._block(blk))
