"""VW's parse-time feature generation for ``terascale vw``: ``--redefine``, ``--ngram``,
``--skips``, ``--feature_limit``, ``--hash_seed``, ``--hash all``, ``--affix``,
``--sort_features`` (``--feature_limit`` without a limit: sorted, repeats dropped),
``--spelling`` and ``--feature_mask``'s filter.

VW applies these while it parses a line, to each namespace's list of hashed features:
``--redefine N:=S`` files the namespaces whose names start with a letter of S under the
letter N (their features keep the hash of their own namespace name: only the letter that
``-q``, ``--ignore`` and ``--keep`` see changes); ``--ngram [ns]N`` with ``--skips [ns]K``
appends, per namespace letter, every n-gram of its features in the order they appear,
with up to K features skipped between the words, of value 1 and index
``i1 * 27942141 + i2 ...`` (VW's ``kskip_ngram_transformer``); ``--feature_limit [ns]N``
keeps the N features of lowest index (sorted, duplicates dropped); ``--hash_seed S``
seeds every hash of a name; ``--hash all`` hashes every name of a feature or namespace
with MurmurHash3, where VW's default (``--hash strings``) takes an all-digit name's value
as its hash. ``--affix [+-]L[ns],...`` adds, for each named feature of
namespace ns (the default one without ns), its prefix (``+``) or suffix (``-``) of L
characters as a feature of VW's affix namespace (character 132), of the feature's value
and index ``hash(affix, namespace hash) * (13903957 + code * 27942141)``, where code is
``L << 1 | prefix`` (VW's ``parse_example_text``); the affix namespace joins the line
where its first feature appears, before the namespace that made it (VW lists a namespace
once its features are read). ``--spelling NS`` (``_``: the default namespace) adds, for
each feature of NS, its name's spelling (each digit ``0``, lowercase letter ``a``,
uppercase letter ``A``, ``.`` itself, any other byte ``#``) as a feature of VW's spelling
namespace (character 133), of the feature's value and index ``hashstring(spelling,
namespace hash)``, joining the line as the affix namespace does. ``--feature_mask``
(VW's ``gd`` never updates a weight that is 0, nor counts it in the adaptive and
normalized sums, so a feature whose starting weight is 0 stays out of every sum) drops
the features whose index is not in the mask's set of nonzero weights: the same examples
for the learner, without a branch on its hot path.

Here these run as one text-to-text step in front of terascale's parser, only when one of
these flags is given (on a run the compiled learner takes, ``-t -i``, ``-n N`` and
``--oaa K`` included, its parser makes ``--ngram``/``--skips`` and ``--spelling`` without
the others (:attr:`FeatureGen.parser_made`), and ``--redefine``, ``--feature_limit``,
``--hash_seed``, ``--hash all``, ``--sort_features`` and ``--affix`` (``--spelling`` beside
some of them) from :meth:`FeatureGen.spec` (:attr:`FeatureGen.parser_rules`) instead,
``_vwonline``, and ``--invert_hash`` names them by :meth:`FeatureGen.line` of the lines
that bring a new index (``_vwnamelines``): this rewrite, in Python, takes 20-100x VW's CPU
time): each line is
rewritten with every feature named by its final hash (an
all-digit name ``D`` in namespace ``c`` hashes to ``D + hash(c)``, as VW's ``hashstring``
does), under the namespace letter it ends in. The parser then adds the constant and the
interactions as always, so the examples are VW's bit for bit; the hot path never sees these
flags. The rewritten copy lives in a scratch file of the run (``_files.scratch_file``).
Where only the hashes change (``--hash_seed``, ``--hash all``), ``SOURCES`` maps the copy back to its input and
its hashing, and ``--audit`` and ``--invert_hash`` name the features by the original words;
with the other flags ``GENERATED`` keeps the input and the generation, and
``--invert_hash`` names each feature as VW does (an n-gram by its words, ``t^w2^w47``, an
affix ``affix^t+2=ab``), while ``--audit``'s names are the rewritten ones.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..._errors import ConfigError, DataError
from ..._files import scratch_file
from ..._lazy import lazy_module
from .._io._hashnames import hashstring, murmur3_32

np = lazy_module("numpy", globals(), "np")

__all__ = ["GENERATED", "INPUTS", "SOURCES", "SPELLING_CHARACTER", "FeatureGen", "as_given",
           "rewrite_inputs", "written_namespace"]

QUADRATIC_CONSTANT = 27942141  # VW's multiplier of an n-gram's indices
AFFIX_CONSTANT = 13903957
AFFIX_NAMESPACE = 132
SPELLING_NAMESPACE = 133
# how the rewritten text names them (any name: its hash is undone), each its own first
# byte: the parser groups a line's namespaces by that byte, in the order they come
_AFFIX_NAME = "\x7faffix"
_SPELLING_NAME = "\x01spelling"
SPELLING_CHARACTER = ord(_SPELLING_NAME[0])  # (the compiled parser files them under it too)
_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1

# a rewritten copy -> (its input, --hash_seed, --hash all), where only the hashes changed
SOURCES: dict[str, tuple[str, int, bool]] = {}
INPUTS: dict[str, str] = {}  # a rewritten copy -> its input (the preamble names the input)
# a rewritten copy -> (its input, the generation), where features were added or dropped
GENERATED: dict[str, tuple[str, FeatureGen]] = {}


def _atoi(s: str) -> int:
    """C's ``atoi``, as VW reads these values: the leading digits (``":10"`` is 0)."""
    s = s.lstrip()
    sign, i = 1, 0
    if s[:1] in ("+", "-"):
        sign, i = (-1 if s[0] == "-" else 1), 1
    j = i
    while j < len(s) and s[j].isdigit():
        j += 1
    return sign * int(s[i:j]) if j > i else 0


