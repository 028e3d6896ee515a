"""The interface every collective uses to move bytes: :class:`Transport`, :class:`Exchange`
and :class:`Connector`, chosen by name from :data:`TRANSPORTS`.

A :class:`Transport` is this rank's links to every other rank of the job (Gloo's
``transport::Device`` plus its ``Pair`` objects, httpx's ``BaseTransport``). For each
collective the communicator asks it for an :class:`Exchange`: the sends and receives of
that one collective, numbered (``seq``), described (``desc``: name, shape, dtype, op) and
bounded by a deadline. An algorithm posts messages with :meth:`Exchange.send` /
:meth:`Exchange.recv` (from completion callbacks too, which is how the ring and the tree
pipeline chunks), takes its staging buffers from :meth:`Exchange.scratch` (memory the
transport can move from: pinned or registered memory for an RDMA or GPU transport, plain
host memory for TCP) and calls :meth:`Exchange.run` to progress them all at once.

**Setting up.** A transport is built by its :class:`Connector` in three steps around the
rendezvous, as Gloo's pairs are (``Pair::address()`` published, ``Pair::connect(bytes)``
with the peer's):

1. :meth:`Connector.listen` before the rendezvous: get ready to be reached (TCP opens a
   listening socket on this rank's address; the in-process transport opens a mailbox);
2. :meth:`Connector.endpoint`: the opaque string this rank publishes through the
   rendezvous (TCP's is ``host:port``, the in-process transport's a key in this process);
   the rendezvous hands every rank the list of all ranks' endpoints, unread;
3. :meth:`Connector.connect` with that list: link the ranks (TCP dials the lower ranks and
   accepts the higher ones, authenticating every link) and return the :class:`Transport`.

**Choosing one.** :data:`TRANSPORTS` maps a name to its connector (``"module:Class"``,
imported on first use, so the table imports no transport); :func:`connector` resolves a
name: ``terascale.init()`` and ``_init.connect(transport=)`` ask for the one named by
``TERASCALE_TRANSPORT``, by default ``tcp``. The rendezvous refuses a job whose ranks name
different transports (``ConfigError``).

**Readiness.** A transport whose links are file descriptors says so with
:meth:`Exchange.waitable` (``poll(2)`` it); one without (threads, a GPU queue) returns None
there and implements :meth:`Exchange.wait` instead. Data paths outside the exchange use
:meth:`Exchange.wait` (or the descriptors where there are some) and
:meth:`Exchange.check_peer` to learn a peer's news without blocking.

**Failure.** Failure state is public and lives here, not in the algorithms: every
transport raises the errors of :mod:`terascale._errors`, naming this rank, the peer and the
operation -- ``PeerLost`` for a dead peer, ``PeerTimeout`` at the deadline and
``CollectiveMismatch`` when a peer's message belongs to another collective -- and
:meth:`Exchange.abort` tells every peer before the error propagates, so that nobody waits
out a deadline for a rank that already failed (the first failure is ``Transport.broken``;
every later exchange fails at once, naming it).

Peers are numbered in the exchange's own communicator (``members`` maps them to the
transport's ranks), so one set of links serves a communicator and every sub-communicator
split from it; each carries its own ``context`` id, and a message of another context is
told apart from one of this collective.

**Shared memory is not a transport.** Ranks on one host also share a memory segment
(:mod:`terascale.transport.shmgroup`, used by the ``shm`` and ``hierarchical``
allreduces and the same-host barrier): it is not point to point, so it sits *beside* the
transport, not behind this interface. It moves data its own way and borrows the running
exchange's failure state -- :meth:`Exchange.wait`/:meth:`Exchange.waitable` and
:meth:`Exchange.check_peer` while it waits (a closed link is a dead member), and
:meth:`Exchange.abort` when it fails -- so it runs over any transport that reports
readiness either way, and its failures reach every rank like the transport's own.

Adding a transport (a GPU one, RDMA) is one module in ``transport/`` and one line in
:data:`TRANSPORTS` (the in-process transport, :mod:`terascale.transport.inprocess`, is
the worked example):

1. subclass :class:`Exchange`: ``send``/``recv``/``run`` move the messages (callbacks may
   post more; messages to one peer stay in order), ``lost``/``mismatch`` build the errors,
   ``abort`` fails the transport, ``check_peer`` and ``waitable`` or ``wait`` report a
   peer's news without blocking, ``scratch`` hands out staging memory; carry each
   message's ``seq``, ``desc`` and ``context`` so that peers detect mismatches
   (:mod:`._frames` frames byte streams);
2. subclass :class:`Transport`: ``exchange`` hands out one per collective, ``fail``
   records the first error and tells every peer, ``close`` releases the links;
3. subclass :class:`Connector` (``listen``, ``endpoint``, ``connect``) and name it in
   :data:`TRANSPORTS` (or :func:`register_transport` from outside the package).

Every algorithm in :mod:`terascale.collectives`, every sub-communicator and the failure
model then run over it unchanged: ``TERASCALE_TRANSPORT=<name>`` selects it for a job.
"""

