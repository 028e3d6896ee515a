"""The TCP transport's setup (:class:`TcpConnector`): every pair of ranks linked by one
authenticated connection after rendezvous.

A rank listens on its own address before the rendezvous (:func:`listen`) and publishes
``host:port`` as its endpoint; afterwards :func:`connect_tcp` links it to every other rank.

Rank ``r`` dials every lower rank and accepts one connection from every higher rank; each
connection runs the HMAC handshake, then, sealed in the channel bound to it
(:class:`terascale._auth.Channel`), the dialer names its rank, the job and its link
security, and the acceptor answers with its own. Both ends must run the same mode: a rank
never lowers its own (one that asked for encryption refuses a peer that offers
integrity only, with an ``AuthError`` naming that peer), so a policy altered anywhere
before -- by a rendezvous server or a peer -- stops the job instead of weakening it. The
acceptor vets connections concurrently, each with a short deadline of its own, so that
strangers on the listening port (idle, slow, wrong secret, another job, garbage) never
delay a genuine peer; a source address holding too many unauthenticated connections has
its oldest closed (:class:`terascale._admission.Admission`, shared with the rendezvous). Dialers retry connection-level failures until the deadline. Dropped
connections are summarized in one log line; the listener is closed once the links are
complete. Every link is then wrapped in :class:`~._secure.SecureLink` (integrity, or
encryption too), except in the benchmark-only ``plain`` mode.
"""

from __future__ import annotations

import errno
import logging
import select
import socket
import threading
import time
import warnings
from collections.abc import Sequence
from typing import Any

from .._admission import Admission
from .._auth import Channel, accept_handshake, dial_handshake, drop_reason
from .._errors import AuthError, ConfigError, PeerTimeout
from ._congestion import tune
from ._secure import MODES, agree_cipher, chosen_cipher, ciphers, hello_refused, recv_hello
from .base import Connector
from .tcp import TcpTransport

__all__ = ["TcpConnector", "connect_tcp", "listen"]

log = logging.getLogger("terascale.transport")

_VET_S = 5.0  # time a connection gets to authenticate and name itself
_PER_SOURCE = 32  # unauthenticated connections one address may hold; more evict its oldest


