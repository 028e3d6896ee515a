"""The text ``terascale vw`` prints as Vowpal Wabbit does: its preamble and closing block.

VW's closing block reports ``average loss``: the progressive loss over every example
learned from (all passes), or, when passes hold out every k-th example (or, with
``--holdout_after``, every example after the first N), the best holdout loss of any pass,
marked ``h``; when passes hold out examples but no pass held any out (fewer than k
examples), VW prints ``undefined (no holdout)``. ``closing_block`` computes it from the per-pass sums the
learner records (``model.info["pass_totals"]``: loss, weight, holdout loss, holdout weight,
examples, features, and over the examples not held out: the unlabelled ones' weight, the
examples, their features), so that the figures are VW's on the same data.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PRESERVED", "average_loss", "closing_block", "holdout_on", "preamble",
           "test_block"]

# VW's --preserve_performance_counters: the loss and labelled weight of the runs before
# (read from -i's VW model), which the closing block's average loss then includes
PRESERVED: dict[str, float] = {}


def holdout_on(options: dict[str, Any]) -> bool:
    """Whether a run with these training options holds examples out, as VW's
    ``holdout_set_off`` is false: more than one pass without ``--holdout_off``, or
    ``--holdout_after``."""
    if options.get("holdout_after"):
        return True
    frac = options.get("holdout")
    return int(options.get("passes") or 1) > 1 and (frac is None or frac > 0)


def average_loss(totals: list[list[float]], holdout: bool = False) -> str:
    """VW's ``average loss`` from the per-pass sums (``n.a.`` without any example);
    ``holdout``: the run held examples out (:func:`holdout_on`)."""
    held = [(t[2] / t[3]) for t in totals if t[3] > 0]
    if held:  # passes > 1 hold out every k-th example; --holdout_after, even one pass
        return f"{min(held):.6f} h"
    if holdout:
        return "undefined (no holdout)"
    loss = sum(t[0] for t in totals) + PRESERVED.get("sum_loss", 0.0)
    weight = sum(t[1] for t in totals) + PRESERVED.get("weighted_labeled_examples", 0.0)
    return f"{loss / weight:.6f}" if weight > 0 else "n.a."


def closing_block(info: dict[str, Any]) -> str:
    """VW's ``finished run`` block for a training run (``info["holdout"]``: whether the
    run held examples out, :func:`holdout_on`)."""
    totals = info.get("pass_totals", [])
    passes = max(len(totals), 1)
    examples = int(info.get("examples", 0))
    features = int(info.get("feature_count", 0))
    weight = sum(t[1] for t in totals)
    if totals and all(len(t) >= 9 for t in totals):
        # the online passes' counters, as VW's: over the examples not held out, the
        # unlabelled ones' weight too, the features of every pass
        examples = int(totals[0][7])
        weight += sum(t[6] for t in totals)
        features = int(sum(t[8] for t in totals))
    lines = ["", "finished run"]
    if passes > 1:
        lines += [f"number of examples per pass = {examples}", f"passes used = {passes}"]
    else:
        lines.append(f"number of examples = {examples}")
    lines += [f"weighted example sum = {weight:.6f}",
              f"average loss = {average_loss(totals, bool(info.get('holdout')))}",
              f"total feature number = {features}"]
    return "\n".join(lines)


def test_block(examples: int, weight: float, loss: float,
               seen: float | None = None) -> str:
    """VW's ``finished run`` block for ``-t`` (test only): the average loss over the
    labelled ``weight``; ``seen``: every example's weight (VW's weighted example sum,
    unlabelled ones included; default ``weight``)."""
    avg = f"{loss / weight:.6f}" if weight > 0 else "n.a."
    seen = weight if seen is None else seen
    return "\n".join(["", "finished run", f"number of examples = {examples}",
                      f"weighted example sum = {seen:.6f}", f"average loss = {avg}"])


def preamble(options: dict[str, Any], paths: list[str], *, model: str | None,
             predictions: str | None, testonly: bool, initial_t: float = 0.0) -> str:
    """VW's lines before the progress table, in VW's order: where the model and
    predictions go, the input, then the learning rate's schedule (``initial_t``: VW's
    ``--initial_t``)."""
    lines = []
    if testonly:
        lines.append("only testing")
    if model:
        lines.append(f"final_regressor = {model}")
    if predictions:
        lines.append(f"predictions = {predictions}")
    lines += ["using no cache" if not options.get("cache") else "using cache",
              f"Reading datafile = {', '.join(paths)}",
              f"num sources = {len(paths)}",
              f"Num weight bits = {options.get('bits', 18)}",
              f"learning rate = {options.get('learning_rate', 0.5):g}",
              f"initial_t = {initial_t:g}",
              f"power_t = {options.get('power_t', 0.5):g}"]
    if options.get("passes", 1) > 1 or options.get("bfgs") or options.get("cg"):
        lines.append(f"decay_learning_rate = {options.get('decay_learning_rate', 1.0):g}")
    return "\n".join(lines)
