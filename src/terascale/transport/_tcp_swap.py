"""Two ranks swap one frame each over their TCP link: the per-call path of small collectives.

A two-rank allreduce of one chunk, and a two-rank barrier, are one frame each way
(:mod:`terascale.collectives._pair`: the tree, the ring and halving/doubling of two ranks
alike). Building a :class:`~._tcp_exchange.TcpExchange` for
them -- queues, per-message objects, epoll registration, a header packed per call -- costs
more than moving 4 KiB between hosts. :class:`TcpSwap` is that collective's link made once
per communicator and shape: the header is packed once (only the sequence number changes),
our frame goes out in one ``sendmsg`` of header and payload, theirs comes in with
``recvmsg_into`` straight into the caller's buffers, and the arrived header is checked by
one comparison with ours (a peer of the same collective sends the very same bytes). That is
what Open MPI's TCP BTL does for a short message: one ``writev``, ``poll``/``recv``, add.

While their frame has not arrived it polls the socket without sleeping for up to
``SPIN_S`` (:mod:`._spin`; none while the host has more runnable tasks than cores,
:func:`~._spin.oversubscribed`), then sleeps in ``poll`` on that one socket for up to
``CORE_SLEEP_S`` (the compiled shared-memory core's bound on the same sleep), woken by the
frame. Handing a late frame to the exchange at once instead would cost its construction,
epoll registration and Python loop on every wait, which on an oversubscribed host is half
of the calls.
Anything else -- a send the kernel took only in part, a frame still missing after the
sleep, a header that differs (an ABORT, another collective, a closed link) -- hands the
frames as far as they got to an exchange (:meth:`TcpExchange.resume`), which finishes them
with every failure check and the deadline of the collective: a dead or stalled peer is
still ``PeerLost`` or ``PeerTimeout`` naming rank, peer and operation, a mismatch still
``CollectiveMismatch``. Authenticated links (:class:`~._secure.SecureLink`) take this path
too: their calls behave as a socket's, a record that fails its tag stops the swap and the
exchange raises it (``LinkTampered``) and aborts the job.
"""

from __future__ import annotations

import os
import select
import socket
import time
from typing import TYPE_CHECKING, Any

from .._errors import CollectiveError
from ._frames import DATA, HEADER, pack_desc, pack_header, set_seq
from ._spin import CORE_SLEEP_S, SPIN_S, YIELD_AFTER_S, oversubscribed
from .base import Exchange, Swap

if TYPE_CHECKING:
    from .tcp import TcpTransport

__all__ = ["TcpSwap"]


class TcpSwap(Swap):
    """One frame each way between this rank and ``peer`` (numbered in the communicator)
    for collective ``desc`` of ``nbytes`` payload bytes on communicator ``context``."""

    __slots__ = ("_got", "_head", "_mine", "_peer_rank", "_poll", "_sock", "mesh", "nbytes",
                 "peer")

    def __init__(self, mesh: TcpTransport, sock: socket.socket, peer: int, peer_rank: int, desc: str,
                 context: int, nbytes: int) -> None:
        self.mesh = mesh  # its byte counters and its record of half-sent frames
        self._sock = sock
        self.peer = peer
        self._peer_rank = peer_rank
        self.nbytes = nbytes
        self._mine = bytearray(pack_header(DATA, 0, nbytes, pack_desc(desc), context))
        self._head = bytearray(HEADER)  # theirs lands here
        self._got = memoryview(self._head)
        self._poll: select.poll | None = None  # made on the first wait

    def start(self, seq: int, send: Any, into: Any) -> tuple[int, int] | None:
        """Collective ``seq``: send ``send`` (``nbytes``, any contiguous buffer), receive the
        peer's payload into ``into``. None when both frames completed and theirs is ours
        but for the payload; else ``(sent, got)``, bytes so far, for :meth:`finish`."""
        mine, sock, mesh = self._mine, self._sock, self.mesh
        set_seq(mine, seq)
        total = HEADER + self.nbytes
        try:
            sent = sock.sendmsg([mine, send] if self.nbytes else [mine])
        except OSError:  # full (BlockingIOError) or broken: the exchange sends or reports it
            sent = 0
        mesh.bytes_sent += sent
        if 0 < sent < total:
            mesh.midframe[self._peer_rank] = total - sent
        bufs = [self._got, into] if self.nbytes else [self._got]
        got = 0
        end = 0.0
        while True:
            try:
                n = sock.recvmsg_into(bufs)[0]
            except BlockingIOError:
                n = -1
            except (OSError, CollectiveError):  # e.g. a tampered record: the exchange reports it
                break
            if n == 0:  # closed: the exchange reads it again and reports the lost peer
                break
            if n > 0:
                got += n
                if got == total:
                    break
                h = min(got, HEADER)
                bufs = [self._got[h:], memoryview(into).cast("B")[got - h:]] if h < HEADER \
                    else [memoryview(into).cast("B")[got - HEADER:]]
                continue
            # Nothing yet: spin, then sleep until it comes, both bounded (the exchange takes
            # over with the deadline after). Not while our frame is unsent (the exchange
            # sends it while it waits) or theirs is another collective's.
            if sent < total or (got >= HEADER and self._head != mine):
                break
            now = time.monotonic()
            if end == 0.0:
                end = now + (0.0 if SPIN_S <= 0 or oversubscribed() else SPIN_S)
            if now < end:
                if now >= end - SPIN_S + YIELD_AFTER_S:
                    os.sched_yield()  # the peer may be queued on our core (_spin)
                continue
            if now >= end + CORE_SLEEP_S:
                break
            poller = self._poll
            if poller is None:
                poller = self._poll = select.poll()
                poller.register(sock, select.POLLIN)
            poller.poll((end + CORE_SLEEP_S - now) * 1e3)
        mesh.bytes_received += got
        if got == total and sent == total and self._head == mine:
            return None
        return sent, got

    def finish(self, ex: Exchange, pending: tuple[int, int], send: Any, into: Any) -> None:
        """Complete what :meth:`start` left (``pending``) in ``ex``, the collective's
        exchange, with all its checks; raises as the exchange does."""
        sent, got = pending
        total = HEADER + self.nbytes
        unsent: list[memoryview] = []
        if sent < total:
            views = [memoryview(self._mine)]
            if self.nbytes:
                views.append(memoryview(send).cast("B"))
            unsent = [views[0][sent:], *views[1:]] if sent < HEADER else \
                [views[1][sent - HEADER:]]
        ex.resume(self.peer, unsent, memoryview(into).cast("B"),  # type: ignore[attr-defined]
                  bytes(self._head), got)
        ex.run()
