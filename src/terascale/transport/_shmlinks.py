"""The shared-memory group's failure detector: the members' point-to-point links, polled.

The segment itself cannot tell a slow member from a dead one, so a waiting member watches
the links of the group's :class:`~terascale.transport.base.Exchange` (TCP) through the
exchange's public failure state only (``waitable`` or ``wait``, ``check_peer``): a closed link is a
dead process (:class:`~terascale._errors.PeerLost`), an ABORT frame a failure elsewhere,
a frame of another collective a :class:`~terascale._errors.CollectiveMismatch`; all of
them raised by ``check_peer``. A frame of this collective's own traffic (a leader's TCP
phase of the hierarchical schedule) is no news: that link goes quiet, unwatched until
the next barrier (:meth:`LinkWatch.rewatch`), so it is not read again and again.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable, Sequence

from .base import Exchange

__all__ = ["LinkWatch"]


class LinkWatch:
    """Polls the links to ``peers`` (ranks of ``ex``) for failures."""

    def __init__(self, ex: Exchange, peers: Sequence[int]) -> None:
        self._poll = select.poll()
        self._fd_peer = {}
        fds = [ex.waitable(peer) for peer in peers]
        # A transport without descriptors (threads of one process) is asked through wait().
        self._peers: list[int] | None = None if all(fd is not None for fd in fds) else \
            list(peers)
        for peer, fd in zip(peers, fds):
            if self._peers is None:
                assert fd is not None
                self._poll.register(fd, select.POLLIN)
                self._fd_peer[fd] = peer
        self._quiet: set[int] = set()

    def check(self, ex: Exchange, arrived: Callable[[], bool], timeout_ms: int = 0) -> bool:
        """Read what the links have (waiting up to ``timeout_ms``) and raise what it says;
        True when ``arrived()`` turned true meanwhile (stop reading)."""
        if self._peers is not None:
            watched = [p for p in self._peers if p not in self._quiet]
            if not watched:
                time.sleep(timeout_ms / 1000)
                return arrived()
            for peer in ex.wait(watched, timeout_ms / 1000):
                if ex.check_peer(peer, arrived):
                    self._quiet.add(peer)
                elif arrived():
                    return True
            return False
        for fd, _ in self._poll.poll(timeout_ms):
            if ex.check_peer(self._fd_peer[fd], arrived):
                self._poll.unregister(fd)  # this collective's own traffic: quiet for now
                self._quiet.add(fd)
            elif arrived():
                return True
        return False

    def rewatch(self) -> None:
        """Watch the links that went quiet again (at the end of a barrier)."""
        if self._quiet and self._peers is not None:
            self._quiet.clear()
        elif self._quiet:
            for fd in self._quiet:
                self._poll.register(fd, select.POLLIN)
            self._quiet.clear()
