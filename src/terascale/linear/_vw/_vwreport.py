"""The text ``terascale vw`` prints as Vowpal Wabbit does: its preamble and closing block.

VW's closing block reports ``average loss``: the progressive loss over every example
learned from (all passes), or, when passes hold out every k-th example (or, with
``--holdout_after``, every example after the first N), the best holdout loss of any pass,
marked ``h``; when passes hold out examples but no pass held any out (fewer than k
examples), VW prints ``undefined (no holdout)``. ``closing_block`` computes it from the per-pass sums the
learner records (``model.info["pass_totals"]``: loss, weight, holdout loss, holdout weight,
examples, features, and over the examples not held out: the unlabelled ones' weight, the
examples, their features, the labelled ones' sum of label x weight; then, where a
learner keeps them, VW's running sums at the pass's end: loss, labelled weight,
unlabelled weight and every example's weight, each one double sum over the passes as
VW's), so that the figures are VW's on the same data.

VW's ``weighted label sum`` is that last sum over every pass; its ``best constant`` (the
prediction a model of the constant alone would make: the weighted mean label for squared
loss, the log-odds for logistic, the majority label for hinge, the tau-quantile of two
labels for quantile: the loss row's ``best_constant``) and ``best constant's loss`` are
computed as VW's ``get_best_constant`` does, in float32, from that sum, the labelled
weight and the distinct labels seen (``info["labels"]``: the loss is printed only when
the labels take two values or one; other losses print neither, as in VW).
"""

from __future__ import annotations

import sys
from typing import Any, TextIO

from ..._lazy import lazy_module
from .._f32 import f32
from .._online._progress import any_warned
from .._online._progress import fixed as _fixed

np = lazy_module("numpy", globals(), "np")

__all__ = ["MAGNITUDE", "NAN_SCORE", "NAN_UPDATE", "average_loss", "batch_opening",
           "batch_test_lines", "best_constant", "closing_block", "example_numbers", "holdout_on",
           "learner_notes", "multiclass_log_loss", "preamble", "run_label_sum",
           "running_sum", "test_block"]

# a ``pass_totals`` row's slots after the pass's own nine sums: VW's running sums over
# the run at the pass's end (label x weight, loss, labelled weight, unlabelled weight,
# ``t``), in VW's order of additions; a row may end after RUN_LABELS or RUN_LABELLED
RUN_LABELS, RUN_LOSS, RUN_LABELLED, RUN_UNLABELLED, RUN_T = 9, 10, 11, 12, 13

def holdout_on(options: dict[str, Any]) -> bool:
    """Whether a run with these training options holds examples out, as VW's
    ``holdout_set_off`` is false: more than one pass without ``--holdout_off``, or
    ``--holdout_after``."""
    if options.get("holdout_after"):
        return True
    frac = options.get("holdout")
    return int(options.get("passes") or 1) > 1 and (frac is None or frac > 0)


def average_loss(totals: list[list[float]], holdout: bool = False,
                 preserved: dict[str, float] | None = None) -> str:
    """VW's ``average loss`` from the per-pass sums (``n.a.`` without any example; the
    last row's eleventh and twelfth, where it has them, are VW's running sum_loss and
    labelled weight, the preserved's included: :meth:`.Progress.pass_over`);
    ``holdout``: the run held examples out (:func:`holdout_on`); ``preserved``: VW's
    ``--preserve_performance_counters``, the loss and labelled weight of the runs before
    (read from -i's VW model), which the average then includes."""
    preserved = preserved or {}
    # (VW keeps each pass's holdout loss as a float: summarize_holdout_set)
    held = [f32(t[2] / t[3]) for t in totals if t[3] > 0]
    if held:  # passes > 1 hold out every k-th example; --holdout_after, even one pass
        return f"{min(held):.6f} h"
    if holdout:
        return "undefined (no holdout)"
    loss = sum(t[0] for t in totals) + preserved.get("sum_loss", 0.0)
    weight = sum(t[1] for t in totals) + preserved.get("weighted_labeled_examples", 0.0)
    if totals and len(totals[-1]) > RUN_LABELLED:  # (VW's running sums, preserved's in)
        loss, weight = totals[-1][RUN_LOSS], totals[-1][RUN_LABELLED]
    return _fixed(loss / weight) if weight > 0 else "n.a."


