"""VW text through the compiled parser where it can, the numba parser everywhere else.

``_vwfast.c`` reads the common case of VW text (labels, importances and tags, namespaces
with or without a scale, ``name[:value]`` features with decimal values and ``e[-]N``
exponents, namespaces that come back later in a line (grouped as VW groups them); interactions (``-q``, ``--cubic``,
``--interactions``) built as :func:`._interactions.emit_interactions` builds them;
``--ignore``/``--keep``; ``--ignore_linear`` where the caller passes its flags and room for
its counts, as ``_vwonline._Parser`` does) to the same bits as
:func:`._vwparse.parse_vw_bytes`, and says so when a buffer holds anything else; that
buffer is then parsed by the numba parser, which reads every form VW reads and reports
errors with their line. The compiled parser takes about half the numba parser's CPU time
per example, with or without interactions.

The same module writes VW's ``-p`` lines (:func:`format_predictions`): formatting a
prediction in Python took ~1.5 us, on the learner's thread, a second per million examples.

``TERASCALE_NO_CEXT=1`` (or a build without a C compiler) leaves the numba parser alone.
"""

from __future__ import annotations

import numpy as np

from ..._cext import load
from . import VWFAST

__all__ = ["format_predictions", "parse_vw"]



_FAST = load(*VWFAST)

# features a byte of text the output arrays are sized for, as a divisor: one per 5 bytes
# (click-style text: one per ~6); interactions can make more, so a block that does not fit
# is parsed again into arrays twice the size, and later blocks start there
_BYTES_PER_FEATURE = [5]
_MIN_BYTES_PER_FEATURE = 1 / 64  # past that (-q :: on short lines): the numba parser


def parse_vw(buf: np.ndarray, mask: int, table: np.ndarray, constant: bool, skip_bad: bool,
             ignore: np.ndarray, ignore_linear: np.ndarray, lenient: bool = False) -> tuple:
    """:func:`._vwparse.parse_vw_bytes`'s result, from the compiled parser where the options
    and the buffer allow it (a label section VW reads with a warning is outside its subset:
    ``lenient``'s lines are the numba parser's)."""
    table = np.ascontiguousarray(table, np.int32)  # (one type: one compiled numba parser)
    if _FAST is not None and not ignore_linear.any():
        n = len(buf)
        ncap = n // 8 + 16  # (examples of at least 8 bytes: shorter ones go to numba)
        indptr = np.empty(ncap + 1, np.int64)
        labels = np.empty(ncap, np.float32)
        weights = np.empty(ncap, np.float32)
        tag_ptr = np.empty(ncap + 1, np.int64)
        tag_blob = np.empty(n, np.uint8)  # (a tag is part of a line: never more)
        rows, width = table.shape
        drop = np.ascontiguousarray(ignore, np.uint8)
        while True:
            per = _BYTES_PER_FEATURE[0]
            cap = int(n // per) + 16
            indices = np.empty(cap, np.uint32)
            values = np.empty(cap, np.float32)
            status, nex, nnz, ntag = _FAST.parse(buf, mask, constant, indptr, indices,
                                                 values, labels, weights, tag_ptr, tag_blob,
                                                 table, rows, width, drop)
            # full: the features, unless the examples were (lines under 8 bytes: numba;
            # the tags always fit); twice the room, unless that is past the bound
            if status != 2 or nex >= ncap or per / 2 < _MIN_BYTES_PER_FEATURE:
                break
            _BYTES_PER_FEATURE[0] = per / 2
        if status == 0:
            # as the numba parser: the features as views where half used, else copies
            if 2 * nnz >= cap:
                indices, values = indices[:nnz], values[:nnz]
            else:
                indices, values = indices[:nnz].copy(), values[:nnz].copy()
            return (indptr[:nex + 1].copy(), indices, values, labels[:nex].copy(),
                    weights[:nex].copy(), tag_ptr[:nex + 1].copy(), tag_blob[:ntag].copy(),
                    0, 0, 0, np.zeros(0, np.int64), np.zeros(0, np.int64),
                    np.zeros(0, np.int64))
    from ._vwparse import parse_vw_bytes  # (numba's: imported where a buffer needs it)

    return parse_vw_bytes(buf, mask, table, constant, skip_bad, ignore, ignore_linear, lenient)


_NO_TAGS = np.zeros(0, np.int64)
_NO_BLOB = np.zeros(0, np.uint8)


def format_predictions(values: np.ndarray, tag_ptr: np.ndarray | None = None,
                       tag_blob: np.ndarray | None = None, first: int = 0) -> str | None:
    """VW's ``-p`` text of ``values`` (float64), as :func:`._vwout.prediction_lines` writes
    it, each line with the tag of example ``first + i`` of ``tag_ptr``/``tag_blob`` (a
    Block's) where it has one; None where the compiled module is missing or a value is
    not finite (the caller formats them)."""
    if _FAST is None:
        return None
    values = np.ascontiguousarray(values, np.float64)
    if tag_ptr is None or tag_blob is None:
        tag_ptr, tag_blob, first = _NO_TAGS, _NO_BLOB, 0
    out = _FAST.format_predictions(values, np.ascontiguousarray(tag_ptr, np.int64),
                                   np.ascontiguousarray(tag_blob, np.uint8), first)
    return None if out is None else out.decode("utf-8", "surrogateescape")
