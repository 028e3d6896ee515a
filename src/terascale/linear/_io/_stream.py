"""Streaming text: a file's byte range, read in bounded chunks cut at record ends, parsed.

A worker's part of a file is the k-th of n byte ranges: the records that *start* in
``[size * k // n, size * (k + 1) // n)``, where a record starts at the beginning of the file
or just after a line break (a line break outside quoted fields, for CSV), as Hadoop splits
text; every record is read by exactly one worker. The range is read with plain ``read``
calls into chunks of ``CHUNK_BYTES`` (``.gz`` and ``.zip`` decompressed as streams), each
cut after its last record end, the rest carried into the next chunk. Nothing maps or holds
the whole file: a mapping counts against the address space and stays resident once touched.

Chunks are parsed by threads (the C and numba parsers release the GIL), a bounded number in
flight, and come out in file order: the result does not depend on the number of threads.
"""

from __future__ import annotations

import contextvars
import gzip
import os
import zipfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, TypeVar, cast

import numpy as np

from ..._background import background
from ..._errors import ConfigError, DataError
from ._blocks import Block, Blocks, ShardStats
from ._dataset import Dataset, ParseOptions

__all__ = ["CHUNK_BYTES", "TextBlocks", "lines_before", "parse_threads", "record_chunks",
           "shard_places", "stream_size"]

T = TypeVar("T")

# text per parsed block: ~5000 examples of click data. The blocks in flight (parsing,
# mapped ahead, learned from) cost a few times this each: 1 MiB against 2 MiB takes ~25 MB
# off a pass's peak (1M click or wide examples, -b 24) at no measurable CPU time
CHUNK_BYTES = 1 << 20
_SCAN = 1 << 20         # read size while skipping to a worker's first record


def parse_threads() -> int:
    """Parser threads for one worker: the cores this process may run on, at most 8."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    return max(1, min(n, 8))


def _open(path: str) -> tuple[IO[bytes], int | None, bool]:
    """(stream of the file's decompressed bytes, their size when known, seekable)."""
    try:
        if path.endswith(".gz"):
            return cast(IO[bytes], gzip.open(path, "rb")), None, False
        if path.endswith(".zip"):
            z = zipfile.ZipFile(path)
            infos = [i for i in z.infolist() if not i.filename.endswith("/")]
            if len(infos) != 1:
                z.close()
                raise DataError(f"{path}: a .zip input must hold exactly one file, "
                                f"it holds {len(infos)}")
            return z.open(infos[0]), infos[0].file_size, False
        f = open(path, "rb")  # noqa: SIM115 (closed by the caller)
        return f, os.fstat(f.fileno()).st_size, True
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, zipfile.BadZipFile, EOFError) as e:
        raise DataError(f"{path}: cannot read: {e}") from None


def _read(f: IO[bytes], n: int, path: str) -> bytes:
    try:
        return f.read(n)
    except (OSError, EOFError, zipfile.BadZipFile) as e:  # truncated .gz, bad CRC
        raise DataError(f"{path}: cannot read: {e}") from None


def stream_size(path: str) -> int:
    """Bytes of the file's (decompressed) content; a ``.gz`` is decompressed to count."""
    f, size, _ = _open(path)
    with f:
        if size is not None:
            return size
        total = 0
        while True:
            data = _read(f, 8 << 20, path)
            if not data:
                return total
            total += len(data)


def _ends(buf: np.ndarray, parity: int, csv: bool) -> np.ndarray:
    """Positions of the record-ending line breaks in ``buf``; for CSV only those after an
    even number of quotes (``parity`` quotes counted before ``buf``)."""
    nl = np.flatnonzero(buf == 10)
    if not csv or len(nl) == 0:
        return nl
    quotes = np.flatnonzero(buf == 34)
    return nl[(np.searchsorted(quotes, nl) + parity) % 2 == 0]


