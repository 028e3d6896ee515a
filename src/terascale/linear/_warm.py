"""Compile (or load from numba's on-disk cache) the kernels once, in one process.

On a fresh install the first use of the numba kernels compiles them (about 25 s of CPU for
what one training run uses, about 50 s for every reader and learner); afterwards they load
from ``__pycache__`` in well under a second. Launchers call this before starting N workers
so that the workers do not compile the same code N times at once; a test suite or a
benchmark calls it with ``full=True`` first for the same reason.

Even from numba's cache the warm-up run costs about 0.8 s, most of a small job's start-up
on two cores, so once it has run a stamp is left next to numba's cache (the package's
``__pycache__``, or ``NUMBA_CACHE_DIR``) naming the numba, Python and source files it
compiled; the next call finds the stamp and returns at once. A stamp that outlives the
cache it speaks for (the cache deleted by hand) costs only the compilations in the
workers, never a wrong result: numba checks each cached kernel against its source itself.
"""

from __future__ import annotations

import glob
import hashlib
import os
import sys
import tempfile
from typing import Any

__all__ = ["warm_kernels"]

_VW = "1 'a|a x y:2 |b z\n-1 'b|a y |b w\n1 |a x\n"


def warm_kernels(*, full: bool = False) -> None:
    """Run a tiny parse (from a file, as workers do), train, cache and evaluate; the first
    pass from text, as a one-pass run learns. ``full``: also progressive predictions,
    ``-q``, the libsvm and CSV readers, the workers' mixing and the synthetic writer.

    Parameters
    ----------
    full
        Also progressive predictions, ``-q``, the libsvm and CSV readers, the workers' mixing and
        the synthetic writer (default False).
    """
    stamp = _stamp(full)
    if os.path.exists(stamp):
        return
    _run(full)
    try:
        os.makedirs(os.path.dirname(stamp), exist_ok=True)
        with open(stamp, "w"):
            pass
    except OSError:  # a read-only install: warm every time, as before
        pass


def _stamp(full: bool) -> str:
    """The stamp's path for the current numba, Python and sources (importing numba alone
    would cost a third of a second: its version comes from the installed metadata)."""
    from importlib.metadata import version

    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256(f"{version('numba')} {sys.version} {full}".encode())
    for path in sorted(glob.glob(os.path.join(here, "**", "*.py"), recursive=True)):
        st = os.stat(path)
        h.update(f"{path} {st.st_mtime_ns} {st.st_size}".encode())
    root = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(here, "__pycache__")
    return os.path.join(root, f"terascale-warm-{h.hexdigest()[:20]}")


def _run(full: bool) -> None:
    from ..communicator import Communicator
    from ._io._blocks import BLOCK_EXAMPLES
    from ._io._cache import load_cached
    from ._io._dataset import ParseOptions
    from ._io._stream import CHUNK_BYTES
    from ._train import train

    # a job of its own, of size 1: the launcher's process warms up, it joins no job (and
    # init()'s "no launcher started this process" notice would mislead the user)
    with Communicator() as alone, tempfile.TemporaryDirectory(prefix="terascale-warm-") as d:
        path = os.path.join(d, "warm.vw")
        with open(path, "w") as f:
            f.write(_VW)
        opts = ParseOptions(bits=18)
        extras: tuple[dict[str, Any], ...] = ({"bfgs": 3}, {"cg": 3})  # train's **options
        for _ in range(2):  # a parse, then a memory-mapped cache hit
            ds, _hit = load_cached(path, opts, cache_dir=os.path.join(d, "cache"))
            for extra in extras:
                model = train(ds, comm=alone, holdout=0.34, **extra)
            model.evaluate(path)
        train(path, comm=alone, cache_dir=os.path.join(d, "text"), holdout=0.0)  # learns as it parses
        # wide data's paths: at -b 4 a few features pass the dense layout's threshold
        # (2**bits / 8), and a pass switches to it at its second block, so the file spans
        # more than one text chunk and more than one cache block; at -b 26 the column map
        # is hashed. Small runs, nothing of 2**bits.
        wide = os.path.join(d, "wide.vw")
        copies = max(CHUNK_BYTES // len(_VW), BLOCK_EXAMPLES // _VW.count("\n")) + 2
        with open(wide, "w") as f:
            f.write(_VW * copies)
        for bits in (4, 26):
            train(wide, comm=alone, bits=bits, cache=False, holdout=0.0)  # from the text
            train(wide, comm=alone, bits=bits, cache_dir=os.path.join(d, f"b{bits}"),
                  holdout=0.0, cache=True)
        if full:
            _rest(d, path, wide, alone)


def _rest(d: str, path: str, wide: str, alone: Any) -> None:
    from ._combine import _mixing
    from ._train import train
    from .synthetic import write_click

    train(path, comm=alone, quadratic=("ab",), cache_dir=os.path.join(d, "q"), holdout=0.0,
          predictions=lambda pred, tags: None)
    # progressive predictions past the switch to dense rows (the learner on row views)
    train(wide, comm=alone, bits=4, cache=False, holdout=0.0,
          predictions=lambda pred, tags: None)
    for name, fmt, text in (("warm.svm", "libsvm", "1 1:0.5 3:2\n0 2:1\n"),
                            ("warm.csv", "csv", "label,a,b\n1,0.5,x\n0,2,y\n")):
        other = os.path.join(d, name)
        with open(other, "w") as f:
            f.write(text)
        train(other, comm=alone, format=fmt, cache_dir="", holdout=0.0)
    _mixing.compile_kernels()
    write_click(os.path.join(d, "click.vw"), 10, seed=0)
