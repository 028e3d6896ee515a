"""The first online pass over text: learning while the text is parsed and cached.

Before a pass can run in the compact column space (:class:`._passes.Columns`) the whole
shard must have been read: the space is the union of every worker's features. Reading the
text into the cache first and learning afterwards makes the first pass wait for the parse
and read everything twice. Instead the first pass learns in a *local* column space, a
column given to each hashed index when it first appears, while the parser's threads parse
the next blocks (nogil numba) and a background thread writes the cache
(:class:`._cache.PendingCache`); at the end the local columns are moved to their places in
the union. The online update of a weight reads and writes only that weight's state and
the learner's global state, in example order, so the numbering of the columns does not
change a bit of the result: the weights are bitwise those of a pass over the cache.

The pass runs before the worker joins the job, so reading still happens before the
allreduce is initialized (Agarwal et al., JMLR 2014, sec. 3), unless the workers mix their
learners during the pass (:mod:`._mixing`, :class:`TextMixer`): then they join first. Used
when nothing the
pass computes needs the whole shard first: no warm start (``initial``), no batch phase
(its online pass uses the total train weight for its L2), at most ``-b 28`` (the lookup
table of 2**bits columns). Memory stays bounded: the parser's blocks in flight, the
writer's queue, ``prefetch``'s depth, and the weight state.
"""

from __future__ import annotations

import mmap
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace

import numba
import numpy as np

from ... import _pages
from ..._malloc import hand_back_freed_memory
from ...communicator import Communicator
from .._colindex import HashIndex, use_hash
from .._combine._mixing import Mixer, grown
from .._io._blocks import Block, Blocks, ChainBlocks, prefetch
from .._io._cache import PendingCache
from .._io._dataset import ParseOptions
from .._io._setops import first_appearances
from .._io._stream import TextBlocks
from .._layout import HOT_PREFIX
from .._passes import Holdout, LabelScan
from ._onlinepass import LLVM, Weights

__all__ = ["GrowingWeights", "LocalColumns", "TextMixer", "TextPass", "count_bits",
           "dense_threshold", "few_repeats"]

_MAX_BITS = 28  # the local lookup table: 1 GiB at most (VW's weights there: 4 GiB)
_EARLY_MAX_BITS = 27  # few_repeats: dense rows of 1.5 GiB at most


@numba.njit(cache=True, nogil=True)
def _assign(indices: np.ndarray, pos: np.ndarray, order: np.ndarray,
            n: int) -> tuple[np.ndarray, int]:
    """Columns of ``indices``, new ones numbered from ``n`` on (``pos[h]`` is the column
    of index h plus one, 0 while unseen; ``order`` the index of each column)."""
    cols = np.empty(len(indices), np.uint32)
    for k in range(len(indices)):
        h = indices[k]
        c = pos[h]
        if c == 0:
            order[n] = h
            n += 1
            c = np.uint32(n)
            pos[h] = c
        cols[k] = c - np.uint32(1)
    return cols, n


@numba.njit(cache=True, nogil=True)
def _mark(indices: np.ndarray, seen: np.ndarray) -> None:
    """Set bit h of ``seen`` (a bitmap of 2**bits bits) for every index h."""
    for k in range(len(indices)):
        h = indices[k]
        seen[h >> 3] |= np.uint8(1) << np.uint8(h & 7)


# per byte value: how many bits are set, and which (the set bits of a bitmap are read a
# byte at a time through these, not tested one at a time: a branch a bit, mispredicted
# about as often as not on a bitmap a quarter full, made listing 16M features 3x slower)
_COUNT = np.array([bin(v).count("1") for v in range(256)], np.uint8)
_BITS = np.zeros((256, 8), np.uint8)
for _v in range(256):
    _BITS[_v, :_COUNT[_v]] = [j for j in range(8) if _v >> j & 1]
del _v


@numba.njit(cache=True, nogil=True)
def count_bits(seen: np.ndarray) -> int:
    """How many bits of the bitmap ``seen`` are set."""
    n = 0
    for i in range(len(seen)):
        n += _COUNT[seen[i]]
    return n


