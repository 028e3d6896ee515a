"""Ranks as threads of one process: the ``inprocess`` transport (threads and queues).

Every rank's :class:`InProcessTransport` owns a mailbox: per sending rank, a FIFO of
messages that the sender appends to (a send completes at once, as a copy) and that only
the owner reads; one condition variable wakes the owner. A message carries the
collective's number, description and communicator context like a TCP frame, so the same
mismatch checks run; a failing rank posts an ABORT naming the rank where the failure
began, and a rank that closes its transport posts a CLOSED mark after its last message (a
TCP connection's end), which a peer still waiting on it reports as ``PeerLost``. Every
wait is bounded by the collective's deadline (``PeerTimeout``).

It is what PyTorch's tests get from their multi-threaded process group
(``torch/testing/_internal/distributed/multi_threaded_pg.py``): every algorithm, every
sub-communicator and the failure model run N ranks in one process, without forking, so
the collective correctness matrix runs in a fraction of the time
(:func:`terascale.testing.run_threads` starts the threads). Nothing leaves the process:
the endpoint a rank publishes through the rendezvous is a key into this process's table
of mailboxes, and a rank of another process cannot reach it (``ConfigError``). The
links are not authenticated (no byte leaves the process) and ``security`` is ignored.

Select it with ``TERASCALE_TRANSPORT=inprocess`` or ``_init.connect(transport="inprocess")``.
It is also the smallest complete example of a transport: this module plus its line in
:data:`terascale.transport.base.TRANSPORTS`.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from types import SimpleNamespace

from .._errors import (
    CollectiveError,
    CollectiveMismatch,
    ConfigError,
    LinkTampered,
    PeerLost,
    PeerTimeout,
)
from ._frames import MAX_ABORT
from ._tcp_blame import ExchangeBlame
from .base import Connector, Exchange, Transport

__all__ = ["InProcessConnector", "InProcessExchange", "InProcessTransport"]

_DATA, _ABORT, _CLOSED = 0, 1, 2
_ERROR_TYPES: dict[str, type[CollectiveError]] = {
    "PeerLost": PeerLost, "PeerTimeout": PeerTimeout, "CollectiveMismatch": CollectiveMismatch,
    "LinkTampered": LinkTampered,
}
# (kind, seq, context, desc, payload)
Message = tuple[int, int, int, str, bytes]


class _Mailbox:
    """What one rank receives: a FIFO per sending rank, one condition for them all."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.cond = threading.Condition()
        self.queues: dict[int, deque[Message]] = {}

    def put(self, sender: int, message: Message) -> None:
        with self.cond:
            q = self.queues.get(sender)
            if q is None:
                q = self.queues[sender] = deque()
            q.append(message)
            self.cond.notify_all()

    def head(self, sender: int) -> Message | None:
        q = self.queues.get(sender)
        return q[0] if q else None

    def drop(self) -> None:
        """Unlist it (the rendezvous failed: nobody will look for it)."""
        with _TABLE_LOCK:
            if _MAILBOXES.get(self.key) is self:
                del _MAILBOXES[self.key]


# Listed while anyone holds them: a rank that closed early is still found by a peer that
# connects after it, and then reads its CLOSED mark (a peer gone), not "no such mailbox".
_MAILBOXES: weakref.WeakValueDictionary[str, _Mailbox] = weakref.WeakValueDictionary()
_TABLE_LOCK = threading.Lock()


