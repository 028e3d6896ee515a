"""``--oaa K`` (one-against-all) learned in one pass over data parsed once, against the
real VW (``vowpalwabbit``) on generated data: every progressive prediction (``-p``), every
class's raw score (``-r``), the closing block and the model VW loads, with K = 3 and 10,
``-q``, logistic loss, labels from 0, passes over a cache, L1 and L2; ``-n 2``
deterministic; and
``terascale linear train --oaa`` on the same path."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from _vw_runs import run_ts, run_vw

pytest.importorskip("vowpalwabbit")


def _data(path, n: int, k: int, seed: int, first: int = 1) -> list[int]:
    """``n`` examples of ``k`` classes (``first``..): two namespaces, a numeric feature,
    some importance weights and tags, a fifth of the labels noise."""
    rng = np.random.default_rng(seed)
    planted = rng.normal(size=(k, 200))  # each class's weights of the features f0..f199
    lines, labels = [], []
    for i in range(n):
        a = rng.choice(200, size=5, replace=False)
        y = first + int(np.argmax(planted[:, a].sum(1))) if rng.random() < 0.8 else \
            first + int(rng.integers(k))
        head = f"{y}" + (" 2.5" if i % 7 == 3 else "") + (f" 'e{i}" if i % 3 == 0 else " ")
        lines.append(f"{head}|a " + " ".join(f"f{j}" for j in a)
                     + f" x:{rng.normal():.4f} |b g{a[1] % 11} h{a[2] % 5}")
        labels.append(y)
    path.write_text("\n".join(lines) + "\n")
    return labels


def _closing(err: str) -> list[str]:
    tail = err[err.index("finished run"):]
    return [ln for ln in tail.splitlines() if "=" in ln]


CASES = {
    "K=3": (3, 1, ["--oaa", "3"]),
    "K=10, -q ab": (10, 1, ["--oaa", "10", "-q", "ab", "-b", "20"]),
    "K=10, logistic": (10, 1, ["--oaa", "10", "--loss_function", "logistic"]),
    "K=3 from 0, hinge": (3, 0, ["--oaa", "3", "--loss_function", "hinge"]),
    "K=5, passes over a cache file": (5, 1, ["--oaa", "5", "--passes", "3", "--cache_file",
                                             "c.cache", "-k", "--decay_learning_rate",
                                             "0.8"]),
    # VW's K learners share one lazy L1/L2 state: learned example by example
    "K=4, L1 and L2": (4, 1, ["--oaa", "4", "--l1", "1e-4", "--l2", "1e-3", "-q", "ab"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_pass_equals_vw(case, tmp_path, capfd, monkeypatch):
    k, first, flags = CASES[case]
    _data(tmp_path / "d.vw", 600, k, 11, first)
    args = ["-d", "d.vw", *flags]
    want = run_vw([*args, "-p", "vw.p", "-r", "vw.r", "-f", "vw.m"], tmp_path)
    (tmp_path / "c.cache").unlink(missing_ok=True)
    code, got = run_ts(capfd, [*args, "-p", "ts.p", "-r", "ts.r", "-f", "ts.m"], tmp_path,
                       monkeypatch)
    assert code == 0, got
    for ext in ("p", "r"):
        assert (tmp_path / f"ts.{ext}").read_text() == (tmp_path / f"vw.{ext}").read_text()
    assert _closing(got) == _closing(want)
    for m in ("vw", "ts"):  # VW loads terascale's model and predicts as with its own
        run_vw(["-i", f"{m}.m", "-t", "-d", "d.vw", "-p", f"{m}.t"], tmp_path)
    got_t = (tmp_path / "ts.t").read_text()
    assert got_t == (tmp_path / "vw.t").read_text()
    assert len({ln.split()[0] for ln in got_t.splitlines()}) == k


def test_two_workers_are_deterministic_and_vw_loads_their_model(tmp_path, capfd,
                                                                 monkeypatch):
    """-n 2: each worker learns the K learners on its half in one pass, each class's
    learner averaged after it; two runs write the same bytes, and VW's predictions from
    the model are as good as from one worker's (within a few percent); --readable_model
    writes VW's text of the model (VW's own, read back with its counters, but for the
    ``current_pass`` its run of no data counts on)."""
    labels = _data(tmp_path / "d.vw", 3000, 4, 12)
    ts = [sys.executable, "-m", "terascale", "vw", "-d", "d.vw", "--oaa", "4", "--quiet"]
    for name in ("a", "b"):
        text = ["--readable_model", "b.t"] if name == "b" else []
        r = subprocess.run([*ts, "-n", "2", "-f", f"{name}.m", *text], cwd=tmp_path,
                           capture_output=True, text=True, timeout=180)
        assert r.returncode == 0, r.stderr
    (tmp_path / "e.vw").write_text("")
    run_vw(["-d", "e.vw", "-i", "b.m", "--preserve_performance_counters", "--quiet",
            "--readable_model", "vw.t"], tmp_path)
    assert [ln for ln in (tmp_path / "b.t").read_text().splitlines()
            if not ln.startswith("current_pass")] == \
        [ln for ln in (tmp_path / "vw.t").read_text().splitlines()
         if not ln.startswith("current_pass")]
    code, err = run_ts(capfd, ts[4:] + ["-f", "one.m"], tmp_path, monkeypatch)
    assert code == 0, err
    assert (tmp_path / "a.m").read_bytes() == (tmp_path / "b.m").read_bytes()
    acc = {}
    for name in ("a", "one"):
        run_vw(["-i", f"{name}.m", "-t", "-d", "d.vw", "-p", f"{name}.t", "--quiet"],
               tmp_path)
        pred = np.array([int(ln.split()[0]) for ln in
                         (tmp_path / f"{name}.t").read_text().splitlines()])
        acc[name] = float((pred == np.array(labels)).mean())
    assert acc["one"] > 0.5 and acc["a"] > acc["one"] - 0.05, acc


def test_linear_train_runs_the_one_pass_learner(tmp_path, capfd, monkeypatch):
    """``terascale linear train --oaa K`` (its defaults: logistic loss, -b 18) predicts as
    VW with the same loss and bits."""
    from terascale.cli import main

    _data(tmp_path / "d.vw", 400, 3, 13)
    run_vw(["-d", "d.vw", "--oaa", "3", "--loss_function", "logistic", "-b", "18", "-p",
            "vw.p", "--quiet"], tmp_path)
    monkeypatch.chdir(tmp_path)
    capfd.readouterr()
    assert main(["linear", "train", "d.vw", "--oaa", "3", "-p", "ts.p"]) == 0
    err = capfd.readouterr().err
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()
    assert re.search(r"^average loss = ", err, re.M)


def test_the_models_rows_are_found_in_one_array_of_their_indices():
    """-f of --oaa K (``_oaa._interleaved``): VW's indices of the K learners' rows that are
    not all 0, each feature's classes in turn, found a block of features at a time into
    one array (no list of the blocks' indices joined beside it), their values read from
    the learners as the writer slices them."""
    import tracemalloc
    from types import SimpleNamespace

    from terascale.linear._front._oaa import _interleaved
    from terascale.linear._io._dataset import ParseOptions
    from terascale.linear._online._state import new_state

    rng = np.random.default_rng(3)
    k, bits = 7, 17
    table = np.zeros((1 << bits, k, 3), np.float32)  # (_vwoaafast's layout)
    used = rng.random((1 << bits, k)) < 0.6
    table[..., 0][used] = rng.normal(size=int(used.sum()))
    table[..., 2][used] = 1.0
    learners = SimpleNamespace(k=k, arrays=table.transpose(1, 0, 2),
                               states=np.stack([new_state()] * k))
    tracemalloc.start()
    try:
        model = _interleaved({"options": {}}, learners, ParseOptions(bits=bits), "squared",
                             [np.zeros(9)], None, 0.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    f, c = np.nonzero(used)
    assert np.array_equal(model.indices, (f << 3) + c)
    assert model.indices.dtype == np.uint32
    assert np.array_equal(model.weights[:], table[f, c, 0])
    assert np.array_equal(model.adaptive[1][100:200], table[f[100:200], c[100:200], 2])
    assert peak < 2 * model.indices.nbytes  # (the blocks' and their join: 3.8 times)
