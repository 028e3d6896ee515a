"""VW-style progress lines while training (rank 0 only).

The lines come at VW's cadence, counted as VW counts it, in the examples' importance
weight (VW's ``weighted_examples``: labelled examples not held out, and unlabelled ones):
at weight 1, 2, 4, 8, ... (VW's default, a multiplicative ``--progress 2.0``; the next line
when the weight reaches twice the weight at the last one), or as ``terascale vw -P`` sets
it in ``CADENCE``: an integer N every N of weight (additive), a number with a point
multiplies (as VW reads ``-P``: below or at 1.0 it adds 1.0). The columns are VW's: the
example counter counts every example not held out, an unlabelled one's label is
``unknown``, and a loss over no labelled weight is ``n.a.``.

Lines go on through the later passes of a ``terascale vw`` run, as VW's do: the counter,
the weight and the cadence carry on from pass to pass, and the loss columns are over
every pass so far; in a run that holds examples out, the lines of the second pass on
report the holdout loss (every pass's held-out examples so far, and since the last such
line) marked ``h``, VW's columns for it.

VW's lines on the labels its loss or ``--binary`` does not expect (``--loss_function
poisson`` on a negative label, hinge or ``--binary`` on one other than -1 and 1:
:func:`label_warnings`) and on the label sections it reads with a warning
(:func:`label_notes`) go where the lines go, on standard output.
"""

from __future__ import annotations

import math
from array import array
from typing import Any, TextIO

from ..._lazy import lazy_module

np = lazy_module("numpy", globals(), "np")

__all__ = ["CADENCE", "CARRIED_T", "LABELS", "LINK", "PRESERVED", "SUMS", "Progress",
           "any_warned", "cadence", "distinct_labels", "fixed",
           "label_notes", "label_warnings", "warns_of_labels"]

# (additive, step) of this process's progress lines: VW's default doubling
CADENCE: list[tuple[bool, float]] = [(False, 2.0)]
# how the "current predict" column shows a prediction, as -p writes it: the run's --link
# (set by the command that runs the learner; raw scores otherwise)
LINK: list[str] = ["identity"]
# -i's performance counters the run's table goes on from (``terascale vw -i MODEL
# --preserve_performance_counters``: VW's ``shared_data``, :func:`.._vw._vwmodel.run_counters`'s
# keys; set by the command that runs the learner, for its run only; empty: from zero)
PRESERVED: dict[str, float] = {}
# -i's ``t``, from which VW's running ``t`` goes on (:attr:`Progress.seen_sums`; the run's
# driver sets it, one worker)
CARRIED_T: list[float] = [0.0]
# the length of :attr:`Progress.sums`, VW's running sums that the learners' kernels add to
SUMS = 10
# the distinct labels a run keeps for VW's best constant (:func:`distinct_labels`)
LABELS = 3


def cadence(arg: str) -> tuple[bool, float]:
    """VW's reading of ``-P ARG``: an integer adds (at least 1), a number with a point
    multiplies (1.0 added when it is at most 1)."""
    from ..._errors import ConfigError

    try:
        v = float(arg)
    except ValueError:
        raise ConfigError(f"-P/--progress {arg!r}: an integer (every N examples) or a "
                          f"number with a point (a factor)") from None
    if "." not in arg:
        return True, max(1.0, float(int(v)))
    return False, v + 1.0 if v <= 1.0 else v


