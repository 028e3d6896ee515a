"""Multi-worker runs (real processes) and the command line end to end."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from _linear_data import vw_lines

from terascale.linear import LinearModel, parse_lines, train
from terascale.testing import run_workers

LINES = vw_lines(2400, seed=7)
OPTS = {"bits": 14, "holdout": 0, "l2": 1.0, "tol": 1e-13}


def _fit(comm, n, opts):
    shard = LINES[comm.rank * len(LINES) // n:(comm.rank + 1) * len(LINES) // n]
    m = train(parse_lines(shard, bits=14), comm=comm, **opts)
    return m.dense()


@pytest.mark.parametrize("n", [2, 3])
def test_workers_end_bitwise_identical_and_batch_matches_one_worker(n):
    one = train(parse_lines(LINES, bits=14), **OPTS, bfgs=200).dense()
    for extra in ({"bfgs": 200}, {"passes": 2, "average": "uniform"},
                  {"passes": 1, "average": "weighted", "cg": 100}):
        ws = run_workers(_fit, n, args=(n, {**OPTS, **extra}), timeout=120)
        for w in ws[1:]:
            np.testing.assert_array_equal(w, ws[0])  # bitwise identical on every worker
        assert np.any(ws[0] != 0)
        if "passes" not in extra or extra.get("cg"):
            np.testing.assert_allclose(ws[0], one, atol=2e-4)  # the same optimum


class _Result:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _cli(capfd, *args):
    """``terascale linear ARGS`` in this process (the same code path as the command, without
    paying the interpreter start-up for every call); ``-n`` still starts real workers."""
    from terascale.cli import main

    capfd.readouterr()
    code = main(["linear", *args])
    out, err = capfd.readouterr()
    return _Result(code, out, err)


def test_cli_train_predict_evaluate(tmp_path, capfd):
    train_p, test_p = tmp_path / "train.vw", tmp_path / "test.vw"
    train_p.write_text("\n".join(vw_lines(3000, seed=8)) + "\n")
    test_p.write_text("\n".join(vw_lines(500, seed=9)) + "\n")
    cache = str(tmp_path / "cache")
    model = str(tmp_path / "m.model")
    r = _cli(capfd, "train", str(train_p), "-b", "16", "-q", "ab", "--bfgs", "10", "-f", model,
             "--cache-dir", cache)
    assert r.returncode == 0, r.stderr
    assert "average" in r.stderr and "L-BFGS" in r.stderr  # progress lines
    assert os.listdir(cache)  # the shard was cached
    r = _cli(capfd, "evaluate", str(test_p), "-i", model, "--json")
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout)
    assert m["examples"] == 500 and m["auc"] > 0.75 and 0 < m["logloss"] < 0.6
    pred = tmp_path / "p.txt"
    r = _cli(capfd, "predict", str(test_p), "-i", model, "-p", str(pred))
    assert r.returncode == 0, r.stderr
    rows = pred.read_text().splitlines()
    assert len(rows) == 500 and rows[0].endswith(" ex0") and 0 < float(rows[0].split()[0]) < 1
    # two workers through the launcher, each on its half of the file
    model2 = str(tmp_path / "m2.model")
    r = _cli(capfd, "train", str(train_p), "-n", "2", "-b", "16", "-q", "ab", "--bfgs", "10",
             "-f", model2, "--cache-dir", cache)
    assert r.returncode == 0, r.stderr
    assert "2 worker(s)" in r.stderr
    m2 = LinearModel.load(model2)
    assert m2.info["workers"] == 2 and m2.parse.quadratic == ("ab",)
    assert m2.evaluate(str(test_p))["auc"] > 0.75
    # errors: a bad line names file and line; a bad flag names the flag
    bad = tmp_path / "bad.vw"
    bad.write_text("1 |a x\n1 a b |a y\n")
    r = _cli(capfd, "train", str(bad), "-f", model, "--cache-dir", "")
    assert r.returncode == 2 and "bad.vw, line 2" in r.stderr
    r = _cli(capfd, "train", str(bad), "-f", model, "--skip-bad", "--cache-dir", "")
    assert r.returncode == 0 and "skipped 1 bad lines" in r.stderr
    r = _cli(capfd, "evaluate", str(test_p), "-i", str(bad))
    assert r.returncode == 2 and "not a terascale linear model" in r.stderr


def test_span_server_tree_layout():
    from terascale.linear._combine._span import build_tree

    assert build_tree(1) == ([-1], [0])
    assert build_tree(2) == ([1, -1], [0, 1])
    assert build_tree(3) == ([1, -1, 1], [0, 2, 0])
    parent, kids = build_tree(7)
    assert parent == [1, 3, 1, -1, 5, 3, 5] and kids == [0, 2, 0, 2, 0, 2, 0]


def test_vowpalwabbit_cluster_runs_against_span_server(tmp_path):
    pytest.importorskip("vowpalwabbit")
    import subprocess
    import sys

    from terascale.linear._combine._span import SpanServer

    for k in range(2):
        (tmp_path / f"s{k}.vw").write_text("\n".join(vw_lines(300, seed=20 + k)) + "\n")
    srv = SpanServer(0).start()
    try:
        code = ("import sys; from vowpalwabbit import pyvw; k = sys.argv[1]; "
                "pyvw.Workspace(f'--quiet -d s{k}.vw -b 16 --loss_function logistic "
                "-f m{k}.model --span_server 127.0.0.1 --span_server_port "
                f"{srv.port} --total 2 --node {{k}} --unique_id 5').finish(); "
                "pyvw.Workspace(f'--quiet -d s0.vw -t -i m{k}.model -p p{k}.txt').finish()")
        procs = [subprocess.Popen([sys.executable, "-c", code, str(k)], cwd=tmp_path)
                 for k in range(2)]
        assert [p.wait(timeout=120) for p in procs] == [0, 0]
    finally:
        srv.stop()
    # VW averaged the two nodes' weights through the tree: both models predict the same
    p0, p1 = (np.loadtxt(tmp_path / f"p{k}.txt", usecols=0) for k in range(2))
    assert len(p0) == 300 and np.array_equal(p0, p1) and np.any(p0 != 0)


def test_span_server_listens_on_loopback_unless_told(tmp_path):
    """VW's spanning-tree protocol has no authentication: the daemon must not be reachable
    from other hosts unless its user names an interface."""
    import subprocess
    import sys

    from terascale.linear._combine._span import SpanServer
    from terascale.testing import listening

    srv = SpanServer(0).start()
    try:
        assert listening(srv.port) == ["127.0.0.1"]
    finally:
        srv.stop()
    p = subprocess.Popen([sys.executable, "-m", "terascale", "span-server", "--port", "0"],
                         stderr=subprocess.PIPE, text=True)
    try:
        line = p.stderr.readline()
        assert "listening on 127.0.0.1:" in line
    finally:
        p.kill()
        p.wait(timeout=10)


def test_span_server_names_the_flag_when_it_cannot_listen():
    import socket

    from terascale import ConfigError
    from terascale.linear._combine._span import SpanServer

    with pytest.raises(ConfigError, match="10.9.9.9.*not an address of this host.*--host"):
        SpanServer(0, "10.9.9.9")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    try:
        with pytest.raises(ConfigError, match="span-server: cannot listen on 127.0.0.1"):
            SpanServer(taken.getsockname()[1])
    finally:
        taken.close()


def _mixed_fits(comm, lines, cuts, configs):
    shard = parse_lines(lines[cuts[comm.rank]:cuts[comm.rank + 1]], bits=18)
    out = []
    for opts in configs:
        m = train(shard, comm=comm, **opts)
        out.append((m.dense(), m.info.get("mixes")))
    return out


def test_averaging_during_the_pass_is_bitwise_deterministic_with_unequal_shards():
    """Workers mix every K examples of their own shard; a worker whose shard ends first
    keeps taking part in the mixes: every rank makes the same calls and ends bitwise
    identical, run after run."""
    lines = vw_lines(2400, seed=11)
    configs = [{"average_every": 300, "passes": 2}, {"average_every": 250, "l2": 1e-6},
               {"average_every": 200, "bfgs": 3}, {"average_every": 0}]
    for n, cuts in ((2, [0, 1700, 2400]), (3, [0, 500, 1900, 2400])):
        ws = run_workers(_mixed_fits, n, args=(lines, cuts, configs + configs[:1]),
                         timeout=120)
        longest = max(b - a for a, b in zip(cuts, cuts[1:]))
        for c, opts in enumerate(configs):
            w0, mixes = ws[0][c]
            for r in ws:
                np.testing.assert_array_equal(r[c][0], w0)  # every rank
                assert r[c][1] == mixes
            if opts["average_every"]:
                assert mixes == (longest // opts["average_every"] + 1) * opts.get("passes", 1)
            else:
                assert mixes is None
        np.testing.assert_array_equal(ws[0][-1][0], ws[0][0][0])  # run after run
        assert np.any(ws[0][1][0] != ws[0][3][0])  # mixing changed the model


def test_averaging_during_the_pass_closes_the_gap_to_one_learner():
    """Click-style data (Zipf ids, raw-scale numerics), one pass on 2 workers: averaging
    only at the end of the pass (the default) ends ~0.014 above one learner's test logloss;
    mixing every 2000 examples ends within 0.003 of it (here below it). One worker is
    untouched by the option (bitwise VW's learner)."""
    from terascale.linear import LinearModel, ParseOptions, synthetic

    lines = b"".join(synthetic.click_chunks(20_000, seed=1)).decode().splitlines()
    test = parse_lines(b"".join(synthetic.click_chunks(10_000, seed=2)).decode()
                       .splitlines(), bits=18)
    one = train(parse_lines(lines, bits=18))
    assert np.array_equal(train(parse_lines(lines, bits=18), average_every=7).weights,
                          one.weights)
    ref = one.evaluate(test)["logloss"]
    fits = run_workers(_mixed_fits, 2, args=(lines, [0, 10_000, 20_000],
                                             [{}, {"average_every": 2000}]), timeout=120)[0]
    end_only, mixed = (LinearModel(indices=np.arange(1 << 18, dtype=np.uint32), weights=w,
                                   parse=ParseOptions(bits=18), loss="logistic")
                       .evaluate(test)["logloss"] for w, _ in fits)
    assert end_only - ref > 0.008
    assert abs(mixed - ref) < 0.003 and mixed < end_only - 0.008


def test_average_every_must_be_a_count():
    from terascale import ConfigError

    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="average_every"):
            train(parse_lines(LINES[:10], bits=14), average_every=bad)


