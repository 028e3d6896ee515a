"""The compiled core of the shared-memory transport (``terascale._shmcore``), if present.

It does a flat allreduce round's per-call work in C (publish, arrive, spin with the GIL
released, compare descriptors, fold in member order); see ``src/terascale/_shmcore.c``.
``pip install`` builds it with the system's C compiler; where that fails the install still
succeeds and everything runs the pure-Python path, which ``TERASCALE_NO_CEXT=1`` selects
too (read when a segment is mapped). Both paths give the same bits.

Large allreduces read and write the other members' buffers directly (cross-memory attach,
``process_vm_readv``/``writev``; ``src/terascale/_shmdirect.c``) where every member can; where one
cannot (ptrace rules, a seccomp filter, another pid namespace) or ``TERASCALE_NO_CMA=1`` is
set in any member, every member copies through the segment instead, with the same bits.
"""

from __future__ import annotations

import warnings
from types import ModuleType

import numpy as np

from .._cext import disabled
from .._cext import load as load_compiled
from .._env import read_switch

__all__ = ["ABI", "KINDS", "OPS", "attach_disabled", "disabled", "load"]

# dtype -> the core's element code; dtypes not listed (float16, complex, bool) fold in numpy.
KINDS = {np.dtype(t): k for k, t in enumerate((
    np.float32, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32,
    np.int64, np.uint64))}
OPS = {"sum": 0, "prod": 1, "min": 2, "max": 3}


# The calling convention this Python code speaks to the core (its ``ABI`` constant): a
# build of an older source (an in-place build not yet redone after a pull) is not used.
ABI = 6


def attach_disabled() -> bool:
    """``TERASCALE_NO_CMA`` set (to anything but 0): never read other members' memory
    (read when a segment is mapped; one member setting it turns it off for all)."""
    return read_switch("TERASCALE_NO_CMA")


def load() -> ModuleType | None:
    """The compiled module, or None when it was not built, is stale or is disabled."""
    return load_compiled("terascale._shmcore", ABI, _warn_stale)


def _warn_stale(module: ModuleType) -> None:
    if not _warned:
        _warned.append(True)
        warnings.warn(f"{module.__file__} was built from an older _shmcore.c; using the "
                      "pure-Python path (rebuild: pip install -e . or make)", stacklevel=4)


_warned: list[bool] = []
