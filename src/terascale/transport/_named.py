"""Named shared-memory segments (``/dev/shm``), where ``memfd_create`` is missing.

The group's first member creates the file and announces it over the exchange; the others
map it and acknowledge; then the creator unlinks it, so the name lives only while the
members map it (``terascale run`` removes what a crash in that window left:
:func:`~terascale.transport.segments.remove_job_segments`). On Linux segments are anonymous
instead (:mod:`._memfd`).
"""

from __future__ import annotations

import mmap
import os
import struct

from .._errors import CollectiveError
from .base import Exchange

__all__ = ["share_named"]


def share_named(ex: Exchange, group: list[int], path: str, size: int) -> mmap.mmap:
    """Collective over ``group`` (ranks of ``ex``): member 0 creates ``path`` of ``size``
    bytes, every member maps it, then it is unlinked. Failures are raised on every member
    as a :class:`CollectiveError` naming the path."""
    rank = ex.rank
    note = bytearray(struct.pack("<Q", size))
    if rank == group[0]:
        try:
            os.unlink(path)  # a leftover of an earlier crash of this very job
        except OSError:
            # Not there, or not ours to remove (another user's file, a directory): then
            # the exclusive create below fails, and every member hears why.
            pass
        mm = _open(ex, path, size, create=True)
        try:
            acks = [bytearray(8) for _ in group[1:]]
            for peer in group[1:]:
                ex.send(peer, memoryview(note))
            for peer, ack in zip(group[1:], acks):
                ex.recv(peer, memoryview(ack))
            ex.run()
        finally:
            os.unlink(path)  # every member has mapped it (or the job failed)
        return mm
    ex.recv(group[0], memoryview(note))
    ex.run()
    mm = _open(ex, path, size, create=False, creator=group[0])
    ex.send(group[0], memoryview(note))
    ex.run()
    return mm



def _open(ex: Exchange, path: str, size: int, *, create: bool,
          creator: int | None = None) -> mmap.mmap:
    """Create (or open) and map the segment (not populated: see ``_memfd._map``)."""
    try:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0), 0o600)
        try:
            if create:
                os.ftruncate(fd, size)
            return mmap.mmap(fd, size, flags=mmap.MAP_SHARED,
                             prot=mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
    except OSError as e:
        if isinstance(e, FileNotFoundError) and creator is not None:
            # The creator unlinks early only when the collective failed on its side (e.g. a
            # mismatch another member reported); its ABORT frame, sent first, says why.
            cause = ex.lost(creator, "it removed the shared-memory segment")
            ex.abort(cause)
            raise cause from None
        err = CollectiveError(f"rank {ex.origin}: {ex.what}: cannot "
                              f"{'create' if create else 'map'} the shared-memory segment "
                              f"{path} ({e.strerror or e})", rank=ex.origin,
                              operation=ex.what)
        ex.abort(err)
        raise err from None


