"""The online pass: VW's default update, adaptive, normalized and importance-invariant SGD.

Per weight the learner keeps the sum of squared gradients (AdaGrad, Duchi, Hazan & Singer,
JMLR 2011), the largest |x| seen (normalized updates, Ross, Mineiro & Langford, *Normalized
Online Learning*, UAI 2013) and uses the importance-invariant step of Karampatziakis &
Langford (UAI 2011), exactly as VW's ``gd.cc`` with its defaults (``--adaptive
--normalized --invariant``, power_t 0.5, learning rate 0.5). L1 and L2 are VW's lazy
truncated gradient (``gravity``) and shrinkage (``contraction``), folded into the weights
when they grow large and at the end of training. Columns are compact (see ``_train``).

Exactness. The pass reproduces VW operation by operation, in float32 where VW computes in
``float`` (every weight, rate and step; the two running sums are double as in VW): a
logistic loss that underflows to 0 in float (y*p > ~16.6) skips the update as VW does, and a
weight that occurs several times in one example (a repeated token, an in-example hash
collision) accumulates its adaptive sum and normalizer at every occurrence, and every
occurrence is then updated with the weight's final rate (VW keeps it in the weight's spare
slot). Features are visited in VW's order (``_vwparse`` emits them so), so predictions agree
with ``vowpalwabbit`` to float rounding (tests/linear/test_vw_differential.py).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

# (the kernels below inline the losses of _losses.LOSS_TABLE, codes 0-6: numba's cache of
# this module is keyed by this file alone, so a changed loss changes this line too)
from .._losses import (
    FIXED_RANGE,
    HEADER_RANGE,
    LOSSES,
    RAW_LABELS,
    _f,
    by_sign,
    clip_mode,
    clip_prediction,
    dloss32,
    invariant_update,
    loss32,
    ranged_loss32,
    ranged_prediction,
    square_grad32,
)
from ._state import (
    CONTRACTION,
    GRAVITY,
    MAX_LABEL,
    MIN_LABEL,
    STATE_SIZE,
    SUM_NORM_X,
    TOTAL_WEIGHT,
    UPDATE_MULTIPLIER,
    new_state,
)

__all__ = ["STATE_SIZE", "new_state", "oaa_chunk", "online_chunk", "sync_weights"]

_X_MIN = 1.084202e-19  # VW's X_MIN (float); x^2 below X_MIN^2 is clamped there
_X2_MIN = float(np.float32(np.float32(_X_MIN) * np.float32(_X_MIN)))
_X_MIN = float(np.float32(_X_MIN))
_FLT_MAX = float(np.finfo(np.float32).max)


# how many examples ahead the learner asks for its weights' cache lines (_prefetch)
_AHEAD = 2
_SQUARED = LOSSES["squared"]


@intrinsic
def _prefetch(typingctx, arr, idx):  # type: ignore[no-untyped-def]
    """Ask the CPU to bring ``arr[idx]``'s cache line in, for writing (``llvm.prefetch``;
    never faults, even out of bounds). On wide data every feature's weight is a cache miss
    (and a TLB miss): the learner asks for the next examples' while it computes this one's
    update, so the misses overlap with the arithmetic, as VW's loop does not."""
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):  # type: ignore[no-untyped-def]
        aryty, idxty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        i = context.cast(builder, args[1], idxty, types.intp)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [i], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
            "llvm.prefetch.p0i8")
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(1), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


@numba.njit(cache=True, inline="always")
def _ask(indptr: np.ndarray, cols: np.ndarray, i: int, end: int, w: np.ndarray,
         g2: np.ndarray, nrm: np.ndarray, rows: bool) -> None:
    """Prefetch the state of example ``i``'s features (nothing past ``end``); ``rows``: the
    three arrays interleave, a feature's state is one 12-byte row, which one line in eight
    splits across two cache lines: its first and last floats are asked for (the second
    request is free where they share a line; 20% less time per update on wide data, where
    asking for the weight alone left the split rows' misses to the update)."""
    if i < end:
        for k in range(indptr[i], indptr[i + 1]):
            c = cols[k]
            _prefetch(w, c)
            _prefetch(nrm, c)  # (a 12-byte row can end on the next line)
            if not rows:
                _prefetch(g2, c)


@numba.njit(cache=True, inline="always")
def _trunc(w: float, g: float) -> float:
    """VW's ``trunc_weight`` in float: w moved towards 0 by the gravity g, or 0."""
    if g < abs(w):
        return _f(w - g) if w > 0 else _f(w + g)
    return 0.0


