"""`terascale vw ARGS` against the vowpalwabbit package on generated data, the less common
cases: --feature_mask (alone and with -i), labels written ``1:1``, the closing block of
passes that held nothing out, --save_per_pass, -i of VW's one-against-all model,
--named_labels, --affix, -P, runs without data, VW's other update rules and --sparse_l2;
every prediction equal to VW's to 1e-5. CI runs one case of each; ``make test-vw``
(``TERASCALE_VW_SUITE=all``) runs every parametrization."""

from __future__ import annotations

import re

import numpy as np
import pytest
from _vw_runs import more, numbers, run_ts, run_vw

pytest.importorskip("vowpalwabbit")



def _lines(n: int, seed: int, label=None) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a = rng.choice(40, size=4, replace=False)
        b = rng.choice(15, size=2, replace=False)
        x = rng.normal(size=2)
        y = (f"{0.3 * a.sum() / 40 + 0.5 * x[0] + 0.1 * rng.normal():.5f}" if label is None
             else label(rng, a, x))
        out.append(f"{y} |a " + " ".join(f"f{j}" for j in a) + f" x:{x[0]:.4f} |b "
                   + " ".join(f"g{j}" for j in b) + f" z:{x[1]:.4f}")
    return out


def _avg(err: str) -> str:
    return re.findall(r"^average loss = (.+)$", err, re.M)[-1]


def _same(tmp_path, capfd, monkeypatch, args: list[str]) -> str:
    """Run ``args`` through VW and terascale vw with -p; the predictions and average loss
    agree (returns terascale's standard error)."""
    want = run_vw([*args, "-p", "vw.p"], tmp_path)
    code, got = run_ts(capfd, [*args, "-p", "ts.p"], tmp_path, monkeypatch)
    assert code == 0, got
    v, t = numbers(tmp_path / "vw.p"), numbers(tmp_path / "ts.p")
    assert len(v) == len(t) > 0
    np.testing.assert_allclose(t, v, rtol=1e-5, atol=1e-5)
    assert _avg(got) == _avg(want)
    return got


def _progress_table(err: str) -> list[str]:
    """The progress table's lines of a VW-style run's standard error."""
    return [ln for ln in err.splitlines()  # (a holdout line ends with h)
            if re.match(r"(\d|n\.a\.| unknown)", ln)
            and (len(ln.split()) == 7 or len(ln.split()) == 8 and ln.endswith(" h"))]


def _closing_block(err: str) -> list[str]:
    """The closing block's lines."""
    return err[err.index("finished run"):].splitlines()


def test_feature_mask_learns_only_the_masks_weights(tmp_path, capfd, monkeypatch):
    """A mask from an L1 run (VW's, its constant truncated to 0 too): training starts from
    it and updates its nonzero weights only; with -i, -i's nonzero weights are the mask."""
    (tmp_path / "d.vw").write_text("\n".join(_lines(400, 3)) + "\n")
    run_vw(["-d", "d.vw", "--l1", "0.002", "-f", "mask.model", "--predict_only_model"],
        tmp_path)
    _same(tmp_path, capfd, monkeypatch, ["-d", "d.vw", "--feature_mask", "mask.model"])
    run_vw(["-d", "d.vw", "--feature_mask", "mask.model", "-f", "re.model"], tmp_path)
    _same(tmp_path, capfd, monkeypatch, ["-d", "d.vw", "--feature_mask", "mask.model",
                                         "-i", "re.model", "--passes", "2", "-c", "-k"])
    code, err = run_ts(capfd, ["-d", "d.vw", "--feature_mask", "mask.model", "-q", "ab"],
                    tmp_path, monkeypatch)
    assert code == 2 and "--feature_mask with -q" in err


def test_label_words_that_start_with_a_number(tmp_path, capfd, monkeypatch):
    """``1:1`` is label 1 and ``2abc`` label 2, as VW's simple-label parser reads them;
    passes that hold nothing out end with VW's ``undefined (no holdout)``, and stop when
    VW's do."""
    lines = [f"{ln.split()[0][:4]}:{k % 3} {ln.split(' ', 1)[1]}"
             for k, ln in enumerate(_lines(60, 4))]
    lines[5] = "2abc " + lines[5].split(" ", 1)[1]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    _same(tmp_path, capfd, monkeypatch, ["-d", "d.vw"])
    (tmp_path / "small.vw").write_text("\n".join(lines[:8]) + "\n")
    err = _same(tmp_path, capfd, monkeypatch, ["-d", "small.vw", "--passes", "2", "-c",
                                               "-k"])
    assert _avg(err) == "undefined (no holdout)"
    # (VW's early stop there: the first pass wins, the passes stop 3 passes later; VW's
    # other update rules too)
    args = ["-d", "small.vw", "--sgd", "--passes", "6", "-c", "-k"]
    err = _same(tmp_path, capfd, monkeypatch, args)
    assert _closing_block(err) == _closing_block(run_vw(args, tmp_path))


