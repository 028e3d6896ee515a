"""HMAC challenge-response on the job secret, used by every terascale connection.

Both sides prove knowledge of the secret without sending it: the acceptor sends a random
challenge, the dialer answers with ``HMAC(secret, "dial" | challenge | its own nonce)``, and
the acceptor proves itself back with ``HMAC(secret, "accept" | nonce | challenge)``. A
connection that fails is closed; nothing is read from it beyond a fixed, small size.

Both calls return the handshake's two nonces (``challenge | nonce``), fresh per
connection. Everything after the handshake is bound to it: keys derived with HKDF-SHA256
(RFC 5869) from the job secret, salted with these nonces, authenticate every later byte of
the connection -- the control messages (:class:`Channel`: the rendezvous request and
reply, a peer link's hello) and the data records of a link
(:mod:`terascale.transport._secure`). A relay on the path that lacks the secret can
therefore neither read the control messages nor alter, replay, reorder or splice any of
them: the receiver raises :class:`~terascale._errors.LinkTampered`.

A dialer whose connection closes before the verdict gets a ``ConnectionError`` (it may
retry: a busy acceptor sheds idle connections); only a refused proof is an ``AuthError``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct
import time
from typing import Any

from ._errors import AuthError, LinkTampered

__all__ = ["Channel", "accept_handshake", "derive_keys", "dial_handshake", "drop_reason",
           "recv_exact", "recv_json", "send_json"]

_MAGIC = b"TSAUTH1\n"
_NONCE = 32
_MAC = 32
MAX_JSON = 64 * 1024  # a control message larger than this is an attack or a bug


def _mac(secret: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, b"|".join(parts), hashlib.sha256).digest()


def recv_exact(sock: socket.socket, n: int, deadline: float) -> bytes:
    """Read exactly ``n`` bytes before ``deadline`` (monotonic); TimeoutError otherwise."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"timed out after {got} of {n} bytes")
        sock.settimeout(left)
        k = sock.recv_into(view[got:])
        if k == 0:
            raise ConnectionError(f"connection closed after {got} of {n} bytes")
        got += k
    return bytes(buf)


def _send_all(sock: socket.socket, data: bytes, deadline: float) -> None:
    sock.settimeout(max(deadline - time.monotonic(), 0.001))
    sock.sendall(data)


def send_json(sock: socket.socket, obj: Any, deadline: float) -> None:
    data = json.dumps(obj, separators=(",", ":")).encode()
    if len(data) > MAX_JSON:
        raise ValueError(f"control message of {len(data)} bytes exceeds {MAX_JSON}")
    _send_all(sock, struct.pack("<I", len(data)) + data, deadline)


def recv_json(sock: socket.socket, deadline: float) -> Any:
    (n,) = struct.unpack("<I", recv_exact(sock, 4, deadline))
    if n > MAX_JSON:
        raise ValueError(f"control message claims {n} bytes (limit {MAX_JSON})")
    return json.loads(recv_exact(sock, n, deadline))


def accept_handshake(sock: socket.socket, secret: bytes, deadline: float) -> bytes:
    """Acceptor side. Raises AuthError when the dialer does not know the secret."""
    challenge = os.urandom(_NONCE)
    _send_all(sock, _MAGIC + challenge, deadline)
    answer = recv_exact(sock, len(_MAGIC) + _NONCE + _MAC, deadline)
    if answer[: len(_MAGIC)] != _MAGIC:
        raise AuthError("peer did not speak the terascale handshake")
    nonce = answer[len(_MAGIC): len(_MAGIC) + _NONCE]
    proof = answer[len(_MAGIC) + _NONCE:]
    if not hmac.compare_digest(proof, _mac(secret, b"dial", challenge, nonce)):
        try:
            _send_all(sock, b"NO" + bytes(_MAC), deadline)
        except OSError:
            pass
        raise AuthError("peer failed the challenge on the job secret (wrong TERASCALE_SECRET?)")
    _send_all(sock, b"OK" + _mac(secret, b"accept", nonce, challenge), deadline)
    return challenge + nonce


def dial_handshake(sock: socket.socket, secret: bytes, deadline: float) -> bytes:
    """Dialer side. Raises AuthError when either side does not know the secret."""
    hello = recv_exact(sock, len(_MAGIC) + _NONCE, deadline)
    if hello[: len(_MAGIC)] != _MAGIC:
        raise AuthError("server did not speak the terascale handshake")
    challenge = hello[len(_MAGIC):]
    nonce = os.urandom(_NONCE)
    _send_all(sock, _MAGIC + nonce + _mac(secret, b"dial", challenge, nonce), deadline)
    try:
        verdict = recv_exact(sock, 2 + _MAC, deadline)
    except ConnectionError as e:
        raise ConnectionError(f"server closed the connection during authentication ({e})") from None
    if verdict[:2] != b"OK":
        raise AuthError("rejected: this process does not hold the job secret "
                        "(check TERASCALE_SECRET or the secret= argument), or the handshake "
                        "was altered on the way (a refusal carries no proof: anyone on the "
                        "path can send one)")
    if not hmac.compare_digest(verdict[2:], _mac(secret, b"accept", nonce, challenge)):
        raise AuthError("server failed to prove it holds the job secret")
    return challenge + nonce


