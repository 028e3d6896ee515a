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
normalizers and label bounds their maximum and minimum.

Tuning. Measured on ``terascale bench linear --large``'s click-style data, one pass: with
2 workers at 1M examples test logloss above one learner's by +0.0028 when averaging only
at the end of the pass and +0.0006 with K = 2000 (AUC -0.0012 and -0.0003); an in-process
simulation of the same runs (it reproduces both) gives +0.0006 with K = 1000 and +0.0009
with K = 5000 or 10000. The mix is a sum of changes computed against a model K examples
old on every worker: with more workers the same K over-shoots (stale gradients pushing one
way P times) and can diverge. At 200k examples (one learner: 0.450): 3 workers with
K = 888 end at 0.453; 4 workers at 0.467 averaging at the end, 1.40 with K = 2000 and
0.454 with K = 500 (simulated: 0.82 with K = 1000). So K should shrink as
8000 / P^2 (2 workers: 2000, 4: 500); beyond 4 workers it has not been measured. The
default is 0 (see :func:`default_every` for why).

Cost. A mix is one allreduce of 3 doubles per feature some worker learned from since the
last mix (the others are the last mix on every rank: their changes are all zero; the
workers' sets are joined by an allgather), summed in place in a buffer kept between mixes.
Measured, 3M click examples from text, 2 workers, K = 10000 (151 mixes a worker, 303k
features in the union, ~19k learned from between two mixes): 2.9-3.3 ms of CPU a mix
against 5.5-6.3 ms over every feature, the same model bitwise; the wall time a mix takes is
still mostly one worker waiting for the other (0.9-2.7 s over the 151 mixes on the 2-core
host). Where the L1/L2 shrinkage is lazy (``--l1``, ``--l2``) every weight changes between
mixes, and the mix is over every feature.

A mix also carries, over the compact columns of a cached pass, one max-allreduce of the
normalizers when one changed; the first pass over text sends only the changed ones, in
the allgather that grows its mixed space (:class:`._firstpass.TextMixer`). The figures
that follow predate the sparse mix (every feature of the union in every mix). Profiled at 1M
click examples from text, 2 workers, K = 2000 (162k live features, 3.9 MB a mix, 251 mixes
a worker; timestamps around each step on both workers, CPU time of the learner's thread,
on the 2-core host with other jobs running), a mix took 45 ms of wall time and 19.5 ms of
CPU: 11 ms copying the union's weights out of and back into the local columns (numpy
gathers in hashed order), 5 ms in the two loops and the allreduce's reduction, 3 ms in the
normalizers' max-allreduce; the rest was waiting in 4 collectives a mix (the allgather's
sizes and ring, the sum, the max), each barrier a futex sleep whose wake-up queued behind
the worker's own parser thread on the shared core (EEVDF lets a running task finish its
slice: :mod:`terascale._background`, which now runs the parser at nice 19). Now: 6.2 ms of
CPU a mix (the loops read the learner's arrays in place, 1.3 ms each; the allreduce 1.3
ms; the allgather 1.0 ms) in 2 collectives, and ~18 ms of wall time, most of it the
workers' drift at the allgather (arrival skew mean 12 ms, median 4 ms): time one worker
waits for the other's K examples, not the mix's own cost. Raise K where that shows.
``K = 0`` mixes only at the end of the pass (the classic one-shot average, ``--average``).

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

from ..communicator import Communicator
from ._online import sync_weights

if TYPE_CHECKING:
    from ._onlinepass import Weights

__all__ = ["Mixer", "compile_kernels", "default_every", "grown"]

