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

:func:`as_command` is the ``terascale vw``/``linear`` command's own start-up (never a
library caller's): numba loads every registry of its compiler target before the first
kernel, even one from its cache, and two of them probe optional packages the linear
kernels never use (scipy's BLAS, imported for ``np.dot`` in compiled code, and cffi's C
parser): deferred (:func:`defer_numba_probes`), a one-line run does not import them, and a
kernel that needs one gets it when numba types that kernel. Once numba's target is set up,
its object graph is frozen out of the collector's work (:func:`numba_set_up`).
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from collections.abc import Callable
from types import FrameType, ModuleType
from typing import Any

__all__ = ["as_command", "compiled_forking", "defer_numba_probes", "forking", "forks",
           "numba_set_up", "warm_kernels"]

_VW = "1 'a|a x y:2 |b z\n-1 'b|a y |b w\n1 |a x\n"


def warm_kernels(*, full: bool = False) -> None:
    """Run a tiny parse (from a file, as workers do), train, cache and evaluate; the first
    pass from text, as a one-pass run learns. ``full``: also progressive predictions,
    ``-q``, the libsvm and CSV readers, the workers' mixing (and the learner over their
    float64 sums), the synthetic writer and the numba VW parser (also in a ``terascale vw``
    process without the compiled modules).

    Parameters
    ----------
    full
        Also progressive predictions, ``-q``, the libsvm and CSV readers, the workers' mixing
        (and the learner over their float64 sums), the synthetic writer and the numba VW
        parser (default False).
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
    would cost a third of a second: where it is not imported yet, its version comes from
    the installed metadata)."""
    numba = sys.modules.get("numba")  # (imported: its own version, without the lookup)
    if numba is not None:
        release = numba.__version__
    else:
        from importlib.metadata import version

        release = version("numba")
    import glob
    import hashlib

    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256(f"{release} {sys.version} {full}".encode())
    for path in sorted(glob.glob(os.path.join(here, "**", "*.py"), recursive=True)):
        st = os.stat(path)
        h.update(f"{path} {st.st_mtime_ns} {st.st_size}".encode())
    root = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(here, "__pycache__")
    return os.path.join(root, f"terascale-warm-{h.hexdigest()[:20]}")


def _run(full: bool) -> None:
    import tempfile

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
    # the learner over float64 arrays: the workers' sums where they mix during a pass
    # (-n N) and scikit-learn's partial_fit; the passes above ran it over float32 ones
    import numpy as np

    from ._online._update import new_state, online_chunk

    z = np.zeros(1)
    online_chunk(np.array([0, 1], np.int64), np.zeros(1, np.uint32), np.ones(1, np.float32),
                 np.ones(1, np.float32), np.ones(1, np.float32), np.zeros(1, np.bool_), 0, 1,
                 z, z.copy(), z.copy(), new_state(), 0, 0.5, 0.5, 0.0, 0.0, np.zeros(8))
    write_click(os.path.join(d, "click.vw"), 10, seed=0)
    # --oaa: its K learners in one pass, and example by example under --l1/--l2 (the
    # command's own parser: `terascale vw` is in this area)
    import argparse

    from ._vw._vwcli import add_parser

    sub = argparse.ArgumentParser().add_subparsers()
    add_parser(sub)
    oaa = os.path.join(d, "oaa.vw")
    with open(oaa, "w") as f:
        f.write("1 |a x\n2 |a y\n3 |b z x\n")
    for extra in ((), ("--l2", "1e-9")):
        args = sub.choices["vw"].parse_args(["--oaa", "3", "-d", oaa, "-b", "18", "--quiet",
                                             *extra])
        args.func(args)
    # VW's gd with its other update rules: each pass one kernel (_vw._vwgdpass)
    args = sub.choices["vw"].parse_args(["--sgd", "-d", oaa, "-b", "18", "--quiet"])
    args.func(args)
    _numba_vw_parser(oaa)


