"""The recipe after the shard is read and the job joined, phase by phase.

:func:`learn` runs, on every worker alike: the compact space (the union of the workers'
features, its column order), the learner's start (the first pass's learner, a warm start
or zeros), the job's totals and the label checks, the online passes (mixed, averaged or
chained across workers), the batch phase (L-BFGS or CG), and the model. A :class:`Run`
carries what the phases share, so that each phase is a function of named fields rather
than of a dozen positional arguments. ``_train.train`` prepares the shard and the job and
calls :func:`learn`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, TextIO

import numpy as np

from .. import _pages
from .._errors import DataError
from .._malloc import hand_back_freed_memory
from ..communicator import Communicator
from ._batch._batchphase import batch_phase, new_spill
from ._combine._average import average_weights, union_bitmap
from ._combine._chain import Chain
from ._combine._mixing import Mixer
from ._holdout import holdout_period
from ._io._blocks import Blocks
from ._io._spill import Spill
from ._layout import HOT_PREFIX, column_order, first_block_features
from ._losses import LOSSES
from ._model import LinearModel
from ._modelnb import keep_learned
from ._names import opt
from ._online._firstpass import (
    GrowingWeights,
    TextPass,
    _mark,
    _set_bits,
    _set_bits_into,
    dense_threshold,
)
from ._online._onlinepass import COUNTED, LABELS, Weights, distinct_labels, online_pass
from ._online._progress import Progress
from ._online._state import CONTRACTION, GRAVITY
from ._online._update import new_state, sync_weights
from ._options import TrainOptions
from ._passes import Columns, EarlyStop, LabelScan, learning_blocks, union_features
from ._resume import initial_state, merged

__all__ = ["FirstPass", "Predictions", "Run", "Space", "hold_union_as_bits", "holdout_period",
           "learn", "progress_out"]

Predictions = Callable[[np.ndarray, "list[str] | None"], None]
Callback = Callable[[dict[str, Any]], None]


class FirstPass(NamedTuple):
    """A first online pass that learned from the text as it was parsed."""

    text: TextPass
    weights: GrowingWeights
    acc: np.ndarray
    prog: Progress
    t_on: float
    seconds: float
    mixes: int | None  # the workers' mixes during the pass (None: averaged at its end)


@dataclass
class Run:
    """What the phases of one training run share."""

    blocks: Blocks
    comm: Communicator
    opts: TrainOptions
    t0: float                       # when train() began
    t_read: float                   # seconds to read (or open) the shard
    initial: LinearModel | None     # the warm start
    predictions: Predictions | None
    callback: Callback | None
    first: FirstPass | None         # the first pass over text, when it has run
    spill: Spill | None = None      # the batch phase's copy of the shard
    examples: int = 0               # this worker's examples (once counted)
    averaged: bool = False          # the first pass's learners averaged in their dense rows
    info: dict[str, Any] = field(default_factory=dict)  # the model's info, as it grows

    @property
    def out(self) -> TextIO | None:
        return progress_out(self.opts, self.comm.rank)


@dataclass
class Space:
    """The compact space every worker learns in: the union of the workers' features
    (sorted hashes) and, where a pass maps blocks to it, its columns. While only the
    columns' lookup table is read (the online passes), the union may be held as a bitmap
    of 2**bits bits (``seen``, 2 MiB at ``-b 24``) instead of 4 bytes a feature."""

    union: np.ndarray | None
    columns: Columns | None
    seen: np.ndarray | None = None
    size: int = field(init=False)  # the union's features, however it is held

    def __post_init__(self) -> None:
        self.size = len(self.union) if self.union is not None else 0

    def the_union(self, room: np.ndarray | None = None) -> np.ndarray:
        """The union, rebuilt from the bitmap where it was held as one: into the start of
        ``room`` where given (a uint32 array of :func:`terascale._pages.zeros` that nothing
        reads any more, as long as the union at least: the columns' lookup table at the
        end of the passes), its pages past the union handed back; else a fresh array.

        The table's pages are resident already: rebuilt there, the union (44 MB at 11M
        features) faults in no fresh page, where on a virtual machine that hands freed
        memory back to its host a fresh page can cost 10 us or more to touch first
        (``docs/design/linear-memory.md``, "Fresh pages")."""
        if self.union is None:
            assert self.seen is not None
            if room is not None and room.dtype == np.uint32 and len(room) >= self.size:
                union = room[:self.size]
                _set_bits_into(self.seen, union)
                _pages.give_back(room, union.nbytes)
            else:
                union = _set_bits(self.seen)
            self.union, self.seen = union, None
        return self.union


def hold_union_as_bits(space: Space, bits: int, *, batch: bool) -> None:
    """Without a batch phase (which reads the union) nothing but the columns' lookup
    table reads it between the learner's start and the model, and the table maps every
    hashed index itself: the union is held as a bitmap of 2**``bits`` bits meanwhile (11M
    features at ``-b 24``: 42 MB less under the online passes from the cache)."""
    cols = space.columns
    if batch or cols is None or (cols.pos is None and cols.hash is None) or space.union is None:
        return
    seen = np.zeros(((1 << bits) + 7) // 8, np.uint8)
    _mark(space.union, seen)
    space.union, space.seen = None, seen
    cols.union = np.zeros(0, np.uint32)  # (read only where there is no table)


def progress_out(opts: TrainOptions, rank: int) -> TextIO | None:
    """Where this rank prints progress (rank 0 only; None: nowhere)."""
    import sys

    return (opts.progress_file or sys.stderr) if (opts.progress and rank == 0) else None


def learn(run: Run) -> LinearModel:
    """The recipe on this worker's shard, in the joined job (see the module's docstring)."""
    # with a batch phase to follow, the first online pass spills the blocks it has mapped
    # to compact columns, and no batch pass decodes the shard again (see _spill)
    run.spill = new_spill(run.opts) if run.opts.batch and run.opts.passes > 0 else None
    try:
        # the full-size arrays' pages faulted in on a core the job leaves idle, while this
        # thread fills the table and reads the data (_pages.prefaulting; the thread is
        # joined before the online passes end, before the batch phase frees its arrays)
        with _pages.prefaulting(_workers_here(run.comm)):
            space = _space(run)
            if run.first is None and run.initial is None:  # (fresh weights: the size only)
                hold_union_as_bits(space, run.blocks.bits, batch=bool(run.opts.batch))
            ws, scan = _start(run, space)
            online_l2 = _totals(run, scan)
            hold_union_as_bits(space, run.blocks.bits, batch=bool(run.opts.batch))
            _online_passes(run, space, ws, scan, online_l2)
        normalization = _batch(run, space, ws, scan) if run.opts.batch else None
        return _model(run, space, ws, normalization)
    finally:
        if run.spill is not None:
            run.spill.close()


def _workers_here(comm: Communicator) -> int:
    """The job's workers on this host (the launcher's count; all of them where it is
    unknown): a background thread only gets a core beyond theirs."""
    from .._env import read_env

    env = read_env()
    return env.local_size if env is not None and env.local_size else comm.size


def _space(run: Run) -> Space:
    """The union of the workers' features and its columns (a collective)."""
    opts, comm, first, blocks = run.opts, run.comm, run.first, run.blocks
    if first is not None:  # the first pass has run, in its own columns
        hand_back_freed_memory()  # the parser's blocks, before the rows move out
        first.text.release()  # its 2**bits table: Columns makes its own
    # (a collective on every rank, one that read its shard from a cache too)
    averaged = _average_rows(run)  # (the first pass's bitmap is the union's now)
    if first is not None:
        first.weights.shrink()  # dense rows: hand back what the feature list will need
        union = first.text.features()
        if not averaged:
            union = union_features(union, comm)
    else:
        union = union_features(blocks.features(), comm)
    # the union's lookup table (2**bits entries: 64 MiB to zero at -b 24) only where a later
    # pass or the batch phase maps blocks to it; one pass from text never does
    need = first is None or opts.passes > 1 or bool(opts.batch) or opts.chained(comm.size)
    order = None
    # frequent features first (_layout; a collective), not before a batch, nor on wide data
    # (past the dense switch, or past 2M features, -b 24's switch, at any -b: the few
    # frequent features are a small part of the misses, and the permutation costs 12 bytes
    # a feature and a copy of every array at the end: 10 s of a 27 s pass from the cache
    # with 2 workers at -b 28 and 17M features, loaded host); the union is the same on
    # every rank, so all ranks decide alike
    if not opts.batch and len(union) <= dense_threshold(min(blocks.bits, 24)):
        hot = np.zeros(0, np.uint32)
        if need:
            hot = (first.text.columns.indices()[:HOT_PREFIX] if first is not None
                   else first_block_features(blocks))
        order = column_order(union, need, hot, comm)
    return Space(union, Columns(union, blocks.bits, order) if need else None)


