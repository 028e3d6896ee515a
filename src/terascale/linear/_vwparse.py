"""Vowpal Wabbit text format, parsed in one numba pass over the raw bytes.

A line is ``[label [importance [base]]] ['tag]|ns[:scale] f[:v] f2 ... |ns2 ...``. As in VW:
the last word of the label section is the tag when it starts with ``'`` or touches the first
``|``; a namespace ``|ns:2`` scales its values; ``| f`` is the default namespace (hash 0);
features with value 0 are dropped; repeated features are kept (they add up in the dot
product); the constant (bias) feature is added to every example; ``-q ab`` adds the cross
of every feature of namespace ``a`` with every feature of namespace ``b`` (first letters).
Malformed lines are reported with an error code and the line number, or skipped and counted.
"""

from __future__ import annotations

import numba
import numpy as np

from ._hashing import CONSTANT_HASH, FNV_PRIME, hashstring_nb

__all__ = ["ERRORS", "parse_float", "parse_vw_bytes"]

ERRORS = {
    1: "no '|' starts the features (a VW line is [label [weight]] ['tag]|ns feature[:value] ...)",
    2: "the label section has a word that is not a number",
    3: "the label section has more than three numbers (label, importance, base)",
    4: "a feature value is not a number",
    5: "a namespace scale is not a number",
    6: "an importance weight is negative",
}


_POW10 = np.array([10.0 ** k for k in range(23)])  # exactly representable in a double


@numba.njit(cache=True, inline="always")
def _is_space(c: int) -> bool:
    return c == 32 or c == 9 or c == 13


@numba.njit(cache=True, inline="always")
def parse_float(buf: np.ndarray, s: int, e: int) -> tuple[float, bool]:
    """A decimal float (sign, digits, fraction, exponent) from ``buf[s:e]``; (value, ok)."""
    if s >= e:
        return 0.0, False
    i = s
    neg = False
    if buf[i] == 45 or buf[i] == 43:  # - +
        neg = buf[i] == 45
        i += 1
    mant = 0.0
    nd = 0
    while i < e and 48 <= buf[i] <= 57:
        mant = mant * 10.0 + (buf[i] - 48)
        i += 1
        nd += 1
    exp10 = 0
    if i < e and buf[i] == 46:  # .
        i += 1
        while i < e and 48 <= buf[i] <= 57:
            mant = mant * 10.0 + (buf[i] - 48)
            exp10 -= 1
            i += 1
            nd += 1
    if nd == 0:
        return 0.0, False
    if i < e and (buf[i] == 101 or buf[i] == 69):  # e E
        i += 1
        eneg = False
        if i < e and (buf[i] == 45 or buf[i] == 43):
            eneg = buf[i] == 45
            i += 1
        ed = 0
        ev = 0
        while i < e and 48 <= buf[i] <= 57:
            ev = ev * 10 + (buf[i] - 48)
            i += 1
            ed += 1
        if ed == 0:
            return 0.0, False
        exp10 += -ev if eneg else ev
    if i != e:
        return 0.0, False
    if -23 < exp10 < 0:
        v = mant / _POW10[-exp10]  # exact powers: the same double as strtod for short inputs
    elif 0 <= exp10 < 23:
        v = mant * _POW10[exp10]
    elif exp10 < 0:
        v = mant / 10.0 ** (-exp10)
    else:
        v = mant * 10.0 ** exp10
    if not v <= 3.4028234663852886e38:  # inf in the float32 arrays, then NaN weights
        return 0.0, False
    return (-v if neg else v), True


@numba.njit(cache=True)
def _grow_i(a: np.ndarray, need: int) -> np.ndarray:
    if need <= len(a):
        return a
    b = np.empty(max(need, 2 * len(a)), a.dtype)
    b[:len(a)] = a
    return b