def test_save_per_pass_writes_vws_model_of_each_pass(tmp_path, capfd, monkeypatch):
    """FILE.K after each pass K (holdout on, L2), each predicting as VW's own FILE.K."""
    (tmp_path / "d.vw").write_text("\n".join(_lines(300, 6)) + "\n")
    args = ["-d", "d.vw", "--passes", "3", "-c", "-k", "--l2", "0.001", "--save_per_pass"]
    run_vw([*args, "-f", "vw.m"], tmp_path)
    code, err = run_ts(capfd, [*args, "-f", "ts.m"], tmp_path, monkeypatch)
    assert code == 0, err
    for k in (1, 2, 3):
        run_vw(["-i", f"vw.m.{k}", "-t", "-d", "d.vw", "-p", f"vw.{k}"], tmp_path)
        run_vw(["-i", f"ts.m.{k}", "-t", "-d", "d.vw", "-p", f"ts.{k}"], tmp_path)
        np.testing.assert_allclose(numbers(tmp_path / f"ts.{k}"),
                                   numbers(tmp_path / f"vw.{k}"), rtol=1e-5, atol=1e-5)
    assert not (tmp_path / "ts.m.4").exists()
    assert not np.allclose(numbers(tmp_path / "ts.1"), numbers(tmp_path / "ts.3"))


def _classes(rng, a, x):
    return 1 + int(a[0] % 3)


@pytest.mark.parametrize("loss", ["logistic", more("squared")])
def test_warm_start_from_vws_one_against_all_model(loss, tmp_path, capfd, monkeypatch):
    """-i of VW's --oaa model (save_resume form): training goes on as VW's (its first
    class's normalized sums, the others' from 0, as VW reads them), with passes; -t
    predicts as VW; the model written is the one VW writes."""
    (tmp_path / "d.vw").write_text("\n".join(_lines(300, 8, _classes)) + "\n")
    run_vw(["-d", "d.vw", "--oaa", "3", "-f", "vw.m", "--loss_function", loss], tmp_path)
    _same(tmp_path, capfd, monkeypatch, ["-d", "d.vw", "-i", "vw.m"])
    _same(tmp_path, capfd, monkeypatch, ["-d", "d.vw", "-i", "vw.m", "-t"])
    run_vw(["-d", "d.vw", "-i", "vw.m", "--passes", "3", "-c", "-k", "-f", "vw2.m"], tmp_path)
    code, err = run_ts(capfd, ["-d", "d.vw", "-i", "vw.m", "--passes", "3", "-c", "-k", "-f",
                            "ts2.m"], tmp_path, monkeypatch)
    assert code == 0, err
    for m in ("vw2", "ts2"):
        run_vw(["-i", f"{m}.m", "-t", "-d", "d.vw", "-p", f"{m}.p"], tmp_path)
    assert (tmp_path / "ts2.p").read_text() == (tmp_path / "vw2.p").read_text()
    code, err = run_ts(capfd, ["-d", "d.vw", "-i", "vw.m", "--oaa", "4"], tmp_path, monkeypatch)
    assert code == 2 and "a model of --oaa 3" in err


