"""The hashed column map that replaces the 2**bits lookup table at -b 26 and up."""

import numpy as np
import pytest

from terascale.linear import _colindex, synthetic, train
from terascale.linear._colindex import HashIndex, hash_slots, use_hash
from terascale.linear._online._firstpass import LocalColumns
from terascale.linear._passes import Columns


def test_the_hashed_map_numbers_and_finds_columns_as_the_direct_table():
    rng = np.random.default_rng(4)
    h = HashIndex()
    order = np.zeros(300_000, np.uint32)
    n, seen = 0, {}
    for _ in range(30):  # grows from 16 slots through many doublings
        idx = rng.integers(0, 1 << 28, rng.integers(1, 20_000), dtype=np.uint32)
        idx[::3] = idx[0]  # repeats inside a block
        cols, n = h.assign(idx, order, n)
        for i, c in zip(idx.tolist(), cols.tolist()):
            assert seen.setdefault(i, c) == c
        assert len(h.table) >= 2 * n
    assert n == len(seen) and h.n == n
    assert np.array_equal(order[:n], np.array(sorted(seen, key=seen.get), np.uint32))
    keys = np.array(list(seen), np.uint32)
    out = np.empty(len(keys), np.uint32)
    h.lookup(keys, out)
    assert out.tolist() == [seen[k] for k in keys.tolist()]
    with pytest.raises(KeyError, match="no column"):
        h.lookup(np.array([(1 << 28) + 1], np.uint32), out[:1])


def test_the_choice_of_map():
    assert hash_slots(0) == 16 and hash_slots(1000) == 2048 and hash_slots(1024) == 2048
    assert use_hash(28, 11_000_000)  # 256 MiB against 1 GiB
    assert use_hash(28, 17_000_000)  # 512 MiB: -b 28's wide data
    assert not use_hash(28, 40_000_000)  # 1 GiB of hash: the table
    assert not use_hash(24, 1000)  # a 64 MiB table stays
    assert Columns(np.array([5, 9], np.uint32), 28).hash is not None
    assert Columns(np.array([5, 9], np.uint32), 24).pos is not None


def test_local_columns_move_to_the_table_once_the_hash_would_be_as_large(monkeypatch):
    monkeypatch.setattr(_colindex, "_MIN_TABLE", 1 << 12)
    cols = LocalColumns(16)
    assert cols.hash is not None and len(cols.pos) == 0
    rng = np.random.default_rng(1)
    first = rng.permutation(1 << 16).astype(np.uint32)[:12000]
    c1 = cols(first[:8000])
    assert cols.hash is not None  # 16384 slots of 8 bytes, half the 256 KiB table
    c2 = cols(first[8000:])
    assert cols.hash is None and len(cols.pos) == 1 << 16
    assert np.array_equal(np.concatenate([c1, c2]), np.arange(12000))
    assert np.array_equal(cols(first[::-1]), np.arange(12000)[::-1])


def _fit(comm, path, tmp):
    kw = {"comm": comm} if comm is not None else {}
    rank = comm.rank if comm is not None else 0
    text = train([path], bits=20, cache=False, holdout=0.0, **kw)
    cached = [train([path], bits=20, cache_dir=f"{tmp}-{rank}", passes=p, holdout=0.0, **kw)
              for p in (1, 1, 2)]  # (the first writes the cache)
    return [m.dense() for m in [text] + cached] + [text.adaptive[1], len(text.indices)]


def test_hashed_maps_learn_bitwise_what_the_direct_tables_learn(tmp_path, monkeypatch):
    # -b 20 with the hashed maps forced on: the text pass, passes over the cache and two
    # averaged workers end with the models of the direct tables, bit for bit
    from terascale.testing import run_workers

    path = synthetic.write_wide(str(tmp_path / "w.vw"), 3000, seed=7, vocab=100_000)
    direct = _fit(None, path, str(tmp_path / "d"))
    two = run_workers(_fit, 2, args=(path, str(tmp_path / "d2")), timeout=300)
    monkeypatch.setattr(_colindex, "_MIN_TABLE", 1 << 10)
    assert LocalColumns(20).hash is not None
    assert use_hash(20, direct[-1]) and use_hash(20, two[0][-1])  # the union's Columns too
    hashed = _fit(None, path, str(tmp_path / "h"))
    two_h = run_workers(_fit, 2, args=(path, str(tmp_path / "h2")), timeout=300)
    for a, b in zip(direct + two[0] + two[1], hashed + two_h[0] + two_h[1]):
        assert np.array_equal(a, b)
    assert not np.array_equal(direct[0], two[0][0])  # (two workers: another model)
