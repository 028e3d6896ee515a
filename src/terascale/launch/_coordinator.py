"""Node 0's coordinator of a multi-node job: places the nodes, runs attempts, stops on failure.

Every node's launcher joins over a :mod:`._control` link and says how many workers it has
and which host it is; the coordinator gives each its place (the global rank of its first
worker, the job's size) and serves each attempt's workers' rendezvous
(:class:`terascale.rendezvous.RendezvousServer`, a fresh one per attempt). The first
failure anywhere stops every node; the one reported is the cause, not an echo: a node
whose ranks failed only because another did (``PeerLost``...) is a *secondary* report, and
the coordinator waits ``_SETTLE_S`` for the primary one before it decides -- the
stop-everything rule of Horovod and torchrun's elastic agent, with the blame kept.
"""

from __future__ import annotations

import queue
import socket
import sys
import threading
import time

from .._auth import Channel
from .._bind import bind_address, bind_error
from .._errors import ConfigError, RendezvousError
from ..rendezvous import RendezvousServer, host_layout
from ._blame import echoed
from ._control import ControlLink, admit_links, silence
from .launcher import LaunchOptions, free_port
from .runner import restarts

__all__ = ["Coordinator", "start_coordinator"]

_STOP_GRACE_S = 4.0  # after a stop, how long the coordinator waits for the nodes' reports
_SETTLE_S = 1.0  # after an echo of a failure (PeerLost...), how long to wait for its cause
_CAUSE_S = 2.0  # ... and then for the node of the rank the echo names, if it has not reported


def start_coordinator(rendezvous: tuple[str, int], bind: str | None, nnodes: int,
                      secret: bytes, opts: LaunchOptions) -> Coordinator:
    """Listen at ``rendezvous`` (on its host's address only, or on ``bind``) and start the
    coordinator's thread; a port that cannot be had is a ConfigError naming the flag."""
    host, port = rendezvous
    address = bind_address(host, bind=bind, what="--rendezvous host")
    listener = socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET,
                             socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((address, port))
    except OSError as e:
        listener.close()
        err = bind_error(e, address, port, host, "--bind 0.0.0.0")
        if err is not e:
            raise ConfigError(f"--rendezvous {host}:{port}: {err}") from None
        raise ConfigError(f"--rendezvous {host}:{port}: cannot listen on {address}:{port} "
                          f"({e.strerror}); pick another port") from None
    listener.listen(64)
    coordinator = Coordinator(listener, nnodes, secret, host, address, opts)
    coordinator.start()
    return coordinator


