"""Seeded synthetic data in Vowpal Wabbit's text format, for benchmarks, tests and examples.

``write_click`` writes large click-style data fast (numpy-vectorized, 10^5 lines a chunk):
a planted logistic model over Zipf-distributed ids (a user, an ad, a site: a few very
common, a long tail seen once), a bag of 20 tokens drawn with replacement (so tokens
repeat inside an example) and 8 real-valued features on their raw scales (a price in the
thousands next to a ratio near 0.05). The label is drawn from the model's probability, so
the Bayes AUC is well below 1 and test AUC and logloss tell learners apart. The model is
fixed (its own seed); ``seed`` picks the examples, so train and test files drawn with two
seeds come from one distribution::

    from terascale.linear import synthetic
    synthetic.write_click("train.vw", 1_000_000, seed=1)
    synthetic.write_click("test.vw", 100_000, seed=2)

``write_wide`` writes wide sparse data: ``features`` ids per example drawn from a
heavy-headed law over tens of millions of values (a shared head of common ids, a power-law
tail that is mostly seen once), so that a million examples carry ~10^7 distinct hashed
features at ``-b 24`` (the width of the talk's 16M-parameter models), plus two numeric
features on raw scales; the label is drawn from a planted logistic model over the ids::

    synthetic.write_wide("wide.vw", 1_000_000, seed=1)   # ~12M distinct features at -b 24

``write_dense`` writes a dense, standardized logistic set (74 numeric features, the
``terascale bench linear --dense`` data). ``logistic_lines`` (namespaces of categorical and numeric features, optional importance
weights and tags) and ``separable_lines`` (a linearly separable set) are small in-memory
sets for tests and examples.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numba
import numpy as np

__all__ = ["CLICK_FEATURES", "click_chunks", "logistic_lines", "separable_lines",
           "wide_chunks", "write_click", "write_dense", "write_lines", "write_wide"]

CLICK_FEATURES = 31  # per example, the constant not counted
_MODEL_SEED = 20140101
_IDS = (("u", 1_000_000, 1.15, 0.6), ("a", 100_000, 1.3, 0.8), ("s", 10_000, 1.5, 0.5))
_TOKENS = (20_000, 1.1, 0.25, 20)  # vocabulary, Zipf exponent, weight sd, per example
_NUMERIC = ("price", "age", "clicks", "ctr", "dwell", "hour", "depth", "dist")


class _Model:
    """The planted weights (the same for every seed of the examples)."""

    def __init__(self) -> None:
        rng = np.random.default_rng(_MODEL_SEED)
        self.ids = [rng.normal(0.0, sd, size=vocab) for _, vocab, _, sd in _IDS]
        self.tokens = rng.normal(0.0, _TOKENS[2], size=_TOKENS[0])
        self.numeric = rng.normal(0.0, 0.4, size=len(_NUMERIC))
        self.bias = -1.2
        self.cdfs = [_zipf_cdf(vocab, a) for _, vocab, a, _ in _IDS]
        self.token_cdf = _zipf_cdf(_TOKENS[0], _TOKENS[1])


def _numeric(rng: np.random.Generator, m: int) -> tuple[np.ndarray, np.ndarray]:
    """(raw values m x 8, the standardized signal they carry m x 8)."""
    price = rng.lognormal(4.0, 1.5, m)
    age = rng.integers(18, 81, m).astype(np.float64)
    clicks = rng.poisson(3.0, m).astype(np.float64)
    ctr = rng.beta(1.0, 20.0, m)
    dwell = rng.exponential(100.0, m)
    hour = rng.integers(0, 24, m).astype(np.float64)
    depth = rng.integers(1, 21, m).astype(np.float64)
    dist = rng.lognormal(1.0, 1.0, m)
    raw = np.stack([price, age, clicks, ctr, dwell, hour, depth, dist], axis=1)
    sig = np.stack([(np.log(price) - 4.0) / 1.5, (age - 49.0) / 18.0,
                    (clicks - 3.0) / 1.7, (ctr - 0.048) / 0.045, (dwell - 100.0) / 100.0,
                    np.sin(hour / 24.0 * 2 * np.pi), (depth - 10.5) / 5.8,
                    (np.log(dist) - 1.0)], axis=1)
    return raw, sig


def _zipf_cdf(vocab: int, a: float) -> np.ndarray:
    """CDF of a Zipf law truncated to ``vocab`` ranks (sampled by inversion: numpy's
    unbounded ``zipf`` rejects most draws for exponents near 1)."""
    p = np.arange(1, vocab + 1, dtype=np.float64) ** -a
    c = np.cumsum(p)
    return c / c[-1]


def _zipf(rng: np.random.Generator, cdf: np.ndarray, shape: int | tuple[int, int]
          ) -> np.ndarray:
    return np.minimum(np.searchsorted(cdf, rng.random(shape)), len(cdf) - 1)


@numba.njit(cache=True, inline="always")
def _put(buf: np.ndarray, o: int, lit: np.ndarray, a: Any, b: Any) -> int:
    for i in range(a, b):
        buf[o] = lit[i]
        o += 1
    return o


@numba.njit(cache=True, inline="always")
def _put_int(buf: np.ndarray, o: int, v: int) -> int:
    n = 1
    t = v // 10
    while t > 0:
        n += 1
        t //= 10
    for i in range(n):
        buf[o + n - 1 - i] = 48 + v % 10
        v //= 10
    return o + n


@numba.njit(cache=True)
def _format(y: np.ndarray, ids: np.ndarray, toks: np.ndarray, raw: np.ndarray,
            lit: np.ndarray, cuts: np.ndarray, buf: np.ndarray) -> int:
    """VW lines into ``buf`` (its length, or -1 when it is too small): literal piece j of ``lit`` is ``lit[cuts[j]:cuts[j + 1]]``
    (the namespaces' and numeric features' names); values with up to 4 decimals."""
    o = 0
    nid = ids.shape[1]
    nnum = raw.shape[1]
    for i in range(len(y)):
        if o + 1024 > len(buf):  # a line is well under 1 KiB: the caller gives more room
            return -1
        if y[i] < 0:
            buf[o] = 45
            o += 1
        buf[o] = 49
        o += 1
        for j in range(nid):
            o = _put(buf, o, lit, cuts[j], cuts[j + 1])
            o = _put_int(buf, o, ids[i, j])
        o = _put(buf, o, lit, cuts[nid], cuts[nid + 1])            # " |t"
        for j in range(toks.shape[1]):
            o = _put(buf, o, lit, cuts[nid + 1], cuts[nid + 2])    # " t"
            o = _put_int(buf, o, toks[i, j])
        o = _put(buf, o, lit, cuts[nid + 2], cuts[nid + 3])        # " |n"
        for j in range(nnum):
            o = _put(buf, o, lit, cuts[nid + 3 + j], cuts[nid + 4 + j])
            scaled = np.int64(raw[i, j] * 10000.0 + 0.5)
            o = _put_int(buf, o, scaled // 10000)
            frac = scaled % 10000
            if frac:
                buf[o] = 46
                o += 1
                digits = 4
                while frac % 10 == 0:
                    frac //= 10
                    digits -= 1
                for d in range(digits):
                    buf[o + digits - 1 - d] = 48 + frac % 10
                    frac //= 10
                o += digits
        buf[o] = 10
        o += 1
    return o


def _literals() -> tuple[np.ndarray, np.ndarray]:
    pieces = ([f" |{ns} {ns}" for ns, _, _, _ in _IDS] + [" |t", " t", " |n"]
              + [f" {name}:" for name in _NUMERIC])
    raw = [p.encode() for p in pieces]
    cuts = np.cumsum([0] + [len(p) for p in raw]).astype(np.int64)
    return np.frombuffer(b"".join(raw), np.uint8), cuts


def click_chunks(n: int, *, seed: int = 0, chunk: int = 100_000) -> Iterator[bytes]:
    """The VW text of ``n`` click-style examples, ``chunk`` lines at a time (the examples
    are a function of ``n``, ``seed`` and ``chunk``).

    Parameters
    ----------
    n
        The number of examples.
    seed
        The random seed (default 0): the same seed, the same examples.
    chunk
        Examples generated per chunk (default 100000); the examples depend on it.
    """
    model = _Model()
    lit, cuts = _literals()
    rng = np.random.default_rng(seed)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        z = np.full(m, model.bias)
        ids = np.empty((m, len(_IDS)), np.int64)
        for j, (w, cdf) in enumerate(zip(model.ids, model.cdfs)):
            ids[:, j] = _zipf(rng, cdf, m)
            z += w[ids[:, j]]
        toks = _zipf(rng, model.token_cdf, (m, _TOKENS[3]))
        z += model.tokens[toks].sum(axis=1)
        raw, sig = _numeric(rng, m)
        z += sig @ model.numeric
        y = np.where(rng.random(m) < 1.0 / (1.0 + np.exp(-z)), 1, -1).astype(np.int8)
        room = m * 320 + 1024
        while True:
            buf = np.empty(room, np.uint8)
            end = _format(y, ids, toks.astype(np.int64), raw, lit, cuts, buf)
            if end >= 0:
                break
            room *= 2
        yield buf[:end].tobytes()


def write_click(path: str, n: int, *, seed: int = 0, chunk: int = 100_000) -> str:
    """Write ``n`` click-style examples to ``path`` (atomically: temp file, then rename).

    Parameters
    ----------
    path
        The file to write (atomically: a temporary file, then a rename).
    n
        The number of examples.
    seed
        The random seed (default 0): the same seed, the same examples.
    chunk
        Examples generated per chunk (default 100000); the examples depend on it.
    """
    return _write(path, click_chunks(n, seed=seed, chunk=chunk))


# ------------------------------------------------------------------------- wide sparse data

_WIDE_NS = "abcdefg"  # namespaces of the id features, ``features // 7`` ids each (+ rest)
_WIDE_NUMERIC = ("price", "ctr")


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a fixed pseudo-random 64-bit value per id (no table)."""
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


