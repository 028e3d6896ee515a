"""The batch phase of :func:`train`: L-BFGS or preconditioned CG over all of the shards.

Each evaluation of the objective is one streamed pass over this worker's blocks
(:func:`._passes.gradient_pass`) and one allreduce of [gradient, (Hessian diagonal), loss
and weight sums]; every rank then runs the same optimizer step on the same numbers. One
more pass first gathers the per-feature statistics of the standardizing change of variables
(:mod:`._normalize`), in which both optimizers run: it is what makes them converge on raw
numeric columns of very different scales.

The passes read the shard from the batch spill (:mod:`._spill`), not the parse cache. Per-
example margins are not kept between passes: L-BFGS needs the gradient at every accepted
point, a full pass anyway, so margins (8 bytes per example) would only save the line
search's rejected trials (1 pass in 9 on the flights data, 3 in 20 on click-style data).
"""

from __future__ import annotations

import contextvars
import math
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TextIO

import numpy as np

from ...communicator import Communicator
from .._io._blocks import Blocks
from .._io._hashing import CONSTANT_HASH
from .._io._spill import Spill
from .._losses import LOSS_TABLE
from .._options import TrainOptions
from .._passes import Columns, gradient_pass, learning_blocks
from ._linalg import axpy_dot, dot
from ._normalize import Reparam, column_stats, normalization_record, standardizer
from ._optimizers import allocating, cg, lbfgs, loss_grad

__all__ = ["batch_phase", "new_spill"]


