"""``terascale vw --bfgs`` / ``--conjugate_gradient``: Vowpal Wabbit's own batch learner.

``terascale linear train --bfgs`` runs terascale's batch phase (its L-BFGS and line search,
standardized columns, L2 = 1 by default). A VW user who types ``--bfgs --passes 20`` expects
VW's algorithm (``reductions/bfgs.cc``, Nocedal 1980 and Liu & Nocedal 1989 as Miro Dudik
implemented it in VW), with VW's outputs. This module is that algorithm, pass by pass:

* pass 1 computes the gradient at the starting weights and the diagonal preconditioner
  (the loss's second derivative times x^2, plus ``--l2``, inverted and capped at 10^4 times
  its smallest value); pass 2 computes the curvature along the first direction and takes
  the step that minimizes the quadratic model; then each pass computes a gradient, checks
  the Wolfe condition (a failed step is halved and the pass repeated: "revise x 0.5") and
  takes a new L-BFGS direction (``--mem`` corrections; ``--conjugate_gradient``: Polak-
  Ribiere conjugate gradient with a curvature pass after each gradient pass, as
  ``--hessian_on`` does for L-BFGS) with step 1;
* it stops when the loss decreases by less than ``--termination`` (relative), when the
  curvature is not positive, after ``--passes`` passes, or when the holdout loss has not
  improved for ``--early_terminate`` passes;
* every pass writes one ``-p`` (and ``-r``) line per example, as VW does: in a gradient pass
  the prediction of the current weights, in a curvature pass the prediction of the gradient
  pass before it; the per-pass table goes to standard error and the closing block reports
  VW's ``average loss`` (the mean loss of every example of every pass, or with holdout the
  best pass's holdout loss, marked ``h``).

Weights, gradients, directions and the correction pairs are float32 arrays of 2^b entries,
as in VW, and VW's double accumulators are float64 sums, so that the passes follow VW's to
float rounding. With ``-n N`` (:mod:`._vwbatchworker`) each worker parses and learns from
its share only (the one-pass ``-n N``'s: the k-th of N byte ranges of the files one
after the other, cut at line ends, or a run of consecutive files), and the pass's sums are added over the workers, as VW's cluster
mode adds them: the same passes as one worker's, up to the order of the sums; a worker
holds 1/N of the examples (``terascale linear train -n N --bfgs`` is terascale's own
batch phase instead).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..._errors import ConfigError
from .._online._state import MAX_LABEL, MIN_LABEL, new_state

__all__ = ["check_batch", "train_vw_batch"]

_MAX_PRECOND_RATIO = np.float32(10000.0)
_FLT_MAX = float(np.finfo(np.float32).max)
_F = np.float32
_CURV_MESSAGE = ("Zero or negative curvature detected.\n"
                 "To increase curvature you can increase regularization or rescale "
                 "features.\nIt is also possible that you have reached numerical accuracy\n"
                 "and further decrease in the objective cannot be reliably detected.")


_SUM_CHUNK = 1 << 16  # entries of a float64 sum's terms made at a time (512 KiB)
_ROWS = 1 << 14  # examples a chunk of X's transpose times a vector (:meth:`_Data._scatter`)


def _div(a: float, b: float) -> float:
    """``a / b`` in double as C divides, without numpy's warning: 0/0 is x86's NaN (its
    sign bit set), x/0 an infinity."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return float(np.float64(a) / np.float64(b))


def _c(x: float, spec: str) -> str:
    """``x`` as C's printf writes it with ``%spec`` (``<10.5f``): Python's spelling but
    for a NaN whose sign bit is set, ``-nan`` (VW's table of a pass over no examples)."""
    if math.isnan(x):
        word = "-nan" if math.copysign(1.0, x) < 0 else "nan"
        return f"{word:{spec.split('.')[0].rstrip('f')}}"
    return f"{x:{spec}}"


def _sum64(term: Callable[[slice], np.ndarray], n: int) -> float:
    """The float64 sum of ``term(slice(0, n))``'s entries added one after another, as
    VW's loops over the weights add to a double, made ``_SUM_CHUNK`` entries at a time
    (no whole float64 temporaries: 32 MB each at ``-b 22``, several at once in an L-BFGS
    step)."""
    total = 0.0
    for a in range(0, n, _SUM_CHUNK):
        part = term(slice(a, min(n, a + _SUM_CHUNK)))
        part = part[part != 0]  # (adding 0 leaves the sum's bits: most weights are 0)
        if len(part):
            total = float(np.cumsum(np.concatenate(([total], part)), dtype=np.float64)[-1])
    return total


def _in_turn(v: np.ndarray, start: float = 0.0) -> float:
    """``start`` and ``v``'s entries added one after another in float64, as VW adds each
    example's loss, weight or curvature to its double accumulator (a pairwise sum moves
    the last printed digit of sums near 1e12: labels near 1e6)."""
    if not len(v):
        return start
    return float(np.cumsum(np.concatenate(([start], v)), dtype=np.float64)[-1])


def _f64(v: np.ndarray) -> np.ndarray:
    return v.astype(np.float64)


def _product_sum(a: np.ndarray, b: np.ndarray) -> float:
    """``float((a.astype(np.float64) * b).sum())``, a chunk at a time (:func:`_sum64`)."""
    return _sum64(lambda k: a[k].astype(np.float64) * b[k], len(a))


class _Loss:
    """VW's loss (value, first and second derivative) on float32 arrays, with VW's
    prediction range (``min_label``/``max_label``) where the loss uses it: the batch forms
    of the loss's row (``linear/_batchloss.py``)."""

    def __init__(self, name: str, q: float | None = None) -> None:
        from .._batchloss import vw_batch_losses
        from .._losstable import loss_code, loss_spec

        self.spec = loss_spec(name, "--loss_function")
        if name not in vw_batch_losses():
            raise ConfigError(f"--loss_function {name} has no batch form in terascale vw: "
                              f"--bfgs/--conjugate_gradient take "
                              f"{', '.join(vw_batch_losses())}")
        # the kernel code, with expectile's q in its bits (--expectile_q)
        self.code = loss_code(name, q=q)

    def value(self, p: np.ndarray, y: np.ndarray, lo: np.ndarray, hi: np.ndarray
              ) -> np.ndarray:
        from .._batchloss import batch_value32

        return batch_value32(self.code, p, y, lo, hi)

    def first(self, p: np.ndarray, y: np.ndarray, lo: np.ndarray, hi: np.ndarray
              ) -> np.ndarray:
        from .._batchloss import batch_first32

        return batch_first32(self.code, p, y, lo, hi)

    def second(self, p: np.ndarray, y: np.ndarray, lo: np.ndarray, hi: np.ndarray
               ) -> np.ndarray:
        from .._batchloss import batch_second32

        return batch_second32(self.code, p, y, lo, hi)


