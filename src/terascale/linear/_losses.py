"""Losses (value, first and second derivative, VW's importance-invariant update) for numba.

Labels are in {-1, +1} for logistic and hinge, real for squared. The invariant updates are
those of Karampatziakis & Langford, *Online Importance Weight Aware Updates* (UAI 2011), as
VW implements them (``getUpdate``): the closed form of integrating the gradient flow over
the importance weight, so that an example of weight h is the same as h copies.

The ``*32`` functions and :func:`invariant_update` serve the online pass and reproduce VW's
``loss_functions.cc`` operation by operation in float32 (VW's ``float``), so that the pass is
VW's to the last bit where it can be; the batch phase uses the double versions.
"""

from __future__ import annotations

import math

import numba
import numpy as np

__all__ = ["LOSSES", "RAW_LABELS", "d2loss", "dloss", "dloss32", "invariant_update", "loss32", "loss_value",
           "square_grad32"]

LOSSES = {"logistic": 0, "squared": 1, "hinge": 2}
# added to a loss code for the online pass: labels are used as given (VW's reading: a
# logistic label in [-1, 1] is the soft label (y + 1) / 2, hinge takes y as it is), not
# mapped to their sign (terascale linear train's reading: 0/1 labels are two classes)
RAW_LABELS = 8


@numba.njit(cache=True, inline="always")
def loss_value(kind: int, p: float, y: float) -> float:
    if kind == 0:
        z = -y * p
        return z + math.log1p(math.exp(-z)) if z > 0 else math.log1p(math.exp(z))
    if kind == 1:
        return (p - y) * (p - y)
    m = 1.0 - y * p
    return m if m > 0 else 0.0


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
    return -y if y * p < 1.0 else 0.0


@numba.njit(cache=True, inline="always")
def d2loss(kind: int, p: float, y: float) -> float:
    if kind == 0:
        e = math.exp(-abs(p))
        return e / ((1.0 + e) * (1.0 + e))
    if kind == 1:
        return 2.0
    return 0.0


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
def loss32(kind: int, p: float, y: float) -> float:
    """VW's ``get_loss`` in float: logistic underflows to exactly 0 once y*p > ~16.6
    (1 + exp(-16.6) rounds to 1 in float), and VW then skips the update."""
    if kind == 0:
        if y == 1.0 or y == -1.0:
            return _logloss32(p, y)
        return _mix(y, _logloss32(p, 1.0), _logloss32(p, -1.0))
    if kind == 1:
        d = _f(p - y)
        return _f(d * d)
    m = _f(1.0 - _f(y * p))
    return m if m > 0 else 0.0


@numba.njit(cache=True, inline="always")
def dloss32(kind: int, p: float, y: float) -> float:
    """VW's ``first_derivative`` in float."""
    if kind == 0:
        if y == 1.0 or y == -1.0:
            return _f(-y / _f(1.0 + _expf(_f(y * p))))
        return _mix(y, _f(-1.0 / _f(1.0 + _expf(p))), _f(1.0 / _f(1.0 + _expf(-p))))
    if kind == 1:
        return _f(2.0 * _f(p - y))
    return -y if _f(y * p) < 1.0 else 0.0


@numba.njit(cache=True, inline="always")
def square_grad32(kind: int, p: float, y: float) -> float:
    """VW's ``get_square_grad`` in float."""
    if kind == 1:
        d = _f(p - y)
        return _f(_f(4.0 * d) * d)
    g = dloss32(kind, p, y)
    return _f(g * g)


@numba.njit(cache=True, inline="always")
def invariant_update(kind: int, p: float, y: float, scale: float, ppu: float) -> float:
    """VW's ``get_update`` in float: the step (to be multiplied by each feature's x * rate)
    for importance-scaled learning rate ``scale`` and ``ppu`` = sum of x^2 * rate."""
    sp = _f(scale * ppu)
    if kind == 0:
        if y == 1.0 or y == -1.0:
            return _logistic_update(p, y, scale, ppu, sp)
        return _mix(y, _logistic_update(p, 1.0, scale, ppu, sp),
                    _logistic_update(p, -1.0, scale, ppu, sp))
    if kind == 1:
        if sp < 1e-6:
            return _f(_f(2.0 * _f(y - p)) * scale)
        e = _expf(_f(_f(-2.0 * scale) * ppu))
        return _f(_f(_f(y - p) * _f(1.0 - e)) / ppu)
    if _f(y * p) >= 1.0:
        return 0.0
    err = _f(1.0 - _f(y * p))
    return y * (scale if sp < err else _f(err / ppu))


@numba.njit(cache=True, inline="always")
def _logistic_update(p: float, y: float, scale: float, ppu: float, sp: float) -> float:
    """VW's logistic ``get_update`` for a label of -1 or +1, in float."""
    z = _f(y * p)
    d = _expf(z)
    if sp < 1e-6:  # first order: avoids the cancellation of the closed form
        return _f(_f(y * scale) / _f(1.0 + d))
    x = _f(_f(sp + z) + d)
    return _f(-_f(_f(y * _wexpmx(x)) + p) / ppu)
