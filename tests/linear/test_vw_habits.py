"""`terascale vw` against the vowpalwabbit package on a VW user's everyday habits: a model
trained with ``--binary`` read by the other tool, and ``-t -i A -f B`` (VW's way to
convert or inspect a model without learning)."""

from __future__ import annotations

import pytest
from _vw_runs import numbers, run_ts, run_vw

pytest.importorskip("vowpalwabbit")


def _data(path, n=120):
    lines = []
    for i in range(n):
        y = 1 if (i * 7919) % 3 else -1
        lines.append(f"{y} {1 + i % 3} 0 'e{i}|a:.5 x{i % 9}:1e-3 x{i % 9} y{i % 4}:-2.5e1 "
                     f"|b |c z{i % 5} z{i % 5}:2")
    path.write_text("\n".join(lines))  # (the last line without its newline)


def test_binary_is_kept_in_the_model_and_applied_by_the_other_tool(tmp_path, capfd,
                                                                    monkeypatch):
    """VW keeps --binary in its model and applies it to -i's predictions: -1/1 lines."""
    _data(tmp_path / "d.vw")
    train = ["-d", "d.vw", "--loss_function", "hinge", "--binary", "--quiet"]
    run_vw([*train, "-f", "vw.m"], tmp_path)
    code, err = run_ts(capfd, [*train, "-f", "ts.m"], tmp_path, monkeypatch)
    assert code == 0, err
    test = ["-t", "-d", "d.vw", "--quiet"]
    run_vw([*test, "-i", "vw.m", "-p", "ref.p"], tmp_path)
    run_vw([*test, "-i", "ts.m", "-p", "vw.p"], tmp_path)  # VW with terascale's model
    code, err = run_ts(capfd, [*test, "-i", "vw.m", "-p", "ts.p"], tmp_path, monkeypatch)
    assert code == 0, err  # (a model of --binary was refused)
    ref = numbers(tmp_path / "ref.p")
    assert set(ref) == {-1.0, 1.0}
    for name in ("vw.p", "ts.p"):
        assert (numbers(tmp_path / name) == ref).all(), name


def test_test_only_writes_the_model_it_tested_with(tmp_path, capfd, monkeypatch):
    """``-t -i A -f B --readable_model R`` writes B and R from A, nothing learned, as VW
    does (they were silently left unwritten)."""
    _data(tmp_path / "d.vw")
    run_vw(["-d", "d.vw", "-q", "ac", "-f", "a.m", "--quiet"], tmp_path)
    code, err = run_ts(capfd, ["-t", "-d", "d.vw", "-i", "a.m", "-f", "b.m",
                               "--readable_model", "b.txt", "--invert_hash", "b.inv"],
                       tmp_path, monkeypatch)
    assert code == 0, err
    for name in ("b.txt", "b.inv"):
        assert "options: --quadratic ac" in (tmp_path / name).read_text(), name
    assert "a^x1" in (tmp_path / "b.inv").read_text()
    test = ["-t", "-d", "d.vw", "--quiet"]
    run_vw([*test, "-i", "a.m", "-p", "a.p"], tmp_path)
    run_vw([*test, "-i", "b.m", "-p", "b.p"], tmp_path)
    assert len(numbers(tmp_path / "a.p")) == 120
    assert (numbers(tmp_path / "a.p") == numbers(tmp_path / "b.p")).all()


def test_training_continued_in_steps_carries_vws_t(tmp_path, capfd, monkeypatch):
    """VW carries -i's ``t`` on (it resets the other counters): the third step's preamble
    (``initial_t``) and the readable model's ``t`` are VW's; ``t`` counts the weight of the
    unlabelled examples too."""
    lines = [f"{'' if i % 7 == 0 else 1 - 2 * (i % 3 == 0)} 'e{i}|a x{i % 9} |c z{i % 5}"
             for i in range(120)]
    (tmp_path / "h1.vw").write_text("\n".join(lines[:60]) + "\n")
    (tmp_path / "h2.vw").write_text("\n".join(lines[60:]) + "\n")
    for who, run in (("vw", lambda a: (0, run_vw(a, tmp_path))),
                     ("ts", lambda a: run_ts(capfd, a, tmp_path, monkeypatch))):
        assert run(["-d", "h1.vw", "-f", f"{who}1", "--quiet"])[0] == 0
        assert run(["-i", f"{who}1", "-d", "h2.vw", "-f", f"{who}2",
                    "--readable_model", f"{who}.txt", "--quiet"])[0] == 0
    want = run_vw(["-i", "vw2", "-d", "h1.vw"], tmp_path)
    code, got = run_ts(capfd, ["-i", "ts2", "-d", "h1.vw"], tmp_path, monkeypatch)
    assert code == 0, got
    t = [ln for ln in want.splitlines() if ln.startswith("initial_t")]
    assert t and t == [ln for ln in got.splitlines() if ln.startswith("initial_t")]
    assert (tmp_path / "vw.txt").read_text() == (tmp_path / "ts.txt").read_text()


