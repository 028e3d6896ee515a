"""One collective's sends and receives over the TCP mesh, progressed together (epoll).

When a collective has to wait for its peers it first polls its links without sleeping for
up to ``SPIN_S`` (the shared-memory waits' budget, :mod:`._spin`) -- a small message's
answer typically arrives within tens of microseconds, and a sleep in ``epoll_wait`` adds a
wake-up to every round trip (Open MPI's TCP BTL busy-polls the same way) -- unless the
host has more runnable tasks than cores right now (:func:`._spin.oversubscribed`), where
spinning takes the core the peer needs. The spin is bounded, so a dead or stalled peer is
still found by the blocking poll and the deadline right after it.

This module is the scheduling loop only: moving one frame's bytes over one link is
:mod:`._tcp_stream`'s, and the wording of every failure (and reading an ABORT's reason)
is :mod:`._tcp_blame`'s.
"""

from __future__ import annotations

import os
import select
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .._errors import CollectiveError, CollectiveMismatch
from ._frames import (
    ABORT,
    DATA,
    HEADER,
    collective_tag,
    pack_desc,
    pack_header,
    show_desc,
    unpack_header,
)
from ._spin import SPIN_S, YIELD_AFTER_S, oversubscribed
from ._tcp_blame import ExchangeBlame
from ._tcp_stream import PendingRecv, PendingSend, peek_header, recv_some, send_some
from .base import Exchange

if TYPE_CHECKING:
    from .tcp import TcpTransport

__all__ = ["Route", "TcpExchange"]

_READ = select.EPOLLIN
_WRITE = select.EPOLLOUT


class Route:
    """How one communicator's ranks map onto the mesh; computed once per communicator."""

    __slots__ = ("local", "members", "outsiders", "rank", "renumbered", "size", "socks")

    def __init__(self, mesh: TcpTransport, members: Sequence[int]) -> None:
        self.members = list(members)
        self.rank = self.members.index(mesh.rank)
        self.size = len(self.members)
        self.renumbered = self.members != list(range(mesh.size))
        self.socks = {p: mesh.socks[g] for p, g in enumerate(self.members) if g != mesh.rank}
        self.local = {g: p for p, g in enumerate(self.members)}
        self.outsiders = [g for g in mesh.socks if g not in self.local]