class Progress:
    """VW's progress lines, in its columns, at its cadence (rank 0 only)."""

    def __init__(self, out: TextIO | None) -> None:
        self.out = out
        self.since_loss = 0.0
        self.since_w = 0.0
        self.interval = 1.0
        self.due = 1.0  # the weight of the next line
        #: the classes' names (``--oaa`` with ``--named_labels``): the table shows them
        self.names: list[str] | None = None
        #: the run holds examples out (its lines from the second pass on are ``h``'s)
        self.holdout = False
        self.restart()

    def restart(self) -> None:
        """Start the run's count over: no pass done, nothing seen."""
        #: passes finished, and the sums of their (loss, labelled weight, holdout loss,
        #: holdout weight); the weight and examples seen (VW's counters)
        self.passes, self.done = 0, [0.0] * 4
        self.seen_w, self.seen_n = 0.0, 0
        #: those sums at the last line, and at the last holdout line
        self.prev, self.hprev = [0.0] * 4, [0.0] * 4
        #: VW's running sums (its ``shared_data``'s doubles), to which the learners'
        #: kernels add each example's float loss x weight and its weight in turn, in
        #: the run's order whatever its chunks: the run's loss, labelled weight, holdout
        #: loss and weight (VW's sum_loss, weighted_labeled_examples, holdout_sum_loss,
        #: weighted_holdout_examples); then :attr:`since`'s four; then the holdout loss
        #: and weight since the pass began (VW's ``_since_last_pass``, :meth:`pass_over`);
        #: doubles in a buffer (numba's kernels take ``np.frombuffer`` of it)
        self.sums = array("d", [0.0] * SUMS)
        self.folds = False
        #: VW's weighted_labels: label x weight of the labelled examples learned from, one
        #: running double sum over the run's passes (:meth:`add_labels`)
        self.label_sum = 0.0
        #: VW's weighted_unlabeled_examples and t (every example's weight, held out
        #: too): one running double sum each over the run's passes (:meth:`add_seen`)
        self.seen_sums = array("d", [0.0, CARRIED_T[0]])

    @property
    def since(self) -> memoryview:
        """VW's sums since the last line (loss, labelled weight) and since the last holdout
        line (holdout loss, weight), kept apart from the run's as VW keeps them (a
        difference of running sums loses a small loss after one many orders larger): a
        view of :attr:`sums`' four."""
        return memoryview(self.sums)[4:8]

    def go_on(self, kept: dict[str, float]) -> None:
        """Go on from -i's counters ``kept`` (:data:`PRESERVED`) as VW's table does: its
        example counter, weight and loss sums, the loss since its last line and the weight
        of its next one, and its passes (VW's lines of a run that holds examples out are
        the holdout's from its first pass then)."""
        labelled = kept["weighted_labeled_examples"]
        self.passes = int(kept.get("passes", 0))
        self.seen_w = labelled + kept["weighted_unlabeled_examples"]
        self.seen_n = int(kept["examples"])
        self.done = [kept["sum_loss"], labelled, 0.0, 0.0]
        self.prev = [kept["sum_loss"] - kept["since"], kept["old"], 0.0, 0.0]
        self.sums[0], self.sums[1] = kept["sum_loss"], labelled
        self.sums[4:8] = array("d", [kept["since"], labelled - kept["old"], 0.0, 0.0])
        self.due = kept["dump"]
        # (VW's running label and unlabelled weight sums go on from -i's too)
        self.label_sum = float(kept.get("weighted_labels", 0.0))
        self.seen_sums[0] = float(kept.get("weighted_unlabeled_examples", 0.0))

    def fold(self, acc: np.ndarray, seg: np.ndarray, n: int) -> None:
        """Add the sums ``seg`` of a chunk of ``n`` examples, learned from zeros, to the
        pass's ``acc`` (its last label and prediction too); the kernel that learned from
        the chunk added its losses to :attr:`sums` itself, which the lines and the model
        read (a chunk's sum added to the run's would round where the chunks are cut)."""
        self.folds = True
        for k in range(6):  # (Python floats: inf - inf, VW's loss of a NaN, is -nan unwarned)
            acc[k] = float(acc[k]) + float(seg[k])
        if n > 0:
            acc[6], acc[7] = seg[6], seg[7]

    def now(self) -> list[float]:
        """The run's sums of (loss, labelled weight, holdout loss, holdout weight) now, as
        the learners' kernels added them (:attr:`sums`): a line's ``acc``."""
        return list(self.sums[:4])

    def pass_over(self, acc: np.ndarray) -> list[float]:
        """A pass's kernels are done: its holdout loss and weight in ``acc`` made VW's
        running sums since the pass began (its early stop compares them), which start
        over; returns the run's loss and labelled weight now (VW's sum_loss and
        weighted_labeled_examples, the pass's ``pass_totals`` row ends with them)."""
        acc[2], acc[3] = self.sums[8], self.sums[9]
        self.sums[8] = self.sums[9] = 0.0
        return [float(self.sums[0]), float(self.sums[1])]

    def add_labels(self, labels: np.ndarray, weights: np.ndarray) -> float:
        """Add each example's ``float(label) * float(weight)``, in double and in turn, to
        :attr:`label_sum` (VW's order: a dot product's or a pairwise sum's moved the sixth
        decimal of a sum near 1e11) and return it."""
        if len(labels):
            prod = labels.astype(np.float64) * weights.astype(np.float64)
            self.label_sum = float(np.cumsum(np.concatenate(([self.label_sum], prod)))[-1])
        return self.label_sum

    def add_seen(self, weights: np.ndarray, unlabelled: np.ndarray) -> list[float]:
        """Add each example's weight, in double and in turn, to :attr:`seen_sums` (the
        unlabelled ones' to the first, every one's to the second: VW adds them so over
        the passes, where sums of each pass added round otherwise with weights far
        apart) and return them."""
        if len(weights):
            w = np.asarray(weights, np.float64)
            for k, part in enumerate((w[unlabelled], w)):
                self.seen_sums[k] = np.cumsum(np.concatenate(([self.seen_sums[k]], part)))[-1]
        return [float(v) for v in self.seen_sums]

    def end_pass(self, acc: np.ndarray, seen_w: float, seen_n: int) -> None:
        """A pass is over: ``acc`` its sums (``online_chunk``'s), ``seen_w``/``seen_n``
        the weight and examples seen so far in the run."""
        self.passes += 1
        self.done = [d + a for d, a in zip(self.done, acc[:4])]
        self.seen_w, self.seen_n = seen_w, seen_n

    def mark(self, since: float | None = None) -> list[float]:
        """Where the table stands, as VW's model keeps it (``info["vw_progress"]``): the
        next line's weight, the loss since the last line (``since``: the job's, with
        ``-n N``; else this table's running sum) and the labelled weight at that line."""
        return [float(self.due), float(self.since[0]) if since is None else since,
                float(self.prev[1])]

    def first_due(self) -> float:
        """The weight at which the first line is printed (VW's first ``dump_interval``)."""
        add, step = CADENCE[-1]
        self.interval = step if add else 1.0
        return self.interval

    def next_due(self, weight: float) -> float:
        """The weight of the next line after one printed at ``weight``: VW's next
        ``dump_interval`` is the weight at this line, as a float, plus or times the step, in
        float (compared with the weight's double sum)."""
        from .._f32 import f32

        add, step = CADENCE[-1]
        w32, s32 = f32(weight), f32(step)
        self.interval = f32(w32 + s32 if add else w32 * s32)
        return self.interval

    def header(self) -> None:
        if self.out:
            print(f"{'average':<8} {'since':<8} {'example':>12} {'example':>14} "
                  f"{'current':>14} {'current':>14} {'current':>8}\n"
                  f"{'loss':<8} {'last':<8} {'counter':>12} {'weight':>14} "
                  f"{'label':>14} {'predict':>14} {'features':>8}", file=self.out)

    def line(self, acc: np.ndarray, prev: np.ndarray, counter: int, weight: float,
             label: float, prediction: float, feats: int, binary: bool = False,
             classes: bool = False, text: tuple[str, str] | None = None) -> None:
        """One line: ``acc``/``prev`` the pass's sums now and at the last line (labelled
        loss and weight, see ``online_chunk``), then the example counter, the weight seen,
        and the last example's label (nan: unlabelled), raw prediction (shown as ``-p``
        writes it: ``binary``'s sign, or through ``LINK``) and feature count; ``classes``:
        the label and prediction are classes (``--oaa``), printed as integers; ``text``:
        the label and prediction columns as given (``--oaa --probabilities``' own)."""
        hline = self.holdout and self.passes >= 1 and len(acc) >= 4
        # the sums since the last line: VW's where the learner's chunks are folded in,
        # else (a caller that keeps only the run's sums) their difference
        sums = list(self.sums[4:8])
        if not self.folds:
            sums[0], sums[1] = acc[0] - prev[0], acc[1] - prev[1]
            if len(acc) >= 4:
                sums[2], sums[3] = acc[2] - self.hprev[2], acc[3] - self.hprev[3]
        elif len(acc) >= 4:  # (VW's labelled weight since the line: a difference)
            sums[1] = acc[1] - prev[1]
        self.sums[4] = self.sums[5] = 0.0  # (VW restarts them at every line, the
        if hline:                          # holdout's at its own)
            self.sums[6] = self.sums[7] = 0.0
            self.hprev = [float(v) for v in acc[:4]]
        if not self.out:
            return
        if text is not None:
            lab, pr = text
        elif classes and self.names is not None:  # (class 0 has no name: VW's unknown)
            k = len(self.names)
            lab = (self.names[int(label) - 1] if not math.isnan(label) and 1 <= label <= k
                   else "unknown")
            pr = self.names[int(prediction) - 1] if 1 <= prediction <= k else "unknown"
        elif classes:  # (VW's unsigned class from INT_MAX up: unknown)
            lab = "unknown" if math.isnan(label) or label >= 2147483647 else f"{int(label)}"
            pr = f"{int(prediction)}"
        else:
            from .._vw._vwout import link_one

            lab = "unknown" if math.isnan(label) else f"{label:.4f}"
            pr = f"{link_one(prediction, LINK[-1], binary):.4f}"
        held = ""
        if hline:
            # VW's holdout columns: over every held-out example so far, and since the
            # last holdout line ("unknown" without any, as VW 9 writes it)
            dl, dw = sums[2], sums[3]
            avg = (fixed(_div(acc[2], acc[3]))[:8] if acc[2] != 0 or acc[3] != 0
                   else "unknown")
            since = fixed(_div(dl, dw))[:8] if dl != 0 or dw != 0 else "unknown"
            held = " h"
        else:
            dl, dw = sums[0], sums[1]
            # (VW cuts a loss to its column's 8 characters: 134.296493 is 134.2964)
            avg = fixed(acc[0] / acc[1])[:8] if acc[1] else "n.a."
            since = fixed(dl / dw)[:8] if dw else "n.a."
        wt = f"{weight:.1f}"[:14]  # (VW cuts it to its column, no dots: 1e30 10000000150474)
        print(f"{avg:<8} {since:<8} {counter:>12d} {wt:>14} {_fit(lab):>14} "
              f"{_fit(pr):>14} {feats:>8d}{held}", file=self.out)


