"""How a rank waiting at a shared-memory barrier spends its time: spin, then sleep.

Spinning (polling the awaited member's epoch word) answers in well under a microsecond
but holds a core; blocking in the kernel (:mod:`._futex`) frees the core but costs a
sleep and a wake-up, tens of microseconds. So a waiter spins while the member is likely
to arrive soon and blocks otherwise, as adaptive mutexes do:

* an idle member (between collectives, computing): an adaptive budget between
  ``MIN_SPIN_S`` and ``SPIN_S`` (waits that end while spinning double it, waits that had
  to block halve it);
* a member known to be running this collective (it announced it, or passed an earlier
  barrier of it, so all it has left is a copy of at most one area): up to
  ``RUNNING_SPIN_S``, unless the host has more runnable processes than cores
  (:func:`host_busy`);
* more members than cores (``os.sched_getaffinity``): the adaptive budget, at most
  ``OVERSUBSCRIBED_SPIN_S``, polling with a ``sched_yield`` after every poll, as Intel MPI
  (``I_MPI_SPIN_COUNT`` 1 when oversubscribed) and MPICH do: the member we wait for is
  likely queued on our core, the yield hands it the core at once, and the cores never go
  idle, so nobody pays the wake-up of an idle core (tens of microseconds in a virtual
  machine). Only where the yield can reach the other members (:func:`share_scheduler`);
  otherwise no spin at all.

With the compiled core the whole wait runs in C with the GIL released: the spin, then
futex sleeps of at most ``BLOCK_S`` each for up to ``CORE_SLEEP_S``, woken by the member
when it arrives; only a wait longer than that comes back to Python (which builds the
collective's exchange and goes on sleeping with link and deadline checks): a sleep in the
core costs a fraction of the CPU time of one in Python, which matters most when ranks
outnumber cores.

Blocking waits are bounded (``BLOCK_S``) and the links are checked every ``CHECK_S``, so
spinning never turns a dead or stalled member into a hang: the deadline and the failure
checks run as soon as the spin (and the core's sleeps, ``CORE_SLEEP_S``) end.
"""

from __future__ import annotations

import os
import time

__all__ = ["BLOCK_S", "BOUND", "CHECK_S", "CORES", "CORE_SLEEP_S", "MIN_SPIN_S",
           "OVERSUBSCRIBED_SPIN_S", "RUNNING_SPIN_S", "SPIN_S", "WAKING_SPIN_S",
           "YIELD_AFTER_S", "YIELD_WHILE_SPINNING", "host_busy", "oversubscribed",
           "share_scheduler"]

SPIN_S = 50e-6       # busy-wait at most this long before blocking in the kernel
MIN_SPIN_S = 10e-6   # ... and at least this long (the budget adapts between the two)
BLOCK_S = 2e-3       # longest single futex wait (a lost wake-up costs at most this)
CHECK_S = 0.05       # how often a waiting rank checks its members' links
# How long the compiled core sleeps for a late member before the Python wait (link checks,
# deadline) takes over: well under CHECK_S, so a dead member is still found within about
# CHECK_S + CORE_SLEEP_S.
CORE_SLEEP_S = 20e-3
# More members than cores, in one scheduling group: the most a yielding spin may last (a
# longer one keeps yielding for a member that was descheduled, where a sleep would do).
OVERSUBSCRIBED_SPIN_S = 200e-6
# A member that has announced this collective (or passed its previous barrier) is running
# it: all it has left before arriving is copying at most one area (a 2 MiB copy takes a
# few tenths of a millisecond). Spin that long for it, at most this, instead of paying a futex sleep and wake-up; then block as usual,
# so a member that died mid-copy is still found by the link checks and the deadline.
RUNNING_SPIN_S = 1e-3
# A member asleep in a wait of its own, or woken and not yet running, arrives after a
# wake-up (tens to hundreds of microseconds in a virtual machine): the compiled core spins this
# long for it, where every member has a core, instead of sleeping too (see spin_wait in
# _shmcore.c for the cost of sleeping: a wake-up at every barrier).
WAKING_SPIN_S = 500e-6
# A peer with a core of its own answers within this (a small allreduce or round trip takes
# microseconds); a spin longer than this yields the core between its polls: a wake-up
# tends to put the woken peer on the waker's core, and a spin that never yields keeps it
# off until the spin ends in a sleep, which puts the two together again, and a whole run
# can then pay a sleep per call. (The compiled core's waits read it from their group, set
# by _shmwait.SpinBudget.)
YIELD_AFTER_S = 5e-6
# Spin with sched_yield: on a loaded host the member we wait for may be queued behind us on
# our core, and the yield hands it the core.
YIELD_WHILE_SPINNING = True


