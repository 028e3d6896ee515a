"""Vowpal Wabbit text format, parsed in one numba pass over the raw bytes.

A line is ``[label [importance [base]]] ['tag]|ns[:scale] f[:v] f2 ... |ns2 ...``. As in VW:
the label section is read from past its first tab, if it has one; its last word is the tag
when it starts with ``'`` or touches the first ``|``; a line without ``|`` is all label
section, an example of the constant only (``1`` is an unlabelled example tagged ``1``,
``1 2`` label 1 with tag ``2``); a namespace ``|ns:2`` scales its values; ``| f`` is the
default namespace (hash 0);
features with value 0 are dropped; repeated features are kept (they add up in the dot
product, and the learner updates each occurrence as VW does); the constant (bias) feature
is added to every example; interactions (``-q ab``, ``--cubic``, ``--interactions``, with
``:`` wildcards) are built as VW builds them (see ``_interactions``); numbers are read as
VW reads them (see ``_vwfloat``); ``--ignore``/``--keep`` drop namespaces by their first
letter and ``--ignore_linear`` keeps them for interactions only. A label-section word
that only starts with a number (``1:1``) is that number, as VW reads it. Malformed lines are
reported with an error code and the line number, or skipped and counted; with ``lenient``
(``terascale vw``'s ``ParseOptions.lenient_labels``) the label sections VW reads with a
warning are read as VW reads them, and its lines returned as notes.
"""

from __future__ import annotations

import numba
import numpy as np

from .._io._crossing import count_interactions, emit_interactions
from .._io._hashing import CONSTANT_HASH, hashstring_nb, murmur3_32_nb
from ._vwfloat import parse_float, read_float32

__all__ = ["ERRORS", "multiclass_stop", "parse_float", "parse_vw_bytes"]

ERRORS = {
    2: "the label section has a word that is not a number",
    3: "the label section has more than three numbers (label, importance, base)",
    4: "a feature value is not a number",
    5: "a namespace scale is not a number",
    6: "an importance weight is negative",
    7: "a base (the third label number, VW's initial prediction) other than 0 is not "
       "supported: fold it into a feature",
    8: "a feature has more than one ':' (VW reads name:value; it reads x:1:2 as x with "
       "value 1 and drops the rest of the namespace, which terascale does not reproduce)",
    9: "a namespace without a name has a scale ('|:2'; VW warns that the example is "
       "malformed and drops the rest of the line, as terascale vw does)",
}


_SEP = np.zeros(256, np.bool_)  # what ends a feature token: space, tab, CR, '|', LF
_SEP[[32, 9, 13, 124, 10]] = True


@numba.njit(cache=True, inline="always")
def _is_space(c: int) -> bool:
    return c == 32 or c == 9 or c == 13


@numba.njit(cache=True)
def _text_value(buf: np.ndarray, s: int, e: int) -> bool:
    """Whether a feature's value ``buf[s:e]`` is text, which VW 9 reads as a string value
    (``color:red`` is the feature ``color^red`` with value 1, hashed with the name's hash as
    seed): a value that does not start as a number does (C's ``strtof`` reads none of it);
    ``nan``, ``inf`` and a number with trailing bytes (``2a``) do not, and stay errors."""
    if s >= e:
        return False
    c = buf[s] | 32  # (lower case)
    if (48 <= buf[s] <= 57) or buf[s] == 43 or buf[s] == 45 or buf[s] == 46:
        return False
    if e - s >= 3 and ((c == 110 and buf[s + 1] | 32 == 97 and buf[s + 2] | 32 == 110) or
                       (c == 105 and buf[s + 1] | 32 == 110 and buf[s + 2] | 32 == 102)):
        return False  # nan, inf, infinity
    return True


