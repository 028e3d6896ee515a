"""VW's float32 arithmetic on Python floats, without numpy (a run that imports no numpy
rounds as ``np.float32`` does)."""

from __future__ import annotations

from array import array

__all__ = ["FLT_MAX", "f32"]

FLT_MAX = 3.4028234663852886e38  # float32's largest finite value

_ONE = array("f", [0.0])


def f32(v: float) -> float:
    """``float(np.float32(v))``: ``v`` rounded to the nearest float32 (C's cast: out of
    range, an infinity), as a Python float."""
    _ONE[0] = v
    return _ONE[0]