class _Data:
    """The examples of one pass, as VW hands them to the learner: hashed features (CSR),
    labels (NaN: none), importance weights, tags, and which are held out.

    With ``comm`` (``-n N``) this worker reads only its share, as the one-pass ``-n N``
    does (:func:`.._io._readers.shard_files`: a run of consecutive files when there are N
    files or more, else the rank-th of N byte ranges of the files one after the other, cut
    at line ends); the
    shares' example counts and label ranges are exchanged once, so that the holdout (every
    ``holdout_period``-th example) and the prediction range each example sees are the
    whole input's, in its order, and the passes one worker's."""

    def __init__(self, paths: list[str], options: dict[str, Any], holdout_period: int,
                 holdout_after: int, holdout_off: bool, comm: Any = None) -> None:
        from .._io._dataset import Dataset, ParseOptions
        from .._io._readers import read_file, shard_places

        rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
        keys = ParseOptions().to_dict()
        parse = ParseOptions(**{k: tuple(v) if isinstance(v, list) else v
                                for k, v in options.items() if k in keys},
                             lenient_labels=bool(options.get("lenient_labels")))
        places = shard_places(paths, rank, size)
        parts = [(p, sh) for _, p, sh in places]
        sets = [read_file(p, parse, shard=sh, need_label=False) for p, sh in parts]
        data = Dataset.concat(sets)
        self.parse = parse
        self.notes = data.notes or []  # VW's lines on its label sections (its share's)
        self.size = 1 << parse.bits
        n = len(data)
        self.n = n
        # (the parse's arrays themselves where they are X's types: copies of them stood
        # beside X's transpose while it was built, 150 MB of 1M examples of 19 features)
        self.X = _Rows(data.values.astype(_F, copy=False),
                       data.indices.astype(np.uint32, copy=False),
                       data.indptr.astype(np.int64, copy=False), self.size)
        self.labels = data.labels.astype(_F)
        self.weights = data.weights.astype(_F)
        self.tags = _tags(data)
        self.features = np.diff(data.indptr)  # (VW's count: --ignore_linear's included)
        if data.ignored is not None:
            self.features = self.features + data.ignored
        if (parse.quadratic or parse.cubic or parse.interactions) and "-" not in paths:
            # VW's batch learners count an example's own features, not its interactions
            import dataclasses

            plain = dataclasses.replace(parse, quadratic=(), cubic=(), interactions=())
            own = Dataset.concat([read_file(p, plain, shard=sh, need_label=False)
                                  for p, sh in parts])
            self.features = np.diff(own.indptr)
            if own.ignored is not None:
                self.features = self.features + own.ignored
        labelled = ~np.isnan(self.labels)
        # each share's place in the whole input: segment (file i, worker k) at i * N + k
        # (shard_places: in that order the parts are the input in its order)
        segments = len(paths) * size
        own = [0] if size == 1 else [i * size + rank for i, _, _ in places]
        lens = [len(d) for d in sets] if size > 1 else [n]
        counts = _gathered(comm, segments if size > 1 else 1, own, lens, 0, "sum"
                           ).astype(np.int64)
        # VW counts each empty line of the text as an example for the holdout
        blanks = [d.blanks for d in sets] if size > 1 else [data.blanks]
        nblank = [0 if b is None else len(b) for b in blanks]
        skips = (_gathered(comm, segments, own, nblank, 0, "sum").astype(np.int64)
                 if size > 1 else np.zeros(1, np.int64))
        counter = np.concatenate([
            np.arange(1, k + 1) + counts[:seg].sum() + skips[:seg].sum()
            + (0 if b is None else np.searchsorted(b, np.arange(k), "right"))
            for seg, k, b in zip(own, lens, blanks)]) if n else np.zeros(0, int)
        if holdout_off:
            held = np.zeros(n, bool)
        elif holdout_after:
            held = counter > holdout_after
        else:
            held = counter % holdout_period == 0
        self.test = held | ~labelled           # VW's test_only
        self.learn = labelled & ~self.test & (self.weights > 0)
        self.holdout = labelled & self.test    # counted in the holdout loss
        self.labelled = labelled
        # the prediction range each example sees: the labels learned from up to it (it
        # included), in the whole input's order: the shares before this one's, then its own
        y = np.where(self.learn, self.labels, np.nan).astype(np.float64)
        bounds = np.cumsum([0, *lens])
        mins = [float(np.fmin.reduce(y[a:b], initial=np.inf)) for a, b in zip(bounds, bounds[1:])]
        maxs = [float(np.fmax.reduce(y[a:b], initial=-np.inf)) for a, b in zip(bounds, bounds[1:])]
        ranges = _gathered(comm, 2 * len(counts), own + [len(counts) + k for k in own],
                           mins + [-v for v in maxs], np.inf, "min")
        seg_lo, seg_hi = ranges[:len(counts)], -ranges[len(counts):]
        lo, hi = np.empty(n), np.empty(n)
        for seg, a, b in zip(own, bounds, bounds[1:]):
            part = y[a:b]
            lo[a:b] = np.minimum(seg_lo[:seg].min(initial=np.inf), np.fmin.accumulate(
                np.where(np.isnan(part), np.inf, part)))
            hi[a:b] = np.maximum(seg_hi[:seg].max(initial=-np.inf), np.fmax.accumulate(
                np.where(np.isnan(part), -np.inf, part)))
        self.range_lo, self.range_hi = lo, hi
        self.range_all = (float(seg_lo.min(initial=np.inf)), float(seg_hi.max(initial=-np.inf)))
        self.total = int(counts.sum())
        self.closing = _closing_sums(comm, self)
        #: one worker's label x weight terms (VW's label sum over the passes, in its order)
        self.label_terms = (_label_terms(self) if comm is None or comm.size == 1
                            else None)
        from ..._malloc import hand_back_freed_memory

        # (the parse's freed blocks, which the passes' 2^b vectors would stand on: 47 MB
        # of 1M examples of 19 features)
        hand_back_freed_memory()

    def _scatter(self, v: np.ndarray,
                 terms: Callable[[int, int, int, int], np.ndarray]) -> np.ndarray:
        """Each feature's sum, in ``v``'s type and the examples' order, of its
        occurrences' ``terms(p, q, a, b)`` (the values of occurrences p..q, examples
        a..b's) times ``v`` of their example: X's transpose times ``v``, ``_ROWS``
        examples at a time into one sum, so that no whole copy of the values in ``v``'s
        type (8 bytes an occurrence for a float64 ``v``) stands beside them; a feature's
        terms are added one after another, each product and sum rounded in ``v``'s type,
        as VW adds them."""
        x, ptr = self.X, self.X.indptr
        out = np.zeros(self.size, v.dtype)
        fast = _fast()
        for a in range(0, self.n, _ROWS):
            b = min(self.n, a + _ROWS)
            p, q = int(ptr[a]), int(ptr[b])
            t = np.ascontiguousarray(terms(p, q, a, b), v.dtype)
            rows = ptr[a:b + 1] - p
            if fast is not None:
                fast.cols_add(rows, x.indices[p:q], t, v[a:b], out, v.dtype == np.float64)
            else:
                np.add.at(out, x.indices[p:q], t * np.repeat(v[a:b], np.diff(rows)))
        return out

    def gradient(self, v: np.ndarray) -> np.ndarray:
        """X's transpose times ``v`` (float32 or float64: the sums' type)."""
        return self._scatter(v, lambda p, q, a, b: self.X.data[p:q])

    def squares(self, c: np.ndarray) -> np.ndarray:
        """Each feature's sum of x^2 (in float32) times ``c`` over its occurrences, in
        ``c``'s type. A feature twice in an example (a hash collision, a repeated name)
        adds two squares to the preconditioner, as in VW, not one."""
        data = self.X.data
        return self._scatter(c, lambda p, q, a, b: data[p:q] * data[p:q])

    def precondition(self, c: np.ndarray) -> np.ndarray:
        """Each feature's sum of ``c`` x x x over its occurrences, in float32 as VW adds
        them (``c`` times x, then times x: :meth:`squares` would round otherwise where a
        real value meets an importance weight)."""
        data, ptr = self.X.data, self.X.indptr
        c = c.astype(_F, copy=False)

        def terms(p: int, q: int, a: int, b: int) -> np.ndarray:
            at = np.repeat(c[a:b], np.diff(ptr[a:b + 1]))
            at *= data[p:q]
            at *= data[p:q]
            return at

        return self._scatter(np.ones(self.n, _F), terms)

    def dot(self, w: np.ndarray) -> np.ndarray:
        """X times the float32 ``w``: each example's float32 sum of its values times
        their weights, in its features' order (VW's prediction)."""
        x = self.X
        w = np.ascontiguousarray(w, _F)
        out = np.zeros(self.n, _F)
        fast = _fast()
        if fast is not None:
            fast.rows_dot(x.indptr, x.indices, x.data, w, out)
            return out
        ptr = x.indptr
        for a in range(0, self.n, _ROWS):
            b = min(self.n, a + _ROWS)
            p, q = int(ptr[a]), int(ptr[b])
            rows = np.repeat(np.arange(b - a), np.diff(ptr[a:b + 1]))
            np.add.at(out[a:b], rows, x.data[p:q] * w[x.indices[p:q]])
        return out


