"""VW's float32 arithmetic on Python floats, without numpy (a run that imports no numpy
rounds as ``np.float32`` does)."""

from __future__ import annotations

import math
import struct

__all__ = ["FLT_MAX", "f32"]

FLT_MAX = 3.4028234663852886e38  # float32's largest finite value
_F = struct.Struct("f")


def f32(v: float) -> float:
    """``float(np.float32(v))``: ``v`` rounded to the nearest float32 (C's cast: past the
    largest, an infinity), as a Python float."""
    try:
        return _F.unpack(_F.pack(v))[0]
    except OverflowError:  # (struct refuses a finite value the cast makes infinite)
        return math.copysign(math.inf, v)