def listen(host: str) -> socket.socket:
    """A listening socket on ``host`` and an ephemeral port, ready before rendezvous.

    Parameters
    ----------
    host
        The address to listen on (this rank's address as the rendezvous sees it).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        tune(s)  # accepted links inherit it (before any byte: ._congestion)
    except BaseException:
        s.close()
        raise
    s.bind((host, 0))
    s.listen(256)
    return s


def _disagree(rank: int, peer: int, mine: str, theirs: object) -> AuthError:
    if theirs in MODES and MODES.index(str(theirs)) < MODES.index(mine):
        return AuthError(f"rank {rank}: rank {peer} offers {theirs} links where this rank "
                         f"asked for {mine}: refusing to lower this rank's link security "
                         "(did a rendezvous reply or a peer's setting say otherwise?)")
    return AuthError(f"rank {rank}: rank {peer} requires {theirs} links, this rank runs "
                     f"{mine}: the ranks disagree on the job's link security")


def _dial(rank: int, peer: int, addr: tuple[str, int], secret: bytes, job: str,
          deadline: float, mode: str) -> tuple[socket.socket, bytes, str]:
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            s = _connect(addr, max(deadline - time.monotonic(), 0.01))
        except OSError as e:  # refused, reset, unreachable for now: the peer may be starting
            last = e
            time.sleep(0.05)
            continue
        try:
            nonces = dial_handshake(s, secret, deadline)
            channel = Channel(secret, nonces, dialer=True, purpose=f"hello|{job}")
            # the hello names both ends: a connection that reached another rank (redirected on
            # the path, a stale address) fails here, naming both, not at its first record
            # and the ciphers (or, integrity-only, the MACs) this rank runs links of its mode
            # with: the acceptor picks one
            channel.send(s, {"rank": rank, "job": job, "security": mode, "to": peer,
                             "ciphers": list(ciphers(mode))}, deadline)
            theirs = channel.recv(s, deadline, what=f"rank {rank}: hello of rank {peer}")
            hello_refused(theirs, peer)
        except AuthError as e:
            s.close()
            raise AuthError(f"rank {rank}: connection to rank {peer} refused: {e}") from None
        except (OSError, TimeoutError) as e:  # e.g. shed by an acceptor busy with strangers
            s.close()
            last = e
            time.sleep(0.05)
            continue
        if isinstance(theirs, dict) and theirs.get("rank") != peer:
            s.close()
            raise AuthError(f"rank {rank}: the connection to rank {peer} at {addr[0]}:{addr[1]} "
                            f"reached rank {theirs.get('rank')} instead (redirected on the "
                            "path, or a stale address): refusing it")
        if not isinstance(theirs, dict) or theirs.get("security") != mode:
            s.close()
            raise _disagree(rank, peer, mode, theirs.get("security") if
                            isinstance(theirs, dict) else None)
        try:
            cipher = chosen_cipher(theirs, rank, peer, mode)
        except AuthError:
            s.close()
            raise
        return s, nonces, cipher
    raise PeerTimeout(f"rank {rank}: could not connect to rank {peer} at {addr[0]}:{addr[1]} "
                      f"before the deadline ({last})", rank=rank, peer=peer, operation="connect")


def _connect(addr: tuple[str, int], timeout: float) -> socket.socket:
    """``socket.create_connection`` with the links' congestion control set before the
    handshake: switched later, a connection keeps the pacing its first one turned on."""
    family, kind, proto, _, where = socket.getaddrinfo(addr[0], addr[1],
                                                       type=socket.SOCK_STREAM)[0]
    s = socket.socket(family, kind, proto)
    try:
        tune(s)
        s.settimeout(timeout)
        s.connect(where)
    except BaseException:
        s.close()
        raise
    return s


class _Acceptor:
    """Vets every connection to the listener in its own thread until all peers are in."""

    def __init__(self, rank: int, expect: set[int], listener: socket.socket, secret: bytes,
                 job: str, deadline: float, mode: str) -> None:
        self.rank, self.expect, self.listener, self.mode = rank, expect, listener, mode
        self.secret, self.job, self.deadline = secret, job, deadline
        self.out: dict[int, tuple[socket.socket, bytes, str]] = {}
        self.errors: list[Exception] = []
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._admission = Admission(per_source=_PER_SOURCE)
        self._vetting: list[threading.Thread] = []
        # a vetted peer wakes the accept loop: the last one in ends it at once, instead of
        # at the next timeout of the listener (which would add that timeout to every init)
        self._wake_r, self._wake_w = socket.socketpair()

    def cancel(self) -> None:
        self.stop.set()
        self._wake()

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"w")
        except OSError:  # closed: the loop has ended already
            pass

    def run(self) -> None:
        try:
            self._accept()
        finally:
            self._admission.shut_all()  # strangers still talking: stop them, we are done
            for t in self._vetting:
                t.join(1.0)
            self._wake_r.close()
            self._wake_w.close()

    def _accept(self) -> None:
        while not self.stop.is_set():
            with self._lock:
                if not self.expect - self.out.keys():
                    return
            left = self.deadline - time.monotonic()
            if left <= 0:
                with self._lock:
                    missing = sorted(self.expect - self.out.keys())
                self.errors.append(PeerTimeout(
                    f"rank {self.rank}: ranks {missing} did not connect before the deadline",
                    rank=self.rank, peer=missing[0], operation="connect"))
                return
            ready, _, _ = select.select([self.listener, self._wake_r], [], [], min(left, 0.5))
            if self._wake_r in ready:
                self._wake_r.recv(4096)
                continue  # a peer is in, or cancel(): the loop's top decides
            if not ready:
                continue
            self.listener.settimeout(min(left, 0.1))
            try:
                conn, who = self.listener.accept()
            except TimeoutError:  # the connection went away after select saw it
                continue
            except OSError as e:
                if e.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):  # shed load
                    self._admission.evict(None)
                    time.sleep(0.01)
                    continue
                self.errors.append(e)
                return
            self._admission.admit(conn, str(who[0]))
            t = threading.Thread(target=self._vet, args=(conn, who), daemon=True,
                                 name="terascale-accept-vet")
            t.start()
            self._vetting = [v for v in self._vetting if v.is_alive()] + [t]

    def _vet(self, conn: socket.socket, who: tuple[object, ...]) -> None:
        # A stranger gets at most a few seconds of one thread, never the whole deadline.
        step = min(self.deadline, time.monotonic() + _VET_S)
        vetted = False
        try:
            nonces = accept_handshake(conn, self.secret, step)
            channel = Channel(self.secret, nonces, dialer=False, purpose=f"hello|{self.job}")
            hello = recv_hello(channel, conn, step, f"rank {self.rank}: a peer's hello")
            peer = int(hello["rank"])
            if hello.get("to") != self.rank:  # a connection meant for another rank: say who
                channel.send(conn, {"security": self.mode, "rank": self.rank}, step)  # answered
                raise AuthError(f"rank {self.rank}: rank {peer}'s connection for rank "
                                f"{hello.get('to')} reached this rank")
            with self._lock:
                if hello.get("job") != self.job or peer not in self.expect or peer in self.out:
                    raise AuthError(f"unexpected hello {hello!r}")
            cipher = agree_cipher(hello.get("ciphers"), self.mode)
            channel.send(conn, {"security": self.mode, "rank": self.rank, "cipher": cipher},
                         step)
            if hello.get("security") != self.mode:  # a genuine peer: the job cannot run
                self.errors.append(_disagree(self.rank, peer, self.mode, hello.get("security")))
                self.cancel()
                raise AuthError("link security disagrees")
            with self._lock:
                # a peer's link now, no stranger's: the loop may end the moment it is in,
                # and its end shuts every connection still pending
                self._admission.done(conn)
                self.out[peer] = (conn, nonces, cipher)
            vetted = True
        except (AuthError, OSError, TimeoutError, ValueError, KeyError, TypeError) as e:
            self._admission.dropped(drop_reason(e, "sent a bad hello"), str(who[0]))
            log.debug("rank %d: dropped a connection from %s:%s: %s", self.rank, who[0], who[1], e)
            conn.close()
        finally:
            self._admission.done(conn)
            if vetted:
                self._wake()

    def summary(self) -> str | None:
        return self._admission.summary(f"rank {self.rank}", "to the peer port")


def connect_tcp(rank: int, size: int, addrs: list[tuple[str, int]], listener: socket.socket,
                secret: bytes, job: str, deadline: float, *, encrypt: bool = False,
                security: str | None = None) -> TcpTransport:
    """Connect to every other rank; returns the transport or raises naming the missing peers.

    Parameters
    ----------
    rank
        This rank.
    size
        The job's size.
    addrs
        Every rank's ``(host, port)``.
    listener
        This rank's socket from :func:`listen` (closed here).
    secret
        The job secret.
    job
        The job id (in every link's hello).
    deadline
        ``time.monotonic()`` by which every link must be up.
    encrypt
        The default of ``security`` (default False).
    security
        This rank's link mode, ``"integrity"`` or ``"encrypt"`` (default None:
        ``"encrypt"`` when ``encrypt`` else ``"integrity"``); every peer must run the same.
    """
    mode = security or ("encrypt" if encrypt else "integrity")
    if mode not in MODES:
        raise ValueError(f"security={mode!r} must be one of {MODES}")
    acc = _Acceptor(rank, set(range(rank + 1, size)), listener, secret, job, deadline, mode)
    acceptor = threading.Thread(target=acc.run, name="terascale-accept", daemon=True)
    acceptor.start()
    dialed: dict[int, tuple[socket.socket, bytes, str]] = {}
    try:
        for peer in range(rank):
            dialed[peer] = _dial(rank, peer, addrs[peer], secret, job, deadline, mode)
    except BaseException:
        acc.cancel()
        raise
    finally:
        acceptor.join()
        listener.close()
        line = acc.summary()
        if line is not None:
            log.warning("%s", line)
    if acc.errors:
        for s, *_ in [*dialed.values(), *acc.out.values()]:
            s.close()
        raise acc.errors[0]
    links: dict[int, socket.socket] = {p: s for p, (s, *_) in [*dialed.items(), *acc.out.items()]}
    if mode != "plain":
        from ._secure import SecureLink

        secure = mode == "encrypt"
        for peer, (s, nonces, cipher) in dialed.items():
            links[peer] = SecureLink(s, secret, nonces, job, dialer=rank, acceptor=peer,
                                     rank=rank, peer=peer, encrypt=secure,
                                     cipher=cipher)  # type: ignore[assignment]
        for peer, (s, nonces, cipher) in acc.out.items():
            links[peer] = SecureLink(s, secret, nonces, job, dialer=peer, acceptor=rank,
                                     rank=rank, peer=peer, encrypt=secure,
                                     cipher=cipher)  # type: ignore[assignment]
    return TcpTransport(rank, links)


def build_mesh(*args: Any, **kwargs: Any) -> TcpTransport:
    """Deprecated name of :func:`connect_tcp`."""
    warnings.warn("terascale.transport.build_mesh is deprecated: use connect_tcp",
                  DeprecationWarning, stacklevel=2)
    return connect_tcp(*args, **kwargs)


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """``host:port`` (IPv6 hosts unbracketed: the port is what follows the last colon)."""
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"{endpoint!r} is not a TCP endpoint (host:port)")
    return host, int(port)


class TcpConnector(Connector):
    """The ``tcp`` transport: a listening socket before the rendezvous, ``host:port`` as the
    endpoint, :func:`connect_tcp` after (authenticated links, see :mod:`._secure`)."""

    def listen(self, host: str) -> socket.socket:
        return listen(host)

    def endpoint(self, handle: socket.socket) -> str:
        host, port = handle.getsockname()[:2]
        return f"{host}:{port}"

    def connect(self, handle: socket.socket, rank: int, size: int, endpoints: Sequence[str], *,
                secret: bytes, job: str, deadline: float, security: str) -> TcpTransport:
        try:
            addrs = [parse_endpoint(e) for e in endpoints]
        except ConfigError:
            handle.close()
            raise
        return connect_tcp(rank, size, addrs, handle, secret, job, deadline, security=security)
