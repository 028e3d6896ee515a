"""``terascale vw --audit``: VW's audit of every example on standard output.

For each example VW prints its prediction (``value`` or ``value tag``) and then one
tab-separated line of its features, the crosses and the constant included, each as
``name:index:value:weight@g2``: the feature's name (``ns^f``, ``f`` in the default
namespace, ``a^x*b^y`` for a cross, ``Constant``; empty after the first pass, which VW
reads from its cache without names), its hashed index, its value, its weight before the
example is learned from and the weight's sum of squared gradients; sorted by
``|weight * value|``, largest first (ties keep VW's feature order). The linear features
of ``--ignore_linear``'s namespaces are listed too, as VW lists them: they are in the
example (its crosses use them) though the learner skips them.

Where the compiled learner runs the job (``_vwonline.c_path``), the audit is printed as
each example is learned (:class:`Audit`, which ``_vwonline.train`` calls): the examples
are learned one at a time, each one's rows read from the table before its update, and
its features' names read from its line of text in the chunk being learned (or, for an
input ``_vwgen`` rewrote with its names unchanged, the original file's line), so memory
is that of the chunks in flight, whatever the input's size. Elsewhere (the numba pass:
no compiled core, ``-b`` above 24, ``-i`` of terascale's model, ...) :func:`audit` is a
replay after training: the same online learner (``_online``'s kernel) learns again from
the whole input, parsed and held in memory, one example at a time on full 2^b arrays.
One worker, online passes only.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

import numpy as np

from ..._errors import ConfigError
from .._io._hashnames import CONSTANT_HASH
from .._online._state import CONTRACTION, GRAVITY

__all__ = ["Audit", "audit", "example_lines"]


def example_lines(head: str, idx: np.ndarray, val: np.ndarray, w: np.ndarray,
                  g2: np.ndarray, lazy: tuple[Any, Any],
                  names: tuple[list[int], list[str]] | None, const: int) -> str:
    """VW's two audit lines of one example: ``head`` (its prediction and tag), then each
    feature (``idx``, ``val``: the example's indices and values) as
    ``name:index:value:weight@g2`` sorted by ``|w * value|``, largest first, ties in the
    feature order; ``w`` and ``g2`` are its rows' weights and squared-gradient sums before
    the update (float32), the weight printed with the lazy L1/L2 (``lazy``: the state's
    contraction and gravity, float32) applied. ``names``: the :class:`_Namer`'s of its line
    (None after the first pass: no names, but ``Constant`` for the first feature at index
    ``const``; -1: none). Floats print as C++'s ostream prints them (6 significant digits:
    ``%g`` of the float32 value)."""
    contraction, gravity = lazy
    tw = np.where(np.abs(w) > gravity, w - np.sign(w) * gravity, 0).astype(
        np.float32) * contraction
    order = np.argsort(-np.abs(w * val), kind="stable").tolist()  # (float32 products)
    js = idx.tolist()
    if names is None:
        shown = [""] * len(js)
        if const in js:
            shown[js.index(const)] = "Constant"
    elif names[0] == js:  # (the parser's features, as named)
        shown = names[1]
    else:  # (a feature the parser dropped: each index's names in turn)
        queues: dict[int, list[str]] = {}
        for j, name in zip(*names):
            queues.setdefault(j, []).append(name)
        shown = [_next_name(queues, j) for j in js]
    # (a % of the tuple: 0.6x the time of an f-string's three :g, this run's hot spot)
    texts = ["%s:%d:%g:%g@%g" % item  # noqa: UP031
             for item in zip(shown, js, val.tolist(), tw.tolist(), g2.tolist())]
    return head + "\n" + "".join(["\t" + texts[k] for k in order]) + "\n"


def _head(pred: float, tag: str) -> str:
    """An audit's first line: the prediction as ``-p`` prints it, and the tag."""
    from ._vwout import _num

    head = _num(float(np.float32(pred)))
    return f"{head} {tag}" if tag else head


