"""``terascale simulate --paper`` plans with recorded per-example costs (no timing at run
time), overridable with --example-cost or --calibrate."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from terascale._errors import ConfigError
from terascale.sim.plans import TerascalePlan, recorded_example_cost, terascale_plan


def test_the_recorded_cost_ships_with_the_package_and_plans_the_same_every_time() -> None:
    cost = recorded_example_cost()
    assert cost.online_s > 0 and cost.gradient_s > 0 and cost.features_per_example == 124
    assert cost.source.startswith("recorded")
    small = TerascalePlan(nodes=8, examples=1e6, features=1.24e8, params=1 << 16)
    assert terascale_plan(cost, small) == terascale_plan(recorded_example_cost(), small)


def test_an_example_cost_file_overrides_it(tmp_path: Path) -> None:
    f = tmp_path / "cost.json"
    f.write_text(json.dumps({"online_s": 2e-6, "gradient_s": 1e-6, "features_per_example": 50,
                             "source": "a quiet machine"}))
    assert recorded_example_cost(str(f)).online_s == 2e-6
    f.write_text(json.dumps({"online_s": 2e-6}))
    with pytest.raises(ConfigError, match="cost.json.*gradient_s"):
        recorded_example_cost(str(f))
    f.write_text(json.dumps({"online_s": -1, "gradient_s": 1e-6, "features_per_example": 5,
                             "source": "x"}))
    with pytest.raises(ConfigError, match="positive"):
        recorded_example_cost(str(f))


def test_calibrate_goes_with_paper(python: str) -> None:
    p = subprocess.run([python, "-m", "terascale", "simulate", "--calibrate"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "--paper" in p.stderr


def test_paper_report_takes_no_measurement_and_answers_the_same(monkeypatch, capsys) -> None:
    import terascale.sim.plans as plans
    from terascale.sim.report import paper_report

    def no(*_a: object, **_k: object) -> None:
        raise AssertionError("--paper timed the kernels")

    monkeypatch.setattr(plans, "measure_example_cost", no)
    first = paper_report()
    text = capsys.readouterr().out
    assert json.dumps(paper_report(), default=str) == json.dumps(first, default=str)
    assert capsys.readouterr().out == text and "recorded" in text
