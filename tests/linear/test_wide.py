"""Wide data: the first pass's switch to the dense layout (over text and over a cache),
the dense rows' memory, and the generator."""


import numpy as np
import pytest

from terascale import _pages
from terascale.linear import _train, synthetic, train
from terascale.linear._io import _stream
from terascale.linear._online._firstpass import LocalColumns, _DenseRows, dense_threshold


@pytest.mark.parametrize("quadratic", [(), ("ab",)])
def test_the_dense_layout_learns_bitwise_what_compact_columns_learn(tmp_path, monkeypatch,
                                                                    quadratic):
    # -b 12 and a few thousand wide examples: the text pass moves to the dense layout
    # after 512 distinct features; a pass over the cache of such data learns in the dense
    # layout from its first block, and in compact columns where it is told not to
    path = synthetic.write_wide(str(tmp_path / "w.vw"), 3000, seed=3, vocab=200_000)
    cols = LocalColumns(12, dense=True)
    from terascale.linear import ParseOptions, read_file

    ds = read_file(path, ParseOptions(bits=12))
    for s in range(0, len(ds), 500):
        cols(ds.indices[ds.indptr[s]:ds.indptr[min(s + 500, len(ds))]], s)
    assert cols.dense and 0 < cols.dense_from < len(ds)
    assert np.array_equal(cols.features(), np.unique(ds.indices))
    assert dense_threshold(12) == 512
    kw = dict(bits=12, holdout=0.0, quadratic=quadratic)
    dropped = []  # the move to the dense rows first drops LLVM's resident code pages
    monkeypatch.setattr(_stream, "CHUNK_BYTES", 1 << 16)  # (blocks: the move is between two)
    give_back_library = _pages.give_back_library
    monkeypatch.setattr(_pages, "give_back_library",
                        lambda name: dropped.append(name) or give_back_library(name))
    text = train(path, cache=False, **kw)
    assert dropped == ["libllvmlite"]
    cached = train(path, cache_dir=str(tmp_path / "c"), passes=1, **kw)
    again = train(path, cache_dir=str(tmp_path / "c"), passes=1, **kw)
    assert "first_pass_s" in again.info  # the cache's pass ran as a dense first pass
    monkeypatch.setattr(_train, "_wide_cache", lambda blocks: False)
    compact = train(path, cache_dir=str(tmp_path / "c"), passes=1, **kw)
    assert "first_pass_s" not in compact.info
    for m in (cached, again, compact):
        assert np.array_equal(text.indices, m.indices)
        assert text.weights.tobytes() == m.weights.tobytes()
        for a, b in zip(text.adaptive[:2], m.adaptive[:2]):
            assert a.tobytes() == b.tobytes()
    # a cache of narrow data keeps compact columns
    narrow = synthetic.write_click(str(tmp_path / "n.vw"), 500, seed=1)
    train(narrow, bits=18, cache_dir=str(tmp_path / "c"), passes=1)
    assert "first_pass_s" not in train(narrow, bits=18, cache_dir=str(tmp_path / "c"),
                                       passes=1).info


def test_the_dense_rows_free_the_pages_they_hand_back():
    # the rows are a private anonymous mapping: pages handed back leave the memory (a
    # private mapping's resident pages are all it holds; shmem would keep them allocated)
    rows = _DenseRows(1 << 18)
    rows.rows[:] = 1.0
    addr = rows.rows.__array_interface__["data"][0]

    def resident():
        found = False
        for line in open("/proc/self/smaps"):
            head = line.split()
            if "-" in head[0] and len(head) >= 5:
                lo, hi = (int(x, 16) for x in head[0].split("-"))
                found = lo <= addr < hi
                if found:
                    assert head[1].endswith("p")  # private, not shmem
            elif found and head[0] == "Rss:":
                return int(head[1]) * 1024
        raise AssertionError("the rows' mapping is not in /proc/self/smaps")

    # the kernel may merge the rows' mapping with a neighbouring anonymous one, whose pages
    # its Rss then counts too: what is checked is what the release took away
    before = resident()
    assert before >= 12 << 18
    rows.release_from(1 << 17)
    assert before - resident() >= (12 << 17) - 4096
    assert not rows.rows[(1 << 17) + 1:].any() and rows.rows[:1 << 17].all()


