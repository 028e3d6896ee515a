"""All-to-all personalized exchange of equal blocks (``MPI_Alltoall``), pairwise.

Rank ``r`` holds ``size`` blocks; block ``j`` goes to rank ``j``, and block ``i`` of the
output comes from rank ``i``. Every rank posts its ``size - 1`` sends and receives at once
and the exchange moves them concurrently (the pairwise-exchange schedule of Thakur,
Rabenseifner & Gropp, IJHPCA 2005, section 4.1, without its step barrier: step ``k``
sends to ``r + k`` and receives from ``r - k``, so that at any moment the links in use form
a permutation and no rank is the target of everyone at once). Each rank sends and
receives ``(n-1)/n`` of its buffer, the lower bound; latency is one message time plus
what the links carry. Nothing is reduced, so results are the senders' bytes exactly.
"""

from __future__ import annotations

import numpy as np

from ..transport import Exchange
from ._chunks import view

__all__ = ["PairwiseAlltoall"]


class PairwiseAlltoall:
    """``src`` and ``dst`` are flat, ``size`` blocks of ``block`` elements back to back.

    Parameters
    ----------
    ex
        The collective's exchange (links to the peers, deadline, failure reporting).
    rank
        This rank, as ``ex`` numbers ranks.
    size
        The number of ranks of ``ex``.
    src
        The blocks to send, block ``j`` for rank ``j``.
    dst
        Where the received blocks go, block ``i`` from rank ``i``.
    block
        Elements per block.
    """

    def __init__(self, ex: Exchange, rank: int, size: int, src: np.ndarray, dst: np.ndarray,
                 block: int) -> None:
        self.ex = ex
        self.rank = rank
        self.size = size
        self.src = src
        self.dst = dst
        self.block = block

    def _blk(self, buf: np.ndarray, i: int) -> memoryview:
        return view(buf, i * self.block, (i + 1) * self.block)

    def run(self) -> None:
        r, n, b = self.rank, self.size, self.block
        self.dst[r * b: (r + 1) * b] = self.src[r * b: (r + 1) * b]
        if n == 1:
            return
        for k in range(1, n):
            self.ex.send((r + k) % n, self._blk(self.src, (r + k) % n))
            self.ex.recv((r - k) % n, self._blk(self.dst, (r - k) % n))
        self.ex.run()
