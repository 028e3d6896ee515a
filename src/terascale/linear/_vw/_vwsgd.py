"""``terascale vw`` with VW's update rules other than its default: ``--sgd``,
``--invariant``, ``--adaptive`` or ``--normalized`` alone (or two of the last three), and
``--sparse_l2``.

VW's default update is adaptive, normalized and importance-invariant together; that is
terascale's online learner. Given ``--sgd``, ``--invariant``, ``--adaptive`` or
``--normalized``, VW turns on only the rules named. This module is VW's ``gd`` for every
such choice: the adaptive rule keeps each weight's sum of squared gradients (its rate
``g2^-power_t``), the normalized one each feature's largest ``|x|`` (the weight rescaled
when it grows, the step divided by it and scaled by VW's running average of the
normalized norms), and the invariant one takes the importance-invariant step
(Karampatziakis & Langford, UAI 2011) given the example's ``sum x^2`` times those rates;
without the adaptive rule the rate at example t is ``eta * initial_t^power_t *
t^-power_t`` (t counting the importance weight learned from), and without both adaptive
and normalized VW's defaults are learning rate 10 and ``initial_t`` 1. ``--sparse_l2 L``
subtracts ``L * prediction`` from every example's update (VW's ``gd``), with the default
rules too.

It runs on one worker over the parsed examples, each pass one numba kernel taking them one
by one (``_vwgdpass``), the run's bookkeeping here: predictions, ``-p``/``-r``, holdout and
VW's closing block as the main learner gives them. ``-f`` writes VW's save_resume model of the rules (each record the
weight and the sums of the rules on, the rules in its options, its ``t``, ``initial_t`` and
normalized sums), from which ``-i`` continues as VW's (a model whose records keep other
sums than the run's rules is refused: VW reads them with the run's widths). ``--l1`` and
``--l2`` are VW's lazy ones: a gravity and a contraction in double, each weight truncated
by the gravity (in float) as it is read for a prediction, the sum scaled by the
contraction, the update divided by it, both folded into the weights where they grow past
VW's bounds and, with ``--predict_only_model``, at the end of each pass. ``-n N`` is
refused.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from ..._errors import ConfigError
from .._online._state import (
    CONTRACTION,
    GRAVITY,
    MAX_LABEL,
    MIN_LABEL,
    SUM_NORM_X,
    TOTAL_WEIGHT,
    new_state,
)

__all__ = ["train_vw_sgd"]

_F = np.float32


def train_vw_sgd(args: argparse.Namespace, options: dict[str, Any], paths: list[str],
                 how: str, opening: Any, learning_rate_given: bool,
                 initial_t_given: bool) -> int:
    """Train with VW's gd with the rules given (see the module)."""
    from .._losses import (
        has_sgd_update,
        loss_code,
        loss_spec,
    )
    from ._vwbatch import _Data
    from ._vwout import all_or_none, link, prediction_lines, prediction_writers

    rules = [n for n in ("adaptive", "normalized", "invariant") if getattr(args, n)]
    if not rules and not args.sgd:  # --sparse_l2 alone: VW's default rules
        rules = ["adaptive", "normalized", "invariant"]
    invariant = "invariant" in rules
    adaptive, normalized = "adaptive" in rules, "normalized" in rules
    sparse_l2 = _F(getattr(args, "sparse_l2", 0.0) or 0.0)
    if args.nprocs != 1 or args.oaa is not None:
        raise ConfigError(f"--{' --'.join(rules) or 'sgd'}"
                          f"{' --sparse_l2' if sparse_l2 else ''}: terascale vw runs VW's "
                          f"gd with these rules on one worker, without --oaa")
    initial = _initial(args, options) if args.initial else None
    if initial is not None:  # (VW keeps -l, --link and --binary in its model)
        learning_rate_given = learning_rate_given or \
            "learning_rate" in initial.info.get("vw_rates", {})
        if args.link is None and initial.info.get("link"):
            how = args.link = initial.info["link"]
        args.binary = args.binary or bool(initial.info.get("binary"))
    loss = options["loss"]
    spec = loss_spec(loss, "--loss_function")
    if not invariant and not has_sgd_update(loss):
        raise ConfigError(f"--loss_function {loss} with --{' --'.join(rules) or 'sgd'} is "
                          f"not supported by terascale vw")
    kind = loss_code(loss, raw_labels=True, tau=float(options.get("quantile_tau", 0.5)),
                     q=options.get("expectile_q"))
    passes = int(options.get("passes", 1))
    holdout_off = options.get("holdout") == 0.0 or (
        passes == 1 and not options.get("holdout_after"))
    period = int(args.holdout_period or 10)
    data = _Data(paths, options, period, int(options.get("holdout_after", 0)), holdout_off)
    power_t = _F(options.get("power_t", 0.5))
    both = adaptive and normalized  # (VW's defaults change without them)
    eta = _F(options.get("learning_rate", 0.5)) if learning_rate_given or both else _F(10.0)
    if adaptive or normalized:
        t = float(args.initial_t) if initial_t_given else 0.0
    else:
        t = float(args.initial_t) if initial_t_given else 1.0
        eta = _F(eta * _F(np.power(_F(t), power_t)))
    size = data.size
    w = np.zeros(size, _F)
    # per weight: sum of squared gradients (VW starts it at initial_t), largest |x|, rate
    g2 = np.full(size, _F(t) if adaptive and t > 0 else _F(0), _F)
    nrm = np.zeros(size, _F)
    rate = np.zeros(size, _F)
    sqrt_rate = power_t == _F(0.5)
    neg_power_t = _F(-power_t)
    # (VW sets it before it reads the rules, when adaptive is still on: power_t - 1 always)
    neg_norm_power = _F(power_t - _F(1))
    # VW's "fake" examples: initial_t of them, norm 1 (its state has them, any rules)
    total_w = nsnx = float(args.initial_t) if initial_t_given and args.initial_t > 0 else 0.0
    # VW's prediction range: a loss whose predictions are not clipped to the labels starts
    # at [-50, 50]
    lo, hi = (_F(-50), _F(50)) if spec.clip != "labels" else (_F(0), _F(0))
    seen_t = t  # VW's sd->t: initial_t plus every example's weight
    initial_t = t
    # VW's L1/L2: lazy, its gravity and contraction in double (the model's go on)
    l1, l2 = float(_F(options.get("l1") or 0.0)), float(_F(options.get("l2") or 0.0))
    gravity, contraction = 0.0, 1.0
    if initial is not None:  # VW's -i: the weights, sums and counters its model keeps
        idx0, st = initial.indices.astype(np.int64), initial.adaptive[2]
        w[idx0] = initial.weights
        if adaptive:
            g2[idx0] = initial.adaptive[0]
        if normalized:
            nrm[idx0] = initial.adaptive[1]
        lo, hi = _F(min(lo, st[MIN_LABEL])), _F(max(hi, st[MAX_LABEL]))
        gravity, contraction = float(st[GRAVITY]), float(st[CONTRACTION])
        counters = initial.info.get("vw_counters") or {}
        if counters:  # (save_resume: its t, initial_t and normalized sums go on)
            seen_t, initial_t = counters["t"], counters["initial_t"]
            total_w, nsnx = float(st[TOTAL_WEIGHT]), float(st[SUM_NORM_X])
    state0 = (total_w, nsnx)
    opening(float(eta), seen_t)  # (VW's preamble: its rate and t once set up)
    if data.notes and not args.quiet:  # (VW's lines on its label sections: standard output)
        print("\n".join(data.notes), flush=True)
    X = data.X
    features = np.diff(X.indptr)  # (VW's gd counts the crosses too; its batch learners not)
    if data.parse.ignore_linear:  # (and an --ignore_linear namespace's, which its example has)
        features = features + _off_counts(data, paths)
    sumsq = _sum_feat_sq(data, paths) if invariant and not (adaptive or normalized) \
        else None
    writers = prediction_writers(args)
    from .._online._onlinepass import distinct_labels
    from .._online._progress import LINK, Progress

    LINK[:] = [how]  # (the progress lines show what -p writes)
    prog = Progress(None if args.quiet else sys.stderr)
    prog.holdout = not holdout_off
    prog.header()
    prog.due = prog.first_due()
    preserved = args.vw_preserved or {}
    if "examples" in preserved:  # (--preserve_performance_counters: -i's go on)
        prog.go_on(preserved)
    kept = ~data.holdout  # VW's counters: every example but the held-out labelled ones
    totals = []
    # VW's running sums over the passes (its shared_data's doubles, -i's in them): loss,
    # labelled weight, unlabelled weight and t (from initial_t, or -i's t, on)
    run = np.array([preserved.get("sum_loss", 0.0), preserved.get(
        "weighted_labeled_examples", 0.0), preserved.get("weighted_unlabeled_examples", 0.0),
        seen_t]) if "examples" in preserved else np.array([0.0, 0.0, 0.0, seen_t])
    # VW's early stop on the holdout loss (it restores the weights, sums and scalars of
    # the pass it keeps: ``kept`` its totals' count and progress mark)
    from .._holdout import EarlyStop

    stop = EarlyStop(int(args.patience)) if not holdout_off else None
    kept_at, upto, mark = None, None, None
    from . import _vwgdpass as gd

    sc = np.zeros(gd.SIZE)
    sc[gd.LO], sc[gd.HI], sc[gd.TOTAL_W], sc[gd.NSNX] = lo, hi, total_w, nsnx
    sc[gd.MULTIPLIER], sc[gd.SEEN_T], sc[gd.GRAVITY], sc[gd.CONTRACTION] = \
        1.0, seen_t, gravity, contraction
    labelled = data.labelled
    weights64 = data.weights.astype(np.float64)
    counted = labelled & (data.weights > 0)  # (the loss sums' examples)
    sums_of = [counted & ~data.holdout, counted & data.holdout]
    indices = X.indices.astype(np.int64)
    with all_or_none(writers):
        for _p in range(passes):
            preds = np.empty(data.n, _F)
            partials = np.empty(data.n, _F)
            losses = np.zeros(data.n)
            notes = np.zeros(data.n, np.int32)
            gd.gd_pass(X.indptr.astype(np.int64), indices, X.data, np.zeros(0, _F)
                       if sumsq is None else sumsq, data.labels, data.weights,
                       data.learn, labelled & ~data.test, labelled, data.holdout, w, g2,
                       nrm, rate, sc, kind, adaptive, normalized, invariant, sqrt_rate,
                       float(neg_power_t), float(neg_norm_power), float(eta),
                       float(sparse_l2), l1, l2, preds, partials, losses, notes)
            if args.binary:  # VW's 0/1 loss of the sign where the label is -1 or 1
                signed = labelled & (np.abs(data.labels) == 1)
                losses[signed] = np.where((preds > 0) != (data.labels > 0), weights64,
                                          0.0)[signed]
            # the pass's sums, running as VW's counters run (each a sequential double sum)
            runs = [np.cumsum(np.where(m, v, 0.0)) for m in sums_of
                    for v in (losses, weights64)]
            tot = [float(r[-1]) if len(r) else 0.0 for r in runs] + [float(data.n)]
            seen_w = prog.seen_w + np.cumsum(np.where(kept, weights64, 0.0))
            seen_n = prog.seen_n + np.cumsum(kept)
            told = _Logger(data, notes, seen_n, loss, bool(args.binary), prog.out)
            lm = np.where(sums_of[0], losses, 0.0)  # (a 0 added leaves a sum as it is)
            cum_loss = np.cumsum(np.concatenate(([run[0]], lm)))[1:]
            cum_lab = np.cumsum(np.concatenate(([run[1]], np.where(sums_of[0], weights64,
                                                                    0.0))))[1:]
            at, last = 0, -1
            while prog.out is not None and at < data.n:  # VW's lines, after their example
                at = max(int(np.searchsorted(seen_w, prog.due)), at) \
                    if seen_w[-1] >= prog.due else data.n  # (a line an example at most)
                while at < data.n and not kept[at]:
                    at += 1
                if at >= data.n:
                    break
                told.upto(at + 1)  # (standard output's lines of the examples before)
                now = prog.done + np.array([float(r[at]) for r in runs])
                now[:2] = cum_loss[at], cum_lab[at]  # (VW's running sums)
                prog.line(now, prog.prev, int(seen_n[at]), float(seen_w[at]),
                          float(data.labels[at]), float(preds[at]), int(features[at]),
                          args.binary)
                prog.prev = now
                prog.due = prog.next_due(float(seen_w[at]))
                last = at
                at += 1
            told.upto(data.n)
            # VW's loss since the last line: a double sum of the examples after it, in order
            prog.since[0] = np.cumsum(np.concatenate(([prog.since[0]], lm[last + 1:])))[-1]
            if data.n:
                seen_w, seen_n = float(seen_w[-1]), int(seen_n[-1])
            else:
                seen_w, seen_n = prog.seen_w, prog.seen_n
            for writer, linked in writers:
                writer.write(prediction_lines(link(preds, how, args.binary) if linked
                                              else partials, data.tags))
            prog.end_pass(np.array(tot[:4]), seen_w, seen_n)
            if args.predict_only_model:  # (VW's learner without save_resume, each pass)
                gd.sync_weights(w, sc)
            # VW's counters of the pass: features, and over the examples not held out the
            # unlabelled ones' weight, the examples, their features, label x weight (the run's
            # running sum so far, as VW's)
            taught = kept & data.labelled
            tot += [float(features.sum()),
                    float(data.weights[~data.labelled].astype(np.float64).sum()),
                    float(kept.sum()), float(features[kept].sum()),
                    prog.add_labels(data.labels[taught], data.weights[taught])]
            for k, part in enumerate((losses[sums_of[0]], weights64[sums_of[0]],
                                      weights64[~data.labelled], weights64)):
                run[k] = np.cumsum(np.concatenate(([run[k]], part)))[-1]
            totals.append(tot + [float(v) for v in run])
            if stop is not None:
                if stop.end_pass(tot[2], tot[3], w, g2, nrm, sc):
                    upto, mark = kept_at
                    break
                if stop.no_win == 0:  # (VW writes -f's model now; an early stop keeps it)
                    kept_at = (len(totals), prog.mark())
    lo, hi, total_w, nsnx = sc[gd.LO], sc[gd.HI], sc[gd.TOTAL_W], sc[gd.NSNX]
    gravity, contraction = sc[gd.GRAVITY], sc[gd.CONTRACTION]
    if args.model or args.readable_model:
        state = new_state(min_label=float(lo), max_label=float(hi))
        # (a normalized run's sums; VW's state keeps the fake examples' with any rules)
        state[TOTAL_WEIGHT], state[SUM_NORM_X] = (total_w, nsnx) if normalized else state0
        state[GRAVITY], state[CONTRACTION] = gravity, contraction
        keep = [n for n in ("sgd", "adaptive", "normalized", "invariant") if getattr(args, n)]
        _save(args, data, (w, g2 if adaptive else None, nrm if normalized else None),
              state, loss, how, {
                  "pass_totals": totals[:upto], "vw_preserved": preserved,
                  "vw_progress": prog.mark() if mark is None else mark,
                  "vw_t0": 0.0, "vw_initial_t": initial_t, "vw_rules": keep})  # (t0 in t)
    if not args.quiet:
        from ._vwreport import closing_block, holdout_on

        print(closing_block({"pass_totals": totals, "examples": data.n,
                             "holdout": holdout_on(options),
                             "feature_count": int(features.sum()),
                             "labels": distinct_labels([], data.labels[data.labelled]),
                             "loss": loss, "quantile_tau": options.get("quantile_tau", 0.5),
                             "best_constant": not args.dont_output_best_constant,
                             "vw_preserved": args.vw_preserved}),
              file=sys.stderr)
    return 0


