"""VW's daily flags against the vowpalwabbit package on small shapes of data: standard
input's preamble, each output byte for byte. CI runs one case of each; ``make test-vw``
(``TERASCALE_VW_SUITE=all``) runs every parametrization."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from _vw_runs import more, run_vw

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
