"""Each pass's chunks for ``terascale vw``'s compiled learner: the text, or the cache.

The first pass parses the text (``_vwonline._Parser``, the next chunk in another thread)
and, where the run caches (``-c``, ``-k``, ``--cache_file``, or ``--passes`` above 1: the
numba pass's rule, ``TrainOptions.cache_root``), encodes each chunk in that thread into the
cache entry the numba pass would write for the file (``_io._cache``'s key, directory and
records: either path reads the other's), committed at the pass's end. Later passes, and
a later run's first, read the entry, a block decoded ahead in another thread. The cache's
records are encoded and decoded by the compiled core (``_io._cachefmt``), its index and
features written and read as ``.npy`` files without numpy (``_io._npyfile``): neither numba
nor numpy is imported.

A chunk is ``_Parser.parse``'s tuple (indptr, indices, values, labels, weights, tag_ptr,
tag_blob, notes, blanks, ignored), whichever way it came.
"""

from __future__ import annotations

import os
import shutil
import sys
from array import array
from collections.abc import Iterator
from typing import Any

from .._io._cache import (
    _VERSION,
    CacheBlocks,
    _commit,
    _new_tmp,
    _storage,
    cache_key,
    checked_root,
    default_cache_dir,
)
from .._io._dataset import Dataset, ParseOptions

__all__ = ["KEEP", "Inputs", "Replay"]

#: the cache bytes of a run's inputs whose decoded chunks :class:`Inputs` keeps from the
#: second pass on, rather than reading and decoding them again each pass (an entry of
#: one block holds its decoded block through a pass anyway: keeping it costs no peak)
KEEP = 1 << 20
_ROW = 16  # the sums of a pass that the compiled learner's ``passes`` writes


def _made(gen: Any) -> str:
    """The cache entry's suffix for the features the parser makes (``_vwgen.FeatureGen``'s
    --ngram/--skips/--spelling, and its rules: --redefine, --feature_limit, --hash_seed,
    --hash all, --sort_features): an entry of the same file without them, or with others,
    holds other examples. "" for none."""
    if gen is None:
        return ""
    import zlib

    what = repr((sorted(gen.ngram.items()), sorted(gen.skips.items()), sorted(gen.spelling)))
    if gen.parser_rules:  # (the n-grams' entries named as before)
        what += repr(gen.spec())
    return f".g{zlib.crc32(what.encode()):08x}"


