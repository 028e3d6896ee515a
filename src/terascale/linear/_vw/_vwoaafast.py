"""``terascale vw --oaa K`` in the compiled core: the K learners, on one worker or ``-n N``.

The run :func:`why_not` admits parses each chunk of text with ``_vwfast.parse`` (as
:mod:`._vwonline` does) and learns from it with ``_vwfast.oaa_learn`` (``_vwlearn.c``:
:func:`.._online._update.oaa_chunk`'s operations, the label range shared and widened as
:func:`.._front._oaapass.oaa_pass` widens it, ``--link`` and the shared lazy ``--l1``/``--l2``
included), over the K learners' rows interleaved as VW's (feature f's K rows of weight,
adaptive sum and normalizer side by side: one run of ``12 K`` bytes an example touches per
feature, where ``_oaapass.Learners``' layout, learner after learner, took twice the time
example by example). It imports no numba. Everything else is the numba pass's code (:mod:`.._front._oaa`: the
checks and opening, the classes' numbering, the progress table, ``-p``/``-r``/
``--probabilities``/``--scores``, the closing block and VW's model), so that the output is
that pass's bytes, VW's. ``--passes N`` (``-c``, ``-k``, ``--cache_file``) runs as
:func:`._vwonline.train` runs the binary learner's: pass 1 parses the text and writes the
cache (``_vwpasses.Inputs``), the later ones read it, with VW's holdout (its examples
scored, their targets NaN: not learned from, the label range not widened by them, as
``_oaapass.oaa_pass``), ``--decay_learning_rate`` and the early stop (the K learners'
table and states restored to the best pass's).

``-i`` of VW's one-against-all model starts from its K learners (a run that learns on, or
``-t -i``, which scores with them: every score clipped to the label range of a model of
``--min_prediction``/``--max_prediction``, whatever the loss, as VW's test run clips it).
``--binary`` takes each learner's score's sign (``_oaa.signs``).

``--oaa K -n N`` (``_oaa._launch`` starts :func:`main`'s workers, forked as
``_vwworkers``' are): each worker learns the K learners on its part of the input
(``_io._stream.shard_places``; each part cached under its byte range), then joins the
job (``_vwworkers.Joining``: the pass's freed chunks handed back first, so that the
job's links and buffers fit under the pass's peak; left before rank 0 writes ``-f``),
and after each pass each class's
learner is averaged over the workers (its lazy L1/L2 folded in,
``_combine._average.average_weights`` over its rows) and the pass's sums added, the
early stop decided on the job's holdout sums: the numba pass's ``_oaa.run_oaa`` with a
communicator, bit for bit (its model, readable model, table and closing block; the first
label 0 after others with ``--passes`` and a label VW's parser throws at refused, as
there). Two workers on 200k lines of 20 ids and 7 classes (``benchmarks/heldout_shapes.py``'s
``oaa`` data), the largest process: 42 MB at ``-b 18`` (VW, one process: 41 MB; the
numba pass's 109-110 MB), 86 MB at ``-b 22`` (VW: 107 MB).
``--min_prediction``/``--max_prediction`` fix the learners' shared range (VW's two
floats), to which every loss clips (with ``-n N`` too: each worker's K learners start
from it, ``_oaa.ranged_start``). A run it does not cover (``-i`` with
``--preserve_performance_counters``, ``-i`` of a model above ``_vwonline._MAX_BITS``;
with ``-n N``: starting weights, ``-i`` with ``--initial_t``) runs the
numba pass, as do the runs :func:`._vwonline.c_path` sends there (``-t`` with ``-f``,
starting weights...).

Tuning: none beyond :mod:`._vwonline`'s; each parsed chunk's K scores per example
(``8 K`` bytes each) are made and dropped chunk by chunk.
"""

from __future__ import annotations

import argparse
import sys
from array import array
from types import SimpleNamespace
from typing import Any

from ..._lazy import lazy_module
from . import dense_table

np = lazy_module("numpy", globals(), "np")


__all__ = ["main", "train", "why_not"]


