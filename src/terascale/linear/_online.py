"""The online pass: VW's default update, adaptive, normalized and importance-invariant SGD.

Per weight the learner keeps the sum of squared gradients (AdaGrad, Duchi, Hazan & Singer,
JMLR 2011), the largest |x| seen (normalized updates, Ross, Mineiro & Langford, *Normalized
Online Learning*, UAI 2013) and uses the importance-invariant step of Karampatziakis &
Langford (UAI 2011), exactly as VW's ``gd.cc`` with its defaults (``--adaptive
--normalized --invariant``, power_t 0.5, learning rate 0.5). L1 and L2 are VW's lazy
truncated gradient (``gravity``) and shrinkage (``contraction``), folded into the weights
when they grow large and at the end of a pass. Columns are compact (see ``_train``).
"""

from __future__ import annotations

import math

import numba
import numpy as np

from ._losses import dloss, invariant_update, loss_value

__all__ = ["STATE_SIZE", "new_state", "online_chunk", "sync_weights"]

# state: [total_weight, normalized_sum_norm_x, contraction, gravity, min_label, max_label]
STATE_SIZE = 6
_X2_MIN = 1.1754943508222875e-38
_X_MIN = math.sqrt(_X2_MIN)


def new_state() -> np.ndarray:
    return np.array([0.0, 0.0, 1.0, 0.0, 0.0, 0.0])


@numba.njit(cache=True, inline="always")
def _trunc(w: float, g: float) -> float:
    if g == 0.0:
        return w
    if w > g:
        return w - g
    if w < -g:
        return w + g
    return 0.0


@numba.njit(cache=True)
def sync_weights(w: np.ndarray, state: np.ndarray) -> None:
    """Fold the lazy L1 (gravity) and L2 (contraction) into the weights."""
    c = state[2]
    g = state[3]
    if c == 1.0 and g == 0.0:
        return
    for j in range(len(w)):
        w[j] = _trunc(w[j], g) * c
    state[2] = 1.0
    state[3] = 0.0


# nogil: the next block is read and decoded in another thread meanwhile (_blocks.prefetch)
@numba.njit(cache=True, nogil=True)
def online_chunk(indptr: np.ndarray, cols: np.ndarray, values: np.ndarray, labels: np.ndarray,
                 weights: np.ndarray, holdout: np.ndarray, start: int, end: int,
                 w: np.ndarray, g2: np.ndarray, nrm: np.ndarray, state: np.ndarray,
                 kind: int, eta: float, power_t: float, l1: float, l2: float,
                 out: np.ndarray, pred: np.ndarray | None = None) -> None:
    """Learn from examples [start, end); adds to ``out`` = [train loss, train weight,
    holdout loss, holdout weight, examples, features] and sets out[6:8] = last label,
    prediction (for progress lines). With ``pred`` (length end - start) it also writes
    each example's prediction before learning from it (VW's progressive ``-p``), for
    unlabelled and zero-weight examples too."""
    rate = np.empty(256, np.float64)
    reg = l1 > 0.0 or l2 > 0.0
    sqrt_rate = power_t == 0.5
    for i in range(start, end):
        lab = labels[i]
        s = weights[i]
        learn = not math.isnan(lab) and s > 0.0
        if not learn and pred is None:
            continue
        y = lab
        if kind != 1:
            y = 1.0 if lab > 0 else -1.0
        if kind != 0 and learn:  # VW clips squared and hinge predictions to labels seen
            state[4] = min(state[4], y)
            state[5] = max(state[5], y)
        a = indptr[i]
        b = indptr[i + 1]
        contraction = state[2]
        gravity = state[3]
        p = 0.0
        for k in range(a, b):
            p += _trunc(w[cols[k]], gravity) * values[k]
        p *= contraction
        if kind != 0:
            p = min(max(p, state[4]), state[5])
        else:
            p = min(max(p, -50.0), 50.0)
        if pred is not None:
            pred[i - start] = p
            if not learn:
                continue
        lv = loss_value(kind, p, y)
        out[4] += 1.0
        out[5] += b - a
        out[6] = lab
        out[7] = p
        if holdout[i]:
            out[2] += s * lv
            out[3] += s
            continue
        out[0] += s * lv
        out[1] += s
        if lv <= 0.0 or b == a:  # nothing to learn (or no feature to learn it with)
            continue
        dl = dloss(kind, p, y)
        gsq = s * dl * dl
        if gsq == 0.0:
            continue
        if b - a > len(rate):
            rate = np.empty(2 * (b - a), np.float64)
        norm_x = 0.0
        ppu = 0.0
        for k in range(a, b):
            c = cols[k]
            x = values[k]
            x2 = x * x
            if x2 < _X2_MIN:
                x = _X_MIN if x > 0 else -_X_MIN
                x2 = _X2_MIN
            g2[c] += gsq * x2
            ax = abs(x)
            if ax > nrm[c]:
                if nrm[c] > 0.0:
                    rs = nrm[c] / ax
                    w[c] *= rs if sqrt_rate else rs ** (2.0 * (1.0 - power_t))
                nrm[c] = ax
            nn = nrm[c] * nrm[c]
            norm_x += x2 / nn
            if sqrt_rate:
                r = 1.0 / (math.sqrt(g2[c]) * nrm[c])
            else:
                r = g2[c] ** (-power_t) * nn ** (power_t - 1.0)
            rate[k - a] = r
            ppu += x2 * r
        state[0] += s
        state[1] += s * norm_x
        avg = state[0] / state[1]
        mult = math.sqrt(avg) if sqrt_rate else avg ** (1.0 - power_t)
        ppu *= mult
        u = invariant_update(kind, p, y, eta * s, ppu)
        if reg and abs(u) > 1e-8:
            eta_bar = -u / dl if abs(dl) > 1e-8 else 0.0
            if abs(dl) > 1e-8:
                state[2] *= 1.0 - l2 * eta_bar
            u /= state[2]
            state[3] += eta_bar * l1
        u *= mult
        for k in range(a, b):
            w[cols[k]] += u * values[k] * rate[k - a]
        if state[2] < 1e-9 or state[3] > 1e3:
            sync_weights(w, state)
