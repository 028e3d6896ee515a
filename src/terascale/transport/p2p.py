"""Point-to-point messages between the ranks of one group: ordered, tagged, any-source.

Collectives move data in lock step over the communicator's links; point-to-point traffic
(pipeline stages handing activations on, a parameter server's replies) is neither ordered
across ranks nor symmetric, so it travels on links of its own and never interleaves with a
collective's frames:

* **one TCP connection per ordered pair** (``i -> j`` carries only ``i``'s messages to
  ``j``), dialed by the sender on its first message and authenticated with the HMAC
  challenge of :mod:`terascale._auth` on the pair's secret. Then, as on the collectives'
  links (:mod:`.connect`), a sealed hello names the sender and agrees the link security,
  and every later byte travels in :class:`~._secure.SecureLink` records (GMAC, or AES-GCM
  with ``security="encrypt"``) under keys of their own (HKDF over the pair's secret and
  the handshake's nonces, labelled ``p2p``): a payload altered, replayed, reordered or
  dropped on the path fails the receive with :class:`~terascale.LinkTampered` (or
  ``PeerLost``) naming rank and peer, never a wrong tensor. Messages from one
  sender arrive in the order they were sent (MPI's non-overtaking rule). Ranks on one host
  use loopback TCP too: the shared-memory segment is the collectives' own (its slots and
  epochs assume every member takes part), and a loopback copy costs little beside it.
* **matching as in MPI**: a message matches the oldest posted receive whose source (or
  "any source") and tag agree; one that arrives before its receive waits in an unexpected
  queue, so a sender never blocks on a receiver that has not posted yet (each incoming
  connection has a reader thread that drains it).
* **the waiting thread reads**: a thread that waits on a receive from a given rank reads
  that rank's link itself while the link's reader thread stands aside, so a message
  reaches it without a hand-off between threads (each costs a wake-up and the GIL: most
  of a small message's latency in Python). The reader goes back to the link 20 ms after
  the last such wait (``_LINGER_S``), and reads meanwhile, at that interval, whatever
  arrives with nobody waiting; receives from any source are delivered by the readers.
* **deadlines and failures as for collectives**: a receive not matched by its deadline
  fails with :class:`~terascale.PeerTimeout` ("Timed out ..." naming rank, peer, tag and
  operation); a sender whose connection closes without saying goodbye fails its receivers'
  requests with :class:`~terascale.PeerLost`; a message of the wrong size is a
  :class:`~terascale.CollectiveMismatch`.

Use it through the torch backend (``dist.send``/``recv``/``isend``/``irecv``/
``batch_isend_irecv``) or directly::

    p2p = PointToPoint(rank, size, secret, host="127.0.0.1")   # on every rank
    # secret: bytes the group shares, or one per peer (the pair's: see _pg_p2p)
    addresses = comm.allgather_object(p2p.address)              # any way to share them
    p2p.connect_to(addresses)
    p2p.send(1, tag=0, data=memoryview(buf), timeout=30)
    req = p2p.post_recv(None, tag=0, into=memoryview(out), timeout=30)
    source = req.wait()
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import select
import socket
import struct
import threading
import time
from collections.abc import Callable

from .._admission import Admission
from .._async import close_at_exit
from .._auth import Channel, accept_handshake, dial_handshake, drop_reason, recv_exact
from .._errors import (
    AuthError,
    CollectiveError,
    CollectiveMismatch,
    PeerLost,
    PeerTimeout,
)
from ._secure import (
    SecureLink,
    agree_cipher,
    chosen_cipher,
    ciphers,
    hello_refused,
    recv_hello,
)
from ._tcp_stream import drop_sent

__all__ = ["PointToPoint", "Request"]

_HEAD = struct.Struct("<BqQ")  # kind, tag, payload bytes
_HELLO = struct.Struct("<q")  # the dialer's rank, after the handshake
_DATA, _BYE = 0, 1
_VET_S = 10.0  # time a new connection gets to authenticate
_PER_SOURCE = 32  # unauthenticated connections one address may hold; more evict its oldest
_SECURITY = ("integrity", "encrypt")
# After a thread read a link itself, its reader thread leaves the link alone this long (it
# still reads what arrives with nobody waiting, at this interval): in a stream of receives,
# the reader is never woken per message. It bounds how long a message nobody waits for
# may sit unread (a sender of more than the socket buffers hold waits that long at most).
_LINGER_S = 0.02

log = logging.getLogger("terascale.transport")


class Request:
    """A posted receive: :meth:`wait` returns the source rank or raises the failure.

    Parameters
    ----------
    owner
        The :class:`PointToPoint` it was posted on.
    src
        The sending rank (None: any source).
    tag
        The message's tag.
    into
        The buffer, exactly the message's size.
    deadline
        ``time.monotonic()`` by which it must complete.
    what
        Its description in errors.
    """

    def __init__(self, owner: PointToPoint, src: int | None, tag: int, into: memoryview,
                 deadline: float, what: str) -> None:
        self.src = src
        self.tag = tag
        self.into = into
        self.deadline = deadline
        self.what = what
        self.source: int | None = None
        self.error: BaseException | None = None
        self.callback: Callable[[Request], None] | None = None
        self._owner = owner
        self._done = threading.Event()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> int:
        """The source rank, once the message is in ``into``; the failure otherwise (by the
        deadline the receive was posted with). A receive from a given rank is read from
        that rank's link by the waiting thread itself (no hand-off from a reader thread).

        Parameters
        ----------
        timeout
            Seconds to wait at most (default None: until the receive's own deadline). Past
            it a :class:`~terascale.PeerTimeout` is raised and the receive stays posted: a
            later ``wait`` can still complete it. A message that began to arrive is read
            whole first (its body has the link's deadline), so a timeout never leaves a
            link in the middle of a message.
        """
        until = None if timeout is None else time.monotonic() + max(float(timeout), 0.0)
        if self.src is not None and not self._done.is_set():
            self._owner._read_until(self, until)
        while True:
            now = time.monotonic()
            limit = max(self.deadline - now, 0) + 1.0
            if until is not None:
                if now >= until and not self._done.is_set():
                    owner = self._owner
                    peer = "any peer" if self.src is None else f"peer {self.src}"
                    raise PeerTimeout(
                        f"Timed out: rank {owner.rank}: wait(timeout={timeout:g} s) on "
                        f"{self.what} from {peer} (tag {self.tag}) ran out before the "
                        f"message arrived; the receive stays posted", rank=owner.rank,
                        peer=self.src, operation=self.what)
                limit = min(limit, max(until - now, 0.0))
            if self._done.wait(limit):
                break
            self._owner._expire_now()
        if self.error is not None:
            raise self.error
        assert self.source is not None
        return self.source

    def _finish(self, source: int | None, error: BaseException | None) -> None:
        self.source, self.error = source, error
        try:
            if self.callback is not None:  # first: what it does is done when wait() returns
                self.callback(self)
        finally:
            self._done.set()


class _Early:
    """A message that arrived before its receive was posted (its bytes may still be coming)."""

    def __init__(self, source: int, tag: int, nbytes: int) -> None:
        self.source, self.tag = source, tag
        self.buf = bytearray(nbytes)
        self.ready = threading.Event()
        self.error: CollectiveError | None = None

    def fail(self, error: CollectiveError) -> None:
        self.error = error
        self.ready.set()

    def payload(self) -> bytearray | None:
        """The bytes once all arrived (the reader's body deadline bounds the wait), or None
        when the sender failed in the middle (then :attr:`error` says so)."""
        self.ready.wait()
        return None if self.error is not None else self.buf


class PointToPoint:
    """Tagged, ordered point-to-point messages of one group (see the module doc).

    Parameters
    ----------
    rank
        This rank in the group.
    size
        The number of ranks in the group.
    secret
        Shared by the group's ranks, or a list with one per rank (index ``p``: the secret this rank
        shares with rank ``p``; the links are authenticated with it)
    host
        The address to listen on, one the other ranks reach.
    timeout
        How long a message's body may take once its header arrived.
    security
        ``"integrity"`` (every byte authenticated) or ``"encrypt"`` (encrypted too): every rank of
        the group must run the same, and a rank refuses a peer that offers another with an
        :class:`~terascale.AuthError`. Call :meth:`connect_to` with every rank's :attr:`address`
        before sending.
    name
        The group's name: in the links' hello and labels, and the threads' names (default
        ``"p2p"``); groups of one process must differ.
    """

    def __init__(self, rank: int, size: int, secret: bytes | list[bytes], *,
                 host: str = "127.0.0.1", name: str = "p2p", timeout: float = 60.0,
                 security: str = "integrity") -> None:
        if security not in _SECURITY:
            raise ValueError(f"security={security!r} must be one of {_SECURITY}")
        self.rank, self.size, self.name, self.security = rank, size, name, security
        self.timeout = timeout  # the most a message's body may take once its header is in
        self._secret = secret
        self._admission = Admission(per_source=_PER_SOURCE)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._listener = socket.socket(family, socket.SOCK_STREAM)
        self._listener.bind((host, 0))
        self._listener.listen(max(size, 8))
        self.address: tuple[str, int] = (host, self._listener.getsockname()[1])
        self._peers: list[tuple[str, int]] | None = None
        self._out: dict[int, _Link] = {}
        self._out_locks = {p: threading.Lock() for p in range(size)}
        self._lock = threading.Lock()  # the matching state below
        self._posted: list[Request] = []
        self._unexpected: list[_Early] = []  # arrived before their receive, in order
        self._gone: dict[int, CollectiveError] = {}  # sources that closed or failed
        self._deadlines: list[tuple[float, int, Request]] = []
        self._ticket = itertools.count()
        self._wake = threading.Condition(self._lock)
        self._closed = False
        self._incoming: list[_Link] = []
        self._inbox: dict[int, _Inbox] = {}  # source -> its link's reading state
        self._threads = [threading.Thread(target=self._accept_loop, daemon=True,
                                          name=f"terascale-{name}-accept-{rank}"),
                         threading.Thread(target=self._deadline_loop, daemon=True,
                                          name=f"terascale-{name}-deadline-{rank}")]
        for t in self._threads:
            t.start()
        close_at_exit(self, 2.0)

    # -- set-up -----------------------------------------------------------------------------
    def connect_to(self, addresses: list[tuple[str, int]]) -> None:
        """Every rank's :attr:`address`, in rank order (connections are dialed lazily).

        Parameters
        ----------
        addresses
            Every rank's :attr:`address`, in rank order.
        """
        if len(addresses) != self.size:
            raise ValueError(f"rank {self.rank}: {len(addresses)} addresses for {self.size} ranks")
        self._peers = [(str(h), int(p)) for h, p in addresses]

    def _secret_with(self, peer: int) -> bytes:
        s = self._secret
        return s if isinstance(s, (bytes, bytearray)) else s[peer]

    def _label(self, dialer: int, acceptor: int) -> str:
        # the keys' label: never those of the collectives' links (nor another group's)
        return f"p2p|{self.name}|{dialer}>{acceptor}"

    def _link(self, peer: int, deadline: float) -> _Link:
        link = self._out.get(peer)
        if link is not None:
            return link
        if self._peers is None:
            raise CollectiveError(f"rank {self.rank}: point-to-point used before connect_to",
                                  rank=self.rank, peer=peer, operation="send")
        host, port = self._peers[peer]
        secret = self._secret_with(peer)
        label = self._label(self.rank, peer)
        sock = None
        try:
            sock = socket.create_connection((host, port),
                                            timeout=max(deadline - time.monotonic(), 0.001))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # which pair's secret to check, in clear: the handshake then proves it
            sock.sendall(_HELLO.pack(self.rank))
            nonces = dial_handshake(sock, secret, deadline)
            channel = Channel(secret, nonces, dialer=True, purpose=f"hello|{label}")
            channel.send(sock, {"rank": self.rank, "group": self.name,
                                "security": self.security,
                                "ciphers": list(ciphers(self.security))},
                         deadline)
            theirs = channel.recv(sock, deadline, what=f"rank {self.rank}: hello of rank {peer}")
            hello_refused(theirs, peer)
            mode = theirs.get("security") if isinstance(theirs, dict) else None
            if mode != self.security:
                raise AuthError(f"rank {self.rank}: rank {peer} runs {mode} point-to-point "
                                f"links, this rank {self.security}: refusing to send to it "
                                "(the ranks disagree on the job's link security)")
            cipher = chosen_cipher(theirs, self.rank, peer, self.security)
        except AuthError as e:
            if sock is not None:
                sock.close()
            raise AuthError(f"rank {self.rank}: point-to-point link to rank {peer} refused: "
                            f"{e}") from None
        except (OSError, ConnectionError, ValueError) as e:
            if sock is not None:
                sock.close()
            raise PeerLost(f"rank {self.rank}: could not reach peer {peer} at {host}:{port} "
                           f"for send ({e})", rank=self.rank, peer=peer,
                           operation="send") from None
        link = _Link(SecureLink(sock, secret, nonces, label, dialer=self.rank, acceptor=peer,
                                rank=self.rank, peer=peer,
                                encrypt=self.security == "encrypt", cipher=cipher))
        self._out[peer] = link
        return link

    # -- sending ----------------------------------------------------------------------------
    def send(self, peer: int, tag: int, data: memoryview, timeout: float) -> None:
        """Send ``data`` to ``peer`` with ``tag``; returns once it is handed to the kernel (the
        receiver's reader drains it, posted or not).

        Parameters
        ----------
        peer
            The receiving rank.
        tag
            The message's tag.
        data
            The bytes (bytes-like).
        timeout
            Seconds the send may block on a full link (PeerTimeout after)."""
        if not 0 <= peer < self.size:
            raise ValueError(f"rank {self.rank}: send to rank {peer}, group of {self.size}")
        data = memoryview(data).cast("B")
        if peer == self.rank:
            self._deliver(peer, tag, len(data), lambda view: view.__setitem__(slice(None), data))
            return
        deadline = time.monotonic() + timeout
        with self._out_locks[peer]:
            link = self._link(peer, deadline)
            try:
                # a small message: one record, one system call
                link.send_all([_HEAD.pack(_DATA, tag, len(data)), data], deadline)
            except TimeoutError:
                self._drop_out(peer)
                raise PeerTimeout(f"Timed out after {timeout:g} s: rank {self.rank} sending "
                                  f"{len(data)} bytes to peer {peer} (tag {tag}, send); the "
                                  "peer does not read", rank=self.rank, peer=peer,
                                  operation="send") from None
            except OSError as e:
                self._drop_out(peer)
                raise PeerLost(f"rank {self.rank}: peer {peer} closed the connection during "
                               f"send (tag {tag}): {e}", rank=self.rank, peer=peer,
                               operation="send") from None

    def _drop_out(self, peer: int) -> None:
        link = self._out.pop(peer, None)
        if link is not None:
            link.close()

    # -- receiving --------------------------------------------------------------------------
    def post_recv(self, src: int | None, tag: int, into: memoryview, timeout: float,
                  callback: Callable[[Request], None] | None = None) -> Request:
        """Post a receive of a message from ``src`` with ``tag``; returns its request.

        Parameters
        ----------
        src
            The sending rank (None: any source).
        tag
            The message's tag (MPI-style matching: source and tag).
        into
            The buffer, exactly the message's size.
        timeout
            Seconds the receive may wait (its request then fails with PeerTimeout).
        callback
            ``callback(request)`` runs when it completes, before :meth:`Request.wait`
            returns (in the thread that completed it: keep it short); default None."""
        what = "recv" if src is not None else "recv from any source"
        into = memoryview(into).cast("B")
        req = Request(self, src, tag, into, time.monotonic() + timeout, what)
        req.callback = callback
        with self._lock:
            if self._closed:
                err: BaseException | None = PeerLost(
                    f"rank {self.rank}: {what} after the process group shut down",
                    rank=self.rank, peer=src, operation=what)
                found = None
            else:
                found, err = self._match_unexpected(req)
                if found is None and err is None:
                    self._posted.append(req)
                    heapq.heappush(self._deadlines, (req.deadline, next(self._ticket), req))
                    self._wake.notify()
                    return req
        if found is not None:
            source, early = found
            payload = early.payload()
            if payload is None:
                err = early.error
            elif len(payload) != len(into):
                err = self._size_error(req, source, len(payload))
            else:
                into[:] = payload
                req._finish(source, None)
                return req
        req._finish(None, err)
        return req

    def _match_unexpected(self, req: Request) -> tuple[tuple[int, _Early] | None,
                                                        BaseException | None]:
        for i, early in enumerate(self._unexpected):
            if early.tag == req.tag and req.src in (None, early.source):
                del self._unexpected[i]
                return (early.source, early), None
        gone = self._gone.get(req.src) if req.src is not None else None
        if gone is None and req.src is None and len(self._gone) >= self.size - 1 > 0:
            gone = next(iter(self._gone.values()))
        if gone is not None:
            return None, type(gone)(f"rank {self.rank}: {req.what} (tag {req.tag}): {gone}",
                                    rank=self.rank, peer=gone.peer, operation=req.what)
        return None, None

    def _size_error(self, req: Request, source: int, got: int) -> CollectiveMismatch:
        return CollectiveMismatch(
            f"rank {self.rank}: {req.what} (tag {req.tag}) expected {len(req.into)} bytes, "
            f"peer {source} sent {got}", rank=self.rank, peer=source, operation=req.what)

    def _deliver(self, source: int, tag: int, nbytes: int,
                 fill: Callable[[memoryview], None]) -> None:
        """A message has arrived: into the oldest matching posted receive, or queued."""
        with self._lock:
            req = next((r for r in self._posted
                        if r.tag == tag and r.src in (None, source)), None)
            if req is not None:
                self._posted.remove(req)
            else:  # queued in arrival order now, filled below: a receive posted meanwhile
                early = _Early(source, tag, nbytes)  # takes it and waits for its bytes
                self._unexpected.append(early)
        if req is None:
            try:
                fill(memoryview(early.buf))
            except BaseException as e:
                early.fail(e if isinstance(e, AuthError) and isinstance(e, CollectiveError)
                           else PeerLost(f"peer {source} failed in the middle of a message "
                                         f"({e})", rank=self.rank, peer=source))
                raise
            early.ready.set()
            return
        try:
            if len(req.into) != nbytes:
                scratch = bytearray(nbytes)
                fill(memoryview(scratch))
                req._finish(None, self._size_error(req, source, nbytes))
                return
            fill(req.into)
        except BaseException as e:  # the receive fails with the link (never left posted)
            req._finish(None, e if isinstance(e, CollectiveError) else PeerLost(
                f"rank {self.rank}: {req.what} (tag {tag}): peer {source} failed in the "
                f"middle of a message ({e})", rank=self.rank, peer=source,
                operation=req.what))
            raise
        req._finish(source, None)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                ready, _, _ = select.select([self._listener], [], [], 0.2)
                if not ready:
                    continue
                conn, who = self._listener.accept()
            except OSError:
                return  # listener closed
            # Each connection is vetted in a thread of its own with a deadline, and one
            # address holds a bounded number unvetted: strangers never delay a peer.
            self._admission.admit(conn, str(who[0]))
            threading.Thread(target=self._reader, args=(conn, str(who[0])), daemon=True,
                             name=f"terascale-{self.name}-read-{self.rank}").start()

    def _vet(self, conn: socket.socket, deadline: float) -> tuple[int, _Link]:
        """The handshake on the pair's secret, then the sealed hello and mode agreement."""
        (source,) = _HELLO.unpack(recv_exact(conn, _HELLO.size, deadline))
        if not 0 <= source < self.size or source == self.rank:
            raise ValueError(f"bad rank {source}")
        secret = self._secret_with(source)
        label = self._label(source, self.rank)
        nonces = accept_handshake(conn, secret, deadline)
        channel = Channel(secret, nonces, dialer=False, purpose=f"hello|{label}")
        hello = recv_hello(channel, conn, deadline, f"rank {self.rank}: a peer's hello")
        if hello.get("rank") != source or hello.get("group") != self.name:
            raise AuthError(f"unexpected hello {hello!r}")
        cipher = agree_cipher(hello.get("ciphers"), self.security)
        channel.send(conn, {"security": self.security, "cipher": cipher}, deadline)
        if hello.get("security") != self.security:
            raise AuthError(f"rank {source} offers {hello.get('security')} point-to-point "
                            f"links, this rank runs {self.security}")
        return source, _Link(SecureLink(conn, secret, nonces, label, dialer=source,
                                        acceptor=self.rank, rank=self.rank, peer=source,
                                        encrypt=self.security == "encrypt", cipher=cipher))

    def _reader(self, conn: socket.socket, who: str) -> None:
        try:
            source, link = self._vet(conn, time.monotonic() + _VET_S)
        except (AuthError, OSError, TimeoutError, ValueError, KeyError, TypeError,
                AttributeError, struct.error) as e:
            # not one of ours, or it failed the secret: drop it (counted, logged at close)
            self._admission.dropped(drop_reason(e, "sent a bad hello"), who)
            log.debug("rank %d: dropped a point-to-point connection from %s: %s",
                      self.rank, who, e)
            conn.close()
            return
        finally:
            self._admission.done(conn)
        inbox = _Inbox(source, link)
        with self._lock:
            if self._closed:
                conn.close()
                inbox.close()
                inbox.dispose()
                return
            self._incoming.append(link)
            self._inbox[source] = inbox  # a redialed link replaces it for waiters
        try:
            while True:
                with inbox.cond:  # a thread that waits on a receive from here reads itself
                    if inbox.ended:
                        return
                    if inbox.waiters:
                        inbox.cond.wait(_LINGER_S)
                        continue
                    linger = inbox.linger_until - time.monotonic()
                with inbox.read_lock:  # what came with nobody waiting for it
                    if inbox.ended or self._read_one(inbox, 0.0):
                        continue
                with inbox.cond:
                    if inbox.waiters or inbox.ended:
                        continue
                    if linger > 0:  # a waiter was here just now: likely back soon
                        inbox.cond.wait(linger)
                        continue
                    inbox.polling = True
                try:
                    # idle between messages for as long as it likes; a waiter's kick ends it
                    inbox.poll_with_kick()
                finally:
                    with inbox.cond:
                        inbox.polling = False
        finally:
            inbox.close()
            inbox.dispose()
            with self._lock:
                if self._inbox.get(source) is inbox:
                    del self._inbox[source]

    def _read_one(self, inbox: _Inbox, deadline: float | None) -> bool:
        """Read one message from ``inbox``'s link and deliver it, if one begins by
        ``deadline`` (0.0: only one already there); False if none did. The caller holds
        ``inbox.read_lock``. A failed link fails its source's receives (and returns True)."""
        link, source = inbox.link, inbox.source
        head = bytearray(_HEAD.size)
        view = memoryview(head)
        try:
            while True:
                try:
                    got = link.secure.recv_into(view)
                except BlockingIOError:
                    if deadline is not None and time.monotonic() >= deadline:
                        return False
                    if not link.readable(deadline):
                        return False
                    continue
                if got == 0:
                    raise ConnectionError("connection closed")
                break
            if got < len(head):  # the rest of a header that began: the body's deadline
                link.read_into(view[got:], time.monotonic() + self.timeout)
            kind, tag, nbytes = _HEAD.unpack(head)
            if kind == _BYE:
                raise _Goodbye
            self._deliver(source, tag, nbytes, lambda v: link.read_into(
                v, time.monotonic() + self.timeout))
            return True
        except _Goodbye:
            error: CollectiveError = PeerLost(f"peer {source} shut its process group down",
                                              rank=self.rank, peer=source)
        except AuthError as e:  # LinkTampered: the link stays refused
            if link.secure.ended_inside_record():  # a sender that died in mid-message
                error = PeerLost(f"peer {source} closed the connection in the middle of a "
                                 "message: its process died or aborted (or the path cut "
                                 "it)", rank=self.rank, peer=source)
            else:
                error = e if isinstance(e, CollectiveError) else PeerLost(
                    str(e), rank=self.rank, peer=source)
        except TimeoutError:
            error = PeerTimeout(f"Timed out after {self.timeout:g} s: peer {source} stalled "
                                "in the middle of a message", rank=self.rank, peer=source)
        except (OSError, ConnectionError) as e:
            error = PeerLost(f"peer {source} closed the connection ({e}): its process died "
                             "or aborted", rank=self.rank, peer=source)
        inbox.close()
        self._fail_source(source, error)
        return True

    def _read_until(self, req: Request, until: float | None = None) -> None:
        """Read ``req``'s source's link in this thread until ``req`` completes (its reader
        thread parked meanwhile), or its deadline passes, or ``until`` (a caller's shorter
        wait) passes with no message begun; returns at once when no link from there is up
        yet (the reader thread then delivers the first message)."""
        with self._lock:
            inbox = self._inbox.get(req.src)  # type: ignore[arg-type]
        if inbox is None or not inbox.enter():
            return
        try:
            # bounded: a thread that already reads this link (a wait inside a receive's
            # callback) must not wait on itself past the deadline
            end = req.deadline if until is None else min(req.deadline, until)
            if not inbox.read_lock.acquire(timeout=max(end - time.monotonic(), 0.0)):
                return
            try:
                while not req.done() and not inbox.ended:
                    now = time.monotonic()
                    left = req.deadline - now
                    if left <= 0:
                        self._expire_now()
                        return
                    if until is not None and now >= until:
                        return  # the caller's own wait ran out (the receive stays posted)
                    self._read_one(inbox, now + min(left, 1.0, end - now))
            finally:
                inbox.read_lock.release()
        finally:
            inbox.leave()

    def _fail_source(self, source: int, error: CollectiveError) -> None:
        with self._lock:
            self._gone.setdefault(source, error)
            all_gone = len(self._gone) >= self.size - 1
            failed = [r for r in self._posted
                      if r.src == source or (r.src is None and all_gone)]
            for r in failed:
                self._posted.remove(r)
        for r in failed:
            r._finish(None, type(error)(f"rank {self.rank}: {r.what} from peer {source} "
                                        f"(tag {r.tag}): {error}", rank=self.rank,
                                        peer=source, operation=r.what))

    # -- deadlines --------------------------------------------------------------------------
    def _deadline_loop(self) -> None:
        with self._lock:
            while not self._closed:
                while self._deadlines and self._deadlines[0][2].done():
                    heapq.heappop(self._deadlines)
                wait = self._deadlines[0][0] - time.monotonic() if self._deadlines else 1.0
                if wait > 0:
                    self._wake.wait(min(wait, 1.0))
                    continue
                self._lock.release()
                try:
                    self._expire_now()
                finally:
                    self._lock.acquire()

    def _expire_now(self) -> None:
        now = time.monotonic()
        with self._lock:
            late = [r for r in self._posted if r.deadline <= now]
            for r in late:
                self._posted.remove(r)
        for r in late:
            peer = "any peer" if r.src is None else f"peer {r.src}"
            r._finish(None, PeerTimeout(
                f"Timed out: rank {self.rank} waited past its deadline in {r.what} from "
                f"{peer} (tag {r.tag}, {len(r.into)} bytes): no matching send arrived",
                rank=self.rank, peer=r.src, operation=r.what))

    # -- shutdown ---------------------------------------------------------------------------
    def close(self, timeout: float = 2.0) -> None:
        """Say goodbye to every peer we sent to, fail the receives still posted, stop.

        Parameters
        ----------
        timeout
            Seconds to spend on the goodbyes at most (default 2).
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            posted, self._posted = self._posted, []
            incoming, self._incoming = self._incoming, []
            inboxes, self._inbox = list(self._inbox.values()), {}
            self._wake.notify_all()
        for inbox in inboxes:
            inbox.retire()
        for link in list(self._out.values()):
            try:
                link.send_all([_HEAD.pack(_BYE, 0, 0)], time.monotonic() + 0.5)
            except (OSError, CollectiveError):
                pass
            link.close()
        self._out.clear()
        self._listener.close()
        self._admission.shut_all()
        line = self._admission.summary(f"rank {self.rank}", f"to the {self.name} port")
        if line is not None:
            log.info("%s", line)
        for conn in incoming:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        for r in posted:
            r._finish(None, PeerLost(f"rank {self.rank}: {r.what} (tag {r.tag}) still "
                                     "pending when the process group shut down",
                                     rank=self.rank, peer=r.src, operation=r.what))
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout)


class _Goodbye(Exception):
    """The peer's last message: it shut its group down."""


class _Inbox:
    """One incoming link's reading: whoever holds ``read_lock`` reads from it. Its reader
    thread polls it while nobody waits on a receive from there; a thread that waits on one
    (:meth:`PointToPoint._read_until`) kicks the reader out of its poll, parks it, reads the
    link itself and lets it go on when done: the message reaches the waiting thread with
    no hand-off between threads."""

    def __init__(self, source: int, link: _Link) -> None:
        self.source, self.link = source, link
        self.read_lock = threading.Lock()
        self.cond = threading.Condition(threading.Lock())
        self.waiters = 0  # threads reading (or about to) in place of the reader
        self.polling = False  # the reader is in (or entering) its poll
        self.linger_until = 0.0  # the reader leaves the link to waiters until then
        self.ended = False
        self._kick = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def enter(self) -> bool:
        """A waiter takes over (False: the link has ended)."""
        with self.cond:
            if self.ended:
                return False
            self.waiters += 1
            if self.polling:
                self._wake_reader()
        return True

    def _wake_reader(self) -> None:  # under self.cond
        if self._kick >= 0:
            os.eventfd_write(self._kick, 1)

    def leave(self) -> None:
        # The reader is not woken: it checks the link again within _LINGER_S, and goes
        # back to polling it once no waiter came for that long. (A reader woken after every
        # message would cost a thread switch a message, as much as reading it in the reader.)
        with self.cond:
            self.waiters -= 1
            self.linger_until = time.monotonic() + _LINGER_S

    def poll_with_kick(self) -> None:
        """Until the link has something to read, or a waiter kicks (or the link ends)."""
        fd = self.link.secure.fileno()
        kick = self._kick  # only the reader disposes of it, after its last poll
        if fd < 0 or kick < 0:
            return
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        poller.register(kick, select.POLLIN)
        for f, _ in poller.poll():
            if f == kick:
                try:
                    os.eventfd_read(kick)
                except BlockingIOError:
                    pass

    def close(self) -> None:
        """The link has ended: close it, and end the reader's wait."""
        with self.cond:
            if self.ended:
                return
            self.ended = True
            self.cond.notify_all()
            self._wake_reader()
        self.link.close()

    def dispose(self) -> None:
        """The reader's last act: its kick descriptor goes."""
        with self.cond:
            kick, self._kick = self._kick, -1
        if kick >= 0:
            os.close(kick)

    def retire(self) -> None:
        """Shut the link down (its reader sees the end and closes it)."""
        try:
            self.link.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        with self.cond:
            self.cond.notify_all()
            self._wake_reader()


class _Link:
    """Blocking, deadline-bounded sends and reads over a non-blocking
    :class:`~._secure.SecureLink` (the point-to-point threads block; the mesh does not)."""

    def __init__(self, secure: SecureLink) -> None:
        self.secure = secure
        secure.setblocking(False)

    def send_all(self, views: list[bytes | memoryview], deadline: float) -> None:
        """Every byte of ``views`` into the kernel by ``deadline``; TimeoutError otherwise."""
        pending = [memoryview(v).cast("B") for v in views if len(v)]
        while pending:
            try:
                drop_sent(pending, self.secure.sendmsg(pending))
            except BlockingIOError:
                pass
            if pending:
                self._wait(False, deadline)

    def read_into(self, view: memoryview, deadline: float | None) -> None:
        """Fill ``view`` by ``deadline`` (None: wait as long as it takes); TimeoutError,
        ConnectionError at the end of the stream, LinkTampered when a record fails."""
        got, n = 0, len(view)
        while got < n:
            try:
                k = self.secure.recv_into(view[got:])
            except BlockingIOError:
                self._wait(True, deadline)
                continue
            if k == 0:
                raise ConnectionError(f"connection closed after {got} of {n} bytes")
            got += k

    def read(self, n: int, deadline: float | None) -> bytes:
        buf = bytearray(n)
        self.read_into(memoryview(buf), deadline)
        return bytes(buf)

    def readable(self, deadline: float | None) -> bool:
        """Whether the socket has bytes by ``deadline`` (None: until it does)."""
        try:
            self._wait(True, deadline)
        except TimeoutError:
            return False
        return True

    def _wait(self, readable: bool, deadline: float | None) -> None:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError("deadline passed")
        fd = self.secure.fileno()
        if fd < 0:
            raise ConnectionError("link closed")
        poller = select.poll()  # not select(): a process may hold more than 1024 files
        poller.register(fd, select.POLLIN if readable else select.POLLOUT)
        if not poller.poll(None if left is None else max(int(left * 1000), 1)):
            raise TimeoutError("deadline passed")

    def shutdown(self, how: int) -> None:
        self.secure.shutdown(how)

    def close(self) -> None:
        self.secure.close()
