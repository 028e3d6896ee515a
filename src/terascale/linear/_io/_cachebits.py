"""The cache's kernels, compiled or numba's: indices bit-packed at ``bits`` bits each (least
significant bit first) and back, the values a bitmap marks as stored, the features a
block marks in a bitmap (:class:`._blocks.FeatureSet`) and the marked ones, in order.

The compiled core's (``_vw/_vwbits.c``) where it is built, which import no numba: the
compiled learner of ``terascale vw`` writes and reads the cache with them, and a run that
reads a cache starts as a one-pass run does; else :mod:`._bitkernels`'s. Both give the
same bytes and arrays, so either reads what the other wrote. The compiled core also
encodes and decodes whole records (``fast``: :func:`._cachefmt.encode_block`'s bytes and
:func:`._cachefmt.decode_block`'s arrays, without numpy; None without it).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

__all__ = ["kernels"]

_KERNELS: list[SimpleNamespace] = []


def kernels() -> SimpleNamespace:
    """``pack(indices, bits, out)``, ``unpack(buf, bits, out)``, ``unvalues(bitmap, stored,
    out) -> used`` (-1: the bitmap asks for more than are stored), ``mark(bitmap,
    indices)`` (a writable buffer of a byte an index), ``marked(bitmap) -> bytes`` (the uint32
    indices marked, in order) and ``fast`` (the compiled module, or None)."""
    if not _KERNELS:
        from ..._cext import load
        from .._vw import VWFAST

        fast = load(*VWFAST)
        if fast is not None:
            _KERNELS.append(SimpleNamespace(pack=fast.pack, unpack=fast.unpack,
                                            unvalues=fast.unvalues, mark=fast.mark,
                                            marked=fast.marked, fast=fast))
        else:
            import numpy as np

            from . import _bitkernels as k

            def mark(bitmap: Any, indices: np.ndarray) -> None:
                k.mark(np.frombuffer(bitmap, np.bool_), indices)

            def marked(bitmap: Any) -> bytes:
                return np.flatnonzero(np.frombuffer(bitmap, np.bool_)).astype("<u4").tobytes()

            _KERNELS.append(SimpleNamespace(pack=k.pack, unpack=k.unpack,
                                            unvalues=k.unvalues, mark=mark, marked=marked,
                                            fast=None))
    return _KERNELS[0]