def test_named_labels(tmp_path, capfd, monkeypatch):
    """--named_labels: names in, names out, kept in the model for -i -t (VW's)."""
    names = ["cat", "dog", "bird"]
    lines = [names[int(ln.split()[0]) - 1] + " " + ln.split(" ", 1)[1]
             for ln in _lines(200, 9, _classes)]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", "--oaa", "3", "--named_labels", ",".join(names)]
    run_vw([*args, "-f", "vw.m", "-p", "vw.p"], tmp_path)
    code, err = run_ts(capfd, [*args, "-f", "ts.m", "-p", "ts.p"], tmp_path, monkeypatch)
    assert code == 0, err
    got = (tmp_path / "ts.p").read_text()
    assert got == (tmp_path / "vw.p").read_text() and set(got.split()) <= set(names)
    for m in ("vw", "ts"):  # each tool reads the other's model and its names
        run_vw(["-i", f"{m}.m", "-t", "-d", "d.vw", "-p", f"{m}.t"], tmp_path)
    assert (tmp_path / "ts.t").read_text() == (tmp_path / "vw.t").read_text()
    code, err = run_ts(capfd, ["-d", "d.vw", "-i", "vw.m", "-t", "-p", "ts.i"], tmp_path,
                    monkeypatch)
    assert code == 0 and (tmp_path / "ts.i").read_text() == (tmp_path / "vw.t").read_text()
    # a label that is not a name is VW's class 0 (with a warning): the classes are
    # 0-indexed from there on, as after a label 0, and its name is empty
    (tmp_path / "odd.vw").write_text("".join(f"{n} |a x{i % 3} y\n" for i, n in enumerate(
        ["fish", "cat", "dog", "fish", "bird", "cow", "cat", "dog", "fish", "bird"] * 3)))
    args = ["-d", "odd.vw", "--oaa", "3", "--named_labels", ",".join(names), "-p"]
    want = run_vw([*args, "vw.p"], tmp_path)
    from terascale.cli import main

    capfd.readouterr()
    code = main(["vw", *args, "ts.p"])
    out, err = capfd.readouterr()  # (VW's warning on standard output)
    assert code == 0 and "Missing named label 'cow'" in out and _avg(err) == _avg(want)
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()


def test_affix_features(tmp_path, capfd, monkeypatch):
    """--affix: prefixes and suffixes of the default namespace's and of namespace w's
    words (values and namespace scales carried over), crossed with -q, over passes."""
    rng = np.random.default_rng(10)
    words = ["happiness", "happier", "uglier", "fastidious", "ness", "a", "walked",
             "walking", "talks", "12345"]
    lines = []
    for _ in range(200):
        ws = rng.choice(words, size=3, replace=False)
        y = 1 if any(w.endswith("er") for w in ws) else -1
        lines.append(f"{y} | {ws[0]} {ws[1]}:0.5 |w:2 {ws[2]} |b x{rng.integers(5)}")
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    _same(tmp_path, capfd, monkeypatch, ["-d", "d.vw", "--affix", "+2,-3,-2w", "-q", "wb",
                                         "--passes", "2", "-c", "-k"])
    _same(tmp_path, capfd, monkeypatch, ["-d", "d.vw", "--affix", "-7w,+1", "--affix",
                                         "-7w,+1"])
    code, err = run_ts(capfd, ["-d", "d.vw", "--affix", "+9"], tmp_path, monkeypatch)
    assert code == 2 and "--affix +9" in err


def test_a_run_without_data_writes_vws_model_and_state(tmp_path, capfd, monkeypatch):
    """--no_stdin and no -d: -f and --readable_model write the starting model, with
    --l1_state/--l2_state over -i's; the readable text is VW's byte for byte (its header
    checksum and learner state), and VW 8's model keeps its state from its options."""
    from pathlib import Path

    steps = [["--readable_model", "{}0.txt", "-f", "{}0.m", "--no_stdin"],
             ["--readable_model", "{}1.txt", "-f", "{}1.m", "-i", "{}0.m", "--l1_state",
              "5.34", "--l2_state", "0.003", "--no_stdin", "-q", "ab"],
             ["--readable_model", "{}2.txt", "-i", "{}1.m", "--l1_state", "89.4",
              "--no_stdin"],
             # (the interactions given replace the model's, -q ab: VW's rule)
             ["--readable_model", "{}3.txt", "-i", "{}1.m", "--cubic", "abc", "--no_stdin"]]
    for step in steps:
        run_vw([a.format("vw") for a in step], tmp_path)
        code, err = run_ts(capfd, [a.format("ts") for a in step], tmp_path, monkeypatch)
        assert code == 0 and "average loss = n.a." in err, err
    assert "options: --cubic abc\n" in (tmp_path / "vw3.txt").read_text()
    for k in range(4):
        assert (tmp_path / f"ts{k}.txt").read_text() == (tmp_path / f"vw{k}.txt").read_text()
    old = Path(__file__).parents[1] / "vw_suite/data/model-sets/save_resume_with_l1l2_state.model"
    run_vw(["--readable_model", "vw8.txt", "-i", str(old), "--no_stdin"], tmp_path)
    code, err = run_ts(capfd, ["--readable_model", "ts8.txt", "-i", str(old), "--no_stdin"],
                    tmp_path, monkeypatch)
    assert code == 0 and (tmp_path / "ts8.txt").read_text() == (tmp_path / "vw8.txt").read_text()
    code, err = run_ts(capfd, ["-d", "ts0.txt", "--l1_state", "1"], tmp_path, monkeypatch)
    assert code == 2 and "--l1_state" in err


