"""Vowpal Wabbit's text outputs: prediction files (``-p``), ``--readable_model`` and
``--invert_hash``, in VW 9's layouts so that tools written for VW read them.

Predictions are one line per example, ``value`` or ``value tag``; a whole number is printed
as one (``0``, ``1``, ``-1``), anything else with six decimals, as VW prints its float
predictions. ``--readable_model`` is VW's header and then ``index:weight`` per non-zero
weight by index (``index:weight g2 norm`` when the model carries the online learner's state,
as VW 9 writes it with its default ``--save_resume``); ``--invert_hash`` puts the feature's
name in front, ``namespace^feature`` (``feature`` in the default namespace,
``a^x*b^y`` for a cross, ``Constant`` for the bias). Names come from reading the VW text
once more, only when asked, keeping one name per hashed index (VW keeps them while
parsing): as many names as there are distinct features, never the examples; only the lines
where the compiled parser first meets an index still unnamed are named
(:mod:`._vwnamelines`: a tenth of a click log's). It imports no numba (the names hashed in
Python, MurmurHash3 the compiled core's: :mod:`.._io._hashnames`), so that the compiled
learner writes these files as its run ends.
"""

from __future__ import annotations

import array
import contextlib
import functools
import gzip
import io
import math
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from ..._errors import ConfigError, DataError
from ..._lazy import lazy_module
from .._io._hashnames import CONSTANT_HASH, FNV_PRIME, hashstring, murmur3_32
from .._losstable import loss_spec
from .._online._state import CONTRACTION, GRAVITY, MAX_LABEL, MIN_LABEL, SUM_NORM_X, TOTAL_WEIGHT
from ._vwmodel import run_counters
from ._vwout import AtomicText

np = lazy_module("numpy", globals(), "np")

__all__ = ["crossed_names", "feature_names", "write_readable"]

VW_LAYOUT = "9.11.9"  # the VW version whose readable-model layout this follows


def _lines(path: str) -> Iterator[str]:
    """The lines of a plain, .gz or one-member .zip file, streamed."""
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8", errors="surrogateescape") as f:
                yield from f
            return
        if path.endswith(".zip"):
            with zipfile.ZipFile(path) as z:
                names = [n for n in z.namelist() if not n.endswith("/")]
                if len(names) != 1:
                    raise DataError(f"{path}: a .zip input must hold exactly one file")
                with z.open(names[0]) as raw:
                    yield from io.TextIOWrapper(raw, encoding="utf-8",
                                                errors="surrogateescape")
            return
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            yield from f
    except (OSError, zipfile.BadZipFile, EOFError) as e:
        raise DataError(f"{path}: cannot read: {e}") from None


def _sections(line: str) -> Iterable[tuple[str, list[tuple[str, int]]]]:
    """(namespace, [(feature name, anonymous count)]) of one VW line (the label part before
    the first '|'). An anonymous feature (``:v``) has name ``""`` and its running count in
    the namespace (counted before a zero value drops it, as VW's parser counts); a named
    one has count -1; a string value (``name:text``) has name ``name^text`` and count
    -2 - len(name). :func:`_feature_hash` turns an entry into its 32-bit index."""
    parts = line.rstrip("\r\n").split("|")
    for sec in parts[1:]:
        toks = sec.split()
        if not toks:
            continue
        if sec[:1].isspace():
            ns, feats = "", toks
        else:
            ns, _, scale = toks[0].partition(":")
            feats = toks[1:]
            with contextlib.suppress(ValueError):
                if scale and float(scale) == 0.0:
                    continue  # |ns:0: every value times 0, dropped as VW drops them
        names = []
        anon = 0
        for f in feats:
            name, _, val = f.rpartition(":") if ":" in f else (f, "", "")
            k = -1
            if not name:
                k, anon = anon, anon + 1
            if val:
                try:
                    if float(val) == 0.0:
                        continue  # VW drops zero-valued features
                except ValueError:
                    if name and val[0] not in "0123456789+-." and \
                            val[:3].lower() not in ("nan", "inf"):
                        # a string value: VW 9's name^value (see _vwparse._text_value)
                        name, k = f"{name}^{val}", -2 - len(name)
            names.append((name, k))
        yield ns, names


