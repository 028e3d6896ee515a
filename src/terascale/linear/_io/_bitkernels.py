"""The cache's kernels in numba (:mod:`._cachebits` hands them out where the compiled core is
not built): indices packed at ``bits`` bits each, least significant bit first, the values
a bitmap marks as stored, and the features a block marks in a bitmap."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["mark", "pack", "unpack", "unvalues"]


@numba.njit(cache=True, nogil=True)
def pack(indices: np.ndarray, bits: int, out: np.ndarray) -> None:
    acc = np.uint64(0)
    nacc = 0
    o = 0
    for k in range(len(indices)):
        acc |= np.uint64(indices[k]) << np.uint64(nacc)
        nacc += bits
        while nacc >= 8:
            out[o] = np.uint8(acc & np.uint64(0xFF))
            acc >>= np.uint64(8)
            nacc -= 8
            o += 1
    if nacc > 0:
        out[o] = np.uint8(acc & np.uint64(0xFF))


@numba.njit(cache=True, nogil=True)
def unpack(buf: np.ndarray, bits: int, out: np.ndarray) -> None:
    # index k starts at bit k * bits: while 5 bytes are left there (bits <= 32 and a shift
    # of at most 7 span 5), take them at once, with no branch between independent indices
    # (~5x faster than feeding an accumulator byte by byte); the last few take the slow way
    mask = np.uint64((1 << bits) - 1)
    n = len(out)
    fast = 0
    if len(buf) >= 5:
        fast = min(n, ((len(buf) - 5) * 8) // bits + 1)
    for k in range(fast):
        pos = k * bits
        p = pos >> 3
        word = (np.uint64(buf[p]) | (np.uint64(buf[p + 1]) << np.uint64(8))
                | (np.uint64(buf[p + 2]) << np.uint64(16))
                | (np.uint64(buf[p + 3]) << np.uint64(24))
                | (np.uint64(buf[p + 4]) << np.uint64(32)))
        out[k] = np.uint32((word >> np.uint64(pos & 7)) & mask)
    for k in range(fast, n):
        pos = k * bits
        p = pos >> 3
        sh = pos & 7
        acc = np.uint64(0)
        got = 0
        while got < sh + bits:
            acc |= np.uint64(buf[p]) << np.uint64(got)
            p += 1
            got += 8
        out[k] = np.uint32((acc >> np.uint64(sh)) & mask)


@numba.njit(cache=True, nogil=True)
def unvalues(bitmap: np.ndarray, stored: np.ndarray, out: np.ndarray) -> int:
    """out[k] = the next stored value where bit k of ``bitmap`` is set, else 1.0 (one
    loop instead of numpy's unpackbits, a mask and a masked assignment); returns how many
    stored values were used, -1 when the bitmap asks for more than there are."""
    j = 0
    m = len(stored)
    for k in range(len(out)):
        bit = (bitmap[k >> 3] >> (k & 7)) & 1
        v = stored[j] if j < m else np.float32(1.0)
        out[k] = v if bit else np.float32(1.0)  # a select, not a branch on random bits
        j += bit
    return j if j <= m else -1


@numba.njit(cache=True, nogil=True)
def mark(bitmap: np.ndarray, indices: np.ndarray) -> None:
    """bitmap[indices] = True (numpy's scatter: ~10x slower)."""
    for k in range(len(indices)):
        bitmap[indices[k]] = True