def host_busy() -> bool:
    """More runnable processes than cores (1-minute load average): a long spin would take
    the core the member we wait for needs, and costs CPU time and wall time per call.

    Read at most every ``BUSY_CHECK_S`` (reading the load average costs microseconds, as
    much as a small allreduce; it is a one-minute average anyway)."""
    now = time.monotonic()
    if now >= _busy[0]:
        try:
            busy = os.getloadavg()[0] >= _CORES
        except OSError:
            busy = True
        _busy[:] = [now + BUSY_CHECK_S, busy]
    return bool(_busy[1])


BUSY_CHECK_S = 0.5
_busy: list[float | bool] = [0.0, True]


def share_scheduler(pids: list[int]) -> bool:
    """Whether a ``sched_yield`` of one of ``pids`` can hand its core to another of them.

    With the scheduler's autogroups (``/proc/sys/kernel/sched_autogroup_enabled``, Linux's
    default on many distributions) every session is a scheduling group of its own, and a
    yield only reorders the caller's group: a rank spinning with yields for a member queued
    on its core then keeps the core until its time slice ends, many times slower than a
    sleep. So a yielding spin needs no autogroups, or one session.

    Parameters
    ----------
    pids
        The process ids of the group's members.
    """
    try:
        with open("/proc/sys/kernel/sched_autogroup_enabled", "rb") as f:
            if f.read().strip() == b"0":
                return True
    except OSError:
        return True  # no autogroups here
    try:
        return len({os.getsid(p) for p in pids}) == 1
    except OSError:
        return False


CROWD_CHECK_S = 0.05
CROWD_TASKS = 0.5  # smoothed runnable tasks beyond the cores from which spinning stops
_fd: list[int] = []


def oversubscribed() -> bool:
    """More tasks runnable than cores right now, this one included: a spin would take a
    core that some task needs. The TCP waits' test (:mod:`._tcp_swap`, :mod:`._tcp_exchange`).

    Their peer runs on another host -- or, on an emulated cluster (network namespaces), on
    this host's other cores. :func:`host_busy`'s one-minute average counts ranks that each
    have a core of their own, spinning, as load: two emulated hosts on two cores read "busy"
    once they have run for a while (2 runnable, 2 cores), and then every wait paid an
    ``epoll_wait`` sleep and wake-up. Here it is the instantaneous number of runnable tasks
    (``/proc/loadavg``'s fourth field, every ``CROWD_CHECK_S``), smoothed over about four
    readings; spinning stops only when there are more of them than cores (by
    ``CROWD_TASKS``: a task that is runnable for one reading does not stop it, one that stays
    does after a few). Without ``/proc``: :func:`host_busy`.

    Never, for a worker that ``terascale run`` bound to a block of cores of its own
    (``BOUND``): no member of its job can be queued on its core, so a spin takes time only
    from other jobs' tasks there, at most ``SPIN_S`` a wait, as MPI's bound ranks poll;
    sleeping in ``epoll_wait`` instead makes every answer wake the other core, several
    times slower for a small exchange (``docs/benchmarks/security.md``)."""
    if _BOUND:
        return False
    now = time.monotonic()
    if now >= _over[0]:
        _over[0] = now + CROWD_CHECK_S
        try:
            text = os.pread(_loadavg_fd(), 64, 0)
            runnable = float(text.split()[3].split(b"/")[0])
        except (OSError, ValueError, IndexError):
            return host_busy()
        _over[1] = runnable if _over[1] < 0 else _over[1] + (runnable - _over[1]) * 0.25
    return _over[1] >= _CORES + CROWD_TASKS


_over: list[float] = [0.0, -1.0]  # next reading, smoothed runnable tasks (-1: none yet)


def _loadavg_fd() -> int:
    if not _fd:
        _fd.append(os.open("/proc/loadavg", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))
    return _fd[0]


def _cores() -> tuple[int, bool]:
    """The cores this process's job shares on this node, and whether this process is bound
    to a block of them of its own. Its affinity mask (not the machine's count), or, where
    ``terascale run`` bound each worker to a block of its own
    (:mod:`terascale.launch.cpubind`), all the blocks together: the other members of the
    host run on the other blocks, so a block of one core is not an oversubscribed host."""
    from .._env import read_node_cores

    own = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    node = read_node_cores() or 0
    return max(own, node), own < node


(CORES, BOUND) = (_CORES, _BOUND) = _cores()