def test_wide_data_has_the_width_it_promises(tmp_path):
    path = synthetic.write_wide(str(tmp_path / "w.vw"), 2000, seed=1)
    from terascale.linear import ParseOptions, read_file

    ds = read_file(path, ParseOptions(bits=24))
    # 28 ids, 2 numeric and the constant (a ctr that rounds to 0 is no feature, as in VW)
    assert len(ds) == 2000 and 2000 * 30 < ds.indptr[-1] <= 2000 * 31
    # nearly every id of the tail is new: most of the 56k features are distinct
    assert len(np.unique(ds.indices)) > 40_000
    assert set(np.unique(ds.labels)) == {-1.0, 1.0}


def _recipe(comm, path, loss, out):
    m = train([path], comm=comm, bits=18, loss=loss, bfgs=20, cache_dir=f"{out}-{comm.rank}")
    return m.dense() if comm.rank == 0 else None


def test_more_workers_end_the_recipe_at_one_workers_test_loss(tmp_path):
    # the batch phase minimizes one objective over the same data whatever the number of
    # workers; started from where one worker's online pass ends, N workers end at one
    # worker's model (an average of N online learners started elsewhere: 20 passes of
    # L-BFGS do not forget that, and stop on the holdout at another point)
    from terascale.linear import ParseOptions, read_file
    from terascale.testing import run_workers

    train_p = synthetic.write_click(str(tmp_path / "tr.vw"), 6000, seed=1)
    test = read_file(synthetic.write_click(str(tmp_path / "te.vw"), 3000, seed=2),
                     ParseOptions(bits=18))
    from terascale.linear._modelnb import predict_scores

    def test_loss(w, loss):
        s = predict_scores(test.indptr, test.indices, test.values, w)
        y = test.labels
        if loss == "squared":
            return float(np.mean((s - y) ** 2))
        return float(np.mean(np.logaddexp(0.0, -y * s)))

    for loss in ("logistic", "squared"):
        one = run_workers(_recipe, 1, args=(train_p, loss, str(tmp_path / f"{loss}1")),
                          timeout=300)[0]
        base = test_loss(one, loss)
        for n in (2, 4):
            w = run_workers(_recipe, n, args=(train_p, loss, str(tmp_path / f"{loss}{n}")),
                            timeout=300)[0]
            got = test_loss(w, loss)
            assert abs(got - base) <= 0.01 * base, (loss, n, got, base)


def _one_pass(comm, path, cache_dir):
    opts = {"cache": False} if cache_dir is None else {"cache_dir": f"{cache_dir}-{comm.rank}"}
    return train([path], comm=comm, bits=12, holdout=0.0, **opts).dense()


def test_workers_average_dense_rows_as_they_average_compact_columns(tmp_path):
    # two workers, each moving to dense rows during its text pass, merge into the union
    # and average: bitwise the model of the same workers' passes over their caches
    from terascale.testing import run_workers

    path = synthetic.write_wide(str(tmp_path / "w.vw"), 4000, seed=5, vocab=200_000)
    text = run_workers(_one_pass, 2, args=(path, None), timeout=300)
    cached = run_workers(_one_pass, 2, args=(path, str(tmp_path / "c")), timeout=300)
    assert np.array_equal(text[0], text[1])
    assert np.array_equal(text[0], cached[0])


