"""An encrypted, authenticated TCP link: AES-GCM records under the mesh's frames.

:class:`SecureLink` wraps one connected, authenticated socket and offers the non-blocking
socket calls the TCP mesh makes (``sendmsg``, ``recvmsg_into``, ``recv_into``, ``recv``
with ``MSG_PEEK``, ``send``), so the exchange runs unchanged over it. Every byte the mesh
sends, frame headers and payloads alike, travels inside records::

    length u32 (big endian, authenticated as associated data) | AES-256-GCM(plaintext) | tag

Keys: HKDF-SHA256 (RFC 5869) over the job secret, salted with the two fresh nonces of
this connection's handshake and bound to the job id and both ranks, gives one key per
direction; a record's nonce is its 64-bit sequence number in that direction. A flipped
bit, a replayed, dropped, reordered or re-spliced record therefore fails the tag check and
raises :class:`~terascale._errors.LinkTampered` (an ``AuthError``) on the receiving rank,
which aborts the job like any failure of a collective. Confidentiality and integrity hold
against anyone on the path who lacks the job secret; traffic volume and timing do not.

Tuning: a record holds at most ``RECORD`` (256 KiB) of plaintext, so AES-GCM runs on large
buffers (GB/s per core with AES-NI) and the per-record cost (20 bytes, one call) stays
small, while a link's buffers stay near 1 MiB (allocated when it first receives); 4 KiB
messages pay one record each way. Records are sealed straight from the caller's buffer
and opened into a fixed buffer (one copy to the caller): beside AES-GCM itself, encryption
costs about one memcpy per byte on each side. The sender keeps at most one
encrypted record pending and reports its bytes sent only once the kernel took all of it,
so a partly sent record is never mistaken for a partly sent frame: the pending record
stands for the first bytes of whatever the caller sends next (the same frame, or the
zeros that complete it before an ABORT).
"""

from __future__ import annotations

import socket
import struct

from .._errors import ConfigError, LinkTampered

__all__ = ["RECORD", "SecureLink"]

RECORD = 256 << 10
_TAG = 16
_LEN = struct.Struct(">I")
_READ = 2 * (RECORD + _TAG + _LEN.size)  # receive buffer: whole records plus a partial one


def _has_into() -> bool:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        return False
    return hasattr(AESGCM, "encrypt_into") and hasattr(AESGCM, "decrypt_into")


_INTO = _has_into()  # seal and open in place (newer cryptography); else one copy more


def _aead(key: bytes):  # type: ignore[no-untyped-def]
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise ConfigError("encryption (TERASCALE_ENCRYPT=1, init(encrypt=True), terascale run "
                          "--encrypt) needs the cryptography package: "
                          "pip install 'terascale[secure]'") from None
    return AESGCM(key)


def link_keys(secret: bytes, nonces: bytes, job: str, dialer: int, acceptor: int) -> tuple[bytes, bytes]:
    """(dialer -> acceptor key, acceptor -> dialer key) for one connection."""
    try:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    except ImportError:
        _aead(b"")
        raise
    info = f"terascale link v1|{job}|{dialer}>{acceptor}".encode()
    okm = HKDF(algorithm=hashes.SHA256(), length=64, salt=nonces, info=info).derive(secret)
    return okm[:32], okm[32:]


