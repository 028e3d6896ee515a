"""Compile (or load from numba's on-disk cache) the kernels once, in one process.

On a fresh install the first use of the numba kernels compiles them (about 10-20 s of CPU);
afterwards they load from ``__pycache__`` in well under a second. Launchers call this before
starting N workers so that the workers do not compile the same code N times at once.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

__all__ = ["warm_kernels"]


def warm_kernels() -> None:
    """Run a tiny parse (from a file, as workers do), train, cache and evaluate."""
    from ._cache import load_cached
    from ._dataset import ParseOptions
    from ._train import train

    with tempfile.TemporaryDirectory(prefix="terascale-warm-") as d:
        path = os.path.join(d, "warm.vw")
        with open(path, "w") as f:
            f.write("1 'a|a x y:2 |b z\n-1 'b|a y |b w\n1 |a x\n")
        opts = ParseOptions(bits=18)
        extras: tuple[dict[str, Any], ...] = ({"bfgs": 3}, {"cg": 3})  # train's **options
        for _ in range(2):  # a parse, then a memory-mapped cache hit
            ds, _hit = load_cached(path, opts, cache_dir=os.path.join(d, "cache"))
            for extra in extras:
                model = train(ds, holdout=0.34, **extra)
            model.evaluate(path)
