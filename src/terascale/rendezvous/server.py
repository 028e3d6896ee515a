"""The rendezvous server: hands out ranks and peer addresses to the workers of one job.

Run by ``terascale run`` (and by rank 0 under torchrun/mpirun variables, and by the Spark and
Ray drivers). It is deliberately small and paranoid:

* every client proves it knows the job secret (HMAC) before anything else is read, and its
  request and the reply travel sealed in the channel bound to that handshake
  (:class:`terascale._auth.Channel`), so nobody on the path reads or alters them;
* clients are served concurrently, each with a few seconds to finish its handshake and
  request, so an idle or slow stranger delays nobody; a request is at most 64 KiB,
  whatever its length prefix claims;
* unauthenticated connections are capped per source address: when one address holds too
  many, its oldest is closed (a slow-loris evicts itself, a genuine worker completes its
  handshake in milliseconds and retries if it was unlucky); dropped clients are counted and
  summarized in one log line, not one line each (:class:`terascale._admission.Admission`,
  shared with the peer ports);
* slots are first-come: a second copy of a worker (same slot, e.g. a speculative Hadoop
  mapper) is told that its slot is taken, and the job is not disturbed;
* a worker that waits too long is told how many workers arrived and which slots are missing;
* the job's link security is the strongest any worker asked for (``"integrity"`` or
  ``"encrypt"``): the server can raise a worker's request, never lower it, and every worker
  checks that itself (:mod:`terascale.rendezvous.client`).
"""

from __future__ import annotations

import logging
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from .._admission import Admission
from .._auth import Channel, accept_handshake, drop_reason
from .._errors import LinkTampered
from .._units import format_rate
from ..transport import LINK_MODES as MODES
from ..transport import stronger_mode as stronger

__all__ = ["RendezvousServer", "host_layout"]

log = logging.getLogger("terascale.rendezvous")

_HANDSHAKE_S = 5.0  # time a client gets to authenticate and send its request
_PER_SOURCE = 64  # unauthenticated connections one address may hold; more evict its oldest
_MAX_PENDING = 1024  # unauthenticated connections in all; more evict the oldest of all


@dataclass
class _Worker:
    slot: int
    addr: str
    endpoint: str
    host: str
    pid: int
    conn: socket.socket
    security: str = "integrity"
    link_rate: float | None = None
    transport: str = "tcp"