def _average_rows(run: Run) -> bool:
    """Where every worker's first pass ended in dense rows (``2**bits`` rows by hashed
    index, :class:`._online._firstpass.GrowingWeights`) and the pass is to be averaged at
    its end, average the rows themselves, before any union is built, and make the
    first pass's bitmap of features the union's (a collective; whether it ran).

    A feature a worker never saw has zeros in its row there (weight, adaptive sum,
    normalizer), as it has in the union's columns the other way, and the averages are
    elementwise: the same bits as averaging in the union with two workers (a sum of two
    is the same in either order) and on one host (the shared-memory allreduce sums in
    rank order wherever a feature sits); across hosts with three or more, a ring's order
    depends on a feature's position, so the model is the same on every rank and run but
    may differ in the last bits from the union's. What it
    saves is the end of the pass's peak: no sorted feature list per worker, no gathered
    lists, no union beside the rows, no learner moved into the union before averaging
    (``docs/design/linear-memory.md``)."""
    opts, comm, first = run.opts, run.comm, run.first
    # only what every rank knows alike decides before the collective: a worker that read
    # its shard from a cache ran no first pass, yet the others' allreduce waits for it
    if comm.size == 1 or opts.chained(comm.size) or opts.mix_every(comm.size):
        return False
    rows = first is not None and first.weights.rows is not None
    if not comm.allreduce(np.array([rows]), op="min")[0]:  # (bool: and)
        return False
    assert first is not None
    ws = first.weights
    seen = first.text.columns.seen
    assert seen is not None
    if ws.state[CONTRACTION] != 1.0 or ws.state[GRAVITY] != 0.0:  # (as _online_passes)
        sync_weights(ws.w, ws.state)
    average_weights(comm, ws.w, ws.g2, ws.nrm, ws.state, opts.averaging)
    union_bitmap(comm, seen)
    first.text.columns.forget()
    hand_back_freed_memory()  # the collectives' buffers, before the union's arrays
    run.averaged = True
    return True