class _Rows:
    """The examples' hashed features as CSR arrays: ``data`` (float32 values),
    ``indices`` (uint32 features) and ``indptr`` (int64, n + 1 offsets), X of shape
    ``(n, 2**bits)``."""

    __slots__ = ("data", "indices", "indptr", "shape")

    def __init__(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray,
                 size: int) -> None:
        self.data, self.indices, self.indptr = data, indices, indptr
        self.shape = (len(indptr) - 1, size)


def _fast() -> Any:
    """The compiled core's sparse products (``_vwsparse.c``), or None where it is not
    built: then numpy's ``np.add.at`` adds the same terms in the same order."""
    from ..._cext import load
    from . import VWFAST

    return load(*VWFAST)


class _TagBytes:
    """The examples' VW tags as the parse left them: their bytes and offsets."""

    def __init__(self, tag_ptr: np.ndarray, tag_blob: np.ndarray) -> None:
        self.tag_ptr, self.tag_blob = tag_ptr, tag_blob

    def tag(self, i: int) -> str:
        from .._io._dataset import example_tag

        return example_tag(self.tag_ptr, self.tag_blob, i)


def _tags(data: Any) -> Sequence[str] | None:
    """The Dataset ``data``'s tags for the ``-p`` lines, kept as their bytes (the -p
    writer reads them in C; a str per example held 13 MB of 200,000 tags), or None."""
    if data.tag_ptr is None or data.tag_blob is None:
        return None
    from .._online._progressive import BlockTags

    return BlockTags(_TagBytes(data.tag_ptr, data.tag_blob), 0, len(data))  # type: ignore[arg-type]


def _gathered(comm: Any, length: int, own: list[int], values: list[float], fill: float,
              op: str) -> np.ndarray:
    """A float64 array of ``length`` with this worker's ``values`` at its places ``own``
    and every other worker's at theirs (the others ``fill``), combined with ``op``."""
    out = np.full(length, fill, np.float64)
    out[own] = values
    if comm is not None and comm.size > 1:
        out = np.asarray(comm.allreduce(out, op), np.float64)
    return out


def _closing_sums(comm: Any, d: _Data) -> dict[str, Any]:
    """The closing block's counts over the whole input (every worker's share): examples
    and weight not held out, the labelled ones' weight and label sum, the distinct labels
    and the features."""
    from .._online._progress import distinct_labels

    kept = ~d.holdout
    labelled = d.labelled & kept
    mine = ([float(np.count_nonzero(kept)), float(d.weights[kept].astype(np.float64).sum()),
             float(d.weights[labelled].astype(np.float64).sum()),
             _label_sum(_label_terms(d), 1), float(d.features[kept].sum())],
            distinct_labels([], d.labels[d.labelled]))
    every = [mine] if comm is None or comm.size == 1 else comm.allgather_object(mine)
    sums = [sum(v[0][i] for v in every) for i in range(5)]
    seen: list[float] = []
    for _, labels in every:
        seen = distinct_labels(seen, np.asarray(labels))
    return {"examples": int(sums[0]), "weight": sums[1], "labelled_weight": sums[2],
            "label_sum": sums[3], "features": int(sums[4]), "labels": seen}


def _label_terms(d: _Data) -> np.ndarray:
    """The label x weight (in double) of the labelled examples not held out, in order."""
    labelled = d.labelled & ~d.holdout
    return _f64(d.labels[labelled]) * _f64(d.weights[labelled])