from __future__ import annotations

import importlib
import select
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._errors import CollectiveError, CollectiveMismatch, ConfigError

__all__ = ["Connector", "DEFAULT_TRANSPORT", "Exchange", "GroupView", "Swap", "TRANSPORTS",
           "Transport", "connector", "register_transport", "scratch_array"]

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
        """Queue ``payload`` for ``peer``; messages to one peer arrive in posting order.

        Parameters
        ----------
        peer
            The peer's index in this exchange (0..k-1 of its members).
        payload
            The bytes; left alone by the caller until the exchange ends.
        """

    @abstractmethod
    def recv(self, peer: int, into: memoryview, then: Callback | None = None) -> None:
        """Receive ``peer``'s next message into ``into`` (its exact size), then call ``then``.

        Parameters
        ----------
        peer
            The peer's index in this exchange (0..k-1 of its members).
        into
            The buffer, exactly the size of the message.
        then
            Called once the message is in (default None), e.g. to fold it and post the next send.
        """

    @abstractmethod
    def run(self) -> None:
        """Progress every posted message until all completed; raise CollectiveError otherwise."""

    # -- failure state -----------------------------------------------------------------------
    @abstractmethod
    def peer_name(self, peer: int) -> int:
        """``peer``'s number in the transport (the job's rank), for messages and errors.

        Parameters
        ----------
        peer
            The peer's index in this exchange (0..k-1 of its members).
        """

    @abstractmethod
    def lost(self, peer: int, why: str) -> CollectiveError:
        """The error for ``peer`` gone (or the reason it sent when it aborted).

        Parameters
        ----------
        peer
            The peer's index in this exchange (0..k-1 of its members).
        why
            What happened (a reset, an EOF, the peer's abort reason).
        """

    @abstractmethod
    def mismatch(self, peer: int, theirs: str) -> CollectiveMismatch:
        """The error for ``peer`` having called something else (``theirs`` says what).

        Parameters
        ----------
        peer
            The peer's index in this exchange (0..k-1 of its members).
        theirs
            The description of the collective the peer called.
        """

    @abstractmethod
    def abort(self, err: CollectiveError) -> None:
        """Mark the transport failed and tell every peer ``err`` (bounded in time).

        Parameters
        ----------
        err
            The failure every peer is told (their errors name this rank).
        """

    @abstractmethod
    def check_peer(self, peer: int, arrived: Callable[[], bool]) -> bool:
        """For data paths outside this exchange: what ``peer``'s link says, without blocking.

        Raises the error a closed link, an ABORT or another collective's message means,
        unless ``arrived()`` (called after looking) says the wait it guards is over. Returns
        True when the link holds a message of this very collective: it says nothing new
        until that message is consumed, so the caller may stop watching it for a while.

        Parameters
        ----------
        peer
            The peer's index in this exchange (0..k-1 of its members).
        arrived
            Says whether the guarded wait is over (called after looking).
        """

    def waitable(self, peer: int) -> int | None:
        """A file descriptor that becomes readable when ``peer`` has news (``poll(2)`` it),
        or None: this transport has none, use :meth:`wait` (the default).

        Parameters
        ----------
        peer
            The peer's index in this exchange (0..k-1 of its members).
        """
        return None

    def wait(self, peers: Sequence[int], timeout: float) -> list[int]:
        """Block up to ``timeout`` seconds until one of ``peers`` may have news; returns
        those that may (then ask :meth:`check_peer`). The default polls :meth:`waitable`'s
        descriptors; a transport without descriptors overrides it.

        Parameters
        ----------
        peers
            The peers to watch.
        timeout
            Seconds to block at most.
        """
        fds = {}
        for p in peers:
            fd = self.waitable(p)
            if fd is None:
                raise NotImplementedError(f"{type(self).__name__} has neither waitable() "
                                          "descriptors nor a wait() of its own")
            fds[fd] = p
        poll = select.poll()
        for fd in fds:
            poll.register(fd, select.POLLIN)
        return [fds[fd] for fd, _ in poll.poll(max(int(timeout * 1000), 0))]

    def scratch(self, nbytes: int) -> np.ndarray:
        """``nbytes`` of staging memory for this collective (uint8, uninitialized): the
        algorithms' receive and fold buffers. A transport that can move only from memory it
        registered (RDMA, a GPU) overrides it; the default is ordinary host memory.

        Parameters
        ----------
        nbytes
            Bytes needed.
        """
        return np.empty(nbytes, np.uint8)

    def subgroup(self, members: Sequence[int]) -> Exchange:
        """The same collective over ``members`` (peers of this exchange), renumbered 0..k-1.

        Parameters
        ----------
        members
            Peers of this exchange, in the sub-group's order.
        """
        return GroupView(self, members)


