"""Workers never outlive their launcher.

``terascale run`` starts each worker in a session of its own (so that a signal meant for the
launcher's terminal does not hit every worker mid-collective, and so that a worker's whole
process group can be stopped at once). That also means nothing would stop the workers if
the launcher itself were killed with SIGKILL, which it cannot catch. Linux's
``PR_SET_PDEATHSIG`` asks the kernel to deliver a signal to the child the moment its parent
dies; it is set in the child between ``fork`` and ``exec`` and survives ``exec``. A launcher
that died *before* the child set it is caught by comparing ``getppid()`` with the
launcher's pid right after the ``prctl`` call (the classic race of this idiom).

Elsewhere than on Linux the hook does nothing; the launcher's own signal handlers still
stop the workers on SIGINT and SIGTERM.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

__all__ = ["die_with_parent"]

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