def _feature_hash(name: str, anon: int, seed: int, every: bool = False) -> int:
    """The 32-bit index of a :func:`_sections` entry in the namespace hashed to ``seed``:
    VW gives an anonymous feature the namespace hash plus its running count (``every``:
    ``--hash all``, every name hashed with MurmurHash3)."""
    def h(s: str, seed: int) -> int:
        b = s.encode("utf-8", "surrogateescape")
        return murmur3_32(b, seed) if every else hashstring(b, seed)

    if anon >= 0:
        return (seed + anon) & 0xFFFFFFFF
    if anon <= -2:  # name^text: the text hashed with the name's hash as seed
        at = -2 - anon
        return h(name[at + 1:], h(name[:at], seed))
    return h(name, seed)


def _generation(model: Any, key: str) -> list[str]:
    """The VW feature generation value ``key`` of the run that wrote ``model``
    (``info["vw_generation"]``, :func:`._vwmodel.run_generation`)."""
    return list(((getattr(model, "info", None) or {}).get("vw_generation") or {}).get(key, []))


def namespace_hash(ns: str, seed: int = 0, every: bool = False) -> int:
    """VW's hash of namespace ``ns`` ("" the default one) under ``--hash_seed seed`` and
    (``every``) ``--hash all``."""
    if not ns:
        return murmur3_32(b"", seed) if seed else 0
    b = ns.encode("utf-8", "surrogateescape")
    if every:
        return murmur3_32(b, seed)
    b = b.strip() if not seed else b.strip(b" \t")
    return hashstring(b, seed) if b or not seed else murmur3_32(b"", seed)


@functools.lru_cache(maxsize=1 << 12)
def _name_hash(name: str, seed: int, every: bool) -> int:
    """VW's hash of a plain name in a namespace hashed to ``seed`` (``every``: MurmurHash3
    even of a name of digits), kept for the names met most (a name's hash takes ~2 us in
    Python, a lookup a tenth of that; the frequent ids of a click log come back all the
    time, and 64k names kept took 13 MB)."""
    b = name.encode("utf-8", "surrogateescape")
    return murmur3_32(b, seed) if every else hashstring(b, seed)


def _section_hashes(fs: list[tuple[str, int]], seed: int, every: bool = False) -> list[int]:
    """The 32-bit index of each :func:`_sections` entry of one namespace, as
    :func:`_feature_hash` gives it."""
    return [_name_hash(f, seed, every) if k == -1 else _feature_hash(f, k, seed, every)
            for f, k in fs]


