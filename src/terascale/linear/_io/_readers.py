"""Parsers: VW text, libsvm/svmlight and CSV records into a Dataset.

A worker's shard is either a subset of the files (when there are at least as many files as
workers) or, for fewer files, the k-th of N equal byte ranges of the files' contents one
after the other, cut at record ends, as Hadoop splits text: every worker reads a disjoint,
contiguous part of the input and no line twice
(:mod:`._stream` reads a range in bounded chunks; this module parses one chunk).
Parsing runs in the compiled parser or numba over the raw bytes (VW text:
:func:`.._vw._vwtext_fast.parse_vw`; libsvm: :mod:`._libsvm`, imported where a file is
libsvm's, so that a run of VW text on the compiled parser imports no numba); a malformed
line raises :class:`DataError` with
the file and line number (or, with ``skip_bad``, is counted and reported).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from ..._errors import ConfigError, DataError
from .._names import opt
from .._vw._vwtext_fast import parse_vw
from ._dataset import Dataset, ParseOptions
from ._hashnames import CONSTANT_HASH
from ._stream import shard_places

__all__ = ["parse_bytes", "parse_lines", "parse_text", "quoted_line", "read_file",
           "shard_files", "shard_places"]

def _byte_range(buf: np.ndarray, k: int, n: int) -> tuple[int, int]:
    """The k-th of n ranges of ``buf``, each starting just after a line break."""
    size = len(buf)

    def cut(i: int) -> int:
        if i <= 0:
            return 0
        if i >= size:
            return size
        j = np.flatnonzero(buf[i - 1:] == 10)
        return size if len(j) == 0 else i + int(j[0])

    return cut(size * k // n), cut(size * (k + 1) // n)


def _line_text(buf: np.ndarray, line: int) -> str:
    starts = np.concatenate([[0], np.flatnonzero(buf == 10) + 1])
    if line >= len(starts):
        return ""
    s = int(starts[line])
    e = int(starts[line + 1]) - 1 if line + 1 < len(starts) else len(buf)
    return quoted_line(bytes(buf[s:e]).decode(errors="replace"))


def quoted_line(text: str) -> str:
    """A line of input as an error quotes it: without its line break, cut to 120
    characters."""
    text = text.rstrip("\n").rstrip("\r")
    return text if len(text) <= 120 else text[:117] + "..."


_PARALLEL_BYTES = 4 << 20  # below this, one thread parses
_F32_MAX = float(np.finfo(np.float32).max)  # larger values become inf in the float32 arrays


def parse_bytes(buf: np.ndarray, opts: ParseOptions, *, source: str = "<lines>",
                first_line: int = 1) -> Dataset:
    """Parse raw text (uint8 array) in ``opts.format``; errors name ``source`` and the line.

    Large inputs are cut at line breaks into one part per core, parsed by threads (the C
    and numba parsers release the GIL) and joined in order; the result is the same as one
    thread's.
    """
    if opts.format == "csv":
        return _parse_csv(bytes(buf), opts, source=source, first_line=first_line)
    threads = min(os.cpu_count() or 1, 8)
    if len(buf) < _PARALLEL_BYTES or threads < 2:
        return _parse_one(buf, opts, source, first_line)
    from concurrent.futures import ThreadPoolExecutor

    cuts = [_byte_range(buf, k, threads) for k in range(threads)]
    firsts = [first_line + int(np.count_nonzero(buf[:s] == 10)) for s, _ in cuts]
    with ThreadPoolExecutor(threads) as ex:
        parts = list(ex.map(lambda i: _parse_one(buf[cuts[i][0]:cuts[i][1]], opts, source,
                                                 firsts[i]), range(threads)))
    ds = Dataset.concat(parts)
    ds.sources = [source]
    return ds


def _parse_one(buf: np.ndarray, opts: ParseOptions, source: str,
               first_line: int | Callable[[], int]) -> Dataset:
    if opts.format == "vw":
        (indptr, indices, values, labels, weights, tag_ptr, tag_blob, skipped, err,
         line, blanks, ignored, notes) = parse_vw(buf, opts.mask, opts.interaction_table(),
                                                  opts.constant, opts.skip_bad,
                                                  *opts.namespace_flags(), opts.lenient_labels)
        msgs = None
    else:
        from ._libsvm import ERRORS, parse_libsvm

        indptr, indices, values, labels, skipped, err, line = parse_libsvm(
            buf, opts.mask, opts.constant, opts.skip_bad)
        weights = np.ones(len(labels), np.float32)
        tag_ptr = tag_blob = blanks = ignored = notes = None
        msgs = ERRORS
    if err:
        if msgs is None:  # (only the numba parser reports one)
            from .._vw._vwparse import ERRORS as msgs
        if callable(first_line):  # counted only now: a worker that seeked has no count
            first_line = first_line()
        raise DataError(f"{source}, line {first_line + line}: {msgs[err]}: "
                        f"{_line_text(buf, line)!r}")
    return Dataset(indptr=indptr, indices=indices, values=values, labels=labels,
                   weights=weights, bits=opts.bits, tag_ptr=tag_ptr, tag_blob=tag_blob,
                   skipped=int(skipped), sources=[source], parse=opts,
                   blanks=blanks if blanks is not None and len(blanks) else None,
                   ignored=ignored if ignored is not None and len(ignored) else None,
                   notes=_notes(buf, notes, first_line)
                   if notes is not None and len(notes) else None)


def _notes(buf: np.ndarray, rows: np.ndarray,
           first_line: int | Callable[[], int]) -> list[str]:
    """VW's lines for the parser's notes (``parse_vw_bytes``, ``lenient_labels``): its warning
    on a label word that is no number, its error on a label of more than three words, its
    two warnings on a namespace without a name with a scale (``|:2``), which name the
    example by its line from 0 (``first_line``: the 1-based line of ``buf``'s first)."""
    out = []
    for kind, count, s, e in rows.reshape(-1, 4).tolist():
        text = bytes(buf[s:e]).decode("utf-8", "surrogateescape")
        if kind == 1:
            out.append(f"[warning] '{text}' is not a good float, replacing with 0")
        elif kind == 2:
            out.append(f"[error] Error: {count} is too many tokens for a simple label: "
                       + " ".join(text.split()))
        else:
            if callable(first_line):
                first_line = first_line()
            where = (f"\"{text[:text.index('|:') + 1]}\"in Example "
                     f"#{first_line - 1 + count}: \"{text}\"")
            out.append(f"[warning] malformed example! '|',String,space, or EOL expected "
                       f"after : {where}")
            out.append(f"[warning] malformed example! '|' or EOL expected after : {where}")
    return out


def _parse_csv(data: bytes, opts: ParseOptions, *, source: str, first_line: int,
               need_label: bool = True) -> Dataset:
    """CSV with a header: the label column, numeric columns (feature ``name:value`` in
    namespace ``name``) and categorical columns (feature ``value`` in namespace ``name``).
    Without ``need_label`` (predicting) a file may lack the label column."""
    import pandas as pd

    try:
        df = pd.read_csv(io.BytesIO(data), low_memory=False)
    except pd.errors.EmptyDataError:
        raise DataError(f"{source}: empty CSV (no header line)") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise DataError(f"{source}: bad CSV: {e}") from None
    if opts.label not in df.columns and not need_label:
        df[opts.label] = np.nan
    if opts.label not in df.columns:
        shown = ", ".join(map(str, df.columns[:20])) + (", ..." if len(df.columns) > 20 else "")
        raise ConfigError(f"{opt('label', opts.label)}: {source} has no such column "
                          f"(columns: {shown})")
    names = {str(c) for c in df.columns}
    for name, wanted in (("categorical", opts.categorical), ("ignore", opts.ignore)):
        missing = [c for c in wanted if c not in names]
        if missing:
            raise ConfigError(f"{opt(name, missing[0])}: {source} has no such column")
    lab = pd.to_numeric(df[opts.label], errors="coerce").to_numpy(np.float64)
    bad = np.flatnonzero((np.isnan(lab) & df[opts.label].notna().to_numpy())
                         | (np.abs(lab) > _F32_MAX))
    keep = np.ones(len(df), bool)
    if len(bad):
        if not opts.skip_bad:
            r = int(bad[0])
            raise DataError(f"{source}, line {first_line + r + 1}: the label "
                            f"{df[opts.label].iloc[r]!r} is not a (finite) number")
        keep[bad] = False
    from ._hashing import hash_feature, hash_space

    cols = [c for c in df.columns if c != opts.label and c not in opts.ignore]
    n = len(df)
    k = len(cols) + (1 if opts.constant else 0)
    idx = np.zeros((n, k), np.uint32)
    val = np.zeros((n, k), np.float32)
    for j, c in enumerate(cols):
        ns = hash_space(str(c))
        col = df[c]
        categorical = str(c) in opts.categorical
        if pd.api.types.is_bool_dtype(col) or not pd.api.types.is_numeric_dtype(col):
            col = col.astype(object)
        # Decided per cell, not per column, so that a stray "?" in one file or one
        # worker's shard does not turn the whole column into categories there only: a
        # number is the value of feature ``c``, any other text is the category ``text``.
        num = (np.full(n, np.nan) if categorical
               else np.array(pd.to_numeric(col, errors="coerce"), np.float64))
        isnum = ~np.isnan(num)
        huge = np.flatnonzero(isnum & (np.abs(num) > _F32_MAX))  # inf, 1e400: NaN weights
        if len(huge):
            if not opts.skip_bad:
                r = int(huge[0])
                raise DataError(f"{source}, line {first_line + r + 1}: column {c!r}: "
                                f"{str(col.iloc[r])!r} is not a finite number (within "
                                f"float32)")
            keep[huge] = False
            num[huge] = 0.0
        codes, uniq = pd.factorize(col.where(~isnum))
        h = np.array([hash_feature(str(u), ns, opts.bits) for u in uniq] + [0], np.uint32)
        idx[:, j] = np.where(isnum, hash_feature(str(c), ns, opts.bits), h[codes])
        val[:, j] = np.where(isnum, num, (codes >= 0).astype(np.float32))
    if opts.constant:
        idx[:, -1] = CONSTANT_HASH & opts.mask
        val[:, -1] = 1.0
    skipped = int(np.count_nonzero(~keep))
    idx, val, lab = idx[keep], val[keep], lab[keep]
    present = val != 0
    indptr = np.concatenate([[0], np.cumsum(present.sum(axis=1))]).astype(np.int64)
    return Dataset(indptr=indptr, indices=idx[present], values=val[present],
                   labels=lab.astype(np.float32), weights=np.ones(len(lab), np.float32),
                   bits=opts.bits, skipped=skipped, sources=[source], parse=opts)


def parse_text(buf: np.ndarray, opts: ParseOptions, *, source: str,
               first_line: int | Callable[[], int] = 1, header: bytes = b"",
               need_label: bool = True) -> Dataset:
    """One chunk of whole records (``first_line``: the number of its first line, or a
    function that counts it, called only for an error message); CSV chunks come with
    the file's ``header`` line."""
    if opts.format == "csv":
        fl = first_line() if callable(first_line) else first_line
        return _parse_csv(header + bytes(buf), opts, source=source, first_line=fl - 1,
                          need_label=need_label)
    return _parse_one(buf, opts, source, first_line)


def read_file(path: str, opts: ParseOptions, *, shard: tuple[int, ...] = (0, 1),
              need_label: bool = True) -> Dataset:
    """Part ``shard`` of one file (the whole file for ``(0, 1)``) in memory; with
    ``need_label=False`` a CSV file may lack the label column (data to predict).

    For data that may not fit in memory use :class:`TextBlocks` or the cache instead:
    they stream the same records block by block.

    Parameters
    ----------
    path
        The file (plain, ``.gz`` or ``.zip``).
    opts
        How to parse it (:class:`ParseOptions`).
    shard
        ``(k, n)``: part ``k`` of ``n`` (default ``(0, 1)``: the whole file); ``(start,
        end, size)``: its bytes ``start:end`` of ``size``.
    need_label
        Whether every example needs a label (default True).
    """
    from ._stream import TextBlocks

    return TextBlocks(path, opts, shard=shard, need_label=need_label).dataset()


def shard_files(paths: Sequence[str], k: int, n: int) -> list[tuple[str, tuple[int, ...]]]:
    """(file, shard) for worker k of n, the workers' shards in rank order the input in the
    order given (a chain learns them in one worker's order, and the holdout, every K-th
    example of the whole input, holds out the same examples whatever n): whole files
    (shard ``(0, 1)``) when there are enough of them, each worker a run of consecutive
    files (worker 0 the first); with fewer files than workers, the k-th of n equal byte
    ranges of the files' contents one after the other, a part of each file it crosses
    (shard ``(start, end, size)``: the file's bytes ``start:end`` of ``size``, cut at line
    ends, each file's lines numbered as in the file). See :func:`shard_places`."""
    return [(p, sh) for _, p, sh in shard_places(paths, k, n)]


def parse_lines(lines: Iterable[str | bytes], *, format: str = "vw", bits: int = 18,
                quadratic: Sequence[str] = (), label: str = "label",
                categorical: Sequence[str] = (), ignore: Sequence[str] = (),
                skip_bad: bool = False, constant: bool = True, cubic: Sequence[str] = (),
                interactions: Sequence[str] = (), keep: Sequence[str] = (),
                ignore_linear: Sequence[str] = ()) -> Dataset:
    """In-memory data from text lines (for Spark/Ray partitions and tests).

    >>> d = parse_lines(["1 |a x y:2", "-1 |a z"], bits=18)
    >>> len(d), d.n_features
    (2, 5)

    The options are the :class:`ParseOptions` fields of the same names.

    Parameters
    ----------
    lines
        The examples, one per line (str or bytes).
    format
        ``"vw"`` (the default), ``"libsvm"`` or ``"csv"``.
    bits
        Hash bits: ``2**bits`` weights (default 18).
    quadratic
        Namespace pairs to cross (VW's ``-q``).
    label
        CSV: the label column (default ``"label"``).
    categorical
        CSV: columns hashed as categories even when numeric.
    ignore
        VW: namespaces left out, by first letter; CSV: columns left out.
    skip_bad
        Skip malformed lines, counting them, instead of raising DataError (default False).
    constant
        Add VW's bias feature (default True).
    cubic
        Namespace triples to cross (VW's ``--cubic``).
    interactions
        Crosses of two or more namespaces (VW's ``--interactions``).
    keep
        VW: only the namespaces starting with these letters.
    ignore_linear
        VW: namespaces used in interactions only.
    """
    opts = ParseOptions(format=format, bits=bits, quadratic=tuple(quadratic),
                        cubic=tuple(cubic), interactions=tuple(interactions), label=label,
                        categorical=tuple(categorical), ignore=tuple(ignore), keep=tuple(keep),
                        ignore_linear=tuple(ignore_linear), skip_bad=skip_bad,
                        constant=constant)
    parts = [ln.encode() if isinstance(ln, str) else bytes(ln) for ln in lines]
    data = b"\n".join(p.rstrip(b"\n") for p in parts)
    buf = np.frombuffer(data, np.uint8) if data else np.zeros(0, np.uint8)
    return parse_bytes(buf, opts)
