"""The K learners of one-against-all (``--oaa K``) trained in one pass over data parsed once.

VW's ``oaa`` reduction parses each example once, scores it with its K binary learners,
then updates them in turn: learner c sees label +1 when the example is of class c and -1
otherwise, and the prediction is the class whose learner scores highest. Without L1/L2
the learners share nothing but the data (VW interleaves their weights in one array at
offsets 0..K-1 of each feature's index, so they never collide, and keeps each one's
normalized-update sums apart), so the order in which their updates interleave does not
matter: here each block of parsed examples is learned by learner 0, then learner 1, ...,
each time with the binary learner's own kernel (:func:`.._online._update.online_chunk`,
the same loss, adaptive, normalized and invariant update, the same float operations in
the same order), and each learner's result is the one it would have alone, VW's. With
``--l1``/``--l2`` VW's learners share the lazy truncation and shrinkage (its
``shared_data``), so the block is learned example by example as VW does
(:func:`.._online._update.oaa_chunk`, the same operations).

Layout and memory. Learner c keeps its weights, adaptive sums and normalizers as
``2**(b - s)`` rows of three float32 (``s = ceil(log2 K)``: VW gives each class that many
weights of its ``2**b``), learner ``c``'s rows ``[c]`` of one ``(K, 2**(b - s), 3)``
array: ``12 K 2**(b - s)`` bytes, at most VW's ``16 * 2**b`` for ``-b b``. A feature's
state is one 12-byte row of its learner, as in the first pass's compact rows (one cache
line an update, where three arrays of a learner cost three: 6% less of the kernel's CPU
time on the held-out ``oaa`` shape, 10 classes at ``-b 22``); VW's rows interleave the K
learners as well, which made the kernel twice as slow. Per example nothing is kept: each
block's K scores are turned into its predictions, progress lines and losses, then
dropped.

Tuning: none; the block size is the reader's (``_io._stream.CHUNK_BYTES`` of text).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import numpy as np

from .._io._blocks import Block, Blocks, ChainBlocks, prefetch
from .._io._cache import PendingCache
from .._losses import FIXED_RANGE
from .._model import LinearModel
from .._online._state import MAX_LABEL, MIN_LABEL, new_state
from .._online._update import oaa_chunk, online_chunk, sync_weights
from .._passes import Holdout
from ._oaa import start_learners

__all__ = ["Learners", "Scored", "blocks_once", "oaa_pass"]


class Learners:
    """The K binary learners of ``--oaa K``, each over ``2**bits`` hashed features.

    Parameters
    ----------
    k_classes
        K, the number of classes (and learners).
    bits
        Each learner's hash bits: ``b - ceil(log2 K)`` for VW's ``-b b``.
    start
        The K learners to continue from (VW's ``-i`` of a one-against-all model, split
        by :func:`._oaa.split_oaa`: its label range), or None: zeros, with VW's empty
        label range ``[0, 0]``.

    The K learners share one label range, as VW's share its ``shared_data``: every
    learner's state holds the same bounds (:func:`oaa_pass` widens them).
    """

    def __init__(self, k_classes: int, bits: int, start: list[LinearModel] | None = None
                 ) -> None:
        self.k = k_classes
        self.bits = bits
        # (calloc'd: only the pages of features seen are ever touched); a learner's
        # weight, adaptive sum and normalizer of a feature are one row (module docstring)
        self.arrays = np.zeros((k_classes, 1 << bits, 3), np.float32)
        self.states = np.stack([new_state()] * k_classes)
        start_learners(self.arrays, self.states, start)

    def views(self, c: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Learner ``c``'s (weights, adaptive sums, normalizers, state), in place: views of
        its rows' three columns."""
        a = self.arrays[c]
        return a[:, 0], a[:, 1], a[:, 2], self.states[c]

    def finish(self) -> None:
        """Fold each learner's lazy L1/L2 into its weights (the end of training)."""
        for c in range(self.k):
            w, _, _, state = self.views(c)
            sync_weights(w, state)

    def models(self, parse: Any, loss: str) -> list[SimpleNamespace]:
        """The K learners as VW's writer takes them (``indices``, ``weights``, ``parse``,
        ``loss``, ``adaptive``, ``info``), over one sorted list of the features any of them has
        seen or was given (:func:`.._vw._vwmodel.write_vw_oaa_model` interleaves them
        without a sort)."""
        seen = np.zeros(1 << self.bits, np.bool_)
        for c in range(self.k):
            w, _, nrm, _ = self.views(c)
            seen |= (w != 0) | (nrm != 0)
        idx = np.flatnonzero(seen).astype(np.uint32)
        out = []
        none = np.zeros(0, np.float32)
        for c in range(self.k):
            w, _, _, state = self.views(c)
            # (VW's one-against-all model is written in its predict-only form: the
            # weights and the state's label range, no adaptive sums)
            out.append(SimpleNamespace(indices=idx, weights=w[idx], parse=parse, loss=loss,
                                       adaptive=(none, none, state.copy()), info={}))
        return out