class _Logger:
    """What VW's logger writes on standard output as a pass learns: the lines on the
    labels its loss does not expect (and ``--binary``'s), with the learner's notes of each
    example (``_vwgdpass``'s: a NaN score, features of too much magnitude, a NaN update)
    around them; :meth:`upto` writes those of the examples up to one, in order, before
    the progress line printed after it (``out``: the table's stream, None under --quiet,
    where VW's logger is quiet too). ``seen_n``: each example's count in VW's counters."""

    def __init__(self, data: Any, notes: np.ndarray, seen_n: np.ndarray, loss: str,
                 binary: bool, out: Any) -> None:
        from .._online._progress import any_warned
        from ._vwreport import learner_notes

        self.data, self.loss, self.binary, self.at = data, loss, binary, 0
        on = out is not None
        self.warns = on and any_warned(data.labels.tolist(), loss, binary)
        noted = on and bool(notes.any())
        # VW's number of each example: the counted ones up to it, a held-out one's next
        self.around = learner_notes(notes, seen_n + data.holdout) if noted else {}
        self.noted = sorted(self.around)

    def upto(self, end: int) -> None:
        """Write the lines of the examples before ``end`` not written yet."""
        from bisect import bisect_left

        start, self.at = self.at, max(self.at, end)
        if end <= start or not (self.warns or self.noted):
            return
        keys = self.noted[bisect_left(self.noted, start):bisect_left(self.noted, end)]
        around = {i: self.around[i] for i in keys}
        if self.warns:
            from .._online._progress import label_warnings

            d = self.data
            label_warnings(d.labels, d.weights, d.holdout, start, end, True, sys.stdout,
                           loss=self.loss, binary=self.binary, around=around)
        elif around:
            sys.stdout.write("".join(a + z for a, z in around.values()))


