"""Recursive halving/doubling allreduce: powers of two and folded world sizes."""

from __future__ import annotations

import numpy as np
import pytest
from _allreduce_check import check_matrix

from terascale import CollectiveMismatch
from terascale.testing import run_workers


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8])
def test_matrix(n: int) -> None:
    check_matrix(n, "halving_doubling", big=n in (3, 4, 8), runs=2 if n == 6 else 1)


def test_bytes_on_the_wire_are_bandwidth_optimal() -> None:
    """A power-of-two world moves 2 (p-1)/p of the data per rank, like the ring."""
    count = 1 << 18

    def fn(comm):
        x = np.ones(count, np.float32)
        before = comm.bytes_sent
        comm.allreduce(x, algorithm="halving_doubling")
        return comm.bytes_sent - before

    sent = run_workers(fn, 4)
    payload = 2 * 3 / 4 * count * 4
    for s in sent:
        assert payload <= s < payload * 1.01


def test_mismatch_is_detected() -> None:
    def fn(comm):
        n = 10 if comm.rank == 1 else 11
        comm.allreduce(np.ones(n), algorithm="halving_doubling")

    outcomes = run_workers(fn, 3, expect_failure=True)
    assert all(o[0] == "error" and o[1][0] == CollectiveMismatch.__name__ for o in outcomes)
