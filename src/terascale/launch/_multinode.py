"""``terascale run --nnodes M --node-rank K --rendezvous HOST:PORT``: one job over M nodes.

As with torchrun, the same command runs on every node. Node 0's launcher also runs the
coordinator at HOST:PORT; every launcher (node 0's included) connects to it over an
authenticated control link (the job secret's HMAC handshake), says how many workers it
has and which host it is, and gets its place: the global rank of its first worker (ranks go
node by node, ``local_rank`` within the node), the job's size, and the workers' rendezvous
(served on node 0, a fresh one per attempt). Node 0 listens on the address of the
``--rendezvous`` host only (loopback when that is loopback), not on every interface,
unless ``--bind 0.0.0.0`` says so.

Failures: a node reports when its workers end; the first failure anywhere (a worker's
non-zero exit, a node's launcher lost: its link closes or stays silent past the deadline)
makes the coordinator stop every other node, and every launcher exits non-zero naming the
rank (and node) that failed first. With ``--max-restarts`` the coordinator then starts the
whole job again on all nodes. A node that loses its coordinator stops its workers and exits.
Links carry a heartbeat every second, so a partitioned node is noticed within the
collective deadline (``--timeout``) and ends within it plus the stop grace.
"""

from __future__ import annotations

import math
import queue
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from .._auth import accept_handshake, dial_handshake, recv_json, send_json
from .._bind import bind_address, bind_error
from .._errors import ConfigError, RendezvousError
from ..rendezvous import RendezvousServer, host_layout
from .launcher import LaunchOptions, NodePlace, free_port, is_secondary, run_group, stop_signals

__all__ = ["launch_nodes"]

_PING_S = 1.0
_STOP_GRACE_S = 4.0  # after a stop, how long the coordinator waits for the nodes' reports
_SETTLE_S = 1.0  # after an echo of a failure (PeerLost...), how long to wait for its cause


def _silence(timeout: float) -> float:
    """How long a silent control link means a lost node: before the collective deadline,
    so a partition is blamed on the cut-off node, not on the rank that timed out waiting."""
    return min(timeout, max(3.0, timeout / 2))


class _Link:
    """One control connection: JSON messages out (locked), a reader thread into ``inbox``.

    ``inbox`` gets ``(tag, message)``; ``message`` None means the link is lost (closed, or
    silent for ``silence`` seconds although the other side pings every second).
    """

    def __init__(self, sock: socket.socket, tag: Any, inbox: queue.Queue, silence: float) -> None:
        self.sock, self.tag, self._inbox, self._silence = sock, tag, inbox, silence
        self._lock = threading.Lock()
        self.closed = False
        self._reader = sock.dup()  # its own timeout: recv and send do not share one
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._ping, daemon=True).start()

    def _read(self) -> None:
        try:
            while not self.closed:
                msg = recv_json(self._reader, time.monotonic() + self._silence)
                if msg.get("kind") != "ping":
                    self._inbox.put((self.tag, msg))
        except (OSError, TimeoutError, ValueError):
            pass
        if not self.closed:
            self._inbox.put((self.tag, None))

    def _ping(self) -> None:
        while not self.closed and self.send({"kind": "ping"}):
            time.sleep(_PING_S)

    def send(self, msg: dict) -> bool:
        try:
            with self._lock:
                send_json(self.sock, msg, time.monotonic() + 5.0)
            return True
        except (OSError, TimeoutError):
            return False

    def close(self) -> None:
        self.closed = True
        for s in (self.sock, self._reader):
            try:
                s.close()
            except OSError:
                pass


