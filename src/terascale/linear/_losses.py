"""Losses (value, first and second derivative, VW's importance-invariant update) for numba.

Labels are in {-1, +1} for logistic and hinge, real for squared. The invariant updates are
those of Karampatziakis & Langford, *Online Importance Weight Aware Updates* (UAI 2011), as
VW implements them (``getUpdate``): the closed form of integrating the gradient flow over
the importance weight, so that an example of weight h is the same as h copies.
"""

from __future__ import annotations

import math

import numba

__all__ = ["LOSSES", "d2loss", "dloss", "invariant_update", "loss_value"]

LOSSES = {"logistic": 0, "squared": 1, "hinge": 2}


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
def _wexpmx(x: float) -> float:
    """W(exp(x)) - x for the Lambert W function, VW's approximation (error < 9e-5)."""
    w = 0.86 * x + 0.01 if x >= 1.0 else math.exp(0.8 * x - 0.65)
    r = x - math.log(w) - w if x >= 1.0 else 0.2 * x + 0.65 - w
    t = 1.0 + w
    u = 2.0 * t * (t + 2.0 * r / 3.0)
    return w * (1.0 + r / t * (u - r) / (u - 2.0 * r)) - x


@numba.njit(cache=True, inline="always")
def invariant_update(kind: int, p: float, y: float, scale: float, ppu: float) -> float:
    """The step (to be multiplied by each feature's x * rate) for importance ``scale``."""
    if kind == 0:
        z = y * p
        d = math.exp(min(z, 50.0))
        if scale * ppu < 1e-6:
            return y * scale / (1.0 + d)
        x = scale * ppu + z + d
        return -(y * _wexpmx(x) + p) / ppu
    if kind == 1:
        if scale * ppu < 1e-6:
            return 2.0 * (y - p) * scale
        return (y - p) * (1.0 - math.exp(-2.0 * scale * ppu)) / ppu
    if y * p >= 1.0:
        return 0.0
    err = 1.0 - y * p
    return y * (scale if scale * ppu < err else err / ppu)
