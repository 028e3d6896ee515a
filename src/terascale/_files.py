"""Durable file replacement: what "written" means for checkpoints and models.

A rename is atomic but not durable by itself: after a power loss the directory may still
point at the old file, or at a new name whose data never reached the disk. Durability
needs the file's data flushed (``fsync`` of the file) before the rename and the rename
flushed (``fsync`` of the directory) after it -- the order ext4, XFS and btrfs document
(Pillai et al., "All File Systems Are Not Created Equal", OSDI 2014).

Also here: :func:`private_dir`, the check on a directory of entries that a run later reads
back as its own (the data caches), which another user must not be able to write; and
:func:`scratch_file`, a run's temporary files in a directory of the process's own that goes
with it: removed at exit (SIGTERM made an exit), and, where the process was killed
(SIGKILL), by the next process that makes one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from typing import IO, Any

from ._errors import ConfigError, StorageError

__all__ = ["WRITE_PIECE", "PieceWriter", "fsync_dir", "make_public", "private_dir",
           "replace_durably", "replaceable", "scratch_file", "storage_error"]

# The most bytes one write() hands the kernel for a large file. Linux 6.x (ext4 and the
# other file systems with large folios) puts a large write in large page-cache folios, and
# on a virtual machine whose host takes free 2 MiB blocks back (free page reporting) each
# is fresh memory from the host, filled slowly: a 256 MB np.savez took 1.8-2.4 s in its
# 16 MiB writes once the host had taken the memory back, and 0.3 s in writes of 256 KiB
# (benchmarks/write_sizes.py measures the threshold: writes of 64-256 KiB were fast every
# time, 1-16 MiB slow in most rounds). VW writes 64 KiB at a time.
WRITE_PIECE = 256 << 10


class PieceWriter:
    """A binary file whose ``write`` hands the kernel at most ``piece`` bytes a call (the
    rest of the file's methods are the file's own): for writers that take a file and write
    it in large pieces (``np.save``, ``np.savez``)."""

    def __init__(self, f: IO[bytes], piece: int = WRITE_PIECE) -> None:
        self._f, self._piece = f, piece

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        for a in range(0, len(view), self._piece):
            self._f.write(view[a:a + self._piece])
        return len(view)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def make_public(fd: int) -> None:
    """Give a file made by ``mkstemp`` the mode ``open()`` would have given it (0666 less the
    umask): mkstemp's 0600 suits secrets, not models and predictions a user shares."""
    mask = os.umask(0o022)  # reading the umask means setting it; put it straight back
    os.umask(mask)
    os.fchmod(fd, 0o666 & ~mask)


def private_dir(path: str, what: str, remedy: str) -> str:
    """``path``, a directory made private (mode 0700) when missing; ``ConfigError`` naming
    ``what`` when another user could write it (it is neither this user's nor root's, or it
    is group- or world-writable): entries planted or swapped there would be read back as
    this run's own. A directory under a fixed name in the shared ``/tmp`` can be made first
    by anyone.

    Parameters
    ----------
    path
        The directory.
    what
        How the error names it (the option that gave it: ``--cache-dir /x``).
    remedy
        What the error suggests besides another directory (how to run without one).
    """
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        st = os.stat(path)
    except OSError as e:
        raise ConfigError(f"{what}: cannot create the directory ({e.strerror}); give a "
                          f"writable directory, or {remedy}") from None
    uid = os.geteuid()
    if st.st_uid not in (uid, 0) or st.st_mode & 0o022:
        raise ConfigError(
            f"{what}: the directory is owned by uid {st.st_uid} with mode "
            f"{st.st_mode & 0o777:03o}, so another user could plant or replace what this "
            f"run reads back from it; give a directory of this user's (uid {uid}) that "
            f"others cannot write (chmod go-w), or {remedy}")
    return path