def feature_names(paths: Sequence[str], model: Any, gen: Any = None) -> Mapping[int, str]:
    """Hashed index -> VW's name (``ns^f``, ``ns^f*ns2^g``, ``Constant``) for the features
    of ``paths`` that carry a weight in ``model``, built as the parser builds the features
    (``--ignore``/``--keep``/``--ignore_linear``, interactions in VW's order with its
    wildcards, same-namespace runs as combinations). ``gen``: the VW feature generation
    (``_vwgen.FeatureGen``) the compiled parser applied to ``paths`` as given (an input
    that ``_vwgen`` rewrote is named from its own record of it)."""
    from .._io._interactions import compile_interactions

    p = model.parse
    if p.format != "vw":
        raise ConfigError("--invert_hash needs --format vw (feature names come from VW text)")
    mask = p.mask
    names: Any
    pending: Callable[[Any], Any]
    if mask < 1 << 24:  # a byte per index of the table: 1 in use, 2 named
        flags = bytearray(mask + 1)
        states = np.frombuffer(flags, np.uint8)
        states[np.asarray(model.indices, np.int64) & mask] = 1
        names = _Names()

        def name_of(h: int, full: str) -> None:
            if flags[h & mask] == 1:
                flags[h & mask] = 2
                names.add(h & mask, full)

        def pending(idx: Any) -> Any:
            return states[idx] == 1
    else:  # (the indices in use, a set: fewer than the table's)
        live = set(model.indices.tolist())
        names = {}
        done = _Done(np.asarray(model.indices, np.int64) & mask)

        def name_of(h: int, full: str) -> None:
            if (h & mask) in live and (h & mask) not in names:
                names[h & mask] = full
                done.fresh.append(h & mask)

        pending = done.pending

    if p.constant:
        name_of(CONSTANT_HASH, "Constant")
    ignored, linear_off = p.namespace_flags()
    inters = compile_interactions(p.quadratic, p.cubic, p.interactions,
                                  leave_duplicates=p.leave_duplicates)

    from ._vwgen import GENERATED, SOURCES
    from ._vwnamelines import compiled_names, lines_to_name

    renamed = gen is not None and gen.renames_only
    for path in paths:
        made, source = GENERATED.get(path), SOURCES.get(path)
        lines: Iterable[tuple[int, str]]
        if made or source:  # (a rewritten copy: every line of the input as given)
            lines = enumerate(_lines((made or source)[0]), 1)  # type: ignore[index]
        elif compiled_names(path):  # (the lines that bring a new index)
            lines = lines_to_name(path, p, gen, pending)
        else:
            lines = enumerate(_lines(path), 1)
        made = made or ((path, gen) if gen is not None and not renamed else None)
        if made:  # (the generated features named from the input's words)
            _generated_names(*made, lines, (ignored, linear_off), inters, p.permutations,
                             name_of)
            continue
        hash_seed, every = source[1:] if source else \
            (gen.seed, gen.hash_all) if renamed else (0, False)
        seeds: dict[str, int] = {}
        for _, line in lines:
            groups: dict[int, list[tuple[int, str]]] = {}
            for ns, fs in _sections(line):
                ch = ns.encode("utf-8", "surrogateescape")[0] if ns else 32
                if ignored[ch]:
                    continue
                seed = seeds.get(ns)
                if seed is None:
                    seed = seeds[ns] = namespace_hash(ns, hash_seed, every)
                g = groups.setdefault(ch, [])
                for (f, _), h in zip(fs, _section_hashes(fs, seed, every)):
                    full = f"{ns}^{f}" if ns else f
                    g.append((h, full))
                    name_of(h, full)  # (VW names --ignore_linear's features too)
            crossed_names(inters, groups, p.permutations, name_of)
    return names


class _Done:
    """Which of the indices in use (``live``) have a name, for :func:`feature_names`' set
    of a table above 2^24 rows: the indices named since the last question are in
    :attr:`fresh`, marked when :meth:`pending` is next asked."""

    def __init__(self, live: Any) -> None:
        self.live = np.unique(live)
        self.named = np.zeros(len(self.live), bool)
        self.fresh: list[int] = []

    def pending(self, idx: Any) -> Any:
        """Which of ``idx`` are in use and not named yet."""
        if self.fresh:
            self.named[np.searchsorted(self.live, np.array(self.fresh, np.int64))] = True
            self.fresh.clear()
        if not len(self.live):
            return np.zeros(len(idx), bool)
        at = np.minimum(np.searchsorted(self.live, idx), len(self.live) - 1)
        return (self.live[at] == idx) & ~self.named[at]


