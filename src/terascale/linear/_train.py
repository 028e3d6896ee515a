"""``train()``: the whole Terascale recipe on this worker's shard.

1. Parse the shard into the memory-mapped cache (before joining the job: delayed
   initialization, Agarwal et al. JMLR 2014 sec. 3).
2. Join the job (``terascale.init()``) and agree on the hashed features present anywhere
   (one allgather of the sorted index sets). All later work, and every allreduce, runs on
   this compact index space instead of all 2**bits weights: with ``-b 24`` and 10^4..10^6
   live features that is 10-1000x fewer bytes on the wire, with the same result.
3. ``passes`` online passes (VW's adaptive normalized invariant SGD), each followed by
   averaging over the workers (uniform or weighted by the adaptive sums).
4. Optionally L-BFGS or preconditioned CG over all data, warm-started from the averaged
   online weights; gradients and loss are summed with one allreduce per pass.

Every rank ends with bitwise-identical weights.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, TextIO

import numpy as np

from .._errors import ConfigError, DataError
from ..communicator import Communicator
from ._average import average_weights
from ._batch import cg, lbfgs, loss_grad
from ._dataset import Dataset, ParseOptions
from ._losses import LOSSES
from ._model import LinearModel
from ._names import opt
from ._online import online_chunk, sync_weights
from ._progressive import BLOCK, block_tags, zero_one
from ._resume import initial_state, merged
from ._shard import job_rank, load_shard

__all__ = ["TrainOptions", "train"]


@dataclass(frozen=True, kw_only=True)
class TrainOptions:
    """Every option of :func:`train` (the flags of ``terascale linear train``)."""

    format: str = "vw"
    bits: int = 18
    quadratic: tuple[str, ...] = ()
    label: str = "label"
    categorical: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    skip_bad: bool = False
    constant: bool = True          # VW's bias feature
    loss: str = "logistic"
    learning_rate: float = 0.5
    power_t: float = 0.5
    l1: float = 0.0
    l2: float | None = None        # see online_l2 / batch_l2
    passes: int = 1
    bfgs: int = 0                  # passes of L-BFGS after the online passes
    cg: int = 0                    # passes of preconditioned CG after the online passes
    memory: int = 15               # L-BFGS memory
    tol: float = 1e-7              # stop on relative loss decrease below this
    average: str = "weighted"      # "uniform" | "weighted"
    holdout: float | None = None   # fraction held out to stop the batch phase
    patience: int = 3              # batch iterations without holdout improvement
    cache_dir: str | None = None   # "" disables the cache
    binary: bool = False           # VW's --binary: progress and pass losses are 0/1 loss
    progress: bool = False
    progress_file: TextIO | None = None

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ConfigError(f"{opt('loss')} must be one of {', '.join(LOSSES)}, not "
                              f"{self.loss!r}")
        if self.average not in ("uniform", "weighted"):
            raise ConfigError(f"{opt('average')} must be uniform or weighted, not "
                              f"{self.average!r}")
        if self.bfgs and self.cg:
            raise ConfigError(f"{opt('bfgs')} and {opt('cg')} exclude each other")
        for name in ("bits", "passes", "bfgs", "cg", "memory", "patience"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
                raise ConfigError(f"{opt(name)} must be an integer, not {v!r}")
        for name in ("passes", "bfgs", "cg"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{opt(name)} must be >= 0")
        if self.memory < 1:
            raise ConfigError(f"{opt('memory')} must be >= 1, not {self.memory}")
        if self.passes == 0 and not (self.bfgs or self.cg):
            raise ConfigError(f"{opt('passes')} 0 needs {opt('bfgs')} or {opt('cg')}")
        if self.holdout is not None and not 0.0 <= self.holdout < 1.0:
            raise ConfigError(f"{opt('holdout')} must be in [0, 1), not {self.holdout}")
        if not self.learning_rate > 0:
            raise ConfigError(f"{opt('learning_rate')} must be > 0, not {self.learning_rate}")
        if self.l1 < 0 or (self.l2 is not None and self.l2 < 0):
            raise ConfigError(f"{opt('l1')}/{opt('l2')} must be >= 0")
        if self.l1 > 0 and (self.bfgs or self.cg):
            raise ConfigError(f"{opt('l1')} works with online passes only (L-BFGS and CG "
                              f"need a smooth objective)")
        self.parse_options()  # validates format, bits, -q

    def parse_options(self) -> ParseOptions:
        return ParseOptions(format=self.format, bits=self.bits, quadratic=tuple(self.quadratic),
                            label=self.label, categorical=tuple(self.categorical),
                            ignore=tuple(self.ignore), skip_bad=self.skip_bad,
                            constant=self.constant)

    @property
    def batch(self) -> int:
        return self.bfgs or self.cg

    @property
    def holdout_fraction(self) -> float:
        if self.holdout is not None:
            return self.holdout
        return 0.1 if (self.batch or self.passes > 1) else 0.0

    def online_l2(self, total_weight: float) -> float:
        """Online runs: VW's per-example shrinkage ``--l2``. Before a batch phase, the online
        pass does SGD on the batch objective, whose per-example share is l2 / N."""
        if not self.batch:
            return 0.0 if self.l2 is None else self.l2
        return self.batch_l2 / max(total_weight, 1.0)

    @property
    def batch_l2(self) -> float:
        """The batch objective is sum of losses + l2/2 ||w||^2; 1.0 unless given."""
        return 1.0 if self.l2 is None else self.l2


class _Progress:
    """VW-style progress lines at doubling example counts (rank 0 only)."""

    def __init__(self, out: TextIO | None) -> None:
        self.out = out
        self.since_loss = 0.0
        self.since_w = 0.0

    def header(self) -> None:
        if self.out:
            print(f"{'average':<9} {'since':<9} {'example':>12} {'example':>12} "
                  f"{'current':>8} {'current':>8} {'current':>8}\n"
                  f"{'loss':<9} {'last':<9} {'counter':>12} {'weight':>12} "
                  f"{'label':>8} {'predict':>8} {'features':>8}", file=self.out)

    def line(self, acc: np.ndarray, prev: np.ndarray, feats: float) -> None:
        if not self.out:
            return
        dl, dw = acc[0] - prev[0], acc[1] - prev[1]
        avg = acc[0] / acc[1] if acc[1] else 0.0
        since = dl / dw if dw else 0.0
        print(f"{avg:<9.6f} {since:<9.6f} {int(acc[4]):>12d} {acc[1]:>12.1f} "
              f"{acc[6]:>8.4f} {acc[7]:>8.4f} {int(feats):>8d}", file=self.out)


def _compact(indices: np.ndarray, bits: int, comm: Communicator) -> tuple[np.ndarray, np.ndarray]:
    """(sorted hashed indices present on any worker, this shard's columns into them)."""
    dense = bits <= 26  # a 2**bits lookup table is cheaper than sorting, up to 256 MiB
    if dense:
        mark = np.zeros(1 << bits, np.bool_)
        mark[indices] = True
        local = np.flatnonzero(mark).astype(np.uint32)
    else:
        local = np.unique(indices)
    union = local
    if comm.size > 1:
        union = np.unique(np.concatenate(comm.allgather_object(local)))
    if dense:
        pos = np.empty(1 << bits, np.int32)
        pos[union] = np.arange(len(union), dtype=np.int32)
        return union, pos[indices]
    return union, np.searchsorted(union, indices).astype(np.int32)


def train(data: Dataset | Sequence[str] | str, *, comm: Communicator | None = None,
          initial: LinearModel | None = None,
          predictions: Callable[[np.ndarray, list[str] | None], None] | None = None,
          **options: Any) -> LinearModel:
    """Train on this worker's shard (a Dataset, or files that are sharded over the job).

    With ``comm=None`` the shard is parsed and cached first and only then is the job
    joined: the communicator this process already opened (``terascale.init()`` by the user
    or by ``terascale.torch``) is reused and left open; otherwise ``terascale.init()``
    opens one, which is closed at the end. Options are the fields of :class:`TrainOptions`.

    ``initial`` warm-starts from a model (VW's ``-i``): its weights, and its adaptive
    state when it was saved after online passes, so that training continues as one run
    would; its parse options (bits, ``-q``, format, ...) are used, and given ones must
    agree; weights of features the new data lacks are kept. ``predictions(p, tags)`` is
    called with the progressive predictions (VW's ``-p`` during training) of each block of
    examples, in input order, before learning from them: raw scores, clipped as VW clips
    them, every pass; ``tags`` are the examples' VW tags, or None when the data has none.
    """
    names = {f.name for f in fields(TrainOptions)}
    bad = sorted(set(options) - names)
    if bad:
        raise ConfigError(f"unknown option(s) of terascale.linear.train: {', '.join(bad)}")
    if isinstance(options.get("quadratic"), str):
        options["quadratic"] = (options["quadratic"],)
    for k in ("quadratic", "categorical", "ignore"):
        if k in options:
            options[k] = tuple(options[k])
    sources: list[tuple[str, dict[str, Any]]] = []
    if isinstance(data, Dataset):  # parse options come with the data
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
    t0 = time.perf_counter()
    if isinstance(data, Dataset):
        ds = data
    else:
        rank, size = (comm.rank, comm.size) if comm is not None else job_rank()
        ds = load_shard(data, rank=rank, size=size, cache_dir=opts.cache_dir,
                        **opts.parse_options().__dict__)
    t_read = time.perf_counter() - t0
    own = False
    if comm is None:
        from .._init import init, joined

        comm = joined()
        if comm is None:
            comm, own = init(), True
    try:
        return _train(ds, comm, opts, t0, t_read, initial, predictions)
    finally:
        if own:
            comm.close()


def _train(ds: Dataset, comm: Communicator, opts: TrainOptions, t0: float, t_read: float,
           initial: LinearModel | None,
           predictions: Callable[[np.ndarray, list[str] | None], None] | None
           ) -> LinearModel:
    out = (opts.progress_file or sys.stderr) if (opts.progress and comm.rank == 0) else None
    kind = LOSSES[opts.loss]
    indices = np.asarray(ds.indices)
    union, cols = _compact(indices, ds.bits, comm)
    indptr = np.asarray(ds.indptr)
    values = np.asarray(ds.values)
    labels = np.asarray(ds.labels)
    weights = np.asarray(ds.weights)
    n = len(labels)
    frac = opts.holdout_fraction
    holdout = np.zeros(n, np.bool_)
    if frac > 0:
        period = max(2, round(1.0 / frac))
        holdout[period - 1::period] = True
    d = len(union)
    w, g2, nrm, state = initial_state(initial, union)
    info: dict[str, Any] = {"workers": comm.size, "features": d, "read_s": t_read}
    labelled = float(np.count_nonzero(~np.isnan(labels) & (weights > 0)))
    # logistic and hinge read label > 0 as positive: LIBSVM's 2/4 or 1/2 would all be one
    # class and train a constant model without a word
    odd = (np.unique(labels[~np.isnan(labels) & (labels != 1) & (labels != -1)
                            & (labels != 0)]) if opts.loss != "squared" else labels[:0])
    totals = comm.allreduce(np.array([n, ds.n_features, ds.skipped,
                                      float(np.sum(weights[~holdout])), labelled, len(odd)],
                                     np.float64))
    what = ", ".join(ds.sources[:3]) or "the data"
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
    prog = _Progress(out)
    t_on = time.perf_counter()
    for p in range(opts.passes):
        acc = np.zeros(8)
        prev = acc.copy()
        if p == 0:
            prog.header()
        start, nxt = 0, 1
        while start < n:
            end = min(n, nxt) if p == 0 and out else n
            pred = None
            if predictions is not None or opts.binary:  # bounded blocks of predictions
                end = min(end, start + BLOCK)
                pred, before = np.empty(end - start), acc.copy()
            online_chunk(indptr, cols, values, labels, weights, holdout, start, end, w, g2,
                         nrm, state, kind, opts.learning_rate, opts.power_t, opts.l1,
                         online_l2, acc, pred)
            if pred is not None:
                if opts.binary:
                    zero_one(acc, before, pred, labels, weights, holdout, start)
                if predictions is not None:
                    predictions(pred, block_tags(ds, start, end))
            if p == 0 and out and end == nxt:
                prog.line(acc, prev, indptr[end] - indptr[end - 1])
                prev = acc.copy()
                nxt *= 2
            start = end
        sync_weights(w, state)
        average_weights(comm, w, g2, nrm, state, opts.average)
        tot = comm.allreduce(acc[:6].copy())
        if out:
            hold = f", holdout loss {tot[2] / tot[3]:.6f}" if tot[3] else ""
            print(f"pass {p + 1}: average loss {tot[0] / max(tot[1], 1e-300):.6f} over "
                  f"{int(tot[4])} examples{hold} ({comm.size} workers, "
                  f"{opts.average} averaging)", file=out)
        info.setdefault("online_loss", []).append(float(tot[0] / max(tot[1], 1e-300)))
    info["online_s"] = time.perf_counter() - t_on
    if opts.batch:
        t_b = time.perf_counter()
        w, binfo = _batch(indptr, cols, values, labels, weights, holdout, w, comm, opts,
                          kind, out)
        info.update(binfo)
        info["batch_s"] = time.perf_counter() - t_b
    info["train_s"] = time.perf_counter() - t0
    # after online passes only, the model keeps the learner's state for a warm start
    idx, w, adaptive = merged(initial, union, w, None if opts.batch else (g2, nrm, state))
    return LinearModel(indices=idx, weights=w, parse=opts.parse_options(), loss=opts.loss,
                       info=info, adaptive=adaptive)


def _scale_diag(cols: np.ndarray, values: np.ndarray, weights: np.ndarray,
                holdout: np.ndarray, d: int, lam: float, kind: int,
                comm: Communicator) -> np.ndarray:
    """L-BFGS's initial inverse Hessian: the Hessian diagonal as if every feature were in
    every example with its mean square value, ``l2 + c * N * mean(x_j^2)`` (c the loss's
    largest curvature). It carries the features' scales, so unscaled numeric columns
    (breast_cancer's areas in the thousands beside ratios near 0.01) no longer stall
    L-BFGS in line searches; it ignores how often a feature occurs, so on one-hot data
    (every value 1) it is a multiple of the identity and L-BFGS runs as it did without it
    (the full Hessian diagonal there moves rare features fast and overfit the flights
    benchmark: test AUC 0.651 instead of 0.662)."""
    sq = np.zeros(2 * d)
    np.add.at(sq, cols, values.astype(np.float64) ** 2)
    np.add.at(sq, cols + d, 1.0)
    total = np.array([float(np.sum(weights[~holdout]))])
    if comm.size > 1:
        sq = comm.allreduce(sq)
        total = comm.allreduce(total)
    curv = 0.25 if kind == LOSSES["logistic"] else 2.0  # largest d2loss: logistic, squared
    return lam + curv * float(total[0]) * sq[:d] / np.maximum(sq[d:], 1.0)


def _batch(indptr: np.ndarray, cols: np.ndarray, values: np.ndarray, labels: np.ndarray,
           weights: np.ndarray, holdout: np.ndarray, w0: np.ndarray, comm: Communicator,
           opts: TrainOptions, kind: int, out: TextIO | None) -> tuple[np.ndarray, dict]:
    d = len(w0)
    lam = opts.batch_l2
    want_diag = [opts.cg > 0]

    def fun(w: np.ndarray) -> tuple[float, np.ndarray, float]:
        size = 2 * d + 4 if want_diag[0] else d + 4
        buf = np.zeros(size)
        loss_grad(indptr, cols, values, labels, weights, holdout, w, kind, buf, want_diag[0])
        buf = comm.allreduce(buf)
        if want_diag[0]:
            fun.diag = buf[d:2 * d] + lam  # type: ignore[attr-defined]
        f = buf[-4] + 0.5 * lam * float(w @ w)
        g = buf[:d] + lam * w
        hold = buf[-2] / buf[-1] if buf[-1] > 0 else math.nan
        return f, g, hold

    def cb(it: int, f: float, gnorm: float, hold: float, passes: int) -> None:
        if out:
            h = f"  holdout {hold:.6f}" if not math.isnan(hold) else ""
            print(f"{'bfgs' if opts.bfgs else 'cg'} iter {it:3d}  pass {passes:3d}  "
                  f"objective {f:.6e}  |g| {gnorm:.3e}{h}", file=out)

    if opts.bfgs:
        precond = (None if opts.loss == "hinge"  # no curvature to scale by
                   else _scale_diag(cols, values, weights, holdout, d, lam, kind, comm))
        res = lbfgs(fun, w0, max_passes=opts.bfgs, memory=opts.memory, tol=opts.tol,
                    patience=opts.patience, callback=cb, precond=precond)
    else:
        fun(w0)  # one pass for the preconditioner (diagonal of the Hessian)
        want_diag[0] = False
        res = cg(fun, w0, fun.diag, max_passes=opts.cg - 1,  # type: ignore[attr-defined]
                 tol=opts.tol, patience=opts.patience, callback=cb)
    if out:
        print(f"{'L-BFGS' if opts.bfgs else 'CG'}: {res.iterations} iterations, "
              f"{res.passes + (1 if opts.cg else 0)} passes, stopped on {res.stopped}",
              file=out)
    return res.w, {"batch_iterations": res.iterations, "batch_passes": res.passes,
                   "batch_stopped": res.stopped, "objective": res.objective}