def _label_sum(terms: np.ndarray, passes: int) -> float:
    """VW's ``weighted label sum`` of ``passes`` passes over examples whose label x weight
    are ``terms``: one double sum, an example at a time, carried from pass to pass (not
    a pass's sum times ``passes``, nor a dot product's order: its sixth decimal moves
    near 1e11)."""
    total = 0.0
    for _ in range(passes):
        if len(terms):
            total = float(np.cumsum(np.concatenate(([total], terms)))[-1])
    return total


class _Progress:
    """VW's per-pass table (standard error), printed as the passes go."""

    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet

    def __call__(self, text: str) -> None:
        if not self.quiet:
            sys.stderr.write(text)
            sys.stderr.flush()

    def note(self, text: str) -> None:
        """One of VW's ``[info]`` notes, which its logger writes on standard output."""
        if not self.quiet:
            print(f"[info] {text}", flush=True)


def check_batch(args: argparse.Namespace, options: dict[str, Any]) -> None:
    """VW's refusals of a ``--bfgs``/``--conjugate_gradient`` command line (before any
    worker starts)."""
    passes = int(options.get("bfgs") or options.get("cg") or 0)
    if passes < 2:
        raise ConfigError("--bfgs/--conjugate_gradient: at least 2 passes must be used "
                          "(VW's rule): --passes N")
    if (args.model or args.initial or args.readable_model) and not args.predict_only_model:
        raise ConfigError("-f/-i/--readable_model with --bfgs/--conjugate_gradient: VW's "
                          "BFGS does not support models with save_resume data; add "
                          "--predict_only_model (as VW requires)")
    if args.nprocs > 1 and (args.predictions or getattr(args, "raw_predictions", None)):
        raise ConfigError("--bfgs/--conjugate_gradient with -n N: -p/-r need -n 1 (each "
                          "worker predicts its share of the examples); train with -n N "
                          "and -f, then predict with -i MODEL -t")


def train_vw_batch(args: argparse.Namespace, options: dict[str, Any], paths: list[str],
                   how: str, opening: Callable[..., None], comm: Any = None) -> int:
    """Run VW's ``--bfgs``/``--conjugate_gradient`` on ``paths`` with ``options`` (the
    flags of ``terascale vw``), writing ``-p``/``-r`` per pass, ``-f``, the readable model
    and VW's closing block; returns the exit status.

    With ``comm`` (``-n N``) every worker reads and learns from its share of the input
    (:class:`_Data`); each pass's gradient, preconditioner, losses and curvature are
    summed over the workers (VW's cluster mode of its batch learner), so every worker
    takes the same steps, one worker's up to the order of the sums; rank 0 prints and
    writes."""
    from ._vwout import all_or_none, link, prediction_lines, prediction_writers

    check_batch(args, options)
    rank = comm.rank if comm is not None else 0
    cg = bool(options.get("cg"))
    passes = int(options.get("bfgs") or options.get("cg") or 0)
    start = None
    if args.initial:  # VW's batch learner starts from the model's weights and range
        from .._front._cli_run import vw_start
        from ._vwmodel import load_model

        start = load_model(args.initial, getattr(args, "vw_generation", None))
        vw_start(start, args)  # (-q/--cubic/--interactions given replace -i's)
        options = {**options, **start.parse.to_dict()}
        if args.loss is None:  # the model's (VW's: squared unless it was linked logistic)
            options["loss"] = start.loss
    loss = _Loss(options["loss"], options.get("expectile_q"))  # (-i: the model's loss)
    m = 0 if cg else int(options.get("memory", 15))
    if m < 0:
        raise ConfigError(f"--mem must be >= 0, not {m}")
    l2 = float(options.get("l2") or 0.0)
    # (VW's conjugate gradient leaves its threshold 0, --termination being one of --bfgs's
    # options: it never stops on a small decrease of the loss)
    rel_threshold = 0.0 if cg else float(args.tol)
    hessian_on = bool(getattr(args, "hessian_on", False)) or m == 0
    no_bias = bool(getattr(args, "no_bias_regularization", False))
    holdout_off = options.get("holdout") == 0.0
    period = 10
    if args.holdout_period is not None:
        period = int(args.holdout_period)
    data = _Data(paths, options, period, int(options.get("holdout_after", 0)), holdout_off,
                 comm)
    reg = None
    if args.input_feature_regularizer:
        from ._vwmodel import read_regularizer

        reg, reg_lo, reg_hi = read_regularizer(args.input_feature_regularizer,
                                               data.parse.bits)
    opening(0)  # (VW prints where its outputs go, then its learner's lines, then the rest)
    from ._vwreport import batch_opening

    out = _Progress(args.quiet or rank > 0)
    head, note = batch_opening(m, hessian_on, data.parse.bits)
    out.note(note)
    if args.cg is not None and not out.quiet:
        from ._vwcli import bfgs_option_warnings

        print(*bfgs_option_warnings(args), sep="", end="", flush=True)
    if data.notes and not out.quiet:  # (VW parses as its first pass starts: after the note)
        print("\n".join(data.notes), flush=True)
    out(head)
    opening(1)
    writers = prediction_writers(args)
    with all_or_none(writers):
        state = _Batch(data, loss, m, l2, rel_threshold, hessian_on, no_bias,
                       holdout_off, int(args.patience), passes, out, reg, comm,
                       binary=bool(args.binary))
        if reg is not None:  # VW reads the file's header: its prediction range too
            state.lo, state.hi = _F(reg_lo), _F(reg_hi)
        if start is not None:
            state.w[start.indices] = start.weights
            ad = start.adaptive
            st = ad[2] if ad is not None else None
            if st is not None and len(st) > MAX_LABEL and \
                    st[MIN_LABEL] <= st[MAX_LABEL] and loss.spec.clip != "fixed":
                state.lo, state.hi = _F(st[MIN_LABEL]), _F(st[MAX_LABEL])
        for pred, partial in state.run():
            for writer, linked in writers:
                writer.write(prediction_lines(link(pred, how, args.binary) if linked
                                              else partial, data.tags))
    if rank > 0:
        return 0
    _release(state, data)
    _outputs(args, data, state, options)
    _regularizer_out(args, data, state, options, out)
    if not args.quiet:
        print(_closing(state, data, holdout_off, options["loss"],
                       not args.dont_output_best_constant), file=sys.stderr)
    return 0


def _release(state: _Batch, data: _Data) -> None:
    """Free what the passes alone needed (the examples, the gradient, the direction and
    the correction pairs) before the model is written: its writer's arrays stood on top
    of them, the run's peak (265 MB of 200,000 examples of 28 features at -b 20, 229 MB
    in the passes)."""
    from ..._malloc import hand_back_freed_memory

    data.X = None
    state.g = state.dir = state.mem = None
    hand_back_freed_memory()


