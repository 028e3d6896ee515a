"""`terascale vw` against the vowpalwabbit package where VW counts what is easy to miss:
empty lines in the holdout's count of examples, the progress table's sums since its last
line, --loss_function poisson's warnings on a negative label, --ignore_linear's features
in the feature counts."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from _vw_runs import FULL, more, numbers, run_ts, run_vw, stdouts

pytest.importorskip("vowpalwabbit")


def _closing(err: str) -> str:
    return err[err.index("finished run"):]


def _weights(path) -> dict[int, float]:
    return {int(i): float(w) for i, w in re.findall(r"^(\d+):(\S+)", path.read_text(), re.M)}


def _blank_lines(n: int, seed: int) -> str:
    """Labelled rows with, between them, empty lines (alone, with a CR, three in a row:
    VW's multi-line terminator) and lines of spaces and tabs."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        if i % 23 == 4:
            out.append("")
        if i % 37 == 6:
            out += ["", "", ""]
        if i % 41 == 9:
            out.append("\r")
        if i % 43 == 11:
            out.append(" \t")
        y = 1 if rng.random() < 0.5 else -1
        out.append(f"{y} |a f{rng.integers(30)} g{rng.integers(30)} x:{rng.normal():.3f}")
    return "".join(x + "\n" for x in out)


@pytest.mark.parametrize("flags", [["--passes", "3", "-c", "-k"],
                                   ["--passes", "3", "-c", "-k", "--holdout_period", "7"],
                                   ["--holdout_after", "150"]])
def test_empty_lines_count_in_the_holdout_as_vw(flags, tmp_path, capfd, monkeypatch):
    """VW counts each empty line (a CR alone too) as an example for the holdout, and reads
    a line of blanks as an unlabelled example: the same examples are held out, so the
    predictions, the weights and the closing block are VW's (from the text, then from
    the cache)."""
    (tmp_path / "d.vw").write_bytes(_blank_lines(300, 5).encode())
    out = ["-p", "{}.p", "--readable_model", "{}.rm"]
    vw = run_vw(["-d", "d.vw", *flags, *(a.format("vw") for a in out)], tmp_path)
    for run in ("text", "cache"):
        code, err = run_ts(capfd, ["-d", "d.vw", *flags, *(a.format(run) for a in out)],
                           tmp_path, monkeypatch)
        assert code == 0, err
        assert _closing(err) == _closing(vw)
        assert (tmp_path / f"{run}.p").read_text() == (tmp_path / "vw.p").read_text()
        assert _weights(tmp_path / f"{run}.rm") == _weights(tmp_path / "vw.rm")


@pytest.mark.parametrize("workers", [1, 2])
def test_empty_lines_count_in_the_batch_learners_holdout(workers, tmp_path, capfd,
                                                           monkeypatch):
    """--bfgs holds out VW's examples, on one worker or each reading a share of the text
    (the empty lines of the shares before counted)."""
    (tmp_path / "d.vw").write_bytes(_blank_lines(300, 6).encode())
    flags = ["--bfgs", "--passes", "4", "-c", "-k", "--predict_only_model"]
    vw = run_vw(["-d", "d.vw", *flags, "--readable_model", "vw.rm"], tmp_path)
    code, err = run_ts(capfd, ["-d", "d.vw", "-n", str(workers), *flags,
                               "--readable_model", "ts.rm"], tmp_path, monkeypatch)
    assert code == 0, err
    assert _closing(err).split("\n")[:9] == _closing(vw).split("\n")[:9]
    a, b = _weights(tmp_path / "vw.rm"), _weights(tmp_path / "ts.rm")
    assert a.keys() == b.keys()
    np.testing.assert_allclose([b[k] for k in a], [a[k] for k in a], rtol=1e-5, atol=1e-6)
    assert len(numbers(tmp_path / "ts.rm")) > 0


@pytest.mark.parametrize("text", ["", "\n\n\n"])
def test_the_batch_learner_over_no_example_prints_vws_lines(text, tmp_path, capfd,
                                                             monkeypatch):
    """--bfgs over an input of no example (empty, or empty lines only): VW's pass line of
    0/0 averages, written -nan as C writes them, and its closing block."""
    (tmp_path / "d.vw").write_text(text)
    flags = ["-d", "d.vw", "--bfgs", "--passes", "2", "-c", "-k"]
    vw = run_vw(flags, tmp_path)
    code, err = run_ts(capfd, flags, tmp_path, monkeypatch)
    assert code == 0, err
    vw = "".join(ln for ln in vw.splitlines(True)
                 if not ln.startswith(("Enabled", "Input", "Output")))
    assert " 1 -nan      \t-nan      \t" in vw
    assert err[err.index("## avg"):] == vw[vw.index("## avg"):]


def _table(err: str) -> str:
    return err[err.index("average  since"):err.index("finished run")]


@pytest.mark.parametrize("flags", [["-P", "5"], ["-P", "5", "--passes", "3", "-c", "-k"],
                                   ["-P", "5", "-t", "-i", "m.vw"]])
def test_since_last_after_a_huge_loss_is_vws(flags, tmp_path, capfd, monkeypatch):
    """After a loss near 1e22 the table's ``since last`` is VW's small value (its own sum
    since the last line, not a difference of running sums), learning or under -t, and so
    is the model's sum_loss_since_last_dump."""
    rng = np.random.default_rng(2)
    rows = []
    for i in range(200):
        y = 1e11 if i == 3 else 3e10 if i == 40 else rng.normal()
        rows.append(f"{y:.6g} |a f{rng.integers(20)} x:{rng.normal():.3f}\n")
    (tmp_path / "d.vw").write_text("".join(rows))
    run_vw(["-d", "d.vw", "-f", "m.vw"], tmp_path)
    vw = run_vw(["-d", "d.vw", *flags, "--readable_model", "vw.rm"], tmp_path)
    code, err = run_ts(capfd, ["-d", "d.vw", *flags, "--readable_model", "ts.rm"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    assert _table(err) == _table(vw)
    if "-t" not in flags:  # (-t writes the model read: its counters are the model's)
        since = [re.findall(r"^sum_loss_since_last_dump.*$", (tmp_path / f).read_text(),
                            re.M) for f in ("vw.rm", "ts.rm")]
        assert since[0] and since[0] == since[1]


@pytest.mark.parametrize("flags", [["-P", "3"], ["--passes", "2", "-c", "-k"],
                                   ["-t", "-P", "3"]])
def test_poisson_on_negative_labels_warns_and_counts_as_vw(flags, tmp_path):
    """A negative label under --loss_function poisson: VW's [warning] lines on standard
    output (two for an example learned from, one held out or under -t, none at weight
    0, the label as VW prints it), and its table, whose since-last column is finite again
    after the line that had the label."""
    rows = ["1 |a x:1", "2 |a y:2", "-1 |a x:0.5 y", "3 |a z", "-2 0 |a x"]
    rows += ["1.5 |a y:0.3", "2 |a x"] * 3 + ["-0.1 |a x", "-1e-7 |a y", "-123456789 |a x"]
    rows.insert(9, "-7 |a y")  # (the 10th: held out with --passes)
    rows += ["1.5 |a y:0.3", "2 |a x"] * 8
    (tmp_path / "d.vw").write_text("\n".join(rows) + "\n")
    args = ["-d", "d.vw", "--loss_function", "poisson", *flags]
    vw, ts = stdouts(args, tmp_path)
    assert vw.count("[warning]") >= 5 and ts == vw
    errs = []
    for cmd in ([sys.executable, "-m", "vowpalwabbit"], [sys.executable, "-m", "terascale", "vw"]):
        r = subprocess.run([*cmd, *args], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
        errs.append(_table(r.stderr))
    assert re.search(r"^-nan +\d", errs[0], re.M)  # (since last: finite again)
    assert errs[1] == errs[0]


def _features(err: str) -> list[str]:
    """The table's current-features column and the closing block's total."""
    rows = [ln.split() for ln in _table(err).splitlines()[2:] if ln.strip()]
    return [r[-1] for r in rows] + re.findall(r"^total feature number = \d+", err, re.M)


@pytest.mark.parametrize("flags", [["--ignore_linear", "a", "-q", "ab"],
                                   ["--ignore_linear", "ab", "--passes", "2", "-c", "-k",
                                    "--holdout_off", "-q", "ab"],
                                   ["--ignore_linear", "a", "--noconstant"]])
def test_ignore_linear_features_are_counted_as_vw(flags, tmp_path, capfd, monkeypatch):
    """VW counts the features --ignore_linear leaves out of learning: the table's current
    features, the total feature number and the model's total_features are VW's (from the
    text and from the cache), and so is -t's table with the model."""
    (tmp_path / "d.vw").write_text("1 |a x y z |b p q\n-1 |a x |b q r s\n1 |a y |b p\n"
                                   "-1 |b q\n1 |a x y\n")
    out = ["-P", "1", "--readable_model", "{}.rm", "-f", "{}.model"]
    vw = run_vw(["-d", "d.vw", *flags, *(a.format("vw") for a in out)], tmp_path)
    code, err = run_ts(capfd, ["-d", "d.vw", *flags, *(a.format("ts") for a in out)],
                       tmp_path, monkeypatch)
    assert code == 0, err
    assert _features(err) == _features(vw) and _features(vw)[-1] != "total feature number = 0"
    total = [re.findall(r"^total_features.*$", (tmp_path / f"{r}.rm").read_text(), re.M)
             for r in ("vw", "ts")]
    assert total[0] and total[0] == total[1]
    test = ["-d", "d.vw", "-t", "-i", "vw.model", "-P", "1"]
    code, err = run_ts(capfd, test, tmp_path, monkeypatch)
    assert code == 0, err
    assert _features(err) == _features(run_vw(test, tmp_path))


@pytest.mark.parametrize("text", ["", more("0 |a x y\n0 'q|b z\n0 |a y\n")])
def test_a_run_that_saw_no_label_but_0_keeps_vws_label_range(text, tmp_path, capfd,
                                                              monkeypatch):
    """VW's label range starts at 0, 0 and widens with the labels: an empty input (or
    labels all 0) leaves it there, and its --readable_model says Min/Max label 0 (and the
    checksum of that header), not the -1, 1 of a model without a learner state."""
    (tmp_path / "d.vw").write_text(text)
    run_vw(["-d", "d.vw", "--readable_model", "vw.rm", "--quiet"], tmp_path)
    code, err = run_ts(capfd, ["-d", "d.vw", "--readable_model", "ts.rm", "--quiet"],
                       tmp_path, monkeypatch)
    assert code == 0, err
    assert b"Min label:0\nMax label:0\n" in (tmp_path / "vw.rm").read_bytes()
    assert (tmp_path / "ts.rm").read_bytes() == (tmp_path / "vw.rm").read_bytes()


def _far_weights(n: int, seed: int, oaa: bool) -> str:
    """Rows whose importance weights are 1e7 or 1e-3 (about 33 bits apart), classes 1..3
    (``oaa``; some of class -1, VW's no class, with their weight) or labels -1/1, and some
    unlabelled."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        c = int(rng.integers(1, 4))
        w = rng.choice(["1e7", "1e-3", "0.5"])
        lab = (("-1" if rng.random() < 0.1 else str(c)) if oaa else str(2 * (c > 1) - 1))
        head = "" if rng.random() < 0.1 else f"{lab} {w} "
        out.append(f"{head}'t{i}|a x{3 * c + rng.integers(4)} y{rng.integers(9)}")
    return "\n".join(out) + "\n"

def _same_as_vw(args, tmp_path, capfd, monkeypatch):
    """VW and terascale vw run ``args(tool)``: the same table and closing block, ``-p``,
    readable model and ``-f`` bytes after the version string."""
    vw = run_vw(args("vw"), tmp_path)
    code, err = run_ts(capfd, args("ts"), tmp_path, monkeypatch)
    assert code == 0, err
    assert err[err.index("average  since"):] == vw[vw.index("average  since"):]
    for ext in ("p", "rm"):
        assert (tmp_path / f"ts.{ext}").read_text() == (tmp_path / f"vw.{ext}").read_text()
    models = [(tmp_path / f"{tool}.m").read_bytes() for tool in ("ts", "vw")]
    assert [b[4 + int.from_bytes(b[:4], "little"):] for b in models] == \
        [b[4 + int.from_bytes(b[:4], "little"):] for b in models[::-1]]



@pytest.mark.parametrize(("flags", "numba"), [
    (["--oaa", "3", "--passes", "2", "-c", "-k"], False),
    more(["--passes", "3", "-c", "-k", "--holdout_off"], False),
    more(["--oaa", "3", "--passes", "2", "-c", "-k"], True),
    more(["--oaa", "3", "--passes", "3", "-c", "-k", "--holdout_off", "--probabilities",
          "--loss_function", "logistic"], False),
    more(["--passes", "3", "-c", "-k"], True),
    more(["--passes", "3", "-c", "-k", "--holdout_off"], True),
    more(["--sgd", "--passes", "3", "-c", "-k"], False),
    more(["--adaptive", "--passes", "3", "-c", "-k", "--holdout_off"], False)])
def test_weight_sums_run_over_the_passes_as_vws(flags, numba, tmp_path, capfd, monkeypatch):
    """VW's t, weighted_labeled_examples and weighted_unlabeled_examples are each one
    double sum over every pass, example by example: with weights 1e7 and 1e-3, sums of
    each pass added round otherwise (the model's counters, its readable header, the
    closing block's weighted example sum); VW's loss since the table's last line too, a
    running sum of its own (``--sgd``, ``--adaptive``...)."""
    if numba:
        monkeypatch.setenv("TERASCALE_NO_CEXT", "1")
    (tmp_path / "d.vw").write_text(_far_weights(40, 5, "--oaa" in flags))

    def args(tool):
        return ["-d", "d.vw", *flags, "-p", f"{tool}.p", "-f", f"{tool}.m",
                "--readable_model", f"{tool}.rm"]

    _same_as_vw(args, tmp_path, capfd, monkeypatch)


@FULL
@pytest.mark.parametrize(("first", "then", "numba"), [
    ([], ["--passes", "2", "-c", "-k", "--holdout_off"], False),
    ([], ["--preserve_performance_counters"], True),
    (["--oaa", "3"], ["--oaa", "3", "--passes", "2", "-c", "-k", "--holdout_off"], False),
    (["--oaa", "3"], ["--oaa", "3", "--preserve_performance_counters"], True),
    (["--sgd"], ["--sgd", "--preserve_performance_counters"], False)])
def test_weight_sums_go_on_from_i_as_vws(first, then, numba, tmp_path, capfd, monkeypatch):
    """-i of VW's model: VW's t (and, with --preserve_performance_counters, its label and
    unlabelled weight sums) go on from the model's as running double sums: with weights
    1e7 and 1e-3, -i's added at the end rounds otherwise."""
    if numba:
        monkeypatch.setenv("TERASCALE_NO_CEXT", "1")
    oaa = "--oaa" in first
    (tmp_path / "d.vw").write_text(_far_weights(40, 5, oaa))
    run_vw(["-d", "d.vw", *first, "-f", "m0", "--quiet"], tmp_path)

    def args(tool):
        return ["-d", "d.vw", "-i", "m0", *then, "-p", f"{tool}.p", "-f", f"{tool}.m",
                "--readable_model", f"{tool}.rm"]

    _same_as_vw(args, tmp_path, capfd, monkeypatch)