def _div(a: float, b: float) -> float:
    """``a / b`` in double, as numpy divides (over 0: an infinity, or NaN for 0 / 0)."""
    if b:
        return a / b
    if a == 0 or math.isnan(a):
        return math.nan
    return math.copysign(math.inf, a) * math.copysign(1.0, b)


def _fmt(v: float) -> str:
    """A float label as VW's logger formats it (the shortest digits of the float, in fixed
    notation for exponents -4 to 15, else as 1e+20)."""
    x = np.float32(v)
    e = int(np.format_float_scientific(x, unique=True).split("e")[1])
    if -4 <= e < 16:
        return np.format_float_positional(x, unique=True, trim="-")
    return np.format_float_scientific(x, unique=True, trim="-", exp_digits=2)


# --binary's line on a label other than -1 and 1 (standard output)
_BINARY = "[error] The label '{}' is not -1 or 1 as loss function expects.\n"


def warns_of_labels(loss: str, binary: bool) -> bool:
    """Whether VW prints lines on some labels of a run of ``loss`` (its name) and
    ``--binary`` (see :func:`label_warnings`)."""
    from .._losstable import loss_spec

    return bool(loss_spec(loss).warns) or binary


def label_warnings(labels: np.ndarray, weights: np.ndarray, hold: np.ndarray | None,
                   start: int, end: int, learned: bool, out: TextIO, *, loss: str,
                   binary: bool, around: dict[int, tuple[str, str]] | None = None) -> None:
    """VW's lines on the labels of examples [start, end) that its loss function does not
    expect (its row's ``warns``: ``--loss_function poisson``'s ``[warning]`` on a negative
    label, whose loss is NaN; hinge's on a label other than -1 and 1; logistic's on one
    outside [-1, 1]): one where VW
    computes the loss (a held-out example, or ``learned`` False: ``-t``), two where it
    also updates, none at weight 0; then ``--binary``'s ``[error]`` on a label other than
    -1 and 1, one per labelled example, at weight 0 and held out too. VW writes them to
    standard output. ``around``: other lines of VW's logger, by example index (of
    ``labels``): the first before that example's own, the second after the loss's first
    line where it learns (its update's), else before its loss's line."""
    from .._losstable import loss_spec

    spec = loss_spec(loss)
    lab = labels[start:end]
    of_loss, of_binary = _unexpected(lab, spec.warns, binary)
    of_loss &= weights[start:end] > 0
    text = []
    marked = np.flatnonzero(of_loss | of_binary).tolist()
    if around:
        marked = sorted(set(marked) | {i - start for i in around})
    for i in marked:
        before, after = around.get(start + i, ("", "")) if around else ("", "")
        v = _fmt(lab[i]) if of_loss[i] or of_binary[i] else ""
        warning = f"{spec.warning.format(v)}\n" if of_loss[i] else ""
        twice = learned and not (hold is not None and hold[start + i])
        # (VW's update computes the loss, then its learner tells of the update; its
        # output computes the loss again, then --binary checks the label)
        text += [before, warning if twice else "", after, warning,
                 _BINARY.format(v) if of_binary[i] else ""]
    if text:
        out.write("".join(text))


