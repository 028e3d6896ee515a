"""Losses (value, first and second derivative, VW's importance-invariant update) for numba.

Labels are in {-1, +1} for logistic and hinge, real for squared. The invariant updates are
those of Karampatziakis & Langford, *Online Importance Weight Aware Updates* (UAI 2011), as
VW implements them (``getUpdate``): the closed form of integrating the gradient flow over
the importance weight, so that an example of weight h is the same as h copies.

The ``*32`` functions and :func:`invariant_update` serve the online pass and reproduce VW's
``loss_functions.cc`` operation by operation in float32 (VW's ``float``), so that the pass is
VW's to the last bit where it can be; the batch phase uses the double versions. VW's own batch learner's float32 forms are
:mod:`._batchloss`'s (numpy, imported from here too).
"""

from __future__ import annotations

import math

import numba
import numpy as np

# The table and its codes are ``_losstable``'s (numba-free callers import it there), read
# here by the kernels below as module globals.
from ._batchloss import (
    batch_first32,
    batch_losses,
    batch_second32,
    batch_value32,
    vw_batch_losses,
)
from ._losstable import _BY_SIGN as _SIGN_ROW
from ._losstable import _CLIP as _CLIP_ROW
from ._losstable import (
    FIXED_RANGE,
    HEADER_RANGE,
    LOSS_TABLE,
    LOSSES,
    RAW_LABELS,
    VW_DEFAULT_LOSS,
    Loss,
    loss_code,
    loss_spec,
)

__all__ = ["FIXED_RANGE", "HEADER_RANGE", "LOSSES", "LOSS_TABLE", "RAW_LABELS", "VW_DEFAULT_LOSS", "Loss",
           "batch_first32", "batch_losses", "batch_second32", "batch_value32", "by_sign",
           "clip_mode", "clip_prediction", "d2loss", "dloss", "dloss32", "has_sgd_update",
           "invariant_update", "loss32", "loss_code", "loss_spec", "loss_value", "losses32",
           "ranged_loss32", "ranged_prediction",
           "sgd_update32", "square_grad32", "vw_batch_losses"]

# the table's rows by code as numpy arrays, which the kernels read as constants
_BY_SIGN = np.array(_SIGN_ROW, np.int64)
_CLIP = np.array(_CLIP_ROW, np.int64)


@numba.njit(cache=True, inline="always")
def _tau(kind: int) -> float:
    """Quantile's tau (expectile's q) from a loss code, as VW's float."""
    return _f(((kind & (FIXED_RANGE - 1)) >> 4) / 1e6)


@numba.njit(cache=True, inline="always")
def by_sign(kind: int) -> bool:
    """Whether the loss of ``kind`` reads labels as classes by their sign (its row's
    ``classes``); an unknown code raises."""
    s = _BY_SIGN[kind & 7]
    if s < 0:
        raise ValueError("unknown loss code")
    return s == 1


@numba.njit(cache=True, inline="always")
def clip_mode(kind: int) -> int:
    """How the online pass clips the predictions of ``kind``'s loss (its row's ``clip``:
    0 fixed [-50, 50], 1 the labels' range, 2 the labels' range widened to [-50, 50]); an
    unknown code raises."""
    c = _CLIP[kind & 7]
    if c < 0:
        raise ValueError("unknown loss code")
    return c


@numba.njit(cache=True, inline="always")
def clip_prediction(mode: int, p: float, lo: float, hi: float) -> float:
    """A prediction clipped as :func:`clip_mode` says, to the labels' range [lo, hi], in
    VW's order: above ``hi`` gives ``hi``, else below ``lo`` gives ``lo`` (a range with
    ``lo > hi``, ``--min_prediction`` over the other bound, clips everything to one)."""
    if mode == 0:
        return min(max(p, -50.0), 50.0)
    if mode == 2:
        return min(max(p, min(lo, -50.0)), max(hi, 50.0))
    return hi if p > hi else lo if p < lo else p


@numba.njit(cache=True, inline="always")
def loss_value(kind: int, p: float, y: float) -> float:
    if kind == 0:
        z = -y * p
        return z + math.log1p(math.exp(-z)) if z > 0 else math.log1p(math.exp(z))
    if kind == 1:
        return (p - y) * (p - y)
    if kind == 2:
        m = 1.0 - y * p
        return m if m > 0 else 0.0
    raise ValueError("loss code without a batch form")


@numba.njit(cache=True, inline="always")
def dloss(kind: int, p: float, y: float) -> float:
    if kind == 0:
        z = y * p
        if z > 0:
            e = math.exp(-z)
            return -y * e / (1.0 + e)
        return -y / (1.0 + math.exp(z))
    if kind == 1:
        return 2.0 * (p - y)
    if kind == 2:
        return -y if y * p < 1.0 else 0.0
    raise ValueError("loss code without a batch form")


