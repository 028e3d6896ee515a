"""The communicator that ``terascale.torch`` uses when none is passed explicitly."""

from __future__ import annotations

import threading

from ..communicator import Communicator

__all__ = ["resolve"]

_lock = threading.Lock()
_default: Communicator | None = None


def resolve(comm: Communicator | None) -> Communicator:
    """Return ``comm``, or a process-wide ``terascale.init()`` made on first use.

    Joining a job is a collective act (rendezvous), so it happens once per process; every
    object of this package that is built without ``comm=`` shares that communicator.
    """
    global _default
    if comm is not None:
        return comm
    with _lock:
        if _default is None:
            from .._init import init

            _default = init()
        return _default
