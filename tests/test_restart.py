"""Kill a worker with SIGKILL mid-training; the restarted job ends bitwise identical."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = str(Path(__file__).parent.parent / "examples" / "restart_training.py")


def _train(tmp_path: Path, name: str, *extra: str) -> tuple[bytes, subprocess.CompletedProcess]:
    out = tmp_path / f"{name}.npy"
    res = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "3", *extra[:2],
                          sys.executable, EXAMPLE, "--out", str(out), "--ckpt",
                          str(tmp_path / f"ck-{name}"), *extra[2:]],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return out.read_bytes(), res


def test_sigkill_and_restart_gives_bitwise_identical_model(tmp_path: Path) -> None:
    clean, _ = _train(tmp_path, "clean", "--max-restarts", "0")
    crashed, res = _train(tmp_path, "crash", "--max-restarts", "1", "--crash-at", "13")
    assert "restarting all 3 workers" in res.stderr
    assert "rank 1 failed first (exit status 137)" in res.stderr
    assert crashed == clean


def test_checkpoint_survives_torn_write(tmp_path: Path) -> None:
    import numpy as np

    import terascale

    ck = terascale.Checkpoint(tmp_path)
    ck.save(1, {"w": np.arange(3)})
    ck.save(2, {"w": np.arange(4)})
    newest = tmp_path / "step-000000000002.ckpt"
    newest.write_bytes(newest.read_bytes()[:-5])  # torn: checksum fails
    step, state = ck.load()
    assert step == 1 and state["w"].tolist() == [0, 1, 2]
