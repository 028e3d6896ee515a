"""Feature hashing exactly as Vowpal Wabbit does it (MurmurHash3 x86_32, VW's ``hashstring``).

VW maps a feature ``name`` in namespace ``ns`` to ``hashstring(name, hashstring(ns, 0))``
masked to ``-b`` bits, where ``hashstring(s, seed)`` is ``int(s) + seed`` when ``s`` is all
decimal digits and ``murmur3_x86_32(s, seed)`` otherwise (Weinberger et al., *Feature Hashing
for Large Scale Multitask Learning*, ICML 2009; Appleby's MurmurHash3). The default namespace
(``| f``) has hash 0. Quadratic features ``-q ab`` combine two hashes with the FNV prime as VW
does: ``(h_a * 16777619) ^ h_b``. The numba versions are used by the parsers' hot loops; the
Python versions serve tests, the sklearn estimator and CSV column names.
"""

from __future__ import annotations

import numba
import numpy as np

from ._hashnames import CONSTANT_HASH, FNV_PRIME

__all__ = ["CONSTANT_HASH", "FNV_PRIME", "hash_feature", "hash_space", "murmur3_32",
           "murmur3_32_nb", "hashstring_nb"]



@numba.njit(cache=True, inline="always")
def _rotl32(x: np.int64, r: int) -> np.int64:
    return ((x << r) | (x >> (32 - r))) & 0xFFFFFFFF


@numba.njit(cache=True, inline="always")
def murmur3_32_nb(buf: np.ndarray, start: int, end: int, seed: int | np.int64) -> np.int64:
    """MurmurHash3 x86_32 of ``buf[start:end]`` (uint8) with a 32-bit seed.

    The arithmetic is int64 as numba runs it (a Python caller gets the int64 boxed as ``int``).
    """
    c1 = 0xCC9E2D51
    c2 = 0x1B873593
    h = np.int64(seed & 0xFFFFFFFF)
    n = end - start
    nblocks = n // 4
    for i in range(nblocks):
        p = start + 4 * i
        k = (np.int64(buf[p]) | (np.int64(buf[p + 1]) << 8) | (np.int64(buf[p + 2]) << 16)
             | (np.int64(buf[p + 3]) << 24))
        k = (k * c1) & 0xFFFFFFFF
        k = _rotl32(k, 15)
        k = (k * c2) & 0xFFFFFFFF
        h ^= k
        h = _rotl32(h, 13)
        h = (h * 5 + 0xE6546B64) & 0xFFFFFFFF
    tail = start + nblocks * 4
    k = np.int64(0)
    rem = n & 3
    if rem >= 3:
        k ^= np.int64(buf[tail + 2]) << 16
    if rem >= 2:
        k ^= np.int64(buf[tail + 1]) << 8
    if rem >= 1:
        k ^= np.int64(buf[tail])
        k = (k * c1) & 0xFFFFFFFF
        k = _rotl32(k, 15)
        k = (k * c2) & 0xFFFFFFFF
        h ^= k
    h ^= n & 0xFFFFFFFF
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & 0xFFFFFFFF
    h ^= h >> 16
    return h


@numba.njit(cache=True, inline="always")
def hashstring_nb(buf: np.ndarray, start: int, end: int, seed: int | np.int64) -> np.int64:
    """VW's ``hashstring``: all-digit strings hash to their value plus the seed (mod 2**32)."""
    v = np.int64(0)
    for i in range(start, end):
        c = buf[i]
        if c < 48 or c > 57:
            return murmur3_32_nb(buf, start, end, seed)
        v = (v * 10 + (c - 48)) & 0xFFFFFFFFFFFF  # VW wraps in 64 bits; the mask keeps the low 32
    return (v + seed) & 0xFFFFFFFF


def murmur3_32(data: bytes | str, seed: int = 0) -> int:
    """MurmurHash3 x86_32 of ``data`` (a ``str`` is UTF-8 encoded).

    Parameters
    ----------
    data
        The bytes to hash.
    seed
        The hash's seed (default 0).
    """
    b = data.encode() if isinstance(data, str) else bytes(data)
    return int(murmur3_32_nb(np.frombuffer(b, dtype=np.uint8), 0, len(b), seed))


def hash_space(namespace: str) -> int:
    """The seed of a namespace, as VW's ``hash_space`` (the default namespace is 0).

    Parameters
    ----------
    namespace
        The namespace's name.
    """
    b = namespace.strip().encode("utf-8", "surrogateescape")  # (bytes read as str: as read)
    if not b:
        return 0
    return int(hashstring_nb(np.frombuffer(b, dtype=np.uint8), 0, len(b), 0))


def hash_feature(name: str, namespace_hash: int = 0, bits: int = 32) -> int:
    """The index of feature ``name`` in a namespace, masked to ``bits`` (VW's ``hash_feature``).

    Parameters
    ----------
    name
        The feature's name.
    namespace_hash
        Its namespace's :func:`hash_space` (default 0: the default namespace).
    bits
        Bits to keep (default 32).
    """
    b = name.encode("utf-8", "surrogateescape")
    h = int(hashstring_nb(np.frombuffer(b, dtype=np.uint8), 0, len(b), namespace_hash))
    return h & ((1 << bits) - 1)
