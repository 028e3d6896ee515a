"""Hashed index -> column maps for the compact space: a direct table or a hash table.

A compact column space numbers the distinct hashed features a worker sees (``D`` of the
``2**bits`` possible); every block of every pass maps its hashed indices to columns. The
direct map is a table of ``2**bits`` uint32 (one random read a feature): 64 MiB at
``-b 24``, but 1 GiB at ``-b 28``, where even 11M features touch every page of it, and a
fresh page costs far more than a read (zeroing it, and on a virtual machine the host's own
fault): at ``-b 28`` building the union's table took 24 s of a 40 s pass from the cache
with 2 workers. The hashed map is an open-addressing table (linear probing, load at most
1/2) of ``uint64`` entries, ``(index + 1) << 32 | column``, one cache line a lookup as the
direct table's: ``8 * 2**ceil(log2(2 * D))`` bytes, 256 MiB for 11M features.

:func:`use_hash` chooses: the hashed map where the direct table would be at least twice
its size and at least 256 MiB (``-b 26`` and up with ``D`` at most ``2**bits / 8``, where
the first pass over text moves to dense rows anyway); below ``-b 26`` the direct table is
small enough that its one read without a probe costs less than its pages.
"""

from __future__ import annotations

import numba
import numpy as np

from .. import _pages

__all__ = ["HashIndex", "hash_slots", "use_hash"]

_GOLDEN = 0x9E3779B97F4A7C15  # Fibonacci hashing: the top bits of index * 2**64 / phi
_MIN_TABLE = 1 << 26  # direct tables from 2**26 entries (256 MiB) up may be replaced


def hash_slots(d: int) -> int:
    """Slots of a hashed map for ``d`` features: the power of two at least ``2 * d``.

    Parameters
    ----------
    d
        The number of features the map must hold at load at most 1/2.
    """
    return 1 << max(4, (2 * max(d, 1) - 1).bit_length())


def use_hash(bits: int, d: int) -> bool:
    """Whether ``d`` features at ``bits`` hash bits are better served by a hashed map than
    by a direct table of ``2**bits`` entries (see the module docstring).

    Parameters
    ----------
    bits
        The hash bits (``-b``): the direct table has ``2**bits`` entries of 4 bytes.
    d
        The distinct features to map (the union's size; 0 for a map that starts empty).
    """
    return (1 << bits) >= _MIN_TABLE and 2 * 8 * hash_slots(d) <= 4 * (1 << bits)


@numba.njit(cache=True, nogil=True)
def _put(table: np.ndarray, shift: np.uint64, keys: np.ndarray, vals: np.ndarray) -> None:
    """Insert keys[k] -> vals[k] (keys absent, the table with room)."""
    mask = np.uint64(len(table) - 1)
    for k in range(len(keys)):
        key = np.uint64(keys[k]) + np.uint64(1)
        i = (key * np.uint64(_GOLDEN)) >> shift
        while table[i] != np.uint64(0):
            i = (i + np.uint64(1)) & mask
        table[i] = (key << np.uint64(32)) | np.uint64(vals[k])


@numba.njit(cache=True, nogil=True)
def _rehash(old: np.ndarray, table: np.ndarray, shift: np.uint64) -> None:
    """Insert every entry of ``old`` into the empty ``table`` (as stored: key and column),
    in one sweep: a masked copy would make temporaries of the old map's size, each a
    first touch of fresh pages, at every doubling."""
    mask = np.uint64(len(table) - 1)
    for j in range(len(old)):
        e = old[j]
        if e != np.uint64(0):
            i = ((e >> np.uint64(32)) * np.uint64(_GOLDEN)) >> shift
            while table[i] != np.uint64(0):
                i = (i + np.uint64(1)) & mask
            table[i] = e


