"""The compiled VW text parser (``_vwfast.c``) gives the numba parser's output bit for bit,
interactions included, and hands every buffer it does not read in full to the numba
parser."""

from __future__ import annotations

import os
import random
import re

import numpy as np
import pytest
from _linear_data import vw_lines

from terascale.linear._io._interactions import compile_interactions, interaction_table
from terascale.linear._vw import _vwtext_fast
from terascale.linear._vw._vwparse import parse_vw_bytes
from terascale.linear._vw._vwtext_fast import _FAST, parse_vw

built = pytest.mark.skipif(_FAST is None, reason="terascale.linear._vw._vwfast was not built")


def test_the_compiled_parser_is_built_in_ci():
    """CI builds the package from source: a broken C build must fail here, not fall back."""
    if os.environ.get("CI") != "true":
        pytest.skip("only asserted in CI (CI=true)")
    assert _FAST is not None, "terascale.linear._vw._vwfast did not build (see setup.py)"

NO = np.zeros(256, np.bool_)
IGNORE_AN = NO.copy()
IGNORE_AN[[ord("a"), ord("n")]] = True
PLAIN = interaction_table([])
MASK = (1 << 18) - 1


def _status(buf: np.ndarray, table: np.ndarray = PLAIN, ignore: np.ndarray = NO) -> int:
    n = len(buf)
    ncap, cap = n // 8 + 16, 64 * n + 16
    return _FAST.parse(buf, MASK, True, np.empty(ncap + 1, np.int64), np.empty(cap, np.uint32),
                       np.empty(cap, np.float32), np.empty(ncap, np.float32),
                       np.empty(ncap, np.float32), np.empty(ncap + 1, np.int64),
                       np.empty(n, np.uint8), table, *table.shape, ignore.view(np.uint8))[0]


def _bits(a: object) -> object:
    if isinstance(a, np.ndarray):
        return (a.dtype.str, a.view(np.uint8).tobytes() if a.dtype.kind == "f" else a.tobytes())
    return a


def _same(text: str, skip_bad: bool = False, table: np.ndarray = PLAIN,
          ignore: np.ndarray = NO) -> int:
    buf = np.frombuffer(text.encode(), np.uint8)
    ref = parse_vw_bytes(buf, MASK, table, True, skip_bad, ignore, NO, False)
    got = parse_vw(buf, MASK, table, True, skip_bad, ignore, NO)
    n = 8 if ref[8] else 9  # (err_line is where the numba parser stopped: past an error only)
    assert [_bits(a) for a in got[:n] + got[10:]] == [_bits(a) for a in ref[:n] + ref[10:]]
    return _status(buf, table, ignore)


@built
def test_click_style_lines_are_read_in_c_to_the_same_bits():
    tagged = "\n".join(vw_lines(3000, seed=3)) + "\n"
    assert "'" in tagged and _same(tagged) == 0
    assert _same(re.sub(r" '[^|]*\|", " |", tagged)) == 0
    click = ("1 |u u31 |a a1 |s s2 |t t76 t243 t26 t0 |n price:1727.6921 age:35 ctr:0.0385 "
             "dwell:197.6248 dist:28.9913\n-1 |u u0 |a a2 |t t5 t0 t0 |n price:2.4534 "
             "ctr:0.0032 zero:0 neg:-3.25 long:0.12345678901234567890123456789012345678 "
             "tiny:1.5e-05 big:2E3 neg_exp:-7.25e-3\n"
             "0.5 2 | plain 12 007 :5\n|a unlabelled\n1 2.5 'first| f g\n"
             "-1 tag2|a h\n0.5 1 'x |a q\n1 glued| a\n1|a x\n1 ' |a empty_tag\n"
             "1 |b:2 z 12 y:2.5 |c:0 dropped | :3 w | back:1.5\n")
    assert _same(click) == 0
    # empty lines (VW counts them for the holdout) and lines of blanks (an example of the
    # constant): the numba parser's, which keeps their count
    blanks = "1 |a x\n\n  \r\n\r\n\t\n-1 |a y\n\n"
    assert _same(blanks) == 1
    got = parse_vw_bytes(np.frombuffer(blanks.encode(), np.uint8), MASK, PLAIN, True, False,
                         NO, NO, False)  # (every argument: the runs' compiled signature)
    assert len(got[3]) == 4 and got[10].tolist() == [1, 2, 4]