class InProcessTransport(Transport):
    """This rank's mailbox and its peers' (``peers[rank]``), all in this process.

    Built by :class:`InProcessConnector`.

    Parameters
    ----------
    rank
        This rank.
    size
        The job's size.
    mine
        This rank's mailbox.
    peers
        Every other rank's mailbox, by rank."""

    def __init__(self, rank: int, size: int, mine: _Mailbox, peers: dict[int, _Mailbox]) -> None:
        self.rank = rank
        self.size = size
        self.mine = mine
        self.peers = peers
        self.broken: CollectiveError | None = None
        self.bytes_sent = 0
        self.bytes_received = 0
        self.closed = False

    def exchange(self, seq: int, desc: str, what: str, deadline: float, *, context: int = 0,
                 members: Sequence[int] | None = None) -> InProcessExchange:
        if self.broken is not None:
            raise type(self.broken)(f"rank {self.rank}: {what} not started: the communicator "
                                    f"failed earlier ({self.broken})", rank=self.rank)
        return InProcessExchange(self, seq, desc, what, deadline, context,
                                 range(self.size) if members is None else members)

    def post(self, peer: int, message: Message) -> None:
        """Put ``message`` in ``peer``'s mailbox, from this rank.

        Parameters
        ----------
        peer
            The receiving rank.
        message
            The message (a copy of the payload with its header).
        """
        self.peers[peer].put(self.rank, message)

    def fail(self, err: CollectiveError) -> None:
        """Mark the transport broken and post an ABORT naming the root cause to every peer."""
        if self.broken is not None or self.closed:
            return
        self.broken = err
        payload = json.dumps({"type": type(err).__name__,
                              "message": getattr(err, "root_message", str(err)),
                              "origin": getattr(err, "origin", self.rank)}).encode()[:MAX_ABORT]
        for peer in self.peers:
            self.post(peer, (_ABORT, 0, 0, "abort", payload))

    def close(self) -> None:
        """Tell every peer this rank is gone (after its last message)."""
        if self.closed:
            return
        self.closed = True
        for peer in self.peers:
            self.post(peer, (_CLOSED, 0, 0, "closed", b""))


class InProcessExchange(Exchange):
    """One collective's messages through the mailboxes; sends complete at once (a copy),
    :meth:`run` takes the receives in order, each checked against this collective.

    Parameters
    ----------
    transport
        This rank's :class:`InProcessTransport`.
    seq
        The collective's number in its communicator.
    desc
        What was called; checked against every message received.
    what
        The description in messages and errors.
    deadline
        ``time.monotonic()`` by which the exchange must complete.
    context
        The communicator's context id.
    members
        The transport's ranks taking part, in the communicator's order.
    """

    def __init__(self, transport: InProcessTransport, seq: int, desc: str, what: str,
                 deadline: float, context: int, members: Sequence[int]) -> None:
        self.transport = transport
        self.seq = seq
        self.desc = desc
        self.what = what
        self.deadline = deadline
        self.context = context
        self.members = list(members)
        self.origin = transport.rank
        self.rank = self.members.index(transport.rank)
        self.size = len(self.members)
        self.started = time.monotonic()
        self.tag = f"{seq}|{context}|{desc}".encode()
        self._recvq: dict[int, deque[tuple[memoryview, Callable[[], None] | None]]] = {}
        route = SimpleNamespace(members=self.members,
                                renumbered=self.members != list(range(transport.size)))
        self.blame = ExchangeBlame(self.origin, what, seq, desc, b"", context, route)  # type: ignore[arg-type]

    # -- moving data -------------------------------------------------------------------------
    def send(self, peer: int, payload: memoryview | bytes) -> None:
        data = bytes(memoryview(payload).cast("B"))
        self.transport.post(self.members[peer], (_DATA, self.seq, self.context, self.desc, data))
        self.transport.bytes_sent += len(data)

    def recv(self, peer: int, into: memoryview, then: Callable[[], None] | None = None) -> None:
        q = self._recvq.get(peer)
        if q is None:
            q = self._recvq[peer] = deque()
        q.append((memoryview(into).cast("B"), then))

    def run(self) -> None:
        try:
            self._run()
        except CollectiveError as err:
            self.transport.fail(err)
            raise

    def _run(self) -> None:
        box = self.transport.mine
        while self._recvq:
            progressed = False
            for peer in list(self._recvq):
                progressed |= self._take(peer)
            if progressed:
                continue
            with box.cond:
                if any(box.head(self.members[p]) is not None for p in self._recvq):
                    continue
                self._check_idle()
                left = self.deadline - time.monotonic()
                if left <= 0:
                    raise self.blame.timeout(self._recvq, [], self.started)
                box.cond.wait(min(left, 1.0))

    def _take(self, peer: int) -> bool:
        """Deliver what ``peer``'s queue holds to the receives posted for it."""
        q = self._recvq[peer]
        box = self.transport.mine
        g = self.members[peer]
        progressed = False
        while q:
            message = box.head(g)
            if message is None:
                break
            self._check(peer, message)
            into, then = q[0]
            data = message[4]
            if len(data) != len(into):
                raise self.mismatch(peer, f"sent {len(data)} bytes where {len(into)} were "
                                          f"expected for {message[3]}")
            box.queues[g].popleft()
            q.popleft()
            into[:] = data
            self.transport.bytes_received += len(data)
            progressed = True
            if then is not None:
                then()  # may post more receives (into q: it is still ours)
        if not q:
            self._recvq.pop(peer, None)
        return progressed

    def _check(self, peer: int, message: Message) -> None:
        """Raise unless ``message`` is this collective's data."""
        kind, seq, context, desc, payload = message
        if kind == _ABORT:
            raise self._aborted(peer, payload)
        if kind == _CLOSED:
            raise self.blame.lost(peer, "it closed its transport: its thread ended or failed")
        if context != self.context:
            raise self.mismatch(peer, f"called #{seq} {desc} on another communicator")
        if seq != self.seq or desc != self.desc:
            raise self.mismatch(peer, f"called #{seq} {desc}")

    def _check_idle(self) -> None:
        """Peers we expect nothing from: an ABORT at the head of their queue fails us now."""
        box = self.transport.mine
        for peer, g in enumerate(self.members):
            if peer == self.rank or peer in self._recvq:
                continue
            head = box.head(g)
            if head is not None and head[0] == _ABORT:
                raise self._aborted(peer, head[4])

    def _aborted(self, peer: int, payload: bytes) -> CollectiveError:
        try:
            info = json.loads(payload)
            cls = _ERROR_TYPES.get(info.get("type"), PeerLost)
            origin, root = int(info.get("origin", self.members[peer])), str(info.get("message"))
        except (ValueError, TypeError):
            cls, origin, root = PeerLost, self.members[peer], "no reason given"
        err = cls(f"rank {self.origin}: {self.what} aborted because rank {origin} failed: "
                  f"{root}", rank=self.origin, peer=origin, operation=self.what)
        err.origin, err.root_message = origin, root  # type: ignore[attr-defined]
        return err

    # -- failure state -----------------------------------------------------------------------
    def peer_name(self, peer: int) -> int:
        return self.members[peer]

    def lost(self, peer: int, why: str) -> CollectiveError:
        return self.blame.lost(peer, why)

    def mismatch(self, peer: int, theirs: str) -> CollectiveMismatch:
        return self.blame.mismatch(peer, theirs)

    def abort(self, err: CollectiveError) -> None:
        self.transport.fail(err)

    def check_peer(self, peer: int, arrived: Callable[[], bool]) -> bool:
        head = self.transport.mine.head(self.members[peer])
        if head is None or arrived():
            return False
        self._check(peer, head)
        return True

    def wait(self, peers: Sequence[int], timeout: float) -> list[int]:
        box = self.transport.mine
        end = time.monotonic() + timeout
        with box.cond:
            while True:
                ready = [p for p in peers if box.head(self.members[p]) is not None]
                left = end - time.monotonic()
                if ready or left <= 0:
                    return ready
                box.cond.wait(left)