def _table(specs: Sequence[str], flag: str) -> dict[int, int]:
    """VW's ``--ngram``/``--skips``/``--feature_limit`` values: ``N`` (every namespace)
    or ``cN`` (namespace letter c, then N as C's atoi reads it: ``a:10`` is a0, as in
    VW); {letter code: N}, -1 for every namespace."""
    out: dict[int, int] = {}
    for s in specs:
        if len(s) < 2 and not s[:1].isdigit():
            raise ConfigError(f"{flag} {s!r}: N, or a namespace letter before N (like a2)")
        if s[0].isdigit():
            out = {-1: _atoi(s)}  # every namespace, over what came before
            continue
        out[s.encode()[0]] = _atoi(s[1:])
    return out


def _affix(specs: Sequence[str]) -> dict[int, list[tuple[bool, int, int]]]:
    """VW's ``--affix`` values (``+2,-3b``): {namespace letter code: [(prefix, length,
    code)]}, each namespace's in the order VW generates them (the last given first)."""
    out: dict[int, list[tuple[bool, int, int]]] = {}
    if len(set(specs)) > 1:
        raise ConfigError(f"--affix given twice with different values ({' vs '.join(specs)}"
                          f"): VW takes one, with comma-separated parts")
    for spec in specs[:1]:
        for p in spec.split(","):
            if not p:
                continue
            q = p[1:] if p[0] in "+-" else p
            prefix = p[0] != "-"
            if not q or not "1" <= q[0] <= "7" or len(q) > 2:
                raise ConfigError(f"--affix {spec}: each of its comma-separated parts is "
                                  f"[+|-]L[namespace], L in 1..7 (VW's), not {p!r}")
            ln = int(q[0])
            c = q[1].encode()[0] if len(q) == 2 else 32
            out.setdefault(c, []).insert(0, (prefix, ln, (ln << 1) | int(prefix)))
    return out


