"""`terascale vw --oaa K` against the vowpalwabbit package: the progress table and closing
block byte for byte (``--probabilities`` too), on small generated data with importance
weights, tags and unlabelled examples. CI runs one case of each; ``make test-vw``
(``TERASCALE_VW_SUITE=all``) runs every parametrization."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from _vw_runs import FULL, more, run_ts, run_vw

pytest.importorskip("vowpalwabbit")



def _classes(n: int, k: int, seed: int, *, first: int = 1, unlabelled: float = 0.1,
             labels=None) -> list[str]:
    """``n`` rows of classes ``first..first+k-1`` (``labels``: their words), some
    weighted, some unlabelled (``unlabelled`` of them), each tagged; the features tell
    the class apart, noisily."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        c = int(rng.integers(first, first + k))
        r = rng.random()
        lab = "" if r < unlabelled else str(c) if labels is None else labels[c - first]
        if lab and r < 0.3:
            lab += f" {rng.choice([0.5, 2, 3.25])}"
        out.append(f"{lab} 't{i}|a x{3 * c + rng.integers(5)} y{rng.integers(19)} "
                   f"|b z{c % 4} w:{rng.normal():.3f}")
    return out


def _table_on(err: str) -> str:
    """A run's standard error from its progress table's header on."""
    return err[err.index("average  since"):]


_LOGISTIC = ["--loss_function", "logistic", "--probabilities"]


@pytest.mark.parametrize("flags", [
    ["--oaa", "12", *_LOGISTIC],  # (one class's probability below 10%: ``( 8%)``)
    more(["--oaa", "4", "--probabilities"]),  # (VW's warning; the scores' logistic)
    more(["--oaa", "4", *_LOGISTIC, "-P", "0.5", "-l", "2"]),
    ["--oaa", "4", *_LOGISTIC, "--passes", "3", "-c", "-k", "--holdout_period", "4"],
    more(["--oaa", "4", *_LOGISTIC, "--passes", "2", "-c", "-k", "--holdout_off"])])
def test_oaa_probabilities_table_and_closing_block_are_vws(flags, tmp_path, capfd,
                                                           monkeypatch):
    """--oaa K --probabilities: VW's table (the predicted class with its probability,
    an unlabelled example's label 4294967295 and its 0/1 loss counted, as VW's) and
    closing block with its ``average multiclass log loss`` (of the test examples, ``h``,
    with a holdout), byte for byte; ``-r`` empty, as VW's; the same run -t from VW's
    model."""
    k = int(flags[1])
    (tmp_path / "d.vw").write_text("\n".join(_classes(600, k, 5)) + "\n")
    want = run_vw(["-d", "d.vw", *flags, "-r", "vw.r"], tmp_path)
    code, got = run_ts(capfd, ["-d", "d.vw", *flags, "-r", "ts.r"], tmp_path, monkeypatch)
    assert code == 0, got
    assert _table_on(got) == _table_on(want)
    assert "4294967295" in want and "average multiclass log loss" in want
    # (VW writes no raw scores with --probabilities)
    assert (tmp_path / "ts.r").read_text() == (tmp_path / "vw.r").read_text()
    if "--passes" in flags:
        return
    run_vw(["-d", "d.vw", *flags, "-f", "m", "--quiet"], tmp_path)
    args = ["-d", "d.vw", "-t", "-i", "m", "--probabilities"]
    want = run_vw(args, tmp_path)
    code, got = run_ts(capfd, args, tmp_path, monkeypatch)
    assert code == 0, got
    assert _table_on(got) == _table_on(want)


@pytest.mark.parametrize("flags", [["--passes", "3", "-c", "-k"],
                                   more(["--passes", "2", "-c", "-k", *_LOGISTIC])])
def test_oaa_indexing_is_decided_by_a_learned_example_as_vws(flags, tmp_path, capfd,
                                                             monkeypatch):
    """The first label 0 on a held-out example (the 10th) does not make the classes
    0-indexed (VW decides as it learns); a later one does, for the later passes too, as
    in VW: its table, closing block and predictions."""
    lines = _classes(400, 3, 11, unlabelled=0.05)  # (1..3: no label 4 decides first)
    lines[9] = "0" + lines[9][lines[9].index(" '"):]
    lines[57] = "0" + lines[57][lines[57].index(" '"):]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    want = run_vw(["-d", "d.vw", "--oaa", "4", *flags, "-p", "vw.p"], tmp_path)
    code, got = run_ts(capfd, ["-d", "d.vw", "--oaa", "4", *flags, "-p", "ts.p"], tmp_path,
                       monkeypatch)
    assert code == 0, got
    assert _table_on(got) == _table_on(want)
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()


