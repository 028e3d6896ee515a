"""The control link between a node's launcher and node 0's coordinator.

One TCP connection per node, authenticated with the job secret's HMAC handshake
(:mod:`terascale._auth`), carrying JSON messages sealed in the :class:`~terascale._auth.Channel`
bound to that handshake (AES-GCM, a key per direction, a counter per message), so that
nobody on the path without the secret reads, forges, replays or reorders a place, an
order or a failure report -- a message that fails its tag ends the link as
:class:`~terascale._errors.LinkTampered`. The messages are: ``start``/``stop``/``done`` from the
coordinator, ``result`` from the node. Each side pings every ``PING_S`` seconds, so a link
that stays silent longer than :func:`silence` means the other side is lost (killed, or cut
off by a partition) even when no FIN or RST ever arrives -- the heartbeat torchrun's
elastic agent and Horovod's driver keep for the same reason.

Node 0 admits the links concurrently (:func:`admit_links`): each connection is vetted in its
own thread with a few seconds to authenticate and say hello, under the per-source caps and
eviction the rendezvous and peer ports use (:class:`terascale._admission.Admission`), so
idle or dribbling strangers on the coordinator's port delay no node.
"""

from __future__ import annotations

import logging
import queue
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from .._admission import Admission
from .._auth import Channel, accept_handshake, dial_handshake, drop_reason
from .._errors import AuthError, RendezvousError

__all__ = ["PING_S", "ControlLink", "admit_links", "connect", "silence"]

log = logging.getLogger("terascale.launch")

PING_S = 1.0
_HELLO_S = 5.0  # time a connection gets to authenticate and say hello
_PER_SOURCE = 64  # unauthenticated connections one address may hold; more evict its oldest
_MAX_PENDING = 1024  # unauthenticated connections in all; more evict the oldest of all
_PURPOSE = "launch control"


def silence(timeout: float) -> float:
    """How long a silent control link means a lost node: before the collective deadline,
    so a partition is blamed on the cut-off node, not on the rank that timed out waiting."""
    return min(timeout, max(3.0, timeout / 2))


class ControlLink:
    """One control connection: JSON messages out (locked), a reader thread into ``inbox``.

    ``inbox`` gets ``(tag, message)``; ``message`` None means the link is lost (closed, or
    silent for ``silence`` seconds although the other side pings every second, or a
    message failed its authentication: then ``error`` says so, naming ``peer``).
    """

    def __init__(self, sock: socket.socket, channel: Channel, tag: Any, inbox: queue.Queue,
                 silence: float, peer: str) -> None:
        self.sock, self.tag, self._inbox, self._silence = sock, tag, inbox, silence
        self._channel, self.peer = channel, peer
        self._lock = threading.Lock()
        self.closed = False
        self.error: str | None = None  # why the link was refused, when it was tampered with
        self._reader = sock.dup()  # its own timeout: recv and send do not share one
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._ping, daemon=True).start()

    def _read(self) -> None:
        try:
            while not self.closed:
                msg = self._channel.recv(self._reader, time.monotonic() + self._silence,
                                         what=f"control link with {self.peer}")
                if not isinstance(msg, dict):
                    raise ValueError(f"a control message that is not an object: {msg!r:.100}")
                if msg.get("kind") != "ping":
                    self._inbox.put((self.tag, msg))
        except AuthError as e:
            if not self.closed:
                self.error = f"{type(e).__name__}: {e}"
                log.error("terascale run: %s", self.error)
        except (OSError, TimeoutError, ValueError):
            pass
        if not self.closed:
            self._inbox.put((self.tag, None))

    def _ping(self) -> None:
        while not self.closed and self.send({"kind": "ping"}):
            time.sleep(PING_S)

    def send(self, msg: dict) -> bool:
        try:
            with self._lock:
                self._channel.send(self.sock, msg, time.monotonic() + 5.0)
            return True
        except (OSError, TimeoutError, ValueError):
            return False

    def close(self) -> None:
        self.closed = True
        for s in (self.sock, self._reader):
            try:
                s.close()
            except OSError:
                pass


