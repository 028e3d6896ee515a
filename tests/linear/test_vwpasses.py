"""``terascale vw --passes N`` with a cache in the compiled learner (``_vw/_vwpasses``): the
same bytes as the numba pass and VW, the cache either path reads, no numba imported."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from _vw_runs import FULL, more, run_ok, vw_in_one_process

from terascale._cext import load
from terascale.linear._vw import VWFAST

FAST = load(*VWFAST)
built = pytest.mark.skipif(FAST is None, reason="terascale.linear._vw._vwfast was not built")
# VW's lines on its learner stack, which terascale vw does not print
_STACK = ("Enabled learners", "Input label", "Output pred")


def _click(n: int, seed: int) -> list[str]:
    """Narrow click-like rows: a user, an ad and its position, -1/+1 labels."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        u, a, pos = rng.integers(60), rng.integers(25), rng.integers(4)
        y = 1 if rng.random() < 0.15 + 0.02 * (a % 5) + 0.05 * (u % 3 == 0) else -1
        out.append(f"{y} |u u{u} |a a{a} p{pos}")
    return out


def _wide(n: int, seed: int) -> list[str]:
    """Wide rows of Zipf-distributed hexadecimal ids (most of them rare)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ids = rng.zipf(1.3, size=24) % (1 << 40)
        out.append(f"{1 if ids[0] % 3 == 0 else -1} |i " + " ".join(f"{v:x}" for v in ids))
    return out


def _weighted(n: int, seed: int) -> list[str]:
    """Importance-weighted regression: real labels, weights 0 to 2, tags, unlabelled
    rows and an empty line (VW counts it towards the holdout)."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        lab = "" if rng.random() < 0.05 else f"{rng.normal():.4f}"
        imp = f" {rng.choice(['2', '0.5', '0', '1'])}" if lab else ""
        tag = f" 't{i}" if rng.random() < 0.3 else ""
        out.append(f"{lab}{imp}{tag} |a x{rng.integers(30)}:{rng.normal():.3f} "
                   f"y{rng.integers(10)} |b z{rng.integers(7)}")
        if i == n // 2:
            out.append("")
    return out


def _outputs(tmp_path, who: str, data, args: list[str], run: str = "") -> dict[str, bytes]:
    """The -p, -r, -f files and stderr of one run (``c``: the compiled path, ``numba``,
    ``vw``) in its own directory ``who + run``, a cache of its own (``who``'s)."""
    d = tmp_path / f"{who}{run}"
    d.mkdir()
    os.chmod(d, 0o700)
    if who == "vw":
        cmd, env = [sys.executable, "-m", "vowpalwabbit"], None
    else:
        cmd = [sys.executable, "-m", "terascale", "vw", "--cache-dir",
               str(tmp_path / f"{who}.cache")]
        env = {"TERASCALE_NO_CEXT": "1"} if who == "numba" else None
    err = run_ok([*cmd, "-d", str(data), *args, "-p", "p", "-r", "r", "-f", "m"], d, env)
    if who == "vw":
        err = "".join(ln for ln in err.splitlines(True) if not ln.startswith(_STACK))
    return {"err": err.encode(), **{f: (d / f).read_bytes() for f in "prm"}}


SHAPES = {"click": _click, "wide": _wide, "weighted": _weighted}
CASES = [
    ("click", ["--passes", "4", "-c", "--loss_function", "logistic", "-q", "ua"]),
    more("wide", ["-b", "24", "--passes", "3", "-c", "--loss_function", "logistic"]),
    more("weighted", ["--passes", "6", "-c", "--holdout_period", "4", "--early_terminate",
                      "1", "--decay_learning_rate", "0.7"]),
    more("weighted", ["--passes", "3", "-k", "-c", "--holdout_after", "1500", "--l1",
                      "1e-4", "--l2", "1e-4"]),
    more("weighted", ["--passes", "3", "--cache_file", "x.cache", "--holdout_off",
                      "--loss_function", "quantile", "--quantile_tau", "0.3"]),
    more("click", ["-c", "--loss_function", "hinge", "-P", "100"]),
    more("click", ["--passes", "8", "-c", "--loss_function", "logistic", "--link",
                   "logistic", "--early_terminate", "2"]),
]


@built
@pytest.mark.parametrize(("shape", "args"), CASES)
def test_passes_over_a_cache_equal_the_numba_pass_and_vw(tmp_path, shape, args):
    data = tmp_path / "d.vw"
    data.write_text("\n".join(SHAPES[shape](1000, len(args))) + "\n")
    c = _outputs(tmp_path, "c", data, args)
    vw = _outputs(tmp_path, "vw", data, args)
    assert c["p"] == vw["p"] and c["r"] == vw["r"] and c["err"] == vw["err"]
    # a second run reads the cache the first wrote: the same bytes
    assert _outputs(tmp_path, "c", data, args, "2") == c
    assert len(os.listdir(tmp_path / "c.cache")) == 1
    if shape == "click" and "-c" in args and "--passes" in args:  # (CI: one numba run)
        numba = _outputs(tmp_path, "numba", data, args)
        assert c == numba