class RendezvousServer:
    """Assembles a job of ``size`` workers; ``address`` is what workers connect to.

    Parameters
    ----------
    size
        Workers to wait for.
    secret
        The job secret every worker must prove (bytes).
    host
        The address to listen on (default loopback: workers on this machine).
    port
        The port (default 0: any free one; read ``address``).
    job
        The job id (default None: a fresh random one).
    """

    def __init__(self, size: int, secret: bytes, *, host: str = "127.0.0.1", port: int = 0,
                 job: str | None = None) -> None:
        if size < 1:
            raise ValueError(f"size must be >= 1, got {size}")
        self.size = size
        self.secret = secret
        self.job = job or secrets.token_hex(8)
        self.rejected = 0  # connections dropped (auth failures, garbage, duplicates)
        self.replied = 0  # workers sent the complete rank table
        self._admission = Admission(per_source=_PER_SOURCE, total=_MAX_PENDING)
        self._reported = 0
        self._lock = threading.Lock()
        self._workers: dict[int, _Worker] = {}
        self._table: list[dict[str, Any]] | None = None
        self._security = "integrity"
        self._link_rate: float | None = None
        self._cond = threading.Condition()
        self._closed = threading.Event()
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, port))
        except OSError as e:
            self._sock.close()
            raise OSError(e.errno, f"cannot listen on {host}:{port} for rendezvous "
                                   f"({e.strerror}); pick another port") from None
        self._sock.listen(512)
        self._sock.settimeout(0.5)  # here, not in the thread: close() may come first
        self.address: tuple[str, int] = self._sock.getsockname()[:2]
        self._thread = threading.Thread(target=self._serve, name="terascale-rendezvous",
                                        daemon=True)

    def start(self) -> RendezvousServer:
        self._thread.start()
        return self

    def summary(self) -> str | None:
        """One line on the connections dropped so far, or None when there were none."""
        return self._admission.summary("rendezvous")

    def _report(self) -> None:
        line = self.summary()
        total = self._admission.drops
        with self._lock:
            if line is None or total == self._reported:
                return
            self._reported = total
        log.warning("%s", line)

    def close(self) -> None:
        """Stop serving; the serving thread has ended on return (within its accept poll,
        0.5 s, at worst), so a launcher's next attempt can fork again (``launch._fork``).
        Clients being served finish or fail on their own deadlines."""
        self._report()
        self._closed.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the thread's accept at once
        except OSError:
            pass
        try:
            self._sock.close()
        except OSError:
            pass
        with self._cond:
            self._cond.notify_all()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def __enter__(self) -> RendezvousServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def complete(self) -> bool:
        return self._table is not None

    @property
    def waiting(self) -> list[int]:
        """The slots whose workers are waiting for the rest of the job (empty once complete)."""
        with self._cond:
            return [] if self._table is not None else sorted(self._workers)

    # -- serving ---------------------------------------------------------------------------
    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, who = self._sock.accept()
            except TimeoutError:
                continue
            except OSError as e:
                if self._closed.is_set():
                    return
                # EMFILE and friends: out of descriptors for now; evict and keep serving.
                log.debug("rendezvous: accept failed: %s", e)
                self._admission.evict(None)
                time.sleep(0.01)
                continue
            self._admission.admit(conn, str(who[0]))
            threading.Thread(target=self._client, args=(conn, who), daemon=True,
                             name="terascale-rendezvous-client").start()

    def _client(self, conn: socket.socket, who: tuple[Any, ...]) -> None:
        keep = False
        try:
            keep = self._handle(conn)
        except Exception as e:  # anything a hostile or broken client can cause
            self.rejected += 1
            self._admission.dropped(drop_reason(e), str(who[0]))
            log.debug("rendezvous: dropped client %s:%s: %s", who[0], who[1], e)
        finally:
            self._admission.done(conn)
            if not keep:
                conn.close()

    def _handle(self, conn: socket.socket) -> bool:
        step = time.monotonic() + _HANDSHAKE_S
        nonces = accept_handshake(conn, self.secret, step)
        self._admission.done(conn)  # it knows the secret: no longer a candidate for eviction
        channel = Channel(self.secret, nonces, dialer=False, purpose="rendezvous")
        try:
            req = channel.recv(conn, step, what="rendezvous request")
        except LinkTampered as e:  # tell the worker at once: it must not wait for a table
            channel.send(conn, {"ok": False, "kind": "auth",
                                "error": f"the rendezvous server refused the request: {e}"}, step)
            raise
        slot, size, timeout = int(req["slot"]), int(req["size"]), float(req["timeout"])
        addr, host = str(req["addr"]), str(req["host"])[:256]
        # (a request with a TCP port and no endpoint is a TCP worker's: host:port)
        endpoint = str(req["endpoint"]) if "endpoint" in req else f"{addr}:{int(req['port'])}"
        transport = str(req.get("transport", "tcp"))
        if size != self.size:
            channel.send(conn, {"ok": False, "kind": "config",
                             "error": f"this job has {self.size} workers, the worker was "
                                      f"started for {size}"}, step)
            return False
        if not 0 <= slot < self.size:
            channel.send(conn, {"ok": False, "kind": "config",
                             "error": f"slot {slot} is outside 0..{self.size - 1}"}, step)
            return False
        with self._cond:
            if slot in self._workers:
                self.rejected += 1
                first = self._workers[slot]
                channel.send(conn, {"ok": False, "kind": "slot_taken",
                                 "error": f"slot {slot} is already held by pid {first.pid} on "
                                          f"{first.host}; this copy is redundant"}, step)
                return False
            rate = req.get("link_rate")
            security = str(req.get("security"))
            if security not in MODES:
                channel.send(conn, {"ok": False, "kind": "config",
                                 "error": f"unknown link security {security!r}"}, step)
                return False
            me = _Worker(slot, addr, endpoint, host, int(req.get("pid", 0)), conn, security,
                         float(rate) if isinstance(rate, (int, float)) and rate > 0 else None,
                         transport)
            self._workers[slot] = me
            if len(self._workers) == self.size:
                # The strongest any worker asked for: one rank cannot downgrade the others.
                self._security = "plain"
                for w in self._workers.values():
                    self._security = stronger(self._security, w.security)
                # One link rate for the whole job, so that every rank's ``auto`` prices the
                # algorithms alike: the slowest any worker was told of (None: nobody was).
                rates = [w.link_rate for w in self._workers.values() if w.link_rate]
                self._link_rate = min(rates) if rates else None
                ordered = sorted(self._workers.values(), key=lambda w: w.slot)
                self._table = [{"addr": w.addr, "host": w.host, "transport": w.transport,
                                "endpoint": self.advertise(w.slot, w.addr, w.endpoint)}
                               for w in ordered]
                self._cond.notify_all()
                log.info("rendezvous: %s%s", host_layout([t["host"] for t in self._table]),
                         "" if self._link_rate is None else
                         f"; link rate {format_rate(self._link_rate)} (auto's cost model)")
            deadline = time.monotonic() + max(timeout, 0.1)
            while self._table is None and not self._closed.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.25))
                if self._table is None and _hung_up(conn):
                    # The worker died while waiting: free its slot for a restarted copy.
                    del self._workers[slot]
                    return False
            table = self._table
            if table is None:
                arrived = sorted(self._workers)
                missing = sorted(set(range(self.size)) - set(arrived))
                del self._workers[slot]
        reply_by = time.monotonic() + _HANDSHAKE_S
        if table is None:
            channel.send(conn, {"ok": False, "kind": "timeout",
                             "error": f"{len(arrived)} of {self.size} workers arrived within "
                                      f"{timeout:.1f} s; missing ranks {missing}"}, reply_by)
            return False
        if slot == 0:
            self._report()
        kinds = sorted({str(t["transport"]) for t in table})
        if len(kinds) > 1:  # every rank must link with the same transport (TERASCALE_TRANSPORT)
            by = {k: [i for i, t in enumerate(table) if t["transport"] == k] for k in kinds}
            channel.send(conn, {"ok": False, "kind": "config",
                                "error": "the ranks name different transports (TERASCALE_"
                                         "TRANSPORT): " + "; ".join(f"ranks {v} {k!r}" for k, v
                                                                    in by.items())}, reply_by)
            return False
        channel.send(conn, {"security": self._security, "ok": True, "rank": slot, "job": self.job,
                         "peers": table, "link_rate": self._link_rate}, reply_by)
        with self._cond:
            self.replied += 1
        return False

    def advertise(self, slot: int, addr: str, endpoint: str) -> str:
        """Where the other workers reach ``slot``: the endpoint it published (its
        transport's, opaque here; TCP's is ``host:port``), ``addr`` being its address as
        this server saw it. A subclass may route it elsewhere (a relay, a NAT's outside
        address); the links authenticate end to end, so a relay learns nothing and can
        change nothing.

        Parameters
        ----------
        slot
            The rank whose endpoint is asked for.
        addr
            Its address as this server saw the connection.
        endpoint
            The endpoint it published.
        """
        return endpoint


