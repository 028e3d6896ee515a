"""An allreduce algorithm written outside terascale: the proof that one module and one
registration make an algorithm complete (selectable by name, in the correctness matrix, in
``terascale bench allreduce`` and in ``terascale simulate``).

**Direct** all-to-all reduce: rank ``j`` owns block ``j`` of the vector (``n`` nearly equal
blocks); every rank sends block ``j`` to its owner, which folds the ``n`` parts in rank
order (``x_0 op x_1 op ... op x_{n-1}``, so the result is bitwise the same on every rank and
run), then sends its reduced block to every other rank (an allgather). Each rank sends and
receives ``2 (n-1)/n`` of the vector, like the ring, in two rounds of ``n - 1`` concurrent
messages instead of ``2 (n-1)`` steps in a row.

Importing this module registers it as ``"direct"``; name the module in
``TERASCALE_ALGORITHMS`` for processes started afresh (``terascale bench``) to know it.
Only public names of terascale are used.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from terascale.collectives import AllreduceCall, register_algorithm

__all__ = ["NAME", "DirectAllreduce", "direct_cost", "register"]

NAME = "direct"


def _blocks(count: int, parts: int) -> list[tuple[int, int]]:
    q, r = divmod(count, parts)
    edges = [i * q + min(i, r) for i in range(parts + 1)]
    return list(zip(edges[:-1], edges[1:]))


def _bytes(a: np.ndarray) -> memoryview:
    return memoryview(a).cast("B")


class DirectAllreduce:
    """Built from an :class:`~terascale.collectives.AllreduceCall`; :meth:`run` moves data."""

    @classmethod
    def for_call(cls, call: AllreduceCall) -> DirectAllreduce:
        return cls(call)

    def __init__(self, call: AllreduceCall) -> None:
        self.ex, self.buf, self.op = call.ex, call.dst, call.op
        self.rank, self.size = call.ex.rank, call.ex.size
        self.blocks = _blocks(self.buf.size, self.size)
        lo, hi = self.blocks[self.rank]
        self.parts = [np.empty(hi - lo, self.buf.dtype) for _ in range(self.size)]
        self.waiting = self.size - 1

    def run(self) -> None:
        r, n = self.rank, self.size
        if n == 1:
            return
        lo, hi = self.blocks[r]
        self.parts[r][:] = self.buf[lo:hi]
        for k in range(1, n):  # everyone's part of our block, then their reduced blocks
            src = (r - k) % n
            self.ex.recv(src, _bytes(self.parts[src]), then=self._arrived)
            a, b = self.blocks[src]
            self.ex.recv(src, _bytes(self.buf[a:b]))
        for k in range(1, n):
            dst = (r + k) % n
            a, b = self.blocks[dst]
            self.ex.send(dst, _bytes(self.buf[a:b].copy()))
        self.ex.run()

    def _arrived(self) -> None:
        self.waiting -= 1
        if self.waiting:
            return
        lo, hi = self.blocks[self.rank]
        out = self.buf[lo:hi]
        np.copyto(out, self.parts[0])
        for part in self.parts[1:]:  # rank order: the same bits on every rank and run
            self.op(out, part)
        for k in range(1, self.size):
            self.ex.send((self.rank + k) % self.size, _bytes(out))


def direct_cost(nbytes: float, nodes: int, per_host: int, c: Any, **_: Any) -> float:
    r"""Two rounds of ``p - 1`` messages per rank, ``(p-1)/p`` of the vector each way per
    round: :math:`2(p-1)\alpha + 2\frac{p-1}{p} m\beta + \frac{p-1}{p} m\gamma`."""
    p = nodes * per_host
    if p == 1:
        return 0.0
    c = c.for_message(nbytes).scaled(per_host)
    f = (p - 1) / p
    return float(2 * (p - 1) * c.alpha + 2 * f * nbytes * c.beta + f * nbytes * c.gamma)


def register() -> None:
    """Register ``"direct"`` (again: a no-op while it is registered)."""
    register_algorithm(NAME, DirectAllreduce, cost=direct_cost,
                       summary="direct all-to-all reduce of one block per rank, then allgather")


register()
