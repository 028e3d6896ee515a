"""One job runner: start N workers, watch them, stop all on the first failure, blame, restart.

Every way terascale runs a job -- ``terascale run`` on one node, each node of a job over
several and node 0's coordinator over the nodes (a node is one of its workers, its report
the node's own verdict from :func:`watch`), the Ray and Dask engines, and Spark (whose
barrier stage starts as one gang: it takes the attempts, :func:`restarts`) -- follows the
same rules, written here once:

* **watch** (:func:`watch`): one waiter per worker records when it ended, so the failure
  reported is the first one in time, not the lowest rank that died in the same instant;
* **blame**: ranks that failed only because another did (their last error says "lost peer
  rank N", "aborted because rank N") are *echoes*; after a first failure the runner waits a
  moment (``settle``) for the rank that caused it, then blames the first failure of its own,
  a stalled rank (:func:`terascale.launch._blame.blame_stall`) or a rank that left the job
  early;
* **stop everything** (:func:`stop_all`): on the first failure every other worker is asked
  to end, then killed after a grace period -- the fail-fast model of Horovod and torchrun's
  elastic agent, as in Hadoop AllReduce (Agarwal et al., JMLR 2014);
* **restart** (:func:`restarts`, :func:`run_job`): the whole group again, up to ``max_restarts`` times, each
  attempt with a fresh job id and secret; workers resume from their
  :class:`terascale.Checkpoint` and, the collectives being deterministic, end bitwise where a
  run without failures would.

An engine supplies only its workers: ``start(rank, env)`` (start worker ``rank`` with the
``TERASCALE_*`` variables ``env``) returning a :class:`Worker` that can be waited for, can say
its last error and can be killed; and ``serve(job, secret)`` (where this attempt's
rendezvous runs: the driver, or the engine's rank 0 when the driver may be outside the
cluster). ``terascale.engines.ray`` and ``terascale.engines.dask`` are the examples.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from .._env import JobEnv, parse_address
from .._errors import ConfigError, DataError, TerascaleError
from ._blame import Blame, blame_leaver, blame_stall, cause_line, echoed

__all__ = ["Engine", "JobFailed", "Verdict", "Worker", "restarts", "run_job", "stop_all", "watch"]

log = logging.getLogger("terascale.launch")

SETTLE_S = 0.3  # after a first failure, time for its echoes on other ranks to exit too
# ... unless every worker still there is stopped (SIGSTOP): then nothing more will exit
CAUSE_S = 2.0  # when only echoes exited: how long to wait for the rank they name


class Worker:
    """One started worker, as an engine hands it to the runner.

    Subclasses implement :meth:`wait` and :meth:`kill`; the rest have defaults. ``wait`` is
    called once, in a thread of its own, and must return once the worker is killed.
    """

    def wait(self) -> int:
        """Block until the worker ends; its status (0: success; else a process's exit
        status, or 1 for an exception, 137 for a worker process that died)."""
        raise NotImplementedError

    def tail(self) -> list[bytes]:
        """Its last error output, line by line (a traceback): what blame reads."""
        return []

    def stopped(self) -> bool:
        """The worker is stopped (SIGSTOP) and cannot end on its own: stop waiting for it."""
        return False

    def failed_rank(self) -> int | None:
        """For a worker that stands for a group of ranks (a node): the global rank whose
        failure it reports; None otherwise."""
        return None

    def secondary(self) -> bool:
        """Its failure only echoes another rank's (its last error names that rank as the
        cause: :func:`terascale.launch._blame.echoed`)."""
        return echoed(self.tail()) is not None

    def terminate(self) -> None:
        """Ask it to end (SIGTERM); the runner kills it after a grace period."""
        self.kill()

    def kill(self) -> None:
        """End it now (and whatever it started); safe to call again or after it ended."""
        raise NotImplementedError

    def result(self) -> Any:
        """What it returned, after :meth:`wait` returned 0 (engines that return values)."""
        return None

    def error(self) -> BaseException | None:
        """The exception it raised, where the engine hands one back (chained in errors)."""
        return None


@dataclass
class Verdict:
    """How one attempt ended.

    Parameters
    ----------
    status
        0, or the first failure's exit status.
    rank
        The failed worker's index in the attempt (None: no worker failed).
    blame
        The stalled rank(s) or early leaver, when that explains the failure better.
    note
        A sentence for a failure that is no worker's exit.
    interrupted
        Whether ``stop`` ended the attempt.
    """

    status: int = 0
    rank: int | None = None
    blame: Blame | None = None
    note: str | None = None
    interrupted: bool = False


def watch(workers: Sequence[Worker], *, offset: int = 0, stop: threading.Event | None = None,
          waiting: Callable[[], list[int] | None] | None = None, settle: float = SETTLE_S,
          owner: Callable[[int], int | None] | None = None) -> Verdict:
    """Wait until every worker ended or one failed; who failed first, and why.

    The workers are left running: :func:`stop_all` ends them.

    Parameters
    ----------
    workers
        The workers, in rank order.
    offset
        The global rank of ``workers[0]`` (a node of a job over several; the workers'
        messages name global ranks); default 0.
    stop
        Ends the watch early (interrupted); default None.
    waiting
        Says which ranks the rendezvous still holds while it assembles (None once
        complete): workers that ended with status 0 before joining while every other one
        waits for them mean the job can never assemble, reported at once instead of at the
        deadline. Default None.
    settle
        How long (seconds), after a first failure, the echoes of it get to end too.
    owner
        Makes the workers groups of ranks (node 0's coordinator watching the nodes, each
        of which watched its own workers and blamed a stall itself): it maps a global
        rank, as an echo names it, to the index of the worker that runs it. Then a primary
        failure is decided at once (no stall to weigh), and echoes alone are blamed on the
        rank they name when its group ended with status 0 (it left the job early).
        Default None.
    """
    n = len(workers)
    grouped = owner is not None
    if owner is None:
        def owner(rank: int) -> int | None:
            return rank - offset if 0 <= rank - offset < n else None
    exits: list[tuple[float, int, int]] = []  # (when, rank, status)
    lock = threading.Lock()

    def wait_for(rank: int) -> None:
        try:
            code = workers[rank].wait()
        except Exception:  # an engine's wait that failed itself: the worker is lost to us
            code = 1
        with lock:
            exits.append((time.monotonic(), rank, code))

    for rank in range(n):
        threading.Thread(target=wait_for, args=(rank,), daemon=True,
                         name=f"terascale-watch-{offset + rank}").start()

    def snapshot() -> tuple[list[tuple[float, int, int]], set[int]]:
        with lock:
            return sorted(e for e in exits if e[2] != 0), {e[1] for e in exits}

    def secondary(rank: int) -> bool:
        return workers[rank].secondary()

    while True:
        bad, gone = snapshot()
        if bad:
            break
        if len(gone) == n:
            return Verdict()
        pending = waiting() if waiting is not None else None
        if pending:
            with lock:
                early = sorted(e for e in exits if e[2] == 0)
            running = set(range(n)) - gone
            if early and running <= set(pending):
                missing = sorted(set(range(n)) - set(pending))
                first = early[0][1]
                return Verdict(1, first, note=(
                    f"{len(pending)} of {n} workers arrived; missing ranks {missing}: rank "
                    f"{offset + first} exited with status 0 before joining the job"))
        if stop is not None and stop.is_set():
            return Verdict(130, interrupted=True)
        time.sleep(0.01)
    # Ranks that merely noticed the failure end within moments of the one that caused it;
    # give them a short window, then report the root cause.
    until = time.monotonic() + settle
    while time.monotonic() < until:
        bad, gone = snapshot()
        if all(workers[r].stopped() for r in range(n) if r not in gone):
            break
        if grouped and any(not secondary(e[1]) for e in bad):
            break
        time.sleep(0.01)
    bad, gone = snapshot()
    primary = [e for e in bad if not secondary(e[1])]
    # Only echoes so far: the rank they name may be slower to end than they were (its
    # traceback, its exit handlers); wait for it a little longer.
    named = echoed(workers[bad[0][1]].tail())
    cause = None if named is None else owner(named)
    if not primary and cause is not None:
        until = time.monotonic() + CAUSE_S
        while time.monotonic() < until and not workers[cause].stopped():
            if cause in snapshot()[1]:
                break
            time.sleep(0.01)
        bad, gone = snapshot()
        primary = [e for e in bad if not secondary(e[1])]
    _, failed, code = (primary or bad)[0]
    if grouped:
        with lock:
            done = {e[1] for e in exits if e[2] == 0}
        if primary or named is None or cause not in done:
            return Verdict(code, failed)
        who = workers[failed].failed_rank()
        return Verdict(code, failed, blame_leaver({-1 if who is None else who:
                                                   list(workers[failed].tail())}, [named]))
    left = [r for r in range(n) if r not in gone]
    tails = {offset + e[1]: list(workers[e[1]].tail()) for e in bad}
    blame = blame_stall(tails, [offset + e[1] for e in primary], [offset + r for r in left],
                        [offset + r for r in left if workers[r].stopped()])
    if blame is None and not primary:  # echoes of a rank that left early?
        # a rank the echoes name counts whenever its exit 0 was seen: each exit is timed when
        # its watcher thread wakes, which on a loaded host can be after the echo's
        named_ranks = {echoed(tail) for tail in tails.values()}
        with lock:
            leavers = [offset + e[1] for e in sorted(exits) if e[2] == 0 and
                       (e[0] <= bad[0][0] or offset + e[1] in named_ranks)]
        blame = blame_leaver(tails, leavers)
    return Verdict(code, failed, blame)


def stop_all(workers: Sequence[Worker], grace: float, ended: Callable[[int], bool]) -> None:
    """End every worker: :meth:`Worker.terminate` those still running (``ended(i)`` False),
    wait up to ``grace`` seconds for them, then :meth:`Worker.kill` every one (what a worker
    left behind goes too).

    Parameters
    ----------
    workers
        The workers of this node (or attempt), in rank order.
    grace
        Seconds to wait after terminating before killing.
    ended
        ``ended(i)``: whether worker ``i`` already ended.
    """
    running = [i for i in range(len(workers)) if not ended(i)]
    for i in running:
        workers[i].terminate()
    end = time.monotonic() + grace
    while running and time.monotonic() < end:
        running = [i for i in running if not ended(i)]
        time.sleep(0.01)
    for w in workers:
        w.kill()


R = TypeVar("R")


def restarts(max_restarts: int, attempt: Callable[[int], R], ended: Callable[[R], bool],
             failed: Callable[[int, R, bool], None] | None = None) -> R:
    """Run ``attempt(0)``, ``attempt(1)``, ... until ``ended(result)`` (success, or nothing
    to restart for) or ``max_restarts`` restarts are spent; the last result.

    Parameters
    ----------
    max_restarts
        How many restarts at most.
    attempt
        Runs attempt ``n`` and returns its result.
    ended
        True when a result ends the job (success, or nothing to restart for).
    failed
        ``failed(n, result, again)`` hears of every attempt that did not end the job,
        ``again`` True when another attempt follows (the place for "restarting all N
        workers"); default None.
    """
    for n in range(max_restarts + 1):
        result = attempt(n)
        if ended(result):
            return result
        if failed is not None:
            failed(n, result, n < max_restarts)
    return result


class Engine(Protocol):
    """What an engine gives :func:`run_job`: one attempt's workers."""

    def serve(self, job: str, secret: str, size: int) -> str:
        """Start this attempt's rendezvous for ``size`` ranks (a
        :class:`terascale.rendezvous.RendezvousServer` with ``job`` and ``secret``) where
        every worker reaches it; its ``HOST:PORT``.

        Parameters
        ----------
        job
            The attempt's job id.
        secret
            The attempt's job secret.
        size
            Ranks in the job.
        """
        ...

    def start(self, rank: int, env: dict[str, str]) -> Worker:
        """Start worker ``rank`` with the ``TERASCALE_*`` variables ``env`` set.

        Parameters
        ----------
        rank
            The worker's rank.
        env
            The variables of :meth:`terascale.JobEnv.to_environ` for that rank.
        """
        ...

    def cleanup(self) -> None:
        """After an attempt (its workers killed): release what it held."""
        ...


class JobFailed(TerascaleError):
    """Every attempt of a job failed; names the rank that failed first and its error."""


@dataclass
class _Attempt:
    verdict: Verdict
    workers: list[Worker]


def _attempt(engine: Engine, size: int, run_id: str, restart: int, timeout: float,
             grace: float) -> _Attempt:
    secret = secrets.token_hex(32)
    job = f"{run_id}-r{restart}"
    workers: list[Worker] = []
    ended: set[int] = set()
    try:
        rendezvous = parse_address(engine.serve(job, secret, size), "rendezvous")
        for rank in range(size):
            env = JobEnv("engine", rank, size, rendezvous, secret.encode(), job=job,
                         timeout=timeout, restart=restart).to_environ()
            workers.append(engine.start(rank, env))
        watched = [_Ended(w, i, ended) for i, w in enumerate(workers)]
        verdict = watch(watched)
        return _Attempt(verdict, workers)
    finally:
        stop_all(workers, grace, lambda i: i in ended)
        engine.cleanup()


class _Ended(Worker):
    """A worker whose end is recorded (for :func:`stop_all`'s grace)."""

    def __init__(self, worker: Worker, rank: int, ended: set[int]) -> None:
        self.worker, self.rank, self.ended = worker, rank, ended

    def wait(self) -> int:
        try:
            return self.worker.wait()
        finally:
            self.ended.add(self.rank)

    def tail(self) -> list[bytes]:
        return self.worker.tail()

    def stopped(self) -> bool:
        return self.worker.stopped()

    def secondary(self) -> bool:
        return self.worker.secondary()

    def kill(self) -> None:
        self.worker.kill()


def run_job(engine: Engine, *, size: int, run_id: str, timeout: float, max_restarts: int,
            name: str, grace: float = 5.0) -> list[Any]:
    """Run attempts of a ``size``-rank job until one succeeds; the workers' results by rank.

    Each attempt has job id ``{run_id}-r{attempt}`` and a fresh secret; its workers get
    ``TERASCALE_RESTART`` = the attempt number. After a failure every worker is stopped
    (killed after ``grace`` seconds) and, up to ``max_restarts`` times, all are started
    again -- unless the first failure is a :class:`terascale.ConfigError` or
    :class:`terascale.DataError` (bad options or input fail every attempt alike), which is
    raised as it is. Raises :class:`JobFailed` naming the rank that failed first in the
    last attempt, its error's last line and its traceback.

    Parameters
    ----------
    engine
        Starts the rendezvous and the workers (an :class:`Engine`).
    size
        Ranks in the job.
    run_id
        The run's id; attempts are ``{run_id}-r{attempt}``.
    timeout
        Seconds for the rendezvous and each worker's default collective deadline.
    max_restarts
        Restarts after a failure (0: none).
    grace
        Seconds a stopped worker gets before it is killed (default 5).
    name
        The engine's name (``"Ray"``, ``"Dask"``), which starts the messages.
    """
    def ended(a: _Attempt) -> bool:
        err = a.workers[a.verdict.rank].error() if a.verdict.rank is not None else None
        if isinstance(err, (ConfigError, DataError)):
            raise err  # the input's fault, the same on every attempt: no restart
        return a.verdict.status == 0

    def failed(n: int, a: _Attempt, again: bool) -> None:
        if again:
            log.warning("terascale.%s: attempt %d failed (%s); restarting all %d workers from "
                        "their checkpoint", name.lower(), n, _why(a), size)

    last = restarts(max_restarts, lambda n: _attempt(engine, size, run_id, n, timeout, grace),
                    ended, failed)
    if last.verdict.status == 0:
        return [w.result() for w in last.workers]
    assert last.verdict.rank is not None
    first = last.workers[last.verdict.rank]
    tail = b"".join(first.tail()).decode(errors="replace").rstrip()
    raise JobFailed(f"terascale {name} job failed {max_restarts + 1} time(s); {_why(last)}; "
                    f"every worker was stopped. Its last error:\n{tail}") from first.error()


def _why(attempt: _Attempt) -> str:
    v = attempt.verdict
    if v.blame is not None:
        return f"{v.blame.why} (rank {v.rank} gave up first)"
    if v.note is not None:
        return v.note
    assert v.rank is not None
    cause = cause_line(attempt.workers[v.rank].tail())
    return f"rank {v.rank} failed first" + (f": {cause}" if cause else "")
