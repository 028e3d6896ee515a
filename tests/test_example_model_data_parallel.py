"""examples/model_data_parallel.py: model x data parallelism over two splits gives the
single-worker result, on real workers launched by ``terascale run``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "model_data_parallel.py"


def _run(n: int, shards: int) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "terascale", "run", "-n", str(n), "--timeout", "60",
           sys.executable, str(EXAMPLE), "--shards", str(shards), "--steps", "30"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)


def _numbers(text: str) -> tuple[float, float]:
    m = re.search(r"loss ([0-9.]+), \|w\| ([0-9.]+)", text)
    assert m, text
    return float(m.group(1)), float(m.group(2))


def test_slices_and_copies_agree_with_one_worker() -> None:
    alone = subprocess.run([sys.executable, str(EXAMPLE), "--steps", "30"], capture_output=True,
                           text=True, timeout=60, cwd=ROOT)
    assert alone.returncode == 0, alone.stderr
    ref = _numbers(alone.stdout)
    for n, shards in ((4, 2), (3, 3)):
        res = _run(n, shards)
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"{n} workers = {shards} slices x {n // shards} copies" in res.stdout
        assert _numbers(res.stdout) == pytest.approx(ref, rel=1e-10)


def test_shards_must_divide_the_workers() -> None:
    res = _run(2, 3)
    assert res.returncode != 0 and "--shards 3 must divide the number of workers 2" in \
        res.stdout + res.stderr