@built
@FULL
def test_the_numba_pass_and_the_compiled_path_read_each_others_cache(tmp_path):
    data = tmp_path / "d.vw"
    data.write_text("\n".join(_weighted(1500, 7)) + "\n")
    os.chmod(tmp_path, 0o700)
    runs = []
    for k, who in enumerate(("1", "", "", "1")):  # numba writes, C reads; C writes, numba reads
        cache = tmp_path / f"cache{k // 2}"
        env = {"TERASCALE_NO_CEXT": who} if who else None
        run_ok([sys.executable, "-m", "terascale", "vw", "--cache-dir", str(cache), "-d",
                str(data), "--passes", "3", "-c", "-p", f"p{k}", "--quiet"], tmp_path, env)
        runs.append((tmp_path / f"p{k}").read_bytes())
        assert len(os.listdir(cache)) == 1
    assert runs[0] == runs[1] == runs[2] == runs[3]


@built
def test_a_run_of_passes_over_a_cache_imports_no_numba(tmp_path):
    (tmp_path / "d.vw").write_text("\n".join(_click(300, 1)) + "\n")
    os.chmod(tmp_path, 0o700)
    common = ["-d", "d.vw", "--cache-dir", "cache", "-f", "m", "--quiet"]
    assert vw_in_one_process([[*common, *line] for line in (
        ["-c"], ["--passes", "3", "-c"], ["--passes", "3", "-c"],
        ["--passes", "2", "-c", "--save_per_pass"])], tmp_path) == []
    assert len(os.listdir(tmp_path / "cache")) == 1  # (written once, then read)
    assert (tmp_path / "m.1").stat().st_size and (tmp_path / "m.2").stat().st_size


@built
@FULL
@pytest.mark.parametrize("args", [["--passes", "4", "-c"],
                                  ["--passes", "10", "-c", "--loss_function", "logistic",
                                   "--link", "logistic", "--early_terminate", "2"]])
def test_save_per_pass_writes_the_numba_pass_models(tmp_path, args):
    data = tmp_path / "d.vw"
    data.write_text("\n".join(_click(1000, 3)) + "\n")
    got = {}
    for who, env in (("c", None), ("numba", {"TERASCALE_NO_CEXT": "1"})):
        d = tmp_path / who
        d.mkdir()
        os.chmod(d, 0o700)
        err = run_ok([sys.executable, "-m", "terascale", "vw", "--cache-dir", "cache", "-d",
                      str(data), *args, "--save_per_pass", "-f", "m", "-p", "p"], d, env)
        got[who] = {"err": err, **{f: (d / f).read_bytes() for f in os.listdir(d)
                                   if f != "cache"}}
    assert got["c"] == got["numba"]
    assert "m.1" in got["c"] and "m.3" in got["c"]


