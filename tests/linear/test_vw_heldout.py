"""`terascale vw` on shapes the wide bench does not have (``benchmarks/heldout_shapes.py``
runs them at full size beside the real VW): what those runs found, on small data."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from _vw_runs import hex_id_lines, more, numbers, run_ts, run_vw, stdouts

pytest.importorskip("vowpalwabbit")


def _same_predictions(args: list[str], tmp_path, capfd, monkeypatch) -> tuple[str, str]:
    """Terascale's then VW's run of ``args -p p``: the same predictions; each one's
    standard error."""
    code, err = run_ts(capfd, [*args, "-p", "p"], tmp_path, monkeypatch)
    assert code == 0, err
    ts = (tmp_path / "p").read_text()
    want = run_vw([*args, "-p", "p"], tmp_path)
    assert ts == (tmp_path / "p").read_text()
    return err, want


def _hex_lines(n: int, seed: int) -> list[str]:
    """Rows of 40 hexadecimal ids, most of them seen once (many distinct features)."""
    return hex_id_lines(n, seed, ids=40, common=4, of=50, above=4)


@pytest.mark.parametrize("resume", [True, False])
def test_a_vw_model_is_written_in_pieces_that_vw_loads(resume, tmp_path, capfd,
                                                         monkeypatch):
    """-f in VW's format writes the weights a piece at a time: the real vw -i loads a
    model written in many pieces and predicts as with the model terascale learned (which
    predicts as VW's own), and writing it holds a fraction of the model in memory."""
    from terascale.linear._vw import _vwmodel

    (tmp_path / "d.vw").write_text("\n".join(_hex_lines(2000, 3)) + "\n")
    flags = ["-b", "22", "--loss_function", "logistic"]
    flags += [] if resume else ["--predict_only_model"]
    code, err = run_ts(capfd, ["-d", "d.vw", *flags, "-f", "one.model"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    model = _vwmodel.read_vw_model(str(tmp_path / "one.model"))
    assert len(model.indices) > 40 * 997  # many pieces
    _vwmodel.write_vw_model(model, str(tmp_path / "whole.model"), predict_only=not resume)
    monkeypatch.setattr(_vwmodel, "_CHUNK", 997)
    tracemalloc.start()
    try:
        _vwmodel.write_vw_model(model, str(tmp_path / "pieces.model"),
                                predict_only=not resume)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = (tmp_path / "pieces.model").stat().st_size
    assert (tmp_path / "pieces.model").read_bytes() == (tmp_path / "whole.model").read_bytes()
    assert peak < size / 4, (peak, size)  # (in one piece: over 3 times the size)
    run_vw(["-d", "d.vw", *flags, "-f", "vw.model"], tmp_path)
    for name in ("one", "pieces", "vw"):
        run_vw(["-i", f"{name}.model", "-t", "-d", "d.vw", "-p", f"{name}.p"], tmp_path)
    assert (tmp_path / "pieces.p").read_text() == (tmp_path / "one.p").read_text()
    np.testing.assert_allclose(numbers(tmp_path / "pieces.p"), numbers(tmp_path / "vw.p"),
                               rtol=1e-5, atol=1e-6)


def test_an_unsorted_model_is_written_in_index_order(tmp_path, monkeypatch):
    """A model whose indices are not in order (one-against-all's learners, a model built
    by hand) is written in VW's index order, pieces and all: vw -i predicts with it."""
    from terascale.linear import LinearModel
    from terascale.linear._vw import _vwmodel

    (tmp_path / "d.vw").write_text("\n".join(_hex_lines(300, 4)) + "\n")
    run_vw(["-d", "d.vw", "-b", "18", "-f", "vw.model", "--predict_only_model"], tmp_path)
    ref = _vwmodel.read_vw_model(str(tmp_path / "vw.model"))
    perm = np.random.default_rng(0).permutation(len(ref.indices))
    monkeypatch.setattr(_vwmodel, "_CHUNK", 101)
    for name, order in (("sorted", slice(None)), ("shuffled", perm)):
        m = LinearModel(indices=ref.indices[order], weights=ref.weights[order],
                        parse=ref.parse, loss=ref.loss, info=ref.info)
        _vwmodel.write_vw_model(m, str(tmp_path / f"{name}.model"), predict_only=True)
        run_vw(["-i", f"{name}.model", "-t", "-d", "d.vw", "-p", f"{name}.p"], tmp_path)
    assert (tmp_path / "shuffled.model").read_bytes() == (tmp_path / "sorted.model").read_bytes()
    p = (tmp_path / "shuffled.p").read_text()
    assert p == (tmp_path / "sorted.p").read_text() and len(set(p.split())) > 10


def test_bfgs_on_several_workers_prints_one_table_and_block(tmp_path):
    """--bfgs with -n 2 runs VW's batch learner in both workers: rank 0 prints VW's
    per-pass table and closing block once, the same passes as one worker's (--quiet
    prints nothing)."""
    import re
    import subprocess
    import sys

    (tmp_path / "d.vw").write_text("\n".join(_hex_lines(400, 5)) + "\n")
    base = [sys.executable, "-m", "terascale", "vw", "-d", "d.vw", "-b", "16",
            "--loss_function", "logistic", "--bfgs", "--passes", "3", "-c", "-k"]
    out = {}
    for extra in (["-n", "2"], ["-n", "2", "--quiet"], []):
        r = subprocess.run([*base, *extra], cwd=tmp_path, capture_output=True, text=True,
                           timeout=180)
        assert r.returncode == 0, r.stderr
        out[len(extra)] = r.stderr
    assert out[3] == ""
    assert out[2].count("finished run") == 1 and out[2].count("avg. loss") == 1
    block = [re.sub(r"\d\.\d+", "x", ln) for ln in out[2].split("finished run")[1]
             .splitlines()]
    assert block == [re.sub(r"\d\.\d+", "x", ln) for ln in out[0].split("finished run")[1]
                     .splitlines()]
    assert out[2].split("finished run")[1].split("average loss")[0] == \
        out[0].split("finished run")[1].split("average loss")[0]


def test_the_readable_model_is_written_in_pieces(tmp_path, capfd, monkeypatch):
    """--readable_model formats and writes the weights a piece at a time: the text is VW's
    own, and writing it holds a fraction of the text in memory."""
    from terascale.linear._vw import _vwmodel, _vwtext

    (tmp_path / "d.vw").write_text("\n".join(_hex_lines(1500, 6)) + "\n")
    flags = ["-d", "d.vw", "-b", "20", "--loss_function", "logistic"]
    monkeypatch.setattr(_vwtext, "_LINES", 997)
    code, err = run_ts(capfd, [*flags, "--readable_model", "ts.txt", "-f", "ts.model"],
                       tmp_path, monkeypatch)
    assert code == 0, err
    run_vw([*flags, "--readable_model", "vw.txt"], tmp_path)
    text = (tmp_path / "ts.txt").read_text()
    assert text == (tmp_path / "vw.txt").read_text() and text.count("\n") > 40 * 997
    model = _vwmodel.read_vw_model(str(tmp_path / "ts.model"))
    tracemalloc.start()
    try:
        _vwtext.write_readable(model, str(tmp_path / "again.txt"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    size = (tmp_path / "again.txt").stat().st_size
    # (the weights' arrays, 16 bytes a feature, against ~30 of text; the text in one
    # piece, its lines as str objects and joined, took over 3 times the size)
    assert size > len(text) // 2 and peak < size, (peak, size)


def test_invert_hash_names_every_kind_of_feature_as_vw(tmp_path, capfd, monkeypatch):
    """--invert_hash hashes a namespace's plain names in one call: the file is VW's byte
    for byte with names of digits, UTF-8, anonymous features, string values, a namespace
    that comes back, a scale and -q."""
    rng = np.random.default_rng(7)
    lines = []
    for i in range(300):
        a, b = rng.integers(0, 40, size=2)
        lines.append(f"{(-1) ** i} |user_id u{a} {b} é{a % 5} :1.5 color:{'rb'[a % 2]}ed "
                     f"|geo:2 g{b} 0{a} |unit w{a}:2.5 |g back{b % 3}")
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    flags = ["-d", "d.vw", "-b", "18", "-q", "ug", "--invert_hash"]
    code, err = run_ts(capfd, [*flags, "ts.inv"], tmp_path, monkeypatch)
    assert code == 0, err
    run_vw([*flags, "vw.inv"], tmp_path)
    text = (tmp_path / "ts.inv").read_text()
    assert text == (tmp_path / "vw.inv").read_text()
    assert "user_id^color^red" in text and "g^back1" in text and "*g^" in text


def test_audit_names_each_of_two_features_that_collide_in_an_example(tmp_path):
    """--audit at -b 6 (most examples hold two features at one index, crosses included;
    a namespace letter that comes back later in the line): each feature printed under its
    own name, in VW's order, VW's audit byte for byte."""

    rng = np.random.default_rng(8)
    lines = [f"{rng.normal():.3f} |user u{rng.integers(0, 30)} v{rng.integers(0, 30)} "
             f"|geo g{rng.integers(0, 30)} |Device d{rng.integers(0, 30)} :2"
             + (f" |u w{rng.integers(0, 30)} |gone:0 x" if i % 2 else "") for i in range(60)]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", "--audit", "-q", "ug", "-b", "6"]
    runs = stdouts(args, tmp_path)
    assert runs[0].count("\n") == 120 and "user^u" in runs[0]
    assert runs[1] == runs[0]


@pytest.mark.parametrize("pos, neg", [(69, 58), (357, 212)])
def test_the_logistic_best_constant_is_c_logf_of_the_counts(pos, neg, tmp_path, capfd,
                                                             monkeypatch):
    """--loss_function logistic's best constant, log(positives / negatives), is C's logf
    of the float ratio, as VW takes it: the sixth decimal VW prints on counts where
    numpy's float32 log (0.173663 of 69/58) or the double log (0.521150 of 357/212) is
    an ulp away."""
    (tmp_path / "d.vw").write_text("\n".join(["1 |a x"] * pos + ["-1 |a y"] * neg) + "\n")
    args = ["-d", "d.vw", "--loss_function", "logistic"]
    code, err = run_ts(capfd, args, tmp_path, monkeypatch)
    assert code == 0, err
    want = run_vw(args, tmp_path)
    best = [ln for ln in err.splitlines() if ln.startswith("best constant")]
    assert len(best) == 2 and best == [ln for ln in want.splitlines()
                                       if ln.startswith("best constant")]


def test_invert_hash_writes_a_weight_that_stayed_0_without_its_name(tmp_path, capfd,
                                                                      monkeypatch):
    """A feature whose updates cancel in each example (``z`` and ``z:-1`` in one
    namespace, its crosses too) keeps weight 0 with nonzero sums: --invert_hash writes it
    without its name, VW's file byte for byte."""
    rng = np.random.default_rng(9)
    lines = [f"{rng.normal():.3f} |a:0.5 x{rng.integers(6)} |b:2 z{i % 4} z{i % 4}:-1 "
             f"w{rng.integers(5)}" for i in range(40)]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    flags = ["-d", "d.vw", "-q", "ab", "--invert_hash"]
    code, err = run_ts(capfd, [*flags, "ts.inv"], tmp_path, monkeypatch)
    assert code == 0, err
    run_vw([*flags, "vw.inv"], tmp_path)
    text = (tmp_path / "ts.inv").read_text()
    assert text == (tmp_path / "vw.inv").read_text()
    assert "\nb^w1:" in text and "b^z1" not in text


@pytest.mark.parametrize("flags", [["--holdout_period", "1"],
                                   more(["--passes", "2", "-c", "-k", "--holdout_off",
                                         "--holdout_period", "3"])])
def test_a_holdout_period_that_holds_nothing_out_is_accepted(flags, tmp_path, capfd,
                                                             monkeypatch):
    """--holdout_period where VW holds nothing out (one pass; --holdout_off, which wins)
    runs as VW's run, predictions and closing block; 1 with passes, where VW learns from
    no example, is refused with what to give instead."""
    rng = np.random.default_rng(10)
    (tmp_path / "d.vw").write_text("\n".join(
        f"{rng.choice([-1, 1])} |a x{rng.integers(9)} y{rng.integers(4)}" for _ in range(60))
        + "\n")
    err, want = _same_predictions(["-d", "d.vw", *flags], tmp_path, capfd, monkeypatch)
    assert err.split("finished run")[1] == want.split("finished run")[1]
    code, err = run_ts(capfd, ["-d", "d.vw", "--passes", "2", "-c", "-k",
                               "--holdout_period", "1"], tmp_path, monkeypatch)
    assert code == 2 and "--holdout_period 1" in err and "--holdout_off" in err


def test_early_terminate_0_is_refused_with_passes(tmp_path, capfd, monkeypatch):
    """--early_terminate 0 in one pass (not used) runs as VW's; with passes, where VW stops
    after the first whatever its holdout loss, it is refused naming the flag."""
    rng = np.random.default_rng(11)
    (tmp_path / "d.vw").write_text("\n".join(
        f"{rng.choice([-1, 1])} |a x{rng.integers(9)}" for _ in range(40)) + "\n")
    _same_predictions(["-d", "d.vw", "--early_terminate", "0"], tmp_path, capfd, monkeypatch)
    code, err = run_ts(capfd, ["-d", "d.vw", "--passes", "3", "-c", "-k",
                               "--early_terminate", "0"], tmp_path, monkeypatch)
    assert code == 2 and "--early_terminate must be >= 1, not 0" in err


def test_a_test_run_with_passes_is_refused(tmp_path, capfd, monkeypatch):
    """-t with --passes 2 (VW predicts each example twice, holding some out) is refused
    naming both flags; --passes 1 runs as VW's."""
    (tmp_path / "d.vw").write_text("1 |a x\n-1 |a y\n")
    run_vw(["-d", "d.vw", "-f", "m", "--quiet"], tmp_path)
    _same_predictions(["-d", "d.vw", "-t", "-i", "m", "--passes", "1"], tmp_path, capfd,
                      monkeypatch)
    code, err = run_ts(capfd, ["-d", "d.vw", "-t", "-i", "m", "--passes", "2", "-c", "-k"],
                       tmp_path, monkeypatch)
    assert code == 2 and "-t with --passes 2" in err


@pytest.mark.parametrize("flags", [["-t"], more(["-t", "-i", "small.model"]),
                                   more(["-t", "--min_prediction", "0.5",
                                         "--max_prediction", "0.7"])])
def test_the_best_constant_loss_under_test_only_is_vws_in_the_models_range(
        flags, tmp_path, capfd, monkeypatch):
    """-t keeps the model's label range ([0, 0] without -i; -i's, however small; the one
    given): VW's squared loss of a best constant outside it is the edge's loss continued
    along its slope (negative here), and the closing block prints it as VW does."""
    rng = np.random.default_rng(12)
    (tmp_path / "d.vw").write_text("\n".join(
        f"{1 if i % 20 == 0 else -1} |a x{rng.integers(9)}" for i in range(40)) + "\n")
    if "-i" in flags:
        (tmp_path / "s.vw").write_text("1e-5 |a x1\n3e-5 |a x2\n")
        run_vw(["-d", "s.vw", "-f", "small.model", "--quiet"], tmp_path)
    args = ["-d", "d.vw", *flags]
    code, err = run_ts(capfd, args, tmp_path, monkeypatch)
    assert code == 0, err
    want = run_vw(args, tmp_path).split("finished run")[1]
    assert err.split("finished run")[1] == want and "best constant's loss = -" in want


@pytest.mark.parametrize("flags", [["--max_prediction", "-0.5"],
                                   more(["--min_prediction", "0.5", "--max_prediction",
                                         "0.7", "-n", "2"])])
def test_the_best_constant_loss_in_a_fixed_range_is_vws(flags, tmp_path, capfd,
                                                        monkeypatch):
    """Training under --min_prediction/--max_prediction keeps the range given (the other
    bound 0): the closing block's best constant's loss is VW's get_loss of the constant in
    that range (on -n 2, VW's single-worker figure: it depends on the labels alone)."""
    rng = np.random.default_rng(13)
    (tmp_path / "d.vw").write_text("\n".join(
        f"{1 if i % 3 == 0 else -1} |a x{rng.integers(9)}" for i in range(60)) + "\n")
    args = ["-d", "d.vw", *flags]
    code, err = run_ts(capfd, args, tmp_path, monkeypatch)
    assert code == 0, err
    want = run_vw([a for a in args if a not in ("-n", "2")], tmp_path)
    line = [ln for ln in want.splitlines() if ln.startswith("best constant's loss")]
    assert line and line[0] in err.splitlines() and line[0] != "best constant's loss = " \
        "0.888889"  # (the plain squared loss of the mean -1/3)


def test_gzip_data_under_any_name_or_on_standard_input_is_read(tmp_path, capfd,
                                                                monkeypatch):
    """--compressed data in a file not named .gz, and piped in (-d -), is decompressed as
    VW's --compressed reads it: VW's predictions, its preamble naming the file given."""
    import gzip
    import io
    import sys

    rng = np.random.default_rng(14)
    text = "\n".join(f"{rng.choice([-1, 1])} |a x{rng.integers(9)} y:{rng.normal():.3f}"
                     for _ in range(50)) + "\n"
    (tmp_path / "d.dat").write_bytes(gzip.compress(text.encode(), mtime=0))
    args = ["--compressed", "-p", "p"]
    code, err = run_ts(capfd, ["-d", "d.dat", *args], tmp_path, monkeypatch)
    assert code == 0, err
    assert "Reading datafile = d.dat\n" in err
    ts = (tmp_path / "p").read_text()
    run_vw(["-d", "d.dat", *args], tmp_path)
    assert ts == (tmp_path / "p").read_text() and len(set(ts.split())) > 10
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(
        (tmp_path / "d.dat").read_bytes())))
    code, err = run_ts(capfd, ["-d", "-", *args], tmp_path, monkeypatch)
    assert code == 0, err
    assert (tmp_path / "p").read_text() == ts


@pytest.mark.parametrize("flags", [[], more(["--passes", "2", "-c", "-k"])])
def test_the_label_section_is_read_past_its_first_tab(flags, tmp_path, capfd, monkeypatch):
    """VW reads a line's label section from past its first tab: ``-1\\t|a x`` and
    ``-1 2\\t|a x`` are unlabelled, ``1\\t'tg|a x`` is tagged, ``1\\t2 |a x`` has label 2;
    the compiled parser hands such lines to the numba one: VW's predictions, tags, table
    and closing block."""
    rng = np.random.default_rng(15)
    heads = ["-1\t", "-1 2\t", "1\t'tg", "1\t2 ", "-1  \t", "1 ", "-1 0.5 't"]
    (tmp_path / "d.vw").write_text("\n".join(
        f"{heads[i % 7]}|a x{rng.integers(5)} |b y{rng.integers(3)}" for i in range(40))
        + "\n")
    err, want = _same_predictions(["-d", "d.vw", *flags], tmp_path, capfd, monkeypatch)
    assert err.split("loss     last")[1] == want.split("loss     last")[1]


def test_a_hexadecimal_label_is_read_as_cs_strtof_reads_it(tmp_path, capfd, monkeypatch):
    """A label word VW's number reader hands to C's ``strtof``: hexadecimal (``0x10`` is
    16, ``0X1.8p1`` 3, ``0x1p-2`` 0.25; ``0x`` and ``0xg`` read the 0): VW's predictions and
    closing block."""
    (tmp_path / "d.vw").write_text("0x10 |a f g\n-1 |a g\n0X1.8p1 2 |a h\n-0x2 |a f\n"
                                   "0x |a q\n0xg |a z\n0x1p-2 |a f\n")
    err, want = _same_predictions(["-d", "d.vw"], tmp_path, capfd, monkeypatch)
    assert err.split("finished run")[1] == want.split("finished run")[1]
    assert "weighted label sum = 19.250000" in err
