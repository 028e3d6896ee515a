"""The direct schedule of large shared-memory allreduces: members reach into each other's buffers.

Where every member of a segment can read and write every other member's memory (Linux
cross-memory attach; agreed once per segment,
:meth:`~terascale.transport.shmgroup.ShmGroup.agree_direct`), an allreduce of at least
``DIRECT_MIN_BYTES`` skips the segment's areas:
in the compiled core (``src/terascale/_shmdirect.c``) member ``i`` reads slice ``i`` of
every other member's input straight from its buffer (``process_vm_readv``) in L2-sized
chunks, folds the ``n`` parts in member order into its output, and writes each folded
chunk, while it is still in L2, into every other member's output (``process_vm_writev``);
one barrier before (descriptors compared) and one after, which keeps every buffer alive
until nobody touches it. That is the reduce-scatter + allgather of the ring with the
kernel's copy as the network, as MPI libraries' single-copy shared-memory paths do (Open
MPI's vader with CMA; Vienne et al., "Kernel-assisted and topology-aware MPI collective
communications on multicore/many-core platforms", JPDC 2013).

Per member and message size ``S``: ``S`` read (the others' parts of our slice, our slice)
and ``S`` written (our slice, ``n`` times), with no copy through the segment, against the
flat schedule's copy in (``S``) and fold of every area (``n S`` read, ``S`` written) and the
scatter schedule's copies in and out with two barriers per 2 MiB round. Each member pushes
its folded chunks from cache rather than having the others pull them from memory after a
third barrier: one pass over memory and one barrier fewer. The fold is the flat schedule's, element by element
in member order, so the bits are the same on every member and as on the copy path.

A member that fails withdraws its arrival, and the others check it before writing each
chunk into it; a failed call's buffers are kept for the life of the process (``_KEPT``), so
a chunk already under way when a member gave up lands in memory nobody reuses.
"""

from __future__ import annotations

import numpy as np

from ..transport import Exchange
from ..transport.shmgroup import ShmGroup

__all__ = ["DIRECT_CHUNK_BYTES", "DIRECT_MIN_BYTES", "PHASES",
           "direct_allreduce", "finish_direct", "start_direct", "takes_direct"]

# From this size the direct schedule runs, whatever the number of members: below it the
# reads' per-call cost (each process_vm_readv pins the pages it reads) outweighs the copy
# it saves (the figures and their command: docs/benchmarks/allreduce.md, "Where the direct
# shared-memory schedule starts").
DIRECT_MIN_BYTES = 4 << 20
# Bytes per landing buffer of a peer's chunk: the n - 1 buffers, our input's chunk and our
# output's stay in L2 while the chunk is folded; smaller chunks mean more calls, each
# pinning its pages.
DIRECT_CHUNK_BYTES = 256 << 10
PHASES = 2  # publish; reduce-scatter + allgather: one barrier after each
# The buffers of direct allreduces that failed, kept for the life of the process.
_KEPT: list[tuple[np.ndarray, np.ndarray]] = []


def takes_direct(g: ShmGroup, nbytes: int, kind: int) -> bool:
    """Whether an allreduce of ``nbytes`` (the core's dtype code ``kind``, -1: none) runs
    the direct schedule: the same answer on every member (``g.direct`` is agreed, the rest
    is in the collective's descriptor)."""
    return g.direct and kind >= 0 and nbytes >= DIRECT_MIN_BYTES


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
    try:
        while left is not None:
            phase, status, err = left
            if err:
                g.read_failed(ex, status, err)
            g.finish(ex, deadline, check=phase == 0, running=phase != 0, spun=status >= 0)
            left = start_direct(g, src, dst, None, kind, op, phase + 1, running=True)
    except BaseException:
        # Another member may still be writing its slice into dst (it checks that we are
        # still in the collective before each chunk, not during one): never free it.
        _KEPT.append((src, dst))
        raise


def direct_allreduce(g: ShmGroup, ex: Exchange, deadline: float, src: np.ndarray,
                     dst: np.ndarray, kind: int, op: int) -> None:
    """The whole direct schedule of ``src`` into ``dst`` (flat, C-contiguous, equal size)."""
    if src is not dst and np.may_share_memory(src, dst):
        src = src.copy()  # a partial overlap: our reads of src would see our writes of dst
    pending = start_direct(g, src, dst, g.tag_of(ex), kind, op)
    if pending is not None:
        finish_direct(g, ex, deadline, pending, src, dst, kind, op)
