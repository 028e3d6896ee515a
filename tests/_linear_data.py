"""Synthetic data shared by the linear tests (a module, not a fixture, so forked workers
can call it)."""

from __future__ import annotations

import numpy as np


def vw_lines(n: int, seed: int = 0, *, weights: bool = False, dense: bool = False) -> list[str]:
    """Logistic data in VW text: namespaces a (categorical) and b (numeric)."""
    true = np.random.default_rng(12345).normal(size=60)  # the same model for every seed
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        cats = rng.choice(40, size=3, replace=False)
        nums = rng.normal(size=4) * (rng.random(4) < (1.0 if dense else 0.7))
        z = true[cats].sum() + nums @ true[40:44] + 0.3
        y = 1 if rng.random() < 1 / (1 + np.exp(-z)) else -1
        imp = f" {rng.choice([0.5, 1.0, 2.0, 3.0])}" if weights else ""
        feats = " ".join(f"c{c}" for c in cats)
        num = " ".join(f"n{j}:{v:.4f}" for j, v in enumerate(nums) if v != 0)
        lines.append(f"{y}{imp} 'ex{i}|a {feats} |b {num}")
    return lines