class GroupView(Exchange):
    """An exchange restricted to some of its peers: how an algorithm runs on a sub-group.

    The hierarchical allreduce runs the ring or the tree over one leader per host this way;
    messages keep the parent's collective number and description, so peers check them as
    part of the same collective.

    Parameters
    ----------
    parent
        The exchange to restrict.
    members
        Its peers taking part, in the sub-group's order.
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

    def waitable(self, peer: int) -> int | None:
        return self.parent.waitable(self.members[peer])

    def wait(self, peers: Sequence[int], timeout: float) -> list[int]:
        back = {self.members[p]: p for p in peers}
        return [back[g] for g in self.parent.wait(list(back), timeout)]

    def scratch(self, nbytes: int) -> np.ndarray:
        return self.parent.scratch(nbytes)


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
        """Send ``send``, receive into ``into`` (contiguous buffers): None when done.

        Parameters
        ----------
        seq
            The collective's number.
        send
            Our frame's payload (a contiguous buffer).
        into
            Where theirs goes (a contiguous buffer of the same size).
        """

    @abstractmethod
    def finish(self, ex: Exchange, pending: Any, send: Any, into: Any) -> None:
        """Complete what :meth:`start` returned in ``ex``; raises as ``ex.run()`` does.

        Parameters
        ----------
        ex
            The exchange that completes it.
        pending
            What :meth:`start` returned.
        send
            As given to :meth:`start`.
        into
            As given to :meth:`start`.
        """


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
        (the transport's ranks, in the communicator's order; all of them when None).

        Parameters
        ----------
        seq
            The collective's number in its communicator (every rank counts alike).
        desc
            What was called (name, shape, dtype, op); peers compare it to detect mismatches.
        what
            The description in messages and errors (``"allreduce #3 (ring,float32[8],sum)"``).
        deadline
            ``time.monotonic()`` by which the exchange must complete
            (:class:`~terascale.PeerTimeout` after).
        context
            The communicator's context id (0: the job's; sub-communicators have their own).
        members
            The transport's ranks taking part, in the communicator's order (default None: all).
        """

    def swap(self, peer: int, desc: str, nbytes: int, *, context: int = 0,
             members: Sequence[int] | None = None) -> Swap | None:
        """A :class:`Swap` with ``peer`` (numbered as in :meth:`exchange`) for collective
        ``desc`` of ``nbytes`` payload bytes each way; None: this transport has none, post
        the frames to an exchange.

        Parameters
        ----------
        peer
            The peer, numbered as in :meth:`exchange`.
        desc
            The collective's description.
        nbytes
            Payload bytes each way.
        context
            The communicator's context id (default 0).
        members
            As for :meth:`exchange` (default None: all).
        """
        return None

    def scratch(self, nbytes: int) -> np.ndarray:
        """``nbytes`` of staging memory (uint8) kept beyond one collective (a fast path's
        receive buffer); see :meth:`Exchange.scratch`.

        Parameters
        ----------
        nbytes
            Bytes needed.
        """
        return np.empty(nbytes, np.uint8)

    @abstractmethod
    def fail(self, err: CollectiveError) -> None:
        """Mark the transport failed and tell every peer why (idempotent).

        Parameters
        ----------
        err
            The failure every peer is told.
        """

    @abstractmethod
    def close(self) -> None:
        """Close every link (idempotent)."""