def _models_equal(a: LinearModel, b: LinearModel) -> None:
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.weights, b.weights)
    assert a.adaptive is not None and b.adaptive is not None
    for x, y in zip(a.adaptive, b.adaptive):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("n", [2, 3])
def test_a_chain_of_workers_is_one_learner_on_the_whole_file(tmp_path, capfd, monkeypatch, n):
    # From text: worker 0 learns as it parses, the others cache, then learn in turn from
    # the learner handed on; two passes with VW's holdout (every 10th example of the whole
    # file, not of each shard) and an L1 that stays lazy across the hand-offs
    data = tmp_path / "train.vw"
    data.write_text("\n".join(vw_lines(5000, seed=11)) + "\n")
    one, chain = str(tmp_path / "one.model"), str(tmp_path / "chain.model")
    common = ["-b", "16", "-q", "ab", "--passes", "2", "--l1", "1e-7", "--quiet"]
    r = _cli(capfd, "train", str(data), "-f", one, "--cache-dir", str(tmp_path / "c1"),
             *common)
    assert r.returncode == 0, r.stderr
    # no cache asked for (n=2): the later workers cache their shards in a directory of the
    # run's own, removed at its end
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    cache = ["--cache-dir", ""] if n == 2 else ["--cache-dir", str(tmp_path / "c2")]
    r = _cli(capfd, "train", str(data), "-n", str(n), "--average", "chain", "-f", chain,
             *cache, *common)
    assert r.returncode == 0, r.stderr
    assert not [p for p in scratch.iterdir() if p.name.startswith("terascale-chain-")]
    m1, mc = LinearModel.load(one), LinearModel.load(chain)
    assert mc.info["workers"] == n
    _models_equal(m1, mc)  # bitwise: weights, adaptive sums and normalizers


