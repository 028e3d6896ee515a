"""Hierarchical allreduce: shm inside pretend hosts, TCP between their leaders."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
from _allreduce_check import check_matrix

from terascale.collectives.hierarchical import host_groups
from terascale.testing import run_workers


@pytest.mark.parametrize(("n", "hosts"), [
    (1, ["a"]),
    (2, ["a"]),             # one host: shm only
    (3, ["a", "b", "c"]),   # one rank per host: TCP only
    (4, ["a", "b"]),        # interleaved hosts: {0, 2} and {1, 3}
    (5, ["a", "a", "b"]),   # uneven: {0, 1, 3, 4} and {2}
    (8, ["a", "b", "c"]),
])
def test_matrix(n: int, hosts: list[str]) -> None:
    check_matrix(n, "hierarchical", big=n in (4, 5), runs=2 if n == 4 else 1, host_ids=hosts)


def test_host_groups() -> None:
    assert host_groups(["x", "y", "x", "z", "y"]) == [[0, 2], [1, 4], [3]]


def test_only_leaders_use_the_network() -> None:
    count = 1 << 16

    def fn(comm):
        x = np.ones(count, np.float32)
        before = comm.bytes_sent
        y = comm.allreduce(x, algorithm="hierarchical")
        assert (y == comm.size).all()
        return comm.bytes_sent - before

    sent = run_workers(fn, 4, host_ids=["a", "b"])
    # Ranks 0 and 1 lead hosts a and b; the first call also sets up each host's segment
    # (a few small messages between the host's ranks).
    assert sent[0] >= count * 4 and sent[1] >= count * 4
    assert sent[2] < 1024 and sent[3] < 1024


def test_rank_killed_on_another_host_fails_everyone() -> None:
    def fn(comm):
        x = np.ones(1 << 20, np.float32)
        comm.allreduce(x, algorithm="hierarchical")
        if comm.rank == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        for _ in range(50):
            comm.allreduce(x, algorithm="hierarchical")

    out = run_workers(fn, 4, host_ids=["a", "b"], expect_failure=True, collective_timeout=30)
    assert out[3][0] == "killed"
    for rank in range(3):
        status, (exc, text) = out[rank]
        assert status == "error" and exc == "PeerLost", out[rank]
        assert "rank 3" in text
