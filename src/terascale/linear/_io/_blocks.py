"""Blocks: how every learner reads a data shard, a bounded piece at a time.

Terascale data does not fit in memory (Agarwal, Chapelle, Dudík & Langford, JMLR 2014,
sec. 3: each node makes its passes over its own shard, from a cache on its own disk). So no
learner sees a whole shard: it sees a :class:`Blocks`, an iterable of :class:`Block` s,
each a few thousand examples in CSR form, decoded into small buffers, used and dropped.
Peak memory is one block (plus the parser's or the decoder's few blocks in flight) and
the weight state, whatever the number of examples.

Three kinds of shard implement it: the on-disk cache (:mod:`._cache`, read with ``pread``
block by block), text streamed from a file's byte range (:mod:`._stream`, parsed chunk
by chunk), and an in-memory :class:`Dataset` (``parse_lines``, scikit-learn arrays) cut
into slices. A learner's loop is the same for all three::

    for blk in blocks:                       # one pass
        cols = columns(blk.indices)          # hashed index -> compact column
        online_chunk(blk.indptr, cols, blk.values, blk.labels, blk.weights, ...)

``Block.start`` is the position of the block's first example in the whole shard, so a
rule over example positions (the holdout set: every k-th example) is the same whether the
shard streams in blocks of 10^3 or 10^5 examples. Results do not depend on where blocks
are cut: the kernels run through the examples in order and accumulate into the same
buffers, so a streamed cache and the same data in memory give bitwise-identical weights.

Tuning: ``BLOCK_EXAMPLES`` bounds an in-memory slice; the cache's and the text reader's
block size is their chunk size (``_stream.CHUNK_BYTES`` of text per block).
"""

from __future__ import annotations

import contextlib
import contextvars
import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from ..._background import background
from ..._lazy import lazy_module
from ._cachebits import kernels
from ._dataset import Dataset, ParseOptions, example_tag

np = lazy_module("numpy", globals(), "np")

__all__ = ["BLOCK_EXAMPLES", "Block", "Blocks", "ChainBlocks", "DatasetBlocks", "FeatureSet",
           "ShardStats", "as_blocks", "prefetch"]

BLOCK_EXAMPLES = 1 << 15
T = TypeVar("T")


@dataclass(frozen=True)
class Block:
    """Examples ``start .. start + len`` of a shard, CSR with ``indptr[0] == 0``.

    Parameters
    ----------
    start
        The index of its first example in the shard.
    indptr
        Row pointers (int64, n + 1 entries, ``indptr[0] == 0``).
    indices
        Hashed feature indices (uint32, masked to ``bits``).
    values
        Feature values (float32).
    labels
        Labels (float32), NaN where an example has none.
    weights
        Importance weights (float32).
    tag_ptr
        Offsets into ``tag_blob`` of each example's VW tag (int64, n + 1), or None: no tags.
    tag_blob
        The VW tags' bytes (uint8), or None.
    blanks
        VW text's empty lines in it: for each, the index in the block of the example it
        precedes (int64, sorted; ``len`` after the last), or None: none.
    ignored
        Each example's count of features ``--ignore_linear`` dropped (int64), or None.
    notes
        VW's lines on the label sections of its text read with
        :attr:`.ParseOptions.lenient_labels` (:attr:`.Dataset.notes`; a cache keeps them),
        or None: none. VW prints them as it parses: ``terascale vw`` on the first pass.
    """

    start: int
    indptr: np.ndarray      # int64, n + 1
    indices: np.ndarray     # uint32, masked to bits
    values: np.ndarray      # float32
    labels: np.ndarray      # float32, NaN where unlabelled
    weights: np.ndarray     # float32
    tag_ptr: np.ndarray | None = None   # int64, n + 1 into tag_blob
    tag_blob: np.ndarray | None = None  # uint8
    blanks: np.ndarray | None = None    # int64, the example each empty line precedes
    ignored: np.ndarray | None = None   # int64, n: --ignore_linear's features (VW counts)
    notes: tuple[str, ...] | None = None  # VW's lines on label sections (lenient_labels)

    def counted(self, start: int, end: int) -> np.ndarray:
        """The feature count VW gives examples [start, end): those held, and those
        ``--ignore_linear`` dropped.

        Parameters
        ----------
        start, end
            The first example and the one after the last, in this block.
        """
        n = np.diff(self.indptr[start:end + 1])
        return n + self.ignored[start:end] if self.ignored is not None else n

    def __len__(self) -> int:
        return len(self.labels)

    def tag(self, i: int) -> str:
        """The VW tag of example ``i`` (``""`` when it has none).

        Parameters
        ----------
        i
            The example's index.
        """
        return example_tag(self.tag_ptr, self.tag_blob, i)

    @property
    def has_tags(self) -> bool:
        return self.tag_ptr is not None and len(self.tag_ptr) > 0 and self.tag_ptr[-1] > 0


