"""The TCP link model: busiest-link bytes of each schedule by hand, times, the fit, the
recorded constants and the command line."""

from __future__ import annotations

import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from terascale._errors import ConfigError
from terascale.collectives import ALLREDUCE
from terascale.sim import links, tcp_goodput
from terascale.sim.links import LinkCost, link_time, schedule

IDEAL = LinkCost(alpha=0.0, **{f"eff_{k}": 1.0 for k in links.KINDS})


@pytest.mark.parametrize(("algorithm", "hosts", "per_host", "link", "kind"), [
    ("ring", 4, 1, 1.5, "single"),            # 2 (p-1)/p
    ("ring", 2, 2, 1.5, "single"),            # one cross-host hop per host: as 4 hosts
    ("hierarchical", 2, 2, 1.0, "single"),    # a ring of 2 leaders
    ("halving_doubling", 2, 1, 1.0, "single"),
    ("halving_doubling", 4, 1, 1.5, "halving_doubling"),
    ("halving_doubling", 3, 1, 4 / 3, "single"),  # one radix-3 step, as a ring at these sizes
    ("halving_doubling", 6, 1, 5 / 3, "halving_doubling"),  # 2 x 3: the ring's bytes
    ("halving_doubling", 2, 2, 1.0, "shared_nic"),  # half inside hosts, both cross with 1/4
    ("tree", 2, 1, 1.0, "single"),
    ("tree", 4, 1, 2.0, "tree"),              # root: two children; rank 1: parent + child
    ("tree", 6, 1, 3.0, "tree"),              # rank 1: parent and two children
    ("tree", 2, 2, 2.0, "tree"),              # edges 0-2 and 1-3 both leave host 0
])
def test_busiest_link_by_hand(algorithm: str, hosts: int, per_host: int, link: float,
                              kind: str) -> None:
    s = schedule(algorithm, hosts, per_host)
    assert s["link"] == pytest.approx(link)
    assert s["kind"] == kind


def test_time_is_rounds_alpha_plus_busiest_link_at_goodput() -> None:
    m, rate = 16 << 20, 1e8
    g = tcp_goodput(rate, framing=14)
    assert link_time("ring", m, 4, rate, IDEAL) == pytest.approx(1.5 * m / g)
    cost = replace(IDEAL, alpha=1e-3, eff_single=0.5)
    assert link_time("ring", m, 4, rate, cost) == pytest.approx(6e-3 + 3 * m / g)
    # the tree: k = 2 chunks per chunk through the busiest link, plus its pipeline's fill
    fill = schedule("tree", 4)["fill"] * (256 << 10)
    assert link_time("tree", m, 4, rate, IDEAL) == pytest.approx((2 * m + fill) / g)
    # two ranks, one chunk: the tree's swap, one round and the vector once each way
    assert link_time("tree", 4096, 2, rate, cost) == pytest.approx(1e-3 + 4096 / g / 0.5)
    assert link_time("tree", m, 2, rate, cost) > 2e-3  # several chunks: the tree again
    # hierarchical adds the shared-memory phase: a little more than its leaders' ring
    hier = link_time("hierarchical", m, 2, rate, IDEAL, per_host=2)
    assert m / g < hier < 1.01 * m / g
    assert link_time("ring", m, 1, rate, IDEAL) == 0.0
    with pytest.raises(ValueError, match="shm"):
        link_time("shm", m, 2, rate, IDEAL)


def _report(cost: LinkCost, hosts: int, per_host: int, rate: float) -> dict:
    algos = [a for a, s in ALLREDUCE.items()  # every algorithm the link model prices here
             if s.schedule and s.differs_on(hosts, per_host)]
    rows = [{"system": f"ours:{a}", "bytes": m,
             "median_s": link_time(a, m, hosts, rate, cost, per_host=per_host)}
            for a in algos for m in (1 << 20, 4 << 20, 16 << 20)]
    return {"hosts": hosts, "per_host": per_host, "link_bits": rate, "results": rows}