def _averaged(comm, path, how, l1, dense):
    # one pass from text averaged at its end; counts the exchanges of feature lists
    from terascale.linear import _recipe
    from terascale.linear._io import _stream
    from terascale.linear._online import _firstpass

    # blocks of ~200 examples (and the skip to a worker's first record as short, or the
    # rest of its shard comes as one block): each worker's pass switches at its 2nd block
    _stream.CHUNK_BYTES = _stream._SCAN = 64 << 10
    calls = []
    real = _recipe.union_features
    _recipe.union_features = lambda *a: calls.append(1) or real(*a)
    if not dense:  # the first pass stays in compact columns: averaged in the union
        _firstpass.dense_threshold = lambda bits: 1 << 62
    seen = []
    real_pass = _recipe._average_rows
    _recipe._average_rows = lambda run: seen.append(run.first.weights.rows is not None) or \
        real_pass(run)
    m = train([path], comm=comm, bits=12, holdout=0.0, cache=False, average=how, l1=l1)
    return m.indices, m.weights, m.adaptive, len(calls), seen


@pytest.mark.parametrize("workers, how, l1", [(2, "weighted", 0.0), (3, "uniform", 1e-6)])
def test_dense_rows_averaged_in_place_give_the_unions_average_bitwise(tmp_path, workers,
                                                                       how, l1):
    # every worker's text pass ends in dense rows: the rows are averaged over all 2**bits
    # hashed indices and the union is the or of the workers' bitmaps, with no feature
    # list exchanged; the model is the one the workers make averaging in the union
    from terascale.testing import run_workers

    path = synthetic.write_wide(str(tmp_path / "w.vw"), 4000, seed=5, vocab=200_000)
    rows = run_workers(_averaged, workers, args=(path, how, l1, True), timeout=300)
    union = run_workers(_averaged, workers, args=(path, how, l1, False), timeout=300)
    assert [r[4] for r in rows] == [[True]] * workers  # every pass ended in dense rows
    assert [r[4] for r in union] == [[False]] * workers
    assert [r[3] for r in rows] == [0] * workers
    assert [r[3] for r in union] == [1] * workers
    assert len(union[0][0]) > 4000
    for got, want in zip(rows, union):  # (the state's update multiplier is each rank's)
        assert np.array_equal(got[0], want[0])
        assert got[1].tobytes() == want[1].tobytes() == union[0][1].tobytes()
        for a, b in zip(got[2], want[2]):
            assert a.tobytes() == b.tobytes()


def _cache_pass(comm, path, cache_dir, wide):
    from terascale.linear import _train as t

    if not wide:  # compact columns over the union, whatever its width
        t._wide = lambda distinct, bits: False
    kw = dict(bits=14, holdout=0.0, cache_dir=f"{cache_dir}-{comm.rank}", passes=1)
    train([path], comm=comm, **kw)  # (writes the cache where it is not yet written)
    together = []
    real = t._wide_union
    t._wide_union = lambda *a: together.append(real(*a)) or together[-1]
    m = train([path], comm=comm, **kw)
    return m.indices, m.weights, m.adaptive, "first_pass_s" in m.info, together


def test_caches_wide_together_learn_in_dense_rows_and_give_the_same_model(tmp_path):
    # at -b 14 each worker's cache holds ~8.9k features (below 2/3 of 2**14: compact by
    # itself) and their union 12.8k (above it): the workers' passes over their caches
    # learn in dense rows, averaged in place; the model is the compact columns' one
    from terascale.testing import run_workers

    path = synthetic.write_wide(str(tmp_path / "w.vw"), 1000, seed=5, vocab=200_000)
    cache = str(tmp_path / "c")
    rows = run_workers(_cache_pass, 2, args=(path, cache, True), timeout=300)
    cols = run_workers(_cache_pass, 2, args=(path, cache, False), timeout=300)
    assert [r[3] for r in rows] == [True, True]
    assert [r[4] for r in rows] == [[True], [True]]  # wide together, not each by itself
    assert [r[3] for r in cols] == [False, False]
    assert 3 * len(cols[0][0]) >= 2 << 14
    for got, want in zip(rows, cols):
        assert np.array_equal(got[0], want[0])
        assert got[1].tobytes() == want[1].tobytes() == cols[0][1].tobytes()
        for a, b in zip(got[2], want[2]):
            assert a.tobytes() == b.tobytes()