@numba.njit(cache=True)
def _past_empty_value(buf: np.ndarray, p: int, n: int) -> tuple[int, float, int, int]:
    """A feature written ``name:`` with nothing after the ':' (``p``: the byte after it)
    as VW 9's parser reads on past it: (kind, value, end of the value's text, where the
    line reads on; the text starts at ``p``'s first non-blank). Kind 0: a number (the
    name's feature with the number after the blanks, ``y: 3``; 0, dropped, where only
    blanks end the line); 1: a string value, the word after the blanks up to the next
    blank, ``|`` and ``:`` included (``y: w`` is ``y^w``, ``y:|b`` is ``y^|b``), or none
    at the line's end (``y:``: the name alone, value 1); 2: none VW reads as either (a
    word that starts as a number and is none, ``y: 3a``)."""
    le = p
    while le < n and buf[le] != 10:
        le += 1
    if le > p and buf[le - 1] == 13:  # (VW drops the line's last CR)
        le -= 1
    if p >= le:
        return 1, 1.0, p, p
    j = p
    while j < le and (buf[j] == 32 or buf[j] == 9):
        j += 1
    if j >= le:
        return 0, 0.0, j, j
    k = j
    while k < le and not _is_space(buf[k]):
        k += 1
    if j > p:
        v, ok = read_float32(buf, j, k)
        if ok:
            return 0, v, k, k
    return (1 if _text_value(buf, j, k) else 2), 1.0, k, k


@numba.njit(cache=True)
def _hex_digit(c: int) -> int:
    if 48 <= c <= 57:
        return c - 48
    c |= 32
    return c - 87 if 97 <= c <= 102 else -1


@numba.njit(cache=True)
def _hex_prefix(buf: np.ndarray, ts: int, te: int) -> tuple[float, bool]:
    """``strtof``'s reading of a hexadecimal number at the start of a word
    (``[+-]0x<hex>[.<hex>][p[+-]<digits>]``); not ok where there is none, or where it
    overflows a float."""
    s = ts + 1 if buf[ts] == 45 or buf[ts] == 43 else ts
    if s + 2 > te or buf[s] != 48 or buf[s + 1] | 32 != 120:
        return np.float32(np.nan), False
    v, i, nd = 0.0, s + 2, 0
    while i < te and _hex_digit(buf[i]) >= 0:
        v = v * 16.0 + _hex_digit(buf[i])
        i += 1
        nd += 1
    if i < te and buf[i] == 46:
        i += 1
        unit = 1.0 / 16.0
        while i < te and _hex_digit(buf[i]) >= 0:
            v += _hex_digit(buf[i]) * unit
            unit /= 16.0
            i += 1
            nd += 1
    if nd == 0:
        return np.float32(np.nan), False  # ('0x' alone: strtof reads the 0)
    if i < te and buf[i] | 32 == 112:
        j = i + 1
        neg = j < te and buf[j] == 45
        if j < te and (buf[j] == 45 or buf[j] == 43):
            j += 1
        k = _digits(buf, j, te)
        if k > j:
            x = 0
            for m in range(j, min(k, j + 6)):
                x = x * 10 + (buf[m] - 48)
            v = v * 2.0 ** (-x if neg else x)
    f = np.float32(-v if buf[ts] == 45 else v)
    return f, bool(np.isfinite(f))


@numba.njit(cache=True)
def _number_prefix(buf: np.ndarray, ts: int, te: int) -> tuple[float, bool]:
    """A label word that only starts with a number (``1:1``, ``2abc``): that number, as
    VW's simple-label parser reads it (its ``float_of_string`` stops at the first character
    that is not part of the number: C's ``strtof``, hexadecimal ``0x10`` too); not ok when
    no prefix is a number."""
    v, ok = _hex_prefix(buf, ts, te)
    if ok:
        return v, True
    e = ts  # up to the first character that no number has ('1e400' stays an overflow)
    while e < te and ((48 <= buf[e] <= 57) or buf[e] == 46 or buf[e] == 43 or buf[e] == 45
                      or buf[e] == 101 or buf[e] == 69):
        e += 1
    if e == te or e == ts:
        return np.float32(np.nan), False
    return read_float32(buf, ts, e)