@numba.njit(cache=True)
def sync_weights(w: np.ndarray, state: np.ndarray) -> None:
    """Fold the lazy L1 (gravity) and L2 (contraction) into the weights (VW's
    ``sync_weights``, in float)."""
    c = state[CONTRACTION]
    g = state[GRAVITY]
    if c == 1.0 and g == 0.0:
        return
    cf = _f(c)
    gf = _f(g)
    for j in range(len(w)):
        w[j] = _f(_trunc(_f(w[j]), gf) * cf)
    state[CONTRACTION] = 1.0
    state[GRAVITY] = 0.0


@numba.njit(cache=True, inline="always", error_model="numpy")
def _rate(g2: float, nrm: float, sqrt_rate: bool, minus_power_t: float,
          neg_norm_power: float) -> float:
    """VW's ``compute_rate_decay`` (adaptive and normalized), in float. With power_t 0.5
    the square root and the divisions are float32 operations where the learner's arrays
    are float32: the same bits as each in double rounded once to float (see ``_f``), 2-7%
    less of the kernel's CPU time on rows of 500 features; float64 arrays (the workers'
    mixed sums) get the double operations, rounded."""
    if sqrt_rate:
        one = np.float32(1.0)
        return float(np.float32(one / np.float32(math.sqrt(g2))) * np.float32(one / nrm))
    return _f(_f(g2 ** minus_power_t) * _f(_f(nrm * nrm) ** neg_norm_power))


@numba.njit(cache=True, inline="always", error_model="numpy")
def _multi_score(cols: np.ndarray, values: np.ndarray, a: int, b: int, w: np.ndarray,
                 gravity: float, contraction: float, l1: bool) -> float:
    """One learner's raw prediction among one-against-all's K, VW's multipredict: as
    :func:`_score`, but without L1 a feature whose value is within 1e-10 of 0 adds nothing
    (VW's ``vec_add_multipredict``; its truncating variant, under L1, adds it)."""
    g32 = np.float32(gravity)
    p32 = np.float32(0.0)
    for k in range(a, b):
        x = values[k]
        if not l1 and -1e-10 < x < 1e-10:
            continue
        wk = np.float32(w[cols[k]])
        wk = wk - (g32 if wk > 0 else -g32) if g32 < abs(wk) else np.float32(0.0)
        p32 += np.float32(wk * x)
    p = _f(float(p32) * _f(contraction))
    if math.isnan(p):
        p = 0.0
    return p


@numba.njit(cache=True, inline="always", error_model="numpy")
def _score(cols: np.ndarray, values: np.ndarray, a: int, b: int, w: np.ndarray,
           gravity: float, contraction: float) -> float:
    """An example's raw prediction (features ``a..b``), VW's: each weight moved towards 0
    by the lazy L1 ``gravity`` (in float32) and the sum scaled by the lazy L2
    ``contraction``; NaN is 0 (not yet clipped)."""
    # float32 sums: a float op's result is the double op rounded once (see _f), and
    # without a double<->float conversion per term the sum's dependency chain is
    # ~3x shorter (the same bits)
    g32 = np.float32(gravity)
    p32 = np.float32(0.0)
    for k in range(a, b):
        wk = np.float32(w[cols[k]])
        # _trunc in float32 (a NaN weight counts 0, as there), as one expression: the
        # if/else on each weight's sign it was written as took 35-40% more of the
        # kernel's CPU time on rows of 12 namespaces or of 500 features (the held-out
        # shapes, one worker), with or without L1; the same bits
        wk = wk - (g32 if wk > 0 else -g32) if g32 < abs(wk) else np.float32(0.0)
        p32 += np.float32(wk * values[k])
    p = _f(float(p32) * _f(contraction))
    if math.isnan(p):
        p = 0.0
    return p