@built
def test_a_namespace_character_opened_again_is_grouped_in_c():
    """|user x |geo y |unit z (u twice, as long namespace names often share their first
    letter): read in C, grouped by namespace character in order of first appearance, as
    the numba parser and VW order them, with and without interactions."""
    text = ("1 |a x |b y |a z\n-1 0.5 'tag |user_id u1 |geo g1 g2 |unit:2 w:3 |g g3 | :1\n"
            "1 |a |b y |a z 12:2 |a |c q\n0 |a:0 gone |b y |a:-1.5 back 7\n")
    assert _same(text) == 0
    for spec in ((("ab", "ua"), (), ()), ((), ("aab", "gug"), ()), (("::",), (), ())):
        assert _same(text, table=interaction_table(compile_interactions(*spec))) == 0


@built
@pytest.mark.parametrize("drop", ["a", "bu", " g"])
def test_ignore_and_keep_are_read_in_c_to_the_same_bits(drop):
    """--ignore (and --keep, its complement) in C: the namespace characters' features are
    dropped, their anonymous features still counted, interactions built without them."""
    ignore = np.zeros(256, np.bool_)
    ignore[[ord(c) for c in drop]] = True
    text = ("1 |a x :2 |b y |a z\n-1 0.5 'tag |user_id u1 :3 |geo g1 g2 |unit:2 w:3 | 7\n"
            "1 |b y |c q 12:2\n")
    for keep in (False, True):
        mask = ~ignore if keep else ignore
        assert _same(text, ignore=mask) == 0
        assert _same(text, table=interaction_table(compile_interactions(("ab", "ug"), (), ())),
                     ignore=mask) == 0


@built
@pytest.mark.parametrize("text", [
    "1 |a x:1e+4\n", "1 |a x:1e\n", "1 |a x:1e400\n", "1 |a x:4e38\n", "1 |a x:+1\n",
    "1 'tag 2 |a x\n", "'tag\n", "1 |a:q x\n", "1 |a:+2 x\n",
    "1 2 3 |a x\n", "1 -2 |a x\n", "junk\n", "1 |a x:\n",
    "1 |a x:1.2.3\n", "1 |a x:" + "9" * 41 + "\n"])
def test_what_c_does_not_read_goes_to_numba(text):
    for skip in (False, True):
        assert _same(text, skip) == 1


@built
def test_random_buffers_give_the_same_bits():
    rng = random.Random(1)
    nums = ["1", "-1", "0", "0.5", "-0", "-0.0", "1727.6921", "16777159", "16777161",
            "123456789012345", "1234567890123456", "0.000001", ".5", "5.", "-.5", "00012",
            "0." + "1" * 40, "12345678.123456789", "1e4", "+1", "1.2.3", "1.5e-05", "2E3",
            "-7.25e-3", "1e-40", "3.4e38", "4e38", "0e50", "1e-45", "123456789e-3", "1e-",
            "'t1", "'", "'longer_tag", "tag"]
    names = ["a", "b", "12", "007", "x_y", "é", ":", "", "t243"]
    spaces = ["|", "|a", "|ab", "|b", "|12", "|n", "| ", "|a:2", "|n:0", "|b:-1.5", "|a:1e3",
              "|:2", "|c:x"]
    used = 0
    for _ in range(1500):
        lines = []
        for _ in range(rng.randint(0, 6)):
            line = " ".join(rng.choice(nums) for _ in range(rng.randint(0, 2)))
            for _ in range(rng.randint(0, 3)):
                line += rng.choice([" ", "", "\t"]) + rng.choice(spaces)
                for _ in range(rng.randint(0, 4)):
                    f = rng.choice(names)
                    if rng.random() < 0.6:
                        f += ":" + rng.choice(nums)
                    line += rng.choice([" ", "  ", "\t", " \r "]) + f
            lines.append(line)
        text = "\n".join(lines) + rng.choice(["", "\n", "\r\n"])
        for skip in (False, True):
            used += _same(text, skip) == 0
        _same(text, False, ignore=IGNORE_AN)
    # the C path was taken, not only the fallback (which reads every buffer with a tab
    # in a label section: a third of the lines' first '|' follows one)
    assert used > 200