class InProcessConnector(Connector):
    """The ``inprocess`` transport's setup: a mailbox before the rendezvous, its key as the
    endpoint, the peers' mailboxes looked up by their keys after."""

    def listen(self, host: str) -> _Mailbox:
        box = _Mailbox(f"inprocess:{os.getpid()}:{secrets.token_hex(8)}")
        with _TABLE_LOCK:
            _MAILBOXES[box.key] = box
        return box

    def endpoint(self, handle: _Mailbox) -> str:
        return handle.key

    def discard(self, handle: _Mailbox) -> None:
        handle.drop()

    def connect(self, handle: _Mailbox, rank: int, size: int, endpoints: Sequence[str], *,
                secret: bytes, job: str, deadline: float, security: str) -> InProcessTransport:
        with _TABLE_LOCK:
            found = {r: _MAILBOXES.get(key) for r, key in enumerate(endpoints) if r != rank}
        missing = [r for r, box in found.items() if box is None]
        if missing:
            handle.drop()
            raise ConfigError(
                f"rank {rank}: the endpoint of rank {missing[0]} ({endpoints[missing[0]]!r}) "
                f"is no mailbox of this process (pid {os.getpid()}): the inprocess transport "
                "links threads of one process (TERASCALE_TRANSPORT=tcp links processes)")
        peers = {r: box for r, box in found.items() if box is not None}
        return InProcessTransport(rank, size, handle, peers)
