"""``terascale vw -n N`` in the compiled learner (``_vwworkers``) against the numba pass's
``-n N`` (the same command with ``TERASCALE_NO_CEXT=1``): the model and the printed table
and closing block, bit for bit; no process of the run (launcher, forked or started
workers) imports numba; a worker's bad line fails the run naming the file and line."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from _vw_runs import more, run_ok, run_vw

from terascale._cext import load
from terascale.linear._vw import VWFAST

built = pytest.mark.skipif(load(*VWFAST) is None,
                           reason="terascale.linear._vw._vwfast was not built")
_TS = [sys.executable, "-m", "terascale", "vw"]


def _lines(n: int, seed: int) -> list[str]:
    """VW text with -1/+1 and real labels (some unlabelled), importances, tags, scaled
    namespaces and features that only some shards have."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        lab = str(rng.choice(["1", "-1", "1", "0.5", ""]))
        imp = str(rng.choice(["", "", " 2", " 0.5"])) if lab else ""
        tag = f" 'ex{i}" if rng.random() < 0.3 else ""
        feats = " ".join(f"f{rng.integers(0, 40 + i // 50)}" if rng.random() < 0.6 else
                         f"g{rng.integers(0, 20)}:{rng.choice(['1.5', '-0.25', '3'])}"
                         for _ in range(int(rng.integers(1, 8))))
        ns = str(rng.choice(["a", "b:0.5", "c"]))
        out.append(f"{lab}{imp}{tag} |{ns} {feats}".strip())
    return out


def _files(tmp_path, k: int, n: int = 1500) -> list[str]:
    """``n`` lines in ``k`` files."""
    lines = _lines(n, k)
    names = []
    for j in range(k):
        (tmp_path / f"d{j}.vw").write_text("\n".join(lines[j::k]) + "\n")
        names.append(f"../d{j}.vw")
    return names


def _imports(err: str) -> list[str]:
    """The top-level modules that ``-X importtime``'s lines in ``err`` name."""
    return sorted({ln.split("|")[-1].strip().split(".")[0] for ln in err.splitlines()
                   if ln.startswith("import time:") and "|" in ln})


def _both(tmp_path, files: list[str], args: list[str]) -> dict[str, dict[str, str | bytes]]:
    """The compiled workers' run (every process's imports listed on stderr) and the numba
    pass's, each in its own directory: stderr without the import lines, the model, its
    ``--readable_model`` and the ``--invert_hash`` ``ih`` where ``args`` asks for it."""
    got: dict[str, dict[str, str | bytes]] = {}
    for who, env in (("c", {"PYTHONPROFILEIMPORTTIME": "1"}), ("numba", {"TERASCALE_NO_CEXT": "1"})):
        d = tmp_path / who
        d.mkdir()
        data = [x for f in files for x in ("-d", f)]
        err = run_ok([*_TS, *data, *args, "-f", "m", "--readable_model", "r"], d, env)
        got[who] = {"err": "\n".join(ln for ln in err.splitlines()
                                     if not ln.startswith("import time:")),
                    "imports": " ".join(_imports(err)), "m": (d / "m").read_bytes(),
                    "r": (d / "r").read_bytes(),
                    "ih": (d / "ih").read_bytes() if (d / "ih").exists() else b""}
    return got