def _redefine(specs: Sequence[str]) -> list[int] | None:
    """VW's ``--redefine N:=S`` table (namespace letter -> letter), in the given order."""
    if not specs:
        return None
    table = list(range(256))
    for arg in specs:
        pos = arg.find(":=")
        if pos < 0:
            raise ConfigError(f"--redefine {arg}: the format is N:=S, :=S or N:= (N the new "
                              f"namespace letter, S the letters of the old ones)")
        target = arg[0] if pos > 0 else " "
        if target in "|:\t\r\n":
            raise ConfigError(f"--redefine {arg}: {target!r} cannot be a namespace letter")
        new = ord(target) & 255
        src = arg[pos + 2:]
        if not src:
            table[32] = new
            continue
        for c in src:
            if c == ":":
                table = [new] * 256
                break
            table[ord(c) & 255] = new
    return table


@dataclass
class FeatureGen:
    """What the flags ask for (see the module's docstring)."""

    bits: int = 18
    ngram: dict[int, int] = field(default_factory=dict)
    skips: dict[int, int] = field(default_factory=dict)
    limit: dict[int, int] = field(default_factory=dict)
    redefine: list[int] | None = None
    seed: int = 0
    keep: frozenset[int] | None = None  # --feature_mask: the indices that may be updated
    affix: dict[int, list[tuple[bool, int, int]]] = field(default_factory=dict)
    hash_all: bool = False  # --hash all: every name hashed with MurmurHash3
    sort: bool = False  # --sort_features: each namespace's features by index, repeats dropped
    spelling: frozenset[int] = frozenset()  # --spelling: the namespaces spelled

    @classmethod
    def from_flags(cls, *, bits: int, ngram: Sequence[str], skips: Sequence[str],
                   feature_limit: Sequence[str], redefine: Sequence[str],
                   hash_seed: int, keep: frozenset[int] | None = None,
                   affix: Sequence[str] = (), hash_all: bool = False,
                   sort_features: bool = False,
                   spelling: Sequence[str] = ()) -> FeatureGen | None:
        """None when no flag of VW's feature generation is given (``keep``: the indices
        of ``--feature_mask``'s nonzero weights)."""
        if not (ngram or skips or feature_limit or redefine or hash_seed
                or keep is not None or affix or hash_all or sort_features or spelling):
            return None
        if sort_features and (ngram or affix):
            raise ConfigError("--sort_features with --ngram/--affix is not supported by "
                              "terascale vw")
        if affix and (ngram or feature_limit):
            raise ConfigError("--affix with --ngram/--feature_limit is not supported by "
                              "terascale vw")
        if skips and not ngram:
            raise ConfigError("--skips goes with --ngram (VW: skip-grams of n-grams)")
        if hash_seed < 0 or hash_seed > _U32:
            raise ConfigError(f"--hash_seed must be in 0..2^32-1, not {hash_seed}")
        return cls(bits=bits, ngram=_table(ngram, "--ngram"), skips=_table(skips, "--skips"),
                   limit=_table(feature_limit, "--feature_limit"),
                   redefine=_redefine(redefine), seed=hash_seed, keep=keep,
                   affix=_affix(affix), hash_all=hash_all, sort=sort_features,
                   spelling=frozenset(32 if v[:1] == "_" else v.encode()[0]
                                      for v in spelling if v))

    @property
    def renames_only(self) -> bool:
        """Whether only the hashes change: each feature keeps its place and word."""
        return not (self.ngram or self.skips or self.limit or self.redefine is not None
                    or self.keep is not None or self.affix or self.sort or self.spelling)

    @property
    def parser_made(self) -> bool:
        """Whether only ``--ngram``/``--skips`` and ``--spelling`` are asked for (what the
        compiled parser makes)."""
        return bool(self.ngram or self.skips or self.spelling) and not (
            self.limit or self.redefine is not None or self.seed or self.keep is not None
            or self.affix or self.hash_all or self.sort)

    def parser_job(self) -> dict[str, list]:
        """What a worker rebuilds this generation from (:meth:`from_job`): what the compiled
        parser makes and the rules it applies (JSON's lists, the keys and namespaces as
        numbers); the parser rewrites a line it declines by the whole generation."""
        return {"bits": [self.bits], "ngram": sorted(self.ngram.items()),
                "skips": sorted(self.skips.items()), "spelling": sorted(self.spelling),
                "limit": sorted(self.limit.items()), "redefine": self.redefine,
                "seed": [self.seed], "hash_all": [self.hash_all], "sort": [self.sort],
                "affix": sorted([c, [list(p) for p in v]] for c, v in self.affix.items())}

    @classmethod
    def from_job(cls, job: dict[str, list] | None) -> FeatureGen | None:
        """:meth:`parser_job`'s generation again (None: none asked for)."""
        if not job:
            return None
        return cls(bits=int(job["bits"][0]), ngram={int(c): int(n) for c, n in job["ngram"]},
                   skips={int(c): int(n) for c, n in job["skips"]},
                   spelling=frozenset(int(c) for c in job["spelling"]),
                   limit={int(c): int(n) for c, n in job["limit"]},
                   redefine=None if job["redefine"] is None else
                   [int(c) for c in job["redefine"]],
                   seed=int(job["seed"][0]), hash_all=bool(job["hash_all"][0]),
                   sort=bool(job["sort"][0]),
                   affix={int(c): [(bool(p), int(n), int(code)) for p, n, code in v]
                          for c, v in job["affix"]})

    @property
    def parser_rules(self) -> bool:
        """Whether the compiled parser takes the rest of what is asked for
        (``--redefine``, ``--feature_limit``, ``--hash_seed``, ``--hash all``,
        ``--sort_features``, ``--affix`` of at most 15 affixes a namespace, :meth:`spec`),
        with ``--ngram``/``--skips`` where no limit is given (a limit there sorts the
        n-grams' unmasked indices), with ``--spelling`` only beside ``--affix``,
        ``--hash_seed`` and ``--hash all`` (the spelling and affix namespaces listed in VW's
        order), without ``--feature_mask``."""
        return bool(self.limit or self.redefine is not None or self.seed or self.hash_all
                    or self.sort or self.affix) and not (
            (self.spelling and (self.limit or self.sort or self.redefine is not None))
            or self.keep is not None
            or (self.limit and (self.ngram or self.skips))
            or any(len(v) > 15 for v in self.affix.values()))

    def spec(self) -> bytes:
        """What the compiled parser reads of :meth:`parser_rules`' flags (``_vwfast.c``'s
        ``GEN_SPEC``): ``--redefine``'s letter for each namespace letter, each letter's
        ``--feature_limit`` (int32, -1: none), the seed, ``--hash all``,
        ``--sort_features``; with ``--affix``, the character the affix namespace is filed
        under (the rewrite's) and each letter's affix codes (16 bytes, 0 ending them)."""
        table = np.arange(256, dtype=np.uint8) if self.redefine is None else \
            np.array(self.redefine, np.uint8)
        limits = np.array([min(max(self._of(self.limit, c, -1), -1), (1 << 31) - 1)
                           for c in range(256)], "<i4")
        out = (table.tobytes() + limits.tobytes() + np.uint32(self.seed).tobytes()
               + bytes([self.hash_all, self.sort]))
        if self.affix:  # (the character they are filed under, each letter's codes)
            codes = np.zeros((256, 16), np.uint8)
            for c, parts in self.affix.items():
                codes[c, :len(parts)] = [code for _, _, code in parts]
            out += bytes([ord(_AFFIX_NAME[0])]) + codes.tobytes()
        return out

    def _of(self, table: dict[int, int], c: int, default: int = 0) -> int:
        return table.get(c, table.get(-1, default))

    # -- one line ------------------------------------------------------------------
    def line(self, text: str, where: str,
             names: dict[int, list[tuple[int, str | None]]] | None = None) -> str:
        """The line with every feature named by its final hash (see the module);
        ``names``, where given, gets each namespace letter's features as the line has them,
        (32-bit hash, VW's name: ``ns^w``, an n-gram ``ns^w1^w2`` after its first word's
        namespace, its words without their string values; an affix ``affix^t+2=ab``)."""
        body = text.rstrip("\r\n")
        bar = body.find("|")
        if bar < 0:
            return body
        mask = (1 << self.bits) - 1
        order: list[int] = []  # (the namespaces in the order VW lists them)
        groups: dict[int, list[tuple[int, float, str | None, str | None,
                                     tuple[str, str, str] | None]]] = {}
        for sec in body[bar + 1:].split("|"):
            toks = sec.split()
            if sec[:1] in ("", " ", "\t"):
                c, ns = 32, ""
                ns_hash = 0 if not self.seed else _murmur(b"", self.seed)
                scale_tok: str | None = None
                feats = toks
            else:
                if not toks:
                    continue
                ns, _, scale_tok_ = toks[0].partition(":")
                scale_tok = scale_tok_ or None
                c = ns.encode()[0]
                if self.redefine is not None:
                    c = self.redefine[c]
                ns_hash = _hashstring(ns, self.seed, self.hash_all)
                feats = toks[1:]
            scale = _float(scale_tok, where) if scale_tok else 1.0
            new = not groups.get(c)
            out = groups.setdefault(c, [])
            anon = 0
            for tok in feats:
                name, colon, val = tok.rpartition(":") if ":" in tok else (tok, "", "")
                text = bool(colon and name and _text(val))
                if text:  # VW 9's string value: name^value, of value 1, hashed in the name's
                    colon, h = "", _hashstring(val, _hashstring(name, ns_hash, self.hash_all),
                                               self.hash_all)
                # (a string value is 1, unscaled, as VW's: written outside the scale)
                v = np.float32(1.0) if text else \
                    np.float32(scale) * np.float32(_float(val, where)) if colon else \
                    np.float32(scale)
                stok = None if text else scale_tok
                if not (text or name):  # (counted before a zero value drops it, as VW's)
                    h = (ns_hash + anon) & _U32
                    anon += 1
                if v == 0:
                    continue  # VW drops zero-valued features
                if name and not text:
                    h = _hashstring(name, ns_hash, self.hash_all)
                out.append((h & mask, float(v), val if colon else None, stok,
                            (ns, name, f"^{val}" if text else "")))
                if name and c in self.affix:
                    if not groups.get(AFFIX_NAMESPACE):
                        order.append(AFFIX_NAMESPACE)
                    afx = groups.setdefault(AFFIX_NAMESPACE, [])
                    for prefix, ln, code in self.affix[c]:
                        b = name.encode()  # (VW cuts bytes)
                        part = b[:ln] if prefix else b[-ln:]
                        h = (_hashbytes(part, ns_hash, self.hash_all)
                             * (AFFIX_CONSTANT + code * QUADRATIC_CONSTANT)) & _U64
                        word = (f"{chr(c) if c != 32 else ''}{'+' if prefix else '-'}"
                                f"{chr(48 + ln)}="
                                f"{part.decode(errors='surrogateescape')}")
                        afx.append((h & mask, float(v), val if colon else None, stok,
                                    ("affix", word, "")))
                if c in self.spelling:  # (every feature, an anonymous one's spelling empty)
                    spell = _spelling(name)
                    # (VW's hashstring, whatever --hash: of "" the seed itself)
                    h = _hashbytes(spell.encode(), ns_hash) if spell else ns_hash
                    if not groups.get(SPELLING_NAMESPACE):
                        order.append(SPELLING_NAMESPACE)
                    groups.setdefault(SPELLING_NAMESPACE, []).append(
                        (h & mask, float(v), val if colon else None, stok,
                         ("spelling", (f"{chr(c)}_" if c != 32 else "") + spell, "")))
            if new and out:  # (VW lists a namespace once its features are read: after
                order.append(c)  # the affix and spelling ones it made first)
        lines = []
        for c in order:
            fs = groups[c]
            n = self._of(self.ngram, c)
            if n > 1:
                fs = fs + _grams(fs, n, self._of(self.skips, c))
            lim = self._of(self.limit, c, -1)
            if 0 <= lim < len(fs):
                fs = _limited(fs, lim, mask)
            elif self.sort:  # (VW's unique_sort_features: feature_limit without a limit)
                fs = _limited(fs, len(fs), mask)
            if self.keep is not None:
                fs = [f for f in fs if f[0] & mask in self.keep]
            if names is not None:
                names[c] = [(f[0] & _U32, None if f[4] is None else
                             f"{f[4][0]}^{f[4][1]}{f[4][2]}" if f[4][0] else
                             f"{f[4][1]}{f[4][2]}") for f in fs]
            letter, base = written_namespace(c)
            head = "|" if c == 32 else "|" + letter
            segs: list[str] = []
            cur: object = object()
            for h, _v, val, stok, _ in fs:
                if stok != cur:
                    segs.append(head + (f":{stok}" if stok else "") + " ")
                    cur = stok
                d = (h - base) & _U32
                segs.append(f"{d}:{val} " if val is not None else f"{d} ")
            lines.append("".join(segs))
        out = body[:bar] + "".join(lines).rstrip()
        return out if out.strip() else "|"  # (a line of bars alone is VW's example, not a
        # blank line: its constant is learned from)


