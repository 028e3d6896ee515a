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

Every rank ends with bitwise-identical weights. This module prepares the shard and the
job (steps 1 and the first pass); the phases after the join are :mod:`._recipe`'s.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import Any

import numpy as np

from .._errors import ConfigError
from .._malloc import keep_freed_memory
from ..communicator import Communicator
from ._combine._average import union_bitmap
from ._io._blocks import Blocks, ChainBlocks, as_blocks
from ._io._cache import CacheBlocks, PendingCache
from ._io._dataset import Dataset, ParseOptions
from ._io._shard import job_rank, shard_blocks
from ._model import LinearModel
from ._names import opt
from ._online._firstpass import GrowingWeights, TextMixer, TextPass, _mark, count_bits
from ._online._onlinepass import online_pass
from ._online._progress import Progress
from ._online._update import new_state
from ._options import TrainOptions
from ._recipe import FirstPass, Predictions, Run, holdout_period, learn, progress_out

__all__ = ["TrainOptions", "train"]  # TrainOptions lives in _options

_period = holdout_period  # (terascale vw --audit's holdout rule)


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
        VW tags, or None when the data has none. A callable with an attribute ``raw``
        that is true is called ``predictions(p, tags, raw)``, ``raw`` the scores before
        that clip (VW's ``-r``). Default None.
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
    # a cache of wide data: its first pass learns in the dense rows from the start (a
    # shard wide by itself, before the job is joined; one wide with the others', after)
    cacheable = (not mixing and not opts.chained(size)
                 and TextPass.lazy(opts.parse_options(), batch=batch, warm=warm,
                                   passes=opts.passes))
    wide = cacheable and not text and _wide_cache(blocks)
    first = None
    if (text or wide) and not mixing:
        first = _text_pass(blocks, opts, rank, predictions, dense_now=wide)
    own = False
    if comm is None:
        from .._init import init, joined

        comm = joined()
        if comm is None:
            comm, own = init(), True
    try:
        if mixing and comm.size > 1:
            # the first pass mixes (a collective): where any worker parses text, every
            # worker runs it, one whose shard is a cache over its cache
            text = bool(comm.allreduce(np.array([text]), op="max")[0])  # (bool: or)
        if text and first is None:
            first = _text_pass(blocks, opts, comm.rank, predictions, comm)
        elif cacheable and comm.size > 1 and _wide_union(blocks, comm, first is None):
            first = _text_pass(blocks, opts, comm.rank, predictions, dense_now=True)
        return learn(Run(blocks, comm, opts, t0, t_read, initial, predictions, callback,
                         first))
    finally:
        if own:
            comm.close()


def _caches(blocks: Blocks) -> list[CacheBlocks] | None:
    """The written caches ``blocks`` read, or None where any part is still text."""
    parts = list(blocks.parts) if isinstance(blocks, ChainBlocks) else [blocks]
    caches = [p.done() if isinstance(p, PendingCache) and not p.pending else p
              for p in parts]
    return caches if all(isinstance(p, CacheBlocks) for p in caches) else None


def _wide(distinct: int, bits: int) -> bool:
    """Whether ``distinct`` features make the dense rows (12 bytes for each of the
    ``2**bits`` indices) no larger than compact columns and their lookup table (``12 * D
    + 4 * 2**bits``): ``3 * D >= 2 * 2**bits``. Below that the rows cost more memory, and
    zeroing them more time than they save (two workers over the wide data's 11M features
    at ``-b 24``: 8% slower, loaded host)."""
    return 3 * distinct >= 2 << bits


def _wide_cache(blocks: Blocks) -> bool:
    """Whether ``blocks`` are a written cache whose own distinct features are :func:`_wide`."""
    caches = _caches(blocks)
    return caches is not None and _wide(max(p.distinct() for p in caches), blocks.bits)


def _wide_union(blocks: Blocks, comm: Communicator, mine: bool) -> bool:
    """Whether this worker's cache pass (``mine``: it has not run a first pass yet) should
    learn in the dense rows because the union of the workers' features is :func:`_wide`
    (a collective of every worker that may learn from a cache in one pass; one flag, and
    where some worker asks, the or of the workers' bitmaps of ``2**bits`` bits).

    After the pass the learners are averaged in the union: in compact columns it holds a
    ``2**bits`` table and 12 bytes for every feature of the union, not of the shard
    (``-q ab`` on the wide data at ``-b 24``: two shards of 9.4M features, a union of
    14.5M, 238 MB against the rows' 201), and dense rows are averaged in place, without
    the union beside them (:func:`._recipe._average_rows`)."""
    caches = _caches(blocks) if mine else None
    if not comm.allreduce(np.array([caches is not None]), op="max")[0]:  # (bool: or)
        return False
    seen = np.zeros(((1 << blocks.bits) + 7) // 8, np.uint8)
    for p in caches or []:
        _mark(np.asarray(p.features(), np.uint32), seen)
    union_bitmap(comm, seen)
    return caches is not None and _wide(count_bits(seen), blocks.bits)


def _text_pass(blocks: Blocks, opts: TrainOptions, rank: int,
               predictions: Predictions | None, comm: Communicator | None = None, *,
               dense_now: bool = False) -> FirstPass:
    """The first online pass, learning from the text as it is parsed (:mod:`._firstpass`);
    with ``comm`` the workers mix their learners during it (:mod:`._mixing`).

    With ``dense_now`` (a cache of wide data, :func:`_wide_cache`) the pass learns in the
    dense layout from its first block: VW's rows by hashed index, one cache line an update
    and no lookup, where compact columns would read a lookup table and three arrays (the
    weight, its adaptive sum and its normalizer: three cache misses) per update. The end of
    the pass is the text pass's: the rows of the features seen, gathered and moved out."""
    t_on = time.perf_counter()
    out = progress_out(opts, rank)
    every = opts.mix_every(comm.size) if comm is not None else 0
    text = TextPass(blocks, holdout_period(opts), dense=comm is None or not every)
    if dense_now:
        text.columns.switch_at = 0  # the dense layout before the first block
    l2 = opts.online_l2(0.0)
    mixer = (TextMixer(comm, every, opts.power_t, text.columns, sparse=not (opts.l1 or l2))
             if comm and every else None)
    ws = GrowingWeights(text.columns, new_state(), compact=mixer is None)
    prog = Progress(out)
    prog.header()
    acc = online_pass(text.items(), ws, opts.online_kind(), opts, l2, True,
                      out, prog, predictions, mixer=mixer)
    return FirstPass(text, ws, acc, prog, t_on, time.perf_counter() - t_on,
                     mixer.mixes if mixer is not None else None)