CASES = [
    # byte ranges of one file; the names of every worker's part
    (1, ["-n", "2", "--loss_function", "logistic", "--l2", "1e-4", "--invert_hash", "ih"]),
    more(3, ["-n", "2", "-q", "ab", "--average", "uniform", "--link", "glf1"]),  # whole files
    more(2, ["-n", "3", "--l1", "1e-4", "--power_t", "0.4", "-b", "20"]),  # crossing files
    more(1, ["-n", "2", "--binary", "--loss_function", "hinge", "--predict_only_model"]),
    # passes over each worker's cache of its part, averaged after each, VW's holdout
    more(1, ["-n", "2", "--passes", "3", "-c"]),
    more(2, ["-n", "3", "--passes", "6", "--early_terminate", "1", "--loss_function",
             "logistic", "--holdout_period", "4", "-q", "ab"]),  # (it stops early)
    more(1, ["-n", "2", "--passes", "3", "--holdout_off", "--decay_learning_rate", "0.7",
             "--l1", "1e-4"]),
    # the n-grams, skip-grams and spellings made by each worker's compiled parser (a whole
    # file a worker: the numba pass cuts a file's byte ranges in its rewritten copy)
    (2, ["-n", "2", "--ngram", "a2", "--skips", "a1", "--spelling", "b", "--invert_hash", "ih"]),
    more(3, ["-n", "3", "--ngram", "2", "--passes", "2", "-c", "-q", "ac"]),
    # --redefine, --feature_limit, --hash_seed, --hash all, --sort_features and --affix: the
    # same (their --invert_hash names read from the input as given)
    (2, ["-n", "2", "--redefine", "A:=ab", "--feature_limit", "A3", "--hash_seed", "5", "-q",
         "Ac", "--invert_hash", "ih"]),
    more(2, ["-n", "2", "--sort_features", "--hash", "all", "--passes", "2", "-c"]),
    more(3, ["-n", "3", "--affix", "+2a,-1", "--invert_hash", "ih"]),
    # VW's starting weights in every worker's table; rank 0 puts back the rows none saw
    (1, ["-n", "2", "--initial_t", "1", "--random_weights", "--constant", "0.5",
         "--min_prediction", "-1", "--passes", "2", "-c"]),
]


@built
@pytest.mark.parametrize(("files", "args"), CASES)
def test_workers_equal_the_numba_pass_and_import_no_numba(tmp_path, files, args):
    got = _both(tmp_path, _files(tmp_path, files), args)
    assert got["c"]["m"] == got["numba"]["m"]
    assert got["c"]["r"] == got["numba"]["r"]  # (the header's counters too)
    assert got["c"]["ih"] == got["numba"]["ih"]
    assert (b"^" in got["c"]["ih"]) == ("--invert_hash" in args)
    assert b"sum_loss " in got["c"]["r"] or "--predict_only_model" in args
    assert got["c"]["err"] == got["numba"]["err"]
    assert "finished run" in str(got["c"]["err"])
    imported = str(got["c"]["imports"]).split()
    assert "terascale" in imported  # (the workers' lines are there: forked, they print too)
    assert not {"numba", "llvmlite", "scipy", "torch"} & set(imported), imported


WARM = [
    ["-n", "2", "--passes", "2", "-c"],  # (CI's case of --passes with -n N too)
    # (-i's counters go on; its sums under --initial_t's; the range given over the model's)
    ["-n", "2", "--preserve_performance_counters", "--initial_t", "2", "--min_prediction",
     "-0.5", "--max_prediction", "0.8"],
    more(["-n", "2"]),
    more(["-n", "3", "--loss_function", "logistic", "--l1", "1e-4", "-q", "ab"]),
]


@built
@pytest.mark.parametrize("args", WARM)
def test_warm_started_workers_equal_the_numba_pass(tmp_path, args):
    """-i: every worker starts from the model; its rows that no shard has (namespace z
    here) stay the model's, the others are averaged with the workers' sums."""
    rng = np.random.default_rng(5)
    (tmp_path / "z.vw").write_text("".join(
        f"{rng.choice(['1', '-1'])} |a f{rng.integers(0, 30)} f{rng.integers(0, 30)} "
        f"|z z{rng.integers(0, 20)}\n" for _ in range(300)))
    run_ok([*_TS, "-d", "z.vw", "-f", "start", "--quiet"], tmp_path)
    got = _both(tmp_path, _files(tmp_path, 1, 600), [*args, "-i", "../start"])
    assert got["c"]["m"] == got["numba"]["m"]
    assert got["c"]["r"] == got["numba"]["r"]
    assert got["c"]["err"] == got["numba"]["err"]
    assert "finished run" in str(got["c"]["err"])
    assert not {"numba", "llvmlite", "scipy", "torch"} & set(str(got["c"]["imports"]).split())


