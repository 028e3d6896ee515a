"""Streaming: shards are read in bounded blocks (text chunks, the block-encoded cache), the
results do not depend on where blocks are cut, and training fits in an address space far
smaller than the data."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest
from _linear_data import vw_lines

import terascale.linear as tl
from terascale._errors import ConfigError, DataError
from terascale.linear._io import _stream
from terascale.linear._io._cache import load_cached
from terascale.linear._io._cachefmt import decode_block, decode_labels, encode_block
from terascale.linear._io._dataset import ParseOptions
from terascale.linear.synthetic import write_click
from terascale.testing import run_workers

ARRAYS = ("indptr", "indices", "values", "labels", "weights")


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(_stream, "CHUNK_BYTES", 1000)  # dozens of blocks from a small file


def _same(a, b, tags=True):
    for k in ARRAYS + (("tag_ptr", "tag_blob") if tags else ()):
        np.testing.assert_array_equal(np.asarray(getattr(a, k)), np.asarray(getattr(b, k)),
                                      err_msg=k)


@pytest.mark.parametrize("bits", [1, 7, 16, 18, 24, 30, 32])
def test_block_encoding_round_trips_exactly(bits):
    rng = np.random.default_rng(bits)
    for case in range(4):
        n = int(rng.integers(0, 300))
        lens = rng.integers(0, 40, n)
        if case == 1 and n:
            lens[0] = 70000  # counts beyond two bytes
        indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        nnz = int(indptr[-1])
        indices = rng.integers(0, 1 << bits, nnz).astype(np.uint32)
        values = np.where(rng.random(nnz) < 0.5, 1.0, rng.normal(size=nnz) * 1e3
                          ).astype(np.float32)
        labels = (rng.choice([-1.0, 1.0, 0.0, np.nan], n) if case % 2 == 0
                  else rng.normal(size=n)).astype(np.float32)
        weights = (np.ones(n) if case < 2 else rng.random(n) * 3).astype(np.float32)
        tag_ptr = tag_blob = None
        if case == 3:
            tl_ = rng.integers(0, 5, n)
            tag_ptr = np.concatenate([[0], np.cumsum(tl_)]).astype(np.int64)
            tag_blob = rng.integers(32, 127, int(tag_ptr[-1])).astype(np.uint8)
        rec, flags, ntag = encode_block(indptr, indices, values, labels, weights, tag_ptr,
                                        tag_blob, bits)
        buf = np.frombuffer(rec, np.uint8)
        got = decode_block(buf, n, nnz, flags, ntag, bits)
        for want, have in zip((indptr, indices, values, labels, weights), got[:5]):
            np.testing.assert_array_equal(have, want)
        lab, w = decode_labels(buf, n, nnz, flags, ntag, bits)
        np.testing.assert_array_equal(lab, labels)
        np.testing.assert_array_equal(w, weights)
        if tag_ptr is not None and tag_ptr[-1] > 0:
            np.testing.assert_array_equal(got[5], tag_ptr)
            np.testing.assert_array_equal(got[6], tag_blob)
        if bits <= 16 and case == 0:  # 2 bytes an index at most, nothing for 1.0 values
            assert len(rec) <= n * 2 + nnz * 2 + (nnz + 7) // 8 + 4 * int(np.sum(values != 1))
        if np.any(values != 1.0):  # a value section cut short is an error, not garbage
            with pytest.raises(ValueError, match="bitmap"):
                decode_block(buf[:-4], n, nnz, flags, ntag, bits)


def _files(tmp_path, text: str, name: str) -> list[str]:
    plain = tmp_path / name
    plain.write_text(text)
    with gzip.open(str(plain) + ".gz", "wt") as f:
        f.write(text)
    with zipfile.ZipFile(str(plain) + ".zip", "w") as z:
        z.writestr(name, text)
    return [str(plain), str(plain) + ".gz", str(plain) + ".zip"]


def test_byte_range_shards_stream_every_record_once(tmp_path, small_chunks):
    lines = vw_lines(700, seed=3, weights=True)
    lines[100] = "1 |a " + " ".join(f"long{i}" for i in range(400))  # longer than a chunk
    whole = tl.parse_lines(lines, bits=16, quadratic=["ab"])
    opts = whole.parse
    for path in _files(tmp_path, "\n".join(lines) + "\n", "d.vw"):
        for n in (1, 2, 3, 7):
            parts = [tl.TextBlocks(path, opts, shard=(k, n)).dataset() for k in range(n)]
            _same(tl.Dataset.concat(parts), whole)


def test_csv_shards_stream_quoted_line_breaks(tmp_path, small_chunks):
    rows = [f'{i % 2},{i * 0.5},"note {i}\nsecond line, with comma",{"ab"[i % 2]}'
            for i in range(300)]
    text = "y,x,note,kind\n" + "\n".join(rows) + "\n"
    opts = ParseOptions(format="csv", label="y", ignore=("note",))
    path = tmp_path / "t.csv"
    path.write_text(text)
    whole = tl.read_file(str(path), opts)
    assert len(whole) == 300
    for p in _files(tmp_path, text, "t.csv"):
        for n in (1, 2, 5):
            parts = [tl.TextBlocks(p, opts, shard=(k, n)).dataset() for k in range(n)]
            _same(tl.Dataset.concat(parts), whole, tags=False)


def test_bad_line_in_a_later_shard_names_its_line(tmp_path, small_chunks):
    lines = vw_lines(400, seed=1)
    lines[350] = "1 |a x:1notanumber"
    path = tmp_path / "bad.vw"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"bad\.vw, line 351: a feature value is not a number"):
        tl.TextBlocks(str(path), ParseOptions(), shard=(1, 2)).stats()


def test_cache_is_streamed_compact_and_trains_bitwise_as_in_memory(tmp_path, small_chunks):
    lines = vw_lines(1500, seed=5, weights=True)
    path = tmp_path / "d.vw"
    path.write_text("\n".join(lines) + "\n")
    whole = tl.parse_lines(lines, bits=18)
    blocks, hit = load_cached(str(path), whole.parse, cache_dir=str(tmp_path / "c"))
    assert not hit and len(blocks.index) > 20  # many blocks
    again, hit = load_cached(str(path), whole.parse, cache_dir=str(tmp_path / "c"))
    assert hit
    _same(again.dataset(), whole)
    np.testing.assert_array_equal(again.features(), np.unique(whole.indices))
    text_bytes = os.path.getsize(path)
    assert again.size_bytes < text_bytes  # smaller than the text it came from
    for kw in ({"passes": 3}, {"bfgs": 8}, {"cg": 6}, {"passes": 2, "l1": 1e-4}):
        streamed = tl.train(again, holdout=0.2, **kw)
        memory = tl.train(whole, holdout=0.2, **kw)
        text = tl.train(tl.TextBlocks(str(path), whole.parse), holdout=0.2, **kw)
        for m in (memory, text):
            np.testing.assert_array_equal(m.indices, streamed.indices)
            np.testing.assert_array_equal(m.weights, streamed.weights)
    np.testing.assert_array_equal(streamed.predict(str(path)), streamed.predict(whole))


def test_first_pass_over_text_learns_while_caching_bitwise_as_from_the_cache(
        tmp_path, small_chunks):
    """Without a cache the first pass learns from the blocks as they are parsed (local
    columns, the cache written meanwhile); the weights, learner state and progressive
    predictions are bitwise those of a run from the finished cache and from memory, also
    over two files (positions run on: the holdout set is the same)."""
    lines = vw_lines(1500, seed=7, weights=True)
    one, a, b = tmp_path / "d.vw", tmp_path / "a.vw", tmp_path / "b.vw"
    one.write_text("\n".join(lines) + "\n")
    a.write_text("\n".join(lines[:700]) + "\n")
    b.write_text("\n".join(lines[700:]) + "\n")
    whole = tl.parse_lines(lines, bits=18)

    def run(data, cache):
        preds = []
        m = tl.train(data, bits=18, cache_dir=cache, passes=3, holdout=0.2,
                     predictions=lambda p, tags: preds.append(p.copy()))
        return m, np.concatenate(preds)

    for data, cache in ((str(one), str(tmp_path / "c1")), ([str(a), str(b)],
                                                             str(tmp_path / "c2"))):
        text, p_text = run(data, cache)
        assert "first_pass_s" in text.info  # learned while parsing
        paths = [data] if isinstance(data, str) else data
        assert all(load_cached(p, whole.parse, shard=(0, 1), cache_dir=cache)[1]
                   for p in paths)  # and left the cache complete
        cached, p_cached = run(data, cache)
        assert "first_pass_s" not in cached.info
        memory, p_memory = run(whole, cache)
        for m, p in ((cached, p_cached), (memory, p_memory)):
            np.testing.assert_array_equal(m.indices, text.indices)
            np.testing.assert_array_equal(m.weights, text.weights)
            for x, y in zip(m.adaptive, text.adaptive):
                np.testing.assert_array_equal(x, y)
            np.testing.assert_array_equal(p, p_text)


def _ranks(comm, path, cache, kw):
    return tl.train(path, comm=comm, bits=18, cache_dir=cache, **kw).dense()


@pytest.mark.parametrize("n", [1, 2, 3])
def test_every_rank_ends_bitwise_identical_from_streamed_shards(tmp_path, n, small_chunks):
    path = tmp_path / "d.vw"
    path.write_text("\n".join(vw_lines(1200, seed=9)) + "\n")
    for kw in ({"passes": 2}, {"bfgs": 6}):
        ws = run_workers(_ranks, n, args=(str(path), str(tmp_path / "c"), kw), timeout=180)
        for w in ws[1:]:
            np.testing.assert_array_equal(w, ws[0])
        assert np.any(ws[0] != 0)



def _mixed_text(comm, paths, caches, every):
    _stream.CHUNK_BYTES = 1000  # many blocks: the mapping thread runs ahead of the learner
    out = []
    for cache in caches:
        cache = f"{cache}-{comm.rank}"
        fresh = not os.path.exists(cache)
        m = tl.train(paths, comm=comm, bits=18, cache_dir=cache, average_every=every, passes=2)
        out.append((m.dense(), m.info.get("mixes"), fresh, "first_pass_s" in m.info))
    return out


def test_mixing_while_parsing_text_is_deterministic_and_equals_the_cached_pass(tmp_path):
    """Workers mixing during the first pass over text (local columns, a mixed space grown
    from the features learned so far) with unequal shards (whole files of 1500, 300 and
    700 lines): every rank bitwise the same, run after run; with 2 workers bitwise the
    same as the pass over the cache (the compact union's columns; with 3 the allreduce may
    add in another order)."""
    paths = []
    for k, n in enumerate((1500, 300, 700)):
        paths.append(str(tmp_path / f"d{k}.vw"))
        (tmp_path / f"d{k}.vw").write_text("\n".join(vw_lines(n, seed=30 + k)) + "\n")
    for n, dirs in ((2, "aa"), (3, "ab")):  # 2: text, then the cache; 3: text twice
        ws = run_workers(_mixed_text, n, args=(paths[:n], [str(tmp_path / f"c{n}{d}")
                                                           for d in dirs], 150), timeout=180)
        ref = ws[0][0][0]
        assert np.any(ref != 0)
        for runs in ws:
            for w, mixes, fresh, text in runs:
                assert text == fresh
                np.testing.assert_array_equal(w, ref)  # every rank, every run
                assert mixes == 2 * (1500 // 150 + 1)
        assert [t for _, _, _, t in ws[0]] == ([True, False] if n == 2 else [True, True])


_CHILD = r"""
import json, resource, sys
limit = int(sys.argv[3])
if limit:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
import terascale.linear as tl
from terascale._errors import ConfigError, DataError
what = sys.argv[4]
out = {}
try:
    if what in ("train", "online"):  # online: the first pass learns as it parses
        batch = {"bfgs": 2} if what == "train" else {}  # (one pass: the cache written)
        m = tl.train(sys.argv[1], cache_dir=sys.argv[2], bits=16, passes=1, holdout=0.1,
                     **batch)
        out["examples"] = m.info["examples"]
        out["logloss"] = m.info["online_loss"][-1]
        out["first_pass"] = "first_pass_s" in m.info
    else:
        out["examples"] = len(tl.read_file(sys.argv[1], tl.ParseOptions(bits=16)))