class _Namer:
    """VW's audit names of the features of a line of text, hashed under ``--hash_seed
    hash_seed`` and (``every``) ``--hash all``, as the parse options ``parse`` build them
    (their flags and interactions read once, not a line at a time)."""

    def __init__(self, parse: Any, mask: int, hash_seed: int = 0,
                 every: bool = False) -> None:
        from .._io._interactions import compile_interactions

        ignored, linear_off = parse.namespace_flags()
        self.ignored, self.linear_off = ignored.tolist(), linear_off.tolist()
        self.constant, self.permutations = parse.constant, parse.permutations
        self.inters = compile_interactions(parse.quadratic, parse.cubic, parse.interactions,
                                           leave_duplicates=parse.leave_duplicates)
        self.mask, self.hash_seed, self.every = mask, hash_seed, every
        self.seeds: dict[str, int] = {}  # namespace -> its hash

    def __call__(self, line: str) -> tuple[list[int], list[str]]:
        """The masked index and the name of each of the line's features, in the parser's
        order (:func:`example_lines` matches them to the parsed features)."""
        from ._vwtext import _section_hashes, _sections, crossed_names, namespace_hash

        mask, every = self.mask, self.every
        groups: dict[int, list[tuple[int, str]]] = {}
        for ns, fs in _sections(line):
            ch = ns.encode("utf-8", "surrogateescape")[0] if ns else 32
            if self.ignored[ch] or not fs:
                continue
            seed = self.seeds.get(ns)
            if seed is None:
                seed = self.seeds[ns] = namespace_hash(ns, self.hash_seed, every)
            g = groups.setdefault(ch, [])
            pre = f"{ns}^" if ns else ""
            g.extend([(h, pre + f) for (f, _), h in zip(fs, _section_hashes(fs, seed, every))])
        # the linear features in the parser's order: by namespace character, in order of
        # their first feature (a character that comes back later in a line joins its group)
        hs: list[int] = []
        names: list[str] = []
        for ch, g in groups.items():
            if not self.linear_off[ch]:
                hs.extend([h & mask for h, _ in g])
                names.extend([full for _, full in g])
        if self.constant:
            hs.append(CONSTANT_HASH & mask)
            names.append("Constant")

        def cross(h: int, name: str) -> None:
            hs.append(h & mask)
            names.append(name)

        crossed_names(self.inters, groups, self.permutations, cross)
        return hs, names


def _next_name(names: dict[int, list[str]], j: int) -> str:
    """The name of the next feature at index ``j`` (its last name once each is used)."""
    q = names.get(j)
    if not q:
        return ""
    return q.pop(0) if len(q) > 1 else q[0]


def audit(args: argparse.Namespace, paths: list[str], options: dict[str, Any]) -> None:
    """Print VW's audit of the run ``options`` describes on ``paths`` (see the module)."""
    from .._io._dataset import Dataset, ParseOptions
    from .._io._readers import read_file
    from .._online._update import new_state, online_chunk
    from .._train import TrainOptions, _period
    from ._vwtext import _lines

    if args.nprocs != 1 or args.oaa is not None or options.get("bfgs") or \
            options.get("cg") or args.testonly:
        raise ConfigError("--audit: terascale vw audits online training on one worker "
                          "(not with -n N, --oaa, --bfgs/--conjugate_gradient or -t)")
    checked = {k: tuple(v) if isinstance(v, list) else v for k, v in options.items()}
    opts = TrainOptions(**checked)
    keys = ParseOptions().to_dict()
    if args.initial:
        from .._front._cli_run import vw_start
        from ._vwmodel import load_model

        start = load_model(args.initial, getattr(args, "vw_generation", None))
        vw_start(start, args)  # (-q/--cubic/--interactions given replace -i's)
        parse = start.parse
    else:
        start = None
        parse = ParseOptions(**{k: v for k, v in checked.items() if k in keys})
    # (the training run before printed VW's lines on the label sections read so)
    parse = dataclasses.replace(parse, lenient_labels=opts.lenient_labels)
    data = Dataset.concat([read_file(p, parse, need_label=False) for p in paths])
    # VW's audit lists the linear features --ignore_linear leaves out of learning too
    # (where they sit in the example, with the weight at their index): the printed
    # features are those of the same parse without --ignore_linear
    shown_parse = dataclasses.replace(parse, ignore_linear=()) if parse.ignore_linear \
        else parse
    shown = data if shown_parse is parse else Dataset.concat(
        [read_file(p, shown_parse, need_label=False) for p in paths])
    size = 1 << parse.bits
    mask = size - 1
    w = np.zeros(size, np.float32)
    g2 = np.zeros(size, np.float32)
    nrm = np.zeros(size, np.float32)
    state = new_state()
    if start is not None:
        w[start.indices] = start.weights
        if start.adaptive is not None:
            g2[start.indices] = start.adaptive[0]
            nrm[start.indices] = start.adaptive[1]
            state[:len(start.adaptive[2])] = start.adaptive[2]
    from ._vwgen import SOURCES

    names = [namer(line) for path in paths
             for src, seed, every in [SOURCES.get(path, (path, 0, False))]
             for namer in [_Namer(shown_parse, mask, seed, every)]
             for line in _lines(src) if line.rstrip("\r\n")]  # (an empty line: no example)
    if len(names) != len(data):
        names = [([], []) for _ in range(len(data))]  # (a line the parser reads otherwise)
    period = _period(opts)
    n = len(data)
    from .._passes import holdout_mask

    hold = holdout_mask(0, n, period, data.blanks)
    cols = data.indices.astype(np.uint32)
    shown_cols = shown.indices.astype(np.uint32)
    kind = opts.online_kind()
    l2 = opts.online_l2(0.0)
    const = CONSTANT_HASH & mask if parse.constant else -1
    pred = np.empty(1)
    out = sys.stdout
    best, no_win = np.inf, 0
    for p in range(opts.passes):
        acc = np.zeros(8)
        for i in range(n):
            a, b = int(shown.indptr[i]), int(shown.indptr[i + 1])
            idx, val = shown_cols[a:b], shown.values[a:b]
            lazy = (np.float32(state[CONTRACTION]), np.float32(state[GRAVITY]))
            wt, g2b = w[idx], g2[idx]  # (copies: before the update)
            online_chunk(data.indptr, cols, data.values, data.labels, data.weights, hold,
                         i, i + 1, w, g2, nrm, state, kind, opts.learning_rate,
                         opts.power_t, opts.l1, l2, acc, pred)
            out.write(example_lines(_head(pred[0], data.tag(i)), idx, val, wt, g2b, lazy,
                                    names[i] if p == 0 else None, const))
        if period:
            this = acc[2] / acc[3] if acc[3] > 0 else np.inf
            if this < best:
                best, no_win = this, 0
            else:
                no_win += 1
            if opts.passes > 1 and no_win >= opts.patience:
                break
    out.flush()


