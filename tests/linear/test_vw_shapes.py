"""`terascale vw` against the vowpalwabbit package on a user's data shapes and daily
command lines: the model files byte for byte (after the version string) where the
numba pass of VW's other update rules writes them."""

from __future__ import annotations

import pytest
from _vw_runs import ab_lines, real_label, run_ts, run_vw

pytest.importorskip("vowpalwabbit")


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
