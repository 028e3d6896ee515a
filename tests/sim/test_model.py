"""The alpha-beta-gamma formulas against hand-computed cases."""

from __future__ import annotations

import pytest

from terascale.sim import (
    CostParams,
    best,
    halving_doubling_time,
    hierarchical_time,
    predict,
    ring_time,
    shm_time,
    tree_shape,
    tree_time,
)

C = CostParams(alpha=1.0, beta=0.01, gamma=0.001, alpha_shm=1.0, delta=0.001)


def test_ring_by_hand() -> None:
    # 2(p-1) alpha + 2 (p-1)/p m beta + (p-1)/p m gamma = 6 + 60 + 3
    assert ring_time(4000, 4, C) == pytest.approx(69.0)
    assert ring_time(4000, 1, C) == 0.0


def test_halving_doubling_by_hand() -> None:
    assert halving_doubling_time(4000, 4, C) == pytest.approx(4 + 60 + 3)
    # p = 5, prime: one radix-5 step, 4 messages each way; the ring's bytes
    assert halving_doubling_time(4000, 5, C) == pytest.approx(8 + 64 + 3.2)
    # p = 6 = 2 x 3: (1 + 2) messages each way
    assert halving_doubling_time(4000, 6, C) == pytest.approx(6 + 200 / 3 + 10 / 3)
    assert halving_doubling_time(4000, 8, C) == pytest.approx(6 + 70 + 3.5)
    # 2 hosts x 2: the half-vector step inside each host (m/2 each phase, at delta), then
    # m/4 each phase over the NIC from each of 2 workers: m per link direction at beta
    # (not the 1.5 m of 2 (p-1)/p)
    assert halving_doubling_time(4000, 4, C, ranks_per_host=2) == pytest.approx(
        4 + 40 + 4 + 3)


def test_tree_shape() -> None:
    assert tree_shape(2) == (1, 1, 1)
    assert tree_shape(3) == (1, 2, 2)
    assert tree_shape(4) == (2, 2, 2)
    assert tree_shape(5) == (2, 2, 3)
    assert tree_shape(7) == (2, 2, 3)


def test_tree_by_hand() -> None:
    # unpipelined, p = 3 (h=1, r=2): 2 alpha + (r+1) m beta + r m gamma = 2 + 30 + 2
    assert tree_time(1000, 3, C, chunk=None) == pytest.approx(34.0)
    # 4 chunks of 1000: the fill (34) + 3 steady steps of k c beta + r c gamma = 20 + 2
    assert tree_time(4000, 3, C, chunk=1000) == pytest.approx(34 + 3 * 22)
    # p = 2, one chunk: not a tree but one swap, alpha + m beta + m gamma
    assert tree_time(1000, 2, C, chunk=None) == pytest.approx(1 + 10 + 1)
    assert tree_time(4000, 2, C, chunk=1000) == pytest.approx(2 + 20 + 1 + 3 * (10 + 1))


def test_shm_and_hierarchical_by_hand() -> None:
    # 2 alpha_shm + m (2 delta + (q-1)/q gamma) = 2 + 1000 * 0.00275
    assert shm_time(1000, 4, C) == pytest.approx(4.75)
    two_cores = CostParams(alpha=1.0, beta=0.01, gamma=0.001, alpha_shm=1.0, delta=0.001, cores=2)
    assert shm_time(1000, 4, two_cores) == pytest.approx(2 * 4.75)  # 4 ranks on 2 cores: 2x
    assert hierarchical_time(1000, 3, 4, C) == pytest.approx(4.75 + ring_time(1000, 3, C))
    assert predict("hierarchical", 1000, 3, C, per_host=4) == hierarchical_time(1000, 3, 4, C)


def test_core_sharing_stretches_every_term() -> None:
    shared = CostParams(alpha=1.0, beta=0.01, gamma=0.001, cores=2)
    # 4 ranks on 2 cores: each runs at half speed
    assert ring_time(4000, 4, shared, ranks_per_host=4) == pytest.approx(2 * 69)
    assert ring_time(4000, 4, shared, ranks_per_host=2) == pytest.approx(69.0)


def test_choices_follow_the_classic_tradeoff() -> None:
    c = CostParams(alpha=50e-6, beta=8 / 10e9, gamma=1 / 5e9)
    # small messages: few latencies win (tree or halving/doubling, not the ring)
    assert best(4096, 1000, c)[0] in ("tree", "halving_doubling")
    # large messages at a power of two: the bandwidth-optimal algorithms
    assert best(256e6, 1024, c)[0] in ("ring", "halving_doubling")
    with pytest.raises(ValueError):
        predict("shm", 1000, 2, c)
    with pytest.raises(ValueError):
        predict("butterfly", 1000, 2, c)


def test_messages_beyond_the_cache_pay_the_memory_factor() -> None:
    mem = CostParams(alpha=1.0, beta=0.01, gamma=0.001, cache_bytes=1000, mem_factor=2.0)
    assert ring_time(1000, 4, mem) == pytest.approx(6 + 15 + 0.75)  # fits: no factor
    assert ring_time(4000, 4, mem) == pytest.approx(6 + 2 * (60 + 3))  # bytes cost twice