def _sum_feat_sq(data: Any, paths: list[str]) -> np.ndarray:
    """Each example's ``sum x^2`` as VW's ``get_total_sum_feat_sq`` adds it (the invariant
    step of ``--invariant`` alone takes it): in float, each namespace's squares in the order
    its features come (a namespace given twice goes on with its sum: the parser puts its
    features together), then the namespaces' sums in the order they first appear, the
    constant's last, then the crosses' (VW's ``eval_sum_ft_squared_of_generated_ft``: per
    interaction the product of its namespaces' sums, a namespace crossed with itself k times
    the sum over its k-combinations). The namespaces are those of the input's lines (a
    stream is read from its copy); the features of an ``--ignore_linear`` namespace, which
    the parsed row leaves out, are read from the line's text (VW's example keeps them)."""
    from .._io._interactions import compile_interactions
    from ._vwtext import _lines, _sections

    X = data.X
    with np.errstate(over="ignore"):  # (a square past float's range is VW's inf)
        x2 = (X.data * X.data).astype(_F)
    out = np.empty(data.n, _F)
    parse = data.parse
    inters = compile_interactions(parse.quadratic, parse.cubic, parse.interactions,
                                  leave_duplicates=parse.leave_duplicates)
    lines = (ln for p in paths for ln in _lines(p) if ln.strip())
    ignored, linear_off = parse.namespace_flags()
    const = 1 if parse.constant else 0
    for i in range(data.n):
        a, b = int(X.indptr[i]), int(X.indptr[i + 1])
        line = next(lines, None)
        counts: dict[int, int] = {}  # (a namespace's features are together in the row)
        for ns, fs in _sections(line) if line is not None else ():
            ch = ns.encode("utf-8", "surrogateescape")[0] if ns else 32
            if not ignored[ch] and fs:
                counts[ch] = counts.get(ch, 0) + len(fs)
        off = _off_squares(line, linear_off) if line is not None and \
            linear_off.any() else {}
        sums: dict[int, Any] = {}
        squares: dict[int, np.ndarray] = {}
        pos = a
        for ch, m in counts.items():
            if ch in off:  # (not in the row)
                sq = off[ch]
            else:
                sq = x2[pos:min(pos + m, b)]
                pos += m
            acc = _F(0)
            for v in sq:
                acc = _F(acc + v)
            sums[ch], squares[ch] = acc, sq
        total = _F(0)
        if line is None or pos + const > b or (not inters and b - pos > const):
            for k in range(a, b):  # (not the line's namespaces)
                total = _F(total + x2[k])
            out[i] = total
            continue
        for v in sums.values():
            total = _F(total + v)
        if const:
            total = _F(total + x2[pos])
        if inters:
            total = _F(total + _crosses_sq(inters, sums, squares, parse.permutations))
        out[i] = total
    return out