# -q ab, a namespace crossed with itself (VW's combinations, or every ordered pair with
# --permutations), cubics, a longer --interactions, wildcards, the default namespace
INTERACTIONS = [(("ab",), (), ()), (("aa", "ab"), (), ()), ((), ("abb", "aab"), ()),
                ((), (), ("abcn",)), (("a:",), (), ()), (("::",), (), ()), ((" a",), (), ()),
                ((":b", "::"), (":a:",), ())]


@pytest.mark.parametrize("spec", [(("::",), (), ()), ((), (":::",), ()),
                                  (("::",), (), (":::",)), (("::", "::"), (), ("::",))])
def test_all_wildcard_interactions_expand_as_the_sorted_filtered_list(spec, monkeypatch):
    """``-q ::``/``--cubic :::`` are expanded in VW's order directly: the same list as
    expanding, sorting and filtering (the path every other list takes)."""
    from terascale.linear._io import _interactions
    _interactions._compile.cache_clear()
    direct = compile_interactions(*spec)
    monkeypatch.setattr(_interactions, "_wildcard_only", lambda *a: None)
    _interactions._compile.cache_clear()
    assert direct == compile_interactions(*spec)
    _interactions._compile.cache_clear()


@built
@pytest.mark.parametrize("permutations", [False, True])
@pytest.mark.parametrize("spec", INTERACTIONS, ids=lambda s: "+".join(sum(s, ())))
def test_interactions_are_built_in_c_to_the_same_bits(spec, permutations):
    table = interaction_table(compile_interactions(*spec), permutations)
    rng = random.Random(hash((spec, permutations)) & 0xFFFF)
    names = ["x", "y", "12", "007", "", "t243", "z"]
    spaces = ["|a", "|ab", "|b", "|b:2", "|c", "|n", "| ", "|a:0", "|c:-1.5"]
    used = 0
    for _ in range(200):
        lines = []
        for _ in range(rng.randint(1, 5)):
            line = rng.choice(["1", "-1", "0.5 2", "1 'tag", ""])
            for ns in rng.sample(spaces, rng.randint(0, 4)):
                line += " " + ns
                for _ in range(rng.randint(0, 4)):
                    f = rng.choice(names)
                    if rng.random() < 0.5:
                        f += ":" + rng.choice(["2", "-0.5", "0", "1e-3", "3.25"])
                    line += " " + f
            lines.append(line)
        used += _same("\n".join(lines) + "\n", False, table) == 0
    assert used > 50  # the C path was taken


@built
def test_a_block_whose_interactions_do_not_fit_is_parsed_again_in_c(monkeypatch):
    """Crossing every namespace with every other makes far more features than bytes: the
    compiled parser says its arrays are full and the block is parsed again into larger
    ones (not handed to numba), to the numba parser's bits."""
    monkeypatch.setattr(_vwtext_fast, "_BYTES_PER_FEATURE", [5])
    table = interaction_table(compile_interactions(("::",), ("abc",), ("abcc",)))
    text = "".join(f"1 |a {i} {i + 1} {i + 2}|b {i}|c {i} x y\n" for i in range(50))
    assert _same(text, False, table) == 0
    assert _vwtext_fast._BYTES_PER_FEATURE[0] < 1


@built
def test_names_read_a_word_at_a_time_give_the_same_bits():
    """Names of 1-7 bytes are read eight bytes at a time (where they end, whether all
    digits, their value): every length, digits with leading zeros, letters, bytes above
    0x7f and NUL next to digits, names that end at a ':' or a '|' or on the buffer's last
    bytes, long rows and reopened namespaces, to the numba parser's bits."""
    rng = random.Random(7)
    names = ["0", "7", "00", "42", "999", "0009", "12345", "1234567", "9999999", "12345678",
             "123456789", "4294967295", "99999999999999", "a", "ab", "f1", "1f", "abcdefg",
             "abcdefgh", "x" * 9, "é", "1é", "12\x003", "\x00", "9/", ":5", "/0", "7:2",
             "12:0", "3:1e3"]
    used = 0
    for _ in range(300):
        lines = []
        for _ in range(rng.randint(1, 4)):
            line = rng.choice(["1", "-1 0.5", "0.5 2 'tag", "1 'a"])
            for _ in range(rng.randint(1, 6)):
                line += " " + rng.choice(["|a", "|b", "|ab", "|a:2", "| ", "|b:0.5", "|c"])
                line += "".join(rng.choice([" ", "\t", "  "]) + rng.choice(names)
                                for _ in range(rng.randint(0, 12)))
            lines.append(line)
        text = "\n".join(lines) + rng.choice(["", "\n", " \n", "\r\n", "|"])
        used += _same(text) == 0
        _same(text, table=interaction_table(compile_interactions(("ab",), (), ())))
    assert used > 100  # the C path was taken
    long_row = "1 |a " + " ".join(str(rng.randrange(1 << 22)) for _ in range(500)) + \
        " |b " + " ".join(f"f{rng.randrange(99999)}" for _ in range(500)) + " |a 1 22 333\n"
    assert _same(long_row * 20) == 0
    many = "1 " + " ".join(f"|{chr(97 + k % 20)} {k}" for k in range(1100)) + "\n"
    assert _same(many) == 1  # more namespaces than the compiled parser keeps: numba
    few = "1 " + " ".join(f"|{chr(97 + k % 20)} {k}" for k in range(1000)) + "\n"
    assert _same(few) == 0


