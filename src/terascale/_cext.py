"""Whether the compiled modules may be used: one switch for all of them.

``TERASCALE_NO_CEXT`` set to anything but ``0`` selects the pure-Python (and numba) paths
at run time: the shared-memory transport's per-call work (:mod:`terascale.transport._core`)
and VW text parsing (:mod:`terascale.linear._vwtext_fast`). A build without a C compiler
gets the same paths.
"""

from __future__ import annotations

import os

__all__ = ["disabled"]


def disabled() -> bool:
    """``TERASCALE_NO_CEXT`` set (to anything but 0): use the pure-Python paths."""
    return os.environ.get("TERASCALE_NO_CEXT", "0") not in ("", "0")
