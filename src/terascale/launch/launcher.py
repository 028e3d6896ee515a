"""``terascale run``: start N local workers, stream their output, stop all on the first failure.

The launcher serves the rendezvous (with a fresh per-job secret handed to the workers in
their environment), prefixes every output line with the worker's rank, and watches the
workers: when one exits non-zero, all others are terminated at once (SIGTERM, then SIGKILL
after a grace period), the first failure's last lines of output are shown again at the end,
and the launcher exits with the failing worker's status. With ``max_restarts`` the whole
group is started again (workers resume from their last checkpoint).
"""

from __future__ import annotations

import contextlib
import math
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from .._env import JobEnv
from .._errors import ConfigError
from .._timeline import clear_parts, merge_parts
from ..rendezvous import RendezvousServer
from ..transport.segments import remove_job_segments
from ._blame import Blame, blame_leaver, blame_stall, cause_line, echoed, is_stopped
from ._lifetime import forget_group, watch_group, worker_start
from ._output import Output

__all__ = ["LaunchOptions", "NodePlace", "free_port", "is_secondary", "launch", "run_group",
           "stop_signals"]

_GRACE_S = 1.5  # between SIGTERM and SIGKILL of the surviving workers
_SETTLE_S = 0.3  # after a first failure, time for its echoes on other ranks to exit too
# ... unless every worker still there is stopped (SIGSTOP): then nothing more will exit
_CAUSE_S = 2.0  # when only echoes exited: how long to wait for the rank they name


def is_secondary(tail: deque[bytes]) -> bool:
    """True when a worker's last error says it failed because another rank did
    (:func:`._blame.echoed`)."""
    return echoed(tail) is not None


@dataclass(frozen=True, kw_only=True)
class LaunchOptions:
    """Options of :func:`launch` (the flags of ``terascale run``)."""

    nprocs: int
    timeout: float = 60.0
    max_restarts: int = 0
    host_ids: Sequence[str] | None = None  # pretend ranks live on these hosts (tests)
    env: dict[str, str] = field(default_factory=dict)
    prefix_output: bool = True
    timeline: str | None = None
    encrypt: bool = False  # every TCP link AES-GCM (TERASCALE_ENCRYPT=1 in the workers)
    link_rate: float | None = None  # bits/s between hosts, for auto (TERASCALE_LINK_RATE)


def _kill_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _exit_status(code: int) -> int:
    return 128 - code if code < 0 else code  # killed by signal N -> 128 + N, as shells do


def free_port(host: str) -> int:
    """A port nobody listens on now (the kernel's pick), for torch's rank-0 store."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class NodePlace:
    """This node's part of a job over several nodes (given by the node-0 coordinator)."""

    offset: int  # global rank of this node's first worker: ranks go node by node
    size: int  # workers in the whole job
    rendezvous: tuple[str, int]  # the workers' rendezvous, served on node 0
    job: str
    master: tuple[str, int]  # torch's env:// store, on node 0 (global rank 0 serves it)
    host_id: str