class _Names(Mapping[int, str]):
    """Hashed index -> VW's name, as a dict of them answers, each name's bytes in one
    buffer (a dict of -b 18's 260k names, its int keys and str values, took 26 MB of an
    ``--invert_hash`` run's peak, over VW's 66 MB): :meth:`add` them, then look them up
    (by binary search)."""

    def __init__(self) -> None:
        self._keys = array.array("I")
        self._ends = array.array("Q", [0])
        self._blob = bytearray()
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None

    def add(self, i: int, name: str) -> None:
        self._keys.append(i)
        self._blob += name.encode("utf-8", "surrogateescape")
        self._ends.append(len(self._blob))
        self._sorted = None

    def _at(self, i: Any) -> int:
        if self._sorted is None:
            k = np.array(self._keys, np.uint32)
            order = np.argsort(k, kind="stable")
            self._sorted = (k[order], order)
        k, order = self._sorted
        if not isinstance(i, (int, np.integer)) or not 0 <= i < 1 << 32:
            return -1
        j = int(np.searchsorted(k, i))
        return int(order[j]) if j < len(k) and k[j] == i else -1

    def many(self, idx: np.ndarray) -> list[str | None]:
        """The name of each of the indices ``idx`` (None: none), found at once."""
        self._at(0)  # (sorted)
        k, order = self._sorted  # type: ignore[misc]
        idx = np.asarray(idx, np.int64)
        j = np.minimum(np.searchsorted(k, idx), max(len(k) - 1, 0))
        found = (k[j] == idx) if len(k) else np.zeros(len(idx), bool)
        at = np.where(found, order[j] if len(k) else 0, -1).tolist()
        blob, ends = self._blob, self._ends
        return [None if x < 0 else blob[ends[x]:ends[x + 1]].decode("utf-8", "surrogateescape")
                for x in at]

    def __getitem__(self, i: int) -> str:
        at = self._at(i)
        if at < 0:
            raise KeyError(i)
        return self._blob[self._ends[at]:self._ends[at + 1]].decode("utf-8", "surrogateescape")

    def __contains__(self, i: object) -> bool:
        return self._at(i) >= 0

    def __iter__(self) -> Iterator[int]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


def _generated_names(path: str, gen: Any, lines: Iterable[tuple[int, str]],
                     flags: tuple[np.ndarray, np.ndarray],
                     inters: Sequence[tuple[int, ...]], permutations: bool,
                     emit: Callable[[int, str], None]) -> None:
    """:func:`feature_names`' for an input whose features ``gen`` (``_vwgen.FeatureGen``)
    rewrote: each of its ``lines`` (number, text) with its features as the rewrite makes
    them, named as VW names them (an affix feature by its hash, as the rewritten text has
    it); ``flags``: the parse options' ``namespace_flags``."""
    from ._vwgen import written_namespace

    ignored, _ = flags
    for k, text in lines:
        named: dict[int, list[tuple[int, str | None]]] = {}
        gen.line(text, f"{path}:{k}", named)
        groups: dict[int, list[tuple[int, str]]] = {}
        for c, fs in named.items():
            if ignored[c]:
                continue
            letter, base = written_namespace(c)
            g = groups[c] = [(h, full if full is not None else
                              f"{letter}^{(h - base) & 0xFFFFFFFF}") for h, full in fs]
            for h, full in g:  # (VW names --ignore_linear's features too)
                emit(h, full)
        crossed_names(inters, groups, permutations, emit)


def crossed_names(inters: Sequence[tuple[int, ...]],
                  groups: dict[int, list[tuple[int, str]]], permutations: bool,
                  emit: Callable[[int, str], None]) -> None:
    """Every crossed feature of one example, in VW's order: ``emit(hash, name)`` for each
    (``ns^f*ns2^g``), from ``groups`` (namespace character -> its features' hashes and
    names) and the compiled interactions ``inters``; runs of one namespace are
    combinations (pairs j >= i), as VW's without ``--permutations``."""

    def cross(t: tuple[int, ...], k: int, start: int, h: int, full: str) -> None:
        feats = groups[t[k]]
        for j in range(start, len(feats)):
            hk, nk = feats[j]
            hh = hk if k == 0 else ((h * FNV_PRIME) & 0xFFFFFFFF) ^ hk
            nn = nk if k == 0 else f"{full}*{nk}"
            if k == len(t) - 1:
                emit(hh, nn)
            else:
                same = t[k + 1] == t[k] and not permutations
                cross(t, k + 1, j if same else 0, hh, nn)

    for t in inters:
        if not all(c in groups for c in t):
            continue
        if len(t) != 2:
            cross(t, 0, 0, 0, "")
            continue
        second = groups[t[1]]  # (a pair, the common case, without the recursion)
        same = t[1] == t[0] and not permutations
        for i, (h, name) in enumerate(groups[t[0]]):
            h, name = (h * FNV_PRIME) & 0xFFFFFFFF, name + "*"
            for hk, nk in second[i:] if same else second:
                emit(h ^ hk, name + nk)


