"""Whether the compiled modules may be used: one switch for all of them.

``TERASCALE_NO_CEXT`` set to anything but ``0`` selects the pure-Python (and numba) paths
at run time: the shared-memory transport's per-call work (:mod:`terascale.transport._core`)
and VW text parsing (:mod:`terascale.linear._vw._vwtext_fast`). A build without a C compiler
gets the same paths.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

from ._env import read_switch

__all__ = ["disabled", "load"]


def disabled() -> bool:
    """``TERASCALE_NO_CEXT`` set (to anything but 0): use the pure-Python paths."""
    return read_switch("TERASCALE_NO_CEXT")


def load(name: str, abi: int,
         stale: Callable[[ModuleType], None] | None = None) -> ModuleType | None:
    """The compiled module ``name``, or None when it was not built, is disabled, or was
    built from a source older than the calling convention ``abi`` its caller speaks (then
    ``stale(module)`` is told, where given)."""
    if disabled():
        return None
    try:
        module = importlib.import_module(name)
    except ImportError:
        return None
    if getattr(module, "ABI", 0) != abi:
        if stale is not None:
            stale(module)
        return None
    return module
