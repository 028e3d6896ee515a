"""``terascale bench costs``, ``failures`` and ``engines`` at tiny scale (real workers)."""

from __future__ import annotations

import json

import pytest

from terascale.cli import main


def test_costs_table(tmp_path, capsys) -> None:
    out = tmp_path / "costs.json"
    assert main(["bench", "costs", "--sizes", "4K", "--n", "2", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert {r["layout"] for r in rows} == {"one host", "2 hosts", "1 rank/host"}
    for r in rows:
        assert r["best"] in r["median_s"] and all(t > 0 for t in r["median_s"].values())
    assert "| 2 | one host | 4 KiB |" in capsys.readouterr().out


def test_failures_detected_and_timed(tmp_path) -> None:
    out = tmp_path / "failures.json"
    assert main(["bench", "failures", "--algorithms", "ring", "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["detect_s"]["ring"]) == {"rank 0", "rank 1", "rank 2"}
    assert all(t >= 0 for t in report["detect_s"]["ring"].values())  # after the kill
    assert report["mismatch"]["raised"] == ["CollectiveMismatch"]


def test_engines_local_row(tmp_path) -> None:
    out = tmp_path / "engines.json"
    assert main(["bench", "engines", "--only", "local", "--reps", "1", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["engine"].startswith("terascale run") and row["failed"] > 0 and row["clean"] > 0


@pytest.mark.parametrize("argv, flag", [(["costs", "--sizes", "6"], "--sizes"),
                                        (["costs", "--n", "1"], "--n"),
                                        (["failures", "--algorithms", "bogus"], "--algorithms"),
                                        (["engines", "--only", "linear,ray"], "--only"),
                                        (["allreduce", "--iters", "0"], "--iters"),
                                        (["allreduce", "--cluster", "2", "--cluster-timeout",
                                          "0"], "--cluster-timeout"),
                                        (["allreduce", "--cluster-timeout", "nan"],
                                         "--cluster-timeout")])
def test_bad_options_name_the_flag(argv: list[str], flag: str, capsys) -> None:
    assert main(["bench", *argv]) == 2
    assert flag in capsys.readouterr().err


def test_every_benchmark_is_a_bench_subcommand(capsys) -> None:
    # one home: every module of terascale.bench that defines a benchmark is reachable
    import argparse
    import importlib
    import pkgutil

    import terascale.bench

    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    listed = capsys.readouterr().out
    for m in pkgutil.iter_modules(terascale.bench.__path__):
        module = importlib.import_module(f"terascale.bench.{m.name}")
        if hasattr(module, "add_bench_parser"):
            kinds = argparse.ArgumentParser().add_subparsers()
            module.add_bench_parser(kinds)
            for name in kinds.choices:
                assert name in listed, f"{module.__name__}: {name} not in terascale bench --help"