def default_every(workers: int) -> int:
    """Examples per worker between mixes by default: 0, averaging at the end of a pass only
    (VW's cluster mode), whatever the number of workers. Measured on the 2-core host, 2
    workers, click examples from text at ``-b 24`` (``terascale linear train
    click-1M-train.vw -n 2 -b 24 --loss logistic --average-every K`` into an empty cache
    directory, then ``terascale linear evaluate``), back to back, time as a ratio to K = 0's
    (the host was shared: the jobs ran at a higher priority than the other load, twice at
    1M; logloss is deterministic):

    ======  ==============  ==============  ==============  ==============
    K       1M time         1M test logloss 3M time         3M test logloss
    ======  ==============  ==============  ==============  ==============
    1 wkr   1.11-1.55       0.43343         1.67            0.43021
    0       1 (4.8 s)       0.43623         1 (8.4-12.4 s)  0.43159
    10000   0.79-0.86       0.43441         1.03-1.29       0.43033
    5000    0.80-1.10       0.43429         1.46            0.43018
    2000    0.94-1.37       0.43404         1.71            0.43008
    ======  ==============  ==============  ==============  ==============

    On the quiet machine (benchmarks/RESULTS.md, "Mixing during the pass"; training time
    as the CLI reports it): 1M K = 0 3.79 s, K = 10000 5.24 s; 3M K = 0 9.34 s, K = 10000
    10.03 s; the same loglosses.

    K = 10000 is within one learner's logloss + 0.001 at both sizes (K = 0 is not: +0.0028,
    +0.0014) and cost nothing measurable at 1M, but 20-30% at 3M, where the mix itself (7
    ms of CPU, 2 collectives) is not what costs: the workers drift apart between mixes (at
    the allgather, arrival skew mean 40 ms, median 21 ms, a mix) and each mix waits for the
    slower one. Mixing by default also turns a shard shorter than K into one mix at its
    end instead of VW's weighted average. So 0 stays the default until the drift is gone;
    set K where accuracy matters more: 2 workers 10000 (or 5000 for a margin), more workers
    8000 / P^2 (3: 888, 4: 500), where mixing was measured stable (a K that suits 2 workers
    over-shoots with 4: K = 2000 diverged).

    Nor is the mix's accuracy monotone in K. Measured 2026-12-02 (same command, test
    logloss; one learner 0.43343 at 1M, 0.43021 at 3M): 1M K = 10000 0.43441, 20000
    0.44583, 50000 0.43435, 100000 0.43577; 3M K = 10000 0.43033, 20000 0.43017, 50000
    0.43451, 100000 0.43106. A sum of changes made against a model K examples old can
    over-shoot at any K, and a default that is right at one size of one data set can be
    worse than the end-of-pass average at another."""
    del workers  # (the table above is for 2 workers; with more, see the module's tuning)
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
def _pack(w: np.ndarray, g2: np.ndarray, nrm: np.ndarray, bw: np.ndarray, bg: np.ndarray,
          bn: np.ndarray, at: np.ndarray, d: int, q: float, buf: np.ndarray,
          norms: bool) -> bool:
    """buf[:3d] = [changes of w, additions to G, their advances] of the mixed features
    (feature j is column ``at[j]``, or j with ``at`` empty); whether a normalizer changed
    (``norms``: else not looked at)."""
    changed = False
    for j in range(d):
        c = at[j] if len(at) else j
        dg = max(g2[c] - bg[c], 0.0)
        buf[j] = w[c] - bw[c]
        buf[d + j] = dg
        buf[2 * d + j] = _advance(bg[c], dg, q)
        if norms and nrm[c] != bn[c]:
            changed = True
    return changed


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
        if not self.sparse:
            return self._mix(ws, _IDENTITY, len(ws.w), done, True)
        # the columns some worker learned from: the others are the last mix everywhere
        for cols in self.comm.allgather_object(np.flatnonzero(self.mark)):
            self.mark[cols] = True
        at = np.flatnonzero(self.mark)
        self.mark[at] = False
        return self._mix(ws, at, len(at), done, True)

    def _buffer(self, n: int) -> np.ndarray:
        if len(self._buf) < n:
            self._buf = np.zeros(max(n, len(self._buf) + len(self._buf) // 2))
        return self._buf[:n]

    def _mix(self, ws: Weights, at: np.ndarray, d: int, done: bool, norms: bool) -> bool:
        """Mix features ``at`` (``d`` of them; empty: columns 0..d-1) of ``ws``, whose bases
        are indexed as its columns; ``norms``: the normalizers and label bounds too (else
        the caller has mixed them)."""
        w, g2, nrm, state = ws.w, ws.g2, ws.nrm, ws.state
        sync_weights(w, state)  # lazy L1/L2 folded in: the changes are plain weights
        assert self._base is not None, "Mixer.start() first"
        bw, bg, bn, bst = self._base
        buf = self._buffer(3 * d + 4)
        changed = _pack(w, g2, nrm, bw, bg, bn, at, d, self.q, buf, norms)
        changed = changed or state[4] != bst[4] or state[5] != bst[5]
        buf[3 * d:3 * d + 2] = state[:2] - bst[:2]
        buf[3 * d + 2] = 1.0 if done else 0.0
        buf[3 * d + 3] = 1.0 if changed and norms else 0.0
        tot = self.comm.allreduce(buf, out=buf)
        self.mixes += 1
        _unpack(tot, at, d, self.q, w, g2, bw, bg)  # bw, bg: now the mix
        state[:2] = bst[:2] + tot[3 * d:3 * d + 2]
        everyone = bool(tot[3 * d + 2] >= self.comm.size)
        if tot[3 * d + 3] > 0:
            cols = at if len(at) else slice(0, d)
            mx = self.comm.allreduce(np.concatenate([nrm[cols], [-state[4], state[5]]]),
                                     op="max")
            nrm[cols] = mx[:d]
            state[4], state[5] = -mx[d], mx[d + 1]
            bn[cols] = nrm[cols]
        _multiplier(state, 1.0 - self.q)
        bst[:] = state
        return everyone

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
        _pack(z, z, z, z, z, z, at, 2, 0.5, buf, True)
        _unpack(buf, at, 2, 0.5, z, z, z, z)


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
    if state[0] <= 0 or state[1] <= 0:
        return
    f = np.float32
    if power_t == 0.5:
        state[6] = float(f(np.sqrt(f(f(state[0]) / f(state[1])))))
    else:
        state[6] = float(f(f(f(state[1]) / f(state[0])) ** f(f(power_t) - f(1.0))))