class Audit:
    """VW's audit of a run of the compiled learner (``_vwonline.train``), printed as it
    learns. It reads the run's chunks (:meth:`parse`, in front of the run's parser): each
    chunk's arrays, then the arrays of the features printed (those of the same text
    parsed without ``--ignore_linear``, where it is given) and the examples' lines, whose
    names (:class:`_Namer`) are read as each is printed (none after the first pass,
    :attr:`named`). The pass
    learns one example at a time between :meth:`before` (its rows read from the table)
    and :meth:`after` (its lines printed)."""

    def __init__(self, parse: Any, reader: Any, parser_of: Any) -> None:
        """``parse``: the run's ``ParseOptions``; ``reader``: its parser (``_vwonline``'s
        ``_Parser``), ``parser_of``: that class (the shown features' parser)."""
        self.reader = reader
        self.shown_parse = dataclasses.replace(parse, ignore_linear=()) \
            if parse.ignore_linear else parse
        self.shown = parser_of(self.shown_parse) if parse.ignore_linear else None
        self.mask = (1 << parse.bits) - 1
        self.const = CONSTANT_HASH & self.mask if parse.constant else -1
        self.named = True  # (the first pass; VW's later ones read its cache: no names)
        self.sources: dict[str, Any] = {}  # a rewritten input's original lines, streamed
        self.namers: dict[str, _Namer] = {}  # each input's (its --hash_seed, --hash all)
        self.out = sys.stdout
        self.rows: Any = None
        self.lazy: tuple[Any, Any] = (1.0, 0.0)

    def parse(self, text: bytes, source: str, line: int) -> tuple:
        """The chunk's arrays (``_vwonline._Parser.parse``'s), then the printed features'
        (indptr, indices, values) and the examples' lines and input (None: no names)."""
        b = self.reader.parse(text, source, line)
        shown = self.shown.parse(text, source, line) if self.shown is not None else b
        names = self._names(text, source, len(b[3])) if self.named else None
        return (*b, shown[:3], (names, source) if self.named else None)

    def _names(self, text: bytes, source: str, n: int) -> list[str] | None:
        """The lines of the chunk's ``n`` examples, each line that is not empty (None
        where the count differs: a line the parser reads otherwise); each one's names are
        read as it is printed (a chunk's names held 25 MB on click rows with ``-q``)."""
        import io

        from ._vwgen import SOURCES

        lines = list(io.StringIO(bytes(text).decode("utf-8", "surrogateescape"),
                                 newline=None))
        src, seed, every = SOURCES.get(source, (source, 0, False))
        if src != source:  # (the same lines, as written before the rewrite)
            import itertools

            from ._vwtext import _lines

            if source not in self.sources:
                self.sources[source] = _lines(src)
            lines = list(itertools.islice(self.sources[source], len(lines)))
        lines = [ln for ln in lines if ln.rstrip("\r\n")]
        if source not in self.namers:
            self.namers[source] = _Namer(self.shown_parse, self.mask, seed, every)
        return lines if len(lines) == n else None

    def before(self, b: tuple, i: int, table: np.ndarray, state: np.ndarray) -> None:
        """Example ``i`` of chunk ``b`` is learned next: its rows' weights and sums, and
        the lazy L1/L2's contraction and gravity, as they are before its update."""
        ip, cols = b[10][0], b[10][1]
        self.rows = table[cols[int(ip[i]):int(ip[i + 1])], :2]
        self.lazy = (np.float32(state[CONTRACTION]), np.float32(state[GRAVITY]))

    def after(self, b: tuple, i: int, pred: float) -> None:
        """Print example ``i``'s audit (its prediction ``pred``), learned since
        :meth:`before`."""
        from .._io._dataset import example_tag

        ip, cols, vals = b[10]
        a, e = int(ip[i]), int(ip[i + 1])
        names = None  # (after the first pass)
        if b[11] is not None:
            lines, source = b[11]
            names = ([], []) if lines is None else self.namers[source](lines[i])
        self.out.write(example_lines(_head(pred, example_tag(b[5], b[6], i)), cols[a:e],
                                     vals[a:e], self.rows[:, 0], self.rows[:, 1],
                                     self.lazy, names, self.const))