@pytest.mark.parametrize("progress", [["-P", "1.5"], more([]), more(["-P", "7"]),
                                      more(["--progress", "0.5"])])
def test_progress_lines_are_vws(progress, tmp_path, capfd, monkeypatch):
    """The progress table: VW's columns and numbers, at VW's cadence (-P N adds N,
    -P F multiplies the count at each line)."""
    (tmp_path / "d.vw").write_text("\n".join(_lines(120, 11)) + "\n")
    args = ["-d", "d.vw", *progress]

    def table(err: str) -> list[str]:
        return [ln for ln in err.splitlines() if len(ln.split()) == 7]

    want = table(run_vw(args, tmp_path))
    code, err = run_ts(capfd, args, tmp_path, monkeypatch)
    assert code == 0 and len(want) > 4
    assert table(err) == want


@pytest.mark.parametrize("flags", [
    [], ["--passes", "3", "-c", "-k"], ["--sgd", "--passes", "2", "-c", "-k"],
    more(["-P", "3"]), more(["--passes", "2", "-c", "-k", "--holdout_off"]),
    more(["--passes", "4", "-c", "-k", "--holdout_period", "3", "-P", "40"]),
    more(["--loss_function", "logistic", "--passes", "3", "-c", "-k"]),
    more(["--loss_function", "hinge"]),
    more(["--loss_function", "quantile", "--quantile_tau", "0.3", "--passes", "2", "-c",
           "-k", "--holdout_off"]),
    more(["--adaptive", "--invariant", "--passes", "3", "-c", "-k"]),
    more(["--normalized", "--loss_function", "logistic"]),
    more(["--bfgs", "--passes", "3", "-c", "-k"]),
    more(["--dont_output_best_constant", "-l", "0.1"]),
])
def test_progress_and_closing_block_count_weight_and_unlabelled_examples_as_vw(
        flags, tmp_path, capfd, monkeypatch):
    """VW's cadence counts importance weight, and its counters count unlabelled examples
    (a line without '|' too: its label word is the tag) and leave held-out ones out: the
    progress table of every pass (holdout losses marked h) and the closing block (the
    weighted label sum and best constant too) are VW's, line for line, for VW's update
    rules and losses."""
    rng = np.random.default_rng(23)
    lines = []
    for i in range(300):
        y = rng.choice(["1", "-1"])
        head = rng.choice([f"{y}", f"{y} 2.5", f"{y} 0", f"{y} 0.5 'e{i}", "", y])
        lines.append(head if head == y else f"{head}|a x{rng.integers(20)} |b k{i % 7}")
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", *flags]

    want = run_vw(args, tmp_path)
    code, err = run_ts(capfd, args, tmp_path, monkeypatch)
    assert code == 0, err
    table = _progress_table(want)
    assert _progress_table(err) == table and (len(table) > 4 or "--bfgs" in flags)
    if "--passes" in flags and not {"--holdout_off", "--bfgs"} & set(flags):
        assert table[-1].endswith(" h")
    assert _closing_block(err) == _closing_block(want)
    assert any(ln.startswith("best constant") for ln in _closing_block(want)) == (
        "--dont_output_best_constant" not in flags)


@pytest.mark.parametrize("flags", [["--link", "logistic", "--loss_function", "logistic"],
                                   ["--binary"], ["--link", "poisson", "--loss_function",
                                                  "poisson"], ["--loss_function", "squared"]])