def any_warned(labels: Any, loss: str, binary: bool) -> bool:
    """Whether any of ``labels`` (floats; NaN: unlabelled) is one :func:`label_warnings`
    may print a line on, whatever its weight and holdout: its rules on each distinct
    value, without numpy (a run that prints none imports none)."""
    from .._losstable import loss_spec

    warns = loss_spec(loss).warns
    for v in set(labels):
        if v != v:
            continue
        if (warns == "negative" and v < 0 or warns == "not -1 or 1" and abs(v) != 1
                or warns == "outside [-1, 1]" and abs(v) > 1 or binary and abs(v) != 1):
            return True
    return False


def _unexpected(lab: np.ndarray, warns: str | None,
                binary: bool) -> tuple[np.ndarray, np.ndarray]:
    """The labels of ``lab`` the loss function warns of (its row's ``warns``), whatever
    their weight, and those ``--binary`` calls an error."""
    labelled = ~np.isnan(lab)
    if warns == "negative":
        of_loss = lab < 0
    elif warns == "not -1 or 1":
        of_loss = labelled & (lab != 1) & (lab != -1)
    elif warns == "outside [-1, 1]":
        of_loss = labelled & (np.abs(lab) > 1)
    else:
        of_loss = np.zeros(len(lab), bool)
    of_binary = labelled & (np.abs(lab) != 1) if binary else np.zeros(len(lab), bool)
    return of_loss, of_binary


