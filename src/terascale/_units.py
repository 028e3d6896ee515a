"""Sizes, rates and times: the one parser and the one formatter every command uses.

The spelling follows GNU coreutils (``dd``, ``df``, ``sort -S``) and the IEC, so that a
size means the same number in ``terascale bench``, ``terascale simulate`` and the Python API:

=========================  ===========================  ===============================
written                    means                        example
=========================  ===========================  ===============================
``KB MB GB TB PB``         SI, powers of 1000           ``64MB`` = 64,000,000 bytes
``KiB MiB GiB TiB PiB``    binary, powers of 1024       ``64MiB`` = 2**26 bytes
``K M G T P`` (no ``B``)   binary (as ``dd``, ``ls``)   ``64K`` = 65,536 bytes
``B`` or no unit           bytes                        ``4096``, ``1e6``, ``512B``
=========================  ===========================  ===============================

Size units are read case-insensitively (``64mb`` = ``64MB``); a fraction of a byte rounds
to the nearest byte (``0.1KiB`` = 102), so what :func:`format_size` prints reads back.

Rates are *bits* per second, as link speeds are quoted: ``100Mbit``, ``10Gbit``,
``1Gbit/s``, ``25Gbps``, ``10Gb/s`` (lower-case ``b``: bits, SI prefixes). An upper-case
``B`` means bytes and is multiplied by 8: ``1.25GB/s`` = 10 Gbit/s, ``100MiB/s`` =
838,860,800 bit/s.

Times: ``ns``, ``us`` (or ``µs``), ``ms``, ``s``, ``min``, ``h``; no unit means seconds
(``5ms``, ``25us``, ``1.5``).

Counts (examples, rows) are SI, as a count of things is: ``20k`` = 20,000, ``1.5M`` =
1,500,000, ``2G`` = 2e9 (``K`` and ``k`` alike).

Every parse error is a :class:`~terascale._errors.ConfigError` that names the flag (or
parameter) it came from and gives an example, as every option error in terascale does.
"""

from __future__ import annotations

import math
import re

from ._errors import ConfigError

__all__ = ["format_count", "format_rate", "format_size", "format_time", "parse_count",
           "parse_rate", "parse_size", "parse_time"]

_PREFIX = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
_NUMBER = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(\S*?)\s*")
_TIME = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "": 1.0, "sec": 1.0,
         "min": 60.0, "h": 3600.0}
_SIZE_RE = re.compile(r"([kmgtp]?)(i?b?)")
_RATE_RE = re.compile(r"([kKmMgGtTpP]?)(i?)(bit|bit/s|bps|b/s|B/s|Bps)")


def _split(text: object) -> tuple[float, str] | None:
    m = _NUMBER.fullmatch(str(text))
    if m is None:
        return None
    return float(m.group(1)), m.group(2)


def _bad(text: object, flag: str, example: str) -> ConfigError:
    return ConfigError(f"{flag}: cannot read {text!r} (e.g. {example})")


def parse_size(text: str | int, *, flag: str = "size") -> int:
    """``64MB`` -> 64_000_000, ``64MiB`` / ``64M`` -> 2**26, ``4096`` / ``1e6`` -> bytes.

    ``flag`` names the option or parameter in the error message.
    """
    example = "4096, 64KiB, 64K, 100MB"
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise _bad(text, flag, example)
        return text
    parts = _split(text)
    if parts is None:
        raise _bad(text, flag, example)
    value, unit = parts
    m = _SIZE_RE.fullmatch(unit.lower())
    if m is None or (m.group(2) == "i" or (m.group(2) == "ib" and not m.group(1))):
        raise _bad(text, flag, example)
    prefix, suffix = m.groups()
    base = 1000 if suffix == "b" and prefix else 1024
    nbytes = value * base ** _PREFIX[prefix]
    if not math.isfinite(nbytes):
        raise _bad(text, flag, example)
    return round(nbytes)


