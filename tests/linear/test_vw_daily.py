"""VW's daily flags against the vowpalwabbit package on small shapes of data: standard
input's preamble, each output byte for byte. CI runs one case of each; ``make test-vw``
(``TERASCALE_VW_SUITE=all``) runs every parametrization."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from _vw_runs import more, run_ts, run_vw, stdouts

pytest.importorskip("vowpalwabbit")


def _weighted(n: int, seed: int) -> list[str]:
    """Rows of a heavy-tailed real label with an importance weight, two namespaces."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        x = rng.normal(size=3)
        y = x @ [1.0, -2.0, 0.5] + 2 * rng.standard_t(2)
        out.append(f"{y:.4f} {rng.choice([0.5, 1, 2, 5])} |n "
                   + " ".join(f"x{j}:{x[j]:.4f}" for j in range(3))
                   + f" |c u{rng.integers(20)}")
    return out


@pytest.mark.parametrize("src", [[], more(["-d", "-"])])
def test_standard_input_is_named_stdin_as_vw_names_it(src, tmp_path):
    """Standard input (no -d, or -d -) is VW's "Reading datafile = stdin", not the name of
    the copy terascale reads; the rest of standard error is VW's on the same data."""
    data = "\n".join(_weighted(200, 3)) + "\n"
    (tmp_path / "d.vw").write_text(data)
    want = run_vw(["-d", "d.vw", "-p", "vw.p", "-P", "17"], tmp_path)
    r = subprocess.run([sys.executable, "-m", "terascale", "vw", *src, "-p", "ts.p", "-P",
                        "17"], input=data, cwd=tmp_path, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Reading datafile = stdin\n" in r.stderr
    vw_lines = [ln.replace("predictions = vw.p", "predictions = ts.p")
                .replace("Reading datafile = d.vw", "Reading datafile = stdin")
                for ln in want.splitlines()
                if not ln.startswith(("Enabled learners", "Input label", "Output pred"))]
    assert r.stderr.splitlines() == vw_lines
    assert (tmp_path / "ts.p").read_bytes() == (tmp_path / "vw.p").read_bytes()


@pytest.mark.parametrize("k, bits", [(256, 23), more(7, 28)])
def test_a_one_against_all_model_of_31_index_bits_moves_both_ways(k, bits, tmp_path,
                                                                    capfd, monkeypatch):
    """--oaa K -b B with B + log2 K >= 31 (-b 28 --oaa 7): -f writes VW's 32-bit indices
    (VW chooses them by -b alone), which terascale's -i and VW's read back as VW's model."""
    rng = np.random.default_rng(5)
    lines = []
    for _ in range(150):
        c = int(rng.integers(1, k + 1))
        lines.append(f"{c} |t w{c} w{c + 1} v{rng.integers(9)} |m n:{rng.normal():.3f}")
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    flags = ["-d", "d.vw", "--oaa", str(k), "-b", str(bits), "-q", "tm"]
    run_vw([*flags, "-f", "vw.m"], tmp_path)
    code, err = run_ts(capfd, [*flags, "-f", "ts.m"], tmp_path, monkeypatch)
    assert code == 0, err
    run_vw(["-d", "d.vw", "-t", "-i", "vw.m", "-p", "vw.p"], tmp_path)
    run_vw(["-d", "d.vw", "-t", "-i", "ts.m", "-p", "vw_ts.p"], tmp_path)
    code, err = run_ts(capfd, ["-d", "d.vw", "-t", "-i", "vw.m", "-p", "ts_vw.p"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    want = (tmp_path / "vw.p").read_bytes()
    assert (tmp_path / "vw_ts.p").read_bytes() == want
    assert (tmp_path / "ts_vw.p").read_bytes() == want

    def after_version(path):  # (terascale writes the version 9.0.0, VW its own)
        data = path.read_bytes()
        return data[4 + int.from_bytes(data[:4], "little"):]

    assert after_version(tmp_path / "ts.m") == after_version(tmp_path / "vw.m")


@pytest.mark.parametrize("label", ["2.5 3", more("2.5")])
def test_a_fraction_labels_error_is_vws_with_a_weight_and_without(label, tmp_path):
    """--oaa K stops at a label with a fraction with VW's error on standard output: VW's
    parser throws it at multiclass.cc:65 where a weight follows the label, :52 without."""
    rows = [f"{1 + i % 3} |a x{i % 5} y" for i in range(30)] + [f"{label} |a x1"]
    (tmp_path / "d.vw").write_text("\n".join(rows + rows[:5]) + "\n")
    vw, ts = stdouts(["-d", "d.vw", "--oaa", "3", "-p", "p"], tmp_path)
    # VW's parser thread throws the error as its learner prints "label 3 found": which
    # line comes first is a race in VW (its parser is usually ahead, as ours always is)
    assert sorted(ts.splitlines()) == sorted(vw.splitlines()) and "Malformed example" in vw
    assert ts.index("Malformed example") < ts.index("label 3 found")


def test_quantile_tau_without_the_quantile_loss_is_refused_as_vw_refuses_it(tmp_path, capfd,
                                                                             monkeypatch):
    """--quantile_tau with another loss (VW's default squared one here): VW stops with
    "Option 'quantile_tau' was passed but the quantile loss function is not being used";
    so does terascale vw, naming the flag, where it learned the squared loss."""
    (tmp_path / "d.vw").write_text("\n".join(_weighted(20, 4)) + "\n")
    r = subprocess.run([sys.executable, "-m", "vowpalwabbit", "-d", "d.vw", "--quantile_tau",
                        "0.3"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "quantile loss function is not being used" in r.stderr
    code, err = run_ts(capfd, ["-d", "d.vw", "--quantile_tau", "0.3"], tmp_path, monkeypatch)
    assert code == 2 and "--quantile_tau 0.3 goes with --loss_function quantile" in err
    code, err = run_ts(capfd, ["-d", "d.vw", "--quantile_tau", "0.3", "--loss_function",
                               "quantile"], tmp_path, monkeypatch)
    assert code == 0, err