def host_layout(hosts: list[str]) -> str:
    """``4 ranks on 2 hosts: a:1f2e3d4c ranks 0-1, b:99aa0011 ranks 2-3`` from rank -> host.

    What the server logs (``terascale run -v`` shows it) once every rank has arrived: the
    check that hosts were told apart as the user expects (see ``terascale.init``'s
    ``host_id``).

    Parameters
    ----------
    hosts
        Every rank's host identity, in rank order.
    """
    ranks: dict[str, list[int]] = {}
    for r, h in enumerate(hosts):
        ranks.setdefault(h, []).append(r)

    def spans(rs: list[int]) -> str:  # [0, 1, 2, 5] -> "0-2,5"
        runs: list[list[int]] = []
        for r in rs:
            if runs and r == runs[-1][-1] + 1:
                runs[-1].append(r)
            else:
                runs.append([r])
        return ",".join(str(g[0]) if len(g) == 1 else f"{g[0]}-{g[-1]}" for g in runs)

    def plural(n: int, word: str) -> str:
        return f"{n} {word}{'s' if n != 1 else ''}"

    parts = [f"{h} {'rank' if len(rs) == 1 else 'ranks'} {spans(rs)}" for h, rs in ranks.items()]
    return f"{plural(len(hosts), 'rank')} on {plural(len(ranks), 'host')}: " + ", ".join(parts)


def _hung_up(conn: socket.socket) -> bool:
    """True when the client closed its end (it sends nothing after its request)."""
    try:
        conn.settimeout(0)
        return conn.recv(1, socket.MSG_PEEK) == b""
    except (TimeoutError, BlockingIOError):
        return False
    except OSError:
        return True