def _numba_vw_parser(path: str) -> None:
    """The numba VW parser (``_vw._vwparse``): over a file's bytes (read-only) and a read
    buffer (writable), as the compiled parser hands it what it does not take, and through
    ``terascale vw`` without the compiled modules (``TERASCALE_NO_CEXT=1``: the parser,
    ``-q``'s crossing, ``--oaa``'s labels), whose kernels no other run here compiles.

    That command runs in a process of its own (the switch is read as its modules load),
    which finds this terascale first on its path."""
    import subprocess

    import numpy as np

    from ._vw._vwparse import parse_vw_bytes

    none = np.zeros(256, np.bool_)
    table = np.zeros((0, 4), np.int32)
    data = _VW.encode()
    for buf in (np.frombuffer(data, np.uint8), np.frombuffer(bytearray(data), np.uint8)):
        parse_vw_bytes(buf, (1 << 18) - 1, table, True, False, none, none, False)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "TERASCALE_NO_CEXT": "1",
           "PYTHONPATH": os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])}
    for flags in ((), ("-q", "ab"), ("--oaa", "3")):
        run = subprocess.run([sys.executable, "-m", "terascale", "vw", "--quiet", "-d", path,
                              "-b", "18", *flags], env=env, capture_output=True, text=True,
                             timeout=900)
        if run.returncode != 0:
            raise RuntimeError(f"terascale vw {' '.join(flags)} (TERASCALE_NO_CEXT=1) "
                               f"exited {run.returncode}: {run.stderr.strip()[-2000:]}")


def forking(target: Callable[[], int], options: dict[str, Any]) -> Callable[[], int] | None:
    """``target`` for the launcher to fork its ``-n N`` workers from this process
    (``LaunchOptions.fork``), once this process has loaded what a worker of a job with
    these train ``options`` runs; None where the workers are to be started as programs of
    their own: a process that is not the command's own (a library caller's, whose threads
    and state are not the command's to hand on), or ``TERASCALE_EXEC_WORKERS=1``.

    Loaded here, once, instead of in each worker: the learner's modules, numba's compiler
    target and the kernels a run with ``options`` calls first (a run of three lines of
    VW text, in a job of its own, whose model is dropped; other formats: the modules
    only). A forked worker has them all; a kernel the real data needs beyond those
    (wide rows past the dense switch) loads in the worker, as it would have."""
    # a worker is forked only while the launcher runs no other thread (launch._fork), so
    # none holds a lock (an import's) the worker would wait on forever
    if not forks():
        return None
    from .._init import load_joining
    from ._front import _worker  # noqa: F401  (the worker's modules)
    from ._vw import _vwmodel, _vwreport  # noqa: F401

    load_joining()

    if options.get("format", "vw") == "vw":
        _load_kernels(options)
    return target


def compiled_forking(target: Callable[[], int]) -> Callable[[], int] | None:
    """``target`` for the launcher to fork the compiled learner's ``-n N`` workers from
    this process (``_vw._vwworkers``, ``_vw._vwoaafast``), once it has loaded the job's
    modules (a worker's learner, the compiled core, loads where it runs: no numba); None
    where the workers are programs of their own (:func:`forks`)."""
    if not forks():
        return None
    from .._init import load_joining

    load_joining()
    return target


def forks() -> bool:
    """Whether this process forks its ``-n N`` workers (:func:`forking`'s rule): it is the
    command's own (:func:`as_command`), the platform forks, and ``TERASCALE_EXEC_WORKERS``
    is not set."""
    from .._env import read_setting

    return _command and (read_setting("TERASCALE_EXEC_WORKERS") or "0") == "0" and \
        hasattr(os, "fork")