@built
def test_prediction_lines_are_written_in_c_as_in_python():
    """VW's -p text from C (numbers as Python's str(int(v)) or f"{v:.6f}", the block's tag
    bytes) is the text the Python formatting gives, ties at the sixth decimal, -0, whole
    numbers past 1e15, empty tags and bytes that are not UTF-8 included."""
    from terascale.linear._io._blocks import Block
    from terascale.linear._online._progressive import block_tags
    from terascale.linear._vw._vwout import prediction_lines

    rng = np.random.default_rng(3)
    v = np.concatenate([rng.normal(0, 1, 3000), rng.normal(0, 1e7, 300),
                        np.round(rng.normal(0, 100, 300)),
                        [0.0, -0.0, 2.0 ** -7, -(2.0 ** -7), 2.5e-6, 1e15, 1e16, -1e15,
                         999999999999999.0, 3.4e38, -3.4e38, 1e-30, 16777217.0]])
    n = len(v)
    tags = [("" if i % 3 == 0 else f"t{i}") for i in range(n)]
    tags[5] = "caf\udce9"  # a byte that is not UTF-8, kept as read (surrogateescape)
    blob = "".join(tags).encode("utf-8", "surrogateescape")
    ptr = np.concatenate([[0], np.cumsum([len(t.encode("utf-8", "surrogateescape"))
                                          for t in tags])]).astype(np.int64)
    blk = Block(start=0, indptr=np.zeros(n + 1, np.int64), indices=np.zeros(0, np.uint32),
                values=np.zeros(0, np.float32), labels=np.zeros(n, np.float32),
                weights=np.ones(n, np.float32), tag_ptr=ptr,
                tag_blob=np.frombuffer(blob, np.uint8))
    for a, b in ((0, n), (7, n - 5)):
        lazy = block_tags(blk, a, b)
        assert list(lazy) == tags[a:b] and lazy[-1] == tags[b - 1]
        want = "".join(f"{_vwtext_num(x)} {t}\n" if t else f"{_vwtext_num(x)}\n"
                       for x, t in zip(v[:b - a].astype(np.float32).tolist(), tags[a:b]))
        assert prediction_lines(v[:b - a], lazy) == want
        assert prediction_lines(v[:b - a], list(lazy)) == want  # (the Python path)
    assert prediction_lines(v, None) == "".join(f"{_vwtext_num(x)}\n"
                                                for x in v.astype(np.float32).tolist())
    odd = np.array([1.5, np.nan, np.inf, -np.inf])
    assert prediction_lines(odd, None) == "1.500000\nnan\ninf\n-inf\n"
    two = np.array([1.5, 2.0])  # tags that do not cover the examples: the caller's
    assert _FAST.format_predictions(two, ptr[:2], blk.tag_blob, 0) is None
    assert _FAST.format_predictions(two, ptr, blk.tag_blob, n - 1) is None
    assert _FAST.format_predictions(two, ptr, blk.tag_blob[:1], 0) is None


def _vwtext_num(v: float) -> str:
    import math
    if math.isfinite(v) and v == math.floor(v):  # (VW: std::fixed, precision 0)
        return str(int(v))
    return f"{v:.6f}"