def _distinct(path, n, width, seed):
    # n examples of `width` features each named once in the whole file (nearly every
    # hashed feature new: the held-out "distinct" shape in small)
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for i in range(n):
            names = " ".join(f"u{i}_{j}:{rng.random():.3f}" for j in range(width))
            f.write(f"{1 if rng.random() < 0.5 else -1} |a {names}\n")
    return path


def test_data_of_features_seen_once_moves_to_dense_rows_early_and_learns_the_same(
        tmp_path, monkeypatch):
    from terascale.linear import ParseOptions, read_file
    from terascale.linear._online import _firstpass
    from terascale.linear._online._firstpass import few_repeats

    path = _distinct(str(tmp_path / "d.vw"), 300, 20, seed=4)
    ds = read_file(path, ParseOptions(bits=16))
    assert len(np.unique(ds.indices)) < dense_threshold(16)  # never reaches the threshold
    cols = LocalColumns(16, dense=True)
    for s in range(0, len(ds), 100):
        cols(ds.indices[ds.indptr[s]:ds.indptr[min(s + 100, len(ds))]], s)
    assert cols.dense_from == 100  # after the first block: 2000 features, ~all new
    assert np.array_equal(cols.features(), np.unique(ds.indices))
    # the bench's wide data (a third of its ids from 10k common ones) keeps the threshold
    wide = synthetic.write_wide(str(tmp_path / "w.vw"), 1000, seed=2)
    wd = read_file(wide, ParseOptions(bits=18))
    cols = LocalColumns(18, dense=True)
    for s in range(0, len(wd), 200):
        cols(wd.indices[wd.indptr[s]:wd.indptr[min(s + 200, len(wd))]], s)
    assert not cols.dense and len(np.unique(wd.indices)) >= 1 << 12
    assert not few_repeats(16, 1023, 1023) and few_repeats(16, 1024, 1170)
    assert not few_repeats(16, 1024, 1171)
    assert few_repeats(26, 1 << 20, 1 << 20) and few_repeats(27, 1 << 21, 1 << 21)
    assert not few_repeats(28, 1 << 24, 1 << 24)
    # the early switch changes no bit: the same model as compact columns throughout
    from terascale.linear._io import _stream

    monkeypatch.setattr(_stream, "CHUNK_BYTES", 8 << 10)  # blocks of ~40 examples
    switched = []
    real = _firstpass.GrowingWeights._to_dense
    monkeypatch.setattr(_firstpass.GrowingWeights, "_to_dense",
                        lambda self: switched.append(self.columns.dense_from) or real(self))
    kw = dict(bits=16, holdout=0.0, cache=False, loss="logistic")
    early = train(path, **kw)
    assert len(switched) == 1 and 0 < switched[0] < 100
    monkeypatch.setattr(_firstpass, "few_repeats", lambda *a: False)
    compact = train(path, **kw)
    assert len(switched) == 1
    assert np.array_equal(early.indices, compact.indices)
    assert early.weights.tobytes() == compact.weights.tobytes()
    for a, b in zip(early.adaptive[:2], compact.adaptive[:2]):
        assert a.tobytes() == b.tobytes()