@numba.njit(cache=True, inline="always", error_model="numpy")
def _learn(cols: np.ndarray, values: np.ndarray, a: int, b: int, w: np.ndarray,
           g2: np.ndarray, nrm: np.ndarray, state: np.ndarray, lazy: np.ndarray, kind: int,
           p: float, y: float, s: float, eta: float, l1: float, l2: float, reg: bool,
           sqrt_rate: bool, minus_power_t: float, neg_norm_power: float, pd: float) -> bool:
    """VW's update from one example of weight ``s``, label ``y``, prediction ``p`` whose
    float loss is above 0 (features ``a..b``; ``pd``: the prediction the lazy L1/L2's
    derivative takes, ``p`` but where VW's squared loss clips a linked score): the
    adaptive sums and normalizers, the learner's normalized sums (``state``), the lazy L1/L2 (``lazy``'s ``CONTRACTION`` and
    ``GRAVITY``: the learner's own state, or one shared by several learners, as VW's
    one-against-all learners share it), the weights. Returns whether the lazy L1/L2 must
    be folded into the weights now (every weight of every learner sharing them)."""
    gsq = _f(s * square_grad32(kind, p, y))
    ppu = 1.0
    if gsq != 0.0:
        norm_x32 = np.float32(0.0)
        ppu32 = np.float32(0.0)
        for k in range(a, b):
            c = cols[k]
            x = values[k]
            x2 = _f(x * x)
            if x2 < _X2_MIN:
                x = _X_MIN if x > 0 else -_X_MIN
                x2 = _X2_MIN
            g2[c] = _f(g2[c] + _f(gsq * x2))
            ax = abs(x)
            if ax > nrm[c]:  # a new scale: rescale the weight as if it had been the old one
                if nrm[c] > 0.0:
                    if sqrt_rate:
                        w[c] = _f(w[c] * _f(nrm[c] / ax))
                    else:
                        rs = _f(ax / nrm[c])
                        w[c] = _f(w[c] * _f(_f(rs * rs) ** neg_norm_power))
                nrm[c] = ax
            # (float32 operations on float32 arrays, as in _rate)
            nx2 = (float(np.float32(x2) / np.float32(nrm[c] * nrm[c])) if x2 <= _FLT_MAX
                   else 1.0)
            norm_x32 += np.float32(nx2)
            ppu32 += np.float32(x2 * _rate(g2[c], nrm[c], sqrt_rate, minus_power_t,
                                           neg_norm_power))
        ppu = float(ppu32)
        state[TOTAL_WEIGHT] += s
        # (in double, as VW's (double)weight * norm_x: numba multiplies the float32
        # weight by the norm in float32 otherwise)
        state[SUM_NORM_X] += np.float64(s) * np.float64(norm_x32)
        tw = _f(state[TOTAL_WEIGHT])
        sx = _f(state[SUM_NORM_X])
        if sqrt_rate:
            state[UPDATE_MULTIPLIER] = _f(math.sqrt(_f(tw / sx)))
        else:
            state[UPDATE_MULTIPLIER] = _f(_f(sx / tw) ** neg_norm_power)
        ppu = _f(ppu * state[UPDATE_MULTIPLIER])
    u = invariant_update(kind, p, y, _f(eta * s), ppu)
    if reg and abs(u) > 1e-8:
        dl = dloss32(kind, pd, y)
        eta_bar = -u / dl if abs(dl) > 1e-8 else 0.0
        if abs(dl) > 1e-8:
            lazy[CONTRACTION] *= 1.0 - l2 * eta_bar
        u = _f(u / _f(lazy[CONTRACTION]))
        lazy[GRAVITY] += eta_bar * l1
    if math.isnan(u):
        u = 0.0
    if u != 0.0:
        u = _f(u * state[UPDATE_MULTIPLIER])
        for k in range(a, b):
            c = cols[k]
            x = values[k]
            if abs(x) <= _FLT_MAX:
                # the weight's rate after all its occurrences (VW's spare slot)
                r = _rate(g2[c], nrm[c], sqrt_rate, minus_power_t, neg_norm_power)
                w[c] = _f(w[c] + _f(u * _f(x * r)))
    return lazy[CONTRACTION] < 1e-9 or lazy[GRAVITY] > 1e3


@numba.njit(cache=True, inline="always")
def _settings(kind: int, eta: float, power_t: float, l1: float, l2: float):  # type: ignore[no-untyped-def]
    """A kernel's settings from its arguments: the loss's row of ``_losses.LOSS_TABLE``
    (without the flags), labels read as classes by their sign (unless VW's reading of
    labels is asked: ``RAW_LABELS``), predictions clipped as the row's ``clip`` says (to
    the labels' range, learnt unless ``FIXED_RANGE``; the logistic and poisson losses' range
    starts at [-50, 50] and widens to labels past it, as VW's, or with ``HEADER_RANGE`` at
    the state's, -i's model's header's), and the rates in float32 as VW keeps them."""
    raw_labels = (kind & RAW_LABELS) != 0
    fixed_range = (kind & FIXED_RANGE) != 0
    header_range = (kind & HEADER_RANGE) != 0
    kind &= ~(RAW_LABELS | FIXED_RANGE | HEADER_RANGE)
    clip = clip_mode(kind)
    if header_range and clip == 2:
        clip = 1
    l1, l2 = _f(l1), _f(l2)
    return (kind, by_sign(kind) and not raw_labels, clip, clip != 0 and not fixed_range,
            l1, l2, _f(eta), l1 > 0.0 or l2 > 0.0, power_t == 0.5, _f(-power_t),
            _f(_f(power_t) - 1.0))