def _first_pass(blocks: Blocks, columns: Columns, period: int, w: np.ndarray, kind: int,
                want_diag: bool, comm: Communicator, spill: Spill, threads: int = 1
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One streamed pass at the starting weights: the loss and gradient buffer of
    ``gradient_pass`` and the per-feature sums that :func:`standardizer` needs, both summed
    over the workers in one allreduce (so every rank builds the same map), and the array
    that holds both (L-BFGS's workspace next). It reads the spill when the online pass has
    written it, else the blocks, writing the spill. With ``threads=2`` and the spill
    written, the statistics are summed in a second thread walking the spill beside the
    gradient's (each sum in its own buffer and order: the same bits as one thread)."""
    d = len(w)
    width = 2 * d + 4 if want_diag else d + 4
    # one array, allreduced in place: the gradient buffer, then the statistics; large
    # enough to be L-BFGS's workspace afterwards (see lbfgs's ``work``), so that memory
    # is zeroed by the system once, not once for the statistics and again for L-BFGS
    both = np.zeros(max(width + 3 * d + 1, 2 * (d + 4) + 2 * d))
    buf, stats = both[:width], both[width:width + 3 * d + 1]
    if spill.sealed and threads >= 2:
        def sums() -> None:
            for c in spill:
                column_stats(c.indptr, c.cols, c.values, c.labels, c.weights, c.hold, stats)

        with ThreadPoolExecutor(1, thread_name_prefix="terascale-stats") as pool:
            done = pool.submit(contextvars.copy_context().run, sums)
            for c in spill:
                loss_grad(c.indptr, c.cols, c.values, c.labels, c.weights, c.hold, w, kind,
                          buf, want_diag)
            done.result()
    elif spill.sealed:
        for c in spill:
            loss_grad(c.indptr, c.cols, c.values, c.labels, c.weights, c.hold, w, kind, buf,
                      want_diag)
            column_stats(c.indptr, c.cols, c.values, c.labels, c.weights, c.hold, stats)
    else:
        for b, cols, hold in learning_blocks(blocks, columns, period):
            loss_grad(b.indptr, cols, b.values, b.labels, b.weights, hold, w, kind, buf,
                      want_diag)
            column_stats(b.indptr, cols, b.values, b.labels, b.weights, hold, stats)
            spill.add(b.start, b.indptr, cols, b.values, b.labels, b.weights, hold)
        spill.seal()
    if comm.size > 1:
        comm.allreduce(both[:width + 3 * d + 1], out=both[:width + 3 * d + 1])
    return buf, stats, both


def _threads(comm: Communicator) -> int:
    """Threads of a gradient pass: 2 where this worker has two CPUs to itself (the CPUs it
    may run on over the workers on its host, or all workers where that is unknown)."""
    from ..._env import read_env

    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    env = read_env()
    local = env.local_size if env is not None and env.local_size else comm.size
    return 2 if cpus // max(local, 1) >= 2 else 1


def new_spill(opts: TrainOptions) -> Spill:
    """The batch phase's spill file, in the cache directory (else the temporary one)."""
    return Spill(opts.cache_dir or None)


def _scale_diag(reg: Reparam, stats: np.ndarray, lam: float, kind: int) -> np.ndarray | None:
    """L-BFGS's initial inverse Hessian, in the optimizer's (standardized) variables: the
    Hessian diagonal as if every feature met the loss's largest curvature c in every
    example, ``c * N`` for a standardized column (unit variance) or a one-hot feature, plus
    the regularizer's ``lam * diag(R^T R)``. It ignores how often a one-hot feature occurs,
    so on one-hot data it is a multiple of the identity plus l2 (the full Hessian diagonal
    moves rare features fast and overfit the flights benchmark: test AUC 0.651 instead of
    0.662). Hinge has no curvature: None (L-BFGS then starts from a scaled gradient).
    The diagonal overwrites the statistics' first ``d`` entries."""
    curv = next(loss.curvature for loss in LOSS_TABLE.values() if loss.code == kind)
    if curv == 0.0:
        return None
    d = reg.size
    out = stats[:d]  # into the sums of x, which the standardizer has read: no fresh pages
    np.multiply(stats[d:2 * d] > 0, curv * float(stats[3 * d]), out=out)
    # + lam * diag(R^T R), which is 1 but on the features R changes (no temporaries)
    at = out[reg.sel]
    out += lam
    out[reg.sel] = at + lam * reg.gram_diag_changed()
    return out


def _cg_diag(raw: np.ndarray, amap: Reparam, reg: Reparam, lam: float) -> np.ndarray:
    """CG's preconditioner: the Hessian diagonal at the start in the optimizer's variables.
    A one-hot feature keeps its own ``sum_i h_i`` (rare features move fast, as the data
    says); a standardized column has unit variance, so its entry is about the total
    curvature, the constant feature's ``sum_i h_i``; plus the regularizer's."""
    out = raw.copy()
    scaled = amap.scale != 1.0
    if amap.bias >= 0:
        out[scaled] = raw[amap.bias]
    else:
        out[scaled] = raw[scaled] / amap.scale[scaled] ** 2
    return out + lam * reg.gram_diag()


class _Objective:
    """The batch objective in the optimizer's variables ``v`` (an
    :class:`._optimizers.Objective`): one gradient pass at the raw weights ``w = A v``,
    the allreduce, and the regularizer ``lam/2 ||R v||^2``, all in the caller's buffer.
    The raw weights are ``v`` itself, changed in place where ``A`` changes it (a few
    entries on one-hot data) and restored bit for bit after the pass, so a pass copies no
    vector of the model's size. The first call returns ``first`` (the allreduced
    gradient buffer of the pass that gathered the statistics, at the starting point)."""

    def __init__(self, spill: Spill, kind: int, comm: Communicator, threads: int,
                 amap: Reparam, reg: Reparam, lam: float, d: int, first: np.ndarray) -> None:
        self.spill, self.kind, self.comm, self.threads = spill, kind, comm, threads
        self.amap, self.reg, self.lam = amap, reg, lam
        self.size, self.width = d, d + 4
        self._first: np.ndarray | None = first

    def __call__(self, v: np.ndarray, out: np.ndarray) -> tuple[float, float]:
        d, lam, reg = self.size, self.lam, self.reg
        saved = self.amap.to_raw(v)
        try:
            if self._first is not None:  # the statistics pass was at this point
                first, self._first = self._first, None
                np.copyto(out[:d], first[:d])  # the gradient (then CG's diagonal, not kept)
                np.copyto(out[d:], first[len(first) - 4:])  # the sums
            else:
                gradient_pass(self.spill, v, self.kind, out, False, self.threads,
                              overwrite=True)
                if self.comm.size > 1:
                    self.comm.allreduce(out, out=out)
            f = float(out[-4])
            hold = out[-2] / out[-1] if out[-1] > 0 else math.nan
            gw = out[:d]
            if reg is self.amap:  # the raw problem: R v = w, one adjoint for loss and l2
                penalty = axpy_dot(gw, lam, v)
        finally:
            self.amap.restore(v, saved)
        if reg is self.amap:
            self.amap.adjoint(gw, inplace=True)
        else:
            self.amap.adjoint(gw, inplace=True)
            if len(reg.sel):
                u = reg.forward(v)
                gw += lam * reg.adjoint(u)
                penalty = dot(u, u)
            else:  # R = I: the standardized problem, v are the regularized weights
                penalty = axpy_dot(gw, lam, v)
        return f + 0.5 * lam * penalty, hold


def _bias_index(union: np.ndarray, opts: TrainOptions) -> int:
    """Position of the constant feature in the compact column space, -1 without one."""
    if not opts.constant:
        return -1
    c = CONSTANT_HASH & opts.parse_options().mask
    j = int(np.searchsorted(union, c))
    return j if j < len(union) and int(union[j]) == c else -1


def batch_phase(blocks: Blocks, columns: Columns, period: int, train_weight: float,
                w0: np.ndarray, comm: Communicator, opts: TrainOptions, kind: int,
                out: TextIO | None, spill: Spill | None = None,
                callback: Callable[[dict[str, Any]], None] | None = None
                ) -> tuple[np.ndarray, dict[str, Any]]:
    """L-BFGS or CG in standardized variables (see :mod:`._normalize`); returns raw-space
    weights (the scaling folded in) and a summary; with ``opts.standardized`` the summary's
    ``normalization`` is the model file's record of it. The first pass evaluates the
    objective at ``w0`` and gathers the statistics at once, so the map costs no extra pass
    (``train_weight`` is unused: that pass sums the weights over all workers itself). That
    pass also spills the shard in the kernels' layout (:mod:`._spill`, in the cache
    directory), unless the online pass has (``spill``, sealed; the caller closes it), and
    every later pass reads the spill. ``callback`` gets each iteration's metrics (see
    :func:`terascale.linear.train`)."""
    if spill is not None:
        return _batch_phase(blocks, columns, period, w0, comm, opts, kind, out, spill,
                            callback)
    with new_spill(opts) as own:
        return _batch_phase(blocks, columns, period, w0, comm, opts, kind, out, own,
                            callback)


def _batch_phase(blocks: Blocks, columns: Columns, period: int, w0: np.ndarray,
                 comm: Communicator, opts: TrainOptions, kind: int, out: TextIO | None,
                 spill: Spill, callback: Callable[[dict[str, Any]], None] | None = None
                 ) -> tuple[np.ndarray, dict[str, Any]]:
    d = len(w0)
    lam = opts.batch_l2
    w0 = np.array(w0, np.float64)  # the batch phase's own: it becomes the first iterate
    threads = _threads(comm)
    buf0, stats, work = _first_pass(blocks, columns, period, w0, kind, opts.cg > 0, comm,
                                    spill, threads)
    amap, numeric = standardizer(stats, _bias_index(columns.union, opts))
    # the regularized variables: the standardized ones, or the raw weights w = A v
    reg = Reparam.identity(d) if opts.standardized else amap

    if columns.pos is not None and spill.sealed:
        columns.pos = None  # every later pass reads the spill: the 2**bits table goes

    def cb(it: int, f: float, gnorm: float, hold: float, passes: int) -> None:
        if out:
            h = f"  holdout {hold:.6f}" if not math.isnan(hold) else ""
            print(f"{'bfgs' if opts.bfgs else 'cg'} iter {it:3d}  pass {passes:3d}  "
                  f"objective {f:.9e}  |g| {gnorm:.3e}{h}", file=out)
        if callback is not None:
            callback({"phase": "bfgs" if opts.bfgs else "cg", "iteration": it,
                      "pass": passes, "objective": float(f), "gradient_norm": float(gnorm),
                      **({} if math.isnan(hold) else {"holdout_loss": float(hold)})})

    v0 = amap.inverse(w0, inplace=True)
    del w0
    # the first pass was at w0 = A v0: its numbers are the optimizer's first evaluation
    obj = _Objective(spill, kind, comm, threads, amap, reg, lam, d, buf0)
    diag = (_scale_diag(reg, stats, lam, kind) if opts.bfgs
            else _cg_diag(buf0[d:2 * d], amap, reg, lam))
    # the statistics are not needed past here: their memory goes to the optimizer's vectors
    del buf0, stats
    if opts.bfgs:
        res = lbfgs(obj, v0, max_passes=opts.bfgs, memory=opts.memory, tol=opts.tol,
                    patience=opts.patience, callback=cb, precond=diag, work=work)
    else:
        assert diag is not None
        res = cg(allocating(obj), v0, diag, max_passes=opts.cg,
                 tol=opts.tol, patience=opts.patience, callback=cb)
    if out:
        print(f"{'L-BFGS' if opts.bfgs else 'CG'}: {res.iterations} iterations, "
              f"{res.passes} passes, stopped on {res.stopped}", file=out)
    info: dict[str, Any] = {"batch_iterations": res.iterations, "batch_passes": res.passes,
                            "batch_stopped": res.stopped, "objective": res.objective,
                            "standardized": opts.standardized}
    if opts.standardized:
        info["normalization"] = normalization_record(amap, numeric, columns.union)
    return amap.forward(res.w), info