@built
def test_workers_preserved_counters_are_vws(tmp_path):
    """-n 2 -i MODEL --preserve_performance_counters: the closing block's counters (every
    worker's examples added, -i's once) are VW's one-worker run's."""
    _files(tmp_path, 2, 600)
    run_vw(["-d", "d1.vw", "-f", "start", "--quiet"], tmp_path)
    line = ["-d", "d0.vw", "-i", "start", "--preserve_performance_counters"]
    vw = run_vw(line, tmp_path)
    ts = run_ok([*_TS, *line, "-n", "2"], tmp_path)
    assert _counters(ts) == _counters(vw)


@built
def test_workers_invert_hash_names_are_vws(tmp_path):
    """-n 2 --invert_hash: each weight named as VW's one-worker run names it (the weights
    are the workers' average: a weight that ends 0 in one run is not listed there)."""
    import re

    _files(tmp_path, 1, 1200)
    line = ["-d", "d0.vw", "-q", "ab", "--quiet"]
    run_vw([*line, "--invert_hash", "iv"], tmp_path)
    run_ok([*_TS, *line, "-n", "2", "--invert_hash", "it"], tmp_path)
    names = [{int(m[2]): m[1] for m in re.finditer(r"(?m)^(.*\^.*|Constant):(\d+):",
                                                 (tmp_path / f).read_text())}
             for f in ("iv", "it")]
    both = names[0].keys() & names[1].keys()
    assert len(both) > 0.95 * max(len(names[0]), len(names[1])) and len(both) > 200
    assert {i: names[0][i] for i in both} == {i: names[1][i] for i in both}


OAA = [
    ["--oaa", "4", "-n", "2", "--passes", "2", "--invert_hash", "ih"],
    more(["--oaa", "4", "-n", "3", "--passes", "5", "--early_terminate", "1", "-q", "ab",
          "--loss_function", "logistic", "--l1", "1e-5"]),
    more(["--oaa", "4", "-n", "2", "--predict_only_model", "--link", "logistic"]),
    # (each worker's learners start from the fixed range, as one worker's)
    ["--oaa", "4", "-n", "2", "--min_prediction", "-0.5", "--max_prediction", "0.8"],
    more(["--oaa", "3", "-n", "3", "--max_prediction", "0.3", "--passes", "2",
          "--loss_function", "logistic"]),
    # (each worker's learners start from --initial_t's sums, the job's t counts it once)
    ["--oaa", "4", "-n", "2", "--initial_t", "2"],
    # (each worker's t goes on from -i's: the job's t counts it once)
    more(["--oaa", "4", "-n", "2", "-i", "../start", "--passes", "2"]),
]


@built
@pytest.mark.parametrize("args", OAA)
def test_oaa_workers_equal_the_numba_pass(tmp_path, args):
    """--oaa K -n N: each worker's K learners (``_vwoaafast``) on its part, each class's
    learner averaged after each pass, as the numba pass's workers (``_oaa.run_oaa``)."""
    rng = np.random.default_rng(6)
    rows = []
    for _ in range(900):
        c = int(rng.integers(1, 5))
        rows.append(f"{c}{rng.choice(['', ' 2', ' 0.5'])} |a f{rng.integers(0, 40)} "
                    f"f{rng.integers(0, 40)} c{c}x{rng.integers(0, 3)} |b g{rng.integers(0, 9)}")
    (tmp_path / "d0.vw").write_text("\n".join(rows) + "\n")
    if "-i" in args:  # (VW's model of the same data)
        run_vw(["-d", "d0.vw", "--oaa", "4", "-f", "start", "--quiet"], tmp_path)
    got = _both(tmp_path, ["../d0.vw"], args)
    assert got["c"]["m"] == got["numba"]["m"]
    assert got["c"]["r"] == got["numba"]["r"]
    assert got["c"]["ih"] == got["numba"]["ih"]
    assert got["c"]["err"] == got["numba"]["err"]
    assert "finished run" in str(got["c"]["err"])
    assert not {"numba", "llvmlite", "scipy", "torch"} & set(str(got["c"]["imports"]).split())


def _job(monkeypatch, tmp_path, line: list[str]) -> str:
    """The job that ``terascale vw`` (run here, in ``tmp_path``) hands its workers, its
    launch stopped there."""
    import terascale.launch
    from terascale.cli import main

    jobs: list[str] = []
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(terascale.launch, "launch", lambda cmd, opts: jobs.append(cmd[-1]))
    assert main(["vw", *line, "--quiet"]) == 0
    return jobs[0]