def _off_squares(line: str, linear_off: np.ndarray) -> dict[int, np.ndarray]:
    """The squares (float) of the features of the line's ``--ignore_linear`` namespaces, in
    their order, as VW reads their values: the namespace's scale times the value (1 for a
    string value; each number read as VW's ``parse_float``), zeros left out."""
    from ._vwfloat import parse_float32

    def number(tok: str) -> Any:
        b = np.frombuffer(tok.encode("utf-8", "surrogateescape"), np.uint8)
        v, ok = parse_float32(b, 0, len(b))
        return _F(v) if ok else None

    out: dict[int, list[Any]] = {}
    for sec in line.rstrip("\r\n").split("|")[1:]:
        toks = sec.split()
        if not toks:
            continue
        if sec[:1].isspace():
            ch, scale, feats = 32, _F(1), toks
        else:
            ns, _, sc = toks[0].partition(":")
            ch = ns.encode("utf-8", "surrogateescape")[0]
            scale, feats = number(sc) if sc else _F(1), toks[1:]
            if scale is None or scale == 0:
                continue  # (|a:0: every value 0; a scale VW cannot read is refused before)
        if not linear_off[ch]:
            continue
        sq = out.setdefault(ch, [])
        for f in feats:
            name, _, val = f.rpartition(":") if ":" in f else (f, "", "")
            x = number(val) if val else _F(1)
            if x is None:  # a string value: VW's value 1
                x = _F(1) if name else _F(0)
            v = _F(scale * x) if val else scale
            if v != 0:
                sq.append(_F(v * v))
    return {ch: np.array(v, _F) for ch, v in out.items()}


