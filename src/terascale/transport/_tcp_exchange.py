"""One collective's sends and receives over the TCP mesh, progressed together (epoll).

When a collective has to wait for its peers it first polls its links without sleeping for
up to ``SPIN_S`` (the shared-memory waits' budget, :mod:`._spin`) -- a small message's
answer typically arrives within tens of microseconds, and a sleep in ``epoll_wait`` adds a
wake-up to every round trip (Open MPI's TCP BTL busy-polls the same way) -- unless the
host has more runnable tasks than cores right now (:func:`._spin.oversubscribed`), where
spinning takes the core the peer needs. The spin is bounded, so a dead or stalled peer is
still found by the blocking poll and the deadline right after it.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .._errors import CollectiveError, CollectiveMismatch, PeerLost, PeerTimeout
from ._frames import (
    ABORT,
    DATA,
    HEADER,
    MAX_ABORT,
    collective_tag,
    pack_desc,
    pack_header,
    show_desc,
    unpack_header,
)
from ._spin import SPIN_S, oversubscribed
from .base import Exchange

if TYPE_CHECKING:
    from .tcp import TcpMesh

__all__ = ["Route", "TcpExchange"]

_ERROR_TYPES: dict[str, type[CollectiveError]] = {
    "PeerLost": PeerLost, "PeerTimeout": PeerTimeout, "CollectiveMismatch": CollectiveMismatch,
}
_READ = select.EPOLLIN
_WRITE = select.EPOLLOUT


class _Send:
    __slots__ = ("views",)

    def __init__(self, header: bytes, payload: memoryview) -> None:
        self.views = [memoryview(header), payload] if len(payload) else [memoryview(header)]


class _Recv:
    __slots__ = ("into", "then", "header", "hgot", "pgot", "checked")

    def __init__(self, into: memoryview, then: Callable[[], None] | None) -> None:
        self.into = into
        self.then = then
        self.header = bytearray(HEADER)
        self.hgot = 0
        self.pgot = 0
        self.checked = False


class Route:
    """How one communicator's ranks map onto the mesh; computed once per communicator."""

    __slots__ = ("local", "members", "outsiders", "rank", "renumbered", "size", "socks")

    def __init__(self, mesh: TcpMesh, members: Sequence[int]) -> None:
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

    def __init__(self, mesh: TcpMesh, seq: int, desc: str, what: str, deadline: float,
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
        self._sendq: dict[int, deque[_Send]] = {}
        self._recvq: dict[int, deque[_Recv]] = {}
        self.started = time.monotonic()
        self.spin = SPIN_S > 0  # poll without sleeping before epoll_wait (module docstring)
        # Peers with nothing to receive here are still watched for ABORT frames, until they
        # turn out to hold data of a later collective (or closed after finishing theirs).
        self._quiet: set[int] = set()

    # -- posting ---------------------------------------------------------------------------
    def send(self, peer: int, payload: memoryview | bytes) -> None:
        mv = memoryview(payload).cast("B")
        header = pack_header(DATA, self.seq, len(mv), self._desc_field, self.context)
        self._sendq.setdefault(peer, deque()).append(_Send(header, mv))

    def recv(self, peer: int, into: memoryview, then: Callable[[], None] | None = None) -> None:
        self._recvq.setdefault(peer, deque()).append(_Recv(memoryview(into).cast("B"), then))

    def resume(self, peer: int, unsent: list[memoryview], into: memoryview, header: bytes,
               got: int) -> None:
        """Take over one frame each way that a :class:`~._tcp_swap.TcpSwap` started: the
        views of our frame not yet sent (none: all went), and the ``got`` bytes of theirs
        received so far (``header``: its first ``HEADER`` bytes, as far as they came; the
        rest of ``got`` is already in ``into``). Its wait was spent spinning: no spin here."""
        if unsent:
            item = _Send(b"", memoryview(b""))
            item.views = unsent
            self._sendq.setdefault(peer, deque()).append(item)
        r = _Recv(memoryview(into).cast("B"), None)
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
                raise self._timeout()
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
        end = clock() + SPIN_S
        while True:
            events = poll(0)
            if events or clock() >= end:
                return events

    def _pump_send(self, peer: int) -> bool:
        q = self._sendq[peer]
        sock = self._socks[peer]
        g = self.members[peer]
        progressed = False
        while q:
            item = q[0]
            try:
                n = sock.sendmsg(item.views)
            except BlockingIOError:
                return progressed
            except OSError as e:
                raise self.lost(peer, f"send failed: {e.strerror or e}") from None
            progressed = True
            self.mesh.bytes_sent += n
            views = item.views
            while n and views:
                if n >= len(views[0]):
                    n -= len(views[0])
                    views.pop(0)
                else:
                    views[0] = views[0][n:]
                    n = 0
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
                    if item.hgot < HEADER:
                        bufs = [memoryview(item.header)[item.hgot:]]
                        if size:
                            bufs.append(item.into[item.pgot:])
                        n = sock.recvmsg_into(bufs)[0]
                    else:
                        n = sock.recv_into(item.into[item.pgot:])
                except BlockingIOError:
                    return progressed
                except OSError as e:
                    raise self.lost(peer, f"receive failed: {e.strerror or e}") from None
                if n == 0:
                    raise self.lost(peer, "connection closed")
                progressed = True
                self.mesh.bytes_received += n
                h = min(n, HEADER - item.hgot)
                item.hgot += h
                item.pgot += n - h
            if item.hgot == HEADER and not item.checked:
                self._check_header(peer, item)
            if item.checked and item.pgot >= size:
                q.popleft()
                if item.then is not None:
                    item.then()
                progressed = True
        if not q:
            self._recvq.pop(peer, None)
        return progressed

    def _peek(self, peer: int) -> tuple[int, int, int, bytes, int] | None:
        """The header waiting on ``peer``'s link, or None; an ABORT frame is consumed."""
        sock = self._socks[peer]
        try:
            head = sock.recv(HEADER, socket.MSG_PEEK | socket.MSG_DONTWAIT)
        except OSError:
            return None
        parsed = unpack_header(head) if len(head) == HEADER else None
        if parsed is not None and parsed[0] == ABORT:
            sock.recv(HEADER)  # the payload (the reason) is read by _aborted
        return parsed

    def _peek_idle(self, peer: int) -> None:
        """A peer we expect nothing from sent something: an ABORT, or a later collective."""
        parsed = self._peek(peer)
        if parsed is not None and parsed[0] == ABORT:
            raise self._aborted(peer, b"", parsed[2])
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
            raise self.lost(peer, "connection closed: its process exited")
        if len(head) < HEADER:
            return False
        parsed = unpack_header(head)
        if parsed is None:
            raise self.mismatch(peer, "sent bytes that are not a terascale frame")
        kind, seq, nbytes, desc, context = parsed
        if kind == ABORT:
            sock.recv(HEADER)
            raise self._aborted(peer, b"", nbytes)
        if context != self.context:
            raise self.mismatch(peer, f"called #{seq} {show_desc(desc)} on another "
                                      "communicator (over TCP)")
        if seq != self.seq or desc != self._desc_field:
            raise self.mismatch(peer, f"called #{seq} {show_desc(desc)} (over TCP)")
        return True

    # -- errors ----------------------------------------------------------------------------
    def _who(self, peer: int) -> str:
        g = self.members[peer]
        return f"rank {g}" + (f" (rank {peer} of this communicator)" if self.route.renumbered
                              else "")

    def _check_header(self, peer: int, item: _Recv) -> None:
        parsed = unpack_header(item.header)
        if parsed is None:
            raise self.mismatch(peer, "sent bytes that are not a terascale frame "
                                      "(the previous collective's sizes disagreed)")
        kind, seq, nbytes, desc, context = parsed
        if kind == ABORT:
            raise self._aborted(peer, bytes(item.into[: min(item.pgot, nbytes)]), nbytes)
        if kind != DATA:
            raise self.mismatch(peer, f"sent an unknown frame kind {kind}")
        if context != self.context:
            raise self.mismatch(peer, f"called #{seq} {show_desc(desc)} on another communicator")
        if seq != self.seq or desc != self._desc_field:
            raise self.mismatch(peer, f"called #{seq} {show_desc(desc)}")
        if nbytes != len(item.into):
            raise self.mismatch(peer, f"sent {nbytes} bytes where {len(item.into)} were "
                                      f"expected for {show_desc(desc)}")
        item.checked = True

    def _aborted(self, peer: int, got: bytes, nbytes: int) -> CollectiveError:
        nbytes = min(nbytes, MAX_ABORT)
        got = got[:nbytes]
        sock = self._socks[peer]
        end = time.monotonic() + 1.0
        while len(got) < nbytes and time.monotonic() < end:
            try:
                chunk = sock.recv(nbytes - len(got))
            except BlockingIOError:
                select.select([sock], [], [], 0.05)
                continue
            except OSError:
                break
            if not chunk:
                break
            got += chunk
        try:
            info = json.loads(got)
            cls = _ERROR_TYPES.get(info.get("type"), PeerLost)
            origin, root = int(info.get("origin", self.members[peer])), str(info.get("message"))
        except (ValueError, TypeError):
            cls, origin, root = PeerLost, self.members[peer], "no reason given"
        err = cls(f"rank {self.origin}: {self.what} aborted because rank {origin} failed: "
                  f"{root}", rank=self.origin, peer=origin, operation=self.what)
        err.origin, err.root_message = origin, root  # type: ignore[attr-defined]
        return err

    def lost(self, peer: int, why: str) -> CollectiveError:
        # A peer that aborted and exited at once leaves its ABORT frame in our receive queue:
        # report its reason rather than the bare closed connection.
        parsed = self._peek(peer)
        if parsed is not None and parsed[0] == ABORT:
            return self._aborted(peer, b"", parsed[2])
        err = PeerLost(f"rank {self.origin}: {self.what} lost peer {self._who(peer)} ({why})",
                       rank=self.origin, peer=self.members[peer], operation=self.what)
        # The rank that failed is the lost one: the ABORT we send names it, not us.
        err.origin = self.members[peer]  # type: ignore[attr-defined]
        return err

    def mismatch(self, peer: int, theirs: str) -> CollectiveMismatch:
        return CollectiveMismatch(
            f"rank {self.origin}: {self.what} mismatch: this rank called #{self.seq} "
            f"{self.desc}, but {self._who(peer)} {theirs}",
            rank=self.origin, peer=self.members[peer], operation=self.what)

    def _timeout(self) -> PeerTimeout:
        waits = [f"{self._who(p)} (receive)" for p in self._recvq] + \
                [f"{self._who(p)} (send)" for p in self._sendq if p not in self._recvq]
        first = next(iter(self._recvq), next(iter(self._sendq), None))
        return PeerTimeout(f"rank {self.origin}: {self.what} timed out after "
                           f"{time.monotonic() - self.started:.1f} s waiting for "
                           f"{', '.join(waits)}", rank=self.origin,
                           peer=None if first is None else self.members[first],
                           operation=self.what)
