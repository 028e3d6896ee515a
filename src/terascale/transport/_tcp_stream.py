"""Frame I/O on one non-blocking TCP link: partial sends and receives of framed messages.

A collective's frames (:mod:`._frames`: a fixed ``HEADER`` then the payload) move over
non-blocking sockets, so each ``sendmsg``/``recvmsg_into`` may move only part of one. The
pending objects here remember how far a frame got; :class:`~._tcp_exchange.TcpExchange`
decides when to call them, and :mod:`._tcp_blame` says what a bad header means. The
header and payload go out in one ``sendmsg`` and come in with one ``recvmsg_into``
(scatter/gather), so a small message costs one system call each way, not two.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

from ._frames import ABORT, HEADER, unpack_header

__all__ = ["PendingRecv", "PendingSend", "drop_sent", "peek_header", "recv_some", "send_some"]


class PendingSend:
    """One frame to send: the views of it not yet sent."""

    __slots__ = ("views",)

    def __init__(self, header: bytes, payload: memoryview) -> None:
        self.views = [memoryview(header), payload] if len(payload) else [memoryview(header)]


class PendingRecv:
    """One frame to receive into ``into``: its header so far, and how much of each came."""

    __slots__ = ("into", "then", "header", "hgot", "pgot", "checked")

    def __init__(self, into: memoryview, then: Callable[[], None] | None) -> None:
        self.into = into
        self.then = then
        self.header = bytearray(HEADER)
        self.hgot = 0
        self.pgot = 0
        self.checked = False


def send_some(sock: socket.socket, item: PendingSend) -> int:
    """Send what the link takes of ``item`` now; drops the sent part from ``item.views``.

    Returns the bytes sent; raises ``BlockingIOError`` when the link takes nothing and
    ``OSError`` when it failed."""
    sent = sock.sendmsg(item.views)
    drop_sent(item.views, sent)
    return sent


def drop_sent(views: list[memoryview], n: int) -> None:
    """Drop the first ``n`` bytes, the part a ``sendmsg`` took, from the front of
    ``views`` in place (views sent whole are removed, a view sent in part is cut)."""
    while n and views:
        if n >= len(views[0]):
            n -= len(views.pop(0))
        else:
            views[0] = views[0][n:]
            n = 0


def recv_some(sock: socket.socket, item: PendingRecv) -> int:
    """Receive what the link holds of ``item`` now (header first, then payload).

    Returns the bytes received (0: the peer closed the connection); raises
    ``BlockingIOError`` when nothing is waiting and ``OSError`` when the link failed."""
    if item.hgot < HEADER:
        bufs = [memoryview(item.header)[item.hgot:]]
        if len(item.into):
            bufs.append(item.into[item.pgot:])
        n = sock.recvmsg_into(bufs)[0]
    else:
        n = sock.recv_into(item.into[item.pgot:])
    h = min(n, HEADER - item.hgot)
    item.hgot += h
    item.pgot += n - h
    return n


def peek_header(sock: socket.socket) -> tuple[int, int, int, bytes, int] | None:
    """The header waiting on ``sock``, or None; an ABORT frame's header is consumed (its
    payload, the reason, is left for :meth:`~._tcp_blame.ExchangeBlame.aborted`)."""
    try:
        head = sock.recv(HEADER, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except OSError:
        return None
    parsed = unpack_header(head) if len(head) == HEADER else None
    if parsed is not None and parsed[0] == ABORT:
        sock.recv(HEADER)
    return parsed
