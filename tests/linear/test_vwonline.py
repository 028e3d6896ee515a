"""The compiled one-worker learner of ``terascale vw`` (``_vwonline``, ``_vwlearn.c``)
against the numba pass (the same command with ``TERASCALE_NO_CEXT=1``) and the real VW:
predictions, raw predictions, the progress table and closing block, and ``-f``'s model,
bit for bit; a run of it imports no numba; and the rule that says which runs take it."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

import numpy as np
import pytest
from _vw_runs import ab_lines, more, numbers, run_ok, run_ts, vw_in_one_process

from terascale._cext import load
from terascale.linear._vw import VWFAST

# The numba pass of every case runs in make test-vw (TERASCALE_VW_SUITE=all); CI runs it on
# the cases below only (each such run starts numba: most of a case's time), VW on all.
ALL = os.environ.get("TERASCALE_VW_SUITE") == "all"
FAST = load(*VWFAST)
built = pytest.mark.skipif(FAST is None, reason="terascale.linear._vw._vwfast was not built")


def _lines(n: int, seed: int, labels: str) -> list[str]:
    """VW text: real or -1/+1 labels (some unlabelled), importances, tags, scaled
    namespaces, repeated features and values down to 1e-3."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        if labels == "real":
            lab = str(rng.choice(["1", "-1", "0", "0.5", "3.25", "-2", ""]))
        elif labels == "count":
            lab = str(rng.choice(["0", "1", "2", "3", "7", "0.5", ""]))
        else:
            lab = str(rng.choice(["1", "-1", "1", "-1", ""]))
        imp = str(rng.choice(["", "", " 2", " 0.5", " 0"])) if lab else ""
        tag = f" 'ex{i}" if rng.random() < 0.3 else ""
        parts = []
        for _ in range(int(rng.integers(1, 4))):
            ns = str(rng.choice(list("abcde")))
            scale = str(rng.choice(["", "", ":0.5"]))
            feats = " ".join(
                f"f{rng.integers(0, 50)}" if rng.random() < 0.5 else
                f"g{rng.integers(0, 20)}:{rng.choice(['1.5', '-0.25', '3', '1e-3', '100'])}"
                for _ in range(int(rng.integers(1, 7))))
            parts.append(f"|{ns}{scale} {feats}")
        out.append((lab + imp + tag + " " + " ".join(parts)).strip())
    return out


def _who(numba: bool) -> list[tuple[str, list[str], dict | None]]:
    """The compiled path, the numba pass (where ``numba`` or in make test-vw) and VW."""
    return [("c", [sys.executable, "-m", "terascale", "vw"], None),
            *([("numba", [sys.executable, "-m", "terascale", "vw"],
                {"TERASCALE_NO_CEXT": "1"})] if numba or ALL else []),
            ("vw", [sys.executable, "-m", "vowpalwabbit"], None)]


def _same_as_numba(got: dict[str, dict[str, bytes]], files: str | tuple[str, ...]) -> None:
    for f in files if "numba" in got else ():
        assert got["c"][f] == got["numba"][f], f


def _three(tmp_path, data, args: list[str], numba: bool) -> dict[str, dict[str, bytes]]:
    """The files and stderr of the compiled path, the numba pass and VW, each in its
    own directory (the same names)."""
    got = {}
    for who, cmd, env in _who(numba):
        d = tmp_path / who
        d.mkdir()
        err = run_ok([*cmd, "-d", str(data), *args, "-p", "p", "-r", "r", "-f", "m"], d, env)
        got[who] = {"err": err.encode(), **{f: (d / f).read_bytes() for f in "prm"}}
    return got


CASES = [
    ("real", []),
    ("real", ["--loss_function", "squared", "-l", "0.3", "--power_t", "0.4"]),
    ("real", ["--loss_function", "quantile", "--quantile_tau", "0.3"]),
    ("real", ["--loss_function", "classic"]),
    ("real", ["--l1", "1e-4"]),
    ("real", ["--l2", "1e-3"]),
    ("real", ["-q", "ab", "--cubic", "abc", "-b", "20"]),
    ("real", ["--noconstant", "--ignore", "a", "--predict_only_model"]),
    ("real", ["-P", "100"]),
    ("sign", ["--loss_function", "logistic"]),
    ("sign", ["--loss_function", "logistic", "--power_t", "0.3", "-l", "2"]),
    ("sign", ["--loss_function", "hinge"]),
    ("count", ["--loss_function", "poisson"]),
    ("count", ["--loss_function", "poisson", "-l", "0.1", "--power_t", "0.3"]),
    ("real", ["--link", "glf1", "-l", "2"]),
    # VW's -l 0: no weight moves, the sums and counters do
    ("real", ["-l", "0", "--l1", "1e-4"]),
    ("sign", ["--loss_function", "logistic", "-l", "0"]),
    ("sign", ["--ngram", "2", "--loss_function", "logistic"]),
    ("real", ["--ngram", "a3", "--skips", "a1", "-q", "ab", "--ignore", "d"]),
    ("sign", ["--ignore_linear", "ab", "-q", "ab", "--passes", "2", "-c", "-k",
              "--holdout_off", "--loss_function", "logistic"]),
    # VW's starting weights in the table (a case the numba pass runs too in CI)
    ("real", ["--initial_t", "2", "--constant", "0.5", "--initial_weight", "0.01",
              "--min_prediction", "-2", "--max_prediction", "3", "--passes", "2", "-c",
              "-k"]),
    ("sign", ["--initial_t", "1", "--loss_function", "logistic", "--min_prediction", "-0.5"]),
    ("real", ["--random_weights", "--random_seed", "3", "--constant", "0.2"]),
    # --initial_t discards the draw: VW's gd sets every weight to --initial_weight
    ("sign", ["--random_weights", "--initial_t", "1", "--constant", "0.5"]),
]


@built
@pytest.mark.parametrize(("labels", "args"), CASES, ids=[" ".join(a) or "defaults"
                                                         for _, a in CASES])
def test_compiled_learner_equals_the_numba_pass_and_vw(tmp_path, labels, args):
    data = tmp_path / "d.vw"
    data.write_text("\n".join(_lines(2500, len(args), labels)) + "\n")
    got = _three(tmp_path, data, args, numba=CASES.index((labels, args)) % 4 == 0)
    _same_as_numba(got, ("p", "r", "m", "err"))
    assert got["c"]["p"] == got["vw"]["p"]
    # VW reads the compiled path's model as its own: the same predictions with -t
    run_ok([sys.executable, "-m", "vowpalwabbit", "-d", str(data), "-i", "c/m", "-t", "-p",
            "pc"], tmp_path)
    run_ok([sys.executable, "-m", "vowpalwabbit", "-d", str(data), "-i", "vw/m", "-t", "-p",
            "pv"], tmp_path)
    assert (tmp_path / "pc").read_bytes() == (tmp_path / "pv").read_bytes()


def _body(model: bytes) -> bytes:
    """A VW model after its version string (terascale writes its own there)."""
    return model[4 + int.from_bytes(model[:4], "little"):]


def _big_labels(n: int, seed: int) -> list[str]:
    """Labels near 1e6 with importance weights, one real feature: squared losses near
    1e12 at first, then near 1, each added to a double sum near 1e14."""
    rng = np.random.default_rng(seed)
    return [f"{1e6 + 3 * rng.normal():.4f}{rng.choice(['', ' 0.3', ' 2', ' 0.7', ' 1.5'])}"
            f" |a x:{rng.normal():.3f}" for _ in range(n)]