def why_not(args: argparse.Namespace) -> str | None:
    """None where this ``--oaa K`` run (one worker: :func:`._vwonline.c_path`'s
    other checks passed) learns in the compiled core; else why the numba pass runs it."""
    checks = (
        (bool(args.preserve_performance_counters and args.initial),
         "--oaa -i with --preserve_performance_counters"),
        (args.nprocs != 1 and not args.testonly and args.initial is not None and bool(
            getattr(args, "starting_weights", False) or getattr(args, "vw_initial_t", None)),
         "--oaa -n N with starting weights or -i and --initial_t"),
    )
    for off, flag in checks:
        if off:
            return f"{flag} runs the numba pass"
    if args.initial is not None:  # (its -b, not the command line's: the table's size)
        from ._vwmodel import is_vw_model, read_vw_model
        from ._vwonline import _MAX_BITS

        if is_vw_model(args.initial):
            bits = read_vw_model(args.initial, plain=True, records=False,
                                 oaa=True).parse.bits
            if bits > _MAX_BITS:
                return f"--oaa -i of a model of -b {bits} runs the numba pass"
    return None


def train(args: argparse.Namespace) -> int:
    """The ``--oaa K`` run :func:`why_not` admits: :func:`.._front._oaa.train_oaa`'s
    checks and opening (``_cli_run.train``'s), then the compiled pass."""
    from .._front import _cli_run
    from .._front._oaa import train_oaa
    from ._vwonline import _begin
    from ._vwreport import preamble

    _, options, paths, _ = _begin(args)
    _cli_run._check_output(args.model, "-f", stream=False)
    for path, flag in ((args.predictions, "-p"), (args.raw_predictions, "-r")):
        _cli_run._check_output(path, flag)

    def opening() -> None:  # once the command line is known to be good
        if not args.quiet:
            from ._vwmodel import model_t

            # (VW prints the t of -i's save_resume model there)
            t = (model_t(args.initial) if args.initial else 0.0) or args.initial_t or 0.0
            print(preamble(options, paths, model=args.model, predictions=args.predictions,
                           raw=args.raw_predictions, initial=args.initial,
                           cache=getattr(args, "vw_cache", None), initial_t=t),
                  file=sys.stderr)

    return int(train_oaa(args, paths, options, opening,
                         lambda job, start, out, raw: _run(job, out, raw, start),
                         _learner) or 0)


def _learner(*, indices: np.ndarray, weights: np.ndarray, parse: Any, loss: str,
             adaptive: tuple | None, info: dict[str, Any]) -> SimpleNamespace:
    """One of -i's K learners (``_oaa.split_oaa``'s), as ``LinearModel`` keeps it (the
    features with a nonzero weight or adaptive sum), without its module's numba."""
    w = np.asarray(weights, np.float32)
    keep = w != 0
    if adaptive is not None:
        keep |= np.asarray(adaptive[0]) != 0
    return SimpleNamespace(
        indices=np.asarray(indices, np.uint32)[keep], weights=w[keep], parse=parse,
        loss=loss, info=dict(info or {}),
        adaptive=None if adaptive is None else (
            np.asarray(adaptive[0], np.float32)[keep], np.asarray(adaptive[1], np.float32)[keep],
            np.asarray(adaptive[2], np.float64).copy()))


class _Learners:
    """The K learners' rows and states: ``table``, ``(2**bits, K, 3)`` float32 (calloc'd),
    each feature's K rows side by side; ``arrays``, its ``(K, 2**bits, 3)`` view, and
    ``states``, as ``_oaapass.Learners`` holds them (``_oaa._interleaved`` writes them)."""

    def __init__(self, k: int, bits: int, start: list[Any] | None) -> None:
        from .._front._oaa import start_learners
        from .._online._state import new_state

        self.k = k
        self.table = dense_table(bits, k, 3)
        self.arrays = self.table.transpose(1, 0, 2)
        self.states = np.stack([new_state()] * k)
        start_learners(self.arrays, self.states, start)  # (-i's: _oaapass.Learners' start)

    def finish(self, fast: Any) -> None:
        """Fold each learner's lazy L1/L2 into its weights (the end of training)."""
        for c in range(self.k):
            fast.sync(self.table, self.states[c], self.k, c)

    def models(self, parse: Any, loss: str) -> list[SimpleNamespace]:
        """The K learners in VW's predict-only form (``_oaapass.Learners.models``')."""
        seen = np.zeros(self.arrays.shape[1], np.bool_)
        for c in range(self.k):
            seen |= (self.arrays[c, :, 0] != 0) | (self.arrays[c, :, 2] != 0)
        idx = np.flatnonzero(seen).astype(np.uint32)
        none = np.zeros(0, np.float32)
        return [SimpleNamespace(indices=idx, weights=self.arrays[c, idx, 0], parse=parse,
                                loss=loss, adaptive=(none, none, self.states[c].copy()),
                                info={}) for c in range(self.k)]


