"""VW's hashes of names in plain Python (no numba): MurmurHash3 x86_32 and ``hashstring``.

For the few names hashed outside the parsers (``--invert_hash``'s and ``--audit``'s
names, a model's checksum): importing :mod:`._hashing`, whose kernels are numba's, costs
a run of the compiled learner ~100 MB and ~0.4 s. MurmurHash3 is the compiled core's
(``_vwfast.murmur3``: 0.2 us a short name) where it is built, else Python's (2-4 us);
callers that meet a name many times keep its hash (``_vwtext._section_hashes``).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["CONSTANT_HASH", "FNV_PRIME", "hashstring", "murmur3_32", "murmur3_py"]

FNV_PRIME = 16777619
CONSTANT_HASH = 11650396  # VW's ``constant`` feature (the bias), in its own namespace

_M = 0xFFFFFFFF


def murmur3_py(data: bytes, seed: int = 0) -> int:
    """VW's ``uniform_hash``: MurmurHash3 x86_32 of ``data`` with a 32-bit seed, in
    Python (:data:`murmur3_32` is the compiled one where it is built)."""
    c1, c2 = 0xCC9E2D51, 0x1B873593
    h = seed & _M
    n = len(data) // 4
    for i in range(n):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * c1) & _M
        k = ((k << 15) | (k >> 17)) & _M
        h ^= (k * c2) & _M
        h = ((h << 13) | (h >> 19)) & _M
        h = (h * 5 + 0xE6546B64) & _M
    tail = data[4 * n:]
    if tail:
        k = int.from_bytes(tail, "little")
        k = (k * c1) & _M
        k = ((k << 15) | (k >> 17)) & _M
        h ^= (k * c2) & _M
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _M
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _M
    return h ^ (h >> 16)


def _compiled() -> Callable[[bytes, int], int]:
    """The compiled core's MurmurHash3 (the same bits), else :func:`murmur3_py`."""
    from ..._cext import load
    from .._vw import VWFAST

    fast = load(*VWFAST)
    return fast.murmur3 if fast is not None else murmur3_py


murmur3_32 = _compiled()


def hashstring(data: bytes, seed: int = 0) -> int:
    """VW's ``hashstring`` of ``data`` (not stripped): a string of decimal digits (or none)
    is its value plus the seed, mod 2**32; anything else its :func:`murmur3_32`."""
    if data and not data.isdigit():  # (bytes: ASCII digits only)
        return murmur3_32(data, seed)
    return (int(data or b"0") + seed) & _M
