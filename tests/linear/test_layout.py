"""The compact space's column order (frequent features first) changes no bit of a model."""

from __future__ import annotations

import numpy as np
import pytest
from _linear_data import vw_lines

import terascale.linear as tl
from terascale.linear import _recipe
from terascale.linear._layout import column_order
from terascale.linear._passes import Columns


class _One:
    size = 1


@pytest.mark.parametrize("bits", [18, 27])  # a lookup table / a binary search
def test_columns_in_an_order_map_and_permute_back(bits):
    rng = np.random.default_rng(0)
    union = np.unique(rng.integers(0, 1 << 18, 500)).astype(np.uint32)
    hot = rng.choice(union, 40, replace=False)
    order = column_order(union, True, hot, _One())
    assert order is not None and sorted(order) == list(range(len(union)))
    assert list(union[order[:40]]) == list(hot)  # the hot ones first, in their order
    assert list(order[40:]) == sorted(order[40:])  # then the rest in union order
    cols = Columns(union, bits, order)
    assert np.array_equal(cols(union[order]), np.arange(len(union)))
    a = rng.normal(size=len(union))
    (b,) = cols.to_columns(a)
    assert np.array_equal(b, a[order]) and np.array_equal(cols.to_union(b), a)
    assert column_order(union, False, hot, _One()) is None


def test_a_cached_pass_in_hot_order_equals_one_in_union_order(tmp_path, monkeypatch):
    path = tmp_path / "d.vw"
    path.write_text("\n".join(vw_lines(3000, seed=11)) + "\n")

    def fit() -> np.ndarray:
        tl.train(str(path), bits=18, cache_dir=str(tmp_path / "c"), cache=True)  # writes it
        m = tl.train(str(path), bits=18, cache_dir=str(tmp_path / "c"), passes=3,
                     holdout=0.0)
        return m.dense()

    orders = []
    real = _recipe.column_order
    monkeypatch.setattr(_recipe, "column_order", lambda *a: orders.append(real(*a)) or orders[-1])
    hot = fit()
    assert orders[-1] is not None and not np.array_equal(orders[-1], np.sort(orders[-1]))
    monkeypatch.setattr(_recipe, "column_order", lambda *a: None)
    plain = fit()
    assert np.any(hot != 0)
    np.testing.assert_array_equal(hot, plain)


def test_the_union_held_as_a_bitmap_comes_back_the_same():
    from terascale.linear._recipe import Space, hold_union_as_bits

    rng = np.random.default_rng(3)
    union = np.unique(rng.integers(0, 1 << 20, 5000)).astype(np.uint32)
    order = rng.permutation(len(union)).astype(np.int64)
    for how in (None, order):
        cols = Columns(union.copy(), 20, how)
        mapped = cols(union[::7])
        space = Space(union.copy(), cols)
        hold_union_as_bits(space, 20, batch=False)
        assert space.union is None and space.seen is not None
        assert space.seen.nbytes == (1 << 20) // 8 and len(cols.union) == 0
        assert np.array_equal(cols(union[::7]), mapped)  # the table still maps
        assert np.array_equal(space.the_union(), union) and space.seen is None
    kept = Space(union, Columns(union, 20))
    hold_union_as_bits(kept, 20, batch=True)  # the batch phase reads the union: it stays
    assert kept.union is union and kept.seen is None