@numba.njit(cache=True)
def _digits(buf: np.ndarray, i: int, te: int) -> int:
    while i < te and 48 <= buf[i] <= 57:
        i += 1
    return i


@numba.njit(cache=True)
def _mantissa(buf: np.ndarray, i: int, te: int) -> tuple[int, int]:
    """The end of ``digits[.digits]`` from ``i`` and how many digits it has."""
    m = _digits(buf, i, te)
    nd = m - i
    if m < te and buf[m] == 46:
        e = _digits(buf, m + 1, te)
        nd += e - m - 1
        m = e
    return m, nd


@numba.njit(cache=True)
def _vw_label_word(buf: np.ndarray, ts: int, te: int) -> tuple[float, int]:
    """A label word that neither :func:`read_float32` nor :func:`_number_prefix` reads, as
    VW's ``float_of_string`` reads it: (value, 0); (0, 1) where VW warns "is not a good
    float, replacing with 0" (no number at the start, or NaN); (0, 2) where VW reads an
    infinity (``inf``, an overflow), which is refused.

    VW's own loop reads ``[-]digits[.digits][(e|E)[-]digits]``; where that is the whole
    word its value stands even without digits (``-``, ``.``, ``e5``: 0; ``1e``: 1), else
    ``strtof`` reads the word's longest number prefix (``1-2``: 1; ``+.5x``: 0.5)."""
    m, nd = _mantissa(buf, ts + 1 if buf[ts] == 45 else ts, te)
    i = m
    if i < te and (buf[i] == 101 or buf[i] == 69):
        i += 1
        if i < te and buf[i] == 45:
            i += 1
        i = _digits(buf, i, te)
    if i == te:  # VW's loop read it all
        if nd == 0:
            return (-0.0 if buf[ts] == 45 else 0.0), 0
        v, ok = read_float32(buf, ts, m)
        return (v, 0) if ok else (0.0, 2)
    # strtof: [+-] digits [. digits] | . digits, then [(e|E)[+-]digits]
    k = ts + 1 if buf[ts] == 45 or buf[ts] == 43 else ts
    m, nd = _mantissa(buf, k, te)
    if nd > 0:
        if m < te and (buf[m] == 101 or buf[m] == 69):
            j = m + 1
            if j < te and (buf[j] == 45 or buf[j] == 43):
                j += 1
            e = _digits(buf, j, te)
            if e > j:
                m = e
        v, ok = parse_float(buf, ts, m)
        if not ok:
            return 0.0, 2
        return float(np.float32(v)), 0
    c = buf[k] | 32 if k < te else 0
    return 0.0, 2 if c == 105 and k + 2 < te and buf[k + 1] | 32 == 110 and \
        buf[k + 2] | 32 == 102 else 1  # inf, infinity: VW reads infinity


@numba.njit(cache=True, nogil=True)
def multiclass_stop(buf: np.ndarray) -> tuple[int, int, int, int, int, int]:
    """Where VW's multiclass label parser (``--oaa``) throws in the text ``buf`` (whole
    lines): (kind, line, examples before it, count, start, end); kind 0: nowhere (line and
    examples are then ``buf``'s counts of lines and examples), 1: the label word at
    start:end is not one integer that C's ``strtol`` reads whole (``2.0``, ``1:1``,
    ``3e0``), 2: the label section has ``count`` words, more than two. The label section
    and its tag are the parser's (:func:`parse_vw_bytes`); an empty line is no example."""
    n = len(buf)
    pos = 0
    line = 0
    nex = 0
    while pos < n:
        ls = pos
        bar = ls
        while bar < n and buf[bar] != 124 and buf[bar] != 10:
            bar += 1
        end = bar
        while end < n and buf[end] != 10:
            end += 1
        lend = bar
        if bar == n or buf[bar] == 10:
            if bar == ls or (bar == ls + 1 and buf[ls] == 13):
                line += 1
                pos = end + 1
                continue
            if buf[lend - 1] == 13:
                lend -= 1
        i = ls
        k = ls
        while k < lend:
            if buf[k] == 9:
                i = k + 1
                break
            k += 1
        words = 0
        fs = fe = ls
        while i < lend:
            while i < lend and _is_space(buf[i]):
                i += 1
            if i >= lend:
                break
            ts = i
            while i < lend and not _is_space(buf[i]):
                i += 1
            te = i
            if te == lend or buf[ts] == 39:
                j = te
                while j < lend and _is_space(buf[j]):
                    j += 1
                if j == lend:  # the tag
                    continue
            if words == 0:
                fs, fe = ts, te
            words += 1
        if words > 2:
            return 2, line, nex, words, fs, fe
        if words:
            d = fs + 1 if buf[fs] == 43 or buf[fs] == 45 else fs
            if _digits(buf, d, fe) == d or _digits(buf, d, fe) != fe:
                return 1, line, nex, words, fs, fe
        line += 1
        nex += 1
        pos = end + 1
    return 0, line, nex, 0, 0, 0