except MemoryError:
    out["error"] = "MemoryError"
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
out["peak"] = int(status["VmPeak"].split()[0]) * 1024
print(json.dumps(out))
"""


def _child(path: str, cache: str, limit: int, what: str) -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD, path, cache, str(limit), what],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_trains_on_data_several_times_larger_than_its_address_space_allows(tmp_path):
    """The worker's address space is capped (RLIMIT_AS) at what a small run needs plus
    ``headroom`` (numba and LLVM alone take ~600 MB of address space); the data is 3x
    that as text and ~6x as in-memory arrays: streamed training (cache write, online
    passes, L-BFGS) passes, while reading the same file into memory fails. -b 16 keeps
    the weight state (which may grow with the distinct features seen) the same in both
    runs."""
    headroom = 30 << 20
    small, big = str(tmp_path / "small.vw"), str(tmp_path / "big.vw")
    write_click(small, 20_000, seed=1)   # a few chunks: the parser's threads all run
    write_click(big, 500_000, seed=2)    # ~100 MB of text
    assert os.path.getsize(big) > 3 * headroom
    base = _child(small, str(tmp_path / "c0"), 0, "train")["peak"]
    limit = base + headroom
    got = _child(big, str(tmp_path / "c1"), limit, "train")
    assert got.get("error") is None and got["examples"] == 500_000
    assert 0.0 < got["logloss"] < 0.69  # it learned
    # the first pass over text learns as it parses: more blocks in flight, its own base
    own = _child(small, str(tmp_path / "c4"), 0, "online")["peak"] + headroom
    online = _child(big, str(tmp_path / "c3"), own, "online")
    assert online.get("error") is None and online["examples"] == 500_000
    assert online["first_pass"] and 0.0 < online["logloss"] < 0.69
    loaded = _child(big, str(tmp_path / "c2"), limit, "read")  # what streaming avoids
    assert loaded.get("error") == "MemoryError"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice: Linux")
def test_helper_threads_yield_the_core_to_the_learner(tmp_path, monkeypatch):
    """The threads that parse, decode and write the cache run at the lowest priority (a
    learner woken at a barrier must not wait for their time slice), the learner's thread
    and the caller's stay as they were, and the result is the same bits either way."""
    import threading

    from terascale import _background
    from terascale.linear._io import _blocks, _cachewrite

    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    seen = {}
    encode = _cachewrite.encode_block

    def spy(*args):
        seen[threading.current_thread().name] = nice()
        return encode(*args)

    monkeypatch.setattr(_cachewrite, "encode_block", spy)
    before = nice()
    path = tmp_path / "d.vw"
    path.write_text("\n".join(vw_lines(400, seed=5)) + "\n")
    low = tl.train(str(path), bits=16, cache_dir=str(tmp_path / "c1"))
    assert seen and all(v == _background.BACKGROUND_NICE for v in seen.values()), seen
    assert threading.main_thread().name not in seen
    got = list(_blocks.prefetch(nice() for _ in range(3)))  # the generator runs there
    assert got == [_background.BACKGROUND_NICE] * 3
    assert nice() == before
    monkeypatch.setenv("TERASCALE_BACKGROUND_NICE", "0")
    seen.clear()
    same = tl.train(str(path), bits=16, cache_dir=str(tmp_path / "c2"))
    assert seen and set(seen.values()) == {before}
    np.testing.assert_array_equal(same.weights, low.weights)
    for bad in ("high", "25"):  # reported once, by name, and the default used
        monkeypatch.setenv("TERASCALE_BACKGROUND_NICE", bad)
        with pytest.warns(RuntimeWarning, match="TERASCALE_BACKGROUND_NICE.*" + bad):
            assert _background._nice() == _background.BACKGROUND_NICE


