"""Large arrays with the page size chosen for how they are touched, not numpy's default.

numpy asks the kernel for transparent huge pages (``madvise(MADV_HUGEPAGE)``) for every
array of 4 MiB or more. Huge pages pay off for an array that is read and written at
random for a long time (a learner's weights during a pass from the cache, the ``2**bits``
lookup table): one TLB entry covers 2 MiB instead of 4 KiB, so a lookup does not miss
the TLB as well as the cache. They cost on first touch: the kernel must find (with THP's
``defrag`` set to ``madvise``, the Debian default, by compacting memory synchronously)
and zero 2 MiB of contiguous memory per fault. On a busy host that made a first pass over
wide text spend half its CPU in the kernel: arrays that grow by doubling, or are written
once in order, are all first touches and few lookups.

:func:`zeros` maps anonymous memory of its own and states the policy explicitly
(``MADV_HUGEPAGE`` or ``MADV_NOHUGEPAGE``), whatever numpy's default or the host's
``enabled`` setting (``always`` hosts get 4 KiB pages where asked). The pages are the
kernel's zero pages until written: an array that is only partly used costs only what is
written. The mapping is freed with the last array that uses it. :func:`grown` is a
larger copy of an array, for arrays that grow by doubling.

Which arrays get which (``docs/design/linear-memory.md``, "Page sizes"): 4 KiB for the
first pass's arrays (columns, hash map, weights, dense rows: each page is written first
during the pass), the model moved out of them and L-BFGS's history; huge pages for arrays
allocated once at full size and read at random for whole passes (the cache pass's lookup
table and weights).
"""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["grown", "mapping", "zeros"]


def mapping(size: int, *, huge: bool) -> mmap.mmap:
    """A private anonymous mapping of ``size`` bytes (at least one page) with the page
    policy ``huge`` (see :func:`zeros`); for callers that hand pages back themselves
    (``madvise(MADV_DONTNEED)``). Private, not ``mmap``'s default shared mapping: shared
    anonymous memory is shmem, which gets huge pages only where the host's
    ``shmem_enabled`` says so (``never`` by default), whatever the mapping asks."""
    mm = mmap.mmap(-1, max(size, 1), flags=mmap.MAP_PRIVATE,
                   prot=mmap.PROT_READ | mmap.PROT_WRITE)
    advice = getattr(mmap, "MADV_HUGEPAGE" if huge else "MADV_NOHUGEPAGE", None)
    if advice is not None and size >= mmap.PAGESIZE:
        mm.madvise(advice)
    return mm


def zeros(shape: int | tuple[int, ...], dtype: type | np.dtype, *,
          huge: bool) -> np.ndarray:
    """A zeroed, writable, page-aligned array in an anonymous mapping of its own.

    Parameters
    ----------
    shape, dtype
        As :func:`numpy.zeros`.
    huge
        True: transparent huge pages (``MADV_HUGEPAGE``), for an array read at random
        for long after it is filled. False: 4 KiB pages (``MADV_NOHUGEPAGE``), for an
        array written once, swept in order, or soon replaced by a larger one.
    """
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    count = int(np.prod(dims, dtype=np.int64))
    mm = mapping(count * np.dtype(dtype).itemsize, huge=huge)
    return np.frombuffer(mm, dtype, count).reshape(dims)


def grown(old: np.ndarray, size: int, *, huge: bool = False) -> np.ndarray:
    """A 1-d array of ``size`` entries (at least ``len(old)``): ``old`` then zeros, in a
    mapping of :func:`zeros` (4 KiB pages by default: a growing array is mostly first
    touches)."""
    if size < len(old):
        raise ValueError(f"grown: size {size} is below the array's {len(old)} entries")
    new = zeros(size, old.dtype, huge=huge)
    new[:len(old)] = old
    return new


