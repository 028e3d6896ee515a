"""Numbers in VW text read exactly as VW reads them (its ``parse_float``), for numba.

VW does not use ``strtof`` for the common forms: it accumulates the digits in a float
(``acc = acc * 10 + digit``, rounding at every step), counts at most 35 decimals and scales
by a float power of ten from a table built by repeated float multiplication or division.
For long mantissas and for many exponents that is not the correctly rounded float, and a
learner that must agree with VW to float rounding has to see the very same values. Forms
VW hands to ``strtof`` (a ``+`` sign, an exponent with ``+``, ``inf``...) are parsed
correctly rounded here too.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["parse_float", "parse_float32", "read_float32"]

_POW10 = np.array([10.0 ** k for k in range(23)])  # exactly representable in a double


@numba.njit(cache=True, inline="always")
def parse_float(buf: np.ndarray, s: int, e: int) -> tuple[float, bool]:
    """A decimal float (sign, digits, fraction, exponent) from ``buf[s:e]``; (value, ok)."""
    if s >= e:
        return 0.0, False
    i = s
    neg = False
    if buf[i] == 45 or buf[i] == 43:  # - +
        neg = buf[i] == 45
        i += 1
    mant = 0.0
    nd = 0
    while i < e and 48 <= buf[i] <= 57:
        mant = mant * 10.0 + (buf[i] - 48)
        i += 1
        nd += 1
    exp10 = 0
    if i < e and buf[i] == 46:  # .
        i += 1
        while i < e and 48 <= buf[i] <= 57:
            mant = mant * 10.0 + (buf[i] - 48)
            exp10 -= 1
            i += 1
            nd += 1
    if nd == 0:
        return 0.0, False
    if i < e and (buf[i] == 101 or buf[i] == 69):  # e E
        i += 1
        eneg = False
        if i < e and (buf[i] == 45 or buf[i] == 43):
            eneg = buf[i] == 45
            i += 1
        ed = 0
        ev = 0
        while i < e and 48 <= buf[i] <= 57:
            ev = ev * 10 + (buf[i] - 48)
            i += 1
            ed += 1
        if ed == 0:
            return 0.0, False
        exp10 += -ev if eneg else ev
    if i != e:
        return 0.0, False
    if -23 < exp10 < 0:
        v = mant / _POW10[-exp10]  # exact powers: the same double as strtod for short inputs
    elif 0 <= exp10 < 23:
        v = mant * _POW10[exp10]
    elif exp10 < 0:
        v = mant / 10.0 ** (-exp10)
    else:
        v = mant * 10.0 ** exp10
    if not v <= 3.4028234663852886e38:  # inf in the float32 arrays, then NaN weights
        return 0.0, False
    return (-v if neg else v), True


def _tables() -> tuple[np.ndarray, np.ndarray]:
    ten = np.float32(10.0)
    pos = [np.float32(1.0)]
    for _ in range(38):  # FLT_MAX_10_EXP
        pos.append(np.float32(ten * pos[-1]))
    neg = [np.float32(1.0)]
    for _ in range(37):  # -FLT_MIN_10_EXP
        neg.append(np.float32(neg[-1] / ten))
    with np.errstate(over="ignore"):
        return np.array(pos, np.float32), np.array(neg, np.float32)


_POS10, _NEG10 = _tables()


@numba.njit(cache=True, inline="always")
def _is_digit(c: int) -> bool:
    return 48 <= c <= 57


@numba.njit(cache=True, inline="always")
def _mantissa(buf: np.ndarray, i: int, e: int) -> tuple[np.float32, int, int, int]:
    """VW's mantissa loop from ``buf[i]``: digits, then ``.`` and at most 35 counted
    decimals, in float32 as VW accumulates them; (value, next index, digits, decimals).

    The digits are summed in an integer first: while every partial sum (plus the byte
    VW adds before subtracting '0') stays below 2**24, each float32 step of VW's loop is
    exact, so the float of the integer is bitwise VW's value; only longer mantissas
    replay VW's rounding loop. (An integer multiply-add per digit instead of a chain of
    three dependent float operations: the parser's common case.)"""
    s = i
    iacc = 0
    nd = 0
    while i < e and _is_digit(buf[i]):
        iacc = iacc * 10 + (buf[i] - 48)
        i += 1
        nd += 1
    num_dec = 0
    if i < e and buf[i] == 46:  # '.'
        i += 1
        while i < e and _is_digit(buf[i]):
            if num_dec < 35:
                iacc = iacc * 10 + (buf[i] - 48)
                num_dec += 1
            i += 1
            nd += 1
    if nd <= 15 and iacc < 16777160:  # every partial sum + 57 (VW's '9' byte) < 2**24
        return np.float32(iacc), i, nd, num_dec
    acc = np.float32(0.0)  # VW's float loop, rounding at every step
    j = s
    while j < e and _is_digit(buf[j]):
        acc = np.float32(np.float32(acc * np.float32(10.0)) + np.float32(buf[j])) - np.float32(48.0)
        j += 1
    dec = 0
    if j < e and buf[j] == 46:
        j += 1
        while j < e and _is_digit(buf[j]):
            if dec < 35:
                acc = np.float32(acc * np.float32(10.0)) + np.float32(buf[j] - 48)
                dec += 1
            j += 1
    return acc, i, nd, num_dec


