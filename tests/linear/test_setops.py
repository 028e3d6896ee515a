"""``unique_sorted``: what ``np.unique`` returns, on the shapes the learner gives it."""

from __future__ import annotations

import numpy as np
import pytest

from terascale.linear._setops import unique_sorted


@pytest.mark.parametrize("n", [0, 1, 2, 17, 100_000])
@pytest.mark.parametrize("dtype", [np.uint32, np.int64])
def test_equals_numpy_unique(n: int, dtype: type) -> None:
    rng = np.random.default_rng(n)
    a = rng.integers(0, max(n // 3, 1) * 7 + 1, n).astype(dtype)
    before = a.copy()
    got = unique_sorted(a)
    assert got.dtype == a.dtype and np.array_equal(got, np.unique(a))
    assert np.array_equal(a, before)  # the input is not sorted in place