def scratch_array(source: Exchange | Transport, shape: int | tuple[int, ...],
                  dtype: np.dtype[Any] | type) -> np.ndarray:
    """An uninitialized array of ``shape`` and ``dtype`` in ``source``'s scratch memory
    (:meth:`Exchange.scratch`): what an algorithm uses instead of ``np.empty``.

    Parameters
    ----------
    source
        The exchange or transport whose scratch memory is used.
    shape
        The array's shape.
    dtype
        The array's dtype.
    """
    dt = np.dtype(dtype)
    dims = (shape,) if isinstance(shape, int) else tuple(shape)
    count = 1
    for d in dims:
        count *= d
    return source.scratch(count * dt.itemsize).view(dt).reshape(dims)


class Connector(ABC):
    """How one kind of transport is set up around the rendezvous (see the module docstring):
    :meth:`listen` before it, :meth:`endpoint` published through it, :meth:`connect` after.

    ``name`` is its name in :data:`TRANSPORTS`.
    """

    name: str = ""

    @abstractmethod
    def listen(self, host: str) -> Any:
        """Get ready to be reached; returns this rank's handle (a listening socket, a mailbox).

        Parameters
        ----------
        host
            This rank's address as the rendezvous server sees it (where a network transport
            listens).
        """

    @abstractmethod
    def endpoint(self, handle: Any) -> str:
        """The opaque string the rendezvous publishes for this rank (``handle`` from
        :meth:`listen`); only this connector's :meth:`connect` reads it.

        Parameters
        ----------
        handle
            From :meth:`listen`.
        """

    @abstractmethod
    def connect(self, handle: Any, rank: int, size: int, endpoints: Sequence[str], *,
                secret: bytes, job: str, deadline: float, security: str) -> Transport:
        """Link this rank to every other one and return the transport.

        Parameters
        ----------
        handle
            From :meth:`listen` (consumed: closed on failure too).
        endpoints
            Every rank's :meth:`endpoint`, in rank order.
        secret
            The job secret (to authenticate links).
        job
            The job id.
        deadline
            ``time.monotonic()`` by which every link must be up (``PeerTimeout`` naming the missing
            ranks otherwise).
        security
            The links' mode (``terascale.transport.LINK_MODES``); a transport whose links never
            leave the process may ignore it.
        rank
            This rank in the job.
        size
            Ranks in the job.
        """

    def discard(self, handle: Any) -> None:
        """Release ``handle`` when the rendezvous failed before :meth:`connect`.

        Parameters
        ----------
        handle
            From :meth:`listen`.
        """
        close = getattr(handle, "close", None)
        if close is not None:
            close()


#: Transport names and their connectors (``"module:Class"`` relative to this package,
#: imported on first use). A new transport is one line here.
TRANSPORTS: dict[str, str | Connector] = {
    "tcp": ".connect:TcpConnector",
    "inprocess": ".inprocess:InProcessConnector",
}
#: What ``terascale.init()`` links ranks with unless ``TERASCALE_TRANSPORT`` names another.
DEFAULT_TRANSPORT = "tcp"
_RESOLVED: dict[str, Connector] = {}
_LOCK = threading.Lock()


def register_transport(name: str, target: str | Connector) -> None:
    """Make transport ``name`` selectable (``TERASCALE_TRANSPORT=name``,
    ``_init.connect(transport=name)``).

    Parameters
    ----------
    target
        A :class:`Connector`, or ``"package.module:Class"`` naming one (imported on first use).
        Registering a name again replaces it.
    name
        The transport's name.
    """
    if not name or not isinstance(name, str):
        raise ConfigError(f"transport name {name!r} must be a non-empty string")
    with _LOCK:
        TRANSPORTS[name] = target
        _RESOLVED.pop(name, None)


def connector(name: str | None = None) -> Connector:
    """The connector of transport ``name`` (None: :data:`DEFAULT_TRANSPORT`); ConfigError
    naming the known transports for an unknown name.

    Parameters
    ----------
    name
        A name of :data:`TRANSPORTS` (default None: :data:`DEFAULT_TRANSPORT`).
    """
    name = name or DEFAULT_TRANSPORT
    with _LOCK:
        found = _RESOLVED.get(name)
        if found is not None:
            return found
        target = TRANSPORTS.get(name)
        if target is None:
            raise ConfigError(f"transport={name!r} (TERASCALE_TRANSPORT) is not one of "
                              f"{', '.join(sorted(TRANSPORTS))}")
        if isinstance(target, str):
            module, _, cls = target.partition(":")
            found = getattr(importlib.import_module(module, __package__), cls)()
        else:
            found = target
        assert isinstance(found, Connector), f"{target!r} is not a Connector"
        found.name = name
        _RESOLVED[name] = found
        return found
