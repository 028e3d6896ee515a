"""The communicator's per-call fast paths: a blocking allreduce or barrier without an
exchange while every member is on time.

Two kinds, named by an algorithm's registry entry (:attr:`AllreduceSpec.fast_path`):

* ``"segment"``: the ranks of one host through the compiled shared-memory core, one C call
  per collective (the flat or direct schedule of :mod:`.shm`);
* ``"swap"``: two ranks and a small message as one frame each way over the transport's
  :class:`~terascale.transport.base.Swap`, each element reduced in the algorithm's own
  operand order (its ``pair_pieces``).

What :func:`plan_allreduce` and :func:`plan_barrier` return has ``start()`` and
``finish()``, the communicator's ``_schedule_fast`` protocol; a member that is late sends
the call back to the full exchange, which completes it with every check and the deadline.
The bits equal the algorithm's ``run()`` on every rank, so either rank may take either path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .._arrays import ReduceOp
from ..transport.base import Transport
from ._pair import PairAllreduce
from ._shmflat import FastAllreduce
from .registry import AllreduceSpec
from .shm import ShmGroups
from .tree import TreeAllreduce

__all__ = ["plan_allreduce", "plan_barrier"]

_NOTHING = ReduceOp("sum", np.dtype(np.float32))  # what a barrier "reduces": no element


def plan_allreduce(spec: AllreduceSpec, *, transport: Transport, shm: ShmGroups, rank: int,
                   size: int, reduce: ReduceOp, shape: tuple[int, ...], desc: str,
                   context: int, members: Sequence[int] | None) -> Any | None:
    """The fast path of an allreduce by ``spec`` of arrays of ``shape`` (``reduce.dtype``),
    or None where it has none at this size (the call then takes the exchange).

    Parameters
    ----------
    spec
        The algorithm's registry entry; its ``fast_path`` says which kind.
    transport
        The communicator's transport (the swap's link).
    shm
        The communicator's shared-memory segments (the segment's core).
    rank, size
        This rank and the communicator's size.
    reduce
        The reduction (op and dtype).
    shape
        The arrays' shape.
    desc
        The collective as the ranks compare it (``allreduce(...)``).
    context
        The communicator's context id.
    members
        The communicator's members as job ranks (None: the whole job).
    """
    if spec.fast_path == "segment":
        nbytes = int(np.prod(shape, dtype=np.int64)) * reduce.dtype.itemsize
        return FastAllreduce.plan(shm, reduce, nbytes, desc, context)
    count = int(np.prod(shape, dtype=np.int64))
    return PairAllreduce.plan(transport, rank, size, reduce, shape, desc, context, members,
                              spec.pair_pieces(count, reduce.dtype.itemsize))


def plan_barrier(*, transport: Transport | None, shm: ShmGroups, rank: int, size: int,
                 context: int, members: Sequence[int] | None) -> Any | None:
    """The fast path of a barrier: a flat allreduce of nothing through the host's segment
    (the descriptor :func:`.shm.shm_barrier` uses, so either path meets the other), or two
    ranks' swap of headers (the tree's pair exchange); None where neither is there.

    Parameters
    ----------
    transport
        The communicator's transport (None: a communicator of one rank).
    shm
        The communicator's shared-memory segments.
    rank, size
        This rank and the communicator's size.
    context
        The communicator's context id.
    members
        The communicator's members as job ranks (None: the whole job).
    """
    if shm.whole is not None:
        return FastAllreduce.plan(shm, _NOTHING, 0, "barrier()", context)
    if size == 2 and transport is not None:
        return PairAllreduce.plan(transport, rank, size, _NOTHING, (0,), "barrier()", context,
                                  members, TreeAllreduce.pair_pieces(0, 1))
    return None