_NO_PRED = np.empty(0)  # (the kernel's ``pred`` where none is asked for)
_NO_SUMS = np.zeros(0)  # (and its ``sums``)


def online_chunk(indptr: np.ndarray, cols: np.ndarray, values: np.ndarray, labels: np.ndarray,
                 weights: np.ndarray, holdout: np.ndarray, start: int, end: int,
                 w: np.ndarray, g2: np.ndarray, nrm: np.ndarray, state: np.ndarray,
                 kind: int, eta: float, power_t: float, l1: float, l2: float,
                 out: np.ndarray, pred: np.ndarray | None = None, multi: bool = False,
                 given: bool = False, sums: np.ndarray | None = None) -> None:
    """Learn from examples [start, end); adds to ``out`` = [train loss, train weight,
    holdout loss, holdout weight, examples, features] and sets out[6:8] = last label,
    prediction (for progress lines); with ``sums`` (float64, ``_progress.SUMS`` long: the
    run's ``Progress.sums``) also adds each example's loss x weight and weight to VW's
    running sums there, in turn (a sum over the chunk, added after, rounds where the
    chunks are cut). With ``pred`` (float64, length end - start) it also
    writes each example's prediction before learning from it (VW's progressive ``-p``),
    for unlabelled and zero-weight examples too; with twice that length, the second half
    gets each raw score before the clip to the label range (VW's ``-r``).

    numba compiles the kernel once per combination of argument types (tens of seconds
    each, kept in its on-disk cache): with or without ``pred`` is one argument type here
    (an empty array and a flag), and the scalars are Python's int and float whatever the
    caller holds, so a run with ``-p`` and one without share the compiled kernel. The
    arrays' types are the caller's: ``w``, ``g2``, ``nrm`` are float32 column views of
    the dense rows (``GrowingWeights``), float32 arrays (later passes) or float64 arrays
    (the workers' mixed sums); float32 and float64 arrays give the same bits.

    ``multi``: the learner is one of one-against-all's K, scored as VW's multipredict
    scores them (:func:`_multi_score`); ``given``: its ``FIXED_RANGE`` is
    ``--min_prediction``/``--max_prediction``'s, to which every loss clips (a lone
    learner's ``FIXED_RANGE`` always is)."""
    _online_chunk(indptr, cols, values, labels, weights, holdout, int(start), int(end), w, g2,
                  nrm, state, int(kind), float(eta), float(power_t), float(l1), float(l2), out,
                  _NO_PRED if pred is None else pred, pred is not None, bool(multi),
                  bool(given), _NO_SUMS if sums is None else sums)


