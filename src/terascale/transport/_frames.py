"""Wire format of one message between two ranks.

Every message is a fixed 128-byte header followed by its payload::

    magic "TSF1" | kind u8 | pad | seq u64 | payload bytes u64 | descriptor (96 bytes, utf-8)
    | context u64


The descriptor names the collective (``allreduce(ring,float32[1048576],sum)``); the
receiver compares it and the sequence number with its own, which is how ranks that call
different collectives detect it at the first message instead of hanging or reducing
garbage. The context names the communicator (0: the whole job; a sub-communicator made
by ``split`` has its own), whose collectives are numbered on their own. ``ABORT`` frames carry a JSON payload naming the error that stopped the sender.
"""

from __future__ import annotations

import hashlib
import struct

__all__ = [
    "ABORT", "DATA", "HEADER", "MAX_ABORT", "collective_tag", "pack_desc", "pack_header",
    "set_seq", "show_desc", "unpack_header",
]

DATA = 1
ABORT = 2
_MAGIC = b"TSF1"
_FIXED = struct.Struct("<4sB3xQQ")
_DESC = 96
_CONTEXT = struct.Struct("<Q")
HEADER = 128
_CONTEXT_AT = HEADER - _CONTEXT.size
assert _FIXED.size + _DESC == _CONTEXT_AT
MAX_ABORT = 16 * 1024


def pack_desc(desc: str) -> bytes:
    """The fixed-size descriptor field: long descriptors keep a prefix and a hash of the rest."""
    raw = desc.encode()
    if len(raw) > _DESC:
        digest = hashlib.blake2b(raw, digest_size=8).hexdigest()
        raw = raw[: _DESC - 17] + b"#" + digest.encode()
    return raw.ljust(_DESC, b"\0")


def collective_tag(seq: int, context: int, desc_field: bytes) -> bytes:
    """The bytes that identify one collective (``Exchange.tag``): equal on every rank that
    called the same one; ``desc_field`` is :func:`pack_desc` of its descriptor.

    Parameters
    ----------
    seq
        The collective's number.
    context
        The communicator's context id.
    desc_field
        :func:`pack_desc` of the descriptor.
    """
    return _TAG_HEAD.pack(seq, context) + desc_field


_TAG_HEAD = struct.Struct("<QQ")


def pack_header(kind: int, seq: int, nbytes: int, desc_field: bytes, context: int = 0) -> bytes:
    return _FIXED.pack(_MAGIC, kind, seq, nbytes) + desc_field + _CONTEXT.pack(context)


def set_seq(header: bytearray, seq: int) -> None:
    """Renumber a header built by :func:`pack_header` in place: a link that sends the same
    collective again and again (:mod:`._tcp_swap`) packs its header once."""
    _SEQ.pack_into(header, _SEQ_AT, seq)


_SEQ = struct.Struct("<Q")
_SEQ_AT = 8  # after magic, kind and padding
assert _FIXED.size == _SEQ_AT + 2 * _SEQ.size


def unpack_header(buf: bytes | bytearray | memoryview) -> tuple[int, int, int, bytes, int] | None:
    """``(kind, seq, nbytes, desc_field, context)``, or None when the magic is wrong."""
    magic, kind, seq, nbytes = _FIXED.unpack_from(buf, 0)
    if magic != _MAGIC:
        return None
    desc = bytes(buf[_FIXED.size: _CONTEXT_AT])
    return kind, seq, nbytes, desc, _CONTEXT.unpack_from(buf, _CONTEXT_AT)[0]


def show_desc(field: bytes) -> str:
    return field.rstrip(b"\0").decode(errors="replace")
