"""Workers with little or no data of their own (an empty shard, one line, only bad lines,
a shard read from its cache beside one read as text) take part in every collective the
others call: each run ends with exit 0 (or the one clear error) and the same model on
every rank and run. The quick cases run in CI; ``TERASCALE_LITTLE_DATA_FULL=1`` (``make
test-little-data``) runs every flag combination."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from terascale.cli import main
from terascale.linear import parse_lines, train
from terascale.testing import run_workers

FULL = os.environ.get("TERASCALE_LITTLE_DATA_FULL") == "1"

LINES = ["1 |a x y", "-1 |a z w", "1 |a x", "-1 |b q", "1 |a y z"]


def _linear(capfd, *args: str) -> tuple[int, str]:
    """``terascale linear ARGS`` in this process (``-n`` still starts real workers)."""
    capfd.readouterr()
    code = main(["linear", *args])
    out, err = capfd.readouterr()
    return code, out + err


@pytest.mark.parametrize("every", [None, "1"])
def test_a_shard_read_from_its_cache_beside_one_read_as_text(tmp_path, capfd, every):
    # a run whose cache of one shard is gone (an interrupted run, an evicted entry): that
    # worker parses its text while the others read their caches, and every collective
    # still meets; the model is the one every cache gives
    data = tmp_path / "five.vw"
    data.write_text("\n".join(LINES) + "\n")
    cache = tmp_path / "cache"
    flags = ["-n", "2", "--passes", "3", "-c", "--cache-dir", str(cache), "-b", "12"]
    if every:
        flags += ["--average-every", every]
    models = []
    for k in range(2):
        if k == 1:  # one shard's entry removed before the second run
            entries = sorted(cache.iterdir())
            assert len(entries) == 2  # one per shard
            shutil.rmtree(entries[0])
        model = tmp_path / f"m{k}"
        code, out = _linear(capfd, "train", str(data), *flags, "-f", str(model))
        assert code == 0, out
        models.append(model.read_bytes())
    assert models[1] == models[0]  # one shard from its text, the others from their caches



# (options, whether one worker with every line learns the same model): averaging after a
# pass is not that where an idle worker holds the last pass's model (it weighs in)
CONFIGS = [
    ({"passes": 1}, True),
    ({"bfgs": 3}, True),
    ({"cg": 3}, True),
    ({"passes": 3, "average": "chain"}, True),
    ({"passes": 3}, False),
    ({"passes": 2, "average": "uniform"}, False),
    ({"passes": 3, "holdout": 0.5}, False),
    ({"passes": 2, "average_every": 1}, False),
    ({"passes": 2, "average_every": 2, "l1": 1e-3, "l2": 1e-3}, False),
    ({"passes": 2, "loss": "logistic"}, False),
]


def _fits(comm, shards, configs):
    """Every config in turn in one job, on this rank's lines of ``shards``."""
    out = []
    for opts, _ in configs:
        data = parse_lines(shards[comm.rank], bits=10, quadratic=["ab"])
        out.append(train(data, comm=comm, **opts).dense())
    return out


@pytest.mark.parametrize("shards", [[LINES[:1], [], []], [[], LINES[:2], []],
                                    [LINES[:1], [], LINES[1:2]]])
def test_workers_without_data_end_with_every_rank_holding_the_same_model(shards):
    got = run_workers(_fits, 3, args=(shards, CONFIGS), timeout=180)
    lines = [x for s in shards for x in s]
    for k, (opts, alone) in enumerate(CONFIGS):
        for rank in (1, 2):
            np.testing.assert_array_equal(got[rank][k], got[0][k], err_msg=str(opts))
        assert np.any(got[0][k] != 0), opts
        if alone and sum(1 for s in shards if s) == 1:
            one = train(parse_lines(lines, bits=10, quadratic=["ab"]), **opts).dense()
            np.testing.assert_array_equal(got[0][k], one, err_msg=str(opts))


def _empty_job(comm, configs):
    for opts, _ in configs:
        try:
            train(parse_lines([], bits=10), comm=comm, **opts)
        except Exception as e:  # noqa: BLE001 (the error is the result)
            out = f"{type(e).__name__}: {e}"
        else:
            out = "trained"
        yield out