@built
def test_oaa_workers_learn_their_part_before_they_join(tmp_path, monkeypatch):
    """A worker of --oaa K -n N parses and learns its whole first pass, then joins the job
    (``_vwworkers.Joining``), and leaves it before rank 0 writes -f: the job's links and
    buffers are not carried under the pass's peak, nor under the model's writing."""
    import json

    from terascale.communicator import Communicator
    from terascale.linear._vw import _vwmodel, _vwoaafast

    rows = [f"{1 + i % 3} |a f{i % 40} g{i % 7}" for i in range(3000)]
    (tmp_path / "d.vw").write_text("\n".join(rows) + "\n")
    job = json.loads(_job(monkeypatch, tmp_path, ["--oaa", "3", "-n", "2", "-d", "d.vw",
                                                  "-f", "m"]))
    events: list[str] = []
    learn = _vwoaafast._block
    monkeypatch.setattr(_vwoaafast, "_block",
                        lambda *a, **k: (events.append("learn"), learn(*a, **k)))
    write = _vwmodel.write_vw_oaa_resume
    monkeypatch.setattr(_vwmodel, "write_vw_oaa_resume",
                        lambda *a, **k: (events.append("write"), write(*a, **k)))

    class Place:  # (rank 0 of 2, its job one process)
        rank, size, job = 0, 2, None

        def comm(self):
            events.append("join")
            self.job = self.job or Communicator()
            return self.job

        def close(self):
            events.append("leave")
            self.job.close()

    _vwoaafast._run(job, None, None, None, Place())
    assert events.count("learn") > 1 and events[-3:] == ["join", "leave", "write"]
    assert events.index("join") == events.count("learn")
    assert (tmp_path / "m").stat().st_size > 0


@built
@pytest.mark.parametrize("flags", [
    ["--redefine", "A:=ab", "--feature_limit", "A3", "--invert_hash", "ih"],
    ["--hash", "all", "--hash_seed", "2", "--sort_features", "--oaa", "3"]])
def test_workers_apply_the_rules_to_the_input_as_given(tmp_path, monkeypatch, flags):
    """-n N with --redefine, --feature_limit, --hash_seed, --hash all, --sort_features or
    --affix (--invert_hash and --oaa K too): the workers read the input as given, their
    compiled parsers applying the rules (``_vwgen``'s rewrite, in Python, is not made)."""
    import json

    from terascale.linear._vw import _vwgen
    from terascale.linear._vw._vwgen import FeatureGen

    monkeypatch.setattr(_vwgen, "INPUTS", {})  # (this run's copies only: none)
    _files(tmp_path, 1, 30)
    job = json.loads(_job(monkeypatch, tmp_path, ["-d", "d0.vw", "-n", "2", *flags]))
    assert job.get("data", job["paths"]) == job["paths"] == ["d0.vw"]
    assert not job.get("inputs") and FeatureGen.from_job(job["grams"]).parser_rules


@built
def test_warm_started_workers_read_the_models_rows_a_slice_at_a_time(tmp_path, monkeypatch):
    """-n N -i: the launcher reads -i's header alone and each worker its rows a slice at a
    time (``_vwmodel.VWRecords.put``), rank 0 again at the end for the rows no worker saw,
    rather than keeping the whole model to the end."""
    from terascale.linear._vw import _vwmodel, _vwworkers

    (tmp_path / "d.vw").write_text("\n".join(_lines(300, 9)) + "\n")
    run_ok([*_TS, "-d", "d.vw", "-f", "start", "--quiet"], tmp_path)
    read = _vwmodel.read_vw_model
    whole: list[bool] = []
    monkeypatch.setattr(_vwmodel, "read_vw_model", lambda *a, **k: (
        whole.append(k.get("records", True)), read(*a, **k))[1])
    job = _job(monkeypatch, tmp_path, ["-n", "2", "-i", "start", "-d", "d.vw", "-f", "m"])
    puts: list[bool] = []
    put = _vwmodel.VWRecords.put
    monkeypatch.setattr(_vwmodel.VWRecords, "put", lambda self, table, unseen=None: (
        puts.append(unseen is not None), put(self, table, unseen))[1])
    assert _vwworkers.main([job]) == 0  # (a job of one here: it learns all of d.vw)
    assert whole == [False, False] and puts == [False, True]
    assert (tmp_path / "m").stat().st_size > 0


