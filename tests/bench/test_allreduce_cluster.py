"""``terascale bench allreduce --cluster``: busbw over emulated links next to the model,
and the model's TCP/IP goodput."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from terascale.sim import tcp_goodput
from terascale.testing import cluster as tc

OK, WHY = tc.available()


def test_tcp_goodput_counts_headers_and_framing() -> None:
    assert tcp_goodput(1e9) == pytest.approx(1e9 / 8 * 1448 / 1538)
    assert tcp_goodput(1e8, framing=14) / (1e8 / 8) == pytest.approx(0.956, abs=1e-3)
    assert tcp_goodput(1e9, mtu=9000) > tcp_goodput(1e9)
    with pytest.raises(ValueError, match="mtu"):
        tcp_goodput(1e9, mtu=40)


@pytest.mark.skipif(not OK, reason=f"no emulated hosts here: {WHY}")
def test_bench_across_emulated_hosts(python: str, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    p = subprocess.run([python, "-m", "terascale", "bench", "allreduce", "--cluster", "2",
                        "--link", "200Mbit", "--sizes", "256K", "--iters", "0.1",
                        "--algorithms", "ring", "--json", str(out), "--calibrate",
                        "--cluster-timeout", "60"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rep = json.loads(out.read_text())
    assert rep["hosts"] == 2 and rep["link_bits"] == 2e8 and not rep["failures"]
    (row,) = rep["results"]
    assert row["system"] == "ours:ring" and row["bytes"] == 256 << 10
    assert row["link_fraction"] > 0 and 0 < row["model_link_fraction"] < 1
    assert "busbw/link" in p.stdout and "ring" in p.stdout
    # --calibrate fits the link model to this run: one point, predicted as measured
    assert "TCP link model fitted to this run" in p.stdout
    assert "| 200 Mbit/s | 2 x 1 | 256 KiB | ring |" in p.stdout
    assert rep["link_fit"]["points"][0]["measured_s"] == row["median_s"]


def _mpi_why_not() -> str | None:
    from terascale.bench._cluster_mpi import mpirun_unavailable

    return mpirun_unavailable()


@pytest.mark.skipif(not OK, reason=f"no emulated hosts here: {WHY}")
@pytest.mark.skipif(_mpi_why_not() is not None, reason=f"no Open MPI here: {_mpi_why_not()}")
def test_bench_vs_open_mpi_across_emulated_hosts(python: str, tmp_path: Path) -> None:
    # Open MPI's TCP BTL, one rank per emulated host, in the same run as ours: the 4 KiB
    # round-trip line compares the two (no timing asserted, only that both rows exist).
    out = tmp_path / "r.json"
    p = subprocess.run([python, "-m", "terascale", "bench", "allreduce", "--cluster", "2",
                        "--link", "10Gbit", "--sizes", "4K", "--iters", "0.05",
                        "--algorithms", "auto", "--vs", "mpi", "--json", str(out),
                        "--cluster-timeout", "45"],  # a stall ends in the bench's message
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    rep = json.loads(out.read_text())
    assert not rep["failures"], (rep["failures"], p.stdout + p.stderr)
    rows = {r["system"]: r for r in rep["results"]}
    assert set(rows) == {"ours:auto", "openmpi:tcp"}
    assert all(r["bytes"] == 4096 and r["n"] == 2 and r["median_s"] > 0 for r in rows.values())
    assert "4 KiB round trip between 2 hosts" in p.stdout and "vs mpi" in p.stdout


def test_mpirun_agent_reaches_only_this_runs_namespaces(tmp_path: Path) -> None:
    from terascale.bench._cluster_mpi import write_agent

    agent = write_agent(str(tmp_path), ["tsc-abc123-0", "tsc-abc123-1"])
    text = Path(agent).read_text()
    assert 'tscmpi-1) ns="tsc-abc123-1"' in text
    p = subprocess.run([agent, "-x", "tsc-abc123-0", "true"], capture_output=True, text=True,
                       timeout=10)  # a namespace's own name is not a host name here
    assert p.returncode == 2 and "not an emulated host" in p.stderr
    with pytest.raises(ValueError, match="namespace"):
        write_agent(str(tmp_path), ["tsc-0; rm -rf /"])
