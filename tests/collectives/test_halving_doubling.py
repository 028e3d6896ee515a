"""Recursive halving/doubling allreduce: powers of two and folded world sizes."""

from __future__ import annotations

import numpy as np
import pytest
from _allreduce_check import check_matrix

from terascale import CollectiveMismatch
from terascale.collectives.halving_doubling import halving_bits
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


def test_step_order_puts_same_host_pairs_first() -> None:
    """The big early halving steps pair ranks of one host; without a layout, textbook order."""
    assert halving_bits(["a", "b", "c", "d"]) == [2, 1]
    assert halving_bits(["a", "a", "b", "b"]) == [1, 2]        # 0-1 first (half the vector)
    assert halving_bits(list("aaaabbbb")) == [2, 1, 4]         # host-crossing bit last
    assert halving_bits(list("abababab")) == [4, 2, 1]         # round robin: 0-4 share a host
    assert halving_bits(list("aabbccdd")) == [1, 4, 2]


def test_layout_ordered_schedule_is_exact_and_the_same_on_every_rank() -> None:
    """2 pretend hosts x 2: same-host steps first; every rank bitwise equal, run after run,
    and exact on integers (every block reduced once, nothing lost or counted twice)."""
    count = 100_003

    def fn(comm):
        rng = np.random.default_rng(comm.rank)
        x = rng.standard_normal(count)
        ints = np.arange(count, dtype=np.float64) * (comm.rank + 1)
        a = comm.allreduce(x, algorithm="halving_doubling")
        b = comm.allreduce(x, algorithm="halving_doubling")
        return a, b, comm.allreduce(ints, algorithm="halving_doubling")

    out = run_workers(fn, 4, host_ids=["a", "a", "b", "b"])
    for a, b, ints in out:
        assert a.tobytes() == out[0][0].tobytes() and b.tobytes() == a.tobytes()
        np.testing.assert_array_equal(ints, np.arange(count) * 10.0)
    np.testing.assert_allclose(out[0][0], sum(np.random.default_rng(r).standard_normal(count)
                                              for r in range(4)), rtol=1e-12, atol=1e-12)