def running_sum(total: float, values: np.ndarray) -> float:
    """``total`` plus each of ``values`` in turn, in double, as VW adds each example's loss
    to its ``sum_loss`` (numpy's ``sum`` adds pairwise: another rounding, which moved a
    large average loss's sixth decimal)."""
    if not len(values):
        return total
    return float(np.cumsum(np.concatenate(([total], np.asarray(values, np.float64))))[-1])


def _nan_prediction(number: int) -> str:
    """VW's ``finalize_prediction``'s line on the NaN score of example ``number`` (from 1;
    it predicts 0 for it)."""
    return f"[warning] NAN prediction in example {number}, forcing 0\n"


def nan_predictions(raw: np.ndarray, before: int, out: TextIO | None) -> None:
    """VW's warning for each NaN score of a block whose first example is number
    ``before + 1`` of the run, on ``out`` (standard output, where VW's logger writes;
    None: none printed, as under --quiet)."""
    if out is None:
        return
    for i in np.flatnonzero(np.isnan(raw)):
        out.write(_nan_prediction(before + int(i) + 1))


# an example's note, what VW's gd tells of it (``_vwlearn.c``'s NOTE_*, ``_vwgdpass``'s):
# the bits of a NaN score and of a NaN update, then MAGNITUDE times the count of features
# too large to square in float
NAN_SCORE, NAN_UPDATE, MAGNITUDE = 1, 2, 4


def example_numbers(labels: Any, hold: Any, cum_n: Any, start: int, end: int,
                    base: int = 0) -> list[int]:
    """Each example's number in VW's count (from 1) over [start, end) of a chunk: ``base``
    plus the chunk's examples counted up to it (``cum_n``: the compiled ``counts``'), itself
    included unless it is a labelled one held out (``hold``: a byte per example, empty for
    none), which VW does not count."""
    return [base + cum_n[i] + (1 if hold and hold[i] and labels[i] == labels[i] else 0)
            for i in range(start, end)]