@numba.njit(cache=True, nogil=True)
def _note(notes: np.ndarray, k: int, kind: int, count: int, s: int, e: int) -> np.ndarray:
    """Row ``k`` of the notes: (kind, count, start, end)."""
    notes = _grow_i(notes, 4 * k + 4)
    notes[4 * k], notes[4 * k + 1], notes[4 * k + 2], notes[4 * k + 3] = kind, count, s, e
    return notes


@numba.njit(cache=True)
def _grow_i(a: np.ndarray, need: int) -> np.ndarray:
    if need <= len(a):
        return a
    b = np.empty(max(need, 2 * len(a)), a.dtype)
    b[:len(a)] = a
    return b


@numba.njit(cache=True, nogil=True)
def _features(buf: np.ndarray, bar: int, n: int, mask: int, ignore: np.ndarray,
              indices: np.ndarray, values: np.ndarray, nsch: np.ndarray,
              nnz: int, opened: np.ndarray, stamp: int) -> tuple[int, int, int, bool]:
    """The features of the line whose first '|' is ``buf[bar]``, appended at ``nnz``, up to
    its line break (or ``n``); returns (new nnz, error code or 0, where it stopped: the line
    break, ``n``, or the token in error, whether each namespace character's features form
    one run). Error -1: the arrays are full (the caller grows them and parses the line
    again). ``opened[c] == stamp``: namespace character c was opened on this line."""
    err = 0
    runs = True
    i = bar
    cap = len(indices)
    ns_hash: int | np.int64 = 0  # hashstring_nb gives an int64
    anon = 0  # the namespace's running count of anonymous (:v) features
    ns_c = 32
    scale = np.float32(1.0)
    while i < n and err == 0:
        c = buf[i]
        if c == 10:
            break
        if c == 124:  # new namespace
            i += 1
            anon = 0
            if i >= n or _SEP[buf[i]]:
                ns_hash = 0
                if opened[32] == stamp and ns_c != 32:
                    runs = False
                ns_c = 32
                opened[32] = stamp
                scale = np.float32(1.0)
                continue
            ts = i
            if buf[ts] == 58:  # |:2
                err = 9
                break
            while i < n and not _SEP[buf[i]]:
                i += 1
            te = i
            colon = ts
            while colon < te and buf[colon] != 58:
                colon += 1
            scale = np.float32(1.0)
            if colon < te:
                sv, ok = read_float32(buf, colon + 1, te)
                scale = np.float32(sv)
                if not ok:
                    err = 5
            ns_hash = hashstring_nb(buf, ts, colon, 0)
            if opened[buf[ts]] == stamp and buf[ts] != ns_c:
                runs = False  # a namespace character opened again after another one
            ns_c = buf[ts]
            opened[ns_c] = stamp
            continue
        if _is_space(c):
            i += 1
            continue
        ts = i
        colon = ts - 1  # the last ':' of the token, found on the way (one pass per token)
        colons = 0
        while i < n:
            c = buf[i]
            if _SEP[c]:
                break
            if c == 58:
                colon = i
                colons += 1
            i += 1
        te = i
        if colons > 1:
            err = 8
            break
        fv = 1.0
        name_e = te
        text = False  # a string value (name:text, VW 9's chain hash)
        vs, ve = colon + 1, te  # (its text)
        if colon >= ts:
            name_e = colon
            if colon + 1 == te and colon > ts:  # name: with nothing after the ':'
                how, fv, ve, i = _past_empty_value(buf, te, n)
                if how == 2:
                    err = 4
                    break
                text = how == 1
                while vs < ve and _is_space(buf[vs]):
                    vs += 1
            else:
                fv, ok = read_float32(buf, colon + 1, te)
                if not ok:
                    if colon == ts or not _text_value(buf, colon + 1, te):
                        err = 4
                        break
                    fv, text = 1.0, True
        # VW: namespace scale times value, in float; a string value is 1, unscaled
        v32 = np.float32(1.0) if text else scale * np.float32(fv)
        # an anonymous feature (:v) is the namespace hash plus its running count in this
        # namespace, counted before a zero value drops it, as VW's parser does
        h = ns_hash + anon
        if name_e == ts:
            anon += 1
        if v32 == 0.0 or ignore[ns_c]:
            continue
        if nnz == cap:
            err = -1
            break
        if name_e > ts:
            c0 = buf[ts]  # VW's digit rule needs every byte a digit: most names fail at once
            if c0 < 48 or c0 > 57:
                h = murmur3_32_nb(buf, ts, name_e, ns_hash)
            else:
                h = hashstring_nb(buf, ts, name_e, ns_hash)
            if text and ve > vs:  # VW: the value's hash, seeded with the name's
                h = hashstring_nb(buf, vs, ve, h)
        indices[nnz] = h & mask
        values[nnz] = v32
        nsch[nnz] = ns_c
        nnz += 1
    return nnz, err, i, runs


