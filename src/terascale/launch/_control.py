"""The control link between a node's launcher and node 0's coordinator.

One TCP connection per node, authenticated with the job secret's HMAC handshake
(:mod:`terascale._auth`), carrying JSON messages: ``start``/``stop``/``done`` from the
coordinator, ``result`` from the node. Each side pings every ``PING_S`` seconds, so a link
that stays silent longer than :func:`silence` means the other side is lost (killed, or cut
off by a partition) even when no FIN or RST ever arrives -- the heartbeat torchrun's
elastic agent and Horovod's driver keep for the same reason.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from typing import Any

from .._auth import dial_handshake, recv_json, send_json
from .._errors import RendezvousError

__all__ = ["PING_S", "ControlLink", "connect", "silence"]

PING_S = 1.0


def silence(timeout: float) -> float:
    """How long a silent control link means a lost node: before the collective deadline,
    so a partition is blamed on the cut-off node, not on the rank that timed out waiting."""
    return min(timeout, max(3.0, timeout / 2))


class ControlLink:
    """One control connection: JSON messages out (locked), a reader thread into ``inbox``.

    ``inbox`` gets ``(tag, message)``; ``message`` None means the link is lost (closed, or
    silent for ``silence`` seconds although the other side pings every second).
    """

    def __init__(self, sock: socket.socket, tag: Any, inbox: queue.Queue, silence: float) -> None:
        self.sock, self.tag, self._inbox, self._silence = sock, tag, inbox, silence
        self._lock = threading.Lock()
        self.closed = False
        self._reader = sock.dup()  # its own timeout: recv and send do not share one
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._ping, daemon=True).start()

    def _read(self) -> None:
        try:
            while not self.closed:
                msg = recv_json(self._reader, time.monotonic() + self._silence)
                if msg.get("kind") != "ping":
                    self._inbox.put((self.tag, msg))
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
                send_json(self.sock, msg, time.monotonic() + 5.0)
            return True
        except (OSError, TimeoutError):
            return False

    def close(self) -> None:
        self.closed = True
        for s in (self.sock, self._reader):
            try:
                s.close()
            except OSError:
                pass


def connect(address: tuple[str, int], secret: bytes, deadline: float) -> socket.socket:
    """A control link to node 0's coordinator at ``address``, authenticated with ``secret``;
    retried until ``deadline``, since node 0 may start after this node."""
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection(address, timeout=2.0)
            dial_handshake(sock, secret, time.monotonic() + 5.0)
            return sock
        except (OSError, TimeoutError) as e:
            last = e
            time.sleep(0.2)
    raise RendezvousError(f"cannot reach node 0's launcher at {address[0]}:{address[1]} "
                          f"({last}); is it running with the same --rendezvous and secret?")