def test_fit_recovers_the_constants_it_was_given() -> None:
    truth = LinkCost(alpha=3e-4, eff_single=0.97, eff_halving_doubling=0.8,
                     eff_shared_nic=0.9, eff_tree=0.7)
    reps = [_report(truth, h, q, r) for h, q in ((2, 1), (4, 1), (6, 1), (2, 2))
            for r in (1e8, 2e8)]
    out = links.fit(reps, check=[_report(truth, 3, 1, 1e8)])
    got = out["cost"]
    assert got["alpha"] == pytest.approx(3e-4, rel=1e-3)
    for kind in links.KINDS:
        assert got[f"eff_{kind}"] == pytest.approx(getattr(truth, f"eff_{kind}"), abs=1e-3)
    assert all(abs(p["error"]) < 1e-3 for p in out["points"])
    assert sum(p["held_out"] for p in out["points"]) == 9
    table = links.format_fit(out)
    assert "| 100 Mbit/s | 3 x 1 | 16 MiB | tree |" in table and "(held out)" in table


def test_a_held_alpha_is_kept_and_only_the_efficiencies_are_fitted() -> None:
    truth = LinkCost(alpha=3e-4, eff_single=0.97, eff_halving_doubling=0.8,
                     eff_shared_nic=0.9, eff_tree=0.7)
    reps = [_report(truth, h, q, 1e8) for h, q in ((2, 1), (4, 1), (6, 1), (2, 2))]
    got = links.fit(reps, alpha=3e-4)["cost"]
    assert got["alpha"] == 3e-4
    for kind in links.KINDS:
        assert got[f"eff_{kind}"] == pytest.approx(getattr(truth, f"eff_{kind}"), abs=1e-3)
    # A wrong alpha moves the efficiencies instead; none is fitted above 1.
    low = links.fit(reps, alpha=0.0)["cost"]
    assert low["alpha"] == 0.0 and low["eff_single"] < 0.97
    high = links.fit([_report(LinkCost(alpha=0.0, eff_single=1.0), 2, 1, 1e8)], alpha=0.0)
    assert high["cost"]["eff_single"] <= 1.0
    with pytest.raises(ValueError, match="alpha"):
        links.fit(reps, alpha=float("nan"))


def test_the_recorded_constants_load_and_a_bad_file_is_named(tmp_path: Path) -> None:
    cost = links.recorded()
    assert 0 < cost.eff_halving_doubling <= cost.eff_single <= 1.0 and cost.alpha >= 0
    assert "terascale bench allreduce --cluster" in cost.source
    bad = tmp_path / "c.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match=str(bad)):
        links.recorded(str(bad))
    bad.write_text(json.dumps({"alpha": 1e-4, "eff_single": 0}))
    with pytest.raises(ConfigError, match="efficiencies"):
        links.recorded(str(bad))


def test_simulate_fit_links_writes_a_cost_file_bench_can_read(python: str,
                                                              tmp_path: Path) -> None:
    truth = LinkCost(alpha=2e-4, eff_single=0.95, eff_halving_doubling=0.85, eff_tree=0.75)
    # (2 and 4 hosts: no fold, no shared NIC; those efficiencies keep their defaults)
    paths = []
    for hosts in (2, 4):
        paths.append(tmp_path / f"k{hosts}.json")
        paths[-1].write_text(json.dumps(_report(truth, hosts, 1, 1e8)))
    out = tmp_path / "cost.json"
    p = subprocess.run([python, "-m", "terascale", "simulate", "--fit-links", *map(str, paths),
                        "--link-cost-out", str(out)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "| 100 Mbit/s | 4 x 1 | 4 MiB | halving_doubling |" in p.stdout
    assert links.recorded(str(out)).eff_halving_doubling == pytest.approx(0.85, abs=1e-3)
    p = subprocess.run([python, "-m", "terascale", "simulate", "--fit-links",
                        str(tmp_path / "missing.json")], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0 and "--fit-links" in p.stderr and "missing.json" in p.stderr
