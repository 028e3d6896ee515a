"""Shared-memory allreduce for the ranks of one host (and the pieces hierarchical uses).

Two schedules over a :class:`~terascale.transport.shm.ShmGroup` (``n`` members, two
areas each):

* **flat** (two ranks, or ``n`` times the message at most ``FLAT_MAX_BYTES``): in rounds of
  ``area_bytes``, every rank copies its input into its area, one barrier, then every rank
  reduces all ``n`` areas in rank order into its output. One barrier per round is what
  makes 4 KiB cost a few microseconds; the redundant reduction costs less than a second
  barrier while ``n`` is small.
* **scatter** (otherwise): the message streams through the areas in rounds of
  ``area_bytes``. In a round, rank ``r`` copies the slices the others own into its area,
  barrier, reduces slice ``r`` of all inputs (its own straight from its input buffer) into
  its area and its output, barrier, and copies the other slices out while copying the next
  round's input in. Per rank that is ``(n-1)/n`` of the data in, one read of ``n`` slices,
  ``(n-1)/n`` out: the reduce-scatter + allgather of the ring, with the "network" being
  one memcpy.

Every element is reduced in rank order (``x0 op x1 op ... op x{n-1}``), elementwise: the
flat schedule has every rank do the same operations on the same bytes, the scatter one has
one rank do them and the others copy the result. Either way results are bitwise identical
on every rank, across runs and between the two schedules.

``src`` and ``dst`` may be the same buffer (in-place allreduce).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .._arrays import _BOOL_OPS, _NUMPY_OPS
from ..transport import Exchange
from ..transport.shm import ShmGroup
from ._chunks import bounds

__all__ = ["AREA_BYTES", "FLAT_MAX_BYTES", "ShmAllreduce", "shm_broadcast", "ufunc_for"]

AREA_BYTES = 2 << 20
# Measured (n=4: scatter wins from 256 KiB, 1 MiB in 0.55-0.62 vs 0.73-0.77 ms): flat while
# n * bytes <= this.
FLAT_MAX_BYTES = 512 << 10
# With two ranks the flat schedule wins at every size (measured 512 KiB to 64 MiB): it
# streams through the areas in rounds with one barrier each, and its redundant reads cost
# the same as the scatter schedule's extra copy.
FLAT_MAX_N = 2
Ufunc = Callable[..., np.ndarray]


def ufunc_for(op: str, dtype: np.dtype) -> Ufunc:
    """The numpy ufunc of ``op`` on ``dtype`` (logical or/and on bool, as everywhere)."""
    return (_BOOL_OPS if dtype.kind == "b" else _NUMPY_OPS)[op]


def _fold(ufunc: Ufunc, parts: list[np.ndarray], out: np.ndarray) -> None:
    """``out = parts[0] op parts[1] op ...`` left to right (the fixed order)."""
    if len(parts) == 1:
        np.copyto(out, parts[0])
        return
    ufunc(parts[0], parts[1], out=out)
    for p in parts[2:]:
        ufunc(out, p, out=out)


class ShmAllreduce:
    """Allreduce (or, with ``to_leader``, reduce to member 0 only) of flat ``src`` into ``dst``."""

    def __init__(self, g: ShmGroup, ex: Exchange, src: np.ndarray, dst: np.ndarray,
                 ufunc: Ufunc, deadline: float, *, to_leader: bool = False) -> None:
        self.g = g
        self.ex = ex
        self.src = src
        self.dst = dst
        self.ufunc = ufunc
        self.deadline = deadline
        self.to_leader = to_leader

    def run(self) -> None:
        g = self.g
        if g.n == 1:
            if self.dst is not self.src:
                np.copyto(self.dst, self.src)
            return
        g.announce(self.ex)
        if g.n <= FLAT_MAX_N or self.src.nbytes * g.n <= FLAT_MAX_BYTES:
            self._flat()
        else:
            self._scatter()

    def _flat(self) -> None:
        g, src, dst, dt = self.g, self.src, self.dst, self.src.dtype
        per = max(1, g.area_bytes // dt.itemsize)
        first = True
        for lo, hi in bounds(src.size, max(1, -(-src.size // per))):
            parity = g.round % 2
            np.copyto(g.area(g.index, parity, dt, hi - lo), src[lo:hi])
            g.barrier(self.ex, self.deadline, check=first)
            first = False
            g.round += 1
            if not self.to_leader or g.index == 0:
                _fold(self.ufunc, [g.area(j, parity, dt, hi - lo) for j in range(g.n)],
                      dst[lo:hi])

    def _scatter(self) -> None:
        g, src, dst, ex, n, me = self.g, self.src, self.dst, self.ex, self.g.n, self.g.index
        dt = src.dtype
        per = max(n, g.area_bytes // dt.itemsize)
        per -= per % n
        rounds = bounds(src.size, -(-src.size // per))
        pending: tuple[int, int, list[tuple[int, int]]] | None = None
        first = True
        for lo, hi in rounds:
            parity = g.round % 2
            sl = bounds(hi - lo, n)
            mine = g.area(me, parity, dt, hi - lo)
            a, b = sl[me]
            # Copy in the slices the others reduce (not our own: we read it from src).
            mine[:a] = src[lo: lo + a]
            mine[b:] = src[lo + b: hi]
            if pending is not None:
                self._copy_out(*pending)
            g.barrier(ex, self.deadline, check=first)
            first = False
            parts = [src[lo + a: lo + b] if j == me else g.area(j, parity, dt, hi - lo)[a:b]
                     for j in range(n)]
            _fold(self.ufunc, parts, mine[a:b])
            if not self.to_leader or me == 0:
                dst[lo + a: lo + b] = mine[a:b]
            g.barrier(ex, self.deadline)
            g.round += 1
            pending = (parity, lo, sl)
        if pending is not None:
            self._copy_out(*pending)

    def _copy_out(self, parity: int, lo: int, sl: list[tuple[int, int]]) -> None:
        g = self.g
        if self.to_leader and g.index != 0:
            return
        count = sl[-1][1]
        for j, (a, b) in enumerate(sl):
            if j != g.index:
                self.dst[lo + a: lo + b] = g.area(j, parity, self.dst.dtype, count)[a:b]


def shm_broadcast(g: ShmGroup, ex: Exchange, buf: np.ndarray, deadline: float) -> None:
    """Copy member 0's ``buf`` into every member's ``buf``, one barrier per round."""
    if g.n == 1:
        return
    dt = buf.dtype
    per = max(1, g.area_bytes // dt.itemsize)
    for lo, hi in bounds(buf.size, max(1, -(-buf.size // per))):
        parity = g.round % 2
        if g.index == 0:
            np.copyto(g.area(0, parity, dt, hi - lo), buf[lo:hi])
        g.barrier(ex, deadline)
        g.round += 1
        if g.index != 0:
            np.copyto(buf[lo:hi], g.area(0, parity, dt, hi - lo))
