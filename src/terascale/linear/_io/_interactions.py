"""Feature interactions (``-q``, ``--cubic``, ``--interactions``) exactly as VW 9 builds them.

An interaction is a string of namespace characters (the first letter of a namespace), such as
``ab`` (``-q ab``), ``abc`` or ``aab``; ``:`` is a wildcard for every namespace (VW's
``-q a:``, ``-q ::``). VW's rules, which this module reproduces so that the same hashed
features come out in the same order:

* The list is sorted (shorter first, then by characters) and interactions that are the same
  multiset of namespaces (``ab`` and ``ba``) are kept once; one with a repeated namespace next
  to a different one (``aba``, ``aab``) has its letters sorted.
* Wildcards are expanded over the namespaces seen (a single ``:`` takes every namespace, two
  take every pair ``x <= y``), and the expanded list goes through the same sort and filter.
  VW expands over the namespaces seen so far in the stream; expanding over every printable
  namespace and skipping, per example, interactions with an absent namespace gives the same
  features, because an absent namespace contributes none.
* The features of an interaction are the products of one feature per term; the index is
  ``h = i1``, then ``h = (h * 16777619) ^ ik`` (FNV prime), masked to ``-b`` bits at the
  end; the value is the product of the values. Where the same namespace comes twice in a
  row (``aa``) only pairs ``j >= i`` are formed (VW's combinations); with
  ``permutations`` (VW's ``--permutations``) every ordered pair is.
* ``leave_duplicates`` (VW's ``--leave_duplicate_interactions``) keeps interactions that are
  the same multiset (``-q ab -q ba`` crosses twice); a wildcard then expands to every
  ordered choice of namespaces (``-q ::`` gives ``ab`` and ``ba``), as VW does.

The kernels that form an example's crossed features from :func:`interaction_table` are
``_crossing``'s: checking options here (``ParseOptions``, in a launcher of ``-n N``
workers before it loads the learner, or that never does) imports no numba.
"""

from __future__ import annotations

import re
from array import array
from functools import lru_cache
from itertools import chain, combinations_with_replacement, product, repeat

from ..._errors import ConfigError
from ..._lazy import lazy_module
from .._names import opt

np = lazy_module("numpy", globals(), "np")

__all__ = ["WILDCARD", "compile_interactions", "duplicate_counts", "interaction_cells",
           "interaction_table"]

WILDCARD = 58  # ':'
_UNIVERSE = [c for c in range(32, 127) if c != WILDCARD]  # VW's interaction namespaces
_MAX_EXPANDED = 250_000


def _decode(spec: str, name: str) -> tuple[int, ...]:
    """A spec as namespace bytes, as VW reads its argument: ``\\xHH`` escapes as VW's
    ``decode_inline_hex``, other characters as their UTF-8 bytes (``é`` is two
    namespaces, as in VW)."""
    out = bytearray()
    for m in re.finditer(r"\\x([0-9a-fA-F]{2})|(.)", spec, re.S):
        if m.group(1):
            out.append(int(m.group(1), 16))
        else:
            out += m.group(2).encode("utf-8", "surrogateescape")
    return tuple(out)


def _left_sorted(s: tuple[int, ...]) -> bool:
    """VW's ``must_be_left_sorted`` (on an already sorted interaction): a run of one
    namespace next to a different one."""
    if len(s) < 3:
        return False
    if len(s) == 3:
        return (s[0] == s[1]) != (s[1] == s[2])
    diff = pair = False
    for a, b in zip(s, s[1:]):
        if a == b:
            if diff:
                return True
            pair = True
        else:
            if pair:
                return True
            diff = True
    return False


def _sort_filter(vec: list[tuple[int, ...]], dedup: bool = True) -> list[tuple[int, ...]]:
    """VW's ``sort_and_filter_duplicate_interactions``: the first of each multiset kept
    (every one without ``dedup``), in order, its letters sorted where ``_left_sorted``."""
    out: list[tuple[int, ...]] = []
    seen: set[tuple[int, ...]] = set()
    for v in vec:
        s = tuple(sorted(v))
        if dedup:
            if s in seen:
                continue
            seen.add(s)
        out.append(s if _left_sorted(s) else v)
    return out


