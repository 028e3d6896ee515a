"""The C allocator keeps the blocks a streaming pass frees, instead of handing them back.

A pass over text parses ~2 MiB of it at a time into fresh arrays (features, values,
labels: a few MiB a block) and drops each block once learned. glibc's ``malloc`` serves
requests above its mmap threshold with a fresh ``mmap`` and returns them with ``munmap``
on ``free``, and it trims the top of its heaps above its trim threshold; its dynamic
thresholds adapt to that pattern only in the allocating thread's arena, so the parser's
threads keep mapping new pages: every block's arrays are page-faulted in and zeroed by
the kernel. Raising both thresholds (:func:`keep_freed_memory`) lets the
freed blocks be reused: a pass over text takes a fifth of the page faults and a third of
the system time, for a few percent more peak memory (the figures and their command:
``docs/benchmarks/linear.md``, "The allocator's thresholds").

One arena for the whole process (``M_ARENA_MAX`` 1): glibc gives each thread that
allocates an arena of its own, and ``malloc_trim`` hands back only the main arena's top
and the free blocks inside the others' heaps, never a thread heap's top, which ``free``
trims only above the (raised) trim threshold. The parser's threads allocate the blocks
there, so each kept the last blocks it freed, 6-7 MiB, resident for the rest of the run:
12 MB of a one-pass run's peak over wide data (``docs/design/linear-memory.md``). In one
arena every block comes back with :func:`hand_back_freed_memory`. The threads that share
it allocate a few arrays a block (the parse's output), not at a rate that contends.

The mmap threshold stays below the 2**bits tables (64 MiB at ``-b 24``), which must stay
lazily zeroed mappings (``np.zeros`` of them touches only what is used). The cost is up to
``TRIM_BYTES`` of freed memory kept per arena for reuse instead of returned to the system.

Process-wide (``mallopt``), glibc only, done once; not done where the user has set glibc's
own variables (``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_``, which glibc reads at
start; ``MALLOC_ARENA_MAX`` leaves the arenas alone) or ``TERASCALE_MALLOC=system``.
"""

from __future__ import annotations

import ctypes
import os
import platform

from ._env import read_setting

__all__ = ["MMAP_BYTES", "TRIM_BYTES", "hand_back_freed_memory", "keep_freed_memory"]

MMAP_BYTES = 8 << 20     # requests at least this large are mapped (and unmapped on free)
TRIM_BYTES = 128 << 20   # free memory at a heap's top kept up to this much

_M_TRIM_THRESHOLD = -1   # glibc's malloc.h
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
_done: list[bool] = []


def hand_back_freed_memory() -> None:
    """Return the free memory the allocator kept to the system now (glibc's
    ``malloc_trim(0)``: the heaps' tops, and the free pages inside every arena).

    For the moment a phase changes what it allocates: a first pass over wide data that
    moves to dense rows (2**bits rows mapped on their own) no longer needs the compact
    phase's freed blocks, and would otherwise carry them, up to ``TRIM_BYTES`` an arena,
    under its peak. A no-op off glibc."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return
    trim.argtypes = [ctypes.c_size_t]
    trim(0)


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds and keep one arena (see the module); whether
    the thresholds were set now."""
    if _done:
        return False
    _done.append(True)
    if (read_setting("TERASCALE_MALLOC") == "system"
            or "MALLOC_MMAP_THRESHOLD_" in os.environ or "MALLOC_TRIM_THRESHOLD_" in os.environ
            or platform.system() != "Linux" or platform.libc_ver()[0] != "glibc"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if "MALLOC_ARENA_MAX" not in os.environ:
        mallopt(_M_ARENA_MAX, 1)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_BYTES)) and bool(mallopt(_M_TRIM_THRESHOLD,
                                                                          TRIM_BYTES))
