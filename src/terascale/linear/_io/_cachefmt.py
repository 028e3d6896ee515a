"""The cache's block encoding: one parsed block as a compact byte record, and back.

A record holds, in order: the examples' feature counts (1, 2 or 4 bytes each, the
smallest that fits the block), the labels (one byte each when every label of the block
is -1, 0, 1 or missing, else float32), the importance weights (omitted when all are 1),
the count of VW text's empty lines before each example and after the last (omitted when
none: VW counts them for the holdout), the features ``--ignore_linear`` dropped from
each example (omitted when none: VW counts them), the tags (lengths and bytes, omitted
when none), the hashed indices bit-packed at ``bits`` bits each (2.25 bytes at ``-b 18``,
VW's cache spends a varint of the index delta, 3-5 bytes on hashed ids), a bitmap of which values are not 1.0, and those values as float32
(one-hot and bag-of-words features store no value at all). Decoding restores the arrays
exactly, so a learner gets bitwise the numbers the parser produced.

The compiled core (``_vw/_vwbits.c``) encodes a block and decodes a record as the numpy
code here does, byte for byte and bit for bit, without numpy: :func:`encode_block` is its
where it is built, and :func:`decode_chunk` gives ``terascale vw``'s compiled learner a
record's arrays as typed memoryviews.
"""

from __future__ import annotations

from typing import Any

from ..._lazy import lazy_module
from ._cachebits import kernels

np = lazy_module("numpy", globals(), "np")

__all__ = ["FIELDS", "decode_blanks", "decode_block", "decode_chunk", "decode_ignored",
           "decode_labels", "encode_block", "encode_numpy", "label_bytes"]

# a block's row in the cache's index: byte offset, byte length, examples, features, flags,
# tag bytes
FIELDS = 6
_W = 1        # flags: weights stored
_LCODE = 2    # labels stored as int8 codes
_TAGS = 4     # tags stored
_LW_SHIFT = 3  # bits 3-4: bytes per feature count (1, 2, 4)
_BLANKS = 32  # empty lines stored
_IGNORED = 64  # --ignore_linear's feature counts stored
_NAN_CODE = 127


def _packed_len(nnz: int, bits: int) -> int:
    return (nnz * bits + 7) // 8


def encode_block(indptr: Any, indices: Any, values: Any, labels: Any, weights: Any,
                 tag_ptr: Any, tag_blob: Any, bits: int, blanks: Any = None,
                 ignored: Any = None) -> tuple[bytes, int, int]:
    """(record, flags, tag bytes) of one block (``indptr[0] == 0``; ``blanks`` and
    ``ignored`` as a Block's): the compiled core's where it is built, which takes the
    arrays in a ``Dataset``'s types (numpy's or typed memoryviews: int64 offsets, uint32
    indices, float32 values, labels and weights, uint8 tag bytes; ValueError naming one
    of another type), else :func:`encode_numpy`'s."""
    fast = kernels().fast
    if fast is not None:
        return fast.encode(indptr, indices, values, labels, weights, tag_ptr, tag_blob, bits,
                           blanks, ignored)
    return encode_numpy(indptr, indices, values, labels, weights, tag_ptr, tag_blob, bits,
                        blanks, ignored)


def encode_numpy(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
                 labels: np.ndarray, weights: np.ndarray, tag_ptr: np.ndarray | None,
                 tag_blob: np.ndarray | None, bits: int, blanks: np.ndarray | None = None,
                 ignored: np.ndarray | None = None) -> tuple[bytes, int, int]:
    """:func:`encode_block`'s record in numpy (and the bit packing's kernel)."""
    n = len(labels)
    nnz = int(indptr[-1])
    lens = np.diff(indptr)
    top = int(lens.max()) if n else 0
    lw = 1 if top < 256 else 2 if top < 65536 else 4
    flags = {1: 0, 2: 1, 4: 2}[lw] << _LW_SHIFT
    parts: list[np.ndarray] = [lens.astype(f"<u{lw}").view(np.uint8)]
    lab = np.asarray(labels, np.float32)
    isnan = np.isnan(lab)
    # (-0.0, VW's reading of the label '-', is a float: VW's table prints it -0.0000)
    if np.all(isnan | (lab == -1) | ((lab == 0) & ~np.signbit(lab)) | (lab == 1)):
        code = np.where(isnan, _NAN_CODE, np.nan_to_num(lab)).astype(np.int8)
        parts.append(code.view(np.uint8))
        flags |= _LCODE
    else:
        parts.append(lab.astype("<f4").view(np.uint8))
    w = np.asarray(weights, np.float32)
    if not np.all(w == 1.0):
        parts.append(w.astype("<f4").view(np.uint8))
        flags |= _W
    if blanks is not None and len(blanks):
        parts.append(np.bincount(blanks, minlength=n + 1).astype("<u4").view(np.uint8))
        flags |= _BLANKS
    if ignored is not None and np.any(ignored):
        parts.append(np.asarray(ignored).astype("<u4").view(np.uint8))
        flags |= _IGNORED
    ntag = 0
    if tag_ptr is not None and tag_blob is not None and len(tag_ptr) and tag_ptr[-1] > 0:
        ntag = int(tag_ptr[-1] - tag_ptr[0])
        parts.append(np.diff(tag_ptr).astype("<u4").view(np.uint8))
        parts.append(np.asarray(tag_blob[tag_ptr[0]:tag_ptr[-1]], np.uint8))
        flags |= _TAGS
    packed = np.zeros(_packed_len(nnz, bits), np.uint8)
    kernels().pack(np.ascontiguousarray(indices, np.uint32), bits, packed)
    parts.append(packed)
    vals = np.asarray(values, np.float32)
    other = vals != 1.0
    parts.append(np.packbits(other, bitorder="little"))
    parts.append(vals[other].astype("<f4").view(np.uint8))
    return b"".join(p.tobytes() for p in parts), flags, ntag