def drop_reason(e: Exception, bad: str = "sent a bad request") -> str:
    """Why a listener dropped an unauthenticated client, as its one-line summary counts it."""
    if isinstance(e, AuthError):
        return "failed authentication"
    if isinstance(e, TimeoutError):
        return "timed out"
    if isinstance(e, OSError):
        return "closed or evicted"
    return bad


def derive_keys(secret: bytes, nonces: bytes, purpose: str) -> tuple[bytes, bytes]:
    """(dialer -> acceptor key, acceptor -> dialer key), 32 bytes each, for ``purpose``.

    HKDF-SHA256 over the job secret, salted with the handshake's two nonces, so that
    every connection (and every purpose on it) gets keys of its own that nobody without
    the secret can compute, and that a replayed handshake cannot reuse. RFC 5869 on the
    standard library's HMAC-SHA256 (the bytes of ``cryptography``'s ``HKDF``, which a
    joining process then never loads: ~6 MB of its resident library pages)."""
    prk = hmac.new(nonces, secret, hashlib.sha256).digest()  # extract (the salt keys it)
    info = f"terascale v2|{purpose}".encode()
    okm, block = b"", b""
    for i in (1, 2):  # expand: 64 bytes, two blocks of SHA-256
        block = hmac.new(prk, block + info + bytes((i,)), hashlib.sha256).digest()
        okm += block
    return okm[:32], okm[32:]


def _compiled_gcm() -> Any:
    """The compiled AES-256-GCM (``terascale._gcm``), or None where it was not built, is
    stale or ``TERASCALE_NO_CEXT`` is set."""
    from ._cext import load

    return load("terascale._gcm", 1)


class _CompiledGcm:
    """AES-256-GCM on libcrypto (``terascale._gcm``), with the calls :class:`Channel`
    makes of ``cryptography``'s ``AESGCM`` (a failed tag raises ``ValueError``)."""

    def __init__(self, mod: Any, key: bytes) -> None:
        self._mod, self._key = mod, key

    def encrypt(self, nonce: bytes, data: bytes, aad: bytes) -> bytes:
        return bytes(self._mod.gcm_seal(self._key, nonce, data, aad))

    def decrypt(self, nonce: bytes, body: bytes, aad: bytes) -> bytes:
        plain = self._mod.gcm_open(self._key, nonce, body, aad)
        if plain is None:
            raise ValueError("authentication tag")
        return bytes(plain)


def _gcm(key: bytes) -> Any:
    """AES-256-GCM under ``key``: ``terascale._gcm``'s where it is built, else
    ``cryptography``'s (the same bytes either way)."""
    mod = _compiled_gcm()
    if mod is not None:
        return _CompiledGcm(mod, key)
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(key)


_RECORD_LEN = struct.Struct(">I")
_RECORD_NONCE = struct.Struct("<4xQ")


class Channel:
    """Sealed JSON messages on a connection right after its handshake.

    Each message is one record ``length u32 (associated data) | AES-256-GCM(json) | tag``,
    under a key per direction (:func:`derive_keys`) and a nonce that is the message's
    sequence number in that direction: a message altered, replayed, dropped or moved to
    another connection fails its tag (:class:`~terascale._errors.LinkTampered`). The
    control messages are small and few (one or two per connection), so they are always
    encrypted, whatever the links' mode: the job's layout and security policy never
    travel in clear.
    """

    def __init__(self, secret: bytes, nonces: bytes, *, dialer: bool, purpose: str) -> None:
        d2a, a2d = derive_keys(secret, nonces, f"control|{purpose}")
        mine, theirs = (d2a, a2d) if dialer else (a2d, d2a)
        self._seal, self._open = _gcm(mine), _gcm(theirs)
        self._sent = self._opened = 0

    def send(self, sock: socket.socket, obj: Any, deadline: float) -> None:
        data = json.dumps(obj, separators=(",", ":")).encode()
        if len(data) > MAX_JSON:
            raise ValueError(f"control message of {len(data)} bytes exceeds {MAX_JSON}")
        head = _RECORD_LEN.pack(len(data) + 16)
        body = self._seal.encrypt(_RECORD_NONCE.pack(self._sent), data, head)
        self._sent += 1
        _send_all(sock, head + body, deadline)

    def recv(self, sock: socket.socket, deadline: float, *, what: str = "control message") -> Any:
        """The next message; LinkTampered when it fails its tag."""
        head = recv_exact(sock, _RECORD_LEN.size, deadline)
        (n,) = _RECORD_LEN.unpack(head)
        if not 16 <= n <= MAX_JSON + 16:
            raise LinkTampered(f"{what}: a sealed record claims {n} bytes (altered on the "
                               "wire?)", operation=what)
        body = recv_exact(sock, n, deadline)
        try:
            data = self._open.decrypt(_RECORD_NONCE.pack(self._opened), body, head)
        except Exception:  # cryptography's InvalidTag, or _CompiledGcm's ValueError
            raise LinkTampered(f"{what} failed its authentication tag: altered, replayed or "
                               "reordered on the wire, or sent by someone without the job "
                               "secret", operation=what) from None
        self._opened += 1
        return json.loads(data)
