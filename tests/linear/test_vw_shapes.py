"""`terascale vw` against the vowpalwabbit package on a user's data shapes and daily
command lines: the model files byte for byte (after the version string) where the
numba pass of VW's other update rules writes them."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _vw_runs import FULL, ab_lines, real_label, run_ts, run_vw

pytest.importorskip("vowpalwabbit")


@FULL
def test_other_rules_keep_vws_loss_since_the_last_line_in_the_model(tmp_path, capfd,
                                                                   monkeypatch):
    """The loss since the last progress line (a counter the model keeps) is VW's double
    sum of the examples after that line, in order (not the run's sum less the sum at the
    line): the model's bytes are VW's."""
    (tmp_path / "d.vw").write_text("\n".join(ab_lines(500, 3, real_label)) + "\n")
    args = ["-d", "d.vw", "--normalized"]
    run_vw([*args, "-f", "vw.m"], tmp_path)
    code, err = run_ts(capfd, [*args, "-f", "ts.m"], tmp_path, monkeypatch)
    assert code == 0, err
    vw, ts = (tmp_path / "vw.m").read_bytes(), (tmp_path / "ts.m").read_bytes()
    assert ts[4 + ts[0]:] == vw[4 + vw[0]:]


@FULL
def test_random_seed_is_kept_last_in_the_models_options_as_vw(tmp_path, capfd,
                                                               monkeypatch):
    """VW's model keeps a ``--random_seed`` other than 0, after every other option (the
    merged ``--ignore`` too): the model's bytes and its readable form are VW's."""
    (tmp_path / "d.vw").write_text("\n".join(ab_lines(200, 5, real_label)) + "\n")
    args = ["-d", "d.vw", "--random_seed", "7", "--sgd", "--ignore", "b"]
    run_vw([*args, "-f", "vw.m", "--readable_model", "vw.rm"], tmp_path)
    code, err = run_ts(capfd, [*args, "-f", "ts.m", "--readable_model", "ts.rm"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    vw, ts = (tmp_path / "vw.m").read_bytes(), (tmp_path / "ts.m").read_bytes()
    assert b" --random_seed 7\0" in vw and ts[4 + ts[0]:] == vw[4 + vw[0]:]
    assert (tmp_path / "ts.rm").read_text() == (tmp_path / "vw.rm").read_text()


@FULL
def test_a_test_run_of_an_sgd_model_prints_vws_default_rate(tmp_path, capfd, monkeypatch):
    """-t -i of a model of --sgd (or of one or two of VW's three rules, not adaptive and
    normalized): VW's preamble gives the rate those rules default to, 10."""
    (tmp_path / "d.vw").write_text("\n".join(ab_lines(100, 6, real_label)) + "\n")
    run_vw(["-d", "d.vw", "--sgd", "-f", "m", "--quiet"], tmp_path)
    want = run_vw(["-d", "d.vw", "-t", "-i", "m"], tmp_path)
    code, err = run_ts(capfd, ["-d", "d.vw", "-t", "-i", "m"], tmp_path, monkeypatch)
    assert code == 0, err
    assert "learning rate = 10\n" in want and err == "".join(
        ln for ln in want.splitlines(keepends=True)
        if not ln.startswith(("Enabled learners", "Input label", "Output pred")))


@FULL
def test_vws_notes_on_a_binary_model_continued_with_a_steep_decay(tmp_path, capfd,
                                                                  monkeypatch):
    """VW's lines on standard output: -r with -i's model of --binary (the model's
    --binary applies), and the last pass's rate factor below 1e-4, as VW prints the
    double (its shortest digits)."""
    from terascale.cli import main

    (tmp_path / "d.vw").write_text("\n".join(ab_lines(100, 7, real_label)) + "\n")
    run_vw(["-d", "d.vw", "--binary", "-f", "m", "--quiet"], tmp_path)
    args = ["-d", "d.vw", "-i", "m", "-r", "r", "--passes", "2", "-c", "-k",
            "--decay_learning_rate", "0.0099"]
    want = subprocess.run([sys.executable, "-m", "vowpalwabbit", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120).stdout
    monkeypatch.chdir(tmp_path)
    capfd.readouterr()
    code = main(["vw", *args])
    out, err = capfd.readouterr()
    assert code == 0, err
    assert "'9.800999893784523e-05'" in want and "--binary specified" in want
    assert out == want


def test_other_rules_stopped_early_write_the_model_of_the_last_pass_that_improved(
        tmp_path, capfd, monkeypatch):
    """VW writes -f's model at the end of each pass whose holdout loss improved and,
    stopped early, not again: the model (its counters, their pass count among them) is
    that pass's, with VW's other update rules as with its default one."""
    (tmp_path / "d.vw").write_text("".join(
        f"{1 if i % 2 else -1} |a {'p' if i % 2 else 'n'}{i % 3} q{i % 5}\n"
        for i in range(400)))
    args = ["-d", "d.vw", "--adaptive", "--normalized", "--passes", "15", "-c", "-k"]
    want = run_vw([*args, "-f", "vw.m"], tmp_path)
    code, err = run_ts(capfd, [*args, "-f", "ts.m"], tmp_path, monkeypatch)
    assert code == 0, err
    assert "passes used = 6" in want and "passes used = 6" in err
    vw, ts = (tmp_path / "vw.m").read_bytes(), (tmp_path / "ts.m").read_bytes()
    assert ts[4 + ts[0]:] == vw[4 + vw[0]:]


def test_oaa_model_continued_with_interactions_given_crosses_them_as_vw(tmp_path, capfd,
                                                                        monkeypatch):
    """-i of a one-against-all model with -q given: VW applies the command line's
    interactions over the model's none, as with a binary model: the table's feature
    counts and the raw scores are VW's."""
    (tmp_path / "d.vw").write_text("".join(
        f"{1 + i % 3} |a x{i % 7} y{i % 4} |b z{i % 5}\n" for i in range(60)))
    run_vw(["-d", "d.vw", "--oaa", "3", "-f", "m", "--quiet"], tmp_path)
    args = ["-d", "d.vw", "-i", "m", "-q", "ab", "-r", "r"]
    want = run_vw([*args[:-1], "vw.r"], tmp_path)
    code, err = run_ts(capfd, [*args[:-1], "ts.r"], tmp_path, monkeypatch)
    assert code == 0, err
    assert "total feature number = 360" in want
    assert err.replace("ts.r", "vw.r") == "".join(
        ln for ln in want.splitlines(keepends=True)
        if not ln.startswith(("Enabled learners", "Input label", "Output pred")))
    assert (tmp_path / "ts.r").read_text() == (tmp_path / "vw.r").read_text()


@FULL
def test_a_batch_model_of_binary_keeps_it_as_vw(tmp_path, capfd, monkeypatch):
    """--bfgs --binary: VW's model keeps --binary in its options (its -i then predicts
    signs): the model's bytes are VW's."""
    (tmp_path / "d.vw").write_text("".join(
        f"{1 if i % 3 else -1} |a x{i % 7} y{i % 4}\n" for i in range(200)))
    args = ["-d", "d.vw", "--bfgs", "--binary", "--passes", "2", "-c", "-k",
            "--predict_only_model", "--holdout_off"]
    run_vw([*args, "-f", "vw.m"], tmp_path)
    code, err = run_ts(capfd, [*args, "-f", "ts.m"], tmp_path, monkeypatch)
    assert code == 0, err
    vw, ts = (tmp_path / "vw.m").read_bytes(), (tmp_path / "ts.m").read_bytes()
    assert b" --binary" in vw and ts[4 + ts[0]:] == vw[4 + vw[0]:]