def label_notes(notes: tuple[str, ...] | list[str], out: TextIO) -> None:
    """VW's lines on the label sections of a block's text (:attr:`.Block.notes`), printed
    on standard output before its examples are learned from, on the first pass only (VW
    prints them as it parses the text; a cache keeps them for a later run's first pass,
    as VW's ``-k`` parses again)."""
    out.write("".join(f"{n}\n" for n in notes))


def _fit(text: str, width: int = 14) -> str:
    """A label or prediction in its column as VW fits it: one too wide (a huge value
    printed with its 4 decimals) is cut to the column and ends in ``...``."""
    return text if len(text) <= width else text[:width - 3] + "..."


def fixed(v: float) -> str:
    """A loss as VW prints it, to 6 decimals (a NaN with its sign: C++ writes a negative
    one ``-nan``)."""
    if v != v:
        return "-nan" if math.copysign(1.0, v) < 0 else "nan"
    return f"{v:.6f}"


def distinct_labels(seen: list[float], labels: np.ndarray) -> list[float]:
    """``seen`` and the values of ``labels`` not in it, sorted, at most ``LABELS`` of them
    (enough to tell one, two or more than two distinct labels apart)."""
    return sorted(set(seen) | set(np.unique(labels)[:LABELS].tolist()))[:LABELS]
