"""Distinct values of large index arrays: sorted, or in order of first appearance.

numpy >= 2.3 answers ``np.unique(a)`` (no index, inverse or counts asked) from a hash
table and sorts the result afterwards. On hashed feature indices (uint32, 10^5..10^7
values, most of them distinct) that is ~25x slower than sorting: measured 0.25 s against
0.01 s for 320k values with numpy 2.4. A sort (radix sort for 32-bit integers with
``kind="stable"``) and one comparison pass do the same work in one sweep.
"""

from __future__ import annotations

import numpy as np

__all__ = ["first_appearances", "unique_sorted"]


def unique_sorted(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``values`` (any shape; a new array, input untouched)."""
    s = np.sort(np.ravel(values), kind="stable")
    if len(s) < 2:
        return s
    keep = np.empty(len(s), np.bool_)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def first_appearances(values: np.ndarray) -> np.ndarray:
    """The distinct values of the 1-d ``values`` in order of first appearance."""
    _, first = np.unique(values, return_index=True)  # (sorts: no hash table asked for this)
    return values[np.sort(first)]