def _off_counts(data: Any, paths: list[str]) -> np.ndarray:
    """Each example's count of the features of its ``--ignore_linear`` namespaces, which
    the parsed row leaves out (VW's example, and its feature counters, keep them)."""
    from ._vwtext import _lines

    _, linear_off = data.parse.namespace_flags()
    lines = (ln for p in paths for ln in _lines(p) if ln.strip())
    out = np.zeros(data.n, np.int64)
    for i in range(data.n):
        line = next(lines, None)
        if line is not None:
            out[i] = sum(len(v) for v in _off_squares(line, linear_off).values())
    return out


def _crosses_sq(inters: list[tuple[int, ...]], sums: dict[int, Any],
                squares: dict[int, np.ndarray], permutations: bool) -> Any:
    """VW's sum of the squares of an example's crossed features, from its namespaces'
    sums (``sums``) and squares (``squares``), in float."""
    outer = _F(0)
    for inter in inters:
        prod = _F(1)
        j = 0
        while j < len(inter):
            ns = inter[j]
            if permutations or j == len(inter) - 1 or inter[j + 1] != ns:
                prod = _F(prod * sums.get(ns, _F(0)))
                j += 1
            else:  # ns crossed with itself k times: the sum over its k-combinations
                k = 2
                while j + k < len(inter) and inter[j + k] == ns:
                    k += 1
                res = [_F(0)] * k
                for x in squares.get(ns, ()):
                    res[0] = _F(res[0] + x)
                    for m in range(1, k):
                        res[m] = _F(res[m] + _F(res[m - 1] * x))
                prod = _F(prod * res[k - 1])
                j += k
            if prod == 0 and not permutations:
                break
        outer = _F(outer + prod)
    return outer


