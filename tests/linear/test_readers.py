"""Readers and hashing: VW text edge cases, libsvm, CSV, compressed inputs, shards, errors."""

from __future__ import annotations

import gzip
import zipfile

import numpy as np
import pytest

from terascale import ConfigError, DataError
from terascale.linear import hash_feature, hash_space, murmur3_32, parse_lines, read_file
from terascale.linear._io._dataset import ParseOptions
from terascale.linear._io._hashing import CONSTANT_HASH, FNV_PRIME
from terascale.linear._io._readers import shard_files

MASK18 = (1 << 18) - 1
CONST = CONSTANT_HASH & MASK18


def row(ds, i):  # (indices, values) of example i, constant left out
    a, b = ds.indptr[i], ds.indptr[i + 1]
    idx, val = np.asarray(ds.indices[a:b]), np.asarray(ds.values[a:b])
    keep = idx != CONST
    return list(idx[keep]), list(val[keep])


def test_murmur3_reference_vectors():
    # published MurmurHash3_x86_32 test vectors
    assert murmur3_32(b"", 0) == 0
    assert murmur3_32(b"", 1) == 0x514E28B7
    assert murmur3_32(b"\xff\xff\xff\xff", 0) == 0x76293B50
    assert murmur3_32(b"Hello, world!", 1234) == 0xFAF6CDB3
    assert murmur3_32(b"The quick brown fox jumps over the lazy dog", 0x9747B28C) == 0x2FA826CD


def test_plain_python_hashes_are_the_kernels():
    """``_io._hashnames`` (the names hashed without numba: --invert_hash, --audit) gives
    the numba kernels' hashes: MurmurHash3 (in Python, and the compiled core's) and VW's
    hashstring (digits: value + seed)."""
    import numpy as np

    from terascale.linear._io._hashing import hashstring_nb, murmur3_32_nb
    from terascale.linear._io._hashnames import hashstring, murmur3_32, murmur3_py

    rng = np.random.default_rng(5)
    words = [b"", b"0", b"007", b"9" * 25, b"x", b"abcd", b"abcde", "\u00fc-\u00df".encode(),
             b"a b", b"12a"] + [bytes(rng.choice(list(b"0123456789az\xc3"), int(n)))
                                 for n in rng.integers(0, 13, 200)]
    for w in words:
        for seed in (0, 1, 0x9747B28C, 4294967295):
            a = np.frombuffer(w, np.uint8)
            want = murmur3_32_nb(a, 0, len(w), seed)
            assert murmur3_py(w, seed) == want and murmur3_32(w, seed) == want, (w, seed)
            assert hashstring(w, seed) == hashstring_nb(a, 0, len(w), seed), (w, seed)


def test_hashing_equals_vowpalwabbit():
    pyvw = pytest.importorskip("vowpalwabbit.pyvw")
    vw = pyvw.Workspace("--quiet -b 18")
    try:
        for ns in ["", "a", "ns", "User", "123", "é", "longer namespace"]:
            hs = vw.hash_space(ns)
            assert hash_space(ns) == hs
            for f in ["", "x", "ab", "abc", "abcd", "abcde", "0", "42", "007", "9999999999",
                      "ü-ß", "a b", "price_1.5"]:
                assert hash_feature(f, hs, 18) == vw.hash_feature(f, hs), (ns, f)
    finally:
        vw.finish()


def test_vw_line_features_match_vw_hashes():
    ds = parse_lines(["1 |a x y:2.5 |b:2 z 12"], bits=18)
    ha, hb = hash_space("a"), hash_space("b")
    idx, val = row(ds, 0)
    assert idx == [hash_feature("x", ha, 18), hash_feature("y", ha, 18),
                   hash_feature("z", hb, 18), hash_feature("12", hb, 18)]
    assert val == [1.0, 2.5, 2.0, 2.0]  # namespace scale 2 multiplies values
    assert ds.n_features == 5  # + constant


