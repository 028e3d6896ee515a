"""``terascale bench allreduce``: a tiny real run (ours and the installed peers), and helpers."""

from __future__ import annotations

import json

import pytest

from terascale.bench._allreduce_worker import iterations
from terascale.bench.allreduce import (
    available_peers,
    crossover,
    format_table,
    our_algorithms,
    parse_size,
)
from terascale.cli import main
from terascale.collectives.select import ALLREDUCE_ALGORITHMS
from terascale.sim.calibrate import calibrate, format_calibration


def test_sizes_and_iterations() -> None:
    assert parse_size("4K") == 4096
    assert parse_size("64KiB") == 65536
    assert parse_size("256MB") == 256_000_000  # SI: terascale._units
    assert parse_size("256MiB") == 256 << 20
    assert parse_size("1024") == 1024
    for bad in ("3", "ten", "0"):
        with pytest.raises(Exception, match="--sizes"):
            parse_size(bad)
    warm, timed = iterations(4096)
    assert warm >= 1 and timed == 100
    assert iterations(256 << 20) == (2, 10)


def test_crossover() -> None:
    rows = [("ours:tree", 1, 1.0), ("ours:ring", 1, 2.0), ("ours:tree", 2, 2.0),
            ("ours:ring", 2, 2.0), ("ours:tree", 4, 5.0), ("ours:ring", 4, 3.0),
            ("ours:tree", 8, 1.0), ("ours:ring", 8, 3.0)]  # a noisy win after the first loss
    report = {"sizes": [1, 2, 4, 8],
              "results": [{"system": s, "bytes": b, "median_s": t} for s, b, t in rows]}
    assert crossover(report) == 2
    report["results"][0]["median_s"] = 9.0
    assert crossover(report) is None


def test_algorithms_are_read_at_run_time() -> None:
    algos = our_algorithms()
    assert algos[-1] == "auto"
    assert set(algos) == set(ALLREDUCE_ALGORITHMS)


def test_smoke_run_with_peers(tmp_path, capsys) -> None:
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    code = main(["bench", "allreduce", "-n", "2", "--sizes", "4K,64K", "--iters", "0.05",
                 "--algorithms", "tree,ring", "--json", str(out), "--plot", str(png),
                 "--no-progress"])
    assert code == 0
    report = json.loads(out.read_text())
    systems = {r["system"] for r in report["results"]}
    expected = {"ours:tree", "ours:ring"}
    peers = available_peers()
    if peers["gloo"] is None:
        expected.add("gloo")
    if peers["mpi"] is None:
        expected |= {"mpi-shm", "mpi-tcp"}
    assert systems == expected
    assert len(report["results"]) == 2 * len(expected)
    for r in report["results"]:
        assert r["n"] == 2 and r["bytes"] in (4096, 65536) and r["iters"] >= 3
        assert r["min_s"] <= r["median_s"] <= r["p90_s"]
        assert r["busbw"] == pytest.approx(r["bytes"] / r["median_s"])  # 2(n-1)/n = 1 at n=2
    assert set(report["limits"]) == {"memcpy", "add", "tcp_one_way", "tcp_both_ways"}
    assert png.read_bytes()[:4] == b"\x89PNG"
    text = capsys.readouterr().out
    assert "| 4 KiB | ours:tree |" in text and "machine limits" in text
    assert "tree vs ring" in text and "tree_ring_crossover" in report
    if "gloo" in expected:
        assert "x gloo" in format_table(report)
    cal = calibrate(report)
    assert cal["checked"] == 2 and len(cal["points"]) == 4
    assert all(p["predicted_s"] > 0 for p in cal["points"])
    assert "alpha =" in format_calibration(cal)


def test_bad_flags() -> None:
    assert main(["bench", "allreduce", "-n", "1", "--no-progress"]) == 2
    assert main(["bench", "allreduce", "-n", "2", "--algorithms", "butterfly",
                 "--no-progress"]) == 2
    assert main(["bench", "allreduce", "-n", "2", "--vs", "nccl", "--no-progress"]) == 2


def test_encrypt_rows_time_plain_mac_and_aes_tcp(tmp_path, capsys) -> None:
    pytest.importorskip("cryptography")
    out = tmp_path / "r.json"
    code = main(["bench", "allreduce", "-n", "2", "--sizes", "4K,64K", "--iters", "0.05",
                 "--algorithms", "ring", "--vs", "", "--encrypt", "--json", str(out),
                 "--no-progress"])
    assert code == 0
    report = json.loads(out.read_text())
    assert {r["system"] for r in report["results"]} == {"ours:ring", "tcp:ring", "mac:ring",
                                                         "aes:ring"}
    text = capsys.readouterr().out
    assert "link security (every link TCP" in text
    assert "| 4 KiB | ring |" in text and "aes / tcp time" in text and "mac / tcp time" in text
    assert "x tcp:ring" not in text  # our own rows are not peers


def test_side_peers_not_installed_are_skipped(tmp_path, monkeypatch, capsys) -> None:
    from terascale import ConfigError
    from terascale.bench._peers import install_peer, peer_environ

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    peers = available_peers()
    assert all("--install-peers" in peers[p] for p in ("intelmpi", "mpich", "xgboost"))
    assert peers["openmpi"] == peers["mpi"]
    out = tmp_path / "r.json"
    code = main(["bench", "allreduce", "-n", "2", "--sizes", "4K", "--iters", "0.05",
                 "--algorithms", "shm", "--vs", "intelmpi,mpich,xgboost", "--json", str(out),
                 "--no-progress"])
    assert code == 0
    assert {r["system"] for r in json.loads(out.read_text())["results"]} == {"ours:shm"}
    assert "skipping intelmpi" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--install-peers"):
        install_peer("gloo")
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = peer_environ("intelmpi")
    assert env["I_MPI_FABRICS"] == "shm" and "PYTHONPATH" not in env
    assert env["PATH"].startswith(str(tmp_path / "terascale" / "peers" / "intelmpi" / "bin"))


@pytest.mark.parametrize("name", ["intelmpi", "mpich", "xgboost"])
def test_side_peer_is_timed_by_our_worker(name, tmp_path) -> None:
    """Runs where ``terascale bench allreduce --install-peers`` was run once (no network
    in tests): the MPI from PyPI in its own environment, under its own mpiexec; XGBoost's
    collective with its own tracker."""
    if available_peers()[name] is not None:
        pytest.skip(f"{name}: {available_peers()[name]}")
    out = tmp_path / "r.json"
    code = main(["bench", "allreduce", "-n", "2", "--sizes", "4K,64K", "--iters", "0.05",
                 "--algorithms", "shm", "--vs", name, "--json", str(out), "--no-progress"])
    assert code == 0
    rows = [r for r in json.loads(out.read_text())["results"] if r["system"] == name]
    assert [r["bytes"] for r in rows] == [4096, 65536]
    assert all(r["n"] == 2 and 0 < r["min_s"] <= r["median_s"] for r in rows)