def test_oaa_named_labels_with_probabilities_are_vws(tmp_path, capfd, monkeypatch):
    """--named_labels with --probabilities: -p names each class's probability, the table
    names the label and, as VW (which reads the predicted class where the probabilities
    are), predicts ``unknown``; a name not among them is VW's class 0."""
    names = ["cat", "dog", "emu", "yak"]  # (yak: not a named label)
    lines = _classes(300, 4, 13, labels=names)
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    flags = ["--oaa", "3", "--named_labels", "cat,dog,emu", *_LOGISTIC]
    want = run_vw(["-d", "d.vw", *flags, "-p", "vw.p"], tmp_path)
    code, got = run_ts(capfd, ["-d", "d.vw", *flags, "-p", "ts.p"], tmp_path, monkeypatch)
    assert code == 0, got
    assert _table_on(got) == _table_on(want)
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()
    assert "dog:" in (tmp_path / "vw.p").read_text()


@pytest.mark.parametrize("flags", [[], more(_LOGISTIC), more(["--passes", "2", "-c", "-k"])])
def test_oaa_negative_and_large_labels_are_read_as_vw(flags, tmp_path, capfd, monkeypatch):
    """VW reads a class as a C int taken unsigned: -1 is 4294967295, its "no class" (an
    unlabelled example, with its weight), -2 a class no learner has (a mistake, the
    table's ``unknown``), 7 of --oaa 3 the same: VW's table, closing block and -p."""
    lines = _classes(240, 3, 17, unlabelled=0.0)
    heads = ["-1", "-1 2", "-2", "7 0.5"]
    for i in range(5, 240, 9):
        lines[i] = heads[i % 4] + lines[i][lines[i].index(" '"):]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", "--oaa", "3", *flags]
    want = run_vw([*args, "-p", "vw.p"], tmp_path)
    code, got = run_ts(capfd, [*args, "-p", "ts.p"], tmp_path, monkeypatch)
    assert code == 0, got
    assert _table_on(got) == _table_on(want)
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()


@pytest.mark.parametrize("flags", [
    ["--oaa", "3", "-q", "ab", "-l", "0.3", "--named_labels", "cat,dog,emu"],
    more(["--oaa", "5", "--l1", "0.0001", "--noconstant", "--loss_function", "logistic"]),
    more(["--oaa", "4", "--predict_only_model", "--l2", "0.001"]),
    more(["--oaa", "3", "--quiet", "-b", "6"])])
def test_oaa_readable_model_and_invert_hash_are_vws(flags, tmp_path, capfd, monkeypatch):
    """--oaa K --readable_model/--invert_hash: VW's text byte for byte: the K learners'
    rows interleaved (class c of feature i at i * 2**s + c), the first class's state and
    the run's counters in the header (``--oaa K`` among its options), ``name[c]`` for
    class c > 0; and -i of VW's model, whose ``t`` VW carries on."""
    k = int(flags[1])
    names = flags[flags.index("--named_labels") + 1].split(",") if "--named_labels" in \
        flags else None
    (tmp_path / "d.vw").write_text("\n".join(_classes(300, k, 19, labels=names)) + "\n")
    runs = [(["-d", "d.vw", *flags], "")]
    if "--quiet" in flags:
        run_vw(["-d", "d.vw", *flags, "-f", "m"], tmp_path)
        runs.append((["-d", "d.vw", "-i", "m", "--quiet"], "i"))
    for args, tag in runs:
        run_vw([*args, "--readable_model", f"vw{tag}.r", "--invert_hash", f"vw{tag}.i"],
               tmp_path)
        code, err = run_ts(capfd, [*args, "--readable_model", f"ts{tag}.r",
                                   "--invert_hash", f"ts{tag}.i"], tmp_path, monkeypatch)
        assert code == 0, err
        for ext in ("r", "i"):
            want = (tmp_path / f"vw{tag}.{ext}").read_text()
            assert (tmp_path / f"ts{tag}.{ext}").read_text() == want
        assert "[1]:" in want and f"--oaa {k}" in want


def _after_version(path) -> bytes:
    """A VW model's bytes after its version string (terascale writes 9.0.0's)."""
    b = path.read_bytes()
    return b[4 + int.from_bytes(b[:4], "little"):]


def _both(tmp_path, capfd, monkeypatch, args_of) -> dict[str, str]:
    """VW's and terascale's standard error of ``args_of(tool)`` (tool: ``vw``, ``ts``,
    which names its output files); terascale's run must succeed."""
    out = {"vw": run_vw(args_of("vw"), tmp_path)}
    code, out["ts"] = run_ts(capfd, args_of("ts"), tmp_path, monkeypatch)
    assert code == 0, out["ts"]
    return out


