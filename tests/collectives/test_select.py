"""``algorithm="auto"``: same choice on every rank, from the host layout and size."""

from __future__ import annotations

import numpy as np
import pytest

from terascale.collectives import select
from terascale.collectives.select import choose_allreduce, choose_tcp
from terascale.testing import run_workers


def test_choice_by_layout() -> None:
    assert choose_allreduce(4096, 4, ["h"] * 4) == "shm"
    assert choose_allreduce(1 << 30, 2, ["h", "h"]) == "shm"
    assert choose_allreduce(4096, 4, ["a", "b", "a", "b"]) == "hierarchical"
    assert choose_allreduce(1 << 24, 3, ["a", "a", "b"]) == "hierarchical"
    assert choose_allreduce(1 << 24, 3, ["a", "b", "c"]) == choose_tcp(1 << 24, 3)
    assert choose_allreduce(100, 1, ["a"]) == choose_tcp(100, 1)


def test_auto_runs_shm_on_one_host_and_agrees() -> None:
    def fn(comm):
        x = np.arange(70_000, dtype=np.float32) * (comm.rank + 1)
        y = comm.allreduce(x)
        sent = comm.bytes_sent
        z = comm.allreduce(x)  # shm after set-up: nothing on the wire
        return y, z, comm.bytes_sent - sent

    res = run_workers(fn, 3)
    expect = np.arange(70_000, dtype=np.float32) * 6
    for y, z, sent in res:
        np.testing.assert_array_equal(y, expect)
        assert y.tobytes() == z.tobytes() == res[0][0].tobytes()
        assert sent == 0


def test_choice_by_link_rate() -> None:
    """With the job's link rate auto prices the algorithms with the link model: on slow
    links the ring's 2(n-1)/n bytes beat the tree's 3x through a node from tens of KiB
    (on loopback thresholds the tree ran up to 256 KiB, 1.7-3.3x slower there)."""
    from terascale.sim import links

    hosts = ["a", "b", "c", "d", "e", "f"]
    assert choose_allreduce(256 << 10, 4, hosts[:4]) == "tree"  # the loopback thresholds
    for n in (3, 4, 6):
        for m in (64 << 10, 256 << 10, 16 << 20):
            assert choose_allreduce(m, n, hosts[:n], 100e6) == "ring"
            # ... the fastest in the link model itself, or within 10% of it
            best = min(links.link_time(a, m, n, 100e6) for a in ("tree", "ring"))
            assert links.link_time("ring", m, n, 100e6) <= 1.1 * best
        assert choose_allreduce(512, n, hosts[:n], 100e6) == "tree"  # latency still wins
    assert choose_allreduce(256 << 10, 2, hosts[:2], 100e6) == choose_tcp(256 << 10, 2)
    # select.py's copy of the link model's constants is the recorded one
    cost = links.recorded()
    assert (select.LINK_ALPHA_S, select.LINK_EFF_RING, select.LINK_EFF_TREE) == pytest.approx(
        (cost.alpha, cost.eff_single, cost.eff_tree), rel=1e-3)
    # The layout still decides first; one rank needs no link.
    assert choose_allreduce(64 << 10, 4, ["a", "a", "b", "b"], 100e6) == "hierarchical"
    assert choose_allreduce(64 << 10, 4, ["h"] * 4, 100e6) == "shm"
    assert choose_allreduce(64 << 10, 1, ["a"], 100e6) == choose_tcp(64 << 10, 1)


def test_link_rate_reaches_every_rank_and_auto_agrees() -> None:
    """TERASCALE_LINK_RATE -> Communicator.link_rate on every rank (and a split's), auto's
    choice over pretend hosts the same bits on every rank."""
    def fn(comm):
        x = np.arange(20_000, dtype=np.float32) * (comm.rank + 1)  # 80 KB: not the tree
        child = comm.split(0)
        return comm.link_rate, child.link_rate, comm.allreduce(x)

    res = run_workers(fn, 3, env={"TERASCALE_LINK_RATE": "100Mbit"}, host_ids=["a", "b", "c"])
    assert [(r[0], r[1]) for r in res] == [(1e8, 1e8)] * 3
    for _, _, y in res:
        assert y.tobytes() == res[0][2].tobytes()
    np.testing.assert_array_equal(res[0][2], np.arange(20_000, dtype=np.float32) * 6)
