"""The flags next to the daily ones (``--constant`` with ``--noconstant``,
``--min_prediction`` alone, ...) against the vowpalwabbit package: the prediction and model
files byte for byte and the closing block, on a few lines of data each. CI runs the first
cases; ``make test-vw`` (``TERASCALE_VW_SUITE=all``) the ones marked ``FULL``."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from _vw_runs import FULL, more, run_ts, run_vw, stdouts

pytest.importorskip("vowpalwabbit")


def _both(tmp_path, capfd, monkeypatch, lines: list[str], flags: list[str],
          files: tuple[str, ...] = ("p",)) -> None:
    """``flags`` on ``lines`` through VW and ``terascale vw``, each in its own folder:
    ``-p p`` (and the other ``files`` the flags name) and the closing block equal."""
    for who in ("vw", "ts"):
        (tmp_path / who).mkdir()
        (tmp_path / who / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", *flags, "-p", "p"]
    want = run_vw(args, tmp_path / "vw")
    code, got = run_ts(capfd, args, tmp_path / "ts", monkeypatch)
    assert code == 0, got
    for name in files:
        assert (tmp_path / "ts" / name).read_bytes() == (tmp_path / "vw" / name).read_bytes(), name
    assert got[got.index("finished run"):] == want[want.index("finished run"):]


def test_constant_with_noconstant_starts_the_constants_slot(tmp_path, capfd, monkeypatch):
    """``--constant 2 --noconstant``: no constant feature, but VW still starts the weight
    at the constant's slot at 2, which a feature hashed there (``x9`` at ``-b 4``) meets."""
    lines = ["1 |a x1 x2", "-1 |a x3 x4", "1 |a x5 x6", "-1 |a x7 x8", "1 |a x9",
             "-1 |b y1 y2 y3"]
    _both(tmp_path, capfd, monkeypatch, lines,
          ["-b", "4", "--constant", "2", "--noconstant", "--readable_model", "rm"],
          files=("p", "rm"))


def test_invert_hash_names_a_slot_by_an_ignore_linear_feature_first_seen(tmp_path, capfd,
                                                                         monkeypatch):
    """``--invert_hash`` with ``--ignore_linear a -q ab``: VW names a slot by the first
    feature hashed there, ``a``'s linear features (left out of learning) included, so a
    pair sharing the slot with an earlier ``a^x`` is listed under ``a^x``'s name."""
    lines = ["1 |a x1 x2 |b y1 y2", "-1 |a x3 |b y3 y4", "1 |a x5 x6 |b y5",
             "-1 |a x7 |b y1 y6", "1 |a x2 x8 |b y2 y3"]
    _both(tmp_path, capfd, monkeypatch, lines,
          ["-b", "4", "-q", "ab", "--ignore_linear", "a", "--invert_hash", "ih"],
          files=("p", "ih"))


def _large_labels(n: int, seed: int) -> list[str]:
    """Labels up to 2e6 with importance weights 0..100 (0 and fractions among them):
    their label x weight sum near 1e11, whose sixth decimal hangs on the order of the
    additions."""
    rng = np.random.default_rng(seed)
    y, w = np.round(rng.uniform(0, 2e6, n), 4), np.round(rng.uniform(0, 100, n), 2)
    w[::7] = 0
    return [f"{a:.4f} {b:g} |a x{i % 5}:{rng.normal():.3f} y{i % 3}"
            for i, (a, b) in enumerate(zip(y, w))]


@pytest.mark.parametrize("flags,numba", [
    ([], False),
    (["-c", "-k", "--passes", "3", "--holdout_off"], False),
    more([], True),
    more(["-c", "-k", "--passes", "3", "--holdout_off", "--readable_model", "rm"], True),
    more(["-c", "-k", "--passes", "3", "--holdout_off", "--bfgs"], False)])
def test_weighted_label_sum_is_one_running_double_sum(tmp_path, capfd, monkeypatch, flags,
                                                      numba):
    """VW's ``weighted label sum`` adds float(label) x float(weight) in double, one example
    at a time, in one sum over every pass (so do the compiled learner and the numba
    pass)."""
    if numba:
        monkeypatch.setenv("TERASCALE_NO_CEXT", "1")
    _both(tmp_path, capfd, monkeypatch, _large_labels(60, 20), flags,
          files=("p", "rm") if "rm" in flags else ("p",))