def _compact(a: np.ndarray) -> np.ndarray:
    """``a`` in float32 where that loses no bit (a learner's adaptive state always is,
    unless it came from an average over workers), else ``a`` itself."""
    if a.dtype == np.float32:
        return a
    f = a.astype(np.float32)
    return f if np.array_equal(f, a) else a


def _start(run: Run, space: Space) -> tuple[Weights, LabelScan]:
    """The learner to start the passes from, in the space's columns, and the label scan."""
    opts, first, columns = run.opts, run.first, space.columns
    # float32 is exact for one learner's arrays, and holds the workers' averages as VW's
    # own allreduce does (each average is taken in float64 a chunk at a time, _average,
    # and rounded once): no float64 copy of the weight space; float64 only where the
    # workers mix during a pass (its sums, _mixing)
    mixes = opts.mix_every(run.comm.size) > 0
    dtype = np.float64 if mixes else np.float32
    fresh = False
    if first is not None:
        scan = first.text.scan
        # huge pages where later passes read the weights at random (_pages)
        w, g2, nrm = first.weights.in_union(space.the_union(), dtype,
                                            huge=columns is not None)
        state = first.weights.state
    else:
        if run.initial is None:  # zeros, in any column order (untouched pages cost nothing)
            # on huge pages (the passes read them at random), faulted in on a spare core
            # while the labels are scanned and the pass starts (_pages.prefaulting)
            w, g2, nrm = (_pages.zeros(space.size, dtype, huge=True, prefault=opts.passes > 0)
                          for _ in range(3))
            state, fresh = new_state(), True
        else:
            w, g2, nrm, state = initial_state(run.initial, space.the_union())
        scan = LabelScan(run.blocks, holdout_period(opts))
    if columns is not None and not fresh:
        w, g2, nrm = columns.to_columns(w, g2, nrm)
    if not mixes:  # nothing but the learner and the averages write them: float32
        w, g2, nrm = _compact(w), _compact(g2), _compact(nrm)
    run.info.update(workers=run.comm.size, features=space.size, read_s=run.t_read)
    if first is not None:
        run.info["first_pass_s"] = first.seconds  # parsing, caching and learning, overlapped
    return Weights(w, g2, nrm, state), scan


