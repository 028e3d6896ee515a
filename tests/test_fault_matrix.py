"""The fault matrix: every injected fault x every allreduce algorithm, under ``terascale run``,
some repeated (``--max-restarts``: the same fault again in the restarted group).

For every cell: the launcher exits non-zero and names the faulty rank (or, for a mismatch,
every rank raises ``CollectiveMismatch``), no worker outlives the job and nothing is left
in ``/dev/shm``. The restart is the launcher's, the same for every algorithm: by default a
diagonal of the matrix runs it (every fault once and every algorithm once, each in a
restarted group; the other cells one round), which keeps the suite short.
``TERASCALE_FAULT_ROUNDS=N`` repeats every cell N times for a soak run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _segments import job_segments

from terascale.collectives.registry import allreduce_names

SOAK = os.environ.get("TERASCALE_FAULT_ROUNDS")
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
    "exit0": "rank 2 left the job early (it exited with status 0 while rank ",
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


def _rounds(fault: str, algo: str) -> int:
    """How many rounds (1 + restarts) a cell runs: 2 on the diagonal, else 1."""
    if SOAK is not None:
        return int(SOAK)
    fi, ai = sorted(FAULTS).index(fault), allreduce_names().index(algo)
    return 2 if fi == ai % len(FAULTS) or ai == fi % len(allreduce_names()) else 1


@pytest.mark.skipif(SOAK is not None, reason="TERASCALE_FAULT_ROUNDS sets every cell's rounds")
def test_the_diagonal_restarts_every_fault_and_every_algorithm() -> None:
    restarted = [(f, a) for f in FAULTS for a in allreduce_names() if _rounds(f, a) > 1]
    assert {f for f, _ in restarted} == set(FAULTS)  # an algorithm added later joins too
    assert {a for _, a in restarted} == set(allreduce_names())


FULL = os.environ.get("TERASCALE_MATRIX_FULL", "") not in ("", "0")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("algo", allreduce_names())
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_fault_matrix(tmp_path: Path, fault: str, algo: str) -> None:
    if fault == "sigstop" and algo not in ("ring", "hierarchical") and not FULL:
        # a stopped rank is found by the links' deadline, whatever the algorithm: CI runs
        # it under the flat and the two-level ring; make test-matrix under every one
        pytest.skip("the same deadline path: TERASCALE_MATRIX_FULL=1 (make test-matrix)")
    rounds = _rounds(fault, algo)
    pids = tmp_path / "pids"
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(_JOB).format(algo=algo, pids=str(pids), fault=FAULTS[fault]))
    hosts = ["--hosts", "a,b"] if algo == "hierarchical" else []
    res = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "3", "--timeout", "2",
                          "--max-restarts", str(rounds - 1), *hosts, sys.executable, str(job)],
                         capture_output=True, text=True, timeout=60 + 15 * rounds)
    assert res.returncode != 0, res.stderr
    summaries = res.stderr.split("\nterascale run: ")[1:]
    # one headline a round; the failing rank's one-line cause ("rank 2: RuntimeError: ...")
    # comes before it and is not counted
    headlines = [s for s in summaries
                 if not s.startswith("restarting") and not re.match(r"rank \d+: ", s)]
    assert len(headlines) == rounds, res.stderr
    if fault in BLAME:
        assert res.stderr.count(BLAME[fault]) == rounds, res.stderr
    else:
        for rank in range(3):
            assert res.stderr.count(f"[{rank}] terascale._errors.CollectiveMismatch") >= rounds, \
                res.stderr
    lines = [ln.split() for ln in pids.read_text().splitlines()]
    assert len(lines) == 3 * rounds
    assert not [pid for _, pid in lines if _alive(int(pid))], "a worker outlived the job"
    jobs = {j for j, _ in lines}
    left = job_segments(*jobs)
    assert not left, left
