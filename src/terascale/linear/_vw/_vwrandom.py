"""VW's starting weights (``--random_weights``, ``--normal_weights``,
``--truncated_normal_weights``), drawn as VW draws them so that training starts from VW's
very weights: its ``merand48`` generator (a 64-bit linear congruential generator whose bits
25..47 become a float in [0, 1)), stepped once per weight in index order from
``--random_seed`` for uniform weights, and seeded with each weight's position in VW's strided array for the polar
Box-Muller normal draw (``parse_regressor.cc``, ``random_details.h``).
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["normal_weights", "uniform_weights"]

_A = np.uint64(0xEECE66D5DEECE66D)
_C = np.uint64(2147483647)


@numba.njit(cache=True, inline="always")
def _merand48(state: np.uint64) -> tuple[np.uint64, np.float32]:
    state = state * _A + _C
    bits = np.int32(((state >> np.uint64(25)) & np.uint64(0x7FFFFF)) | np.uint64(127 << 23))
    f = np.array([bits], np.int32).view(np.float32)[0]
    return state, np.float32(f - np.float32(1.0))


@numba.njit(cache=True)
def _uniform(n: int, seed: int) -> np.ndarray:
    out = np.empty(n, np.float32)
    s = np.uint64(seed)
    for i in range(n):
        s, r = _merand48(s)
        out[i] = np.float32(r - np.float32(0.5))
    return out


@numba.njit(cache=True)
def _normal(n: int, stride: int) -> np.ndarray:
    out = np.empty(n, np.float32)
    two, one = np.float32(2.0), np.float32(1.0)
    for i in range(n):
        s = np.uint64(i * stride)
        while True:
            s, a = _merand48(s)
            s, b = _merand48(s)
            x1 = np.float32(two * a - one)
            x2 = np.float32(two * b - one)
            t = np.float32(x1 * x1 + x2 * x2)
            if t < 1.0 and t != 0.0:
                break
        t = np.float32(math.sqrt(np.float32(np.float32(-2.0) * np.float32(math.log(t))) / t))
        out[i] = np.float32(x1 * t)
    return out


def uniform_weights(n: int, seed: int) -> np.ndarray:
    """VW's ``--random_weights``: merand48 - 0.5 for weights 0..n-1 in order."""
    return _uniform(n, seed)


def normal_weights(n: int, *, truncated: bool = False, stride: int = 4) -> np.ndarray:
    """VW's ``--normal_weights``: the draw seeded with each weight's index in VW's strided
    array (``stride`` 4: weight, adaptive sum, normalizer and a spare per feature);
    ``truncated``: folded into twice the standard deviation of all n weights with IEEE
    remainder, as ``--truncated_normal_weights``."""
    w = _normal(n, stride)
    if truncated:
        d = w.astype(np.float64)
        sd = math.sqrt(float(np.sum((d - d.sum() / n) ** 2)) / n) * 2
        far = np.abs(d) > sd
        w[far] = [math.remainder(float(v), sd) for v in d[far]]
    return w