def learner_notes(notes: np.ndarray, numbers: np.ndarray) -> dict[int, tuple[str, str]]:
    """VW's logger's lines on the examples the compiled learner noted (``notes``: its int32
    per example; ``numbers``: each example's number in VW's count, from 1): by index, the
    lines before the example's label warnings (a NaN score, predicted as 0) and after them
    (``The features have too much magnitude`` for each feature whose float square
    overflows, then a NaN update, replaced by 0), as VW's gd prints them."""
    lines = {}
    for i in np.flatnonzero(notes).tolist():
        v = int(notes[i])
        before = _nan_prediction(int(numbers[i])) if v & NAN_SCORE else ""
        after = ("[error] The features have too much magnitude\n" * (v // MAGNITUDE) +
                 ("[warning] update is NAN, replacing with 0\n" if v & NAN_UPDATE else ""))
        lines[i] = (before, after)
    return lines


def run_label_sum(totals: list[list[float]]) -> float:
    """VW's ``weighted label sum`` of a run's ``pass_totals``: a row's tenth sum is the
    run's running sum of label x weight at the end of its pass (one double sum over the
    passes, in VW's order: adding per-pass sums rounds otherwise), so the last row's."""
    return float(totals[-1][RUN_LABELS]) if totals and len(totals[-1]) > RUN_LABELS else 0.0


def multiclass_log_loss(loss: float, weight: float, holdout: bool = False) -> str:
    """VW's ``average multiclass log loss`` (``--oaa K --probabilities``): the summed log
    loss over the labelled weight not held out, as VW divides them (its sum, with
    ``holdout``, is the held-out and unlabelled examples', marked ``h``; over no weight:
    C's ``inf`` or ``-nan``)."""
    with np.errstate(all="ignore"):
        v = float(np.float64(loss) / np.float64(weight))
    return _fixed(v) + (" h" if holdout else "")


def best_constant(loss: str, tau: float, label_sum: float, weight: float,
                  labels: list[float],
                  label_range: tuple[float, float] | None = None,
                  warn: TextIO | None = None) -> list[str]:
    """VW's ``best constant`` and ``best constant's loss`` lines (none where VW prints
    none).

    Parameters
    ----------
    loss
        The loss's name (its row's ``best_constant`` says how VW finds it; a loss without
        one prints nothing, as in VW).
    tau
        ``--quantile_tau``.
    label_sum
        VW's ``weighted_labels``: the labelled examples' sum of label x weight, held-out
        examples left out.
    weight
        VW's ``weighted_labeled_examples``: those examples' weight.
    labels
        The distinct labels seen (held-out examples included), sorted: the first three
        are enough (three mean "more than two").
    label_range
        The label range VW holds where it is not the labels' (``-t``: the model's, [0, 0]
        without ``-i``): a loss whose row is ``ranged`` takes a constant outside it as
        VW's ``get_loss`` does (None: the labels' range, which holds the constant).    warn
        Where VW's line on a label its loss does not expect goes when ``get_loss`` of the
        constant meets one (hinge's two labels, one not -1 or 1: standard output, after
        the examples' lines; None: the run prints none).
    """
    from .._losstable import loss_code, loss_spec

    how = loss_spec(loss).best_constant
    if not labels or not how:
        return []
    f = f32  # (VW's float arithmetic: each operation's result rounded to a float32)
    more = len(labels) > 2
    l1, l2 = f(labels[0]), f(labels[1]) if len(labels) > 1 else f(0)
    if l1 > l2:
        l1, l2 = l2, l1
    if l1 == l2:
        return []
    c1 = f(f(label_sum - float(l2) * weight) / f(l1 - l2))
    c2 = f(f(weight) - c1)
    if c1 + c2 <= 0:
        return []
    if how == "mean":
        best = f(f(label_sum) / f(weight))
    elif more:  # (VW has the others' formulas for two labels only)
        return []
    elif how == "majority":
        best = f(-1) if c2 <= c1 else f(1)
    elif how == "log_odds":
        l1, l2 = f(-1), f(1)
        best = f(1) if c1 <= 0 else f(-1) if c2 <= 0 else _logf(f(c2 / c1))
    else:  # quantile
        best = l2 if f(f(tau) * f(c1 + c2)) < c2 else l1
    lines = [f"best constant = {_fixed(best)}"]  # (a NaN with its sign, as C++'s)
    if not more:  # VW's get_loss of the constant, in float
        kind = loss_code(loss, raw_labels=True, tau=tau)
        loss32 = _loss32()

        def at(y: float) -> float:
            if label_range is not None and loss_spec(loss).ranged:
                lo, hi = f(label_range[0]), f(label_range[1])
                if best < lo or best > hi:  # (VW's squaredloss::get_loss, float and
                    # double as there: the edge's loss, then its slope out to the constant)
                    edge = lo if best < lo else hi
                    d = f(y - edge) if best < lo else f(edge - y)
                    return f(0) if y == edge else f(float(f(d * d)) + 2.0 * float(d)
                                                    * float(f(abs(best - edge))))
            return f(loss32(kind, float(best), float(y)))

        counted = [y for y, c in ((l1, c1), (l2, c2)) if c > 0]
        if warn is not None and any_warned(counted, loss, False):
            # (VW's get_loss of each label counted warns as on examples)
            from .._online._progress import label_warnings

            ys = np.array(counted, np.float32)
            label_warnings(ys, np.ones(len(ys), np.float32), None, 0, len(ys), False, warn,
                           loss=loss, binary=False)
        total = f(at(l1) * c1) if c1 > 0 else f(0)
        total = f(total + (f(at(l2) * c2) if c2 > 0 else f(0)))
        lines.append(f"best constant's loss = {_fixed(f(total / f(c1 + c2)))}")
    return lines


def _logf(x: float) -> float:
    """C's ``logf`` of ``x``, as VW's ``std::log`` of a float takes it: the C library's
    (numpy's float32 log and a double log rounded to float each differ from it by an ulp
    on some ratios, the sixth decimal printed); numpy's where the process has none."""
    import ctypes

    try:
        fn = ctypes.CDLL(None).logf
    except (AttributeError, OSError):
        return float(np.float32(np.log(np.float32(x))))
    fn.argtypes, fn.restype = [ctypes.c_float], ctypes.c_float
    return f32(fn(float(x)))


def _loss32() -> Any:
    """VW's ``get_loss`` in float: the compiled core's where it is built (a run of the
    compiled learner imports no numba), else the numba kernel (the same bits)."""
    from ..._cext import load
    from . import VWFAST

    fast = load(*VWFAST)
    if fast is not None:
        return fast.loss32
    from .._losses import loss32

    return loss32


def closing_block(info: dict[str, Any]) -> str:
    """VW's ``finished run`` block for a training run.

    ``info``: the model's (``pass_totals``, ``examples``, ``feature_count``, ``labels``),
    with ``holdout`` (whether the run held examples out, :func:`holdout_on`),
    ``vw_preserved`` (-i's counters under ``--preserve_performance_counters``: the block
    goes on from them, as VW's, the run counted as one more pass),
    ``multiclass_log_loss`` (its line's value, :func:`multiclass_log_loss`) and, for the
    best constant, ``loss``, ``quantile_tau``, ``best_constant`` (False:
    ``--dont_output_best_constant``) and ``label_range`` (the learner's fixed range under
    ``--min_prediction``/``--max_prediction``: :func:`best_constant`'s)."""
    totals = info.get("pass_totals", [])
    passes = max(len(totals), 1)
    examples = int(info.get("examples", 0))
    features = int(info.get("feature_count", 0))
    weight = labelled = sum(t[1] for t in totals)
    if totals and all(len(t) >= 9 for t in totals):
        # the online passes' counters, as VW's: over the examples not held out, the
        # unlabelled ones' weight too, the features of every pass
        examples = int(totals[0][7])
        weight += sum(t[6] for t in totals)
        features = int(sum(t[8] for t in totals))
    # (VW's running labelled and unlabelled weights at the last pass's end, -i's in them,
    # its label sum too: sums of each pass added round otherwise, with weights far apart)
    running = bool(totals) and len(totals[-1]) > RUN_T
    if running:
        weight = totals[-1][RUN_LABELLED] + totals[-1][RUN_UNLABELLED]
    label_sum = run_label_sum(totals)
    kept = info.get("vw_preserved") or {}
    if "examples" in kept:  # VW's counters carried on from -i's: its passes one more
        examples = int(kept["examples"]) + (int(sum(t[7] for t in totals))
                                            if totals and all(len(t) >= 9 for t in totals)
                                            else examples * passes)
        passes += int(kept.get("passes", 0))
        examples //= max(passes, 1)  # (VW's example_number / current_pass)
        if not running:  # (else in the running sums)
            weight += kept.get("weighted_labeled_examples", 0.0) + \
                kept.get("weighted_unlabeled_examples", 0.0)
            label_sum += kept.get("weighted_labels", 0.0)
        labelled += kept.get("weighted_labeled_examples", 0.0)
        features += int(kept.get("features", 0))
    lines = ["", "finished run"]
    if passes > 1:
        lines += [f"number of examples per pass = {examples}", f"passes used = {passes}"]
    else:
        lines.append(f"number of examples = {examples}")
    lines += [f"weighted example sum = {weight:.6f}",
              f"weighted label sum = {label_sum:.6f}",
              f"average loss = "
              f"{average_loss(totals, bool(info.get('holdout')), info.get('vw_preserved'))}"]
    if info.get("multiclass_log_loss") is not None:
        lines.append(f"average multiclass log loss = {info['multiclass_log_loss']}")
    if info.get("best_constant", True) and "loss" in info:
        ranged = info.get("label_range")
        lines += best_constant(info["loss"], float(info.get("quantile_tau", 0.5)),
                               label_sum, labelled, list(info.get("labels", [])),
                               tuple(ranged) if ranged is not None else None,
                               sys.stdout if info.get("label_warnings", True) else None)
    lines.append(f"total feature number = {features}")
    return "\n".join(lines)


def test_block(examples: int, weight: float, loss: float, seen: float | None = None, *,
               label_sum: float | None = None, features: int | None = None,
               labels: list[float] | None = None, loss_name: str | None = None,
               tau: float = 0.5, log_loss: str | None = None,
               holdout: tuple[float, float] | None = None,
               label_range: tuple[float, float] | None = None) -> str:
    """VW's ``finished run`` block for ``-t`` (test only).

    Parameters
    ----------
    examples, weight, loss
        The examples read, the labelled ones' weight and their summed (weighted) loss: the
        average loss is ``loss / weight``.
    seen
        Every example's weight (VW's weighted example sum, unlabelled ones included;
        default ``weight``).
    label_sum, features
        VW's ``weighted label sum`` (label x weight over the labelled examples) and
        ``total feature number``; None leaves the line out.
    labels, loss_name, tau
        The distinct labels seen (:func:`best_constant`), the loss's VW name (None: no
        best constant, ``--dont_output_best_constant``) and ``--quantile_tau``.
    log_loss
        VW's ``average multiclass log loss`` (:func:`multiclass_log_loss`), or None.
    holdout
        ``--holdout_after``'s held-out examples' (loss, labelled weight): the average loss
        is theirs, marked ``h``, as VW's (None: no holdout).
    label_range
        The model's label range (:func:`best_constant`'s ``label_range``).
    """
    avg = _fixed(loss / weight) if weight > 0 else "n.a."
    if holdout is not None:
        avg = (f"{f32(holdout[0] / holdout[1]):.6f} h" if holdout[1] > 0
               else "undefined (no holdout)")
    seen = weight if seen is None else seen
    lines = ["", "finished run", f"number of examples = {examples}",
             f"weighted example sum = {seen:.6f}"]
    if label_sum is not None:
        lines.append(f"weighted label sum = {label_sum:.6f}")
    lines.append(f"average loss = {avg}")
    if log_loss is not None:
        lines.append(f"average multiclass log loss = {log_loss}")
    if loss_name is not None and label_sum is not None:
        lines += best_constant(loss_name, tau, label_sum, weight, list(labels or []),
                               label_range, sys.stdout)
    if features is not None:
        lines.append(f"total feature number = {features}")
    return "\n".join(lines)


def _given(path: str, inputs: dict[str, str]) -> str:
    """The input as the command line named it, through the copies made of it (a stream
    spooled to a file, that file rewritten by the feature generation)."""
    for _ in range(len(inputs)):
        if path not in inputs:
            break
        path = inputs[path]
    return path


def preamble(options: dict[str, Any], paths: list[str], *, model: str | None,
             predictions: str | None, initial_t: float = 0.0,
             raw: str | None = None, initial: str | None = None,
             cache: list[str] | None = None) -> str:
    """VW's lines before the progress table, in VW's order: where the model,
    predictions and raw predictions (``raw``: ``-r``'s file) go, the cache files VW
    would create (``cache``: ``-c``'s or ``--cache_file``'s names), the input, then the
    weight bits (``initial``: ``-i``'s model, whose own -b VW prints) and the learning
    rate's schedule (``initial_t``: VW's ``--initial_t``)."""
    from ._vwgen import INPUTS
    from ._vwmodel import model_generation

    bits = model_generation(initial)[4] if initial else None

    paths = [_given(p, INPUTS) for p in paths]
    lines = []  # (-t's "only testing" comes before, with VW's lines on the options)
    if model:
        lines.append(f"final_regressor = {model}")
    if predictions:
        lines.append(f"predictions = {predictions}")
    if raw:
        lines.append(f"raw predictions = {raw}")
    if options.get("cache"):
        lines.append(f"creating cache_file = {(cache or [''])[0]}")
        if cache and len(cache) > 1:  # (VW's line on standard output: its first run makes
            print("[warning] There was an attempt tried to make two write caches. Only "
                  "the first one will be made.", flush=True)  # the first cache only)
    else:
        lines.append("using no cache")
    lines += [f"Reading datafile = {', '.join(paths)}",
              f"num sources = {len(paths)}",
              f"Num weight bits = {bits or options.get('bits', 18)}",
              f"learning rate = {options.get('learning_rate', 0.5):g}",
              f"initial_t = {initial_t:g}",
              f"power_t = {options.get('power_t', 0.5):g}"]
    if options.get("passes", 1) > 1 or options.get("bfgs") or options.get("cg"):
        lines.append(f"decay_learning_rate = {options.get('decay_learning_rate', 1.0):g}")
    return "\n".join(lines)


def batch_test_lines(args: Any, bits: int) -> tuple[str, str, str] | None:
    """VW's lines of its batch learner in a ``-t`` run (none learns): where the command
    line or -i's model names ``--bfgs``/``--conjugate_gradient``, the learner's opening
    (what it enables and its table's header, on standard error after where the outputs go),
    its ``[info]`` note on its memory (standard output) and its one pass line (no example
    was learned from: VW's average over weight 0, ``-nan``), which ends its table; None
    for a model of the online learner."""
    from ._vwmodel import model_options

    saved = model_options(args.initial) if args.initial else []
    cg = args.cg is not None or ("--conjugate_gradient" in saved and args.bfgs is None)
    if not (cg or args.bfgs is not None or "--bfgs" in saved):
        return None
    m = 0 if cg else int(getattr(args, "memory", 15))
    head, note = batch_opening(m, bool(getattr(args, "hessian_on", False)), bits)
    nan = f"{'-nan':<10s}\t"
    end = (f" 1 {nan * 3}{' ' * 10}\t{' ' * 10}\t{' ' * 10}\tMaximum number of passes "
           f"reached. To optimize further, increase the number of passes")
    return head.rstrip("\n"), f"[info] {note}", end


def batch_opening(m: int, hessian_on: bool, bits: int) -> tuple[str, str]:
    """VW's batch learner's opening: what it enables and its table's header (standard
    error, each line ending in a line break), and its note on its memory (the text of an
    ``[info]`` line: 2m floats, or one for the conjugate gradient, and a weight's 4, per
    weight of ``bits``); ``m`` 0 is the conjugate gradient, which always computes the
    curvature."""
    how = "BFGS based optimization" if m > 0 else "conjugate gradient optimization via BFGS"
    curvature = "with curvature calculation" if hessian_on or m == 0 else \
        "**without** curvature calculation"
    head = (f"enabling {how} {curvature}\n"
            + "{:>2s} {:<10s}\t{:<10s}\t{:<10s}\t {:<10s}\t{:<10s}\t{:<10s}\t{:<10s}\t"
              "{:<10s}\t{:<s}\n".format("##", "avg. loss", "der. mag.", "d. m. cond.",
                                        "wolfe1", "wolfe2", "mix fraction", "curvature",
                                        "dir. magnitude", "step size"))
    note = f"m = {m}, allocated {((1 << bits) * (4 * (2 * m or 1) + 16)) >> 20}M for weights " \
        "and mem"
    return head, note