def written_namespace(c: int) -> tuple[str, int]:
    """How the rewritten text names namespace ``c`` (VW's character: the affix and
    spelling ones get names of their own) and that name's hash, which each of its features'
    written index is taken from (0 for the default namespace, which has no name)."""
    letter = _AFFIX_NAME if c == AFFIX_NAMESPACE else \
        _SPELLING_NAME if c == SPELLING_NAMESPACE else chr(c)
    # (VW's hash_space of the name, in plain Python: no numba where the names are read)
    return letter, 0 if c == 32 else hashstring(letter.strip().encode("utf-8",
                                                                      "surrogateescape"))


def _grams(fs: list, n_max: int, skip_max: int) -> list:
    """VW's add_grams: the 2..n-grams with up to ``skip_max`` skips, in VW's order."""
    idx = [f[0] for f in fs]
    words = [f[4] for f in fs]
    length = len(idx)
    out: list = []

    def add(ngram: int, skip_gram: int, mask: list[int], skips: int) -> None:
        if ngram == 0 and mask[-1] < length:
            for i in range(length - mask[-1]):
                new = idx[i]
                for k in mask[1:]:
                    new = (new * QUADRATIC_CONSTANT + idx[i + k]) & _U64
                word = None if any(words[i + k] is None for k in mask) else (
                    words[i][0], "^".join(words[i + k][1] for k in mask), "")
                out.append((new, 1.0, None, None, word))
        if ngram > 0:
            mask.append(mask[-1] + 1 + skips)
            add(ngram - 1, skip_gram, mask, 0)
            mask.pop()
        if skip_gram > 0 and ngram > 0:
            add(ngram, skip_gram - 1, mask, skips + 1)

    for n in range(1, n_max):
        add(n, skip_max, [0], 0)
    return out