@numba.njit(cache=True, nogil=True)
def _set_bits(seen: np.ndarray) -> np.ndarray:
    """The positions of the set bits of ``seen``, ascending (uint32)."""
    out = np.empty(count_bits(seen), np.uint32)
    _set_bits_into(seen, out)
    return out


@numba.njit(cache=True, nogil=True)
def _set_bits_into(seen: np.ndarray, out: np.ndarray) -> None:
    """:func:`_set_bits` written into ``out`` (uint32, at least as long as the bits set)."""
    k = 0
    for i in range(len(seen)):
        b = seen[i]
        for t in range(_COUNT[b]):
            out[k + t] = np.uint32(i * 8 + _BITS[b, t])
        k += _COUNT[b]


@numba.njit(cache=True, nogil=True)
def _merge_positions(union: np.ndarray, sorted_idx: np.ndarray) -> np.ndarray:
    """Position in ``union`` of each of ``sorted_idx`` (both sorted; every one present): a
    linear merge (a binary search per feature is a cache miss each, 25 s at 11M)."""
    out = np.empty(len(sorted_idx), np.uint32)  # (a union is < 2**32 features)
    j = 0
    for k in range(len(sorted_idx)):
        h = sorted_idx[k]
        while union[j] != h:
            j += 1
        out[k] = np.uint32(j)
    return out


@numba.njit(cache=True, nogil=True)
def _gather_rows(rows: np.ndarray, seen: np.ndarray, feat: np.ndarray, lo: int, hi: int,
                 k: int) -> int:
    """For the set bits h of the bytes ``lo:hi`` of ``seen``, in order: the k-th one's
    index ``feat[k] = h`` and row ``rows[k] = rows[h]``, in place (h >= k: every row is
    read before it is overwritten); returns the next k."""
    for i in range(lo, hi):
        b = seen[i]
        for t in range(_COUNT[b]):
            h = i * 8 + _BITS[b, t]
            feat[k] = h
            if h != k:
                rows[k, 0] = rows[h, 0]
                rows[k, 1] = rows[h, 1]
                rows[k, 2] = rows[h, 2]
            k += 1
    return k


@numba.njit(cache=True, nogil=True)
def _scatter_rows(rows: np.ndarray, at: np.ndarray, w: np.ndarray, g2: np.ndarray,
                  nrm: np.ndarray) -> None:
    """rows[at[k]] = (w[k], g2[k], nrm[k]): one row (one cache line) written per feature,
    where three fancy-indexed assignments missed the cache three times."""
    for k in range(len(at)):
        r = at[k]
        rows[r, 0] = w[k]
        rows[r, 1] = g2[k]
        rows[r, 2] = nrm[k]


@numba.njit(cache=True, nogil=True)
def _pack(idx: np.ndarray, key: np.ndarray) -> None:
    """key[c] = idx[c] << 32 | c: sorting the keys sorts the columns by hashed index."""
    for c in range(len(idx)):
        key[c] = (np.uint64(idx[c]) << np.uint64(32)) | np.uint64(c)


@numba.njit(cache=True, nogil=True)
def _unpack(key: np.ndarray, idx: np.ndarray, perm: np.ndarray) -> None:
    """The sorted keys' hashed indices and columns."""
    for k in range(len(key)):
        idx[k] = np.uint32(key[k] >> np.uint64(32))
        perm[k] = np.uint32(key[k] & np.uint64(0xFFFFFFFF))


@numba.njit(cache=True, nogil=True)
def _gather_sorted(out: np.ndarray, at: np.ndarray, src: np.ndarray, perm: np.ndarray) -> None:
    """out[at[k]] = src[perm[k]] (out[k] where ``at`` is empty: the union is the worker's
    own features)."""
    if len(at) == 0:
        for k in range(len(perm)):
            out[k] = src[perm[k]]
    else:
        for k in range(len(perm)):
            out[at[k]] = src[perm[k]]


