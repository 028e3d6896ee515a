"""`terascale vw ARGS` against the vowpalwabbit package on generated data: VW's defaults
(squared loss), VW's reading of labels (logistic 0/1, hinge), quantile loss, one-against-all
with probabilities, -r, --cache_file, -t without -i, VW's closing block; every prediction
equal to VW's to 1e-5, and the options outside a linear learner refused by name."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from _vw_runs import FULL, numbers, outputs, run_ts, run_vw
from _vw_runs import ab_lines as _lines
from _vw_runs import real_label as _real

pytest.importorskip("vowpalwabbit")


def _binary01(rng, a, x):
    return int(a[0] % 3 == 0 or x[0] > 0.8)


def _signs(rng, a, x):
    return 2 * _binary01(rng, a, x) - 1


def _counts(rng, a, x):
    return int(rng.poisson(np.exp(0.3 * (a[0] % 4) + 0.4 * x[0])))


def _classes(rng, a, x):
    return 1 + int(a[0] % 3)


def _avg(err: str) -> str:
    return re.findall(r"^average loss = (\S+)", err, re.M)[-1]


CASES = {
    "squared default": (_real, []),
    "passes, holdout, cache_file": (_real, ["--passes", "3", "--cache_file", "c.cache",
                                            "-k", "-q", "ab"]),
    "logistic 0/1 labels": (_binary01, ["--loss_function", "logistic"]),
    "hinge 0/1 labels": (_binary01, ["--loss_function", "hinge"]),
    "quantile tau 0.3": (_real, ["--loss_function", "quantile", "--quantile_tau", "0.3"]),
    "oaa": (_classes, ["--oaa", "3"]),
    "starting weights": (_real, ["--constant", "2.5", "--initial_weight", "0.01", "-b", "12"]),
    "initial_t": (_real, ["--initial_t", "10", "--power_t", "0.4", "-b", "12"]),
    "random weights": (_real, ["--random_weights", "--random_seed", "7", "-b", "12"]),
    "normal weights": (_binary01, ["--truncated_normal_weights", "-b", "12",
                                   "--loss_function", "logistic"]),
    "classic loss, passes": (_real, ["--loss_function", "classic", "--passes", "2", "-c",
                                     "-k"]),
    "min and max prediction": (_real, ["--min_prediction", "-0.2", "--max_prediction", "0.5",
                                       "-b", "12"]),
    "poisson loss and link": (_counts, ["--loss_function", "poisson", "--link", "poisson",
                                        "--passes", "2", "-c", "-k"]),
    "decay_learning_rate, passes": (_binary01, ["--decay_learning_rate", "0.6", "--passes",
                                                "3", "-c", "-k", "--loss_function",
                                                "logistic", "-l", "0.8"]),
    "holdout_after, one pass": (_real, ["--holdout_after", "250", "-b", "12"]),
    "holdout_after, passes": (_real, ["--holdout_after", "250", "--passes", "3", "-c", "-k"]),
    "permutations": (_real, ["-q", "aa", "--permutations", "-b", "14"]),
    "leave duplicate interactions": (_real, ["-q", "ab", "-q", "ba", "--cubic", "a::",
                                             "--leave_duplicate_interactions"]),
    "oaa probabilities": (_classes, ["--oaa", "3", "--loss_function", "logistic",
                                     "--probabilities"]),
    # VW's batch learner: a -p line per example per pass, VW's steps and stopping rules
    "bfgs squared, no holdout": (_real, ["--bfgs", "--passes", "6", "--holdout_off", "-c",
                                         "-k", "-q", "ab"]),
    "bfgs logistic soft labels, l2, holdout": (_binary01, [
        "--bfgs", "--passes", "5", "--loss_function", "logistic", "--l2", "0.5", "-c",
        "-k"]),
    "bfgs binary, holdout: its 0/1 loss": (_signs, ["--bfgs", "--binary", "--passes", "4",
                                                    "-c", "-k"]),
    "bfgs hessian_on, mem 3, no bias l2": (_real, [
        "--bfgs", "--hessian_on", "--mem", "3", "--passes", "6", "--l2", "0.1",
        "--no_bias_regularization", "--holdout_off", "-c", "-k", "-b", "10"]),
    # VW's update rules with one global learning rate
    "invariant alone, initial_t, power_t": (_real, ["--invariant", "-l", "2", "--initial_t",
                                                    "100", "--power_t", "1"]),
    "sgd, logistic, passes": (_binary01, ["--sgd", "--loss_function", "logistic",
                                          "--passes", "2", "-c", "-k", "-r", "raw"]),
    # VW's parse-time feature generation
    "ngram and skips": (_real, ["--ngram", "2", "--skips", "1", "-b", "16"]),
    "ngram of one namespace, crossed": (_real, ["--ngram", "a3", "--skips", "a1", "-q",
                                                "ab"]),
    "redefine, then -q and --ignore": (_real, ["--redefine", "c:=ab", "--redefine", "d:=b",
                                               "-q", "cd", "--ignore", "b"]),
    "feature_limit, hash_seed, passes": (_real, ["--feature_limit", "a2", "--hash_seed", "3",
                                                 "--passes", "2", "-c", "-k"]),
    "conjugate gradient": (_real, ["--conjugate_gradient", "--passes", "5", "--l2", "1",
                                   "--holdout_off", "-c", "-k", "-r", "raw"]),
    "expectile q 0.2, passes, -q": (_real, ["--loss_function", "expectile", "--expectile_q",
                                            "0.2", "--passes", "3", "-c", "-k", "-q", "ab"]),
    "expectile with --sgd": (_real, ["--sgd", "--loss_function", "expectile",
                                     "--expectile_q", "0.3", "-l", "0.05"]),
    "glf1 link, expectile, l2": (_real, ["--link", "glf1", "--loss_function", "expectile",
                                         "--expectile_q", "0.4", "--l2", "1e-4"]),
}


@pytest.mark.parametrize("flags", [
    ["--loss_function", "expectile", "--expectile_q", "0.25", "-q", "ab"],
    ["--loss_function", "expectile", "--expectile_q", "0.1", "--passes", "2", "-c", "-k"],
    ["--link", "glf1", "-l", "2"],
])
def test_expectile_and_glf1_equal_vw_to_the_bit(flags, tmp_path, capfd, monkeypatch):
    """Expectile loss and the glf1 link: -p, --readable_model and VW's progress table and
    closing block byte for byte; -f's model predicts in the real VW as VW's own."""
    (tmp_path / "d.vw").write_text("\n".join(_lines(1500, 11, _real)) + "\n")
    args = ["-d", "d.vw", *flags]
    want = run_vw([*args, "-p", "vw.p", "--readable_model", "vw.rm", "-f", "vw.m"], tmp_path)
    code, got = run_ts(capfd, [*args, "-p", "ts.p", "--readable_model", "ts.rm", "-f",
                               "ts.m"], tmp_path, monkeypatch)
    assert code == 0, got
    for ext in ("p", "rm"):
        assert (tmp_path / f"ts.{ext}").read_bytes() == (tmp_path / f"vw.{ext}").read_bytes()

    def table(err: str) -> list[str]:
        return [ln for ln in err.splitlines() if re.match(r"^[\d.]+ [\d.]+ |^(number|weighted|average|best|total)", ln)]

    assert table(got) == table(want) and table(want)
    for m in ("vw", "ts"):
        run_vw(["-t", "-i", f"{m}.m", "-d", "d.vw", "-p", f"{m}.t"], tmp_path)
    assert (tmp_path / "ts.t").read_bytes() == (tmp_path / "vw.t").read_bytes()


@pytest.mark.parametrize("case", sorted(CASES))
def test_terascale_vw_gives_vws_predictions_and_average_loss(case, tmp_path, capfd,
                                                             monkeypatch):
    label, flags = CASES[case]
    (tmp_path / "d.vw").write_text("\n".join(_lines(400, 5, label)) + "\n")
    args = ["-d", "d.vw", *flags]
    want = run_vw([*args, "-p", "vw.p"], tmp_path)
    code, got = run_ts(capfd, [*args, "-p", "ts.p"], tmp_path, monkeypatch)
    assert code == 0, got
    v, t = numbers(tmp_path / "vw.p"), numbers(tmp_path / "ts.p")
    assert len(v) == len(t) > 0
    np.testing.assert_allclose(t, v, rtol=1e-5, atol=1e-5)
    assert _avg(got) == _avg(want)
    assert "finished run" in got


def test_raw_predictions_and_test_only_without_a_model(tmp_path, capfd, monkeypatch):
    (tmp_path / "d.vw").write_text("\n".join(_lines(300, 7, _binary01)) + "\n")
    args = ["-d", "d.vw", "--loss_function", "logistic", "--link", "logistic"]
    run_vw([*args, "-p", "vw.p", "-r", "vw.r"], tmp_path)
    code, err = run_ts(capfd, [*args, "-p", "ts.p", "-r", "ts.r"], tmp_path, monkeypatch)
    assert code == 0, err
    for ext in ("p", "r"):
        np.testing.assert_allclose(numbers(tmp_path / f"ts.{ext}"),
                                   numbers(tmp_path / f"vw.{ext}"), rtol=1e-5, atol=1e-5)
    want = run_vw(["-t", "-d", "d.vw", "-p", "vw.t"], tmp_path)
    code, got = run_ts(capfd, ["-t", "-d", "d.vw", "-p", "ts.t"], tmp_path, monkeypatch)
    assert code == 0 and _avg(got) == _avg(want)
    assert np.all(numbers(tmp_path / "ts.t") == numbers(tmp_path / "vw.t"))


def test_quiet_is_silent_and_linear_train_says_where_it_differs(tmp_path, capfd,
                                                                monkeypatch):
    from terascale.cli import main

    (tmp_path / "d.vw").write_text("\n".join(_lines(50, 3, _binary01)) + "\n")
    code, err = run_ts(capfd, ["-d", "d.vw", "--quiet"], tmp_path, monkeypatch)
    assert code == 0 and err == ""
    capfd.readouterr()
    assert main(["linear", "train", "d.vw"]) == 0
    err = capfd.readouterr().err
    assert "logistic loss (VW: squared)" in err and "terascale vw" in err


@pytest.mark.parametrize("flag, words", [
    (["--cb", "2"], "--cb (a Vowpal Wabbit option) is not supported by terascale vw"),
    (["--lda", "3"], "--lda"),
    (["--search", "3"], "learning to search"),
    (["--ftrl"], "--ftrl"),
    (["--frobnicate"], "--frobnicate"),
    (["--oaa", "3", "-i", "m"], "--oaa -i m: -i takes VW's one-against-all model"),
    (["--loss_function", "quantile", "--bfgs", "--passes", "2"], "no batch form"),
])
def test_options_outside_the_linear_learner_are_refused_by_name(flag, words, tmp_path, capfd,
                                                                monkeypatch):
    (tmp_path / "d.vw").write_text("\n".join(_lines(20, 3, _classes)) + "\n")
    code, err = run_ts(capfd, ["-d", "d.vw", *flag], tmp_path, monkeypatch)
    assert code == 2 and words in err, err


def test_standard_input_with_one_worker_and_with_two(tmp_path):
    """`-d -`, `-d /dev/stdin`, a pipe, and no -d at all (VW reads standard input then):
    the stream is copied to a file once, so passes and workers each read their part of it."""
    data = "\n".join(_lines(300, 9, _real)) + "\n"
    (tmp_path / "d.vw").write_text(data)
    run_vw(["-d", "d.vw", "-p", "vw.p", "--passes", "2", "-c", "-k"], tmp_path)
    ts = [sys.executable, "-m", "terascale"]
    for src in (["-d", "-"], []):
        r = subprocess.run([*ts, "vw", *src, "-p", "ts.p", "--passes", "2", "-c", "-k"],
                           input=data, cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        np.testing.assert_allclose(numbers(tmp_path / "ts.p"), numbers(tmp_path / "vw.p"),
                                   rtol=1e-5, atol=1e-5)
    with open(tmp_path / "d.vw") as f:  # a redirected file: the workers read a copy
        r = subprocess.run([*ts, "vw", "-d", "/dev/stdin", "-n", "2", "-f", "m2"], stdin=f,
                           cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "number of examples = 300" in r.stderr and (tmp_path / "m2").stat().st_size > 0
    r = subprocess.run([*ts, "vw", "--cache_file", "c.cache", "--passes", "2"], input="",
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--cache_file c.cache without -d" in r.stderr


@FULL  # (a job of two workers: ~2 s; test_worker_error_names_the_input_as_given in CI)
def test_workers_error_on_standard_input_names_the_stream(tmp_path):
    """-n 2 on standard input with a bad line: the workers' error names the stream (as -n 1
    does), not its temporary copy."""
    data = "\n".join(_lines(300, 9, _real)) + "\n1 |a x:1:2\n"
    r = subprocess.run([sys.executable, "-m", "terascale", "vw", "-n", "2"], input=data,
                       cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert r.returncode == 2 and "stdin, line 301: a feature has more" in r.stderr, r.stderr
    assert "terascale-stdin" not in r.stderr


@pytest.mark.parametrize("flags", [["-b", "24", "-q", "ab"],
                                   ["-b", "28", "--cubic", "abb", "--predict_only_model"],
                                   ["--loss_function", "logistic", "--noconstant",
                                    "--interactions", "aab", "--passes", "2", "-c", "-k"],
                                   ["--ngram", "2", "--skips", "1", "--hash_seed", "3", "-b",
                                    "16"]])
def test_models_move_both_ways(flags, tmp_path, capfd, monkeypatch):
    """-f writes VW's binary model: the real vw -i loads it and predicts as with its own;
    -i reads VW's model and training continues as VW's would."""
    label = _binary01 if "logistic" in flags else _real
    (tmp_path / "d.vw").write_text("\n".join(_lines(300, 13, label)) + "\n")
    code, err = run_ts(capfd, ["-d", "d.vw", *flags, "-f", "ts.model"], tmp_path, monkeypatch)
    assert code == 0, err
    run_vw(["-d", "d.vw", *flags, "-f", "vw.model"], tmp_path)
    run_vw(["-i", "ts.model", "-t", "-d", "d.vw", "-p", "from_ts.p"], tmp_path)
    run_vw(["-i", "vw.model", "-t", "-d", "d.vw", "-p", "from_vw.p"], tmp_path)
    np.testing.assert_allclose(numbers(tmp_path / "from_ts.p"),
                               numbers(tmp_path / "from_vw.p"), rtol=1e-5, atol=1e-6)
    keep = [f for f in flags if f in ("--loss_function", "logistic")]
    run_vw(["-i", "vw.model", "-d", "d.vw", *keep, "-p", "more_vw.p"], tmp_path)
    code, err = run_ts(capfd, ["-i", "vw.model", "-d", "d.vw", *keep, "-p", "more_ts.p"],
                    tmp_path, monkeypatch)
    assert code == 0, err
    np.testing.assert_allclose(numbers(tmp_path / "more_ts.p"),
                               numbers(tmp_path / "more_vw.p"), rtol=1e-5, atol=1e-5)


def test_audit_prints_vws_lines(tmp_path):
    """--audit: each example's prediction, then its features as name:index:value:weight@g2
    sorted by |weight * value|, the same text as VW's (names gone after the first pass,
    which VW reads from its cache)."""
    (tmp_path / "d.vw").write_text("\n".join(_lines(60, 11, _real)) + "\n")
    args = ["-d", "d.vw", "--audit", "-q", "ab", "--passes", "2", "-c", "-k", "-b", "12"]
    runs = []
    for cmd in ([sys.executable, "-m", "vowpalwabbit"], [sys.executable, "-m", "terascale",
                                                          "vw"]):
        r = subprocess.run([*cmd, *args], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        runs.append(r.stdout)
    assert runs[0].count("\n") > 100 and "\ta^" in runs[0]
    assert runs[1] == runs[0]


def test_bfgs_regularizer_files_move_both_ways(tmp_path, capfd, monkeypatch):
    """--output_feature_regularizer_binary once L-BFGS converges, read back by VW's
    --input_feature_regularizer (and VW's by terascale): the same predictions."""
    (tmp_path / "d.vw").write_text("\n".join(_lines(300, 17, _real)) + "\n")
    base = ["-d", "d.vw", "--bfgs", "--l2", "0.1", "-b", "10", "--holdout_off", "-c", "-k",
            "--predict_only_model"]
    out = [*base, "--passes", "60", "--termination", "0.01"]
    run_vw([*out, "--output_feature_regularizer_binary", "vw.reg"], tmp_path)
    code, err = run_ts(capfd, [*out, "--output_feature_regularizer_binary", "ts.reg"], tmp_path,
                    monkeypatch)
    assert code == 0 and (tmp_path / "ts.reg").exists(), err
    back = [*base, "--passes", "4"]
    run_vw([*back, "--input_feature_regularizer", "ts.reg", "-p", "a.p"], tmp_path)
    run_vw([*back, "--input_feature_regularizer", "vw.reg", "-p", "b.p"], tmp_path)
    code, err = run_ts(capfd, [*back, "--input_feature_regularizer", "vw.reg", "-p", "c.p"],
                    tmp_path, monkeypatch)
    assert code == 0, err
    b = numbers(tmp_path / "b.p")
    assert len(b) == 4 * 300
    np.testing.assert_allclose(numbers(tmp_path / "a.p"), b, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(numbers(tmp_path / "c.p"), b, rtol=1e-5, atol=1e-5)


def test_bfgs_warm_starts_from_a_vw_model(tmp_path, capfd, monkeypatch):
    """-i MODEL --bfgs: VW's batch learner starts from the model's weights, loss and
    prediction range."""
    (tmp_path / "d.vw").write_text("\n".join(_lines(200, 19, _real)) + "\n")
    run_vw(["-d", "d.vw", "-f", "m", "--predict_only_model", "-q", "ab"], tmp_path)
    args = ["-d", "d.vw", "-i", "m", "--bfgs", "--passes", "4", "--l2", "0.5", "-c", "-k",
            "--predict_only_model"]
    want = run_vw([*args, "-p", "vw.p"], tmp_path)
    code, got = run_ts(capfd, [*args, "-p", "ts.p"], tmp_path, monkeypatch)
    assert code == 0, got
    v = numbers(tmp_path / "vw.p")
    assert len(v) == 4 * 200
    np.testing.assert_allclose(numbers(tmp_path / "ts.p"), v, rtol=1e-5, atol=1e-5)
    assert _avg(got) == _avg(want)


def test_preserved_performance_counters(tmp_path, capfd, monkeypatch):
    """-f keeps VW's counters (the run's loss and labelled weight); with
    --preserve_performance_counters a run from -i reports the average over both runs."""
    (tmp_path / "d.vw").write_text("\n".join(_lines(200, 23, _real)) + "\n")
    (tmp_path / "e.vw").write_text("\n".join(_lines(100, 29, _real)) + "\n")
    run_vw(["-d", "d.vw", "-f", "vw.m"], tmp_path)
    assert run_ts(capfd, ["-d", "d.vw", "-f", "ts.m"], tmp_path, monkeypatch)[0] == 0
    more = ["-d", "e.vw", "--preserve_performance_counters"]
    want = _avg(run_vw([*more, "-i", "vw.m"], tmp_path))
    assert _avg(run_vw([*more, "-i", "ts.m"], tmp_path)) == want  # VW reads our counters
    code, got = run_ts(capfd, [*more, "-i", "vw.m"], tmp_path, monkeypatch)
    assert code == 0 and _avg(got) == want
    assert _avg(run_vw(["-d", "e.vw", "-i", "vw.m"], tmp_path)) != want  # (they count)


def _table(err: str) -> str:
    """The progress table and closing block of a run's stderr."""
    return err[err.index("average  since"):]


def test_preserved_counters_carry_the_table_and_block_on(tmp_path, capfd, monkeypatch):
    """--preserve_performance_counters continues all of VW's counters: the table goes on at
    -i's example counter and next line, the closing block counts both runs (one more
    pass), and the model written carries them on to the next such run."""
    (tmp_path / "d.vw").write_text("\n".join(_lines(200, 23, _real)) + "\n")
    (tmp_path / "e.vw").write_text("\n".join(_lines(100, 29, _real)) + "\n")
    run_vw(["-d", "d.vw", "-f", "m", "-P", "30"], tmp_path)
    keep = ["--preserve_performance_counters", "-P", "30"]
    want = [_table(run_vw(["-d", "e.vw", "-i", "m", *keep, "-f", "vw.m2"], tmp_path)),
            _table(run_vw(["-d", "d.vw", "-i", "vw.m2", *keep], tmp_path))]
    got = []
    for data, model, out in (("e.vw", "m", ["-f", "ts.m2"]), ("d.vw", "ts.m2", [])):
        code, err = run_ts(capfd, ["-d", data, "-i", model, *keep, *out], tmp_path,
                           monkeypatch)
        assert code == 0, err
        got.append(_table(err))
    assert got == want
    assert " 210 " in got[0] and "passes used = 3" in got[1]  # (at -i's counter, +1 pass)


@pytest.mark.parametrize("flags", [["--passes", "2", "-c", "-k", "--holdout_off"],
                                   ["--oaa", "3"],
                                   pytest.param(["--passes", "3", "-c", "-k"], marks=FULL),
                                   pytest.param(["--adaptive"], marks=FULL),
                                   pytest.param(["--oaa", "3", "--passes", "2", "-c", "-k"],
                                                marks=FULL),
                                   pytest.param(["--oaa", "3", "--probabilities",
                                                 "--loss_function", "logistic"],
                                                marks=FULL)])
def test_preserved_counters_carry_the_numba_pass_table_on(flags, tmp_path, capfd,
                                                          monkeypatch):
    """--preserve_performance_counters on the numba pass (--passes, --oaa, VW's other
    update rules): the table goes on at -i's counter, weight and next line (with a
    holdout, its lines the holdout's from the first pass, as VW's); the closing block
    (--probabilities' multiclass log loss too), -f's counters and --readable_model count
    both runs."""
    rng = np.random.default_rng(6)
    oaa = "--oaa" in flags
    lines = [f"{rng.integers(1, 4) if oaa else rng.choice([-1, 1])} |a "
             f"f{rng.integers(12)} g{rng.integers(5)} x:{rng.normal():.3f}"
             for _ in range(150)]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    run_vw(["-d", "d.vw", "-f", "m", *flags[:2 if oaa else 0],
            *(["--adaptive"] if "--adaptive" in flags else []),
            *(["--loss_function", "logistic"] if "logistic" in flags else [])], tmp_path)
    keep = ["-d", "d.vw", "-i", "m", "--preserve_performance_counters", *flags]
    want = run_vw([*keep, "-f", "vw.m", "--readable_model", "vw.t"], tmp_path)
    code, got = run_ts(capfd, [*keep, "-f", "ts.m", "--readable_model", "ts.t"], tmp_path,
                       monkeypatch)
    assert code == 0, got
    assert _table(got) == _table(want)
    assert int(_table(got).splitlines()[2].split()[2]) > 150  # (-i's counter on)
    assert (tmp_path / "ts.t").read_text() == (tmp_path / "vw.t").read_text()


def test_quiet_prints_nothing_in_a_fresh_process(tmp_path):
    """--quiet: not even the line a job of size 1 prints, nor linear train's summary."""
    (tmp_path / "d.vw").write_text("\n".join(_lines(50, 3, _real)) + "\n")
    ts = [sys.executable, "-m", "terascale"]
    for cmd in (["vw", "-d", "d.vw"], ["linear", "train", "d.vw", "--loss", "squared"],
                ["vw", "-d", "d.vw", "--bfgs", "--passes", "3", "--predict_only_model"]):
        r = subprocess.run([*ts, *cmd, "--quiet", "-f", "m"], cwd=tmp_path, text=True,
                           capture_output=True, timeout=120,
                           env={k: v for k, v in __import__("os").environ.items()
                                if k != "TERASCALE_QUIET"})
        assert r.returncode == 0 and r.stderr == "" and r.stdout == "", (cmd, r.stderr)


_ANON = ["1 |ns :1 :2 a b :3", "0 |ns 1.5 :0.5 |x :2 c", "1 | :1 :4 z", "0 |ns 7 8:2 :1",
         "1 |ns :0 :2 |x:2 :1 q :3", "0 |ns :1 |x :0 :0 :5", "1 |ns :2 |ns :3"]


@pytest.mark.parametrize("flags", [[], ["-q", "nx"]])
def test_anonymous_features_hash_as_vws(flags, tmp_path):
    """``:v`` features get the namespace hash plus a running count per namespace (zero values
    counted, then dropped): VW's predictions, --invert_hash and --audit text, from the
    compiled parser (no flags) and the numba one (interactions)."""
    (tmp_path / "d.vw").write_text("\n".join(_ANON * 3) + "\n")
    args = ["-d", "d.vw", "-b", "18", *flags]
    outs = []
    for cmd in ([sys.executable, "-m", "vowpalwabbit"], [sys.executable, "-m", "terascale",
                                                          "vw"]):
        tag = "vw" if "vowpalwabbit" in cmd else "ts"
        r = subprocess.run([*cmd, *args, "--audit", "-p", f"{tag}.p", "--invert_hash",
                            f"{tag}.ih"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        body = (tmp_path / f"{tag}.ih").read_text().split(":0:", 1)
        audit = "".join(ln for ln in r.stdout.splitlines(True) if not ln.startswith("[info]"))
        outs.append((audit, (tmp_path / f"{tag}.p").read_text(), body[-1]))
    assert outs[0][0].count("ns^:") > 10
    assert outs[1] == outs[0]


def test_compiled_and_numba_parsers_agree_on_anonymous_features():
    """The two parsers give the same indices for ``:v`` features (VW's running count)."""
    from terascale.linear._vw import _vwtext_fast
    from terascale.linear._vw._vwparse import parse_vw_bytes

    if _vwtext_fast._FAST is None:
        pytest.skip("the compiled parser is not built")
    buf = np.frombuffer(("\n".join(_ANON) + "\n").encode(), np.uint8)
    none = np.zeros(256, bool)
    table = np.zeros((0, 4), np.int32)  # (interaction_table's type, as the runs pass it)
    fast = _vwtext_fast.parse_vw(buf, (1 << 18) - 1, table, True, False, none, none)
    slow = parse_vw_bytes(buf, (1 << 18) - 1, table, True, False, none, none, False)
    for a, b in zip(fast[:3], slow[:3]):
        np.testing.assert_array_equal(a, b)
    assert len(set(fast[1][fast[0][0]:fast[0][1]].tolist())) == 6  # ns+0, ns+1, ns+2, a, b, C


@pytest.mark.parametrize("flags", [["--oaa", "3", "-b", "18"], ["--oaa", "5", "-q", "ab"]])
def test_oaa_model_is_vws(flags, tmp_path, capfd, monkeypatch):
    """--oaa K with -f: VW's interleaved one-against-all model (each class 2**(b - s)
    weights, s = ceil(log2 K)); the real vw -i loads it and predicts as with its own, and
    the training predictions are VW's (features that collide only in VW's layout too)."""
    rng = np.random.default_rng(5)
    lines = []
    for _ in range(300):
        a = rng.choice(3000, size=3, replace=False)
        lines.append(f"{1 + a[0] % int(flags[1])} |a " + " ".join(f"f{j}" for j in a)
                     + f" x:{rng.normal():.3f} |b g{a[1] % 7}")
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    code, err = run_ts(capfd, ["-d", "d.vw", *flags, "-f", "ts.model", "-p", "ts.p"], tmp_path,
                    monkeypatch)
    assert code == 0, err
    run_vw(["-d", "d.vw", *flags, "-f", "vw.model", "-p", "vw.p"], tmp_path)
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()
    run_vw(["-i", "ts.model", "-t", "-d", "d.vw", "-p", "from_ts.p"], tmp_path)
    run_vw(["-i", "vw.model", "-t", "-d", "d.vw", "-p", "from_vw.p"], tmp_path)
    got = (tmp_path / "from_ts.p").read_text()
    assert got == (tmp_path / "from_vw.p").read_text() and len(set(got.split())) > 1


def test_oaa_on_two_workers_writes_a_model_vw_loads(tmp_path):
    """--oaa K -n 2: each class's learner trained on two workers and averaged; VW's model,
    which the real vw -i predicts with close to the one-worker model (and -p refused)."""
    lines = _lines(400, 17, _classes)
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    for n in ("1", "2"):
        r = subprocess.run([sys.executable, "-m", "terascale", "vw", "-d", "d.vw", "--oaa",
                            "3", "-n", n, "-f", f"m{n}", "--quiet"], cwd=tmp_path,
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        run_vw(["-i", f"m{n}", "-t", "-d", "d.vw", "-p", f"p{n}"], tmp_path)
    truth = np.array([float(ln.split()[0]) for ln in lines])
    p1, p2 = numbers(tmp_path / "p1"), numbers(tmp_path / "p2")
    assert (p1 == p2).mean() > 0.8 and (p2 == truth).mean() > (p1 == truth).mean() - 0.1
    r = subprocess.run([sys.executable, "-m", "terascale", "vw", "-d", "d.vw", "--oaa", "3",
                        "-n", "2", "-p", "p"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 2 and "needs -n 1" in r.stderr


def test_a_vw_model_trained_with_l1_and_l2_predicts_as_in_vw(tmp_path, capfd, monkeypatch):
    """VW saves its lazy L1/L2 (gravity, contraction) beside weights it has not applied
    them to: -i of that model, -t, predicts with them applied, as vw -i does."""
    (tmp_path / "d.vw").write_text("\n".join(_lines(300, 19, _real)) + "\n")
    run_vw(["-d", "d.vw", "--l1", "1e-4", "--l2", "1e-4", "-f", "vw.model"], tmp_path)
    run_vw(["-i", "vw.model", "-t", "-d", "d.vw", "-p", "vw.p"], tmp_path)
    code, err = run_ts(capfd, ["-i", "vw.model", "-t", "-d", "d.vw", "-p", "ts.p"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    want = numbers(tmp_path / "vw.p")
    np.testing.assert_allclose(numbers(tmp_path / "ts.p"), want, rtol=1e-5, atol=1e-6)
    assert (want == 0).mean() < 0.5  # (the L1 shrinks, but leaves most predictions)


def test_oaa_reads_a_last_label_word_as_the_tag_as_vw(tmp_path, capfd, monkeypatch):
    """--oaa: ``2|a x`` and a line ``2`` are unlabelled examples tagged 2 (the label
    section's last word touches its end), as VW reads them, not examples of class 2."""
    (tmp_path / "d.vw").write_text("1 |a x\n2|a x\n2\n3 |a y\n2 't\n2 |a y\n3\n")
    run_vw(["--oaa", "3", "-d", "d.vw", "-p", "vw.p"], tmp_path)
    code, err = run_ts(capfd, ["--oaa", "3", "-d", "d.vw", "-p", "ts.p"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()
    assert _avg(err) == "0.750000"  # (4 labelled examples, as VW's closing block)


def test_the_link_moves_with_the_model_both_ways(tmp_path, capfd, monkeypatch):
    """VW keeps --link in the model and applies it to -i's predictions: terascale's -f
    records it (vw -i predicts probabilities from it) and -i of VW's model applies it."""
    (tmp_path / "d.vw").write_text("\n".join(_lines(300, 29, _binary01)) + "\n")
    flags = ["--loss_function", "logistic", "--link", "logistic"]
    code, err = run_ts(capfd, ["-d", "d.vw", *flags, "-f", "ts.model"], tmp_path, monkeypatch)
    assert code == 0, err
    run_vw(["-d", "d.vw", *flags, "-f", "vw.model"], tmp_path)
    run_vw(["-i", "vw.model", "-t", "-d", "d.vw", "-p", "want.p"], tmp_path)
    run_vw(["-i", "ts.model", "-t", "-d", "d.vw", "-p", "vw_of_ts.p"], tmp_path)
    code, err = run_ts(capfd, ["-i", "vw.model", "-t", "-d", "d.vw", "-p", "ts_of_vw.p"],
                       tmp_path, monkeypatch)
    assert code == 0, err
    want = numbers(tmp_path / "want.p")
    assert want.min() >= 0 and want.max() <= 1 and want.std() > 0.05  # probabilities
    for got in ("vw_of_ts.p", "ts_of_vw.p"):
        np.testing.assert_allclose(numbers(tmp_path / got), want, rtol=1e-5, atol=1e-6)


def test_a_vw_model_keeps_its_learning_rate_and_power_t_for_minus_i(tmp_path, capfd,
                                                                   monkeypatch):
    """VW keeps -l and --power_t given in its model (``--learning_rate 0.3...``): -i of it
    is read (was refused as another learner's) and training goes on with them where they
    are left out, with the ones given where given, as VW's."""
    (tmp_path / "d.vw").write_text("\n".join(_lines(300, 31, _real)) + "\n")
    run_vw(["-d", "d.vw", "-l", "0.3", "--power_t", "0.3", "-f", "vw.model"], tmp_path)
    for name, more in (("kept", []), ("given", ["-l", "0.5", "--power_t", "0.5"])):
        run_vw(["-i", "vw.model", "-d", "d.vw", *more, "-p", f"vw_{name}.p"], tmp_path)
        code, err = run_ts(capfd, ["-i", "vw.model", "-d", "d.vw", *more, "-p",
                                   f"ts_{name}.p"], tmp_path, monkeypatch)
        assert code == 0, err
        np.testing.assert_allclose(numbers(tmp_path / f"ts_{name}.p"),
                                   numbers(tmp_path / f"vw_{name}.p"), rtol=1e-5, atol=1e-6)
    assert not np.allclose(numbers(tmp_path / "vw_kept.p"), numbers(tmp_path / "vw_given.p"))
    # and terascale's -f keeps them as VW's does: vw -i goes on with them
    code, err = run_ts(capfd, ["-d", "d.vw", "-l", "0.3", "--power_t", "0.3", "-f",
                               "ts.model"], tmp_path, monkeypatch)
    assert code == 0, err
    run_vw(["-i", "ts.model", "-d", "d.vw", "-p", "vw_of_ts.p"], tmp_path)
    np.testing.assert_allclose(numbers(tmp_path / "vw_of_ts.p"),
                               numbers(tmp_path / "vw_kept.p"), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("flags", [["--invert_hash", "names"], ["--ignore", "é"],
                                   ["--keep", "éa"], ["--cubic", "éa"]])
def test_bytes_that_are_not_ascii_in_names_tags_and_namespace_flags_as_vw(
        flags, tmp_path, capfd, monkeypatch):
    """Tags and names of any bytes are written back as read (they were U+FFFD, and an
    --invert_hash name was its index); a non-ASCII flag letter is its UTF-8 bytes, as VW
    reads its argument (``é`` was latin-1's one byte: --ignore é ignored nothing)."""
    rows = [b"1 't\xff\xfe|a x\xff0 y", b"-1 caf\xc3\xa9|\xc3\xa9 x z |a y",
            b"1 |\xc3\xa9t w |a x\xff0", b"-1 |\xa9 q |a y"]
    (tmp_path / "d.vw").write_bytes(b"\n".join(rows * 20) + b"\n")
    r = subprocess.run([sys.executable, "-m", "vowpalwabbit", "-d", "d.vw", *flags, "-p",
                        "vw.p"], cwd=tmp_path, capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr  # (bytes: VW names the ignored namespaces' bytes)
    if "--invert_hash" in flags:
        (tmp_path / "vw.names").write_bytes((tmp_path / "names").read_bytes())
    code, err = run_ts(capfd, ["-d", "d.vw", *flags, "-p", "ts.p"], tmp_path, monkeypatch)
    assert code == 0, err
    assert (tmp_path / "ts.p").read_bytes() == (tmp_path / "vw.p").read_bytes()
    if "--invert_hash" in flags:
        def names(p):
            return sorted(ln.split(b":")[0] for ln in p.read_bytes().splitlines()
                          if b"^" in ln)
        assert names(tmp_path / "names") == names(tmp_path / "vw.names")
        assert b"a^x\xff0" in names(tmp_path / "names")


@pytest.mark.parametrize("rule", [["--bfgs", "--passes", "3", "-c", "-k",
                                   "--predict_only_model"],
                                  ["--conjugate_gradient", "--passes", "3", "-c", "-k",
                                   "--predict_only_model"],
                                  ["--sgd"], ["--adaptive"], ["--normalized", "--invariant"]])
def test_models_of_vws_other_learners_predict_with_minus_t(rule, tmp_path, capfd,
                                                           monkeypatch):
    """A VW model whose header names its learner (--bfgs, --sgd, --adaptive, ...) was
    refused, and one of --sgd read with the default rule's record width predicted garbage:
    -i reads each one's weights, and -t predicts as vw -i does."""
    (tmp_path / "d.vw").write_text("\n".join(_lines(200, 37, _real)) + "\n")
    run_vw(["-d", "d.vw", *rule, "-f", "vw.model"], tmp_path)
    keep = ["--predict_only_model"] if "--predict_only_model" in rule else []
    run_vw(["-i", "vw.model", "-t", "-d", "d.vw", *keep, "-p", "vw.p"], tmp_path)
    code, err = run_ts(capfd, ["-i", "vw.model", "-t", "-d", "d.vw", "-p", "ts.p"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    want = numbers(tmp_path / "vw.p")
    assert want.std() > 0.01
    np.testing.assert_allclose(numbers(tmp_path / "ts.p"), want, rtol=1e-5, atol=1e-6)


def test_unlabelled_or_empty_input_predicts_and_learns_nothing_as_vw(tmp_path, capfd,
                                                                     monkeypatch):
    """`-i MODEL -d unlabelled.vw -p P` without -t is how VW users predict: each example
    predicted, nothing learned, the model written unchanged (it was "no labelled examples
    to train on"); an empty input finishes with n.a. and an empty model, as in VW."""
    lines = _lines(200, 41, _real)
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    (tmp_path / "u.vw").write_text("\n".join(ln.split(" ", 1)[1] for ln in lines) + "\n")
    (tmp_path / "e.vw").write_text("")
    run_vw(["-d", "d.vw", "-f", "m"], tmp_path)
    run_vw(["-i", "m", "-d", "u.vw", "-p", "vw.p", "-f", "vw.m"], tmp_path)
    code, err = run_ts(capfd, ["-i", "m", "-d", "u.vw", "-p", "ts.p", "-f", "ts.m"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()
    assert _avg(err) == "n.a." and "weighted example sum = 200.000000" in err
    for m in ("vw.m", "ts.m"):
        run_vw(["-i", m, "-t", "-d", "d.vw", "-p", f"{m}.p"], tmp_path)
    assert (tmp_path / "ts.m.p").read_text() == (tmp_path / "vw.m.p").read_text()
    code, err = run_ts(capfd, ["-d", "e.vw", "-f", "e.m"], tmp_path, monkeypatch)
    assert code == 0 and _avg(err) == "n.a." and "number of examples = 0" in err, err


def test_test_only_counts_unlabelled_examples_weight_as_vw(tmp_path, capfd, monkeypatch):
    """-t: VW's progress table (there was none), and its weighted example sum counts every
    example, the average loss the labelled."""
    lines = _lines(100, 43, _real)
    lines = [ln.split(" ", 1)[1] if i % 3 == 0 else ln for i, ln in enumerate(lines)]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    run_vw(["-d", "d.vw", "-f", "m"], tmp_path)
    want = run_vw(["-i", "m", "-t", "-d", "d.vw"], tmp_path)
    code, err = run_ts(capfd, ["-i", "m", "-t", "-d", "d.vw"], tmp_path, monkeypatch)
    assert code == 0, err
    sums = [re.findall(r"weighted example sum = (\S+)", t) for t in (want, err)]
    assert sums[0] == sums[1] == ["100.000000"]
    assert _avg(err) == _avg(want)
    # the closing block in full: the weighted label sum, best constant, feature count;
    # the loss the command line names, whatever the model was trained with (VW's)
    assert err[err.index("finished run"):] == want[want.index("finished run"):]
    args = ["-i", "m", "-t", "-d", "d.vw", "--loss_function", "quantile"]
    want = run_vw(args, tmp_path)
    code, err = run_ts(capfd, args, tmp_path, monkeypatch)
    assert code == 0 and err[err.index("finished run"):] == want[want.index("finished run"):]

    def table(text: str) -> list[str]:
        return [ln for ln in text.splitlines()
                if re.match(r"(\d|n\.a\.)", ln) and len(ln.split()) == 7]

    assert table(err) == table(want) and len(table(want)) > 4
    # the preamble's initial_t: the model's t, as VW prints it
    assert re.findall(r"initial_t = (\S+)", err) == re.findall(r"initial_t = (\S+)", want)
    assert re.findall(r"initial_t = (\S+)", want) == ["100"]


def test_batch_learner_stopped_on_the_holdout_writes_its_best_pass_as_vw(tmp_path, capfd,
                                                                        monkeypatch):
    """VW's batch learner writes its model when a pass's holdout loss improves, and an
    early termination keeps that file: the model is the best pass's, not the last one's."""
    rng = np.random.default_rng(53)
    lines = [f"{rng.choice([-1, 1])} |a " + " ".join(f"f{j}" for j in rng.choice(300, 6))
             for _ in range(400)]  # labels that no feature predicts: no pass improves
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", "--conjugate_gradient", "--passes", "6", "-c", "-k", "--predict_only_model"]
    want = run_vw([*args, "-f", "vw.model"], tmp_path)
    assert "Early termination" in want
    code, err = run_ts(capfd, [*args, "-f", "ts.model"], tmp_path, monkeypatch)
    assert code == 0 and "Early termination" in err, err
    for m in ("vw", "ts"):
        run_vw(["-i", f"{m}.model", "-t", "-d", "d.vw", "--predict_only_model", "-p",
                f"{m}.p"], tmp_path)
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()


def _raw_counts(rng) -> str:
    return (f"{rng.integers(2)} |a f{rng.integers(10)} |d count:{int(10 ** rng.uniform(0, 9))}"
            f" price:{10 ** rng.uniform(-2, 5):.4g}")


def _prices(rng) -> str:
    y = rng.lognormal(3, 2)
    return (f"{y:.6g} |a u{rng.zipf(1.2)} |b p:{y * rng.uniform(0.5, 2):.5g} "
            f"|c c{rng.integers(30)}")


@pytest.mark.parametrize("line, seed, n, flags, note", [
    # raw counts up to 1e9 push the curvature past float's range: the step is 0 without
    # a numpy warning, and the next pass's NaN Wolfe condition ends the table's line on
    # standard error with VW's note on standard output
    (_raw_counts, 3, 60, ["--loss_function", "logistic"], "Derivative 0 detected."),
    # the loss decreasing by less than 0.1%: VW's conjugate gradient goes on (its
    # threshold is 0: --termination is one of --bfgs's options)
    (_prices, 1, 200, [], None),
])
def test_batch_learner_notes_are_vws(line, seed, n, flags, note, tmp_path):
    """VW's batch learner's table on standard error and its notes on standard output,
    line for line, on raw-scale data where its float arithmetic overflows or stalls."""
    rng = np.random.default_rng(seed)
    (tmp_path / "d.vw").write_text("\n".join(line(rng) for _ in range(n)) + "\n")
    args = ["-d", "d.vw", "--conjugate_gradient", "--passes", "8", "-c", "-k", "--l2",
            "1e-4", *flags]
    outs, errs = outputs(args, tmp_path)
    assert outs[1] == outs[0] and (note is None or f"[info] {note}" in outs[0]), outs
    skip = ("Enabled learners", "Input label", "Output pred")  # (not printed: see the guide)
    assert [ln for ln in errs[0].splitlines() if not ln.startswith(skip)] == \
        errs[1].splitlines()


@pytest.mark.parametrize("link, start", [("logistic", []), ("identity", []),
                                         ("identity", ["--initial_weight", "0.01"])])
def test_readable_model_keeps_the_link_and_rates_vw_keeps(link, start, tmp_path, capfd,
                                                          monkeypatch):
    """--readable_model's header names the options VW keeps in the model: --link (given,
    identity too, or kept in -i's model) and the -l/--power_t given (they were left out,
    and its checksum with them); ``start``: starting weights (the numba pass's run)."""
    (tmp_path / "d.vw").write_text("\n".join(_lines(100, 61, _binary01)) + "\n")
    args = ["-d", "d.vw", "--loss_function", "logistic", "--link", link, "-l", "0.25",
            "--power_t", "0.3", "-q", "ab", *start, "--readable_model"]
    run_vw([*args, "vw.txt", "-f", "vw.m"], tmp_path)
    code, err = run_ts(capfd, [*args, "ts.txt", "-f", "ts.m"], tmp_path, monkeypatch)
    assert code == 0, err
    run_vw(["-d", "d.vw", "-i", "vw.m", "--readable_model", "vw.i.txt"], tmp_path)
    code, err = run_ts(capfd, ["-d", "d.vw", "-i", "ts.m", "--readable_model", "ts.i.txt"],
                       tmp_path, monkeypatch)
    assert code == 0, err
    for run in ("", ".i"):
        head = [(tmp_path / f"{t}{run}.txt").read_text().splitlines()[:11]
                for t in ("vw", "ts")]
        assert head[0] == head[1] and f"--link {link}" in head[0][8]


def test_sigterm_leaves_no_temporary_file(tmp_path):
    """The starting weights' model (--normal_weights) and standard input's copy, both made
    before the run blocks reading the stream, go when the run is ended by SIGTERM."""
    import os
    import signal
    import time

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    p = subprocess.Popen([sys.executable, "-m", "terascale", "vw", "--normal_weights",
                          "--quiet"], stdin=subprocess.PIPE, cwd=tmp_path,
                         env={**os.environ, "TMPDIR": str(scratch)})
    p.stdin.write(b"1 |a x\n")  # (the stream stays open: the run waits for the rest)
    p.stdin.flush()
    deadline = time.monotonic() + 60
    while not all(any(scratch.rglob(f"terascale-{what}-*")) for what in ("start", "stdin")):
        assert time.monotonic() < deadline and p.poll() is None
        time.sleep(0.05)
    p.send_signal(signal.SIGTERM)
    assert p.wait(60) == 143
    p.stdin.close()
    assert list(scratch.iterdir()) == []