@numba.njit(cache=True, inline="always")
def d2loss(kind: int, p: float, y: float) -> float:
    if kind == 0:
        e = math.exp(-abs(p))
        return e / ((1.0 + e) * (1.0 + e))
    if kind == 1:
        return 2.0
    if kind == 2:
        return 0.0
    raise ValueError("loss code without a batch form")


@numba.njit(cache=True, inline="always")
def _f(x: float) -> float:
    """Round to float32: VW's learner computes in ``float``, and a double operation on
    floats rounded once to float is the float operation's exact result (+ - * / sqrt)."""
    return float(np.float32(x))


@numba.njit(cache=True, inline="always")
def _wexpmx(x: float) -> float:
    """W(exp(x)) - x for the Lambert W function, VW's approximation (error < 9e-5), in
    double as VW computes it, rounded to float."""
    w = 0.86 * x + 0.01 if x >= 1.0 else math.exp(0.8 * x - 0.65)
    r = x - math.log(w) - w if x >= 1.0 else 0.2 * x + 0.65 - w
    t = 1.0 + w
    u = 2.0 * t * (t + 2.0 * r / 3.0)
    return _f(w * (1.0 + r / t * (u - r) / (u - 2.0 * r)) - x)


@numba.njit(cache=True, inline="always")
def _expf(x: float) -> float:
    return _f(math.exp(x)) if x < 88.8 else math.inf


@numba.njit(cache=True, inline="always")
def _pexp(c: float) -> float:
    """VW's poisson ``exp`` of a (clamped) score: C's ``expf`` of the float, as VW's
    ``std::exp(float)`` (numba's ``math.exp`` of a float32 calls it); the double ``exp``
    rounded to float is another number once in about 2000 scores."""
    return float(math.exp(np.float32(c))) if c < 88.8 else math.inf


@numba.njit(cache=True, inline="always")
def _f32call(x: float, k: int) -> float:
    """C's float ``log1pf`` (k 0), ``expm1f`` (1), ``logf`` (2) of ``x`` as a float: VW's
    ``std::log1p``/``std::expm1``/``std::log`` of a float (numba calls them on a float32);
    not the double functions rounded, which differ in the last bit (``expm1f`` on about 1 in
    10 arguments)."""
    v = np.float32(x)
    return float(math.log1p(v) if k == 0 else math.expm1(v) if k == 1 else math.log(v))


@numba.njit(cache=True, inline="always")
def _pclamp(p: float) -> float:
    """VW's poisson clamp of a score to [-44, 44] (exp(44)^2 still fits a float)."""
    return min(max(p, -44.0), 44.0)


@numba.njit(cache=True, inline="always")
def _soft(y: float) -> float:
    """VW's logistic reading of a label y in [-1, 1]: the weight (y + 1) / 2 of class +1."""
    return _f(_f(y + 1.0) / 2.0)


@numba.njit(cache=True, inline="always")
def _mix(y: float, a: float, b: float) -> float:
    """VW's soft-label logistic: std * (term for +1) + (1 - std) * (term for -1)."""
    t = _soft(y)
    return _f(_f(t * a) + _f(_f(1.0 - t) * b))


@numba.njit(cache=True, inline="always")
def _logloss32(p: float, y: float) -> float:
    return _f(math.log(_f(1.0 + _expf(_f(-y * p)))))


@numba.njit(cache=True, inline="always")
def ranged_loss32(kind: int, p: float, y: float, lo: float, hi: float) -> float:
    """:func:`loss32` of a prediction clipped to the range [lo, hi], as VW's squared (and
    classic) ``get_loss`` takes it: past a bound (only a range with ``lo > hi`` leaves a
    clipped prediction there), the bound's loss plus its slope on to the prediction, 0
    where the label is that bound."""
    k = kind & 7
    if (k != 1 and k != 4) or (lo <= p <= hi):
        return loss32(kind, p, y)
    if p < lo:
        if y == lo:
            return 0.0
        a = _f(y - lo)
        return _f(_f(a * a) + 2.0 * a * _f(lo - p))
    if y == hi:
        return 0.0
    a = _f(hi - y)
    return _f(_f(a * a) + 2.0 * a * _f(p - hi))


@numba.njit(cache=True, inline="always")
def ranged_prediction(kind: int, p: float, lo: float, hi: float) -> float:
    """The prediction VW's squared (and classic) ``first_derivative`` takes (the lazy
    L1/L2's): below ``lo`` gives ``lo``, else above ``hi`` gives ``hi``; other losses' as
    it is."""
    k = kind & 7
    if k != 1 and k != 4:
        return p
    return lo if p < lo else hi if p > hi else p