def _spelling(name: str) -> str:
    """VW's spelling of a feature name: each byte a digit ``0``, a lowercase letter ``a``,
    an uppercase one ``A``, ``.`` itself, anything else ``#``."""
    return "".join("0" if 48 <= b <= 57 else "a" if 97 <= b <= 122 else
                   "A" if 65 <= b <= 90 else "." if b == 46 else "#"
                   for b in name.encode("utf-8", "surrogateescape"))


def _limited(fs: list, limit: int, mask: int) -> list:
    """VW's feature_limit: sorted by (masked index, value), the first ``limit`` distinct
    indices kept."""
    if limit == 0:
        return []
    srt = sorted(fs, key=lambda f: (f[0] & mask, f[1]))
    if limit == 1:
        return srt[:1]
    kept = [srt[0]]
    for f in srt[1:]:
        if f[0] != kept[-1][0]:
            kept.append(f)
            if len(kept) >= limit:
                break
    return kept


def _hashstring(s: str, seed: int, every: bool = False) -> int:
    """VW's hash of a name: ``hashstring`` (``every``: ``--hash all``'s MurmurHash3)."""
    return _hashbytes(s.encode(), seed, every)


def _hashbytes(b: bytes, seed: int, every: bool = False) -> int:
    if every:
        return _murmur(b, seed)
    b = b.strip(b" \t")
    return hashstring(b, seed) if b else _murmur(b"", seed)