def parse_rate(text: str | float, *, flag: str = "rate") -> float:
    """``10Gbit`` / ``10Gbit/s`` / ``10Gbps`` -> 1e10, ``1.25GB/s`` -> 1e10 (bits per second)."""
    example = "100Mbit, 10Gbit/s, 1.25GB/s"
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if not (text > 0 and math.isfinite(text)):
            raise _bad(text, flag, example)
        return float(text)
    parts = _split(text)
    if parts is None:
        raise _bad(text, flag, example)
    value, unit = parts
    m = _RATE_RE.fullmatch(unit)
    if m is None or (m.group(2) and not m.group(1)) or not value > 0:
        raise _bad(text, flag, example)
    prefix, binary, what = m.groups()
    if binary and what[0] != "B":  # "Mibit": nobody quotes links in binary bits
        raise _bad(text, flag, example)
    rate = value * (1024 if binary else 1000) ** _PREFIX[prefix.lower()]
    rate = rate * 8 if what[0] == "B" else rate
    if not math.isfinite(rate):  # "inf", "1e400": a rate no cost model can use
        raise _bad(text, flag, example)
    return rate


def parse_time(text: str | float, *, flag: str = "time") -> float:
    """``5ms`` -> 0.005, ``25us`` -> 2.5e-5, ``2min`` -> 120, ``1.5`` -> 1.5 (seconds)."""
    example = "25us, 5ms, 1.5s"
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        seconds = float(text)
    else:
        parts = _split(text)
        if parts is None or parts[1].lower() not in _TIME:
            raise _bad(text, flag, example)
        seconds = parts[0] * _TIME[parts[1].lower()]
    if not (seconds >= 0 and math.isfinite(seconds)):
        raise _bad(text, flag, example)
    return seconds


def parse_count(text: str | int, *, flag: str = "count") -> int:
    """``20k`` -> 20_000, ``1.5M`` -> 1_500_000, ``2G`` -> 2e9, ``300`` -> 300 (SI)."""
    example = "20k, 1M, 3M"
    if isinstance(text, int) and not isinstance(text, bool):
        value: float = text
    else:
        parts = _split(text)
        if parts is None or parts[1].lower() not in ("", "k", "m", "g", "t"):
            raise _bad(text, flag, example)
        value = parts[0] * 1000 ** _PREFIX[parts[1].lower()]
    if not (math.isfinite(value) and value >= 0):
        raise _bad(text, flag, example)
    return round(value)


def format_count(n: float) -> str:
    """``20000`` -> ``20k``, ``1500000`` -> ``1.5M`` (SI; reads back with :func:`parse_count`)."""
    for k, unit in ((4, "T"), (3, "G"), (2, "M"), (1, "k")):
        if abs(n) >= 1000 ** k:
            return f"{n / 1000 ** k:g}{unit}"
    return f"{n:g}"


def format_size(nbytes: float, *, si: bool = False) -> str:
    """``67108864`` -> ``64 MiB`` (binary; ``si=True``: ``67.1089 MB``); below 1 KiB: ``B``.

    The result parses back with :func:`parse_size` (after removing the space).
    """
    units, base = (("KB", "MB", "GB", "TB", "PB"), 1000) if si else \
        (("KiB", "MiB", "GiB", "TiB", "PiB"), 1024)
    for k in range(len(units), 0, -1):
        if abs(nbytes) >= base ** k:
            return f"{nbytes / base ** k:g} {units[k - 1]}"
    return f"{nbytes:g} B"


def format_rate(bits_per_s: float) -> str:
    """``1e10`` -> ``10 Gbit/s`` (SI, as links are quoted)."""
    for k, unit in ((4, "Tbit/s"), (3, "Gbit/s"), (2, "Mbit/s"), (1, "kbit/s")):
        if abs(bits_per_s) >= 1000 ** k:
            return f"{bits_per_s / 1000 ** k:g} {unit}"
    return f"{bits_per_s:g} bit/s"


def format_time(seconds: float, *, digits: int | None = None) -> str:
    """``2.5e-5`` -> ``25.0 us``, ``0.00512`` -> ``5.12 ms``, ``3.0`` -> ``3.00 s``.

    Below a millisecond in microseconds (1 decimal), below a second in milliseconds, else
    seconds (2 decimals); ``digits`` sets the decimals for every unit. Infinity is
    ``never`` (a simulated collective that cannot finish).
    """
    if seconds == math.inf:
        return "never"
    if abs(seconds) < 1e-3:
        return f"{seconds * 1e6:.{1 if digits is None else digits}f} us"
    if abs(seconds) < 1.0:
        return f"{seconds * 1e3:.{2 if digits is None else digits}f} ms"
    return f"{seconds:.{2 if digits is None else digits}f} s"
