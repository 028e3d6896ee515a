"""The one table of allreduce algorithms: name -> class, placement, cost, and ``auto``'s use.

Everything that names an allreduce algorithm reads this table: the communicator
(``allreduce(algorithm=...)``: which class, which per-call fast path, whether the input is
read in place), ``auto`` (:mod:`.select`: the entry's :attr:`~AllreduceSpec.auto` role), the
hierarchical allreduce (its phase between hosts runs an entry with ``subgroup``), the cost
model, the calibration, the event simulator and the TCP link model
(:mod:`terascale.sim`: the entry's :attr:`~AllreduceSpec.cost` formula and
:attr:`~AllreduceSpec.schedule`), the benchmarks (``terascale bench allreduce
--algorithms``) and ``terascale simulate``. No other module names an algorithm
(``tests/test_architecture.py`` checks it).

Entries are imported on first use (``"module:attribute"`` targets, like entry points), so
the table imports no algorithm and any algorithm may consult it.

How to add an algorithm
-----------------------
Write a module whose class has a ``for_call(call)`` classmethod building it from an
:class:`AllreduceCall` and a ``run()`` that moves the data (the Gloo shape), and a cost
formula ``cost(nbytes, nodes, per_host, c, **options)`` in alpha-beta-gamma terms (Hockney's
model; ``c`` is a :class:`terascale.sim.CostParams`), then register it: one
:class:`AllreduceSpec` line below for a built-in one, or :func:`register_algorithm` from
your own code. Processes started later (``terascale run``, ``terascale bench``) import
the modules named in ``TERASCALE_ALGORITHMS`` (comma-separated; the variable belongs to
``terascale._env`` like every other) on the first lookup of a name, so an algorithm
registered at import of such a module is known to every worker. It is then selectable by
name, run by the correctness matrix (``tests/collectives/test_matrix.py`` iterates this
table), offered by ``terascale bench allreduce`` and priced by ``terascale simulate``.

A class may also say how two ranks reduce a small message as one swap (a staticmethod
``pair_pieces(count, itemsize)``, :mod:`._pair`, with ``fast_path="swap"``): the
communicator then runs it without an exchange while all goes well, and ``run()`` must send
the same frames (``_pair.swap_in``).
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, get_args

import numpy as np

from .._arrays import ReduceOp
from .._env import read_algorithm_modules
from .._errors import ConfigError
from ..transport.base import Exchange

if TYPE_CHECKING:
    from .shm import ShmGroups

__all__ = ["ALLREDUCE", "AllreduceCall", "AllreduceSpec", "allreduce_names", "allreduce_spec",
           "register_algorithm"]


class Runnable(Protocol):
    def run(self) -> None: ...


@dataclass
class AllreduceCall:
    """One allreduce as an algorithm sees it.

    ``src`` and ``dst`` are flat, C-contiguous and of equal size; they are the same buffer
    unless the algorithm ``reads_input`` (then ``src`` is the caller's array, read where it
    is, and the result goes to ``dst``).

    Parameters
    ----------
    ex
        The collective's exchange (links to the peers, deadline, failure reporting).
    src
        The input, flat and C-contiguous; the caller's array when the algorithm ``reads_input``.
    dst
        Where the result goes (the same buffer as ``src`` unless the algorithm ``reads_input``).
    op
        The reduction (op and dtype).
    hosts
        Each rank's host id, ranks as ``ex`` numbers them.
    shm
        The communicator's shared-memory segments (default None: none).
    link_rate
        The job's link rate between hosts in bits/s (default None: not given), for algorithms that
        choose a phase by cost.
    """

    ex: Exchange
    src: np.ndarray
    dst: np.ndarray
    op: ReduceOp
    hosts: list[str]
    shm: ShmGroups | None = None
    link_rate: float | None = None


Placement = Literal["any", "one host"]
# What ``auto`` (:mod:`.select`) picks an entry for; at most one entry per role.
AutoRole = Literal["one host", "mixed hosts", "small", "large"]
# The event schedules of the simulator and the link model (:mod:`terascale.sim`).
Schedule = Literal["ring order", "radix steps", "heap tree", "host segments"]
FastPath = Literal["swap", "segment"]


@dataclass(frozen=True)
class AllreduceSpec:
    """One algorithm: where it runs, how it is built, what it costs, when ``auto`` picks it.

    Parameters
    ----------
    name
        What ``allreduce(algorithm=...)``, ``--algorithms`` and ``terascale simulate`` call it.
    target
        ``"module:Class"`` (relative to this package or absolute), imported on first use; the
        class has ``for_call(call)`` and ``run()``.
    placement
        ``"any"``, or ``"one host"`` (every rank on one machine: shared memory).
    subgroup
        Whether it can run over part of an exchange (the phase between hosts of the
        hierarchical allreduce runs such an algorithm over one leader per host).
    reads_input
        Whether it reads the caller's array in place (no defensive copy, blocking calls only).
    power_of_two
        Whether it needs a world size that is a power of two (ConfigError otherwise).
    cost
        ``"module:function"``: its time in the alpha-beta-gamma model,
        ``cost(nbytes, nodes, per_host, c, **options)`` with ``c`` a
        :class:`terascale.sim.CostParams` (``options``: ``chunk``, the pipeline chunk a
        caller asks for, which an unpipelined algorithm ignores). The cost model (:func:`terascale.sim.predict`),
        the calibration (``terascale bench allreduce --calibrate``) and, without a
        ``schedule``, the simulator use it. Empty: not modelled.
    schedule
        Which of the simulator's event schedules moves its messages (and prices its busiest
        link over TCP, :mod:`terascale.sim.links`): ``"ring order"``, ``"radix steps"``,
        ``"heap tree"``, ``"host segments"`` (shared memory inside hosts, a ring of the host
        leaders). None: the simulator starts the cost formula once the slowest rank arrives,
        and the link model has no row for it.
    fast_path
        The communicator's per-call path for a repeated blocking call: ``"swap"`` (two
        ranks and a small message are one frame each way; the class's ``pair_pieces``
        says how it reduces them), ``"segment"`` (one call of the compiled shared-memory
        core), or None.
    auto
        What ``algorithm="auto"`` picks it for: ``"one host"`` (every rank on one host),
        ``"mixed hosts"`` (several hosts, some with several ranks), ``"small"`` and
        ``"large"`` (one rank per host, below and above the crossover size of
        :mod:`.select`), or None (only by name). Each role has one algorithm.
    summary
        One line for listings (``terascale bench allreduce --help``, the docs).
    """

    name: str
    target: str = field(repr=False)
    placement: Placement = "any"
    subgroup: bool = True
    reads_input: bool = False
    power_of_two: bool = False
    cost: str = field(default="", repr=False)
    schedule: Schedule | None = None
    fast_path: FastPath | None = None
    auto: AutoRole | None = None
    summary: str = ""

    def runs_on(self, hosts: int) -> bool:
        """Whether the algorithm can run on ``hosts`` distinct hosts.

        Parameters
        ----------
        hosts
            The number of distinct hosts.
        """
        return self.placement == "any" or hosts <= 1

    def runs_with(self, size: int) -> bool:
        """Whether the algorithm can run over ``size`` ranks.

        Parameters
        ----------
        size
            The number of ranks.
        """
        return not self.power_of_two or size & (size - 1) == 0

    def differs_on(self, hosts: int, per_host: int) -> bool:
        """Whether it runs on ``hosts`` hosts of ``per_host`` ranks as something other than
        another entry (a ``"host segments"`` schedule with one rank per host on several
        hosts is its leaders' ring): what listings and comparisons offer.

        Parameters
        ----------
        hosts
            Hosts.
        per_host
            Ranks on each host.
        """
        return self.runs_on(hosts) and self.runs_with(hosts * per_host) and not (
            self.schedule == "host segments" and per_host == 1 and hosts > 1)

    def load(self) -> Any:
        """The algorithm's class (imported on first use, then cached)."""
        return _resolve(self.target)

    def build(self, call: AllreduceCall) -> Runnable:
        """The algorithm set up for ``call`` (its class's ``for_call``).

        Parameters
        ----------
        call
            The allreduce as the registry describes it.
        """
        return self.load().for_call(call)  # type: ignore[no-any-return]

    def pair_pieces(self, count: int, itemsize: int) -> tuple[tuple[int, int, int], ...] | None:
        """How two ranks reduce ``count`` elements of ``itemsize`` bytes as one swap
        (:mod:`._pair`), or None: the algorithm has no swap, or not at this size.

        Parameters
        ----------
        count
            Elements of the message.
        itemsize
            Bytes per element.
        """
        if self.fast_path != "swap":
            return None
        pieces = getattr(self.load(), "pair_pieces", None)
        return None if pieces is None else pieces(count, itemsize)  # type: ignore[no-any-return]

    def time(self, nbytes: float, nodes: int, per_host: int, c: Any, **options: Any) -> float:
        """Its cost formula: predicted seconds for ``nbytes`` over ``nodes`` hosts of
        ``per_host`` ranks with machine parameters ``c``; ValueError when it has none.

        Parameters
        ----------
        nbytes
            The message size in bytes.
        nodes
            Hosts.
        per_host
            Ranks on each host.
        c
            The machine's :class:`terascale.sim.CostParams`.
        options
            Passed to the formula (``chunk``: a pipeline's chunk in bytes, None for no pipeline);
            one without a pipeline ignores them.
        """
        if not self.cost:
            raise ValueError(f"allreduce algorithm {self.name!r} has no cost formula")
        return float(_resolve(self.cost)(nbytes, nodes, per_host, c, **options))


@functools.cache
def _resolve(target: str) -> Any:
    module, _, attr = target.partition(":")
    obj = importlib.import_module(module, __package__)
    for part in attr.split("."):  # a class's qualified name may be nested
        obj = getattr(obj, part)
    return obj


ALLREDUCE: dict[str, AllreduceSpec] = {s.name: s for s in (
    AllreduceSpec("tree", ".tree:TreeAllreduce", cost=".tree:tree_cost", schedule="heap tree",
                  fast_path="swap", auto="small",
                  summary="pipelined binary tree: 2 log2(n) latencies, small messages"),
    AllreduceSpec("ring", ".ring:RingAllreduce", cost=".ring:ring_cost", schedule="ring order",
                  fast_path="swap", auto="large",
                  summary="reduce-scatter + allgather ring: bandwidth-optimal, large messages"),
    AllreduceSpec("halving_doubling", ".halving_doubling:HalvingDoublingAllreduce",
                  cost=".halving_doubling:halving_doubling_cost", schedule="radix steps",
                  fast_path="swap",
                  summary="Rabenseifner, mixed radix for any size: bandwidth-optimal, few steps"),
    AllreduceSpec("shm", ".shm:ShmAllreduce", placement="one host", subgroup=False,
                  reads_input=True, cost=".shm:shm_cost", schedule="host segments",
                  fast_path="segment", auto="one host",
                  summary="one shared-memory segment for a single host"),
    AllreduceSpec("hierarchical", ".hierarchical:HierarchicalAllreduce", subgroup=False,
                  reads_input=True, cost=".hierarchical:hierarchical_cost",
                  schedule="host segments", auto="mixed hosts",
                  summary="shared memory inside hosts, tree/ring between one leader per host"),
)}
_BUILT_IN = frozenset(ALLREDUCE)
_plugins_loaded = False


def _load_plugins() -> None:
    """Import the modules of ``TERASCALE_ALGORITHMS`` once (they call register_algorithm)."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for module in read_algorithm_modules():
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ConfigError(f"TERASCALE_ALGORITHMS: cannot import {module!r}: {e}") from None


def register_algorithm(name: str, target: str | type, *, placement: Placement = "any",
                       subgroup: bool = True, reads_input: bool = False,
                       power_of_two: bool = False, cost: str | Any = "",
                       schedule: Schedule | None = None, fast_path: FastPath | None = None,
                       auto: AutoRole | None = None, summary: str = "") -> AllreduceSpec:
    """Add an allreduce algorithm to the registry; return its entry.

    It is then selectable as ``comm.allreduce(x, algorithm=name)`` in this process and in
    the processes it forks; for workers started as new processes (``terascale run``,
    ``terascale bench allreduce --algorithms NAME``), call this at import of a module and
    name that module in ``TERASCALE_ALGORITHMS``. Registering the same entry again is a
    no-op; a different one under a taken name, a built-in name, or an ``auto`` role that
    another entry has is a ConfigError (``auto`` must choose the same on every rank).

    Parameters
    ----------
    name
        The algorithm's name (a Python identifier; not ``"auto"``).
    target
        The class (``for_call(call)``, ``run()``), or ``"module:Class"`` to import on
        first use.
    placement, subgroup, reads_input, power_of_two, schedule, fast_path, auto, summary
        As in :class:`AllreduceSpec`.
    cost
        Its cost formula: a function ``cost(nbytes, nodes, per_host, c, **options)``
        or ``"module:function"``; empty: the simulator and ``terascale simulate`` cannot
        price it.

    Examples
    --------
    >>> from terascale.collectives import register_algorithm
    >>> from terascale.collectives.ring import RingAllreduce, ring_cost
    >>> register_algorithm("my_ring", RingAllreduce, cost=ring_cost).name
    'my_ring'
    """
    if not (isinstance(name, str) and name.isidentifier()) or name == "auto":
        raise ConfigError(f"register_algorithm: name={name!r} must be an identifier other "
                          "than 'auto'")
    if placement not in get_args(Placement):
        raise ConfigError(f"register_algorithm({name!r}): placement={placement!r}; use one of "
                          f"{', '.join(get_args(Placement))}")
    if schedule is not None and schedule not in get_args(Schedule):
        raise ConfigError(f"register_algorithm({name!r}): schedule={schedule!r}; use None or "
                          f"one of {', '.join(get_args(Schedule))}")
    if fast_path is not None and fast_path not in get_args(FastPath):
        raise ConfigError(f"register_algorithm({name!r}): fast_path={fast_path!r}; use None, "
                          f"{', '.join(get_args(FastPath))}")
    if auto is not None and auto not in get_args(AutoRole):
        raise ConfigError(f"register_algorithm({name!r}): auto={auto!r}; use None or one of "
                          f"{', '.join(get_args(AutoRole))}")
    if auto is not None and power_of_two:
        raise ConfigError(f"register_algorithm({name!r}): auto={auto!r} needs an algorithm "
                          "that runs on every world size (power_of_two=True)")
    spec = AllreduceSpec(name, _target(target, "target", name), placement, subgroup,
                         reads_input, power_of_two, _target(cost, "cost", name) if cost else "",
                         schedule, fast_path, auto, summary)
    if not isinstance(target, str) and not hasattr(target, "for_call"):
        raise ConfigError(f"register_algorithm({name!r}): {target!r} has no for_call(call)")
    old = ALLREDUCE.get(name)
    if old == spec:
        return old
    if old is not None:
        raise ConfigError(f"register_algorithm: {name!r} is already registered "
                          f"({'built in' if name in _BUILT_IN else old.target})")
    if auto is not None:
        taken = [s.name for s in ALLREDUCE.values() if s.auto == auto]
        if taken:
            raise ConfigError(f"register_algorithm({name!r}): auto={auto!r} is "
                              f"{taken[0]!r}'s role")
    ALLREDUCE[name] = spec
    return spec


def _target(obj: Any, what: str, name: str) -> str:
    """``"module:attribute"`` for a class or function (cached so that lookups find it)."""
    if isinstance(obj, str):
        if ":" not in obj:
            raise ConfigError(f"register_algorithm({name!r}): {what}={obj!r} is not "
                              "'module:attribute'")
        return obj
    module, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", "")
    if not module or not qual or "<" in qual:
        raise ConfigError(f"register_algorithm({name!r}): {what} must be a module-level class "
                          f"or function, or 'module:attribute', not {obj!r}")
    return f"{module}:{qual}"


def allreduce_names() -> tuple[str, ...]:
    """Every algorithm name, in table order (``"auto"`` is not one: it picks one of these)."""
    _load_plugins()
    return tuple(ALLREDUCE)


def allreduce_spec(name: str) -> AllreduceSpec:
    """The spec of ``name``; ConfigError naming the known ones otherwise.

    Parameters
    ----------
    name
        A name of :data:`ALLREDUCE`.
    """
    spec = ALLREDUCE.get(name)
    if spec is None:
        _load_plugins()
        spec = ALLREDUCE.get(name)
    if spec is None:
        import difflib

        close = difflib.get_close_matches(str(name), ["auto", *ALLREDUCE], n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ConfigError(f"algorithm={name!r} is not known{hint}; use one of auto, "
                          f"{', '.join(ALLREDUCE)}")
    return spec


def auto_choice(role: AutoRole) -> str:
    """The algorithm ``auto`` runs for ``role`` (:mod:`.select`)."""
    for spec in ALLREDUCE.values():
        if spec.auto == role:
            return spec.name
    raise ConfigError(f"no allreduce algorithm is registered for auto's role {role!r}")
