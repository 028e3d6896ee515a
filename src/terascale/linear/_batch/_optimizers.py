"""Batch optimizers over all data: L-BFGS and preconditioned nonlinear conjugate gradient.

Agarwal et al. (JMLR 2014, sec. 3.2): after the online pass warm-starts the weights, every
worker computes the loss and gradient of its shard, one allreduce sums them, and every worker
runs the same optimizer step on the same numbers, so all ranks hold bitwise-identical
weights without ever sending them. L-BFGS is Nocedal's two-loop recursion (*Updating
Quasi-Newton Matrices with Limited Storage*, Math. Comp. 1980) with a line search satisfying
the strong Wolfe conditions (Nocedal & Wright, *Numerical Optimization*, Alg. 3.5/3.6); CG is
Polak-Ribière+ preconditioned with the diagonal of the Hessian (Shewchuk, *An Introduction
to the Conjugate Gradient Method Without the Agonizing Pain*, sec. 14). Each evaluation of
``fun`` is one pass over the data; ``max_passes`` bounds them. Optimization stops when the
relative decrease of the loss is below ``tol`` or, with holdout data, when the holdout loss
has not improved for ``patience`` iterations (then the best holdout weights are returned).

Neither optimizer converges on raw numeric columns of very different scales by itself (a
column ~1e5 beside one ~1e-3 makes the Hessian's condition number ~1e14; scipy's L-BFGS-B
stalls there too): the batch phase runs them in standardized variables, its objective
(an :class:`Objective`) composed with the maps of :mod:`._normalize`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numba
import numpy as np

from ... import _pages
from .._losses import d2loss, dloss, loss_value
from .._online._update import _prefetch
from ._linalg import dot, lbfgs_direction_into, step, store_pair

__all__ = ["BatchResult", "Objective", "allocating", "cg", "lbfgs", "loss_grad",
           "swept_array"]

# fun(w) -> (objective, gradient, holdout loss or nan)
Fun = Callable[[np.ndarray], tuple[float, np.ndarray, float]]


class Objective(Protocol):
    """The objective as :func:`lbfgs` calls it: ``f, hold = obj(v, out)`` writes the
    gradient at ``v`` into ``out[:size]`` (``out`` has ``width`` entries, scratch beyond
    ``size`` is the objective's) and leaves ``v`` as it found it. Buffers belong to the
    caller, which reuses them pass after pass: on wide data a fresh vector of the model's
    size costs its page faults (the system zeroes every page), as much as a pass's reading.
    """

    size: int
    width: int

    def __call__(self, v: np.ndarray, out: np.ndarray) -> tuple[float, float]: ...


def allocating(obj: Objective) -> Fun:
    """``obj`` as a :data:`Fun` that returns a fresh gradient every call (for :func:`cg`)."""

    def fun(v: np.ndarray) -> tuple[float, np.ndarray, float]:
        out = np.empty(obj.width)
        f, hold = obj(v, out)
        return f, out[:obj.size], hold

    return fun


@numba.njit(cache=True, inline="always")
def _logistic(p: float, y: float) -> tuple[float, float, float]:
    """(loss, dloss, d2loss) of the logistic loss from one ``exp``: the same numbers as
    ``loss_value``, ``dloss`` and ``d2loss`` bit for bit (they share e = exp(-|y p|))."""
    z = y * p
    e = math.exp(-abs(z))
    f = math.log1p(e) - z if z < 0 else math.log1p(e)
    g = -y * e / (1.0 + e) if z > 0 else -y / (1.0 + e)
    return f, g, e / ((1.0 + e) * (1.0 + e))


# how many examples ahead the gradient asks for its weights' and sums' cache lines
_AHEAD = 2


@numba.njit(cache=True, inline="always")
def _ask(indptr: np.ndarray, cols: np.ndarray, i: int, end: int, w: np.ndarray,
         out: np.ndarray) -> None:
    """Prefetch example ``i``'s weights and gradient sums (nothing past ``end``): on wide
    data each is a cache miss, which then overlaps with the examples before it (as the
    online learner's ``_online._ask``)."""
    if i < end:
        for k in range(indptr[i], indptr[i + 1]):
            c = cols[k]
            _prefetch(w, c)
            _prefetch(out, c)


# nogil: the next block is read and decoded in another thread meanwhile (_blocks.prefetch)
@numba.njit(cache=True, nogil=True)
def loss_grad(indptr: np.ndarray, cols: np.ndarray, values: np.ndarray, labels: np.ndarray,
              weights: np.ndarray, holdout: np.ndarray, w: np.ndarray, kind: int,
              out: np.ndarray, want_diag: bool) -> None:
    """out[:d] += gradient, out[d:2d] += Hessian diagonal (if want_diag), then out[-4:] +=
    [train loss, train weight, holdout loss, holdout weight] (unregularized, weighted).
    An empty ``values`` means every value is 1 (one-hot blocks of the batch spill)."""
    d = len(w)
    tail = len(out) - 4
    unit = len(values) == 0
    n = len(labels)
    for i in range(min(_AHEAD, n)):
        _ask(indptr, cols, i, n, w, out)
    for i in range(n):
        _ask(indptr, cols, i + _AHEAD, n, w, out)
        lab = labels[i]
        s = weights[i]
        if math.isnan(lab) or s <= 0.0:
            continue
        y = lab if kind == 1 else (1.0 if lab > 0 else -1.0)
        a = indptr[i]
        b = indptr[i + 1]
        p = 0.0
        if unit:
            for k in range(a, b):
                p += w[cols[k]]
        else:
            for k in range(a, b):
                p += w[cols[k]] * values[k]
        if kind == 0:
            f, gl, hl = _logistic(p, y)
        else:
            f = loss_value(kind, p, y)
            gl = dloss(kind, p, y)
            hl = d2loss(kind, p, y)
        if holdout[i]:
            out[tail + 2] += s * f
            out[tail + 3] += s
            continue
        out[tail] += s * f
        out[tail + 1] += s
        g = s * gl
        if g != 0.0:
            if unit:
                for k in range(a, b):
                    out[cols[k]] += g
            else:
                for k in range(a, b):
                    out[cols[k]] += g * values[k]
        if want_diag:
            h = s * hl
            if unit:
                for k in range(a, b):
                    out[d + cols[k]] += h
            else:
                for k in range(a, b):
                    out[d + cols[k]] += h * values[k] * values[k]


@dataclass
class BatchResult:
    w: np.ndarray
    objective: float
    passes: int
    iterations: int
    stopped: str  # "tolerance", "passes", "holdout", "line search"
    holdout: float


class _Tracker:
    """Counts passes and keeps the weights with the best holdout loss."""

    def __init__(self, fun: Fun, max_passes: int, callback: Callable[..., None] | None) -> None:
        self.fun = fun
        self.max_passes = max_passes
        self.passes = 0
        self.best_hold = math.inf
        self.best_w: np.ndarray | None = None
        self.callback = callback

    def __call__(self, *args: np.ndarray) -> Any:
        self.passes += 1
        return self.fun(*args)

    def accept(self, it: int, w: np.ndarray, f: float, g: np.ndarray, hold: float) -> bool:
        """Record an accepted iterate; True when the holdout loss improved."""
        if self.callback is not None:
            self.callback(it, f, math.sqrt(dot(g, g)), hold, self.passes)
        if math.isnan(hold):
            return True
        if hold < self.best_hold:
            self.best_hold = hold
            if self.best_w is None or self.best_w.shape != w.shape:
                self.best_w = swept_array(w.shape, w.dtype)
            np.copyto(self.best_w, w)  # into the same memory every time
            return True
        return False

    @property
    def exhausted(self) -> bool:
        return self.passes >= self.max_passes


def _cubic_min(a: float, fa: float, ga: float, b: float, fb: float, gb: float) -> float:
    """Minimizer of the cubic through (a, fa, ga), (b, fb, gb), kept inside [a, b]."""
    lo, hi = min(a, b), max(a, b)
    d1 = ga + gb - 3.0 * (fa - fb) / (a - b)
    sq = d1 * d1 - ga * gb
    if sq >= 0.0:
        d2 = math.copysign(math.sqrt(sq), b - a)
        t = b - (b - a) * (gb + d2 - d1) / (gb - ga + 2.0 * d2)
        if lo + 0.05 * (hi - lo) <= t <= hi - 0.05 * (hi - lo):
            return t
    return 0.5 * (a + b)


def _wolfe(fn: _Tracker, w: np.ndarray, d: np.ndarray, f0: float, g0: np.ndarray,
           alpha: float, c1: float, c2: float
           ) -> tuple[float, float, np.ndarray, float] | None:
    """Strong Wolfe line search along d; returns (alpha, f, g, hold) or None on failure."""
    dg0 = dot(g0, d)
    a_prev, f_prev, dg_prev = 0.0, f0, dg0
    best: tuple[float, float, np.ndarray, float] | None = None
    for i in range(20):
        if fn.exhausted:
            return best
        f, g, hold = fn(w + alpha * d)
        dg = dot(g, d)
        if f <= f0 + c1 * alpha * dg0 and (best is None or f < best[1]):
            best = (alpha, f, g, hold)
        if f > f0 + c1 * alpha * dg0 or (i > 0 and f >= f_prev) or not math.isfinite(f):
            return _zoom(fn, w, d, f0, dg0, a_prev, f_prev, dg_prev, alpha, f, dg,
                         c1, c2) or best
        if abs(dg) <= -c2 * dg0:
            return alpha, f, g, hold
        if dg >= 0:
            return _zoom(fn, w, d, f0, dg0, alpha, f, dg, a_prev, f_prev, dg_prev,
                         c1, c2) or best
        a_prev, f_prev, dg_prev = alpha, f, dg
        alpha *= 2.0
    return best


def _zoom(fn: _Tracker, w: np.ndarray, d: np.ndarray, f0: float, dg0: float,
          lo: float, flo: float, dglo: float, hi: float, fhi: float, dghi: float,
          c1: float, c2: float) -> tuple[float, float, np.ndarray, float] | None:
    best: tuple[float, float, np.ndarray, float] | None = None
    for _ in range(20):
        if fn.exhausted or abs(hi - lo) < 1e-12 * max(1.0, abs(lo)):
            return best
        if math.isfinite(fhi):
            a = _cubic_min(lo, flo, dglo, hi, fhi, dghi)
        else:
            a = 0.5 * (lo + hi)
        f, g, hold = fn(w + a * d)
        dg = dot(g, d)
        if f > f0 + c1 * a * dg0 or f >= flo:
            hi, fhi, dghi = a, f, dg
        else:
            if best is None or f < best[1]:
                best = (a, f, g, hold)
            if abs(dg) <= -c2 * dg0:
                return a, f, g, hold
            if dg * (hi - lo) >= 0:
                hi, fhi, dghi = lo, flo, dglo
            lo, flo, dglo = a, f, dg
    return best


def _finish(tr: _Tracker, w: np.ndarray, f: float, it: int, why: str,
            hold: float) -> BatchResult:
    if tr.best_w is not None and tr.best_hold < hold:
        return BatchResult(tr.best_w, f, tr.passes, it, why, tr.best_hold)
    return BatchResult(w, f, tr.passes, it, why, hold)


def _inverse_diag(precond: np.ndarray) -> np.ndarray:
    """1 / the Hessian diagonal; a zero entry (hinge loss, unseen features without L2) gets
    the mean curvature."""
    pos = precond[precond > 0]
    floor = float(pos.mean()) if len(pos) else 1.0
    return 1.0 / np.where(precond > 0, precond, floor)


def _inverse_diag32(precond: np.ndarray) -> np.ndarray:
    """:func:`_inverse_diag` in float32, computed in place in ``precond`` (which it
    consumes): it only scales L-BFGS's initial inverse Hessian, a guess that every line
    search corrects, and costs 4 bytes a feature instead of 8 and of 16 in temporaries."""
    pos = precond > 0
    floor = float(precond.mean(where=pos)) if pos.any() else 1.0
    np.invert(pos, out=pos)
    np.putmask(precond, pos, floor)
    del pos
    np.divide(1.0, precond, out=precond)
    out = swept_array(precond.shape, np.float32)
    out[:] = precond
    return out


def swept_array(shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """An uninitialized array (zero pages until written) for data that is only swept in
    order, never read at random: L-BFGS's history rows, the best point, the diagonal. It
    lives in an anonymous mapping of its own on 4 KiB pages (``MADV_NOHUGEPAGE``), where
    numpy asks huge pages for every large array: those pay off for the vectors a pass
    reads at random (a TLB miss a feature otherwise), but a huge page must be assembled
    and zeroed on first touch, and on a busy host that cost 3-6 s of CPU for 880 MB of
    history against 0.35 s on 4 KiB pages (the history's first writes were a fifth of the
    recipe's CPU on 11M features). The mapping is freed with the last array using it."""
    return _pages.zeros(shape, dtype, huge=False)


class _Pool:
    """Gradient buffers, reused: taken for an evaluation, given back when dropped. At most
    four are ever out (the accepted gradient, the line search's best two, a trial), most
    iterations two."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.free: list[np.ndarray] = []

    def take(self) -> np.ndarray:
        return self.free.pop() if self.free else np.empty(self.width)

    def give(self, b: np.ndarray | None) -> None:
        if b is not None:
            self.free.append(b)


# a trial of the line search: (step, objective, gradient buffer, holdout loss)
_Trial = tuple[float, float, np.ndarray, float]


class _Search:
    """The strong Wolfe line search of :func:`_wolfe` and :func:`_zoom`, on buffers: the
    trial point ``v + a q`` is written into ``t`` and the gradient into a pooled buffer, so
    a search allocates nothing. Same steps, same tests, same order as those two."""

    def __init__(self, tr: _Tracker, pool: _Pool, v: np.ndarray, q: np.ndarray,
                 t: np.ndarray) -> None:
        self.tr, self.pool, self.v, self.q, self.t = tr, pool, v, q, t
        self.n = len(v)
        self.last = math.nan  # the step whose point ``t`` holds

    def _eval(self, a: float) -> tuple[float, np.ndarray, float, float]:
        step(self.t, self.v, self.q, a)  # v + a q, bit for bit
        self.last = a
        b = self.pool.take()
        f, hold = self.tr(self.t, b)
        return f, b, hold, dot(b[:self.n], self.q)

    def _pick(self, found: _Trial | None, best: _Trial | None) -> _Trial | None:
        if found is None:
            return best
        if best is not None and best[2] is not found[2]:
            self.pool.give(best[2])
        return found

    def wolfe(self, f0: float, dg0: float, alpha: float, c1: float, c2: float
              ) -> _Trial | None:
        a_prev, f_prev, dg_prev = 0.0, f0, dg0
        best: _Trial | None = None
        for i in range(20):
            if self.tr.exhausted:
                return best
            f, b, hold, dg = self._eval(alpha)
            kept = False
            if f <= f0 + c1 * alpha * dg0 and (best is None or f < best[1]):
                self.pool.give(best[2] if best is not None else None)
                best, kept = (alpha, f, b, hold), True
            if f > f0 + c1 * alpha * dg0 or (i > 0 and f >= f_prev) or not math.isfinite(f):
                if not kept:
                    self.pool.give(b)
                return self._pick(self._zoom(f0, dg0, a_prev, f_prev, dg_prev, alpha, f, dg,
                                             c1, c2), best)
            if abs(dg) <= -c2 * dg0:
                if best is not None and best[2] is not b:
                    self.pool.give(best[2])
                return alpha, f, b, hold
            if dg >= 0:
                if not kept:
                    self.pool.give(b)
                return self._pick(self._zoom(f0, dg0, alpha, f, dg, a_prev, f_prev, dg_prev,
                                             c1, c2), best)
            if not kept:
                self.pool.give(b)
            a_prev, f_prev, dg_prev = alpha, f, dg
            alpha *= 2.0
        return best

    def _zoom(self, f0: float, dg0: float, lo: float, flo: float, dglo: float, hi: float,
              fhi: float, dghi: float, c1: float, c2: float) -> _Trial | None:
        best: _Trial | None = None
        for _ in range(20):
            if self.tr.exhausted or abs(hi - lo) < 1e-12 * max(1.0, abs(lo)):
                return best
            a = _cubic_min(lo, flo, dglo, hi, fhi, dghi) if math.isfinite(fhi) \
                else 0.5 * (lo + hi)
            f, b, hold, dg = self._eval(a)
            kept = False
            if f > f0 + c1 * a * dg0 or f >= flo:
                hi, fhi, dghi = a, f, dg
            else:
                if best is None or f < best[1]:
                    self.pool.give(best[2] if best is not None else None)
                    best, kept = (a, f, b, hold), True
                if abs(dg) <= -c2 * dg0:
                    if best is not None and best[2] is not b:
                        self.pool.give(best[2])
                    return a, f, b, hold
                if dg * (hi - lo) >= 0:
                    hi, fhi, dghi = lo, flo, dglo
                lo, flo, dglo = a, f, dg
            if not kept:
                self.pool.give(b)
        return best


def lbfgs(fun: Objective, w0: np.ndarray, *, max_passes: int, memory: int = 15,
          tol: float = 1e-7, patience: int = 3, callback: Callable[..., None] | None = None,
          precond: np.ndarray | None = None, work: np.ndarray | None = None
          ) -> BatchResult:
    """Minimize ``fun`` (an :class:`Objective`) from ``w0`` with L-BFGS; every call of
    ``fun`` is one pass over the data.

    ``work`` (optional, float64, at least ``2 * fun.width + 2 * n`` entries) is memory for
    two gradient buffers, the direction and the trial point, the first ``fun.width``
    entries being the buffer of the first call: the batch phase hands over the array of
    its statistics pass, whose pages are already in memory (a fresh array's pages are
    zeroed by the system on first touch, as costly on wide data as a pass's reading).

    ``w0`` is the first iterate and L-BFGS works in its memory (float64, not copied: pass a
    copy to keep it). ``precond`` (a positive diagonal approximating the Hessian's,
    consumed: its memory holds the inverse) makes the initial inverse Hessian ``gamma *
    diag(1/precond)`` instead of ``gamma * I`` (Nocedal & Wright sec. 7.2): raw features of
    very different scales (areas in the thousands next to ratios near 0.01) otherwise
    leave the problem so ill-conditioned that L-BFGS spends its passes in line searches
    and stops far from the optimum.

    Memory, ``n`` variables and ``m`` = ``memory``: the ``m`` pairs ``(s, y)`` in float32
    (``8 m n`` bytes, as VW's ``--mem`` stores them; a row is touched only once a pair is
    stored), and in float64 the iterate, the trial point, the direction, two gradient
    buffers and the best holdout point (``48 n``), the preconditioner in float32 (``4 n``).
    Nothing of the model's size is allocated after the first iteration: every vector
    operation writes into these."""
    n = fun.size
    tr = _Tracker(fun, max_passes, callback)
    minv = None if precond is None else _inverse_diag32(precond)
    precond = None
    pool = _Pool(fun.width)
    v = w0 if (w0.dtype == np.float64 and w0.flags.c_contiguous and w0.flags.writeable) \
        else np.array(w0, np.float64)
    width = fun.width
    if work is not None and len(work) >= 2 * width + 2 * n:
        g = work[:width]
        pool.give(work[width:2 * width])
        q, t = work[2 * width:2 * width + n], work[2 * width + n:2 * width + 2 * n]
    else:
        g = pool.take()
        q = np.empty(n)  # the direction
        t = np.empty(n)  # the trial point, then the next iterate
    f, hold = tr(v, g)
    tr.accept(0, v, f, g[:n], hold)
    # the last ``memory`` pairs (s, y) as rows of a ring buffer, ``order`` oldest first, in
    # float32: they only shape the direction (every step is re-evaluated by a line search
    # on the float64 objective), and they are most of the phase's memory (2 * memory
    # vectors: 120 bytes a feature at memory 15, as VW's float ``--mem`` stores them)
    S = swept_array((memory, n), np.float32)
    Y = swept_array((memory, n), np.float32)
    rho = np.zeros(memory)
    sy_ = np.zeros(memory)  # s . y and y . minv y of each pair (gamma)
    ymy = np.zeros(memory)
    order: list[int] = []
    if minv is None:
        ones = swept_array((n,), np.float32)
        ones.fill(1.0)
    else:
        ones = minv
    worse = 0
    it = 0
    while True:
        if tr.exhausted:
            return _finish(tr, v, f, it, "passes", hold)
        gv = g[:n]
        gamma = 1.0
        if order:  # (s . y) / (y . minv y) of the newest pair
            gamma = sy_[order[-1]] / ymy[order[-1]]
        slope = lbfgs_direction_into(gv, S, Y, rho, np.array(order, np.int64), ones, gamma, q)
        if slope >= 0:
            order.clear()
            if minv is None:
                np.negative(gv, out=q)
            else:
                np.multiply(minv, gv, out=q)
                np.negative(q, out=q)
            slope = dot(gv, q)
        step0 = (1.0 if order or minv is not None  # a diagonal Newton step is well scaled
                 else min(1.0, 1.0 / max(math.sqrt(dot(q, q)), 1e-12)))
        search = _Search(tr, pool, v, q, t)
        found = search.wolfe(f, slope, step0, 1e-4, 0.9)
        if found is None:  # no acceptable step: out of passes, or at float precision
            return _finish(tr, v, f, it, "passes" if tr.exhausted else "line search", hold)
        a, f_new, gn, hold = found
        it += 1
        if a != search.last:  # the accepted point, as the search evaluated it
            step(t, v, q, a)
        # the oldest pair's row, or a free one (all are free after a reset)
        r = order.pop(0) if len(order) == memory else min(set(range(memory)) - set(order))
        # s = a q and y = g_new - g, rounded into float32, and their products as stored
        sy, yy, ymy[r] = store_pair(q, a, gn[:n], gv, S[r], Y[r], ones)
        if sy > 1e-12 * yy and sy > 0:
            rho[r], sy_[r] = 1.0 / sy, sy
            order.append(r)
        v, t = t, v
        pool.give(g)
        g = gn
        rel = (f - f_new) / max(abs(f_new), abs(f), 1e-300)
        f = f_new
        worse = 0 if tr.accept(it, v, f, g[:n], hold) else worse + 1
        if worse >= patience:
            return _finish(tr, v, f, it, "holdout", hold)
        if rel < tol:
            return _finish(tr, v, f, it, "tolerance", hold)


def cg(fun: Fun, w0: np.ndarray, precond: np.ndarray, *, max_passes: int, tol: float = 1e-7,
       patience: int = 3, callback: Callable[..., None] | None = None) -> BatchResult:
    """Minimize fun from w0 with preconditioned nonlinear CG (Polak-Ribière+). Each line
    search starts at Nocedal & Wright's guess (3.60), the step that repeats the last
    iteration's first-order decrease, so most iterations take one or two passes."""
    tr = _Tracker(fun, max_passes, callback)
    minv = _inverse_diag(precond)
    w = np.array(w0, dtype=np.float64)
    f, g, hold = tr(w)
    tr.accept(0, w, f, g, hold)
    z = minv * g
    d = -z
    worse = 0
    it = 0
    restart = len(w)
    step = 1.0  # the first direction is a diagonal Newton step
    slope = dot(g, d)
    while True:
        if tr.exhausted:
            return _finish(tr, w, f, it, "passes", hold)
        if dot(g, d) >= 0:
            d = -z
        # Nocedal & Wright (3.60): expect the same first-order change as the last step
        new_slope = dot(g, d)
        a0 = 1.0 if it == 0 else min(1.0, step * slope / new_slope) if new_slope < 0 else 1.0
        slope = new_slope
        found = _wolfe(tr, w, d, f, g, a0, 1e-4, 0.1)
        if found is None:  # no acceptable step: out of passes, or at float precision
            return _finish(tr, w, f, it, "passes" if tr.exhausted else "line search", hold)
        a, f_new, g_new, hold = found
        step = a
        it += 1
        w = w + a * d
        z_new = minv * g_new
        beta = max(0.0, dot(g_new, z_new - z) / max(dot(g, z), 1e-300))
        if it % restart == 0:
            beta = 0.0
        d = -z_new + beta * d
        rel = (f - f_new) / max(abs(f_new), abs(f), 1e-300)
        f, g, z = f_new, g_new, z_new
        worse = 0 if tr.accept(it, w, f, g, hold) else worse + 1
        if worse >= patience:
            return _finish(tr, w, f, it, "holdout", hold)
        if rel < tol:
            return _finish(tr, w, f, it, "tolerance", hold)
