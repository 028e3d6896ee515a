"""The failure model, on real processes: dead peers, stalled peers, mismatched collectives.

Every rank must fail fast with an error naming itself, the peer and the operation; nothing
may hang.
"""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
from _segments import job_segments

from terascale.testing import run_workers


def _errors(outcomes: list) -> list[tuple[str, str]]:
    return [(o[1][0], o[1][1]) if o[0] == "error" else (o[0], "") for o in outcomes]


MISMATCHES = {
    "shape": lambda c: c.allreduce(np.ones(10 if c.rank else 20)),
    "shape_same_size": lambda c: c.allreduce(np.ones((2, 3) if c.rank else (3, 2))),
    "dtype": lambda c: c.allreduce(np.ones(10, np.float32 if c.rank == 1 else np.float64)),
    "op": lambda c: c.allreduce(np.ones(10), op="max" if c.rank == 2 else "sum"),
    "algorithm": lambda c: c.allreduce(np.ones(10), algorithm="ring" if c.rank else "tree"),
    # A broadcast root receives nothing, so it learns of the disagreement at its next call.
    "root": lambda c: [c.broadcast(np.ones(4), root=1 if c.rank == 3 else 0), c.barrier()],
    "order": lambda c: ([c.broadcast(np.ones(3)), c.allreduce(np.ones(3))] if c.rank == 0
                        else [c.allreduce(np.ones(3)), c.broadcast(np.ones(3))]),
    "large": lambda c: c.allreduce(np.ones(2_000_000 if c.rank == 0 else 3_000_000, np.float32),
                                   algorithm="ring"),
}


@pytest.mark.parametrize("case", sorted(MISMATCHES))
def test_mismatch_raises_on_every_rank(case: str) -> None:
    start = time.monotonic()
    out = _errors(run_workers(MISMATCHES[case], 4, expect_failure=True, timeout=30,
                              collective_timeout=20))
    assert time.monotonic() - start < 10, "mismatch must be detected, not timed out"
    for rank, (kind, text) in enumerate(out):
        assert kind == "CollectiveMismatch", (rank, kind, text)
        assert f"rank {rank}:" in text
    assert any("this rank called" in text for _, text in out)  # both sides shown


def _kill_during_large_allreduce(comm):
    if comm.rank == 3:
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        for _ in range(200):
            comm.allreduce(np.ones(4_000_000, np.float32))
    except Exception as e:
        raise type(e)(f"after {time.monotonic() - start:.2f}s: {e}") from None


def test_sigkill_peer_every_survivor_raises_peer_lost_fast() -> None:
    out = run_workers(_kill_during_large_allreduce, 4, expect_failure=True, timeout=30)
    assert out[3][0] == "killed"
    for rank in range(3):
        kind, (exc, text) = out[rank]
        assert kind == "error" and exc == "PeerLost", (rank, out[rank])
        assert "rank 3" in text and f"rank {rank}:" in text and "allreduce #" in text
        last = text.strip().splitlines()[-1]
        elapsed = float(last.split("after ")[1].split("s:")[0])
        assert elapsed < 0.3 + 2.0, text


def _stall(comm):
    if comm.rank == 1:
        os.kill(os.getpid(), signal.SIGSTOP)
    comm.allreduce(np.ones(10), timeout=1.5)


def test_stalled_peer_gives_peer_timeout() -> None:
    # (the stopped rank is killed at the harness's timeout: keep it short)
    out = run_workers(_stall, 3, expect_failure=True, timeout=6)
    assert out[1][0] == "timeout"  # still stopped; the harness killed it
    texts = []
    for rank in (0, 2):
        kind, (exc, text) = out[rank]
        assert exc == "PeerTimeout", text
        assert "timed out after 1.5 s" in text
        texts.append(text.strip().splitlines()[-1])
    # Each survivor names the peer it was waiting on (or forwards the first timeout): rank 2,
    # a leaf, waits on rank 0, which waits on the stalled rank 1; whichever deadline fires
    # first is what both report.
    assert all("waiting for rank" in t for t in texts)


def _pair_fault(comm, fault):
    x = np.ones(1024, np.float32)  # 4 KiB, two hosts: from the second call on, the TCP swap
    for i in range(20):
        if comm.rank == 1 and i == 5:
            if fault == "mismatch":
                comm.allreduce(x, op="max", algorithm="tree")
            os.kill(os.getpid(), signal.SIGKILL if fault == "sigkill" else signal.SIGSTOP)
        comm.barrier()
        # every algorithm of two ranks is the swap at this size; the fault meets the third
        comm.allreduce(x, out=x, algorithm=("tree", "ring", "halving_doubling")[i % 3])


@pytest.mark.parametrize("fault", ["sigkill", "sigstop", "mismatch"])
def test_two_rank_fast_path_still_fails_cleanly(fault: str) -> None:
    # (a stopped rank is killed at the harness's timeout: keep it short)
    out = run_workers(_pair_fault, 2, args=(fault,), expect_failure=True,
                      timeout=6 if fault == "sigstop" else 20,
                      host_ids=["a", "b"], collective_timeout=1.5)
    kind, (exc, text) = out[0]
    expect = {"sigkill": "PeerLost", "sigstop": "PeerTimeout", "mismatch": "CollectiveMismatch"}
    assert exc == expect[fault], text
    assert "rank 0:" in text and "rank 1" in text and ("allreduce #" in text or
                                                       "barrier #" in text), text
    if fault == "sigstop":
        assert "timed out after 1.5 s" in text
    if fault == "mismatch":
        assert out[1][1][0] == "CollectiveMismatch", out[1]