def _run(job: dict[str, Any], out: Any, raw: Any, start: list[Any] | None,
         joining: Any = None) -> None:
    """``_oaa.run_oaa``'s run of ``job`` (``_oaa._train_one``'s, ``options["bits"]``: each
    learner's), its K learners in ``_vwfast.oaa_learn`` (from ``start``, -i's, or zeros);
    ``out``/``raw``: where ``-p``/``-r`` go (or None); ``joining``: an ``-n N`` worker's
    place in the job (``_vwworkers.Joining``): it learns from its part of the input
    (``_io._stream.shard_places``), joins the job after its first pass, and each class's
    learner is averaged over the workers after each pass and the pass's sums added, as
    ``run_oaa``'s workers do; the job's ``grams``: the features the parser makes
    (``_vwonline._Parser``'s, ``_vwgen.FeatureGen.parser_job``)."""
    from ..._errors import DataError
    from .._front._oaa import (
        _Indexing,
        _interleaved,
        _log_loss_text,
        _Table,
        _write_readable,
        malformed_error,
        print_test_block,
        say_stop,
        start_t,
    )
    from .._holdout import EarlyStop, Holdout, holdout_period
    from .._losstable import _CLIP
    from .._options import TrainOptions
    from ._vwgen import FeatureGen
    from ._vwonline import _fast, _parsed, _Parser, as_arrays
    from ._vwout import _LINK_CODES
    from ._vwpasses import Inputs
    from ._vwreport import RUN_T

    fast = _fast()
    k, names, options = int(job["k"]), job["names"], dict(job["options"])
    if start is not None:  # VW's model's parse options (-q, --noconstant, ...) rule
        options.update({key: (tuple(v) if isinstance(v, list) else v)
                        for key, v in start[0].parse.to_dict().items()})
    opts = TrainOptions(**{key: (tuple(v) if isinstance(v, list) else v)
                           for key, v in options.items()
                           if key in TrainOptions.__dataclass_fields__})
    learners = _Learners(k, opts.bits, start)
    test = bool(job.get("test"))
    rank, size = (joining.rank, joining.size) if joining is not None else (0, 1)
    quiet = job["quiet"] or rank > 0  # (rank 0's shard's lines)
    period = 0 if test else holdout_period(opts)
    passes = 1 if test else max(int(opts.passes), 1)
    stop = EarlyStop(opts.patience) if period and passes > 1 else None
    index = _Indexing(k, say=not quiet, given=job.get("indexing"))
    probabilities, scores = bool(job["probabilities"]), bool(job.get("scores"))
    t0 = start_t(start)
    table = _Table(quiet, bool(period) and passes > 1, names, probabilities, scores, t0=t0)
    kind = opts.online_kind()
    l2 = opts.online_l2(0.0)
    how = _LINK_CODES[job["link"]] if job.get("link") and not test else -1
    clips = _ranged(learners, start, kind) if test else _CLIP
    stopped = False
    # VW's multiclass parser stops at a label section it throws at (_oaa._until_malformed)
    bad = job.get("malformed")
    if bad is not None and (period or size > 1):  # (VW ends inside its first pass: no
        raise malformed_error(bad)  # holdout loss; N workers refuse it, each at its start,
        # as the numba pass's workers do)
    parse_opts = opts.parse_options()
    # pass 1 parses the text (and writes the cache where the run caches), the next read it
    places, chunks, offset = None, _parsed, 0
    if size > 1:  # (the modules of -n N only where it runs: one worker's memory is VW's)
        from .._combine._average import average_weights
        from .._io._stream import lines_before, shard_places
        from ._vwworkers import _parsed as chunks  # (of the worker's parts)
        from ._vwworkers import averaged_rows

        places = shard_places(job["data"], rank, size)
        # VW's --holdout_after counts the input's examples: the part's first one's index
        offset = lines_before(job["data"], places) if opts.holdout_after else 0
    reader = _Parser(parse_opts, FeatureGen.from_job(job.get("grams")))
    inputs = Inputs([p for _, p, _ in places] if places else job["data"], parse_opts,
                    opts.cache_root(), reader, chunks, places)
    job_totals: list[np.ndarray] = []  # (-n N: each pass's sums over every worker)
    rate = np.float32(opts.learning_rate)
    marks: list[list[float]] = []  # (each pass's end: _mark)
    kept_passes = 0  # (the early stop's: the model is the first kept_passes passes')
    for p in range(passes):
        if p > 0 and opts.decay_learning_rate != 1.0:
            rate = np.float32(rate * np.float32(opts.decay_learning_rate))
        holdout = Holdout(period, offset)  # (VW counts each empty line as an example)
        seen = 0
        for b in map(as_arrays, inputs.chunks()):
            indptr, labels, weights = b[0], b[3], b[4]
            n = len(labels)
            if bad is not None and seen + n > bad[4]:
                stopped, n = True, bad[4] - seen
                # VW's parser runs ahead of its learner: its lines on the label sections
                # before the one it stops at, then its error, then the learner's lines
                if not quiet:
                    say_stop(b[7] if p == 0 else None, bad)
                b = (*b[:7], None, *b[8:])
            hold = holdout(seen, n, b[8]) if period else np.zeros(n, np.bool_)
            seen += n
            if n:
                _block(fast, b, n, p, hold, learners, index, table, job, test, opts, kind,
                       float(rate), l2, how, clips, out, raw, names)
            del b, indptr, labels, weights  # (before the next chunk's parse: _parsed)
            if stopped:  # (VW's run ends where its parser stopped)
                break
        if stopped:
            break
        t = table.passes[p] if p < len(table.passes) else np.zeros(9)
        if size > 1:
            if (p == 0 and passes > 1 and index.first_after not in (None, index.base)):
                raise DataError(f"{', '.join(job['paths'])}: the first label 0 comes after "
                                f"other labels: VW's --oaa then reads the labels before it "
                                f"as 1..K in the first pass and as 0..K-1 in later ones, "
                                f"which the workers of -n N, each deciding on its shard, "
                                f"do not reproduce; write classes 1..K, train one pass, or "
                                f"-n 1")
            comm = joining.comm()  # (after the first pass: _vwworkers.Joining)
            for c in range(k):  # each class's learner averaged at the end of the pass
                fast.sync(learners.table, learners.states[c], k, c)
                a = learners.arrays[c]
                average_weights(comm, a[:, 0], a[:, 1], a[:, 2], learners.states[c],
                                opts.averaging, averaged_rows(len(a)))
            mine = t.copy()
            if rank:  # (each worker's running t starts at -i's or --initial_t's t: the
                mine[RUN_T] -= t0  # job's counts it once, as the numba pass's workers')
            t = comm.allreduce(mine)
            job_totals.append(t)
        if table.prog is not None:  # (where the table stood: the counters of a kept pass;
            marks.append(table.mark(job_totals if size > 1 else None))  # -n N: the job's)
        if stop is not None and stop.end_pass(t[2], t[3], learners.table, learners.states):
            kept_passes = p + 1 - stop.patience
            break
    if joining is not None:  # (the job's segment and links left before -f is written)
        joining.close()
    if test:
        if not quiet:
            print_test_block(table)
        return  # (-t with -f: the numba pass, _vwonline.c_path)
    kept = (start[0].info.get("vw_counters") or {}) if start else {}
    initial_t = float(kept.get("initial_t") or 0.0)
    parse = start[0].parse if start is not None else opts.parse_options()
    totals = (job_totals if size > 1 else table.passes) or [np.zeros(9)]
    progress = None if table.prog is None else table.mark(totals if size > 1 else None)
    if kept_passes and marks:  # (VW's model is the kept pass's: its counters then)
        progress = marks[kept_passes - 1]
    kept_totals = totals[:kept_passes] if kept_passes else totals
    only = bool(job.get("predict_only"))
    if stopped:  # (VW's counters: no pass done)
        job = dict(job, current_pass=0)
    if rank > 0:  # (rank 0 writes the model and prints)
        return
    readable = bool(job.get("readable") or job.get("invert"))
    if not only and (job["model"] or readable):  # VW's save_resume form: L1/L2 not applied
        from ._vwmodel import write_vw_oaa_resume

        model = _interleaved(job, learners, parse, opts.loss, kept_totals, progress, t0,
                             initial_t)
        if readable:
            _write_readable(job, model, parse, k)
        if job["model"]:
            write_vw_oaa_resume(model, job["model"], k, names, bare=False)
    learners.finish(fast)
    if only and readable:  # (L1/L2 applied, the nonzero weights; -n N: rank 0's sums,
        # as the numba pass's workers write them)
        _write_readable(job, _interleaved(job, learners, parse, opts.loss,
                                          table.passes if size > 1 else kept_totals,
                                          progress, t0, initial_t), parse, k)
    if only and job["model"]:
        from ._vwmodel import write_vw_oaa_model

        write_vw_oaa_model(learners.models(parse, opts.loss), job["model"], names,
                           job.get("generation"), job.get("indexing"), job.get("model_link"),
                           bool(job.get("binary")))
    if not quiet:
        from ._vwreport import closing_block, holdout_on

        sums = [list(map(float, t)) for t in totals]
        holdout = holdout_on({**options, "passes": passes})
        print(closing_block({"pass_totals": sums, "vw_preserved": job.get("preserved"),
                             "holdout": holdout, "examples": int(sums[0][4]),
                             "multiclass_log_loss": _log_loss_text(table, sums, holdout)}),
              file=sys.stderr)