class _Coordinator(threading.Thread):
    """Node 0's side: places the nodes, serves each attempt's rendezvous, stops on failure."""

    def __init__(self, listener: socket.socket, nnodes: int, secret: bytes, host: str,
                 bind: str, opts: LaunchOptions) -> None:
        super().__init__(daemon=True, name="terascale-coordinator")
        self._listener, self._nnodes, self._secret = listener, nnodes, secret
        self._host, self._bind, self._opts = host, bind, opts

    def run(self) -> None:
        inbox: queue.Queue = queue.Queue()
        links: dict[int, _Link] = {}
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
        for attempt in range(self._opts.max_restarts + 1):
            status, rank, node, tail = self._attempt(attempt, size, hello, links, inbox)
            if status == 0 or attempt == self._opts.max_restarts:
                break
        for link in links.values():
            link.send({"kind": "done", "status": status, "rank": rank, "node": node,
                       "tail": tail})
        time.sleep(0.5)  # let the verdicts leave before the links close
        for link in links.values():
            link.close()

    def _accept(self, links: dict[int, _Link], hello: dict[int, dict], inbox: queue.Queue) -> None:
        deadline = time.monotonic() + self._opts.timeout
        self._listener.settimeout(0.5)
        while len(hello) < self._nnodes:
            if time.monotonic() > deadline:
                missing = sorted(set(range(self._nnodes)) - set(hello))
                raise RendezvousError(f"nodes {missing} did not join within "
                                      f"{self._opts.timeout:g} s")
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            try:
                accept_handshake(conn, self._secret, time.monotonic() + 5.0)
                msg = recv_json(conn, time.monotonic() + 5.0)
                node = int(msg["node"])
                if node in hello or not 0 <= node < self._nnodes:
                    send_json(conn, {"kind": "done", "status": 1,
                                     "error": f"node rank {node} is taken or not in "
                                              f"0..{self._nnodes - 1}"}, time.monotonic() + 5)
                    conn.close()
                    continue
            except Exception:  # strangers, wrong secrets, garbage: dropped, the job goes on
                conn.close()
                continue
            hello[node] = {"nprocs": int(msg["nprocs"]), "host": str(msg["host"])[:256]}
            links[node] = _Link(conn, node, inbox, _silence(self._opts.timeout))

    def _attempt(self, attempt: int, size: int, hello: dict[int, dict], links: dict[int, _Link],
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
            decide_at = stop_by = float("inf")
            first: Result | None = None
            while pending and time.monotonic() < stop_by:
                if first is None and time.monotonic() >= decide_at:
                    first = (primary or secondary)[0]
                    stop_by = time.monotonic() + _STOP_GRACE_S
                    for k in pending:
                        links[k].send({"kind": "stop", "rank": first[1], "node": first[2]})
                try:
                    node, msg = inbox.get(timeout=0.05)
                except queue.Empty:
                    continue
                if msg is None:  # a launcher is gone (killed, or cut off from us)
                    pending.discard(node)
                    result = (1, None, node, [f"the launcher of node {node} was lost"])
                elif msg.get("kind") == "result":
                    pending.discard(node)
                    result = (int(msg["status"]), msg.get("rank"), node, list(msg.get("tail", [])))
                else:
                    continue
                if result[0] == 0 or first is not None or (msg or {}).get("stopped"):
                    continue
                (secondary if (msg or {}).get("secondary") else primary).append(result)
                # The node where it started may report a moment after the echoes elsewhere.
                decide_at = min(decide_at, time.monotonic() + (0 if primary else _SETTLE_S))
            if first is None and (primary or secondary):
                first = (primary or secondary)[0]
            if first is None and pending:  # stopped nodes that never reported
                first = (1, None, min(pending), [f"node {min(pending)} did not report"])
            return first or (0, None, None, [])
        finally:
            server.close()


def _connect(address: tuple[str, int], secret: bytes, deadline: float) -> socket.socket:
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection(address, timeout=2.0)
            dial_handshake(sock, secret, time.monotonic() + 5.0)
            return sock
        except (OSError, TimeoutError) as e:
            last = e
            time.sleep(0.2)
    raise RendezvousError(f"cannot reach node 0's launcher at {address[0]}:{address[1]} "
                          f"({last}); is it running with the same --rendezvous and secret?")


def launch_nodes(cmd: Sequence[str], opts: LaunchOptions, *, nnodes: int, node_rank: int,
                 rendezvous: tuple[str, int], secret: bytes, host_id: str,
                 bind: str | None = None) -> int:
    """Run this node's ``opts.nprocs`` workers of a job over ``nnodes``; the exit status.

    Node 0 listens (coordinator, each attempt's rendezvous) on the address of
    ``rendezvous``'s host only, or on ``bind`` when given (``0.0.0.0``: every interface).
    """
    if nnodes < 1:
        raise ConfigError(f"--nnodes must be at least 1, got {nnodes}")
    if not 0 <= node_rank < nnodes:
        raise ConfigError(f"--node-rank {node_rank} is not in 0..{nnodes - 1} (--nnodes {nnodes})")
    if opts.nprocs < 1:
        raise ConfigError(f"-n must be at least 1, got {opts.nprocs}")
    if not cmd:
        raise ConfigError("no command given (usage: terascale run -n 4 --nnodes 2 ... python "
                          "train.py)")
    if not (opts.timeout > 0 and math.isfinite(opts.timeout)):
        raise ConfigError(f"--timeout must be positive and finite (seconds), got {opts.timeout}")
    try:
        secret.decode("ascii")
    except UnicodeDecodeError:
        raise ConfigError("the job secret must be text (e.g. secrets.token_hex)") from None
    with stop_signals() as (stop, signalled):
        status = _agent(cmd, opts, nnodes, node_rank, rendezvous, secret, host_id, stop, bind)
        return 128 + signalled[0] if signalled else status


def _agent(cmd: Sequence[str], opts: LaunchOptions, nnodes: int, node_rank: int,
           rendezvous: tuple[str, int], secret: bytes, host_id: str, stop: threading.Event,
           bind: str | None) -> int:
    if node_rank == 0:
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
        coordinator: _Coordinator | None = _Coordinator(listener, nnodes, secret, host,
                                                        address, opts)
        assert coordinator is not None
        coordinator.start()
    else:
        coordinator = None
    inbox: queue.Queue = queue.Queue()
    sock = _connect(rendezvous, secret, time.monotonic() + opts.timeout)
    send_json(sock, {"node": node_rank, "nprocs": opts.nprocs, "host": host_id},
              time.monotonic() + 5.0)
    link = _Link(sock, "coordinator", inbox, _silence(opts.timeout))
    where = f"node 0's launcher at {rendezvous[0]}:{rendezvous[1]}"
    try:
        while True:
            _, msg = _wait(inbox, stop)
            if msg is None:
                if stop.is_set():
                    return 130
                sys.stderr.write(f"terascale run: lost {where}; stopping\n")
                return 1
            if msg["kind"] == "done":
                return _verdict(msg, node_rank)
            if msg["kind"] != "start":
                continue
            if int(msg["attempt"]) > 0:
                sys.stderr.write(f"terascale run: restarting this node's workers with the whole "
                                 f"job (restart {msg['attempt']} of {opts.max_restarts})\n")
            place = NodePlace(offset=int(msg["offset"]), size=int(msg["size"]),
                              rendezvous=(msg["rendezvous"][0], int(msg["rendezvous"][1])),
                              job=str(msg["job"]), master=(msg["master"][0], int(msg["master"][1])),
                              host_id=host_id)
            status, rank, stopped, lost, tail = _run_attempt(cmd, opts, int(msg["attempt"]),
                                                             secret, place, inbox, stop)
            if lost:
                sys.stderr.write(f"terascale run: lost {where}; stopped this node's workers\n")
                return status or 1
            link.send({"kind": "result", "status": status, "rank": rank, "stopped": stopped,
                       "secondary": is_secondary(deque(ln.encode() for ln in tail)),
                       "tail": tail})
            if stop.is_set():
                return 130
    finally:
        link.close()
        if coordinator is not None:  # the other nodes' verdicts leave before this process
            coordinator.join(10.0)


def _wait(inbox: queue.Queue, stop: threading.Event) -> tuple[Any, dict | None]:
    while True:
        try:
            return inbox.get(timeout=0.1)  # type: ignore[no-any-return]
        except queue.Empty:
            if stop.is_set():
                return None, None


def _run_attempt(cmd: Sequence[str], opts: LaunchOptions, attempt: int, secret: bytes,
                 place: NodePlace, inbox: queue.Queue, interrupted: threading.Event,
                 ) -> tuple[int, int | None, bool, bool, list[str]]:
    """This node's workers until they end or the coordinator says stop (or is lost).

    Returns (status, failed global rank or None, stopped by the coordinator, link lost,
    the failed rank's last output lines).
    """
    halt = threading.Event()
    box: list[tuple[int, int | None, list[bytes], Any]] = []
    t = threading.Thread(target=lambda: box.append(
        run_group(cmd, opts, attempt, secret.decode(), halt, place)), daemon=True)
    t.start()
    stopped = lost = False
    while t.is_alive():
        try:
            _, msg = inbox.get(timeout=0.05)
        except queue.Empty:
            if interrupted.is_set():
                halt.set()
            continue
        if msg is None:
            lost = True
            halt.set()
        elif msg.get("kind") == "stop":
            stopped = True
            halt.set()
    t.join()
    status, rank, tail, blame = box[0] if box else (1, None, [], None)
    if blame is not None:  # a stall: blame the stalled rank, not the first to time out
        tail = [f"{blame.why} (rank {rank} gave up first)\n".encode(), *tail]
        rank = blame.ranks[0] if blame.ranks else rank
    if stopped or lost or interrupted.is_set():
        status = status or 1
        if status == 130:  # run_group's "interrupted": ours, by the coordinator's stop
            status, rank = 1, None
    lines = [ln.decode(errors="replace") for ln in tail][-20:] if rank is not None else []
    return status, rank, stopped, lost, lines


def _verdict(msg: dict, node_rank: int) -> int:
    status = int(msg.get("status", 1))
    if status == 0:
        return 0
    if msg.get("error"):
        sys.stderr.write(f"terascale run: {msg['error']}\n")
        return status
    rank, node = msg.get("rank"), msg.get("node")
    who = f"rank {rank} (node {node})" if rank is not None else f"node {node}"
    sys.stderr.write(f"\nterascale run: {who} failed first (exit status {status}); every "
                     f"node's workers were stopped (this is node {node_rank}).")
    tail = msg.get("tail") or []
    sys.stderr.write(" Its last output:\n" if tail else "\n")
    sys.stderr.write("".join(f"  | {ln}" for ln in tail))
    sys.stderr.flush()
    return status

