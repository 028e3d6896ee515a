"""HMAC challenge-response on the job secret, used by every terascale connection.

Both sides prove knowledge of the secret without sending it: the acceptor sends a random
challenge, the dialer answers with ``HMAC(secret, "dial" | challenge | its own nonce)``, and
the acceptor proves itself back with ``HMAC(secret, "accept" | nonce | challenge)``. A
connection that fails is closed; nothing is read from it beyond a fixed, small size.

Both calls return the handshake's two nonces (``challenge | nonce``), fresh per
connection, from which an encrypted link derives its keys (:mod:`terascale.transport._secure`).
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

from ._errors import AuthError

__all__ = ["accept_handshake", "dial_handshake", "drop_reason", "recv_exact", "recv_json",
           "send_json"]

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
                        "(check TERASCALE_SECRET or the secret= argument)")
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