def main(argv: list[str]) -> int:
    """Run one ``--oaa K -n N`` worker (the job: ``_oaa._launch``'s JSON); a user error is
    one line on stderr, exit 2 (as ``_worker``)."""
    from .._front._worker import run_worker

    return run_worker(_worker, argv, prog="terascale vw")


def _worker(job: dict[str, Any]) -> None:
    """One worker: -i's K learners read (as ``_oaaworker``'s), then :func:`_run` on its
    part, which joins the job after its first pass."""
    from .._front._oaa import learners_options, ranged_start, split_oaa
    from ._vwmodel import read_vw_model
    from ._vwworkers import Joining

    start = None
    if job.get("range"):  # (--min_prediction/--max_prediction, --initial_t alone)
        start = ranged_start(job["range"], int(job["k"]), learners_options(job), _learner,
                             job.get("initial_t"))
    elif job.get("initial"):
        start = split_oaa(read_vw_model(job["initial"], oaa=True, plain=True,
                                        generation=job.get("generation")), int(job["k"]),
                          _learner)
    joining = Joining()
    try:
        _run(job, None, None, start, joining)
    finally:
        joining.close()


def _ranged(learners: _Learners, start: list[Any] | None, kind: int) -> np.ndarray:
    """The clip rules of a ``-t`` run: VW's test run clips every learner's score, whatever
    the loss, to the label range its model's header holds where that is not empty (a model
    of ``--min_prediction``/``--max_prediction``: ``_vwonline.test``'s rule), else as the
    loss clips."""
    from .._losstable import _CLIP
    from .._online._state import MAX_LABEL, MIN_LABEL

    state = start[0].adaptive[2] if start is not None and start[0].adaptive is not None \
        else None
    if state is None or len(state) <= MAX_LABEL or state[MIN_LABEL] == state[MAX_LABEL]:
        return _CLIP
    learners.states[:, MIN_LABEL] = state[MIN_LABEL]
    learners.states[:, MAX_LABEL] = state[MAX_LABEL]
    clips = array("q", _CLIP)
    clips[kind & 7] = 1  # (the range's)
    return clips