def _same(tmp_path, exts) -> None:
    """``ts.EXT`` and ``vw.EXT`` are the same text, for each of ``exts``."""
    for ext in exts:
        assert (tmp_path / f"ts.{ext}").read_text() == (tmp_path / f"vw.{ext}").read_text()


def _ts_as_vw(tmp_path, capfd, monkeypatch, args: list[str], vw, exts) -> None:
    """``terascale vw ARGS`` (its files ``ts.*``) succeeds with VW's run ``vw``'s standard
    output (its lines in any order: VW's parser thread prints as it runs ahead of the
    learner), progress table, ``EXT`` files for each of ``exts`` and model (``ts.m``)."""
    from terascale.cli import main

    monkeypatch.chdir(tmp_path)
    capfd.readouterr()
    assert main(["vw", *args]) == 0
    out, err = capfd.readouterr()
    assert sorted(out.splitlines()) == sorted(vw.stdout.splitlines())
    assert _table_on(err) == _table_on(vw.stderr)
    _same(tmp_path, exts)
    assert _after_version(tmp_path / "ts.m") == _after_version(tmp_path / "vw.m")


def _trained_as_vw(tmp_path, capfd, monkeypatch, flags: list[str]) -> None:
    """``-d d.vw FLAGS`` through both tools: VW's table, -p, -r, readable model and model
    (after its version string)."""
    out = _both(tmp_path, capfd, monkeypatch, lambda t: [
        "-d", "d.vw", *flags, "-p", f"{t}.p", "-r", f"{t}.r", "-f", f"{t}.m",
        "--readable_model", f"{t}.t"])
    assert _table_on(out["ts"]) == _table_on(out["vw"])
    _same(tmp_path, ("p", "r", "t"))
    assert _after_version(tmp_path / "ts.m") == _after_version(tmp_path / "vw.m")


@pytest.mark.parametrize("flags", [
    ["--oaa", "5", "--passes", "3", "-c", "-k", "--l2", "0.0001"],
    more(["--oaa", "3", "--named_labels", "cat,dog,emu", "-q", "ab", "-l", "0.3"]),
    more(["--oaa", "4", "--loss_function", "logistic", "--probabilities", "-P", "5"])])