@numba.njit(cache=True, nogil=True)
def parse_vw_bytes(buf: np.ndarray, mask: int, qpairs: np.ndarray, constant: bool,
                   skip_bad: bool):  # noqa: ANN201 (numba tuple)
    """Parse VW text; returns (indptr, indices, values, labels, weights, tag_ptr, tag_blob,
    skipped, err_code, err_line) where err_line counts lines from 0 (blank lines included)."""
    n = len(buf)
    cap = n // 3 + 16
    indices = np.empty(cap, np.uint32)
    values = np.empty(cap, np.float32)
    nsch = np.empty(cap, np.uint8)
    ncap = n // 8 + 16
    indptr = np.empty(ncap + 1, np.int64)
    labels = np.empty(ncap, np.float32)
    weights = np.empty(ncap, np.float32)
    tag_ptr = np.empty(ncap + 1, np.int64)
    tag_blob = np.empty(1024, np.uint8)
    indptr[0] = 0
    tag_ptr[0] = 0
    nnz = 0
    nex = 0
    ntag = 0
    skipped = 0
    line = -1
    pos = 0
    const_idx = CONSTANT_HASH & mask
    while pos < n:
        line += 1
        ls = pos
        le = ls
        while le < n and buf[le] != 10:
            le += 1
        pos = le + 1
        # blank line?
        k = ls
        while k < le and _is_space(buf[k]):
            k += 1
        if k == le:
            continue
        err = 0
        bar = ls
        while bar < le and buf[bar] != 124:
            bar += 1
        if bar == le:
            err = 1
        label = np.nan
        weight = 1.0
        tag_s = 0
        tag_e = 0
        if err == 0:
            # label section: words; the last is the tag if it starts with ' or touches '|'
            nnum = 0
            i = ls
            while i < bar and err == 0:
                while i < bar and _is_space(buf[i]):
                    i += 1
                if i >= bar:
                    break
                ts = i
                while i < bar and not _is_space(buf[i]):
                    i += 1
                te = i
                if te == bar or buf[ts] == 39:
                    # a tag only if it is the last word
                    j = te
                    while j < bar and _is_space(buf[j]):
                        j += 1
                    if j == bar:
                        tag_s = ts + 1 if buf[ts] == 39 else ts
                        tag_e = te
                        continue
                v, ok = parse_float(buf, ts, te)
                if not ok:
                    err = 2
                elif nnum == 0:
                    label = v
                elif nnum == 1:
                    weight = v
                    if v < 0:
                        err = 6
                elif nnum >= 3:
                    err = 3
                nnum += 1
        ex_start = nnz
        if err == 0:
            i = bar
            ns_hash: int | np.int64 = 0  # hashstring_nb gives an int64
            ns_c = 32
            scale = 1.0
            while i < le and err == 0:
                c = buf[i]
                if c == 124:  # new namespace
                    i += 1
                    if i >= le or _is_space(buf[i]) or buf[i] == 124:
                        ns_hash = 0
                        ns_c = 32
                        scale = 1.0
                        continue
                    ts = i
                    while i < le and not _is_space(buf[i]) and buf[i] != 124:
                        i += 1
                    te = i
                    colon = ts
                    while colon < te and buf[colon] != 58:
                        colon += 1
                    scale = 1.0
                    if colon < te:
                        scale, ok = parse_float(buf, colon + 1, te)
                        if not ok:
                            err = 5
                    ns_hash = hashstring_nb(buf, ts, colon, 0)
                    ns_c = buf[ts]
                    continue
                if _is_space(c):
                    i += 1
                    continue
                ts = i
                while i < le and not _is_space(buf[i]) and buf[i] != 124:
                    i += 1
                te = i
                colon = te - 1
                while colon >= ts and buf[colon] != 58:
                    colon -= 1
                v = 1.0
                name_e = te
                if colon >= ts:
                    name_e = colon
                    v, ok = parse_float(buf, colon + 1, te)
                    if not ok:
                        err = 4
                        break
                v *= scale
                if v == 0.0:
                    continue
                h = hashstring_nb(buf, ts, name_e, ns_hash)
                if nnz + 1 > len(indices):
                    indices = _grow_i(indices, nnz + 1)
                    values = _grow_i(values, nnz + 1)
                    nsch = _grow_i(nsch, nnz + 1)
                indices[nnz] = h & mask
                values[nnz] = v
                nsch[nnz] = ns_c
                nnz += 1
        if err != 0:
            if skip_bad:
                skipped += 1
                nnz = ex_start
                continue
            return (indptr[:nex + 1], indices[:nnz], values[:nnz], labels[:nex], weights[:nex],
                    tag_ptr[:nex + 1], tag_blob[:ntag], skipped, err, line)
        # quadratic crosses of this example's features
        ex_end = nnz
        for q in range(qpairs.shape[0]):
            a = qpairs[q, 0]
            b = qpairs[q, 1]
            for p1 in range(ex_start, ex_end):
                if nsch[p1] != a:
                    continue
                p2s = p1 if a == b else ex_start
                for p2 in range(p2s, ex_end):
                    if nsch[p2] != b:
                        continue
                    if nnz + 1 > len(indices):
                        indices = _grow_i(indices, nnz + 1)
                        values = _grow_i(values, nnz + 1)
                        nsch = _grow_i(nsch, nnz + 1)
                    hh = ((np.int64(indices[p1]) * FNV_PRIME) ^ np.int64(indices[p2])) & mask
                    indices[nnz] = hh
                    values[nnz] = values[p1] * values[p2]
                    nsch[nnz] = 0
                    nnz += 1
        if constant:
            if nnz + 1 > len(indices):
                indices = _grow_i(indices, nnz + 1)
                values = _grow_i(values, nnz + 1)
                nsch = _grow_i(nsch, nnz + 1)
            indices[nnz] = const_idx
            values[nnz] = 1.0
            nsch[nnz] = 0
            nnz += 1
        if nex + 1 >= len(labels):
            labels = _grow_i(labels, nex + 2)
            weights = _grow_i(weights, nex + 2)
            indptr = _grow_i(indptr, nex + 3)
            tag_ptr = _grow_i(tag_ptr, nex + 3)
        labels[nex] = label
        weights[nex] = weight
        if tag_e > tag_s:
            tag_blob = _grow_i(tag_blob, ntag + tag_e - tag_s)
            tag_blob[ntag:ntag + tag_e - tag_s] = buf[tag_s:tag_e]
            ntag += tag_e - tag_s
        nex += 1
        indptr[nex] = nnz
        tag_ptr[nex] = ntag
    return (indptr[:nex + 1], indices[:nnz], values[:nnz], labels[:nex], weights[:nex],
            tag_ptr[:nex + 1], tag_blob[:ntag], skipped, 0, line)
