"""Compile (or load from numba's on-disk cache) the kernels once, in one process.

On a fresh install the first use of the numba kernels compiles them (about 25 s of CPU for
what one training run uses, about 50 s for every reader and learner); afterwards they load
from ``__pycache__`` in well under a second. Launchers call this before starting N workers
so that the workers do not compile the same code N times at once; a test suite or a
benchmark calls it with ``full=True`` first for the same reason.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

__all__ = ["warm_kernels"]

_VW = "1 'a|a x y:2 |b z\n-1 'b|a y |b w\n1 |a x\n"


def warm_kernels(*, full: bool = False) -> None:
    """Run a tiny parse (from a file, as workers do), train, cache and evaluate; the first
    pass from text, as a one-pass run learns. ``full``: also progressive predictions,
    ``-q``, the libsvm and CSV readers, the workers' mixing and the synthetic writer."""
    from ._cache import load_cached
    from ._dataset import ParseOptions
    from ._train import train

    with tempfile.TemporaryDirectory(prefix="terascale-warm-") as d:
        path = os.path.join(d, "warm.vw")
        with open(path, "w") as f:
            f.write(_VW)
        opts = ParseOptions(bits=18)
        extras: tuple[dict[str, Any], ...] = ({"bfgs": 3}, {"cg": 3})  # train's **options
        for _ in range(2):  # a parse, then a memory-mapped cache hit
            ds, _hit = load_cached(path, opts, cache_dir=os.path.join(d, "cache"))
            for extra in extras:
                model = train(ds, holdout=0.34, **extra)
            model.evaluate(path)
        train(path, cache_dir=os.path.join(d, "text"), holdout=0.0)  # learns as it parses
        if full:
            _rest(d, path)


def _rest(d: str, path: str) -> None:
    from . import _mixing
    from ._train import train
    from .synthetic import write_click

    train(path, quadratic=("ab",), cache_dir=os.path.join(d, "q"), holdout=0.0,
          predictions=lambda pred, tags: None)
    for name, fmt, text in (("warm.svm", "libsvm", "1 1:0.5 3:2\n0 2:1\n"),
                            ("warm.csv", "csv", "label,a,b\n1,0.5,x\n0,2,y\n")):
        other = os.path.join(d, name)
        with open(other, "w") as f:
            f.write(text)
        train(other, format=fmt, cache_dir="", holdout=0.0)
    _mixing.compile_kernels()
    write_click(os.path.join(d, "click.vw"), 10, seed=0)
