"""VW-style progress lines while training (rank 0 only).

The lines come at VW's cadence, counted as VW counts it, in the examples' importance
weight (VW's ``weighted_examples``: labelled examples not held out, and unlabelled ones):
at weight 1, 2, 4, 8, ... (VW's default, a multiplicative ``--progress 2.0``; the next line
when the weight reaches twice the weight at the last one), or as ``terascale vw -P`` sets
it in ``CADENCE``: an integer N every N of weight (additive), a number with a point
multiplies (as VW reads ``-P``: below or at 1.0 it adds 1.0). The columns are VW's: the
example counter counts every example not held out, an unlabelled one's label is
``unknown``, and a loss over no labelled weight is ``n.a.``.
"""

from __future__ import annotations

from typing import TextIO

import numpy as np

__all__ = ["CADENCE", "LINK", "Progress", "cadence"]

# (additive, step) of this process's progress lines: VW's default doubling
CADENCE: list[tuple[bool, float]] = [(False, 2.0)]
# how the "current predict" column shows a prediction, as -p writes it: the run's --link
# (set by the command that runs the learner; raw scores otherwise)
LINK: list[str] = ["identity"]


def cadence(arg: str) -> tuple[bool, float]:
    """VW's reading of ``-P ARG``: an integer adds (at least 1), a number with a point
    multiplies (1.0 added when it is at most 1)."""
    from ..._errors import ConfigError

    try:
        v = float(arg)
    except ValueError:
        raise ConfigError(f"-P/--progress {arg!r}: an integer (every N examples) or a "
                          f"number with a point (a factor)") from None
    if "." not in arg:
        return True, max(1.0, float(int(v)))
    return False, v + 1.0 if v <= 1.0 else v


class Progress:
    """VW's progress lines, in its columns, at its cadence (rank 0 only)."""

    def __init__(self, out: TextIO | None) -> None:
        self.out = out
        self.since_loss = 0.0
        self.since_w = 0.0
        self.interval = 1.0

    def first_due(self) -> float:
        """The weight at which the first line is printed (VW's first ``dump_interval``)."""
        add, step = CADENCE[-1]
        self.interval = step if add else 1.0
        return self.interval

    def next_due(self, weight: float) -> float:
        """The weight of the next line after one printed at ``weight``: VW's next
        ``dump_interval`` is the weight at this line plus or times the step (a float)."""
        add, step = CADENCE[-1]
        self.interval = float(np.float32(weight + step if add else weight * step))
        return self.interval

    def header(self) -> None:
        if self.out:
            print(f"{'average':<8} {'since':<8} {'example':>12} {'example':>14} "
                  f"{'current':>14} {'current':>14} {'current':>8}\n"
                  f"{'loss':<8} {'last':<8} {'counter':>12} {'weight':>14} "
                  f"{'label':>14} {'predict':>14} {'features':>8}", file=self.out)

    def line(self, acc: np.ndarray, prev: np.ndarray, counter: int, weight: float,
             label: float, prediction: float, feats: int, binary: bool = False,
             classes: bool = False) -> None:
        """One line: ``acc``/``prev`` the pass's sums now and at the last line (labelled
        loss and weight, see ``online_chunk``), then the example counter, the weight seen,
        and the last example's label (nan: unlabelled), raw prediction (shown as ``-p``
        writes it: ``binary``'s sign, or through ``LINK``) and feature count; ``classes``:
        the label and prediction are classes (``--oaa``), printed as integers."""
        if not self.out:
            return
        from .._vw._vwtext import link

        if classes:
            lab = "unknown" if np.isnan(label) else f"{int(label)}"
            pr = f"{int(prediction)}"
        else:
            lab = "unknown" if np.isnan(label) else f"{label:.4f}"
            pr = f"{float(link(np.array([prediction]), LINK[-1], binary)[0]):.4f}"
        dl, dw = acc[0] - prev[0], acc[1] - prev[1]
        # (VW cuts a loss to its column's 8 characters: 134.296493 is 134.2964)
        avg = f"{acc[0] / acc[1]:.6f}"[:8] if acc[1] else "n.a."
        since = f"{dl / dw:.6f}"[:8] if dw else "n.a."
        print(f"{avg:<8} {since:<8} {counter:>12d} {weight:>14.1f} {lab:>14} "
              f"{pr:>14} {feats:>8d}", file=self.out)