def test_the_switch_comes_a_block_early_rather_than_build_the_table_for_one_block(
        monkeypatch):
    # the hashed map (from 2**16 entries here, 2**26 in use) would have to become the
    # direct table one block before the threshold: the columns go dense instead
    from terascale.linear import _colindex
    from terascale.linear._online import _firstpass

    monkeypatch.setattr(_colindex, "_MIN_TABLE", 1 << 16)
    monkeypatch.setattr(_firstpass, "few_repeats", lambda *a: False)
    monkeypatch.setattr(LocalColumns, "_to_table", lambda self: pytest.fail("table built"))
    cols = LocalColumns(16, dense=True)
    assert cols.hash is not None
    rng = np.random.default_rng(0)
    space = rng.permutation(1 << 16).astype(np.uint32)
    seen: list[np.ndarray] = []
    for b in range(40):  # 500 new features a block, each twice
        new = space[500 * b:500 * (b + 1)]
        block = np.concatenate([new, new])
        cols(block, 1000 * b)
        seen.append(new)
        if cols.dense:
            break
    # at block 15, 7500 features and 1000 indices to come: a map for 8500 is past 2**13
    assert cols.dense and cols.dense_from == 15_000 and cols.n == 7500
    assert np.array_equal(cols.features(), np.sort(np.concatenate(seen)))


def test_shrinking_dense_rows_lists_the_features_and_keeps_their_rows():
    # the sweep that gathers the seen features' rows to the front lists them too (the
    # bitmap read a byte at a time through tables), and hands back the rows past them
    from terascale.linear._online._firstpass import _set_bits, count_bits

    bits = 20
    rng = np.random.default_rng(7)
    seen = np.zeros((1 << bits) // 8, np.uint8)
    on = np.unique(rng.integers(0, 1 << bits, 60_000))
    on = np.concatenate([[0, 1, 7, 8], on, [(1 << bits) - 1]])  # (the ends of bytes)
    np.bitwise_or.at(seen, on >> 3, (1 << (on & 7)).astype(np.uint8))
    want = np.flatnonzero(np.unpackbits(seen, bitorder="little"))
    assert count_bits(seen) == len(want)
    assert np.array_equal(_set_bits(seen), want)
    rows = _DenseRows(1 << bits)
    rows.rows[:] = rng.random(((1 << bits), 3), dtype=np.float32)
    before = rows.rows[want].copy()
    n, feat = rows.shrink(seen)
    assert n == len(want) and feat.dtype == np.uint32 and np.array_equal(feat, want)
    assert rows.rows[:n].tobytes() == before.tobytes()
    assert not rows.rows[-(-n * 12 // 4096) * 4096 // 12 + 1:].any()  # handed back


def test_compact_columns_in_interleaved_rows_learn_what_three_arrays_learn(tmp_path,
                                                                          monkeypatch):
    # one learner's compact columns are (n, 3) float32 rows, grown by doubling; the
    # three float64 arrays of a mixing learner hold the same values (each rounded to
    # float by the update): the same model bit for bit, predictions included
    from terascale.linear._online._firstpass import GrowingWeights

    path = synthetic.write_click(str(tmp_path / "c.vw"), 3000, seed=5)
    kw = dict(bits=18, holdout=0.0, cache=False)
    seen = []

    class Spy(GrowingWeights):
        def __init__(self, columns, state, *, compact=False, force=None):
            super().__init__(columns, state, compact=compact if force is None else force)
            seen.append((self._grid is not None, self.w.strides[0]))

        def fit(self, block=None):
            super().fit(block)
            seen.append((self._grid is not None, self.w.strides[0]))

    monkeypatch.setattr(_train, "GrowingWeights", Spy)
    rows = train(path, **kw)
    assert seen and all(s == (True, 12) for s in seen)
    assert len(rows.indices) > 1 << 12  # (the rows grew)
    seen.clear()
    monkeypatch.setattr(_train, "GrowingWeights",
                        lambda c, s, compact=False: Spy(c, s, force=False))
    three = train(path, **kw)
    assert seen and all(s == (False, 8) for s in seen)
    assert rows.indices.tobytes() == three.indices.tobytes()
    assert rows.weights.tobytes() == three.weights.tobytes()
    for a, b in zip(rows.adaptive[:2], three.adaptive[:2]):
        assert a.tobytes() == b.tobytes()