@numba.njit(cache=True, nogil=True)
def _get(table: np.ndarray, shift: np.uint64, indices: np.ndarray, out: np.ndarray) -> int:
    """out[k] = the column of indices[k]; returns the first k absent (len: none)."""
    mask = np.uint64(len(table) - 1)
    low = np.uint64(0xFFFFFFFF)
    for k in range(len(indices)):
        key = np.uint64(indices[k]) + np.uint64(1)
        i = (key * np.uint64(_GOLDEN)) >> shift
        while True:
            e = table[i]
            if (e >> np.uint64(32)) == key:
                out[k] = np.uint32(e & low)
                break
            if e == np.uint64(0):
                return k
            i = (i + np.uint64(1)) & mask
    return len(indices)


@numba.njit(cache=True, nogil=True)
def _assign(table: np.ndarray, shift: np.uint64, indices: np.ndarray, order: np.ndarray,
            n: int) -> tuple[np.ndarray, int]:
    """Columns of ``indices``, new ones numbered from ``n`` on (``order`` the index of each
    column); the table has room for every index new."""
    mask = np.uint64(len(table) - 1)
    low = np.uint64(0xFFFFFFFF)
    cols = np.empty(len(indices), np.uint32)
    for k in range(len(indices)):
        h = indices[k]
        key = np.uint64(h) + np.uint64(1)
        i = (key * np.uint64(_GOLDEN)) >> shift
        while True:
            e = table[i]
            if (e >> np.uint64(32)) == key:
                cols[k] = np.uint32(e & low)
                break
            if e == np.uint64(0):
                order[n] = h
                table[i] = (key << np.uint64(32)) | np.uint64(n)
                cols[k] = np.uint32(n)
                n += 1
                break
            i = (i + np.uint64(1)) & mask
    return cols, n


class HashIndex:
    """An open-addressing map from hashed index (below 2**32 - 1) to uint32 column, grown
    by doubling (every entry reinserted) to keep its load at most 1/2.

    Parameters
    ----------
    d
        Features it should hold without growing (default 0: it starts small).
    huge
        Huge pages for the map (:mod:`terascale._pages`): right for a map made once at its
        full size and read at random for whole passes (the default); a map that grows as
        features appear is mostly first touches, cheaper on 4 KiB pages (``False``).
    prefault
        Fault the map's first pages in on a spare core (:func:`terascale._pages.zeros`):
        for a map about to be filled with ``d`` features, at a load of 1/4 to 1/2, which
        writes every page of it.
    """

    def __init__(self, d: int = 0, *, huge: bool = True, prefault: bool = False) -> None:
        self.huge = huge
        self.table = _pages.zeros(hash_slots(d), np.uint64, huge=huge, prefault=prefault)
        self.n = 0

    @property
    def shift(self) -> np.uint64:
        """64 - log2(slots): an index's home slot is the top bits of its product."""
        return np.uint64(64 - (len(self.table) - 1).bit_length())

    @property
    def nbytes(self) -> int:
        return self.table.nbytes

    def reserve(self, d: int) -> None:
        """Room for ``d`` features in all, at load at most 1/2 (grows, never shrinks)."""
        if hash_slots(d) <= len(self.table):
            return
        old = self.table
        self.table = _pages.zeros(hash_slots(d), np.uint64, huge=self.huge)
        _rehash(old, self.table, self.shift)

    def put(self, keys: np.ndarray, cols: np.ndarray) -> None:
        """Insert ``keys`` (absent, distinct) with their columns ``cols``."""
        self.reserve(self.n + len(keys))
        _put(self.table, self.shift, np.asarray(keys, np.uint32), np.asarray(cols, np.uint32))
        self.n += len(keys)

    def lookup(self, indices: np.ndarray, out: np.ndarray) -> None:
        """``out[k]`` = the column of ``indices[k]``; every index must be present."""
        k = _get(self.table, self.shift, np.asarray(indices, np.uint32), out)
        if k < len(indices):
            raise KeyError(f"hashed index {int(indices[k])} has no column")

    def assign(self, indices: np.ndarray, order: np.ndarray,
               n: int) -> tuple[np.ndarray, int]:
        """Columns of ``indices``, new ones numbered from ``n`` on and recorded in
        ``order`` (which must have room for ``n + len(indices)``)."""
        self.reserve(n + len(indices))
        cols, n = _assign(self.table, self.shift, np.asarray(indices, np.uint32), order, n)
        self.n = n
        return cols, n