def _sorted_list(vec: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """VW's ``sort_interactions_comparator``: shorter first, then by characters."""
    by_len: dict[int, list[tuple[int, ...]]] = {}
    for t in vec:
        by_len.setdefault(len(t), []).append(t)
    return [t for n in sorted(by_len) for t in sorted(by_len[n])]


def _expand(inter: tuple[int, ...], names: list[int],
            leave_duplicates: bool = False) -> list[tuple[int, ...]]:
    """VW's ``compile_interaction`` of one interaction with wildcards over ``names``."""
    fixed = [(k, c) for k, c in enumerate(inter) if c != WILDCARD]
    nw = len(inter) - len(fixed)
    fills: list[tuple[int, ...]]
    if leave_duplicates:  # every ordered choice (VW's permutations with repetition)
        fills = list(product(names, repeat=nw))
    elif nw == 2:  # expand_quadratics_wildcard_interactions: every x <= y
        fills = list(combinations_with_replacement(names, 2))
    else:  # combinations with repetition, VW's order (non-increasing positions)
        fills = [t[::-1] for t in combinations_with_replacement(names, nw)]
    if not fixed:
        return fills
    out = []
    for f in fills:
        r = list(f)
        for k, c in fixed:
            r.insert(k, c)
        out.append(tuple(r))
    return out


def duplicate_counts(quadratic: tuple[str, ...] = (), cubic: tuple[str, ...] = (),
                     interactions: tuple[str, ...] = ()) -> tuple[bool, int, int]:
    """What VW's ``sort_and_filter_duplicate_interactions`` reports of the interactions
    given (without ``--leave_duplicate_interactions``): whether one has a wildcard, how
    many are removed as duplicates, how many have their characters reordered."""
    specs = _sorted_list([_decode(v, "") for v in (*quadratic, *cubic, *interactions)])
    kept = _sort_filter(specs)
    reordered = sum(1 for t in kept if _left_sorted(tuple(sorted(t))))
    return any(WILDCARD in t for t in specs), len(specs) - len(kept), reordered


def compile_interactions(quadratic: tuple[str, ...] = (), cubic: tuple[str, ...] = (),
                         interactions: tuple[str, ...] = (), *,
                         leave_duplicates: bool = False) -> list[tuple[int, ...]]:
    """The interactions VW would use, in its order (namespace bytes)."""
    return list(_compile(tuple(quadratic), tuple(cubic), tuple(interactions),
                         leave_duplicates))


@lru_cache(maxsize=64)
def _compile(quadratic: tuple[str, ...], cubic: tuple[str, ...],
             interactions: tuple[str, ...],
             leave_duplicates: bool = False) -> tuple[tuple[int, ...], ...]:
    dedup = not leave_duplicates
    specs: list[tuple[int, ...]] = []
    for name, vals, n in (("quadratic", quadratic, 2), ("cubic", cubic, 3),
                          ("interactions", interactions, 0)):
        for v in vals:
            t = _decode(v, name)
            if n and len(t) != n:
                raise ConfigError(f"{opt(name)} takes {n} namespace characters (like "
                                  f"{'abc'[:n]!r}), not {v!r}")
            if not n and len(t) < 2:
                raise ConfigError(f"{opt(name)} takes two or more namespace characters "
                                  f"(like 'abc'), not {v!r}")
            specs.append(t)
    if not specs:
        return ()
    specs = _sort_filter(_sorted_list(specs), dedup)
    if not any(WILDCARD in t for t in specs):
        return tuple(specs)
    fast = _wildcard_only(specs, leave_duplicates)
    if fast is not None:
        return fast
    total = 0
    out: list[tuple[int, ...]] = []
    for t in specs:
        if WILDCARD in t:
            nw = t.count(WILDCARD)
            total += len(_UNIVERSE) ** nw
            if total > _MAX_EXPANDED * 4:
                raise ConfigError(f"interaction {bytes(t).decode('latin-1')!r}: too many "
                                  f"wildcards (it expands to more than {_MAX_EXPANDED} "
                                  f"interactions); name the namespaces instead")
            out.extend(_expand(t, _UNIVERSE, leave_duplicates))
        else:
            out.append(t)
    return tuple(_sort_filter(_sorted_list(out), dedup))


def _wildcard_only(specs: list[tuple[int, ...]], leave_duplicates: bool
                   ) -> tuple[tuple[int, ...], ...] | None:
    """The expansion when every interaction is all wildcards, of different lengths
    (``-q ::``, ``--cubic :::``, both), without sorting and filtering the expanded list:
    each length's interactions then come from one wildcard, so no two are the same
    multiset, and its expansion is known in VW's order. ``None`` for any other list
    (or with ``leave_duplicates``, or one too long to expand)."""
    lengths = [len(t) for t in specs]
    if (leave_duplicates or any(set(t) != {WILDCARD} for t in specs)
            or len(set(lengths)) < len(lengths)
            or sum(len(_UNIVERSE) ** n for n in lengths) > _MAX_EXPANDED * 4):
        return None
    out: list[tuple[int, ...]] = []
    for n in lengths:
        if n == 2:  # every x <= y, already in order
            out += combinations_with_replacement(_UNIVERSE, 2)
            continue
        # n == 3 (four wildcards expand past the limit): every a >= b >= c (VW's order),
        # ascending, its letters sorted where ``_left_sorted`` (exactly two alike)
        for i, a in enumerate(_UNIVERSE):
            for j, b in enumerate(_UNIVERSE[:i]):  # a > b: (a, b, c < b), then (b, b, a)
                out += zip(repeat(a), repeat(b), _UNIVERSE[:j])
                out.append((b, b, a))
            out += zip(_UNIVERSE[:i], repeat(a), repeat(a))  # a == b: (c < a, a, a)
            out.append((a, a, a))
    return tuple(out)


_PERMUTE = 256  # in a table's order column: every ordered tuple of a repeated namespace


def interaction_table(inters: list[tuple[int, ...]], permutations: bool = False
                      ) -> np.ndarray:
    """(n, 1 + max order) int32: the order (plus 256 with ``permutations``), then the
    namespace bytes (for the parser)."""
    cells, width = interaction_cells(inters, permutations)
    return np.array(cells, np.int32).reshape(-1, width)


def interaction_cells(inters: list[tuple[int, ...]], permutations: bool = False
                      ) -> tuple[array, int]:
    """:func:`interaction_table`'s cells, row after row (C ints: no list of 4 cells an
    interaction beside them), and its width (3 for no interaction), without numpy."""
    if not inters:
        return array("i"), 3
    m = max(len(t) for t in inters)
    flag = _PERMUTE if permutations else 0
    head = {n: (n + flag,) for n in range(m + 1)}
    pad = {n: (0,) * (m - n) for n in range(m + 1)}
    return array("i", chain.from_iterable(head[len(t)] + t + pad[len(t)] for t in inters)), m + 1