def _block(fast: Any, b: tuple, n: int, p: int, hold: np.ndarray, learners: _Learners,
           index: Any, table: Any, job: dict[str, Any], test: bool, opts: Any, kind: int,
           rate: float, l2: float, how: int, clips: np.ndarray, out: Any, raw: Any,
           names: list[str] | None) -> None:
    """Pass ``p`` over the first ``n`` examples of parsed chunk ``b`` (``hold``: those
    held out, scored and not learned from): the K learners' scores and updates, the
    progress table's block, ``-p`` and ``-r``."""
    from .._front._oaa import _probabilities, _raw_line, _unsigned, parse_notes, signs
    from .._losstable import _BY_SIGN
    from ._vwout import link

    indptr, labels, weights = b[0], b[3], b[4]
    lab = _unsigned(labels[:n])
    if test:  # (NaN: every learner scores the example, none learns)
        before = after = np.full(n, index.base, np.int64)
        t = np.full(n, np.nan)
    else:
        before, after = index.block(lab, hold, p == 0)
        t = np.where(hold, np.nan, lab - after)  # (nan stays nan; held out: scored only)
    s = np.empty((n, learners.k))
    fast.oaa_learn(indptr, b[1], b[2], t, weights, 0, n, learners.table, learners.states,
                   learners.k, kind, rate, opts.power_t, opts.l1, l2, how, s, _BY_SIGN, clips)
    if job.get("link"):  # (VW's scorer under oaa: each learner's score linked)
        s = link(s.ravel(), job["link"], False).reshape(s.shape)
    if job.get("binary"):  # (VW's binary under oaa: each learner's sign)
        s = signs(s)
    probabilities, scores = bool(job["probabilities"]), bool(job.get("scores"))
    pred = np.argmax(s, axis=1) + (after if probabilities or scores else before)
    probs = (_probabilities(s) if probabilities
             else s.astype(np.float32) if scores else None)
    feats = np.diff(indptr[:n + 1])
    if b[9] is not None:  # (--ignore_linear's features: VW counts them)
        feats = feats + b[9][:n]
    table.block(p, lab, pred, weights[:n], hold, feats, probs, after,
                parse_notes(index, b[7], p))
    index.notes = []
    if out is not None:
        out.write(_p_lines(fast, b, probs, pred, after, names))
    if raw is not None and probs is None:  # (VW's -r is empty with --probabilities)
        out_raw = [_raw_line(r, f) for r, f in zip(s, before.tolist())]
        raw.write(_tagged(out_raw, b))


