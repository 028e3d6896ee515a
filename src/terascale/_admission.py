"""Admission of unauthenticated connections: per-source caps, eviction, one-line drop summary.

Both of our servers that strangers can reach (the rendezvous and every rank's peer port)
vet each connection in its own thread with a short deadline, so an idle stranger costs one
thread for a few seconds and delays nobody. What they share is this bookkeeping:

* every accepted connection is *pending* until it authenticates or ends (:meth:`done`);
* a source address holding more than ``per_source`` pending connections has its oldest
  shut down, and beyond ``total`` pending in all the oldest of all goes: a slow-loris
  evicts its own connections, while a genuine peer authenticates in milliseconds (and
  retries, should it be unlucky);
* shutting a connection down (not closing it) wakes the thread blocked on it, which then
  counts the drop (:meth:`dropped`) and closes it: one owner per socket;
* drops are counted by reason and summarized in one line (:meth:`summary`), not logged one
  line per client (a flood of a thousand strangers is one warning).
"""

from __future__ import annotations

import socket
import threading
from collections import Counter, OrderedDict

__all__ = ["Admission"]


class Admission:
    """The pending (unauthenticated) connections of one listener, oldest first."""

    def __init__(self, *, per_source: int, total: int | None = None) -> None:
        self.per_source, self.total = per_source, total
        self._lock = threading.Lock()
        self._pending: OrderedDict[int, tuple[str, socket.socket]] = OrderedDict()
        self._by_source: Counter[str] = Counter()
        self._drops: Counter[str] = Counter()
        self._drop_sources: set[str] = set()

    def admit(self, conn: socket.socket, source: str) -> None:
        """Track ``conn`` from ``source``; evict the oldest over the caps."""
        with self._lock:
            self._pending[id(conn)] = (source, conn)
            self._by_source[source] += 1
            over_source = self._by_source[source] > self.per_source
            over_all = self.total is not None and len(self._pending) > self.total
        if over_source:
            self.evict(source)
        elif over_all:
            self.evict(None)

    def done(self, conn: socket.socket) -> None:
        """``conn`` authenticated or ended: no longer pending (idempotent)."""
        with self._lock:
            entry = self._pending.pop(id(conn), None)
            if entry is not None:
                self._by_source[entry[0]] -= 1
                if not self._by_source[entry[0]]:
                    del self._by_source[entry[0]]

    def evict(self, source: str | None = None) -> None:
        """Shut down the oldest pending connection of ``source`` (None: of all), if any."""
        with self._lock:
            key = next((k for k, (s, _) in self._pending.items() if source in (None, s)), None)
            # no longer pending from here: the next eviction takes the next oldest, even
            # before the victim's own thread has seen the shutdown
            victim = self._pending.pop(key) if key is not None else None
            if victim is not None:
                self._by_source[victim[0]] -= 1
                if not self._by_source[victim[0]]:
                    del self._by_source[victim[0]]
        if victim is not None:
            _shut(victim[1])

    def shut_all(self) -> None:
        """Shut down every pending connection (the listener is done: strangers must go)."""
        with self._lock:
            pending = [c for _, c in self._pending.values()]
        for c in pending:
            _shut(c)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def dropped(self, reason: str, source: str) -> None:
        """Count one dropped connection from ``source`` and why (for :meth:`summary`)."""
        with self._lock:
            self._drops[reason] += 1
            self._drop_sources.add(source)

    @property
    def drops(self) -> int:
        """How many connections were dropped so far."""
        with self._lock:
            return sum(self._drops.values())

    def summary(self, who: str, where: str = "") -> str | None:
        """``WHO: dropped N connection(s) [WHERE] from K address(es) (n1 why1, ...)``, or
        None when nothing was dropped."""
        with self._lock:
            if not self._drops:
                return None
            why = ", ".join(f"{n} {reason}" for reason, n in self._drops.most_common())
            total, sources = sum(self._drops.values()), len(self._drop_sources)
        at = f" {where}" if where else ""
        return f"{who}: dropped {total} connection(s){at} from {sources} address(es) ({why})"


def _shut(conn: socket.socket) -> None:
    try:  # wakes the thread blocked on it; that thread counts and closes it
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
