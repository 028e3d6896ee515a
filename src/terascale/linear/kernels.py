"""What the learners' inner loops cost per example: the public face of the linear kernels.

The planner (:mod:`terascale.sim`, ``terascale simulate --paper``) predicts a Terascale-sized
job (Agarwal, Chapelle, Dudík & Langford, JMLR 2014: 17B examples, 1,000 nodes) from the
per-example cost of one online pass and of one gradient pass of L-BFGS on this machine.
Those kernels (``_online.online_chunk``, ``_batch.loss_grad``) change with the learner,
so the package that owns them also owns how they are timed: callers outside
:mod:`terascale.linear` use :func:`kernel_cost` and never the private kernels.

:func:`warm_kernels` compiles them once (or loads numba's on-disk cache) in one process:
launchers call it before starting N workers so that N workers do not compile the same code
at once.

>>> cost = kernel_cost(features=8, examples=2000, bits=12, reps=1)
>>> cost.online_s > 0 and cost.gradient_s > 0
True
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ._batch._optimizers import loss_grad
from ._online._update import new_state, online_chunk
from ._warm import warm_kernels

__all__ = ["KernelCost", "kernel_cost", "warm_kernels"]


@dataclass(frozen=True)
class KernelCost:
    """Seconds per example of one online pass and of one logistic gradient pass.

    Parameters
    ----------
    online_s
        Seconds per example of one online pass.
    gradient_s
        Seconds per example of one logistic gradient pass.
    features
        Features per example timed.
    examples
        Examples timed.
    bits
        Hash bits of the weights.
    reps
        Repetitions (the fastest counts).
    """

    online_s: float
    gradient_s: float
    features: int
    examples: int
    bits: int
    reps: int


def kernel_cost(*, features: int = 124, examples: int = 200_000, bits: int = 24,
                seed: int = 0, reps: int = 3) -> KernelCost:
    """Time the online and gradient kernels on synthetic hashed examples (1 core).

    ``features`` non-zeros per example (124 is the Terascale data set's mean), uniformly
    hashed into ``2**bits`` weights, random ±1 labels; the best of ``reps`` runs after a
    warm-up call that compiles (or loads numba's cache). On a shared machine the best of a
    few is the honest figure: slower runs measure the neighbours.

    Parameters
    ----------
    features
        Features per example (default 124).
    examples
        Examples (default 200000).
    bits
        Hash bits of the weights (default 24).
    seed
        The random seed (default 0): the same seed, the same examples.
    reps
        Repetitions; the fastest counts (default 3).
    """
    rng = np.random.default_rng(seed)
    d = 1 << bits
    indptr = np.arange(examples + 1, dtype=np.int64) * features
    cols = rng.integers(0, d, examples * features).astype(np.uint32)
    values = np.ones(examples * features, np.float32)
    labels = np.where(rng.random(examples) < 0.5, 1.0, -1.0).astype(np.float32)
    weights = np.ones(examples, np.float32)
    holdout = np.zeros(examples, np.bool_)
    w, g2, nrm = np.zeros(d), np.zeros(d), np.zeros(d)
    acc = np.zeros(8)

    def online(k: int) -> None:
        online_chunk(indptr, cols, values, labels, weights, holdout, 0, k, w, g2, nrm,
                     new_state(), 0, 0.5, 0.5, 0.0, 0.0, acc, None)  # pred as the passes give it

    def gradient() -> None:
        loss_grad(indptr, cols, values, labels, weights, holdout, w, 0, np.zeros(d + 4), False)

    online(min(10, examples))
    gradient()
    t_on = t_grad = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        online(examples)
        t_on = min(t_on, time.perf_counter() - t0)
        t0 = time.perf_counter()
        gradient()
        t_grad = min(t_grad, time.perf_counter() - t0)
    return KernelCost(t_on / examples, t_grad / examples, features, examples, bits, reps)