def _murmur(b: bytes, seed: int) -> int:
    return murmur3_32(b, seed)


def _text(val: str) -> bool:
    """Whether a feature's value is text, a string value to VW 9 (as ``_vwparse``'s
    ``_text_value``: it does not start as a number, nor is it nan or inf)."""
    return bool(val) and val[0] not in "0123456789+-." and \
        val[:3].lower() not in ("nan", "inf")


@functools.cache
def _compiled_number() -> Any:
    """The compiled parser's ``number`` (None without the compiled core: those of the same
    text are the same bits)."""
    from ..._cext import load
    from . import VWFAST

    fast = load(*VWFAST)
    return fast.number if fast is not None else None


def _number(b: bytes) -> float | None:
    reader = _compiled_number()
    return reader(b) if reader is not None else None


def _float(tok: str, where: str) -> float:
    """The float VW reads from a value or scale ``tok``: the compiled parser's reading of
    its forms (no numba imported: ``--invert_hash``'s names of a compiled run), else
    the numba parser's, which refuses what VW's reading would not give."""
    b = tok.encode()
    got = _number(b)
    if got is not None:
        return float(got)
    from ._vwfloat import parse_float32

    v, ok = parse_float32(np.frombuffer(b, np.uint8), 0, len(b))
    if not ok:
        raise DataError(f"{where}: a feature value or namespace scale is not a number: "
                        f"{tok!r}")
    return float(v)


