"""VW-style progress lines while training (rank 0 only).

The lines come at VW's cadence: after example 1, 2, 4, 8, ... (VW's default, a
multiplicative ``--progress 2.0``), or as ``terascale vw -P`` sets it in ``CADENCE``: an
integer N prints every N examples (additive), a number with a point multiplies (as VW
reads ``-P``: below or at 1.0 it adds 1.0).
"""

from __future__ import annotations

import math
from typing import TextIO

import numpy as np

__all__ = ["CADENCE", "Progress", "cadence"]

# (additive, step) of this process's progress lines: VW's default doubling
CADENCE: list[tuple[bool, float]] = [(False, 2.0)]


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

    def first_due(self) -> int:
        """The example count of the first line (VW's first ``dump_interval``)."""
        add, step = CADENCE[-1]
        self.interval = step if add else 1.0
        return math.ceil(self.interval)

    def next_due(self, due: int) -> int:
        """The example count of the line after the one at ``due``: VW's next
        ``dump_interval`` is the count at this line plus or times the step, and it prints
        at the first example that reaches it."""
        add, step = CADENCE[-1]
        self.interval = due + step if add else due * step
        return max(due + 1, math.ceil(self.interval))

    def header(self) -> None:
        if self.out:
            print(f"{'average':<8} {'since':<8} {'example':>12} {'example':>14} "
                  f"{'current':>14} {'current':>14} {'current':>8}\n"
                  f"{'loss':<8} {'last':<8} {'counter':>12} {'weight':>14} "
                  f"{'label':>14} {'predict':>14} {'features':>8}", file=self.out)

    def line(self, acc: np.ndarray, prev: np.ndarray, feats: float) -> None:
        if not self.out:
            return
        dl, dw = acc[0] - prev[0], acc[1] - prev[1]
        avg = acc[0] / acc[1] if acc[1] else 0.0
        since = dl / dw if dw else 0.0
        print(f"{avg:<8.6f} {since:<8.6f} {int(acc[4]):>12d} {acc[1]:>14.1f} "
              f"{acc[6]:>14.4f} {acc[7]:>14.4f} {int(feats):>8d}", file=self.out)