@dataclass(frozen=True)
class ShardStats:
    examples: int
    features: int   # stored (non-zero) features, constant and crosses included
    skipped: int    # bad lines skipped with skip_bad


class Blocks:
    """A shard read block by block; subclasses define ``__iter__`` (one pass).

    ``stats`` and ``features`` have generic versions that take one pass; the cache answers
    them from its metadata without reading the data.
    """

    bits: int
    parse: ParseOptions | None
    sources: list[str]

    def __iter__(self) -> Iterator[Block]:
        raise NotImplementedError

    def __len__(self) -> int:
        return self.stats().examples

    def label_blocks(self) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]]:
        """(start, labels, weights, blanks) of every block: what counting and checks need."""
        for b in self:
            yield b.start, b.labels, b.weights, b.blanks

    def stats(self) -> ShardStats:
        n = nnz = 0
        for b in self:
            n += len(b)
            nnz += int(b.indptr[-1])
        return ShardStats(n, nnz, self.skipped())

    def skipped(self) -> int:
        return 0

    def features(self) -> np.ndarray:
        """The sorted distinct hashed indices present (uint32)."""
        acc = FeatureSet(self.bits)
        for b in self:
            acc.add(b.indices)
        return acc.result()

    def dataset(self) -> Dataset:
        """Everything in memory (small data and tests only: this is what Blocks avoid)."""
        parts = [Dataset(indptr=b.indptr, indices=b.indices, values=b.values,
                         labels=b.labels, weights=b.weights, bits=self.bits,
                         tag_ptr=b.tag_ptr, tag_blob=b.tag_blob, blanks=b.blanks,
                         ignored=b.ignored, notes=list(b.notes) if b.notes else None)
                 for b in self]
        if not parts:
            parts = [Dataset(indptr=np.zeros(1, np.int64), indices=np.zeros(0, np.uint32),
                             values=np.zeros(0, np.float32), labels=np.zeros(0, np.float32),
                             weights=np.zeros(0, np.float32), bits=self.bits)]
        ds = Dataset.concat(parts)
        ds.skipped = self.skipped()
        ds.sources = list(self.sources)
        ds.parse = self.parse
        return ds


class FeatureSet:
    """Accumulates the distinct indices of many blocks in bounded memory: a byte for each
    of the 2**bits indices up to 2**26 (an anonymous mapping: a page costs memory once an
    index in it is marked), beyond that a sorted set merged block by block. A dense set of
    the compiled parser's indices (typed memoryviews) is kept without numpy
    (:meth:`sorted_bytes`)."""

    def __init__(self, bits: int) -> None:
        from ..._pages import mapping

        self.dense = bits <= 26
        self.mark = mapping(1 << bits, huge=False) if self.dense else None
        self.parts: list[np.ndarray] = []

    def add(self, indices: np.ndarray | memoryview) -> None:
        """Mark the block's indices (uint32)."""
        if self.mark is not None:
            kernels().mark(self.mark, indices if isinstance(indices, memoryview)
                           else np.ascontiguousarray(indices, np.uint32))
        else:
            from ._setops import unique_sorted

            self.parts.append(unique_sorted(np.asarray(indices, np.uint32)))
            if len(self.parts) > 16:
                self.parts = [unique_sorted(np.concatenate(self.parts))]

    def sorted_bytes(self) -> bytes:
        """The distinct indices, sorted, as little-endian uint32 bytes."""
        if self.mark is not None:
            return kernels().marked(self.mark)
        return self.result().astype("<u4").tobytes()

    def result(self) -> np.ndarray:
        """The distinct indices, sorted (uint32)."""
        if self.mark is not None:
            return np.flatnonzero(np.frombuffer(self.mark, np.bool_)).astype(np.uint32)
        if not self.parts:
            return np.zeros(0, np.uint32)
        from ._setops import unique_sorted

        return unique_sorted(np.concatenate(self.parts)).astype(np.uint32)


