"""`terascale vw` against the vowpalwabbit package on what a run prints before its table:
VW's preamble (-r's file, the cache file, -i's -b), its lines on the interactions and the
namespaces ignored or kept, its notes on --ngram/--skips/--feature_limit, and the batch
learner's lines in VW's order; and what a model's header keeps of the feature generation
(--ngram/--skips in --readable_model, --hash and --hash_seed given at their defaults,
--redefine, --affix, each option's values in the order given)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from _vw_runs import ab_lines, numbers, real_label, run_ts, run_vw

pytest.importorskip("vowpalwabbit")

_VW_ONLY = ("Enabled learners", "Input label", "Output pred")  # (VW's reduction stack)


def _both(args: list[str], cwd, stdin=None) -> tuple[tuple[str, str], tuple[str, str]]:
    """(stdout, stderr) of the real VW and of ``terascale vw``, each run as a program in
    ``cwd`` (``stdin``: a file both read as their standard input); VW's three lines on its
    reduction stack left out."""
    runs = []
    for cmd in ([sys.executable, "-m", "vowpalwabbit"],
                [sys.executable, "-m", "terascale", "vw"]):
        with open(stdin or "/dev/null", "rb") as f:
            r = subprocess.run([*cmd, *args], cwd=cwd, capture_output=True, text=True,
                               timeout=120, stdin=f)
        assert r.returncode == 0, r.stderr
        err = "".join(ln for ln in r.stderr.splitlines(keepends=True)
                      if not ln.startswith(_VW_ONLY))
        runs.append((r.stdout, err))
    return runs[0], runs[1]


@pytest.mark.parametrize("flags", [
    ["-q", "ab", "-q", "ba", "--cubic", "abb", "--ignore", "c", "--ignore", "Da",
     "--keep", "ab", "-b", "12", "--passes", "2", "-c", "-k", "-p", "p", "-r", "r"],
    ["--ngram", "a2", "--ngram", "3", "--skips", "a1", "--feature_limit", "b1",
     "--interactions", "a:", "--cache_file", "x.cache", "--holdout_off", "--passes", "2"],
    ["--bfgs", "--passes", "3", "-c", "-k", "-q", "ab", "-r", "r", "-f", "m",
     "--predict_only_model"],
    ["--l1", "1e-6", "--l2", "1e-5", "--initial_t", "4", "--passes", "2", "-c", "-k",
     "--readable_model", "rm"],
    ["--conjugate_gradient", "--l1", "1e-6", "--l2", "1e-2", "--passes", "2", "-c", "-k"],
    ["--sgd", "-l", "0.2", "--initial_t", "4", "--power_t", "0.4"],
    ["--invariant"],
])
def test_what_a_run_prints_before_its_table_is_vws(flags, tmp_path):
    (tmp_path / "d.vw").write_text("\n".join(ab_lines(120, 3, real_label)) + "\n")
    vw, ts = _both(["-d", "d.vw", *flags], tmp_path)
    assert ts[0] == vw[0]  # (the notes on standard output)
    assert ts[1] == vw[1]


def test_initial_t_is_kept_in_the_model_as_vw(tmp_path, capfd, monkeypatch):
    """VW's t starts at --initial_t; its model keeps both (the readable header's
    ``initial_t`` and ``t``, the binary's counters, which -i carries on)."""
    (tmp_path / "d.vw").write_text("\n".join(ab_lines(80, 6, real_label)) + "\n")
    args = ["-d", "d.vw", "--initial_t", "10", "--passes", "2", "-c", "-k", "--quiet"]
    run_vw([*args, "--readable_model", "vw.rm", "-f", "vw.m"], tmp_path)
    code, err = run_ts(capfd, [*args, "--readable_model", "ts.rm", "-f", "ts.m"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    assert "initial_t 10" in (tmp_path / "vw.rm").read_text()
    assert (tmp_path / "ts.rm").read_text() == (tmp_path / "vw.rm").read_text()
    for m in ("vw", "ts"):
        run_vw(["-i", f"{m}.m", "-d", "d.vw", "-p", f"{m}.p", "--quiet"], tmp_path)
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()


def test_a_named_labels_test_run_prints_its_lines_as_vw(tmp_path):
    lines = [f"{['cat', 'dog', 'emu'][i % 3]} 't{i}|a f{i % 3} g{i % 5}" for i in range(40)]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    run_vw(["-d", "d.vw", "--oaa", "3", "--named_labels", "cat,dog,emu", "-f", "m",
            "--quiet"], tmp_path)
    vw, ts = _both(["-t", "-i", "m", "-d", "d.vw", "-p", "p", "--l2", "1e-3"], tmp_path)
    assert "only testing\nparsed 3 named labels\nusing l2" in vw[1]
    assert ts == vw


@pytest.mark.parametrize("flags", [[], ["--ngram", "a2"]])
def test_standard_input_is_named_as_given(flags, tmp_path):
    """-d /dev/stdin: the preamble names it so, not the copy terascale reads (nor the
    copy's rewrite by the feature generation)."""
    (tmp_path / "d.vw").write_text("\n".join(ab_lines(50, 7, real_label)) + "\n")
    vw, ts = _both(["-d", "/dev/stdin", *flags], tmp_path, stdin=tmp_path / "d.vw")
    assert "Reading datafile = /dev/stdin" in vw[1]
    assert ts == vw


def test_a_test_run_prints_the_models_bits_rates_and_interactions_as_vw(tmp_path):
    (tmp_path / "d.vw").write_text("\n".join(ab_lines(60, 4, real_label)) + "\n")
    run_vw(["-d", "d.vw", "-b", "14", "-q", "ab", "--ignore", "c", "-l", "0.05",
            "--power_t", "0.3", "-f", "m", "--quiet"], tmp_path)
    vw, ts = _both(["-t", "-i", "m", "-d", "d.vw", "-r", "r"], tmp_path)
    assert "Num weight bits = 14" in vw[1] and "creating quadratic" in vw[1]
    assert "learning rate = 0.05" in vw[1]
    assert ts == vw


@pytest.mark.parametrize("flags", [["--hash", "strings", "--hash_seed", "0"],
                                   ["--ngram", "a2", "--ngram", "b3", "--skips", "a1", "--hash_seed", "-7"],
                                   ["--redefine", "x:=ab", "--redefine", ":=c", "-q", "xc",
                                    "-q", "cx"],
                                   ["--affix", "+2a", "-q", "ab"]])
def test_model_header_keeps_the_generation_given(flags, tmp_path, capfd, monkeypatch):
    """VW keeps --hash and --hash_seed given at their defaults (a negative seed as its
    unsigned value), --redefine and --affix in
    the model's options (a name's values in the order given), and writes --ngram/--skips's
    values in --readable_model's ngram and skip lines; each tool's -t of the other's
    model then predicts as VW's own (--redefine, --affix applied from the model)."""
    lines = [ln + f" |c k{i % 4}"
             for i, ln in enumerate(ab_lines(60, 5, real_label))]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", *flags, "--quiet"]
    run_vw([*args, "--readable_model", "vw.rm", "-f", "vw.m"], tmp_path)
    code, err = run_ts(capfd, [*args, "--readable_model", "ts.rm", "-f", "ts.m"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    got, want = ((tmp_path / f"{m}.rm").read_text() for m in ("ts", "vw"))
    head = want.index(":1\n")  # (the header, to the checksum, byte for byte)
    assert got[:head] == want[:head]
    assert got == want
    run_vw(["-t", "-i", "vw.m", "-d", "d.vw", "-p", "want.p", "--quiet"], tmp_path)
    run_vw(["-t", "-i", "ts.m", "-d", "d.vw", "-p", "vw_ts.p", "--quiet"], tmp_path)
    code, err = run_ts(capfd, ["-t", "-i", "vw.m", "-d", "d.vw", "-p", "ts_vw.p", "--quiet"],
                       tmp_path, monkeypatch)
    assert code == 0, err
    for other in ("vw_ts.p", "ts_vw.p"):
        np.testing.assert_allclose(numbers(tmp_path / other), numbers(tmp_path / "want.p"),
                                   rtol=1e-5, atol=1e-6)


def test_an_early_stopped_model_keeps_the_counters_of_its_pass_as_vw(tmp_path, capfd,
                                                                    monkeypatch):
    """The holdout stops the passes and keeps an earlier pass's model: VW wrote it at the
    end of that pass, with that pass's counters (t, sum_loss, example_number, the progress
    table's place), which --readable_model shows and -i carries on."""
    rng = np.random.default_rng(5)  # (a click log: Zipf ids, weighted examples)
    lines = []
    for i in range(200):
        u, it = min(rng.zipf(1.3), 5000), min(rng.zipf(1.5), 3000)
        y = 1 if (u % 3 == 0) ^ (it % 5 == 0) ^ (rng.uniform() < 0.1) else -1
        lines.append(f"{y}{rng.choice(['', ' 0.25', ' 2.5'])} 'c{i}|user u{u} |item i{it} "
                     f"|ctx h{rng.integers(24)}")
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", "--passes", "5", "-c", "-k", "--early_terminate", "1", "--quiet"]
    run_vw([*args, "--readable_model", "vw.rm", "-f", "vw.m"], tmp_path)
    code, err = run_ts(capfd, [*args, "--readable_model", "ts.rm", "-f", "ts.m"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    want = (tmp_path / "vw.rm").read_text()
    assert "current_pass 3" in want  # (the data stop it after pass 4)
    assert (tmp_path / "ts.rm").read_text() == want
    for m in ("vw", "ts"):
        run_vw(["-i", f"{m}.m", "-d", "d.vw", "-p", f"{m}.p", "--quiet"], tmp_path)
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()


@pytest.mark.parametrize("fast", ["1", "0"])
def test_a_binary_models_test_run_keeps_the_loss_of_other_labels(fast, tmp_path, capfd,
                                                                 monkeypatch):
    """-t -i of a --binary model on 0/1 labels: VW's 0/1 loss is for labels -1 and 1; a
    0 label keeps the loss function's (squared: -t's, the model keeps no loss), in the
    compiled scorer and in the numba pass alike."""
    lines = [ln.replace("-1 ", "0 ", 1) if ln.startswith("-1 ") else ln
             for ln in ab_lines(120, 8, lambda rng, a, x: str(rng.choice([-1, 1])))]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    run_vw(["-d", "d.vw", "--binary", "--loss_function", "logistic", "-f", "m", "--quiet"],
           tmp_path)
    if fast == "0":
        monkeypatch.setenv("TERASCALE_NO_CEXT", "1")
    args = ["-t", "-i", "m", "-d", "d.vw"]
    want = run_vw([*args, "-p", "vw.p"], tmp_path)
    code, got = run_ts(capfd, [*args, "-p", "ts.p"], tmp_path, monkeypatch)
    assert code == 0, got
    assert got[got.index("average  since"):] == want[want.index("average  since"):]
