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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from .._env import JobEnv
from .._errors import ConfigError
from .._timeline import clear_parts, merge_parts
from ..rendezvous import RendezvousServer
from ..transport.segments import remove_job_segments
from ._blame import Blame, cause_line, echoed, is_stopped
from ._fork import Forked, fork_worker
from ._lifetime import forget_group, watch_group, worker_start
from ._output import Output
from .cpubind import bound, cpu_blocks
from .runner import Worker, restarts, stop_all, watch

__all__ = ["LaunchOptions", "NodePlace", "free_port", "is_secondary", "launch", "run_group",
           "stop_signals"]

_GRACE_S = 1.5  # between SIGTERM and SIGKILL of the surviving workers
_SETTLE_S = 2.0  # on a restart: how long its previous attempt's threads get to end before a fork


def is_secondary(tail: deque[bytes]) -> bool:
    """True when a worker's last error says it failed because another rank did
    (:func:`._blame.echoed`).

    Parameters
    ----------
    tail
        The worker's last output lines.
    """
    return echoed(tail) is not None


@dataclass(frozen=True, kw_only=True)
class LaunchOptions:
    """Options of :func:`launch` (the flags of ``terascale run``).

    Parameters
    ----------
    nprocs
        Workers to start on this node (``-n``).
    timeout
        Seconds for the rendezvous and the workers' default collective deadline (``--timeout``,
        default 60).
    max_restarts
        Restart every worker this many times after a failure (``--max-restarts``, default 0).
    host_ids
        Host identities the ranks pretend to have, round robin (default None: this host's; tests).
    env
        Extra environment variables of every worker.
    prefix_output
        Prefix each output line with its rank (default True).
    timeline
        A path: record every collective as Chrome trace events, merged there at the end
        (``--timeline``; default None).
    encrypt
        Every TCP link AES-GCM (``--encrypt``; default False).
    link_rate
        The links' rate between hosts in bits/s for ``auto`` (``--link-rate``; default None:
        unknown).
    cpu_bind
        Give each worker a block of this node's cores of its own when there are at most as
        many workers as cores (True), or leave them unbound (False); default None: bind
        unless ``TERASCALE_NO_CPU_BIND=1`` (why: :mod:`terascale.launch.cpubind`).
    fork
        Each worker runs this function in a process forked from the launcher, and exits
        with the status it returns, instead of running ``cmd`` (which stays the command a
        message names, and what runs where the platform cannot fork, or where the
        launcher runs a thread besides the one that starts the workers: a thread of the
        caller's, or of a restart's previous attempt not yet ended). For a launcher
        that has already imported and loaded what its workers run: they start without
        an interpreter's start-up or imports of their own (``terascale.launch._fork``
        says what a forked worker inherits and what it is given afresh). Default None.
    """

    nprocs: int
    timeout: float = 60.0
    max_restarts: int = 0
    host_ids: Sequence[str] | None = None  # pretend ranks live on these hosts (tests)
    env: dict[str, str] = field(default_factory=dict)
    prefix_output: bool = True
    timeline: str | None = None
    encrypt: bool = False  # every TCP link AES-GCM (TERASCALE_ENCRYPT=1 in the workers)
    link_rate: float | None = None  # bits/s between hosts, for auto (TERASCALE_LINK_RATE)
    cpu_bind: bool | None = None  # a block of cores per worker (None: TERASCALE_NO_CPU_BIND)
    fork: Callable[[], int] | None = None  # each worker: this, forked (cmd: exec'd)


