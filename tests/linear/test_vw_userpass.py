"""`terascale vw` against the vowpalwabbit package on what a user's own command lines
write: ``-r``'s raw scores (before VW's clip to the label range) on every learner and
under ``-t``."""

from __future__ import annotations

import numpy as np
import pytest
from _vw_runs import ab_lines, numbers, run_ts, run_vw

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
