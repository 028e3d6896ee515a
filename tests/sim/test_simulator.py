"""The event simulator agrees with the model where the model applies, and adds what it misses."""

from __future__ import annotations

import numpy as np
import pytest

from terascale.cli import main
from terascale.collectives import ALLREDUCE
from terascale.sim import CostParams, predict, simulate, straggler_delays

C = CostParams(alpha=30e-6, beta=1e-9, gamma=2e-10, alpha_shm=2e-6, delta=1e-10)


@pytest.mark.parametrize("algo", ["ring", "halving_doubling"])
@pytest.mark.parametrize("p", [2, 3, 5, 8, 13])
def test_matches_model_without_stragglers(algo: str, p: int) -> None:
    for m in (4096, 1 << 20, 64 << 20):
        assert simulate(algo, m, p, C).time == pytest.approx(predict(algo, m, p, C), rel=1e-9)


def test_two_rank_tree_of_one_chunk_is_one_swap() -> None:
    m = 4096  # one latency, the vector once each way, one reduction (collectives/tree.py)
    assert simulate("tree", m, 2, C).time == pytest.approx(C.alpha + m * (C.beta + C.gamma))


@pytest.mark.parametrize("p", [2, 3, 7, 15])
def test_unpipelined_tree_matches_model_on_full_trees(p: int) -> None:
    for m in (4096, 1 << 20):
        assert simulate("tree", m, p, C, chunk=None).time == \
            pytest.approx(predict("tree", m, p, C, chunk=None), rel=1e-9)


@pytest.mark.parametrize("p", [2, 4, 16, 64])
def test_pipelined_tree_close_to_model(p: int) -> None:
    # The model adds transfer and reduction per chunk; the simulation overlaps them.
    m = 16 << 20
    ratio = simulate("tree", m, p, C).time / predict("tree", m, p, C)
    assert 0.7 < ratio <= 1.05


def test_hierarchical_matches_model() -> None:
    m = 8 << 20
    assert simulate("hierarchical", m, 8, C, per_host=4).time == \
        pytest.approx(predict("hierarchical", m, 8, C, per_host=4), rel=1e-9)


@pytest.mark.parametrize(("algo", "p"), [("ring", 7), ("tree", 7), ("halving_doubling", 8)])
def test_one_late_rank_delays_everyone_by_its_delay(algo: str, p: int) -> None:
    # Every rank needs the late rank's data, and the late rank still has all its own steps
    # to do once it arrives, so the allreduce ends exactly `delay` later. (With p = 7 the
    # halving/doubling fold of other ranks would overlap the wait: less than `delay`.)
    m = 4 << 20
    base = simulate(algo, m, p, C).time
    delay = 10 * base
    late = simulate(algo, m, p, C, start=straggler_delays(f"one:{delay}", p, None)).time  # type: ignore[arg-type]
    assert late == pytest.approx(base + delay, rel=1e-9)


def test_random_stragglers_cost_at_least_the_latest_arrival() -> None:
    p, m = 64, 1 << 20
    base = simulate("ring", m, p, C).time
    delays = straggler_delays("exp:2ms", p, np.random.default_rng(1))
    t = simulate("ring", m, p, C, start=delays).time
    assert t > base
    assert t >= delays.max() + 0.5 * base  # the last arrival must still do its own steps


def test_layout_ordered_halving_doubling_keeps_big_steps_off_shared_nics() -> None:
    """8 workers per host: the half, quarter and eighth steps stay inside the host, the 8
    workers share the NIC only on the last three (1/16 .. 1/64 each), so each NIC moves what
    one rank per host would -- textbook order (distance p/2 first) would push 8 half-vectors
    through it at once and cost several times the flat run."""
    m = 32 << 20
    flat = simulate("halving_doubling", m, 8, C, per_host=1).time
    shared = simulate("halving_doubling", m, 8, C, per_host=8).time  # 8 workers, one NIC
    assert flat < shared < 1.2 * flat


def test_node_failure_blocks_every_rank() -> None:
    for algo in (a for a, s in ALLREDUCE.items() if s.runs_on(8)):  # each event schedule
        q = 2 if ALLREDUCE[algo].schedule == "host segments" else 1
        res = simulate(algo, 1 << 20, 8, C, per_host=q, fail=(3, 0.0))
        assert res.blocked == 8 * q and res.time == float("inf")
    late = simulate("ring", 1 << 20, 8, C, fail=(3, 10.0))  # after the end: no effect
    assert late.blocked == 1  # only the dead rank itself


def test_straggler_specs() -> None:
    rng = np.random.default_rng(0)
    assert straggler_delays("none", 4, rng).tolist() == [0, 0, 0, 0]
    assert straggler_delays("one:5ms", 3, rng).tolist() == [0, 0, 0.005]
    assert (straggler_delays("frac:1.0:1ms", 5, rng) == 0.001).all()
    assert straggler_delays("lognormal:1ms:0.5", 100, rng).min() > 0
    with pytest.raises(ValueError):
        straggler_delays("gamma:3", 4, rng)


def test_simulate_command(tmp_path, capsys) -> None:
    png = tmp_path / "scaling.png"
    assert main(["simulate", "--nodes", "64", "--bytes", "16MB", "--link", "10Gbit",
                 "--stragglers", "exp:1ms", "--fail", "5@1ms", "--plot", str(png)]) == 0
    out = capsys.readouterr().out
    for algo in (a for a, s in ALLREDUCE.items() if s.differs_on(64, 1)):
        assert f"| {algo} |" in out
    assert "best:" in out and "64 of 64 ranks never finish" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["simulate", "--link", "fast"]) == 2