class _Scanner:
    """Reads a stream forward: ``pos`` bytes consumed, ``lines`` line breaks among them
    (None when skipped by seeking), CSV quote parity, and read-ahead in ``pending``."""

    def __init__(self, f: IO[bytes], path: str, csv: bool) -> None:
        self.f, self.path, self.csv = f, path, csv
        self.pos = 0
        self.lines: int | None = 0
        self.parity = 0
        self.pending = b""

    def consume(self, data: bytes | memoryview) -> None:
        self.pos += len(data)
        a = np.frombuffer(data, np.uint8)
        if self.lines is not None:
            self.lines += int(np.count_nonzero(a == 10))
        if self.csv:
            self.parity = (self.parity + int(np.count_nonzero(a == 34))) % 2

    def header(self) -> bytes:
        """The first line (a CSV header), consumed; positions then count from after it."""
        data = b""
        while True:
            more = _read(self.f, _SCAN, self.path)
            data += more
            j = data.find(b"\n")
            if j >= 0 or not more:
                break
        end = j + 1 if j >= 0 else len(data)
        self.pending = data[end:]
        return data[:end]

    def seek(self, i: int) -> None:
        """Jump to position ``i`` of a seekable stream (line numbers become unknown)."""
        self.f.seek(i)
        self.pos, self.lines, self.pending = i, None, b""

    def skip_to_record(self, i: int) -> None:
        """Advance to the first record that starts at or after position ``i``."""
        if i <= 0:
            return
        while self.pos < i - 1:
            data = self.pending or _read(self.f, min(_SCAN, i - 1 - self.pos), self.path)
            if not data:
                self.pending = b""
                return
            cut = i - 1 - self.pos
            data, self.pending = data[:cut], data[cut:]
            self.consume(data)
        while True:  # the record that holds position i - 1 ends at the first end from it
            data = self.pending or _read(self.f, _SCAN, self.path)
            self.pending = b""
            if not data:
                return
            e = _ends(np.frombuffer(data, np.uint8), self.parity, self.csv)
            if len(e):
                j = int(e[0]) + 1
                self.consume(data[:j])
                self.pending = data[j:]
                return
            self.consume(data)

    def _cut(self, buf: bytes, at: int | None) -> tuple[int | None, int | None]:
        """(just past the first record end at or after ``at``, if any and ``at`` is given;
        the last record end in ``buf``, if any). Plain text finds them with ``bytes.find``
        and ``rfind`` (no pass over the chunk, which listing every line break would cost);
        CSV lists the breaks outside quotes."""
        if not self.csv:
            k = buf.find(b"\n", at) if at is not None else -1
            r = buf.rfind(b"\n")
            return (k + 1 if k >= 0 else None), (r if r >= 0 else None)
        e = _ends(np.frombuffer(buf, np.uint8), self.parity, True)
        j = None
        if at is not None:  # the record holding position ``at`` is the last
            k = int(np.searchsorted(e, at))
            if k < len(e):
                j = int(e[k]) + 1
        return j, (int(e[-1]) if len(e) else None)

    def chunks(self, limit: int | None, chunk: int) -> Iterator[tuple[np.ndarray, int | None,
                                                                     int]]:
        """(chunk, line breaks before it, its position) for the records starting before
        ``limit`` (all, for None); each chunk holds whole records."""
        want = chunk
        eof = False
        while limit is None or self.pos < limit:
            buf = self.pending
            while len(buf) < want and not eof:
                data = _read(self.f, want - len(buf), self.path)
                eof = not data
                buf += data
            self.pending = b""
            if not buf:
                return
            j, end = self._cut(buf, None if limit is None else limit - 1 - self.pos)
            last = j is not None or eof
            if j is None:
                if eof:
                    j = len(buf)
                elif end is None:  # a record longer than the chunk: read on
                    self.pending = buf
                    want *= 2
                    continue
                else:
                    j = end + 1
            out = memoryview(buf)[:j]  # a view: the parser reads it in place
            yield np.frombuffer(out, np.uint8), self.lines, self.pos
            self.consume(out)
            self.pending = buf[j:]
            want = chunk
            if last:
                return


