"""VW's ``--link`` of float32 scores in numba, for a build without the compiled core
(``_vwfast.link`` is the same loop in C): apart from :mod:`._vwtext` and :mod:`._vwout`,
which a run of the compiled learner imports, so that they import no numba."""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["link32"]


@numba.njit(cache=True)
def link32(scores: np.ndarray, code: int) -> np.ndarray:
    """VW's link in float (code 0 logistic, 1 glf1, 2 poisson), with C's ``expf``
    (numba's float32 ``exp``; numpy's, and a double exp rounded to float, differ from it in
    the last bit, which -p's six digits show): where the compiled core is not built."""
    out = np.empty(len(scores), np.float32)
    one, two = np.float32(1.0), np.float32(2.0)
    for i in range(len(scores)):
        if code == 0:
            out[i] = one / (one + math.exp(-scores[i]))
        elif code == 1:
            out[i] = two / (one + math.exp(-scores[i])) - one
        else:
            out[i] = math.exp(scores[i])
    return out

