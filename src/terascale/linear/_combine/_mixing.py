"""Averaging during an online pass: the workers' models are mixed every K examples.

Averaging once at the end of a pass (Zinkevich et al. 2010; VW's cluster mode) costs
accuracy: each worker learns from 1/P of the data with learning rates of its own, and the
average of P under-trained models is not the model one learner would have reached.
Iterative parameter mixing (McDonald, Hall & Mann, *Distributed Training Strategies for
the Structured Perceptron*, NAACL 2010) mixes the workers' weights every epoch; here every
``average_every`` examples of each worker's shard, within the pass, so that every worker
continues from the mixture.

What is mixed is each worker's *change* since the last mix. With adaptive rates (AdaGrad's
1/sqrt(G)) a plain average of the changes halves the progress one learner would have made
on a feature both workers saw, and a plain sum over-shoots on features whose rate has not
decayed yet. The mix is therefore the sum of the changes, scaled per weight by how far one
learner would have moved against how far the workers moved, if each step is proportional
to G^-p (p = ``power_t``) under a gradient of constant size:

    w = w0 + sum_k dw_k * ((G0 + sum_k dG_k)^(1-p) - G0^(1-p))
                         / sum_k ((G0 + dG_k)^(1-p) - G0^(1-p))

with G0 the adaptive sum at the last mix and dG_k worker k's addition to it. A feature
only one worker saw keeps that worker's change exactly; a feature with a long history
(G0 large) gets about the sum of the changes, as one learner would. The adaptive sums
become G0 + sum_k dG_k and the learner's running sums likewise (one learner's state), the
normalizers and label bounds their maximum and minimum. The changes are summed in one
scale: where a worker met a larger value than the mix's normalizer, VW's learner rescaled
that weight ((old/new)^(2(1-p))); the mix rescales the base and every worker's weight to
the largest normalizer first (:meth:`Mixer.renormalize`).

The sum is right while the steps are small against the curvature. Where they settle
within one mix (the bias, the numeric columns every example has) the sum of P changes goes
P times as far and the mix can over-shoot; a bound per feature does not cure it, because
the features of one example move the prediction together.

Tuning K. ``K = 0`` (the default, :func:`default_every`) mixes only at the end of the pass,
the classic one-shot average (``--average``). Mixing helps on shuffled shards and hurts on
time-ordered ones (each worker's changes are correlated within its own part of the data,
and a mix sums them); the result is not monotone in K. With more workers the same K
over-shoots (stale changes pushing one way P times): shrink K as about 8000 / P^2. The
figures (test logloss by K, 1M and 3M click examples, the flights file, the time it costs)
are in the docs' benchmark page ``docs/benchmarks/linear.md``, "Mixing during the pass".

Cost. A mix is two collectives: an allgather of the sets of features each worker learned
from since the last mix (the others are the last mix on every rank: their changes are
zero), which also carries each worker's changed normalizers, label bounds and additions to
the running sums so that every rank rescales and joins them from the same values; and one
allreduce of 3 doubles per feature of the union, summed in place in a buffer kept between
mixes. The same allgather grows the mixed space in the first pass over text
(:class:`._firstpass.TextMixer`). Where the L1/L2 shrinkage is lazy (``--l1``, ``--l2``)
every weight changes between mixes, and the mix is over every feature. The wall time of a
mix is mostly one worker waiting for the other's K examples: raise K where that shows.

Determinism and unequal shards. Every worker mixes after every K examples of its shard
position (independent of how the shard is cut into blocks); each mix carries a flag saying
whether the worker has run out of examples, and a worker that has keeps taking part in the
mixes, with no change, until every worker has: all workers make the same calls, and every
rank ends with bitwise the same model.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numba
import numpy as np

from ...communicator import Communicator
from .._online._state import MAX_LABEL, MIN_LABEL, SUM_NORM_X, TOTAL_WEIGHT, UPDATE_MULTIPLIER
from .._online._update import sync_weights

if TYPE_CHECKING:
    from .._online._onlinepass import Weights

__all__ = ["Mixer", "compile_kernels", "default_every", "grown"]

def default_every(workers: int) -> int:
    """Examples per worker between mixes by default: 0, averaging at the end of a pass only
    (VW's cluster mode), whatever the number of workers.

    Mixing is opt-in because no K helps on every data set: it helps on shuffled shards at
    some K, hurts on time-ordered ones at every K, a K that suits 2 workers diverges with
    4, and each mix waits for the slower worker (the figures: ``docs/benchmarks/linear.md``,
    "Mixing during the pass"). A shard shorter than K would get one mix at its end instead
    of VW's weighted average. Set K where the shards are shuffled and accuracy matters more
    than time: 2 workers 10000-20000, more workers about 8000 / P^2 (3: 888, 4: 500).

    Parameters
    ----------
    workers
        The number of workers (the default does not depend on it today).
    """
    del workers
    return 0


@numba.njit(cache=True, inline="always")
def _advance(g0: float, dg: float, q: float) -> float:
    """(g0 + dg)^q - g0^q without the cancellation of the direct difference (q = 1 - p);
    q <= 0 (steps that do not shrink as G^-p with p < 1): 1 for a change, so the mix is
    the mean of the changes."""
    if dg <= 0.0:  # most weights between two mixes: no transcendental call
        return 0.0
    if q <= 0.0:
        return 1.0
    if q == 0.5:  # VW's default power_t: sqrt(g0 + dg) - sqrt(g0), rationalized
        return dg / (math.sqrt(g0 + dg) + math.sqrt(g0))
    if g0 > 0.0:
        return g0 ** q * math.expm1(q * math.log1p(dg / g0))
    return dg ** q


@numba.njit(cache=True, nogil=True)
def _pack(w: np.ndarray, g2: np.ndarray, bw: np.ndarray, bg: np.ndarray, at: np.ndarray,
          d: int, q: float, buf: np.ndarray) -> None:
    """buf[:3d] = [changes of w, additions to G, their advances] of the mixed features
    (feature j is column ``at[j]``, or j with ``at`` empty)."""
    for j in range(d):
        c = at[j] if len(at) else j
        dg = max(g2[c] - bg[c], 0.0)
        buf[j] = w[c] - bw[c]
        buf[d + j] = dg
        buf[2 * d + j] = _advance(bg[c], dg, q)


@numba.njit(cache=True, nogil=True)
def _unpack(tot: np.ndarray, at: np.ndarray, d: int, q: float, w: np.ndarray,
            g2: np.ndarray, bw: np.ndarray, bg: np.ndarray) -> None:
    """The mix from the summed ``tot``; the bases become the mix."""
    for j in range(d):
        c = at[j] if len(at) else j
        sdw, sdg, sadv = tot[j], tot[d + j], tot[2 * d + j]
        scale = _advance(bg[c], sdg, q) / sadv if sadv > 0.0 else 1.0
        w[c] = bw[c] + sdw * scale
        g2[c] = bg[c] + sdg
        bw[c] = w[c]
        bg[c] = g2[c]


@numba.njit(cache=True, nogil=True)
def _rescale(w: np.ndarray, nrm: np.ndarray, bw: np.ndarray, bn: np.ndarray,
             cols: np.ndarray, vals: np.ndarray, e: float) -> None:
    """Normalizers raised to ``vals`` where larger, the weights rescaled by (old / new)^e
    as the learner does (e = 2(1 - p): old / new at VW's default p = 1/2)."""
    for j in range(len(cols)):
        c = cols[j]
        m = vals[j]
        if m > nrm[c]:
            if nrm[c] > 0.0:
                w[c] = w[c] * (nrm[c] / m) ** e
            nrm[c] = m
        if m > bn[c]:
            if bn[c] > 0.0:
                bw[c] = bw[c] * (bn[c] / m) ** e
            bn[c] = m


_IDENTITY = np.zeros(0, np.int64)  # ``at`` of a mix over every column, in column order


class Mixer:
    """Mixes the workers' online learners every ``every`` examples (see the module)."""

    def __init__(self, comm: Communicator, every: int, power_t: float, *,
                 sparse: bool = True) -> None:
        self.comm = comm
        self.every = every
        self.q = 1.0 - power_t
        self.sparse = sparse
        self.mixes = 0
        self.mark = np.zeros(0, np.bool_)  # (sparse) columns learned from since the last mix
        self._base: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        # the mix's buffer, reused (reduced in place): a fresh one each mix cost its page
        # faults, ~1 ms of system time per MB
        self._buf = np.zeros(0)

    def next_due(self, pos: int) -> int:
        """The shard position of the next mix after ``pos``."""
        return (pos // self.every + 1) * self.every

    def start(self, ws: Weights) -> None:
        """Record the common starting point of a pass (every rank holds the same model)."""
        self._base = (ws.w.copy(), ws.g2.copy(), ws.nrm.copy(), ws.state.copy())
        self.mark = np.zeros(len(ws.w), np.bool_)

    def seen(self, cols: np.ndarray) -> None:
        """The columns of the examples just learned (every chunk the learner runs)."""
        if self.sparse:
            self._mark(cols)

    def _mark(self, cols: np.ndarray) -> None:
        if len(cols):
            top = int(cols.max()) + 1
            if top > len(self.mark):
                self.mark = grown(self.mark, max(top, 2 * len(self.mark)))
            self.mark[cols] = True

    def mix(self, ws: Weights, done: bool) -> bool:
        """One mix (a collective: every rank calls it alike); returns whether every worker
        has run out of examples. The learner's arrays are updated in place."""
        assert self._base is not None, "Mixer.start() first"
        bn = self._base[2]
        if self.sparse:
            marked = np.flatnonzero(self.mark)
            moved = marked[ws.nrm[marked] != bn[marked]]
        else:
            marked = _IDENTITY
            moved = np.flatnonzero(ws.nrm != bn)
        gathered = self.comm.allgather_object(
            (marked, moved, ws.nrm[moved], self.local_state(ws)))
        for _, cols, vals, _ in gathered:
            self.renormalize(ws, cols, vals)
        self.join_states(ws, [g[-1] for g in gathered])
        if not self.sparse:
            return self._mix(ws, _IDENTITY, len(ws.w), done)
        # the columns some worker learned from: the others are the last mix everywhere
        for g in gathered:
            self.mark[g[0]] = True
        at = np.flatnonzero(self.mark)
        self.mark[at] = False
        return self._mix(ws, at, len(at), done)

    def local_state(self, ws: Weights) -> np.ndarray:
        """This worker's label bounds and additions to the running sums since the last mix,
        for :meth:`join_states` (sent in the mix's allgather)."""
        assert self._base is not None
        st, bst = ws.state, self._base[3]
        return np.array([st[MIN_LABEL], st[MAX_LABEL], st[TOTAL_WEIGHT] - bst[TOTAL_WEIGHT],
                         st[SUM_NORM_X] - bst[SUM_NORM_X]])

    def join_states(self, ws: Weights, states: list[np.ndarray]) -> None:
        """The workers' :meth:`local_state` (in rank order on every rank) joined: the label
        bounds' minimum and maximum, one learner's running sums (added in rank order: the
        same bits everywhere) and their multiplier."""
        assert self._base is not None
        st, bst = ws.state, self._base[3]
        st[MIN_LABEL] = min(float(x[0]) for x in states)
        st[MAX_LABEL] = max(float(x[1]) for x in states)
        st[TOTAL_WEIGHT], st[SUM_NORM_X] = bst[TOTAL_WEIGHT], bst[SUM_NORM_X]
        for x in states:
            st[TOTAL_WEIGHT] += x[2]
            st[SUM_NORM_X] += x[3]
        _multiplier(st, 1.0 - self.q)

    def renormalize(self, ws: Weights, cols: np.ndarray, vals: np.ndarray) -> None:
        """Another worker's normalizers ``vals`` of columns ``cols``: the maximum is kept, and the weights, local and base, whose normalizer grows are
        rescaled as the learner does when it meets a larger value, so that the changes
        the mix sums are in one scale (a learner that met x = 5 where the base had 1
        holds its weight in fifths: summed with another worker's change in units, it
        would count that change five times)."""
        assert self._base is not None
        bw, _, bn, _ = self._base
        _rescale(ws.w, ws.nrm, bw, bn, cols, vals, 2.0 * self.q)

    def _buffer(self, n: int) -> np.ndarray:
        if len(self._buf) < n:
            self._buf = np.zeros(max(n, len(self._buf) + len(self._buf) // 2))
        return self._buf[:n]

    def _mix(self, ws: Weights, at: np.ndarray, d: int, done: bool) -> bool:
        """Mix features ``at`` (``d`` of them; empty: columns 0..d-1) of ``ws``, whose bases
        are indexed as its columns, after :meth:`renormalize` and :meth:`join_states`
        (normalizers and running sums are the same on every rank)."""
        w, g2, state = ws.w, ws.g2, ws.state
        sync_weights(w, state)  # lazy L1/L2 folded in: the changes are plain weights
        assert self._base is not None, "Mixer.start() first"
        bw, bg, _, bst = self._base
        buf = self._buffer(3 * d + 1)
        _pack(w, g2, bw, bg, at, d, self.q, buf)
        buf[3 * d] = 1.0 if done else 0.0
        tot = self.comm.allreduce(buf, out=buf)
        self.mixes += 1
        _unpack(tot, at, d, self.q, w, g2, bw, bg)
        bst[:] = state
        return bool(tot[3 * d] >= self.comm.size)

    def finish(self, ws: Weights) -> None:
        """This worker's shard is done: mix (with no further change) until every worker's
        is."""
        while not self.mix(ws, True):
            pass


def compile_kernels() -> None:
    """Compile (or load from numba's cache) the mix's kernels for both layouts, every column
    (a cached pass) and some (the first pass over text), without a job."""
    z = np.zeros(4)
    for at in (_IDENTITY, np.arange(2, dtype=np.int64)):
        buf = np.zeros(12)
        _pack(z, z, z, z, at, 2, 0.5, buf)
        _unpack(buf, at, 2, 0.5, z, z, z, z)
    _rescale(z, z, z, z, np.arange(2, dtype=np.int64), np.ones(2), 1.0)


def grown(a: np.ndarray, n: int, fill: int = 0) -> np.ndarray:
    """``a`` extended with ``fill`` to at least ``n`` entries (itself if long enough)."""
    if len(a) >= n:
        return a
    out = np.full(n, fill, a.dtype)
    out[:len(a)] = a
    return out


def _multiplier(state: np.ndarray, power_t: float) -> None:
    """The normalized update's multiplier from the mixed running sums (as ``online_chunk``
    sets it after every update, in float32), so that every rank holds the same state."""
    if state[TOTAL_WEIGHT] <= 0 or state[SUM_NORM_X] <= 0:
        return
    f = np.float32
    tw, sx = f(state[TOTAL_WEIGHT]), f(state[SUM_NORM_X])
    if power_t == 0.5:
        state[UPDATE_MULTIPLIER] = float(f(np.sqrt(f(tw / sx))))
    else:
        state[UPDATE_MULTIPLIER] = float(f(f(sx / tw) ** f(f(power_t) - f(1.0))))