def _initial(args: argparse.Namespace, options: dict[str, Any]) -> Any:
    """-i's model, its parse options (-b, -q, ...) those of the run, its -l/--power_t the
    run's where the command line leaves them out (VW keeps them in its model). (A model
    whose records keep other sums than the run's rules is refused before: ``_vwcli``.)"""
    from .._front._cli_run import _follow_model, _load

    model = _load(args.initial, args)
    if not model.info.get("vw_version") or model.info.get("oaa"):
        raise ConfigError(f"-i {args.initial}: VW's update rules other than its default "
                          f"continue from a VW model of a plain linear learner (-f of "
                          f"vw or terascale vw)")
    _follow_model(options, model, args)
    for k, v in model.parse.to_dict().items():
        options.setdefault(k, v)
    for k, v in model.info.get("vw_rates", {}).items():  # VW's model's -l, --power_t
        if not getattr(args, f"{k}_given", True):
            options[k] = v
            args._model_rates = {**getattr(args, "_model_rates", {}), k: v}
    return model


def _save(args: argparse.Namespace, data: Any, columns: tuple[Any, Any, Any],
          state: np.ndarray, loss: str, how: str, info: dict[str, Any]) -> None:
    """-f and --readable_model: VW's save_resume model of the run's rules (the weights,
    the sums those rules keep, its counters, the rules and -l/--power_t given, its link),
    or with --predict_only_model the nonzero weights alone."""
    from .._front._cli_run import _rates, kept_link
    from .._model import LinearModel
    from ._vwmodel import run_generation

    w, g2, nrm = columns
    used = w != 0
    for c in (g2, nrm):
        if c is not None:
            used |= c != 0
    nz = np.flatnonzero(used)
    zeros = np.zeros(len(nz), _F)
    info = {**info, "vw_generation": run_generation(args)}
    if kept_link(args, how):
        info["link"] = how
    if args.binary:
        info["binary"] = True
    if _rates(args):
        info["vw_rates"] = _rates(args)
    model = LinearModel(indices=nz.astype(np.uint32), weights=w[nz], parse=data.parse,
                        loss=loss, info=info, adaptive=(
                            g2[nz] if g2 is not None else zeros,
                            nrm[nz] if nrm is not None else zeros, state))
    if args.model:
        from ._vwmodel import save_model

        save_model(model, args.model, args.model_format or "vw",
                   predict_only=bool(args.predict_only_model))
    if args.readable_model:
        from ._vwtext import write_readable

        write_readable(model, args.readable_model,
                       predict_only=bool(args.predict_only_model))