def _count_lines(path: str, end: int) -> int:
    """Line breaks before position ``end`` (for an error message after a seek)."""
    f, _, _ = _open(path)
    with f:
        n = left = 0
        left = end
        while left > 0:
            data = _read(f, min(left, 8 << 20), path)
            if not data:
                break
            n += data.count(b"\n")
            left -= len(data)
        return n


class TextBlocks(Blocks):
    """Part ``shard`` of a text file, parsed chunk by chunk on every pass.

    Parameters
    ----------
    path
        The text file (plain, ``.gz`` or ``.zip``).
    opts
        How to parse it (:class:`ParseOptions`).
    shard
        ``(k, n)``: part ``k`` of ``n`` (default ``(0, 1)``: the whole file); ``(start,
        end, size)``: its bytes ``start:end`` of ``size`` (:func:`._readers.shard_files`).
    need_label
        Whether every example needs a label (default True; False: data to predict).
    chunk
        Bytes of text per parsed block (default None: 2 MiB).
    threads
        Parser threads (default None: the cores this process may run on, at most 8).
    """

    def __init__(self, path: str, opts: ParseOptions, *, shard: tuple[int, ...] = (0, 1),
                 need_label: bool = True, chunk: int | None = None,
                 threads: int | None = None) -> None:
        self.path = path
        self.opts = opts
        self.shard = shard
        self.need_label = need_label
        self.chunk = max(1, int(CHUNK_BYTES if chunk is None else chunk))
        self.threads = parse_threads() if threads is None else max(1, threads)
        self.bits = opts.bits
        self.parse = opts
        self.sources = [path]
        self._stats: ShardStats | None = None

    # -- text --------------------------------------------------------------------------
    def _chunks(self) -> Iterator[Callable[[], Dataset]]:
        """Parse jobs, one per chunk, in order (run them in any thread)."""
        from ._readers import parse_text

        csv = self.opts.format == "csv"
        # part k of n, or bytes start:end of the file's d (shard_files); either is the
        # range [size * a // d, size * b // d) of the text (of a CSV's body)
        a, b, d = self.shard if len(self.shard) == 3 else (
            self.shard[0], self.shard[0] + 1, self.shard[1])
        f, size, seekable = _open(self.path)
        with f:
            sc = _Scanner(f, self.path, csv)
            header = sc.header() if csv else b""
            if csv:
                sc.pos = 0  # CSV shards cut the body (after the header), as _csv_byte_range
            limit = None
            if (a, b, d) != (0, 1, 1):
                if size is None:
                    size = stream_size(self.path)
                if csv:
                    size -= len(header)
                start, limit = size * a // d, size * b // d
                if seekable and not csv and start > 0:
                    sc.seek(start - 1)
                    sc.pos = start - 1
                    sc.skip_to_record(start)
                else:
                    sc.skip_to_record(start)
            emitted = False
            for buf, lines, pos in sc.chunks(limit, self.chunk):
                emitted = True
                yield self._job(parse_text, buf, header, lines, pos)
            if csv and not emitted:  # a header alone still checks the columns
                yield self._job(parse_text, np.zeros(0, np.uint8), header, 0, 0)

    def _job(self, parse_text: Callable[..., Dataset], buf: np.ndarray, header: bytes,
             lines: int | None, pos: int) -> Callable[[], Dataset]:
        path, opts, need = self.path, self.opts, self.need_label
        extra = len(header)

        def first_line() -> int:  # 1-based number of the chunk's first line
            before = lines if lines is not None else _count_lines(path, pos + extra)
            return 1 + before + (1 if header else 0)

        return lambda: parse_text(buf, opts, source=path, first_line=first_line,
                                  header=header, need_label=need)

    def datasets(self) -> Iterator[Dataset]:
        """The parsed chunks in order."""
        return self.map_chunks(lambda ds: ds)

    def map_chunks(self, fn: Callable[[Dataset], T]) -> Iterator[T]:
        """``fn`` of every parsed chunk, in order; chunks are parsed and ``fn`` applied in
        ``threads`` threads, up to ``threads + 1`` chunks in flight.

        Parameters
        ----------
        fn
            Called with each parsed chunk (a :class:`Dataset`).
        """
        jobs = self._chunks()
        if self.threads == 1:
            for job in jobs:
                yield fn(job())
            return
        ex = ThreadPoolExecutor(self.threads, thread_name_prefix="terascale-parse",
                                initializer=background)
        inflight: list[Future[T]] = []
        try:
            for job in jobs:
                # in the caller's context: errors name options as the caller does
                ctx = contextvars.copy_context()
                inflight.append(ex.submit(ctx.run, lambda j=job: fn(j())))
                if len(inflight) > self.threads:
                    yield inflight.pop(0).result()
            while inflight:
                yield inflight.pop(0).result()
        finally:
            for fu in inflight:
                fu.cancel()
            ex.shutdown(wait=True)

    # -- Blocks ------------------------------------------------------------------------
    def __iter__(self) -> Iterator[Block]:
        start = skipped = nnz = 0
        for ds in self.datasets():
            skipped += ds.skipped
            nnz += ds.n_features
            yield Block(start=start, indptr=ds.indptr, indices=ds.indices, values=ds.values,
                        labels=ds.labels, weights=ds.weights, tag_ptr=ds.tag_ptr,
                        tag_blob=ds.tag_blob, blanks=ds.blanks, ignored=ds.ignored,
                        notes=ds.notes and tuple(ds.notes))
            start += len(ds)
        self._stats = ShardStats(start, nnz, skipped)

    def stats(self) -> ShardStats:
        if self._stats is None:
            for _ in self:
                pass
        assert self._stats is not None
        return self._stats

    def skipped(self) -> int:
        return self.stats().skipped


