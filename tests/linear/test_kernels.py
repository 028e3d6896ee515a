"""terascale.linear.kernels: the per-example cost the planner builds on (tiny sizes)."""

from __future__ import annotations

import os

from terascale.linear.kernels import kernel_cost
from terascale.sim.plans import measure_example_cost


def test_kernel_cost_runs_the_real_kernels() -> None:
    cost = kernel_cost(features=8, examples=3000, bits=12, reps=1)
    assert cost.online_s > 0 and cost.gradient_s > 0
    assert (cost.features, cost.examples, cost.bits, cost.reps) == (8, 3000, 12, 1)


def test_the_planner_uses_it() -> None:
    cost = measure_example_cost(features=8, examples=3000, bits=12, reps=1)
    assert "terascale.linear kernels" in cost.source and cost.features_per_example == 8
    assert cost.online_s > 0 and cost.gradient_s > 0


def test_warm_up_runs_once_for_the_same_sources(tmp_path, monkeypatch):
    """The launcher's warm-up leaves a stamp; the next call for the same numba, Python and
    sources returns without running the kernels again."""
    from terascale.linear import _warm

    runs = []
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))  # where the stamp goes
    monkeypatch.setattr(_warm, "_run", lambda full: runs.append(full))
    _warm.warm_kernels()
    _warm.warm_kernels()
    _warm.warm_kernels(full=True)  # another level: its own stamp
    assert runs == [False, True]
    assert len([f for f in os.listdir(tmp_path) if f.startswith("terascale-warm-")]) == 2


def test_warm_up_takes_the_wide_data_paths(monkeypatch):
    """The warm-up's runs reach the first pass's switch to the dense layout and the hashed
    column map, so a first run on wide data does not compile their kernels in its time."""
    from terascale.linear import _colindex, _warm
    from terascale.linear._online import _firstpass

    seen = []
    go_dense, reserve = _firstpass.LocalColumns._go_dense, _colindex.HashIndex.reserve
    monkeypatch.setattr(_firstpass.LocalColumns, "_go_dense",
                        lambda self, start: (seen.append("dense"), go_dense(self, start))[1])
    monkeypatch.setattr(_colindex.HashIndex, "reserve",
                        lambda self, n: (seen.append("hashed"), reserve(self, n))[1])
    _warm._run(False)
    assert "dense" in seen and "hashed" in seen


def test_full_warm_up_compiles_the_numba_vw_parser(tmp_path, monkeypatch):
    """The full warm-up (the suite's, a benchmark's) parses with the numba VW parser over a
    read-only and a writable buffer, and runs ``terascale vw`` without the compiled
    modules: no test's process compiles that parser in its own time."""
    import subprocess

    from terascale.linear import _warm
    from terascale.linear._vw._vwparse import parse_vw_bytes

    runs = []
    monkeypatch.setattr(subprocess, "run", lambda cmd, **kw: runs.append((cmd, kw["env"]))
                        or subprocess.CompletedProcess(cmd, 0, "", ""))
    (tmp_path / "d.vw").write_text("1 |a x\n")
    _warm._numba_vw_parser(str(tmp_path / "d.vw"))
    assert sorted(sig[0].mutable for sig in parse_vw_bytes.signatures) == [False, True]
    assert [cmd[cmd.index("18") + 1:] for cmd, _ in runs] == [[], ["-q", "ab"], ["--oaa", "3"]]
    assert all(cmd[1:4] == ["-m", "terascale", "vw"] and env["TERASCALE_NO_CEXT"] == "1"
               for cmd, env in runs)


_PROBED = """
import ctypes.util, json, sys
import numpy as np
if sys.argv[1] == "deferred":
    from terascale.linear._warm import defer_numba_probes
    defer_numba_probes()
import numba
from numba.core.typing import cffi_utils
from numba.np import arraymath

sys.path.insert(0, sys.argv[2])
from first_kernel import total

total(np.ones(3))  # the first kernel (from numba's cache): numba's target loads its registries
out = {"loaded": sorted(m for m in ("scipy.linalg", "pycparser") if m in sys.modules),
       "flags": [type(arraymath._HAVE_BLAS).__name__, type(cffi_utils.SUPPORTED).__name__]}

@numba.njit
def blas(a, b):  # np.convolve: through BLAS (np.dot) when numba's probe found it
    return np.convolve(a, b)

import cffi
ffi = cffi.FFI()
ffi.cdef("double cbrt(double);")
cbrt = ffi.dlopen(ctypes.util.find_library("m")).cbrt

@numba.njit
def cube_root(x):  # a cffi function, typed through numba's cffi support
    return cbrt(x)

c = blas(np.linspace(0.1, 1.0, 7), np.linspace(-1.0, 2.0, 7))
import scipy.linalg  # the user's own import of what the probe deferred
out["results"] = [v.hex() for v in c] + [cube_root(2.0).hex()]
out["after"] = [arraymath._HAVE_BLAS, cffi_utils.SUPPORTED, scipy.linalg.norm([3.0, 4.0])]
print(json.dumps(out))
"""


def test_deferred_numba_probes_are_not_run_at_start_up_and_answer_as_numba_does(
        tmp_path) -> None:
    """A command's process defers numba's probes of scipy's BLAS and cffi: its first kernel
    imports neither, and a kernel that needs them compiles to the same results as in a
    process that probed at start-up (and the user's own ``import scipy.linalg`` works)."""
    import json
    import subprocess
    import sys

    import pytest

    for package in ("scipy.linalg", "cffi", "pycparser"):  # what numba's probes look for
        pytest.importorskip(package)
    (tmp_path / "first_kernel.py").write_text(
        "import numba\n\n@numba.njit(cache=True)\ndef total(a):\n    return a.sum()\n")
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}
    runs = {how: json.loads(subprocess.run([sys.executable, "-c", _PROBED, how, str(tmp_path)],
                                           check=True, capture_output=True, text=True,
                                           env=env, timeout=300).stdout)
            for how in ("numba", "deferred")}  # the first compiles `total` into the cache
    deferred, plain = runs["deferred"], runs["numba"]
    assert deferred["loaded"] == [] and deferred["flags"] == ["_LazyProbe", "_LazyProbe"]
    assert plain["loaded"] == ["pycparser", "scipy.linalg"]
    assert plain["flags"] == ["bool", "bool"]
    assert deferred["results"] == plain["results"]
    assert deferred["after"] == plain["after"] == [True, True, 5.0]


def test_a_library_callers_process_keeps_numbas_start_up_and_its_collector(tmp_path):
    """Only the command's own process defers numba's probes and freezes its set-up: a
    library caller's train() leaves ``sys.meta_path`` and the collector as they were."""
    import gc
    import sys

    from terascale.linear import train

    (tmp_path / "d.vw").write_text("1 |a x y\n-1 |a y z\n")
    finders, frozen = list(sys.meta_path), gc.get_freeze_count()
    train(str(tmp_path / "d.vw"), bits=12, holdout=0.0, cache=False)
    assert list(sys.meta_path) == finders and gc.get_freeze_count() == frozen
