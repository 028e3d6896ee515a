"""What went wrong in a TCP collective, and whom to blame: the errors an exchange raises.

Every failure names this rank, the peer and the operation (``PeerLost``, ``PeerTimeout``,
``CollectiveMismatch`` from :mod:`terascale._errors`). A peer that failed first sends an
ABORT frame whose payload (JSON) names the rank where the failure began and its message,
so every rank reports the root cause rather than the echo of a closed connection -- the
stop-everything rule of Gloo and Horovod, with the cause kept. Kept apart from the
scheduling loop (:mod:`._tcp_exchange`) so that the loop reads as I/O and this module as
the one owner of the error wording that tests and users match on.
"""

from __future__ import annotations

import json
import select
import time
from typing import TYPE_CHECKING

from .._errors import CollectiveError, CollectiveMismatch, LinkTampered, PeerLost, PeerTimeout
from ._frames import ABORT, DATA, MAX_ABORT, show_desc, unpack_header
from ._tcp_stream import PendingRecv

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ._tcp_exchange import Route

__all__ = ["ExchangeBlame"]

_ERROR_TYPES: dict[str, type[CollectiveError]] = {
    "PeerLost": PeerLost, "PeerTimeout": PeerTimeout, "CollectiveMismatch": CollectiveMismatch,
    "LinkTampered": LinkTampered,
}


class ExchangeBlame:
    """The errors of one collective (``what``, called as ``#seq desc``) on ``route``."""

    __slots__ = ("origin", "what", "seq", "desc", "desc_field", "context", "route")

    def __init__(self, origin: int, what: str, seq: int, desc: str, desc_field: bytes,
                 context: int, route: Route) -> None:
        self.origin = origin
        self.what = what
        self.seq = seq
        self.desc = desc
        self.desc_field = desc_field
        self.context = context
        self.route = route

    def who(self, peer: int) -> str:
        g = self.route.members[peer]
        return f"rank {g}" + (f" (rank {peer} of this communicator)" if self.route.renumbered
                              else "")

    def check_header(self, peer: int, item: PendingRecv) -> None:
        """Raise unless ``item``'s header announces this collective's frame of its size."""
        parsed = unpack_header(item.header)
        if parsed is None:
            raise self.mismatch(peer, "sent bytes that are not a terascale frame "
                                      "(the previous collective's sizes disagreed)")
        kind, seq, nbytes, desc, context = parsed
        if kind == ABORT:
            raise self.aborted(peer, bytes(item.into[: min(item.pgot, nbytes)]), nbytes)
        if kind != DATA:
            raise self.mismatch(peer, f"sent an unknown frame kind {kind}")
        if context != self.context:
            raise self.mismatch(peer, f"called #{seq} {show_desc(desc)} on another communicator")
        if seq != self.seq or desc != self.desc_field:
            raise self.mismatch(peer, f"called #{seq} {show_desc(desc)}")
        if nbytes != len(item.into):
            raise self.mismatch(peer, f"sent {nbytes} bytes where {len(item.into)} were "
                                      f"expected for {show_desc(desc)}")
        item.checked = True

    def aborted(self, peer: int, got: bytes, nbytes: int) -> CollectiveError:
        """The error an ABORT frame from ``peer`` carries (``got``: its payload so far; the
        rest, up to ``MAX_ABORT`` bytes, is read here for at most a second)."""
        nbytes = min(nbytes, MAX_ABORT)
        got = got[:nbytes]
        sock = self.route.socks[peer]
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
        members = self.route.members
        try:
            info = json.loads(got)
            cls = _ERROR_TYPES.get(info.get("type"), PeerLost)
            origin, root = int(info.get("origin", members[peer])), str(info.get("message"))
        except (ValueError, TypeError):
            cls, origin, root = PeerLost, members[peer], "no reason given"
        err = cls(f"rank {self.origin}: {self.what} aborted because rank {origin} failed: "
                  f"{root}", rank=self.origin, peer=origin, operation=self.what)
        err.origin, err.root_message = origin, root  # type: ignore[attr-defined]
        return err

    def lost(self, peer: int, why: str) -> CollectiveError:
        err = PeerLost(f"rank {self.origin}: {self.what} lost peer {self.who(peer)} ({why})",
                       rank=self.origin, peer=self.route.members[peer], operation=self.what)
        # The rank that failed is the lost one: the ABORT we send names it, not us.
        err.origin = self.route.members[peer]  # type: ignore[attr-defined]
        return err

    def mismatch(self, peer: int, theirs: str) -> CollectiveMismatch:
        return CollectiveMismatch(
            f"rank {self.origin}: {self.what} mismatch: this rank called #{self.seq} "
            f"{self.desc}, but {self.who(peer)} {theirs}",
            rank=self.origin, peer=self.route.members[peer], operation=self.what)

    def timeout(self, receiving: Iterable[int], sending: Iterable[int],
                started: float) -> PeerTimeout:
        """The deadline passed with frames still to receive from / send to these peers."""
        receiving, sending = list(receiving), list(sending)
        waits = [f"{self.who(p)} (receive)" for p in receiving] + \
                [f"{self.who(p)} (send)" for p in sending if p not in receiving]
        first = receiving[0] if receiving else sending[0] if sending else None
        return PeerTimeout(f"rank {self.origin}: {self.what} timed out after "
                           f"{time.monotonic() - started:.1f} s waiting for "
                           f"{', '.join(waits)}", rank=self.origin,
                           peer=None if first is None else self.route.members[first],
                           operation=self.what)
