"""Which cores each worker of a node may run on: a block of its own, as MPI binds ranks.

Two ranks that answer each other within microseconds -- a small allreduce, a barrier -- run
at one of two speeds on a host where each could have a core, depending only on where the
scheduler puts them. On distinct cores, a rank that waits spins (``transport._spin``) and
sees the answer within a few microseconds. On one core (where a wake-up tends to put them:
the waker's core is preferred for a process it wakes), each waits for the other's time on
that core, and a spin yields only within its own scheduling group (every worker has a
session, so an autogroup, of its own): several times slower for a small exchange, and
unbound ranks were found sharing one core nearly all the time (the measurements:
``docs/benchmarks/security.md``).

So ``terascale run`` gives each of its ``n`` workers on a node ``cores // n`` of the cores
it may use itself (its affinity mask, in order), when ``n`` is at most that many: what
``mpirun --bind-to core`` (or ``--map-by slot:PE=k``) does by default for as few ranks.
With more workers than cores nothing is bound (the scheduler shares the cores, and the
waits yield instead of spinning). Threads a worker starts inherit its block, so they no
longer compete with the other workers' threads (the linear learner sizes its reader pool
from it, ``os.sched_getaffinity``).

Opt out with ``TERASCALE_NO_CPU_BIND=1`` in the launcher's environment (or
``LaunchOptions(cpu_bind=False)``): e.g. when the workers set their own affinity, or one
worker should have every core while the others mostly wait. ``terascale linear train -n N``
launches its workers unbound for both reasons: each runs reader and statistics threads, and
in a chained pass one worker learns while the others wait.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .._env import read_flag

__all__ = ["bound", "cpu_blocks"]


def cpu_blocks(nprocs: int, bind: bool | None = None) -> list[list[int]] | None:
    """The cores of each of ``nprocs`` workers, or None to leave them unbound.

    Parameters
    ----------
    nprocs
        Workers the launcher starts on this node.
    bind
        True or False to say; None (default): bind unless ``TERASCALE_NO_CPU_BIND=1``.
    """
    if bind is None:
        bind = not read_flag(None, "TERASCALE_NO_CPU_BIND")
    if not bind or nprocs < 2 or not hasattr(os, "sched_getaffinity"):
        return None  # one worker: all of the launcher's cores, as without binding
    cores = sorted(os.sched_getaffinity(0))
    if nprocs > len(cores):
        return None
    per = len(cores) // nprocs
    return [cores[i * per: (i + 1) * per] for i in range(nprocs)]


def bound(hook: Callable[[], None] | None, cores: list[int] | None) -> Callable[[], None] | None:
    """A ``preexec_fn``: ``hook``, then bind the new process to ``cores``.

    Parameters
    ----------
    hook
        The ``preexec_fn`` to run first (None: nothing).
    cores
        The cores the new process may run on (None: leave it unbound).
    """
    if cores is None:
        return hook

    def start() -> None:
        if hook is not None:
            hook()
        os.sched_setaffinity(0, cores)
    return start