@numba.njit(cache=True, inline="always")
def loss32(kind: int, p: float, y: float) -> float:
    """VW's ``get_loss`` in float: logistic underflows to exactly 0 once y*p > ~16.6
    (1 + exp(-16.6) rounds to 1 in float), and VW then skips the update."""
    k = kind & 7
    if k == 0:
        if y == 1.0 or y == -1.0:
            return _logloss32(p, y)
        return _mix(y, _logloss32(p, 1.0), _logloss32(p, -1.0))
    if k == 1 or k == 4:
        d = _f(p - y)
        return _f(d * d)
    if k == 2:
        m = _f(1.0 - _f(y * p))
        return m if m > 0 else 0.0
    if k == 3:
        tau = _tau(kind)
        e = _f(y - p)
        return _f(tau * e) if e > 0 else _f(_f(-_f(1.0 - tau)) * e)
    if k == 6:
        d = _f(p - y)
        return _f(_f(d * d) * _expectile_weight(kind, p, y))
    if k == 5:  # the deviance
        c = _pclamp(p)
        # (a label below 0: C's logf gives a NaN with its sign bit set, which VW prints
        # -nan and never learns from)
        t = (_f(y * _f(_f32call(_f(y + _f(1e-6)), 2) - c)) if y + 1e-6 > 0
             else math.copysign(math.nan, -1.0))
        return _f(2.0 * _f(t - _f(y - _pexp(c))))
    raise ValueError("unknown loss code")


@numba.njit(cache=True, inline="always")
def dloss32(kind: int, p: float, y: float) -> float:
    """VW's ``first_derivative`` in float."""
    k = kind & 7
    if k == 0:
        if y == 1.0 or y == -1.0:
            return _f(-y / _f(1.0 + _expf(_f(y * p))))
        return _mix(y, _f(-1.0 / _f(1.0 + _expf(p))), _f(1.0 / _f(1.0 + _expf(-p))))
    if k == 1 or k == 4:
        return _f(2.0 * _f(p - y))
    if k == 2:
        return -y if _f(y * p) < 1.0 else 0.0
    if k == 3:
        e = _f(y - p)
        if e == 0.0:
            return 0.0
        return -_tau(kind) if e > 0 else _f(1.0 - _tau(kind))
    if k == 5:
        return _f(_pexp(_pclamp(p)) - y)
    if k == 6:
        return _f(_f(2.0 * _f(p - y)) * _expectile_weight(kind, p, y))
    raise ValueError("unknown loss code")