def _blanks_in(blanks: np.ndarray | None, s: int, e: int, n: int) -> np.ndarray | None:
    """The empty lines before examples ``s .. e`` (and after the last, where ``e == n``),
    counted from ``s``."""
    if blanks is None:
        return None
    lo = int(np.searchsorted(blanks, s, "left"))
    hi = int(np.searchsorted(blanks, e, "right" if e == n else "left"))
    return blanks[lo:hi] - s if hi > lo else None


class DatasetBlocks(Blocks):
    """An in-memory Dataset as blocks of ``block_examples`` (views, no copies).

    Parameters
    ----------
    ds
        The dataset.
    block_examples
        Examples per block (default 32768).
    """

    def __init__(self, ds: Dataset, block_examples: int = BLOCK_EXAMPLES) -> None:
        self.ds = ds
        self.bits = ds.bits
        self.parse = ds.parse
        self.sources = list(ds.sources)
        self.block_examples = max(1, int(block_examples))

    def __iter__(self) -> Iterator[Block]:
        ds = self.ds
        indptr = np.asarray(ds.indptr)
        n = len(ds)
        for s in range(0, n, self.block_examples):
            e = min(n, s + self.block_examples)
            a, b = int(indptr[s]), int(indptr[e])
            tp = tb = None
            if ds.tag_ptr is not None and ds.tag_blob is not None:
                t0, t1 = int(ds.tag_ptr[s]), int(ds.tag_ptr[e])
                tp = np.asarray(ds.tag_ptr[s:e + 1]) - t0
                tb = np.asarray(ds.tag_blob[t0:t1])
            yield Block(start=s, indptr=np.asarray(indptr[s:e + 1]) - a,
                        indices=np.asarray(ds.indices[a:b]),
                        values=np.asarray(ds.values[a:b]), labels=np.asarray(ds.labels[s:e]),
                        weights=np.asarray(ds.weights[s:e]), tag_ptr=tp, tag_blob=tb,
                        blanks=_blanks_in(ds.blanks, s, e, n),
                        ignored=None if ds.ignored is None else ds.ignored[s:e],
                        notes=tuple(ds.notes) if ds.notes and s == 0 else None)

    def label_blocks(self) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]]:
        yield 0, np.asarray(self.ds.labels), np.asarray(self.ds.weights), self.ds.blanks

    def stats(self) -> ShardStats:
        return ShardStats(len(self.ds), self.ds.n_features, self.ds.skipped)

    def skipped(self) -> int:
        return self.ds.skipped

    def features(self) -> np.ndarray:
        acc = FeatureSet(self.bits)
        acc.add(np.asarray(self.ds.indices))
        return acc.result()

    def dataset(self) -> Dataset:
        return self.ds