def _use_after_failure(comm):
    if comm.rank == 1:
        comm.allreduce(np.ones(3, np.int32))
    else:
        try:
            comm.allreduce(np.ones(3, np.int64))
        except Exception:
            pass
        comm.allreduce(np.ones(3))  # the communicator is broken: fails at once


def test_broken_communicator_fails_fast_afterwards() -> None:
    out = _errors(run_workers(_use_after_failure, 2, expect_failure=True, timeout=20))
    assert out[0][0] == "CollectiveMismatch"
    assert "failed earlier" in out[0][1]


def test_async_error_is_delivered_to_the_handle() -> None:
    def fn(comm):
        h = comm.allreduce_async(np.ones(5, np.float32 if comm.rank else np.float64))
        try:
            h.wait()
        except Exception as e:
            return type(e).__name__
        return "no error"

    assert run_workers(fn, 2) == ["CollectiveMismatch", "CollectiveMismatch"]


def test_sigkill_under_the_launcher_leaves_nothing_behind(tmp_path) -> None:
    import subprocess
    import sys
    from pathlib import Path

    job = tmp_path / "job.py"
    pids = tmp_path / "pids"
    job.write_text(
        "import os, signal, time, numpy as np, terascale\n"
        "comm = terascale.init()\n"
        f"open({str(pids)!r}, 'a').write(f'{{os.getpid()}} {{comm.job}}\\n')\n"
        "x = np.ones(4_000_000, np.float32)\n"
        "comm.allreduce(x)  # shared memory on one host: the segment exists now\n"
        "if comm.rank == 3:\n"
        "    time.sleep(0.2)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "while True:\n"
        "    comm.allreduce(x)\n")
    res = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "4", sys.executable,
                          str(job)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 128 + 9  # the killed worker's status
    assert res.stderr.count("PeerLost") >= 3  # every survivor raised
    assert "rank 3 failed first" in res.stderr
    rows = [line.split() for line in pids.read_text().splitlines()]
    (job_id,) = {j for _, j in rows}
    assert job_segments(job_id) == []
    for pid, _ in rows:
        stat = Path(f"/proc/{pid}/stat")
        assert not stat.exists() or stat.read_text().split()[2] == "Z", f"pid {pid} survived"


def _dies_in_a_group(comm, algo):
    sub = comm.split(comm.rank % 2)  # groups [0, 2, 4] and [1, 3]
    done = 0
    try:
        for _ in range(30):
            if comm.rank == 3 and done == 5:
                os.kill(os.getpid(), signal.SIGKILL)
            sub.allreduce(np.ones(1000, np.float32), algorithm=algo)
            done += 1
        comm.allreduce(np.ones(10))  # the parent contains rank 3 too
    except Exception as e:
        raise type(e)(f"after {done} group allreduces: {e}") from None


@pytest.mark.parametrize("algo", ["shm", "ring"])
def test_rank_dying_in_one_group_fails_its_group_and_the_parent(algo: str) -> None:
    """A dead rank fails its group's members at once and the parent communicator at its
    next collective; the other group finishes its own collectives (a member that then
    fails in the parent fails its group too: it contains that member); nobody waits out the
    60 s deadline (run_workers reports a "timeout" outcome for any rank still running at
    30 s)."""
    out = run_workers(_dies_in_a_group, 5, args=(algo,), expect_failure=True, timeout=30,
                      collective_timeout=60)
    assert out[3][0] == "killed"
    kind, text = _errors(out)[1]  # rank 3's group
    # (it may still be finishing the allreduce rank 3 completed when the reset arrives)
    assert kind == "PeerLost" and "rank 3" in text, text
    assert "after 5 group allreduces" in text or "after 4 group allreduces" in text, text
    reached_parent = 0
    for r in (0, 2, 4):  # the other group finishes its allreduces, then the parent fails
        kind, text = _errors(out)[r]
        assert kind == "PeerLost" and "rank 3" in text, (r, kind, text)
        reached_parent += "after 30 group allreduces" in text
        # A member that failed in the parent aborts its group too: one still finishing the
        # last group allreduce (the ring lets a rank finish while a neighbour receives)
        # fails there, naming rank 3 all the same.
        assert "after 30 group allreduces" in text or "after 29 group allreduces" in text, text
    assert reached_parent >= 1


def test_an_uncaught_error_after_close_reports_only_itself(tmp_path) -> None:
    # terascale.init's excepthook tells the peers of an uncaught error; after close() there
    # is no link left and the hook must stay quiet, not fail on the closed sockets.
    import subprocess
    import sys

    script = tmp_path / "job.py"
    script.write_text("import numpy as np, terascale\n"
                      "comm = terascale.init(timeout=20)\n"
                      "try:\n"
                      "    comm.allreduce(np.ones(4))\n"
                      "    if comm.rank == 1:\n"
                      "        raise ValueError('boom after close')\n"
                      "finally:\n"
                      "    comm.close()\n")
    p = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "2", "--timeout", "20",
                        sys.executable, str(script)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0 and "boom after close" in p.stderr
    assert "Error in sys.excepthook" not in p.stderr, p.stderr
