"""terascale.linear.kernels: the per-example cost the planner builds on (tiny sizes)."""

from __future__ import annotations

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