@numba.njit(cache=True, nogil=True)
def _grouped(nsch: np.ndarray, indices: np.ndarray, values: np.ndarray, ex_start: int,
             nnz: int, ignore_linear: np.ndarray, table: np.ndarray, constant: bool,
             const_idx: int, mask: int, gidx: np.ndarray, gval: np.ndarray,
             gstart: np.ndarray, gend: np.ndarray, cnt: np.ndarray,
             order: np.ndarray):  # noqa: ANN202
    """One example's features ``[ex_start, nnz)`` in VW's order, then the constant and the
    interactions; returns (nnz, indices, values, nsch, gidx, gval), the arrays grown where
    needed. (The parser's path where a namespace character comes back later in a line,
    interactions are built or ``--ignore_linear`` drops some.)"""
    # group by namespace character, in order of first appearance (VW's ec.indices);
    # where every namespace's features already form one run (click data, most VW
    # files) and none is --ignore_linear, the grouped order is the parsed order and
    # the features stay where they are: only their spans are recorded
    m = nnz - ex_start
    no = 0
    runs = True
    prev = -1
    dropped = 0  # --ignore_linear's features (VW counts them)
    for k in range(ex_start, nnz):
        c = nsch[k]
        if cnt[c] == 0:
            order[no] = c
            no += 1
        elif c != prev:
            runs = False
        cnt[c] += 1
        prev = c
    for q in range(no):
        if ignore_linear[order[q]]:
            runs = False
    off = 0
    for q in range(no):
        c = order[q]
        gstart[c] = off
        gend[c] = off + cnt[c] if runs else off
        off += cnt[c]
    if not runs:
        if m > len(gidx):
            gidx = np.empty(2 * m, np.uint32)
            gval = np.empty(2 * m, np.float32)
        for k in range(ex_start, nnz):
            c = nsch[k]
            gidx[gend[c]] = indices[k]
            gval[gend[c]] = values[k]
            gend[c] += 1
        nnz = ex_start
        for q in range(no):
            c = order[q]
            if ignore_linear[c]:
                dropped += gend[c] - gstart[c]
                continue
            for k in range(gstart[c], gend[c]):
                indices[nnz] = gidx[k]
                values[nnz] = gval[k]
                nnz += 1
    extra = 1 + count_interactions(table, gstart, gend)
    if nnz + extra > len(indices):
        indices = _grow_i(indices, nnz + extra)
        values = _grow_i(values, nnz + extra)
        nsch = _grow_i(nsch, nnz + extra)
    if constant:
        indices[nnz] = const_idx
        values[nnz] = 1.0
        nnz += 1
    if table.shape[0] > 0:  # the grouped features: in gidx/gval, or still in place
        if runs:
            nnz = emit_interactions(table, gstart, gend, indices[ex_start:ex_start + m],
                                    values[ex_start:ex_start + m], mask, indices, values,
                                    nnz)
        else:
            nnz = emit_interactions(table, gstart, gend, gidx, gval, mask, indices,
                                    values, nnz)
    for q in range(no):
        c = order[q]
        cnt[c] = 0
        gstart[c] = 0
        gend[c] = 0
    return nnz, indices, values, nsch, gidx, gval, dropped


