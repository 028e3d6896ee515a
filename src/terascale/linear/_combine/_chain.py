"""Chained online passes (``average="chain"``): the workers learn one after another.

Averaging learners that each saw part of the data (:mod:`._average`, VW's cluster mode)
is not one learner's result: on shuffled click data two averaged workers end a little
above one learner's test logloss. A chain gives exactly
one learner's weights instead: in each pass worker 0 learns its shard, hands its learner
(weights, adaptive sums, normalizers and the learner's scalars) to worker 1, which goes on
learning from it on its own shard, and so on; the last one's learner goes to every
worker. That is a single online pass over the shards concatenated in rank order -- the
file read from start to end, when the workers hold its byte ranges -- so the model is
bitwise the one a single worker trains on the whole file.

What runs in parallel is the parse: every worker parses and caches its own shard at the
same time, worker 0 learning as it parses (:mod:`._firstpass`), the others only caching,
then learning from their caches when their turn comes. That can only beat one worker
where each worker has cores of its own and parsing is most of the cost: where one
worker's parser threads already use every core, 2 chained workers are slower than one
(the figures: ``docs/benchmarks/linear.md``, ``2w chain``). Later passes, and more workers, run one after another: beyond a
few workers averaging scales and a chain does not. Hand-offs are broadcasts of the
learner (3 floats per live feature), so every worker always holds the latest learner and
a pass ends with the same bits everywhere.

A hand-off waits for the workers before it to learn; its deadline grows with the examples
they learn from (``MIN_RATE`` examples per second at the slowest), so a dead or stalled
worker still ends the run with the collective's error instead of a hang.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...communicator import Communicator
from .._online._onlinepass import Weights

__all__ = ["MIN_RATE", "Chain"]

# Examples per second below which a hand-off gives up on the worker before it: a cached
# pass runs at about 10^6 examples/s a core, 50x faster.
MIN_RATE = 20_000.0


class Chain:
    """The hand-offs of one job: built once the workers' example counts are known."""

    def __init__(self, comm: Communicator, examples: int) -> None:
        self.comm = comm
        counts = comm.allgather(np.array([examples], np.int64)).reshape(-1)
        self.counts = [int(c) for c in counts]
        # where our shard starts in the concatenation: the holdout counts from there
        self.offset = sum(self.counts[:comm.rank])
        # a hand-off waits for the workers before its root: at most every example learned
        self.timeout = comm.timeout + sum(self.counts) / MIN_RATE

    def run(self, ws: Weights, learn: Callable[[], np.ndarray]) -> np.ndarray:
        """One pass: ``learn()`` (our shard, from the learner in ``ws``) when our turn
        comes, between the hand-offs; returns what ``learn`` returned."""
        comm = self.comm
        acc: np.ndarray | None = None
        for k in range(comm.size):
            if k == comm.rank:
                acc = learn()
            self._hand_off(ws, k)
        assert acc is not None
        return acc

    def _hand_off(self, ws: Weights, root: int) -> None:
        """Every worker takes ``root``'s learner (exact: the learner's values are float32
        or were float64 on every worker alike, and travel as float64)."""
        parts = (ws.w, ws.g2, ws.nrm, ws.state)
        if root == self.comm.rank:
            buf = np.concatenate([np.asarray(p, np.float64).reshape(-1) for p in parts])
            self.comm.broadcast(buf, root=root, timeout=self.timeout)
            return
        buf = np.empty(sum(p.size for p in parts), np.float64)  # the root's fills it
        self.comm.broadcast(buf, root=root, timeout=self.timeout)
        at = 0
        for p in parts:
            np.copyto(p, buf[at:at + p.size].reshape(p.shape), casting="unsafe")
            at += p.size