class ChainBlocks(Blocks):
    """Several shards (the files of one worker) one after the other, positions running on.

    Parameters
    ----------
    parts
        The shards, in order.
    """

    def __init__(self, parts: Sequence[Blocks]) -> None:
        if not parts:
            raise ValueError("ChainBlocks needs at least one part")
        self.parts = list(parts)
        self.bits = parts[0].bits
        self.parse = parts[0].parse
        self.sources = [s for p in parts for s in p.sources]
        self._sizes: list[int] | None = None

    def _offsets(self) -> list[int]:
        if self._sizes is None:
            self._sizes = [p.stats().examples for p in self.parts]
        return list(np.cumsum([0] + self._sizes[:-1]).tolist())

    def __iter__(self) -> Iterator[Block]:
        if len(self.parts) == 1:
            yield from self.parts[0]
            return
        for p, off in zip(self.parts, self._offsets()):
            for b in p:
                yield Block(start=b.start + off, indptr=b.indptr, indices=b.indices,
                            values=b.values, labels=b.labels, weights=b.weights,
                            tag_ptr=b.tag_ptr, tag_blob=b.tag_blob, blanks=b.blanks,
                            ignored=b.ignored, notes=b.notes)

    def label_blocks(self) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]]:
        offs = self._offsets() if len(self.parts) > 1 else [0]
        for p, off in zip(self.parts, offs):
            for s, lab, w, bl in p.label_blocks():
                yield s + off, lab, w, bl

    def stats(self) -> ShardStats:
        st = [p.stats() for p in self.parts]
        self._sizes = [s.examples for s in st]
        return ShardStats(sum(s.examples for s in st), sum(s.features for s in st),
                          sum(s.skipped for s in st))

    def skipped(self) -> int:
        return sum(p.skipped() for p in self.parts)

    def features(self) -> np.ndarray:
        fs = [p.features() for p in self.parts]
        if len(fs) == 1:
            return fs[0]
        from ._setops import unique_sorted

        return unique_sorted(np.concatenate(fs)).astype(np.uint32)


def as_blocks(data: Dataset | Blocks) -> Blocks:
    """A Blocks view of a Dataset (or the Blocks themselves)."""
    return data if isinstance(data, Blocks) else DatasetBlocks(data)


@contextlib.contextmanager
def _numba_ready() -> Iterator[None]:
    """numba's one-time set-up of its compiler target, on the caller's thread, while the
    body runs (it starts the prefetch thread, which reads and parses meanwhile).

    The first numba kernel a process calls, even one loaded from numba's cache, first loads
    every implementation registry of numba's CPU target (~0.1-0.3 s of a one-line
    ``terascale vw`` run, more where its probes of scipy and cffi are not deferred:
    ``_warm.defer_numba_probes``). The producer below, at the helper threads' low priority,
    would often be the one to call a kernel first, and the learner would wait for that
    set-up at nice 19 behind every other process of a busy host. Here it runs at the
    learner's priority, under numba's compiler lock: the producer reads and parses its
    first blocks meanwhile (the C parser releases the GIL; on a one-line file there is
    nothing to overlap), and a kernel it calls first waits for the set-up instead of
    running it. Later calls return at once (numba calls the same ``refresh`` before every
    kernel it loads). In the command's own process what is alive then is frozen
    (``_warm.numba_set_up``)."""
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import cpu_target

    from .._warm import numba_set_up

    with global_compiler_lock:
        yield
        cpu_target.target_context.refresh()
    numba_set_up()


def prefetch(items: Iterator[T], depth: int = 2) -> Iterator[T]:
    """``items``, produced by a background thread up to ``depth`` ahead: reading and
    decoding the next block (``pread``, numpy, nogil numba) overlaps the learner's kernel
    (nogil numba) on this one. Order is kept, so results are the same; an exception in
    the producer is raised here; stopping early stops the producer."""
    q: queue.Queue[tuple[int, object]] = queue.Queue(depth)
    stop = threading.Event()

    def put(item: tuple[int, object]) -> bool:
        while not stop.is_set():
            try:
                q.put(item, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        background()  # the learner, not this thread, runs when both want a core
        try:
            for x in items:
                if not put((0, x)):
                    break
            else:
                put((1, None))
        except BaseException as e:  # handed to the consumer, who raises it
            put((2, e))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    t = threading.Thread(target=contextvars.copy_context().run, args=(produce,),
                         name="terascale-prefetch", daemon=True)
    with _numba_ready():
        t.start()
    try:
        while True:
            kind, x = q.get()
            if kind == 1:
                return
            if kind == 2:
                raise x  # type: ignore[misc]
            yield x  # type: ignore[misc]
    finally:
        stop.set()
        t.join()
