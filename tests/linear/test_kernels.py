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
