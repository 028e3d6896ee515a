"""Warm start (VW's ``-i``): a model's weights and adaptive state in the compact index space
of a new training run, and the model that comes out of it.

VW 9 saves the learner's state with the weights (``--save_resume`` is its default): per
weight the sum of squared gradients and the largest |x| seen, plus the example weight and
normalizer sums, so ``vw -i`` continues as if both runs were one. A terascale model saved
after online passes carries the same state and is continued the same way; after a batch
phase (L-BFGS/CG) it carries only weights, and the adaptive sums start afresh. Weights of
features the new data lacks are kept unchanged in the new model.
"""

from __future__ import annotations

import numpy as np

from ._model import LinearModel
from ._online._update import STATE_SIZE, new_state

__all__ = ["initial_state", "merged"]


def _lookup(model: LinearModel, union: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(positions into the model's arrays, which of ``union`` the model has)."""
    if not len(model.indices):  # a model with no weights (its learner state only)
        return np.zeros(len(union), np.int64), np.zeros(len(union), np.bool_)
    order = np.argsort(model.indices, kind="stable")
    idx = model.indices[order]
    pos = np.minimum(np.searchsorted(idx, union), max(len(idx) - 1, 0))
    hit = (idx[pos] == union) if len(idx) else np.zeros(len(union), np.bool_)
    return order[pos], hit


def initial_state(model: LinearModel | None, union: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(w, g2, nrm, state) over the compact features ``union`` to start training from."""
    d = len(union)
    w, g2, nrm, state = np.zeros(d), np.zeros(d), np.zeros(d), new_state()
    if model is None:
        return w, g2, nrm, state
    pos, hit = _lookup(model, union)
    w[hit] = model.weights[pos[hit]]
    # 6 entries: models saved before the update multiplier was kept (it is recomputed at
    # the next update)
    if model.adaptive is not None and len(model.adaptive[2]) in (6, STATE_SIZE):
        g2[hit] = model.adaptive[0][pos[hit]]
        nrm[hit] = model.adaptive[1][pos[hit]]
        state[:len(model.adaptive[2])] = model.adaptive[2]
    return w, g2, nrm, state


def merged(model: LinearModel | None, union: np.ndarray, w: np.ndarray,
           adaptive: tuple[np.ndarray, np.ndarray, np.ndarray] | None
           ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
    """(indices, weights, adaptive) of the trained model: ``w`` over ``union``, and the
    initial model's weights (and state) for the features the run did not see."""
    if model is None or not len(model.indices):
        return union, w, adaptive
    rest = np.setdiff1d(model.indices, union)
    if not len(rest):
        return union, w, adaptive
    pos, _ = _lookup(model, rest)
    idx = np.concatenate([union, rest])
    order = np.argsort(idx, kind="stable")
    weights = np.concatenate([w, model.weights[pos].astype(np.float64)])[order]
    if adaptive is not None:
        if model.adaptive is not None:
            g2r, nrmr = model.adaptive[0][pos], model.adaptive[1][pos]
        else:
            g2r = nrmr = np.zeros(len(rest))
        adaptive = (np.concatenate([adaptive[0], g2r])[order],
                    np.concatenate([adaptive[1], nrmr])[order], adaptive[2])
    return idx[order], weights, adaptive
