"""``terascale run`` binds each of at most as many workers as cores to a block of its own
(as MPI does), says so to the spin waits, and binds nothing when told not to or when the
workers outnumber the cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

_REPORT = r"""
import json, os
from terascale.transport import _spin
print("AFF " + json.dumps({"rank": int(os.environ["TERASCALE_RANK"]),
                           "cores": sorted(os.sched_getaffinity(0)),
                           "spin_cores": _spin.CORES, "bound": _spin.BOUND}), flush=True)
"""

_MINE = sorted(os.sched_getaffinity(0))


def _run(n: int, *, env: dict[str, str] | None = None, cores: list[int] | None = None) -> list[dict]:
    pin = ["taskset", "-c", ",".join(map(str, cores))] if cores else []
    argv = [*pin, sys.executable, "-m", "terascale", "run", "-n", str(n), sys.executable,
            "-c", _REPORT]
    e = {k: v for k, v in os.environ.items() if not k.startswith("TERASCALE_")}
    out = subprocess.run(argv, env={**e, **(env or {})}, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [json.loads(line.split("AFF ", 1)[1]) for line in out.stdout.splitlines()
            if "AFF " in line]
    return sorted(rows, key=lambda r: r["rank"])


@pytest.mark.skipif(len(_MINE) < 2, reason="needs two cores")
def test_two_workers_on_two_cores_get_a_core_each_and_spin_as_if_unbound() -> None:
    rows = _run(2, cores=_MINE[:2])
    assert [r["cores"] for r in rows] == [[_MINE[0]], [_MINE[1]]]
    assert all(r["spin_cores"] == 2 and r["bound"] for r in rows), rows


@pytest.mark.skipif(len(_MINE) < 2, reason="needs two cores")
def test_no_binding_when_told_or_when_workers_outnumber_cores() -> None:
    told = _run(2, cores=_MINE[:2], env={"TERASCALE_NO_CPU_BIND": "1"})
    assert [r["cores"] for r in told] == [_MINE[:2]] * 2
    crowded = _run(3, cores=_MINE[:2])
    assert [r["cores"] for r in crowded] == [_MINE[:2]] * 3
    assert not any(r["bound"] for r in told + crowded)
    assert {r["spin_cores"] for r in told + crowded} == {2}


def test_a_bad_opt_out_value_is_a_clear_error() -> None:
    argv = [sys.executable, "-m", "terascale", "run", "-n", "2", sys.executable, "-c", "0"]
    out = subprocess.run(argv, env={**os.environ, "TERASCALE_NO_CPU_BIND": "maybe"},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "TERASCALE_NO_CPU_BIND='maybe' must be 1 or 0" in out.stderr, out.stderr[-2000:]
