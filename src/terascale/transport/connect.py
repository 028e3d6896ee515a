"""Building the full mesh of authenticated peer connections after rendezvous.

Rank ``r`` dials every lower rank and accepts one connection from every higher rank; each
connection runs the HMAC handshake, then the dialer names its rank and the job. A stranger
on the listening port (wrong secret, another job, garbage) is logged and dropped without
disturbing the job; the listener is closed once the mesh is complete.
"""

from __future__ import annotations

import logging
import socket
import threading
import time

from .._auth import accept_handshake, dial_handshake, recv_json, send_json
from .._errors import AuthError, PeerTimeout, RendezvousError
from .tcp import TcpMesh

__all__ = ["build_mesh", "listen"]

log = logging.getLogger("terascale.transport")


def listen(host: str) -> socket.socket:
    """A listening socket on ``host`` and an ephemeral port, ready before rendezvous."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, 0))
    s.listen(256)
    return s


def _dial(rank: int, peer: int, addr: tuple[str, int], secret: bytes, job: str,
          deadline: float) -> socket.socket:
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            s = socket.create_connection(addr, timeout=max(deadline - time.monotonic(), 0.01))
        except (TimeoutError, ConnectionRefusedError) as e:
            last = e
            time.sleep(0.05)
            continue
        except OSError as e:
            raise RendezvousError(f"rank {rank}: cannot reach rank {peer} at {addr[0]}:{addr[1]} "
                                  f"({e.strerror or e})") from None
        try:
            dial_handshake(s, secret, deadline)
            send_json(s, {"rank": rank, "job": job}, deadline)
        except AuthError as e:
            s.close()
            raise AuthError(f"rank {rank}: connection to rank {peer} refused: {e}") from None
        except (OSError, TimeoutError) as e:
            s.close()
            last = e
            continue
        return s
    raise PeerTimeout(f"rank {rank}: could not connect to rank {peer} at {addr[0]}:{addr[1]} "
                      f"before the deadline ({last})", rank=rank, peer=peer, operation="connect")


def _accept_all(rank: int, expect: set[int], listener: socket.socket, secret: bytes, job: str,
                deadline: float, out: dict[int, socket.socket], errors: list[Exception],
                 stop: threading.Event) -> None:
    while expect - out.keys() and not stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            missing = sorted(expect - out.keys())
            errors.append(PeerTimeout(f"rank {rank}: ranks {missing} did not connect before the "
                                      f"deadline", rank=rank, peer=missing[0], operation="connect"))
            return
        listener.settimeout(min(left, 0.5))
        try:
            conn, who = listener.accept()
        except TimeoutError:
            continue
        except OSError as e:
            errors.append(e)
            return
        # A stranger gets at most a few seconds of our attention, never the whole deadline.
        step = min(deadline, time.monotonic() + 5.0)
        try:
            accept_handshake(conn, secret, step)
            hello = recv_json(conn, step)
            peer = int(hello["rank"])
            if hello.get("job") != job or peer not in expect or peer in out:
                raise AuthError(f"unexpected hello {hello!r}")
        except (AuthError, OSError, TimeoutError, ValueError, KeyError, TypeError) as e:
            log.warning("rank %d: dropped a connection from %s:%s: %s", rank, who[0], who[1], e)
            conn.close()
            continue
        out[peer] = conn


def build_mesh(rank: int, size: int, addrs: list[tuple[str, int]], listener: socket.socket,
               secret: bytes, job: str, deadline: float) -> TcpMesh:
    """Connect to every other rank; returns the mesh or raises naming the missing peers."""
    accepted: dict[int, socket.socket] = {}
    errors: list[Exception] = []
    stop = threading.Event()
    acceptor = threading.Thread(
        target=_accept_all, name="terascale-accept", daemon=True,
        args=(rank, set(range(rank + 1, size)), listener, secret, job, deadline, accepted, errors, stop))
    acceptor.start()
    dialed: dict[int, socket.socket] = {}
    try:
        for peer in range(rank):
            dialed[peer] = _dial(rank, peer, addrs[peer], secret, job, deadline)
    except BaseException:
        stop.set()
        raise
    finally:
        acceptor.join()
        listener.close()
    if errors:
        for s in [*dialed.values(), *accepted.values()]:
            s.close()
        raise errors[0]
    return TcpMesh(rank, {**dialed, **accepted})