@built
def test_the_cache_kernels_are_the_numba_kernels():
    from terascale.linear._io import _bitkernels as nb

    rng = np.random.default_rng(0)
    for bits in (1, 7, 18, 24, 32):
        for n in (0, 1, 9, 1000):
            idx = rng.integers(0, 1 << bits, size=n, dtype=np.uint64).astype(np.uint32)
            packed = [np.zeros((n * bits + 7) // 8, np.uint8) for _ in range(2)]
            nb.pack(idx, bits, packed[0])
            FAST.pack(idx, bits, packed[1])
            assert packed[0].tobytes() == packed[1].tobytes()
            back = np.empty(n, np.uint32)
            FAST.unpack(packed[0], bits, back)
            assert np.array_equal(back, idx)
    bitmap = np.packbits(rng.random(100) < 0.3, bitorder="little")
    stored = rng.normal(size=40).astype(np.float32)
    got = [np.empty(100, np.float32) for _ in range(2)]
    assert nb.unvalues(bitmap, stored, got[0]) == FAST.unvalues(bitmap, stored, got[1])
    assert got[0].tobytes() == got[1].tobytes()
    marks = [np.zeros(64, np.bool_) for _ in range(2)]
    idx = rng.integers(0, 64, size=30).astype(np.uint32)
    nb.mark(marks[0], idx)
    FAST.mark(marks[1], idx)
    assert np.array_equal(marks[0], marks[1])
    with pytest.raises(ValueError, match="past the bitmap"):
        FAST.mark(marks[1], np.array([64], np.uint32))


def _block(rng, bits: int, case: int) -> tuple:
    """A parsed block's arrays (indptr, indices, values, labels, weights, tag_ptr,
    tag_blob, blanks, ignored) of every kind a record stores: long rows, float labels
    (-0.0 among them), weights, tags, empty lines and ``--ignore_linear`` counts."""
    n = int(rng.integers(0, 200))
    lens = rng.integers(0, 30, n)
    if n and case in (1, 5):
        lens[0] = 70000 if case == 1 else 300  # (counts of 4 and 2 bytes)
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    nnz = int(indptr[-1])
    indices = rng.integers(0, 1 << bits, nnz, dtype=np.uint64).astype(np.uint32)
    values = np.where(rng.random(nnz) < 0.5, 1.0, rng.normal(size=nnz)).astype(np.float32)
    labels = (rng.choice([-1.0, 1.0, 0.0, np.nan], n) if case % 2 == 0
              else rng.normal(size=n)).astype(np.float32)
    if n and case == 6:
        labels[0] = -0.0  # (a float: VW prints it -0.0000)
    weights = (np.ones(n) if case < 2 else rng.random(n) * 3).astype(np.float32)
    tag_ptr = tag_blob = None
    if case in (3, 7):
        tag_ptr = np.concatenate([[0], np.cumsum(rng.integers(0, 5, n))]).astype(np.int64)
        tag_blob = rng.integers(32, 127, int(tag_ptr[-1])).astype(np.uint8)
    blanks = (np.sort(rng.integers(0, n + 1, int(rng.integers(1, 5)))).astype(np.int64)
              if case >= 4 else None)
    ignored = rng.integers(0, 3, n).astype(np.int64) if case in (4, 7) else None
    return indptr, indices, values, labels, weights, tag_ptr, tag_blob, blanks, ignored


@built
@pytest.mark.parametrize("bits", [1, 7, 18, 24, 32])
def test_the_compiled_records_are_the_numpy_records(bits):
    """The compiled core encodes a block into the bytes numpy's encoder writes, and
    decodes a record into the arrays numpy's decoder reads (as typed memoryviews: no
    numpy), so a cache is the same whichever wrote it."""
    from terascale.linear._io._cachefmt import (
        decode_blanks,
        decode_block,
        decode_chunk,
        decode_ignored,
        encode_block,
        encode_numpy,
    )

    rng = np.random.default_rng(bits)
    for case in range(8):
        arrays = _block(rng, bits, case)
        indptr, *_, tag_ptr, tag_blob, blanks, ignored = arrays
        n, nnz = len(indptr) - 1, int(indptr[-1])
        rec, flags, ntag = encode_block(*arrays[:7], bits, blanks, ignored)
        assert (rec, flags, ntag) == encode_numpy(*arrays[:7], bits, blanks, ignored), case
        buf = np.frombuffer(rec, np.uint8)
        want = list(decode_block(buf, n, nnz, flags, ntag, bits))
        if want[5] is None:  # (no tags: a chunk's are zeros and no bytes)
            want[5:7] = np.zeros(n + 1, np.int64), np.zeros(0, np.uint8)
        want += [decode_blanks(buf, n, nnz, flags, ntag, bits),
                 decode_ignored(buf, n, nnz, flags, ntag, bits)]
        got = decode_chunk(rec, n, nnz, flags, ntag, bits, ("a note",))
        assert got[7] == ("a note",)
        for k, (a, b) in enumerate(zip(want, got[:7] + got[8:])):
            assert (a is None) == (b is None), (case, k)
            if a is not None:
                assert isinstance(b, memoryview) and b.itemsize == a.itemsize, (case, k)
                assert a.tobytes() == b.tobytes(), (case, k)
        if np.any(arrays[2] != 1.0):  # (a value section cut short: an error)
            with pytest.raises(ValueError, match="bitmap"):
                decode_chunk(rec[:-4], n, nnz, flags, ntag, bits)
        if n and ntag:  # an index whose tag bytes the counts do not add up to: an error
            with pytest.raises(ValueError, match="do not add up"):
                decode_chunk(rec, n, nnz, flags, ntag - 1, bits)
        if nnz and not np.any(arrays[2] != 1.0):  # (nor its features)
            with pytest.raises(ValueError, match="do not add up|bitmap"):
                decode_chunk(rec, n, nnz - 1, flags, ntag, bits)
    with pytest.raises(ValueError, match="indptr must be an array of int64"):
        encode_block(np.zeros(1, np.int32), *_block(rng, bits, 0)[1:7], bits)


def test_a_cache_index_and_features_are_np_save_files(tmp_path):
    """The cache's ``.npy`` files, written without numpy, are ``np.save``'s bytes, and
    read back as ``np.load`` reads them."""
    from terascale.linear._io._npyfile import npy_header, read_rows

    for arr in (np.arange(60, dtype=np.int64).reshape(10, 6) * 12345678901,
                np.zeros((0, 6), np.int64), np.arange(7, dtype=np.uint32),
                np.zeros(0, np.uint32), np.arange(10**5, dtype=np.uint32)):
        np.save(tmp_path / "a.npy", arr)
        assert (tmp_path / "a.npy").read_bytes() == \
            npy_header(arr.dtype.str, arr.shape) + arr.tobytes()
        if arr.ndim == 2:
            assert read_rows(str(tmp_path / "a.npy"), 6) == [tuple(r) for r in arr.tolist()]
    np.save(tmp_path / "b.npy", np.zeros((2, 5), np.int64))
    with pytest.raises(ValueError, match="of 6 columns"):
        read_rows(str(tmp_path / "b.npy"), 6)


def test_a_cache_of_one_block_is_read_without_a_thread(tmp_path, monkeypatch):
    """Each pass over a cache entry of one block reads it in the learner's thread (a
    thread started a pass was most of a small file's pass); an entry of more blocks is
    read ahead in another thread, the same blocks in the same order."""
    import concurrent.futures as cf

    from terascale.linear._io._cache import CacheBlocks
    from terascale.linear._options import ParseOptions
    from terascale.linear._vw import _vwpasses

    started: list[int] = []
    real = cf.ThreadPoolExecutor
    monkeypatch.setattr(cf, "ThreadPoolExecutor",
                        lambda *a, **k: (started.append(1), real(*a, **k))[1])
    (tmp_path / "d.vw").write_text("".join(f"{i % 2} |a x{i} y\n" for i in range(50)))
    run_ok([sys.executable, "-m", "terascale", "vw", "--cache-dir", "cache", "-d", "d.vw",
            "-c", "--quiet"], tmp_path)
    entry = next(os.path.dirname(str(p)) for p in (tmp_path / "cache").rglob("meta.json"))
    cached = CacheBlocks(entry, ParseOptions(bits=18), str(tmp_path / "d.vw"))
    assert len(cached.index) == 1
    one = list(_vwpasses._decoded(cached))
    assert started == [] and len(one) == 1
    cached.index = np.concatenate([cached.index, cached.index])  # (the block twice)
    two = list(_vwpasses._decoded(cached))
    assert started == [1] and len(two) == 2
    for a, b in zip(one[0][:5], two[1][:5]):
        assert np.array_equal(a, b)



@built
@pytest.mark.parametrize("args", [
    ["--passes", "300", "-c", "--holdout_off", "--decay_learning_rate", "0.99", "-q", "ab"],
    more(["--passes", "60", "-c", "--holdout_period", "4", "--early_terminate", "40",
          "--l1", "1e-5"]),
    more(["--passes", "200", "-k", "--cache_file", "x.cache", "--loss_function", "quantile",
          "--quantile_tau", "0.3", "--holdout_off", "--quiet"]),
])
def test_many_passes_over_a_small_cache_are_compiled_calls(tmp_path, capfd, monkeypatch,
                                                           args):
    """The later passes over a small cache that report nothing are made many at a time by
    the compiled learner (``_vwpasses.Replay``): the same table, model and counters as a
    pass at a time, and VW's table and closing block."""
    from _vw_runs import run_ts

    from terascale.linear._vw import _vwonline, _vwpasses

    os.chmod(tmp_path, 0o700)
    made = []
    real = _vwonline._Pass.learn
    monkeypatch.setattr(_vwonline._Pass, "learn",
                        lambda self, chunks: (made.append(1), real(self, chunks))[1])
    runs = []
    for who in ("replay", "one", "vw"):
        d = tmp_path / who
        d.mkdir()
        (d / "d.vw").write_text("\n".join(_weighted(40, 5)) + "\n")
        line = ["-d", "d.vw", *args, "-f", "m"]
        if who == "vw":
            err = run_ok([sys.executable, "-m", "vowpalwabbit", *line], d)
            runs.append("".join(ln for ln in err.splitlines(True) if not ln.startswith(_STACK)))
            break
        if who == "one":  # (every pass made by _Pass.learn)
            monkeypatch.setattr(_vwpasses.Replay, "of", classmethod(lambda *a: None))
        made.clear()
        code, err = run_ts(capfd, ["--cache-dir", "cache", *line], d, monkeypatch)
        assert code == 0
        assert len(made) < 20 if who == "replay" else len(made) > 40
        runs.append((err, (d / "m").read_bytes()))
    assert runs[0] == runs[1]
    assert runs[0][0] == runs[2]
