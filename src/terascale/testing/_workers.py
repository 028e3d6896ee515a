"""Run a function on N real worker processes: the multiprocess harness of the test suite.

In the style of PyTorch's ``MultiProcessTestCase``: every call starts ``n`` fresh processes
that join a real job (rendezvous, TCP links, shared memory), runs ``fn(comm, *args)`` on each,
and returns the per-rank results in rank order. The whole run has a deadline; when one
worker fails, the others are killed at once and the first failure's traceback is raised
in the caller as :class:`WorkerFailed`.

>>> from terascale.testing import run_workers
>>> run_workers(lambda comm: int(comm.allreduce(comm.rank + 1)), 3)
[6, 6, 6]
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import secrets
import signal
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from .._env import JobEnv
from ..launch import remove_job_segments
from ..rendezvous import RendezvousServer

__all__ = ["WorkerFailed", "run_workers"]


class WorkerFailed(AssertionError):
    """A worker raised or died; the message holds its traceback.

    Parameters
    ----------
    message
        The worker's traceback, or why it died.
    rank
        The rank that failed.
    exc_type
        The name of the exception's class (None: the worker died without raising).
    """

    def __init__(self, message: str, *, rank: int, exc_type: str | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.exc_type = exc_type


def _child(fn: Callable[..., Any], args: tuple[Any, ...], env: dict[str, str],
           results: Any, init_kwargs: dict[str, Any]) -> None:
    os.environ.update(env)
    rank = int(env["TERASCALE_RANK"])
    try:
        import terascale

        with terascale.init(**init_kwargs) as comm:
            value = fn(comm, *args)
        results.put((rank, "ok", value, None))
    except BaseException as e:  # ferry everything back, SystemExit included
        results.put((rank, "error", traceback.format_exc(), type(e).__name__))
        raise SystemExit(1) from None


def run_workers(fn: Callable[..., Any], n: int, *, args: Sequence[Any] = (),
                timeout: float = 60.0, env: dict[str, str] | None = None,
                host_ids: Sequence[str] | None = None, collective_timeout: float | None = None,
                expect_failure: bool = False) -> list[Any]:
    """Run ``fn(comm, *args)`` on ``n`` processes; return results in rank order.

    Each worker is a forked process that joins the job with :func:`terascale.init`, so
    the whole stack runs (rendezvous, TCP links, shared memory).

    Parameters
    ----------
    fn
        Called as ``fn(comm, *args)`` in each worker; its return value (picklable) is
        collected.
    n
        The number of workers (the world size).
    args
        Extra arguments of ``fn``.
    timeout
        Seconds the whole run may take (default 60); a worker still running then is
        killed.
    env
        Extra environment variables for every worker (default None).
    host_ids
        The hosts the ranks pretend to live on (round robin; default None: this host).
    collective_timeout
        The workers' ``init(timeout=)`` (default None: ``init``'s default deadline).
    expect_failure
        Return the per-rank outcomes instead of raising: a list of ``("ok", value)`` or
        ``("error", (exc_type, traceback))`` (``("killed", code)`` for a worker that died
        without reporting, ``("timeout", None)`` for one still running at the deadline).
        Default False: the first failure raises :class:`WorkerFailed`.
    """
    ctx = mp.get_context("fork")
    secret = secrets.token_hex(16)
    server = RendezvousServer(n, secret.encode())
    results = ctx.Queue()
    procs = []
    init_kwargs = {} if collective_timeout is None else {"timeout": collective_timeout}
    for rank in range(n):
        job = JobEnv("terascale.testing", rank, n, server.address, secret.encode(),
                     job=server.job, host_id=host_ids[rank % len(host_ids)] if host_ids else None)
        e = {**(env or {}), **job.to_environ()}
        p = ctx.Process(target=_child, args=(fn, tuple(args), e, results, init_kwargs),
                        daemon=True)
        p.start()
        procs.append(p)
    server.start()  # after the forks: no thread is copied into the children
    outcome: dict[int, tuple[str, Any]] = {}
    deadline = time.monotonic() + timeout
    first_error: tuple[int, str, str | None] | None = None
    try:
        while len(outcome) < n:
            try:
                rank, status, value, exc_type = results.get(timeout=0.05)
            except queue.Empty:
                for r, p in enumerate(procs):
                    if r not in outcome and p.exitcode is not None:
                        # Let a just-sent result arrive before declaring the worker dead.
                        try:
                            rank, status, value, exc_type = results.get(timeout=0.5)
                        except queue.Empty:
                            outcome[r] = ("killed", p.exitcode)
                            if first_error is None:
                                first_error = (r, f"worker {r} died with exit code {p.exitcode}",
                                               None)
                        else:
                            break
                else:
                    if time.monotonic() > deadline:
                        missing = sorted(set(range(n)) - outcome.keys())
                        if expect_failure:
                            for r in missing:
                                outcome[r] = ("timeout", None)
                            break
                        raise WorkerFailed(f"ranks {missing} did not finish within {timeout} s",
                                           rank=missing[0])
                    continue
            outcome[rank] = (status, value if status == "ok" else (exc_type, value))
            if status == "error" and first_error is None:
                first_error = (rank, value, exc_type)
            if first_error is not None and not expect_failure:
                break
    finally:
        for p in procs:
            if p.is_alive() and p.pid is not None:  # pid is set once started
                os.kill(p.pid, signal.SIGKILL)
            p.join(5)
        server.close()
        remove_job_segments(server.job)
    if expect_failure:
        return [outcome.get(r, ("killed", None)) for r in range(n)]
    if first_error is not None:
        rank, text, exc_type = first_error
        raise WorkerFailed(f"rank {rank} failed:\n{text}", rank=rank, exc_type=exc_type)
    return [outcome[r][1] for r in range(n)]
