"""The libsvm/svmlight parser (numba, over the raw bytes): ``label index:value ...`` lines,
``qid:N`` skipped, ``#`` comments; the error codes it returns and their messages
(:data:`ERRORS`, which :mod:`._readers` reports with the file and line).
"""

from __future__ import annotations

import numba
import numpy as np

from .._vw._vwparse import parse_float
from ._hashing import CONSTANT_HASH

__all__ = ["ERRORS", "parse_libsvm"]

ERRORS = {
    1: "the label is not a number",
    2: "a feature is not index:value",
    3: "a feature index is not a non-negative integer",
    4: "a feature value is not a number",
}


@numba.njit(cache=True, nogil=True)
def _grown(indices: np.ndarray, values: np.ndarray, nnz: int) -> tuple[np.ndarray, np.ndarray]:
    """Twice the capacity, the first ``nnz`` entries kept (CSR buffers fill as we parse)."""
    ni = np.empty(2 * len(indices), np.uint32)
    ni[:nnz] = indices[:nnz]
    nv = np.empty(2 * len(values), np.float32)
    nv[:nnz] = values[:nnz]
    return ni, nv


@numba.njit(cache=True, nogil=True)
def _libsvm_features(buf: np.ndarray, i: int, le: int, mask: int, indices: np.ndarray,
                     values: np.ndarray, nnz: int) -> tuple[int, int]:
    """The ``index:value`` features of ``buf[i:le]`` appended at ``nnz`` (the arrays have
    room for all of them); returns (new nnz, error code or 0)."""
    err = 0
    while i < le:
        if buf[i] == 32 or buf[i] == 9 or buf[i] == 13:
            i += 1
            continue
        ts = i
        while i < le and not (buf[i] == 32 or buf[i] == 9 or buf[i] == 13):
            i += 1
        te = i
        colon = ts
        while colon < te and buf[colon] != 58:
            colon += 1
        if colon == te:
            err = 2
            break
        if colon - ts == 3 and buf[ts] == 113 and buf[ts + 1] == 105 and buf[ts + 2] == 100:
            continue  # qid:N
        idx = np.int64(0)
        if colon == ts:
            err = 3
            break
        for j in range(ts, colon):
            c = buf[j]
            if c < 48 or c > 57:
                err = 3
                break
            idx = (idx * 10 + (c - 48)) & 0xFFFFFFFF
        if err:
            break
        v, ok = parse_float(buf, colon + 1, te)
        if not ok:
            err = 4
            break
        if v == 0.0:
            continue
        indices[nnz] = idx & mask
        values[nnz] = v
        nnz += 1
    return nnz, err


@numba.njit(cache=True, nogil=True)
def parse_libsvm(buf: np.ndarray, mask: int, constant: bool, skip_bad: bool):  # noqa: ANN201
    n = len(buf)
    cap = n // 3 + 16
    indices = np.empty(cap, np.uint32)
    values = np.empty(cap, np.float32)
    ncap = n // 4 + 16
    indptr = np.zeros(ncap + 1, np.int64)
    labels = np.empty(ncap, np.float32)
    nnz = 0
    nex = 0
    skipped = 0
    line = -1
    pos = 0
    while pos < n:
        line += 1
        ls = pos
        le = ls
        while le < n and buf[le] != 10:
            le += 1
        pos = le + 1
        hs = ls
        while hs < le and buf[hs] != 35:  # '#' starts a comment
            hs += 1
        le = hs
        i = ls
        while i < le and (buf[i] == 32 or buf[i] == 9 or buf[i] == 13):
            i += 1
        if i == le:
            continue
        ts = i
        while i < le and not (buf[i] == 32 or buf[i] == 9 or buf[i] == 13):
            i += 1
        label, ok = parse_float(buf, ts, i)
        err = 0 if ok else 1
        start = nnz
        # room for every feature of the line and the constant, reserved once per line so
        # that the token loop runs over arrays that never change (see _vwparse._features)
        while nnz + (le - i) // 2 + 3 > len(indices):
            indices, values = _grown(indices, values, nnz)
        if err == 0:
            nnz, err = _libsvm_features(buf, i, le, mask, indices, values, nnz)
        if err:
            if skip_bad:
                skipped += 1
                nnz = start
                continue
            return indptr[:nex + 1], indices[:nnz], values[:nnz], labels[:nex], skipped, err, line
        if constant:
            indices[nnz] = CONSTANT_HASH & mask
            values[nnz] = 1.0
            nnz += 1
        if nex + 1 >= len(labels):
            nl = np.empty(2 * len(labels), np.float32)
            nl[:nex] = labels[:nex]
            labels = nl
            npt = np.zeros(2 * len(labels) + 1, np.int64)
            npt[:nex + 1] = indptr[:nex + 1]
            indptr = npt
        labels[nex] = label
        nex += 1
        indptr[nex] = nnz
    return indptr[:nex + 1], indices[:nnz], values[:nnz], labels[:nex], skipped, 0, line
