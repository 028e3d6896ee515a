"""Numbers read bitwise as VW reads them: the parser's fast paths against VW's float loop.

The reference below is VW's ``parse_float`` for ``[-]digits[.digits]`` written out step
by step in float32 (accumulate ``acc * 10 + digit`` rounding at every step, at most 35
decimals counted, then one multiply by the float power of ten), with none of the shortcuts
of :mod:`terascale.linear._vw._vwfloat`.
"""

from __future__ import annotations

import numpy as np
import pytest

from terascale.linear._vw._vwfloat import _NEG10, parse_float32, read_float32

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies


def vw_reference(text: str) -> np.float32:
    with np.errstate(over="ignore"):
        return _reference(text)


def _reference(text: str) -> np.float32:
    f32 = np.float32
    neg = text.startswith("-")
    body = text[1:] if neg else text
    whole, _, frac = body.partition(".")
    acc = f32(0.0)
    for c in whole:
        acc = f32(f32(f32(acc * f32(10.0)) + f32(ord(c))) - f32(48.0))
    num_dec = 0
    for c in frac:
        if num_dec < 35:
            acc = f32(f32(acc * f32(10.0)) + f32(ord(c) - 48))
            num_dec += 1
    v = f32(acc * _NEG10[num_dec])
    return f32(-v) if neg else v  # (inf beyond float32: the caller checks)


def _read(text: str) -> float | None:
    """The value, or None where the reader refuses it (beyond float32: an error here, an
    infinite feature in VW)."""
    b = np.frombuffer(text.encode(), np.uint8)
    v, ok = read_float32(b, 0, len(b))
    if not ok:
        return None
    w, ok2 = parse_float32(b, 0, len(b))
    assert ok2 and np.float32(w).tobytes() == np.float32(v).tobytes(), text
    return v


EDGES = ["0", "1", "9", "16777159", "16777160", "16777161", "16777215", "16777216",
         "16777217", "16777219", "99999999", "1677715.9", "1677716.0", "1677721.7",
         "0.16777215", "0.16777217", "9999999.9", "0.000000000000000001234",
         "123456789012345678901234567890", "3.14159265358979323846264338327950288",
         "-0.0385", "197.6248", "-28.9913", "0.1", "0.7", "4096.5",
         "340300000000.000000000000000000000000000"]


@pytest.mark.parametrize("text", EDGES)
def test_edges_match_vw_bitwise(text: str) -> None:
    _check(text)


def _check(text: str) -> None:
    ref, got = vw_reference(text), _read(text)
    if not np.isfinite(ref):
        assert got is None, text
    else:
        assert got is not None and np.float32(got).tobytes() == ref.tobytes(), text


@hypothesis.settings(max_examples=400, deadline=None)
@hypothesis.given(neg=st.booleans(), whole=st.text("0123456789", min_size=1, max_size=12),
                  frac=st.none() | st.text("0123456789", max_size=40))
def test_decimals_match_vw_bitwise(neg: bool, whole: str, frac: str | None) -> None:
    _check(("-" if neg else "") + whole + ("" if frac is None else "." + frac))
