"""The batch phase's copy of a shard in the compact column space, spilled to disk.

L-BFGS and CG make 10-20 passes over the same examples with the same columns. Reading them
from the parse cache each time means decoding its bit-packed indices and mapping every
hashed index to its compact column through a 2**bits lookup table, a cache miss per
feature, most of a gradient pass. So the first batch pass writes each block as the kernels want it (row offsets,
uint32 compact columns, float32 values when the block has any other than 1, labels,
weights, the holdout mask) to an unnamed temporary file, and every later pass maps it
(``mmap``) and hands the kernels views of the mapped pages: no decoding, no lookups, no
copy and no Python per example; the operating system's page cache keeps the file in memory
between passes (Agarwal et al., JMLR 2014, sec. 3:
the passes of the batch phase read each node's local cache; this is that cache in the
batch phase's own layout).

Memory stays bounded: a pass asks the kernel to read the next block ahead
(``MADV_WILLNEED``) and drops the used blocks' pages from the process
(``MADV_DONTNEED``: they stay in the page cache, the process's resident memory holds about
one block, never the shard). Disk: about 8 bytes per feature (4 without real values) and 17 per example.
The file has no name (``O_TMPFILE``), so it disappears with the process, whatever ends it.
It lives in the training's cache directory, else the system's temporary directory.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ..._errors import StorageError
from ..._files import storage_error

__all__ = ["CompactBlock", "Spill"]

_ALIGN = 8


def _pad(n: int) -> int:
    return -n % _ALIGN


@dataclass(frozen=True)
class CompactBlock:
    """Examples ``start .. start + len`` in the kernels' layout: ``cols`` are compact
    columns, ``values`` is empty when every value is 1 (the kernels read that as 1)."""

    start: int
    indptr: np.ndarray   # int64, n + 1
    cols: np.ndarray     # uint32, compact columns
    values: np.ndarray   # float32, nnz, or empty: all 1
    labels: np.ndarray   # float32
    weights: np.ndarray  # float32
    hold: np.ndarray     # bool

    def __len__(self) -> int:
        return len(self.labels)


class Spill:
    """Append :class:`CompactBlock` s once (:meth:`add`), iterate them every pass."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = directory or tempfile.gettempdir()
        try:
            os.makedirs(self.directory, exist_ok=True)
            self._file = tempfile.TemporaryFile(dir=self.directory)
        except OSError as e:  # unwritable or missing: say where, as a StorageError
            raise storage_error("batch-phase spill file in", self.directory, e) from e
        self._fd = self._file.fileno()
        self._end = 0
        # per block: (offset, record bytes, start, n, nnz, has values)
        self._index: list[tuple[int, int, int, int, int, bool]] = []
        self.sealed = False
        self._scratch: np.ndarray | None = None

    def scratch(self, size: int) -> np.ndarray:
        """A float64 buffer of ``size`` zeros, the same memory every call (a gradient pass's
        second half sums): reused, its pages are not faulted in again every pass."""
        if self._scratch is None or len(self._scratch) != size:
            self._scratch = np.zeros(size)
        else:
            self._scratch.fill(0.0)
        return self._scratch

    def seal(self) -> None:
        """Mark the spill complete: a whole pass's blocks have been added."""
        self.sealed = True

    def close(self) -> None:
        self._scratch = None
        self._file.close()

    def __enter__(self) -> Spill:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def nbytes(self) -> int:
        return self._end

    def add(self, start: int, indptr: np.ndarray, cols: np.ndarray, values: np.ndarray,
            labels: np.ndarray, weights: np.ndarray, hold: np.ndarray) -> None:
        """Append one block (its arrays as the kernels take them)."""
        if self.sealed:
            raise ValueError("the spill is sealed: a pass has been written already")
        a, b = int(indptr[0]), int(indptr[-1])
        n, nnz = len(labels), b - a
        has_values = bool(nnz) and not bool(np.all(values[a:b] == 1.0))
        parts: list[np.ndarray | None] = [np.ascontiguousarray(indptr - a, np.int64),
                 np.ascontiguousarray(cols[a:b], np.uint32),
                 np.ascontiguousarray(values[a:b], np.float32) if has_values else None,
                 np.ascontiguousarray(labels, np.float32),
                 np.ascontiguousarray(weights, np.float32),
                 np.ascontiguousarray(hold, np.bool_)]
        bufs: list[memoryview] = []
        size = 0
        for p in parts:
            if p is None:
                continue
            bufs.append(p.data.cast("B"))
            size += p.nbytes
            pad = _pad(p.nbytes)
            if pad:
                bufs.append(memoryview(bytes(pad)))
                size += pad
        written = os.pwritev(self._fd, bufs, self._end)
        if written != size:  # a short write: out of disk space, said plainly
            raise StorageError(f"batch-phase spill file: wrote {written} of {size} bytes "
                               f"(is the disk of {self.directory} full?)")
        self._index.append((self._end, size, start, n, nnz, has_values))
        self._end += size

    def _map(self, entry: tuple[int, int, int, int, int, bool]) -> tuple[mmap.mmap, int]:
        """A read-only map of one block (from the page below its start) and the block's
        offset in it. One block at a time, not the whole file: a spill larger than the
        process may address (``RLIMIT_AS``) is still read."""
        lo = entry[0] // mmap.ALLOCATIONGRANULARITY * mmap.ALLOCATIONGRANULARITY
        return mmap.mmap(self._fd, entry[0] + entry[1] - lo, offset=lo,
                         access=mmap.ACCESS_READ), entry[0] - lo

    def _view(self, mm: mmap.mmap, entry: tuple[int, int, int, int, int, bool], at: int
              ) -> CompactBlock:
        _, size, start, n, nnz, has_values = entry
        buf = np.frombuffer(mm, np.uint8, size, at)
        o = 0

        def take(count: int, dtype: type) -> np.ndarray:
            nonlocal o
            nb = count * np.dtype(dtype).itemsize
            a: np.ndarray = buf[o:o + nb].view(dtype)
            o += nb + _pad(nb)
            return a

        indptr = take(n + 1, np.int64)
        cols = take(nnz, np.uint32)
        values = take(nnz, np.float32) if has_values else _EMPTY
        labels = take(n, np.float32)
        weights = take(n, np.float32)
        hold = take(n, np.bool_)
        return CompactBlock(start, indptr, cols, values, labels, weights, hold)

    def _mapped(self, entries: list[tuple[int, int, int, int, int, bool]]
                ) -> Iterator[CompactBlock]:
        """Views of the blocks ``entries`` (in file order), each valid until the caller asks
        for the next: the next block is read ahead, the used ones' pages dropped."""
        if not entries or not self._end:
            return
        nxt = self._map(entries[0])
        for k, e in enumerate(entries):
            mm, at = nxt
            if k + 1 < len(entries):  # read ahead: the next block's pages on their way
                nxt = self._map(entries[k + 1])
                nxt[0].madvise(mmap.MADV_WILLNEED)
            yield self._view(mm, e, at)
            # the used block's pages dropped (a file-backed map: read again if still used);
            # the map itself goes with the last view of it
            mm.madvise(mmap.MADV_DONTNEED)

    def __iter__(self) -> Iterator[CompactBlock]:
        """One pass over the mapped file (see :meth:`_mapped`); a pass before :meth:`seal`
        reads what has been added so far."""
        return self._mapped(list(self._index))

    @property
    def examples(self) -> int:
        return sum(e[3] for e in self._index)

    def rows(self, lo: int, hi: int) -> Iterator[tuple[CompactBlock, int, int]]:
        """(block, first row, end row) for the examples ``lo .. hi`` of the shard (two
        threads each walk their own range); a block is valid until the next is asked for."""
        entries = [e for e in self._index if e[3] and e[2] < hi and e[2] + e[3] > lo]
        for b in self._mapped(entries):
            yield b, max(lo - b.start, 0), min(hi - b.start, len(b))

    def __len__(self) -> int:
        return len(self._index)


_EMPTY = np.empty(0, np.float32)
