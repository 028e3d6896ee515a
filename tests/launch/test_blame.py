"""The launcher's combination of survivors' reports into the cause of a failure: a stall,
a rank that left early (exit 0 mid-job), a rank whose failure the others echo but which
exits after them -- on one node and across nodes."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from terascale.launch._blame import blame_leaver, blame_stall, echoed, is_stopped, waited_for

JOB = str(Path(__file__).parent / "_blame_job.py")


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


def test_echoes_name_their_cause() -> None:
    assert echoed([b"PeerLost: rank 0: allreduce #1 lost peer rank 2 (connection closed)\n"]) == 2
    assert echoed([b"PeerTimeout: rank 1: ... aborted because rank 3 failed: rank 3: ...\n"]) == 3
    assert echoed([b"StorageError: rank 1: rank 0: checkpoint save: cannot write x\n"]) == 0
    assert echoed([b"StorageError: rank 0: checkpoint save: cannot write x\n"]) is None
    assert echoed([b"ValueError: rank 1: rank 1: odd but its own\n"]) is None
    b = blame_leaver({2: [b"... lost peer rank 1 (connection closed)\n"]}, [3, 1])
    assert b is not None and b.ranks == [1] and "rank 2 still needed it" in b.why
    assert blame_leaver({2: [b"... lost peer rank 1\n"]}, []) is None


def _run(mode: str, tmp_path: Path, victim: int = 1) -> str:
    env = {**os.environ, "JOB_MODE": mode, "JOB_RANK": str(victim),
           "JOB_CKPT": str(tmp_path / "ck")}
    p = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "3", "--timeout", "10",
                        sys.executable, JOB], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0, p
    return p.stderr


@pytest.mark.parametrize(("mode", "victim", "headline"), [
    ("leave", 1, "terascale run: rank 1 left the job early (it exited with status 0 while "
                 "rank "),
    ("raise", 1, "terascale run: rank 1 failed first (exit status 1)"),
    ("disk", 0, "terascale run: rank 0 failed first (exit status 1)")])
def test_the_headline_names_the_rank_that_left_or_failed_first(tmp_path: Path, mode: str,
                                                               victim: int,
                                                               headline: str) -> None:
    """The survivors (or the ranks told of rank 0's full disk) exit first, echoing the
    cause; the headline names the cause, not the first echo to exit."""
    err = _run(mode, tmp_path, victim)
    assert headline in err, err


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("mode", "headline", "why"), [
    ("leave", "rank 1 (node 1) failed first", "rank 1 left the job early"),
    ("disk", "rank 0 (node 0) failed first", "No space left on device")])
def test_across_nodes_the_rank_that_left_or_failed_first_is_named(tmp_path: Path, mode: str,
                                                                  headline: str,
                                                                  why: str) -> None:
    secret = tmp_path / "secret"
    secret.write_text(os.urandom(16).hex())
    secret.chmod(0o600)
    port = _port()
    env = {**os.environ, "JOB_MODE": mode, "JOB_RANK": "1", "JOB_CKPT": str(tmp_path / "ck")}
    procs = [subprocess.Popen(
        [sys.executable, "-m", "terascale", "run", "-n", "1", "--nnodes", "2", "--node-rank",
         str(k), "--host-id", f"node{k}", "--rendezvous", f"127.0.0.1:{port}",
         "--secret-file", str(secret), "--timeout", "10", sys.executable, JOB],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(2)]
    try:
        errs = [p.communicate(timeout=120)[1] for p in procs]
    finally:
        for p in procs:
            p.kill()
    for k, err in enumerate(errs):
        assert f"terascale run: {headline}" in err and f"(this is node {k})" in err, err
        assert why in err.split("failed first", 1)[1], err