class Coordinator(threading.Thread):
    """Node 0's side: places the nodes, serves each attempt's rendezvous, stops on failure."""

    def __init__(self, listener: socket.socket, nnodes: int, secret: bytes, host: str,
                 bind: str, opts: LaunchOptions) -> None:
        super().__init__(daemon=True, name="terascale-coordinator")
        self._listener, self._nnodes, self._secret = listener, nnodes, secret
        self._host, self._bind, self._opts = host, bind, opts

    def run(self) -> None:
        inbox: queue.Queue = queue.Queue()
        links: dict[int, ControlLink] = {}
        hello: dict[int, dict] = {}
        try:
            self._accept(links, hello, inbox)
        except RendezvousError as e:
            for link in links.values():
                link.send({"kind": "done", "status": 1, "error": str(e)})
            return
        finally:
            self._listener.close()
        size = sum(hello[k]["nprocs"] for k in range(self._nnodes))
        hosts = [hello[k]["host"] for k in range(self._nnodes) for _ in range(hello[k]["nprocs"])]
        sys.stderr.write(f"terascale run: {self._nnodes} nodes, {host_layout(hosts)}\n")
        status, rank, node, tail = restarts(
            self._opts.max_restarts,
            lambda attempt: self._attempt(attempt, size, hello, links, inbox),
            lambda result: result[0] == 0)
        for link in links.values():
            link.send({"kind": "done", "status": status, "rank": rank, "node": node,
                       "tail": tail})
        time.sleep(0.5)  # let the verdicts leave before the links close
        for link in links.values():
            link.close()

    def _accept(self, links: dict[int, ControlLink], hello: dict[int, dict], inbox: queue.Queue) -> None:
        """Every node's control link, admitted concurrently (:func:`._control.admit_links`):
        an idle or slow stranger on this port holds one thread for a few seconds, nobody's
        turn."""
        lock = threading.Lock()

        def check(msg: dict) -> str | None:
            try:
                node, nprocs = int(msg["node"]), int(msg["nprocs"])
                str(msg["host"])
            except (KeyError, TypeError, ValueError):
                raise ValueError(f"bad hello {msg!r:.200}") from None
            if not 0 <= node < self._nnodes or nprocs < 1:
                return f"node rank {node} is not in 0..{self._nnodes - 1}"
            with lock:
                if node in hello:
                    return f"node rank {node} is taken"
            return None

        def take(conn: socket.socket, channel: Channel, msg: dict) -> bool:
            node = int(msg["node"])
            with lock:
                if node in hello:
                    return False
                hello[node] = {"nprocs": int(msg["nprocs"]), "host": str(msg["host"])[:256]}
                links[node] = ControlLink(conn, channel, node, inbox,
                                          silence(self._opts.timeout), f"node {node}")
            return True

        def complete() -> bool:
            with lock:
                return len(hello) == self._nnodes

        drops = admit_links(self._listener, self._secret, time.monotonic() + self._opts.timeout,
                            check, complete, take)
        if drops is not None:
            sys.stderr.write(f"{drops}\n")
        if not complete():
            with lock:
                missing = sorted(set(range(self._nnodes)) - set(hello))
            raise RendezvousError(f"nodes {missing} did not join within {self._opts.timeout:g} s")

    def _attempt(self, attempt: int, size: int, hello: dict[int, dict], links: dict[int, ControlLink],
                 inbox: queue.Queue) -> tuple[int, int | None, int | None, list[str]]:
        server = RendezvousServer(size, self._secret, host=self._bind).start()
        try:
            master = (self._host, free_port(self._bind))
            offset = 0
            for k in range(self._nnodes):
                links[k].send({"kind": "start", "attempt": attempt, "offset": offset,
                               "size": size, "rendezvous": [self._host, server.address[1]],
                               "job": server.job, "master": list(master)})
                offset += hello[k]["nprocs"]
            pending = set(range(self._nnodes))
            Result = tuple[int, int | None, int | None, list[str]]
            primary: list[Result] = []
            secondary: list[Result] = []  # ranks that failed because another one did
            succeeded: set[int] = set()  # nodes whose workers all exited 0
            decide_at = stop_by = float("inf")
            waited = False  # for the node of the rank the echoes name
            first: Result | None = None
            while pending and time.monotonic() < stop_by:
                if first is None and time.monotonic() >= decide_at:
                    cause = None if primary else self._cause(secondary[0], hello)
                    if cause is not None and cause[1] in pending and not waited:
                        waited = True  # its node may report a moment later still
                        decide_at = time.monotonic() + _CAUSE_S
                        continue
                    first = primary[0] if primary else self._echo(secondary[0], cause,
                                                                  succeeded)
                    stop_by = time.monotonic() + _STOP_GRACE_S
                    for k in pending:
                        links[k].send({"kind": "stop", "rank": first[1], "node": first[2]})
                try:
                    node, msg = inbox.get(timeout=0.05)
                except queue.Empty:
                    continue
                if msg is None:  # a launcher is gone (killed, or cut off from us)
                    pending.discard(node)
                    why = links[node].error or f"the launcher of node {node} was lost"
                    result = (1, None, node, [why])
                elif msg.get("kind") == "result":
                    pending.discard(node)
                    result = (int(msg["status"]), msg.get("rank"), node, list(msg.get("tail", [])))
                else:
                    continue
                if result[0] == 0:
                    succeeded.add(node)
                if result[0] == 0 or first is not None or (msg or {}).get("stopped"):
                    continue
                (secondary if (msg or {}).get("secondary") else primary).append(result)
                # The node where it started may report a moment after the echoes elsewhere.
                decide_at = min(decide_at, time.monotonic() + (0 if primary else _SETTLE_S))
            if first is None and (primary or secondary):
                first = primary[0] if primary else self._echo(
                    secondary[0], self._cause(secondary[0], hello), succeeded)
            if first is None and pending:  # stopped nodes that never reported
                first = (1, None, min(pending), [f"node {min(pending)} did not report"])
            return first or (0, None, None, [])
        finally:
            server.close()

    def _cause(self, echo: tuple[int, int | None, int | None, list[str]],
               hello: dict[int, dict]) -> tuple[int, int] | None:
        """(rank, node) of the rank an echo names as the cause of its failure, or None."""
        rank = echoed(ln.encode() for ln in echo[3])
        if rank is None:
            return None
        offset = 0
        for k in range(self._nnodes):
            if offset <= rank < offset + hello[k]["nprocs"]:
                return rank, k
            offset += hello[k]["nprocs"]
        return None

    @staticmethod
    def _echo(echo: tuple[int, int | None, int | None, list[str]], cause: tuple[int, int] | None,
              succeeded: set[int]) -> tuple[int, int | None, int | None, list[str]]:
        """The verdict when only echoes reported: the rank they name when its node's workers
        all exited 0 (it left the job early), else the first echo."""
        if cause is None or cause[1] not in succeeded:
            return echo
        why = (f"rank {cause[0]} left the job early (it exited with status 0 while rank "
               f"{echo[1]} still needed it) (rank {echo[1]} gave up first)\n")
        return echo[0], cause[0], cause[1], [why, *echo[3]]
