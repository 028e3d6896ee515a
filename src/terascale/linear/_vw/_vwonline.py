"""``terascale vw`` on one worker: VW's online learner in the compiled core.

The common run (one worker, online passes of VW's default update over VW text, written
to ``-p``/``-r``/``-f``) parses each chunk of text with ``_vwfast.parse`` and learns from
it with ``_vwfast.learn`` (``_vwlearn.c``: :func:`._online._update.online_chunk`'s
operations, in its precision) in VW's dense table of ``2**b`` rows; it imports no numba,
so that a small file starts as VW does (numba's import and first compiled call are ~0.4 s
and ~100 MB of a run). Its progress lines, closing block and model are the numba pass's
(the same code prints and writes them), its predictions and weights the same bits. Its
one-pass runs over text (``-f``, ``-p``, ``-r``, ``-q``, ``--link``, the progress table)
import no numpy either (numpy alone is ~16 MB of a process: 1.2M click lines at ``-b 18``
with ``-p`` peaked at 38 MB with it, 24 MB without, VW 39 MB): the parser's arrays are typed
memoryviews, the table an anonymous mapping, a chunk's counts for the table and the
closing block, ``-p``'s values and the model's records are the compiled core's
(``_vwtable.c``); nor do its passes over the cache, which write it and read it
(``_vwpasses``: the records encoded and decoded by the compiled core, ``_vwbits.c``); a
run that needs numpy elsewhere (``-i``, ``-t``, ``--oaa``, ``--binary``,
``--readable_model``, text the compiled parser declines) imports it where it does.

``--passes N`` (with ``-c``, ``-k``, ``--cache_file``, or none: terascale caches the
parsed text itself, as the numba pass does) runs there too, as ``_recipe._online_passes``
runs them: pass 1 parses the text and writes the numba pass's cache entry as it goes,
the later passes (and a later run's first) read it (``_vwpasses``: the cache's kernels
in C, no numba), with VW's holdout (every 10th example, ``--holdout_period``,
``--holdout_off``, ``--holdout_after``: a byte per example that ``_vwfast.learn``
scores and counts but does not learn from), the ``h`` lines of the table after the
first pass, ``--decay_learning_rate`` and ``--early_terminate`` (the best pass's rows in
use kept, not a copy of the table), and ``--save_per_pass``'s runs (``_vwcli``); so does
the one-pass ``-c`` run, which writes the cache.

``--ngram``/``--skips`` and ``--spelling`` (no other flag of ``_vwgen``'s) are made
there too, ``--oaa``'s runs and ``-t -i MODEL`` (a model that keeps them) included: the
compiled parser spells each feature of a spelled namespace as it hashes it (the spelling
namespace filed under ``_vwgen``'s character for it, listed where VW lists it) and appends each namespace's n-grams after its features, as
VW does; a line it does not read (a string value, say) is rewritten by ``_vwgen`` and
parsed so, its errors quoting the line as given. So are ``--redefine``,
``--feature_limit``, ``--hash_seed``, ``--hash all``, ``--sort_features`` and ``--affix``
(``_vwgen.FeatureGen.parser_rules``: the parser files a namespace under its redefined
letter, hashes its names with the seed, or all with murmur3, sorts each namespace's
features, keeping the first of each index up to its limit, and adds each named feature's
affixes, listed as the spelling namespace is, ``--spelling`` beside them in VW's order;
with ``--oaa K``, sorted by VW's ``-b`` bits
of each index, then kept to the learners' b - log2 K), ``-n N`` and ``--invert_hash``
(the features named as ``_vwgen`` names them, from the input read again) included.
``--skip-bad`` runs here too
(without ``--oaa`` or ``-t``): a line the compiled parser declines is read alone by the
numba parser, which skips and counts a bad one (``_Parser.skipped``), and the count is
printed where the numba pass prints it. On 200k lines of 20-50 Zipf words in
three namespaces (``--spelling a -f -p``, load 11-14, ``/usr/bin/time``): 0.6 s of CPU and
39.4 MB peak, against VW's 1.6 s and 39.3 MB and the rewrite's 30.2 s and 153 MB.

A test run (``-t -i MODEL`` of VW's model format, without ``-f``) scores in it too
(``_vwfast.test``: the model's weights alone in a dense table of 4 bytes a row, at any
``-b`` whose table fits in half the memory, read from the file 64k records at a time
(``_vwmodel.VWRecords``: the table and a slice, not the model, in memory), the lazy
L1/L2 folded in, the
scores clipped and the losses taken as ``_cli_run._test_only``'s, ``--binary``'s 0/1 loss
included) and prints that run's progress table and closing block (its code). A run
that learns on from such a model (``-i MODEL`` without ``-t``) starts from its weights
and saved learner state in the dense table (``_resume.initial_state``'s), with its
``-b``, ``-q``, ``--link`` and ``-l``/``--power_t`` applied as ``_cli_run.train``
applies them: a one-line warm start imports no numba either. ``--binary`` learns here
too (the predictions' signs, VW's 0/1 loss: ``_progressive.zero_one`` with the compiled
loss), and ``--oaa K`` runs :mod:`._vwoaafast` (its K learners in ``_vwfast.oaa_learn``).
``--ignore_linear`` is the compiled parser's (the namespaces' features crossed, kept out of
the linear ones, counted in the table as VW counts them: ``Dataset.ignored``).
``--readable_model`` and ``--invert_hash`` are written from the table at the end
(``_vwtext``, which imports no numba: the names are the text read again, hashed in Python).
``--audit`` runs here too (``_vwaudit.Audit``): every pass parses the text (no cache), the
examples are learned one at a time, and each one's lines are printed as it is learned.

:func:`c_path` says whether a run takes it, and why not: anything it does not cover
(``-n N``, ``--skip-bad`` with ``--oaa`` or ``-t``, the starting weights ``_vwcli`` writes as a
model (VW's others are written into the table: ``_starting``) and ``-i`` of terascale's model
format, ``-t`` without ``-i`` or with ``-f`` or ``--holdout_after``,
``--preserve_performance_counters`` with passes or ``--holdout_after``, the ``--oaa``
runs :func:`._vwoaafast.why_not` declines, terascale's model format, ``-t`` with
``--readable_model``/``--invert_hash``, ``--ignore_linear`` with
``--ngram``/``--skips``/``--spelling``, ``-t`` with ``--ignore_linear``, expectile loss,
``.zip`` input, ``-b`` above 24 or a table over half the memory) runs the numba pass, which covers every
option. Text outside the compiled parser's subset is parsed by the numba parser, a line
at a time (the rest of a chunk at once after ``_DECLINED`` such lines), as the numba pass
parses it.

Tuning: on the held-out shapes (``benchmarks/heldout_shapes.py``) the compiled path took
0.4-0.9x the numba pass's time up to ``-b 24`` (long rows of 500 features at parity: the
update's cache misses are the same), so it is taken wherever it covers a run there; above
``-b 24`` (``_MAX_BITS``) the numba pass's rows of the features seen take less memory
than the dense table. ``--passes N -c --loss_function logistic`` (2 cores at load 8-10,
``/usr/bin/time``; the run that writes the cache, then one that reads it): 20k click-like
lines, 5 passes, 0.6 s and 36.9 MB, 35.3 MB, peak against VW's 0.5 s and 35.5 MB and the
numba pass's 1.1-1.5 s and 153-159 MB (without numpy, the 20k click lines of
``benchmarks/heldout_shapes.py``, 5 passes, load 10-12: 29.8 MB and 27.0 MB, medians of 3,
VW's 39.0 and 38.5 MB; 1.2M of them, 3 passes, writing the cache: 30.6 MB, VW's 40.6 MB,
``click-b18-passes``); 1M lines of 20 Zipf ids at ``-b 24``, 3 passes,
5.6 s and 286 MB, 4.4 s and 261 MB, against VW's 15-16 s and 323 MB and the numba pass's
10.9 s and 311 MB, 4.4 s and 288 MB.
``TERASCALE_NO_CEXT=1`` turns it off with the rest of the compiled core.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
from array import array
from typing import Any

from ..._cext import load
from ..._errors import ConfigError, DataError
from ..._lazy import lazy_module
from .._f32 import f32
from .._online._progress import any_warned
from . import VWFAST, dense_table

np = lazy_module("numpy", globals(), "np")

__all__ = ["as_arrays", "c_path", "run_options", "test", "train"]

_CHUNK = 1 << 18  # the most text parsed and learned from at a time
# the text of each of the first two chunks (read before either is parsed, so before the
# parse tells their density: 256 KiB of click rows with -q aa are 25 times that in arrays,
# which held a -q run's peak 15 MB up; _chunk_bytes sizes the rest). Where the chunks are cut
# moves no bit: the kernel adds each example's loss to VW's running sums (Progress.sums)
_FIRST = 1 << 14
_BLOCK = 1 << 16  # progressive predictions formatted at a time
_REPLAYED = 1024  # passes a call of the compiled learner's ``passes`` makes at most
# the largest -b the compiled learner takes: its dense table of 12 * 2**b bytes is touched
# all over by wide data (-b 26, 15.8M distinct features: 1180 MB peak against the numba
# pass's 948, though 0.6x its time), and a run that large does not notice start-up
_MAX_BITS = 24


def _fast() -> Any:
    return load(*VWFAST)


def _memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def c_path(args: argparse.Namespace, audit: bool = False) -> str | None:
    """None where this ``terascale vw`` run (its flags after VW's defaults) learns in the
    compiled core; else why it runs the numba pass. ``audit``: the caller prints
    ``--audit``'s lines as the compiled learner learns (``_vwaudit.Audit``; where it does
    not ask, ``--audit`` runs the numba pass, whose text ``_vwgen`` rewrites)."""
    fast = _fast()
    if fast is None:
        return "the compiled core is not built (or TERASCALE_NO_CEXT is set)"
    oaa_off = _oaa_off(args) if args.oaa is not None else None
    made = args.ngram or args.skips or getattr(args, "spelling", None)  # (by the parser)
    checks = (
        (bool(n_off := _workers_off(args)), n_off),
        (args.testonly and bool(args.holdout_after), "-t with --holdout_after"),
        (bool(args.preserve_performance_counters and args.initial) and (
            args.passes not in (None, 1) or bool(args.holdout_after)),
         "--preserve_performance_counters with --passes or --holdout_after"),
        (args.testonly and not args.initial, "-t without -i"),
        (args.testonly and bool(args.model), "-t with -f"),
        (args.testonly and bool(args.readable_model or args.invert_hash),
         "-t with --readable_model/--invert_hash"),
        (bool(oaa_off), oaa_off or ""),
        (args.bfgs is not None or args.cg is not None, "--bfgs/--conjugate_gradient"),
        (args.audit and not audit, "--audit"),
        (bool(getattr(args, "skip_bad", False)) and (args.oaa is not None or args.testonly),
         "--skip-bad with --oaa or -t"),
        (args.initial is not None and not _vw_model(args.initial),
         "-i of terascale's model format (or starting weights)"),
        (args.format != "vw", "--format"),
        (args.model_format not in (None, "vw"), "terascale's model format"),
        (bool(args.ignore_linear and made), "--ignore_linear with --ngram/--skips/--spelling"),
        (not _covered(args.loss, fast) and not (args.testonly and args.loss is None),
         f"--loss_function {args.loss}"),
        (args.oaa is None and bool(getattr(args, "probabilities", False)), "--probabilities"),
        (args.oaa is None and bool(getattr(args, "scores", False)), "--scores"),
        (args.oaa is None and getattr(args, "indexing", None) is not None, "--indexing"),
    )
    for off, flag in checks:
        if off:
            return flag if flag.endswith("numba pass") else f"{flag} runs the numba pass"
    if args.bits > _MAX_BITS:
        return (f"-b {args.bits}: above -b {_MAX_BITS} the numba pass, whose rows hold the "
                f"features seen, takes less memory than the dense table")
    need = 12 << args.bits
    if need > _memory() // 2:
        return f"-b {args.bits}: the dense table ({need >> 20} MiB) is over half the memory"
    for p in list(args.data) + list(args.data_flag):
        if p.endswith(".zip"):
            return f"{p}: .zip input runs the numba pass"
    return None


def _workers_off(args: argparse.Namespace) -> str:
    """Why an ``-n N`` run runs the numba pass (:func:`._vwworkers.why_not`; "": it
    does not)."""
    from ._vwworkers import why_not

    return why_not(args)


def _oaa_off(args: argparse.Namespace) -> str | None:
    """Why a ``--oaa K`` run runs the numba pass (:func:`._vwoaafast.why_not`)."""
    from ._vwoaafast import why_not

    return why_not(args)


def _covered(loss: str | None, fast: Any) -> bool:
    """Whether the compiled learner has loss ``loss``'s formulas."""
    from .._losstable import LOSS_TABLE

    return loss in LOSS_TABLE and LOSS_TABLE[loss].code in fast.LOSS_CODES