@built
def test_workers_model_of_ngrams_predicts_in_vw(tmp_path):
    """-f of ``-n 2 --ngram``: VW's model records the n-grams, and VW's ``-t -i`` of it
    predicts as terascale's."""
    from _vw_runs import numbers

    _files(tmp_path, 2, 600)
    run_ok([*_TS, "-d", "d0.vw", "-d", "d1.vw", "-n", "2", "--ngram", "a2", "--skips", "a1",
            "-f", "m", "--quiet"], tmp_path)
    vw = subprocess.run([sys.executable, "-m", "vowpalwabbit", "-i", "m", "-t", "-d", "d0.vw",
                         "-p", "pv"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert vw.returncode == 0, vw.stderr
    assert "Generating 2-grams for a namespaces" in vw.stdout
    assert "Generating 1-skips for a namespaces" in vw.stdout
    run_ok([*_TS, "-i", "m", "-t", "-d", "d0.vw", "-p", "pt", "--quiet"], tmp_path)
    np.testing.assert_allclose(numbers(tmp_path / "pt"), numbers(tmp_path / "pv"), atol=1e-5)


@built
def test_workers_started_as_programs_import_no_numba(tmp_path):
    """(A bad line in a worker's shard: ``test_forked_workers``, which these workers run.)"""
    (tmp_path / "d.vw").write_text("\n".join(_lines(400, 7)) + "\n")
    err = run_ok([*_TS, "-d", "d.vw", "-n", "2", "-f", "m"], tmp_path,
                 {"TERASCALE_EXEC_WORKERS": "1", "PYTHONPROFILEIMPORTTIME": "1"})
    assert "finished run" in err and (tmp_path / "m").stat().st_size > 0
    assert "terascale" in _imports(err)
    assert not {"numba", "llvmlite"} & set(_imports(err))


@built
@pytest.mark.parametrize("extra", [[], more(["--holdout_period", "5"])])
def test_standard_input_is_split_as_its_file(tmp_path, extra):
    """(With a holdout of one pass: the numba pass, after the compiled path read it.)"""
    text = "\n".join(_lines(600, 9)) + "\n"
    (tmp_path / "d.vw").write_text(text)
    args = [*_TS, "-n", "2", "--quiet", *extra]
    run_ok([*args, "-d", "d.vw", "-f", "m1"], tmp_path)
    r = subprocess.run([*args, "-d", "-", "-f", "m2"], cwd=tmp_path, input=text,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "m1").read_bytes() == (tmp_path / "m2").read_bytes()


@pytest.mark.parametrize(("line", "why"), [
    (["-n", "2", "--average-every", "100"], "-n N with --average"),
    (["-n", "2", "--normal_weights"], "-n N with -i"),
    (["-n", "0"], "-n N with 0"),
])
def test_which_runs_of_several_workers_run_the_numba_pass(line, why):
    from test_vwonline import _args

    from terascale.linear._vw._vwworkers import why_not

    assert why in why_not(_args(["-d", "x.vw", *line]))
    assert why_not(_args(["-d", "x.vw", "-n", "2", "-q", "ab", "--l1", "1e-5"])) == ""
    assert why_not(_args(["-d", "x.vw", "-n", "2", "--passes", "3", "-c"])) == ""
    assert why_not(_args(["-d", "x.vw", "-n", "2", "--oaa", "3", "--passes", "2"])) == ""
    assert why_not(_args(["-d", "x.vw", "-n", "2", "--ngram", "2", "--skips", "1"])) == ""
    assert why_not(_args(["-d", "x.vw", "-n", "2", "--holdout_after", "100"])) == ""
    assert why_not(_args(["-d", "x.vw", "-n", "2", "--initial_weight", "0.1"])) == ""


@pytest.mark.parametrize("n", [2, 3, 5])
def test_lines_before_each_workers_part(tmp_path, n):
    """``lines_before``: the lines of the input before a worker's part (every empty one,
    a file's last line without a line break, a ``.gz`` file's), VW's example index of the
    part's first example."""
    import gzip

    from terascale.linear._io._stream import lines_before, record_chunks, shard_places

    texts = [b"1 |a x\n\n-1 |a y z\n" * 7, b"1 |b w\n\n\n-1 |a q", b"1 |a e\n" * 5]
    paths = []
    for j, t in enumerate(texts):
        p = tmp_path / f"d{j}.vw{'.gz' if j == 1 else ''}"
        p.write_bytes(gzip.compress(t) if j == 1 else t)
        paths.append(str(p))
    counted = 0
    for k in range(n):
        places = shard_places(paths, k, n)
        assert lines_before(paths, places) == counted
        for _, path, sh in places:
            for data, _ in record_chunks(path, sh, [1 << 12]):
                counted += data.count(b"\n") + (not data.endswith(b"\n"))
    assert counted == sum(t.count(b"\n") + (not t.endswith(b"\n")) for t in texts)


@built
@pytest.mark.parametrize("oaa", [[], more(["--oaa", "3"])])
def test_workers_hold_out_after_the_inputs_first_examples_as_vw(tmp_path, oaa):
    """-n N --holdout_after K: every example after the input's K-th held out (each worker
    counts from its part's place in the input; empty lines are examples), so the closing
    block's counters are VW's one-worker run's."""
    rng = np.random.default_rng(8)
    (tmp_path / "d.vw").write_text("".join(
        f"{rng.integers(1, 4)} |a f{rng.integers(0, 30)} g{rng.integers(0, 9)}\n"
        + ("\n" if rng.random() < 0.05 else "") for _ in range(600)))
    line = ["-d", "d.vw", "--holdout_after", "300", "--passes", "2", "-c", *oaa]
    vw = run_vw(line, tmp_path)
    ts = run_ok([*_TS, *line, "-n", "2"], tmp_path)
    assert _counters(ts) == _counters(vw)
    assert "average loss" in ts and " h\n" in ts


@pytest.mark.parametrize("n", [2, 3, 7])
def test_the_workers_parts_are_the_numba_passs_and_name_their_lines(tmp_path, n):
    from terascale.linear._io._dataset import ParseOptions
    from terascale.linear._io._stream import TextBlocks, record_chunks, shard_places

    rng = np.random.default_rng(n)
    text = "".join(f"1 |a x{'y' * int(rng.integers(0, 3000 if i % 50 else 70000))}\n"
                   for i in range(300)).encode()
    (tmp_path / "d.vw").write_bytes(text)
    parts = b""
    for k in range(n):
        (_, path, sh), = shard_places([str(tmp_path / "d.vw")], k, n)
        mine = b""
        for data, line in record_chunks(path, sh, [1 << 12]):
            assert line == 1 + text[:len(parts) + len(mine)].count(b"\n")
            mine += bytes(data)
        examples = sum(len(ds.labels) for ds in TextBlocks(path, ParseOptions(),
                                                           shard=sh).datasets())
        assert mine.count(b"\n") == examples
        parts += mine
    assert parts == text


def _counters(out: str) -> list[str]:
    """The closing block's counters (examples, passes, weight and label sums, features)."""
    keys = ("number of examples", "passes used", "weighted example sum",
            "weighted label sum", "total feature number")
    return [ln for ln in out.splitlines() if ln.startswith(keys)]


def test_worker_error_names_the_input_as_given(capfd, monkeypatch):
    """A worker's error on a line of a copy of an input (standard input's, a rewritten
    one) names the input as given, as -n 1's does (the whole job:
    test_vw_dropin.test_workers_error_on_standard_input_names_the_stream)."""
    import json

    from terascale._errors import DataError
    from terascale.linear._front._worker import run_worker
    from terascale.linear._vw._vwgen import INPUTS

    monkeypatch.setitem(INPUTS, "/tmp/terascale-stdin-x.vw", "stdin")

    def fail(job):
        raise DataError("/tmp/terascale-stdin-x.vw, line 3: a feature value is not a number")

    capfd.readouterr()
    assert run_worker(fail, [json.dumps({})], prog="terascale vw") == 2
    assert capfd.readouterr().err == ("terascale vw: error: stdin, line 3: a feature value "
                                      "is not a number\n")
