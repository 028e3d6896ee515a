"""Collective algorithms, one per module (Gloo style): set up in ``__init__``, move data in
``run()``. The allreduce algorithms are listed once, in :mod:`.registry`, and
:func:`register_algorithm` adds one of your own (one module and one call: it is then
selectable by name, benchmarked and simulated); the public entry points are the methods of
:class:`terascale.Communicator`."""

from ._chunks import bounds
from ._pair import PairAllreduce
from .allgather import RingAllgather
from .alltoall import PairwiseAlltoall
from .broadcast import TreeBroadcast
from .groups import host_groups, split_groups
from .halving_doubling import HalvingDoublingAllreduce
from .registry import (
    ALLREDUCE,
    AllreduceCall,
    AllreduceSpec,
    allreduce_names,
    allreduce_spec,
    register_algorithm,
)
from .ring import RingAllreduce
from .select import ALLREDUCE_ALGORITHMS, choose_allreduce
from .shm import FastAllreduce, ShmGroups, shm_barrier
from .tree import TreeAllreduce

__all__ = [
    "ALLREDUCE", "ALLREDUCE_ALGORITHMS", "AllreduceCall", "AllreduceSpec", "FastAllreduce",
    "HalvingDoublingAllreduce", "PairAllreduce", "PairwiseAlltoall", "RingAllgather", "RingAllreduce",
    "ShmGroups", "TreeAllreduce", "TreeBroadcast", "allreduce_names", "allreduce_spec",
    "bounds", "choose_allreduce", "host_groups", "register_algorithm", "shm_barrier",
    "split_groups",
]
