"""``terascale vw -n N`` as a command: its workers forked from the launcher, which has the
learner loaded (``_warm.forking``), learn the same model, bit for bit, as workers started
as programs of their own (``TERASCALE_EXEC_WORKERS=1``), and fail as those do."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from _linear_data import vw_lines

VW = [sys.executable, "-m", "terascale", "vw"]


def _vw(args: list[str], cwd, exec_workers: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "TERASCALE_EXEC_WORKERS": "1" if exec_workers else "0"}
    return subprocess.run([*VW, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env=env)


@pytest.mark.parametrize("flags", [
    ["--loss_function", "logistic", "-b", "18"],
    ["-q", "ab", "--passes", "3", "-c", "-k", "--holdout_off"],
    ["--loss_function", "logistic", "--l2", "1e-4", "--passes", "4", "-k", "-c"],
    ["--oaa", "3", "--passes", "2", "-c", "-k"],
])
def test_forked_workers_learn_the_exec_workers_model(tmp_path, flags):
    data = tmp_path / "train.vw"
    lines = vw_lines(3000, seed=11)
    if "--oaa" in flags:  # classes 1..3 (from the label's sign and a feature count)
        lines = [f"{(ln.split()[0] == '1') + 1 + (len(ln) % 2)} {ln.split(' ', 1)[1]}"
                 for ln in lines]
    data.write_text("\n".join(lines) + "\n")
    models = []
    for i, exec_workers in enumerate((False, True)):
        r = _vw([*flags, "-d", str(data), "-n", "2", "-f", f"m{i}", "--quiet"], tmp_path,
                exec_workers)
        assert r.returncode == 0, r.stderr
        models.append((tmp_path / f"m{i}").read_bytes())
    assert models[0] == models[1]  # forked or exec'd (and so run to run)


def test_a_forked_workers_error_names_its_rank_and_line(tmp_path):
    data = tmp_path / "bad.vw"
    lines = vw_lines(400, seed=3)
    lines[350] = "1 -1 |a x"  # in worker 1's half (a negative weight: refused)
    data.write_text("\n".join(lines) + "\n")
    r = _vw(["-d", str(data), "-n", "2", "--quiet"], tmp_path)
    assert r.returncode == 2, r.stderr
    assert "rank 1 failed first (exit status 2)" in r.stderr
    assert "bad.vw" in r.stderr and "line 351" in r.stderr
    # (the worker's error is the command's: terascale vw's, as with -n 1)
    assert "terascale vw: error: " in r.stderr and "terascale linear" not in r.stderr


def test_standard_input_is_read_once_by_forked_workers(tmp_path):
    """The launcher's copy of standard input outlives its workers (their exit removes
    none of the launcher's temporary files): ``--readable_model`` reads the model after."""
    data = "\n".join(vw_lines(1000, seed=5)) + "\n"
    r = subprocess.run([*VW, "-d", "-", "-n", "2", "-f", "m", "--invert_hash", "inv.txt",
                        "--quiet"], cwd=tmp_path, input=data, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "inv.txt").read_text().count("\n") > 10
