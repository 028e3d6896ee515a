"""``unique_sorted`` and ``union_sorted``: what numpy returns, on the shapes the learner gives
them."""

from __future__ import annotations

import numpy as np
import pytest

from terascale.linear._io._setops import union_sorted, unique_sorted


@pytest.mark.parametrize("n", [0, 1, 2, 17, 100_000])
@pytest.mark.parametrize("dtype", [np.uint32, np.int64])
def test_equals_numpy_unique(n: int, dtype: type) -> None:
    rng = np.random.default_rng(n)
    a = rng.integers(0, max(n // 3, 1) * 7 + 1, n).astype(dtype)
    before = a.copy()
    got = unique_sorted(a)
    assert got.dtype == a.dtype and np.array_equal(got, np.unique(a))
    assert np.array_equal(a, before)  # the input is not sorted in place


@pytest.mark.parametrize("sizes", [[], [0], [5], [0, 0], [3, 0], [1000, 20], [40_000, 60_000, 7],
                                   [100, 200, 300, 400, 500]])
def test_union_of_sorted_sets_equals_numpy(sizes: list[int]) -> None:
    rng = np.random.default_rng(len(sizes) * 1000 + sum(sizes))
    # overlapping ranges: shared values, values in one set only, both ends of uint32
    parts = [np.unique(rng.integers(0, 2**32, n, dtype=np.uint64)
                       if k % 2 else rng.integers(0, 3 * max(sizes) + 1, n)).astype(np.uint32)
             for k, n in enumerate(sizes)]
    copies = [p.copy() for p in parts]
    got = union_sorted(parts)
    expect = np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.uint32)
    assert got.dtype == np.uint32 and np.array_equal(got, expect.astype(np.uint32))
    assert all(np.array_equal(p, c) for p, c in zip(parts, copies))


def _union_on(comm, sizes: list[int]) -> np.ndarray:
    from terascale.linear._passes import union_features

    rng = np.random.default_rng(comm.rank)
    n = sizes[comm.rank]
    return union_features(np.unique(rng.integers(0, 4 * max(sizes) + 1, n)).astype(np.uint32),
                          comm)


@pytest.mark.parametrize("sizes", [[3000, 10], [0, 500], [0, 0, 7]])
def test_workers_agree_on_the_union_of_their_feature_sets(sizes: list[int]) -> None:
    """Sets of different sizes (padded for the allgather, cut back) and empty ones."""
    from terascale.testing import run_workers

    expect = np.unique(np.concatenate([
        np.unique(np.random.default_rng(r).integers(0, 4 * max(sizes) + 1, n))
        for r, n in enumerate(sizes)])).astype(np.uint32)
    got = run_workers(_union_on, len(sizes), args=(sizes,))
    for g in got:
        assert g.dtype == np.uint32 and np.array_equal(g, expect)