def _empty_fits(comm, configs):
    return list(_empty_job(comm, configs))


def test_a_job_with_no_example_anywhere_fails_alike_on_every_rank():
    got = run_workers(_empty_fits, 3, args=(CONFIGS,), timeout=180)
    for rank in got:
        assert rank == got[0]
    for msg in got[0]:
        assert msg.startswith("DataError: <lines>: no labelled examples to train on"), msg


def _vw(capfd, *args: str) -> tuple[int, str]:
    """``terascale vw ARGS`` in this process (``-n`` still starts real workers)."""
    capfd.readouterr()
    code = main(["vw", *args, "--quiet"])
    out, err = capfd.readouterr()
    return code, out + err


# terascale vw's flags on 1 or 2 lines for 3 workers (and 2): every run ends with exit 0;
# where one worker holds every line, the model is the one of the runs named: "1" one
# worker's (VW's online learner on every line, or VW's BFGS, whose sums over the workers
# then add zeros)
VW_CASES = [
    (["--bfgs", "--passes", "3", "-c", "-k", "--predict_only_model"], "1"),
]
VW_FULL = [
    (["--passes", "3", "-c", "-k", "--holdout_period", "2", "--early_terminate", "1"], None),
    ([], "1"),
    (["--passes", "3", "-c", "-k"], None),
    (["-q", "ab"], "1"),
    (["--loss_function", "logistic"], "1"),
    (["--passes", "3", "-c", "-k", "--holdout_period", "2"], None),
    (["--bfgs", "--passes", "3", "-c", "-k", "-q", "ab", "--predict_only_model"], "1"),
    (["--oaa", "3"], "1"),
    (["--oaa", "3", "--passes", "2", "-c", "-k"], None),
]


@pytest.mark.parametrize("lines", [1, 2] if FULL else [1])
def test_terascale_vw_on_fewer_lines_than_workers(tmp_path, capfd, lines):
    data = tmp_path / "d.vw"
    data.write_text("".join(f"{x}\n" for x in ["1 |a x y", "2 |b z w"][:lines]))
    for flags, same_as in VW_CASES + (VW_FULL if FULL else []):
        models = {}
        for n in ("3", same_as) if same_as else ("3",):
            model = tmp_path / f"m{n}"
            code, out = _vw(capfd, "-n", n, "-d", str(data), *flags, "-f", str(model))
            assert code == 0, (flags, n, out)
            models[n] = model.read_bytes()
        if same_as and lines == 1:
            assert models["3"] == models[same_as], flags


def test_terascale_vw_with_a_shard_of_bad_lines_only(tmp_path, capfd):
    # --skip-bad: worker 0's shard is one bad line (a negative importance weight, which
    # terascale vw refuses), worker 1's one good line
    data = tmp_path / "bad.vw"
    data.write_text("1 -1 |a x\n1 |a y\n")
    code, out = _vw(capfd, "-n", "2", "-d", str(data), "--skip-bad", "--passes", "2", "-c",
                    "-k", "-f", str(tmp_path / "m"))
    assert code == 0, out
    # without --skip-bad the bad line is an error that names it (file and line)
    code, out = _vw(capfd, "-n", "2", "-d", str(data))
    assert code != 0 and "bad.vw" in out and "line 1" in out, out


@pytest.mark.parametrize("flags", [[], ["--oaa", "3"], ["--oaa", "3", "-n", "2"]])
def test_terascale_vw_skips_bad_lines_and_counts_them(tmp_path, capfd, flags):
    # --skip-bad with one worker (plain and --oaa) and with --oaa on two: the bad line (a
    # negative importance weight) is counted, told of and skipped, the run learns from
    # the rest and ends with exit 0
    data = tmp_path / "bad.vw"
    data.write_text("1 -1 |a x\n2 |a y\n3 |a z\n")
    capfd.readouterr()
    code = main(["vw", "-d", str(data), "--skip-bad", *flags])
    out, err = capfd.readouterr()
    assert code == 0, out + err
    assert "number of examples = 2" in err, err
    assert "skipped 1 bad lines (--skip-bad)\n" in err, err
