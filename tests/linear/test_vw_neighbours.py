"""The flags next to the daily ones (``--constant`` with ``--noconstant``,
``--min_prediction`` alone, ...) against the vowpalwabbit package: the prediction and model
files byte for byte and the closing block, on a few lines of data each. CI runs the first
cases; ``make test-vw`` (``TERASCALE_VW_SUITE=all``) the ones marked ``FULL``."""

from __future__ import annotations

import pytest
from _vw_runs import run_ts, run_vw

pytest.importorskip("vowpalwabbit")


def _both(tmp_path, capfd, monkeypatch, lines: list[str], flags: list[str],
          files: tuple[str, ...] = ("p",)) -> None:
    """``flags`` on ``lines`` through VW and ``terascale vw``, each in its own folder:
    ``-p p`` (and the other ``files`` the flags name) and the closing block equal."""
    for who in ("vw", "ts"):
        (tmp_path / who).mkdir()
        (tmp_path / who / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", *flags, "-p", "p"]
    want = run_vw(args, tmp_path / "vw")
    code, got = run_ts(capfd, args, tmp_path / "ts", monkeypatch)
    assert code == 0, got
    for name in files:
        assert (tmp_path / "ts" / name).read_bytes() == (tmp_path / "vw" / name).read_bytes(), name
    assert got[got.index("finished run"):] == want[want.index("finished run"):]


def test_constant_with_noconstant_starts_the_constants_slot(tmp_path, capfd, monkeypatch):
    """``--constant 2 --noconstant``: no constant feature, but VW still starts the weight
    at the constant's slot at 2, which a feature hashed there (``x9`` at ``-b 4``) meets."""
    lines = ["1 |a x1 x2", "-1 |a x3 x4", "1 |a x5 x6", "-1 |a x7 x8", "1 |a x9",
             "-1 |b y1 y2 y3"]
    _both(tmp_path, capfd, monkeypatch, lines,
          ["-b", "4", "--constant", "2", "--noconstant", "--readable_model", "rm"],
          files=("p", "rm"))


def test_invert_hash_names_a_slot_by_an_ignore_linear_feature_first_seen(tmp_path, capfd,
                                                                         monkeypatch):
    """``--invert_hash`` with ``--ignore_linear a -q ab``: VW names a slot by the first
    feature hashed there, ``a``'s linear features (left out of learning) included, so a
    pair sharing the slot with an earlier ``a^x`` is listed under ``a^x``'s name."""
    lines = ["1 |a x1 x2 |b y1 y2", "-1 |a x3 |b y3 y4", "1 |a x5 x6 |b y5",
             "-1 |a x7 |b y1 y6", "1 |a x2 x8 |b y2 y3"]
    _both(tmp_path, capfd, monkeypatch, lines,
          ["-b", "4", "-q", "ab", "--ignore_linear", "a", "--invert_hash", "ih"],
          files=("p", "ih"))