class TcpExchange(Exchange):
    """The sends and receives of one collective, progressed together until all complete.

    Peers are numbered in the communicator (``members[peer]`` is the mesh rank); only the
    members' links are watched, so a sub-communicator's collective is not disturbed by
    traffic of ranks outside it.
    """

    def __init__(self, mesh: TcpTransport, seq: int, desc: str, what: str, deadline: float,
                 context: int, route: Route) -> None:
        self.mesh = mesh
        self.seq = seq
        self.desc = desc
        self.what = what
        self.deadline = deadline
        self.context = context
        self.route = route
        self.members = route.members
        self.origin = mesh.rank
        self.rank = route.rank
        self.size = route.size
        self._desc_field = pack_desc(desc)
        self._socks = route.socks
        self._local = route.local
        self._sendq: dict[int, deque[PendingSend]] = {}
        self._recvq: dict[int, deque[PendingRecv]] = {}
        self.started = time.monotonic()
        self.spin = SPIN_S > 0  # poll without sleeping before epoll_wait (module docstring)
        # Peers with nothing to receive here are still watched for ABORT frames, until they
        # turn out to hold data of a later collective (or closed after finishing theirs).
        self._quiet: set[int] = set()
        self.blame = ExchangeBlame(self.origin, what, seq, desc, self._desc_field, context, route)

    # -- posting ---------------------------------------------------------------------------
    def send(self, peer: int, payload: memoryview | bytes) -> None:
        mv = memoryview(payload).cast("B")
        header = pack_header(DATA, self.seq, len(mv), self._desc_field, self.context)
        self._sendq.setdefault(peer, deque()).append(PendingSend(header, mv))

    def recv(self, peer: int, into: memoryview, then: Callable[[], None] | None = None) -> None:
        self._recvq.setdefault(peer, deque()).append(PendingRecv(memoryview(into).cast("B"), then))

    def resume(self, peer: int, unsent: list[memoryview], into: memoryview, header: bytes,
               got: int) -> None:
        """Take over one frame each way that a :class:`~._tcp_swap.TcpSwap` started: the
        views of our frame not yet sent (none: all went), and the ``got`` bytes of theirs
        received so far (``header``: its first ``HEADER`` bytes, as far as they came; the
        rest of ``got`` is already in ``into``). Its wait was spent spinning: no spin here."""
        if unsent:
            item = PendingSend(b"", memoryview(b""))
            item.views = unsent
            self._sendq.setdefault(peer, deque()).append(item)
        r = PendingRecv(memoryview(into).cast("B"), None)
        r.hgot = min(got, HEADER)
        r.header[: r.hgot] = header[: r.hgot]
        r.pgot = got - r.hgot
        self._recvq.setdefault(peer, deque()).append(r)
        self.spin = False

    # -- progress --------------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._run()
        except CollectiveError as err:
            self.mesh.fail(err)
            raise

    def _run(self) -> None:
        mesh = self.mesh
        for g in self.route.outsiders:
            mesh.watch(g, 0)
        while self._sendq or self._recvq:
            progressed = False
            for peer in list(self._sendq):
                progressed |= self._pump_send(peer)
            for peer in list(self._recvq):
                progressed |= self._pump_recv(peer)
            if progressed:
                continue
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise self.blame.timeout(self._recvq, self._sendq, self.started)
            for peer in self._socks:
                watch = peer in self._recvq or peer not in self._quiet
                mask = (_READ if watch else 0) | (_WRITE if peer in self._sendq else 0)
                mesh.watch(self.members[peer], mask)
            events = self._spin() if self.spin and not oversubscribed() else []
            for fd, _events in events or mesh.epoll.poll(min(left, 1.0)):
                who = self._local.get(mesh.peer_of_fd[fd])
                if who is not None and who not in self._recvq and who not in self._quiet:
                    self._peek_idle(who)

    def _spin(self) -> list[tuple[int, int]]:
        """Poll the watched links without sleeping for up to SPIN_S: their events, or []."""
        poll, clock = self.mesh.epoll.poll, time.monotonic
        start = clock()
        end, yield_from = start + SPIN_S, start + YIELD_AFTER_S
        while True:
            events = poll(0)
            if events:
                return events
            now = clock()
            if now >= end:
                return events
            if now >= yield_from:
                os.sched_yield()  # the peer may be queued on our core (_spin)

    def _pump_send(self, peer: int) -> bool:
        q = self._sendq[peer]
        sock = self._socks[peer]
        g = self.members[peer]
        progressed = False
        while q:
            item = q[0]
            try:
                n = send_some(sock, item)
            except BlockingIOError:
                return progressed
            except OSError as e:
                raise self.lost(peer, f"send failed: {e.strerror or e}") from None
            progressed = True
            self.mesh.bytes_sent += n
            views = item.views
            if views:
                self.mesh.midframe[g] = sum(len(v) for v in views)
                return progressed
            self.mesh.midframe.pop(g, None)
            q.popleft()
        del self._sendq[peer]
        return progressed

    def _pump_recv(self, peer: int) -> bool:
        q = self._recvq[peer]
        sock = self._socks[peer]
        progressed = False
        while q:
            item = q[0]
            size = len(item.into)
            if item.hgot < HEADER or item.pgot < size:
                try:
                    n = recv_some(sock, item)
                except BlockingIOError:
                    return progressed
                except OSError as e:
                    raise self.lost(peer, f"receive failed: {e.strerror or e}") from None
                if n == 0:
                    raise self.lost(peer, "connection closed")
                progressed = True
                self.mesh.bytes_received += n
            if item.hgot == HEADER and not item.checked:
                self.blame.check_header(peer, item)
            if item.checked and item.pgot >= size:
                q.popleft()
                if item.then is not None:
                    item.then()
                progressed = True
        if not q:
            self._recvq.pop(peer, None)
        return progressed

    def _peek(self, peer: int) -> tuple[int, int, int, bytes, int] | None:
        return peek_header(self._socks[peer])

    def _peek_idle(self, peer: int) -> None:
        """A peer we expect nothing from sent something: an ABORT, or a later collective."""
        parsed = self._peek(peer)
        if parsed is not None and parsed[0] == ABORT:
            raise self.blame.aborted(peer, b"", parsed[2])
        if parsed is not None and parsed[4] == self.context and parsed[1] == self.seq \
                and parsed[3] != self._desc_field:
            # Same collective number, another collective: e.g. ranks chose other algorithms
            # and this rank would otherwise wait for peers that talk to someone else.
            raise self.mismatch(peer, f"called #{parsed[1]} {show_desc(parsed[3])}")
        self._quiet.add(peer)

    # -- failure state, for data paths outside this exchange (shared memory) -------------------
    @property
    def tag(self) -> bytes:  # type: ignore[override]
        return collective_tag(self.seq, self.context, self._desc_field)

    def peer_name(self, peer: int) -> int:
        return self.members[peer]

    def abort(self, err: CollectiveError) -> None:
        self.mesh.fail(err)

    def waitable(self, peer: int) -> int:
        return self._socks[peer].fileno()

    def check_peer(self, peer: int, arrived: Callable[[], bool]) -> bool:
        sock = self._socks[peer]
        try:
            head = sock.recv(HEADER, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except BlockingIOError:
            return False
        except OSError:
            head = b""
        if arrived():
            return False  # the next collective's traffic, or a clean exit after this one
        if not head:
            raise self.lost(peer, "connection closed: its process exited or it closed its "
                            "communicator")
        if len(head) < HEADER:
            return False
        parsed = unpack_header(head)
        if parsed is None:
            raise self.mismatch(peer, "sent bytes that are not a terascale frame")
        kind, seq, nbytes, desc, context = parsed
        if kind == ABORT:
            sock.recv(HEADER)
            raise self.blame.aborted(peer, b"", nbytes)
        if context != self.context:
            raise self.mismatch(peer, f"called #{seq} {show_desc(desc)} on another "
                                      "communicator (over TCP)")
        if seq != self.seq or desc != self._desc_field:
            raise self.mismatch(peer, f"called #{seq} {show_desc(desc)} (over TCP)")
        return True

    # -- errors (worded by ._tcp_blame) -------------------------------------------------
    def lost(self, peer: int, why: str) -> CollectiveError:
        # A peer that aborted and exited at once leaves its ABORT frame in our receive queue:
        # report its reason rather than the bare closed connection.
        parsed = self._peek(peer)
        if parsed is not None and parsed[0] == ABORT:
            return self.blame.aborted(peer, b"", parsed[2])
        return self.blame.lost(peer, why)

    def mismatch(self, peer: int, theirs: str) -> CollectiveMismatch:
        return self.blame.mismatch(peer, theirs)
