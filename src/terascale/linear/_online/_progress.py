"""VW-style progress lines while training (rank 0 only)."""

from __future__ import annotations

from typing import TextIO

import numpy as np

__all__ = ["Progress"]


class Progress:
    """VW-style progress lines at doubling example counts (rank 0 only)."""

    def __init__(self, out: TextIO | None) -> None:
        self.out = out
        self.since_loss = 0.0
        self.since_w = 0.0

    def header(self) -> None:
        if self.out:
            print(f"{'average':<9} {'since':<9} {'example':>12} {'example':>12} "
                  f"{'current':>8} {'current':>8} {'current':>8}\n"
                  f"{'loss':<9} {'last':<9} {'counter':>12} {'weight':>12} "
                  f"{'label':>8} {'predict':>8} {'features':>8}", file=self.out)

    def line(self, acc: np.ndarray, prev: np.ndarray, feats: float) -> None:
        if not self.out:
            return
        dl, dw = acc[0] - prev[0], acc[1] - prev[1]
        avg = acc[0] / acc[1] if acc[1] else 0.0
        since = dl / dw if dw else 0.0
        print(f"{avg:<9.6f} {since:<9.6f} {int(acc[4]):>12d} {acc[1]:>12.1f} "
              f"{acc[6]:>8.4f} {acc[7]:>8.4f} {int(feats):>8d}", file=self.out)
