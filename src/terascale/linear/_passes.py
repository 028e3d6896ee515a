"""Passes over a shard's :class:`~._blocks.Blocks`: the compact column space, the holdout
rule, the label scan, and the batch phase's loss-and-gradient pass.

Every kernel here runs through the examples in order and accumulates into one buffer that
lives across blocks, so results do not depend on where the shard is cut into blocks (a
cache's blocks, an in-memory slice): the same data gives bitwise the same numbers.
"""

from __future__ import annotations

import contextvars
import math
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

from .. import _pages
from ..communicator import Communicator
from ._batch._optimizers import loss_grad
from ._colindex import HashIndex, use_hash
from ._holdout import EarlyStop, Holdout, holdout_mask
from ._io._blocks import Block, Blocks, prefetch
from ._io._setops import union_sorted
from ._io._spill import CompactBlock, Spill

__all__ = ["Columns", "EarlyStop", "Holdout", "LabelScan", "gradient_pass", "holdout_mask",
           "union_features"]


def union_features(local: np.ndarray, comm: Communicator) -> np.ndarray:
    """The sorted hashed indices present on any worker: the sets' sizes, then the sorted
    sets themselves padded to the largest (two array allgathers), merged. An object
    allgather of the sets held each one four times over (its pickle, the gathered bytes,
    their copies, the arrays): 180 MB transient at 6.5M features a worker."""
    local = np.asarray(local, np.uint32)
    if comm.size == 1:
        return local
    sizes = comm.allgather(np.array(len(local), np.int64))
    most = int(sizes.max())
    if most == 0:
        return local[:0]
    if len(local) == most:
        sets = comm.allgather(local)
    else:
        pad = np.zeros(most, np.uint32)
        pad[:len(local)] = local
        sets = comm.allgather(pad)
        del pad
    return union_sorted([sets[k, :int(n)] for k, n in enumerate(sizes)])


class Columns:
    """Hashed index -> column of the compact space (``union``). All later work, and every
    allreduce, runs on this space instead of all 2**bits weights: with ``-b 24`` and 10^4..
    10^6 live features that is 10-1000x fewer bytes on the wire, with the same result. Up
    to 2**28 bits a lookup table (uint32, 1 GiB at most, a quarter of VW's own weights at
    that width) is faster than a binary search: a search per feature over 10^7 columns
    missed the cache ~20 times (one pass over 1M wide examples at ``-b 28``: 355 s
    against VW's 72 s). Where the table would be much larger than the union needs
    (``-b 26`` and up, :func:`._colindex.use_hash`) a hash table of about ``16 * D`` bytes
    takes its place: as fast a lookup, without zeroing and touching a GiB."""

    def __init__(self, union: np.ndarray, bits: int, order: np.ndarray | None = None) -> None:
        """``order``: column c is the union's feature ``order[c]`` (:mod:`._layout`);
        None: column j is the union's feature j."""
        self.union = union
        self.order = order
        self.pos: np.ndarray | None = None
        self._inv: np.ndarray | None = None
        if order is not None:
            self._inv = np.empty(len(union), np.uint32)
            self._inv[order] = np.arange(len(union), dtype=np.uint32)
        self.hash: HashIndex | None = None
        # huge pages (read at random for every pass), faulted in on a spare core where the
        # run has one (_pages.prefaulting) while this thread fills them; the table only
        # where the union writes a page of it in 4 KiB or less on average (else most of
        # its pages would be faulted in for nothing)
        if bits <= 28 and use_hash(bits, len(union)):  # (_colindex: a fresh GiB costs)
            self.hash = HashIndex(len(union), prefault=True)
            self.hash.put(union, self._inv if self._inv is not None
                          else np.arange(len(union), dtype=np.uint32))
        elif bits <= 28:
            self.pos = _pages.zeros(1 << bits, np.uint32, huge=True,
                                    prefault=len(union) << 10 >= 1 << bits)
            if self._inv is not None:
                self.pos[union] = self._inv
            else:  # (no column array: 4 bytes a feature fewer to fault in and fill)
                _number(self.pos, np.asarray(union, np.uint32))

    def __call__(self, indices: np.ndarray) -> np.ndarray:
        # uint32: numba indexes with an unsigned integer without the negative-index check
        # that a signed one costs on every access (the batch kernel is ~20% faster)
        if self.pos is not None:
            out = np.empty(len(indices), np.uint32)
            _lookup(self.pos, np.asarray(indices, np.uint32), out)
            return out
        if self.hash is not None:
            out = np.empty(len(indices), np.uint32)
            self.hash.lookup(indices, out)
            return out
        at = np.searchsorted(self.union, indices)
        return (self._inv[at] if self._inv is not None else at).astype(np.uint32)

    def to_columns(self, *arrays: np.ndarray) -> list[np.ndarray]:
        """Arrays over the union, in column order."""
        return [a if self.order is None else a[self.order] for a in arrays]

    def to_union(self, a: np.ndarray) -> np.ndarray:
        """An array in column order, over the union."""
        if self.order is None:
            return a
        out = np.empty_like(a)
        out[self.order] = a
        return out


@numba.njit(cache=True, nogil=True)
def _number(pos: np.ndarray, union: np.ndarray) -> None:
    """pos[union[j]] = j: the lookup table of columns in the union's order."""
    for j in range(len(union)):
        pos[union[j]] = j


