"""TCP transport: one authenticated connection per pair of ranks (:class:`TcpTransport`).

Each collective gets a :class:`~terascale.transport._tcp_exchange.TcpExchange`, which
moves all of its sends and receives at once with non-blocking sockets: a ring step sends
to the right while it receives from the left, and a tree node streams chunks to its parent
while its children's chunks arrive. Payloads go straight from and into numpy buffers
(``sendmsg``/``recvmsg_into`` on memoryviews): no copies, no pickling.

Failures surface here and nowhere else: a closed or reset connection is ``PeerLost``, a
deadline is ``PeerTimeout``, a header that names another collective is
``CollectiveMismatch``. Before raising, the rank tells every peer (``ABORT`` frames,
:meth:`TcpTransport.fail`), so that ranks blocked on someone else fail too instead of waiting
out their deadline. One transport serves a communicator and every sub-communicator split from
it: frames carry the communicator's context id, and the transport's failure state is shared,
so a failure reaches every communicator this rank belongs to.
"""

from __future__ import annotations

import json
import select
import socket
import time
import warnings
from collections.abc import Sequence
from typing import Any

from .._errors import CollectiveError
from ._frames import ABORT, MAX_ABORT, pack_desc, pack_header
from ._secure import SecureLink
from ._tcp_exchange import Route, TcpExchange
from ._tcp_swap import TcpSwap
from .base import Transport

__all__ = ["TcpTransport"]


def __getattr__(name: str) -> Any:
    if name == "TcpMesh":  # the name before transports were named transports
        warnings.warn("terascale.transport.tcp.TcpMesh is deprecated: use TcpTransport",
                      DeprecationWarning, stacklevel=2)
        return TcpTransport
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

_ABORT_GRACE_S = 0.5  # time to deliver ABORT frames before connections are shut instead


class TcpTransport(Transport):
    """Connections from this rank to every other rank (``socks[peer]``), non-blocking.

    Built by :func:`~terascale.transport.connect.connect_tcp`.

    Parameters
    ----------
    rank
        This rank.
    socks
        The connected, authenticated link to each other rank, by rank.
    """

    def __init__(self, rank: int, socks: dict[int, socket.socket]) -> None:
        self.rank = rank
        self.size = len(socks) + 1
        self.socks = socks
        self.peer_of_fd = {s.fileno(): p for p, s in socks.items()}
        self.epoll = select.epoll()
        self._mask: dict[int, int] = {}
        # Peers whose outgoing stream stopped inside a frame -> bytes left of that frame.
        self.midframe: dict[int, int] = {}
        self.broken: CollectiveError | None = None
        self.bytes_sent = 0
        self.bytes_received = 0
        self._routes: dict[tuple[int, ...] | None, Route] = {}
        for s in socks.values():
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def exchange(self, seq: int, desc: str, what: str, deadline: float, *, context: int = 0,
                 members: Sequence[int] | None = None) -> TcpExchange:
        if self.broken is not None:
            raise type(self.broken)(f"rank {self.rank}: {what} not started: the communicator "
                                    f"failed earlier ({self.broken})", rank=self.rank)
        return TcpExchange(self, seq, desc, what, deadline, context, self._route(members))

    def swap(self, peer: int, desc: str, nbytes: int, *, context: int = 0,
             members: Sequence[int] | None = None) -> TcpSwap | None:
        """The :class:`~._tcp_swap.TcpSwap` with ``peer`` (over any link: a
        :class:`~._secure.SecureLink` offers the same non-blocking calls)."""
        route = self._route(members)
        sock = route.socks[peer]
        return TcpSwap(self, sock, peer, route.members[peer], desc, context, nbytes)

    def _route(self, members: Sequence[int] | None) -> Route:
        key = None if members is None else tuple(members)
        route = self._routes.get(key)
        if route is None:  # once per communicator
            route = self._routes[key] = Route(self, range(self.size) if key is None else key)
        return route

    def watch(self, peer: int, mask: int) -> None:
        """Set the epoll events of ``peer``'s socket (0: not watched).

        Parameters
        ----------
        peer
            The peer's rank.
        mask
            The epoll event mask (``select.EPOLLIN``...).
        """
        old = self._mask.get(peer, 0)
        if old == mask:
            return
        fd = self.socks[peer].fileno()
        if mask == 0:
            self.epoll.unregister(fd)
            del self._mask[peer]
        elif old == 0:
            self.epoll.register(fd, mask)
            self._mask[peer] = mask
        else:
            self.epoll.modify(fd, mask)
            self._mask[peer] = mask

    def fail(self, err: CollectiveError) -> None:
        """Mark the transport broken and tell every peer why (best effort, bounded in time).

        Over an authenticated link the ABORT travels as an abort record, which makes the
        peer abandon a frame from us that stopped half-way. Over an unauthenticated
        (benchmark-only) link, such a peer first gets the rest of that frame as zeros so that
        it can read the ABORT after it. A peer that does not take the ABORT within the grace
        period gets its connection shut.
        """
        if self.broken is not None or self.epoll.closed:  # closed: no link left to tell
            return
        self.broken = err
        for peer in list(self._mask):
            self.watch(peer, 0)
        # Forward the root cause, not our wrapping of it: every rank names the rank that failed.
        payload = json.dumps({"type": type(err).__name__,
                              "message": getattr(err, "root_message", str(err)),
                              "origin": getattr(err, "origin", self.rank)}).encode()[:MAX_ABORT]
        frame = pack_header(ABORT, 0, len(payload), pack_desc("abort")) + payload
        todo: dict[int, memoryview | None] = {}
        for p, s in self.socks.items():
            if isinstance(s, SecureLink):  # an abort record: the peer drops the frame in flight
                s.queue_abort(frame)
                todo[p] = None
            else:
                todo[p] = memoryview(bytes(self.midframe.get(p, 0)) + frame)
        end = time.monotonic() + _ABORT_GRACE_S
        while todo and time.monotonic() < end:
            for peer, data in list(todo.items()):
                try:
                    if data is None:
                        if self.socks[peer].flush():  # type: ignore[attr-defined]
                            del todo[peer]
                        continue
                    n = self.socks[peer].send(data)
                except BlockingIOError:
                    continue
                except OSError:
                    del todo[peer]
                    continue
                if n == len(data):
                    del todo[peer]
                else:
                    todo[peer] = data[n:]
            if todo:
                select.select([], [self.socks[p] for p in todo], [], 0.02)
        for peer in todo:  # could not deliver: closing is the clearest signal left
            try:
                self.socks[peer].shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self) -> None:
        for s in self.socks.values():
            try:
                s.close()
            except OSError:
                pass
        self.epoll.close()
