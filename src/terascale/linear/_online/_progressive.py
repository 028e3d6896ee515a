"""Progressive predictions (VW's ``-p`` while training) and ``--binary``'s 0/1 loss.

Each example is predicted with the weights learned from the examples before it, then
learned from: progressive validation (Blum, Kalai & Langford, COLT 1999), an honest
estimate of test error from a single pass. The online pass writes the predictions of a
bounded block of examples at a time (``BLOCK``), so asking for them never holds a
prediction per example of the shard.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._io._blocks import Block

__all__ = ["BLOCK", "BlockTags", "block_tags", "zero_one"]

BLOCK = 1 << 16


class BlockTags(Sequence):
    """The VW tags of examples [start, end) of a block, as a sequence of str made on
    demand; the -p writer reads the block's tag bytes instead (no str per example).

    Parameters
    ----------
    block
        The block (its ``tag_ptr`` and ``tag_blob``).
    start, end
        The examples' range in the block.
    """

    def __init__(self, block: Block, start: int, end: int) -> None:
        self.block, self.start, self.end = block, start, end

    def __len__(self) -> int:
        return self.end - self.start

    def __getitem__(self, i):  # noqa: ANN001, ANN204 (Sequence's int and slice forms)
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(i)
        return self.block.tag(self.start + (i % len(self)))


def block_tags(ds: Block, start: int, end: int) -> BlockTags | None:
    """VW tags of examples [start, end), or None when the data has none."""
    if ds.tag_ptr is None or not len(ds.tag_ptr) or ds.tag_ptr[-1] == 0:
        return None
    return BlockTags(ds, start, end)


def zero_one(acc: np.ndarray, before: np.ndarray, pred: np.ndarray, labels: np.ndarray,
             weights: np.ndarray, holdout: np.ndarray, start: int,
             kind: int | None = None, loss32: Any = None, sums: np.ndarray | None = None,
             sums_before: np.ndarray | None = None) -> None:
    """Replace the block's loss sums in ``acc`` (train loss acc[0], holdout loss acc[2];
    ``before`` is acc before the block) by VW's ``--binary`` 0/1 loss of sign(prediction),
    and the last prediction (acc[7]) by its sign. With the kernel's loss ``kind``, an
    example whose label is not -1 or 1 (0 of 0/1 labels) keeps the loss's own value, as
    VW's binary reduction keeps it there: ``loss32(kind, p, y)``'s (default: the numba
    kernel's; the compiled learner passes its own, the same bits). ``sums``: the run's
    running loss sums (``Progress.sums``, where the kernel added the loss's values to
    ``sums_before``) get those losses instead, added in turn as VW adds them."""
    end = start + len(pred)
    lab = labels[start:end]
    s = weights[start:end]
    ok = ~np.isnan(lab) & (s > 0)
    wrong = s * ((pred > 0) != (lab > 0)) * ok
    odd = np.flatnonzero(ok & (np.abs(lab) != 1.0)) if kind is not None else ()
    if len(odd):
        from .._losstable import _BY_SIGN, RAW_LABELS

        if loss32 is None:
            from .._losses import loss32

        sign = _BY_SIGN[kind & 7] == 1 and not kind & RAW_LABELS
        wrong = wrong.astype(np.float64)
        for i in odd.tolist():  # (the kernel's float loss of the clipped prediction)
            y = (1.0 if lab[i] > 0 else -1.0) if sign else float(lab[i])
            wrong[i] = float(np.float32(np.float32(loss32(kind, float(pred[i]), y))
                                        * np.float32(s[i])))
    hold = holdout[start:end]
    acc[0] = before[0] + float(np.sum(wrong[~hold]))
    acc[2] = before[2] + float(np.sum(wrong[hold]))
    if sums is not None and sums_before is not None:
        for slots, mask in (((0, 4), ~hold), ((2, 6, 8), hold)):
            part = np.asarray(wrong[mask], np.float64)
            for k in slots:  # (each a running double sum, in the examples' order)
                sums[k] = np.cumsum(np.concatenate(([sums_before[k]], part)))[-1]
    if np.any(ok):
        acc[7] = 1.0 if acc[7] > 0 else -1.0

