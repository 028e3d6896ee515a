"""The interface every collective uses to move bytes: :class:`Transport` and :class:`Exchange`.

A :class:`Transport` is this rank's links to every other rank of the job (Gloo's
``transport::Device`` plus its ``Pair`` objects, httpx's ``BaseTransport``). For each
collective the communicator asks it for an :class:`Exchange`: the sends and receives of
that one collective, numbered (``seq``), described (``desc``: name, shape, dtype, op) and
bounded by a deadline. An algorithm posts messages with :meth:`Exchange.send` /
:meth:`Exchange.recv` (from completion callbacks too, which is how the ring and the tree
pipeline chunks) and calls :meth:`Exchange.run` to progress them all at once.

Failure state is public and lives here, not in the algorithms: every transport raises
``PeerLost`` for a dead peer, ``PeerTimeout`` at the deadline and ``CollectiveMismatch``
when a peer's message belongs to another collective, and :meth:`Exchange.abort` tells every
peer before the error propagates, so that nobody waits out a deadline for a rank that
already failed.

Peers are numbered in the exchange's own communicator (``members`` maps them to the
transport's ranks), so one set of links serves a communicator and every sub-communicator
split from it; each carries its own ``context`` id, and a message of another context is
told apart from one of this collective.

Adding a transport (a GPU one, RDMA) is one new module, ``transport/<name>.py``:

1. subclass :class:`Exchange`: ``send``/``recv``/``run`` move the messages (callbacks may
   post more; messages to one peer stay in order), ``lost``/``mismatch`` build the errors,
   ``abort`` fails the transport, ``check_peer``/``waitable`` report a peer's news without
   blocking; frame each message with the collective's ``seq``, ``desc`` and ``context``
   (:mod:`._frames` does it for byte streams) so that peers detect mismatches;
2. subclass :class:`Transport`: ``exchange`` hands out one per collective, ``fail``
   records the first error and tells every peer, ``close`` releases the links;
3. build it after rendezvous (``terascale._init`` builds the TCP mesh with
   :func:`~terascale.transport.connect.build_mesh`; a GPU transport can bootstrap over
   that mesh) and pass it as ``Communicator(mesh=...)``.

Every algorithm in :mod:`terascale.collectives`, every sub-communicator and the failure
model then run over it unchanged. A same-host data path that is not point to point (the
shared-memory segment of :mod:`terascale.transport.shm`) moves data its own way and
borrows an exchange's failure state: ``check_peer`` while it waits, ``abort`` when it
fails.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from .._errors import CollectiveError, CollectiveMismatch

__all__ = ["Exchange", "GroupView", "Swap", "Transport"]

Callback = Callable[[], None]


class Exchange(ABC):
    """The messages of one collective, progressed together until all complete.

    Attributes every implementation sets: ``seq`` (this communicator's collective number),
    ``desc`` (what was called), ``what`` (``"allreduce #3 (ring,float32[8],sum)"``, for
    messages), ``deadline`` (``time.monotonic()`` seconds), ``started``, ``rank`` and
    ``size`` (this rank's position in the exchange's communicator and its size), ``origin``
    (this rank's number in the transport, used in messages) and ``tag`` (bytes identifying
    the collective, equal on every rank that called the same one).
    """

    seq: int
    desc: str
    what: str
    deadline: float
    started: float
    rank: int
    size: int
    origin: int
    tag: bytes

    # -- moving data -------------------------------------------------------------------------
    @abstractmethod
    def send(self, peer: int, payload: memoryview | bytes) -> None:
        """Queue ``payload`` for ``peer``; messages to one peer arrive in posting order."""

    @abstractmethod
    def recv(self, peer: int, into: memoryview, then: Callback | None = None) -> None:
        """Receive ``peer``'s next message into ``into`` (its exact size), then call ``then``."""

    @abstractmethod
    def run(self) -> None:
        """Progress every posted message until all completed; raise CollectiveError otherwise."""

    # -- failure state -----------------------------------------------------------------------
    @abstractmethod
    def peer_name(self, peer: int) -> int:
        """``peer``'s number in the transport (the job's rank), for messages and errors."""

    @abstractmethod
    def lost(self, peer: int, why: str) -> CollectiveError:
        """The error for ``peer`` gone (or the reason it sent when it aborted)."""

    @abstractmethod
    def mismatch(self, peer: int, theirs: str) -> CollectiveMismatch:
        """The error for ``peer`` having called something else (``theirs`` says what)."""

    @abstractmethod
    def abort(self, err: CollectiveError) -> None:
        """Mark the transport failed and tell every peer ``err`` (bounded in time)."""

    @abstractmethod
    def check_peer(self, peer: int, arrived: Callable[[], bool]) -> bool:
        """For data paths outside this exchange: what ``peer``'s link says, without blocking.

        Raises the error a closed link, an ABORT or another collective's message means,
        unless ``arrived()`` (called after looking) says the wait it guards is over. Returns
        True when the link holds a message of this very collective: it says nothing new
        until that message is consumed, so the caller may stop watching it for a while.
        """

    @abstractmethod
    def waitable(self, peer: int) -> int:
        """A file descriptor that becomes readable when ``peer`` has news (poll(2) it)."""

    def subgroup(self, members: Sequence[int]) -> Exchange:
        """The same collective over ``members`` (peers of this exchange), renumbered 0..k-1."""
        return GroupView(self, members)


class GroupView(Exchange):
    """An exchange restricted to some of its peers: how an algorithm runs on a sub-group.

    The hierarchical allreduce runs the ring or the tree over one leader per host this way;
    messages keep the parent's collective number and description, so peers check them as
    part of the same collective.
    """

    def __init__(self, parent: Exchange, members: Sequence[int]) -> None:
        self.parent = parent
        self.members = list(members)
        if parent.rank not in self.members:
            raise ValueError(f"rank {parent.rank} is not in the group {self.members}")
        self.rank = self.members.index(parent.rank)
        self.size = len(self.members)
        for name in ("seq", "desc", "what", "deadline", "started", "origin", "tag"):
            setattr(self, name, getattr(parent, name))

    def send(self, peer: int, payload: memoryview | bytes) -> None:
        self.parent.send(self.members[peer], payload)

    def recv(self, peer: int, into: memoryview, then: Callback | None = None) -> None:
        self.parent.recv(self.members[peer], into, then)

    def run(self) -> None:
        self.parent.run()

    def peer_name(self, peer: int) -> int:
        return self.parent.peer_name(self.members[peer])

    def lost(self, peer: int, why: str) -> CollectiveError:
        return self.parent.lost(self.members[peer], why)

    def mismatch(self, peer: int, theirs: str) -> CollectiveMismatch:
        return self.parent.mismatch(self.members[peer], theirs)

    def abort(self, err: CollectiveError) -> None:
        self.parent.abort(err)

    def check_peer(self, peer: int, arrived: Callable[[], bool]) -> bool:
        return self.parent.check_peer(self.members[peer], arrived)

    def waitable(self, peer: int) -> int:
        return self.parent.waitable(self.members[peer])


class Swap(ABC):
    """One frame each way between this rank and one peer, for a collective called again
    and again with the same shape (a two-rank allreduce of one chunk, a two-rank barrier):
    the per-call path that builds no :class:`Exchange` while all goes well.

    :meth:`start` sends ours and receives theirs for collective ``seq``; None when both
    completed and theirs belongs to the same collective. Otherwise it returns what
    :meth:`finish` continues from, in the collective's exchange, with every failure check
    and its deadline. Every rank may mix the two paths: the frames are the same.
    """

    @abstractmethod
    def start(self, seq: int, send: Any, into: Any) -> Any:
        """Send ``send``, receive into ``into`` (contiguous buffers): None when done."""

    @abstractmethod
    def finish(self, ex: Exchange, pending: Any, send: Any, into: Any) -> None:
        """Complete what :meth:`start` returned in ``ex``; raises as ``ex.run()`` does."""


class Transport(ABC):
    """This rank's links to every other rank of the job.

    ``rank`` and ``size`` number the job; ``broken`` holds the first failure (after which
    every new exchange fails at once, naming it); ``bytes_sent`` / ``bytes_received``
    count what moved, headers included.
    """

    rank: int
    size: int
    broken: CollectiveError | None
    bytes_sent: int
    bytes_received: int

    @abstractmethod
    def exchange(self, seq: int, desc: str, what: str, deadline: float, *, context: int = 0,
                 members: Sequence[int] | None = None) -> Exchange:
        """A new exchange for collective ``seq`` of communicator ``context`` over ``members``
        (the transport's ranks, in the communicator's order; all of them when None)."""

    def swap(self, peer: int, desc: str, nbytes: int, *, context: int = 0,
             members: Sequence[int] | None = None) -> Swap | None:
        """A :class:`Swap` with ``peer`` (numbered as in :meth:`exchange`) for collective
        ``desc`` of ``nbytes`` payload bytes each way; None: this transport has none, post
        the frames to an exchange."""
        return None

    @abstractmethod
    def fail(self, err: CollectiveError) -> None:
        """Mark the transport failed and tell every peer why (idempotent)."""

    @abstractmethod
    def close(self) -> None:
        """Close every link (idempotent)."""