def _checksum(lo: float, hi: float, bits: int, opts: str,
              grams: list[str] | None = None, skips: list[str] | None = None) -> int:
    """VW's header checksum of a text model: its hash chained over each text write after
    the version line (``2 ngram:``, each of ``--ngram``'s values with its space, and the
    line end are separate writes, as in VW; ``--skips`` alike)."""
    from ._vwmodel import _murmur

    h, grams, skips = 0, grams or [], skips or []
    for part in ("Id \n", f"Min label:{lo:g}\n", f"Max label:{hi:g}\n", f"bits:{bits}\n",
                 "lda:0\n", f"{len(grams)} ngram:", *(f"{g} " for g in grams), "\n",
                 f"{len(skips)} skip:", *(f"{k} " for k in skips), "\n",
                 f"options:{' ' + opts if opts else ''}\n"):
        h = _murmur(part.encode(), h)
    return h


# weights formatted and written this many at a time (the text of a whole model of 15M
# features would stand in memory beside it: ~60 bytes a line, and as many str objects;
# 64k lines at a time, their lists and text, took 17 MB over a -b 18 run's 44)
_LINES = 1 << 13


def _readable_lines(idx: np.ndarray, w: np.ndarray, g2: np.ndarray | None,
                    nrm: np.ndarray | None, names: Mapping[int, str] | None,
                    unnamed: str = "") -> Iterator[str]:
    """The readable model's weight lines, ``_LINES`` at a time: ``[name:]index:weight``
    (a weight ``names`` does not name, one of features the data did not have, with
    ``unnamed`` before its index, as VW writes it: nothing in the save_resume form, ``:``
    in the weights-only one), with the adaptive sum and the normalizer after it where they
    are given (either alone for a model of one of the two rules). A weight of 0 kept for
    its sums (a feature whose updates cancelled: ``x:1 x:-1`` in one example) is written
    without its name, as VW writes it."""
    none = unnamed if names is not None else ""
    for a in range(0, len(idx), _LINES):
        part = slice(a, a + _LINES)
        body = []
        sums = [c for c in (g2, nrm) if c is not None]
        tags = _tags(names, idx[part])
        if len(sums) == 2:
            for t, i, wi, gi, ni in zip(tags, idx[part].tolist(), w[part].tolist(),
                                        g2[part].tolist(), nrm[part].tolist()):
                body.append(f"{t if t is not None and wi else none}{i}:{wi:g} {gi:g} {ni:g}\n")
        elif sums:
            for t, i, wi, si in zip(tags, idx[part].tolist(), w[part].tolist(),
                                    sums[0][part].tolist()):
                body.append(f"{t if t is not None and wi else none}{i}:{wi:g} {si:g}\n")
        else:
            for t, i, wi in zip(tags, idx[part].tolist(), w[part].tolist()):
                body.append(f"{t if t is not None else none}{i}:{wi:g}\n")
        yield "".join(body)


def _tags(names: Mapping[int, str] | None, idx: np.ndarray) -> list[str | None]:
    """``name:`` of each of ``idx`` that ``names`` names, else None (all None without
    names); a :class:`_Names` looks them all up at once."""
    if names is None:
        return [None] * len(idx)
    if isinstance(names, _Names):
        return [None if n is None else n + ":" for n in names.many(idx)]
    return [None if n is None else n + ":" for n in map(names.get, idx.tolist())]