@built
@pytest.mark.parametrize("args", [["-P", "7"], more(["--passes", "3", "-c", "-k"]),
                                  more(["--binary"])])
def test_loss_sums_near_1e14_are_vws_running_sums(tmp_path, args):
    """Each example's loss x weight is added to VW's running sums (the run's, since the
    last line) in turn, by both learners: the table, the closing block and the model's
    counters are VW's bits where a sum of a chunk's losses, added to the run's, was not."""
    data = tmp_path / "d.vw"
    data.write_text("\n".join(_big_labels(1000, 1)) + "\n")
    got = _three(tmp_path, data, ["-l", "1", "--power_t", "0", *args], numba=True)
    _same_as_numba(got, ("p", "r", "m", "err"))
    vw_lines = [ln for ln in got["vw"]["err"].decode().splitlines()
                if not ln.startswith(("Enabled", "Input", "Output"))]
    assert got["c"]["err"].decode().splitlines() == vw_lines
    assert _body(got["c"]["m"]) == _body(got["vw"]["m"])


@built
def test_logistic_predictions_reach_labels_past_50_as_vws(tmp_path):
    """VW's logistic loss starts its prediction range at [-50, 50] and widens it to the
    labels it learns from: with labels of +-80 both learners' predictions pass 50 as
    VW's, and the model's header keeps the range (VW's -t of it predicts as of its own)."""
    rng = np.random.default_rng(3)
    data = tmp_path / "d.vw"
    data.write_text("".join(
        f"{rng.choice(['1', '-1', '80', '-80'])}{rng.choice(['', ' 2', ' 100'])} |a "
        f"f{rng.integers(20)} g{rng.integers(5)}:{rng.choice(['1.5', '100', '-0.25'])}\n"
        for _ in range(400)))
    got = _three(tmp_path, data, ["--loss_function", "logistic"], numba=True)
    _same_as_numba(got, ("p", "r", "m", "err"))
    assert got["c"]["p"] == got["vw"]["p"]
    assert max(numbers(tmp_path / "vw" / "p")) > 50
    for who in ("c", "vw"):
        run_ok([sys.executable, "-m", "vowpalwabbit", "-d", str(data), "-i", f"{who}/m", "-t",
                "-p", f"t{who}"], tmp_path)
    assert (tmp_path / "tc").read_bytes() == (tmp_path / "tvw").read_bytes()


@built
def test_the_model_is_the_same_bits_whatever_the_chunks(tmp_path, capfd, monkeypatch):
    """The compiled learner's chunks (1 KiB first, growing to 4 KiB: seven and more of
    the file; or one chunk of it) move no bit of the table, the predictions or the model's
    counters."""
    from _vw_runs import run_ts

    from terascale.linear._vw import _vwonline

    data = tmp_path / "d.vw"
    data.write_text("\n".join(_big_labels(1000, 2)) + "\n")
    assert data.stat().st_size > 6 << 12
    got = []
    for first, most in ((1 << 10, 1 << 12), (1 << 14, 1 << 18)):
        monkeypatch.setattr(_vwonline, "_FIRST", first)
        monkeypatch.setattr(_vwonline, "_CHUNK", most)
        d = tmp_path / str(first)
        d.mkdir()
        code, err = run_ts(capfd, ["-d", str(data), "-l", "1", "--power_t", "0",
                                   "-p", "p", "-f", "m"], d, monkeypatch)
        assert code == 0, err
        got.append([err, (d / "p").read_bytes(), (d / "m").read_bytes()])
    assert got[0] == got[1]


def test_chunks_of_dense_text_are_read_for_a_bounded_number_of_features():
    """Text of a few features a byte (click rows, ``-q aa``) is read in chunks of at least
    64 KiB; denser text in smaller ones of about ``_MOST`` features, which bound the
    arrays of the chunks in flight, down to 16 KiB (``--cubic :::`` over many namespaces:
    25 a byte)."""
    from terascale.linear._vw._vwonline import _FIRST, _LEAST, _MOST, _chunk_bytes

    assert _chunk_bytes(_LEAST, 3 * _LEAST, 1000) == _LEAST
    dense = _chunk_bytes(_LEAST, 10 * _LEAST, 200)
    assert _FIRST < dense < _LEAST and 10 * dense <= _MOST
    assert _chunk_bytes(_LEAST, 25 * _LEAST, 200) == _FIRST


WARM_CASES = [  # the labels, the first run's flags, who runs it, the warm run's flags
    ("real", [], "vw", []),
    ("real", ["--predict_only_model"], "vw", ["--l1", "1e-4", "--l2", "1e-4"]),
    ("real", ["-q", "ab", "--cubic", "abc", "-b", "20", "-l", "0.3"], "terascale", []),
    ("sign", ["--loss_function", "logistic", "--link", "logistic"], "vw",
     ["--loss_function", "logistic", "--power_t", "0.3"]),
    ("count", ["--loss_function", "poisson", "--noconstant"], "terascale",
     ["--loss_function", "poisson", "-P", "50"]),
    # VW: the command line's -q/--cubic/--interactions replace the model's three
    ("real", ["-q", "ab"], "vw", ["--cubic", "abc"]),
    ("real", [], "terascale", ["-q", "ab", "--interactions", "cde"]),
    # --noconstant given drops the model's constant (its weight stays in the model);
    # --ignore/--keep given add to the model's
    ("real", [], "vw", ["--noconstant"]),
    ("real", ["--ignore", "c"], "vw", ["--ignore", "b"]),
    # --initial_t: every weight's sum starts there, the model's rows (and a save_resume
    # model's sums and state) over it
    ("real", [], "vw", ["--initial_t", "3"]),
    ("real", ["--predict_only_model"], "vw", ["--initial_t", "3", "-b", "18"]),
    # the range: the bounds given over a model's header's; a save_resume model's wins
    ("real", ["--predict_only_model"], "vw", ["--min_prediction", "-0.5",
                                              "--max_prediction", "1"]),
    ("real", [], "vw", ["--max_prediction", "0.5"]),
    # logistic from a squared loss model: VW's range is the model's header's, not [-50, 50]
    ("real", [], "vw", ["--loss_function", "logistic"]),
]


@built
@pytest.mark.parametrize(("labels", "first", "who", "args"), WARM_CASES,
                         ids=[f"{w} {' '.join(f)} -i {' '.join(a)}"
                              for _, f, w, a in WARM_CASES])
def test_warm_starts_equal_the_numba_pass_and_vw(tmp_path, labels, first, who, args):
    data = tmp_path / "first.vw"
    data.write_text("\n".join(_lines(800, len(first), labels)) + "\n")
    if "--initial_t" in args:  # (the next run's features, new ones included)
        data.write_text("\n".join(_lines(800, len(first), labels)[:50]) + "\n")
    cmd = [sys.executable, "-m", "vowpalwabbit" if who == "vw" else "terascale"]
    run_ok([*cmd, *([] if who == "vw" else ["vw"]), "-d", str(data), *first, "-f", "m0",
            "--quiet"], tmp_path)
    more = tmp_path / "d.vw"
    more.write_text("\n".join(_lines(800, 50 + len(args), labels)) + "\n")
    got = _three(tmp_path, more, ["-i", str(tmp_path / "m0"), *args],
                 numba=WARM_CASES.index((labels, first, who, args)) % 4 == 0)
    _same_as_numba(got, ("p", "r", "m", "err"))
    assert got["c"]["p"] == got["vw"]["p"] and got["c"]["r"] == got["vw"]["r"]
    vw_lines = [ln for ln in got["vw"]["err"].decode().splitlines()
                if not ln.startswith(("Enabled", "Input", "Output"))]
    assert got["c"]["err"].decode().splitlines() == vw_lines
    # VW reads the model as its own: its weights, sums and counters are VW's model's
    for m in ("c", "vw"):
        run_ok([sys.executable, "-m", "vowpalwabbit", "--no_stdin", "-i", f"{m}/m",
                "--readable_model", f"rm{m}"], tmp_path)
    assert (tmp_path / "rmc").read_text() == (tmp_path / "rmvw").read_text()