def blocks_once(blocks: Blocks) -> Iterator[Block]:
    """One pass over ``blocks``, a shard still to be cached parsed once (its cache written
    meanwhile, :class:`._io._cache.PendingCache`), positions running on over the parts;
    parsed a block ahead in another thread (:func:`._io._blocks.prefetch`)."""
    parts = list(blocks.parts) if isinstance(blocks, ChainBlocks) else [blocks]

    def produce() -> Iterator[Block]:
        off = 0
        for p in parts:
            src = p.stream() if isinstance(p, PendingCache) and p.pending else iter(p)
            n = 0
            for b in src:
                n = b.start + len(b)
                yield replace(b, start=b.start + off) if off else b
            off += n

    return prefetch(produce())


class Scored:
    """One block after the K learners predicted (and learned from) it.

    Parameters
    ----------
    block
        The block.
    scores
        Each example's K scores (float64, ``(n, K)``), clipped as VW clips them, each
        computed before the learner learned from the example (progressive).
    hold
        Which examples were held out.
    """

    def __init__(self, block: Block, scores: np.ndarray, hold: np.ndarray) -> None:
        self.block, self.scores, self.hold = block, scores, hold


def oaa_pass(blocks: Iterator[Block], learners: Learners,
             targets: Callable[[Block, np.ndarray], np.ndarray], kind: int, eta: float, power_t: float,
             l1: float, l2: float, period: int, link: int = -1) -> Iterator[Scored]:
    """One online pass of the K learners: for each block, each learner predicts every
    example and learns from it (learner c with the labels ``targets(block, hold) == c``: +1,
    else -1; NaN targets: unlabelled, predicted only); yields each block's scores.

    Parameters
    ----------
    blocks
        The parsed examples (:func:`blocks_once`).
    learners
        The K learners, updated in place.
    targets
        Each example's class index 0..K-1 (float; -1 or any other value: no learner's
        class, every learner sees -1; NaN: unlabelled), given the block and which of its
        examples are held out.
    kind, eta, power_t, l1, l2
        The binary learner's loss code (``TrainOptions.online_kind``), learning rate (this
        pass's), decay and regularization, as :func:`.._online._update.online_chunk` takes
        them.
    period
        The holdout rule (``_recipe.holdout_period``): held-out examples are predicted,
        not learned from; the text's empty lines count as examples there, as in VW.
    link
        VW's ``--link`` the learners learn through (0 logistic, 1 glf1, 2 poisson; -1
        none): example by example (:func:`.._online._update.oaa_chunk`); the scores
        yielded are unlinked.

    The label range the scores are clipped to is VW's ``shared_data``'s, one for the K
    learners: each example is scored with the range of the examples learned before it
    (VW's multipredict comes first), then widened to its K labels (-1, and +1 where a
    learner has its class; zero-weight examples too, held-out ones not). The kernels
    run with that range fixed (``FIXED_RANGE``), on the parts of the block over which
    it does not change: it changes at most twice in a run (VW's empty ``[0, 0]`` to
    ``[-1, 1]``), so a block is one part but for those.
    """
    k = learners.k
    acc = np.zeros(8)
    track = not kind & FIXED_RANGE  # (--min_prediction/--max_prediction: fixed)
    kind |= FIXED_RANGE
    held = Holdout(period)  # (VW counts each empty line of the text as an example)
    for blk in blocks:
        n = len(blk)
        hold = held(blk.start, n, blk.blanks)
        t = targets(blk, hold)
        scores = np.empty((k, n))
        for a, b in _parts(t, hold, learners.states, track):
            if a == 0 and b == n:
                part, ta, ha = scores, t, hold
            else:
                part, ta, ha = np.empty((k, b - a)), t[a:b], hold[a:b]
            _learn_part(blk, a, b, ta, ha, learners, kind, eta, power_t, l1, l2, acc, part,
                        link, track)
            if part is not scores:
                scores[:, a:b] = part
        yield Scored(blk, scores.T, hold)


