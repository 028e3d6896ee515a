"""The numba kernels of :class:`._model.LinearModel` and of the trainers that hand it their
arrays: scores of parsed examples, and the features a model keeps moved in place.

Apart from :mod:`._model` so that writing or reading a model (``terascale vw --bfgs``'s
``-f``) imports no numba.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["keep_learned", "predict_scores", "scores_float"]


@numba.njit(cache=True, nogil=True)
def predict_scores(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
                   full: np.ndarray) -> np.ndarray:
    """Raw scores: for each row, the sum of full[index] * value."""
    n = len(indptr) - 1
    out = np.empty(n, np.float64)
    for i in range(n):
        s = 0.0
        for k in range(indptr[i], indptr[i + 1]):
            s += full[indices[k]] * values[k]
        out[i] = s
    return out


@numba.njit(cache=True, nogil=True)
def scores_float(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
                  full: np.ndarray) -> np.ndarray:
    """Raw scores in VW's arithmetic: each product rounded to float, summed in float."""
    n = len(indptr) - 1
    out = np.empty(n, np.float64)
    for i in range(n):
        s = np.float32(0.0)
        for k in range(indptr[i], indptr[i + 1]):
            s += np.float32(full[indices[k]] * values[k])
        out[i] = s
    return out


@numba.njit(cache=True, nogil=True)
def keep_learned(indices: np.ndarray, weights: np.ndarray, g2: np.ndarray,
                 nrm: np.ndarray) -> int:
    """Move the features :class:`LinearModel` keeps (a non-zero weight, or with ``g2`` not
    empty a non-zero adaptive sum) to the front of the four arrays, in order, in place;
    returns their number. A trainer hands over arrays it owns and the model takes their
    first entries as they are: no fresh arrays at the end of a run, whose first touch
    (2 MiB pages zeroed, on a virtual machine pages its host may have to back again) cost
    more than the move (``docs/design/linear-memory.md``, "Fresh pages").

    Parameters
    ----------
    indices, weights
        The features' hashed indices and weights (the same length), rewritten in place.
    g2, nrm
        Their adaptive sums and normalizers, rewritten in place; both empty: the weights
        alone decide.
    """
    check = len(g2) > 0
    n = 0
    for k in range(len(weights)):
        if weights[k] == 0 and not (check and g2[k] != 0):
            continue
        if n != k:
            indices[n] = indices[k]
            weights[n] = weights[k]
            if check:
                g2[n] = g2[k]
                nrm[n] = nrm[k]
        n += 1
    return n
