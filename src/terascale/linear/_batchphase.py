"""The batch phase of :func:`train`: L-BFGS or preconditioned CG over all of the shards.

Each evaluation of the objective is one streamed pass over this worker's blocks
(:func:`._passes.gradient_pass`) and one allreduce of [gradient, (Hessian diagonal), loss
and weight sums]; every rank then runs the same optimizer step on the same numbers.
"""

from __future__ import annotations

import math
from typing import Any, TextIO

import numpy as np

from ..communicator import Communicator
from ._batch import cg, lbfgs
from ._blocks import Blocks
from ._losses import LOSSES
from ._options import TrainOptions
from ._passes import Columns, add_squares, gradient_pass

__all__ = ["batch_phase"]


def _scale_diag(blocks: Blocks, columns: Columns, d: int, lam: float, kind: int,
                train_weight: float, comm: Communicator) -> np.ndarray:
    """L-BFGS's initial inverse Hessian: the Hessian diagonal as if every feature were in
    every example with its mean square value, ``l2 + c * N * mean(x_j^2)`` (c the loss's
    largest curvature). It carries the features' scales, so unscaled numeric columns
    (breast_cancer's areas in the thousands beside ratios near 0.01) no longer stall
    L-BFGS in line searches; it ignores how often a feature occurs, so on one-hot data
    (every value 1) it is a multiple of the identity and L-BFGS runs as it did without it
    (the full Hessian diagonal there moves rare features fast and overfit the flights
    benchmark: test AUC 0.651 instead of 0.662)."""
    sq = add_squares(blocks, columns, d)
    total = np.array([train_weight])
    if comm.size > 1:
        sq = comm.allreduce(sq)
        total = comm.allreduce(total)
    curv = 0.25 if kind == LOSSES["logistic"] else 2.0  # largest d2loss: logistic, squared
    return lam + curv * float(total[0]) * sq[:d] / np.maximum(sq[d:], 1.0)


def batch_phase(blocks: Blocks, columns: Columns, period: int, train_weight: float,
                w0: np.ndarray, comm: Communicator, opts: TrainOptions, kind: int,
                out: TextIO | None) -> tuple[np.ndarray, dict[str, Any]]:
    d = len(w0)
    lam = opts.batch_l2
    want_diag = [opts.cg > 0]

    def fun(w: np.ndarray) -> tuple[float, np.ndarray, float]:
        size = 2 * d + 4 if want_diag[0] else d + 4
        buf = np.zeros(size)
        gradient_pass(blocks, columns, period, w, kind, buf, want_diag[0])
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
                   else _scale_diag(blocks, columns, d, lam, kind, train_weight, comm))
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