def _sections(n: int, nnz: int, flags: int, ntag: int, bits: int) -> list[int]:
    """Byte offsets of the record's sections (lens, labels, weights, empty lines, ignored
    counts, tag lens, tag bytes, indices, bitmap, values)."""
    lw = (1, 2, 4)[(flags >> _LW_SHIFT) & 3]
    sizes = [n * lw, n if flags & _LCODE else 4 * n, 4 * n if flags & _W else 0,
             4 * (n + 1) if flags & _BLANKS else 0, 4 * n if flags & _IGNORED else 0,
             4 * n if flags & _TAGS else 0, ntag if flags & _TAGS else 0,
             _packed_len(nnz, bits), (nnz + 7) // 8]
    return list(np.cumsum([0] + sizes).tolist())


def decode_labels(rec: np.ndarray, n: int, nnz: int, flags: int, ntag: int,
                  bits: int) -> tuple[np.ndarray, np.ndarray]:
    """(labels, weights) of a record prefix (the counts, labels and weights sections)."""
    off = _sections(n, nnz, flags, ntag, bits)
    if flags & _LCODE:
        code = rec[off[1]:off[2]].view(np.int8)
        labels = np.where(code == _NAN_CODE, np.float32(np.nan), code).astype(np.float32)
    else:
        labels = rec[off[1]:off[2]].view("<f4").astype(np.float32)
    weights = (rec[off[2]:off[3]].view("<f4").astype(np.float32) if flags & _W
               else np.ones(n, np.float32))
    return labels, weights


def label_bytes(n: int, nnz: int, flags: int, ntag: int, bits: int) -> int:
    """How many leading bytes of a record :func:`decode_labels` and :func:`decode_blanks`
    read."""
    return _sections(n, nnz, flags, ntag, bits)[5]


def decode_blanks(rec: np.ndarray, n: int, nnz: int, flags: int, ntag: int,
                  bits: int) -> np.ndarray | None:
    """The record's empty lines (a Block's ``blanks``), from its prefix; None: none."""
    if not flags & _BLANKS:
        return None
    off = _sections(n, nnz, flags, ntag, bits)
    counts = rec[off[3]:off[4]].view("<u4")
    return np.repeat(np.arange(n + 1, dtype=np.int64), counts)


def decode_ignored(rec: np.ndarray, n: int, nnz: int, flags: int, ntag: int,
                   bits: int) -> np.ndarray | None:
    """The record's ``--ignore_linear`` counts (a Block's ``ignored``); None: none."""
    if not flags & _IGNORED:
        return None
    off = _sections(n, nnz, flags, ntag, bits)
    return rec[off[4]:off[5]].view("<u4").astype(np.int64)


def decode_block(rec: np.ndarray, n: int, nnz: int, flags: int, ntag: int, bits: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                            np.ndarray | None, np.ndarray | None]:
    """(indptr, indices, values, labels, weights, tag_ptr, tag_blob) of one record."""
    off = _sections(n, nnz, flags, ntag, bits)
    lw = (1, 2, 4)[(flags >> _LW_SHIFT) & 3]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(rec[off[0]:off[1]].view(f"<u{lw}"), out=indptr[1:])
    labels, weights = decode_labels(rec, n, nnz, flags, ntag, bits)
    tag_ptr = tag_blob = None
    if flags & _TAGS:
        tag_ptr = np.zeros(n + 1, np.int64)
        np.cumsum(rec[off[5]:off[6]].view("<u4"), out=tag_ptr[1:])
        tag_blob = rec[off[6]:off[7]].copy()
    indices = np.empty(nnz, np.uint32)
    k = kernels()
    k.unpack(rec[off[7]:off[8]], bits, indices)
    values = np.empty(nnz, np.float32)
    stored = (len(rec) - off[9]) // 4
    if k.unvalues(rec[off[8]:off[9]], rec[off[9]:off[9] + 4 * stored].view("<f4"),
                  values) != stored:
        raise ValueError("cache record: its values do not match its bitmap")
    return indptr, indices, values, labels, weights, tag_ptr, tag_blob


def decode_chunk(rec: bytes, n: int, nnz: int, flags: int, ntag: int, bits: int,
                 notes: Any = None) -> tuple:
    """A record as ``terascale vw``'s compiled learner takes a parsed chunk (indptr,
    indices, values, labels, weights, tag_ptr, tag_blob, notes, blanks, ignored), its
    arrays typed memoryviews (:func:`decode_block`'s values, tag_ptr zeros and tag_blob
    empty where the record has no tags), decoded by the compiled core (no numpy)."""
    got = kernels().fast.decode(rec, n, nnz, flags, ntag, bits)
    views = [memoryview(a).cast(c) if a is not None else None
             for a, c in zip(got, ("q", "I", "f", "f", "f", "q", "B", "q", "q"))]
    return (*views[:7], notes, *views[7:])