@numba.njit(cache=True)
def losses32(kind: int, p: np.ndarray, y: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Each example's :func:`ranged_loss32` in the range [lo, hi] the predictions were
    clipped to (-inf, inf where they were not; labels read by their sign where the loss
    reads classes, unless ``kind`` has RAW_LABELS: VW's reading), for a test pass's
    average loss."""
    out = np.empty(len(p))
    sign = by_sign(kind & ~(RAW_LABELS | FIXED_RANGE)) and not kind & RAW_LABELS
    for i in range(len(p)):
        yi = (1.0 if y[i] > 0 else -1.0) if sign else y[i]
        out[i] = ranged_loss32(kind, p[i], yi, lo, hi)
    return out


@numba.njit(cache=True, inline="always")
def square_grad32(kind: int, p: float, y: float) -> float:
    """VW's ``get_square_grad`` in float."""
    k = kind & 7
    if k == 1 or k == 4:
        d = _f(p - y)
        return _f(_f(4.0 * d) * d)
    if k == 6:  # squared's, times the weight squared (not the square of dloss32)
        d = _f(p - y)
        v = _expectile_weight(kind, p, y)
        return _f(_f(_f(4.0 * d) * d) * _f(v * v))
    g = dloss32(kind, p, y)
    return _f(g * g)


@numba.njit(cache=True, inline="always")
def invariant_update(kind: int, p: float, y: float, scale: float, ppu: float) -> float:
    """VW's ``get_update`` in float: the step (to be multiplied by each feature's x * rate)
    for importance-scaled learning rate ``scale`` and ``ppu`` = sum of x^2 * rate."""
    sp = _f(scale * ppu)
    k = kind & 7
    if k == 0:
        if y == 1.0 or y == -1.0:
            return _logistic_update(p, y, scale, ppu, sp)
        return _mix(y, _logistic_update(p, 1.0, scale, ppu, sp),
                    _logistic_update(p, -1.0, scale, ppu, sp))
    if k == 3:
        return _quantile_update(p, y, scale, ppu, sp, _tau(kind))
    if k == 4:  # classic: plain SGD's step
        return _f(_f(2.0 * _f(y - p)) * scale)
    if k == 5:  # poisson, with VW's guards against overflow
        c = _pclamp(p)
        ep = _pexp(c)
        if y > 0:
            a = _f(_f(y * scale) * ppu)
            if a > 44.0:
                return _f(-_f(c - _f32call(y, 2)) / ppu)
            e = _f32call(a, 1) if a < 88.7 else math.inf
            return _f(_f(y * scale) - _f(_f32call(_f(_f(ep * e) / y), 0) / ppu))
        inner = _f(_f(ep * scale) * ppu)
        if not math.isfinite(inner):
            return _f(-_f(c + _f32call(_f(scale * ppu), 2)) / ppu)
        return _f(-_f32call(inner, 0) / ppu)
    if k == 6:  # squared's step at the scale weighted by the side of the label
        scale = _f(_expectile_weight(kind, p, y) * scale)
        sp = _f(scale * ppu)
        k = 1
    if k == 1:
        if sp < 1e-6:
            return _f(_f(2.0 * _f(y - p)) * scale)
        e = _expf(_f(_f(-2.0 * scale) * ppu))
        return _f(_f(_f(y - p) * _f(1.0 - e)) / ppu)
    if k != 2:
        raise ValueError("unknown loss code")
    if _f(y * p) >= 1.0:
        return 0.0
    err = _f(1.0 - _f(y * p))
    return _f(y * (scale if sp < err else _f(err / ppu)))  # (a float: labels not +-1)


@numba.njit(cache=True, inline="always")
def _expectile_weight(kind: int, p: float, y: float) -> float:
    """Expectile's weight of squared loss at prediction ``p``, label ``y``: q where the
    prediction is above the label, 1 - q elsewhere (q at most 0.5: the larger weight is on
    labels above the prediction), in float."""
    q = _tau(kind)
    return q if _f(y - p) < 0 else _f(1.0 - q)


@numba.njit(cache=True, inline="always")
def _logistic_update(p: float, y: float, scale: float, ppu: float, sp: float) -> float:
    """VW's logistic ``get_update`` for a label of -1 or +1, in float."""
    z = _f(y * p)
    d = _expf(z)
    if sp < 1e-6:  # first order: avoids the cancellation of the closed form
        return _f(_f(y * scale) / _f(1.0 + d))
    x = _f(_f(sp + z) + d)
    return _f(-_f(_f(y * _wexpmx(x)) + p) / ppu)


@numba.njit(cache=True, inline="always")
def _quantile_update(p: float, y: float, scale: float, ppu: float, sp: float,
                     tau: float) -> float:
    """VW's quantile ``get_update`` in float (Koenker's pinball loss at quantile tau)."""
    err = _f(y - p)
    if err == 0.0:
        return 0.0
    if err > 0:
        return _f(tau * scale) if _f(tau * sp) < err else _f(err / ppu)
    normal = _f(_f(-_f(1.0 - tau)) * sp)
    return _f(_f(tau - 1.0) * scale) if normal > err else _f(err / ppu)


# --- The form of VW's own learners that ``terascale vw`` runs beside terascale's: plain
# SGD's step (``--sgd``, ``--adaptive``/``--normalized`` without ``--invariant``), in Python
# on numpy's float32, VW's float (the batch forms of ``--bfgs``/``--conjugate_gradient``
# are ``_batchloss``'s).

def sgd_update32(kind: int, p: float, y: float, scale: float) -> float:
    """VW's ``get_unsafe_update`` in float: plain SGD's step (no importance invariance) for
    an importance-scaled learning rate ``scale``; a loss without one raises ValueError
    (:func:`has_sgd_update` asks first)."""
    f = np.float32
    k = kind & 7
    if k == 1 or k == 4:
        return float(f(f(2.0 * f(y - p)) * f(scale)))
    if k == 2:
        return float(f(y * scale)) if f(y * p) < 1 else 0.0
    if k == 0:  # VW's soft label in [-1, 1]
        st = f(f(y + 1) / f(2))
        # (C's expf, as the online kernel's: numpy's float32 exp differs in the last bit)
        a = f(f(1.0 * scale) / f(1 + f(_expf(f(p)))))
        b = f(f(-1.0 * scale) / f(1 + f(_expf(f(-p)))))
        return float(f(f(st * a) + f(f(1 - st) * b)))
    if k == 5:
        return float(f(-f(dloss32(kind, float(p), float(y))) * scale))
    if k == 6:
        s = f(f(_expectile_weight(kind, float(p), float(y))) * f(scale))
        return float(f(f(2.0 * f(y - p)) * s))
    raise ValueError("loss code without a plain SGD step")


def has_sgd_update(name: str) -> bool:
    """Whether loss ``name`` has :func:`sgd_update32` (else VW's rules without
    ``--invariant`` cannot train it here)."""
    try:
        sgd_update32(LOSSES[name], 0.0, 1.0, 1.0)
    except ValueError:
        return False
    return True