def test_invert_hash_with_predict_only_model_is_vws(tmp_path, capfd, monkeypatch):
    """``--invert_hash`` with ``--predict_only_model``: VW's weights-only text, as
    ``--readable_model`` (it was written in the save_resume form)."""
    _data(tmp_path / "d.vw")
    args = ["-d", "d.vw", "-q", "ac", "--predict_only_model", "--quiet", "--invert_hash"]
    run_vw([*args, "vw.inv"], tmp_path)
    code, err = run_ts(capfd, [*args, "ts.inv"], tmp_path, monkeypatch)
    assert code == 0, err
    want = (tmp_path / "vw.inv").read_text()
    assert "\n:0\n" in want and "a^x1*c^z1:" in want
    assert (tmp_path / "ts.inv").read_text() == want


def test_invert_hash_of_weights_the_data_does_not_name_is_vws(tmp_path, capfd,
                                                              monkeypatch):
    """``-i A --invert_hash`` on data without some of A's features: VW writes their
    weights by index alone, without a name."""
    _data(tmp_path / "d.vw")
    run_vw(["-d", "d.vw", "-q", "ac", "-f", "a.m", "--quiet"], tmp_path)
    (tmp_path / "few.vw").write_text("1 |a x1 y2\n-1 |c z3\n")
    args = ["-d", "few.vw", "-i", "a.m", "--quiet", "--invert_hash"]
    run_vw([*args, "vw.inv"], tmp_path)
    code, err = run_ts(capfd, [*args, "ts.inv"], tmp_path, monkeypatch)
    assert code == 0, err
    want = (tmp_path / "vw.inv").read_text()
    assert "a^x1:" in want and any(ln.count(":") == 1 and ln[0].isdigit()
                                   for ln in want.splitlines())
    assert (tmp_path / "ts.inv").read_text() == want


def test_string_feature_values_are_vws_name_caret_value(tmp_path, capfd, monkeypatch):
    """``color:red`` is VW 9's feature ``color^red`` (value 1, the value hashed with the
    name's hash as seed), in predictions, -q and --invert_hash; ``nan`` and ``2a`` stay
    errors naming the line (VW reads them as 0 and 2)."""
    rows = [f"{1 - 2 * (i % 3 == 0)} |u color:{['red', 'blue', 'Grün'][i % 3]} age:{i % 50}"
            f" |i cat:{['book', 'toy'][i % 2]}" for i in range(90)]
    (tmp_path / "s.vw").write_text("\n".join(rows) + "\n")
    args = ["-d", "s.vw", "-q", "ui", "--quiet", "--invert_hash"]
    run_vw([*args, "vw.inv", "-p", "vw.p"], tmp_path)
    code, err = run_ts(capfd, [*args, "ts.inv", "-p", "ts.p"], tmp_path, monkeypatch)
    assert code == 0, err
    assert (numbers(tmp_path / "ts.p") == numbers(tmp_path / "vw.p")).all()
    want = (tmp_path / "vw.inv").read_text()
    assert "u^color^red*i^cat^book:" in want
    assert (tmp_path / "ts.inv").read_text() == want
    for bad in ("x:nan", "x:2a"):
        (tmp_path / "b.vw").write_text(f"1 |a y\n1 |a {bad}\n")
        code, err = run_ts(capfd, ["-d", "b.vw"], tmp_path, monkeypatch)
        assert code != 0 and "b.vw, line 2: a feature value is not a number" in err, err
