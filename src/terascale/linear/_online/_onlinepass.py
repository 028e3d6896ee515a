"""One online pass over a stream of blocks: the learner's loop, shared by every pass.

The blocks come mapped to columns (``(block, columns, holdout mask)``, produced a block
ahead in another thread: :func:`._passes.learning_blocks`, or the first pass over text in
:mod:`._firstpass`); the loop runs ``online_chunk`` (nogil numba) over them, cut where a
progress line or a bounded block of progressive predictions is due, so the result does
not depend on those cuts.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable
from functools import partial
from typing import TextIO

import numpy as np

from ... import _pages
from .._combine._mixing import Mixer
from .._io._blocks import Block
from .._io._spill import Spill
from .._options import TrainOptions
from ._progress import (
    LABELS,
    PRESERVED,
    Progress,
    distinct_labels,
    label_notes,
    label_warnings,
    warns_of_labels,
)
from ._progressive import BLOCK, block_tags, zero_one
from ._update import online_chunk

__all__ = ["COUNTED", "LABELS", "LLVM", "Weights", "online_pass"]

LLVM = "libllvmlite"  # the shared library numba links its kernels with
_DROPPED: list[int] = []  # (Weights.loaded's drop, once a process: the bytes advised)

_ZEROS = np.zeros(8)  # (zero_one's sums before a chunk: its own sums start at 0)

# where a pass's sums (``online_pass``) go on after ``online_chunk``'s: the unlabelled
# examples' weight, the examples and their features not held out (VW's counters, where
# an unlabelled example is never held out), the labelled examples' sum of label x weight
# over the run's passes so far (VW's weighted_labels, ``Progress.label_sum``); then
# LABELS slots: the first distinct labels seen (NaN where fewer), held-out examples
# included (VW's best constant needs the two labels, or knowing that there were more)
COUNTED = 8

Predictions = Callable[[np.ndarray, "list[str] | None"], None]


class Weights:
    """The learner's arrays: weights, adaptive sums and normalizers (one per column), and
    the learner's state. :meth:`fit` makes room before a block; here the columns are
    fixed, :class:`._firstpass.GrowingWeights` adds them as they appear."""

    def __init__(self, w: np.ndarray, g2: np.ndarray, nrm: np.ndarray,
                 state: np.ndarray) -> None:
        self.w, self.g2, self.nrm, self.state = w, g2, nrm, state

    def fit(self, block: Block | None = None) -> None:
        """Make room for the columns of ``block`` (mapped, about to be learned from)."""

    def loaded(self, load: Callable[[], None]) -> None:
        """Called before the pass's first block is learned from, its columns mapped:
        ``load`` (an empty call of the learner's kernel) loads the last kernel that a
        pass over fixed columns runs, and then numba's LLVM code (70-105 MB resident,
        :func:`terascale._pages.give_back_library`) leaves the resident set, before the
        learner touches the weights' pages, once a process (the pages come back from
        the page cache if a kernel is loaded later)."""
        if not _DROPPED:
            load()
            _DROPPED.append(_pages.give_back_library(LLVM))


def online_pass(items: Iterable[tuple[Block, np.ndarray, np.ndarray]], ws: Weights,
                kind: int, opts: TrainOptions, online_l2: float, first: bool,
                out: TextIO | None, prog: Progress, predictions: Predictions | None,
                spill: Spill | None = None, mixer: Mixer | None = None) -> np.ndarray:
    """Learn from every block; returns the pass's sums ``acc``: ``online_chunk``'s eight,
    then what VW's closing block counts over the examples not held out (``COUNTED``: the
    unlabelled examples' weight, the examples, their features, the labelled ones' label x
    weight: the run's so far, not the pass's), then the first ``LABELS`` distinct labels seen (NaN where fewer).

    Parameters
    ----------
    first
        The run's first pass: progress lines at VW's cadence (see ``_progress``), which
        later passes go on with under ``terascale vw`` (``opts.vw_text``); ``spill`` (the
        first pass before a batch phase) gets every block as mapped.
    mixer
        The workers average their learners every ``mixer.every`` examples (a collective; the last
        one after the pass, so every worker ends with the same learner).
    """
    # a callback that asks for them (VW's -r) also gets the raw scores, before the clip
    raw = predictions is not None and getattr(predictions, "raw", False)
    acc = np.zeros(COUNTED + 4 + LABELS)
    labels_seen: list[float] = []
    lines = out is not None and (first or opts.vw_text)
    # (VW's lines on labels its loss or --binary does not expect, on standard output)
    warn = out is not None and opts.vw_text and warns_of_labels(opts.loss, opts.binary)
    if first:  # (a run that prints no line keeps VW's first dump_interval, 1)
        prog.restart()
        prog.due = prog.first_due() if lines else 1.0
        if "examples" in PRESERVED:  # (--preserve_performance_counters: -i's go on)
            prog.go_on(PRESERVED)
    nxt = prog.due
    acc[COUNTED + 3] = prog.label_sum  # (a running sum over the passes: see Progress)
    # VW's weighted_examples and example_number (not held out), over the passes so far
    seen_w, seen_n = prog.seen_w, prog.seen_n
    due = mixer.next_due(0) if mixer is not None else -1
    if mixer is not None:
        mixer.start(ws)
    for blk, cols, hold in items:
        if out is not None and first and blk.notes:  # (VW's, on its label sections)
            label_notes(blk.notes, sys.stdout)
        if spill is not None:
            spill.add(blk.start, blk.indptr, cols, blk.values, blk.labels, blk.weights, hold)
        ws.fit(blk)
        w, g2, nrm, state = ws.w, ws.g2, ws.nrm, ws.state
        if blk.start == 0:  # (the learner's kernel loaded by a call over no example)
            ws.loaded(partial(online_chunk, blk.indptr, cols, blk.values, blk.labels,
                              blk.weights, hold, 0, 0, w, g2, nrm, state, kind,
                              opts.learning_rate, opts.power_t, opts.l1, online_l2,
                              np.zeros(8), None, sums=prog.sums))
        n = len(blk)
        start = 0
        unlabelled = np.isnan(blk.labels)
        kept = unlabelled | ~np.asarray(hold, bool)  # (VW holds out labelled ones only)
        acc[COUNTED] += float(blk.weights[unlabelled].sum())
        acc[COUNTED + 1] += int(kept.sum())
        acc[COUNTED + 2] += int(blk.counted(0, n)[kept].sum())  # (VW's count)
        taught = ~unlabelled & ~np.asarray(hold, bool)
        acc[COUNTED + 3] = prog.add_labels(blk.labels[taught], blk.weights[taught])
        prog.add_seen(blk.weights, unlabelled)
        if len(labels_seen) < LABELS:
            labels_seen = distinct_labels(labels_seen, blk.labels[~unlabelled])
        if lines:  # the weight and count seen at each example, to cut at the lines
            cum_w = seen_w + np.cumsum(np.where(kept, blk.weights, 0.0), dtype=np.float64)
            cum_n = seen_n + np.cumsum(kept)
            if n:
                seen_w, seen_n = float(cum_w[-1]), int(cum_n[-1])
        while start < n:
            end = n
            at = -1  # the example a progress line is printed after
            if lines:  # (one line an example at most, as VW checks after each one)
                at = max(int(np.searchsorted(cum_w, nxt)), start)
                end = at + 1 if at < n else n
            if mixer is not None:
                end = min(end, due - blk.start)
            pred = None
            if predictions is not None or opts.binary:  # bounded blocks of predictions
                end = min(end, start + BLOCK)
                pred = np.empty((2 if raw else 1) * (end - start))
            line = end - 1 == at
            shown = None  # the line's prediction of an example not learned from
            # the chunk's sums, added to the pass's and to the table's since its last line
            seg = np.zeros(8)
            sums = np.frombuffer(prog.sums)  # (VW's running sums, the run's: the kernel
            # adds to them)
            before = sums.copy() if opts.binary and pred is not None else None
            if line and pred is None and not (blk.weights[at] > 0 and not hold[at]
                                              and not np.isnan(blk.labels[at])):
                shown = np.empty(1)
                online_chunk(blk.indptr, cols, blk.values, blk.labels, blk.weights, hold,
                             start, at, w, g2, nrm, state, kind, opts.learning_rate,
                             opts.power_t, opts.l1, online_l2, seg, None, sums=sums)
                online_chunk(blk.indptr, cols, blk.values, blk.labels, blk.weights, hold,
                             at, end, w, g2, nrm, state, kind, opts.learning_rate,
                             opts.power_t, opts.l1, online_l2, seg, shown, sums=sums)
            else:
                online_chunk(blk.indptr, cols, blk.values, blk.labels, blk.weights, hold,
                             start, end, w, g2, nrm, state, kind, opts.learning_rate,
                             opts.power_t, opts.l1, online_l2, seg, pred, sums=sums)
            if before is not None:
                zero_one(seg, _ZEROS, pred[:end - start], blk.labels, blk.weights, hold,
                         start, kind, sums=sums, sums_before=before)
            prog.fold(acc, seg, end - start)
            if warn:
                label_warnings(blk.labels, blk.weights, hold, start, end, True, sys.stdout,
                               loss=opts.loss, binary=opts.binary)
            if pred is not None and raw:  # (VW's -r: the scores before the clip)
                predictions(pred[:end - start], block_tags(blk, start, end), pred[end - start:])
            elif pred is not None and predictions is not None:
                predictions(pred, block_tags(blk, start, end))
            if line:
                p = (shown[0] if shown is not None else pred[at - start] if pred is not None
                     else acc[7])
                now = prog.now()  # (over the passes so far)
                prog.line(now, prog.prev, int(cum_n[at]), float(cum_w[at]),
                          float(blk.labels[at]), float(p),
                          int(blk.counted(end - 1, end)[0]), opts.binary)
                prog.prev = now
                nxt = prog.due = prog.next_due(float(cum_w[at]))
            if mixer is not None:
                mixer.seen(cols[blk.indptr[start]:blk.indptr[end]])
                if blk.start + end == due:
                    mixer.mix(ws, False)
                    w, g2, nrm, state = ws.w, ws.g2, ws.nrm, ws.state  # (may have grown)
                    due = mixer.next_due(due)
            start = end
    if mixer is not None:
        mixer.finish(ws)
    prog.pass_over(acc)  # (its holdout sums VW's since the pass began)
    if lines:
        prog.end_pass(acc, seen_w, seen_n)
    acc[COUNTED + 4:] = np.nan
    acc[COUNTED + 4:COUNTED + 4 + len(labels_seen)] = labels_seen
    return acc