def _vw_model(path: str) -> bool:
    from ._vwmodel import is_vw_model

    return is_vw_model(path)


def _open(path: str) -> Any:
    try:
        if path.endswith(".gz"):
            import gzip

            return gzip.open(path, "rb")
        return open(path, "rb")  # noqa: SIM115 (closed by the caller)
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except OSError as e:
        raise DataError(f"{path}: cannot read: {e}") from None


def _chunks(path: str, size: list[int] | None = None) -> Any:
    """The file's text in chunks cut after a line break (the last one as it ends), each
    with the line number it starts at; ``size[0]`` bytes read at a time (the caller may
    change it between chunks), ``_CHUNK`` without it. Each chunk is read into a buffer of
    its own after the previous one's unfinished line and cut there (no copy of the text:
    a chunk held three copies of itself while it was read, two while it was in flight)."""
    import zlib

    line = 1
    rest = b""
    size = size or [_CHUNK]
    with _open(path) as f:
        while True:
            data = bytearray(len(rest) + size[0])
            data[:len(rest)] = rest
            try:
                got = f.readinto(memoryview(data)[len(rest):])
            except (OSError, EOFError, zlib.error) as e:
                raise DataError(f"{path}: cannot read: {e}") from None
            if not got:
                break
            end = len(rest) + got
            cut = data.rfind(b"\n", 0, end) + 1
            if cut == 0:
                rest = bytes(data[:end])
                continue
            rest = bytes(data[cut:end])
            del data[cut:]
            yield data, line
            line += data.count(b"\n")
    if rest:
        yield rest, line