def _counts(n: int, seed: int) -> list[str]:
    """Poisson counts of a log-linear score on five features and a category."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.normal(size=5)
        y = rng.poisson(np.exp(0.3 * x[0] - 0.2 * x[1]))
        out.append(f"{y} |a " + " ".join(f"f{j}:{v:.4f}" for j, v in enumerate(x))
                   + f" c{rng.integers(20)}")
    return out


@pytest.mark.parametrize("flags,numba", [
    ([], False),
    more([], True),
    more(["-c", "-k", "--passes", "2", "--holdout_off", "--readable_model", "rm"], True)])
def test_poisson_takes_the_float_exp_of_its_score(tmp_path, capfd, monkeypatch, flags, numba):
    """``--loss_function poisson``: VW's update and loss take ``std::exp`` of the float
    score (C's ``expf``, not the double ``exp`` rounded), and ``std::log1p``/``expm1`` of
    floats: the predictions' sixth decimal and the loss hang on it."""
    if numba:
        monkeypatch.setenv("TERASCALE_NO_CEXT", "1")
    _both(tmp_path, capfd, monkeypatch, _counts(600, 6),
          ["--loss_function", "poisson", *flags], files=("p", "rm") if "rm" in flags else ("p",))


def test_bfgs_termination_note_is_on_standard_output(tmp_path):
    """``--bfgs`` stopped by ``--termination``: VW's logger writes the note on standard
    output (an empty ``[info]`` line, then the note), none of it in the table on standard
    error."""
    (tmp_path / "d.vw").write_text("\n".join(_counts(100, 6)) + "\n")
    args = ["-d", "d.vw", "--bfgs", "--passes", "20", "-c", "-k", "--holdout_off",
            "--l2", "0.1", "--termination", "0.5"]
    want, got = stdouts(args, tmp_path)
    assert "Termination condition reached in pass 4" in want
    assert got == want


def _labelled(kind: str, n: int = 24, seed: int = 5) -> list[str]:
    """``n`` rows of four real features of 20, labelled for ``kind``: ``real`` in [-3, 3],
    ``sign`` -1/1, ``count`` 0..6, ``class`` 1..3."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        y = {"real": lambda: f"{rng.uniform(-3, 3):.3f}", "sign": lambda: rng.choice(["1", "-1"]),
             "count": lambda: str(rng.integers(0, 7)),
             "class": lambda: str(rng.integers(1, 4))}[kind]()
        feats = " ".join(f"x{rng.integers(1, 21)}:{rng.uniform(-2, 2):.3f}" for _ in range(4))
        out.append(f"{y} |a {feats}")
    return out


def _after_version(data: bytes) -> bytes:
    """A VW model's bytes after its version string (terascale writes 9.0.0's)."""
    return data[4 + int.from_bytes(data[:4], "little"):]


@pytest.mark.parametrize("data, flags", [
    ("real", ["--min_prediction", "1"]),
    more("real", ["--max_prediction", "-1"]),
    more("sign", ["--loss_function", "hinge", "--min_prediction", "1"]),
    more("sign", ["--loss_function", "hinge", "--max_prediction", "-1", "--l2", "0.001"]),
    more("class", ["--oaa", "3", "--min_prediction", "1"]),
    ("sign", ["--loss_function", "logistic", "--min_prediction", "-0.5",
              "--max_prediction", "0.5"]),
    more("sign", ["--loss_function", "logistic", "--max_prediction", "0.5"]),
    more("count", ["--loss_function", "poisson", "--min_prediction", "0",
                   "--max_prediction", "4"]),
    more("count", ["--loss_function", "poisson", "--min_prediction", "-0.5"]),
    more("class", ["--oaa", "3", "--loss_function", "logistic", "--min_prediction", "-0.5",
                   "--max_prediction", "0.5"]),
    more("class", ["--oaa", "3", "--min_prediction", "1", "--l2", "0.001"]),
])
def test_prediction_clip_as_vw(tmp_path, capfd, monkeypatch, data, flags):
    """``--min_prediction``/``--max_prediction`` (VW's other bound 0): VW clips in its
    order (above the max gives the max, else below the min the min: a min over the max
    clips everything to one of them), takes the squared loss of a prediction past a bound
    as its own, clips logistic and poisson there too (not to [-50, 50]) and writes the
    range in the model's header, whose range its ``-t`` clips to. The predictions,
    closing block and model as VW's, and each one's ``-t`` over the other's model the
    same."""
    _both(tmp_path, capfd, monkeypatch, _labelled(data), [*flags, "-f", "m"])
    vw, ts = tmp_path / "vw", tmp_path / "ts"
    assert _after_version((ts / "m").read_bytes()) == _after_version((vw / "m").read_bytes())
    at = flags.index("--loss_function") if "--loss_function" in flags else len(flags)
    loss = flags[at:at + 2] if "--oaa" not in flags else []  # (--oaa: -t without it)
    run_vw(["-d", "d.vw", "-t", "-i", "../ts/m", *loss, "-p", "q"], vw)
    code, got = run_ts(capfd, ["-d", "d.vw", "-t", "-i", "../vw/m", *loss, "-p", "q"], ts,
                       monkeypatch)
    assert code == 0, got
    assert (ts / "q").read_bytes() == (vw / "q").read_bytes()


@pytest.mark.parametrize("numba", [False, more(True)])
def test_test_run_clips_to_a_header_range_of_one_value(tmp_path, capfd, monkeypatch, numba):
    """``-t -i MODEL`` of a model trained with ``--min_prediction`` equal to
    ``--max_prediction``: VW clips every prediction to that one value (its header's
    range), and so the loss."""
    if numba:
        monkeypatch.setenv("TERASCALE_NO_CEXT", "1")
    (tmp_path / "d.vw").write_text("\n".join(_labelled("real")) + "\n")
    run_vw(["-d", "d.vw", "--min_prediction", "0.5", "--max_prediction", "0.5", "-f", "m",
            "--quiet"], tmp_path)
    want = run_vw(["-d", "d.vw", "-t", "-i", "m", "-p", "p"], tmp_path)
    (tmp_path / "ts").mkdir()
    code, got = run_ts(capfd, ["-d", "../d.vw", "-t", "-i", "../m", "-p", "p"],
                       tmp_path / "ts", monkeypatch)
    assert code == 0, got
    assert (tmp_path / "ts" / "p").read_bytes() == (tmp_path / "p").read_bytes()
    assert got[got.index("finished run"):] == want[want.index("finished run"):]


def _near_a_million(n: int, seed: int) -> list[str]:
    """Labels near 1e6 with importance weights 0.1..20: squared losses near 1e12, whose
    sums' last printed digits hang on the order of the additions."""
    rng = np.random.default_rng(seed)
    y, w = np.round(rng.uniform(0.9e6, 1.1e6, n), 3), np.round(rng.uniform(0.1, 20, n), 2)
    return [f"{a:.3f} {b:g} |a f0:{rng.normal():.4f} f1:{rng.normal():.4f} c{i % 7}"
            for i, (a, b) in enumerate(zip(y, w))]


@pytest.mark.parametrize("flags", [
    ["--l2", "0.01"],
    more([]),
    more(["--l2", "0.1", "--holdout_period", "5"])])
def test_bfgs_table_adds_in_vws_order(tmp_path, capfd, monkeypatch, flags):
    """``--bfgs`` on labels near 1e6 with importance weights: VW adds each example's
    loss, weight and curvature, and each weight's term of its dot products, to a double
    one after another (the loss over the passes in one sum), and each occurrence's
    curvature x x x to the float preconditioner: the per-pass table's digits, the
    predictions and the closing block as VW's."""
    holdout = [] if "--holdout_period" in flags else ["--holdout_off"]
    args = ["-d", "d.vw", "--bfgs", "--passes", "4", "-c", "-k", *holdout, *flags]
    for who in ("vw", "ts"):
        (tmp_path / who).mkdir()
        (tmp_path / who / "d.vw").write_text("\n".join(_near_a_million(200, 20)) + "\n")
    want = run_vw([*args, "-p", "p"], tmp_path / "vw")
    code, got = run_ts(capfd, [*args, "-p", "p"], tmp_path / "ts", monkeypatch)
    assert code == 0, got
    assert (tmp_path / "ts" / "p").read_bytes() == (tmp_path / "vw" / "p").read_bytes()
    assert got[got.index(" 1 "):] == want[want.index(" 1 "):]


def _weighted(n: int, seed: int) -> list[str]:
    """Real labels of two real features and a category, importance weights 0.5..2."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.normal(size=2)
        out.append(f"{x[0] + 0.1 * rng.normal():.4f} {rng.choice([1, 1, 2, 0.5]):g} |a "
                   f"f0:{x[0]:.4f} f1:{x[1]:.4f} c{rng.integers(30)}")
    return out


@pytest.mark.parametrize("flags", [[], more(["-c", "-k", "--passes", "2", "--holdout_off"])])
def test_sgd_preserved_counters_as_vw(tmp_path, capfd, monkeypatch, flags):
    """``--sgd -i MODEL --preserve_performance_counters``: the table goes on from the
    model's counters, the plain update's rate from its ``t`` as without the flag: the
    predictions, the table, the closing block and the model written as VW's."""
    (tmp_path / "a.vw").write_text("\n".join(_weighted(100, 3)) + "\n")
    (tmp_path / "b.vw").write_text("\n".join(_weighted(100, 4)) + "\n")
    run_vw(["-d", "a.vw", "--sgd", "-l", "0.1", "-f", "m1", "--quiet"], tmp_path)
    args = ["-d", "b.vw", "--sgd", "-l", "0.1", "-i", "m1", *flags, "-p", "p", "-f", "m2"]
    want = run_vw([*args, "--preserve_performance_counters"], tmp_path)
    (tmp_path / "ts").mkdir()
    for name in ("a.vw", "b.vw", "m1"):
        (tmp_path / "ts" / name).write_bytes((tmp_path / name).read_bytes())
    code, got = run_ts(capfd, [*args, "--preserve_performance_counters"], tmp_path / "ts",
                       monkeypatch)
    assert code == 0, got
    assert (tmp_path / "ts" / "p").read_bytes() == (tmp_path / "p").read_bytes()
    assert got[got.index("average  since"):] == want[want.index("average  since"):]
    assert _after_version((tmp_path / "ts" / "m2").read_bytes()) == \
        _after_version((tmp_path / "m2").read_bytes())


def _dense(n: int, seed: int, width: int = 200) -> list[str]:
    """Real labels of ``width`` unnamed real features (``|f 0:1.2 1:-0.3 ...``)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=width) * (rng.random(width) < 0.2)
    out = []
    for _ in range(n):
        x = rng.normal(size=width)
        out.append(f"{x @ w + 0.3 * rng.normal():.4f} |f "
                   + " ".join(f"{j}:{v:.3f}" for j, v in enumerate(x)))
    return out


@pytest.mark.parametrize("numba", [False, more(True)])
def test_hinge_step_of_a_real_label_is_a_float(tmp_path, capfd, monkeypatch, numba):
    """``--loss_function hinge`` on real labels (VW warns and learns): VW's step is
    ``label * (...)`` in float; its double product moved the sixth decimal from a few
    examples on."""
    if numba:
        monkeypatch.setenv("TERASCALE_NO_CEXT", "1")
    _both(tmp_path, capfd, monkeypatch, _dense(30, 8), ["--loss_function", "hinge"])


@pytest.mark.parametrize("flags", [["--sort_features"], more(["--hash", "all"]),
                                   more(["--ngram", "a2"]), more(["--keep", "a"])])
def test_a_line_of_bars_alone_is_an_example_with_generated_features(tmp_path, capfd,
                                                                    monkeypatch, flags):
    """Lines of bars alone (``|``, ``|a``, ``  |  ``, ``|b |c``) under the flags that
    rewrite each line's features: VW reads each as an example (its constant learned
    from, ``unknown`` label), not as the blank line that separates examples."""
    lines = ["1 |a x", "|", "-1 |a y", "", "1", "-1 |a", "1 |", "|a", "  |  ", "|b |c",
             "1 |a x z"]
    _both(tmp_path, capfd, monkeypatch, lines, flags)


def test_ignored_namespaces_are_named_by_their_bytes(tmp_path):
    """``--ignore ü``: VW ignores the namespaces beginning with either byte of the letter
    and names the bytes as they are (``\\xbc \\xc3``), not as text."""
    (tmp_path / "d.vw").write_text("1 |ü a |b c\n-1 |ü d |b e\n", encoding="utf-8")
    got = []
    for cmd in ([sys.executable, "-m", "vowpalwabbit"],
                [sys.executable, "-m", "terascale", "vw"]):
        r = subprocess.run([*cmd, "-d", "d.vw", "--ignore", "ü"], cwd=tmp_path,
                           capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr
        got.append(r.stderr.splitlines()[0])
    assert got[0] == b"ignoring namespaces beginning with: \xbc \xc3"
    assert got[1] == got[0]


@FULL
@pytest.mark.parametrize("flags", [[], ["-t"], ["--binary"]])
def test_hinge_best_constants_loss_warns_of_its_label(tmp_path, flags):
    """``--loss_function hinge`` on labels 0 and 1: VW's closing block takes the loss of
    the best constant at each label, which warns of 0 once more, after the examples'
    lines (standard output as VW's)."""
    (tmp_path / "d.vw").write_text("0 |a x\n1 |a y\n0 |a z\n")
    want, got = stdouts(["-d", "d.vw", "--loss_function", "hinge", *flags], tmp_path)
    assert want.count("[warning]") in (3, 5)
    assert got == want


@FULL
@pytest.mark.parametrize("flags", [["-c"], ["--cache_file", "b"],
                                   ["-c", "--bfgs", "--passes", "2"]])
def test_two_caches_asked_for_are_warned_of(tmp_path, flags):
    """``--cache_file a`` with ``-c`` or a second ``--cache_file``: VW's first run makes the
    first cache only and says so on standard output (after its batch learner's line)."""
    (tmp_path / "d.vw").write_text("1 |a x\n-1 |a y\n1 |a x z\n")
    want, got = stdouts(["-d", "d.vw", "--cache_file", "a", *flags], tmp_path)
    assert "two write caches" in want
    assert got == want


def _heavy(n: int, classes: int = 0) -> list[str]:
    """Every seventh example of importance weight 123456789.7, the others 1.3: after one,
    the next line's weight (in float) stays below the weight seen for a few examples."""
    rng = np.random.default_rng(11)
    return [f"{1 + i % classes if classes else rng.choice([1, -1])} "
            f"{123456789.7 if i % 7 == 0 else 1.3} |a x{i % 5} y{i % 3}" for i in range(n)]


@pytest.mark.parametrize(("flags", "numba"), [
    (["-P", "1"], False), more(["-P", "1"], True), more(["-P", "2", "--sgd"], False),
    more(["-P", "1", "--oaa", "3"], False), more(["-P", "1", "--oaa", "3"], True)])
def test_progress_lines_at_most_one_an_example(tmp_path, capfd, monkeypatch, flags, numba):
    """VW checks for a progress line once after each example: where the next line's
    weight is not past the weight seen (huge importance weights, an additive ``-P``), it
    prints one line at each example, not lines without end at the same one."""
    if numba:
        monkeypatch.setenv("TERASCALE_NO_CEXT", "1")
    lines = _heavy(30, 3 if "--oaa" in flags else 0)
    args = ["-d", "d.vw", *flags]
    tables = []
    for who in ("vw", "ts"):
        (tmp_path / who).mkdir()
        (tmp_path / who / "d.vw").write_text("\n".join(lines) + "\n")
        err = (run_vw(args, tmp_path / who) if who == "vw"
               else run_ts(capfd, args, tmp_path / who, monkeypatch)[1])
        tables.append(err[err.index("average"):])
    assert tables[1] == tables[0] and tables[0].count("\n") > 15
