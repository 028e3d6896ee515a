"""torchrun's elastic restart on the "terascale" backend: after a rank is killed, the agent
restarts every worker (``--max-restarts``) and the new attempt joins a new terascale job
through the same torch store, as it does on gloo; real torchrun, real workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("_elastic_worker.py")


def test_torchrun_restarts_the_group_after_a_rank_is_killed(tmp_path: Path) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         "--max-restarts", "1", "--monitor-interval", "0.2", str(WORKER), str(tmp_path)],
        capture_output=True, text=True, timeout=150, env=env, cwd=ROOT)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-4000:]
    assert "rank 0 finished attempt 1" in out.stdout and "rank 1 finished attempt 1" in out.stdout
    first, second = (torch.load(tmp_path / f"rank{r}.pt") for r in (0, 1))
    assert first.keys() == second.keys()
    for k in first:
        assert torch.equal(first[k], second[k]), k  # one model on both ranks after the restart