def _tags(b: tuple, n: int) -> list[str]:
    """The tags of parsed chunk ``b``'s first ``n`` examples."""
    tp, blob = b[5], b[6]
    return [bytes(blob[tp[i]:tp[i + 1]]).decode("utf-8", "surrogateescape")
            for i in range(n)]


def _tagged(text: list[str], b: tuple) -> str:
    """One line per example of ``b``, each with its tag after it, as VW writes them
    (``_oaa._write_lines``')."""
    if int(b[5][len(text)] - b[5][0]):
        text = [f"{ln} {t}" if t else ln for ln, t in zip(text, _tags(b, len(text)))]
    return "".join(ln + "\n" for ln in text)


def _p_lines(fast: Any, b: tuple, probs: np.ndarray | None, pred: np.ndarray,
             after: np.ndarray, names: list[str] | None) -> str:
    """VW's ``-p`` lines of ``--oaa`` (``_oaa._write_block``'s): each class's probability,
    else the predicted class, each with its tag."""
    from .._front._oaa import _class, _format
    from ._vwonline import _lines

    if probs is not None:
        return _tagged([_format(r, f, names) for r, f in zip(probs, after.tolist())], b)
    if names is not None:
        return _tagged([_class(v, names) for v in pred.tolist()], b)
    if len(pred) and 0 <= pred.min() and pred.max() < 1 << 24:  # (exact in float32)
        return _lines(fast, pred.astype(np.float64), b, 0)
    return _tagged([str(v) for v in pred.tolist()], b)


if __name__ == "__main__":
    from .._warm import as_command

    as_command()
    sys.exit(main(sys.argv[1:]))