def _totals(run: Run, scan: LabelScan) -> float:
    """The job's totals (examples, features, skipped lines, training weight), the label
    checks every rank makes alike, and the online passes' L2 (scaled by the weight)."""
    opts, blocks, comm, out = run.opts, run.blocks, run.comm, run.out
    st = blocks.stats()
    run.examples = st.examples
    # logistic and hinge read label > 0 as positive: LIBSVM's 2/4 or 1/2 would all be one
    # class and train a constant model without a word
    odd = scan.odd if opts.labels_by_sign else scan.odd[:0]
    totals = comm.allreduce(np.array([st.examples, st.features, st.skipped,
                                      scan.train_weight, scan.labelled, len(odd)],
                                     np.float64))
    what = ", ".join(blocks.sources[:3]) or "the data"
    # (VW's command line learns from none and predicts each one: `-i MODEL -p P` on
    # unlabelled data is how VW users predict without -t)
    if totals[4] == 0 and not (opts.vw_text and not opts.batch):  # (all ranks alike)
        raise DataError(f"{what}: no labelled examples to train on ({int(totals[0])} "
                        f"examples, {int(totals[2])} bad lines skipped)")
    if totals[5] > 0:
        seen = ", ".join(f"{v:g}" for v in odd[:5]) or "others on other workers"
        raise DataError(f"{what}: {opt('loss', opts.loss)} needs labels -1/+1 or 0/1, the data "
                        f"has {seen} (recode them, or {opt('loss', 'squared')} for regression)")
    run.info.update(examples=int(totals[0]), feature_count=int(totals[1]),
                    skipped=int(totals[2]))
    if out and totals[2]:
        print(f"skipped {int(totals[2])} bad lines (--skip-bad)", file=out)
    return opts.online_l2(float(totals[3]))


