"""Collective algorithms, one per module (Gloo style): set up in ``__init__``, move data in
``run()``. The public entry points are the methods of :class:`terascale.Communicator`."""

from .allgather import RingAllgather
from .broadcast import TreeBroadcast
from .halving_doubling import HalvingDoublingAllreduce
from .ring import RingAllreduce
from .select import ALLREDUCE_ALGORITHMS, choose_allreduce
from .tree import TreeAllreduce

__all__ = [
    "ALLREDUCE_ALGORITHMS", "HalvingDoublingAllreduce", "RingAllgather", "RingAllreduce", "TreeAllreduce", "TreeBroadcast",
    "choose_allreduce",
]
