"""MLlib Vector entries -> the learner's CSR arrays, in one compiled pass.

The non-zeros of a chunk of Vectors arrive flat (per-row counts, int64 indices, float64
values; :mod:`._arrow` or the row path of :mod:`._encode`). The learner wants indices
masked to ``bits`` as uint32, float32 values and VW's constant feature last in every
example. Done with numpy this is a mask, two casts and an insertion per chunk (``np.insert``
sorts its positions), several passes over ~30 bytes per non-zero; this kernel writes each
output element once, which makes it a small part of a Spark task's read of its partition.
"""

from __future__ import annotations

import numba
import numpy as np

from ..._errors import DataError
from ...linear import CONSTANT_HASH

__all__ = ["F32_MAX", "vector_csr"]

F32_MAX = float(np.finfo(np.float32).max)  # beyond it a value becomes inf in float32


@numba.njit(cache=True, nogil=True)
def _fill(counts: np.ndarray, idx: np.ndarray, flat: np.ndarray, mask: int, const: int,
          constant: bool, indptr: np.ndarray, indices: np.ndarray,
          values: np.ndarray) -> int:
    """Fill the CSR arrays; the position of the first value that is NaN, infinite or
    beyond float32 (-1: none)."""
    k = 0
    o = 0
    for r in range(len(counts)):
        for _ in range(counts[r]):
            x = flat[k]
            if not abs(x) <= F32_MAX:  # NaN fails this too
                return k
            indices[o] = idx[k] & mask
            values[o] = np.float32(x)
            k += 1
            o += 1
        if constant:
            indices[o] = const
            values[o] = np.float32(1.0)
            o += 1
        indptr[r + 1] = o
    return -1


def vector_csr(counts: np.ndarray, idx: np.ndarray, flat: np.ndarray, bits: int,
               constant: bool, first: int, where: str,
               column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(indptr int64, indices uint32, values float32)`` of the chunk's rows; a DataError
    naming partition ``where``, row and ``column`` for a value the learner cannot take."""
    counts = np.ascontiguousarray(counts, np.int64)
    n, nnz = len(counts), int(counts.sum())
    total = nnz + (n if constant else 0)
    if len(idx) != len(flat) or nnz != len(flat):
        raise ValueError("vector_csr: counts, indices and values disagree")
    mask = (1 << bits) - 1
    indptr = np.zeros(n + 1, np.int64)
    indices = np.empty(total, np.uint32)
    values = np.empty(total, np.float32)
    bad = _fill(counts, np.ascontiguousarray(idx, np.int64),
                np.ascontiguousarray(flat, np.float64), mask, CONSTANT_HASH & mask,
                constant, indptr, indices, values)
    if bad >= 0:
        r = int(np.searchsorted(np.cumsum(counts), bad, side="right"))
        raise DataError(f"{where}, row {first + r}: column {column!r} has a NaN or "
                        f"infinite value (or one beyond float32)")
    return indptr, indices, values