def test_one_pass_writes_a_cache_only_when_asked_as_vw_does(tmp_path, monkeypatch):
    """One online pass reads the text once and, like VW without -c, leaves no cache; -c
    (cache=True), a cache_dir given, or a run that reads the data again (passes > 1,
    L-BFGS) caches it; the model is the same bits either way."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    os.makedirs(tmp_path / "tmp")
    default = tmp_path / "tmp" / "terascale-cache"
    path = tmp_path / "d.vw"
    path.write_text("\n".join(vw_lines(300, seed=4)) + "\n")

    def entries(root):
        return sorted(os.listdir(root)) if os.path.isdir(root) else []

    plain = tl.train(str(path), bits=16)
    assert entries(default) == []
    asked = tl.train(str(path), bits=16, cache=True)
    assert len(entries(default)) == 1
    np.testing.assert_array_equal(plain.dense(), asked.dense())
    again = tl.train(str(path), bits=16)  # a cache written earlier is used
    np.testing.assert_array_equal(plain.dense(), again.dense())
    given = tmp_path / "given"
    tl.train(str(path), bits=16, cache_dir=str(given))
    assert len(entries(given)) == 1
    two = tmp_path / "two"
    tl.train(str(path), bits=16, passes=2, cache_dir=str(two), cache=None)
    assert len(entries(two)) == 1
    off = tmp_path / "off"
    tl.train(str(path), bits=16, passes=2, cache_dir=str(off), cache=False)
    assert entries(off) == []
    with pytest.raises(ConfigError, match="cache"):
        tl.train(str(path), bits=16, cache=True, cache_dir="")
    with pytest.raises(ConfigError, match="cache"):
        tl.train(str(path), bits=16, cache="yes")


def test_cli_dash_c_caches_one_pass(tmp_path):
    path = tmp_path / "d.vw"
    path.write_text("\n".join(vw_lines(200, seed=6)) + "\n")
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    for extra, n in (([], 0), (["-c"], 1)):
        subprocess.run([sys.executable, "-m", "terascale", "linear", "train", str(path), "-b",
                        "16", "--quiet", *extra], check=True, env=env, timeout=120)
        root = tmp_path / "terascale-cache"
        got = [e for e in os.listdir(root) if not e.startswith(".")] if root.is_dir() else []
        assert len(got) == n, (extra, got)


def test_first_pass_keeps_the_adaptive_state_in_float32_without_losing_a_bit(tmp_path):
    # the learner rounds every adaptive sum and normalizer to float (as VW): stored in
    # float32 (the text pass) or float64 (every other pass), the model is the same
    import numpy as np

    from terascale.linear import synthetic, train
    from terascale.linear._online._firstpass import GrowingWeights, LocalColumns
    from terascale.linear._online._update import new_state

    ws = GrowingWeights(LocalColumns(12), new_state(), compact=True)
    assert ws.g2.dtype == ws.nrm.dtype == ws.w.dtype == np.float32
    path = synthetic.write_click(str(tmp_path / "c.vw"), 3000, seed=4)
    text = train(path, bits=16, cache=False, holdout=0.0)  # the text pass, compact
    cached = train(path, bits=16, cache_dir=str(tmp_path / "c"), passes=1, holdout=0.0)
    again = train(path, bits=16, cache_dir=str(tmp_path / "c"), passes=1, holdout=0.0)
    assert np.array_equal(text.dense(), again.dense()) and np.array_equal(cached.dense(),
                                                                          again.dense())
    assert np.array_equal(text.adaptive[0], again.adaptive[0])
    # both now store float32 (one worker): the premise itself, float32 storage against
    # float64 on the same parsed examples, learner state compared bit for bit
    from terascale.linear import ParseOptions, read_file
    from terascale.linear._online._update import online_chunk

    ds = read_file(path, ParseOptions(bits=16))
    cols = np.unique(ds.indices, return_inverse=True)[1].astype(np.uint32)
    d = int(cols.max()) + 1
    got = []
    for dtype in (np.float32, np.float64):
        w, g2, nrm = np.zeros(d, dtype), np.zeros(d, dtype), np.zeros(d, dtype)
        st, acc = new_state(), np.zeros(8)
        online_chunk(ds.indptr, cols, ds.values, ds.labels, ds.weights,
                     np.zeros(len(ds), np.bool_), 0, len(ds), w, g2, nrm, st, 0, 0.5, 0.5,
                     0.0, 0.0, acc, None)
        got.append((w.astype(np.float64), g2.astype(np.float64), nrm.astype(np.float64),
                    st, acc))
    for a, b in zip(*got):
        assert np.array_equal(a, b)