def _load_kernels(options: dict[str, Any]) -> None:
    """Train once on three lines with ``options`` (no output, a cache of its own), and
    call the kernels only workers of a job of several call."""
    import tempfile

    from ..communicator import Communicator
    from ._options import TrainOptions
    from ._train import train

    opts = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    with Communicator() as alone, tempfile.TemporaryDirectory(prefix="terascale-warm-") as d:
        path = os.path.join(d, "warm.vw")
        with open(path, "w") as f:
            f.write(_VW)
        try:
            if TrainOptions(**opts).cache_root() != "":  # a cache, as the job's: here
                opts["cache_dir"] = os.path.join(d, "cache")
            opts["progress"] = False
            train(path, comm=alone, **opts)
        except Exception:  # (three lines a loss refuses: the workers load what they call)
            pass
    # what only a job of several workers calls: the union of their features, and the lazy
    # L1/L2 folded into the weights before they are averaged
    import numpy as np

    from ._io._setops import union_sorted
    from ._online._state import new_state
    from ._online._update import sync_weights

    union_sorted([np.array([1, 3], np.uint32), np.array([2], np.uint32)])
    sync_weights(np.zeros(1, np.float32), new_state())


_command = False  # this process is the command's own: as_command() ran
_frozen = False   # numba_set_up() froze the collector's generations


def as_command() -> None:
    """The ``terascale vw``/``linear`` command's start-up in its own process (a ``-n N``
    worker's too; never a library caller's): numba's probes deferred
    (:func:`defer_numba_probes`), and once numba's target is set up, what is alive then is
    frozen (:func:`numba_set_up`).

    The deferral runs when numba is first imported, not here: the process that launches
    ``-n N`` workers imports numba only to fork its workers with the learner loaded
    (:func:`forking`); one that starts them as programs of their own
    (``TERASCALE_EXEC_WORKERS=1``) checks the options, learns nothing and never imports it
    (a fifth of a second of its start-up, before the first worker starts)."""
    global _command
    _command = True
    if "numba" in sys.modules:
        defer_numba_probes()
    elif not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport("numba", defer_numba_probes))


class _AfterImport:
    """Runs ``then()`` right after the first import of the top-level package ``name``: the
    finder that would have found it finds it, its loader runs it, and ``then`` runs as the
    import's last step, on the importing thread. Inert afterwards: it stays in
    ``sys.meta_path`` (removing it could make another thread's import, iterating that list
    at that moment, skip a finder)."""

    def __init__(self, name: str, then: Callable[[], None]) -> None:
        self.name, self.then, self.done = name, then, False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if self.done or name != self.name:
            return None
        self.done = True
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if finder is not self and find is not None:
                spec = find(name, path, target)
                if spec is not None:
                    break
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenLoader(spec.loader, self.then)
        return spec


class _ThenLoader:
    """``loader``, then ``then()`` once the module has run (anything else: ``loader``'s)."""

    def __init__(self, loader: Any, then: Callable[[], None]) -> None:
        self._loader, self._then = loader, then

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        module.__loader__ = self._loader  # (the package's own again)
        if module.__spec__ is not None:
            module.__spec__.loader = self._loader
        self._then()

    def __getattr__(self, name: str) -> Any:  # get_resource_reader, is_package, ...
        return getattr(self._loader, name)


def numba_set_up() -> None:
    """numba's compiler target was just set up (the first kernel of the run is next): in
    the command's own process, the first time, ``gc.freeze`` what is alive.

    numba's and LLVM's object graphs (~120,000 tracked objects, no garbage among them)
    live until the exit, where the command's last collection traversed them all again:
    ~50 ms of a one-line run. Frozen, the collector leaves them out of every collection
    that follows, the last one included; what the run creates later is collected as
    before. Once: a second freeze would keep the cyclic garbage made in between."""
    global _frozen
    if _command and not _frozen:
        _frozen = True
        gc.freeze()


def _blas_probe(arraymath: ModuleType) -> bool:
    """numba's own (``_check_blas``: ``scipy.linalg.cython_blas`` importable)."""
    return bool(arraymath._check_blas())


def _cffi_probe(cffi_utils: ModuleType) -> bool:
    """numba's own: ``cffi`` importable, one ``FFI`` (its module names both)."""
    try:
        import cffi
        ffi = cffi.FFI()
    except ImportError:
        return False
    vars(cffi_utils).update(cffi=cffi, ffi=ffi)
    return True