@numba.njit(cache=True, nogil=True)
def _counts(a: np.ndarray, k: int, n: int) -> np.ndarray:
    """The first ``k`` counts of ``a``, zeros to ``n``; empty where all are 0."""
    if k == 0:
        return np.zeros(0, np.int64)
    out = np.zeros(n, np.int64)
    out[:k] = a[:k]
    return out


@numba.njit(cache=True, nogil=True)
def parse_vw_bytes(buf: np.ndarray, mask: int, table: np.ndarray, constant: bool,
                   skip_bad: bool, ignore: np.ndarray, ignore_linear: np.ndarray,
                   lenient: bool = False):  # noqa: ANN201
    """Parse VW text; returns (indptr, indices, values, labels, weights, tag_ptr, tag_blob,
    skipped, err_code, err_line, blanks, ignored, notes) where err_line counts lines from 0
    (empty lines included), ``notes`` are, with ``lenient`` (``terascale vw``'s reading of
    label sections, see :attr:`.._io._dataset.ParseOptions.lenient_labels`), VW's lines on the
    label sections it reads anyway, rows of (kind, count, start, end): 1 a word that is no
    number or NaN, read as 0 (the word at start:end); 2 a label of ``count`` words, more
    than three, the example read unlabelled (the words at start:end); 3 a namespace
    without a name with a scale (``|:2``) on line ``count`` of ``buf``, the rest of the
    line dropped (its features from the first ``|`` at start:end, a CR left out);
    without ``lenient`` all three are errors. ``ignored`` is each example's count of
    ``--ignore_linear``'s features (which VW counts in its feature counts; empty where
    there are none) and ``blanks`` holds, for each empty line (``\\n`` or ``\\r\\n``
    alone), the index of the example it precedes: VW counts an empty line as an example
    for the holdout (``--holdout_period``, ``--holdout_after``) and learns nothing from
    it. A line of spaces and tabs is, as in VW, an unlabelled example of the constant
    only.

    ``table`` is :func:`._interactions.interaction_table`; ``ignore`` and ``ignore_linear``
    are 256 flags by namespace character (``--ignore``/``--keep``, ``--ignore_linear``).
    Features come out in VW's order: by namespace character in order of first appearance
    (a namespace that comes back later in the line joins its first group), the constant,
    then the interactions."""
    n = len(buf)
    # about what click-style text fills (a feature per ~6 bytes), grown where a line needs
    # more: the used part is then returned as a view, not copied (see the end)
    cap = n // 5 + 16
    indices = np.empty(cap, np.uint32)
    values = np.empty(cap, np.float32)
    nsch = np.empty(cap, np.uint8)
    ncap = n // 8 + 16
    indptr = np.empty(ncap + 1, np.int64)
    labels = np.empty(ncap, np.float32)
    weights = np.empty(ncap, np.float32)
    tag_ptr = np.empty(ncap + 1, np.int64)
    tag_blob = np.empty(1024, np.uint8)
    # one example's features grouped by namespace character
    gidx = np.empty(256, np.uint32)
    gval = np.empty(256, np.float32)
    gstart = np.zeros(256, np.int64)
    gend = np.zeros(256, np.int64)
    cnt = np.zeros(256, np.int64)
    order = np.empty(256, np.int64)
    indptr[0] = 0
    tag_ptr[0] = 0
    nnz = 0
    nex = 0
    ntag = 0
    skipped = 0
    line = -1
    pos = 0
    const_idx = CONSTANT_HASH & mask
    opened = np.zeros(256, np.int64)  # the line (+1) on which a namespace character opened
    plain = table.shape[0] == 0 and not ignore_linear.any()
    runs = True
    blanks = np.empty(16, np.int64)
    nblank = 0
    ignored = np.zeros(0, np.int64)  # per example up to the last with any (see the end)
    nignored = 0
    # (lenient) VW's lines on the label sections it reads: rows of (kind, count, start, end)
    notes = np.empty(0, np.int64)
    nnote = 0
    pend = np.empty(8, np.int64)  # a line's label words VW warns of: (start, end) pairs
    while pos < n:
        line += 1
        ls = pos
        # the label section: up to the first '|' (or the line's end: blank, or an error);
        # the features' loop finds the line's end, so each line is read once
        bar = ls
        while bar < n and buf[bar] != 124 and buf[bar] != 10:
            bar += 1
        # where the label section ends: the first '|', or on a line without one (an example
        # of the constant only, as VW reads it) the line's end before a CR
        lend = bar
        if bar == n or buf[bar] == 10:
            if bar == ls or (bar == ls + 1 and buf[ls] == 13):
                # an empty line: no example, but VW counts it as one for the holdout
                if nblank == len(blanks):
                    blanks = _grow_i(blanks, 2 * nblank)
                blanks[nblank] = nex
                nblank += 1
                pos = bar + 1
                continue
            if buf[lend - 1] == 13:
                lend -= 1
        err = 0
        label = np.nan
        weight = 1.0
        base = 0.0
        tag_s = 0
        tag_e = 0
        npend = 0
        bad = False
        words_s = words_e = ls
        if err == 0:
            # label section: words; the last is the tag if it starts with ' or touches '|';
            # VW reads it from past its first tab (``1\t|a x`` is unlabelled)
            nnum = 0
            i = ls
            k = ls
            while k < lend:
                if buf[k] == 9:
                    i = k + 1
                    break
                k += 1
            while i < lend and err == 0:
                while i < lend and _is_space(buf[i]):
                    i += 1
                if i >= lend:
                    break
                ts = i
                while i < lend and not _is_space(buf[i]):
                    i += 1
                te = i
                if te == lend or buf[ts] == 39:
                    # a tag only if it is the last word
                    j = te
                    while j < lend and _is_space(buf[j]):
                        j += 1
                    if j == lend:
                        tag_s = ts + 1 if buf[ts] == 39 else ts
                        tag_e = te
                        continue
                if nnum == 0:
                    words_s = ts
                words_e = te
                nnum += 1
                if lenient and nnum > 3:
                    continue  # (VW reads no word of a label of more than three)
                v, ok = read_float32(buf, ts, te)
                if not ok:
                    v, ok = _number_prefix(buf, ts, te)
                if not ok and lenient:
                    v, how = _vw_label_word(buf, ts, te)
                    ok = how != 2
                    if how == 1:  # VW: "'#' is not a good float, replacing with 0"
                        if npend == len(pend) // 2:
                            pend = _grow_i(pend, 2 * len(pend))
                        pend[2 * npend], pend[2 * npend + 1] = ts, te
                        npend += 1
                if not ok:
                    if lenient:
                        bad = True
                    else:
                        err = 2
                elif nnum == 1:
                    label = v
                elif nnum == 2:
                    weight = v
                    if v < 0 and not lenient:
                        err = 6
                elif nnum == 3:
                    base = v
                else:
                    err = 3
            if lenient and err == 0:
                if nnum > 3:
                    # VW: "Error: 4 is too many tokens for a simple label: 1 2 0 4", the
                    # example read unlabelled
                    label, weight, base = np.nan, 1.0, 0.0
                    notes = _note(notes, nnote, 2, nnum, words_s, words_e)
                    nnote += 1
                elif bad:
                    err = 2
                else:
                    for k in range(npend):
                        notes = _note(notes, nnote, 1, 0, pend[2 * k], pend[2 * k + 1])
                        nnote += 1
                    if weight < 0:
                        err = 6
            if err == 0 and base != 0.0:
                err = 7
        ex_start = nnz
        if err == 0:
            # the token loop runs in a function whose arrays never change (growing them
            # inside the loop made numba reload them on every token, ~3x slower on
            # click-style data): when they are full it stops, and the line is parsed again
            # into arrays twice the size
            while True:
                nnz, err, stop, runs = _features(buf, bar, n, mask, ignore, indices, values,
                                                 nsch, ex_start, opened, line + 1)
                if err == 9 and lenient:  # VW: "malformed example!", the rest dropped
                    le = stop
                    while le < n and buf[le] != 10:
                        le += 1
                    notes = _note(notes, nnote, 3, line, bar, le - (buf[le - 1] == 13))
                    nnote += 1
                    err = 0
                if err != -1:
                    break
                indices = _grow_i(indices, 2 * len(indices))
                values = _grow_i(values, 2 * len(values))
                nsch = _grow_i(nsch, 2 * len(nsch))
            while stop < n and buf[stop] != 10:  # (only where an error stopped it)
                stop += 1
            pos = stop + 1
        else:  # an error in the label section: skip the line
            while bar < n and buf[bar] != 10:
                bar += 1
            pos = bar + 1
        if err != 0:
            if skip_bad:
                skipped += 1
                nnz = ex_start
                continue
            return (indptr[:nex + 1], indices[:nnz], values[:nnz], labels[:nex], weights[:nex],
                    tag_ptr[:nex + 1], tag_blob[:ntag], skipped, err, line,
                    blanks[:nblank].copy(), ignored[:0].copy(), notes[:4 * nnote].copy())
        if runs and plain:  # the parsed order is VW's: no grouping, no interactions
            if constant:
                if nnz == len(indices):
                    indices = _grow_i(indices, nnz + 1)
                    values = _grow_i(values, nnz + 1)
                    nsch = _grow_i(nsch, nnz + 1)
                indices[nnz] = const_idx
                values[nnz] = 1.0
                nnz += 1
        else:
            nnz, indices, values, nsch, gidx, gval, dropped = _grouped(
                nsch, indices, values, ex_start, nnz, ignore_linear, table, constant,
                const_idx, mask, gidx, gval, gstart, gend, cnt, order)
            if dropped:
                ignored = _grow_i(ignored, nex + 1)
                ignored[nignored:nex] = 0
                ignored[nex] = dropped
                nignored = nex + 1
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
    # the features' arrays as views where at least half is used (copying them cost 12% of
    # the parse on click data), else copies: a view keeps all of its buffer alive for every
    # block in flight; the per-example arrays are sized for the shortest lines: copies
    if 2 * nnz >= len(indices):
        indices, values = indices[:nnz], values[:nnz]
    else:
        indices, values = indices[:nnz].copy(), values[:nnz].copy()
    return (indptr[:nex + 1].copy(), indices, values, labels[:nex].copy(),
            weights[:nex].copy(), tag_ptr[:nex + 1].copy(), tag_blob[:ntag].copy(),
            skipped, 0, line, blanks[:nblank].copy(), _counts(ignored, nignored, nex),
            notes[:4 * nnote].copy())
