"""The batch forms of VW's own batch learner (``terascale vw --bfgs``/``--conjugate_gradient``):
each loss's value, first and second derivative on float32 arrays of predictions and labels,
in numpy, as VW's ``loss_functions.cc`` computes them in float (numpy's float32 operations
are VW's; ``exp`` and ``log`` are C's, through double).

The rest of each loss's definition (its row, its online and double kernels) is
:mod:`._losstable` and :mod:`._losses`, which re-exports these names; apart so that the
batch learner, which runs no numba kernel, imports no numba.
"""

from __future__ import annotations

import numpy as np

from ._losstable import FIXED_RANGE, LOSS_TABLE, LOSSES

__all__ = ["batch_first32", "batch_losses", "batch_second32", "batch_value32",
           "vw_batch_losses"]


def batch_losses() -> list[str]:
    """The losses with a batch form (L-BFGS/CG take them), in the table's order."""
    return [name for name, loss in LOSS_TABLE.items() if loss.batch]


def vw_batch_losses() -> list[str]:
    """The losses with float32 batch forms (:func:`batch_value32`: VW's own batch learner,
    ``terascale vw --bfgs``/``--conjugate_gradient``, takes them), in the table's order:
    the batch forms and expectile (squared's forms weighted by the side of the label)."""
    one = np.zeros(1, np.float32)
    out = []
    for name, code in LOSSES.items():
        try:
            batch_value32(code, one, one, one, one)
        except ValueError:
            continue
        out.append(name)
    return out


def _side_weight32(kind: int, p: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Expectile's weight of each example in float32 (VW's): q where the prediction is
    above the label, 1 - q elsewhere, q from the code's bits."""
    q = np.float32(((kind & (FIXED_RANGE - 1)) >> 4) / 1e6)
    return np.where((y - p).astype(np.float32) < 0, q, np.float32(1) - q)


def batch_value32(kind: int, p: np.ndarray, y: np.ndarray, lo: np.ndarray,
                  hi: np.ndarray) -> np.ndarray:
    """VW's ``getLoss`` on float32 arrays of predictions ``p`` and labels ``y`` (a logistic
    label in [-1, 1] is a soft label), with VW's prediction range ``[lo, hi]`` where the
    loss uses it (squared: linear outside it): the loss ``--bfgs`` sums; expectile's
    is squared's times :func:`_side_weight32`, as VW's."""
    f = np.float32
    k = kind & 7
    if k == 6:
        return (batch_value32(1, p, y, lo, hi) * _side_weight32(kind, p, y)).astype(f)
    with np.errstate(over="ignore", invalid="ignore"):
        if k == 1:
            inside = (p <= hi) & (p >= lo)
            d = p - y
            below = np.where(y == lo, f(0), ((y - lo) * (y - lo)).astype(np.float64)
                             + 2.0 * (y - lo).astype(np.float64) * (lo - p)).astype(f)
            above = np.where(y == hi, f(0), ((hi - y) * (hi - y)).astype(np.float64)
                             + 2.0 * (hi - y).astype(np.float64) * (p - hi)).astype(f)
            return np.where(inside, d * d, np.where(p < lo, below, above)).astype(f)
        if k == 0:
            return _soft_label(y, _log32(f(1) + _exp32(-p)), _log32(f(1) + _exp32(p)))
        if k == 2:
            e = f(1) - y * p
            return np.where(e > 0, e, f(0)).astype(f)
    raise ValueError("loss code without a batch form")


def batch_first32(kind: int, p: np.ndarray, y: np.ndarray, lo: np.ndarray,
                  hi: np.ndarray) -> np.ndarray:
    """VW's ``first_derivative`` on float32 arrays (as :func:`batch_value32`)."""
    f = np.float32
    k = kind & 7
    if k == 6:
        return (batch_first32(1, p, y, lo, hi) * _side_weight32(kind, p, y)).astype(f)
    with np.errstate(over="ignore", invalid="ignore"):
        if k == 1:
            return (f(2) * (np.clip(p, lo, hi) - y)).astype(f)
        if k == 0:
            return _soft_label(y, (f(-1) / (f(1) + _exp32(p))).astype(f),
                               (f(1) / (f(1) + _exp32(-p))).astype(f))
        if k == 2:
            return np.where(y * p >= 1, f(0), -y).astype(f)
    raise ValueError("loss code without a batch form")


def batch_second32(kind: int, p: np.ndarray, y: np.ndarray, lo: np.ndarray,
                   hi: np.ndarray) -> np.ndarray:
    """VW's ``second_derivative`` on float32 arrays (as :func:`batch_value32`)."""
    f = np.float32
    k = kind & 7
    if k == 6:
        return (batch_second32(1, p, y, lo, hi) * _side_weight32(kind, p, y)).astype(f)
    with np.errstate(over="ignore", invalid="ignore"):
        if k == 1:
            return np.where((p <= hi) & (p >= lo), f(2), f(0)).astype(f)
        if k == 0:
            q = (f(1) / (f(1) + _exp32(p))).astype(f)
            r = (f(1) / (f(1) + _exp32(-p))).astype(f)
            return _soft_label(y, q * (f(1) - q), r * (f(1) - r))
        if k == 2:
            return np.zeros_like(p, dtype=f)
    raise ValueError("loss code without a batch form")


def _exp32(x: np.ndarray) -> np.ndarray:
    """C's ``expf`` of float32 values as VW's build (glibc) computes it: the double
    exponential rounded to float32, which is glibc's result but in rare halfway cases;
    numpy's own float32 ``exp`` (its SIMD loop) differs from it in the last bit on many
    values, which an L-BFGS run amplifies into its sixth digit."""
    return np.exp(np.asarray(x, np.float64)).astype(np.float32)


def _log32(x: np.ndarray) -> np.ndarray:
    """C's ``logf`` of float32 values, as :func:`_exp32`."""
    return np.log(np.asarray(x, np.float64)).astype(np.float32)


def _soft_label(y: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """VW's logistic on a label y in [-1, 1]: t * (term for +1) + (1 - t) * (term for -1),
    t = (y + 1) / 2."""
    f = np.float32
    t = ((y - f(-1)) / f(2)).astype(f)
    return (t * a + (f(1) - t) * b).astype(f)