def test_vw_label_weight_tag_and_default_namespace():
    # checked against vowpalwabbit's own parser (example.get_tag / get_simplelabel_*)
    ds = parse_lines(["1 2.5 'first| f g", "-1 tag2|a h", "|a k", "0.5 1 0 'x|a q",
                      "1 glued| a", "1|a x"], bits=18)
    assert list(ds.labels[:2]) == [1.0, -1.0]
    assert np.isnan(ds.labels[2])  # no label: a test example
    assert list(ds.weights) == [2.5, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert [ds.tag(i) for i in range(6)] == ["first", "tag2", "", "x", "glued", "1"]
    assert row(ds, 0)[0] == [hash_feature("f", 0, 18), hash_feature("g", 0, 18)]
    assert ds.labels[4] == 1.0
    assert np.isnan(ds.labels[5])  # VW: a word touching '|' is the tag, not the label


def test_vw_empty_namespace_zero_values_repeats_and_blank_lines():
    ds = parse_lines(["1 |a |b x", "", "   ", "-1 |a x:0 y y", "1 |"], bits=18)
    # as VW: the empty line is no example (its place counted for the holdout), the line of
    # blanks an unlabelled one of the constant only
    assert len(ds) == 4 and ds.blanks is not None and ds.blanks.tolist() == [1]
    assert row(ds, 0)[0] == [hash_feature("x", hash_space("b"), 18)]
    assert row(ds, 1) == ([], []) and np.isnan(ds.labels[1])
    idx, val = row(ds, 2)  # x:0 dropped, repeated y kept twice (they add up)
    assert idx == [hash_feature("y", hash_space("a"), 18)] * 2 and val == [1.0, 1.0]
    assert row(ds, 3) == ([], [])  # only the constant
    assert ds.n_features == (1 + 1) + 1 + (2 + 1) + 1  # features + constant per example


def test_vw_features_come_out_grouped_by_namespace_character():
    """VW's order: a namespace character's features together, in order of its first
    appearance, whether its namespace comes back later in the line or another namespace
    shares its first letter (the parser keeps the parsed order only where it is that)."""
    h = hash_space
    ds = parse_lines(["1 |a x |b y |a z", "1 |ab p |b q |ac r", "1 | d |a e | f",
                      "1 |a x |a y |b z"], bits=18)
    assert row(ds, 0)[0] == [hash_feature(f, h(ns), 18) for ns, f in
                             (("a", "x"), ("a", "z"), ("b", "y"))]
    assert row(ds, 1)[0] == [hash_feature(f, h(ns), 18) for ns, f in
                             (("ab", "p"), ("ac", "r"), ("b", "q"))]
    assert row(ds, 2)[0] == [hash_feature("d", 0, 18), hash_feature("f", 0, 18),
                             hash_feature("e", h("a"), 18)]
    assert row(ds, 3)[0] == [hash_feature(f, h(ns), 18) for ns, f in
                             (("a", "x"), ("a", "y"), ("b", "z"))]


def test_vw_quadratic_crosses():
    ds = parse_lines(["1 |a x y |b z"], bits=18, quadratic=["ab"])
    ha, hb = hash_space("a"), hash_space("b")
    x, y, z = (hash_feature("x", ha, 18), hash_feature("y", ha, 18),
               hash_feature("z", hb, 18))
    idx, _ = row(ds, 0)
    assert idx[3:] == [((x * FNV_PRIME) ^ z) & MASK18, ((y * FNV_PRIME) ^ z) & MASK18]


@pytest.mark.parametrize("line,msg", [
    ("1 a b |x f", "not a number"),
    ("1 |a f:nan", "feature value"),  # (f:zz is the string value f^zz, as in VW 9)
    ("1 |a f:2z", "feature value"),
    ("1 |a:q f", "namespace scale"),
    ("1 2 3 4 |a f", "more than three"),
    ("1 -2 |a f", "negative"),
    ("1 |a x:1:2", "more than one ':'"),  # VW reads x:1 and drops the rest: refused
    ("1 |:2 f |b g", "namespace without a name has a scale"),  # VW drops the line's rest
])
def test_bad_vw_lines_raise_with_line_number(line, msg):
    with pytest.raises(DataError, match=rf"<lines>, line 3: .*{msg}"):
        parse_lines(["1 |a x", "", line, "1 |a y"])


# label sections VW reads with a warning: (line, label, weight, VW's lines); VW's numbers
# (9.11.9: `vw -d` of the line, its weighted label and example sums and standard output)
_LENIENT = [
    ("# text |a f", 0.0, 0.0, ["[warning] '#' is not a good float, replacing with 0",
                               "[warning] 'text' is not a good float, replacing with 0"]),
    ("nan |a f", 0.0, 1.0, ["[warning] 'nan' is not a good float, replacing with 0"]),
    ("1 -nan 0 |a f", 1.0, 0.0, ["[warning] '-nan' is not a good float, replacing with 0"]),
    ("+ |a f", 0.0, 1.0, ["[warning] '+' is not a good float, replacing with 0"]),
    ("1 2 0 4 'tag|a f", np.nan, 1.0,
     ["[error] Error: 4 is too many tokens for a simple label: 1 2 0 4"]),
    ("inf x  -3 0 5 |a f", np.nan, 1.0,
     ["[error] Error: 5 is too many tokens for a simple label: inf x -3 0 5"]),
    # read by VW's own loop or strtof without a warning, as VW
    ("- |a f", 0.0, 1.0, []), ("e5 |a f", 0.0, 1.0, []), ("1e |a f", 1.0, 1.0, []),
    ("2.5e- |a f", 2.5, 1.0, []), ("1-2 |a f", 1.0, 1.0, []), ("+.5x 1ee |a f", 0.5, 1.0, []),
]


def _lenient(lines):
    from terascale.linear._io._readers import parse_bytes

    return parse_bytes(np.frombuffer("\n".join(lines).encode(), np.uint8),
                       ParseOptions(lenient_labels=True))


@pytest.mark.parametrize("line,label,weight,notes", _LENIENT)
def test_vw_label_sections_read_leniently_as_vw(line, label, weight, notes, tmp_path):
    """With ``lenient_labels`` (``terascale vw``'s) a label section VW warns of is read as
    VW reads it, with its lines; without, each line that differs is refused."""
    ds = _lenient(["1 |a x", line, "-1 |a y"])
    np.testing.assert_array_equal(ds.labels, [1.0, label, -1.0])
    assert ds.weights[1] == weight and (ds.notes or []) == notes
    if "tag" in line:
        assert ds.tag(1) == "tag"
    if notes:
        with pytest.raises(DataError, match=r"<lines>, line 2: the label section has "):
            parse_lines(["1 |a x", line, "-1 |a y"])
        # a file, through the compiled parser's hand-over too, in both front ends' reader
        path = tmp_path / "d.vw"
        path.write_text("".join(f"1 |a f{i}\n" for i in range(300)) + line + "\n")
        with pytest.raises(DataError, match=r"d\.vw, line 301: the label section has "):
            read_file(str(path), ParseOptions())
        assert read_file(str(path), ParseOptions(lenient_labels=True)).notes == notes


@pytest.mark.parametrize("line,msg", [("inf |a f", "not a number"),
                                      ("1 Infinity |a f", "not a number"),
                                      ("1 -2 |a f", "negative"),
                                      ("1 1 2 |a f", "base")])
def test_lenient_labels_still_refuse_what_vw_reads_as_infinite_or_negative(line, msg):
    with pytest.raises(DataError, match=rf"<lines>, line 1: .*{msg}"):
        _lenient([line])


def test_a_lenient_cache_keeps_its_notes_and_serves_no_strict_read(tmp_path):
    from terascale.linear._io._cache import load_cached

    path = tmp_path / "d.vw"
    path.write_text("1 |a x\nabc |a y\n")
    lenient = ParseOptions(lenient_labels=True)
    blocks, hit = load_cached(str(path), lenient, cache_dir=str(tmp_path / "c"))
    assert [b.notes for b in blocks] == [("[warning] 'abc' is not a good float, "
                                         "replacing with 0",)]
    blocks, hit = load_cached(str(path), lenient, cache_dir=str(tmp_path / "c"))
    assert hit and [b.notes for b in blocks][0][0].startswith("[warning] 'abc'")
    with pytest.raises(DataError, match=r"d\.vw, line 2: the label section has a word"):
        load_cached(str(path), ParseOptions(), cache_dir=str(tmp_path / "c"))


def test_two_colons_are_refused_by_the_compiled_parser_too(tmp_path):
    # the compiled parser hands such a buffer to the numba parser, which names the line
    path = tmp_path / "x.vw"
    path.write_text("".join(f"1 |a f{i} g:0.5\n" for i in range(500)) + "1 |a x:1:2\n")
    with pytest.raises(DataError, match=r"x\.vw, line 501: a feature has more than one"):
        read_file(str(path), ParseOptions(bits=18))


def test_a_scale_without_a_namespace_name_is_refused_by_the_compiled_parser_too(tmp_path):
    # VW 9.11.9 warns "malformed example!" on '|:1.5 f' and reads nothing after the '|'
    path = tmp_path / "x.vw"
    path.write_text("".join(f"1 |a f{i} g:0.5\n" for i in range(500)) + "1 |:1.5 f\n")
    with pytest.raises(DataError, match=r"x\.vw, line 501: a namespace without a name"):
        read_file(str(path), ParseOptions(bits=18))


def test_a_line_without_a_bar_is_a_constant_only_example_as_vw_reads_it():
    # VW: the label section runs to the line's end (before a CR), its last word the tag
    ds = parse_lines(["1 |a x", "1", "-1 2\r", "1 2 'tg", "  1  ", "'q", "1 x"], bits=18)
    assert len(ds) == 7
    for i in range(1, 7):
        a, b = ds.indptr[i], ds.indptr[i + 1]
        assert list(ds.indices[a:b]) == [CONST] and list(ds.values[a:b]) == [1.0]
    labels = [float(v) for v in ds.labels[1:]]
    assert np.isnan(labels[0]) and np.isnan(labels[4])
    assert [labels[i] for i in (1, 2, 3, 5)] == [-1.0, 1.0, 1.0, 1.0]
    assert [float(w) for w in ds.weights[1:]] == [1.0, 1.0, 2.0, 1.0, 1.0, 1.0]
    assert [ds.tag(i) for i in range(7)] == ["", "1", "2", "tg", "", "q", "x"]


def test_skip_bad_counts():
    ds = parse_lines(["1 |a x", "oops |a", "-1 |a y:1q", "-1 |a z"], skip_bad=True)
    assert len(ds) == 2 and ds.skipped == 2
    assert list(ds.labels) == [1.0, -1.0]


def test_libsvm(tmp_path):
    p = tmp_path / "d.svm"
    p.write_text("+1 3:1 7:2.5 # comment\n-1 qid:4 1:0.5\n\n0 \n")
    ds = read_file(str(p), ParseOptions(format="libsvm"))
    assert list(ds.labels) == [1.0, -1.0, 0.0]
    assert row(ds, 0) == ([3, 7], [1.0, 2.5]) and row(ds, 1) == ([1], [0.5])
    p.write_text("1 3:1\n1 x:2\n")
    with pytest.raises(DataError, match=r"d.svm, line 2: a feature index"):
        read_file(str(p), ParseOptions(format="libsvm"))


def test_csv_categorical_numeric_and_bad_label(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text("label,city,age,zip\n1,paris,30,75001\n0,rome,,00100\n")
    ds = read_file(str(p), ParseOptions(format="csv", categorical=("zip",)))
    assert list(ds.labels) == [1.0, 0.0]
    hc, ha, hz = hash_space("city"), hash_space("age"), hash_space("zip")
    assert row(ds, 0) == ([hash_feature("paris", hc, 18), hash_feature("age", ha, 18),
                           hash_feature("75001", hz, 18)], [1.0, 30.0, 1.0])
    assert row(ds, 1)[0] == [hash_feature("rome", hc, 18), hash_feature("100", hz, 18)]
    p.write_text("label,a\n1,x\nyes,y\n")
    with pytest.raises(DataError, match=r"d.csv, line 3: the label 'yes'"):
        read_file(str(p), ParseOptions(format="csv"))
    with pytest.raises(ConfigError, match="label='nope': .*has no such column"):
        read_file(str(p), ParseOptions(format="csv", label="nope"))
    with pytest.raises(ConfigError, match="quadratic= needs namespaces"):
        parse_lines(["y,a", "1,x"], format="csv", label="y", quadratic=["ab"])
    ds = parse_lines(["y,a,b", "1,x,3", "0,z,4"], format="csv", label="y", ignore=["b"])
    assert row(ds, 0) == ([hash_feature("x", hash_space("a"), 18)], [1.0])


def test_gz_zip_inputs_and_missing_file(tmp_path):
    text = "1 |a x\n-1 |a y\n"
    g = tmp_path / "d.vw.gz"
    with gzip.open(g, "wt") as f:
        f.write(text)
    z = tmp_path / "d.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("d.vw", text)
    for p in (g, z):
        ds = read_file(str(p), ParseOptions())
        assert list(ds.labels) == [1.0, -1.0]
    with pytest.raises(DataError, match="no such file"):
        read_file(str(tmp_path / "missing.vw"), ParseOptions())


def test_shards_cover_every_line_once(tmp_path):
    p = tmp_path / "d.vw"
    p.write_text("".join(f"{i} |a f{i}\n" for i in range(101)))
    for n in (1, 2, 3, 7):
        got = []
        for k in range(n):
            (path, sh), = shard_files([str(p)], k, n)
            got += list(read_file(path, ParseOptions(), shard=sh).labels)
        assert got == list(range(101))
    # with enough files, whole files per worker, consecutive ones: in rank order, the
    # files in the order given
    assert shard_files(["a", "b", "c"], 0, 2) == [("a", (0, 1))]
    assert shard_files(["a", "b", "c"], 1, 2) == [("b", (0, 1)), ("c", (0, 1))]
    p.write_text("".join(f"{i} |a f\n" for i in range(50)) + "bad line\n")
    with pytest.raises(DataError, match="d.vw, line 51"):
        read_file(str(p), ParseOptions(), shard=(1, 2))


def test_fewer_files_than_workers_split_the_input_in_equal_byte_ranges(tmp_path):
    """Three files, four workers: the k-th of four byte ranges of the files one after the
    other (a part of each file a range crosses): in rank order every line once, in the
    input's order, the shares within a line of each other; errors name the file's own
    line."""
    paths = []
    for j, n in enumerate((30, 70, 20)):
        p = tmp_path / f"d{j}.vw"
        p.write_text("".join(f"{j * 100 + i} |a f{i}\n" for i in range(n)))
        paths.append(str(p))
    want = [j * 100 + i for j, n in enumerate((30, 70, 20)) for i in range(n)]
    got, shares = [], []
    for k in range(4):
        mine = [lab for path, sh in shard_files(paths, k, 4)
                for lab in read_file(path, ParseOptions(), shard=sh).labels]
        got += mine
        shares.append(sum(len(f"{int(v)} |a f{int(v) % 100}\n") for v in mine))
    assert got == want
    assert max(shares) - min(shares) <= 12, shares  # (bytes: within a line)
    assert [p for p, _ in shard_files(paths, 1, 4)] == paths[1:2]
    assert [p for p, _ in shard_files(paths, 0, 4)] == paths[:2]
    (tmp_path / "d1.vw").write_text("".join(f"{i} |a f\n" for i in range(60))
                                    + "bad line\n" + "".join("1 |a f\n" for _ in range(9)))
    with pytest.raises(DataError, match="d1.vw, line 61"):
        for k in range(4):
            for path, sh in shard_files(paths, k, 4):
                read_file(path, ParseOptions(), shard=sh)


def test_threaded_parse_equals_one_thread(monkeypatch):
    from terascale.linear._io import _readers

    lines = [f"{i % 2} {1 + i % 3} 'tag{i}|a f{i % 7} g:{i}.5 |b {i % 11}" for i in range(3000)]
    one = parse_lines(lines, quadratic=["ab"])
    monkeypatch.setattr(_readers, "_PARALLEL_BYTES", 1)
    many = parse_lines(lines, quadratic=["ab"])
    for a in ("indptr", "indices", "values", "labels", "weights", "tag_ptr", "tag_blob"):
        np.testing.assert_array_equal(getattr(many, a), getattr(one, a))
    with pytest.raises(DataError, match="line 2999"):
        parse_lines(lines[:2998] + ["1 x |a y"] + lines[:5])


def test_parse_options_hold_one_string_or_any_sequence_as_a_tuple(tmp_path):
    from terascale.engines._common import split_parse_options
    from terascale.linear import load_shard

    one = ParseOptions(quadratic="ab", ignore=["c", "d"], keep=iter(["a", "b"]))
    assert (one.quadratic, one.ignore, one.keep) == (("ab",), ("c", "d"), ("a", "b"))
    assert one == ParseOptions(quadratic=("ab",), ignore=("c", "d"), keep=("a", "b"))
    assert hash(one) == hash(ParseOptions(quadratic=["ab"], ignore=("c", "d"), keep=["a", "b"]))
    path = tmp_path / "d.vw"
    path.write_text("1 |a x |b y\n-1 |a z |b w\n")
    ds = load_shard(str(path), cache_dir="", bits=12, quadratic="ab").dataset()
    assert ds.parse.quadratic == ("ab",) and ds.indptr[-1] == 2 * 4  # a, b, ab, constant
    opts = {"quadratic": "ab", "ignore_linear": ["a"], "passes": 2}
    assert split_parse_options(opts) == {"format": "vw", "bits": 18, "quadratic": ("ab",),
                                         "ignore_linear": ("a",)}
    assert opts == {"passes": 2}
    with pytest.raises(ConfigError, match="quadratic"):
        ParseOptions(quadratic="a")  # still checked after normalizing