def _sort_columns(idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the hashed indices sorted, the column of each): one sort of 64-bit keys, where
    ``np.argsort`` took 5x longer (3.0 s against 0.6 s for 17.2M features)."""
    key = _pages.zeros(len(idx), np.uint64, huge=False)
    _pack(idx, key)
    key.sort()
    srt = _pages.zeros(len(idx), np.uint32, huge=False)
    perm = _pages.zeros(len(idx), np.uint32, huge=False)
    _unpack(key, srt, perm)
    return srt, perm


_PAGE = mmap.PAGESIZE
_CHUNK = 1 << 18  # rows moved out of the dense layout between two releases of its pages
# (3 MiB: the peak of the move is the rows not yet moved, the arrays so far and one chunk;
# 12 MiB chunks put it 4-8 MB above the pass's own peak on the wide -q ab data)


class _DenseRows:
    """The dense layout's (2**bits, 3) float32 rows in an anonymous mapping of their own,
    so that pages can be handed back to the system while the rows are moved out
    (``madvise(MADV_DONTNEED)``): numpy's allocator cannot free part of an array."""

    def __init__(self, n: int) -> None:
        self.size = n * 12
        # zero pages until touched, on 4 KiB pages: the learner reads the rows at random
        # (a TLB miss a feature), but the pass also first-touches most of them, and a
        # huge page's first touch (compaction, zeroing 2 MiB) cost the one-worker pass
        # from text more system time than it saved user time (docs/design/linear-memory.md)
        self.map = _pages.mapping(self.size, huge=False)
        self.rows = np.frombuffer(self.map, np.float32, 3 * n).reshape(n, 3)

    def release_from(self, row: int) -> None:
        """Hand back the pages wholly past row ``row`` (they read as zeros after).

        The mapping is private anonymous memory (``_pages.mapping``), where
        ``MADV_DONTNEED`` frees the pages; in a shared one (shmem) it would only unmap them,
        and the resident set would fall while the memory stayed allocated."""
        start = -(-row * 12 // _PAGE) * _PAGE
        if start < self.size:
            self.map.madvise(mmap.MADV_DONTNEED, start, len(self.map) - start)

    def release(self, start: int, end: int) -> None:
        """Hand back the pages wholly inside rows ``start:end`` (they read as zeros
        after)."""
        lo = -(-start * 12 // _PAGE) * _PAGE
        hi = min(end * 12 // _PAGE * _PAGE, len(self.map))
        if lo < hi:
            self.map.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def shrink(self, seen: np.ndarray) -> tuple[int, np.ndarray]:
        """Gather the rows of the features in ``seen`` to the front, in index order, and
        hand back the pages past them; returns their number and their hashed indices
        (sorted). The rows past the last feature's are handed back as the gather passes
        them, so the feature list (4 bytes a feature) grows while they go."""
        n = count_bits(seen)
        feat = _pages.zeros(n, np.uint32, huge=False)
        k = 0
        step = _CHUNK // 8  # (bytes of the bitmap: _CHUNK rows)
        for lo in range(0, len(seen), step):
            hi = min(lo + step, len(seen))
            k = _gather_rows(self.rows, seen, feat, lo, hi, k)
            self.release(n, hi * 8)  # (rows at n and past it are never written again)
        self.release_from(n)
        return n, feat

    def take(self, n: int, dtype: type, at: np.ndarray | None = None,
             size: int = 0, *, huge: bool = False) -> list[np.ndarray]:
        """Three contiguous arrays (weights, adaptive sums, normalizers) of the first ``n``
        rows (after :meth:`shrink`), or of ``size`` entries with row k at ``at[k]``, moved
        out a chunk at a time from the end while the rows' pages are handed back: the two
        layouts never both stand whole. ``huge``: the arrays on huge pages (a later pass
        reads them at random), else on 4 KiB pages (written once here, then saved)."""
        rows = self.rows
        out = [_pages.zeros(n if at is None else size, dtype, huge=huge) for _ in range(3)]
        for hi in range(n, 0, -_CHUNK):
            lo = max(0, hi - _CHUNK)
            for j in range(3):
                if at is None:
                    out[j][lo:hi] = rows[lo:hi, j]
                else:
                    out[j][at[lo:hi]] = rows[lo:hi, j]
            self.release_from(lo)
        del rows
        self.rows = np.zeros((0, 3), np.float32)
        return out


def dense_threshold(bits: int) -> int:
    """Distinct features after which a first pass moves to the dense layout (2**bits / 8).

    Compact columns cost a 2**bits lookup table (4 bytes an entry) and ~12 bytes per
    distinct feature, up to twice that while the arrays grow by doubling; the dense layout
    costs 12 bytes per entry of 2**bits, whatever the data. Below 2**bits / 8 distinct
    features compact is the smaller, and it is the faster on narrow data (a feature's state
    sits next to the other frequent ones'); past it the table and the growing arrays cost
    as much as the dense layout, which grows no more (docs/design/linear-memory.md)."""
    return 1 << max(bits - 3, 0)


def few_repeats(bits: int, distinct: int, occurrences: int) -> bool:
    """Whether a first pass that has seen ``distinct`` features in ``occurrences`` may move
    to the dense layout before :func:`dense_threshold`: at least ``2**bits / 64`` distinct
    features, at least 7/8 of the occurrences each a new feature.

    Data where nearly every feature is new reaches the threshold anyway, and the compact
    phase before it is pure cost: the hashed map (``-b 26``) grows by doubling to
    ``2**bits / 8`` features, then the compact arrays are scattered at random into the
    rows, faulting their pages in one write at a time (at ``-b 26`` on the held-out
    ``distinct`` data, ~16M features, a fifth of the run's CPU time). Switching once
    ``2**bits / 64`` features have appeared costs no memory Vowpal Wabbit would not hold:
    that many features at random put four in every page of its array of 16-byte rows, so
    nearly every page of it is touched. Up to ``-b 27`` only (rows of 1.5 GiB): at
    ``-b 27`` the same data kept compact columns until the hashed map could grow no more
    (``2**24`` features, near the end of the pass), then scattered 16M of them into the
    rows: 1.97 GB at its peak and 40% more CPU time than switching early (1.75 GB);
    at ``-b 28`` the rows' 3 GiB are more than the compact pass holds for the same data
    (17.2M features, 1.2 GB at its peak, and less CPU time), so there the threshold alone
    decides. Data with a head of frequent features (click logs; the bench's wide data, a
    third of its ids from 10k common ones) repeats more than 1 in 8 and keeps the
    threshold. The layout never changes a weight (``tests/linear/test_wide.py``).

    Parameters
    ----------
    bits
        The hash bits (``-b``).
    distinct
        Distinct hashed features seen so far.
    occurrences
        Features seen so far, repeats included.
    """
    return (bits <= _EARLY_MAX_BITS and distinct >= 1 << max(bits - 6, 0)
            and 8 * distinct >= 7 * occurrences)


class LocalColumns:
    """Hashed index -> column in order of first appearance (one 2**bits table). Columns
    are given in the thread that maps the next blocks and, while mixing, in the learner's:
    one lock.

    With ``dense=True`` the columns may switch to the dense layout: once more than
    :func:`dense_threshold` features have appeared, the next block (from ``dense_from``,
    its first example) and every later one is mapped to its hashed indices themselves, the
    lookup table is dropped, and a bitmap of 2**bits bits records which features appeared
    (:class:`GrowingWeights` moves its arrays at that block)."""

    def __init__(self, bits: int, *, dense: bool = False) -> None:
        self.bits = bits
        # a hash table while it is much smaller than a direct table of 2**bits entries
        # (-b 26 and up; _colindex), the direct table (zero pages: only touched ones
        # count) from the start below that, or once the hashed one has grown too large
        # (4 KiB pages, _pages: the first pass's arrays are mostly first touches)
        self.hash: HashIndex | None = HashIndex(huge=False) if use_hash(bits, 0) else None
        self.pos = _pages.zeros(0 if self.hash is not None else 1 << bits, np.uint32,
                                huge=False)
        self.order = np.zeros(1 << 12, np.uint32)
        self.n = 0
        self.occurrences = 0  # indices mapped to compact columns (repeats included)
        self.lock = threading.Lock()
        self.switch_at = dense_threshold(bits) if dense else -1
        self.dense_from = -1  # first example mapped densely (-1: compact so far)
        self.seen: np.ndarray | None = None
        self._features: np.ndarray | None = None  # features(), until more are mapped

    def __call__(self, indices: np.ndarray, start: int = -1) -> np.ndarray:
        """Columns of ``indices``; ``start`` (the block's first example) lets the columns
        switch to the dense layout before that block."""
        indices = np.asarray(indices, np.uint32)
        with self.lock:
            self._features = None
            if self.dense_from < 0 and start >= 0 and self._should_switch(len(indices)):
                self._go_dense(start)
            if self.dense_from >= 0:
                assert self.seen is not None
                _mark(indices, self.seen)
                return indices
            self.occurrences += len(indices)
            need = self.n + len(indices)
            if need > len(self.order):
                self.order = _pages.grown(self.order[:self.n], min(
                    max(need, 2 * len(self.order)), 1 << self.bits))
            if self.hash is not None and not use_hash(self.bits, need):
                self._to_table()
            if self.hash is not None:
                cols, self.n = self.hash.assign(indices, self.order, self.n)
                return cols
            cols, self.n = _assign(indices, self.pos, self.order, self.n)
            return cols

    def _should_switch(self, incoming: int) -> bool:
        """Whether to move to dense rows before a block of ``incoming`` indices: past
        :func:`dense_threshold`; or the hashed map would have to become the direct table
        for this block (the threshold is one block away: the table would be dropped at the
        next); or the features seen so far are nearly all distinct (:func:`few_repeats`)."""
        if not 0 <= self.switch_at <= 1 << self.bits:  # (past the space: never)
            return False
        if self.switch_at <= self.n:
            return True
        if self.hash is not None and not use_hash(self.bits, self.n + incoming):
            return True
        return few_repeats(self.bits, self.n, self.occurrences)

    def _to_table(self) -> None:
        """The hashed map would grow past half the direct table: the table."""
        self.hash = None
        self.pos = _pages.zeros(1 << self.bits, np.uint32, huge=False)
        self.pos[self.order[:self.n]] = np.arange(1, self.n + 1, dtype=np.uint32)

    def keep_order_head(self, keep: int) -> None:
        """Dense layout: of the compact columns' order (read once more, to move them into
        the rows) only the first ``keep`` are read again (the frequent features first,
        ``_layout``); the rest, up to 4 bytes a feature of 2**bits / 8, goes."""
        with self.lock:
            if self.dense_from >= 0:
                self.n = min(self.n, keep)
                self.order = self.order[:self.n].copy()

    def _go_dense(self, start: int) -> None:
        self.pos = np.zeros(0, np.uint32)  # before the weights grow to 2**bits
        self.hash = None
        self.seen = np.zeros(((1 << self.bits) + 7) // 8, np.uint8)
        _mark(self.order[:self.n], self.seen)
        self.dense_from = start

    @property
    def dense(self) -> bool:
        return self.dense_from >= 0

    def indices(self) -> np.ndarray:
        """The hashed index of every compact column (in order of first appearance; after a
        switch to the dense layout, of the columns given before it)."""
        with self.lock:
            return self.order[:self.n]

    def forget(self) -> None:
        """Drop the array :meth:`features` keeps."""
        with self.lock:
            self._features = None

    def keep_features(self, feat: np.ndarray) -> None:
        """Dense layout: ``feat`` is every feature that appeared, sorted (listed while the
        rows were gathered): what :meth:`features` returns until more are mapped."""
        with self.lock:
            self._features = feat

    def features(self) -> np.ndarray:
        """Every feature that appeared, sorted (one array, kept until more are mapped: the
        union and the move out of the dense rows both ask for it)."""
        with self.lock:
            if self._features is None:
                if self.seen is not None:
                    self._features = _set_bits(self.seen)
                else:  # (on 4 KiB pages: written once, then read in order)
                    self._features = _pages.zeros(self.n, np.uint32, huge=False)
                    self._features[:] = self.order[:self.n]
                    self._features.sort()
            return self._features


class GrowingWeights(Weights):
    """Weights over :class:`LocalColumns`, grown (doubling) as columns appear, or, once the
    columns switch to the dense layout, three float32 arrays of 2**bits entries interleaved
    as VW's (one row of weight, adaptive sum and normalizer per hashed index, so an update
    touches one cache line, not three).

    Parameters
    ----------
    compact
        Weights, adaptive sums and normalizers are kept in float32, interleaved as the dense
        layout's rows (one 12-byte row a column: the learner's three reads and two writes
        of a feature's state in one cache line; 18% less time a feature than three arrays
        on rows of 500 features, zipf over 1.5M columns). The learner writes nothing into
        them that is not rounded to float (VW's update), so that loses no bit, and the
        arrays it reads at random are half the size, which makes the learner markedly
        faster. Off while the workers mix during the pass, whose sums are float64 (three
        arrays).
    """

    def __init__(self, columns: LocalColumns, state: np.ndarray, *,
                 compact: bool = False) -> None:
        adaptive = np.float32 if compact else np.float64
        # compact: the rows (n, 3), the three arrays their columns' views
        self._grid: np.ndarray | None = np.zeros((1 << 12, 3), np.float32) if compact else None
        if self._grid is not None:
            super().__init__(self._grid[:, 0], self._grid[:, 1], self._grid[:, 2], state)
        else:
            super().__init__(np.zeros(1 << 12, adaptive), np.zeros(1 << 12, adaptive),
                             np.zeros(1 << 12, adaptive), state)
        self.columns = columns
        self.rows: _DenseRows | None = None  # the dense layout
        self._shrunk = -1  # rows gathered to the front (shrink), -1: not yet

    def loaded(self, load: Callable[[], None]) -> None:
        """Nothing: the columns grow through the pass, with kernels loaded as they do; LLVM
        leaves the resident set before the move to the dense rows (:meth:`_to_dense`)."""

    def fit(self, block: Block | None = None) -> None:
        cols = self.columns
        if self.rows is None and block is not None and 0 <= cols.dense_from <= block.start:
            self._to_dense()
            return
        if self.rows is not None:
            return
        n = cols.n  # only grows: enough for every block mapped so far
        if n <= len(self.w):
            return
        size = max(n, 2 * len(self.w))
        if self._grid is not None:
            grid = _pages.zeros((size, 3), np.float32, huge=False)
            grid[:len(self._grid)] = self._grid
            self._grid = grid
            self.w, self.g2, self.nrm = grid[:, 0], grid[:, 1], grid[:, 2]
            return
        for name in ("w", "g2", "nrm"):
            setattr(self, name, _pages.grown(getattr(self, name), size))

    def _to_dense(self) -> None:
        cols = self.columns
        # the compact phase's freed blocks go back before the rows are mapped, not kept
        # by the allocator under the dense pass's peak
        hand_back_freed_memory()
        self.rows = _DenseRows(1 << cols.bits)
        rows = self.rows.rows
        at = cols.indices()
        n = len(at)
        w, g2, nrm = (a[:n].astype(np.float32, copy=False) for a in (self.w, self.g2, self.nrm))
        # the move below is the pass's peak (the rows, all their pages touched, and the
        # compact arrays): the kernel is loaded first (an empty move, the same types), then
        # LLVM's code, which the pass runs no more, leaves the resident set (_pages)
        _scatter_rows(rows, at[:0], w, g2, nrm)
        _pages.give_back_library(LLVM)
        _scatter_rows(rows, at, w, g2, nrm)
        del w, g2, nrm
        for j, name in enumerate(("w", "g2", "nrm")):
            setattr(self, name, rows[:, j])  # (frees the compact array)
        self._grid = None
        cols.keep_order_head(HOT_PREFIX)

    def shrink(self) -> int:
        """Dense rows: gather the seen features' rows to the front, list the features
        (sorted: the columns' :meth:`LocalColumns.features` from then on) in the same sweep
        of the bitmap, and hand back the rest as the sweep passes it, so the list and the
        rows do not add up; returns the number of features. Idempotent."""
        if self.rows is None:
            return 0
        if self._shrunk < 0:
            for name in ("w", "g2", "nrm"):
                setattr(self, name, np.zeros(0, np.float32))  # (views of the rows)
            assert self.columns.seen is not None
            self._shrunk, feat = self.rows.shrink(self.columns.seen)
            self.columns.keep_features(feat)  # (features() reads the bitmap no more)
        return self._shrunk

    def in_union(self, union: np.ndarray, dtype: type = np.float64, *, huge: bool = False
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(w, g2, nrm) over the sorted ``union`` of every worker's features, in ``dtype``
        (float32 holds one learner exactly, and the workers' averages as VW does). Each of
        the learner's arrays is dropped as soon as it has been read, so the two layouts do
        not add up. ``huge``: the arrays on huge pages, for a later pass that reads them at
        random (:mod:`terascale._pages`); else 4 KiB pages, written once here."""
        out = []
        if self.rows is not None:
            n = self.shrink()
            own = self.columns.features()
            at = None if len(own) == len(union) else _merge_positions(union, own)
            del own
            self.columns.forget()
            out = self.rows.take(n, dtype, at, len(union), huge=huge)
            self.rows = None
            return out[0], out[1], out[2]
        srt, perm = _sort_columns(self.columns.indices())
        at = srt[:0] if len(srt) == len(union) else _merge_positions(union, srt)
        del srt
        for name in ("w", "g2", "nrm"):
            u = _pages.zeros(len(union), dtype, huge=huge)
            _gather_sorted(u, at, getattr(self, name), perm)
            out.append(u)
            setattr(self, name, np.zeros(0, np.float32))
        self._grid = None  # (the compact rows: freed with their last column)
        return out[0], out[1], out[2]


class TextMixer(Mixer):
    """:class:`._mixing.Mixer` over local columns, which differ from worker to worker. The
    mixed space is the union of the hashed features the workers have *learned from* so far
    (the examples before the mix: the same set run after run, whatever the mapping thread
    has numbered ahead), grown at every mix by one allgather of each worker's new ones; a
    feature another worker brought gets a local column here, so this worker continues from
    the mixture when it first meets it.

    The union only grows at its end: a mix's new features follow the earlier ones, in rank
    order and, within a rank's, in that worker's order of first appearance (the same order
    on every rank, since every rank sees the same allgather). So the mix's loops over the
    union walk each worker's local columns nearly in order; a union sorted by hashed index
    would make them random reads of six arrays of the weight space's size. The same
    allgather carries the normalizers that changed since the last mix (and the label
    bounds), so they are mixed (their maximum, exact in any order) without the dense
    max-allreduce of a :class:`._mixing.Mixer`: two collectives a mix, not four (the
    allgather's sizes, its ring, the sum, the max). The bases are kept in local columns,
    and the mix reads and writes the learner's arrays through the union's local columns,
    so no mix copies the weight space."""

    def __init__(self, comm: Communicator, every: int, power_t: float,
                 columns: LocalColumns, *, sparse: bool = True) -> None:
        super().__init__(comm, every, power_t, sparse=sparse)
        self.columns = columns
        self.loc = np.zeros(0, np.int64)  # the local column of each union feature
        self.mark = np.zeros(1 << 12, np.bool_)  # local columns learned from since a mix
        self.slot = np.zeros(1 << 12, np.int64)  # a local column's union position + 1 (0: none)
        self.touched = np.zeros(0, np.bool_)  # (sparse) union positions learned from

    def start(self, ws: Weights) -> None:
        z = np.zeros(0)
        self._base = (z, z, z, ws.state.copy())  # a text pass starts from zero weights

    def seen(self, cols: np.ndarray) -> None:
        self._mark(cols)  # (dense or sparse: what was learned joins the mixed space)

    def mix(self, ws: Weights, done: bool) -> bool:
        learned = np.flatnonzero(self.mark)
        self.mark[learned] = False
        assert self._base is not None
        bw, bg, bn, bst = self._base
        self.slot = grown(self.slot, len(self.mark))
        bn = grown(bn, len(ws.nrm))
        index = self.columns.indices()
        slot = self.slot[learned]
        mine = index[learned[slot == 0]]  # in local column order
        old = slot[slot > 0] - 1 if self.sparse else slot[:0]
        moved = learned[ws.nrm[learned] != bn[learned]]
        gathered = self.comm.allgather_object(
            (mine, old, index[moved], ws.nrm[moved], self.local_state(ws)))
        n0 = len(self.loc)
        new = np.concatenate([g[0] for g in gathered])
        if len(new):  # appended: rank order, each rank's first appearances, no repeats
            cols = self.columns(first_appearances(new)).astype(np.int64)
            self.loc = np.concatenate([self.loc, cols])
            ws.fit()
            self.slot = grown(self.slot, len(ws.w))
            self.slot[cols] = np.arange(n0 + 1, len(self.loc) + 1)
        n = len(ws.w)
        bw, bg, bn = grown(bw, n), grown(bg, n), grown(bn, n)
        self._base = (bw, bg, bn, bst)
        # normalizers: the maximum over the workers (each sent the ones it changed; the
        # others are the base everywhere), the weights rescaled to it
        for _, _, idx, vals, _ in gathered:
            c = self.columns(idx).astype(np.int64)  # all in the union by now
            self.renormalize(ws, c, vals)
        self.join_states(ws, [g[-1] for g in gathered])
        if not self.sparse:
            return self._mix(ws, self.loc, len(self.loc), done)
        # the union features some worker learned from (the new ones all were), in union
        # order on every rank; the others are the last mix everywhere
        self.touched = grown(self.touched, len(self.loc))
        for g in gathered:
            self.touched[g[1]] = True
        self.touched[n0:] = True
        pos = np.flatnonzero(self.touched[:len(self.loc)])
        self.touched[pos] = False
        return self._mix(ws, self.loc[pos], len(pos), done)


def _parts(blocks: Blocks) -> list[Blocks]:
    return list(blocks.parts) if isinstance(blocks, ChainBlocks) else [blocks]


def _parses(b: Blocks) -> bool:
    return isinstance(b, TextBlocks) or (isinstance(b, PendingCache) and b.pending)


class TextPass:
    """The first pass over ``blocks`` with local columns (see the module docstring)."""

    def __init__(self, blocks: Blocks, period: int, *, dense: bool = False) -> None:
        self.blocks = blocks
        self.period = period
        self.columns = LocalColumns(blocks.bits, dense=dense)
        self.scan = LabelScan(None, period)

    @staticmethod
    def wanted(blocks: Blocks, *, batch: bool, warm: bool, passes: int) -> bool:
        """Whether the first pass should learn as it parses: something must be parsed,
        and nothing the pass needs must wait for the whole shard."""
        return (not batch and not warm and passes > 0 and blocks.bits <= _MAX_BITS
                and any(_parses(p) for p in _parts(blocks)))

    @staticmethod
    def lazy(opts: ParseOptions, *, batch: bool, warm: bool, passes: int) -> bool:
        """Whether a shard for these options may come uncached (:class:`PendingCache`)."""
        return not batch and not warm and passes > 0 and opts.bits <= _MAX_BITS

    def _blocks(self) -> Iterator[Block]:
        off = 0
        for p in _parts(self.blocks):
            src = p.stream() if isinstance(p, PendingCache) and p.pending else iter(p)
            n = 0
            for b in src:
                n = b.start + len(b)
                yield replace(b, start=b.start + off) if off else b
            off += n  # positions run on over the parts, as in ChainBlocks

    def items(self) -> Iterator[tuple[Block, np.ndarray, np.ndarray]]:
        """(block, local columns, holdout mask), produced a block ahead in another thread
        (the one that also gathers the parser's blocks and feeds the cache writer)."""
        def produce() -> Iterator[tuple[Block, np.ndarray, np.ndarray]]:
            holdout = Holdout(self.period)
            for b in self._blocks():
                cols = self.columns(b.indices, b.start)
                hold = holdout(b.start, len(b), b.blanks)
                self.scan.add(b.start, b.labels, b.weights, hold)
                yield b, cols, hold

        return prefetch(produce())

    def features(self) -> np.ndarray:
        """This worker's sorted distinct hashed indices (after the pass)."""
        return self.columns.features()

    def release(self) -> None:
        """Drop the lookup table (after the pass: the union's Columns has its own)."""
        self.columns.pos = np.zeros(0, np.uint32)
        self.columns.hash = None