def _online_passes(run: Run, space: Space, ws: Weights, scan: LabelScan,
                   online_l2: float) -> None:
    """``opts.passes`` online passes (the first one may have run already, from the text),
    combined across workers after each: mixed during it, averaged, or chained."""
    opts, comm, first, info, out = run.opts, run.comm, run.first, run.info, run.out
    blocks, columns, callback = run.blocks, space.columns, run.callback
    period = holdout_period(opts)
    prog = first.prog if first is not None else Progress(out)
    marks: list[list[float]] = []  # where the progress table was at the end of each pass
    own = [0.0]  # this worker's loss over the passes so far
    prog.holdout = bool(period)
    t_on = first.t_on if first is not None else time.perf_counter()
    # VW stops online passes early on the holdout loss (without a batch phase to follow)
    stop = EarlyStop(opts.patience) if period and opts.passes > 1 and not opts.batch else None
    every = opts.mix_every(comm.size)
    chain = Chain(comm, run.examples) if opts.chained(comm.size) else None
    rate = np.float32(opts.learning_rate)  # VW's eta, times the decay after each pass (float)
    for p in range(opts.passes):
        if p > 0 and opts.decay_learning_rate != 1.0:
            rate = np.float32(rate * np.float32(opts.decay_learning_rate))
            opts = replace(opts, learning_rate=float(rate))
        # (a first pass that ran before the job was joined is averaged at its end)
        mixer = (Mixer(comm, every, opts.power_t, sparse=not (opts.l1 or online_l2))
                 if every > 0 and not (p == 0 and first is not None) else None)

        def one_pass(p: int = p, mixer: Mixer | None = mixer,
                     opts: TrainOptions = opts) -> np.ndarray:
            if p == 0 and first is not None:
                if first.mixes is not None:
                    info["mixes"] = first.mixes
                return first.acc
            if p == 0:
                prog.header()
            assert columns is not None
            return online_pass(learning_blocks(blocks, columns, period,
                                               chain.offset if chain else 0),
                               ws, opts.online_kind(), opts, online_l2, p == 0, out, prog,
                               run.predictions,
                               run.spill if p == 0 else None, mixer)

        acc = chain.run(ws, one_pass) if chain is not None else one_pass()
        if mixer is not None:
            info["mixes"] = info.get("mixes", 0) + mixer.mixes
        elif chain is not None:
            pass  # one learner, handed on: L1/L2 stay lazy across passes, as with one worker
        elif comm.size > 1 and not (p == 0 and (run.averaged or (
                first is not None and first.mixes is not None))):
            # averaging needs plain weights; one worker keeps L1/L2 lazy across passes, as
            # VW does (its end of pass folds them in only without --save_resume, VW's
            # default), and folds them in after the last pass
            sync_weights(ws.w, ws.state)
            average_weights(comm, ws.w, ws.g2, ws.nrm, ws.state, opts.averaging)
        tot = comm.allreduce(np.concatenate([acc[:6], acc[COUNTED:COUNTED + 4]]))
        if comm.size == 1:  # (VW's sum_loss, labelled, unlabelled weight and t now)
            tot = np.concatenate([tot, prog.sums[:2], prog.seen_sums])
        info.setdefault("pass_totals", []).append([float(v) for v in tot])
        own[0] += float(acc[0])
        # (-n N: rank 0's loss since its table's last line and the other workers' loss;
        # without a table VW's one run's, the job's loss since the line at 1)
        since = float(prog.since[0]) + (sum(t[0] for t in info["pass_totals"]) - own[0]
                                        if comm.size > 1 else 0.0)
        marks.append(prog.mark(since))
        if p == 0:  # the distinct labels (up to LABELS) of every worker's shard
            mine = acc[COUNTED + 4:COUNTED + 4 + LABELS]
            shards = np.ravel(comm.allgather(mine) if comm.size > 1 else mine)
            info["labels"] = distinct_labels([], shards[~np.isnan(shards)])
        if out and not opts.vw_text:
            hold_s = f", holdout loss {tot[2] / tot[3]:.6f}" if tot[3] else ""
            how = (f"averaged every {every} examples" if "mixes" in info
                   else "chained" if chain is not None else f"{opts.averaging} averaging")
            print(f"pass {p + 1}: average loss {tot[0] / max(tot[1], 1e-300):.6f} over "
                  f"{int(tot[4])} examples{hold_s} ({comm.size} workers, {how})", file=out)
        if p == 0 and run.spill is not None:
            run.spill.seal()
        info.setdefault("online_loss", []).append(float(tot[0] / max(tot[1], 1e-300)))
        if callback is not None:
            callback({"phase": "online", "pass": p + 1, "loss": info["online_loss"][-1],
                      "examples": int(tot[4]),
                      **({"holdout_loss": float(tot[2] / tot[3])} if tot[3] else {})})
        if stop is not None and stop.end_pass(tot[2], tot[3], ws.w, ws.g2, ws.nrm, ws.state):
            info["online_passes"] = p + 1 - stop.patience
            if out and not opts.vw_text:
                print(f"holdout loss did not improve for {stop.patience} passes: stopped, "
                      f"the model is pass {p + 1 - stop.patience}'s", file=out)
            break
    if not (opts.vw_text and comm.size == 1 and not opts.batch):
        sync_weights(ws.w, ws.state)
    # (else, as VW's save_resume learner, the lazy L1/L2 stay in the state: the model
    # keeps its weights unapplied, as VW's model does, and predicts with them applied)
    # where VW's progress table stopped (the counters its model keeps): the next line's
    # weight, the loss since the last line (VW's sum) and the labelled weight at it
    # (of the pass whose model is kept where the holdout stopped the passes early)
    info["vw_progress"] = (marks[info.get("online_passes", len(marks)) - 1] if marks
                           else prog.mark())
    info["online_s"] = time.perf_counter() - t_on