def as_given(message: str) -> str:
    """An error's text naming each rewritten copy as the input it was written from, and
    quoting the input's line where it quotes the copy's (a copy keeps the input's lines)."""
    import re

    from .._io._readers import quoted_line
    from ._vwtext import _lines

    def line(path: str, k: int) -> str | None:
        for i, text in enumerate(_lines(path), 1):
            if i == k:
                return quoted_line(text)
        return None

    for tmp, path in INPUTS.items():
        if tmp not in message:
            continue
        at = re.search(re.escape(tmp) + r", line (\d+): ", message)
        # (a stream's copy is verbatim: its lines are the input's, which can be read once)
        verbatim = os.path.basename(tmp).startswith("terascale-stdin-")
        if at and os.path.exists(tmp) and not verbatim:
            copy, given = line(tmp, int(at.group(1))), line(path, int(at.group(1)))
            if copy is not None and given is not None:
                message = message.replace(repr(copy), repr(given))
        message = message.replace(tmp, path)
    return message


def rewrite_inputs(paths: Sequence[str], gen: FeatureGen) -> list[str]:
    """A rewritten temporary copy of each input (removed at exit), in order."""
    from ._vwtext import _lines

    out = []
    for path in paths:
        fd, tmp = scratch_file("terascale-vwgen-", ".vw")  # (removed with the run)
        with os.fdopen(fd, "w") as f:
            for k, text in enumerate(_lines(path), 1):
                f.write(gen.line(text, f"{path}:{k}") + "\n")
        INPUTS[tmp] = path
        if gen.renames_only:
            SOURCES[tmp] = (path, gen.seed, gen.hash_all)
        else:
            GENERATED[tmp] = (path, gen)
        out.append(tmp)
    return out