def _shapes_text(rng: random.Random) -> str:
    """Lines of the held-out shapes: 12 namespaces (two pairs sharing a first letter, so
    reopened on every line), raw-scale values, importance weights, tags; and rows of 500
    numeric ids of 1-9 digits in 5 namespaces."""
    names = ["a", "b", "user_profile", "geo_location_region", "d", "Device", "e",
             "item_category_path", "f", "g", "publisher_site_domain", "c"]
    lines = []
    for i in range(400):
        head = rng.choice(["1", "-1"]) + rng.choice(["", " 0.5", " 2", " 3"])
        head += rng.choice(["", f" 't{i} ", f" t{i}", " "])  # (an unquoted tag touches |)
        parts = []
        for ns in names:
            feats = [f"f{int(rng.paretovariate(1.2)) % 5000}" for _ in range(rng.randint(1, 3))]
            if ns == "item_category_path":
                feats.append(f"price:{rng.lognormvariate(12, 2):.1f}")
            if ns == "d":
                feats.append(f"delta:{rng.gauss(0, 50):.3f}")
            parts.append(f"|{ns} " + " ".join(feats))
        lines.append(head + " ".join(parts))
    for _ in range(40):
        row = rng.choice(["1", "-1"])
        for ns in "abcde":
            row += f" |{ns} " + " ".join(str(rng.randrange(10 ** rng.randint(1, 9)))
                                         for _ in range(100))
        lines.append(row)
    rng.shuffle(lines)
    return "\n".join(lines) + "\n"


@built
@pytest.mark.parametrize("flags", [["-b", "20"], ["-b", "22", "--interactions", "ugi",
                                                  "--loss_function", "logistic"]])
def test_long_rows_and_many_namespaces_predict_as_vw(tmp_path, capfd, monkeypatch, flags):
    """The held-out shapes through the compiled parser: terascale vw's progressive
    predictions are the real VW's, byte for byte (its -p text); a bad line among them is
    still named by file and line."""
    from _vw_runs import run_ts, run_vw

    text = _shapes_text(random.Random(11))
    assert _status(np.frombuffer(text.encode(), np.uint8)) == 0  # read in C, all of it
    (tmp_path / "d.vw").write_text(text)
    run_vw(["-d", "d.vw", *flags, "-p", "vw.p", "--quiet"], tmp_path)
    code, err = run_ts(capfd, ["-d", "d.vw", *flags, "-p", "ts.p", "--quiet"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()
    lines = (tmp_path / "d.vw").read_text().splitlines(keepends=True)
    lines.insert(300, "1 0.5 'bad |a x:1:2 |b y\n")
    (tmp_path / "bad.vw").write_text("".join(lines))
    code, err = run_ts(capfd, ["-d", "bad.vw", *flags, "--quiet"], tmp_path, monkeypatch)
    assert code != 0 and "bad.vw, line 301" in err, err


@built
def test_a_number_alone_is_read_in_c_as_the_numba_parser_reads_it():
    """``_vwfast.number`` (``_vwgen``'s values and scales: no numba where the compiled
    learner names the rules' features) is the numba parser's float of the forms the
    compiled parser reads, None for the others (``+1``, ``inf``, ``1e39``, ``x``)."""
    from terascale.linear._vw._vwfloat import parse_float32

    rng = random.Random(3)
    words = ["1", "-0", "0.5", "1e-3", "3e38", "1e-40", "16777161", "0.1234567890123456789",
             "5.", ".5", "-7E2", "+1", "inf", "1e39", "x", "1e", "--1", ""]
    words += [f"{rng.uniform(-1e6, 1e6):.{rng.randint(0, 12)}e}" for _ in range(200)]
    for w in words:
        b = w.encode()
        v, ok = parse_float32(np.frombuffer(b, np.uint8), 0, len(b))
        got = _FAST.number(b)
        assert got is None or (ok and np.float32(got).tobytes() == np.float32(v).tobytes()), w
        assert (got is None) == ("+" in w or w in ("inf", "1e39", "x", "1e", "--1", "")), w


@built
@pytest.mark.parametrize("seed", [0, 3, 12345678901])
def test_uniform_weights_in_the_table_are_vws_draw(seed):
    """``--random_weights`` written by the compiled core into the first float of each row
    are the numba generator's (VW's merand48 from ``--random_seed``); the row's other
    floats are left alone."""
    from terascale.linear._vw._vwrandom import uniform_weights

    table = np.full((4096, 3), 7.0, np.float32)
    _FAST.uniform(memoryview(table).cast("B").cast("f"), seed, 3)
    assert np.array_equal(table[:, 0], uniform_weights(4096, seed))
    assert (table[:, 1:] == 7.0).all()