def test_progress_shows_predictions_as_p_writes_them_and_cuts_losses_as_vw(
        flags, tmp_path, capfd, monkeypatch):
    """The "current predict" column is the prediction -p writes (the link's probability or
    rate, --binary's sign; it was the raw score), and a loss of 10 or more is cut to its
    8-character column as VW cuts it (134.296493 is 134.2964)."""
    def label(rng, a, x):
        if "poisson" in flags:
            return str(int(rng.poisson(3)))
        if "logistic" in flags or "--binary" in flags:
            return str(rng.choice(["-1", "1"]))
        return f"{30 * x[0] + 10 * (a[0] % 3):.3f}"

    (tmp_path / "d.vw").write_text("\n".join(_lines(300, 47, label)) + "\n")
    args = ["-d", "d.vw", *flags]

    want = _progress_table(run_vw(args, tmp_path))
    code, err = run_ts(capfd, args, tmp_path, monkeypatch)
    assert code == 0, err
    assert _progress_table(err) == want and len(want) > 4
    if "squared" in flags:
        assert any(len(ln.split()[0]) == 8 and float(ln.split()[0]) >= 10 for ln in want)


def test_binary_with_a_link_is_refused_naming_both(tmp_path, capfd, monkeypatch):
    """VW applies --binary to a link's always positive output (every prediction 1)."""
    (tmp_path / "d.vw").write_text("\n".join(_lines(20, 3)) + "\n")
    code, err = run_ts(capfd, ["-d", "d.vw", "--binary", "--link", "logistic"], tmp_path,
                       monkeypatch)
    assert code == 2 and "--binary with --link logistic" in err


def test_one_against_all_prints_vws_table_and_weighs_its_losses(tmp_path, capfd,
                                                                monkeypatch):
    """--oaa: VW's progress table (there was none) and a closing block whose losses and
    sums are weighted by the examples' importance (they were counts), unlabelled examples
    counted."""
    rng = np.random.default_rng(59)
    lines = []
    for i in range(300):
        k = int(rng.integers(1, 4))
        head = [f"{k}", f"{k} 2.5", f"{k} 0.5", f"'u{i}"][i % 4]
        lines.append(f"{head} |a x{3 * k + rng.integers(4)} y{rng.integers(9)} |b z{k}")
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    run_vw(["-d", "d.vw", "--oaa", "3", "-f", "vw.m"], tmp_path)
    # one pass; three, whose lines from the second pass on are the holdout's (h); -t
    for args in (["-d", "d.vw", "--oaa", "3"], ["-d", "d.vw", "--oaa", "3", "--passes", "3",
                                                "-c", "-k"], ["-d", "d.vw", "-t", "-i", "vw.m"]):
        want = run_vw(args, tmp_path)
        code, err = run_ts(capfd, args, tmp_path, monkeypatch)
        assert code == 0, err
        assert _progress_table(err) == _progress_table(want)
        assert len(_progress_table(want)) > 4
        assert _closing_block(err) == _closing_block(want)
        assert _progress_table(want)[-1].endswith(" h") == ("--passes" in args)


def test_one_against_all_writes_tags_and_refuses_fractional_labels(tmp_path, capfd,
                                                                   monkeypatch):
    """--oaa -p: each prediction with its example's tag (probabilities too), as VW; a
    label with a fraction (VW: "label has trailing character(s)", and it reads no
    more) ends the input, and is refused with its line under a holdout."""
    lines = [f"{_classes(None, np.array([i * 7]), None)} 'e{i}|a f{i % 13} g{i % 5}"
             for i in range(120)]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    for flags in (["--oaa", "3"], ["--oaa", "3", "--loss_function", "logistic",
                                   "--probabilities", "--passes", "2", "-c", "-k"]):
        run_vw(["-d", "d.vw", *flags, "-p", "vw.p"], tmp_path)
        code, err = run_ts(capfd, ["-d", "d.vw", *flags, "-p", "ts.p"], tmp_path, monkeypatch)
        assert code == 0, err
        v = (tmp_path / "vw.p").read_text().split("\n")
        t = (tmp_path / "ts.p").read_text().split("\n")
        assert [ln.split()[-1:] for ln in t] == [ln.split()[-1:] for ln in v]
        assert "e7" in t[7]
    (tmp_path / "bad.vw").write_text("1 |a x\n-1.5 |a y\n")
    code, err = run_ts(capfd, ["-d", "bad.vw", "--oaa", "2"], tmp_path, monkeypatch)
    assert code == 0 and "number of examples = 1\n" in err
    code, err = run_ts(capfd, ["-d", "bad.vw", "--oaa", "2", "--passes", "2", "-c"],
                       tmp_path, monkeypatch)
    assert code == 2 and "bad.vw:2" in err and "'-1.5'" in err


