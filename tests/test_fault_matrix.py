"""The fault matrix: every injected fault x every allreduce algorithm, under ``terascale run``,
each repeated (``--max-restarts``: the same fault again in the restarted group).

For every cell: the launcher exits non-zero and names the faulty rank (or, for a mismatch,
every rank raises ``CollectiveMismatch``), no worker outlives the job and nothing is left
in ``/dev/shm``. ``TERASCALE_FAULT_ROUNDS=N`` repeats each cell N times (default 2) for a
soak run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from terascale.collectives.registry import allreduce_names
from terascale.launch import job_prefix

ROUNDS = int(os.environ.get("TERASCALE_FAULT_ROUNDS", "2"))
FAULTS = {
    "sigkill": "os.kill(os.getpid(), signal.SIGKILL)",
    "exception": "raise RuntimeError('injected fault')",
    "sigstop": "os.kill(os.getpid(), signal.SIGSTOP)",
    "exit0": "os._exit(0)",  # a rank that quits silently mid-job
    "mismatch": "x = x.astype(np.float32)",
}
BLAME = {
    "sigkill": "rank 2 failed first (exit status 137)",
    "exception": "rank 2 failed first (exit status 1)",
    "sigstop": "rank 2 stalled (its process was stopped)",
}

_JOB = """
import os, signal, sys, numpy as np, terascale
comm = terascale.init()
algo = {algo!r}
x = np.ones(50_000)
comm.allreduce(x, algorithm=algo)  # links and segments exist now
with open({pids!r}, "a") as f:
    f.write(f"{{comm.job}} {{os.getpid()}}\\n")
for i in range(40):
    if comm.rank == 2 and i == 3:
        {fault}
    comm.allreduce(x, algorithm=algo)
"""


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("algo", allreduce_names())
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault_matrix(tmp_path: Path, fault: str, algo: str) -> None:
    pids = tmp_path / "pids"
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(_JOB).format(algo=algo, pids=str(pids), fault=FAULTS[fault]))
    hosts = ["--hosts", "a,b"] if algo == "hierarchical" else []
    res = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "3", "--timeout", "2",
                          "--max-restarts", str(ROUNDS - 1), *hosts, sys.executable, str(job)],
                         capture_output=True, text=True, timeout=60 + 15 * ROUNDS)
    assert res.returncode != 0, res.stderr
    summaries = res.stderr.split("\nterascale run: ")[1:]
    assert len([s for s in summaries if not s.startswith("restarting")]) == ROUNDS, res.stderr
    if fault in BLAME:
        assert res.stderr.count(BLAME[fault]) == ROUNDS, res.stderr
    elif fault == "exit0":
        assert res.stderr.count("rank 2 ") >= ROUNDS, res.stderr
    else:
        for rank in range(3):
            assert res.stderr.count(f"[{rank}] terascale._errors.CollectiveMismatch") >= ROUNDS, \
                res.stderr
    lines = [ln.split() for ln in pids.read_text().splitlines()]
    assert len(lines) == 3 * ROUNDS
    assert not [pid for _, pid in lines if _alive(int(pid))], "a worker outlived the job"
    jobs = {j for j, _ in lines}
    left = [n for n in os.listdir("/dev/shm") if any(n.startswith(job_prefix(j)) for j in jobs)]
    assert not left, left