class _Parser:
    """VW text to CSR arrays: the compiled parser, the numba parser where it declines."""

    def __init__(self, opts: Any, gen: Any = None) -> None:
        self.opts = opts
        cells, self.width = opts.interaction_cells()
        self.table, self.rows = cells, len(cells) // self.width
        drop, off = opts.namespace_bytes()
        self.drop = bytes(drop)
        # --ignore_linear's namespaces: crossed, not learned alone; counted (VW counts them)
        self.off = (bytes(off),) if any(off) else ()
        # --ngram/--skips and --spelling (gen: their _vwgen.FeatureGen) made by the compiled
        # parser: each namespace character's n, then its skips; the characters spelled,
        # then the one the spelling namespace is filed under (the rewrite's, whose n-grams
        # are VW's spelling namespace's); --redefine, --feature_limit, --hash_seed, --hash
        # all and --sort_features (gen.parser_rules) as its spec; text it declines is
        # rewritten by gen
        self.gen, self.plain = gen, None
        # the mask the parser hashes under: -b's, where --oaa K's learners take b - log2 K
        # bits of each index but VW sorts (--sort_features, --feature_limit) by all b of
        # them, as the rewrite does (the learners' bits then kept: the indices' low bits,
        # the interactions' and n-grams' too, as products and sums of them)
        self.mask = opts.mask
        grams: Any = None
        spell: Any = None
        rules: Any = None  # (_vwgen.FeatureGen.spec: --redefine, --feature_limit, ...)
        if gen is not None:
            from ._vwgen import SPELLING_CHARACTER as spelt
            from ._vwgen import SPELLING_NAMESPACE

            n = [gen._of(gen.ngram, c) for c in range(256)]
            k = [gen._of(gen.skips, c) for c in range(256)]
            if gen.spelling:
                n[spelt] = gen._of(gen.ngram, SPELLING_NAMESPACE)
                k[spelt] = gen._of(gen.skips, SPELLING_NAMESPACE)
                spell = bytearray(257)
                for c in gen.spelling:
                    spell[c] = 1
                spell[256] = spelt
            if gen.ngram or gen.skips:
                grams = bytes(min(max(v, 0), 255) for v in n + k)
            if gen.parser_rules:
                rules = gen.spec()
                if (gen.limit or gen.sort) and gen.bits > opts.bits:
                    self.mask = (1 << gen.bits) - 1
            self.plain = _Parser(opts)
        # the parser's optional arguments after --ignore's flags, up to the last one given
        # (those before it empty: none): --ngram's, --ignore_linear's (and the counts'
        # array, per chunk), --spelling's, the rules'
        tail = [grams, self.off[0] if self.off else None, bool(self.off), spell, rules]
        while tail and (tail[-1] is None or tail[-1] is False):
            tail.pop()
        self.tail = tail
        self.skipped = 0  # bad lines skipped (--skip-bad: the numba parser's)
        self.per = 5  # bytes per feature the arrays are sized for (halved where short)
        self.per_line = 32  # bytes per example (halved where shorter; at 1, any text fits)

    def parse(self, text: bytes, source: str, line: int) -> tuple:
        """One chunk's arrays (indptr, indices, values, labels, weights, tag_ptr, tag_blob),
        VW's lines on its label sections (``Dataset.notes``: the options'
        ``lenient_labels``; None: none), its empty lines and ``--ignore_linear``'s counts
        (``Dataset.blanks``, ``.ignored``; None: none). The compiled parser reads the text
        up to a line it declines (text outside its subset, a bad line); that line alone
        is read by the numba parser (rewritten by ``gen`` first, where given), which
        reports a bad line with its file and line or, with ``--skip-bad``, skips and
        counts it (:attr:`skipped`), and the compiled parser goes on after it. After
        ``_DECLINED`` such lines in a chunk (text the compiled parser does not read,
        throughout) the rest of the chunk is read by the numba parser at once."""
        buf = memoryview(text)
        parts: list[tuple] = []
        start, at, declined = 0, line, 0
        while start < len(buf):
            status, got = self._compiled(buf[start:])
            if status == 2:  # (a line beyond the largest arrays: the numba parser's)
                parts.append(self._declined(buf[start:], source, at))
                break
            if len(got[3]) or status == 0:
                parts.append(got)
            if status == 0:
                break
            nex = len(got[3])  # (each example the compiled parser read is one line)
            cut = _after_lines(text, start, nex)
            declined += 1
            stop = len(buf) if declined >= _DECLINED else _after_lines(text, cut, 1)
            parts.append(self._declined(buf[cut:stop], source, at + nex))
            at += nex + text.count(b"\n", cut, stop)
            start = stop
        return parts[0] if len(parts) == 1 else _joined(parts)

    def _compiled(self, buf: memoryview) -> tuple[int, tuple]:
        """The compiled parser's status (0: all of ``buf`` read, 1: it declined a line, 2:
        a line longer than the largest arrays) and the arrays of the examples it read (all, or those before that line), sized
        by the bytes per feature and per example seen so far (a chunk sized for its worst
        case, an example every byte, held 25 MB per MiB of text, and the chunks in flight
        touched other pages of it each time: on 500 numeric features a line, 106 MB peak
        against 48 MB sized so)."""
        fast = _fast()
        n = len(buf)
        tag_blob = _empty("B", n)
        rows, width = self.rows, self.width
        while True:
            ncap = int(n // self.per_line) + 16
            indptr = _empty("q", ncap + 1)
            labels = _empty("f", ncap)
            weights = _empty("f", ncap)
            tag_ptr = _empty("q", ncap + 1)
            cap = int(n // self.per) + 16
            indices = _empty("I", cap)
            values = _empty("f", cap)
            ignored = (_empty("q", ncap),) if self.off else ()
            extra = [(ignored[0] if self.off else _NO_COUNTS) if k == 2 else
                     b"" if a is None else a for k, a in enumerate(self.tail)]
            status, nex, nnz, ntag = fast.parse(buf, self.mask, self.opts.constant,
                                                indptr, indices, values, labels, weights,
                                                tag_ptr, tag_blob, self.table, rows, width,
                                                self.drop, *extra)
            if status != 2:
                break
            if nex >= ncap and self.per_line > 1:
                self.per_line //= 2
            elif self.per < 1 / 64:
                break
            else:
                self.per /= 2
        # (a declined line's features written before it was declined are not the examples')
        nnz, ntag = int(indptr[nex]), int(tag_ptr[nex])
        if self.mask != self.opts.mask:  # (the rules' full -b bits, then the learners')
            idx = np.frombuffer(indices, np.uint32, nnz)
            idx &= np.uint32(self.opts.mask)
        counts = ignored[0][:nex] if ignored and any(ignored[0][:nex]) else None
        return status, (indptr[:nex + 1], indices[:nnz], values[:nnz], labels[:nex],
                        weights[:nex], tag_ptr[:nex + 1], tag_blob[:ntag], None, None, counts)

    def _declined(self, buf: memoryview, source: str, line: int) -> tuple:
        """The arrays of the lines ``buf`` (from line ``line`` of ``source``) that the
        compiled parser declined: rewritten by ``gen`` and parsed so, or else read by the
        numba parser."""
        if self.gen is not None:  # (the features written into the text, then parsed)
            given = list(io.StringIO(bytes(buf).decode("utf-8", "surrogateescape"),
                                     newline=None))
            written = [self.gen.line(t, f"{source}:{line + k}") for k, t in enumerate(given)]
            try:
                got = self.plain.parse("".join(t + "\n" for t in written).encode(
                    "utf-8", "surrogateescape"), source, line)
            except DataError as e:  # (quoting the line as given, not as written)
                raise DataError(_as_given(str(e), source, line, given, written)) from None
            self.skipped += self.plain.skipped
            self.plain.skipped = 0
            return got
        from .._io._readers import _parse_one  # (numba: text outside the C subset)

        ds = _parse_one(np.frombuffer(buf, np.uint8), self.opts, source, line)
        self.skipped += ds.skipped
        tp = ds.tag_ptr if ds.tag_ptr is not None else np.zeros(len(ds.labels) + 1, np.int64)
        tb = ds.tag_blob if ds.tag_blob is not None else np.zeros(0, np.uint8)
        return (ds.indptr, ds.indices, ds.values, ds.labels, ds.weights, tp, tb, ds.notes,
                ds.blanks, ds.ignored)


def _empty(code: str, n: int) -> memoryview:
    """``n`` zeros of the ``array`` type ``code`` in a buffer of their own, as a typed
    memoryview (the compiled parser's arrays: sliced without a copy, no numpy)."""
    return memoryview(bytearray(n * array(code).itemsize)).cast(code)


def as_arrays(b: tuple) -> tuple:
    """A parsed chunk with its buffers as numpy arrays (the same memory), for the numpy
    code that reads chunks (``--oaa``'s learners)."""
    return tuple(np.asarray(a) if isinstance(a, memoryview) else a for a in b)


def _after_lines(text: bytes, start: int, k: int) -> int:
    """Where the ``k``-th line of ``text`` from offset ``start`` ends (past its line
    break; the text's end where it has fewer)."""
    for _ in range(k):
        at = text.find(b"\n", start)
        if at < 0:
            return len(text)
        start = at + 1
    return start


def _joined(parts: list[tuple]) -> tuple:
    """:meth:`_Parser.parse`'s arrays of consecutive parts of a chunk, as one (numpy's:
    a chunk with lines the compiled parser declined)."""
    parts = [tuple(a if a is None or k == 7 else np.asarray(a) for k, a in enumerate(p))
             for p in parts]  # (the notes, 7, as they are)
    nex = [len(p[3]) for p in parts]
    before = np.concatenate(([0], np.cumsum(nex)))

    def cat(k: int, off: bool) -> np.ndarray:  # (an offsets array: each after the last)
        if not off:
            return np.concatenate([p[k] for p in parts])
        out, base = [parts[0][k][:1]], 0
        for p in parts:
            out.append(p[k][1:] - p[k][0] + base)
            base += int(p[k][-1] - p[k][0])
        return np.concatenate(out)

    notes = [t for p in parts for t in (p[7] or [])]
    blanks = [p[8] + before[i] for i, p in enumerate(parts) if p[8] is not None]
    ignored = None
    if any(p[9] is not None for p in parts):
        ignored = np.concatenate([p[9] if p[9] is not None else np.zeros(len(p[3]), np.int64)
                                  for p in parts])
    return (cat(0, True), cat(1, False), cat(2, False), cat(3, False), cat(4, False),
            cat(5, True), cat(6, False), notes or None,
            np.concatenate(blanks) if blanks else None, ignored)


def _as_given(message: str, source: str, first: int, given: list[str],
              written: list[str]) -> str:
    """An error's message about the chunk from line ``first`` of ``source``, rewritten
    (``given`` -> ``written``, line by line), quoting its line as given."""
    import re

    from .._io._readers import quoted_line

    at = re.search(re.escape(source) + r", line (\d+): ", message)
    k = int(at.group(1)) - first if at else -1
    if 0 <= k < len(given):
        message = message.replace(repr(quoted_line(written[k])), repr(quoted_line(given[k])))
    return message


def _parsed(paths: list[str], reader: _Parser) -> Any:
    """Each chunk of every input, parsed: the next one in another thread while the caller
    learns from this one (the parsers and the learner release the GIL), the allocator
    keeping the freed arrays for the next chunks (``_malloc``: a fifth of the page faults
    on dense rows). Input of one chunk is parsed here: no thread (nor
    ``concurrent.futures``, ``logging`` and ``ctypes``, a tenth of a one-line run's
    imports) for nothing to overlap. Two chunks' arrays at most stand at once, the one
    learned from and the one parsed, where the caller drops its references to a chunk
    before it asks for the next (a third, the one learned from before, had stood
    beside them while the next parse began: ~5 MB of a dense or short-row run's peak)."""
    size = [_FIRST]  # (the first two chunks are read before either is parsed: see _chunk_bytes)
    return _overlapped(((text, path, line) for path in paths for text, line in _chunks(path, size)),
                       reader, size)


def _overlapped(chunks: Any, reader: Any, size: list[int]) -> Any:
    """:func:`_parsed`'s parse of ``chunks`` (text, path, first line), each parsed while
    the caller learns from the one before; ``size``: the chunk reader's next size, set by
    :func:`_chunk_bytes` from each chunk's density."""
    first = next(chunks, None)
    second = next(chunks, None) if first is not None else None
    if second is None:
        if first is not None:
            yield reader.parse(*first)
        return
    import itertools
    from concurrent.futures import ThreadPoolExecutor

    from ..._malloc import keep_freed_memory

    keep_freed_memory()  # each chunk's arrays reused, not mapped and faulted in afresh
    with ThreadPoolExecutor(1, thread_name_prefix="terascale-parse") as ex:
        pending = ex.submit(reader.parse, *first)
        for chunk in itertools.chain([second], chunks):
            b = pending.result()
            pending = ex.submit(reader.parse, *chunk)
            size[0] = _chunk_bytes(len(chunk[0]), len(b[1]), len(b[3]))
            yield b
            del b
        yield pending.result()


_FEATURES = 1 << 16  # features a chunk is read for: 512 KiB of indices and values
_EXAMPLES = 1 << 14  # examples a chunk is read for: ~1 MiB of their arrays
# the least text of a chunk after the first two: 64k features are ~17 KiB of click rows
# with -q aa, and chunks that small took a tenth more user time (1.2M lines, load 4) for
# no less memory than 64 KiB ones
_LEAST = 1 << 16
# the most features a chunk of _LEAST bytes is read for: on denser text (crosses over many
# namespaces, 25-70 features a byte) chunks shrink to this, down to _FIRST bytes
_MOST = 1 << 18


def _chunk_bytes(n: int, features: int, examples: int) -> int:
    """The bytes of text to read next, after a chunk of ``n`` bytes gave ``features`` in
    ``examples``: about ``_FEATURES`` features or ``_EXAMPLES`` examples, whichever comes
    first, between ``_LEAST`` and ``_CHUNK``. Two chunks stand at once (the one learned
    from, the next one parsed), each its text and its arrays (8 bytes a feature, about
    1.6 times the text on click rows, 25 times with ``-q`` over 15 features), so these
    bounds are the run's memory over its table's: at ``-b 18`` (a 3 MiB table) 1 MiB
    chunks took 49-50 MB peak on 1.2M click lines of 15 features, where 256 KiB ones take
    39.6 MB (VW: 38.2), in the same user time or less (1.1-1.3 s; load 2-3); with ``-q
    aa``, 256 KiB first chunks 54 MB, 16 KiB ones 41 MB (VW: 39). Text denser than
    ``_MOST`` features in ``_LEAST`` bytes is read in chunks of about ``_MOST`` features:
    ``--cubic :::`` over lines of 26 namespaces, 64 KiB chunks 143 MB peak, 16 KiB ones
    69 MB (VW: 39), in the same CPU time."""
    features = max(features, 1)
    dense = min(n * _FEATURES // features, n * _EXAMPLES // max(examples, 1))
    least = min(_LEAST, n * _MOST // features)
    return max(_FIRST, min(_CHUNK, max(least, dense)))


def _distinct(seen: list[float], labels: Any) -> list[float]:
    """``seen`` and the distinct labelled values of ``labels`` (a buffer of floats, read as
    Python floats; NaN: unlabelled), sorted, at most 3 (as
    :func:`._online._onlinepass.distinct_labels`)."""
    return sorted(set(seen) | {v for v in set(memoryview(labels)) if v == v})[:3]


def train(args: argparse.Namespace, ran: list[int] | None = None) -> int:
    """The run :func:`c_path` admits: learn (``--passes`` over the cache, the holdout and
    the early stop as the numba pass's ``_recipe._online_passes``), print VW's lines,
    write -p, -r and -f; ``ran`` gets the passes it made (the early stop's included)."""
    from .._front import _cli_run
    from .._holdout import EarlyStop, holdout_period
    from .._online._progress import LINK, Progress
    from .._online._state import state_values
    from ._vwmodel import table_records
    from ._vwout import all_or_none, prediction_writers
    from ._vwpasses import Inputs, Replay
    from ._vwreport import closing_block, holdout_on, preamble

    if args.oaa is not None:  # (its K learners: _vwoaafast)
        from ._vwoaafast import train as train_oaa

        return train_oaa(args)
    if args.nprocs != 1:  # (N workers of this learner: _vwworkers)
        from ._vwworkers import train as train_workers

        return train_workers(args)
    fast, options, paths, how = _begin(args)
    model = None
    if args.initial:
        args.data, args.data_flag = paths, []  # (standard input read once, as test's)
        model = _initial(args, options)
        if model is None:
            return int(_cli_run.train(args) or 0)
        args.link = args.link or model.info.get("link")  # (VW keeps --link: given)
        how = _cli_run._link(args, how)
    _cli_run._check_output(args.model, "-f", stream=False)
    for path, flag in ((args.predictions, "-p"), (args.raw_predictions, "-r"),
                       (args.readable_model, "--readable_model"),
                       (args.invert_hash, "--invert_hash")):
        _cli_run._check_output(path, flag)
    opts, parse = run_options(options)
    if not args.quiet:
        from ._vwmodel import model_t

        print(preamble(options, paths, model=args.model, predictions=args.predictions,
                       raw=getattr(args, "raw_predictions", None), initial=args.initial,
                       cache=getattr(args, "vw_cache", None),
                       initial_t=(model_t(args.initial) if model is not None
                                  else 0.0) or args.initial_t or 0.0),
              file=sys.stderr)
    LINK[:] = [how]
    binary = bool(args.binary)  # (VW's 0/1 loss and signs: -i's model's too)
    _cli_run._binary_link(binary, how)
    table = _table(parse.bits)
    state = array("d", state_values())
    start = getattr(args, "vw_start", None)  # (VW's starting weights: _vwcli)
    if model is not None:
        _resume(table, state, model)
    elif start is not None:
        _starting(table, state, start, parse.bits)
    out = sys.stderr if not args.quiet else None
    passes = max(int(opts.passes), 1)
    # --skip-bad's count: the numba pass reads the text of a run that caches it (passes,
    # -c) or starts from -i's model before its table, and says how many lines it skipped
    # there; here the first pass's table is held until the text is read
    held = io.StringIO() if out is not None and opts.skip_bad and (
        (opts.cache_root() != "" and not args.audit) or model is not None
        or start is not None) else None
    prog = Progress(held or out)
    prog.header()
    prog.restart()
    counters = (model.info.get("vw_counters") or {}) if model is not None else \
        {"t": start.initial_t, "initial_t": start.initial_t} \
        if start is not None and start.initial_t else {}  # (VW's counters start at t)
    prog.seen_sums[1] = float(counters.get("t") or 0.0)  # (VW's running t, from -i's on)
    prog.due = prog.first_due() if out else 1.0
    kept = getattr(args, "vw_preserved", None) or {}
    if "examples" in kept:  # --preserve_performance_counters: VW's table goes on from -i's
        prog.go_on(kept)
    period = holdout_period(opts)
    prog.holdout = bool(period)
    reader = _Parser(parse, getattr(args, "vw_grams", None))
    audit = None
    if args.audit:  # (each pass parses the text: VW's audit names the first pass's features)
        from ._vwaudit import Audit

        audit = Audit(parse, reader, _Parser)
    inputs = Inputs(paths, parse, opts.cache_root() if audit is None else "",
                    audit or reader, _parsed)
    writers = prediction_writers(args)
    # VW stops the passes on the holdout loss: the best pass's rows (those in use) kept
    stop = EarlyStop(opts.patience) if period and passes > 1 else None
    best: tuple[bytearray, array] | None = None  # (its rows' records, its state)
    totals: list[list[float]] = []
    marks: list[list[float]] = []
    labels_seen: list[float] = []
    used = passes
    rate = f32(opts.learning_rate)  # VW's eta, times the decay after each pass
    # the later passes over a small input that report nothing: a compiled call for many
    replay: Replay | None = None
    replays = passes > 1 and not (writers or binary or audit is not None)
    run: _Pass | None = None  # (the last pass made here)
    p = 0  # the passes made
    with all_or_none(writers):
        while p < passes:
            if replays and replay is None and run is not None and inputs.kept is not None:
                replay = Replay.of(run, inputs, 1 if stop is not None else _REPLAYED)
                replays = replay is not None
            k = replay.ahead(passes - p) if replay is not None else 0
            if k:
                k, rate = replay.learn(k, rate, totals, marks)
                rate = float(rate)
                p += k
            else:
                if p > 0 and opts.decay_learning_rate != 1.0:
                    rate = f32(rate * f32(opts.decay_learning_rate))
                run = _Pass(fast, opts, rate, table, state, prog, writers, how, period,
                            args.raw_predictions is not None, p == 0, binary, audit=audit)
                if audit is not None:
                    audit.named = p == 0
                tot = run.learn(inputs.chunks())
                if p == 0:
                    replays = replays and not run.warn
                    labels_seen = run.labels
                    prog.out = out
                    if out is not None and reader.skipped:  # (as the numba pass's _totals)
                        print(f"skipped {reader.skipped} bad lines (--skip-bad)", file=out)
                    if held is not None:
                        out.write(held.getvalue())
                totals.append(tot)
                marks.append(prog.mark())
                p += 1
            if stop is None:
                continue
            tot = totals[-1]
            if stop.end_pass(tot[2], tot[3]):
                used = p - stop.patience
                assert best is not None
                fast.restore(table, best[0])
                state[:] = best[1]
                break
            if stop.no_win == 0:  # (the best so far: kept where a later stop may restore it)
                best = None
                if p - 1 + stop.patience < passes:
                    rows = bytearray()  # (the rows in use: no copy of the whole table)
                    for part in table_records(table, 7):
                        rows += part
                    best = (rows, array("d", state))
    if ran is not None:
        ran.append(len(totals))
    if args.model or args.readable_model or args.invert_hash:
        _save(args, parse, table, state, options, totals, how, marks[used - 1],
              dict(counters, t=0.0),  # (-i's t in the rows' running t)
              used if used < len(totals) else None, paths)
    if not args.quiet:
        print(closing_block({"pass_totals": totals, "labels": labels_seen,
                             "holdout": holdout_on(options), "loss": opts.loss,
                             "vw_preserved": kept,
                             "quantile_tau": opts.quantile_tau,
                             "best_constant": not args.dont_output_best_constant,
                             "label_range": _fixed_range(options, state)}),
              file=sys.stderr)
    return 0


class _Pass:
    """One online pass of the compiled learner over a run's chunks (the numba pass's
    ``_online._onlinepass.online_pass``): the holdout mask, the progress lines (the first
    pass's cadence carried on by the next ones, ``h`` lines where examples are held out),
    the predictions and the closing block's counters. Its arrays are buffers (the
    parser's, ``array``'s) that the compiled core reads: no numpy."""

    def __init__(self, fast: Any, opts: Any, eta: float, table: Any, state: Any, prog: Any,
                 writers: list, how: str, period: int, raw: bool, first: bool, binary: bool,
                 offset: int = 0, audit: Any = None) -> None:
        from .._losstable import _BY_SIGN, _CLIP, loss_spec

        self.fast, self.opts, self.eta, self.table, self.state = fast, opts, eta, table, state
        self.prog, self.writers, self.how, self.period = prog, writers, how, period
        self.raw, self.first, self.binary = raw, first, binary
        self.offset = offset  # (the input's examples before these chunks: the holdout's)
        self.kind, self.l2 = opts.online_kind(), opts.online_l2(0.0)
        self.signs, self.clips = _BY_SIGN, _CLIP
        self.out = prog.out
        # (VW's lines on the labels the loss does not expect, on standard output)
        self.warn = self.out is not None and (bool(loss_spec(opts.loss).warns) or binary)
        self.labels: list[float] = []
        # the chunk's notes (an int32 per example, _vwfast.learn's) and each example's
        # number in VW's count, where the progress table is printed (VW's logger is quiet
        # with it under --quiet)
        self.notes, self.cum_n = _NO_NOTES, _NO_COUNTS
        # --audit's lines (_vwaudit.Audit): the examples learned one at a time, the table's
        # rows read through a numpy view
        self.audit = audit
        self.rows = np.frombuffer(table, np.float32).reshape(-1, 3) if audit is not None \
            else None
        self.one = array("d", [0.0])

    def _learn(self, b: tuple, hold: Any, start: int, end: int, pred: Any,
               acc: array) -> None:
        """Learn from examples [start, end) of chunk ``b`` (``hold``: its holdout bytes,
        empty for none)."""
        seg = array("d", bytes(64))  # (the chunk's sums, the pass's; the kernel adds to VW's)
        opts, sums = self.opts, self.prog.sums
        before = array("d", sums) if self.binary and pred is not None else None
        audit = self.audit if end > start else None  # (one example: learn's cut)
        got = pred if pred is not None else self.one if audit is not None else _NONE
        if audit is not None:
            audit.before(b, start, self.rows, self.state)
        noted = self.fast.learn(b[0], b[1], b[2], b[3], b[4], start, end, self.table,
                                self.state, self.kind, self.eta, opts.power_t, opts.l1,
                                self.l2, seg, got, self.signs, self.clips, hold, sums,
                                self.notes)
        if audit is not None:
            audit.after(b, start, float(got[0]))
        if before is not None:  # (VW's 0/1 loss of the signs: numba's kernel)
            from .._online._progressive import zero_one

            n = end - start
            mask = np.frombuffer(hold, np.bool_) if hold else np.zeros(len(b[3]), np.bool_)
            seg_np, sums_np = np.frombuffer(seg), np.frombuffer(sums)
            zero_one(seg_np, np.zeros(8), np.frombuffer(pred)[:n], np.asarray(b[3]),
                     np.asarray(b[4]), mask, start, self.kind, self.fast.loss32, sums_np,
                     np.frombuffer(before))
        self.prog.fold(acc, seg, end - start)
        around = None
        if noted:  # (VW's logger's lines on NaN scores and updates, huge features)
            from ._vwreport import learner_notes

            around = learner_notes(self.notes[start:end], self._numbers(b, hold, start, end))
            around = {start + i: lines for i, lines in around.items()}
        if self.warn and (around or any_warned(memoryview(b[3])[start:end], opts.loss,
                                               self.binary)):
            from .._online._progress import label_warnings  # (numpy: a line to print)

            label_warnings(np.asarray(b[3]), np.asarray(b[4]),
                           np.frombuffer(hold, np.bool_) if hold else None, start, end,
                           True, sys.stdout, loss=opts.loss, binary=self.binary, around=around)
        elif around:
            sys.stdout.write("".join(a + z for _, (a, z) in sorted(around.items())))

    def _numbers(self, b: tuple, hold: Any, start: int, end: int) -> list[int]:
        """Each example's number in VW's count (from 1) over [start, end)."""
        from ._vwreport import example_numbers

        return example_numbers(b[3], hold, self.cum_n, start, end)

    def _write(self, pred: array, b: tuple, start: int, n: int) -> None:
        from ._vwout import predicted

        scores = memoryview(pred)[:n]
        for writer, linked in self.writers:
            v = predicted(self.fast, scores, self.how, self.binary) if linked else \
                memoryview(pred)[n:] if self.raw else scores
            writer.write(_lines(self.fast, v, b, start))

    def learn(self, chunks: Any) -> list[float]:
        """The pass over ``chunks``; returns its totals (the closing block's and the
        model's ``pass_totals`` row: ``online_chunk``'s six sums, then the unlabelled
        weight, the examples and features not held out, the label x weight learned in the
        run so far: ``Progress.label_sum``; then VW's running sums at the pass's end: the
        loss and labelled weight, the unlabelled weight and every example's weight,
        ``Progress.pass_over``, ``.seen_sums``)."""
        from bisect import bisect_left

        from .._holdout import Holdout
        from .._online._progress import label_notes

        prog, out, lines = self.prog, self.out, self.out is not None
        acc = array("d", bytes(64))
        # the compiled counts' sums (_vwtable.c): the unlabelled weight, the examples and
        # features not held out (this pass's), the run's label x weight, unlabelled weight
        # and every example's weight so far (Progress.label_sum, .seen_sums)
        counted = array("d", [0.0, 0.0, 0.0, prog.label_sum, *prog.seen_sums])
        holdout = Holdout(self.period, self.offset, raw=True)
        nxt = prog.due
        seen_w, seen_n = prog.seen_w, prog.seen_n
        at0 = 0  # the examples before the chunk, in this pass
        for b in chunks:
            indptr, labels, weights = b[0], b[3], b[4]
            if out is not None and self.first and b[7]:
                label_notes(b[7], sys.stdout)
            n = len(labels)
            hold = holdout(at0, n, b[8]) if self.period else _NOHOLD
            at0 += n
            if n == 0:
                continue
            cum_w = array("d", bytes(8 * n)) if lines else _NONE
            cum_n = array("q", bytes(8 * n)) if lines else _NO_COUNTS
            self.fast.counts(indptr, labels, weights, hold,
                             b[9] if b[9] is not None else _NO_COUNTS, counted, cum_w, cum_n,
                             seen_w, seen_n)
            prog.label_sum = counted[3]
            prog.seen_sums[0], prog.seen_sums[1] = counted[4], counted[5]
            if self.first and len(self.labels) < 3:
                self.labels = _distinct(self.labels, labels)
            if lines:  # (a double running sum, as the numba pass cuts its lines)
                seen_w, seen_n = cum_w[n - 1], cum_n[n - 1]
            # the chunk's notes (the compiled learner's, an int32 per example) where the
            # progress table is printed (VW's logger is quiet with it under --quiet)
            self.notes = array("i", bytes(4 * n)) if lines else _NO_NOTES
            self.cum_n = cum_n
            start = 0
            while start < n:
                end, at = n, -1
                if lines:  # (one line an example at most, as VW checks after each one)
                    at = max(bisect_left(cum_w, nxt), start)
                    end = at + 1 if at < n else n
                if self.audit is not None:
                    end = start + 1
                pred = None
                if self.writers or self.binary:
                    end = min(end, start + _BLOCK)
                    pred = array("d", bytes(8 * (2 if self.raw else 1) * (end - start)))
                line_due = end - 1 == at
                shown = None
                if line_due and pred is None and not (
                        weights[at] > 0 and not (hold and hold[at]) and labels[at] == labels[at]):
                    shown = array("d", [0.0])
                    self._learn(b, hold, start, at, None, acc)
                    self._learn(b, hold, at, end, shown, acc)
                else:
                    self._learn(b, hold, start, end, pred, acc)
                if pred is not None:
                    self._write(pred, b, start, end - start)
                if line_due:
                    p = (shown[0] if shown is not None else
                         pred[at - start] if pred is not None else acc[7])
                    feats = indptr[end] - indptr[end - 1] + (b[9][end - 1] if b[9] is not None
                                                            else 0)
                    now = prog.now()
                    prog.line(now, prog.prev, int(cum_n[at]), cum_w[at], labels[at], p,
                              int(feats), self.binary)
                    prog.prev = now
                    nxt = prog.due = prog.next_due(cum_w[at])
                start = end
            del b, indptr, labels, weights  # (before the next chunk's parse: _parsed)
        run = prog.pass_over(acc)
        if lines:
            prog.end_pass(acc, seen_w, seen_n)
        return [*acc[:6], *counted[:3], counted[3]] + run + [float(v) for v in prog.seen_sums]


def _table(bits: int) -> memoryview:
    """VW's dense table of ``2**bits`` rows of (weight, adaptive sum, normalizer), float32
    zeros as one flat buffer: :func:`.dense_table`'s mapping (4 KiB pages, handed out on
    first touch: a row no example reaches costs no memory), without numpy."""
    from ..._pages import mapping

    return memoryview(mapping(12 << bits, huge=False)).cast("f")


# the compiled calls' empty buffers: no predictions, no holdout, no --ignore_linear counts
_NONE = array("d")
_NOHOLD = array("B")
_NO_COUNTS = array("q")
_NO_NOTES = array("i")
# lines of a chunk the compiled parser declines that the numba parser reads one by one; the
# rest of the chunk after that many is read by it at once (text outside the compiled
# subset throughout: a chunk parsed in a few calls, not a call a line)
_DECLINED = 8  # (the parser's --ignore_linear counts where none)


def _resume(table: np.ndarray, state: np.ndarray, model: Any) -> None:
    """-i's VW model's rows and learner state in the dense table and the state
    (``_resume.initial_state``'s)."""
    from ._vwmodel import HeldRecords

    HeldRecords(model).put(np.frombuffer(table, np.float32).reshape(-1, 3))
    state[:len(model.adaptive[2])] = array("d", model.adaptive[2])


def _starting(table: memoryview, state: array, start: argparse.Namespace, bits: int) -> None:
    """VW's starting weights in the dense table of ``2**bits`` rows and the state, as
    ``_vwcli._starting_weights``' model gives them to the numba pass: every row's weight
    ``--initial_weight`` (or ``--random_weights``' draw from ``--random_seed``,
    ``_vwfast.uniform``) and adaptive sum ``--initial_t`` (VW's ``initial_t`` fake examples
    of norm and gradient 1, which are also the state's total weight and norm sum), the
    constant's weight ``--constant`` and the label range ``--min_prediction``/
    ``--max_prediction`` as VW's floats. ``start``: the run's flags (``_vwcli``)."""
    from .._io._hashnames import CONSTANT_HASH
    from .._online._state import MAX_LABEL, MIN_LABEL, SUM_NORM_X, TOTAL_WEIGHT

    rows = 1 << bits
    if start.random_weights and not start.initial_weight:  # (VW's order: the value first)
        _fast().uniform(table, start.random_seed, 3)
    for col, v in ((0, start.initial_weight), (1, start.initial_t)):
        if v:
            part = array("f", [v]) * min(rows, _FILL)
            for r in range(0, rows, _FILL):  # (a bounded copy of the value at a time)
                n = min(rows - r, _FILL)
                table[3 * r + col:3 * (r + n):3] = part[:n] if n < _FILL else part
    if start.constant:  # (VW sets it with --noconstant too)
        table[3 * (CONSTANT_HASH & (rows - 1))] = f32(start.constant)
    if start.initial_t:
        state[TOTAL_WEIGHT] = state[SUM_NORM_X] = start.initial_t
    for at, v in ((MIN_LABEL, start.min_prediction), (MAX_LABEL, start.max_prediction)):
        if v is not None:
            state[at] = f32(v)


_FILL = 1 << 16  # rows given a starting value at a time (_starting)


def _initial(args: argparse.Namespace, options: dict[str, Any], records: bool = True) -> Any:
    """-i's VW model for a run that learns from it, its parse options, ``-l`` and
    ``--power_t`` made the run's (``options``) as ``_cli_run.train`` makes them; None where
    the numba pass runs it (its ``-b`` above ``_MAX_BITS`` or a table over half the
    memory); ``records=False``: its header alone (``_vwmodel.read_vw_model``'s), where
    the command line changes none of its rows (no ``--initial_t``, no label range)."""
    from .._front import _cli_run
    from ._vwmodel import read_vw_model, run_generation

    model = read_vw_model(args.initial, generation=run_generation(args), plain=True,
                          records=records)
    _cli_run.vw_start(model, args)
    bits = model.parse.bits
    if bits > _MAX_BITS or (12 << bits) > _memory() // 2:
        return None
    if model.info.get("binary"):  # (VW keeps --binary)
        args.binary = True
    _cli_run._follow_model(options, model, args)
    options.update(model.parse.to_dict())
    for k, v in model.info.get("vw_rates", {}).items():  # VW's model's -l, --power_t
        if not getattr(args, f"{k}_given", True):
            options[k] = v
            args._model_rates = {**getattr(args, "_model_rates", {}), k: v}
    return model


def _save(args: argparse.Namespace, parse: Any, table: Any, state: Any,
          options: dict[str, Any], totals: list[list[float]], how: str, mark: list[float],
          counters: dict[str, float], used: int | None = None,
          paths: list[str] | None = None) -> None:
    """``-f``: VW's model, as the numba pass's run writes it (its save_resume form, or
    ``--predict_only_model``'s weights with the lazy L1/L2 folded in), then
    ``--readable_model`` and ``--invert_hash`` (``paths``: the inputs its names are read
    from, :func:`._vwtext.feature_names`) of it; ``mark``: where the
    progress table was after the model's pass (the next line's weight, the loss since the
    last line, the labelled weight at it); ``counters``: -i's (its examples' weight ``t``
    and its ``initial_t``, which VW's carry on); ``used``: the pass the early stop kept
    (None: the last)."""
    from types import SimpleNamespace

    from .._front._cli_run import _rates, kept_link, kept_rules
    from ._vwmodel import run_generation, write_vw_model

    predict_only = bool(args.predict_only_model)
    if predict_only:
        _fast().sync(table, state)
    info: dict[str, Any] = {"pass_totals": totals,
                            "vw_progress": mark,
                            "vw_generation": run_generation(args),
                            "vw_preserved": getattr(args, "vw_preserved", None) or {}}
    if used is not None:
        info["online_passes"] = used
    if args.binary:
        info["binary"] = True  # (VW keeps --binary in its model)
    if args.min_prediction is not None or args.max_prediction is not None or \
            options.get("header_range"):
        info["fixed_range"] = True  # (its header holds that range, whatever the loss)
    if kept_link(args, how):
        info["link"] = how
    if counters.get("t"):
        info["vw_t0"] = float(counters["t"])
    if counters.get("initial_t"):
        info["vw_initial_t"] = float(counters["initial_t"])
    rates = _rates(args)
    if rates:
        info["vw_rates"] = rates
    rules = kept_rules(args)
    if rules:
        info["vw_rules"] = rules
    # (the model's records written from the table's rows in use: _vwmodel.table_records)
    model = SimpleNamespace(table=table, indices=None, weights=None, parse=parse,
                            loss=options["loss"], info=info, bits=parse.bits,
                            adaptive=(None, None, state))
    if args.model:
        try:
            write_vw_model(model, args.model, predict_only=predict_only)
        except OSError as e:
            raise ConfigError(f"-f {args.model}: cannot write: {e}") from None
    if args.readable_model or args.invert_hash:
        from ._vwtext import feature_names, write_readable

        rows = np.frombuffer(table, np.float32).reshape(-1, 3)
        idx = _used_rows(rows)  # (the rows in use, as the writer orders them)
        model.indices, model.weights = idx, rows[idx, 0]
        model.adaptive = (rows[idx, 1], rows[idx, 2], np.frombuffer(state))
    if args.readable_model:
        write_readable(model, args.readable_model, predict_only=predict_only)
    if args.invert_hash:
        write_readable(model, args.invert_hash,
                       feature_names(paths or [], model, getattr(args, "vw_grams", None)),
                       predict_only=predict_only)


_ROWS = 1 << 20  # rows of the table scanned at a time for the ones in use


def _used_rows(table: np.ndarray) -> np.ndarray:
    """The indices (uint32, ascending) of the table's rows with any nonzero value, found a
    slice at a time (no whole-table temporaries: at ``-b 26`` those were 270 MB over the
    table's 805), a column at a time (``any(axis=1)`` over rows of three took 5x longer:
    0.74 s at ``-b 24``, 3.6 ms at ``-b 18``), counted first and then written into the
    result (the slices' int64 indices, joined and then narrowed, held 20 bytes a used row
    at once: 220 MB over the table at ``-b 24`` with 11M rows in use)."""
    slices = range(0, len(table), _ROWS)
    out = np.empty(sum(int(np.count_nonzero(_in_use(table, a))) for a in slices), np.uint32)
    at = 0
    for a in slices:
        idx = np.flatnonzero(_in_use(table, a))
        out[at:at + len(idx)] = idx
        out[at:at + len(idx)] += np.uint32(a)
        at += len(idx)
    return out


def _in_use(table: np.ndarray, a: int) -> np.ndarray:
    """Whether each of the ``_ROWS`` rows of ``table`` from ``a`` has a nonzero value."""
    rows = table[a:a + _ROWS]
    used = rows[:, 0] != 0
    used |= rows[:, 1] != 0
    used |= rows[:, 2] != 0
    return used


class _Column:
    """Column ``j`` of the table's rows ``idx``, read a slice at a time as the model
    writer asks (``_vwmodel._vw_chunks`` formats the model in pieces): no copy of the
    learner beside the table."""

    def __init__(self, table: np.ndarray, idx: np.ndarray, j: int) -> None:
        self.table, self.idx, self.j = table, idx, j

    def __len__(self) -> int:
        return len(self.idx)

    def __getitem__(self, part: slice) -> np.ndarray:
        return self.table[self.idx[part], self.j]


def test(args: argparse.Namespace) -> int:
    """The ``-t -i MODEL`` run :func:`c_path` admits (VW's model): the model's predictions,
    no learning, VW's progress table and closing block of a test run (``_cli_run._test_only``,
    whose rules and output these are); a model this path does not cover (its loss, a
    ``-b`` whose weights are over half the memory, its ``--ignore_linear`` or the command
    line's) runs the numba pass."""
    import dataclasses

    from .._front import _cli_run
    from .._losstable import _BY_SIGN, _CLIP, FIXED_RANGE, LOSS_TABLE, loss_code
    from .._online._progress import label_notes
    from ._vwmodel import model_t, read_vw_model, run_generation
    from ._vwout import all_or_none, link, prediction_writers
    from ._vwreport import batch_test_lines, nan_predictions, preamble, running_sum, test_block

    if args.oaa is not None:  # (its K learners: _vwoaafast)
        from ._vwoaafast import train as test_oaa

        return test_oaa(args)
    fast, options, paths, how = _begin(args)
    args.data, args.data_flag = paths, []  # (standard input read once: the numba pass
    # below reads the same copy)
    if args.binary and args.link in ("logistic", "poisson"):
        return int(_cli_run.train(args) or 0)  # (which says why not)
    _cli_run._check_output(args.predictions, "-p")
    _cli_run._check_output(args.raw_predictions, "-r")
    # the header alone: the weight records are read a slice at a time into the table
    # below (--initial_t gives every row a sum: the whole model, as the numba pass reads it)
    lazy = not getattr(args, "vw_initial_t", None)
    model = read_vw_model(args.initial, generation=run_generation(args), plain=True,
                          records=not lazy)
    _cli_run.vw_start(model, args)
    loss = args.loss or model.loss  # (VW reports the command line's loss)
    bits = model.parse.bits
    if (not _covered(loss, fast) or (4 << bits) > _memory() // 2
            or model.parse.ignore_linear or args.ignore_linear):  # (VW's -t counts of them)
        return int(_cli_run.train(args) or 0)
    how = _cli_run._link(args, model.info.get("link", how))  # (VW keeps --link)
    binary = bool(args.binary or model.info.get("binary"))  # (and --binary)
    _cli_run._binary_link(binary, how)
    batch = batch_test_lines(args, bits)  # (a --bfgs model: VW's batch learner's lines)
    if not args.quiet:
        text = preamble(options, paths, model=args.model, predictions=args.predictions,
                        raw=getattr(args, "raw_predictions", None), initial=args.initial,
                        cache=getattr(args, "vw_cache", None),
                        initial_t=model_t(args.initial))
        if batch is not None:  # (after where the outputs go, before the input's lines)
            at = text.index("\nusing no cache") if "\nusing no cache" in text else \
                text.index("\ncreating cache_file")
            text = f"{text[:at]}\n{batch[0]}{text[at:]}" if at else f"{batch[0]}\n{text}"
            print(batch[1], flush=True)
        print(text, file=sys.stderr)
    # the weights alone, 4 bytes a row (VW's -t table: -b 26, 256 MB; the learner's rows
    # of three, or the numba pass above -b 24, held 1286 MB of a 7M-feature model)
    table = dense_table(bits)
    state = model.adaptive[2] if model.adaptive is not None else None
    lo = hi = 0.0  # (_cli_run._clip's rule: the run's loss's, in the model's label range)
    synced = state is not None and len(state) >= 6
    if synced:
        from .._online._state import MAX_LABEL, MIN_LABEL

        lo, hi = float(state[MIN_LABEL]), float(state[MAX_LABEL])
    parts = model.records.slices() if lazy else [(model.indices, model.weights)]
    for idx, w in parts:
        w = np.asarray(w, np.float32)
        if synced:  # (the lazy L1/L2, as the model predicts; sync is per row)
            rows = np.zeros((len(w), 3), np.float32)
            rows[:, 0] = w
            fast.sync(rows, state.copy())
            w = rows[:, 0]
        table[idx] = w
    clip = int(_CLIP[LOSS_TABLE[loss].code])  # (VW's -t clips as the command line's loss
    if synced:  # in the range its model's header holds, whatever the loss, lo == hi too:
        clip = 1  # _cli_run._clip)
    kind = loss_code(loss, raw_labels=True, tau=args.quantile_tau, q=args.expectile_q)
    if synced:
        kind |= FIXED_RANGE
    total = np.zeros(6)  # loss, labelled weight, examples, weight, label x weight, features
    labels_seen: list[float] = []
    progress = None
    if not args.quiet and batch is None:
        progress = _cli_run._TestProgress(how, binary)
        progress.loss = loss
    writers = prediction_writers(args)
    reader = _Parser(dataclasses.replace(model.parse, lenient_labels=args.oaa is None),
                     getattr(args, "vw_grams", None))
    with all_or_none(writers):
        for b in map(as_arrays, _parsed(paths, reader)):  # (numpy's: its sums and lines)
            indptr, labels, weights = b[0], b[3], b[4]
            if progress is not None and b[7]:
                label_notes(b[7], sys.stdout)
            n = len(labels)
            if n == 0:
                continue
            for start in range(0, n, _BLOCK):
                end = min(n, start + _BLOCK)
                raw, s, lv = np.empty(end - start), np.empty(end - start), np.empty(end - start)
                fast.test(indptr, b[1], b[2], labels, weights, start, end, table, kind, clip,
                          lo, hi, binary, _BY_SIGN, raw, s, lv, 1)
                nan_predictions(raw, int(total[2]), sys.stdout if progress is not None else None)
                for writer, linked in writers:  # (-r: the scores before the clipping)
                    v = link(s, how, binary) if linked else raw
                    writer.write(_lines(fast, v, b, start))
                y = labels[start:end].astype(np.float64)
                w = weights[start:end].astype(np.float64)
                ok = ~np.isnan(y) & (w > 0)
                if progress is not None:
                    from types import SimpleNamespace

                    blk = SimpleNamespace(weights=weights[start:end], labels=labels[start:end],
                                          indptr=indptr[start:end + 1])
                    progress.block(blk, s, lv, np.where(ok, w, 0.0))
                has = ~np.isnan(y)
                total[0] = running_sum(total[0], lv)  # (VW's double sum, in its order)
                total += [0.0, float(w[ok].sum()), end - start, float(w.sum()), 0.0,
                          int(indptr[end] - indptr[start])]
                total[4] = running_sum(total[4], y[has] * w[has])  # (VW's label sum too)
                if len(labels_seen) < 3:
                    labels_seen = _distinct(labels_seen, labels[start:end])
            blk = None
            del b, indptr, labels, weights  # (before the next chunk's parse: _parsed)
    if not args.quiet:
        if batch is not None:
            print(batch[2], file=sys.stderr)
        print(test_block(int(total[2]), float(total[1]), float(total[0]), float(total[3]),
                         label_sum=float(total[4]), features=int(total[5]),
                         labels=labels_seen,
                         loss_name=loss if not args.dont_output_best_constant else None,
                         tau=args.quantile_tau, label_range=(lo, hi)), file=sys.stderr)
    return 0


def _lines(fast: Any, values: Any, b: tuple, start: int) -> str:
    """VW's -p/-r lines of ``values`` (float64, a buffer), the predictions of parsed chunk
    ``b``'s examples from ``start`` on (their tags)."""
    from ._vwout import predicted

    v = predicted(fast, values, "identity", False)  # (VW's predictions are float32)
    text = fast.format_predictions(v, b[5], b[6], start)
    if text is not None:
        return text.decode("utf-8", "surrogateescape")
    from ._vwout import prediction_lines  # (a value that is not finite: numpy's)

    tags = [bytes(b[6][b[5][i]:b[5][i + 1]]).decode("utf-8", "surrogateescape")
            for i in range(start, start + len(v))]
    return prediction_lines(np.frombuffer(v), tags)


def _fixed_range(options: dict[str, Any], state: np.ndarray) -> list[float] | None:
    """The label range a run under ``--min_prediction``/``--max_prediction`` kept (the
    closing block's ``label_range``); None where the range is the labels'."""
    from .._online._state import MAX_LABEL, MIN_LABEL

    if not options.get("fixed_range"):
        return None
    return [float(state[MIN_LABEL]), float(state[MAX_LABEL])]


def run_options(options: dict[str, Any]) -> tuple[Any, Any]:
    """The run's ``TrainOptions`` and the ``ParseOptions`` its text is read with, from the
    options dict (JSON's lists made tuples): the parse options the dict gives, with the
    training options' ``lenient_labels`` and ``skip_bad``."""
    from .._io._dataset import ParseOptions
    from .._options import TrainOptions

    plain = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    opts = TrainOptions(**plain)
    fields = ParseOptions().to_dict()
    parse = ParseOptions(**{k: v for k, v in plain.items() if k in fields},
                         lenient_labels=opts.lenient_labels, skip_bad=opts.skip_bad)
    return opts, parse


def _begin(args: argparse.Namespace) -> tuple[Any, dict[str, Any], list[str], str]:
    """What a compiled run starts with: the module, ``--quiet``, the training options as
    VW reads text, the inputs (standard input copied once) and the output link."""
    from .._front import _cli_run
    from .._front._cli_options import train_options

    fast = _fast()
    if args.quiet:
        from ..._env import set_quiet

        set_quiet()
    options = train_options(args)
    options["vw_text"] = options["vw_labels"] = True
    if args.min_prediction is not None or args.max_prediction is not None:
        options["fixed_range"] = True  # (-i's range, or the one given over it, stays)
    if _cli_run.header_range(args):
        options["header_range"] = True  # (-i's header's range, widened to the labels)
    return fast, options, _cli_run._inputs(args), _cli_run._link(args, "identity")
