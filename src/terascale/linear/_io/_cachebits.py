"""The cache's kernels, compiled or numba's: indices bit-packed at ``bits`` bits each (least
significant bit first) and back, the values a bitmap marks as stored, and the features a
block marks in a bitmap (:class:`._blocks.FeatureSet`).

The compiled core's (``_vw/_vwbits.c``) where it is built, which import no numba: the
compiled learner of ``terascale vw`` writes and reads the cache with them, and a run that
reads a cache starts as a one-pass run does; else :mod:`._bitkernels`'s. Both give the
same bytes and arrays, so either reads what the other wrote.
"""

from __future__ import annotations

from types import SimpleNamespace

__all__ = ["kernels"]

_KERNELS: list[SimpleNamespace] = []


def kernels() -> SimpleNamespace:
    """``pack(indices, bits, out)``, ``unpack(buf, bits, out)``, ``unvalues(bitmap, stored,
    out) -> used`` (-1: the bitmap asks for more than are stored) and ``mark(bitmap,
    indices)``."""
    if not _KERNELS:
        from ..._cext import load
        from .._vw import VWFAST

        fast = load(*VWFAST)
        if fast is not None:
            _KERNELS.append(SimpleNamespace(pack=fast.pack, unpack=fast.unpack,
                                            unvalues=fast.unvalues, mark=fast.mark))
        else:
            from . import _bitkernels as k

            _KERNELS.append(SimpleNamespace(pack=k.pack, unpack=k.unpack,
                                            unvalues=k.unvalues, mark=k.mark))
    return _KERNELS[0]