# nogil: the next block is read and decoded in another thread meanwhile (_blocks.prefetch);
# error_model numpy: 1/0 is inf, as in C
@numba.njit(cache=True, nogil=True, error_model="numpy")
def _online_chunk(indptr: np.ndarray, cols: np.ndarray, values: np.ndarray,
                  labels: np.ndarray, weights: np.ndarray, holdout: np.ndarray, start: int,
                  end: int, w: np.ndarray, g2: np.ndarray, nrm: np.ndarray, state: np.ndarray,
                  kind: int, eta: float, power_t: float, l1: float, l2: float,
                  out: np.ndarray, pred: np.ndarray, predict: bool, multi: bool,
                  given: bool, sums: np.ndarray) -> None:
    """:func:`online_chunk`'s loop; ``predict``: write ``pred``; ``multi``: score as VW's
    multipredict; ``sums``: VW's running sums (empty: none)."""
    running = len(sums) >= 10
    given = (kind & FIXED_RANGE) != 0 and (given or not multi)
    (kind, sign, clip, track, l1, l2, eta, reg, sqrt_rate, minus_power_t,
     neg_norm_power) = _settings(kind, eta, power_t, l1, l2)
    if given:  # (--min_prediction/--max_prediction: VW clips every loss to that range)
        clip = 1
    rows = w.strides[0] != w.itemsize  # views of one (n, 3) array: the dense layout
    for i in range(start, min(start + _AHEAD, end)):
        _ask(indptr, cols, i, end, w, g2, nrm, rows)
    for i in range(start, end):
        _ask(indptr, cols, i + _AHEAD, end, w, g2, nrm, rows)
        lab = labels[i]
        s = weights[i]
        labelled = not math.isnan(lab)
        learn = labelled and s > 0.0
        y = lab
        if sign:
            y = 1.0 if lab > 0 else -1.0
        if labelled and not holdout[i] and track:
            # VW clips squared and hinge predictions to the labels it was asked to learn
            # (zero-weight examples included, held-out ones not)
            state[MIN_LABEL] = min(state[MIN_LABEL], y)
            state[MAX_LABEL] = max(state[MAX_LABEL], y)
        if not learn and not predict:
            continue
        a = indptr[i]
        b = indptr[i + 1]
        # the lazy L1 truncates only where this run learns with L1: VW continues an -i
        # model's raw weights without it (its gravity kept for -t and the next --l1 run)
        gravity = state[GRAVITY] if l1 > 0.0 else 0.0
        raw = (_multi_score(cols, values, a, b, w, gravity, state[CONTRACTION], l1 > 0.0)
               if multi else _score(cols, values, a, b, w, gravity, state[CONTRACTION]))
        p = clip_prediction(clip, raw, state[MIN_LABEL], state[MAX_LABEL])
        if predict:
            pred[i - start] = p
            if len(pred) >= 2 * (end - start):  # VW's raw score (-r) in the second half
                pred[end - start + i - start] = raw
            if not learn:
                continue
        # VW's example loss, in float (a logistic loss past y*p ~ 16.6 is exactly 0, which
        # also decides VW's holdout comparisons between passes)
        lv = ranged_loss32(kind, p, y, state[MIN_LABEL], state[MAX_LABEL])
        slv = _f(lv * s)
        out[4] += 1.0
        out[5] += b - a
        out[6] = lab
        out[7] = p
        if holdout[i]:
            out[2] += slv
            out[3] += s
            if running:  # (VW's holdout sums: the run's, since its line, since the pass)
                sums[2] += slv
                sums[3] += s
                sums[6] += slv
                sums[7] += s
                sums[8] += slv
                sums[9] += s
            continue
        out[0] += slv
        out[1] += s
        if running:  # (VW's sum_loss, weighted_labeled_examples, and since the line)
            sums[0] += slv
            sums[1] += s
            sums[4] += slv
            sums[5] += s
        if not lv > 0.0:  # VW: nothing to learn once the float loss is 0 (or NaN: a
            # negative label under poisson)
            continue
        if _learn(cols, values, a, b, w, g2, nrm, state, state, kind, p, y, s, eta, l1, l2,
                  reg, sqrt_rate, minus_power_t, neg_norm_power,
                  ranged_prediction(kind, p, state[MIN_LABEL], state[MAX_LABEL])):
            sync_weights(w, state)


@numba.njit(cache=True, inline="always", error_model="numpy")
def _linked(p: float, link: int) -> float:
    """VW's scorer's link of a clipped score, in float with C's ``expf`` (numba's float32
    ``exp``), as ``_vw._vwlinknb.link32``: 0 logistic, 1 glf1, 2 poisson."""
    one = np.float32(1.0)
    x = np.float32(p)
    if link == 0:
        return float(one / (one + math.exp(-x)))
    if link == 1:
        return float(np.float32(2.0) / (one + math.exp(-x)) - one)
    return float(np.float32(math.exp(x)))


