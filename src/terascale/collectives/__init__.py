"""Collective algorithms, one per module (Gloo style): set up in ``__init__``, move data in
``run()``. The allreduce algorithms are listed once, in :mod:`.registry`, and
:func:`register_algorithm` adds one of your own (one module and one call: it is then
selectable by name, benchmarked and simulated); the public entry points are the methods of
:class:`terascale.Communicator`.

Exported here is what a user or an algorithm author needs: the registry and its entries,
``auto``'s choice, and the three classic algorithms to build on or compare with. The
communicator's own building blocks (broadcast, allgather, all-to-all, sub-groups, the
shared-memory segments and the per-call fast paths) stay in their modules."""

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
from .tree import TreeAllreduce

__all__ = [
    "ALLREDUCE", "ALLREDUCE_ALGORITHMS", "AllreduceCall", "AllreduceSpec",
    "HalvingDoublingAllreduce", "RingAllreduce", "TreeAllreduce", "allreduce_names",
    "allreduce_spec", "choose_allreduce", "register_algorithm",
]
