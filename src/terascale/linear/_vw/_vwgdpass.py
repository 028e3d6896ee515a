"""One pass of VW's ``gd`` with the update rules ``_vwsgd`` runs (``--sgd``, ``--adaptive``,
``--normalized``, ``--invariant`` apart, ``--sparse_l2``, their lazy ``--l1``/``--l2``),
compiled by numba: example by example over the pass's CSR rows, in VW's float arithmetic
(each float operation is the double one rounded once to float32, ``_losses._f``; C's
``powf`` for the decays other than the square root's).

The caller keeps the run (the passes, the progress table, the counters, the model); the
pass gives each example's prediction, raw score, weighted loss and note (what VW's gd tells
of it on its logger: ``_vwreport``'s ``NAN_SCORE`` and ``NAN_UPDATE`` bits, plus
``MAGNITUDE`` times the features whose float square overflows), and leaves the weights,
the per-weight sums and the learner's scalars (``sc``, indexed by the names below) where
VW's learner would leave them.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from .._losses import (
    _expectile_weight,
    _expf,
    _f,
    dloss32,
    invariant_update,
    loss32,
    square_grad32,
)
from ._vwreport import MAGNITUDE, NAN_SCORE, NAN_UPDATE

__all__ = ["CONTRACTION", "GRAVITY", "HI", "HOLDOUT_W", "LO", "MULTIPLIER", "NSNX", "SEEN_T",
           "SIZE", "TOTAL_W", "UNLABELLED_W", "gd_pass", "sync_weights"]

# the learner's scalars, in one float64 array
LO, HI = 0, 1                  # the prediction range (VW's min and max label)
TOTAL_W, NSNX = 2, 3           # the normalized rule's weight and sum of norms
MULTIPLIER = 4                 # its average update (float)
SEEN_T = 5                     # VW's sd->t: initial_t plus every example's weight
HOLDOUT_W, UNLABELLED_W = 6, 7  # the weight held out and unlabelled so far
GRAVITY, CONTRACTION = 8, 9    # the lazy L1 and L2
SIZE = 10

_X_MIN = float(np.float32(1.084202e-19))
_X2_MIN = float(np.float32(np.float32(_X_MIN) * np.float32(_X_MIN)))
_FLT_MAX = float(np.finfo(np.float32).max)


@numba.njit(cache=True, inline="always")
def _pow(x: float, y: float) -> float:
    """C's powf (float32 operands: numba calls the C library's)."""
    return float(np.float32(x) ** np.float32(y))


@numba.njit(cache=True, inline="always")
def _decay(g2: float, nrm: float, adaptive: bool, normalized: bool, sqrt_rate: bool,
           neg_power_t: float, neg_norm_power: float) -> float:
    """VW's ``compute_rate_decay``: a weight's rate from its sums, in float."""
    r = 1.0
    if adaptive:
        r = _f(1.0 / _f(math.sqrt(g2))) if sqrt_rate else _pow(g2, neg_power_t)
    if normalized:
        if sqrt_rate:
            inv = _f(1.0 / nrm)
            r = _f(r * inv) if adaptive else _f(r * _f(inv * inv))
        else:
            r = _f(r * _pow(_f(nrm * nrm), neg_norm_power))
    return r


@numba.njit(cache=True, inline="always")
def _average(total_w: float, nsnx: float, adaptive: bool, sqrt_rate: bool,
             neg_norm_power: float) -> float:
    """VW's ``average_update``: the normalized rule's multiplier."""
    if sqrt_rate:
        avg = _f(total_w / nsnx)
        return _f(math.sqrt(avg)) if adaptive else avg
    return _pow(_f(nsnx / total_w), neg_norm_power)


@numba.njit(cache=True, inline="always")
def _sgd_step(kind: int, p: float, y: float, scale: float) -> float:
    """VW's ``get_unsafe_update`` in float (``_losses.sgd_update32``)."""
    k = kind & 7
    if k == 1 or k == 4:
        return _f(_f(2.0 * _f(y - p)) * scale)
    if k == 2:
        return _f(y * scale) if _f(y * p) < 1.0 else 0.0
    if k == 0:  # VW's soft label in [-1, 1]
        st = _f(_f(y + 1.0) / 2.0)
        a = _f(scale / _f(1.0 + _f(_expf(p))))
        b = _f(_f(-scale) / _f(1.0 + _f(_expf(_f(-p)))))
        return _f(_f(st * a) + _f(_f(1.0 - st) * b))
    if k == 5:
        return _f(-_f(dloss32(kind, p, y)) * scale)
    s = _f(_f(_expectile_weight(kind, p, y)) * scale)
    return _f(_f(2.0 * _f(y - p)) * s)


