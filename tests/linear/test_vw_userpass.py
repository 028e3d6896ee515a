"""`terascale vw` against the vowpalwabbit package on what a user's own command lines
write: ``-r``'s raw scores (before VW's clip to the label range) on every learner and
under ``-t``, poisson's loss of a negative label, the batch learners' model headers"""

from __future__ import annotations

import numpy as np
import pytest
from _vw_runs import ab_lines, numbers, real_label, run_ts, run_vw

pytest.importorskip("vowpalwabbit")


def _sign(rng, a, x) -> str:
    return "1" if (a % 3 == 0).sum() + x[0] > 1.2 else "-1"


@pytest.mark.parametrize("flags", [
    [],
    ["-q", "ab", "--passes", "3", "-c", "-k"],
    ["--l1", "1e-4"],
    ["--l2", "1e-3", "--passes", "2", "-c", "-k", "--holdout_off"],
])
def test_raw_predictions_are_the_scores_before_the_clip(flags, tmp_path, capfd,
                                                        monkeypatch):
    """Squared loss on labels -1/1 predicts past them: -p is clipped, -r is not (VW's)."""
    (tmp_path / "d.vw").write_text("\n".join(ab_lines(300, 4, _sign)) + "\n")
    args = ["-d", "d.vw", *flags, "-f", "m"]
    run_vw([*args, "-p", "vw.p", "-r", "vw.r"], tmp_path)
    code, err = run_ts(capfd, [*args, "-p", "ts.p", "-r", "ts.r"], tmp_path, monkeypatch)
    assert code == 0, err
    vr = numbers(tmp_path / "vw.r")
    assert np.abs(vr).max() > 1.05  # (the data make VW clip: -r and -p tell it)
    for ext in ("p", "r"):
        np.testing.assert_allclose(numbers(tmp_path / f"ts.{ext}"),
                                   numbers(tmp_path / f"vw.{ext}"), rtol=1e-5, atol=1e-6)
    run_vw(["-t", "-i", "m", "-d", "d.vw", "-r", "vw.tr"], tmp_path)
    code, err = run_ts(capfd, ["-t", "-i", "m", "-d", "d.vw", "-r", "ts.tr"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    np.testing.assert_allclose(numbers(tmp_path / "ts.tr"), numbers(tmp_path / "vw.tr"),
                               rtol=1e-5, atol=1e-6)


def test_poisson_with_negative_labels_learns_nothing_from_them_as_vw(tmp_path, capfd,
                                                                    monkeypatch):
    """VW's poisson loss of a negative label is NaN (C's logf): the example teaches
    nothing, and the closing block prints the average loss as -nan."""
    rng = np.random.default_rng(5)
    lines = [f"{rng.normal(0.5, 2):.3f} |a f{rng.integers(10)} x:{rng.uniform():.3f}"
             for _ in range(120)]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", "--loss_function", "poisson"]
    want = run_vw([*args, "-p", "vw.p"], tmp_path)
    code, got = run_ts(capfd, [*args, "-p", "ts.p"], tmp_path, monkeypatch)
    assert code == 0, got
    np.testing.assert_allclose(numbers(tmp_path / "ts.p"), numbers(tmp_path / "vw.p"),
                               rtol=1e-5, atol=1e-6)
    assert "average loss = -nan" in want and "average loss = -nan" in got
    assert got.splitlines()[-7:] == want.splitlines()[-7:]  # (the closing block)


@pytest.mark.parametrize("flags", [["--bfgs", "-q", "ab"],
                                   ["--conjugate_gradient", "--loss_function", "logistic"]])
def test_batch_learners_readable_model_and_model_header_are_vws(flags, tmp_path, capfd,
                                                                monkeypatch):
    """--bfgs/--conjugate_gradient: --readable_model is VW's byte for byte (the labels'
    range, the learner in the options), -f's model names the learner as VW's does, and
    the closing block counts the examples' own features, not their interactions."""
    (tmp_path / "d.vw").write_text("\n".join(ab_lines(200, 6, _sign)) + "\n")
    args = ["-d", "d.vw", *flags, "--passes", "3", "-c", "-k", "--predict_only_model"]
    want = run_vw([*args, "--readable_model", "vw.rm", "-f", "vw.m"], tmp_path)
    code, err = run_ts(capfd, [*args, "--readable_model", "ts.rm", "-f", "ts.m"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    assert err[err.index("finished run"):] == want[want.index("finished run"):]
    assert (tmp_path / "ts.rm").read_text() == (tmp_path / "vw.rm").read_text()
    learner = flags[0].encode()
    assert learner in (tmp_path / "vw.m").read_bytes()[:80]
    assert learner in (tmp_path / "ts.m").read_bytes()[:80]
    for m in ("vw", "ts"):  # (VW's -i runs the model's learner: --predict_only_model)
        run_vw(["-t", "-i", f"{m}.m", "-d", "d.vw", "--predict_only_model", "-p", f"{m}.t"],
               tmp_path)
    assert (tmp_path / "ts.t").read_text() == (tmp_path / "vw.t").read_text()
    code, err = run_ts(capfd, [*args[:-1], "--readable_model", "x.rm"], tmp_path,
                       monkeypatch)
    assert code != 0 and "--predict_only_model" in err


def test_sort_features_drops_repeated_features_as_vw(tmp_path, capfd, monkeypatch):
    """--sort_features: VW sorts each namespace's features by index and keeps a repeated
    one once (the smallest value), which changes what is learned."""
    rng = np.random.default_rng(8)
    lines = [f"{rng.choice([-1, 1])} |a x{i % 5} x{i % 5}:{rng.uniform(-2, 2):.3f} "
             f"y{rng.integers(7)} |b z{i % 3} w:{rng.uniform():.3f} z{i % 3}"
             for i in range(150)]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", "--sort_features", "-q", "ab"]
    run_vw([*args, "-p", "vw.p", "--readable_model", "vw.rm"], tmp_path)
    run_vw(["-d", "d.vw", "-q", "ab", "-p", "unsorted.p"], tmp_path)
    code, err = run_ts(capfd, [*args, "-p", "ts.p", "--readable_model", "ts.rm"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    assert (tmp_path / "vw.p").read_text() != (tmp_path / "unsorted.p").read_text()
    np.testing.assert_allclose(numbers(tmp_path / "ts.p"), numbers(tmp_path / "vw.p"),
                               rtol=1e-5, atol=1e-6)
    assert (tmp_path / "ts.rm").read_text() == (tmp_path / "vw.rm").read_text()


@pytest.mark.parametrize("flags", [["--hash", "all"], ["--hash_seed", "7", "-q", "ui"]])
def test_string_values_under_the_rewritten_hashes_are_vws(flags, tmp_path, capfd,
                                                          monkeypatch):
    """``color:red`` is VW 9's feature color^red under --hash all and --hash_seed too
    (the rewrite in front of the parser read it as a bad number)."""
    rng = np.random.default_rng(9)
    lines = [f"{rng.choice([-1, 1])} |u color:{rng.choice(['red', 'blue'])} "
             f"age:{rng.integers(18, 80)} |i cat:{rng.choice(['book', 'a7'])} p:1.5"
             for _ in range(100)]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", *flags]
    run_vw([*args, "-p", "vw.p", "--readable_model", "vw.rm"], tmp_path)
    code, err = run_ts(capfd, [*args, "-p", "ts.p", "--readable_model", "ts.rm"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    np.testing.assert_allclose(numbers(tmp_path / "ts.p"), numbers(tmp_path / "vw.p"),
                               rtol=1e-5, atol=1e-6)
    assert (tmp_path / "ts.rm").read_text() == (tmp_path / "vw.rm").read_text()


@pytest.mark.parametrize("then", [["-t"], ["--passes", "2", "-c", "-k"]])
def test_a_model_of_a_linked_logistic_run_is_read_with_vws_default_loss(then, tmp_path,
                                                                       capfd, monkeypatch):
    """VW's model keeps --link, never the loss: -i without --loss_function learns and
    reports squared loss and clips to the model's label range, whatever trained it."""
    (tmp_path / "d.vw").write_text("\n".join(ab_lines(200, 7, _sign)) + "\n")
    run_vw(["-d", "d.vw", "--link", "logistic", "-f", "m", "--quiet"], tmp_path)
    args = ["-d", "d.vw", "-i", "m", *then]
    want = run_vw([*args, "-p", "vw.p"], tmp_path)
    code, got = run_ts(capfd, [*args, "-p", "ts.p"], tmp_path, monkeypatch)
    assert code == 0, got
    np.testing.assert_allclose(numbers(tmp_path / "ts.p"), numbers(tmp_path / "vw.p"),
                               rtol=1e-5, atol=1e-6)
    assert got[got.index("finished run"):] == want[want.index("finished run"):]


@pytest.mark.parametrize("loss", ["logistic", "hinge"])
def test_binary_with_zero_one_labels_keeps_the_loss_of_the_zero_labels(loss, tmp_path,
                                                                       capfd, monkeypatch):
    """--binary on labels 0/1: VW's 0/1 loss is for labels -1 and 1; a 0 label keeps the
    loss function's value (the table and the average loss say so)."""
    lines = [ln.replace("-1 ", "0 ", 1) if ln.startswith("-1 ") else ln
             for ln in ab_lines(200, 8, _sign)]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", "--binary", "--loss_function", loss, "--passes", "2", "-c", "-k"]
    want = run_vw([*args, "-p", "vw.p"], tmp_path)
    code, got = run_ts(capfd, [*args, "-p", "ts.p"], tmp_path, monkeypatch)
    assert code == 0, got
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()
    table = [ln for ln in got.splitlines() if ln[:1].isdigit() or "loss =" in ln]
    assert table == [ln for ln in want.splitlines() if ln[:1].isdigit() or "loss =" in ln]


def test_classweight_is_refused_naming_the_flag(tmp_path, capfd, monkeypatch):
    (tmp_path / "d.vw").write_text("1 |a x\n-1 |a y\n")
    code, err = run_ts(capfd, ["-d", "d.vw", "--classweight", "1:2"], tmp_path, monkeypatch)
    assert code != 0 and "--classweight" in err and "importance weight" in err


def test_readable_model_merges_repeated_ignore_and_keep_as_vw(tmp_path, capfd, monkeypatch):
    """--keep a --keep c is one '--keep ac' in VW's --readable_model header (as in -f's)."""
    (tmp_path / "d.vw").write_text("\n".join(ab_lines(60, 2, _sign)) + "\n")
    args = ["-d", "d.vw", "--keep", "b", "--keep", "a", "--ignore", "c", "--ignore", "z"]
    run_vw([*args, "--readable_model", "vw.rm"], tmp_path)
    code, err = run_ts(capfd, [*args, "--readable_model", "ts.rm"], tmp_path, monkeypatch)
    assert code == 0, err
    assert (tmp_path / "ts.rm").read_text() == (tmp_path / "vw.rm").read_text()


@pytest.mark.parametrize("progress", [[], ["-P", "0"], ["-P", "9.5"]])
def test_vws_notes_on_standard_output(progress, tmp_path):
    """VW's notes on the options (a -P it changes or doubts, first; --save_resume,
    --readable_model without --predict_only_model, -r with --binary) after those on -q,
    in VW's order; none with --quiet."""
    from _vw_runs import stdouts

    (tmp_path / "d.vw").write_text("\n".join(ab_lines(30, 3, _sign)) + "\n")
    args = ["-d", "d.vw", "--save_resume", "--readable_model", "rm", "-q", "ab", "-q", "ab",
            "--binary", "-r", "r", *progress]
    vw, ts = stdouts(args, tmp_path)
    assert ts == vw and vw.count("\n") == 5 + bool(progress)
    vw, ts = stdouts([*args, "--quiet"], tmp_path)
    assert ts == vw == ""


def test_poisson_readable_model_has_vws_label_range(tmp_path, capfd, monkeypatch):
    """Poisson's prediction range is [-50, 50] widened to the labels, in --readable_model's
    header as in -f's model."""
    rng = np.random.default_rng(4)
    lines = [f"{rng.poisson(2)} |a f{rng.integers(10)} x:{rng.uniform():.3f}"
             for _ in range(80)]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", "--loss_function", "poisson"]
    run_vw([*args, "--readable_model", "vw.rm"], tmp_path)
    code, err = run_ts(capfd, [*args, "--readable_model", "ts.rm"], tmp_path, monkeypatch)
    assert code == 0, err
    assert (tmp_path / "ts.rm").read_text() == (tmp_path / "vw.rm").read_text()


def test_the_rates_of_the_model_continued_are_kept_in_the_model_written(tmp_path, capfd,
                                                                       monkeypatch):
    """-i of a model trained with -l/--power_t: the run uses them and the model it writes
    keeps them (--readable_model's options), as VW's."""
    (tmp_path / "d.vw").write_text("\n".join(ab_lines(80, 5, _sign)) + "\n")
    run_vw(["-d", "d.vw", "-l", "0.2", "--power_t", "0.3", "-f", "m0", "--quiet"], tmp_path)
    args = ["-d", "d.vw", "-i", "m0"]
    run_vw([*args, "-p", "vw.p", "--readable_model", "vw.rm"], tmp_path)
    code, err = run_ts(capfd, [*args, "-p", "ts.p", "--readable_model", "ts.rm"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    assert "--learning_rate 0.2" in (tmp_path / "vw.rm").read_text()
    assert (tmp_path / "ts.rm").read_text() == (tmp_path / "vw.rm").read_text()
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()


@pytest.mark.parametrize("flags", [
    ["--loss_function", "logistic", "--link", "logistic", "-l", "2"],
    ["--loss_function", "logistic", "--oaa", "4", "--probabilities"],
])
def test_probabilities_are_vws_to_the_byte(flags, tmp_path, capfd, monkeypatch):
    """VW's scorer takes the logistic in float (C's expf) and --probabilities normalizes
    by the reciprocal of the classes' float sum: a double logistic rounded to float, or a
    division, changes -p's sixth digit on about one line in a hundred."""
    rng = np.random.default_rng(7)
    oaa = "--oaa" in flags
    lines = []
    for _ in range(1500):
        y = int(rng.integers(1, 5)) if oaa else int(rng.choice([-1, 1]))
        feats = " ".join(f"f{rng.integers(300)}:{rng.normal() * 3:.3f}" for _ in range(6))
        lines.append(f"{y} |a {feats} y{abs(y) * int(rng.integers(3))}")
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    run_vw(["-d", "d.vw", *flags, "-p", "vw.p", "-f", "m"], tmp_path)
    code, err = run_ts(capfd, ["-d", "d.vw", *flags, "-p", "ts.p"], tmp_path, monkeypatch)
    assert code == 0, err
    assert (tmp_path / "ts.p").read_bytes() == (tmp_path / "vw.p").read_bytes()
    if not oaa:  # and serving VW's model: the same probabilities
        code, err = run_ts(capfd, ["-t", "-i", "m", "-d", "d.vw", "-p", "ts.t"], tmp_path,
                           monkeypatch)
        assert code == 0, err
        run_vw(["-t", "-i", "m", "-d", "d.vw", "-p", "vw.t"], tmp_path)
        assert (tmp_path / "ts.t").read_bytes() == (tmp_path / "vw.t").read_bytes()


def test_whole_predictions_of_any_size_print_as_vw():
    """VW prints a whole-valued prediction without decimals, however large (poisson's
    link reaches 1e15 and past it)."""
    from terascale.linear._vw._vwout import prediction_lines

    values = np.array([3.0, -7.0, 1e15, 2.0 ** 60, -(2.0 ** 70), 0.5], np.float32)
    want = "".join(f"{v:.0f}\n" if v == np.floor(v) else f"{v:.6f}\n"
                   for v in values.astype(np.float64))
    assert prediction_lines(values.astype(np.float64), None) == want  # (the compiled core)
    tagged = want.replace("\n", " t\n")
    assert prediction_lines(values.astype(np.float64), ["t"] * len(values)) == tagged


@pytest.mark.parametrize("again", [[], ["--l1", "1e-4"]])
def test_an_l1_model_continued_learns_from_its_raw_weights_as_vw(again, tmp_path, capfd,
                                                                  monkeypatch):
    """VW keeps an --l1 model's raw weights and its gravity: -t truncates with it, a run
    that continues it without --l1 predicts and learns from the raw weights, one with
    --l1 truncates with the gravity it goes on adding to."""
    (tmp_path / "d.vw").write_text("\n".join(ab_lines(400, 6, _sign)) + "\n")
    run_vw(["-d", "d.vw", "--l1", "1e-3", "-f", "m"], tmp_path)
    for extra in (again, ["-t"]):
        args = ["-i", "m", "-d", "d.vw", *extra]
        run_vw([*args, "-p", "vw.p"], tmp_path)
        code, err = run_ts(capfd, [*args, "-p", "ts.p"], tmp_path, monkeypatch)
        assert code == 0, err
        np.testing.assert_allclose(numbers(tmp_path / "ts.p"), numbers(tmp_path / "vw.p"),
                                   rtol=1e-5, atol=1e-6)


def test_poisson_readable_model_keeps_nan_sums_and_zero_weights_as_vw(tmp_path, capfd,
                                                                      monkeypatch):
    """--readable_model's learner state as VW writes it where poisson meets a negative
    label: the NaN loss sums print ``-nan`` (C's sign), and a weight at 0 whose adaptive
    or normalized sum is not (its one update was NaN, VW's 0) is listed."""
    rng = np.random.default_rng(5)
    lines = [f"{rng.normal(0.5, 2):.3f} |a f{rng.integers(10)} x:{rng.uniform():.3f}"
             for _ in range(120)]
    lines[40] = "2 |a f3 big:1e30"  # (a gradient past float: the update is NaN, w stays 0)
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", "--loss_function", "poisson"]
    run_vw([*args, "--readable_model", "vw.rm"], tmp_path)
    code, err = run_ts(capfd, [*args, "--readable_model", "ts.rm"], tmp_path, monkeypatch)
    assert code == 0, err
    want = (tmp_path / "vw.rm").read_text()
    assert "sum_loss -nan" in want and any(  # (the data have both)
        ln.split(":")[1].startswith("0 ") for ln in want.splitlines()[29:])
    assert (tmp_path / "ts.rm").read_text() == want


def test_a_model_with_ignore_linear_predicts_without_those_linear_terms(tmp_path, capfd,
                                                                        monkeypatch):
    """-t -i of a model trained with --ignore_linear applies it, as VW reads it from the
    model's options: the namespace's own features stay out, its interactions in (-b 10:
    their slots hold other features' weights, which they would add)."""
    (tmp_path / "d.vw").write_text("\n".join(ab_lines(150, 8, real_label)) + "\n")
    run_vw(["-d", "d.vw", "-q", "ab", "--ignore_linear", "a", "-b", "10", "-f", "m",
            "--quiet"], tmp_path)
    args = ["-t", "-i", "m", "-d", "d.vw"]
    run_vw([*args, "-p", "vw.p"], tmp_path)
    code, err = run_ts(capfd, [*args, "-p", "ts.p"], tmp_path, monkeypatch)
    assert code == 0, err
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()


def test_a_label_too_wide_for_its_column_is_cut_as_vw(tmp_path, capfd, monkeypatch):
    """The progress table's label and prediction columns are 14 characters: VW cuts a
    wider value (123456798720.0000) to 11 and ``...``."""
    lines = ["2 |a y", "3 |a x y", "3 |a y:2", "1 |a x", "-2 |a y", "7 |a x", "4 |b z",
             "1 |b z"] * 2
    lines[-1] = "123456789012.5 |a x"  # (the last line printed: its loss is the last)
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    want = run_vw(["-d", "d.vw"], tmp_path)
    code, got = run_ts(capfd, ["-d", "d.vw"], tmp_path, monkeypatch)
    assert code == 0, got
    assert "12345679872..." in want
    assert got[got.index("average  since"):] == want[want.index("average  since"):]


def test_starting_weights_with_a_model_name_the_flag_given(tmp_path, capfd, monkeypatch):
    """-i MODEL with --initial_weight (or another flag that sets the weights training
    starts from) is refused naming that flag, not another (--initial_t with -i is VW's:
    test_vwonline's warm starts)."""
    (tmp_path / "d.vw").write_text("\n".join(ab_lines(20, 3, _sign)) + "\n")
    code, err = run_ts(capfd, ["-d", "d.vw", "-f", "m", "--quiet"], tmp_path, monkeypatch)
    assert code == 0, err
    code, err = run_ts(capfd, ["-d", "d.vw", "-i", "m", "--initial_weight", "2",
                               "--initial_t", "2"], tmp_path, monkeypatch)
    assert code != 0 and "--initial_weight set" in err and "-i MODEL" in err
    assert "--initial_t" not in err


@pytest.mark.parametrize("flags", [[], ["--l1", "1e-6"]])
def test_oaa_scores_leave_out_values_within_1e_10_of_zero_as_vw(flags, tmp_path, capfd,
                                                                monkeypatch):
    """VW's one-against-all scores its K learners at once (multipredict), which skips a
    feature whose value is within 1e-10 of 0, in -t and while learning; under --l1 its
    truncating variant keeps it."""
    (tmp_path / "d.vw").write_text("1 |a x:2\n2 |a x:1\n3 |a y\n1 |a x\n2 |a x:1e-20 y:3e-11\n"
                                   "3 |a x:1e-9\n")
    (tmp_path / "t.vw").write_text("1 |a x:1e-20\n2 |a x:1e-9\n3 |a x:1e-11 y:1e-12\n")
    for args in (["-d", "d.vw", "--oaa", "3", "--noconstant", *flags, "-f", "m"],
                 ["-t", "-i", "m", "-d", "t.vw", *flags]):
        run_vw([*args, "-r", "vw.r"], tmp_path)
        code, err = run_ts(capfd, [*args, "-r", "ts.r"], tmp_path, monkeypatch)
        assert code == 0, err
        assert (tmp_path / "ts.r").read_text() == (tmp_path / "vw.r").read_text()


@pytest.mark.parametrize("step", ["1", "7", "1.5"])
def test_the_progress_cadence_of_fractional_weights_is_vws(step, tmp_path, capfd,
                                                           monkeypatch):
    """VW sums the weights in double and puts the next line at the float of that sum plus
    (or times) -P's step, in float: a float32 sum, or the step added before the rounding,
    moves a line by one example where the weights have decimals."""
    rng = np.random.default_rng(11)
    lines = []
    for i in range(300):
        w = f" {rng.uniform(0.5, 3):.2f}" if rng.random() < 0.3 else ""
        lines.append(f"{rng.choice([-1, 1])}{w} 't{i}|a f{rng.integers(40)} x:{rng.normal():.3f}")
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    want = run_vw(["-d", "d.vw", "-P", step], tmp_path)
    code, got = run_ts(capfd, ["-d", "d.vw", "-P", step], tmp_path, monkeypatch)
    assert code == 0, got

    def rows(text: str) -> list[str]:
        return [ln for ln in text.splitlines() if ln[:1].isdigit()]
    assert len(rows(want)) > 10 and rows(got) == rows(want)
