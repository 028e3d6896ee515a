"""The holdout set of online passes, as VW's: which examples are held out, how often, and
when the passes stop on the held-out loss. numpy alone: the compiled learner of
``terascale vw`` (``_vw._vwonline``) and the numba pass both count it here.
"""

from __future__ import annotations

from typing import Any

from .._lazy import lazy_module
from ._f32 import FLT_MAX, f32

np = lazy_module("numpy", globals(), "np")

__all__ = ["EarlyStop", "Holdout", "holdout_mask", "holdout_period"]


def holdout_period(opts: Any) -> int:
    """Every how many examples one is held out (0: none; -N: every one after the first N,
    VW's --holdout_after, see :func:`holdout_mask`)."""
    if opts.holdout_after:
        return -opts.holdout_after
    frac = opts.holdout_fraction
    return max(2, round(1.0 / frac)) if frac > 0 else 0


def holdout_mask(start: int, n: int, period: int, blanks: np.ndarray | None = None,
                 before: int = 0) -> np.ndarray:
    """Examples ``start .. start + n`` of the shard that are held out: every ``period``-th
    (VW's ``--holdout_period``), counted over the whole shard; a negative period -N holds
    out every example after the first N (VW's ``--holdout_after``). VW counts each empty
    line of its text as an example: ``before`` of them come before the block, ``blanks``
    (a Block's) inside it."""
    return np.frombuffer(holdout_bytes(start, n, period, blanks, before), np.bool_)


def holdout_bytes(start: int, n: int, period: int, blanks: Any = None,
                  before: int = 0) -> bytearray:
    """:func:`holdout_mask` as a byte per example (1: held out), made without numpy: the
    examples between two empty lines are at consecutive places, so each such run is
    filled by a slice (every ``period``-th byte, or all bytes from the first held)."""
    out = bytearray(n)
    if period == 0:
        return out
    marks = sorted(int(v) for v in blanks) if blanks is not None else []
    a = 0
    for k, v in enumerate([*marks, n]):  # (after k empty lines: k places further on)
        b = max(a, min(v, n))
        pos = start + before + k + a  # (example a's place)
        if period < 0:
            first = a + max(0, -period - pos)
            out[first:b] = b"\1" * max(0, b - first)
        else:
            first = a + (period - 1 - pos) % period
            out[first:b:period] = b"\1" * len(range(first, b, period))
        a = b
    return out


class Holdout:
    """:func:`holdout_mask` of a pass's blocks, called in their order from the shard's
    first: it counts the empty lines of the blocks before. ``offset``: where the shard
    starts in a chain's concatenation, in examples (the other shards' empty lines are not
    counted)."""

    def __init__(self, period: int, offset: int = 0, raw: bool = False) -> None:
        self.period, self.offset, self.before = period, offset, 0
        self.mask = holdout_bytes if raw else holdout_mask  # (raw: bytes, no numpy)

    def __call__(self, start: int, n: int, blanks: np.ndarray | None) -> Any:
        hold = self.mask(self.offset + start, n, self.period, blanks, self.before)
        if blanks is not None:
            self.before += len(blanks)
        return hold


class EarlyStop:
    """VW's end of an online pass with a holdout set (``gd.cc`` ``end_pass``,
    ``summarize_holdout_set``): a pass whose holdout loss beats the best so far is saved,
    and after ``patience`` passes in a row without one (VW's ``--early_terminate``, 3) the
    passes stop and the saved pass is the model. Without an early stop the last pass is the
    model, as in VW (even when an earlier pass had a lower holdout loss)."""

    _FLT_MAX = FLT_MAX

    def __init__(self, patience: int) -> None:
        self.patience = patience
        self.best = self._FLT_MAX
        self.no_win = 0
        self.saved: tuple[np.ndarray, ...] | None = None

    def end_pass(self, holdout_loss: float, holdout_weight: float,
                 *state: np.ndarray) -> bool:
        """Record a pass (every rank passes the allreduced sums); True: stop now, and the
        arrays ``state`` (weights, adaptive sums, normalizers, learner state) have been
        restored to the saved pass. As VW, a pass without holdout examples has the loss
        FLT_MAX / 2: the first pass wins, and the passes stop ``patience`` later."""
        loss = (f32(holdout_loss / holdout_weight) if holdout_weight > 0
                else self._FLT_MAX * 0.5)
        if loss < self.best:
            self.best, self.no_win = loss, 0
            self.saved = tuple(a.copy() for a in state)
            return False
        self.no_win += 1
        if self.no_win < self.patience or self.saved is None:
            return False
        for a, b in zip(state, self.saved):
            a[:] = b
        return True
