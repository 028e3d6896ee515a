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

The audit is a replay: after ``terascale vw`` has trained as usual (its ``-p``, model and
closing block are those of the normal run), the same online learner (``_online``'s kernel,
the one the run used) learns again from the same examples one at a time on full 2^b arrays,
printing each example before it learns from it. It costs a second pass over the data and
is meant for the small files one audits; one worker, online passes only.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

import numpy as np

from ..._errors import ConfigError
from .._online._state import CONTRACTION, GRAVITY

__all__ = ["audit"]


def _g(v: float) -> str:
    """A float as C++'s ostream prints it by default (6 significant digits)."""
    return f"{float(np.float32(v)):g}"


def _line_names(line: str, parse: Any, mask: int, hash_seed: int = 0,
                every: bool = False) -> dict[int, list[str]]:
    """Masked index -> VW's audit names of the features of one line at that index, in the
    parser's order (two features that collide in one example keep a name each), hashed
    under ``--hash_seed hash_seed`` and (``every``) ``--hash all``."""
    from .._io._hashing import CONSTANT_HASH
    from .._io._interactions import compile_interactions
    from ._vwtext import _section_hashes, _sections, crossed_names, namespace_hash

    names: dict[int, list[str]] = {}
    ignored, linear_off = parse.namespace_flags()
    groups: dict[int, list[tuple[int, str]]] = {}
    for ns, fs in _sections(line):
        ch = ns.encode("utf-8", "surrogateescape")[0] if ns else 32
        if ignored[ch] or not fs:
            continue
        seed = namespace_hash(ns, hash_seed, every)
        g = groups.setdefault(ch, [])
        for (f, _), h in zip(fs, _section_hashes(fs, seed, every)):
            full = f"{ns}^{f}" if ns else f
            g.append((h, full))
    # the linear features in the parser's order: by namespace character, in order of
    # their first feature (a character that comes back later in a line joins its group)
    for ch, g in groups.items():
        if not linear_off[ch]:
            for h, full in g:
                names.setdefault(h & mask, []).append(full)
    if parse.constant:
        names.setdefault(CONSTANT_HASH & mask, []).append("Constant")
    inters = compile_interactions(parse.quadratic, parse.cubic, parse.interactions,
                                  leave_duplicates=parse.leave_duplicates)

    crossed_names(inters, groups, parse.permutations,
                  lambda h, name: names.setdefault(h & mask, []).append(name))
    return names


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
    from ._vwout import _num
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

    names = [_line_names(line, shown_parse, mask, seed, every) for path in paths
             for src, seed, every in [SOURCES.get(path, (path, 0, False))]
             for line in _lines(src) if line.rstrip("\r\n")]  # (an empty line: no example)
    if len(names) != len(data):
        names = [{} for _ in range(len(data))]  # (a line the parser reads otherwise)
    period = _period(opts)
    n = len(data)
    from .._passes import holdout_mask

    hold = holdout_mask(0, n, period, data.blanks)
    cols = data.indices.astype(np.uint32)
    shown_cols = shown.indices.astype(np.uint32)
    kind = opts.online_kind()
    l2 = opts.online_l2(0.0)
    pred = np.empty(1)
    out = sys.stdout
    best, no_win = np.inf, 0
    for p in range(opts.passes):
        acc = np.zeros(8)
        for i in range(n):
            a, b = int(shown.indptr[i]), int(shown.indptr[i + 1])
            idx, val = shown_cols[a:b], shown.values[a:b]
            contraction = np.float32(state[CONTRACTION])
            gravity = np.float32(state[GRAVITY])
            wt = w[idx]
            tw = np.where(np.abs(wt) > gravity, wt - np.sign(wt) * gravity, 0).astype(
                np.float32) * contraction
            names_i = names[i] if p == 0 else {}
            g2b = g2[idx].copy()
            online_chunk(data.indptr, cols, data.values, data.labels, data.weights, hold,
                         i, i + 1, w, g2, nrm, state, kind, opts.learning_rate,
                         opts.power_t, opts.l1, l2, acc, pred)
            const = 0
            items = []
            for k in range(len(idx)):
                j = int(idx[k])
                name = _next_name(names_i, j)
                if p > 0 and parse.constant and j == _const(mask) and const == 0:
                    name, const = "Constant", 1
                text = f"{name}:{j}:{_g(val[k])}:{_g(tw[k])}@{_g(g2b[k])}"
                items.append((abs(float(np.float32(wt[k] * val[k]))), text, j))
            tag = data.tag(i)
            head = _num(float(np.float32(pred[0])))
            out.write((f"{head} {tag}" if tag else head) + "\n")
            items.sort(key=lambda t: -t[0])  # stable: ties keep the feature order
            out.write("".join(f"\t{t}" for _, t, _ in items) + "\n")
        if period:
            this = acc[2] / acc[3] if acc[3] > 0 else np.inf
            if this < best:
                best, no_win = this, 0
            else:
                no_win += 1
            if opts.passes > 1 and no_win >= opts.patience:
                break
    out.flush()


def _const(mask: int) -> int:
    from .._io._hashing import CONSTANT_HASH

    return CONSTANT_HASH & mask
