"""An algorithm from outside terascale, registered in one call, is complete: selectable by
name in ``Communicator.allreduce``, correct in the collective correctness matrix, timed by
``terascale bench allreduce --algorithms`` and priced by ``terascale simulate`` -- with no
edit anywhere in terascale (the algorithm is ``tests/collectives/_direct_allreduce.py``).

World sizes 1-9 with ``TERASCALE_MATRIX_FULL=1`` (``make test-matrix``); a fast subset
otherwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import _direct_allreduce
import numpy as np
import pytest
from _allreduce_check import check_matrix

from terascale import ConfigError
from terascale.collectives import ALLREDUCE, allreduce_names, allreduce_spec, register_algorithm
from terascale.collectives.ring import RingAllreduce
from terascale.sim import CostParams, predict, simulate
from terascale.sim.calibrate import model_time
from terascale.testing import run_threads, run_workers

NAME = _direct_allreduce.NAME
# Importing the module registered it; the fixture registers it for each test instead, so
# that the lists other test modules draw from the registry stay the built-in ones.
ALLREDUCE.pop(NAME, None)
HERE = Path(__file__).resolve().parent
FULL = os.environ.get("TERASCALE_MATRIX_FULL", "") not in ("", "0")
SIZES = range(1, 10) if FULL else (3, 5)


@pytest.fixture
def direct() -> Iterator[str]:
    """``"direct"`` registered for the test (and the workers it forks), removed after."""
    _direct_allreduce.register()
    try:
        yield NAME
    finally:
        ALLREDUCE.pop(NAME, None)


@pytest.fixture
def plugin_env(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """What a process started afresh needs to know the algorithm: its module on the path
    and named in TERASCALE_ALGORITHMS."""
    path = os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("TERASCALE_ALGORITHMS", _direct_allreduce.__name__)
    return {**os.environ}


def _by_name(comm, name: str) -> list[np.ndarray]:
    x = np.arange(1, 1001, dtype=np.float64) / (comm.rank + 3)
    out = np.empty_like(x)
    return [comm.allreduce(x, algorithm=name), comm.allreduce(x, op="max", algorithm=name),
            comm.allreduce_async(x, algorithm=name).wait(),
            comm.allreduce(x, out=out, algorithm=name).copy()]


def test_selectable_by_name(direct: str) -> None:
    assert direct in allreduce_names() and allreduce_spec(direct).load() is \
        _direct_allreduce.DirectAllreduce
    n = 4
    results = run_workers(_by_name, n, args=(direct,))
    stack = np.stack([np.arange(1, 1001, dtype=np.float64) / (r + 3) for r in range(n)])
    want = stack[0] + stack[1] + stack[2] + stack[3]  # the rank order the algorithm folds in
    for res in results:
        assert res[0].tobytes() == want.tobytes()  # bitwise: folded in rank order
        np.testing.assert_array_equal(res[1], stack.max(axis=0))
        assert res[2].tobytes() == res[3].tobytes() == want.tobytes()


@pytest.mark.parametrize("n", SIZES)
def test_in_the_correctness_matrix(direct: str, n: int) -> None:
    check_matrix(n, direct, runs=2 if FULL else 1, runner=run_threads)


def test_in_the_correctness_matrix_on_processes(direct: str) -> None:
    # fresh processes find it through TERASCALE_ALGORITHMS
    check_matrix(3, direct, big=False, runs=2)


def test_priced_by_the_model_calibration_and_simulator(direct: str) -> None:
    c = CostParams()
    m, p = 64e6, 1000
    want = 2 * (p - 1) * c.alpha + 2 * (p - 1) / p * m * c.beta + (p - 1) / p * m * c.gamma
    assert predict(direct, m, p, c) == pytest.approx(want)
    assert simulate(direct, m, p, c).time == pytest.approx(want)
    late = np.zeros(p)
    late[7] = 0.5
    assert simulate(direct, m, p, c, start=late).time == pytest.approx(0.5 + want)
    assert np.isinf(simulate(direct, m, p, c, fail=(3, 1e-3)).finish).all()
    assert model_time(direct, 1 << 20, 2, c) == pytest.approx(
        _direct_allreduce.direct_cost(1 << 20, 1, 2, c))


def test_in_terascale_simulate(plugin_env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    proc = subprocess.run([sys.executable, "-m", "terascale", "simulate", "--nodes", "16",
                           "--bytes", "1MB", "--json", str(out)], env=plugin_env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"| {NAME} |" in proc.stdout
    row = json.loads(out.read_text())["algorithms"][NAME]
    assert row["tcp_s"] is None  # no event schedule: no link model either
    assert row["model_s"] == pytest.approx(row["simulated_s"]) and row["model_s"] > 0


def test_in_bench_allreduce(plugin_env: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "terascale", "bench", "allreduce", "-n", "3",
                           "--sizes", "4K,64K", "--iters", "0.05", "--vs", "",
                           "--algorithms", f"{NAME},ring", "--json", str(out),
                           "--no-progress"], env=plugin_env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {(r["system"], r["bytes"]): r for r in json.loads(out.read_text())["results"]}
    for size in (4096, 65536):
        assert rows[(f"ours:{NAME}", size)]["median_s"] > 0
        assert rows[("ours:ring", size)]["median_s"] > 0


def test_registration_is_checked(direct: str) -> None:
    assert register_algorithm(direct, _direct_allreduce.DirectAllreduce,
                              cost=_direct_allreduce.direct_cost,
                              summary=allreduce_spec(direct).summary) is ALLREDUCE[direct]
    cases = [
        (dict(name=direct, target=RingAllreduce), "already registered"),
        (dict(name="ring", target=RingAllreduce), "built in"),
        (dict(name="auto", target=RingAllreduce), "identifier other than 'auto'"),
        (dict(name="x1", target=RingAllreduce, auto="small"), "role"),
        (dict(name="x2", target=RingAllreduce, placement="rack"), "placement"),
        (dict(name="x3", target=RingAllreduce, schedule="spiral"), "schedule"),
        (dict(name="x4", target=object), "for_call"),
        (dict(name="x6", target=RingAllreduce, auto="large", power_of_two=True),
         "every world size"),
        (dict(name="x5", target="no_colon"), "module:attribute"),
    ]
    for kw, match in cases:
        with pytest.raises(ConfigError, match=match):
            register_algorithm(**kw)
    assert not {"x1", "x2", "x3", "x4", "x5", "x6"} & set(ALLREDUCE)


def test_power_of_two_constraint(direct: str) -> None:
    spec = register_algorithm("direct_pow2", _direct_allreduce.DirectAllreduce,
                              power_of_two=True)
    try:
        assert spec.runs_with(4) and not spec.runs_with(3)

        def call(comm) -> str:
            try:
                comm.allreduce(np.ones(3), algorithm="direct_pow2")
            except ConfigError as e:
                return str(e)
            return "ran"

        assert all("power of two" in r for r in run_workers(call, 3))
        assert run_workers(call, 2) == ["ran", "ran"]
    finally:
        ALLREDUCE.pop("direct_pow2", None)


def test_algorithm_modules_from_the_environment(tmp_path: Path) -> None:
    from terascale._env import read_algorithm_modules

    assert read_algorithm_modules({}) == ()
    assert read_algorithm_modules({"TERASCALE_ALGORITHMS": " a.b , c "}) == ("a.b", "c")
    with pytest.raises(ConfigError, match="TERASCALE_ALGORITHMS: 'a-b'"):
        read_algorithm_modules({"TERASCALE_ALGORITHMS": "a-b"})
    # a module that cannot be imported: a ConfigError naming it, at the first lookup
    code = ("from terascale.collectives import allreduce_spec\n"
            "try:\n    allreduce_spec('direct')\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n")
    env = {**os.environ, "TERASCALE_ALGORITHMS": "no_such_algorithm_module"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60, cwd=tmp_path)
    assert "ConfigError TERASCALE_ALGORITHMS: cannot import 'no_such_algorithm_module'" in \
        proc.stdout, proc.stdout + proc.stderr
