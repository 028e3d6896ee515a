"""The one table of allreduce algorithms: name -> class, placement, and what it can run on.

Everything that names an allreduce algorithm reads this table: the communicator
(``allreduce(algorithm=...)``), ``auto`` (:mod:`.select`), the hierarchical allreduce (its
phase between hosts), the cost model and simulator (:mod:`terascale.sim`) and the
benchmark (``terascale bench allreduce``). Classes are imported on first use
(``"module:Class"``, like entry points), so the table imports no algorithm and any
algorithm may consult it.

Adding an algorithm: write a module with a class whose ``for_call(call)`` classmethod
builds it from an :class:`AllreduceCall` and whose ``run()`` moves the data (the Gloo
shape), then add one :class:`AllreduceSpec` line below. It is then selectable by name,
covered by ``tests/collectives/test_matrix.py`` once listed there, and offered by the
benchmark; give it a cost in :mod:`terascale.sim.model` to let the simulator plan with it.
A class may also say how two ranks reduce a small message as one swap (a staticmethod
``pair_pieces(count, itemsize)``, :mod:`._pair`): the communicator then runs it without an
exchange while all goes well, and ``run()`` must send the same frames (``_pair.swap_in``).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from .._arrays import ReduceOp
from .._errors import ConfigError
from ..transport.base import Exchange

if TYPE_CHECKING:
    from .shm import ShmGroups

__all__ = ["ALLREDUCE", "AllreduceCall", "AllreduceSpec", "allreduce_names", "allreduce_spec"]


class Runnable(Protocol):
    def run(self) -> None: ...


@dataclass
class AllreduceCall:
    """One allreduce as an algorithm sees it.

    ``src`` and ``dst`` are flat, C-contiguous and of equal size; they are the same buffer
    unless the algorithm ``reads_input`` (then ``src`` is the caller's array, read where it
    is, and the result goes to ``dst``). ``hosts`` is each rank's host id (ranks as
    ``ex`` numbers them), ``shm`` the communicator's shared-memory segments, ``link_rate``
    the job's link rate between hosts in bits/s (None: not given), for algorithms that
    choose a phase by cost.
    """

    ex: Exchange
    src: np.ndarray
    dst: np.ndarray
    op: ReduceOp
    hosts: list[str]
    shm: ShmGroups | None = None
    link_rate: float | None = None


@dataclass(frozen=True)
class AllreduceSpec:
    """One algorithm: where it runs and how it is built.

    ``placement`` is ``"any"`` or ``"one host"`` (every rank on one machine: shared memory);
    ``subgroup`` says whether it can run over part of an exchange (the phase between hosts
    of the hierarchical allreduce runs one over one leader per host); ``reads_input``
    whether it reads the caller's array in place (no defensive copy, blocking calls only).
    """

    name: str
    target: str = field(repr=False)  # "module:Class", imported on first use
    placement: Literal["any", "one host"] = "any"
    subgroup: bool = True
    reads_input: bool = False
    summary: str = ""

    def runs_on(self, hosts: int) -> bool:
        """Whether the algorithm can run on ``hosts`` distinct hosts."""
        return self.placement == "any" or hosts <= 1

    def load(self) -> Any:
        """The algorithm's class (imported on first use, then cached)."""
        return _resolve(self.target)

    def build(self, call: AllreduceCall) -> Runnable:
        return self.load().for_call(call)  # type: ignore[no-any-return]

    def pair_pieces(self, count: int, itemsize: int) -> tuple[tuple[int, int, int], ...] | None:
        """How two ranks reduce ``count`` elements of ``itemsize`` bytes as one swap
        (:mod:`._pair`), or None: the algorithm has no swap, or not at this size."""
        pieces = getattr(self.load(), "pair_pieces", None)
        return None if pieces is None else pieces(count, itemsize)  # type: ignore[no-any-return]


@functools.cache
def _resolve(target: str) -> Any:
    module, _, cls = target.partition(":")
    return getattr(importlib.import_module(module, __package__), cls)


ALLREDUCE: dict[str, AllreduceSpec] = {s.name: s for s in (
    AllreduceSpec("tree", ".tree:TreeAllreduce",
                  summary="pipelined binary tree: 2 log2(n) latencies, small messages"),
    AllreduceSpec("ring", ".ring:RingAllreduce",
                  summary="reduce-scatter + allgather ring: bandwidth-optimal, large messages"),
    AllreduceSpec("halving_doubling", ".halving_doubling:HalvingDoublingAllreduce",
                  summary="Rabenseifner, mixed radix for any size: bandwidth-optimal, few steps"),
    AllreduceSpec("shm", ".shm:ShmAllreduce", placement="one host", subgroup=False,
                  reads_input=True, summary="one shared-memory segment for a single host"),
    AllreduceSpec("hierarchical", ".hierarchical:HierarchicalAllreduce", subgroup=False,
                  reads_input=True,
                  summary="shared memory inside hosts, tree/ring between one leader per host"),
)}


def allreduce_names() -> tuple[str, ...]:
    """Every algorithm name, in table order (``"auto"`` is not one: it picks one of these)."""
    return tuple(ALLREDUCE)


def allreduce_spec(name: str) -> AllreduceSpec:
    """The spec of ``name``; ConfigError naming the known ones otherwise."""
    spec = ALLREDUCE.get(name)
    if spec is None:
        import difflib

        close = difflib.get_close_matches(str(name), ["auto", *ALLREDUCE], n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"algorithm={name!r} is not known{hint}; use one of auto, "
                          f"{', '.join(ALLREDUCE)}")
    return spec
