"""``train()``: the whole Terascale recipe on this worker's shard.

1. Stream the shard into the on-disk cache, chunk by chunk (before joining the job:
   delayed initialization, Agarwal et al. JMLR 2014 sec. 3). Every later pass reads the
   cache block by block (:mod:`._blocks`): memory does not grow with the data. Where it
   can, the first online pass is that reading: it learns from the blocks as they are
   parsed while the cache is written in the background (:mod:`._firstpass`).
2. Join the job (``terascale.init()``) and agree on the hashed features present anywhere
   (one allgather of the sorted index sets the cache keeps). All later work, and every
   allreduce, runs on this compact index space instead of all 2**bits weights: with
   ``-b 24`` and 10^4..10^6 live features that is 10-1000x fewer bytes on the wire, with
   the same result.
3. ``passes`` online passes (VW's adaptive normalized invariant SGD); with 2+ workers the
   learners are mixed every ``average_every`` examples during each pass (:mod:`._mixing`;
   such workers join the job before the first pass, which still learns as it parses), or
   averaged at the end of each pass (uniform or weighted by the adaptive sums), or they
   learn one after another from one learner handed on (``average="chain"``, :mod:`._chain`).
4. Optionally L-BFGS or preconditioned CG over all data, warm-started from the averaged
   online weights; gradients and loss are summed with one allreduce per pass.

Every rank ends with bitwise-identical weights.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any, NamedTuple, TextIO

import numpy as np

from .._errors import ConfigError, DataError
from .._malloc import keep_freed_memory
from ..communicator import Communicator
from ._batch._batchphase import batch_phase, new_spill
from ._combine._average import average_weights
from ._combine._chain import Chain
from ._combine._mixing import Mixer
from ._io._blocks import Blocks, as_blocks
from ._io._dataset import Dataset, ParseOptions
from ._io._shard import job_rank, shard_blocks
from ._io._spill import Spill
from ._layout import HOT_PREFIX, column_order, first_block_features
from ._losses import LOSSES
from ._model import LinearModel
from ._names import opt
from ._online._firstpass import GrowingWeights, TextMixer, TextPass, dense_threshold
from ._online._onlinepass import Weights, online_pass
from ._online._progress import Progress
from ._online._update import new_state, sync_weights
from ._options import TrainOptions
from ._passes import Columns, EarlyStop, LabelScan, learning_blocks, union_features
from ._resume import initial_state, merged

__all__ = ["TrainOptions", "train"]  # TrainOptions lives in _options

Predictions = Callable[[np.ndarray, "list[str] | None"], None]


def train(data: Dataset | Blocks | Sequence[str] | str, *, comm: Communicator | None = None,
          initial: LinearModel | None = None, predictions: Predictions | None = None,
          callback: Callable[[dict[str, Any]], None] | None = None,
          **options: Any) -> LinearModel:
    """Train on this worker's shard (a Dataset, Blocks, or files sharded over the job).

    With ``comm=None`` the shard is parsed and cached first and only then is the job
    joined: the communicator this process already opened (``terascale.init()`` by the user
    or by ``terascale.torch``) is reused and left open; otherwise ``terascale.init()``
    opens one, which is closed at the end.

    Parameters
    ----------
    data
        This worker's shard: a :class:`Dataset`, :class:`Blocks` (:func:`load_shard`), a
        list of text lines, or file path(s), which are sharded over the job's workers.
    comm
        The job's communicator (default None: see above).
    initial
        Warm-start from this model (VW's ``-i``): its weights, and its adaptive state when
        it was saved after online passes, so that training continues as one run would; its
        parse options (bits, ``-q``, format, ...) are used, and given ones must agree;
        weights of features the new data lacks are kept. Default None: from zero.
    predictions
        ``predictions(p, tags)`` is called with the progressive predictions (VW's ``-p``
        during training) of each block of examples, in input order, before learning from
        them: raw scores, clipped as VW clips them, every pass; ``tags`` are the examples'
        VW tags, or None when the data has none. Default None.
    callback
        ``callback(metrics)`` is called on every worker as training goes, with the job's
        totals (the same numbers on every rank): after each online pass ``{"phase":
        "online", "pass": p, "loss": ..., "examples": ...}`` (and ``"holdout_loss"`` when
        examples are held out), after each L-BFGS/CG iteration ``{"phase": "bfgs"`` or
        ``"cg", "iteration": i, "pass": p, "objective": ..., "gradient_norm": ...}``. Use
        it to report progress to an engine (Ray's metrics, a dashboard) while the job
        runs; it must be quick, and an exception it raises ends training on that worker.
    **options
        The fields of :class:`TrainOptions` (``bits``, ``passes``, ``bfgs``, ``l2``,
        ``loss``...); an unknown name is a ConfigError.
    """
    names = {f.name for f in fields(TrainOptions)}
    bad = sorted(set(options) - names)
    if bad:
        raise ConfigError(f"unknown option(s) of terascale.linear.train: {', '.join(bad)}")
    for k in ("quadratic", "cubic", "interactions", "categorical", "ignore", "keep",
              "ignore_linear"):
        if isinstance(options.get(k), str):
            options[k] = (options[k],)
        if k in options:
            options[k] = tuple(options[k])
    sources: list[tuple[str, dict[str, Any]]] = []
    if isinstance(data, (Dataset, Blocks)):  # parse options come with the data
        sources.append(("the data was parsed", (data.parse or ParseOptions(bits=data.bits))
                        .to_dict()))
    if initial is not None:
        if not isinstance(initial, LinearModel):
            raise ConfigError(f"{opt('initial')} must be a LinearModel (LinearModel.load), "
                              f"not {type(initial).__name__}")
        sources.append(("the initial model was trained", initial.parse.to_dict()))
        options.setdefault("loss", initial.loss)
    for what, src in sources:
        for k, v in src.items():
            v = tuple(v) if isinstance(v, list) else v
            if k in options and options[k] != v:
                raise ConfigError(f"{opt(k, options[k])}: {what} with {opt(k, v)}")
            options[k] = v
    opts = TrainOptions(**options)
    keep_freed_memory()  # the blocks' arrays are reused, not mapped afresh (_malloc)
    scratch: list[str] = []  # directories of this run's own, removed when it ends
    try:
        return _prepare_and_train(data, comm, initial, predictions, opts, scratch,
                                  callback)
    finally:
        for d in scratch:
            shutil.rmtree(d, ignore_errors=True)


def _prepare_and_train(data: Dataset | Blocks | Sequence[str] | str,
                       comm: Communicator | None, initial: LinearModel | None,
                       predictions: Predictions | None, opts: TrainOptions,
                       scratch: list[str],
                       callback: Callable[[dict[str, Any]], None] | None = None
                       ) -> LinearModel:
    t0 = time.perf_counter()
    rank, size = (comm.rank, comm.size) if comm is not None else job_rank()
    batch, warm = bool(opts.batch), initial is not None
    if isinstance(data, (Dataset, Blocks)):
        blocks = as_blocks(data)
    else:
        # in a chain only worker 0 learns as it parses; the others cache their shards
        # meanwhile (into a cache of this run's own where none was asked for) and learn
        # from them when their turns come
        later = opts.chained(size) and rank > 0
        lazy = TextPass.lazy(opts.parse_options(), batch=batch, warm=warm,
                             passes=opts.passes) and not later
        cache_dir = opts.cache_root()
        if later and cache_dir == "":
            cache_dir = tempfile.mkdtemp(prefix="terascale-chain-")
            scratch.append(cache_dir)
        blocks = shard_blocks(data, rank=rank, size=size, cache_dir=cache_dir,
                              lazy=lazy, **opts.parse_options().__dict__)
    t_read = time.perf_counter() - t0
    # text to parse: the first pass learns as it is parsed, before the job is joined;
    # workers that average during the pass (_mixing) join first, the pass needs the job
    text = TextPass.wanted(blocks, batch=batch, warm=warm, passes=opts.passes)
    mixing = opts.mix_every(size) > 0
    first = None
    if text and not mixing:
        first = _text_pass(blocks, opts, rank, predictions)
    own = False
    if comm is None:
        from .._init import init, joined

        comm = joined()
        if comm is None:
            comm, own = init(), True
    try:
        if text and first is None:
            first = _text_pass(blocks, opts, comm.rank, predictions, comm)
        return _train(blocks, comm, opts, t0, t_read, initial, predictions, first, callback)
    finally:
        if own:
            comm.close()


def _after(callback: Callable[[dict[str, Any]], None] | None, passes: int
           ) -> Callable[[dict[str, Any]], None] | None:
    """The batch phase's metrics numbered after the ``passes`` online passes."""
    if callback is None:
        return None
    return lambda m: callback(dict(m, **{"pass": passes + m["pass"]}))


def _compact(a: np.ndarray) -> np.ndarray:
    """``a`` in float32 where that loses no bit (a learner's adaptive state always is,
    unless it came from an average over workers), else ``a`` itself."""
    if a.dtype == np.float32:
        return a
    f = a.astype(np.float32)
    return f if np.array_equal(f, a) else a


def _period(opts: TrainOptions) -> int:
    """Every how many examples one is held out (0: none; -N: every one after the first N,
    VW's --holdout_after, see ``_passes.holdout_mask``)."""
    if opts.holdout_after:
        return -opts.holdout_after
    frac = opts.holdout_fraction
    return max(2, round(1.0 / frac)) if frac > 0 else 0


def _out(opts: TrainOptions, rank: int) -> TextIO | None:
    return (opts.progress_file or sys.stderr) if (opts.progress and rank == 0) else None


class _First(NamedTuple):
    text: TextPass
    weights: GrowingWeights
    acc: np.ndarray
    prog: Progress
    t_on: float
    seconds: float
    mixes: int | None  # the workers' mixes during the pass (None: averaged at its end)


def _text_pass(blocks: Blocks, opts: TrainOptions, rank: int,
               predictions: Predictions | None, comm: Communicator | None = None) -> _First:
    """The first online pass, learning from the text as it is parsed (:mod:`._firstpass`);
    with ``comm`` the workers mix their learners during it (:mod:`._mixing`)."""
    t_on = time.perf_counter()
    out = _out(opts, rank)
    every = opts.mix_every(comm.size) if comm is not None else 0
    text = TextPass(blocks, _period(opts), dense=comm is None or not every)
    l2 = opts.online_l2(0.0)
    mixer = (TextMixer(comm, every, opts.power_t, text.columns, sparse=not (opts.l1 or l2))
             if comm and every else None)
    ws = GrowingWeights(text.columns, new_state(), compact=mixer is None)
    prog = Progress(out)
    prog.header()
    acc = online_pass(text.items(), ws, opts.online_kind(), opts, l2, True,
                      out, prog, predictions, mixer=mixer)
    return _First(text, ws, acc, prog, t_on, time.perf_counter() - t_on,
                  mixer.mixes if mixer is not None else None)


def _train(blocks: Blocks, comm: Communicator, opts: TrainOptions, t0: float, t_read: float,
           initial: LinearModel | None, predictions: Predictions | None,
           first: _First | None = None,
           callback: Callable[[dict[str, Any]], None] | None = None) -> LinearModel:
    # with a batch phase to follow, the first online pass spills the blocks it has mapped
    # to compact columns, and no batch pass decodes the shard again (see _spill)
    spill = new_spill(opts) if opts.batch and opts.passes > 0 else None
    try:
        return _learn(blocks, comm, opts, t0, t_read, initial, predictions, spill, first,
                      callback)
    finally:
        if spill is not None:
            spill.close()


def _learn(blocks: Blocks, comm: Communicator, opts: TrainOptions, t0: float, t_read: float,
           initial: LinearModel | None, predictions: Predictions | None,
           spill: Spill | None, first: _First | None,
           callback: Callable[[dict[str, Any]], None] | None = None) -> LinearModel:
    out = _out(opts, comm.rank)
    kind = LOSSES[opts.loss]
    if first is not None:  # the first pass has run, in its own columns
        first.text.release()  # its 2**bits table: Columns makes its own
        first.weights.shrink()  # dense rows: hand back what the feature list will need
        union = union_features(first.text.features(), comm)
    else:
        union = union_features(blocks.features(), comm)
    # the union's lookup table (2**bits entries: 64 MiB to zero at -b 24) only where a later
    # pass or the batch phase maps blocks to it; one pass from text never does
    chained = opts.chained(comm.size)
    need = first is None or opts.passes > 1 or bool(opts.batch) or chained
    order = None
    # frequent features first (_layout; a collective), not before a batch, nor on wide data
    # (past the dense switch the few frequent features are a small part of the misses, and
    # the permutation costs 12 bytes a feature and a copy of every array at the end); the
    # union is the same on every rank, so all ranks decide alike
    if not opts.batch and len(union) <= dense_threshold(blocks.bits):
        hot = np.zeros(0, np.uint32)
        if need:
            hot = (first.text.columns.indices()[:HOT_PREFIX] if first is not None
                   else first_block_features(blocks))
        order = column_order(union, need, hot, comm)
    columns = Columns(union, blocks.bits, order) if need else None
    period = _period(opts)
    st = blocks.stats()
    # float32 is exact for one learner's arrays, and holds the workers' averages as VW's
    # own allreduce does (each average is taken in float64 a chunk at a time, _average,
    # and rounded once): no float64 copy of the weight space; float64 only where the
    # workers mix during a pass (its sums, _mixing)
    mixes = opts.mix_every(comm.size) > 0
    dtype = np.float64 if mixes else np.float32
    fresh = False
    if first is not None:
        scan = first.text.scan
        w, g2, nrm = first.weights.in_union(union, dtype)
        state = first.weights.state
    else:
        scan = LabelScan(blocks, period)
        if initial is None:  # zeros, in any column order (untouched pages cost nothing)
            w, g2, nrm = (np.zeros(len(union), dtype) for _ in range(3))
            state, fresh = new_state(), True
        else:
            w, g2, nrm, state = initial_state(initial, union)
    if columns is not None and not fresh:
        w, g2, nrm = columns.to_columns(w, g2, nrm)
    if not mixes:  # nothing but the learner and the averages write them: float32
        w, g2, nrm = _compact(w), _compact(g2), _compact(nrm)
    info: dict[str, Any] = {"workers": comm.size, "features": len(union), "read_s": t_read}
    if first is not None:
        info["first_pass_s"] = first.seconds  # parsing, caching and learning, overlapped
    # logistic and hinge read label > 0 as positive: LIBSVM's 2/4 or 1/2 would all be one
    # class and train a constant model without a word
    odd = scan.odd if opts.labels_by_sign else scan.odd[:0]
    totals = comm.allreduce(np.array([st.examples, st.features, st.skipped,
                                      scan.train_weight, scan.labelled, len(odd)],
                                     np.float64))
    what = ", ".join(blocks.sources[:3]) or "the data"
    if totals[4] == 0:  # every rank sees the same totals, so all raise alike
        raise DataError(f"{what}: no labelled examples to train on ({int(totals[0])} "
                        f"examples, {int(totals[2])} bad lines skipped)")
    if totals[5] > 0:
        seen = ", ".join(f"{v:g}" for v in odd[:5]) or "others on other workers"
        raise DataError(f"{what}: {opt('loss', opts.loss)} needs labels -1/+1 or 0/1, the data "
                        f"has {seen} (recode them, or {opt('loss', 'squared')} for regression)")
    online_l2 = opts.online_l2(float(totals[3]))
    info.update(examples=int(totals[0]), feature_count=int(totals[1]), skipped=int(totals[2]))
    if out and totals[2]:
        print(f"skipped {int(totals[2])} bad lines (--skip-bad)", file=out)
    prog = first.prog if first is not None else Progress(out)
    t_on = first.t_on if first is not None else time.perf_counter()
    ws = Weights(w, g2, nrm, state)
    # VW stops online passes early on the holdout loss (without a batch phase to follow)
    stop = EarlyStop(opts.patience) if period and opts.passes > 1 and not opts.batch else None
    every = opts.mix_every(comm.size)
    chain = Chain(comm, st.examples) if chained else None
    for p in range(opts.passes):
        # (a first pass that ran before the job was joined is averaged at its end)
        mixer = (Mixer(comm, every, opts.power_t, sparse=not (opts.l1 or online_l2))
                 if every > 0 and not (p == 0 and first is not None) else None)

        def learn(p: int = p, mixer: Mixer | None = mixer) -> np.ndarray:
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
                               predictions,
                               spill if p == 0 else None, mixer)

        acc = chain.run(ws, learn) if chain is not None else learn()
        if mixer is not None:
            info["mixes"] = info.get("mixes", 0) + mixer.mixes
        elif chain is not None:
            pass  # one learner, handed on: L1/L2 stay lazy across passes, as with one worker
        elif comm.size > 1 and not (p == 0 and first is not None and first.mixes is not None):
            # averaging needs plain weights; one worker keeps L1/L2 lazy across passes, as
            # VW does (its end of pass folds them in only without --save_resume, VW's
            # default), and folds them in after the last pass
            sync_weights(w, state)
            average_weights(comm, w, g2, nrm, state, opts.averaging)
        tot = comm.allreduce(acc[:6].copy())
        info.setdefault("pass_totals", []).append([float(v) for v in tot])
        if out and not opts.vw_text:
            hold_s = f", holdout loss {tot[2] / tot[3]:.6f}" if tot[3] else ""
            how = (f"averaged every {every} examples" if "mixes" in info
                   else "chained" if chain is not None else f"{opts.averaging} averaging")
            print(f"pass {p + 1}: average loss {tot[0] / max(tot[1], 1e-300):.6f} over "
                  f"{int(tot[4])} examples{hold_s} ({comm.size} workers, {how})", file=out)
        if p == 0 and spill is not None:
            spill.seal()
        info.setdefault("online_loss", []).append(float(tot[0] / max(tot[1], 1e-300)))
        if callback is not None:
            callback({"phase": "online", "pass": p + 1, "loss": info["online_loss"][-1],
                      "examples": int(tot[4]),
                      **({"holdout_loss": float(tot[2] / tot[3])} if tot[3] else {})})
        if stop is not None and stop.end_pass(tot[2], tot[3], w, g2, nrm, state):
            info["online_passes"] = p + 1 - stop.patience
            if out and not opts.vw_text:
                print(f"holdout loss did not improve for {stop.patience} passes: stopped, "
                      f"the model is pass {p + 1 - stop.patience}'s", file=out)
            break
    sync_weights(w, state)
    info["online_s"] = time.perf_counter() - t_on
    normalization = None
    if opts.batch:
        t_b = time.perf_counter()
        assert columns is not None
        # the batch phase needs neither the adaptive sums nor the normalizers (nor does its
        # model keep them): their memory goes to L-BFGS
        ws.g2 = ws.nrm = g2 = nrm = np.zeros(0, np.float32)
        w, binfo = batch_phase(blocks, columns, period, scan.train_weight, w, comm, opts,
                               kind, out, spill, callback=_after(
                                   callback, len(info.get("online_loss", []))))
        normalization = binfo.pop("normalization", None)
        info.update(binfo)
        info["batch_s"] = time.perf_counter() - t_b
    info["train_s"] = time.perf_counter() - t0
    if columns is not None:
        w, g2, nrm = columns.to_union(w), columns.to_union(g2), columns.to_union(nrm)
    # the model keeps float32 (LinearModel rounds to it): rounded here one array at a time,
    # each float64 one freed before the next is rounded, instead of all three copied at once
    ws.w = ws.g2 = ws.nrm = np.zeros(0, np.float32)  # (it holds the three arrays too)
    w = w.astype(np.float32, copy=False)
    g2 = g2.astype(np.float32, copy=False)
    nrm = nrm.astype(np.float32, copy=False)
    # after online passes only, the model keeps the learner's state for a warm start
    idx, w, adaptive = merged(initial, union, w, None if opts.batch else (g2, nrm, state))
    model = LinearModel(indices=idx, weights=w, parse=opts.parse_options(), loss=opts.loss,
                        info=info, adaptive=adaptive)
    model.normalization = normalization
    return model
