"""The numba kernels that form one example's interaction features (``-q``, ``--cubic``,
``--interactions``) from a table of :func:`._interactions.interaction_table`, as VW 9 does:
the index ``h = i1``, then ``h = (h * 16777619) ^ ik`` (FNV prime), masked to ``-b`` bits;
the value the product of the values."""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["count_interactions", "emit_interactions"]


@numba.njit(cache=True)
def emit_interactions(table: np.ndarray, gstart: np.ndarray, gend: np.ndarray,
                      gidx: np.ndarray, gval: np.ndarray, mask: int, out_i: np.ndarray,
                      out_v: np.ndarray, n: int) -> int:
    """Append the interaction features of one example to out_i/out_v from position n (the
    caller has sized them with :func:`count_interactions`); returns the new end.

    ``gstart[c]:gend[c]`` is namespace c's span of the example's grouped features
    ``gidx`` (hashed, masked) and ``gval``."""
    if table.shape[0] == 0:  # no interactions: no scratch arrays (this runs per example)
        return n
    pos = np.zeros(table.shape[1], np.int64)
    hs = np.zeros(table.shape[1], np.int64)
    vs = np.zeros(table.shape[1], np.float32)
    for t in range(table.shape[0]):
        order = table[t, 0] & 255
        permute = table[t, 0] >= 256
        ok = True
        for k in range(order):
            c = table[t, 1 + k]
            if gend[c] <= gstart[c]:
                ok = False
                break
        if not ok:
            continue
        # an odometer over the terms, the last one fastest
        k = 0
        pos[0] = gstart[table[t, 1]]
        while k >= 0:
            c = table[t, 1 + k]
            if pos[k] >= gend[c]:
                k -= 1
                if k >= 0:
                    pos[k] += 1
                continue
            p = pos[k]
            if k == 0:
                hs[0] = np.int64(gidx[p])
                vs[0] = gval[p]
            else:
                hs[k] = (((hs[k - 1] * 16777619) & 0xFFFFFFFF) ^ np.int64(gidx[p]))
                vs[k] = vs[k - 1] * gval[p]
            if k == order - 1:
                out_i[n] = hs[k] & mask
                out_v[n] = vs[k]
                n += 1
                pos[k] += 1
            else:
                nc = table[t, 2 + k]
                pos[k + 1] = p if nc == c and not permute else gstart[nc]
                k += 1
    return n


@numba.njit(cache=True)
def count_interactions(table: np.ndarray, gstart: np.ndarray, gend: np.ndarray) -> int:
    """An upper bound of the features :func:`emit_interactions` writes (the full products)."""
    total = 0
    for t in range(table.shape[0]):
        m = 1
        for k in range(table[t, 0] & 255):
            c = table[t, 1 + k]
            m *= gend[c] - gstart[c]
        total += m
    return total
