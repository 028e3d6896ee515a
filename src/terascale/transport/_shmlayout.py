"""Where everything lives in a shared-memory segment, and the descriptor a slot carries.

One owner for the byte layout that :class:`~terascale.transport.shmgroup.ShmGroup` (Python)
and the compiled core (``_shmcore.h``, which must agree with these offsets) read and
write::

    control: one 512-byte slot per member
        +0    epoch     u64   barriers this member has arrived at (written only by it)
        +64   sleeping  u64   1: this member is blocked in the kernel (wake it on arrival)
        +128  pid       u64
        +136  base      u64   where this member mapped the segment (the attach probe)
        +144  src, dst  u64   the direct schedule's buffers, in this member's address space
        +160  direct    u64   1: this member can reach every other member's memory
        +256  2 x 128   (seq u64, descriptor 120 bytes), by parity of the round
    data: per member, two areas ("sets") of ``area_bytes`` each

The control block is rounded up to whole pages, so the areas start page-aligned.

A collective's descriptor (sequence number, communicator context, what it is and on what
shape) is the same bytes as the TCP exchange's tag (``Exchange.tag``), padded to
:data:`DESC_BYTES`; members compare them at the first barrier of every collective.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._frames import collective_tag, pack_desc

if TYPE_CHECKING:
    from .base import Exchange

__all__ = ["ALIGN", "BASE", "DESC", "DESC_BYTES", "DIRECT", "DST", "EPOCH", "PID", "SLEEPING",
           "SLOT", "SRC", "control_bytes", "desc_field", "slot_tag", "tag_field"]

# The compiled core's _shmcore.h writes the same numbers (SLOT, OFF_*, DESC_BYTES);
# tests/transport/test_shmlayout.py compares them.
SLOT = 512  # bytes of control per member
EPOCH, SLEEPING, PID, DIRECT, DESC = 0, 64, 128, 160, 256  # offsets in a slot
BASE, SRC, DST = 136, 144, 152  # offsets only the core reads and writes (the direct schedule)
DESC_BYTES = 128  # one descriptor: seq u64, then the collective's description
ALIGN = 4096


def control_bytes(n: int) -> int:
    """Bytes of the control block for ``n`` members (whole pages)."""
    return -(-n * SLOT // ALIGN) * ALIGN


def tag_field(desc: str) -> bytes:
    """A collective's descriptor ``desc`` as :func:`slot_tag` takes it (computed once).

    Parameters
    ----------
    desc
        The collective's descriptor.
    """
    return pack_desc(desc).ljust(DESC_BYTES - 16, b"\0")


# slot_tag(seq, context, field): what ShmGroup.announce writes for collective ``seq`` of
# communicator ``context``, without an exchange: the same bytes as ``Exchange.tag`` (the
# field comes padded from tag_field). The same function, not a wrapper: the per-call fast
# path builds one tag per call and a Python call level costs as much as the pack.
slot_tag = collective_tag


def desc_field(ex: Exchange) -> bytes:
    """The descriptor slot's bytes for ``ex``'s current collective."""
    return ex.tag[:DESC_BYTES].ljust(DESC_BYTES, b"\0")
