"""The worker's side of rendezvous: authenticate, say where we listen, learn the job.

Where a worker listens is its transport's business: the worker's
:class:`~terascale.transport.Connector` gets ready before the request (``listen``) and
names an opaque endpoint (TCP's ``host:port``), which the rendezvous hands to every other
worker unread; the transport itself is built from the reply (``_init.connect``).

The request and the reply travel sealed in the channel bound to the handshake
(:class:`terascale._auth.Channel`): someone on the path without the job secret can neither
read them nor change a field (the job's link security, a peer's address) unnoticed.
The reply's link security only ever raises this worker's own: a worker that asked for
encryption keeps it whatever the reply says, and its peer links then refuse a peer that
was told otherwise (:func:`terascale.transport.connect_tcp`).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from .._auth import Channel, dial_handshake
from .._errors import AuthError, ConfigError, LinkTampered, RendezvousError, SlotTaken
from ..transport import LINK_MODES as MODES
from ..transport import Connector, connector
from ..transport import stronger_mode as stronger

__all__ = ["Assignment", "join"]


@dataclass(frozen=True)
class Assignment:
    """What rendezvous told this worker.

    Parameters
    ----------
    rank
        This worker's rank.
    size
        The job's size.
    job
        The job id.
    endpoints
        Every rank's transport endpoint, in rank order (opaque: the connector reads it).
    hosts
        Every rank's host identity, in rank order.
    listener
        This rank's handle from ``connector.listen`` (TCP: a listening socket).
    addresses
        Every rank's address as the rendezvous server saw it.
    connector
        The transport's connector that links the ranks.
    security
        The links' mode: ``"integrity"`` (the default) or ``"encrypt"``.
    link_rate
        Bits/s between hosts: the smallest any worker was told (None: unknown).
    """

    rank: int
    size: int
    job: str
    endpoints: list[str]
    hosts: list[str]
    listener: Any
    addresses: list[str]
    connector: Connector
    security: str = "integrity"
    link_rate: float | None = None

    @property
    def encrypt(self) -> bool:
        return self.security == "encrypt"

    @property
    def local_rank(self) -> int:
        return [i for i, h in enumerate(self.hosts) if h == self.hosts[self.rank]].index(self.rank)

    @property
    def local_size(self) -> int:
        return self.hosts.count(self.hosts[self.rank])


def _connect(address: tuple[str, int], deadline: float, slot: int) -> socket.socket:
    last: Exception | None = None
    while True:
        try:
            return socket.create_connection(address, timeout=max(deadline - time.monotonic(), 0.05))
        except (TimeoutError, ConnectionRefusedError) as e:
            last = e
        except socket.gaierror as e:
            raise ConfigError(f"rank {slot}: rendezvous host {address[0]!r} does not resolve "
                              f"({e.strerror}); "
                              "check MASTER_ADDR / TERASCALE_RENDEZVOUS") from None
        except OSError as e:
            last = e
        if time.monotonic() >= deadline:
            raise RendezvousError(
                f"rank {slot}: cannot reach the rendezvous server at {address[0]}:{address[1]} "
                f"({last}); "
                "is the launcher (or rank 0) running, and are the address and port right?")
        time.sleep(0.1)


def join(address: tuple[str, int], secret: bytes, *, slot: int, size: int, host_id: str,
         timeout: float, encrypt: bool = False, link_rate: float | None = None,
         security: str | None = None, transport: str | Connector | None = None) -> Assignment:
    """Join the job at ``address`` as ``slot``; returns the rank table once all arrived.

    Connection-level failures before the request is sent (refused, reset, closed by a
    server shedding idle strangers) are retried until the deadline; a wrong secret is not.

    Parameters
    ----------
    address
        The server's ``(host, port)``.
    secret
        The job secret (bytes), the same on every worker and the server.
    slot
        The rank asked for, 0 to ``size - 1``.
    size
        The job's size (must match the server's).
    host_id
        This host's identity (ranks with the same one share memory).
    timeout
        Seconds until the whole job must have arrived (:class:`~terascale.RendezvousError`
        after).
    encrypt
        Ask for AES-GCM links (default False; the job is encrypted when any rank asks).
    link_rate
        The links' rate between hosts in bits/s, for ``auto`` (default None: unknown; the
        job gets the smallest any worker gave).
    security
        This worker's own request for its links, ``"integrity"`` or ``"encrypt"`` (default
        None: ``"encrypt"`` when ``encrypt`` else ``"integrity"``); the job's is the
        strongest any worker asked for.
    transport
        The transport to link the ranks with, a name of
        :data:`terascale.transport.TRANSPORTS` or a connector (default None: ``tcp``); this
        worker listens with it before the request and publishes its endpoint.
    """
    link = transport if isinstance(transport, Connector) else connector(transport)
    own = security or ("encrypt" if encrypt else "integrity")
    if own not in MODES:
        raise ConfigError(f"security={own!r} must be one of {', '.join(MODES)}")
    deadline = time.monotonic() + timeout
    while True:
        sock = _connect(address, deadline, slot)
        try:
            nonces = dial_handshake(sock, secret, deadline)
            channel = Channel(secret, nonces, dialer=True, purpose="rendezvous")
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
        listener = link.listen(sock.getsockname()[0])
        try:
            channel.send(sock, {"slot": slot, "size": size, "addr": sock.getsockname()[0],
                                "endpoint": link.endpoint(listener), "transport": link.name,
                                "host": host_id, "pid": os.getpid(),
                                "security": own, "link_rate": link_rate,
                                "timeout": max(deadline - time.monotonic(), 0.1)}, deadline)
            reply = channel.recv(sock, deadline + 5.0, what=f"rank {slot}: rendezvous reply")
        except LinkTampered as e:
            link.discard(listener)
            raise LinkTampered(f"rank {slot}: rendezvous server at {address[0]}:{address[1]}: {e}; "
                          "aborting", rank=slot, operation="rendezvous") from None
        except (OSError, TimeoutError, ValueError) as e:
            link.discard(listener)
            raise RendezvousError(f"rank {slot}: rendezvous server at {address[0]}:{address[1]} "
                                  f"did not answer ({e})") from None
    finally:
        sock.close()
    if not reply.get("ok"):
        link.discard(listener)
        kind, error = reply.get("kind"), reply.get("error", "unknown error")
        if kind == "slot_taken":
            raise SlotTaken(f"rank {slot}: {error}")
        if kind == "config":
            raise ConfigError(f"rank {slot}: {error}")
        if kind == "auth":
            raise AuthError(f"rank {slot}: {error}")
        raise RendezvousError(f"rank {slot}: {error}")
    peers = reply["peers"]
    return Assignment(rank=int(reply["rank"]), size=size, job=str(reply["job"]),
                      endpoints=[_endpoint(p) for p in peers],
                      hosts=[str(p["host"]) for p in peers], listener=listener,
                      addresses=[str(p["addr"]) for p in peers], connector=link,
                      security=stronger(own, str(reply.get("security"))),
                      link_rate=_rate(reply.get("link_rate")))


def _endpoint(peer: dict[str, Any]) -> str:
    """A peer's endpoint in the reply (a table of TCP addresses and ports: ``host:port``)."""
    return str(peer["endpoint"]) if "endpoint" in peer else f"{peer['addr']}:{int(peer['port'])}"


def _rate(raw: object) -> float | None:
    return float(raw) if isinstance(raw, (int, float)) and raw > 0 else None