def test_a_chain_of_workers_over_unequal_files_is_one_learner(tmp_path, capfd):
    # Files of very different lengths, fewer workers than files: each worker reads a run of
    # consecutive files, so the chain learns them in the order given and the holdout (every
    # 10th example of the whole input) is one worker's
    lines = vw_lines(1200, seed=13)
    files = []
    for i, (a, b) in enumerate([(0, 1000), (1000, 1150), (1150, 1200)]):
        files += ["-d", str(tmp_path / f"part{i}.vw")]
        (tmp_path / f"part{i}.vw").write_text("\n".join(lines[a:b]) + "\n")
    one, chain = str(tmp_path / "one.model"), str(tmp_path / "chain.model")
    common = [*files, "-b", "16", "--passes", "2", "--quiet", "--cache-dir", ""]
    assert _cli(capfd, "train", "-f", one, *common).returncode == 0
    r = _cli(capfd, "train", "-n", "2", "--average", "chain", "-f", chain, *common)
    assert r.returncode == 0, r.stderr
    _models_equal(LinearModel.load(one), LinearModel.load(chain))


def _chained_fit(comm, lines, cuts):
    shard = lines[cuts[comm.rank]:cuts[comm.rank + 1]]
    return train(parse_lines(shard, bits=14), comm=comm, average="chain", passes=2)


