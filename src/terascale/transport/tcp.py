"""TCP transport: one authenticated connection per pair of ranks, and the exchange engine.

An :class:`Exchange` is one collective's worth of sends and receives. The algorithm posts
them (``send``/``recv``), possibly from completion callbacks, and :meth:`Exchange.run`
moves all of them at once with non-blocking sockets: a ring step sends to the right while
it receives from the left, and a tree node streams chunks to its parent while its
children's chunks arrive. Payloads go straight from and into numpy buffers
(``sendmsg``/``recvmsg_into`` on memoryviews): no copies, no pickling.

Failures surface here and nowhere else: a closed or reset connection is ``PeerLost``, a
deadline is ``PeerTimeout``, a header that names another collective is
``CollectiveMismatch``. Before raising, the rank tells every peer (``ABORT`` frames), so
that ranks blocked on someone else fail too instead of waiting out their deadline.
"""

from __future__ import annotations

import json
import select
import socket
import time
from collections import deque
from collections.abc import Callable

from .._errors import CollectiveError, CollectiveMismatch, PeerLost, PeerTimeout
from ._frames import (
    ABORT,
    DATA,
    HEADER,
    MAX_ABORT,
    pack_desc,
    pack_header,
    show_desc,
    unpack_header,
)

__all__ = ["Exchange", "TcpMesh"]

_ERROR_TYPES: dict[str, type[CollectiveError]] = {
    "PeerLost": PeerLost, "PeerTimeout": PeerTimeout, "CollectiveMismatch": CollectiveMismatch,
}
_READ = select.EPOLLIN
_WRITE = select.EPOLLOUT
_ABORT_GRACE_S = 0.5  # time to deliver ABORT frames before connections are shut instead


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


class TcpMesh:
    """Connections from this rank to every other rank (``socks[peer]``), non-blocking."""

    def __init__(self, rank: int, socks: dict[int, socket.socket]) -> None:
        self.rank = rank
        self.socks = socks
        self._peer_of_fd = {s.fileno(): p for p, s in socks.items()}
        self._epoll = select.epoll()
        self._mask: dict[int, int] = {}
        # Peers whose outgoing stream stopped inside a frame -> bytes left of that frame.
        self._midframe: dict[int, int] = {}
        self.broken: CollectiveError | None = None
        self.bytes_sent = 0
        self.bytes_received = 0
        for s in socks.values():
            s.setblocking(False)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def exchange(self, seq: int, desc: str, what: str, deadline: float) -> Exchange:
        if self.broken is not None:
            raise type(self.broken)(f"rank {self.rank}: {what} not started: the communicator "
                                    f"failed earlier ({self.broken})", rank=self.rank)
        return Exchange(self, seq, desc, what, deadline)

    def _watch(self, peer: int, mask: int) -> None:
        old = self._mask.get(peer, 0)
        if old == mask:
            return
        fd = self.socks[peer].fileno()
        if mask == 0:
            self._epoll.unregister(fd)
            del self._mask[peer]
        elif old == 0:
            self._epoll.register(fd, mask)
            self._mask[peer] = mask
        else:
            self._epoll.modify(fd, mask)
            self._mask[peer] = mask

    def fail(self, err: CollectiveError) -> None:
        """Mark the mesh broken and tell every peer why (best effort, bounded in time).

        A peer whose incoming frame from us stopped half-way first gets the rest of that
        frame (zeros: the collective fails anyway) so that it can read the ABORT after it;
        a peer that does not take it within the grace period gets its connection shut.
        """
        if self.broken is not None:
            return
        self.broken = err
        for peer in list(self._mask):
            self._watch(peer, 0)
        # Forward the root cause, not our wrapping of it: every rank names the rank that failed.
        payload = json.dumps({"type": type(err).__name__,
                              "message": getattr(err, "root_message", str(err)),
                              "origin": getattr(err, "origin", self.rank)}).encode()[:MAX_ABORT]
        frame = pack_header(ABORT, 0, len(payload), pack_desc("abort")) + payload
        todo = {p: memoryview(bytes(self._midframe.get(p, 0)) + frame) for p in self.socks}
        end = time.monotonic() + _ABORT_GRACE_S
        while todo and time.monotonic() < end:
            for peer, data in list(todo.items()):
                try:
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
        self._epoll.close()


