"""Standardizing features for the batch phase, as a change of variables, never a data copy.

The batch optimizers minimize over ``v`` with raw-space weights ``w = A v``, where ``A``
divides each feature's weight by the feature's standard deviation and moves its mean into the
bias: ``w_j = v_j / s_j`` and ``w_bias = v_bias - sum_j m_j w_j``. Then ``X w`` is the
linear predictor of the standardized features ``(x_j - m_j) / s_j``, yet the data is never
touched: sparse rows stay sparse (a column's zeros need no ``-m_j / s_j`` stored), gradients
come back through the adjoint ``A^T``, and the model file keeps ``w`` (the scaling folded
into the weights and the bias), so prediction, evaluation and VW-style readable models need
nothing extra.

Two uses of the same map:

* **Preconditioning** (always, for ``--bfgs``/``--cg``): every feature, one-hot indicators
  included, is standardized, while the objective stays ``sum loss + l2/2 ||w||^2`` on the
  raw features. Raw columns on scales from 1e-3 to 1e5 make the raw Hessian's condition
  number ~1e14 and a diagonal scaling leaves the means (age ~40 beside its spread of 12):
  each such column is nearly parallel to the bias. Standardizing removes both (LeCun,
  Bottou, Orr & Müller, *Efficient BackProp*, 1998, sec. 4.3; Nocedal & Wright, *Numerical
  Optimization*, sec. 7.2 on scaling the initial inverse Hessian).
* **Normalization** (``normalize="std"``, automatic for CSV): the *objective* becomes the
  one on standardized numeric columns, ``sum loss + l2/2 ||u||^2`` with ``u`` the weights of
  the standardized numeric features (one-hot features as they are), the model that
  scikit-learn's ``StandardScaler`` + ``LogisticRegression(C=1/l2)`` fits. Numeric features
  are those with any value other than 1 (CSV numeric columns, VW ``name:value``).

Statistics are one pass over the training rows (importance-weighted sums of ``x`` and
``x^2`` per feature), summed over the workers by allreduce, so every rank builds the same
map. A feature that is constant, or absent from the training rows, is left unscaled.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from ._linalg import dot

__all__ = ["Reparam", "column_stats", "normalization_record", "standardizer"]

_VERSION = 1


@numba.njit(cache=True, nogil=True)
def column_stats(indptr: np.ndarray, cols: np.ndarray, values: np.ndarray,
                 labels: np.ndarray, weights: np.ndarray, holdout: np.ndarray,
                 out: np.ndarray) -> None:
    """Accumulate over the training rows (labelled, weight > 0, not held out):
    ``out[:d] += s x``, ``out[d:2d] += s x^2``, ``out[2d:3d] += 1`` where ``x != 1``, and
    ``out[3d] += s`` (the total weight); an empty ``values`` means all 1. ``out`` has
    ``3 d + 1`` entries; call it once per block of rows and allreduce-sum ``out`` over the
    workers."""
    d = (len(out) - 1) // 3
    unit = len(values) == 0
    for i in range(len(labels)):
        s = weights[i]
        if holdout[i] or s <= 0.0 or np.isnan(labels[i]):
            continue
        out[3 * d] += s
        for k in range(indptr[i], indptr[i + 1]):
            j = cols[k]
            x = 1.0 if unit else np.float64(values[k])
            out[j] += s * x
            out[d + j] += s * x * x
            if x != 1.0:
                out[2 * d + j] += 1.0


class Reparam:
    """``w = A v``: ``w_j = v_j / scale_j``, ``w_bias = v_bias - sum_j mean_j w_j``.

    ``bias`` is the index of the constant feature, or -1 (then nothing is centered). Only
    the features it changes (``sel``) are touched, and only theirs are kept (``mean`` and
    ``scale`` are rebuilt on demand): on one-hot data with millions of features the map
    costs nothing a feature, and a pass pays no full-length vector operation for it."""

    def __init__(self, mean: np.ndarray, scale: np.ndarray, bias: int) -> None:
        mean = np.asarray(mean, np.float64)
        scale = np.asarray(scale, np.float64)
        self.size = len(scale)
        self.bias = bias
        changed = (scale != 1.0) | (mean != 0.0) if bias >= 0 else scale != 1.0
        if bias >= 0:
            changed[bias] = False
        self.sel = np.flatnonzero(changed)
        self._m = mean[self.sel] if bias >= 0 else np.zeros(len(self.sel))
        self._s = scale[self.sel]

    @classmethod
    def identity(cls, d: int) -> Reparam:
        return cls.on(d, np.zeros(0, np.int64), np.zeros(0), np.ones(0), -1)

    @classmethod
    def on(cls, d: int, idx: np.ndarray, mean: np.ndarray, scale: np.ndarray,
           bias: int) -> Reparam:
        """The map over ``d`` features that changes the features ``idx`` alone (their
        ``mean`` and ``scale``; every other feature has mean 0 and scale 1)."""
        idx = np.asarray(idx, np.int64)
        mean = np.asarray(mean, np.float64)
        scale = np.asarray(scale, np.float64)
        keep = ((scale != 1.0) | (mean != 0.0)) & (idx != bias) if bias >= 0 \
            else scale != 1.0
        out = cls.__new__(cls)
        out.size, out.bias, out.sel = d, bias, idx[keep]
        out._m = mean[keep] if bias >= 0 else np.zeros(int(keep.sum()))
        out._s = scale[keep]
        return out

    @property
    def mean(self) -> np.ndarray:
        out = np.zeros(self.size)
        out[self.sel] = self._m
        return out

    @property
    def scale(self) -> np.ndarray:
        out = np.ones(self.size)
        out[self.sel] = self._s
        return out

    def forward(self, v: np.ndarray) -> np.ndarray:
        w = v.copy()
        self.to_raw(w)
        return w

    def to_raw(self, v: np.ndarray) -> tuple[np.ndarray, float] | None:
        """``v`` becomes ``A v`` in place (the same bits as :meth:`forward`); returns what
        :meth:`restore` needs to give ``v`` back bit for bit (the changed entries, a few on
        one-hot data): a pass reads the raw weights without a copy of the model."""
        if not len(self.sel):
            return None
        saved = v[self.sel]
        vb = float(v[self.bias]) if self.bias >= 0 else 0.0
        ws = saved / self._s
        v[self.sel] = ws
        if self.bias >= 0:
            v[self.bias] -= dot(self._m, ws)
        return saved, vb

    def restore(self, v: np.ndarray, saved: tuple[np.ndarray, float] | None) -> None:
        """Undo :meth:`to_raw` exactly."""
        if saved is None:
            return
        v[self.sel] = saved[0]
        if self.bias >= 0:
            v[self.bias] = saved[1]

    def adjoint(self, g: np.ndarray, *, inplace: bool = False) -> np.ndarray:
        """``A^T g``: a gradient with respect to ``w`` as one with respect to ``v`` (into
        ``g`` itself with ``inplace``)."""
        out = g if inplace else g.copy()
        if len(self.sel):
            gb = g[self.bias] if self.bias >= 0 else 0.0
            out[self.sel] = (g[self.sel] - gb * self._m) / self._s
        return out

    def inverse(self, w: np.ndarray, *, inplace: bool = False) -> np.ndarray:
        """``A^{-1} w`` (into ``w`` itself with ``inplace``)."""
        v = w if inplace else w.copy()
        if len(self.sel):
            ws = w[self.sel]
            if self.bias >= 0:
                v[self.bias] = w[self.bias] + dot(self._m, ws)
            v[self.sel] = ws * self._s
        return v

    def gram_diag(self) -> np.ndarray:
        """The diagonal of ``A^T A`` (what ``l2/2 ||A v||^2`` adds to the Hessian's)."""
        out = np.ones(self.size)
        out[self.sel] = self.gram_diag_changed()
        return out

    def gram_diag_changed(self) -> np.ndarray:
        """:meth:`gram_diag` at the changed features ``sel`` (it is 1 elsewhere)."""
        return (1.0 + self._m * self._m) / (self._s * self._s)


def _mean_scale(stats: np.ndarray, d: int, bias: int,
                idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean and deviation of the features ``idx`` (the numeric ones: a few on one-hot
    data, so nothing here is of the model's size)."""
    total = stats[3 * d]
    if total <= 0:
        return np.zeros(len(idx)), np.ones(len(idx))
    s1, s2 = stats[idx] / total, stats[d + idx] / total
    centered = bias >= 0
    mean = s1 if centered else np.zeros(len(idx))
    var = s2 - mean * mean
    # constant columns (collinear with the bias): scale only, by the root mean square
    flat = var <= 1e-9 * s2
    mean = np.where(flat, 0.0, mean)
    var = np.where(flat, s2, var)
    ok = s2 > 0
    return np.where(ok, mean, 0.0), np.where(ok, np.sqrt(np.where(ok, var, 1.0)), 1.0)


def standardizer(stats: np.ndarray, bias: int) -> tuple[Reparam, np.ndarray]:
    """(the map that standardizes the numeric features, their mask) from the
    allreduce-summed :func:`column_stats`. One-hot features (every value 1) are left as
    they are: scaling them by their frequency too converges faster on mixed tables but
    moves rare features fast early, and early-stopped runs on one-hot data then overfit
    (flights, test AUC 0.649 instead of 0.662)."""
    d = (len(stats) - 1) // 3
    numeric = stats[2 * d:3 * d] > 0
    if bias >= 0:
        numeric[bias] = False
    idx = np.flatnonzero(numeric)
    mean, scale = _mean_scale(stats, d, bias, idx)
    return Reparam.on(d, idx, mean, scale, bias), numeric


def normalization_record(norm: Reparam, numeric: np.ndarray, union: np.ndarray
                         ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(the model header's small versioned entry, the arrays stored beside the weights):
    which hashed features were standardized and by what mean and deviation. The stored
    weights already include the scaling; the record lets a reader map them back to the
    standardized weights the objective regularized (``u = A^{-1} w``)."""
    sel = np.flatnonzero(numeric)
    header: dict[str, Any] = {"version": _VERSION, "method": "std", "features": int(len(sel)),
              "centered": bool(norm.bias >= 0), "folded": True}
    arrays: dict[str, np.ndarray] = {"norm_indices": np.asarray(union)[sel].astype(np.uint32),
              "norm_mean": norm.mean[sel], "norm_std": norm.scale[sel]}
    return header, arrays