def test_oaa_model_is_vws_save_resume_model(flags, tmp_path, capfd, monkeypatch):
    """--oaa K -f: VW's save_resume model byte for byte after the version string (the
    K learners' weights, adaptive sums and normalizers interleaved, the first class's
    state, the run's counters), so that VW's -i trains on from it as from its own; and
    from -i of VW's model, the same again (its t carried on)."""
    k = int(flags[1])
    names = flags[flags.index("--named_labels") + 1].split(",") if "--named_labels" in \
        flags else None
    (tmp_path / "d.vw").write_text("\n".join(_classes(300, k, 23, labels=names)) + "\n")
    run_vw(["-d", "d.vw", *flags, "-f", "vw.m"], tmp_path)
    code, err = run_ts(capfd, ["-d", "d.vw", *flags, "-f", "ts.m"], tmp_path, monkeypatch)
    assert code == 0, err
    assert _after_version(tmp_path / "ts.m") == _after_version(tmp_path / "vw.m")
    run_vw(["-d", "d.vw", "-i", "vw.m", "-f", "vw2.m", "-p", "vw.p"], tmp_path)
    run_vw(["-d", "d.vw", "-i", "ts.m", "-p", "ts.p"], tmp_path)
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()
    code, err = run_ts(capfd, ["-d", "d.vw", "-i", "vw.m", "-f", "ts2.m"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    assert _after_version(tmp_path / "ts2.m") == _after_version(tmp_path / "vw2.m")


def _merged(cmd: list[str], cwd) -> str:
    """A program's standard output and error as one stream (as a terminal shows them)."""
    r = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout
    return r.stdout


@pytest.mark.parametrize("flags", [["--oaa", "3"],
                                   more(["--oaa", "3", "--passes", "2", "-c", "-k"])])
def test_oaa_info_and_warnings_come_where_vw_prints_them(flags, tmp_path):
    """VW's lines on standard output (the [info] line of the classes' indexing, a
    warning for each learned label out of their range) come between the table's lines
    where VW prints them: the two streams merged, from the table on, are VW's."""
    lines = _classes(200, 2, 29, unlabelled=0.05)  # (classes 1, 2: undecided until 0)
    for i, head in ((3, "5"), (40, "0"), (41, "3"), (77, "7 2"), (130, "-2")):
        lines[i] = head + lines[i][lines[i].index(" '"):]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", *flags]
    want = _merged([sys.executable, "-m", "vowpalwabbit", *args], tmp_path)
    got = _merged([sys.executable, "-m", "terascale", "vw", *args], tmp_path)
    assert "[info] label 0 found" in want and "This won't work for 0-indexed" in want
    assert _table_on(got) == _table_on(want)


@pytest.mark.parametrize("flags", [[], more(["--probabilities"]),
                                   more(["--predict_only_model"])])
def test_oaa_test_run_writes_vws_model_and_text(flags, tmp_path, capfd, monkeypatch):
    """-t -i MODEL with -f, --readable_model and --invert_hash under --oaa: VW's model
    and text after the test run (its counters added to -i's t, each nonzero weight
    without its sums; a weight the test data does not name by its index alone)."""
    (tmp_path / "d.vw").write_text("\n".join(_classes(300, 4, 31)) + "\n")
    (tmp_path / "t.vw").write_text("\n".join(_classes(40, 4, 37)) + "\n")
    run_vw(["-d", "d.vw", "--oaa", "4", "-f", "m", "--quiet"], tmp_path)
    args = ["-d", "t.vw", "-t", "-i", "m", *flags]
    run_vw([*args, "-f", "vw.m", "--readable_model", "vw.r", "--invert_hash", "vw.i"],
           tmp_path)
    code, err = run_ts(capfd, [*args, "-f", "ts.m", "--readable_model", "ts.r",
                               "--invert_hash", "ts.i"], tmp_path, monkeypatch)
    assert code == 0, err
    assert _after_version(tmp_path / "ts.m") == _after_version(tmp_path / "vw.m")
    for ext in ("r", "i"):
        assert (tmp_path / f"ts.{ext}").read_text() == (tmp_path / f"vw.{ext}").read_text()


@pytest.mark.parametrize("flags", [["--oaa", "3", "--scores"],
                                   more(["--oaa", "3", "--scores", "--passes", "2", "-c",
                                          "-k", "--named_labels", "cat,dog,emu"])])
def test_oaa_scores_are_vws(flags, tmp_path, capfd, monkeypatch):
    """--oaa K --scores: -p writes each class's score (named with --named_labels), -r
    nothing, and the table and closing block are VW's (the predicted class without a
    probability, an unlabelled example's label 4294967295 and its mistake counted)."""
    names = flags[flags.index("--named_labels") + 1].split(",") if "--named_labels" in \
        flags else None
    (tmp_path / "d.vw").write_text("\n".join(_classes(300, 3, 41, labels=names)) + "\n")
    args = ["-d", "d.vw", *flags]
    want = run_vw([*args, "-p", "vw.p", "-r", "vw.r"], tmp_path)
    code, got = run_ts(capfd, [*args, "-p", "ts.p", "-r", "ts.r"], tmp_path, monkeypatch)
    assert code == 0, got
    assert _table_on(got) == _table_on(want)
    _same(tmp_path, ("p", "r"))
    assert ":" in (tmp_path / "vw.p").read_text()


@pytest.mark.parametrize("flags", [["--indexing", "0"],
                                   more(["--indexing", "1", "--passes", "2", "-c", "-k"])])
def test_oaa_indexing_given_is_vws(flags, tmp_path, capfd, monkeypatch):
    """--oaa K --indexing 0|1: the classes' numbering from the start (no [info] line, no
    decision): VW's table, -p, -r, readable model and model (which keeps --indexing, and
    whose -t run numbers the classes so); refused without --oaa (VW keeps it in a binary
    model, where it means nothing)."""
    lines = _classes(300, 4, 43, first=0)  # (classes 0..3)
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    _trained_as_vw(tmp_path, capfd, monkeypatch, ["--oaa", "4", *flags])
    assert f"--indexing {flags[1]}" in (tmp_path / "vw.t").read_text()
    args = ["-d", "d.vw", "-t", "-i", "vw.m"]
    want = run_vw([*args, "-p", "vw.tp"], tmp_path)
    code, got = run_ts(capfd, [*args, "-p", "ts.tp"], tmp_path, monkeypatch)
    assert code == 0, got
    assert _table_on(got) == _table_on(want)
    assert (tmp_path / "ts.tp").read_text() == (tmp_path / "vw.tp").read_text()
    code, err = run_ts(capfd, ["-d", "d.vw", "--indexing", "1"], tmp_path, monkeypatch)
    assert code == 2 and "--indexing goes with --oaa" in err


@pytest.mark.parametrize("flags", [
    ["--initial_weight", "0.1", "--initial_t", "2", "--min_prediction", "-0.5"],
    more(["--constant", "0.5", "--l2", "0.0001", "--max_prediction", "0.6"]),
    more(["--normal_weights", "--passes", "2", "-c", "-k"]),
    more(["--random_weights", "--random_seed", "3"])])
def test_oaa_starting_weights_and_range_are_vws(flags, tmp_path, capfd, monkeypatch):
    """--oaa with VW's starting weights (drawn over VW's 2**b interleaved weights, so
    that --constant sets the weight VW's does, of no constant) and a fixed prediction
    range: VW's table, -p, -r, readable model and model (but --random_weights', whose
    options VW writes with a --random_seed of its own); and -i of the model with
    --initial_t, whose sums every weight starts from under the model's."""
    (tmp_path / "d.vw").write_text("\n".join(_classes(200, 4, 47)) + "\n")
    out = _both(tmp_path, capfd, monkeypatch, lambda t: [
        "-d", "d.vw", "--oaa", "4", "-b", "12", *flags, "-p", f"{t}.p", "-r", f"{t}.r",
        "-f", f"{t}.m", "--readable_model", f"{t}.t"])
    assert _table_on(out["ts"]) == _table_on(out["vw"])
    _same(tmp_path, ("p", "r") if "--random_weights" in flags else ("p", "r", "t"))
    if "--random_weights" in flags:
        return
    assert _after_version(tmp_path / "ts.m") == _after_version(tmp_path / "vw.m")
    args = ["-d", "d.vw", "-i", "vw.m", "--initial_t", "3", "--quiet"]
    run_vw([*args, "-r", "vw.ir", "-f", "vw.im"], tmp_path)
    code, err = run_ts(capfd, [*args, "-r", "ts.ir", "-f", "ts.im"], tmp_path, monkeypatch)
    assert code == 0, err
    assert (tmp_path / "ts.ir").read_text() == (tmp_path / "vw.ir").read_text()
    assert _after_version(tmp_path / "ts.im") == _after_version(tmp_path / "vw.im")


@pytest.mark.parametrize("flags", [
    ["--oaa", "4", "--loss_function", "logistic", "--min_prediction", "-0.3",
     "--max_prediction", "0.4"],
    more(["--oaa", "4", "--max_prediction", "0.6", "--loss_function", "logistic", "-b", "12"]),
    more(["--loss_function", "logistic", "--min_prediction", "-0.3", "--max_prediction",
          "0.4"])])  # (the binary learner: labels -1/+1, class 4 +1)
def test_fixed_range_under_any_loss_is_vws_readable_model_header(flags, tmp_path, capfd,
                                                                 monkeypatch):
    """--min_prediction/--max_prediction under the logistic loss (whose own range is
    [-50, 50]): VW clips every score to the range given and its model's header (the
    readable model's ``Min label``/``min_label`` too) holds that range; with --oaa the
    table, -p, the whole readable model and the model too."""
    lines = _classes(120, 4, 71, unlabelled=0.0)
    if "--oaa" not in flags:
        lines = [("1" if ln[0] == "4" else "-1") + ln[1:] for ln in lines]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    out = _both(tmp_path, capfd, monkeypatch, lambda t: [
        "-d", "d.vw", *flags, "-p", f"{t}.p", "-f", f"{t}.m", "--readable_model", f"{t}.t"])
    head = {t: [ln for ln in (tmp_path / f"{t}.t").read_text().splitlines()
                if not ln[:1].isdigit()] for t in ("ts", "vw")}
    assert head["ts"] == head["vw"]
    assert "min_label -0.3" in head["vw"] or "0.6" in flags
    if "--oaa" not in flags:  # (the binary learner's weights: its own tests)
        return
    assert _table_on(out["ts"]) == _table_on(out["vw"])
    _same(tmp_path, ("p", "t"))
    assert _after_version(tmp_path / "ts.m") == _after_version(tmp_path / "vw.m")


def test_oaa_link_is_vws_where_it_is_reproduced(tmp_path, capfd, monkeypatch):
    """--oaa with --link: -t of VW's model that keeps --link logistic writes VW's linked
    scores (-r) and its classes; --link identity given (or replaced by --probabilities)
    is kept in the model, as VW's; -i of the model trains on through its link, as VW's
    (its learners learn from their linked scores)."""
    (tmp_path / "d.vw").write_text("\n".join(_classes(200, 4, 53)) + "\n")
    run_vw(["-d", "d.vw", "--oaa", "4", "--link", "logistic", "-f", "m", "--quiet"],
           tmp_path)
    args = ["-d", "d.vw", "-t", "-i", "m"]
    run_vw([*args, "-p", "vw.p", "-r", "vw.r"], tmp_path)
    code, err = run_ts(capfd, [*args, "-p", "ts.p", "-r", "ts.r"], tmp_path, monkeypatch)
    assert code == 0, err
    _same(tmp_path, ("p", "r"))
    for flags in (["--link", "identity"],
                  ["--link", "logistic", "--probabilities", "--loss_function", "logistic"]):
        _both(tmp_path, capfd, monkeypatch, lambda t, f=flags: [
            "-d", "d.vw", "--oaa", "4", *f, "--quiet", "--readable_model", f"{t}.t"])
        _same(tmp_path, ("t",))
        assert "--link identity" in (tmp_path / "vw.t").read_text()
    _both(tmp_path, capfd, monkeypatch, lambda t: ["-d", "d.vw", "-i", "m", "--quiet",
                                                   "-r", f"{t}.ir"])
    _same(tmp_path, ("ir",))


@pytest.mark.parametrize("flags", [
    ["--link", "logistic"],
    more(["--link", "glf1", "--l2", "0.001", "--passes", "2", "-c", "-k"]),
    more(["--link", "poisson", "--l1", "0.0001"])])
def test_oaa_learns_from_linked_scores_as_vw(flags, tmp_path, capfd, monkeypatch):
    """--oaa K --link L: VW's K learners learn from their linked scores (its scorer
    links each before oaa hands it to the update; under the squared loss, the loss and
    derivative clipped to the labels' range, which --link poisson's scores pass): VW's
    table, -p, -r (linked), readable model and model."""
    (tmp_path / "d.vw").write_text("\n".join(_classes(200, 4, 61)) + "\n")
    _trained_as_vw(tmp_path, capfd, monkeypatch, ["--oaa", "4", *flags])


@pytest.mark.parametrize("flags", [["--noconstant"], more(["--noconstant", "--l2", "0.001"])])
def test_oaa_label_range_is_vws_shared_one(flags, tmp_path, capfd, monkeypatch):
    """VW's K learners share one label range, empty ([0, 0]) until an example is learned:
    labels of no class first (every learner learns -1) leave its top at 0, so that a
    positive score is clipped to 0 until a class's label comes: VW's -r, -p, table and
    readable model (its ``min_label``/``max_label``), and -i of VW's model of them."""
    lines = _classes(150, 3, 59, unlabelled=0.05)
    for i in range(12):  # (5 of --oaa 3, undecided indexing: no learner's class)
        lines[i] = "5" + lines[i][lines[i].index(" '"):]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    (tmp_path / "h.vw").write_text("\n".join(lines[:12]) + "\n")
    args = ["-d", "d.vw", "--oaa", "3", *flags]
    want = run_vw([*args, "-p", "vw.p", "-r", "vw.r"], tmp_path)
    code, got = run_ts(capfd, [*args, "-p", "ts.p", "-r", "ts.r"], tmp_path, monkeypatch)
    assert code == 0, got
    assert _table_on(got) == _table_on(want)
    _same(tmp_path, ("p", "r"))
    args = ["-d", "h.vw", "--oaa", "3", *flags, "--quiet", "--readable_model"]
    run_vw([*args, "vw.t", "-f", "m"], tmp_path)
    code, err = run_ts(capfd, [*args, "ts.t"], tmp_path, monkeypatch)
    assert code == 0, err
    assert (tmp_path / "ts.t").read_text() == (tmp_path / "vw.t").read_text()
    assert "max_label 0" in (tmp_path / "vw.t").read_text()
    _both(tmp_path, capfd, monkeypatch, lambda t: ["-d", "d.vw", "-i", "m", "--quiet",
                                                   "-r", f"{t}.ir"])
    _same(tmp_path, ("ir",))


@FULL  # (CI: test_oaa.py's run of two workers checks their text)
def test_oaa_workers_write_vws_text_and_model_that_trains_on_as_vws(tmp_path, capfd,
                                                                    monkeypatch):
    """--oaa K -n 2 with --readable_model/--invert_hash: VW's text of the model -f writes
    (VW's own text of it, read back with its counters: but its ``current_pass``, which
    VW's run of no data counts on); --invert_hash names the rows; and -i of that model
    trains on as VW's -i of it (-r, model)."""
    lines = _classes(200, 3, 67)
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    (tmp_path / "e.vw").write_text("")
    code, err = run_ts(capfd, ["-d", "d.vw", "--oaa", "3", "-n", "2", "-f", "m",
                               "--readable_model", "ts.t", "--invert_hash", "ts.i"],
                       tmp_path, monkeypatch)
    assert code == 0, err
    run_vw(["-d", "e.vw", "-i", "m", "--preserve_performance_counters", "--quiet",
            "--readable_model", "vw.t"], tmp_path)

    def text(name):
        return [ln for ln in (tmp_path / name).read_text().splitlines()
                if not ln.startswith("current_pass")]

    assert text("ts.t") == text("vw.t")
    named = (tmp_path / "ts.i").read_text()
    assert "x3[1]:" in named or "a^x3[1]:" in named
    args = ["-d", "d.vw", "-i", "m", "--quiet"]
    run_vw([*args, "-r", "vw.r", "-f", "vw.m"], tmp_path)
    code, err = run_ts(capfd, [*args, "-r", "ts.r", "-f", "ts.m"], tmp_path, monkeypatch)
    assert code == 0, err
    assert (tmp_path / "ts.r").read_text() == (tmp_path / "vw.r").read_text()
    assert _after_version(tmp_path / "ts.m") == _after_version(tmp_path / "vw.m")


@pytest.mark.parametrize("flags", [["--passes", "3", "-c", "-k"],
                                   more(["--holdout_after", "150", "--passes", "2", "-c",
                                         "-k", *_LOGISTIC])])
def test_oaa_empty_lines_count_in_the_holdout_as_vws(flags, tmp_path, capfd, monkeypatch):
    """--oaa K with a holdout (--passes N, --holdout_after): VW counts each empty line of
    the text as an example of the holdout, so that other examples are held out after
    one: VW's table, closing block, -p and model."""
    lines = _classes(200, 4, 71)
    for i in (3, 17, 18, 40, 77, 120):
        lines.insert(i, "")
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n\n")
    out = _both(tmp_path, capfd, monkeypatch, lambda t: [
        "-d", "d.vw", "--oaa", "4", *flags, "-p", f"{t}.p", "-f", f"{t}.m"])
    assert _table_on(out["ts"]) == _table_on(out["vw"])
    _same(tmp_path, ("p",))
    assert _after_version(tmp_path / "ts.m") == _after_version(tmp_path / "vw.m")


@pytest.mark.parametrize("flags", [["-p", "{}.p", "-r", "{}.r"],
                                   more([*_LOGISTIC, "-p", "{}.p", "--readable_model",
                                         "{}.r"]),
                                   more(["--passes", "2", "-c", "-k", "--holdout_off",
                                         "-p", "{}.p", "-r", "{}.r"])])
def test_oaa_label_with_a_fraction_ends_the_input_as_vws(flags, tmp_path, capfd,
                                                         monkeypatch):
    """A label with a fraction (``1.5``, ``1e-3``) under --oaa: VW's multiclass parser
    throws at the character after the integer C's strtol reads, logs the error on
    standard output (``[error] vw example #N...``, N counting the empty lines) and reads
    no more: the run learns the examples before it and ends as at the input's end (its
    model counting no pass done; over several passes without a holdout, in the first):
    VW's stdout lines, table, closing block, -p, -r and model; with a holdout (VW then
    ends inside its first pass, with no holdout loss) refused with the line."""
    lines = _classes(120, 4, 73, unlabelled=0.0)
    lines.insert(30, "")
    lines[70] = "1e-3" + lines[70][lines[70].index(" '"):]
    lines[90] = "1.5" + lines[90][lines[90].index(" '"):]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    from terascale.cli import main

    def args(tool):
        return ["-d", "d.vw", "--oaa", "4", "-f", f"{tool}.m",
                *[f.format(tool) for f in flags]]

    vw = subprocess.run([sys.executable, "-m", "vowpalwabbit", *args("vw")], cwd=tmp_path,
                        capture_output=True, text=True, timeout=120)
    assert vw.returncode == 0, vw.stderr
    monkeypatch.chdir(tmp_path)
    capfd.readouterr()
    assert main(["vw", *args("ts")]) == 0
    out, err = capfd.readouterr()
    # (VW's parser thread prints its error as it runs ahead of the learner: the order of
    # the stdout lines varies from run to run)
    assert sorted(out.splitlines()) == sorted(vw.stdout.splitlines())
    assert "#70(multiclass.cc:52): Malformed example: label has trailing character(s): e" \
        in vw.stdout
    assert _table_on(err) == _table_on(vw.stderr)
    _same(tmp_path, ("p", "r"))
    assert _after_version(tmp_path / "ts.m") == _after_version(tmp_path / "vw.m")
    code, err = run_ts(capfd, ["-d", "d.vw", "--oaa", "4", "--passes", "2", "-c", "-k"],
                       tmp_path, monkeypatch)
    assert code == 2 and "d.vw:71: multiclass label '1e-3'" in err


@pytest.mark.parametrize("word", ["2.0", "1:1 2", more("3e0"), more("2 1 0"), more("2:"),
                                  more("0x2")])
def test_oaa_label_word_vw_does_not_read_whole_ends_the_input_as_vws(word, tmp_path, capfd,
                                                                      monkeypatch):
    """A label word whose number is an integer but that C's strtol does not read whole
    (``2.0``, ``1:1``, ``3e0``), or a label section of three words: VW's multiclass parser
    throws there and reads no more; terascale vw stops at the same example, with VW's
    standard output, table, closing block and -p."""
    lines = _classes(40, 3, 11, unlabelled=0.0)
    lines.insert(5, "")
    lines[25] = word + lines[25][lines[25].index(" '"):]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    for tool in ("vw", "ts"):
        (tmp_path / tool).mkdir()
        (tmp_path / tool / "d.vw").write_text((tmp_path / "d.vw").read_text())
    args = ["-d", "d.vw", "--oaa", "3", "-p", "p"]
    vw = subprocess.run([sys.executable, "-m", "vowpalwabbit", *args], cwd=tmp_path / "vw",
                        capture_output=True, text=True, timeout=120)
    assert vw.returncode == 0, vw.stderr
    assert "Malformed example" in vw.stdout and "number of examples = 24\n" in vw.stderr
    from terascale.cli import main

    monkeypatch.chdir(tmp_path / "ts")
    capfd.readouterr()
    assert main(["vw", *args]) == 0
    out, err = capfd.readouterr()
    assert sorted(out.splitlines()) == sorted(vw.stdout.splitlines())
    assert _table_on(err) == _table_on(vw.stderr)
    assert (tmp_path / "ts" / "p").read_text() == (tmp_path / "vw" / "p").read_text()


@pytest.mark.parametrize(("word", "numba"), [("abc", False), more("abc", True),
                                             more("-x 2", False), more("nan", True),
                                             ("1 2 'x", False), ("3 1 x y", True)])
def test_oaa_label_word_with_no_integer_is_read_as_vw_and_ends_the_input(
        word, numba, tmp_path, capfd, monkeypatch):
    """A label word of which C's ``strtol`` reads no integer (``abc``, ``-x``, ``nan``):
    VW warns (``'abc' is not a good int, replacing with 0``), throws at its first
    character, reads no more and exits 0; so does a label section of three words or more
    that are not all numbers (``1 2 'x``: ``Malformed example, words.size() = 3``, no
    warning); terascale vw, compiled or the numba pass, too: VW's standard output,
    table, closing block, -p, -r and model."""
    if numba:
        monkeypatch.setenv("TERASCALE_NO_CEXT", "1")
    lines = _classes(40, 3, 12, unlabelled=0.0)
    lines.insert(4, "")
    lines[21] = word + lines[21][lines[21].index(" '"):]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")

    def args(tool):
        return ["-d", "d.vw", "--oaa", "3", "-p", f"{tool}.p", "-r", f"{tool}.r",
                "-f", f"{tool}.m"]

    vw = subprocess.run([sys.executable, "-m", "vowpalwabbit", *args("vw")], cwd=tmp_path,
                        capture_output=True, text=True, timeout=120)
    assert vw.returncode == 0, vw.stderr
    first = word.split()[0]
    assert (f"'{first}' is not a good int" in vw.stdout) != first.isdigit()
    assert "Malformed example" in vw.stdout
    _ts_as_vw(tmp_path, capfd, monkeypatch, args("ts"), vw, ("p", "r"))


@pytest.mark.parametrize(("numba", "flags"), [(False, []), more(True, []),
                                              more(False, ["--passes", "2", "-c", "-k"])])
def test_oaa_weight_word_that_is_no_number_is_read_as_vw(numba, flags, tmp_path, capfd,
                                                         monkeypatch):
    """An importance weight word that is no number (``2 id7``: an id left unquoted): VW
    warns (``'id7' is not a good float, replacing with 0``, on its first pass) and reads
    the weight as 0; terascale vw too, compiled or the numba pass: VW's standard output,
    table, closing block, -p and model."""
    if numba:
        monkeypatch.setenv("TERASCALE_NO_CEXT", "1")
    lines = _classes(60, 3, 31, unlabelled=0.0)
    for i in (3, 17, 40):
        lines[i] = lines[i][0] + f" id{i}" + lines[i][lines[i].index(" '"):]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")

    def args(tool):
        return ["-d", "d.vw", "--oaa", "3", *flags, "-p", f"{tool}.p", "-f", f"{tool}.m"]

    vw = subprocess.run([sys.executable, "-m", "vowpalwabbit", *args("vw")], cwd=tmp_path,
                        capture_output=True, text=True, timeout=120)
    assert vw.returncode == 0 and "'id17' is not a good float" in vw.stdout, vw.stderr
    _ts_as_vw(tmp_path, capfd, monkeypatch, args("ts"), vw, ("p",))


def test_oaa_bad_line_before_where_vw_stops_names_the_users_file(tmp_path, capfd,
                                                                 monkeypatch):
    """Where VW's multiclass parser stops early, terascale reads a copy of the input up to
    there: an error on a line before it names the user's file and line, not the copy."""
    (tmp_path / "d.vw").write_text("1 |a x\n2 -1 |a y\n3 1 2 |a z\n")
    code, err = run_ts(capfd, ["-d", "d.vw", "--oaa", "3", "--quiet"], tmp_path,
                       monkeypatch)
    assert code == 2
    assert "d.vw, line 2: an importance weight is negative" in err, err
    assert "mended" not in err
