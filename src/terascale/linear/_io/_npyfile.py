"""A cache entry's ``.npy`` files without numpy: ``np.save``'s bytes of a C-order array
(its format 1.0 header, then the data), and its rows read back.

The compiled learner of ``terascale vw`` writes and reads the cache's index and features
with these, so a run that caches imports no numpy; the numba pass reads the same files
with ``np.load``.
"""

from __future__ import annotations

import ast
import struct
from array import array

__all__ = ["npy_header", "read_rows"]

_MAGIC = b"\x93NUMPY"
_ALIGN = 64  # numpy's ARRAY_ALIGN: the header padded to a multiple of it
_GROWTH = 21  # numpy's GROWTH_AXIS_MAX_DIGITS: spare room after the header's dict


def npy_header(descr: str, shape: tuple[int, ...]) -> bytes:
    """``np.save``'s header of a C-order array of dtype ``descr`` (``'<i8'``, ``'<u4'``)
    and ``shape``: its data follow it."""
    head = f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': {shape!r}, }}"
    head += " " * ((_GROWTH - len(repr(shape[0]))) if shape else 0)
    hlen = len(head) + 1
    pad = _ALIGN - (len(_MAGIC) + 4 + hlen) % _ALIGN
    return (_MAGIC + b"\x01\x00" + struct.pack("<H", hlen + pad) + head.encode("latin1")
            + b" " * pad + b"\n")


def read_rows(path: str, width: int) -> list[tuple[int, ...]]:
    """The rows of the ``.npy`` file ``path``, a C-order int64 array of ``width`` columns
    (any format version ``np.save`` writes); ValueError where it is another."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:6] != _MAGIC or raw[6] not in (1, 2, 3):
        raise ValueError(f"{path}: not a .npy file")
    at = 10 if raw[6] == 1 else 12
    (hlen,) = struct.unpack("<H" if raw[6] == 1 else "<I", raw[8:at])
    try:
        head = ast.literal_eval(raw[at:at + hlen].decode("latin1" if raw[6] < 3 else "utf8"))
    except (SyntaxError, UnicodeDecodeError):
        head = None
    if not isinstance(head, dict):
        raise ValueError(f"{path}: a .npy header that is not a dict")
    shape = head.get("shape")
    if head.get("descr") != "<i8" or head.get("fortran_order") is not False or \
            not isinstance(shape, tuple) or len(shape) != 2 or shape[1] != width:
        raise ValueError(f"{path}: not an int64 array of {width} columns")
    data = array("q")
    data.frombytes(raw[at + hlen:at + hlen + 8 * shape[0] * width])
    if len(data) != shape[0] * width:
        raise ValueError(f"{path}: truncated")
    return [tuple(data[k:k + width]) for k in range(0, len(data), width)]