TEST_CASES = [  # the model's labels, its training flags, who trains it, the -t run's flags
    ("real", [], "vw", []),
    ("real", ["--l1", "1e-4", "--l2", "1e-4"], "terascale", []),
    ("real", ["-q", "ab", "--cubic", "abc"], "vw", ["--loss_function", "quantile"]),
    ("sign", ["--loss_function", "logistic", "-q", "ab"], "vw", []),
    ("sign", ["--loss_function", "logistic", "-q", "ab"], "terascale", ["--link", "logistic"]),
    ("sign", ["--loss_function", "hinge"], "terascale", ["--binary"]),
    ("count", ["--loss_function", "poisson"], "vw", ["--quiet"]),
    ("real", ["-q", "ab", "--cubic", "abc"], "vw", ["-q", "ba"]),  # (replaces the model's)
    ("real", ["--predict_only_model"], "vw", ["--max_prediction", "0.5"]),
    ("real", [], "vw", ["--min_prediction", "0"]),
    ("real", [], "vw", ["--noconstant"]),
    # above -b 24: the weights alone in the table (the learner's rows take the numba pass)
    ("sign", ["--loss_function", "logistic", "-b", "25", "--l1", "1e-6"], "vw", []),
    # --ignore_linear given adds to the model's (VW's options add up)
    ("real", ["-q", "ab", "--ignore_linear", "b"], "vw", ["--ignore_linear", "a"]),
    # a namespace written in hex: the model keeps the backslash (VW splits its options line
    # at whitespace alone)
    ("real", ["-q", "\\x61b"], "vw", []),
]


def _tested(tmp_path, data, model, args: list[str], numba: bool
            ) -> dict[str, dict[str, bytes]]:
    """``-t -i model``'s -p, -r and stderr: the compiled path, the numba pass and VW."""
    got = {}
    for who, cmd, env in _who(numba):
        d = tmp_path / f"t-{who}"
        d.mkdir()
        err = run_ok([*cmd, "-t", "-i", str(model), "-d", str(data), *args, "-p", "p", "-r",
                      "r"], d, env)
        got[who] = {"err": err.encode(), **{f: (d / f).read_bytes() for f in "pr"}}
    return got


@built
@pytest.mark.parametrize(("labels", "train", "who", "args"), TEST_CASES,
                         ids=[f"{w} {' '.join(t)} -t {' '.join(a)}"
                              for _, t, w, a in TEST_CASES])
def test_test_only_runs_equal_the_numba_pass_and_vw(tmp_path, labels, train, who, args):
    data = tmp_path / "d.vw"
    data.write_text("\n".join(_lines(1500, len(train) + len(args), labels)) + "\n")
    test = tmp_path / "t.vw"
    test.write_text("\n".join(_lines(1500, 99, labels)) + "\n")
    cmd = [sys.executable, "-m", "vowpalwabbit" if who == "vw" else "terascale"]
    run_ok([*cmd, *([] if who == "vw" else ["vw"]), "-d", str(data), *train, "-f", "m",
            "--quiet"], tmp_path)
    got = _tested(tmp_path, test, tmp_path / "m", args,
                  numba=TEST_CASES.index((labels, train, who, args)) % 4 == 0)
    _same_as_numba(got, ("p", "r", "err"))
    assert got["c"]["r"] == got["vw"]["r"]
    if "logistic" not in args:  # (VW's logistic link in float: the last digit, at times)
        assert got["c"]["p"] == got["vw"]["p"]


@built
def test_a_test_run_predicts_0_for_a_nan_score_as_vw(tmp_path):
    """A model whose weights VW's --l2 100 drove to infinities scores NaN on some examples:
    a -t run predicts 0 there and prints VW's warning for each, on both learners."""
    data = tmp_path / "d.vw"
    data.write_text("\n".join(_lines(600, 3, "real")) + "\n")
    run_ok([sys.executable, "-m", "vowpalwabbit", "-d", str(data), "--l2", "100", "-f", "m",
            "--quiet"], tmp_path)
    out = {}
    for who, cmd, env in _who(numba=True):
        d = tmp_path / who
        d.mkdir()
        r = subprocess.run([*cmd, "-t", "-i", "../m", "-d", str(data), "-p", "p"], cwd=d,
                           capture_output=True, env={**os.environ, **(env or {})},
                           timeout=300)
        assert r.returncode == 0, r.stderr
        out[who] = (r.stdout, (d / "p").read_bytes())
    assert b"[warning] NAN prediction in example" in out["vw"][0]
    assert out["c"] == out["vw"] and out["numba"] == out["vw"]


@built
def test_a_test_only_run_counts_unlabelled_examples(tmp_path):
    data = tmp_path / "d.vw"
    data.write_text("\n".join(_lines(1000, 5, "real")) + "\n")
    run_ok([sys.executable, "-m", "vowpalwabbit", "-d", str(data), "-f", "m", "--quiet"],
           tmp_path)
    test = tmp_path / "u.vw"
    test.write_text("".join("|" + line.split("|", 1)[1] + "\n"
                            for line in _lines(700, 6, "real")))
    got = _tested(tmp_path, test, tmp_path / "m", [], numba=True)
    for f in ("p", "r", "err"):
        assert got["c"][f] == got["numba"][f], f
    assert got["c"]["p"] == got["vw"]["p"] and got["c"]["r"] == got["vw"]["r"]
    assert b"number of examples = 700" in got["c"]["err"]