def _g(v: float) -> str:
    """A number as VW's stream prints it (``%g``; a NaN with its sign: C++ writes a negative
    one ``-nan``, as poisson's loss of a negative label is)."""
    if math.isnan(v):
        return "-nan" if math.copysign(1.0, v) < 0 else "nan"
    return f"{v:g}"


def write_readable(model: Any, path: str, names: Mapping[int, str] | None = None,
                   *, counters: bool = False, predict_only: bool = False,
                   options: Sequence[str] = (), bare: bool = False) -> None:
    """VW's ``--readable_model`` (``names`` given: ``--invert_hash``) text of ``model``;
    ``counters``: with every line of VW's learner state and its performance counters: at
    0 for a model no example was learned from in this run (VW resets them when it reads
    one), else from the run's sums (``model.info["pass_totals"]``, written so whenever the
    model has them): VW's ``t`` (every example's weight), ``sum_loss``, the labelled and
    unlabelled weight, ``weighted_labels``, ``example_number``, ``total_features``, the
    passes, and where the progress table stopped (``dump_interval``, the loss since).
    ``predict_only``: VW's ``--predict_only_model`` form, the nonzero weights alone;
    ``options``: more of VW's kept options for the header (``--oaa K``), sorted in;
    ``bare``: the header's state and counters, but each nonzero weight's line without its
    sums (VW's text of a model after a ``-t`` run)."""
    idx = model.indices
    order = slice(None)  # (a model's indices are most often in order already)
    if len(idx) > 1 and not bool(np.all(idx[1:] > idx[:-1])):
        order = np.argsort(idx, kind="stable")
    idx = idx[order]
    w = model.weights[order]
    ad = model.adaptive
    if predict_only:
        nonzero = w != 0
        idx, w, ad = idx[nonzero], w[nonzero], None
    g2 = nrm = None
    info = getattr(model, "info", {})
    rules = [] if predict_only else list(info.get("vw_rules") or [])
    if ad is not None:  # (VW's: a weight whose value or any sum its rules keep is not 0)
        from ._vwmodel import record_sums

        has_g2, has_nrm = record_sums(rules)
        g2 = ad[0][order] if has_g2 else None
        nrm = ad[1][order] if has_nrm else None
        keep = w != 0
        for c in (g2, nrm):
            if c is not None:
                keep |= c != 0
        idx, w = idx[keep], w[keep]
        g2 = g2[keep] if g2 is not None else None
        nrm = nrm[keep] if nrm is not None else None
    totals = info.get("pass_totals")  # (up to the pass whose model the holdout kept)
    totals = totals[:info.get("online_passes", len(totals))] if totals else totals
    run = bool(totals) and all(len(t) >= 10 for t in totals)  # (VW's run's sums)
    clip = loss_spec(model.loss).clip
    st = model.adaptive[2] if model.adaptive is not None else None
    if st is not None and len(st) > MAX_LABEL and info.get("fixed_range"):
        clip = "labels"  # (--min_prediction/--max_prediction: VW writes them, any loss)
    fixed = clip == "fixed"  # ([-50, 50] whatever the labels)
    lo, hi = (-50.0, 50.0) if fixed else (-1.0, 1.0)
    if st is not None and not fixed and len(st) > MAX_LABEL and (
            st[MIN_LABEL] != st[MAX_LABEL] or counters or run  # (0, 0: no label seen)
            or info.get("fixed_range")):
        lo, hi = float(st[MIN_LABEL]), float(st[MAX_LABEL])
    if clip == "labels50":  # (poisson: [-50, 50] widened to them)
        lo, hi = min(lo, -50.0), max(hi, 50.0)
    pa = model.parse  # the options VW keeps in a model, in the order it writes them
    kept = ([f"--{r}" for r in rules] + [f"--cubic {v}" for v in pa.cubic]
            + [f"--interactions {v}" for v in pa.interactions]
            + [f"--{k} {float(np.float32(v)):.15g}"
               for k, v in (info.get("vw_rates") or {}).items()]
            + ([f"--link {info['link']}"] if info.get("link") else [])
            + (["--binary"] if info.get("binary") else [])
            + ([f"--{info['vw_learner']}"] if info.get("vw_learner") else [])
            + ([] if pa.constant else ["--noconstant"])
            + [f"--quadratic {v}" for v in pa.quadratic]
            + [f"--hash {v}" for v in _generation(model, "hash")]
            + [f"--hash_seed {v}" for v in _generation(model, "hash_seed")]
            + [f"--redefine {v}" for v in _generation(model, "redefine")]
            + [f"--affix {v}" for v in _generation(model, "affix")[:1]]
            + [f"--spelling {v}" for v in _generation(model, "spelling")]
            + list(options))
    opts = " ".join(sorted(kept, key=lambda o: o.split()[0])
                    + ([f"--{k} {''.join(sorted({c for v in getattr(pa, k) for c in v}))}"
                        for k in ("ignore", "ignore_linear", "keep") if getattr(pa, k)]
                       if pa.format == "vw" else [])  # (merged, as VW's, and -f's)
                    + [f"--random_seed {v}" for v in _generation(model, "random_seed")])
    grams, skips = _generation(model, "ngram"), _generation(model, "skips")
    head = [f"Version {VW_LAYOUT}", "Id ", f"Min label:{lo:g}", f"Max label:{hi:g}",
            f"bits:{model.bits}", "lda:0",
            f"{len(grams)} ngram:" + "".join(f"{g} " for g in grams),
            f"{len(skips)} skip:" + "".join(f"{k} " for k in skips),
            f"options:{' ' + opts if opts else ''}",
            f"Checksum: {_checksum(lo, hi, model.bits, opts, grams, skips)}",
            f":{1 if ad is not None else 0}"]
    kept = info.get("vw_counters_out")  # (VW's own, where the run kept them all)
    if ad is not None and (counters or kept is not None or run):
        s = ad[2]
        if kept is not None:
            c = dict(kept)
        else:
            c = run_counters(totals or [], info.get("vw_progress"), info.get("vw_preserved"))
            c["t"] += info.get("vw_t0", 0.0)  # (-i's t, which VW carries on)
        head += [f"initial_t {info.get('vw_initial_t', 0.0):g}",
                 f"norm normalizer {s[SUM_NORM_X]:g}", f"t {c['t']:g}",
                 f"sum_loss {_g(c['sum_loss'])}",
                 f"sum_loss_since_last_dump {_g(c['since'])}",
                 f"dump_interval {c['dump']:g}", f"min_label {lo:g}", f"max_label {hi:g}",
                 f"weighted_labeled_examples {c['labelled']:g}",
                 f"weighted_labels {c['labels']:g}",
                 f"weighted_unlabeled_examples {c['unlabelled']:g}",
                 f"example_number {c['examples']:d}", f"total_features {c['features']:d}",
                 f"total_weight {s[TOTAL_WEIGHT]:g}",
                 f"sd::oec.weighted_labeled_examples {c['old']:g}",
                 f"current_pass {info.get('vw_current_pass', c['passes'])}",
                 f"l1_state {s[GRAVITY]:g}",
                 f"l2_state {s[CONTRACTION]:g}"]
    elif ad is not None:
        s = ad[2]
        head += [f"initial_t {info.get('vw_initial_t', 0.0):g}",
                 f"norm normalizer {s[SUM_NORM_X]:g}", f"t {s[TOTAL_WEIGHT]:g}",
                 f"min_label {lo:g}", f"max_label {hi:g}", f"total_weight {s[TOTAL_WEIGHT]:g}"]
    out = AtomicText(path)
    try:
        out.write("\n".join(head) + "\n")
        if bare:
            nonzero = w != 0
            idx, w, g2, nrm = idx[nonzero], w[nonzero], None, None
        for piece in _readable_lines(idx, w, g2, nrm, names, "" if ad is not None else ":"):
            out.write(piece)
        out.commit()
    except BaseException:
        out.discard()
        raise