# numba's import-time probes of optional packages: (the numba module, its function that
# probes) -> (the package it imports, the module's flag holding the answer, how to get the
# answer later, as numba would have).
_Probes = dict[tuple[str, str], tuple[str, str, Callable[[ModuleType], bool]]]
_PROBES: _Probes = {
    # arraymath's _HAVE_BLAS: np.dot through BLAS in np.convolve and np.correlate (the
    # linalg functions import scipy themselves when a kernel using them is typed)
    ("numba.np.arraymath", "_check_blas"): ("scipy", "_HAVE_BLAS", _blas_probe),
    # cffi_utils's SUPPORTED (and its ffi): typing calls to cffi functions
    ("numba.core.typing.cffi_utils", "<module>"): ("cffi", "SUPPORTED", _cffi_probe),
}


def defer_numba_probes() -> None:
    """Keep numba's import-time probes of scipy's BLAS and cffi out of this process's
    start-up; each runs, as numba would have run it, when its answer is first needed.

    numba's compiler target loads all of its registries before the first kernel of a
    process runs, even a kernel loaded from its on-disk cache. Two of them import optional
    packages to see whether they are there: ``numba.np.arraymath`` imports
    ``scipy.linalg.cython_blas`` (all of ``scipy.linalg``: ~0.15 s and 17 MB) and
    ``numba.core.typing.cffi_utils`` builds a ``cffi.FFI`` (its C parser: ~0.03 s). The
    linear kernels use neither: they call no BLAS routine and no cffi function. This imports
    those two numba modules now, with an import finder that refuses exactly the probes'
    imports while they run (nothing else is refused, on any thread; the finder is gone when
    this returns), and replaces each probe's flag by an object that runs numba's own probe
    the first time the flag is read: a kernel compiled later with ``np.convolve`` or a cffi
    function gets what it would have got, so no compiled code and no result changes.

    For a process that is the command itself (:func:`as_command`: ``terascale vw``,
    ``terascale linear``, a ``-n N`` worker): a library caller's process keeps numba's
    start-up as it is. Once numba's modules are loaded (a second call, or any numba kernel
    already run) there is nothing to defer and it does nothing.
    """
    pending = {key: value for key, value in _PROBES.items() if key[0] not in sys.modules}
    if not pending:
        return
    finder = _RefuseProbes(pending)
    sys.meta_path.insert(0, finder)
    try:
        for module, _probe in pending:
            importlib.import_module(module)
    finally:
        sys.meta_path.remove(finder)
    for (module, _probe), (_package, flag, probe) in pending.items():
        mod = sys.modules[module]
        if module in finder.refused and getattr(mod, flag, None) is False:
            setattr(mod, flag, _LazyProbe(mod, flag, probe))


class _RefuseProbes:
    """Refuses a package to the numba function that probes for it, and nothing else."""

    def __init__(self, pending: _Probes) -> None:
        self.pending = pending
        self.refused: set[str] = set()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        top = name.partition(".")[0]
        for (module, probe), (package, flag, _fn) in self.pending.items():
            if top == package and _running(sys._getframe(1), module, probe, flag):
                self.refused.add(module)
                raise ImportError(f"{name}: numba's probe of it deferred by terascale",
                                  name=name)
        return None  # any other import: the next finder's


def _running(frame: FrameType | None, module: str, function: str, flag: str) -> bool:
    """Whether ``function`` of ``module`` is on the stack above ``frame``, while the
    module's own code, which names ``flag``, is being run (a numba that probes elsewhere,
    or keeps the answer under another name, is not refused: its probe runs as it is)."""
    found = False
    while frame is not None:
        if frame.f_globals.get("__name__") == module:
            found = found or frame.f_code.co_name == function
            if frame.f_code.co_name == "<module>":
                return found and flag in frame.f_code.co_names
        frame = frame.f_back
    return False


class _LazyProbe:
    """A numba module's probe flag, probed when first read (``if not _HAVE_BLAS``)."""

    def __init__(self, module: ModuleType, flag: str,
                 probe: Callable[[ModuleType], bool]) -> None:
        self.module, self.flag, self.probe = module, flag, probe

    def __bool__(self) -> bool:
        value = bool(self.probe(self.module))
        setattr(self.module, self.flag, value)
        return value