class SecureLink:
    """A non-blocking socket look-alike that encrypts everything sent over ``sock``."""

    def __init__(self, sock: socket.socket, secret: bytes, nonces: bytes, job: str, *,
                 dialer: int, acceptor: int, rank: int, peer: int) -> None:
        d2a, a2d = link_keys(secret, nonces, job, dialer, acceptor)
        mine, theirs = (d2a, a2d) if rank == dialer else (a2d, d2a)
        self._sock = sock
        self._seal, self._open = _aead(mine), _aead(theirs)
        self.rank, self.peer = rank, peer
        self._sent = 0  # records sealed
        self._opened = 0  # records opened
        self._out = memoryview(b"")  # ciphertext of the pending record, not yet in the kernel
        self._out_plain = 0  # plaintext bytes that record stands for
        # Received ciphertext raw[:rlen] (at most a partial record between fills), and opened
        # plaintext plain[pstart:pend] not yet read: fixed buffers, offsets, no shifting.
        self._raw = bytearray()  # allocated at the first receive (links that never carry
        self._rlen = 0  # data, e.g. of a rank's ring neighbours only, cost nothing)
        self._plain = bytearray()
        self._pstart = self._pend = 0
        self._eof = False
        self._broken: LinkTampered | None = None

    # -- what the mesh needs of a socket ---------------------------------------------------
    def fileno(self) -> int:
        return self._sock.fileno()

    def setblocking(self, flag: bool) -> None:
        if flag:
            raise ValueError("a SecureLink is non-blocking")
        self._sock.setblocking(False)

    def setsockopt(self, *args: int) -> None:
        self._sock.setsockopt(*args)

    def shutdown(self, how: int) -> None:
        self._sock.shutdown(how)

    def close(self) -> None:
        self._sock.close()

    # -- sending ---------------------------------------------------------------------------
    def sendmsg(self, views: list[memoryview]) -> int:
        """Seal up to RECORD bytes of ``views``; plaintext bytes now wholly in the kernel."""
        fresh = not self._out
        if fresh:
            first = views[0]
            if len(views) == 1 or len(first) >= RECORD:
                plain: bytes | memoryview = first[:RECORD]  # sealed straight from the buffer
            else:  # a frame's header and the start of its payload: one record, one send
                parts, n = [first], len(first)
                for v in views[1:]:
                    parts.append(v[: RECORD - n])
                    n += len(parts[-1])
                    if n == RECORD:
                        break
                plain = b"".join(parts)
            n = len(plain)
            out = bytearray(_LEN.size + n + _TAG)
            _LEN.pack_into(out, 0, n + _TAG)
            nonce, head = self._nonce(self._sent), bytes(out[:_LEN.size])
            if _INTO:
                self._seal.encrypt_into(nonce, plain, head, memoryview(out)[_LEN.size:])
            else:  # an older cryptography: one copy more
                out[_LEN.size:] = self._seal.encrypt(nonce, bytes(plain), head)
            self._sent += 1
            self._out, self._out_plain = memoryview(out), n
        try:
            k = self._sock.send(self._out)
        except BlockingIOError:
            if fresh:
                return 0  # sealed but not sent: the record holds the caller's next bytes
            raise
        self._out = self._out[k:]
        while self._out:
            try:
                k = self._sock.send(self._out)
            except BlockingIOError:
                return 0  # partly sent: the caller's bytes count as sent once all went
            self._out = self._out[k:]
        n, self._out_plain = self._out_plain, 0
        return n

    def send(self, data: bytes | memoryview) -> int:
        return self.sendmsg([memoryview(data)])

    # -- receiving -------------------------------------------------------------------------
    def recv_into(self, buf: memoryview, nbytes: int = 0, flags: int = 0) -> int:
        return self.recvmsg_into([buf])[0]

    def recvmsg_into(self, bufs: list[memoryview]) -> tuple[int, list[object], int, None]:
        if self._broken is not None:  # a tampered link stays refused
            raise self._broken
        if self._pstart == self._pend:
            self._fill()
            if self._pstart == self._pend:
                if self._eof:
                    return 0, [], 0, None
                raise BlockingIOError("no whole record yet")
        got = 0
        with memoryview(self._plain) as plain:
            for b in bufs:
                k = min(len(b), self._pend - self._pstart)
                b[:k] = plain[self._pstart: self._pstart + k]
                self._pstart += k
                got += k
                if self._pstart == self._pend:
                    break
        return got, [], 0, None

    def recv(self, n: int, flags: int = 0) -> bytes:
        if self._broken is not None:
            raise self._broken
        if self._pend - self._pstart < n:
            self._fill()
        if self._pstart == self._pend:
            if self._eof:
                return b""
            raise BlockingIOError("no whole record yet")
        data = bytes(self._plain[self._pstart: min(self._pstart + n, self._pend)])
        if not flags & socket.MSG_PEEK:
            self._pstart += len(data)
        return data

    def _fill(self) -> None:
        """Take what the kernel has and open every whole record in it."""
        if self._broken is not None:
            raise self._broken
        if not self._raw:
            self._raw = bytearray(_READ)
        raw = self._raw
        with memoryview(raw) as view:
            while not self._eof and self._rlen < len(raw):
                try:
                    k = self._sock.recv_into(view[self._rlen:])
                except (BlockingIOError, InterruptedError):
                    break
                if not k:
                    self._eof = True
                    break
                self._rlen += k
            at = 0
            while self._rlen - at >= _LEN.size:
                (size,) = _LEN.unpack_from(raw, at)
                if not _TAG <= size <= RECORD + _TAG:
                    self._tampered(f"a record claims {size} bytes")
                if self._rlen - at < _LEN.size + size:
                    break
                self._open_record(view[at: at + _LEN.size], view[at + _LEN.size: at + _LEN.size + size])
                at += _LEN.size + size
            if at:  # keep the partial record (< RECORD) at the front
                left = self._rlen - at
                raw[:left] = view[at: self._rlen]
                self._rlen = left
        if self._eof and self._rlen:
            self._tampered(f"the connection closed inside a record ({self._rlen} bytes of it)")

    def _open_record(self, head: memoryview, body: memoryview) -> None:
        n = len(body) - _TAG
        if self._pstart == self._pend:
            self._pstart = self._pend = 0
        if self._pend + n > len(self._plain):  # make room: unread bytes to the front
            unread = self._pend - self._pstart
            self._plain[:unread] = self._plain[self._pstart: self._pend]
            self._pstart, self._pend = 0, unread
            if unread + n > len(self._plain):
                self._plain.extend(bytes(unread + n - len(self._plain)))
        try:
            if _INTO:
                with memoryview(self._plain) as plain:
                    self._open.decrypt_into(self._nonce(self._opened), body, head,
                                            plain[self._pend: self._pend + n])
            else:  # an older cryptography: one copy more
                self._plain[self._pend: self._pend + n] = self._open.decrypt(
                    self._nonce(self._opened), bytes(body), bytes(head))
        except LinkTampered:
            raise
        except Exception:  # cryptography's InvalidTag
            self._tampered(f"record #{self._opened} failed its authentication tag")
        self._opened += 1
        self._pend += n

    def _tampered(self, why: str) -> None:
        self._broken = LinkTampered(
            f"rank {self.rank}: the encrypted link from rank {self.peer} was tampered with: "
            f"{why} (altered, replayed or reordered on the wire, or a peer with another "
            "key); aborting the job", rank=self.rank, peer=self.peer, operation="receive")
        raise self._broken

    @staticmethod
    def _nonce(counter: int) -> bytes:
        return b"\0\0\0\0" + counter.to_bytes(8, "little")