@numba.njit(cache=True, nogil=True, error_model="numpy")
def oaa_chunk(indptr: np.ndarray, cols: np.ndarray, values: np.ndarray, targets: np.ndarray,
              weights: np.ndarray, holdout: np.ndarray, arrays: np.ndarray,
              states: np.ndarray, kind: int, eta: float, power_t: float, l1: float,
              l2: float, scores: np.ndarray, link: int, widen: bool,
              given: bool = False) -> None:
    """One-against-all's K binary learners over the examples of one block, as VW's
    ``oaa`` reduction runs them: each example's K scores first (VW's multipredict: every
    learner as it was before the example), into ``scores[c, i]``, then each learner's
    update in class order, learner c with label +1 where ``targets[i] == c`` and -1
    elsewhere (NaN: unlabelled; unlabelled, zero-weight and held-out examples are scored
    only). Each learner's prediction and update are the binary learner's (``_score``,
    ``_learn``: :func:`online_chunk`'s operations in its order).

    ``arrays``: ``(K, D, 3)`` float32, each learner's rows of weight, adaptive sum and
    normalizer; ``states``: ``(K, STATE_SIZE)``, each learner's normalized sums and label
    range, and the lazy L1/L2 (``CONTRACTION``, ``GRAVITY``) that VW's K learners share:
    learner 0's row is read and written, and copied to the others after each example.

    ``link`` (VW's ``--link``: 0 logistic, 1 glf1, 2 poisson; -1 none): VW's learners
    learn from their linked scores (its scorer links each score before oaa hands it to
    the update), and the squared loss VW checks before an update is then its loss
    clipped to the labels' range as it is at that learner's update (``widen``: the range
    widens with each learner's label, class by class; else it stays): 0 where a score
    past a bound has that bound for label. ``scores`` stay unlinked (clipped); ``given``:
    the range is ``--min_prediction``/``--max_prediction``'s, to which every loss
    clips."""
    (kind, sign, clip, track, l1, l2, eta, reg, sqrt_rate, minus_power_t,
     neg_norm_power) = _settings(kind, eta, power_t, l1, l2)
    if given:
        clip = 1
    k_classes = arrays.shape[0]
    lazy = states[0]
    squared = kind == _SQUARED
    for i in range(len(targets)):
        t = targets[i]
        s = weights[i]
        labelled = not math.isnan(t)
        learn = labelled and s > 0.0 and not holdout[i]
        a = indptr[i]
        b = indptr[i + 1]
        for c in range(k_classes):
            st = states[c]
            if labelled and not holdout[i] and track:
                y = 1.0 if t == c else -1.0
                st[MIN_LABEL] = min(st[MIN_LABEL], y)
                st[MAX_LABEL] = max(st[MAX_LABEL], y)
            p = _multi_score(cols, values, a, b, arrays[c, :, 0],
                             lazy[GRAVITY] if l1 > 0.0 else 0.0, lazy[CONTRACTION], l1 > 0.0)
            scores[c, i] = clip_prediction(clip, p, st[MIN_LABEL], st[MAX_LABEL])
        if not learn:
            continue
        lo = states[0, MIN_LABEL]
        hi = states[0, MAX_LABEL]
        for c in range(k_classes):
            y = 1.0 if t == c else -1.0
            if sign:
                y = 1.0 if y > 0 else -1.0
            p = scores[c, i]
            pd = p
            if link >= 0 and not given:
                p = pd = _linked(p, link)
                if widen:
                    lo = min(lo, y)
                    hi = max(hi, y)
                if squared and ((p > hi and y == hi) or (p < lo and y == lo)):
                    continue  # (VW's squared loss of a score past the bound it learns: 0)
                if squared:  # (and its derivative takes the score clipped to the range)
                    pd = min(max(p, lo), hi)
            else:  # (VW's squared loss of a (linked) score past a bound of the range,
                # which may be lo > hi: the bound's loss on)
                if link >= 0:
                    p = _linked(p, link)
                pd = ranged_prediction(kind, p, lo, hi)
            if not (loss32(kind, p, y) if link >= 0 and not given
                    else ranged_loss32(kind, p, y, lo, hi)) > 0.0:
                # VW: nothing to learn at a float loss of 0
                # (or NaN)
                continue
            if _learn(cols, values, a, b, arrays[c, :, 0], arrays[c, :, 1], arrays[c, :, 2],
                      states[c], lazy, kind, p, y, s, eta, l1, l2, reg, sqrt_rate,
                      minus_power_t, neg_norm_power, pd):
                # VW folds the shared L1/L2 into every learner's weights
                for cc in range(k_classes):
                    states[cc, CONTRACTION] = lazy[CONTRACTION]
                    states[cc, GRAVITY] = lazy[GRAVITY]
                for cc in range(k_classes - 1, -1, -1):  # (learner 0's row reset last)
                    sync_weights(arrays[cc, :, 0], states[cc])
        if reg:
            for c in range(1, k_classes):
                states[c, CONTRACTION] = lazy[CONTRACTION]
                states[c, GRAVITY] = lazy[GRAVITY]