@numba.njit(cache=True)
def sync_weights(w: np.ndarray, sc: np.ndarray) -> None:
    """VW's ``sync_weights``: the lazy L1 and L2 folded into every weight, in float."""
    if sc[GRAVITY] == 0.0 and sc[CONTRACTION] == 1.0:
        return
    g, c = _f(sc[GRAVITY]), _f(sc[CONTRACTION])
    for j in range(len(w)):
        wj = float(w[j])
        t = (_f(wj - g) if wj > 0 else _f(wj + g)) if g < abs(wj) else 0.0
        w[j] = np.float32(_f(t * c))
    sc[GRAVITY], sc[CONTRACTION] = 0.0, 1.0


@numba.njit(cache=True)
def gd_pass(indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
            sumsq: np.ndarray, labels: np.ndarray, weights: np.ndarray, learn: np.ndarray,
            scored: np.ndarray, labelled: np.ndarray, holdout: np.ndarray, w: np.ndarray,
            g2: np.ndarray, nrm: np.ndarray, rate: np.ndarray, sc: np.ndarray, kind: int,
            adaptive: bool, normalized: bool, invariant: bool, sqrt_rate: bool,
            neg_power_t: float, neg_norm_power: float, eta: float, sparse_l2: float,
            l1: float, l2: float, preds: np.ndarray, partials: np.ndarray,
            losses: np.ndarray, notes: np.ndarray) -> None:
    """One pass: each example predicted (``preds``, before the clip ``partials``), its
    loss times its weight (``losses``, 0 where it has no label or weight), its note
    (``notes``, int32) and, where ``learn``, learned from. ``scored``: the labelled
    examples that are not test ones (VW widens the prediction range to their labels before
    predicting)."""
    for i in range(len(labels)):
        a, b = indptr[i], indptr[i + 1]
        # (numba's float() keeps a float32 one: np.float64 widens, as VW's doubles do)
        y = np.float64(labels[i])
        wt = np.float64(weights[i])
        if scored[i]:
            sc[LO], sc[HI] = min(sc[LO], y), max(sc[HI], y)
        s = np.float32(0.0)
        if l1 > 0.0:  # each weight moved towards 0 by the gravity first
            g32 = np.float32(sc[GRAVITY])
            for k in range(a, b):
                wk = w[indices[k]]
                wk = wk - (g32 if wk > 0 else -g32) if g32 < abs(wk) else np.float32(0.0)
                s += np.float32(wk * values[k])
        else:
            for k in range(a, b):
                s += np.float32(w[indices[k]] * values[k])
        raw = _f(float(s) * _f(sc[CONTRACTION]))
        partials[i] = raw
        note = NAN_SCORE if math.isnan(raw) else 0
        p = 0.0 if math.isnan(raw) else min(max(raw, sc[LO]), sc[HI])
        p = _f(p)
        preds[i] = p
        losses[i] = _f(_f(loss32(kind, p, y)) * wt) if labelled[i] and wt > 0 else 0.0
        update = 0.0
        if learn[i] and loss32(kind, p, y) > 0:
            ppu = float(sumsq[i]) if len(sumsq) else 0.0
            if adaptive or normalized:  # VW's get_pred_per_update
                gsq = _f(wt * _f(square_grad32(kind, p, y)))
                ppu = 1.0
                if gsq != 0:
                    norm_x, ppu32 = np.float32(0.0), np.float32(0.0)
                    for k in range(a, b):
                        c = indices[k]
                        x = float(values[k])
                        x2 = _f(x * x)
                        if x2 < _X2_MIN:
                            x, x2 = (_X_MIN if x > 0 else -_X_MIN), _X2_MIN
                        if adaptive:
                            g2[c] = np.float32(_f(g2[c] + _f(gsq * x2)))
                        if normalized:
                            ax = abs(x)
                            if ax > nrm[c]:  # rescaled as if the new scale were the old
                                if nrm[c] > 0:
                                    if sqrt_rate:
                                        rs = _f(nrm[c] / ax)
                                        w[c] = np.float32(_f(w[c] * (rs if adaptive
                                                                     else _f(rs * rs))))
                                    else:
                                        rs = _f(ax / nrm[c])
                                        w[c] = np.float32(_f(w[c] * _pow(_f(rs * rs),
                                                                         neg_norm_power)))
                                nrm[c] = np.float32(ax)
                            if x2 > _FLT_MAX:  # (VW's "too much magnitude": counts 1)
                                norm_x += np.float32(1.0)
                                note += MAGNITUDE
                            else:
                                norm_x += np.float32(_f(x2 / _f(nrm[c] * nrm[c])))
                        rate[c] = np.float32(_decay(g2[c], nrm[c], adaptive, normalized,
                                                    sqrt_rate, neg_power_t, neg_norm_power))
                        ppu32 += np.float32(_f(x2 * rate[c]))
                    ppu = float(ppu32)
                    if normalized:
                        sc[NSNX] += wt * np.float64(norm_x)
                        sc[TOTAL_W] += wt
                        sc[MULTIPLIER] = _average(_f(sc[TOTAL_W]), _f(sc[NSNX]), adaptive,
                                                  sqrt_rate, neg_norm_power)
                        ppu = _f(ppu * sc[MULTIPLIER])
            scale = _f(eta * wt)
            if not adaptive:
                tt = _f(sc[SEEN_T] + wt - sc[HOLDOUT_W] - sc[UNLABELLED_W])
                scale = _f(scale * _pow(tt, neg_power_t))
            if invariant:
                update = invariant_update(kind, p, y, scale, ppu)
            else:
                update = _sgd_step(kind, p, y, scale)
            if (l1 > 0 or l2 > 0) and abs(update) > 1e-8:  # VW's lazy L1/L2
                dl = np.float64(dloss32(kind, p, y))
                eta_bar = -np.float64(update) / dl if abs(dl) > 1e-8 else 0.0
                if abs(dl) > 1e-8:
                    sc[CONTRACTION] *= 1.0 - l2 * eta_bar
                update = _f(_f(update) / _f(sc[CONTRACTION]))
                sc[GRAVITY] += eta_bar * l1
        if learn[i] and sparse_l2 != 0:  # VW's gd: after the loss's update, whatever it is
            update = _f(_f(update) - _f(sparse_l2 * p))
        if learn[i] and math.isnan(update):
            note |= NAN_UPDATE
        notes[i] = note
        if learn[i] and not math.isnan(update) and update != 0:
            u = _f(update)
            if normalized:
                u = _f(u * sc[MULTIPLIER])
            for k in range(a, b):
                c = indices[k]
                x = float(values[k])
                if adaptive or normalized:
                    if abs(x) <= _FLT_MAX:
                        w[c] = np.float32(_f(w[c] + _f(u * _f(x * rate[c]))))
                else:
                    w[c] = np.float32(_f(w[c] + _f(u * x)))
        if sc[CONTRACTION] < 1e-9 or sc[GRAVITY] > 1e3:  # folded in now (VW's)
            sync_weights(w, sc)
        sc[SEEN_T] += wt
        if holdout[i]:
            sc[HOLDOUT_W] += wt
        elif not labelled[i]:
            sc[UNLABELLED_W] += wt