@numba.njit(cache=True)
def parse_float32(buf: np.ndarray, s: int, e: int) -> tuple[float, bool]:
    """The float VW reads from ``buf[s:e]`` (a whole token); (value, ok)."""
    if s >= e:
        return 0.0, False
    i = s
    neg = False
    if buf[i] == 45:  # '-'
        neg = True
        i += 1
    acc, i, nd, num_dec = _mantissa(buf, i, e)
    exp_acc = 0
    easy = nd > 0
    if easy and i < e and (buf[i] == 101 or buf[i] == 69):  # e E
        i += 1
        eneg = False
        if i < e and buf[i] == 45:
            eneg = True
            i += 1
        ed = 0
        while i < e and _is_digit(buf[i]):
            exp_acc = exp_acc * 10 + (buf[i] - 48)
            if exp_acc > 100000:
                exp_acc = 100000
            i += 1
            ed += 1
        if ed == 0:
            easy = False
        if eneg:
            exp_acc = -exp_acc
    x = exp_acc - num_dec
    # VW casts the exponent to int8_t; beyond that range it reads nonsense (1e400 as 1e-112)
    # where the correctly rounded value (or the overflow error) is what a user means
    if easy and i == e and -128 <= x <= 127:
        if x > 38:
            p = np.float32(np.inf)
        elif x < -37:
            p = np.float32(0.0)
        elif x >= 0:
            p = _POS10[x]
        else:
            p = _NEG10[-x]
        v = np.float32(acc * p)
        if not abs(v) <= 3.4028234663852886e38:
            return 0.0, False
        return (-float(v) if neg else float(v)), True
    v64, ok = parse_float(buf, s, e)  # VW's strtof: correctly rounded
    if not ok:
        return 0.0, False
    v32 = np.float32(v64)
    if not abs(v32) <= 3.4028234663852886e38:
        return 0.0, False
    return float(v32), True


@numba.njit(cache=True, inline="always")
def read_float32(buf: np.ndarray, s: int, e: int) -> tuple[float, bool]:
    """:func:`parse_float32` with its common case inlined into the parser's loops: a
    plain ``[-]digits[.digits]`` token is read here by the very same float operations, and
    anything else (an exponent, ``+``, ``inf``, an overflow, an error) goes to the general
    function. The general one inlined would be ~4x the code on the hot path, slowing the
    parser, for a case that click and tabular data rarely have."""
    i = s
    neg = False
    if i < e and buf[i] == 45:  # '-'
        neg = True
        i += 1
    acc, i, nd, num_dec = _mantissa(buf, i, e)
    if i == e and nd > 0:
        v = np.float32(acc * _NEG10[num_dec])  # as parse_float32 with no exponent
        if abs(v) <= 3.4028234663852886e38:
            return (-float(v) if neg else float(v)), True
    return parse_float32(buf, s, e)