@numba.njit(cache=True, nogil=True)
def _lookup(pos: np.ndarray, indices: np.ndarray, out: np.ndarray) -> None:
    """out = pos[indices]: ~4x less CPU than numpy's fancy indexing, which casts the
    uint32 indices to intp and goes through its general iterator (the prefetch thread
    maps every block of every pass)."""
    for k in range(len(indices)):
        out[k] = pos[indices[k]]


@numba.njit(cache=True)
def _scan(labels: np.ndarray, weights: np.ndarray, hold: np.ndarray, acc: np.ndarray,
          odd: np.ndarray) -> int:
    """acc += [train weight, labelled]; odd labels (not -1/0/1) into ``odd``; returns how
    many odd labels were written."""
    k = 0
    for i in range(len(labels)):
        lab = labels[i]
        s = weights[i]
        if not hold[i]:
            acc[0] += s
        if not math.isnan(lab) and s > 0:
            acc[1] += 1.0
        if not math.isnan(lab) and lab != 1.0 and lab != -1.0 and lab != 0.0 and k < len(odd):
            odd[k] = lab
            k += 1
    return k


class LabelScan:
    """Train weight (not held out), labelled examples and unusual labels of a shard, from
    the label sections only; ``blocks=None`` starts empty, for blocks :meth:`add` ed as a
    pass goes (the same sums in the same order)."""

    def __init__(self, blocks: Blocks | None, period: int) -> None:
        self.period = period
        self._acc = np.zeros(2)
        self._odd: set[float] = set()
        self._buf = np.zeros(64, np.float32)
        self._holdout = Holdout(period)
        if blocks is not None:
            for start, labels, weights, blanks in blocks.label_blocks():
                self.add(start, labels, weights, blanks=blanks)

    def add(self, start: int, labels: np.ndarray, weights: np.ndarray,
            hold: np.ndarray | None = None, blanks: np.ndarray | None = None) -> None:
        """A block's labels and weights, in order; ``hold`` its holdout mask where known,
        else counted here (with ``blanks``, the block's empty lines)."""
        if hold is None:
            hold = self._holdout(start, len(labels), blanks)
        k = _scan(labels, weights, hold, self._acc, self._buf)
        if len(self._odd) < 64:
            self._odd.update(float(x) for x in self._buf[:k])

    @property
    def train_weight(self) -> float:
        return float(self._acc[0])

    @property
    def labelled(self) -> float:
        return float(self._acc[1])

    @property
    def odd(self) -> np.ndarray:
        return np.array(sorted(self._odd), np.float64)


def learning_blocks(blocks: Blocks, columns: Columns, period: int, offset: int = 0
                    ) -> Iterator[tuple[Block, np.ndarray, np.ndarray]]:
    """(block, its compact columns, its holdout mask) for one pass, read, decoded and
    mapped a block ahead of the learner (:func:`._blocks.prefetch`); the holdout counts
    examples from ``offset`` (where the shard starts in a chain's concatenation)."""
    holdout = Holdout(period, offset)
    return prefetch((b, columns(b.indices), holdout(b.start, len(b), b.blanks))
                    for b in blocks)


def _rows(b: CompactBlock, lo: int, hi: int, w: np.ndarray, kind: int, out: np.ndarray,
          want_diag: bool) -> None:
    if hi > lo:
        loss_grad(b.indptr[lo:hi + 1], b.cols, b.values, b.labels[lo:hi], b.weights[lo:hi],
                  b.hold[lo:hi], w, kind, out, want_diag)


def gradient_pass(spill: Spill, w: np.ndarray, kind: int, out: np.ndarray, want_diag: bool,
                  threads: int = 1, overwrite: bool = False) -> None:
    """One pass of ``loss_grad`` over the batch phase's spilled shard (see
    ``_batch.loss_grad`` and :mod:`._spill`), adding into ``out``.

    The shard's first half of examples and its second half accumulate into sums of their
    own, added in that order at the end: with ``threads=2`` each half runs in its own
    thread (the kernel releases the GIL), and one thread gives the same bits. When ``out``
    is all zeros (as the batch phase passes it) the first half accumulates in ``out``
    itself and the second in a scratch buffer the spill keeps between passes: no fresh
    gradient-sized arrays, whose page faults cost as much as a pass's reading on wide data.
    With ``overwrite`` the pass replaces ``out`` instead (zeroing it first, and sparing the
    sweep that checks it for zeros).
    """
    mid = spill.examples // 2
    second = spill.scratch(len(out))
    if overwrite:
        out.fill(0.0)
    first = out if overwrite or not out.any() else np.zeros_like(out)
    halves = [first, second]
    if threads >= 2:
        def half(h: int) -> None:
            for b, lo, hi in spill.rows(mid if h else 0, spill.examples if h else mid):
                _rows(b, lo, hi, w, kind, halves[h], want_diag)

        with ThreadPoolExecutor(1, thread_name_prefix="terascale-grad") as pool:
            done = pool.submit(contextvars.copy_context().run, half, 0)
            half(1)
            done.result()
    else:
        for b in spill:
            cut = min(max(mid - b.start, 0), len(b))
            _rows(b, 0, cut, w, kind, halves[0], want_diag)
            _rows(b, cut, len(b), w, kind, halves[1], want_diag)
    if first is out:  # 0 + (h0 + h1) is h0 + h1, bit for bit
        out += second
    else:
        first += second
        out += first