@pytest.mark.parametrize("flags", [
    ["--normalized", "--power_t", "0.3", "-l", "0.2"],
    ["--sparse_l2", "0.05", "--adaptive", "--invariant", "--initial_t", "1"],
    more(["--adaptive"]),
    more(["--normalized", "--invariant", "--power_t", "0.7", "--initial_t", "3"]),
    more(["--adaptive", "--normalized", "--power_t", "0.3"]),
    more(["--sparse_l2", "0.01"]), more(["--sgd", "--power_t", "0.3"]),
    more(["--normalized", "--loss_function", "poisson", "--link", "poisson", "-l", "0.1"]),
    more(["--sparse_l2", "0.01", "--passes", "2", "-c", "-k", "--loss_function",
           "logistic"]),
])
def test_vws_other_update_rules(flags, tmp_path, capfd, monkeypatch):
    """VW's gd with a subset of its rules (its per-weight sums, its rescaling and its
    average update, power_t other than 0.5 too), and --sparse_l2, with any rules."""
    if "poisson" in flags:
        rng = np.random.default_rng(12)
        lines = [f"{rng.poisson(2)} |a f{rng.integers(20)} x:{rng.normal():.3f}"
                 for _ in range(300)]
    else:
        lines = [ln if k % 7 else "2.5 " + ln.split(" ", 1)[1]
                 for k, ln in enumerate(_lines(300, 13))]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    _same(tmp_path, capfd, monkeypatch, ["-d", "d.vw", *flags])


@pytest.mark.parametrize("flags", [
    ["--l1", "1e-3", "--l2", "1e-4"],
    more(["--l1", "1e-3", "--passes", "2", "-c", "-k"]),
    more(["--l1", "1e-3", "--predict_only_model"]),
    more(["-q", "ab", "-P", "7"]), more(["--quiet", "-P", "7"]),
])
def test_readable_model_after_training_is_vws(flags, tmp_path, capfd, monkeypatch):
    """--readable_model after training: VW's text byte for byte, its performance counters
    (sum_loss, weighted_labels, example_number, total_features, where the progress table
    stopped, ...) and, after --l1, the weights VW keeps unapplied (those L1 zeroes too)
    with its l1_state; --predict_only_model: the L1 applied, the nonzero weights alone."""
    (tmp_path / "d.vw").write_text("\n".join(  # (importance weights 2.5 among them)
        ln if k % 5 else ln.replace(" |a", " 2.5 |a", 1)
        for k, ln in enumerate(_lines(300, 17))) + "\n")
    args = ["-d", "d.vw", *flags, "--readable_model"]
    run_vw([*args, "vw.txt"], tmp_path)
    code, err = run_ts(capfd, [*args, "ts.txt"], tmp_path, monkeypatch)
    assert code == 0, err
    want = (tmp_path / "vw.txt").read_text()
    assert (tmp_path / "ts.txt").read_text() == want
    if "--predict_only_model" in flags:  # (no learner state: weights alone)
        assert "l1_state" not in want and "sum_loss" not in want
    else:
        assert "sum_loss 0\n" not in want and "sum_loss" in want
        assert ("l1_state 0\n" in want) == ("--l1" not in flags)


@pytest.mark.parametrize("flags", [["--sgd"], more(["--sgd", "--passes", "3", "-c", "-k"]),
                                   more(["--invariant", "--holdout_after", "150"]),
                                   more(["--sgd", "--loss_function", "hinge", "-l", "3"])])
def test_plain_sgd_with_importance_weights_is_vws_to_the_printed_digit(
        flags, tmp_path, capfd, monkeypatch):
    """VW's plain SGD (learning rate 10: the weights grow, so a last-bit difference in a
    step shows in later predictions) on importance weights 0 to 3.7 and labels whose range
    widens: every -p line as VW writes it."""
    rng = np.random.default_rng(4)
    (tmp_path / "d.vw").write_text("".join(
        f"{rng.normal() * (1 + i / 100):.4f} {rng.choice([1, 2, 0.5, 0, 3.7])} |a "
        f"x{rng.integers(30)} y:{rng.normal():.3f} |b z{rng.integers(7)}\n"
        for i in range(400)))
    _same(tmp_path, capfd, monkeypatch, ["-d", "d.vw", *flags])
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()


@pytest.mark.parametrize("flags", [["--loss_function", "hinge"],
                                   more(["--cubic", "abc", "--loss_function", "logistic"]),
                                   more(["--l1", "1e-4", "--l2", "1e-4", "--passes", "2",
                                          "-c", "-k"])])
