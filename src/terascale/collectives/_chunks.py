"""Splitting a flat buffer into segments and pipelining chunks, identically on every rank."""

from __future__ import annotations

import numpy as np

__all__ = ["bounds", "chunk_bounds"]


def bounds(count: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` contiguous ``(start, stop)`` element ranges covering ``count`` (array_split).

    Parameters
    ----------
    count
        Elements to split.
    parts
        The number of ranges.
    """
    q, r = divmod(count, parts)
    out, start = [], 0
    for i in range(parts):
        stop = start + q + (1 if i < r else 0)
        out.append((start, stop))
        start = stop
    return out


def chunk_bounds(start: int, stop: int, itemsize: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """Split ``[start, stop)`` into pieces of about ``chunk_bytes`` (at least one piece)."""
    per = max(1, chunk_bytes // max(itemsize, 1))
    n = stop - start
    if n <= per:
        return [(start, stop)]
    pieces = -(-n // per)
    return [(start + a, start + b) for a, b in bounds(n, pieces)]


def view(buf: np.ndarray, lo: int, hi: int) -> memoryview:
    """Bytes of elements ``[lo, hi)`` of a flat contiguous array, without a copy."""
    return buf[lo:hi].data.cast("B")