class Inputs:
    """The run's input files, pass after pass: :meth:`chunks` of each in turn."""

    def __init__(self, paths: list[str], parse: ParseOptions, root: str | None,
                 reader: Any, parsed: Any,
                 places: list[tuple[int, str, tuple[int, ...]]] | None = None) -> None:
        """``root``: the cache's directory ("": none, None: the default one); ``reader``
        and ``parsed``: ``_vwonline``'s parser and its chunk stream (of a list of paths,
        or with ``places``, an ``-n N`` worker's parts of them, ``_io._stream.shard_places``:
        ``paths`` are then the parts' files, each part cached as the numba pass caches a
        shard, its own entry)."""
        self.paths, self.parse, self.reader, self.parsed = paths, parse, reader, parsed
        self.places = places
        self.root = checked_root(root or default_cache_dir()) if root != "" else ""
        self.entries: list[str | None] = []
        self.cached: list[CacheBlocks | None] = []
        #: every input's chunks, decoded once and kept for the later passes, where the
        #: inputs are cached entries of at most :data:`KEEP` bytes in all (None: read on)
        self.kept: list[tuple] | None = None
        made = _made(getattr(reader, "gen", None))
        for path in paths:
            entry = cached = None
            if self.root and os.path.exists(path):
                shard = places[len(self.entries)][2] if places is not None else (0, 1)
                entry = os.path.join(self.root, cache_key(path, parse, shard) + made)
                if os.path.exists(os.path.join(entry, "meta.json")):
                    try:
                        cached = CacheBlocks(entry, parse, path)
                    except (OSError, ValueError, KeyError):  # unreadable: parsed again
                        shutil.rmtree(entry, ignore_errors=True)
            self.entries.append(entry)
            self.cached.append(cached)

    def chunks(self) -> Iterator[tuple]:
        """One pass's chunks, every file's in order."""
        if self.kept is not None:
            self._count_skipped(1)
            yield from self.kept
            return
        keep: list[tuple] | None = [] if self._small() else None
        for k, path in enumerate(self.paths):
            cached = self.cached[k]
            if cached is not None:
                if hasattr(self.reader, "skipped"):  # (--skip-bad's count, as if parsed)
                    self.reader.skipped += cached.skipped()
                for b in _decoded(cached):
                    if keep is not None:
                        keep.append(b)
                    yield b
            elif self.entries[k] is not None:
                yield from self._caching(k, path)
            else:
                yield from self.parsed(self._part(k, path), self.reader)
        self.kept = keep

    def _small(self) -> bool:
        """Every input is a cached entry, of :data:`KEEP` bytes at most in all."""
        return all(c is not None for c in self.cached) and \
            sum(c.size_bytes for c in self.cached if c is not None) <= KEEP

    def _count_skipped(self, passes: int) -> None:
        """--skip-bad's count of ``passes`` passes over the cached inputs, as if parsed."""
        if hasattr(self.reader, "skipped"):
            self.reader.skipped += passes * sum(c.skipped() for c in self.cached
                                                if c is not None)

    def _part(self, k: int, path: str) -> list:
        """What :attr:`parsed` reads for the k-th input: its path, or its part."""
        return [path] if self.places is None else [self.places[k]]

    def _caching(self, k: int, path: str) -> Iterator[tuple]:
        """The file's chunks, parsed, its cache entry written meanwhile and committed."""
        from .._io._cachewrite import EntryWriter

        entry, root = self.entries[k], self.root
        assert entry is not None
        tmp = _new_tmp(root)
        writer = None
        ok = False
        try:
            writer = EntryWriter(tmp, self.parse, path, _VERSION)
            for b in self.parsed(self._part(k, path),
                                 _Encoding(self.reader, writer, self.parse.bits)):
                writer.put(b[10])
                yield b[:10]
            writer.finish()
            _commit(tmp, entry, root)
            self.cached[k] = CacheBlocks(entry, self.parse, path)
            ok = True
        except OSError as e:
            raise _storage(root, e) from None
        finally:
            if not ok:
                if writer is not None:
                    writer.abort()
                shutil.rmtree(tmp, ignore_errors=True)


class _Encoding:
    """A parser that also encodes each chunk as the cache's record (in the parse thread)."""

    def __init__(self, reader: Any, writer: Any, bits: int) -> None:
        self.reader, self.writer, self.bits = reader, writer, bits

    def parse(self, text: bytes, source: str, line: int) -> tuple:
        before = getattr(self.reader, "skipped", 0)
        b = self.reader.parse(text, source, line)
        ds = Dataset(indptr=b[0], indices=b[1], values=b[2], labels=b[3], weights=b[4],
                     bits=self.bits, tag_ptr=b[5], tag_blob=b[6],
                     notes=list(b[7]) if b[7] else None, blanks=b[8], ignored=b[9],
                     skipped=getattr(self.reader, "skipped", 0) - before)
        return (*b[:10], self.writer.encode(ds))


def _decoded(cached: CacheBlocks) -> Iterator[tuple]:
    """The entry's blocks, the next one read and decoded in another thread meanwhile
    (the decoder releases the GIL); an entry of one block is read here, with no thread
    (starting one a pass cost more than the pass over a small file: 10000 passes)."""
    from concurrent.futures import ThreadPoolExecutor

    if len(cached.index) <= 1:
        yield from cached.chunks()
        return
    blocks = cached.chunks()
    with ThreadPoolExecutor(1, thread_name_prefix="terascale-cache") as ex:
        pending = ex.submit(next, blocks, None)
        while True:
            chunk = pending.result()
            if chunk is None:
                return
            pending = ex.submit(next, blocks, None)
            yield chunk
            del chunk


