"""Node 0's coordinator of a multi-node job: places the nodes, runs attempts, stops on failure.

Every node's launcher joins over a :mod:`._control` link and says how many workers it has
and which host it is; the coordinator gives each its place (the global rank of its first
worker, the job's size) and serves each attempt's workers' rendezvous
(:class:`terascale.rendezvous.RendezvousServer`, a fresh one per attempt). Each node is
one worker of the job runner (:mod:`.runner`: ``watch``, ``stop_all``, ``restarts``), its
report (the verdict of the node's own ``watch``) its end: the first failure anywhere stops
every node; the one reported is the cause, not an echo (a node whose ranks failed only
because another did, ``PeerLost``..., is a *secondary* report, and the runner waits
``_SETTLE_S`` for the primary one) -- the stop-everything rule of Horovod and torchrun's
elastic agent, with the blame kept.
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
from ._control import ControlLink, admit_links, silence
from .launcher import LaunchOptions, free_port
from .runner import Worker, restarts, stop_all, watch

__all__ = ["Coordinator", "start_coordinator"]

_STOP_GRACE_S = 4.0  # after a stop, how long the coordinator waits for the nodes' reports
_SETTLE_S = 1.0  # after an echo of a failure (PeerLost...), how long to wait for its cause


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
        """One attempt over every node, decided by the job runner's rules
        (:func:`.runner.watch` over the nodes' reports, :func:`.runner.stop_all`)."""
        server = RendezvousServer(size, self._secret, host=self._bind).start()
        nodes = [_Node(links[k], k) for k in range(self._nnodes)]
        offsets = [sum(hello[j]["nprocs"] for j in range(k)) for k in range(self._nnodes)]

        def owner(rank: int) -> int | None:
            return next((k for k in range(self._nnodes)
                         if offsets[k] <= rank < offsets[k] + hello[k]["nprocs"]), None)

        reader = threading.Thread(target=_deliver, args=(inbox, nodes), daemon=True,
                                  name="terascale-coordinator-reports")
        try:
            master = (self._host, free_port(self._bind))
            for k in range(self._nnodes):
                links[k].send({"kind": "start", "attempt": attempt, "offset": offsets[k],
                               "size": size, "rendezvous": [self._host, server.address[1]],
                               "job": server.job, "master": list(master)})
            reader.start()
            verdict = watch(nodes, settle=_SETTLE_S, owner=owner)
            if verdict.status == 0:
                return 0, None, None, []
            assert verdict.rank is not None
            first = nodes[verdict.rank]
            rank, node, tail = first.rank, verdict.rank, first.lines
            if verdict.blame is not None:  # a rank that left early, named by the echoes
                tail = [f"{verdict.blame.why} (rank {first.rank} gave up first)\n", *tail]
                rank = verdict.blame.ranks[0]
                node = owner(rank)
            for n in nodes:
                n.reason = {"kind": "stop", "rank": rank, "node": node}
            stop_all(nodes, _STOP_GRACE_S, lambda k: nodes[k].done.is_set())
            return verdict.status, rank, node, tail
        finally:
            for n in nodes:
                n.kill()
            reader.join(1.0)
            server.close()


class _Node(Worker):
    """One node's launcher as the job runner's worker: its report is its end."""

    def __init__(self, link: ControlLink, node: int) -> None:
        self.link, self.node = link, node
        self.done = threading.Event()
        self.status, self.rank, self.lines, self.echo = 1, None, [], False
        self.reason: dict = {"kind": "stop"}

    def report(self, status: int, rank: int | None, lines: list[str], echo: bool) -> None:
        if not self.done.is_set():
            self.status, self.rank, self.lines, self.echo = status, rank, lines, echo
            self.done.set()

    def wait(self) -> int:
        self.done.wait()
        return self.status

    def tail(self) -> list[bytes]:
        return [ln.encode() for ln in self.lines]

    def secondary(self) -> bool:
        return self.echo

    def failed_rank(self) -> int | None:
        return self.rank

    def terminate(self) -> None:
        self.link.send(self.reason)

    def kill(self) -> None:
        self.report(1, None, [f"node {self.node} did not report"], False)


def _deliver(inbox: queue.Queue, nodes: list[_Node]) -> None:
    """The nodes' reports of one attempt, from the control links to their :class:`_Node`."""
    while not all(n.done.is_set() for n in nodes):
        try:
            k, msg = inbox.get(timeout=0.05)
        except queue.Empty:
            continue
        if msg is None:  # a launcher is gone (killed, or cut off from us)
            why = nodes[k].link.error or f"the launcher of node {k} was lost"
            nodes[k].report(1, None, [why], False)
        elif msg.get("kind") == "result":
            nodes[k].report(int(msg["status"]), msg.get("rank"), list(msg.get("tail", [])),
                            bool(msg.get("secondary")))
