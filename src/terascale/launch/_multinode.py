"""``terascale run --nnodes M --node-rank K --rendezvous HOST:PORT``: one job over M nodes.

As with torchrun, the same command runs on every node. Node 0's launcher also runs the
coordinator at HOST:PORT; every launcher (node 0's included) connects to it over an
authenticated control link (the job secret's HMAC handshake, every message after it sealed
and counted: :mod:`._control`), says how many workers it
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

This module is every node's launcher (the agent: join, run this node's workers per attempt,
report, print the verdict). Node 0's coordinator is :mod:`._coordinator`; the control link
both sides speak (JSON messages, heartbeat, loss detection) is :mod:`._control`.
"""

from __future__ import annotations

import math
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from .._errors import ConfigError
from ._blame import cause_line
from ._control import ControlLink, connect, silence
from ._coordinator import start_coordinator
from .launcher import LaunchOptions, NodePlace, is_secondary, run_group, stop_signals

__all__ = ["launch_nodes"]


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
    coordinator = start_coordinator(rendezvous, bind, nnodes, secret, opts) \
        if node_rank == 0 else None
    inbox: queue.Queue = queue.Queue()
    sock, channel = connect(rendezvous, secret, time.monotonic() + opts.timeout)
    channel.send(sock, {"node": node_rank, "nprocs": opts.nprocs, "host": host_id},
                 time.monotonic() + 5.0)
    where = f"node 0's launcher at {rendezvous[0]}:{rendezvous[1]}"
    link = ControlLink(sock, channel, "coordinator", inbox, silence(opts.timeout), where)
    try:
        while True:
            _, msg = _wait(inbox, stop)
            if msg is None:
                if stop.is_set():
                    return 130
                sys.stderr.write(f"terascale run: {link.error or 'lost ' + where}; stopping\n")
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
            status, rank, stopped, lost, secondary, tail = _run_attempt(
                cmd, opts, int(msg["attempt"]), secret, place, inbox, stop)
            if lost:
                sys.stderr.write(f"terascale run: {link.error or 'lost ' + where}; stopped "
                                 "this node's workers\n")
                return status or 1
            link.send({"kind": "result", "status": status, "rank": rank, "stopped": stopped,
                       "secondary": secondary, "tail": tail})
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
                 ) -> tuple[int, int | None, bool, bool, bool, list[str]]:
    """This node's workers until they end or the coordinator says stop (or is lost).

    Returns (status, failed global rank or None, stopped by the coordinator, link lost,
    whether the failure only echoes another rank's, the failed rank's last output lines).
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
    secondary = blame is None and is_secondary(deque(tail))
    if blame is not None:  # a stall or a rank that left: blame it, not the first to give up
        tail = [f"{blame.why} (rank {rank} gave up first)\n".encode(), *tail]
        rank = blame.ranks[0] if blame.ranks else rank
    if stopped or lost or interrupted.is_set():
        status = status or 1
        if status == 130:  # run_group's "interrupted": ours, by the coordinator's stop
            status, rank = 1, None
    lines = [ln.decode(errors="replace") for ln in tail][-20:] if rank is not None else []
    return status, rank, stopped, lost, secondary, lines


def _verdict(msg: dict, node_rank: int) -> int:
    status = int(msg.get("status", 1))
    if status == 0:
        return 0
    if msg.get("error"):
        sys.stderr.write(f"terascale run: {msg['error']}\n")
        return status
    rank, node = msg.get("rank"), msg.get("node")
    who = f"rank {rank} (node {node})" if rank is not None else f"node {node}"
    tail = msg.get("tail") or []
    cause = cause_line([ln.encode() if isinstance(ln, str) else ln for ln in tail])
    if cause is not None:  # the one line to read first; the traceback follows
        sys.stderr.write(f"\nterascale run: {who}: {cause}")
    sys.stderr.write(f"\nterascale run: {who} failed first (exit status {status}); every "
                     f"node's workers were stopped (this is node {node_rank}).")
    sys.stderr.write(" Its last output:\n" if tail else "\n")
    sys.stderr.write("".join(f"  | {ln}" for ln in tail))
    sys.stderr.flush()
    return status