@built
def test_a_test_only_run_the_compiled_path_hands_on_reads_standard_input_once(tmp_path):
    text = "\n".join(_lines(300, 8, "real")) + "\n"
    (tmp_path / "d.vw").write_text(text)
    run_ok([sys.executable, "-m", "vowpalwabbit", "-d", "d.vw", "-b", "25", "-f", "m",
            "--quiet"], tmp_path)  # (-b 25: the model's table is the numba pass's)
    r = subprocess.run([sys.executable, "-m", "terascale", "vw", "-t", "-i", "m", "-p", "p",
                        "--quiet"], cwd=tmp_path, input=text, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    run_ok([sys.executable, "-m", "vowpalwabbit", "-t", "-i", "m", "-d", "d.vw", "-p", "pv",
            "--quiet"], tmp_path)
    assert (tmp_path / "p").read_bytes() == (tmp_path / "pv").read_bytes()
    assert (tmp_path / "p").read_bytes().count(b"\n") == 300


@built
def test_gzip_and_standard_input_read_as_the_file(tmp_path):
    import gzip

    text = "\n".join(_lines(800, 7, "real")) + "\n"
    (tmp_path / "d.vw").write_text(text)
    with gzip.open(tmp_path / "d.vw.gz", "wt") as f:
        f.write(text)
    cmd = [sys.executable, "-m", "terascale", "vw", "--quiet", "-p"]
    run_ok([*cmd, "plain", "-d", "d.vw"], tmp_path)
    run_ok([*cmd, "gz", "-d", "d.vw.gz"], tmp_path)
    r = subprocess.run([*cmd, "stdin"], cwd=tmp_path, input=text, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    plain = (tmp_path / "plain").read_bytes()
    assert plain == (tmp_path / "gz").read_bytes() == (tmp_path / "stdin").read_bytes()
    assert plain.count(b"\n") == 800


@built
def test_text_read_in_small_chunks_parses_as_one_chunk(tmp_path, monkeypatch):
    """The chunk reader (one buffer a chunk, cut after its last line break, a line longer
    than a chunk carried on) and the parse of the next chunk beside the learning of this
    one: the same arrays and line numbers as the text parsed at once."""
    from terascale.linear._io._dataset import ParseOptions
    from terascale.linear._vw import _vwonline

    lines = _lines(3000, 11, "real")
    lines[1234] = "1 |a " + " ".join(f"w{k}" for k in range(400))  # (over a chunk)
    path = tmp_path / "d.vw"
    path.write_bytes(("\n".join(lines)).encode())  # (the last line without its break)
    whole = _vwonline._Parser(ParseOptions(bits=18)).parse(path.read_bytes(), "d", 1)
    monkeypatch.setattr(_vwonline, "_CHUNK", 4096)
    monkeypatch.setattr(_vwonline, "_FIRST", 1024)
    starts = [line for _, line in _vwonline._chunks(str(path), [1024])]
    assert len(starts) > 20 and starts[0] == 1
    got = list(_vwonline._parsed([str(path)], _vwonline._Parser(ParseOptions(bits=18))))
    assert len(got) > 20
    assert sum(len(b[3]) for b in got) == 3000
    for k in (1, 2, 3, 4, 6):  # indices, values, labels, weights, the tags' bytes
        parts = [b[k] for b in got]
        assert np.array_equal(np.concatenate(parts), whole[k], equal_nan=k == 3), k
    for k in (0, 5):  # each example's features and tag
        parts = [np.diff(b[k]) for b in got]
        assert np.array_equal(np.concatenate(parts), np.diff(whole[k])), k


@built
def test_a_vw_models_records_read_in_slices_are_its_weights(tmp_path):
    from terascale.linear._vw._vwmodel import read_vw_model

    (tmp_path / "d.vw").write_text("\n".join(_lines(500, 12, "real")) + "\n")
    run_ok([sys.executable, "-m", "vowpalwabbit", "-d", "d.vw", "-q", "ab", "-f", "m",
            "--quiet"], tmp_path)
    whole = read_vw_model(str(tmp_path / "m"), plain=True)
    lazy = read_vw_model(str(tmp_path / "m"), plain=True, records=False)
    assert lazy.indices is None and len(lazy.records) == len(whole.indices) > 100
    assert np.array_equal(lazy.adaptive[2], whole.adaptive[2])
    got = [(i.copy(), w.copy()) for i, w in lazy.records.slices(37)]
    assert np.array_equal(np.concatenate([i for i, _ in got]), whole.indices)
    assert np.array_equal(np.concatenate([w for _, w in got]), whole.weights)


@built
@pytest.mark.parametrize("flags", [[], ["--normalized"], more(["--predict_only_model"])])
def test_a_vw_models_records_put_in_a_table_are_its_rows(tmp_path, flags):
    """``VWRecords.put`` (``-n N -i``'s workers: the model's rows a slice at a time) gives
    the table a whole model gives (``_resume``), the sums a model does not keep 0; with a
    bitmap, only the rows whose bit is clear."""
    from terascale.linear._online._state import new_state
    from terascale.linear._vw._vwmodel import read_vw_model
    from terascale.linear._vw._vwonline import _resume

    (tmp_path / "d.vw").write_text("\n".join(_lines(500, 12, "real")) + "\n")
    run_ok([sys.executable, "-m", "vowpalwabbit", "-d", "d.vw", "-q", "ab", "-b", "12",
            "-f", "m", "--quiet", *flags], tmp_path)
    whole = read_vw_model(str(tmp_path / "m"), plain=True)
    lazy = read_vw_model(str(tmp_path / "m"), plain=True, records=False)
    want = np.zeros((1 << 12, 3), np.float32)
    _resume(want, new_state(), whole)
    assert np.count_nonzero(want[:, 2]) > 100 or flags == ["--predict_only_model"]
    got = np.zeros_like(want)
    lazy.records.put(got, n=37)
    assert np.array_equal(got, want)
    seen = np.random.default_rng(1).random(len(want)) < 0.5
    got = np.full_like(want, 7.0)
    lazy.records.put(got, np.packbits(seen, bitorder="little"), n=37)
    put = whole.indices[~seen[whole.indices]]
    want[np.setdiff1d(np.arange(len(want)), put)] = 7.0
    assert np.array_equal(got, want)


@built
def test_text_outside_the_compiled_parser_is_parsed_by_the_numba_parser(tmp_path):
    data = tmp_path / "d.vw"
    data.write_text("1 |a x:+1 y\n-1 |b z:1e+2\n" + "\n".join(_lines(300, 3, "real")) + "\n")
    got = _three(tmp_path, data, [], numba=True)
    assert got["c"]["p"] == got["numba"]["p"] == got["vw"]["p"]
    assert got["c"]["m"] == got["numba"]["m"]


@built
def test_n_grams_of_text_outside_the_compiled_parser_are_written_into_it(tmp_path):
    """--ngram: the compiled parser makes the n-grams; a chunk it does not read is
    rewritten with them (``_vwgen``) and parsed so, to the same predictions and model."""
    data = tmp_path / "d.vw"
    lines = _lines(3000, 4, "real")
    lines[2000] = "1 |a x:+1 y z |b w v"
    data.write_text("\n".join(lines) + "\n")
    got = _three(tmp_path, data, ["--ngram", "2", "--skips", "1"], numba=True)
    assert got["c"]["p"] == got["numba"]["p"] == got["vw"]["p"]
    assert got["c"]["m"] == got["numba"]["m"]


def _words(n: int, seed: int, classes: int = 0) -> list[str]:
    """Text for --spelling and --ngram: words of every shape (digits, dots, capitals,
    bytes past ASCII), namespaces reopened on a line, scales, values, zero values and
    anonymous features; labels -1/1, or 1..classes."""
    rng = np.random.default_rng(seed)
    words = ["w", "Wa", "w2.3", "123", "Hé.l_9", "x-Y", "ab.", "Q", "007"]
    out = []
    for _ in range(n):
        lab = int(rng.integers(1, classes + 1)) if classes else int(rng.choice([-1, 1]))
        parts = []
        for _ in range(int(rng.integers(1, 5))):
            ns = str(rng.choice(["t", "text", "b", "c", ""]))
            scale = str(rng.choice(["", "", ":0.5", ":0"])) if ns else ""
            feats = " ".join(
                str(rng.choice(words)) + str(rng.choice(["", "", ":2", ":0", ":-1.5"]))
                if rng.random() < 0.9 else str(rng.choice([":3", ":0"]))
                for _ in range(int(rng.integers(1, 6))))
            parts.append(f"|{ns}{scale} {feats}")
        out.append(f"{lab} " + " ".join(parts))
    return out


@built
@pytest.mark.parametrize("args", [
    ["--spelling", "t", "--spelling", "_", "--ngram", "b2", "--skips", "1", "-q", "tb",
     "--ignore", "c"],
    more(["--spelling", "b", "--spelling", "t", "--keep", "tb", "--cubic", "tbc"]),
    more(["--spelling", "t", "--ngram", "3", "-q", "::", "--noconstant"]),
    more(["--spelling", "c", "--ignore", "c", "--passes", "2", "-c", "--holdout_off"])])
def test_spellings_and_n_grams_in_the_compiled_parser_are_vws(tmp_path, args):
    """--spelling (0 a A . # per byte, VW's spelling namespace listed where VW lists it)
    and --ngram/--skips are made by the compiled parser, with --ignore/--keep and the
    interactions: VW's predictions, model and --invert_hash names, no numba imported."""
    (tmp_path / "d.vw").write_text("\n".join(_words(300, len(args))) + "\n")
    named = ["--invert_hash", "{}.ih"] if "-c" not in args else []  # (VW: one pass only)
    outs = ["-p", "{}.p", "--readable_model", "{}.rm", *named, "-f", "{}.m", "--quiet"]
    run_ok([sys.executable, "-m", "vowpalwabbit", "-d", "d.vw", *args,
            *(o.format("vw") for o in outs)], tmp_path)
    assert vw_in_one_process([["-d", "d.vw", *args, *(o.format("ts") for o in outs)]],
                             tmp_path) == []
    for f in ("p", "rm", "ih")[:3 if named else 2]:
        assert (tmp_path / f"ts.{f}").read_bytes() == (tmp_path / f"vw.{f}").read_bytes()
    assert _body((tmp_path / "ts.m").read_bytes()) == _body((tmp_path / "vw.m").read_bytes())


@built
def test_a_test_run_of_a_model_with_spellings_and_n_grams_makes_them_in_the_parser(tmp_path):
    """-t -i MODEL of VW's model trained with --spelling/--ngram/--skips (which it keeps):
    the compiled parser makes them; VW's predictions and raw predictions, no numba."""
    (tmp_path / "d.vw").write_text("\n".join(_words(300, 9)) + "\n")
    run_ok([sys.executable, "-m", "vowpalwabbit", "-d", "d.vw", "--spelling", "t",
            "--ngram", "b2", "--skips", "1", "-q", "tb", "-f", "m", "--quiet"], tmp_path)
    run_ok([sys.executable, "-m", "vowpalwabbit", "-d", "d.vw", "-t", "-i", "m", "-p", "vw.p",
            "-r", "vw.r", "--quiet"], tmp_path)
    assert vw_in_one_process([["-d", "d.vw", "-t", "-i", "m", "-p", "ts.p", "-r", "ts.r",
                               "--quiet"]], tmp_path) == []
    for f in ("p", "r"):
        assert (tmp_path / f"ts.{f}").read_bytes() == (tmp_path / f"vw.{f}").read_bytes()


@built
def test_oaa_and_the_cache_keep_the_parsers_spellings_and_n_grams(tmp_path):
    """--oaa K's learners see the features the compiled parser makes, and a --passes run
    with them does not read the cache of a run without them (nor the other way round)."""
    (tmp_path / "d.vw").write_text("\n".join(_words(200, 5, classes=3)) + "\n")
    (tmp_path / "r.vw").write_text("\n".join(_words(200, 6)) + "\n")
    runs = [["-d", "d.vw", "--oaa", "3", "--spelling", "t", "--ngram", "text2"],
            ["-d", "r.vw", "--passes", "2", "-c", "--holdout_off"],
            ["-d", "r.vw", "--passes", "2", "-c", "--holdout_off", "--spelling", "t"]]
    for k, run in enumerate(runs):
        run_ok([sys.executable, "-m", "vowpalwabbit", *run, "-p", f"vw{k}", "--quiet",
                "--cache_file", f"c{k}"], tmp_path)
    assert vw_in_one_process([[*run, "-p", f"ts{k}", "--quiet"]
                              for k, run in enumerate(runs)], tmp_path) == []
    for k in range(len(runs)):
        assert (tmp_path / f"ts{k}").read_bytes() == (tmp_path / f"vw{k}").read_bytes(), k


@built
@pytest.mark.parametrize("extra", [[], ["--link", "glf1"], ["--loss_function", "poisson"],
                                   ["-t", "-i", "m0", "-r", "r"], ["-i", "m0"],
                                   ["--audit", "-q", "ab"]])  # (streamed: no data held)
def test_a_one_line_run_imports_no_numba(tmp_path, extra):
    (tmp_path / "one.vw").write_text("1 | a b c\n")
    test = "-t" in extra
    if "-i" in extra:  # (predictions of a model that has learned nothing: 0)
        (tmp_path / "zero.vw").write_text("0 | a b c\n")
        run_ok([sys.executable, "-m", "vowpalwabbit", "-d", "zero.vw", "-f", "m0", "--quiet"],
               tmp_path)
    flags = [*([] if test else ["-f", "m"]), "-p", "p", *extra]
    assert vw_in_one_process([["-d", "one.vw", *flags]], tmp_path) == []
    assert (tmp_path / "p").read_text() == "0\n"
    assert (tmp_path / ("r" if test else "m")).stat().st_size > 0


@built
def test_common_one_worker_runs_import_no_numpy(tmp_path):
    """The compiled learner's common runs (text or gzip in; -f, -p, -r, -q, --link, the
    progress table; passes that write the cache, then read it) import neither numpy nor
    numba: a module-level import of either on their path fails here."""
    import gzip

    text = "\n".join(_lines(300, 3, "sign")) + "\n"
    (tmp_path / "d.vw").write_text(text)
    (tmp_path / "d.vw.gz").write_bytes(gzip.compress(text.encode()))
    runs = [["-d", "d.vw", "-f", "m", "-p", "p", "-r", "r", "--loss_function", "logistic"],
            ["-d", "d.vw.gz", "-b", "18", "-q", "ab", "-f", "m2", "--quiet"],
            ["-d", "d.vw", "--link", "logistic", "-p", "p2", "--holdout_off", "--quiet"],
            *[["-d", "d.vw", "--passes", "3", "-c", "--cache-dir", "c", "-f", f"m{k}",
               "--quiet"] for k in (3, 4)]]
    os.chmod(tmp_path, 0o700)
    assert vw_in_one_process(runs, tmp_path, ("numpy", "numba", "llvmlite")) == []
    assert (tmp_path / "m3").read_bytes() == (tmp_path / "m4").read_bytes()
    assert len(os.listdir(tmp_path / "c")) == 1  # (written, then read)
    assert (tmp_path / "m").stat().st_size > 0 and (tmp_path / "p2").stat().st_size > 0


READABLE_CASES = [
    ["--loss_function", "logistic", "-q", "ab", "-f", "m", "--l1", "1e-4"],
    ["--oaa", "3", "-q", "ab"],
    # (the crosses of --ignore_linear's namespaces learned, their features counted)
    ["--ignore_linear", "a", "-q", "ab", "--cubic", "abc"],
    more(["--oaa", "3", "--ignore_linear", "b", "-q", "ab"]),
    more(["--predict_only_model", "-f", "m", "--l2", "1e-3"]),
    more(["--oaa", "4", "--predict_only_model", "--l1", "1e-4"]),
    more(["-b", "20", "--ignore", "a", "--loss_function", "logistic", "--link", "logistic"]),
]


@built
@pytest.mark.parametrize("args", READABLE_CASES,
                         ids=[" ".join(getattr(a, "values", [a])[0]) for a in READABLE_CASES])
def test_readable_model_and_invert_hash_are_vws_without_numba(tmp_path, args):
    """``--readable_model``/``--invert_hash`` written by the compiled learner (the names
    read from the text again without numba's hashing): VW's files, byte for byte."""
    rows = _lines(400, 7, "sign")
    if "--oaa" in args:  # (classes 1..K from the first namespace's size)
        k = int(args[args.index("--oaa") + 1])
        rows = [f"{1 + len(r.split()) % k} {r[r.index('|'):]}" for r in rows]
    (tmp_path / "d.vw").write_text("\n".join(rows) + "\n")
    for who in ("ts", "vw"):
        (tmp_path / who).mkdir()
    flags = ["-d", "../d.vw", *args, "--readable_model", "rm", "--invert_hash", "ih"]
    assert vw_in_one_process([flags], tmp_path / "ts") == []
    run_ok([sys.executable, "-m", "vowpalwabbit", *flags], tmp_path / "vw")
    for f in ("rm", "ih"):
        assert (tmp_path / "ts" / f).read_bytes() == (tmp_path / "vw" / f).read_bytes(), f
    assert "Constant:" in (tmp_path / "ts" / "ih").read_text()


@built
@pytest.mark.parametrize("bits", [3, 18, 25])
def test_invert_hash_names_come_from_the_lines_that_bring_a_new_index(bits, tmp_path,
                                                                       monkeypatch):
    """--invert_hash names a weight from the first line that has its index, found by the
    compiled parser: the names read from those lines alone are those read from every
    line, over many chunks (each asking for the indices still unnamed), lines the compiled
    parser declines (a '+' label, a string value), a carriage return inside a line (a line break to
    Python's text files), colliding names (-b 3) and a table above 2^24 rows (-b 25)."""
    from types import SimpleNamespace

    from terascale.linear._io._dataset import ParseOptions
    from terascale.linear._vw import _vwnamelines, _vwonline
    from terascale.linear._vw._vwtext import feature_names

    rng = np.random.default_rng(3)
    rows = [f"{'+1' if i % 97 == 5 else '-1'} |a " + " ".join(
        f"w{v}" for v in rng.zipf(1.5, 6) % 300) + (" x\ry" if i == 250 else "")
        + f" |b z{i % 7}:0.5" + (" c:red" if i % 89 == 7 else "") for i in range(800)]
    (tmp_path / "d.vw").write_bytes(("\n".join(rows) + "\n").encode())
    monkeypatch.setattr(_vwonline, "_CHUNK", 2048)
    parse = ParseOptions(bits=bits, quadratic=("ab",))
    reader = _vwonline._Parser(parse)
    used = np.unique(reader.parse((tmp_path / "d.vw").read_bytes(), "d.vw", 1)[1])
    model = SimpleNamespace(parse=parse, indices=used[::2].astype(np.uint32))
    read, lines_to_name = [], _vwnamelines.lines_to_name

    def counted(*a):
        for k, line in lines_to_name(*a):
            read.append(k)
            yield k, line

    monkeypatch.setattr(_vwnamelines, "lines_to_name", counted)
    names = dict(feature_names([str(tmp_path / "d.vw")], model).items())
    monkeypatch.setattr(_vwnamelines, "compiled_names", lambda path: False)
    every = dict(feature_names([str(tmp_path / "d.vw")], model).items())
    assert names == every and len(every) >= min(len(used) // 2, 8) and len(used) > 4
    assert 6 in read and 8 in read and len(read) < 400, read


def _args(line: list[str]) -> argparse.Namespace:
    """``terascale vw LINE``'s flags after VW's defaults, as the run sees them."""
    from terascale.cli import build_parser
    from terascale.linear._vw._vwcli import _vw_defaults

    args, extras = build_parser().parse_known_args(["vw", *line])
    assert not extras
    _vw_defaults(args)
    return args


@built
@pytest.mark.parametrize(("line", "why"), [
    (["-n", "2", "--average-every", "100"], "-n N with --average"),
    (["--oaa", "3", "-n", "2", "--initial_weight", "0.1"], "-n N with -i"),  # (its weights)
    (["--oaa", "3", "-i", "m", "--preserve_performance_counters"], "--oaa -i with"),
    (["--oaa", "3", "-t", "-i", "m", "-f", "m2"], "-t with -f"),
    (["--loss_function", "expectile", "--expectile_q", "0.3"], "--loss_function expectile"),
    (["-t", "-i", "m", "--readable_model", "r.txt"], "-t with --readable_model"),
    (["--model-format", "terascale"], "terascale's model format"),
    (["--normal_weights"], "starting weights"),
    (["--ignore_linear", "a", "--ngram", "2"], "--ignore_linear with --ngram"),
    (["-t", "-i", "m", "--holdout_after", "5"], "-t with --holdout_after"),
    (["-i", "m", "--preserve_performance_counters", "--passes", "2"],
     "--preserve_performance_counters with --passes"),
    (["-b", "40"], "-b 40"),
    (["-b", "26"], "-b 26"),
    (["-t"], "-t without -i"),
])
def test_runs_outside_the_compiled_path_say_why(line, why):
    from terascale.linear._vw._vwonline import c_path

    reason = c_path(_args(["-d", "x.vw", *line]))
    assert reason is not None and why in reason


@built
@pytest.mark.parametrize("line", [["--oaa", "3"], ["--binary"], ["--oaa", "3", "--binary"],
                                  ["--oaa", "3", "--passes", "2", "-c", "--holdout_after", "9"],
                                  ["--oaa", "4", "--probabilities", "--l2", "0.1"],
                                  ["--oaa", "3", "--scores", "--link", "glf1"],
                                  ["--oaa", "3", "-n", "2", "--initial_t", "2"]])
def test_oaa_and_binary_runs_take_the_compiled_path(line):
    from terascale.linear._vw._vwonline import c_path

    assert c_path(_args(["-d", "x.vw", *line])) is None


@built
@pytest.mark.parametrize("line", [[], ["--loss_function", "logistic", "-q", "ab"],
                                  ["--loss_function", "hinge", "-p", "p", "-r", "r"],
                                  ["--l1", "1e-5", "--l2", "1e-4", "-b", "22"],
                                  ["--passes", "3", "-c", "--holdout_after", "10"],
                                  ["-c"], ["--cache_file", "c", "-k"],
                                  ["--readable_model", "r", "--invert_hash", "i", "-q", "ab"],
                                  ["--oaa", "3", "--invert_hash", "i", "-f", "m"],
                                  ["--ignore_linear", "a", "-q", "ab"],
                                  ["--initial_t", "2"], ["--initial_weight", "0.01"],
                                  ["--constant", "0.5", "--min_prediction", "-2"],
                                  ["--max_prediction", "1", "--passes", "2", "-c"],
                                  ["--random_weights", "--initial_t", "1"]])
def test_common_runs_take_the_compiled_path(line):
    from terascale.linear._vw._vwonline import c_path

    assert c_path(_args(["-d", "x.vw", *line])) is None


def test_without_the_compiled_core_every_run_takes_the_numba_pass(monkeypatch):
    from terascale.linear._vw import _vwonline

    monkeypatch.setattr(_vwonline, "_fast", lambda: None)
    assert "not built" in (_vwonline.c_path(_args(["-d", "x.vw"])) or "")


@built
def test_loss32_is_the_numba_kernel():
    from terascale.linear._losses import loss32
    from terascale.linear._losstable import LOSS_TABLE, loss_code

    rng = np.random.default_rng(0)
    for name, row in LOSS_TABLE.items():
        if row.code not in FAST.LOSS_CODES:
            with pytest.raises(ValueError):
                FAST.loss32(loss_code(name), 0.5, 1.0)
            continue
        kind = loss_code(name, raw_labels=True, tau=0.3)
        for p, y in zip(rng.normal(0, 20, 300).astype(np.float32),
                        rng.choice([-1.0, 1.0, 0.0, 0.25, 2.5], 300)):
            got, want = FAST.loss32(kind, float(p), y), loss32(kind, float(p), y)
            assert got == want or (np.isnan(got) and np.isnan(want)), (name, p, y)


@pytest.mark.parametrize(("flags", "numba"), [
    ([], False), more([], True), more(["--passes", "2", "-c", "-k", "--holdout_off"], True)])
def test_logistic_in_a_fixed_range_clips_to_vws_floats(tmp_path, capfd, monkeypatch, flags,
                                                        numba):
    """``--loss_function logistic --min_prediction -0.3 --max_prediction 0.4``: VW clips
    the score to its two floats (0.4f, not 0.4), which its update then adds in float:
    its -r, weights and model to the bit."""
    def label(rng, a, x):
        return "1" if 0.3 * a.sum() / 40 + 0.5 * x[0] + 0.3 * rng.normal() > 0.3 else "-1"

    if numba:
        monkeypatch.setenv("TERASCALE_NO_CEXT", "1")
    (tmp_path / "d.vw").write_text("\n".join(ab_lines(200, 4, label)) + "\n")

    def args(tool):
        return ["-d", "d.vw", "--loss_function", "logistic", "--min_prediction", "-0.3",
                "--max_prediction", "0.4", *flags, "-p", f"{tool}.p", "-r", f"{tool}.r",
                "-f", f"{tool}.m", "--quiet"]

    run_ok([sys.executable, "-m", "vowpalwabbit", *args("vw")], tmp_path)
    code, err = run_ts(capfd, args("ts"), tmp_path, monkeypatch)
    assert code == 0, err
    for ext in ("p", "r"):
        assert (tmp_path / f"ts.{ext}").read_text() == (tmp_path / f"vw.{ext}").read_text()
    c, vw = ((tmp_path / f"{t}.m").read_bytes() for t in ("ts", "vw"))
    assert c[4 + int.from_bytes(c[:4], "little"):] == vw[4 + int.from_bytes(vw[:4], "little"):]


RULES = [{"hash_all": True, "hash_seed": 7}, {"hash_seed": 3}, {"redefine": ["T:=tb"]},
         {"redefine": ["Z:=:"], "sort_features": True}, {"feature_limit": ["2", "b1", "c0"]},
         {"sort_features": True, "hash_all": True}, {"affix": ["+2t,-3b,+1,-7t"]},
         {"affix": ["-2T,+3c"], "redefine": ["T:=tb"], "hash_all": True},
         {"sort_features": True, "feature_limit": ["b1"]},
         {"affix": ["+2t,-1"], "spelling": ["t", "_"], "hash_seed": 3}]


@built
@pytest.mark.parametrize("flags", RULES, ids=[str(f) for f in RULES])
def test_the_compiled_parsers_rules_are_the_rewrites_bits(flags):
    """--redefine, --feature_limit, --hash_seed, --hash all, --sort_features and --affix
    made by the compiled parser give the arrays of the rewritten text (``_vwgen``) parsed."""
    from terascale.linear._io._dataset import ParseOptions
    from terascale.linear._vw._vwgen import FeatureGen
    from terascale.linear._vw._vwonline import _Parser, as_arrays

    given = {"feature_limit": (), "redefine": (), "hash_seed": 0, **flags}
    gen = FeatureGen.from_flags(bits=18, ngram=(), skips=(), **given)
    assert gen is not None and gen.parser_rules
    opts = ParseOptions(bits=18, quadratic=("Tb", "ZZ"), lenient_labels=True)
    lines = _words(400, 5)
    text = "\n".join(lines).encode()
    assert _Parser(opts, gen)._compiled(np.frombuffer(text, np.uint8))[0] == 0  # (all read)
    got = _Parser(opts, gen).parse(text, "d.vw", 1)
    want = _Parser(opts).parse("\n".join(gen.line(t, "d.vw") for t in lines).encode(),
                               "d.vw", 1)
    for a, b in zip(as_arrays(got[:7]), as_arrays(want[:7])):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


@built
@pytest.mark.parametrize("args", [
    ["--hash", "all", "--hash_seed", "5", "-q", "tb"],
    ["--affix", "+2t,-3b,+1", "-q", "tb", "--hash_seed", "2"],
    ["--redefine", "T:=tb", "-q", "Tc", "--feature_limit", "c1", "--passes", "2", "-c",
     "--holdout_off"],
    more(["--sort_features", "--ignore", "c", "--cubic", "tbb"]),
    ["--oaa", "3", "--feature_limit", "b1", "-q", "tb", "--hash", "all"],
    more(["--oaa", "3", "--sort_features"]),
    ["--sort_features", "--feature_limit", "b1", "-q", "tb"],
    ["--affix", "+2t,-1", "--spelling", "t", "--spelling", "b", "-q", "tb"]])
def test_the_compiled_parsers_rules_are_vws(tmp_path, args):
    """The compiled path's predictions, model and ``--invert_hash`` with those flags are
    VW's (no numba imported: the text is not rewritten); with --oaa K, sorted and limited
    by VW's -b bits of each index, not the learners' b - log2 K."""
    classes = int(args[args.index("--oaa") + 1]) if "--oaa" in args else 0
    (tmp_path / "d.vw").write_text("\n".join(_words(300, len(args), classes)) + "\n")
    named = ["--invert_hash", "{}.ih"] if "-c" not in args else []  # (VW: one pass only)
    outs = ["-p", "{}.p", "--readable_model", "{}.rm", *named, "-f", "{}.m", "--quiet"]
    run_ok([sys.executable, "-m", "vowpalwabbit", "-d", "d.vw", *args,
            *(o.format("vw") for o in outs)], tmp_path)
    assert not vw_in_one_process([["-d", "d.vw", *args, *(o.format("ts") for o in outs)]],
                                 tmp_path)
    for f in ("p", "rm", "ih")[:3 if named else 2]:
        assert (tmp_path / f"ts.{f}").read_bytes() == (tmp_path / f"vw.{f}").read_bytes()
    assert _body((tmp_path / "ts.m").read_bytes()) == _body((tmp_path / "vw.m").read_bytes())


def _bad_lines(n: int, seed: int) -> list[str]:
    """:func:`_lines` with lines the compiled parser declines among them: bad ones (a
    feature of two ':', a negative importance), an empty line, a string value (after
    features the compiled parser had read), a label
    word VW reads as 0 and one of four words (VW's notes)."""
    lines = _lines(n, seed, "real")
    for k, t in ((7, "1 |a x:1:2"), (300, "2 -1 |b y"), (301, ""), (900, "1 |a p q |c w:red z"),
                 (1500, "abc |a x"), (2000, "1 2 0 4 |a q"), (2001, "-1 |a x:1:2 y")):
        lines.insert(k, t)
    return lines


@built
def test_declined_lines_are_read_alone_to_the_numba_parsers_arrays():
    """The lines the compiled parser declines are read one by one by the numba parser
    (the lines around them by the compiled one): the chunk's arrays, notes, empty lines
    and skipped lines are the numba parser's of the whole chunk."""
    from terascale.linear._io._dataset import ParseOptions
    from terascale.linear._io._readers import _parse_one
    from terascale.linear._vw import _vwonline

    opts = ParseOptions(bits=18, quadratic=("ab",), lenient_labels=True, skip_bad=True)
    text = ("\n".join(_bad_lines(2500, 9)) + "\n").encode()
    parser = _vwonline._Parser(opts)
    got = parser.parse(text, "d.vw", 1)
    ds = _parse_one(np.frombuffer(text, np.uint8), opts, "d.vw", 1)
    for a, b in zip(got, (ds.indptr, ds.indices, ds.values, ds.labels, ds.weights,
                          ds.tag_ptr, ds.tag_blob)):
        assert a.tobytes() == b.tobytes()
    assert got[7] == ds.notes and len(ds.notes) == 2
    assert got[8].tolist() == ds.blanks.tolist() == [300 - 1]
    assert parser.skipped == ds.skipped == 3


@built
def test_skip_bad_in_the_compiled_learner_is_the_numba_pass(tmp_path, capfd, monkeypatch):
    """--skip-bad runs the compiled learner: the bad lines skipped and counted, its
    predictions, model and printed lines the numba pass's; without it, the first bad line
    is an error naming the file and line."""
    from terascale.linear._vw._vwonline import c_path

    assert c_path(_args(["-d", "x.vw", "--skip-bad"])) is None
    assert "--skip-bad with --oaa" in c_path(_args(["-d", "x.vw", "--skip-bad", "--oaa", "3"]))
    data = tmp_path / "d.vw"
    data.write_text("\n".join(_bad_lines(2500, 10)) + "\n")
    cases = [["-q", "ab"], *([["--passes", "2", "-c", "--holdout_off"]] if ALL else [])]
    for k, args in enumerate(cases):
        got = {}
        for who, env in (("c", None), ("numba", {"TERASCALE_NO_CEXT": "1"})):
            d = tmp_path / f"{who}{k}"
            d.mkdir()
            err = run_ok([sys.executable, "-m", "terascale", "vw", "-d", str(data),
                          "--skip-bad", *args, "-p", "p", "-f", "m"], d, env)
            got[who] = (err, (d / "p").read_bytes(), (d / "m").read_bytes())
        assert "skipped 3 bad lines (--skip-bad)" in got["c"][0]
        assert got["c"] == got["numba"]
    code, err = run_ts(capfd, ["-d", str(data), "--quiet"], tmp_path, monkeypatch)
    assert code == 2 and f"{data}, line 8: a feature has more than one ':'" in err


_HUGE = "1 |a x:1e30 y\n-1 |b z:-3e25 w:1e20\n"  # (squares past float's range)
_GONE_WRONG = ("[error] The features have too much magnitude",
               "[warning] update is NAN, replacing with 0", "[warning] NAN prediction in")


@built
@pytest.mark.parametrize("case", ["huge", more("infinite"), "labels", "rules", "invariant",
                                  "replayed"])
def test_learning_prints_vws_lines_on_numbers_gone_wrong(tmp_path, case):
    """VW's gd tells on standard output of a feature whose square overflows a float
    ("too much magnitude"), of a NaN update (replaced by 0) and of a NaN score (predicted
    as 0; -r writes it, `-nan`): features of 1e30 give the first two, --l2 100 drives
    weights to infinities that give the third; a logistic loss of scores past 88 (from a
    model of weights 95, labels 200) overflows C's expf into a `-nan` loss. terascale
    prints VW's lines, in VW's order, VW's table (with no warning of numpy's) and writes
    VW's -p and -r: the compiled learner; between a label's two warnings where the
    example is learned from, --binary's line last ("labels"); VW's other update rules,
    whose normalized rule counts such a feature's norm as 1 ("rules"), and whose invariant
    rule alone squares it to an infinity without a warning of numpy's ("invariant"); and
    the later passes over a small cache, made many in one compiled call ("replayed")."""
    data = tmp_path / "d.vw"
    lines = _GONE_WRONG
    if case in ("huge", "rules", "invariant"):
        data.write_text(_HUGE + "\n".join(_lines(150, 7, "real")) + "\n")
        flags = ["--l2", "100", *{"rules": ["--normalized", "--invariant"],
                                  "invariant": ["--invariant"]}.get(case, [])]
        lines = () if case == "invariant" else lines  # (VW's invariant rule alone: none)
    elif case == "labels":
        data.write_text("3 |a x:1e20 y:3\n2 |a x:1e20 z:2\n1 |a y:1\n")
        flags, lines = ["--loss_function", "logistic", "--binary"], lines[:2]
    elif case == "replayed":
        data.write_text("1 |a x:1e20 y:3\n0 |a x:1e20 z:2\n1 |a y:1\n")
        flags, lines = ["--passes", "6", "-c", "--holdout_off"], lines[:2]
    else:
        data.write_text("200 |a x:1\n-1 |a x:1\n" * 3)
        run_ok([sys.executable, "-m", "vowpalwabbit", "-d", str(data), "--initial_weight",
                "95", "-l", "0", "-f", "m95", "--quiet"], tmp_path)
        flags = ["-i", str(tmp_path / "m95"), "--loss_function", "logistic"]
        lines = ()
    got = {}
    for who, cmd, _ in _who(numba=False):
        d = tmp_path / who
        d.mkdir()
        written = ["-p", "p", "-r", "r"] if case != "replayed" else []  # (none replays)
        r = subprocess.run([*cmd, "-d", str(data), *flags, *written],
                           cwd=d, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        err = [ln for ln in r.stderr.splitlines() if not ln.startswith(("Enabled", "Input",
                                                                        "Output"))]
        got[who] = (r.stdout, err, *((d / f).read_text() for f in written[1::2]))
    out = got["vw"][0]
    for line in lines:
        assert line in out
    if case == "replayed":  # (the passes after the second, replayed, tell of them too)
        assert out.count(lines[0]) > 8
    if case in ("huge", "rules", "infinite"):
        assert "-nan" in (got["vw"][3] if case != "infinite" else "\n".join(got["vw"][1]))
    assert got["c"] == got["vw"]


def _many_namespaces(n: int, seed: int) -> list[str]:
    """Lines of 1 to 12 of 26 namespaces (and one whose first byte is past ASCII, which
    VW's wildcards leave out), in random order, some reopened."""
    rng = np.random.default_rng(seed)
    names = [*"abcdefghijklmnopqrstuvwxyz", "é"]
    out = []
    for _ in range(n):
        parts = [f"|{names[int(k)]}{rng.choice(['', 'x'])} f{int(rng.integers(9))}:"
                 f"{rng.normal():.3f} g" for k in rng.choice(27, int(rng.integers(1, 13)))]
        out.append(f"{rng.choice([-1, 1])} " + " ".join(parts))
    return out


@built
@pytest.mark.parametrize("args", [
    ["--interactions", ":::"], ["-q", "a:", "-q", ":c", "--cubic", "b::"],
    ["-q", "::", "--cubic", "a:b", "--leave_duplicate_interactions", "--passes", "2", "-c",
     "-k", "--holdout_off"]])
def test_wildcards_over_many_namespaces_are_vws(tmp_path, args):
    """Wildcards crossed over lines of many namespaces (the compiled parser goes past the
    rows of a namespace a line lacks): VW's predictions and model."""
    (tmp_path / "d.vw").write_text("\n".join(_many_namespaces(60, len(args))) + "\n")
    outs = ["-p", "{}.p", "-f", "{}.m", "--quiet", "-b", "20"]
    run_ok([sys.executable, "-m", "vowpalwabbit", "-d", "d.vw", *args,
            *(o.format("vw") for o in outs)], tmp_path)
    assert vw_in_one_process([["-d", "d.vw", *args, *(o.format("ts") for o in outs)]],
                             tmp_path) == []
    assert (tmp_path / "ts.p").read_bytes() == (tmp_path / "vw.p").read_bytes()
    assert _body((tmp_path / "ts.m").read_bytes()) == _body((tmp_path / "vw.m").read_bytes())