def connect(address: tuple[str, int], secret: bytes,
            deadline: float) -> tuple[socket.socket, Channel]:
    """A control link to node 0's coordinator at ``address``, authenticated with ``secret``,
    and the sealed channel its messages go in; retried until ``deadline``, since node 0 may
    start after this node."""
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection(address, timeout=2.0)
            nonces = dial_handshake(sock, secret, time.monotonic() + 5.0)
            return sock, Channel(secret, nonces, dialer=True, purpose=_PURPOSE)
        except (OSError, TimeoutError) as e:
            last = e
            time.sleep(0.2)
    raise RendezvousError(f"cannot reach node 0's launcher at {address[0]}:{address[1]} "
                          f"({last}); is it running with the same --rendezvous and secret?")


def admit_links(listener: socket.socket, secret: bytes, deadline: float,
                check: Callable[[dict], str | None], complete: Callable[[], bool],
                take: Callable[[socket.socket, Channel, dict], bool]) -> str | None:
    """Accept control links on ``listener`` until ``complete()`` or ``deadline``.

    Every connection is vetted in a thread of its own: the HMAC handshake and a hello (a
    JSON object, sealed in the channel bound to the handshake) within ``_HELLO_S``.
    ``check(hello)`` returns None for a welcome hello or the reason it is refused (told to
    the dialer as ``done`` with an error); ``take(sock, channel, hello)`` then receives the
    link, or returns False when it lost a race for the same
    place (the link is refused alike). Strangers, wrong secrets and garbage are dropped
    and counted; the one-line summary of the drops is returned (None: none).
    """
    admission = Admission(per_source=_PER_SOURCE, total=_MAX_PENDING)
    wake_r, wake_w = socket.socketpair()
    vetting: list[threading.Thread] = []

    def vet(conn: socket.socket, who: tuple[Any, ...]) -> None:
        step = min(deadline, time.monotonic() + _HELLO_S)
        kept = False
        try:
            nonces = accept_handshake(conn, secret, step)
            admission.done(conn)  # it knows the secret: no longer a candidate for eviction
            channel = Channel(secret, nonces, dialer=False, purpose=_PURPOSE)
            hello = channel.recv(conn, step, what=f"hello of the control link from {who[0]}")
            if not isinstance(hello, dict):
                raise ValueError("the hello is not an object")
            refused = check(hello)
            if refused is None and not take(conn, channel, hello):
                refused = check(hello) or "its place was taken meanwhile"
            if refused is not None:
                channel.send(conn, {"kind": "done", "status": 1, "error": refused}, step)
            else:
                kept = True
                try:
                    wake_w.send(b"w")
                except OSError:  # the accept loop has ended already
                    pass
        except Exception as e:  # strangers, wrong secrets, garbage: dropped, the job goes on
            admission.dropped(drop_reason(e, "sent a bad hello"), str(who[0]))
            log.debug("coordinator: dropped a connection from %s: %s", who[0], e)
        finally:
            admission.done(conn)
            if not kept:
                conn.close()

    try:
        while not complete():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select([listener, wake_r], [], [], min(left, 0.5))
            if wake_r in ready:
                wake_r.recv(4096)
            if listener not in ready:
                continue
            listener.settimeout(0.1)
            try:
                conn, who = listener.accept()
            except TimeoutError:  # gone between select and accept
                continue
            except OSError:  # out of descriptors for now: shed the oldest stranger
                admission.evict(None)
                time.sleep(0.01)
                continue
            admission.admit(conn, str(who[0]))
            t = threading.Thread(target=vet, args=(conn, who), daemon=True,
                                 name="terascale-coordinator-vet")
            t.start()
            vetting = [v for v in vetting if v.is_alive()] + [t]
    finally:
        admission.shut_all()  # the nodes are in (or it is over): strangers must go
        for t in vetting:
            t.join(1.0)
        wake_r.close()
        wake_w.close()
    return admission.summary("terascale run", "to the coordinator's port")
