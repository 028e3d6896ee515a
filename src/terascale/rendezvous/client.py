"""The worker's side of rendezvous: authenticate, say where we listen, learn the job."""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

from .._auth import dial_handshake, recv_json, send_json
from .._errors import AuthError, ConfigError, RendezvousError, SlotTaken
from ..transport import listen

__all__ = ["Assignment", "join"]


@dataclass(frozen=True)
class Assignment:
    """What rendezvous told this worker."""

    rank: int
    size: int
    job: str
    addrs: list[tuple[str, int]]
    hosts: list[str]
    listener: socket.socket
    encrypt: bool = False
    link_rate: float | None = None  # bits/s between hosts: the smallest any worker was told

    @property
    def local_rank(self) -> int:
        return [i for i, h in enumerate(self.hosts) if h == self.hosts[self.rank]].index(self.rank)

    @property
    def local_size(self) -> int:
        return self.hosts.count(self.hosts[self.rank])


def _connect(address: tuple[str, int], deadline: float) -> socket.socket:
    last: Exception | None = None
    while True:
        try:
            return socket.create_connection(address, timeout=max(deadline - time.monotonic(), 0.05))
        except (TimeoutError, ConnectionRefusedError) as e:
            last = e
        except socket.gaierror as e:
            raise ConfigError(f"rendezvous host {address[0]!r} does not resolve ({e.strerror}); "
                              "check MASTER_ADDR / TERASCALE_RENDEZVOUS") from None
        except OSError as e:
            last = e
        if time.monotonic() >= deadline:
            raise RendezvousError(
                f"cannot reach the rendezvous server at {address[0]}:{address[1]} ({last}); "
                "is the launcher (or rank 0) running, and are the address and port right?")
        time.sleep(0.1)


def join(address: tuple[str, int], secret: bytes, *, slot: int, size: int, host_id: str,
         timeout: float, encrypt: bool = False, link_rate: float | None = None) -> Assignment:
    """Join the job at ``address`` as ``slot``; returns the rank table once all arrived.

    Connection-level failures before the request is sent (refused, reset, closed by a
    server shedding idle strangers) are retried until the deadline; a wrong secret is not.

    ``address``: the server's ``(host, port)``. ``secret``: the job secret. ``slot``: the
    rank asked for. ``size``: the job's size (must match the server's). ``host_id``: this
    host's identity (ranks with the same one share memory). ``timeout``: seconds until the
    whole job must have arrived (:class:`~terascale.RendezvousError` after). ``encrypt``:
    ask for AES-GCM links (the job is encrypted when any rank asks). ``link_rate``: the
    links' rate in bits/s for ``auto`` (the job gets the smallest asked for).
    """
    deadline = time.monotonic() + timeout
    while True:
        sock = _connect(address, deadline)
        try:
            dial_handshake(sock, secret, deadline)
            break
        except AuthError as e:
            sock.close()
            raise AuthError(f"rank {slot}: rendezvous at {address[0]}:{address[1]}: {e}") from None
        except (OSError, TimeoutError) as e:
            sock.close()
            if time.monotonic() + 0.05 >= deadline:
                raise RendezvousError(f"rank {slot}: rendezvous at {address[0]}:{address[1]} "
                                      f"failed during authentication ({e})") from None
            time.sleep(0.05)
    try:
        listener = listen(sock.getsockname()[0])
        port = listener.getsockname()[1]
        try:
            send_json(sock, {"slot": slot, "size": size, "addr": sock.getsockname()[0],
                             "port": port, "host": host_id, "pid": os.getpid(),
                             "encrypt": bool(encrypt), "link_rate": link_rate,
                             "timeout": max(deadline - time.monotonic(), 0.1)}, deadline)
            reply = recv_json(sock, deadline + 5.0)
        except (OSError, TimeoutError, ValueError) as e:
            listener.close()
            raise RendezvousError(f"rank {slot}: rendezvous server at {address[0]}:{address[1]} "
                                  f"did not answer ({e})") from None
    finally:
        sock.close()
    if not reply.get("ok"):
        listener.close()
        kind, error = reply.get("kind"), reply.get("error", "unknown error")
        if kind == "slot_taken":
            raise SlotTaken(f"rank {slot}: {error}")
        if kind == "config":
            raise ConfigError(f"rank {slot}: {error}")
        raise RendezvousError(f"rank {slot}: {error}")
    peers = reply["peers"]
    return Assignment(rank=int(reply["rank"]), size=size, job=str(reply["job"]),
                      addrs=[(p["addr"], int(p["port"])) for p in peers],
                      hosts=[str(p["host"]) for p in peers], listener=listener,
                      encrypt=bool(reply.get("encrypt", False)),
                      link_rate=_rate(reply.get("link_rate")))


def _rate(raw: object) -> float | None:
    return float(raw) if isinstance(raw, (int, float)) and raw > 0 else None