def _after(callback: Callback | None, passes: int) -> Callback | None:
    """The batch phase's metrics numbered after the ``passes`` online passes."""
    if callback is None:
        return None
    return lambda m: callback(dict(m, **{"pass": passes + m["pass"]}))


def _batch(run: Run, space: Space, ws: Weights, scan: LabelScan) -> Any:
    """L-BFGS or CG from the online weights (``ws.w`` becomes the batch phase's); returns
    the standardization the model keeps (None: none)."""
    t_b = time.perf_counter()
    assert space.columns is not None
    # the batch phase needs neither the adaptive sums nor the normalizers (nor does its
    # model keep them): their memory goes to L-BFGS
    ws.g2 = ws.nrm = np.zeros(0, np.float32)
    w, binfo = batch_phase(run.blocks, space.columns, holdout_period(run.opts),
                           scan.train_weight, ws.w, run.comm, run.opts, LOSSES[run.opts.loss],
                           run.out, run.spill, callback=_after(
                               run.callback, len(run.info.get("online_loss", []))))
    ws.w = w
    normalization = binfo.pop("normalization", None)
    run.info.update(binfo)
    run.info["batch_s"] = time.perf_counter() - t_b
    return normalization


def _model(run: Run, space: Space, ws: Weights, normalization: Any) -> LinearModel:
    """The model, in the union's order, with the learner's state for a warm start (after
    online passes only)."""
    opts, columns = run.opts, space.columns
    run.info["train_s"] = time.perf_counter() - run.t0
    room = None
    if columns is not None:  # the lookup table (4 * 2**bits) or hashed map: its pages take
        # the union where it is rebuilt from bits, and it is freed before the model's arrays
        room = (columns.pos if columns.pos is not None else
                columns.hash.table.view(np.uint32) if columns.hash is not None else None)
        columns.pos = None
        columns.hash = None
    union = space.the_union(room)
    del room
    w, g2, nrm = ws.w, ws.g2, ws.nrm
    if columns is not None:
        w, g2, nrm = columns.to_union(w), columns.to_union(g2), columns.to_union(nrm)
    # the model keeps float32 (LinearModel rounds to it): rounded here one array at a time,
    # each float64 one freed before the next is rounded, instead of all three copied at once
    ws.w = ws.g2 = ws.nrm = np.zeros(0, np.float32)  # (it holds the three arrays too)
    w = w.astype(np.float32, copy=False)
    g2 = g2.astype(np.float32, copy=False)
    nrm = nrm.astype(np.float32, copy=False)
    idx, w, adaptive = merged(run.initial, union, w,
                              None if opts.batch else (g2, nrm, ws.state))
    # the features the model keeps moved to the front in place (these arrays are this
    # run's own: nothing reads them after the model), not copied into fresh ones
    if adaptive is None:
        n = keep_learned(idx, w, w[:0], w[:0])
    else:
        n = keep_learned(idx, w, adaptive[0], adaptive[1])
        adaptive = (adaptive[0][:n], adaptive[1][:n], adaptive[2])
    idx, w = idx[:n], w[:n]
    model = LinearModel(indices=idx, weights=w, parse=opts.parse_options(), loss=opts.loss,
                        info=run.info, adaptive=adaptive)
    model.normalization = normalization
    return model
