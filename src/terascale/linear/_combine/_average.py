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

__all__ = ["average_weights", "union_bitmap", "weighted_average"]


def weighted_average(ws: np.ndarray, g2s: np.ndarray) -> np.ndarray:
    """The nonuniform average of rows ``ws`` (workers x weights) with adaptive sums ``g2s``
    (a reference for tests; the allreduce version computes the same sums)."""
    tot = g2s.sum(axis=0)
    ratio = np.divide(g2s, tot, out=np.zeros_like(g2s), where=tot > 0)
    return (ws * ratio).sum(axis=0)


_CHUNK = 1 << 18  # weights averaged per round of collectives


def average_weights(comm: Communicator, w: np.ndarray, g2: np.ndarray, nrm: np.ndarray,
                    state: np.ndarray, how: str, chunk: int = _CHUNK) -> None:
    """Average in place over the workers of ``comm`` (identical result on every rank).

    Parameters
    ----------
    comm
        The workers' communicator (every rank calls this alike).
    w, g2, nrm
        The learner's weights, adaptive sums and normalizers over the same features on
        every rank (the union's columns, or all ``2**bits`` dense rows by hashed index:
        a feature a worker never saw has zeros there and counts for nothing in either
        average); float32 or float64, contiguous or strided (a column of the rows).
    state
        The learner's scalars: the training weight and the sum of normalized ``x**2``
        become their totals, the label bounds their extremes.
    how
        ``"uniform"`` (the plain mean) or ``"weighted"`` (by the adaptive sums).
    chunk
        Weights averaged per round of collectives (default ``_CHUNK``, 2**18: 6 MiB of
        buffers). Any size gives the same bits; a smaller one holds less memory for
        more rounds (``terascale vw -n N``'s compiled workers, whose peak is a few tens
        of MB, take a 256th of the table between 2**14 and 2**16 rows: 384 KiB at ``-b
        18``).

    The averages are elementwise, so they are taken a chunk of ``_CHUNK`` weights at a
    time, through three float64 buffers of the chunk's size reused for every chunk and
    reduced in place: 6 MiB whatever the number of features (at the default chunk), where fresh arrays for every
    step of every chunk held 50 MB at once (a two-worker run's peak on wide data). The
    arrays may be float32 (the learner's own, as VW keeps its weights): each chunk is
    averaged in float64 and rounded into them once, so averaging needs no float64 copy of
    the weight space."""
    if comm.size == 1:
        return
    d = len(w)
    c = min(d, chunk)
    one, two = np.empty(c, np.float64), np.empty(2 * c, np.float64)
    for lo in range(0, d, chunk):
        hi = min(d, lo + chunk)
        n = hi - lo
        _average(comm, w[lo:hi], g2[lo:hi], nrm[lo:hi], how, one[:n], two[:2 * n])
    sums = comm.allreduce(np.array([state[TOTAL_WEIGHT], state[SUM_NORM_X]], np.float64))
    state[TOTAL_WEIGHT], state[SUM_NORM_X] = sums
    # every worker takes part, one that saw no example too (its range is the initial one,
    # which every worker's contains): a condition on its own state would leave it out of
    # a collective the others call
    lo_hi = comm.allreduce(np.array([state[MIN_LABEL], -state[MAX_LABEL]]), op="min")
    state[MIN_LABEL], state[MAX_LABEL] = lo_hi[0], -lo_hi[1]


def _average(comm: Communicator, w: np.ndarray, g2: np.ndarray, nrm: np.ndarray,
             how: str, one: np.ndarray, two: np.ndarray) -> None:
    """One chunk; ``one`` and ``two`` are float64 buffers of its length and twice it. The
    operations are :func:`weighted_average`'s (the ratio ``g2 / total`` in float64, times
    the weight), in the same order, so chunks and buffers change no bit."""
    d = len(w)
    lo, hi = two[:d], two[d:]
    if how == "uniform":
        lo[:] = w
        hi[:] = g2
        comm.allreduce(two, out=two)
        np.divide(lo, comm.size, out=lo)
    else:
        one[:] = g2
        comm.allreduce(one, out=one)  # the total adaptive sum of every weight
        lo[:] = 0.0
        np.divide(g2, one, out=lo, where=one > 0)  # each worker's share of it
        np.multiply(w, lo, out=lo)
        hi[:] = g2
        comm.allreduce(two, out=two)
    _put(w, lo)
    _put(g2, hi)
    one[:] = nrm
    comm.allreduce(one, op="max", out=one)
    _put(nrm, one)


def _put(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[:] = src``, except where both are +0.0: a row no worker saw keeps a page no one
    wrote, so dense rows on 4 KiB pages stay as resident as the data made them (writing
    the zeros back touched every page of a ``-b 24`` table: 2.4x VW's peak on data that
    touches a third of VW's array)."""
    write = src != 0
    write |= np.signbit(src)
    write |= dst != 0
    write |= np.signbit(dst)
    np.copyto(dst, src, casting="same_kind", where=write)


def union_bitmap(comm: Communicator, seen: np.ndarray) -> None:
    """Make ``seen`` (a bitmap of ``2**bits`` bits, bit ``h`` set where this worker saw the
    hashed index ``h``) the bitmap of every worker's features, in place: the bitwise or
    of all the workers' bitmaps, gathered a MiB at a time. With it, workers whose
    learners are dense rows by hashed index (:func:`average_weights` over all the rows)
    know the union without exchanging their feature lists: 2 MiB at ``-b 24`` where the
    sorted lists were 4 bytes a feature for every worker."""
    step = max(1 << 12, (1 << 20) // comm.size)
    for lo in range(0, len(seen), step):
        part = comm.allgather(np.ascontiguousarray(seen[lo:lo + step]))
        np.bitwise_or.reduce(part, axis=0, out=seen[lo:lo + step])