class Exchange:
    """The sends and receives of one collective, progressed together until all complete."""

    def __init__(self, mesh: TcpMesh, seq: int, desc: str, what: str, deadline: float) -> None:
        self.mesh = mesh
        self.seq = seq
        self.desc = desc
        self.what = what
        self.deadline = deadline
        self._desc_field = pack_desc(desc)
        self._sendq: dict[int, deque[_Send]] = {}
        self._recvq: dict[int, deque[_Recv]] = {}
        self._started = time.monotonic()
        # Peers with nothing to receive here are still watched for ABORT frames, until they
        # turn out to hold data of a later collective (or closed after finishing theirs).
        self._quiet: set[int] = set()

    # -- posting ---------------------------------------------------------------------------
    def send(self, peer: int, payload: memoryview | bytes) -> None:
        """Queue ``payload`` for ``peer``; messages to one peer leave in posting order."""
        mv = memoryview(payload).cast("B")
        header = pack_header(DATA, self.seq, len(mv), self._desc_field)
        self._sendq.setdefault(peer, deque()).append(_Send(header, mv))

    def recv(self, peer: int, into: memoryview, then: Callable[[], None] | None = None) -> None:
        """Receive the next message from ``peer`` into ``into`` (exact size), then call ``then``."""
        self._recvq.setdefault(peer, deque()).append(_Recv(memoryview(into).cast("B"), then))

    # -- progress --------------------------------------------------------------------------
    def run(self) -> None:
        try:
            self._run()
        except CollectiveError as err:
            self.mesh.fail(err)
            raise

    def _run(self) -> None:
        mesh = self.mesh
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
            for peer in mesh.socks:
                watch = peer in self._recvq or peer not in self._quiet
                mask = (_READ if watch else 0) | (_WRITE if peer in self._sendq else 0)
                mesh._watch(peer, mask)
            for fd, _events in mesh._epoll.poll(min(left, 1.0)):
                peer = mesh._peer_of_fd[fd]
                if peer not in self._recvq and peer not in self._quiet:
                    self._peek_idle(peer)

    def _pump_send(self, peer: int) -> bool:
        q = self._sendq[peer]
        sock = self.mesh.socks[peer]
        progressed = False
        while q:
            item = q[0]
            try:
                n = sock.sendmsg(item.views)
            except BlockingIOError:
                return progressed
            except OSError as e:
                raise self._lost(peer, f"send failed: {e.strerror or e}") from None
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
                self.mesh._midframe[peer] = sum(len(v) for v in views)
                return progressed
            self.mesh._midframe.pop(peer, None)
            q.popleft()
        del self._sendq[peer]
        return progressed

    def _pump_recv(self, peer: int) -> bool:
        q = self._recvq[peer]
        sock = self.mesh.socks[peer]
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
                    raise self._lost(peer, f"receive failed: {e.strerror or e}") from None
                if n == 0:
                    raise self._lost(peer, "connection closed")
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

    def _peek(self, peer: int) -> tuple[int, int, int, bytes] | None:
        """The header waiting on ``peer``'s link, or None; an ABORT frame is consumed."""
        sock = self.mesh.socks[peer]
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
            raise self._aborted(peer, _Recv(memoryview(bytearray(0)), None), parsed[2])
        if parsed is not None and parsed[1] == self.seq and parsed[3] != self._desc_field:
            # Same collective number, another collective: e.g. ranks chose other algorithms
            # and this rank would otherwise wait for peers that talk to someone else.
            raise self._mismatch(peer, f"called #{parsed[1]} {show_desc(parsed[3])}")
        self._quiet.add(peer)

    # -- errors ----------------------------------------------------------------------------
    def _check_header(self, peer: int, item: _Recv) -> None:
        parsed = unpack_header(item.header)
        if parsed is None:
            raise self._mismatch(peer, "sent bytes that are not a terascale frame "
                                       "(the previous collective's sizes disagreed)")
        kind, seq, nbytes, desc = parsed
        if kind == ABORT:
            raise self._aborted(peer, item, nbytes)
        if kind != DATA:
            raise self._mismatch(peer, f"sent an unknown frame kind {kind}")
        if seq != self.seq or desc != self._desc_field:
            raise self._mismatch(peer, f"called #{seq} {show_desc(desc)}")
        if nbytes != len(item.into):
            raise self._mismatch(peer, f"sent {nbytes} bytes where {len(item.into)} were "
                                       f"expected for {show_desc(desc)}")
        item.checked = True

    def _aborted(self, peer: int, item: _Recv, nbytes: int) -> CollectiveError:
        nbytes = min(nbytes, MAX_ABORT)
        got = bytes(item.into[: min(item.pgot, nbytes)])
        sock = self.mesh.socks[peer]
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
            origin, root = int(info.get("origin", peer)), str(info.get("message"))
        except (ValueError, TypeError):
            cls, origin, root = PeerLost, peer, "no reason given"
        err = cls(f"rank {self.mesh.rank}: {self.what} aborted because rank {origin} failed: "
                  f"{root}", rank=self.mesh.rank, peer=origin, operation=self.what)
        err.origin, err.root_message = origin, root  # type: ignore[attr-defined]
        return err

    def _lost(self, peer: int, why: str) -> CollectiveError:
        # A peer that aborted and exited at once leaves its ABORT frame in our receive queue:
        # report its reason rather than the bare closed connection.
        parsed = self._peek(peer)
        if parsed is not None and parsed[0] == ABORT:
            return self._aborted(peer, _Recv(memoryview(bytearray(0)), None), parsed[2])
        return PeerLost(f"rank {self.mesh.rank}: {self.what} lost peer rank {peer} ({why})",
                        rank=self.mesh.rank, peer=peer, operation=self.what)

    def _mismatch(self, peer: int, theirs: str) -> CollectiveMismatch:
        return CollectiveMismatch(
            f"rank {self.mesh.rank}: {self.what} mismatch: this rank called #{self.seq} "
            f"{self.desc}, but rank {peer} {theirs}",
            rank=self.mesh.rank, peer=peer, operation=self.what)

    def _timeout(self) -> PeerTimeout:
        waits = [f"rank {p} (receive)" for p in self._recvq] + \
                [f"rank {p} (send)" for p in self._sendq if p not in self._recvq]
        first = next(iter(self._recvq), next(iter(self._sendq), None))
        return PeerTimeout(f"rank {self.mesh.rank}: {self.what} timed out after "
                           f"{time.monotonic() - self._started:.1f} s waiting for {', '.join(waits)}", rank=self.mesh.rank, peer=first,
                           operation=self.what)
