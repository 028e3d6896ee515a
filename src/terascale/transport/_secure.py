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

Tuning: a record holds at most ``RECORD`` (1 MiB) of plaintext, so AES-GCM runs on large
buffers (several GB/s per core with AES-NI) and the per-record cost (28 bytes, one
call) stays small; 4 KiB messages pay one record each way. The sender keeps at most one
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

RECORD = 1 << 20
_TAG = 16
_LEN = struct.Struct(">I")
_READ = 4 << 20  # bytes taken from the kernel per fill


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
        self._raw = bytearray()  # ciphertext received, not yet a whole record
        self._plain = bytearray()  # plaintext opened, not yet read
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
            parts, n = [], 0
            for v in views:
                take = v[: RECORD - n]
                parts.append(take)
                n += len(take)
                if n == RECORD:
                    break
            plain = parts[0] if len(parts) == 1 else b"".join(parts)
            head = _LEN.pack(n + _TAG)
            sealed = self._seal.encrypt(self._nonce(self._sent), bytes(plain), head)
            self._sent += 1
            self._out, self._out_plain = memoryview(head + sealed), n
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
        if not self._plain:
            self._fill()
            if not self._plain:
                if self._eof:
                    return 0, [], 0, None
                raise BlockingIOError("no whole record yet")
        got = 0
        for b in bufs:
            k = min(len(b), len(self._plain) - got)
            b[:k] = self._plain[got: got + k]
            got += k
            if got == len(self._plain):
                break
        del self._plain[:got]
        return got, [], 0, None

    def recv(self, n: int, flags: int = 0) -> bytes:
        if self._broken is not None:
            raise self._broken
        if len(self._plain) < n:
            self._fill()
        if not self._plain:
            if self._eof:
                return b""
            raise BlockingIOError("no whole record yet")
        data = bytes(self._plain[:n])
        if not flags & socket.MSG_PEEK:
            del self._plain[: len(data)]
        return data

    def _fill(self) -> None:
        """Take what the kernel has and open every whole record in it."""
        if self._broken is not None:
            raise self._broken
        while not self._eof and len(self._raw) < _READ:
            try:
                chunk = self._sock.recv(_READ - len(self._raw))
            except (BlockingIOError, InterruptedError):
                break
            if not chunk:
                self._eof = True
                break
            self._raw += chunk
        raw = self._raw
        at = 0
        with memoryview(raw) as view:  # no copies of the ciphertext (released before del)
            while len(raw) - at >= _LEN.size:
                (size,) = _LEN.unpack_from(raw, at)
                if not _TAG <= size <= RECORD + _TAG:
                    self._tampered(f"a record claims {size} bytes")
                if len(raw) - at < _LEN.size + size:
                    break
                head, body = view[at: at + _LEN.size], view[at + _LEN.size: at + _LEN.size + size]
                try:
                    self._plain += self._open.decrypt(self._nonce(self._opened), body, head)
                except Exception:  # cryptography's InvalidTag
                    self._tampered(f"record #{self._opened} failed its authentication tag")
                finally:
                    head.release()
                    body.release()
                self._opened += 1
                at += _LEN.size + size
        del raw[:at]
        if self._eof and raw:
            self._tampered(f"the connection closed inside a record ({len(raw)} bytes of it)")

    def _tampered(self, why: str) -> None:
        self._broken = LinkTampered(
            f"rank {self.rank}: the encrypted link from rank {self.peer} was tampered with: "
            f"{why} (altered, replayed or reordered on the wire, or a peer with another "
            "key); aborting the job", rank=self.rank, peer=self.peer, operation="receive")
        raise self._broken

    @staticmethod
    def _nonce(counter: int) -> bytes:
        return b"\0\0\0\0" + counter.to_bytes(8, "little")