class Replay:
    """The later passes over one kept chunk (:attr:`Inputs.kept`) that report nothing
    between them -- no progress line due, no prediction written, no label warning, no
    early stop to decide -- in one call of the compiled learner's ``passes`` each: the
    learning, sums and counters of that many ``_vwonline._Pass.learn`` calls, bit for
    bit, without the Python of a pass (10000 passes over a 5-line file: the Python was
    nine tenths of the run). ``run``: a ``_Pass`` of the run (its learner and settings);
    ``most``: the passes a call may make (1 where an early stop decides after each)."""

    def __init__(self, run: Any, chunk: tuple, inputs: Inputs, most: int) -> None:
        from .._holdout import Holdout

        self.run, self.chunk, self.inputs = run, chunk, inputs
        n = len(chunk[3])
        self.hold = (Holdout(run.period, run.offset, raw=True)(0, n, chunk[8]) if run.period
                     else bytearray())
        # each pass's counts (_Pass.learn's ``counted`` but the label sum) and the weight
        # its examples add to the progress table's (``cum_w``'s last step): the compiled
        # ``counts`` that _Pass.learn takes them from, over the chunk once
        sums, cum_w, none = array("d", bytes(48)), array("d", bytes(8 * n)), array("q")
        # where the table is printed: each example's count in the pass (VW's number of it,
        # for its learner's lines) and the passes' notes (VW's logger is quiet with it)
        lines = run.prog.out is not None
        self.cum_n = array("q", bytes(8 * n)) if lines else none
        self.notes = array("i", bytes(4 * n)) if lines else array("i")
        run.fast.counts(chunk[0], chunk[3], chunk[4], self.hold,
                        chunk[9] if chunk[9] is not None else none, sums, cum_w, self.cum_n,
                        0.0, 0)
        self.counted = (sums[0], int(sums[1]), int(sums[2]))
        self.step = cum_w[n - 1]
        self.most = max(most, 1)
        self.rows = array("d", bytes(8 * _ROW * self.most))  # (a row of sums a pass)

    @classmethod
    def of(cls, run: Any, inputs: Inputs, most: int) -> Replay | None:
        """The replay of ``inputs``' kept chunk; None where they are not one chunk."""
        kept = inputs.kept
        if kept is None or len(kept) != 1 or len(kept[0][3]) == 0:
            return None
        return cls(run, kept[0], inputs, most)

    def ahead(self, left: int) -> int:
        """How many of the next ``left`` passes report nothing (0: the next one prints a
        progress line: ``_Pass.learn`` makes it)."""
        prog, most = self.run.prog, min(left, self.most)
        if prog.out is None:
            return most
        k, w = 0, prog.seen_w
        while k < most and w + self.step < prog.due:
            w, k = w + self.step, k + 1
        return k

    def learn(self, k: int, rate: float, totals: list, marks: list) -> tuple[int, float]:
        """Make ``k`` passes (:meth:`ahead`'s at most) after one at ``rate``, or fewer:
        the passes stop after one that VW's learner tells of (a NaN score or update, a
        feature of too much magnitude), whose lines are printed; append each pass's totals
        and progress mark as the run's loop does; returns the passes made and the last
        one's rate (a float32's value)."""
        run, b, prog = self.run, self.chunk, self.run.prog
        opts = run.opts
        carry = array("d", [prog.label_sum, *prog.seen_sums])
        k = run.fast.passes(b[0], b[1], b[2], b[3], b[4], run.table, run.state, run.kind,
                            float(rate), float(opts.decay_learning_rate), opts.power_t,
                            opts.l1, run.l2, run.signs, run.clips, self.hold, prog.sums,
                            carry, memoryview(self.rows)[:_ROW * k], self.notes)
        if self.notes.count(0) != len(self.notes):  # (the last pass's examples noted)
            from ._vwreport import example_numbers, learner_notes

            base = prog.seen_n + (k - 1) * self.counted[1]
            around = learner_notes(self.notes, example_numbers(
                b[3], self.hold, self.cum_n, 0, len(self.notes), base))
            sys.stdout.write("".join(a + z for _, (a, z) in sorted(around.items())))
        rows = [self.rows[_ROW * j:_ROW * (j + 1)].tolist() for j in range(k)]
        for row in rows:
            row[6:9] = map(float, self.counted)
        totals.extend(row[:14] for row in rows)
        due, at_line = float(prog.due), float(prog.prev[1])
        marks.extend([due, row[15], at_line] for row in rows)
        prog.label_sum = carry[0]
        prog.seen_sums[:] = carry[1:]
        if prog.out is not None:  # (Progress.end_pass of each pass)
            prog.passes += k
            for row in rows:  # (summed in turn, as a running sum of the passes)
                prog.done = [d + a for d, a in zip(prog.done, row[:4])]
            for _ in range(k):
                prog.seen_w = prog.seen_w + self.step
            prog.seen_n += k * self.counted[1]
        self.inputs._count_skipped(k)
        return k, rows[k - 1][14]