@numba.njit(cache=True)
def _format_wide(y: np.ndarray, names: np.ndarray, ns_of: np.ndarray, raw: np.ndarray,
                 buf: np.ndarray) -> int:
    """``y |a n n |b n ... |n price:v ctr:v`` lines into ``buf`` (-1: too small)."""
    o = 0
    for i in range(len(y)):
        if o + 64 + 12 * names.shape[1] > len(buf):
            return -1
        if y[i] < 0:
            buf[o] = 45
            o += 1
        buf[o] = 49
        o += 1
        prev = -1
        for j in range(names.shape[1]):
            if ns_of[j] != prev:
                prev = ns_of[j]
                buf[o] = 32
                buf[o + 1] = 124
                buf[o + 2] = 97 + prev
                o += 3
            buf[o] = 32
            o = _put_int(buf, o + 1, names[i, j])
        buf[o] = 32
        buf[o + 1] = 124
        buf[o + 2] = 110
        o += 3
        for j in range(raw.shape[1]):
            buf[o] = 32
            o += 1
            if j == 0:
                for c in (112, 114, 105, 99, 101):  # price
                    buf[o] = c
                    o += 1
            else:
                for c in (99, 116, 114):  # ctr
                    buf[o] = c
                    o += 1
            buf[o] = 58
            o += 1
            scaled = np.int64(raw[i, j] * 10000.0 + 0.5)
            o = _put_int(buf, o, scaled // 10000)
            buf[o] = 46
            o += 1
            frac = scaled % 10000
            for d in range(4):
                buf[o + 3 - d] = 48 + frac % 10
                frac //= 10
            o += 4
        buf[o] = 10
        o += 1
    return o


def wide_chunks(n: int, *, seed: int = 0, features: int = 28, vocab: int = 30_000_000,
                head: float = 0.3, head_size: int = 10_000, tail: float = 2.0,
                chunk: int = 100_000) -> Iterator[bytes]:
    """The VW text of ``n`` wide sparse examples, ``chunk`` lines at a time.

    Each of the ``features`` ids is, with probability ``head``, one of ``head_size``
    common ids (a power law, ``floor(head_size * u**3)``), else ``floor(vocab * u**tail)``
    (a heavy head over the whole vocabulary, a tail seen about once). Ids are spread over
    7 namespaces and written as scrambled decimal names (VW hashes a decimal name as its
    value, so the hashed indices are uniform). The planted logit is a fixed pseudo-random
    weight per (namespace, id), larger for common ids, plus the two numeric signals; the
    ids' weights come from a hash, so no table of ``vocab`` weights is kept.

    Parameters
    ----------
    n
        The number of examples.
    seed
        The random seed (default 0): the same seed, the same examples.
    features
        Ids per example (default 28).
    vocab
        Ids in the whole vocabulary (default 30 million).
    head
        Probability that an id is a common one (default 0.3).
    head_size
        Common ids (default 10000).
    tail
        Exponent of the vocabulary's draw; larger: more ids seen once (default 2.0).
    chunk
        Examples generated per chunk (default 100000); the examples depend on it.
    """
    rng = np.random.default_rng(seed)
    ns_of = (np.arange(features) * len(_WIDE_NS) // features).astype(np.int64)
    for s in range(0, n, chunk):
        m = min(chunk, n - s)
        u = rng.random((m, features))
        common = rng.random((m, features)) < head
        ids = np.where(common, np.floor(head_size * u ** 3),
                       np.floor(vocab * u ** tail)).astype(np.int64)
        key = ids * 8 + ns_of
        h = _mix64(key)
        names = (h >> np.uint64(33)).astype(np.int64)  # 31 bits: the name VW hashes
        wt = ((h & np.uint64(0xFFFF)).astype(np.float64) / 65535.0 - 0.5) * 2.0
        wt *= np.where(ids < head_size, 0.6, 0.15)
        price = rng.lognormal(4.0, 1.5, m)
        ctr = rng.beta(1.0, 20.0, m)
        z = (-0.8 + wt.sum(axis=1) + 0.4 * (np.log(price) - 4.0) / 1.5
             - 0.5 * (ctr - 0.048) / 0.045)
        y = np.where(rng.random(m) < 1.0 / (1.0 + np.exp(-z)), 1, -1).astype(np.int8)
        raw = np.stack([price, ctr], axis=1)
        room = m * (40 + 12 * features) + 1024
        while True:
            buf = np.empty(room, np.uint8)
            end = _format_wide(y, names, ns_of, raw, buf)
            if end >= 0:
                break
            room *= 2
        yield buf[:end].tobytes()


def write_wide(path: str, n: int, *, seed: int = 0, **params: Any) -> str:
    """Write ``n`` wide sparse examples to ``path`` (see :func:`wide_chunks` for
    ``params``), atomically.

    Parameters
    ----------
    path
        The file to write (atomically: a temporary file, then a rename).
    n
        The number of examples.
    seed
        The random seed (default 0): the same seed, the same examples.
    params
        The other parameters of :func:`wide_chunks`.
    """
    return _write(path, wide_chunks(n, seed=seed, **params))


def _write(path: str, chunks: Iterator[bytes]) -> str:
    from .._files import make_public, replace_durably

    def write(f: Any) -> None:
        make_public(f.fileno())  # mkstemp's 0600 is for secrets, this is data
        for data in chunks:
            f.write(data)

    replace_durably(path, write, prefix=".tmp-synthetic-")
    return path


def write_lines(path: str, lines: list[str]) -> str:
    """Write lines (one example each) to ``path``.

    Parameters
    ----------
    path
        The file to write.
    lines
        The examples, one per line.
    """
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def logistic_lines(n: int, seed: int = 0, *, weights: bool = False,
                   dense: bool = False) -> list[str]:
    """Logistic data in VW text: namespaces a (3 of 40 categories) and b (4 numeric, 30%
    missing unless ``dense``), tags ``exI``, importance weights with ``weights``. The model
    is the same for every seed.

    Parameters
    ----------
    n
        The number of examples.
    seed
        The random seed (default 0): the same seed, the same examples.
    weights
        Give examples importance weights (default False).
    dense
        No missing numeric values (default False).
    """
    true = np.random.default_rng(12345).normal(size=60)
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(n):
        cats = rng.choice(40, size=3, replace=False)
        nums = rng.normal(size=4) * (rng.random(4) < (1.0 if dense else 0.7))
        z = true[cats].sum() + nums @ true[40:44] + 0.3
        y = 1 if rng.random() < 1 / (1 + np.exp(-z)) else -1
        imp = f" {rng.choice([0.5, 1.0, 2.0, 3.0])}" if weights else ""
        feats = " ".join(f"c{c}" for c in cats)
        num = " ".join(f"n{j}:{v:.4f}" for j, v in enumerate(nums) if v != 0)
        lines.append(f"{y}{imp} 'ex{i}|a {feats} |b {num}")
    return lines


def separable_lines(n: int, seed: int = 0, *, vocab: int = 40, k: int = 6,
                    scale: float = 2.0, prefix: str = "w") -> list[str]:
    """Linearly separable data: ``k`` of ``vocab`` features (``{prefix}{j}``) with values
    in [0, scale), labelled by the sign of a random linear model (drawn from ``seed``).

    Parameters
    ----------
    n
        The number of examples.
    seed
        The random seed (default 0): the same seed, the same examples.
    vocab
        Features to choose from (default 40).
    k
        Features per example (default 6).
    scale
        Values are in [0, scale) (default 2.0).
    prefix
        Feature names' prefix (default ``"w"``).
    """
    rng = np.random.default_rng(seed)
    truth = rng.standard_normal(vocab)
    lines = []
    for _ in range(n):
        feats = rng.choice(vocab, size=k, replace=False)
        vals = rng.random(k) * scale
        label = 1 if float(truth[feats] @ vals) > 0 else -1
        lines.append(f"{label} |f " + " ".join(f"{prefix}{f}:{v:.3f}"
                                                for f, v in zip(feats, vals)))
    return lines


def write_dense(train: str, test: str, *, n_train: int = 116_000, n_test: int = 29_000,
                seed: int = 74) -> tuple[str, str]:
    """Dense logistic data in VW text: 74 standard-normal features in namespace ``x``, a
    planted model (weights ~ N(0, 1/16)), labels drawn from its probability.

    Parameters
    ----------
    train
        The training file to write.
    test
        The test file to write.
    n_train
        Training examples (default 116000).
    n_test
        Test examples (default 29000).
    seed
        The random seed (default 74).
    """

    rng = np.random.default_rng(seed)
    true = rng.normal(size=74) / 4
    for path, n in ((train, n_train), (test, n_test)):
        X = rng.normal(size=(n, 74)).astype(np.float32)
        y = np.where(rng.random(n) < 1 / (1 + np.exp(-(X @ true))), "1", "-1")
        feats = [" ".join(f"f{j}:{v:.4g}" for j, v in enumerate(row)) for row in X]
        # (a temporary file made afresh, never through a name someone left beside it)
        _write(path, iter(["".join(f"{lab} |x {fs}\n" for lab, fs in zip(y, feats)).encode()]))
    return train, test
