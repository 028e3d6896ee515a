"""`terascale vw` against the vowpalwabbit package on the label sections VW reads with a
warning (a word that is no number or NaN read as 0, a label of more than three words
read unlabelled) and on a namespace without a name with a scale (``|:2``: VW warns
that the example is malformed and drops the rest of its line): its lines on standard
output, once, its table, closing block and predictions; every other front end refuses
those lines with the file and line."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _vw_runs import FULL, more

pytest.importorskip("vowpalwabbit")

ROWS = ("1 |a f\n# text |a f\n1 2 0 4 |a g\n-1 abc |a f\nnan 1 nan |a g\n"
        "1 2 0 4 5 'tag|a f\n-1 |a g\n- |a f g\n1 |a f |:1.5 g |b h\n-1 |:2 f\n"
        "1 |a :2 b|:x f\r\n")


def _outputs(cmd: list[str], args: list[str], cwd) -> tuple[str, str, str]:
    """(standard output, standard error from the progress table on, -p's file)."""
    r = subprocess.run([*cmd, *args, "-p", "p"], cwd=cwd, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    table = r.stderr.find("average  since") if "--bfgs" not in args else \
        r.stderr.find("\n 1 ")  # (--bfgs: its passes' table)
    assert table >= 0, r.stderr
    return r.stdout, r.stderr[table:], (cwd / "p").read_text()


def _apart(out: tuple[str, str, str]) -> tuple[str, str, str, str]:
    """The lines VW prints as it parses apart from those it prints as it learns: its
    parser thread runs ahead of the learner, so VW interleaves them at random."""
    parsed = [ln for ln in out[0].splitlines(True)
              if "good float" in ln or "tokens" in ln or "malformed example!" in ln]
    learned = [ln for ln in out[0].splitlines(True) if ln not in parsed]
    return "".join(parsed), "".join(learned), out[1], out[2]


@pytest.mark.parametrize("flags", [
    ["-P", "1"],  # the compiled learner, the C parser handing the lines over
    more(["--passes", "2", "-c", "-k", "-P", "2"]),  # (in CI: the test below's)
    more(["-t", "-P", "1"]), more(["--sgd", "-P", "1"]),
    more(["--bfgs", "--passes", "2", "-c", "-k"]), more(["--binary", "-l", "0.1"]),
    more(["-q", "ab", "--ignore_linear", "a", "-P", "3"]),
])
def test_label_sections_vw_warns_of_are_read_as_vw(flags, tmp_path):
    (tmp_path / "d.vw").write_text(ROWS * 3)
    args = ["-d", "d.vw", *flags]
    vw = _apart(_outputs([sys.executable, "-m", "vowpalwabbit"], args, tmp_path))
    ts = _apart(_outputs([sys.executable, "-m", "terascale", "vw"], args, tmp_path))
    assert vw[0].count("is not a good float") == 15 and vw[0].count("too many tokens") == 6
    assert vw[0].count("malformed example!") == 18
    assert ts == vw


@pytest.mark.parametrize("flags", [
    ["--binary", "--loss_function", "hinge", "--passes", "2", "-c", "-k", "-P", "3"],
    more(["--loss_function", "hinge", "-P", "1"]), more(["--binary", "-P", "1"]),
    more(["-t", "-i", "m", "--binary", "--loss_function", "hinge"]),
    more(["-t", "-i", "m", "--loss_function", "hinge", "-P", "1"]),
    more(["--loss_function", "logistic", "--passes", "2", "-c", "-k", "-P", "1"]),
    more(["-t", "-i", "m", "--loss_function", "logistic"]),
    ["--sgd", "--binary", "--loss_function", "hinge", "-P", "1"],  # (VW's other rules)
])
def test_labels_binary_and_the_loss_do_not_expect_are_told_of_as_vw(flags, tmp_path):
    """A label other than -1 and 1: --binary's ``[error]`` line (one per labelled example
    and pass, at weight 0 and held out too) and the hinge loss's ``[warning]`` (logistic's
    outside [-1, 1]: two where VW learns, one held out or under -t, none at weight 0), as
    VW's, in its order; with label sections VW warns of (their lines on pass 1 only: the
    second is read from the cache)."""
    rows = ("1 |a f\n0 |a g\n0.5 |a f\n0 0 |a g\n-1e-3 |a f\n1e20 |a f\n |a f\n-1 |a g\n"
            "abc |a f\n1 2 0 4 |a g\n")
    (tmp_path / "d.vw").write_text(rows + "3 2 |a f\n-0 |a f\n" + rows)
    vw = [sys.executable, "-m", "vowpalwabbit"]
    if "-i" in flags:
        subprocess.run([*vw, "-d", "d.vw", "-f", "m", "--quiet"], cwd=tmp_path, check=True,
                       timeout=120)
    args = ["-d", "d.vw", *flags]
    want = _apart(_outputs(vw, args, tmp_path))
    ts = _apart(_outputs([sys.executable, "-m", "terascale", "vw"], args, tmp_path))
    assert want[0].count("good float") == 2 and want[0].count("too many tokens") == 2
    assert ("as loss function expects" in want[1]) == ("--binary" in flags)
    assert ("the hinge loss function expects" in want[1]) == ("hinge" in flags)
    assert ("the logistic loss function expects" in want[1]) == ("logistic" in flags)
    assert ts == want


@FULL
def test_with_n_workers_rank_0_prints_its_shards_lines(tmp_path):
    """-n 2 over two files: worker 0 reads the first, whose lines it prints as VW's run on
    that file does (the table and closing block are the job's)."""
    (tmp_path / "d.vw").write_text(ROWS * 2)
    (tmp_path / "e.vw").write_text("1 |a f\nabc |a g\n")
    r = subprocess.run([sys.executable, "-m", "terascale", "vw", "-d", "d.vw", "-d", "e.vw",
                        "-n", "2"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout == _outputs([sys.executable, "-m", "vowpalwabbit"], ["-d", "d.vw"],
                                tmp_path)[0]


@FULL
def test_a_second_run_from_terascales_cache_prints_them_as_vw_parsing_again(tmp_path):
    """terascale's cache outlives the run (VW's -k removes its own): the lines come from
    the cache on a later run's first pass, as VW prints them when it parses again."""
    (tmp_path / "d.vw").write_text(ROWS)
    args = ["-d", "d.vw", "--passes", "2", "-c", "-k", "--holdout_off"]
    ts = [_outputs([sys.executable, "-m", "terascale", "vw"], args, tmp_path)
          for _ in range(2)]
    assert ts[1] == ts[0] == _outputs([sys.executable, "-m", "vowpalwabbit"], args, tmp_path)


@pytest.mark.parametrize("line", ["abc |a f", "# text |a f", "1 nan |a f", "1 2 0 4 |a f"])
def test_terascale_linear_and_the_api_refuse_them_with_the_file_and_line(line, tmp_path,
                                                                          capfd):
    import terascale.linear as tl
    from terascale import DataError
    from terascale.cli import main

    path = tmp_path / "d.vw"
    path.write_text(f"1 |a f\n{line}\n")
    with pytest.raises(DataError, match=r"d\.vw, line 2: the label section has "):
        tl.train(str(path), holdout=0, cache=False)
    capfd.readouterr()
    assert main(["linear", "train", str(path), "-f", str(tmp_path / "m"), "--quiet"]) == 2
    assert "d.vw, line 2: the label section has " in capfd.readouterr().err
