"""Weight averaging over workers at the end of an online pass (allreduce of the weights).

Uniform averaging is Zinkevich, Weimer, Smola & Li (*Parallelized Stochastic Gradient
Descent*, NIPS 2010). Nonuniform averaging is VW's ``accumulate_weighted_avg`` (Agarwal et
al., JMLR 2014, sec. 3.1): each worker's weight j counts in proportion to its share of the
adaptive sum of squared gradients G_kj, w_j = sum_k w_kj G_kj / sum_k G_kj, so a worker that
saw a feature often dominates a worker that barely saw it. The adaptive sums become their
total and the normalizers their maximum, so the next pass continues as one learner would.
"""

from __future__ import annotations

import numpy as np

from ...communicator import Communicator
from .._online._state import MAX_LABEL, MIN_LABEL, SUM_NORM_X, TOTAL_WEIGHT

__all__ = ["average_weights", "weighted_average"]


def weighted_average(ws: np.ndarray, g2s: np.ndarray) -> np.ndarray:
    """The nonuniform average of rows ``ws`` (workers x weights) with adaptive sums ``g2s``
    (a reference for tests; the allreduce version computes the same sums)."""
    tot = g2s.sum(axis=0)
    ratio = np.divide(g2s, tot, out=np.zeros_like(g2s), where=tot > 0)
    return (ws * ratio).sum(axis=0)


_CHUNK = 1 << 20  # weights averaged per round of collectives


def average_weights(comm: Communicator, w: np.ndarray, g2: np.ndarray, nrm: np.ndarray,
                    state: np.ndarray, how: str) -> None:
    """Average in place over the workers of ``comm`` (identical result on every rank).

    A million weights at a time: the averages are elementwise, so the chunks change no
    value, and the buffers of the collectives (about 8 float64 a weight for the weighted
    average) stay a few tens of MB instead of growing with the number of features (88
    bytes a feature, 1 GB at 11M, was a wide run's peak). The arrays may be float32 (the
    learner's own, as VW keeps its weights): each chunk is averaged in float64 and rounded
    into them once, so averaging needs no float64 copy of the weight space."""
    if comm.size == 1:
        return
    d = len(w)
    for lo in range(0, d, _CHUNK):
        hi = min(d, lo + _CHUNK)
        _average(comm, w[lo:hi], g2[lo:hi], nrm[lo:hi], how)
    sums = comm.allreduce(np.array([state[TOTAL_WEIGHT], state[SUM_NORM_X]], np.float64))
    state[TOTAL_WEIGHT], state[SUM_NORM_X] = sums
    if state[MIN_LABEL] != state[MAX_LABEL]:
        state[MIN_LABEL] = comm.allreduce(np.array([state[MIN_LABEL]]), op="min")[0]
        state[MAX_LABEL] = comm.allreduce(np.array([state[MAX_LABEL]]), op="max")[0]


def _average(comm: Communicator, w: np.ndarray, g2: np.ndarray, nrm: np.ndarray,
             how: str) -> None:
    d = len(w)
    if how == "uniform":
        buf = comm.allreduce(np.concatenate([w, g2], dtype=np.float64))
        w[:] = buf[:d] / comm.size
    else:
        tot = comm.allreduce(np.asarray(g2, np.float64))
        ratio = np.divide(g2, tot, out=np.zeros_like(tot), where=tot > 0)
        buf = comm.allreduce(np.concatenate([w * ratio, g2], dtype=np.float64))
        w[:] = buf[:d]
    g2[:] = buf[d:]
    nrm[:] = comm.allreduce(np.asarray(nrm, np.float64), op="max")
