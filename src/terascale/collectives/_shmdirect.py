"""The direct schedule of large shared-memory allreduces: members read each other's buffers.

Where every member of a segment can read every other member's memory (Linux cross-memory
attach; agreed once per segment, :meth:`~terascale.transport.shm.ShmGroup.agree_direct`),
an allreduce of at least ``DIRECT_MIN_BYTES`` (``DIRECT_MIN_BYTES_PAIR`` for two members)
skips the segment's areas: in the compiled core (``src/terascale/_shmdirect.c``) member
``i`` reads slice ``i`` of every other
member's input straight from its buffer (``process_vm_readv``), in L2-sized chunks,
folds the ``n`` parts in member order into its output, and after a barrier reads the other
folded slices from their owners' outputs; a last barrier keeps every buffer alive until
nobody reads it. That is the reduce-scatter + allgather of the ring with the kernel's copy
as the network (as MPI libraries' single-copy shared-memory paths do, e.g. Open MPI's
vader with CMA, Vienne et al., "Kernel-assisted and topology-aware MPI collective
communications on multicore/many-core platforms", JPDC 2013).

Per member and message size ``S``: ``S (2 - 1/n)`` read, ``S`` written, against the flat
schedule's ``S (n + 1)`` read and ``2 S`` written (copy in, then fold every area; but its
rounds are cache-sized, so much of that stays in L2, which is why two members gain little,
see below). The fold
is the flat schedule's, element by element in member order, so the bits are the same on
every member and as on the copy path. Three barriers a call, each bounded as every other
shared-memory wait is (spin, then futex sleeps with link checks and the deadline).
"""

from __future__ import annotations

import numpy as np

from ..transport import Exchange
from ..transport.shm import ShmGroup

__all__ = ["DIRECT_CHUNK_BYTES", "DIRECT_MIN_BYTES", "DIRECT_MIN_BYTES_PAIR", "PHASES",
           "direct_allreduce", "finish_direct", "start_direct", "takes_direct"]

# From these sizes the direct schedule runs. Measured in one job, interleaved with the copy
# path, median CPU time per call on the loaded 2-core development host: with three or more
# members it replaces the scatter schedule's two barriers per 2 MiB round and its copies in
# and out (n=3: 1.28x less CPU at 1 MiB, 1.57x at 4 MiB, 1.81x at 16 MiB; n=4: 1.08x at
# 1 MiB, 1.5x at 16 MiB). With two it competes with the flat schedule, whose cache-sized
# rounds keep its extra copy in L2: no faster below 16 MiB (0.8-1.0x), 0.9-1.1x at 16-64 MiB
# there; ``TERASCALE_NO_CMA=1`` turns it off to compare on a quiet host.
DIRECT_MIN_BYTES = 1 << 20
DIRECT_MIN_BYTES_PAIR = 16 << 20
# Bytes per landing buffer of a peer's chunk: the n - 1 buffers, our input's chunk and our
# output's stay in L2 while the chunk is folded (two members, 8 MiB of a 16 MiB message,
# CPU time: 64 KiB chunks 3.3-3.6 ms, 256 KiB 3.2-3.4, 1 MiB 3.7-3.9: fewer reads, each
# pinning its pages, until the chunks leave L2).
DIRECT_CHUNK_BYTES = 256 << 10
PHASES = 3  # publish, reduce-scatter, allgather: one barrier after each


def takes_direct(g: ShmGroup, nbytes: int, kind: int) -> bool:
    """Whether an allreduce of ``nbytes`` (the core's dtype code ``kind``, -1: none) runs
    the direct schedule: the same answer on every member (``g.direct`` is agreed, the rest
    is in the collective's descriptor)."""
    least = DIRECT_MIN_BYTES_PAIR if g.n == 2 else DIRECT_MIN_BYTES
    return g.direct and kind >= 0 and nbytes >= least


def start_direct(g: ShmGroup, src: np.ndarray, dst: np.ndarray, tag: bytes | None, kind: int,
                 op: int, phase: int = 0, *, running: bool = False) -> tuple[int, int, int] | None:
    """The phases from ``phase`` (:meth:`ShmGroup.core_direct`): None when done, else
    what :func:`finish_direct` continues from."""
    return g.core_direct(src, dst, tag, kind, op, DIRECT_CHUNK_BYTES, PHASES, phase,
                         running=running)


def finish_direct(g: ShmGroup, ex: Exchange, deadline: float, pending: tuple[int, int, int],
                  src: np.ndarray, dst: np.ndarray, kind: int, op: int) -> None:
    """Complete a :func:`start_direct` that returned ``pending``: wait for the late members
    of that barrier with every failure check of :meth:`ShmGroup.finish` (or raise why a
    read failed), then run the remaining phases, as often as members are late."""
    left: tuple[int, int, int] | None = pending
    while left is not None:
        phase, status, err = left
        if err:
            g.read_failed(ex, deadline, status, err)
        g.finish(ex, deadline, check=phase == 0, running=phase != 0, spun=status >= 0)
        left = start_direct(g, src, dst, None, kind, op, phase + 1, running=True)


def direct_allreduce(g: ShmGroup, ex: Exchange, deadline: float, src: np.ndarray,
                     dst: np.ndarray, kind: int, op: int) -> None:
    """The whole direct schedule of ``src`` into ``dst`` (flat, C-contiguous, equal size)."""
    if src is not dst and np.may_share_memory(src, dst):
        src = src.copy()  # a partial overlap: our reads of src would see our writes of dst
    pending = start_direct(g, src, dst, g.tag_of(ex), kind, op)
    if pending is not None:
        finish_direct(g, ex, deadline, pending, src, dst, kind, op)