def storage_error(what: str, path: str | os.PathLike[str], e: OSError) -> StorageError:
    """``e`` as a :class:`StorageError` naming ``path`` (errno kept)."""
    err = StorageError(f"{what} {os.fspath(path)}: {e.strerror or e}")
    err.errno = e.errno  # (not strerror: OSError would print only that)
    return err


def fsync_dir(directory: str | os.PathLike[str]) -> None:
    """Make the renames and unlinks done in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replaceable(path: str) -> bool:
    """Whether ``path`` may be replaced by renaming a temporary file over it: a new name or a
    regular file, never a symbolic link (``/dev/stdout``) or a device."""
    if os.path.islink(path):
        return False
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return True
    import stat

    return stat.S_ISREG(st.st_mode)


def replace_durably(path: str | os.PathLike[str], write: Callable[[IO[bytes]], object], *,
                    prefix: str, suffix: str = ".tmp", what: str = "") -> None:
    """Write ``path`` through ``write(file)`` into a temporary file of its directory, fsync
    it, rename it over ``path`` and fsync the directory; the temporary file never remains
    (unless the process is killed, which is why its name starts with ``prefix``: the owner
    of the directory can recognise and remove it later).

    Raises :class:`StorageError` naming ``path`` for any I/O error (ENOSPC, EACCES, EIO);
    ``what`` starts its message (``"rank 0: checkpoint save: "``).
    """
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=prefix, suffix=suffix)
    except OSError as e:
        raise storage_error(f"{what}cannot create a temporary file for", path, e) from None
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(directory)
    except OSError as e:
        _discard(tmp)
        raise storage_error(f"{what}cannot write", path, e) from None
    except BaseException:
        _discard(tmp)
        raise


def _discard(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass


SCRATCH_PREFIX = "terascale-run-"
# A directory younger than this is never swept: its owner may not hold its lock yet
SCRATCH_GRACE_S = 10.0
_scratch: dict[int, str] = {}  # process id -> its scratch directory


def scratch_file(prefix: str, suffix: str) -> tuple[int, str]:
    """A new file (its descriptor and path, mode 0600) in this process's scratch directory:
    ``terascale-run-*`` in the temporary directory, made on first use and removed with
    everything in it at exit. The process holds an ``flock`` on the directory while it
    lives, so the directories of processes killed before their exit (SIGKILL) are told
    apart from live ones and removed by the next process that makes one; and SIGTERM,
    whose default ends the process without its exit handlers, is made an exit (status
    143) where nothing else handles it. A process forked from the owner (which closes the
    owner's descriptors and runs none of its exit handlers) reads the owner's files and
    makes its own directory for its own."""
    return tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=_scratch_dir())


def _scratch_dir() -> str:
    import atexit
    import fcntl

    pid = os.getpid()
    if pid not in _scratch:
        sweep_scratch()
        path = tempfile.mkdtemp(prefix=SCRATCH_PREFIX)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(fd, fcntl.LOCK_EX)  # (held until this process ends, however it ends)
        _scratch[pid] = path
        atexit.register(_remove_scratch, path, fd, pid)
        _exit_on_sigterm()
    return _scratch[pid]


def _remove_scratch(path: str, fd: int, pid: int) -> None:
    import shutil

    if os.getpid() == pid:  # (not a forked child's exit)
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)


def sweep_scratch() -> None:
    """Remove the scratch directories (:func:`scratch_file`) of this user's processes that
    ended without removing theirs: those whose lock no process holds."""
    import fcntl
    import shutil
    import stat
    import time

    base = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(base) if n.startswith(SCRATCH_PREFIX)]
    except OSError:
        return
    for name in names:
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
            if (not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid()
                    or time.time() - st.st_ctime < SCRATCH_GRACE_S):
                continue
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # (its process lives)
            os.close(fd)
            continue
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)


def _exit_on_sigterm() -> None:
    """SIGTERM raises ``SystemExit(143)`` (the exit status a shell reports for it), so the
    exit handlers run; only in the main thread, and only where SIGTERM has its default."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return

    def on_term(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)