def record_chunks(path: str, shard: tuple[int, ...], size: list[int]
                  ) -> Iterator[tuple[bytearray, int]]:
    """The records of part ``shard`` of VW or LIBSVM text ``path`` (:class:`TextBlocks`'s
    part: those that start in its byte range) in chunks cut after a line break, each with
    the number of its first line: ``size[0]`` bytes read at a time into a buffer of the
    chunk's own (the caller may change it between chunks). The part's first record is
    found by reading the text before it into one buffer of 64 KiB, its line breaks
    counted (the line numbers kept, which a seek would lose; :class:`_Scanner`'s
    megabyte reads and their copies held 5 MB more of the second worker's peak)."""
    a, b, d = shard if len(shard) == 3 else (shard[0], shard[0] + 1, shard[1])
    f, n, _ = _open(path)
    pos, line, rest, limit = 0, 1, b"", None
    with f:
        if (a, b, d) != (0, 1, 1):
            if n is None:
                n = stream_size(path)
            start, limit = n * a // d, n * b // d
            if start > 0:  # (the record that holds byte start - 1 is the part before's)
                pos, line, rest = _skip_to_record(f, path, start - 1)
        while limit is None or pos < limit:
            data = bytearray(len(rest) + size[0])
            data[:len(rest)] = rest
            try:
                got = f.readinto(memoryview(data)[len(rest):])  # type: ignore[attr-defined]
            except (OSError, EOFError, zipfile.BadZipFile) as e:
                raise DataError(f"{path}: cannot read: {e}") from None
            end = len(rest) + got
            k = -1 if limit is None else data.find(b"\n", limit - 1 - pos, end)
            if k >= 0:  # the end of the record that holds the part's last byte
                del data[k + 1:]
                yield data, line
                return
            if not got:
                if end:
                    del data[end:]
                    yield data, line
                return
            cut = data.rfind(b"\n", 0, end) + 1
            if cut == 0:  # a record longer than the chunk: read on
                rest = bytes(data[:end])
                continue
            rest = bytes(data[cut:end])
            del data[cut:]
            yield data, line
            pos += cut
            line += data.count(b"\n")


