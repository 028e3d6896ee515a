"""The launcher's combination of survivors' reports into the cause of a stall."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from terascale.launch._blame import blame_stall, is_stopped, waited_for


def _timeout(rank: int, *peers: str) -> list[bytes]:
    return [b"Traceback (most recent call last):\n",
            f"terascale._errors.PeerTimeout: rank {rank}: allreduce #1 (ring,float64[10],sum) "
            f"timed out after 5.0 s waiting for {', '.join(peers)}\n".encode()]


def test_waited_for_reads_job_ranks_not_communicator_ranks() -> None:
    tail = _timeout(0, "rank 3 (rank 1 of this communicator) (receive)", "rank 2 (send)")
    assert waited_for(tail) == {2, 3}
    assert waited_for([b"...timed out after 1.5 s waiting for rank 4 (shared memory)\n"]) == {4}


def test_a_chain_of_waits_blames_the_running_rank_at_its_end() -> None:
    # ring of 4, rank 1 stalled: 0 waits on 3 and gave up first; 3 and 2 merely echo it.
    failed = {0: _timeout(0, "rank 3 (receive)"), 3: [b"aborted because rank 0 ...\n"],
              2: [b"aborted because rank 0 ...\n"]}
    b = blame_stall(failed, [0], running=[1], stopped=[])
    assert b is not None and b.ranks == [1] and "nobody heard from it" in b.why


def test_a_stopped_rank_is_blamed_over_what_the_reports_say() -> None:
    failed = {0: _timeout(0, "rank 3 (receive)"), 2: _timeout(2, "rank 1 (receive)")}
    b = blame_stall(failed, [0, 2], running=[1, 3], stopped=[1])
    assert b is not None and b.ranks == [1] and "rank 2 timed out waiting for it" in b.why


def test_a_running_rank_that_others_waited_for() -> None:
    failed = {0: _timeout(0, "rank 2 (receive)"), 1: _timeout(1, "rank 2 (receive)")}
    b = blame_stall(failed, [0, 1], running=[2], stopped=[])
    assert b is not None and b.ranks == [2] and "ranks 0, 1 timed out" in b.why


def test_a_cut_off_rank_is_the_one_everybody_waited_on() -> None:
    failed = {0: _timeout(0, "rank 2 (receive)"), 1: _timeout(1, "rank 2 (receive)"),
              2: _timeout(2, "rank 0 (receive)"), 3: _timeout(3, "rank 2 (send)")}
    b = blame_stall(failed, [0, 1, 2, 3], running=[], stopped=[])
    assert b is not None and b.ranks == [2] and "cut off" in b.why


def test_a_crash_is_not_a_stall() -> None:
    failed = {1: [b"ZeroDivisionError: division by zero\n"], 0: _timeout(0, "rank 2 (receive)")}
    assert blame_stall(failed, [1, 0], running=[2], stopped=[]) is None
    ring = {r: _timeout(r, f"rank {(r - 1) % 3} (receive)") for r in range(3)}
    assert blame_stall(ring, [0, 1, 2], running=[], stopped=[]) is None  # no single culprit


def test_is_stopped_sees_sigstop() -> None:
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not is_stopped(p.pid)
        os.kill(p.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while not is_stopped(p.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert is_stopped(p.pid)
    finally:
        p.kill()
        p.wait()