def test_a_chain_of_unequal_in_memory_shards_is_one_learner():
    lines = vw_lines(3000, seed=12)
    one = train(parse_lines(lines, bits=14), passes=2)
    cuts = [0, 400, 2900, 3000]
    models = run_workers(_chained_fit, 3, args=(lines, cuts), timeout=120)
    for m in models:
        _models_equal(one, m)  # and so the same bits on every worker


def test_a_chain_has_nothing_to_average_during_the_pass():
    from terascale import ConfigError

    with pytest.raises(ConfigError, match="average_every"):
        train(parse_lines(LINES[:10], bits=14), average="chain", average_every=1000)
    with pytest.raises(ConfigError, match="weighted, uniform or chain"):
        train(parse_lines(LINES[:10], bits=14), average="median")


def _recipe_fit(comm, n, lines, opts):
    shard = lines[comm.rank * len(lines) // n:(comm.rank + 1) * len(lines) // n]
    return train(parse_lines(shard, bits=18), comm=comm, **opts).dense()


def _held_out(n: int, seed: int, loss: str) -> list[str]:
    """Generated VW lines of one planted model (every seed draws from it): three one-hot
    namespaces and raw-scale numerics; logistic labels drawn from its probability, squared
    ones its score plus noise."""
    truth = np.random.default_rng(99)
    wa, wb, wx = truth.normal(size=200), truth.normal(size=50), np.array([0.7, -1.2, 0.4])
    scale = np.array([1.0, 10.0, 0.1])
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a, b, x = rng.choice(200, 3, replace=False), rng.integers(50), rng.normal(size=3)
        z = 0.5 * wa[a].sum() + wb[b] + wx @ x
        y = ((1 if rng.random() < 1 / (1 + np.exp(-z)) else -1) if loss == "logistic"
             else f"{3 * z + 5 + 2 * rng.normal():.4f}")
        xs = " ".join(f"x{j}:{v:.5f}" for j, v in enumerate(x * scale))
        out.append(f"{y} |a " + " ".join(f"f{j}" for j in a) + f" |b g{b} |n {xs}")
    return out


@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_the_recipe_on_more_workers_ends_within_one_percent_of_one_workers_test_loss(loss):
    """The Terascale recipe (one online pass, then L-BFGS on the same objective whatever
    the worker count): on held-out data, 2 and 4 workers end within 1% of one worker's test
    loss (logloss, or MSE)."""
    from terascale.linear import LinearModel, ParseOptions

    lines, test = _held_out(8000, 1, loss), parse_lines(_held_out(3000, 2, loss), bits=18)
    opts = {"loss": loss, "passes": 1, "bfgs": 20}
    metric = "logloss" if loss == "logistic" else "mse"

    def test_loss(w):
        return LinearModel(indices=np.arange(1 << 18, dtype=np.uint32), weights=w,
                           parse=ParseOptions(bits=18), loss=loss).evaluate(test)[metric]

    one = test_loss(train(parse_lines(lines, bits=18), **opts).dense())
    for n in (2, 4):
        got = test_loss(run_workers(_recipe_fit, n, args=(n, lines, opts), timeout=180)[0])
        assert abs(got - one) <= 0.01 * one, (n, got, one)


def test_workers_that_saw_no_example_take_part_in_every_collective(tmp_path):
    # one line for three workers: two learn nothing, yet average with the one that did;
    # the model is the one worker's (their adaptive sums are 0, so they weigh nothing)
    import subprocess
    import sys

    data = tmp_path / "one.vw"
    data.write_text("1 |a x y\n")
    models = []
    for n in ("1", "3"):
        model = tmp_path / f"m{n}.vw"
        r = subprocess.run([sys.executable, "-m", "terascale", "vw", "-n", n, "-d", str(data),
                            "-f", str(model), "--quiet"], capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        models.append(model.read_bytes())
    assert models[0] == models[1]