def _outputs(args: argparse.Namespace, data: _Data, state: _Batch,
             options: dict[str, Any]) -> None:
    from .._model import LinearModel
    from ._vwmodel import run_generation

    if not (args.model or args.readable_model or args.invert_hash):
        return
    w, lo, hi = (state.best if state.terminated and state.best is not None
                 else (state.w, state.lo, state.hi))
    nz = np.flatnonzero(w)
    st = new_state()
    st[MIN_LABEL], st[MAX_LABEL] = float(lo), float(hi)  # VW's model keeps it
    zeros = np.zeros(len(nz), _F)
    model = LinearModel(indices=nz.astype(np.uint32), weights=w[nz], parse=data.parse,
                        loss=options["loss"], adaptive=(zeros, zeros, st),
                        info={"examples": data.total,
                              "batch_passes": state.current_pass,
                              "vw_generation": run_generation(args),
                              "vw_learner": "bfgs" if options["bfgs"] else
                              "conjugate_gradient",
                              **({"binary": True} if args.binary else {})})
    if args.model:
        from ._vwmodel import save_model

        fmt = args.model_format or "vw"
        save_model(model, args.model, fmt, predict_only=True)
    if args.readable_model:
        from ._vwtext import write_readable

        write_readable(model, args.readable_model, predict_only=True)  # (its label range)
    if args.invert_hash:
        from ._vwtext import feature_names, write_readable

        write_readable(model, args.invert_hash, feature_names(_inputs_of(args), model))


def _regularizer_out(args: argparse.Namespace, data: _Data, state: _Batch,
                     options: dict[str, Any], out: Callable[[str], None]) -> None:
    """VW's --output_feature_regularizer_binary/_text: written only when the passes
    converged (VW: 'created only when the convergence is reached')."""
    from .._model import LinearModel
    from ._vwmodel import write_regularizer

    paths = [(args.output_feature_regularizer_binary, False),
             (args.output_feature_regularizer_text, True)]
    if not any(p for p, _ in paths):
        return
    if not state.converged or state.at_max:
        out("Regular model file has been created. Output feature regularizer file is "
            "created only when the convergence is reached. Try increasing the number of "
            "passes for convergence\n")
        return
    st = new_state()
    st[MIN_LABEL], st[MAX_LABEL] = float(state.lo), float(state.hi)  # the header keeps it
    empty = np.zeros(0, _F)
    model = LinearModel(indices=np.zeros(0, np.uint32), weights=empty, parse=data.parse,
                        loss=options["loss"], adaptive=(empty, empty, st))
    reg = state.output_regularizer()
    for path, text in paths:
        if path:
            write_regularizer(model, reg, path, text=text)


def _inputs_of(args: argparse.Namespace) -> list[str]:
    from .._front._cli_run import _inputs

    return _inputs(args)


def _closing(state: _Batch, data: _Data, holdout_off: bool, loss: str,
             best: bool) -> str:
    """VW's ``finished run`` block for a batch run (``best``: with VW's best constant)."""
    from ._vwreport import best_constant

    passes = state.passes_done
    c = data.closing  # (the whole input's, with workers too)
    examples = c["examples"] * passes
    lines = ["", "finished run"]
    if passes <= 1:
        lines.append(f"number of examples = {examples}")
    else:
        lines += [f"number of examples per pass = {examples // passes}",
                  f"passes used = {passes}"]
    weight = c["weight"] * passes
    wl = c["labelled_weight"] * passes
    if holdout_off:
        avg = f"{state.sum_loss / wl:.6f}" if wl > 0 else "n.a."
    elif state.best_holdout in (_FLT_MAX, _FLT_MAX * 0.5):
        avg = "undefined (no holdout)"
    else:
        avg = f"{state.best_holdout:.6f} h"
    terms = data.label_terms
    labels = c["label_sum"] * passes if terms is None else _label_sum(terms, passes)
    lines += [f"weighted example sum = {weight:.6f}",
              f"weighted label sum = {labels:.6f}",
              f"average loss = {avg}"]
    if best:
        lines += best_constant(loss, 0.5, labels, wl, c["labels"])
    lines.append(f"total feature number = {c['features'] * passes}")
    return "\n".join(lines)