def run_group(cmd: Sequence[str], opts: LaunchOptions, attempt: int, secret: str,
              stop: threading.Event, place: NodePlace | None = None,
              ) -> tuple[int, int | None, list[bytes], Blame | None]:
    """One attempt: returns (status, failed rank or None, that rank's last output lines,
    the stalled rank(s) when the failure was a stall).

    ``place`` runs this node's workers of a job over several nodes (the coordinator serves
    the rendezvous); ranks in the result are then global.
    """
    server = None if place is not None else RendezvousServer(opts.nprocs, secret.encode()).start()
    procs: list[subprocess.Popen[bytes]] = []
    outputs: list[Output] = []
    lock = threading.Lock()
    if server is not None:
        job = server.job
        host, port = server.address
        # torch.distributed's env:// store (MASTER_PORT), as torchrun sets it: a free port of
        # its own, so that unchanged torch scripts (and the "terascale" backend) start too.
        master = (host, free_port(host))
        hosts = [None if opts.host_ids is None else opts.host_ids[r % len(opts.host_ids)]
                 for r in range(opts.nprocs)]
        offset, size = 0, opts.nprocs
    else:
        assert place is not None
        job, (host, port), master = place.job, place.rendezvous, place.master
        hosts = [place.host_id] * opts.nprocs
        offset, size = place.offset, place.size
    # PDEATHSIG is tied to the thread that forks: Popen is called from this thread, which
    # lives until every worker has been waited for.
    preexec, session = worker_start(opts.nprocs)
    try:
        for rank in range(opts.nprocs):
            env = dict(os.environ)
            env.update(opts.env)
            env.update(JobEnv(
                "terascale run", offset + rank, size, (host, port), secret.encode(), job=job,
                timeout=opts.timeout, restart=attempt, timeline=opts.timeline or None,
                host_id=hosts[rank], master=master, local_rank=hosts[:rank].count(hosts[rank]),
                local_size=hosts.count(hosts[rank]), encrypt=opts.encrypt,
                link_rate=opts.link_rate,
            ).to_environ())
            env["PYTHONUNBUFFERED"] = "1"
            try:
                p = subprocess.Popen(list(cmd), env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=session,
                                     preexec_fn=preexec)
                watch_group(p.pid)  # its own children die with the launcher too
            except FileNotFoundError:
                raise ConfigError(f"command not found: {cmd[0]!r}") from None
            except PermissionError:
                raise ConfigError(f"cannot execute {cmd[0]!r}") from None
            procs.append(p)
            assert p.stdout is not None and p.stderr is not None
            outputs.append(Output(offset + rank, p.stdout, sys.stdout.buffer, lock,
                                   opts.prefix_output))
            outputs.append(Output(offset + rank, p.stderr, sys.stderr.buffer, lock,
                                   opts.prefix_output))
        # One waiter per worker records when it exited, so that the failure reported is the
        # first one, not the lowest rank among those that died in the same instant.
        exits: list[tuple[float, int, int]] = []
        exit_lock = threading.Lock()

        def wait_for(rank: int, proc: subprocess.Popen[bytes]) -> None:
            code = proc.wait()
            with exit_lock:
                exits.append((time.monotonic(), rank, code))

        for rank, p in enumerate(procs):
            threading.Thread(target=wait_for, args=(rank, p), daemon=True).start()
        failed: int | None = None
        blame: Blame | None = None
        status = 0
        while True:
            with exit_lock:
                bad = sorted(e for e in exits if e[2] != 0)
                done = len(exits)
            if bad:
                # Ranks that merely noticed the failure exit within moments of the one that
                # caused it; give them a short window, then report the root cause.
                settle = time.monotonic() + _SETTLE_S
                while time.monotonic() < settle:
                    with exit_lock:
                        gone = {e[1] for e in exits}
                    if all(is_stopped(p.pid) for r, p in enumerate(procs) if r not in gone):
                        break
                    time.sleep(0.01)
                with exit_lock:
                    bad = sorted(e for e in exits if e[2] != 0)
                    gone = {e[1] for e in exits}
                primary = [e for e in bad if not is_secondary(outputs[2 * e[1] + 1].tail)]
                # Only echoes so far: the rank they name may be slower to exit than they
                # were (its traceback, its exit handlers); wait for it a little longer.
                cause = echoed(outputs[2 * bad[0][1] + 1].tail)
                cause = None if cause is None else cause - offset
                if not primary and cause is not None and 0 <= cause < len(procs):
                    until = time.monotonic() + _CAUSE_S
                    while time.monotonic() < until and not is_stopped(procs[cause].pid):
                        with exit_lock:
                            if any(e[1] == cause for e in exits):
                                break
                        time.sleep(0.01)
                    with exit_lock:
                        bad = sorted(e for e in exits if e[2] != 0)
                        gone = {e[1] for e in exits}
                    primary = [e for e in bad if not is_secondary(outputs[2 * e[1] + 1].tail)]
                _, failed, code = (primary or bad)[0]
                status = _exit_status(code)
                left = [r for r in range(len(procs)) if r not in gone]
                # Global ranks (a node of a job over several): the workers' messages use them.
                tails = {offset + e[1]: list(outputs[2 * e[1] + 1].tail) for e in bad}
                blame = blame_stall(
                    tails, [offset + e[1] for e in primary], [offset + r for r in left],
                    [offset + r for r in left if is_stopped(procs[r].pid)])
                if blame is None and not primary:  # echoes of a rank that left early?
                    with exit_lock:
                        leavers = [offset + e[1] for e in sorted(exits)
                                   if e[2] == 0 and e[0] <= bad[0][0]]
                    blame = blame_leaver(tails, leavers)
                break
            if done == len(procs):
                break
            with exit_lock:
                early = sorted(e for e in exits if e[2] == 0)
                running = set(range(len(procs))) - {e[1] for e in exits}
            waiting = [] if server is None else server.waiting
            if (early and waiting and server is not None and running <= set(waiting)
                    and not server.complete):
                # Workers ended (successfully) without joining while all others wait for
                # them: the job can never assemble; do not wait out the deadline.
                missing = sorted(set(range(len(procs))) - set(waiting))
                failed = early[0][1]
                sys.stderr.write(f"terascale run: {len(waiting)} of {len(procs)} workers arrived; "
                                 f"missing ranks {missing}: rank {failed} exited with status 0 "
                                 "before joining the job\n")
                status = 1
                break
            if stop.is_set():
                status = 130  # replaced by 128 + the signal's number in launch()
                break
            time.sleep(0.01)
    finally:
        for p in procs:
            if p.poll() is None:
                _kill_group(p, signal.SIGTERM)
                _kill_group(p, signal.SIGCONT)  # a stopped worker acts on SIGTERM only if resumed
        end = time.monotonic() + _GRACE_S
        for p in procs:
            try:
                p.wait(max(end - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                _kill_group(p, signal.SIGKILL)
                p.wait()
            _kill_group(p, signal.SIGKILL)  # anything the worker left in its process group
            forget_group(p.pid)
        for o in outputs:
            o.join(2.0)
        if server is not None:
            server.close()
        remove_job_segments(job)
    tail: list[bytes] = []
    if failed is not None:
        tail = list(outputs[2 * failed + 1].tail) or list(outputs[2 * failed].tail)
        failed += offset
    return status, failed, tail, blame


@contextlib.contextmanager
def stop_signals() -> Iterator[tuple[threading.Event, list[int]]]:
    """While inside, SIGINT and SIGTERM set the event (and are recorded, first one first)
    instead of raising, so the launcher can stop its workers and exit 128 + signal; the
    previous handlers come back on the way out. Outside the main thread nothing is
    installed (Python allows handlers only there)."""
    stop = threading.Event()
    signalled: list[int] = []
    previous = {}

    def on_signal(signum: int, _frame: object) -> None:
        signalled.append(signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for s in (signal.SIGINT, signal.SIGTERM):
            previous[s] = signal.signal(s, on_signal)
    try:
        yield stop, signalled
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def launch(cmd: Sequence[str], opts: LaunchOptions) -> int:
    """Run ``cmd`` as ``opts.nprocs`` workers; returns the exit status for the launcher."""
    if opts.nprocs < 1:
        raise ConfigError(f"-n must be at least 1, got {opts.nprocs}")
    if not cmd:
        raise ConfigError("no command given (usage: terascale run -n 4 python train.py)")
    if not (opts.timeout > 0 and math.isfinite(opts.timeout)):
        raise ConfigError(f"--timeout must be positive and finite (seconds), got {opts.timeout}")
    if opts.host_ids is not None and (not opts.host_ids or not all(opts.host_ids)):
        raise ConfigError(f"--hosts has an empty host name: {','.join(opts.host_ids)!r}")
    with stop_signals() as (stop, signalled):
        secret = secrets.token_hex(32)
        if opts.timeline:
            clear_parts(opts.timeline)
        try:
            for attempt in range(opts.max_restarts + 1):
                status, failed, tail, blame = run_group(cmd, opts, attempt, secret, stop)
                if stop.is_set():  # interrupted: 130 for Ctrl-C, 143 for SIGTERM, as shells do
                    return 128 + (signalled[0] if signalled else signal.SIGINT)
                if status == 0:
                    return status
                cause = cause_line(tail)
                if cause is not None:  # the one line to read first; the traceback follows
                    sys.stderr.write(f"\nterascale run: rank {failed}: {cause}")
                if blame is not None:
                    sys.stderr.write(f"\nterascale run: {blame.why}; all workers were stopped. Last "
                                     f"output of rank {failed}, which gave up first (exit status "
                                     f"{status}):\n")
                else:
                    sys.stderr.write(f"\nterascale run: rank {failed} failed first (exit status "
                                     f"{status}); the other workers were stopped. Its last output:\n")
                sys.stderr.write("".join(f"  | {ln.decode(errors='replace')}" for ln in tail))
                if attempt < opts.max_restarts:
                    sys.stderr.write(f"terascale run: restarting all {opts.nprocs} workers "
                                     f"(restart {attempt + 1} of {opts.max_restarts})\n")
                sys.stderr.flush()
            return status
        finally:
            if opts.timeline:
                merge_parts(opts.timeline)  # every rank's part file -> one Chrome trace