def _parts(t: np.ndarray, hold: np.ndarray, states: np.ndarray, track: bool
           ) -> Iterator[tuple[int, int]]:
    """The parts ``[a, b)`` of a block over which the learners' shared label range
    stays as it is, each part's last example the one whose labels widen it (``states``:
    widened once its part is yielded, before the next one)."""
    n = len(t)
    a = 0
    while a < n:
        lo, hi = states[0, MIN_LABEL], states[0, MAX_LABEL]
        if not track or (lo <= -1.0 and hi >= 1.0):
            yield a, n
            return
        learnt = ~np.isnan(t[a:]) & ~hold[a:]
        # (K >= 2: every learned example gives some learner -1; +1 only with a class)
        widen = learnt & (lo > -1.0)
        if hi < 1.0:
            widen |= learnt & (t[a:] >= 0) & (t[a:] < len(states))
        at = np.flatnonzero(widen)
        if not len(at):
            yield a, n
            return
        b = a + int(at[0]) + 1
        yield a, b
        y = t[b - 1]
        states[:, MIN_LABEL] = min(lo, -1.0)
        if 0 <= y < len(states):
            states[:, MAX_LABEL] = max(hi, 1.0)
        a = b


def _learn_part(blk: Block, a: int, b: int, t: np.ndarray, hold: np.ndarray,
                learners: Learners, kind: int, eta: float, power_t: float, l1: float,
                l2: float, acc: np.ndarray, scores: np.ndarray, link: int, widen: bool
                ) -> None:
    """The K learners over the block's examples ``[a, b)`` (``t``, ``hold``: theirs),
    their scores into ``scores`` (``(K, b - a)``); ``link``, ``widen``: as
    :func:`.._online._update.oaa_chunk` takes them (a range that does not widen is
    ``--min_prediction``/``--max_prediction``'s, which every loss clips to)."""
    k = learners.k
    indptr = blk.indptr if a == 0 and b == len(blk) else blk.indptr[a:b + 1]
    weights = blk.weights if a == 0 and b == len(blk) else blk.weights[a:b]
    if l1 > 0.0 or l2 > 0.0 or link >= 0:  # the learners share the lazy L1/L2 (or
        # learn from linked scores): example by example
        oaa_chunk(indptr, blk.indices, blk.values, t, weights, hold, learners.arrays,
                  learners.states, kind, eta, power_t, l1, l2, scores, link, widen,
                  not widen)
        return
    # else nothing is shared: learner by learner, each one's three arrays in cache for
    # the whole block (the same bits, 25-30% less CPU than example by example, where
    # every feature's K learners are K * 3 cache misses)
    labelled = ~np.isnan(t)
    n = b - a
    y = np.empty(n, np.float32)
    for c in range(k):
        y[:] = np.where(t == c, 1.0, -1.0)
        y[~labelled] = np.nan
        w, g2, nrm, state = learners.views(c)
        online_chunk(indptr, blk.indices, blk.values, y, weights, hold, 0, n, w, g2, nrm,
                     state, kind, eta, power_t, l1, l2, acc, scores[c], multi=True,
                     given=not widen)