def _zero_one(loss: np.ndarray, pred: np.ndarray, labels: np.ndarray,
              labelled: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The examples' losses ``loss`` as VW's ``--binary`` leaves them in its shared data:
    an example labelled -1 or 1 loses its weight where the sign of its prediction
    (``pred`` > 0: 1, else -1) is not its label, else 0; any other keeps its loss."""
    sign = np.where(pred > 0, _F(1), _F(-1))
    return np.where(labelled & (np.abs(labels) == 1),
                    np.where(sign == labels, _F(0), weights), loss).astype(_F)


class _Batch:
    """VW's bfgs state (``reductions/bfgs.cc``) and its passes."""

    def __init__(self, data: _Data, loss: _Loss, m: int, l2: float, rel_threshold: float,
                 hessian_on: bool, no_bias: bool, holdout_off: bool, early_stop: int,
                 final_pass: int, out: _Progress,
                 regularizers: np.ndarray | None = None, comm: Any = None,
                 binary: bool = False) -> None:
        from .._io._hashnames import CONSTANT_HASH

        self.comm = comm  # (-n N: the workers' communicator; each learns from a share)
        # the accumulator of the examples' terms of the gradient and preconditioner: one
        # worker adds them in float32 in the examples' order, as VW; N workers add each
        # share's in float64, then the shares' (_allreduce), and round the total to float32
        # once, so that where the input is cut hardly matters: N = 2, 3, 4 round to the
        # same float32 sums but where a float64 sum falls on a rounding boundary
        self.acc = np.float64 if comm is not None and comm.size > 1 else _F
        self.d, self.loss, self.m, self.l2 = data, loss, m, l2
        self.rel_threshold = rel_threshold
        self.hessian_on, self.no_bias = hessian_on, no_bias
        self.holdout_off, self.early_stop = holdout_off, early_stop
        self.final_pass, self.out = final_pass, out
        self.binary = binary  # (VW's --binary: its 0/1 loss in the shared data's sums)
        size = data.size
        self.const = CONSTANT_HASH & (size - 1)
        self.w = np.zeros(size, _F)      # W_XT
        self.g = np.zeros(size, _F)      # W_GT
        self.dir = np.zeros(size, _F)    # W_DIR
        self.cond = np.zeros(size, _F)   # W_COND
        self.stride = 1 if m == 0 else 2 * m
        self.mem = np.zeros((self.stride, size), _F)
        self.rho = np.zeros(max(m, 1), np.float64)
        self.alpha = np.zeros(max(m, 1), np.float64)
        self.lastj = self.origin = 0
        self.loss_sum = self.previous_loss_sum = 0.0
        self.importance_weight_sum = 0.0
        self.curvature = 0.0
        self.step_size = _F(0)
        self.first_pass = self.gradient_pass = self.preconditioner_pass = True
        self.current_pass = 0
        self.passes_done = 0
        self.predictions = np.zeros(0, _F)
        self.no_win_counter = 0
        # VW's shared data: the prediction range, the progressive and holdout losses
        # (a loss whose predictions are not clipped to the labels starts at [-50, 50])
        wide = loss.spec.clip != "labels"
        self.lo, self.hi = (_F(-50), _F(50)) if wide else (_F(0), _F(0))
        self.sum_loss = 0.0
        self.holdout_loss = self.holdout_weight = 0.0
        self.best_holdout = _FLT_MAX
        # the learner VW writes when a pass's holdout loss improves; an early termination
        # keeps that file (VW's final write is skipped then), so its model is this one
        self.best: tuple[np.ndarray, Any, Any] | None = None
        self.terminated = False
        self.converged = False
        self.at_max = False
        # VW's per-feature regularizer (--input_feature_regularizer): strength and target
        # per weight; the weights start at the targets, the preconditioner at the strengths
        self.reg = regularizers
        if regularizers is not None:
            self.l2 = 1.0
            self.cond = regularizers[0::2].copy()
            self.w = regularizers[1::2].copy()

    # -- one pass over the examples ------------------------------------------------
    def _ranges(self) -> tuple[np.ndarray, np.ndarray]:
        """The prediction range each example sees: VW widens it to every label learned
        from, this one's included, before predicting."""
        d = self.d
        lo = np.minimum(d.range_lo, float(self.lo)).astype(_F)
        hi = np.maximum(d.range_hi, float(self.hi)).astype(_F)
        if d.total:  # (the whole input's last: every worker's next pass starts from it)
            self.lo = _F(min(d.range_all[0], float(self.lo)))
            self.hi = _F(max(d.range_all[1], float(self.hi)))
        return lo, hi

    def _pass(self) -> tuple[np.ndarray, np.ndarray]:
        d, loss = self.d, self.loss
        lo, hi = self._ranges()
        partial = d.dot(self.w)
        with np.errstate(invalid="ignore"):
            pred = np.where(np.isnan(partial), _F(0), np.clip(partial, lo, hi)).astype(_F)
        y = np.where(d.labelled, d.labels, _F(0)).astype(_F)
        wt = d.weights
        # this pass's sums (VW's accumulators; with workers, summed over them)
        iws = _in_turn(wt[d.learn]) if self.first_pass else 0.0
        dg = dcond = None
        dloss = dcurv = 0.0
        learn = d.learn
        if self.gradient_pass:
            ex_loss = (loss.value(pred, y, lo, hi) * wt).astype(_F)
            grad = np.where(learn, (loss.first(pred, y, lo, hi) * wt).astype(_F), _F(0))
            dg = d.gradient(grad.astype(self.acc))
            dloss = _in_turn(ex_loss[learn])
            self.predictions = pred[learn]
            out_pred, out_partial = pred, partial
        else:  # curvature along the direction; predictions of the last gradient pass
            dx = d.dot(self.dir).astype(np.float64)
            stored = np.zeros(d.n, _F)
            k = min(int(np.count_nonzero(learn)), len(self.predictions))
            idx = np.flatnonzero(learn)
            stored[idx[:k]] = self.predictions[:k]
            if k < len(idx) and k:  # VW reuses the last one when the data grew
                stored[idx[k:]] = self.predictions[k - 1]
            sd = loss.second(stored, y, lo, hi).astype(np.float64)
            dcurv = _in_turn((sd * dx * dx * wt)[learn])  # (VW's order of the products)
            ex_loss = (loss.value(stored, y, lo, hi) * wt).astype(_F)
            out_pred = np.where(learn, stored, pred).astype(_F)
            out_partial = np.where(learn, stored, partial).astype(_F)
            ex_loss = np.where(learn, ex_loss,
                               (loss.value(pred, y, lo, hi) * wt).astype(_F))
        if self.preconditioner_pass:
            c = np.where(learn, (loss.second(out_pred, y, lo, hi) * wt).astype(_F), _F(0))
            dcond = d.squares(c.astype(self.acc)) if self.acc is not _F else d.precondition(c)
        # VW's shared data: every learned example's loss; the held-out ones apart
        if self.gradient_pass:
            hl = (loss.value(pred, y, lo, hi) * wt).astype(_F)
        else:
            hl = ex_loss
        if self.binary:  # VW's binary reduction over bfgs: the loss of sign(prediction)
            ex_loss, hl = (_zero_one(v, out_pred, d.labels, d.labelled, wt)
                           for v in (ex_loss, hl))
        sums = np.array([iws, dloss, dcurv, _in_turn(ex_loss[learn]), _in_turn(hl[d.holdout]),
                         _in_turn(wt[d.holdout])])
        if self.comm is not None and self.comm.size > 1:
            dg, dcond, sums = self._allreduce(dg, dcond, sums)
        dg = None if dg is None else dg.astype(_F, copy=False)
        dcond = None if dcond is None else dcond.astype(_F, copy=False)
        self.importance_weight_sum += sums[0]
        if dg is not None:
            self.g += dg
            self.loss_sum += sums[1]
        self.curvature += sums[2]
        if dcond is not None:
            self.cond += dcond
        if self.comm is not None and self.comm.size > 1:
            self.sum_loss += sums[3]
        else:  # (VW's one running sum over the passes)
            self.sum_loss = _in_turn(ex_loss[learn], self.sum_loss)
        self.holdout_loss, self.holdout_weight = sums[4], sums[5]
        return out_pred, out_partial

    def _allreduce(self, dg: np.ndarray | None, dcond: np.ndarray | None,
                   sums: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None,
                                              np.ndarray]:
        """The pass's gradient, preconditioner and sums over every worker (VW's
        ``accumulate`` and ``accumulate_scalar``), each vector a float64 sum of its
        worker's examples (``acc``), added in double in place (one concatenated copy of
        the three, and its result, stood 4 float64 vectors of 2^b above the pass's
        arrays: a worker's peak)."""
        out = [None if v is None else self.comm.allreduce(v, out=v) for v in (dg, dcond)]
        return out[0], out[1], np.asarray(self.comm.allreduce(sums), np.float64)

    def run(self):  # noqa: ANN201 (a generator of each pass's predictions)
        """Pass after pass (yielding each pass's predictions and raw scores) until VW's
        batch learner stops. Its float arithmetic overflows to infinity and NaN without a
        word, as VW's does (a curvature past float's range makes a step of 0)."""
        while self.current_pass < self.final_pass:
            with np.errstate(over="ignore", invalid="ignore"):
                scored = self._pass()
            yield scored
            self.passes_done += 1
            with np.errstate(over="ignore", invalid="ignore"):
                going = self._end_pass()
            if not going:
                break

    def _end_pass(self) -> bool:
        """VW's end_pass: False when the learner is done."""
        status = self._process_pass()
        if self.final_pass == self.current_pass:
            self.out("Maximum number of passes reached. To optimize further, increase the "
                     "number of passes\n")
            self.at_max = True
        if status != "ok" and self.final_pass > self.current_pass:
            self.final_pass = self.current_pass
            self.converged = True
        else:
            self.cond[:] = 0
        done = self.final_pass == self.current_pass
        if not self.holdout_off:
            this = float(np.float32(self.holdout_loss / self.holdout_weight)
                         if self.holdout_weight > 0 else _FLT_MAX * 0.5)
            if this < self.best_holdout:
                self.best_holdout = this
                self.no_win_counter = 0
                self.best = (self.w.copy(), self.lo, self.hi)
            elif this != _FLT_MAX or math.isfinite(self.best_holdout):
                self.no_win_counter += 1
            if self.early_stop == self.no_win_counter:
                self.out("Early termination reached w.r.t. holdout set error")
                self.terminated = done = True
        return not done

    # -- VW's process_pass ---------------------------------------------------------
    def _finalize_preconditioner(self) -> None:
        c = self.cond
        c += _F(self.l2) if self.reg is None else self.reg[0::2]
        max_hessian = max(float(c.max(initial=0.0)), 0.0)
        pos = c > 0
        c[pos] = _F(1) / c[pos]
        max_precond = _F(0) if max_hessian == 0 else _MAX_PRECOND_RATIO / _F(max_hessian)
        c[np.isinf(c) | (c > max_precond)] = max_precond

    def _add_regularization(self) -> float:
        w = self.w
        if self.reg is not None:
            reg, target = self.reg[0::2], self.reg[1::2]
            delta = (w - target).astype(_F)
            self.g += reg * delta
            ret = _sum64(lambda k: 0.5 * reg[k].astype(np.float64) * delta[k] * delta[k],
                         len(w))
            if self.no_bias:
                c = self.const
                self.g[c] -= reg[c] * delta[c]
                ret -= 0.5 * float(reg[c]) * float(delta[c]) * float(delta[c])
            return ret
        reg = _F(self.l2)
        self.g += reg * w
        ret = _sum64(lambda k: 0.5 * float(reg) * w[k].astype(np.float64) * w[k], len(w))
        if self.no_bias:
            wc = w[self.const]
            self.g[self.const] -= reg * wc
            ret -= 0.5 * float(reg) * float(wc) * float(wc)
        return ret

    def output_regularizer(self) -> np.ndarray:
        """VW's preconditioner_to_regularizer: per weight its L2 strength (--l2 plus the
        inverse preconditioner) and the weight itself."""
        out = np.zeros(2 * len(self.w), _F)
        base = _F(self.l2) if self.reg is None else self.reg[0::2]
        strength = np.zeros(len(self.w), _F) + base
        pos = self.cond > 0
        strength[pos] += _F(1) / self.cond[pos]
        out[0::2] = strength
        out[1::2] = self.w
        return out

    def _avg_line(self) -> str:
        avg = _div(self.loss_sum, self.importance_weight_sum)
        return f"{self.current_pass + 1:2d} {_c(avg, '<10.5f')}\t"

    def _process_pass(self) -> str:
        status = "ok"
        out = self.out
        self._finalize_preconditioner()
        iws = self.importance_weight_sum
        if self.first_pass:
            if self.l2 > 0:
                self.loss_sum += self._add_regularization()
            out(self._avg_line())
            self.previous_loss_sum = self.loss_sum
            self.loss_sum = 0.0
            self.curvature = 0.0
            self._iter_start()
            self.gradient_pass = False  # VW: the first step is taken with curvature
        elif self.gradient_pass:
            if self.l2 > 0:
                self.loss_sum += self._add_regularization()
            if not self.holdout_off and self.current_pass >= 1:
                if self.holdout_loss == 0.0 and self.holdout_weight == 0.0:
                    out(f"{self.current_pass + 1:2d} h unknown    ")
                else:
                    out(f"{self.current_pass + 1:2d} h"
                        f"{self.holdout_loss / self.holdout_weight:<10.5f}\t")
            else:
                out(self._avg_line())
            wolfe1, new_step = self._wolfe_eval()
            if math.isnan(float(np.float32(wolfe1))):
                out("\n")  # (ends the table's line; the note is the logger's)
                out.note("Derivative 0 detected.")
                self.step_size = _F(0)
                status = "conv"
            elif wolfe1 < 0.01 or self.loss_sum > self.previous_loss_sum:
                ratio = 0.0 if self.step_size == 0 else float(_F(new_step) / self.step_size)
                out("{:<10s}\t{:<10s}\t(revise x {:.1f})\t{:<.5f}\n".format(
                    "", "", ratio, new_step))
                self.w += _F(-float(self.step_size) + new_step) * self.dir
                self.step_size = _F(new_step)
                self.g[:] = 0
                self.loss_sum = 0.0
            else:
                prev = self.previous_loss_sum
                rel = (prev - self.loss_sum) / prev if prev != 0 else math.nan
                if not math.isnan(rel) and abs(rel) < self.rel_threshold:
                    # (VW's logger, on standard output: an empty [info] line first, the
                    # second line of the note without the prefix)
                    out.note("")
                    out.note(f"Termination condition reached in pass {self.current_pass + 1}: "
                             f"decrease in loss less than {self.rel_threshold * 100:.3f}%.\n"
                             f"If you want to optimize further, decrease termination "
                             f"threshold.")
                    status = "conv"
                self.previous_loss_sum = self.loss_sum
                self.loss_sum = 0.0
                self.curvature = 0.0
                self.step_size = _F(1)
                if not self._iter_middle():
                    out.note(f"In bfgs_iter_middle: {_CURV_MESSAGE}")
                    self.step_size = _F(0)
                    status = "curv"
                if self.hessian_on:
                    self.gradient_pass = False
                else:
                    d_mag = float(np.float32(self._square_sum(self.dir)))
                    out("{:<10s}\t{:<10.5f}\t{:<.5f}\n".format("", d_mag, self.step_size))
                    self.w += self.step_size * self.dir
        else:  # a curvature pass has ended
            dv, n = self.dir, len(self.dir)
            if self.reg is not None:
                reg = self.reg[0::2]
                self.curvature += _sum64(lambda k: reg[k].astype(np.float64)
                                         * dv[k].astype(np.float64) ** 2, n)
            elif self.l2 > 0:  # (VW's float --l2 as a double, times d, times d)
                lam = float(np.float32(self.l2))
                self.curvature += _sum64(lambda k: lam * dv[k].astype(np.float64)
                                         * dv[k], n)
            dd = float(np.float32(_product_sum(self.mem[self.origin % self.stride], dv)))
            if self.curvature == 0.0 and dd != 0.0:
                out.note(_CURV_MESSAGE)
                self.step_size = _F(0)
                status = "curv"
            elif dd == 0.0:
                out.note("Derivative 0 detected.")
                self.step_size = _F(0)
                status = "conv"
            else:
                self.step_size = _F(-dd / float(np.float32(self.curvature)))
            d_mag = float(np.float32(self._square_sum(self.dir)))
            self.w += self.step_size * self.dir
            out(f"{_c(_div(self.curvature, iws), '<10.5f')}\t{_c(d_mag, '<10.5f')}\t"
                f"{_c(float(self.step_size), '<.5f')}\n")
            self.gradient_pass = True
        self.current_pass += 1
        self.first_pass = False
        self.preconditioner_pass = False
        return status

    @staticmethod
    def _square_sum(v: np.ndarray) -> float:
        return _sum64(lambda k: v[k].astype(np.float64) ** 2, len(v))

    def _iter_start(self) -> None:
        g, c = self.g, self.cond
        self.origin = 0
        if self.m > 0:
            self.mem[1 % self.stride] = self.w
        self.mem[0] = self.g
        g1_hg1 = _sum64(lambda k: _f64(g[k]) * _f64(g[k]) * c[k], len(g))
        g1_g1 = _sum64(lambda k: _f64(g[k]) * _f64(g[k]), len(g))
        self.dir = (-self.cond * self.g).astype(_F)
        self.g[:] = 0
        self.lastj = 0
        iws = self.importance_weight_sum
        self.out(f"{_c(_div(g1_g1, iws * iws), '<10.5f')}\t{_c(_div(g1_hg1, iws), '<10.5f')}\t"
                 f"{'':<10s}\t{'':<10s}\t{'':<10s}\t")

    def _slot(self, k: int) -> int:
        return (k + self.origin) % self.stride

    def _iter_middle(self) -> bool:
        mem, g, c = self.mem, self.g, self.cond
        if self.m == 0:  # conjugate gradient (Polak-Ribiere, preconditioned)
            old = mem[self._slot(0)]
            g_hy = _sum64(lambda k: _f64(g[k]) * c[k] * _f64(g[k] - old[k]), len(g))
            g_hg = _sum64(lambda k: _f64(old[k]) * c[k] * old[k], len(g))
            beta = float(np.float32(g_hy / g_hg)) if g_hg != 0 else math.nan
            if beta < 0 or math.isnan(beta):
                beta = 0.0
            mem[self._slot(0)] = g
            self.dir = (self.dir * _F(beta)).astype(_F)
            self.dir -= c * g
            g[:] = 0
            self.out(f"{beta:f}\t")
            return True
        self.out("{:<10s}\t".format(""))
        ys, ss = self._slot(0), self._slot(1)
        mem[ys] = g - mem[ys]
        mem[ss] = self.w - mem[ss]
        self.dir = g.copy()
        y_, s_, n = mem[ys], mem[ss], len(g)
        y_s = _sum64(lambda k: _f64(y_[k]) * _f64(s_[k]), n)
        y_hy = _sum64(lambda k: _f64(y_[k]) * _f64(y_[k]) * c[k], n)
        s_q = _sum64(lambda k: _f64(s_[k]) * g[k], n)
        if y_s <= 0 or y_hy <= 0:
            return False
        rho, alpha, lastj = self.rho, self.alpha, self.lastj
        rho[0] = 1 / y_s
        gamma = _F(y_s / y_hy)
        d = self.dir
        for j in range(lastj):
            alpha[j] = rho[j] * s_q
            d -= _F(alpha[j]) * mem[self._slot(2 * j)]
            s_q = _product_sum(mem[self._slot(2 * j + 3)], d)
        alpha[lastj] = rho[lastj] * s_q
        d -= _F(alpha[lastj]) * mem[self._slot(2 * lastj)]
        d *= gamma * c
        y_r = _product_sum(mem[self._slot(2 * lastj)], d)
        for j in range(lastj, 0, -1):
            coef = alpha[j] - rho[j] * y_r
            d += _F(coef) * mem[self._slot(2 * j + 1)]
            y_r = _product_sum(mem[self._slot(2 * j - 2)], d)
        coef = alpha[0] - rho[0] * y_r
        self.dir = (-d - _F(coef) * mem[self._slot(1)]).astype(_F)
        self.lastj = lastj + 1 if lastj < self.m - 1 else self.m - 1
        self.origin = (self.origin + self.stride - 2) % self.stride
        mem[self._slot(0)] = g
        mem[self._slot(1)] = self.w
        g[:] = 0
        for j in range(self.lastj, 0, -1):
            rho[j] = rho[j - 1]
        return True

    def _wolfe_eval(self) -> tuple[float, float]:
        g, dv, c, n = self.g, self.dir, self.cond, len(self.g)
        g0_d = _product_sum(self.mem[self._slot(0)], dv)
        g1_d = _sum64(lambda k: _f64(g[k]) * dv[k], n)
        g1_hg1 = _sum64(lambda k: _f64(g[k]) * _f64(g[k]) * c[k], n)
        g1_g1 = _sum64(lambda k: _f64(g[k]) * _f64(g[k]), n)
        step = float(self.step_size)
        with np.errstate(divide="ignore", invalid="ignore"):
            wolfe1 = float(np.float64(self.loss_sum - self.previous_loss_sum)
                           / np.float64(step * g0_d))
            wolfe2 = float(np.float64(g1_d) / np.float64(g0_d))
        iws = self.importance_weight_sum
        self.out(f"{_c(_div(g1_g1, iws * iws), '<10.5f')}\t{_c(_div(g1_hg1, iws), '<10.5f')}\t "
                 f"{_c(wolfe1, '<10f')}\t{_c(wolfe2, '<10f')}\t")
        return wolfe1, 0.5 * step
