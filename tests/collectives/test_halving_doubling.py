"""Recursive halving/doubling allreduce: powers of two and mixed-radix world sizes."""

from __future__ import annotations

import os

import numpy as np
import pytest
from _allreduce_check import check_matrix

from terascale import CollectiveMismatch
from terascale.collectives.halving_doubling import radix_steps
from terascale.testing import run_workers

# 5 and 7 take one radix-p step as 3 does: make test-matrix (TERASCALE_MATRIX_FULL=1) runs them
FULL = os.environ.get("TERASCALE_MATRIX_FULL", "") not in ("", "0")


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8, 9] if FULL else [1, 2, 3, 4, 6, 8, 9])
def test_matrix(n: int) -> None:
    check_matrix(n, "halving_doubling", big=n in (3, 4, 5, 6, 8), runs=2 if n in (6, 9) else 1)


@pytest.mark.parametrize("n", [4, 6])
def test_bytes_on_the_wire_are_bandwidth_optimal(n: int) -> None:
    """Every rank moves 2 (p-1)/p of the data, like the ring: for 6 = 2 x 3 too (the fold
    it replaced sent the whole vector twice more from some ranks)."""
    count = 6 << 16

    def fn(comm):
        x = np.ones(count, np.float32)
        before = comm.bytes_sent
        comm.allreduce(x, algorithm="halving_doubling")
        return comm.bytes_sent - before

    sent = run_workers(fn, n)
    payload = 2 * (n - 1) / n * count * 4
    for s in sent:
        assert payload <= s < payload * 1.01


def test_mismatch_is_detected() -> None:
    def fn(comm):
        n = 10 if comm.rank == 1 else 11
        comm.allreduce(np.ones(n), algorithm="halving_doubling")

    outcomes = run_workers(fn, 3, expect_failure=True)
    assert all(o[0] == "error" and o[1][0] == CollectiveMismatch.__name__ for o in outcomes)


def test_step_order_puts_same_host_groups_first() -> None:
    """The big early steps group ranks of one host; without a layout, textbook order.
    Steps are (stride, radix): the group of rank v differs from it in digit v // stride."""
    assert radix_steps(["a", "b", "c", "d"]) == [(2, 2), (1, 2)]
    assert radix_steps(["a", "a", "b", "b"]) == [(1, 2), (2, 2)]  # 0-1 first (half of it)
    assert radix_steps(list("aaaabbbb")) == [(2, 2), (1, 2), (4, 2)]  # host-crossing last
    assert radix_steps(list("abababab")) == [(4, 2), (2, 2), (1, 2)]  # round robin: 0-4
    assert radix_steps(list("aabbccdd")) == [(1, 2), (4, 2), (2, 2)]
    assert radix_steps(list("abcdefg")) == [(1, 7)]                # a prime: one exchange
    assert radix_steps(list("abcdef")) == [(2, 3), (1, 2)]         # larger radix first
    assert radix_steps(list("aaabbb")) == [(1, 3), (3, 2)]         # radix 3 inside the hosts
    assert radix_steps(list("abcabc")) == [(3, 2), (1, 3)]         # 0-3 share a host
    assert radix_steps(list("aabbcc")) == [(1, 2), (2, 3)]


@pytest.mark.parametrize("layout", ["aabb", "aaabbb"])
def test_layout_ordered_schedule_is_exact_and_the_same_on_every_rank(layout: str) -> None:
    """2 pretend hosts x 2 (x 3: a radix-3 step inside the hosts first): same-host steps
    first; every rank bitwise equal, run after run, and exact on integers (every block
    reduced once, nothing lost or counted twice)."""
    count = 100_003
    n = len(layout)

    def fn(comm):
        rng = np.random.default_rng(comm.rank)
        x = rng.standard_normal(count)
        ints = np.arange(count, dtype=np.float64) * (comm.rank + 1)
        a = comm.allreduce(x, algorithm="halving_doubling")
        b = comm.allreduce(x, algorithm="halving_doubling")
        return a, b, comm.allreduce(ints, algorithm="halving_doubling")

    out = run_workers(fn, n, host_ids=list(layout))
    for a, b, ints in out:
        assert a.tobytes() == out[0][0].tobytes() and b.tobytes() == a.tobytes()
        np.testing.assert_array_equal(ints, np.arange(count) * (n * (n + 1) / 2))
    np.testing.assert_allclose(out[0][0], sum(np.random.default_rng(r).standard_normal(count)
                                              for r in range(n)), rtol=1e-12, atol=1e-12)
