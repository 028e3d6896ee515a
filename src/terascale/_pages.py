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

Those huge pages are faulted in and zeroed by the kernel on first write, in the thread
that writes first: the learner's. How long that takes varies from run to run with the
host's memory (compaction; on a virtual machine, memory the hypervisor must back again),
from nothing to a second or more of a one-worker pass from the cache at ``-b 24``. Where
the job leaves a core idle (one worker on a multi-core host) :func:`prefaulting` moves
that work onto it: arrays allocated with ``zeros(..., prefault=True)`` inside it are
faulted in by a background thread (``madvise(MADV_POPULATE_WRITE)``, Linux 5.14+, in
chunks) while the learner reads its data. The pages are the same zeroed pages the
learner's first write would have made: no value changes, and the thread is stopped and
joined when the block ends.
"""

from __future__ import annotations

import contextlib
import contextvars
import ctypes
import errno
import mmap
import os
import threading
import weakref
from collections import deque
from collections.abc import Iterator

from ._background import background
from ._errors import TerascaleError
from ._lazy import lazy_module

np = lazy_module("numpy", globals(), "np")  # (mapping needs none: the VW learner's table)

__all__ = ["Prefault", "give_back", "give_back_library", "grown", "mapping", "prefaulting",
           "spare_core", "zeros"]

MADV_POPULATE_WRITE = 23  # <linux/mman.h>, Linux 5.14+ (not in Python's mmap module)


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
          huge: bool, prefault: bool = False) -> np.ndarray:
    """A zeroed, writable, page-aligned array in an anonymous mapping of its own.

    Parameters
    ----------
    shape, dtype
        As :func:`numpy.zeros`.
    huge
        True: transparent huge pages (``MADV_HUGEPAGE``), for an array read at random
        for long after it is filled. False: 4 KiB pages (``MADV_NOHUGEPAGE``), for an
        array written once, swept in order, or soon replaced by a larger one.
    prefault
        True: inside a :func:`prefaulting` block that has a spare core, hand the array to
        its background thread, which faults its pages in before the caller writes them.
        For an array whose every page the caller will write soon (a full-size table or
        weight array): pages it would never write would cost memory for nothing.
        Elsewhere (no block, no spare core) it does nothing.
    """
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    count = int(np.prod(dims, dtype=np.int64))
    mm = mapping(count * np.dtype(dtype).itemsize, huge=huge)
    out = np.frombuffer(mm, dtype, count).reshape(dims)
    if prefault:
        active = _ACTIVE.get()
        if active is not None:
            active.add(out)
    return out


def grown(old: np.ndarray, size: int, *, huge: bool = False) -> np.ndarray:
    """A 1-d array of ``size`` entries (at least ``len(old)``): ``old`` then zeros, in a
    mapping of :func:`zeros` (4 KiB pages by default: a growing array is mostly first
    touches)."""
    if size < len(old):
        raise ValueError(f"grown: size {size} is below the array's {len(old)} entries")
    new = zeros(size, old.dtype, huge=huge)
    new[:len(old)] = old
    return new




def give_back(a: np.ndarray, keep: int) -> None:
    """Hand the pages of ``a`` past its first ``keep`` bytes back to the system (zeroed if
    touched again), for an array of :func:`zeros` whose tail is no longer read: the head
    stays, its pages resident, the rest of the mapping costs nothing. Only for
    :func:`zeros` arrays (a private mapping of their own: the pages given back are no other
    array's).

    Parameters
    ----------
    a
        A contiguous array of :func:`zeros` (or a view of its start).
    keep
        Bytes at its start that stay (rounded up to a page).
    """
    page = mmap.PAGESIZE
    start = a.__array_interface__["data"][0]
    lo = -(-(start + keep) // page) * page
    hi = (start + a.nbytes) // page * page
    advise = _madvise()
    if advise is not None and hi > lo:
        advise(lo, hi - lo, mmap.MADV_DONTNEED)


def spare_core(workers: int) -> bool:
    """Whether this process may run on more cores than the job has workers on this host
    (``os.sched_getaffinity``; all cores where that is unknown): only then has a
    background thread a core of its own. Two workers on two cores have none."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return cores > max(workers, 1)


_ACTIVE: contextvars.ContextVar[Prefault | None] = contextvars.ContextVar(
    "terascale_prefault", default=None)


@contextlib.contextmanager
def prefaulting(workers: int, *, timeout: float = 30.0) -> Iterator[Prefault | None]:
    """A block in which ``zeros(..., prefault=True)`` arrays are faulted in by a
    background thread, where :func:`spare_core` says a core is free for it (else the
    block does nothing and yields None).

    Parameters
    ----------
    workers
        The job's workers on this host (each may run a learner on a core of its own).
    timeout
        Seconds the block's end waits for the thread to stop (it stops within one chunk
        of ``madvise``, milliseconds); past that it raises :class:`TerascaleError`.

    The thread is stopped and joined when the block ends, however it ends: no thread
    outlives the block.
    """
    if not spare_core(workers):
        yield None
        return
    pf = Prefault()
    token = _ACTIVE.set(pf)
    failed = False
    try:
        yield pf
    except BaseException:
        failed = True
        raise
    finally:
        _ACTIVE.reset(token)
        joined = pf.close(timeout)
        if not joined and not failed:
            raise TerascaleError(f"prefault: the page-fault thread (madvise "
                                 f"MADV_POPULATE_WRITE over this process's own arrays) did "
                                 f"not stop within {timeout:g} s")


_libc: ctypes.CDLL | None = None


def _madvise() -> ctypes._CFuncPtr | None:
    """libc's ``madvise`` through ctypes, which lets go of the GIL during the call
    (``mmap.madvise`` holds it: the learner's thread would wait on every chunk)."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(None, use_errno=True)
        except OSError:
            return None
    fn = getattr(_libc, "madvise", None)
    if fn is not None:
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        fn.restype = ctypes.c_int
    return fn


def give_back_library(name: str) -> int:
    """Drop from this process's resident set the pages of the shared library whose path
    contains ``name`` that are read-only copies of its file (its code and constants);
    returns the bytes of the mappings advised.

    numba loads LLVM (llvmlite's ``libllvmlite.so``, ~80 MiB of code) to link even the
    kernels it loads from its cache, and the kernel maps that code in large folios: ~105
    MiB of it stays resident for the rest of the run, counted in the process's peak, though
    a pass that has loaded its kernels runs none of it. ``madvise(MADV_DONTNEED)`` on a
    private file mapping that no write has copied (no ``Anonymous`` pages in
    ``/proc/self/smaps``; never a writable one) only unmaps its pages: they stay in the
    page cache, and any later use (a kernel loaded or compiled) faults them back from it,
    unchanged. A no-op where ``/proc/self/smaps`` or ``madvise`` is missing."""
    advise = _madvise()
    spans: list[tuple[int, int, int]] = []  # (start, end, anonymous kB)
    try:
        with open("/proc/self/smaps") as f:
            keep = False
            for line in f:
                head = line.split(None, 5)  # (a mapping's line: range, perms, ..., path)
                if "-" in head[0] and len(head) >= 5 and ":" in head[3]:
                    keep = len(head) == 6 and name in head[5] and "w" not in head[1]
                    if keep:
                        a, b = (int(x, 16) for x in head[0].split("-"))
                        spans.append((a, b, 0))
                elif keep and head[0] == "Anonymous:":
                    a, b, _ = spans[-1]
                    spans[-1] = (a, b, int(head[1]))
    except OSError:
        return 0
    done = 0
    for a, b, anon in spans:
        if anon == 0 and advise is not None and advise(a, b - a, mmap.MADV_DONTNEED) == 0:
            done += b - a
    return done


class Prefault:
    """A background thread that faults in the pages of the arrays handed to it, in the
    order they are added, each from its last chunk to its first (the code that allocates
    an array and fills it in order, a lookup table's sorted scatter, then meets the
    thread halfway instead of following it).

    Each chunk is one ``madvise(MADV_POPULATE_WRITE)``: the kernel faults the pages in as
    a write would, zeroed, without writing to them, so it never races with the owner's
    own writes. Where the kernel lacks it (before Linux 5.14: ``EINVAL``) the thread stops
    and does nothing: touching a byte per page instead would be a write racing with the
    learner's, and a read maps only the shared zero page. The thread holds an array only
    for the chunk it is faulting in (a weak reference otherwise): an array its owner drops
    is skipped, never faulted in nor kept alive.

    Parameters
    ----------
    chunk
        Bytes per ``madvise`` (default 4 MiB, two huge pages): how soon :meth:`close`
        stops the thread.
    """

    def __init__(self, *, chunk: int = 4 << 20) -> None:
        self.chunk = max(chunk, mmap.PAGESIZE) // mmap.PAGESIZE * mmap.PAGESIZE
        self.faulted = 0          # bytes faulted in so far
        self.unsupported = False  # the kernel refused MADV_POPULATE_WRITE
        self._todo: deque[weakref.ref[np.ndarray]] = deque()
        self._wake = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None

    def add(self, a: np.ndarray) -> None:
        """Fault in ``a``'s pages after those of the arrays added before it."""
        if a.nbytes == 0 or self.unsupported:
            return
        with self._wake:
            if self._stop:
                return
            self._todo.append(weakref.ref(a))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="terascale-prefault")
                self._thread.start()
            self._wake.notify()

    def close(self, timeout: float = 30.0) -> bool:
        """Stop the thread (after its current chunk) and join it; True once it is gone
        (False: still running after ``timeout`` seconds)."""
        with self._wake:
            self._stop = True
            self._todo.clear()
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout)
            return not self._thread.is_alive()
        return True

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _next(self) -> weakref.ref[np.ndarray] | None:
        with self._wake:
            while not self._todo and not self._stop:
                self._wake.wait()
            return None if self._stop else self._todo.popleft()

    def _run(self) -> None:
        background()  # a helper: the learner's thread keeps its core where they share one
        advise = _madvise()
        if advise is None:
            self.unsupported = True
            return
        page = mmap.PAGESIZE
        while (ref := self._next()) is not None:
            a = ref()
            if a is None:
                continue
            lo = a.__array_interface__["data"][0] // page * page
            hi = a.__array_interface__["data"][0] + a.nbytes
            del a
            end = hi
            while end > lo and not self._stop:
                a = ref()  # held for this chunk only: the mapping stays while it is advised
                if a is None:
                    break
                start = max(lo, (end - 1) // self.chunk * self.chunk)
                if advise(start, end - start, MADV_POPULATE_WRITE) != 0:
                    err = ctypes.get_errno()
                    del a
                    if err in (errno.EINVAL, errno.ENOSYS):
                        self.unsupported = True
                        return
                    break  # ENOMEM (out of memory or unmapped), EFAULT...: leave this array
                del a
                self.faulted += end - start
                end = start