def _kill_group(proc: subprocess.Popen[bytes] | Forked, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class _Process(Worker):
    """A worker process of ``terascale run`` (its own process group), for the runner."""

    def __init__(self, proc: subprocess.Popen[bytes] | Forked, stdout: Output,
                 stderr: Output) -> None:
        self.proc, self.stdout, self.stderr = proc, stdout, stderr

    def wait(self) -> int:
        return self.proc.wait()

    def tail(self) -> list[bytes]:
        return list(self.stderr.tail)

    def stopped(self) -> bool:
        return is_stopped(self.proc.pid)

    def terminate(self) -> None:
        _kill_group(self.proc, signal.SIGTERM)
        _kill_group(self.proc, signal.SIGCONT)  # a stopped worker acts on SIGTERM only if resumed

    def kill(self) -> None:
        if self.proc.poll() is None:
            _kill_group(self.proc, signal.SIGKILL)
            self.proc.wait()
        _kill_group(self.proc, signal.SIGKILL)  # anything the worker left in its process group
        forget_group(self.proc.pid)


def _exit_status(code: int) -> int:
    return 128 - code if code < 0 else code  # killed by signal N -> 128 + N, as shells do


def free_port(host: str) -> int:
    """A port nobody listens on now (the kernel's pick), for torch's rank-0 store.

    Parameters
    ----------
    host
        The address to find a free port on.
    """
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class NodePlace:
    """This node's part of a job over several nodes (given by the node-0 coordinator).

    Parameters
    ----------
    offset
        The global rank of this node's first worker (ranks go node by node).
    size
        Workers in the whole job.
    rendezvous
        The workers' rendezvous ``(host, port)``, served on node 0.
    job
        The job id.
    master
        torch's ``env://`` store ``(host, port)``, on node 0 (global rank 0 serves it).
    host_id
        This node's host identity.
    """

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

    Parameters
    ----------
    place
        This node's part of a job over several nodes (the coordinator serves the
        rendezvous); ranks in the result are then global. Default None: a one-node job.
    cmd
        The command every worker runs.
    opts
        The launch options.
    attempt
        The attempt number, 0 first (the workers' ``TERASCALE_RESTART``).
    secret
        This attempt's job secret.
    stop
        Set to end the attempt early (Ctrl-C, another node's failure).
    """
    # the server's thread starts once every worker is started (below): a forked worker
    # must not inherit a lock a thread of ours held at the fork (_fork)
    server = None if place is not None else RendezvousServer(opts.nprocs, secret.encode())
    workers: list[_Process] = []
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
    blocks = cpu_blocks(opts.nprocs, opts.cpu_bind)
    # every worker is started before any thread of this attempt runs (the rendezvous
    # server's, the output pumps, the watchers): a worker is forked only while this
    # thread is the process's only one, else it runs cmd (_fork says why)
    fork = opts.fork if opts.fork is not None and hasattr(os, "fork") and \
        _alone(_SETTLE_S if attempt else 0.0) else None
    procs: list[subprocess.Popen[bytes] | Forked] = []
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
                node_cores=None if blocks is None else sum(len(b) for b in blocks),
            ).to_environ())
            env["PYTHONUNBUFFERED"] = "1"
            start = bound(preexec, blocks and blocks[rank])
            p: subprocess.Popen[bytes] | Forked
            if fork is not None:
                p = fork_worker(fork, env, session=session, preexec=start)
            else:
                try:
                    p = subprocess.Popen(list(cmd), env=env, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, start_new_session=session,
                                         preexec_fn=start)
                except FileNotFoundError:
                    raise ConfigError(f"command not found: {cmd[0]!r}") from None
                except PermissionError:
                    raise ConfigError(f"cannot execute {cmd[0]!r}") from None
            procs.append(p)
            watch_group(p.pid)  # its own children die with the launcher too
        if server is not None:
            server.start()  # the workers that came first wait in its listening backlog
        for rank, p in enumerate(procs):
            assert p.stdout is not None and p.stderr is not None
            workers.append(_Process(
                p, Output(offset + rank, p.stdout, sys.stdout.buffer, lock, opts.prefix_output),
                Output(offset + rank, p.stderr, sys.stderr.buffer, lock, opts.prefix_output)))
        verdict = watch(workers, offset=offset, stop=stop,
                        waiting=None if server is None else
                        lambda: None if server.complete else server.waiting)
        failed, blame, status = verdict.rank, verdict.blame, _exit_status(verdict.status)
        if verdict.note is not None:
            sys.stderr.write(f"terascale run: {verdict.note}\n")
    finally:
        for p in procs[len(workers):]:  # started, never watched: a later start failed
            _kill_group(p, signal.SIGKILL)
            p.wait()
            forget_group(p.pid)
        stop_all(workers, _GRACE_S, lambda i: workers[i].proc.poll() is not None)
        for w in workers:
            w.stdout.join(2.0)
            w.stderr.join(2.0)
        if server is not None:
            server.close()
        remove_job_segments(job)
    tail: list[bytes] = []
    if failed is not None:
        tail = workers[failed].tail() or list(workers[failed].stdout.tail)
        failed += offset
    return status, failed, tail, blame


def _alone(wait: float) -> bool:
    """Whether this thread is the process's only Python thread, waiting up to ``wait``
    seconds for the others to end (a previous attempt's: its watchers and its rendezvous
    clients end within moments of its workers)."""
    until = time.monotonic() + wait
    while threading.active_count() > 1:
        if time.monotonic() >= until:
            return False
        time.sleep(0.01)
    return True


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
    """Run ``cmd`` as ``opts.nprocs`` workers; returns the exit status for the launcher.

    Parameters
    ----------
    cmd
        The command every worker runs (``["python", "train.py"]``).
    opts
        How to run it.
    """
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
            def report(attempt: int, result: tuple[int, int | None, list[bytes], Blame | None],
                       again: bool) -> None:
                status, failed, tail, blame = result
                cause = cause_line(tail)
                if cause is not None:  # the one line to read first; the traceback follows
                    sys.stderr.write(f"\nterascale run: rank {failed}: {cause}")
                if blame is not None:
                    sys.stderr.write(f"\nterascale run: {blame.why}; all workers were stopped. Last "
                                     f"output of rank {failed}, which gave up first (exit status "
                                     f"{status}):\n")
                else:
                    sys.stderr.write(f"\nterascale run: rank {failed} failed first (exit status "
                                     f"{status}){_killed_by(status)}; the other workers were "
                                     f"stopped. Its last output:\n")
                sys.stderr.write("".join(f"  | {ln.decode(errors='replace')}" for ln in tail))
                if again:
                    sys.stderr.write(f"terascale run: restarting all {opts.nprocs} workers "
                                     f"(restart {attempt + 1} of {opts.max_restarts})\n")
                sys.stderr.flush()

            status = restarts(opts.max_restarts,
                              lambda attempt: run_group(cmd, opts, attempt, secret, stop),
                              lambda result: stop.is_set() or result[0] == 0, report)[0]
            if stop.is_set():  # interrupted: 130 for Ctrl-C, 143 for SIGTERM, as shells do
                return 128 + (signalled[0] if signalled else signal.SIGINT)
            return status
        finally:
            if opts.timeline:
                merge_parts(opts.timeline)  # every rank's part file -> one Chrome trace


def _killed_by(status: int) -> str:
    """What an exit status of ``128 + N`` means (the worker was ended by signal N, as shells
    report it): ``", killed by SIGKILL (out of memory? see dmesg)"`` for 137; else ``""``."""
    if status <= 128:
        return ""
    try:
        name = signal.Signals(status - 128).name
    except ValueError:
        return ""
    return f", killed by {name}" + (" (out of memory? see dmesg)" if name == "SIGKILL" else "")