def _skip_to_record(f: IO[bytes], path: str, at: int) -> tuple[int, int, bytes]:
    """Read ``f`` past the line break that ends the record holding position ``at``: that
    position, the line number of the record after it and the bytes read past it."""
    buf = bytearray(1 << 16)
    view = memoryview(buf)
    pos = lines = 0
    while True:
        want = len(buf) if pos >= at else min(len(buf), at - pos)
        try:
            got = f.readinto(view[:want])  # type: ignore[attr-defined]
        except (OSError, EOFError, zipfile.BadZipFile) as e:
            raise DataError(f"{path}: cannot read: {e}") from None
        if not got:
            return pos, 1 + lines, b""
        k = buf.find(b"\n", 0, got) if pos >= at else -1
        if k >= 0:
            return pos + k + 1, 2 + lines + buf.count(b"\n", 0, k), bytes(buf[k + 1:got])
        lines += buf.count(b"\n", 0, got)
        pos += got


def lines_before(paths: Sequence[str], places: list[tuple[int, str, tuple[int, ...]]]
                 ) -> int:
    """The lines of the input ``paths`` before the first of a worker's ``places``
    (:func:`shard_places`'): every line of the files before its file (a last line without
    a line break too) and the lines of that file before its part, as VW counts examples
    (an empty line too)."""
    i, path, shard = places[0]
    lines = 0
    for p in paths[:i]:
        breaks, last = _line_breaks(p)
        lines += breaks + (last not in (b"", b"\n"))
    if len(shard) == 3:
        start = stream_size(path) * shard[0] // shard[2]
        if start > 0:  # (the record that holds byte start - 1, the part before's, and those
            lines += _line_breaks(path, start - 1)[0] + 1  # before it: record_chunks')
    return lines


def _line_breaks(path: str, limit: int | None = None) -> tuple[int, bytes]:
    """The line breaks in the file's first ``limit`` bytes (None: all of them) and the
    last byte read."""
    f, _, _ = _open(path)
    breaks, last = 0, b""
    with f:
        while limit is None or limit > 0:
            data = _read(f, 1 << 20 if limit is None else min(limit, 1 << 20), path)
            if not data:
                break
            breaks += data.count(b"\n")
            last = data[-1:]
            if limit is not None:
                limit -= len(data)
    return breaks, last


def shard_places(paths: Sequence[str], k: int, n: int
                 ) -> list[tuple[int, str, tuple[int, ...]]]:
    """:func:`._readers.shard_files` with each part's file index in ``paths``: part (i, k)
    is the i-th file's of worker k, and the parts of all workers in the order of
    ``i * n + k`` are the input in its order (here, where reading a part imports no
    numba: ``terascale vw -n N``'s compiled workers read their parts so)."""
    if not paths:
        raise ConfigError("no input files")
    m = len(paths)
    if m >= n:
        return [(i, paths[i], (0, 1)) for i in range(k * m // n, (k + 1) * m // n)]
    sizes = [stream_size(p) for p in paths]
    total = sum(sizes)
    lo, hi = total * k // n, total * (k + 1) // n
    out: list[tuple[int, str, tuple[int, ...]]] = []
    at = 0
    for i, (p, s) in enumerate(zip(paths, sizes)):
        a, b = max(lo - at, 0), min(hi - at, s)
        if a < b:
            out.append((i, p, (a, b, max(s, 1))))
        at += s
    if not out:  # (fewer bytes than workers: an empty part of the last file)
        s = sizes[-1]
        out.append((m - 1, paths[-1], (s, s, max(s, 1))))
    return out
