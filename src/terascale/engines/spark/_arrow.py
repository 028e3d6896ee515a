"""Arrow record batches -> the encoder's flat arrays, without a Python object per row.

A DataFrame reaches a Python task either as pickled ``Row`` objects (``df.rdd``: the JVM
converts and pickles every row, the task unpickles it and rebuilds every MLlib Vector) or
as Arrow record batches (``mapInArrow``): one columnar buffer per column and batch. For a
sparse Vector column the first costs far more than the training that follows; the second
is a few numpy operations per batch. An MLlib Vector arrives as its SQL form, a struct of
``type`` (0 sparse, 1 dense), ``size``, ``indices`` and ``values``.

Every function here returns, bitwise, what the row path of :mod:`._encode` computes from
the same rows, so that a model does not depend on how its rows travelled.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._errors import DataError
from ._encode import Encoding, not_a_vector

__all__ = ["lines", "numbers", "vectors"]


def lines(col: Any) -> list[Any]:
    """A string column as Python strings (None for null)."""
    return col.to_pylist()  # type: ignore[no-any-return]


def _list_parts(arr: Any) -> tuple[np.ndarray, np.ndarray]:
    """A list array's (per-row lengths, flat elements of those rows in order)."""
    off = np.asarray(arr.offsets, np.int64)
    flat = arr.values.slice(int(off[0]), int(off[-1] - off[0]))
    return np.diff(off), flat.to_numpy(zero_copy_only=False)


def vectors(col: Any, first: int, where: str,
            name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A Vector column (its struct form, or a list of doubles per row as
    ``vector_to_array`` sends a small one) -> (non-zeros per row, indices int64, values
    float64), flat, in row order: a sparse row's entries as stored, a dense row's non-zero
    positions ascending."""
    import pyarrow as pa

    n = len(col)
    if col.null_count:
        r = int(np.flatnonzero(~col.is_valid().to_numpy(zero_copy_only=False))[0])
        raise DataError(not_a_vector(where, first + r, name, None))
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        counts, val = _list_parts(col)  # every row dense: its positions are its indices
        starts = np.cumsum(counts) - counts
        idx = np.arange(len(val), dtype=np.int64) - np.repeat(starts, counts)
        return _drop_zeros(n, counts, idx, val)
    kind = np.asarray(col.field("type").to_numpy(zero_copy_only=False))
    counts, val = _list_parts(col.field("values"))
    icounts, sparse_idx = _list_parts(col.field("indices"))
    sparse = kind == 0
    if sparse.all():  # the usual case (VectorAssembler, libsvm): entries as stored
        if not np.array_equal(icounts, counts):
            r = int(np.flatnonzero(icounts != counts)[0])
            raise DataError(f"{where}, row {first + r}: column {name!r}: a Vector whose "
                            f"indices and values differ in length")
        idx = sparse_idx.astype(np.int64, copy=False)
    else:
        if not np.array_equal(icounts[sparse], counts[sparse]) or icounts[~sparse].any():
            r = int(np.flatnonzero((icounts != counts) & sparse | (icounts != 0) & ~sparse)[0])
            raise DataError(f"{where}, row {first + r}: column {name!r}: a Vector whose "
                            f"indices and values differ in length")
        row = np.repeat(np.arange(n), counts)
        starts = np.cumsum(counts) - counts
        idx = np.arange(len(val), dtype=np.int64) - np.repeat(starts, counts)  # dense: position
        idx[sparse[row]] = sparse_idx
    return _drop_zeros(n, counts, idx, val)


def _drop_zeros(n: int, counts: np.ndarray, idx: np.ndarray, val: np.ndarray
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    nz = val != 0  # NaN is kept, as the row path keeps it (and then refuses it)
    if not nz.all():  # explicit zeros, dense rows' zeros: dropped
        keep = np.repeat(np.arange(n), counts)[nz]
        return (np.bincount(keep, minlength=n).astype(np.int64), idx[nz],
                val[nz].astype(np.float64, copy=False))
    return counts.astype(np.int64, copy=False), idx, val.astype(np.float64, copy=False)


def numbers(col: Any, enc: Encoding, first: int, where: str, keep: np.ndarray,
            name: str) -> np.ndarray:
    """A label or weight column as float32 (null: NaN), checked as the row path checks it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = col.type
    if pa.types.is_floating(t) or pa.types.is_integer(t) or pa.types.is_boolean(t):
        x = np.asarray(pc.cast(col, pa.float64(), safe=False).to_numpy(zero_copy_only=False), np.float64)
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        if enc.require_label and name == enc.label and not valid.all():
            r = int(np.flatnonzero(~valid)[0])
            raise DataError(f"{where}, row {first + r}: label column {name!r} is null; "
                            f"every training row needs a label (drop or fill these rows)")
        x = np.where(valid, x, np.nan)
        return enc.checked(x, x, first, where, keep, name)
    return enc.numbers(col.to_pylist(), first, where, keep, name)