def test_default_learner_with_importance_weights_is_vws_to_the_printed_digit(
        flags, tmp_path, capfd, monkeypatch):
    """VW's default update (adaptive, normalized, invariant) on importance weights 0.5 and
    1.5: the normalizer's running sum adds weight x norm in double, as VW does, so every
    -p line is VW's as written (a float product there drifted in the last digit)."""
    rng = np.random.default_rng(31)
    lines = []
    for _ in range(800):
        a, b, c = rng.integers(31), rng.integers(11), rng.integers(6)
        z = (a % 3 == 0) + (b % 2) - 0.7 + rng.normal(0, 0.5)
        lines.append(f"{1 if z > 0 else -1} {rng.choice(['', '1.5 ', '0.5 '])}|a x{a} "
                     f"v:{rng.uniform(-1, 1):.4f} |b y{b} |c w{c}:{rng.uniform(0, 3):.3f}")
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    _same(tmp_path, capfd, monkeypatch, ["-d", "d.vw", *flags])
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()


def _after_version(path) -> bytes:
    """A VW model file's bytes after its version string (terascale writes 9.0.0's)."""
    data = path.read_bytes()
    return data[4 + int.from_bytes(data[:4], "little"):]


@pytest.mark.parametrize("flags", [
    ["--sgd", "-q", "ab"], ["--adaptive", "--initial_t", "3"],
    ["--normalized", "--invariant", "-l", "2", "--power_t", "0.4"],
    more(["--adaptive", "--normalized", "--sgd"]), more(["--sparse_l2", "0.05"]),
    ["--invariant", "--adaptive", "--normalized", "-q", "ab"],
    more(["--normalized", "--loss_function", "logistic", "--link", "logistic"]),
    ["--adaptive", "--l1", "1e-3", "--l2", "1e-4"],
    more(["--sgd", "--l2", "1e-3", "--passes", "3", "-c", "-k", "--holdout_off"]),
    more(["--invariant", "--l1", "5e-3", "--sparse_l2", "0.01"]),
    more(["--normalized", "--invariant", "--l1", "1e-3", "--passes", "3", "-c", "-k",
           "--holdout_off", "--predict_only_model"]),
])
def test_models_of_vws_other_update_rules_move_both_ways(flags, tmp_path, capfd,
                                                         monkeypatch):
    """VW's save_resume model of --sgd, --adaptive, --normalized, --invariant (alone, two
    of them, or all three: VW's default update, named in its options): the rules in its
    options, each record the weight and the sums of the rules
    on, its counters (t, initial_t, the normalized sums): -f and --readable_model write
    VW's bytes; -i of VW's model continues as VW's (its -p and -f), VW's -i of ours too;
    a model whose records keep other sums than the run's rules is refused. The counters
    count each example's features with its crosses, as VW's gd (its batch learners not).
    --l1/--l2: VW's lazy gravity and contraction, kept unapplied in the save_resume model
    with their state, folded in at each pass's end with --predict_only_model."""
    rng = np.random.default_rng(8)
    labels = (lambda r, a, x: str(int(r.integers(2)))) if "logistic" in flags else None
    (tmp_path / "d.vw").write_text("\n".join(_lines(150, 21, labels)) + "\n")
    (tmp_path / "e.vw").write_text("\n".join(
        ln if rng.random() < 0.8 else ln.replace(" |a", " 2.5 |a", 1)
        for ln in _lines(120, 22, labels)) + "\n")
    first = ["-d", "d.vw", *flags, "--quiet"]
    run_vw([*first, "-f", "vw.m", "--readable_model", "vw.txt"], tmp_path)
    code, err = run_ts(capfd, [*first, "-f", "ts.m", "--readable_model", "ts.txt"],
                       tmp_path, monkeypatch)
    assert code == 0, err
    assert _after_version(tmp_path / "ts.m") == _after_version(tmp_path / "vw.m")
    assert (tmp_path / "ts.txt").read_text().split("\n", 1)[1] == \
        (tmp_path / "vw.txt").read_text().split("\n", 1)[1]
    run_vw(["-d", "d.vw", *flags, "-f", "po.m", "--predict_only_model", "--quiet"],
           tmp_path)
    code, err = run_ts(capfd, [*first, "-f", "tspo.m", "--predict_only_model"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    assert _after_version(tmp_path / "tspo.m") == _after_version(tmp_path / "po.m")
    then = ["-d", "e.vw", "--passes", "2", "-c", "-k", "--holdout_off"]
    if "--initial_t" in flags:  # (the sums of the weights the model has not: -i's own)
        then += ["--initial_t", "4"]
    want = run_vw(["-i", "vw.m", *then, "-p", "vw.p", "-f", "vw2.m"], tmp_path)
    code, got = run_ts(capfd, ["-i", "vw.m", *then, "-p", "ts.p", "-f", "ts2.m"], tmp_path,
                       monkeypatch)
    assert code == 0, got
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()
    assert _after_version(tmp_path / "ts2.m") == _after_version(tmp_path / "vw2.m")
    assert _progress_table(got) == _progress_table(want)
    assert [ln for ln in got.splitlines() if ln.startswith(("learning rate", "initial_t"))] \
        == [ln for ln in want.splitlines() if ln.startswith(("learning rate", "initial_t"))]
    run_vw(["-i", "ts.m", *then, "-p", "vw3.p"], tmp_path)
    assert (tmp_path / "vw3.p").read_text() == (tmp_path / "vw.p").read_text()
    # -t -f writes the model as read (its counters are not the test run's, as VW's are),
    # the initial_t VW read back out
    run_vw(["-i", "vw.m", "-t", "-d", "e.vw", "--readable_model", "vwt.txt"], tmp_path)
    code, err = run_ts(capfd, ["-i", "vw.m", "-t", "-d", "e.vw", "--readable_model",
                               "tst.txt"], tmp_path, monkeypatch)
    assert code == 0, err
    assert [ln for ln in (tmp_path / "tst.txt").read_text().splitlines()
            if ln.startswith("initial_t")] == [
        ln for ln in (tmp_path / "vwt.txt").read_text().splitlines()
        if ln.startswith("initial_t")]
    other = [r for r in ("--normalized", "--adaptive") if r not in flags][:1]
    if other and "--predict_only_model" not in flags:  # (records of another width)
        code, err = run_ts(capfd, ["-i", "vw.m", "-d", "e.vw", *other], tmp_path,
                           monkeypatch)
        assert code == 2 and "vw.m" in err and "sums" in err, err


@pytest.mark.parametrize("flags", [
    ["--invariant"], more(["--invariant", "--power_t", "0.4", "--passes", "2", "-c", "-k"]),
    more(["--invariant", "--sparse_l2", "0.01", "--noconstant"]),
    more(["--invariant", "-q", "ab", "--cubic", "abb", "-q", "cc"]),
    more(["--invariant", "--interactions", "abc", "-q", "ca", "--permutations"]),
    ["--invariant", "--ignore_linear", "ab", "-q", "ab", "-q", "aa"],
    more(["--invariant", "-q", "::", "--ignore_linear", "c"]),
])
def test_invariant_alone_takes_vws_sum_of_squares(flags, tmp_path, capfd, monkeypatch):
    """--invariant alone: the invariant step takes the example's sum of x^2 as VW adds it
    (each namespace's squares in float, a namespace given twice going on with its sum, then
    the namespaces' sums, the constant's last, then the crosses' from the namespaces'
    sums; an --ignore_linear namespace's squares too, read from the line, as VW's example
    keeps them): every -p line and the model are VW's (the squares summed in the row's
    order moved the last printed digit on a few lines)."""
    lines = [ln + (" |a h:0.37 |c q:1.5" if i % 4 == 0 else "")
             + (" |b:0.5 k" if i % 5 == 0 else "") for i, ln in enumerate(_lines(300, 13))]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", *flags, "--quiet", "-p"]
    run_vw([*args, "vw.p", "-f", "vw.m"], tmp_path)
    code, err = run_ts(capfd, [*args, "ts.p", "-f", "ts.m"], tmp_path, monkeypatch)
    assert code == 0, err
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()
    assert _after_version(tmp_path / "ts.m") == _after_version(tmp_path / "vw.m")


def test_other_rules_with_a_fixed_range_are_refused_naming_the_flag(tmp_path, capfd,
                                                                    monkeypatch):
    """VW's other update rules start from zero weights and the labels' range here: a
    run of them with --min_prediction (or --constant...) is refused, naming that flag."""
    (tmp_path / "d.vw").write_text("1 |a x\n-1 |a y\n")
    code, err = run_ts(capfd, ["-d", "d.vw", "--sgd", "--min_prediction", "-0.3"], tmp_path,
                       monkeypatch)
    assert code == 2 and "not with --min_prediction" in err, err
