"""Workers never outlive their launcher.

``terascale run`` starts each worker in a session (or, with more workers than cores, a
process group: see ``_own_group``) of its own, so that a signal meant for the
launcher's terminal does not hit every worker mid-collective, and so that a worker's whole
process group can be stopped at once. That also means nothing would stop the workers if
the launcher itself were killed with SIGKILL, which it cannot catch. Linux's
``PR_SET_PDEATHSIG`` asks the kernel to deliver a signal to the child the moment its parent
dies; it is set in the child between ``fork`` and ``exec`` and survives ``exec``. A launcher
that died *before* the child set it is caught by comparing ``getppid()`` with the
launcher's pid right after the ``prctl`` call (the classic race of this idiom).

Elsewhere than on Linux the hook does nothing; the launcher's own signal handlers still
stop the workers on SIGINT and SIGTERM.

``PR_SET_PDEATHSIG`` reaches only the worker itself, not the processes it started (data
loader workers, a shell's children), which share its process group. :func:`watch_group`
therefore also tells a small watchdog process (one per launcher, started on first use)
about every worker's process group; the watchdog reads a pipe from the launcher, and when
that pipe closes -- the launcher exited, however it exited -- it kills every group still
registered. A group is unregistered (:func:`forget_group`) once the launcher has reaped
its worker, so a normal exit kills nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable

__all__ = ["die_with_parent", "forget_group", "watch_group", "worker_start"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` for :class:`subprocess.Popen`: the child gets ``sig`` when we die.

    Everything is looked up here, before ``fork``: the child runs only a foreign call and a
    comparison, nothing that could need a lock another thread of the launcher holds.
    Returns None where the platform has no ``prctl``.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    launcher = os.getpid()
    getppid, kill, getpid = os.getppid, os.kill, os.getpid

    def hook() -> None:
        prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if getppid() != launcher:  # the launcher died before prctl took effect
            kill(getpid(), sig)

    return hook


def worker_start(nprocs: int) -> tuple[Callable[[], None] | None, bool]:
    """How to start one of ``nprocs`` workers: its ``preexec_fn`` (:func:`die_with_parent`,
    and with more workers than cores :func:`_own_group`) and whether it gets a session of
    its own (``start_new_session``)."""
    hook = die_with_parent()
    if nprocs <= _cores():
        return hook, True
    return _own_group(hook), False


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)


def _own_group(hook: Callable[[], None] | None) -> Callable[[], None]:
    """A ``preexec_fn``: the worker leads a process group of its own in the launcher's
    session (``killpg`` stops it and its children; the terminal's signals reach only the
    launcher's, the foreground group), then ``hook``.

    For more workers than cores. With the scheduler's autogroups (Linux's default on many
    distributions) every session is a scheduling group of its own, and ``sched_yield`` then
    only reorders the caller's group: a worker spinning with yields for a member queued on
    its core (the shared-memory waits with more ranks than cores,
    ``terascale.transport._spin``) would keep the core until its time slice ran out, so
    those waits sleep at once instead. In one session the yields work, and a small
    allreduce is faster than with a session each. The price: under load from other sessions the job gets one session's
    share of the cores, not one per worker -- which is why fewer workers than cores keep a
    session each."""
    setpgid = os.setpgid

    def run() -> None:
        setpgid(0, 0)
        if hook is not None:
            hook()

    return run


# The watchdog: reads "+PGID" / "-PGID" lines; at end of input kills what is registered.
# (A process group id could in principle be reused once every member of the group has
# exited; groups are unregistered as soon as their worker is reaped, which keeps that
# window to the moment of the launcher's own death.)
_WATCHDOG = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the launcher's to handle
groups = set()
for line in sys.stdin:
    pgid = int(line)
    groups.add(pgid) if pgid > 0 else groups.discard(-pgid)
for pgid in groups:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
"""
_lock = threading.Lock()
_watchdog: list[subprocess.Popen[bytes]] = []


def _send(line: str) -> None:
    with _lock:
        if not _watchdog:
            _watchdog.append(subprocess.Popen(
                [sys.executable, "-c", _WATCHDOG], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        stdin = _watchdog[0].stdin
        assert stdin is not None
        try:
            stdin.write(line.encode())
            stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # the watchdog was killed: the workers' own PDEATHSIG still holds


def watch_group(pgid: int) -> None:
    """Kill process group ``pgid`` if this (launcher) process dies before forgetting it."""
    _send(f"{pgid}\n")


def forget_group(pgid: int) -> None:
    """The launcher has stopped and reaped the group's leader itself."""
    _send(f"-{pgid}\n")
