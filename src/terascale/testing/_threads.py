"""Run a function on N ranks as threads of this process: the fast harness of the test suite.

The threads join a real job -- a rendezvous server in this process, ``_init.connect`` on
every thread, real :class:`~terascale.Communicator` objects -- linked by the in-process
transport (:mod:`terascale.transport.inprocess`) instead of TCP, the way PyTorch's tests
run a multi-threaded process group. Every algorithm, sub-communicator and failure path
runs as over TCP, in a fraction of the time of :func:`~terascale.testing.run_workers`
(no fork, no interpreter start, no handshake): use it wherever what is tested is not the
processes themselves (their links, their crashes, their environment).

>>> from terascale.testing import run_threads
>>> run_threads(lambda comm: int(comm.allreduce(comm.rank + 1)), 3)
[6, 6, 6]
"""

from __future__ import annotations

import secrets
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from .._errors import CollectiveError, PeerLost, PeerTimeout
from .._init import connect
from ..launch import remove_job_segments
from ..rendezvous import RendezvousServer
from ._workers import WorkerFailed

__all__ = ["run_threads"]


def run_threads(fn: Callable[..., Any], world_size: int, *, args: Sequence[Any] = (),
                timeout: float = 60.0, host_ids: Sequence[str] | None = None,
                collective_timeout: float | None = None,
                expect_failure: bool = False) -> list[Any]:
    """Run ``fn(comm, *args)`` on ``world_size`` threads; return results in rank order.

    A rank whose ``fn`` raises fails its transport first (an ABORT naming it, as a crashing
    process's hook does), so the other ranks raise an error naming that rank instead of
    waiting out their deadline.

    Parameters
    ----------
    fn
        Called as ``fn(comm, *args)`` on each rank's thread; its return value is collected.
    world_size
        The number of ranks (threads).
    args
        Extra arguments of ``fn``.
    timeout
        Seconds the whole run may take (default 60); a rank still running then is
        reported and its transport failed, which releases every rank waiting on it (a
        thread cannot be killed: one stuck outside a collective stays, as a daemon).
    host_ids
        The host each rank pretends to live on (round robin; default None: they share this
        host, so the shared-memory algorithms run between the threads as between
        processes).
    collective_timeout
        The communicators' deadline in seconds (default None: ``timeout``).
    expect_failure
        Return every rank's outcome instead of raising -- ``("ok", value)``, ``("error",
        (exc_type, traceback))`` or ``("timeout", None)``; otherwise (the default) the
        first failure raises :class:`WorkerFailed` with its traceback.
    """
    secret = secrets.token_hex(16).encode()
    server = RendezvousServer(world_size, secret).start()
    outcome: dict[int, tuple[str, Any]] = {}
    comms: dict[int, Any] = {}
    lock = threading.Lock()
    limit = timeout if collective_timeout is None else collective_timeout

    def rank_main(rank: int) -> None:
        try:
            comm = connect(rank, world_size, server.address, secret, timeout=limit,
                           host_id=host_ids[rank % len(host_ids)] if host_ids else None,
                           transport="inprocess")
            with lock:
                comms[rank] = comm
            try:
                value = fn(comm, *args)
            except BaseException as e:
                links = comm._transport
                if links is not None and links.broken is None and \
                        not isinstance(e, CollectiveError):
                    links.fail(PeerLost(f"rank {rank}: uncaught {type(e).__name__}: {e}",
                                        rank=rank))
                raise
            finally:
                comm.close()
            result: tuple[str, Any] = ("ok", value)
        except BaseException as e:  # every outcome goes back to the caller, SystemExit too
            result = ("error", (type(e).__name__, traceback.format_exc()))
        with lock:
            outcome[rank] = result

    threads = [threading.Thread(target=rank_main, args=(r,), daemon=True,
                                name=f"terascale-rank-{r}") for r in range(world_size)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + timeout
        for t in threads:
            t.join(max(deadline - time.monotonic(), 0.0))
        stuck = [r for r, t in enumerate(threads) if t.is_alive()]
        for r in stuck:
            with lock:
                comm = comms.get(r)
            if comm is not None and comm._transport is not None:
                comm._transport.fail(PeerTimeout(f"rank {r}: still running after the "
                                                 f"harness's {timeout:g} s", rank=r))
        for t in threads:
            t.join(5.0 if stuck else 0.0)
    finally:
        server.close()
        remove_job_segments(server.job)
    with lock:
        done = dict(outcome)
    results = [done.get(r, ("timeout", None)) for r in range(world_size)]
    if expect_failure:
        return results
    failed = [(r, v) for r, (status, v) in enumerate(results) if status == "error"]
    if failed:
        # the root cause: the rank whose error is not an echo of another's failure
        rank, (exc_type, text) = next(((r, v) for r, v in failed
                                       if "aborted because rank" not in v[1]), failed[0])
        raise WorkerFailed(f"rank {rank} failed:\n{text}", rank=rank, exc_type=exc_type)
    stuck = [r for r, (status, _) in enumerate(results) if status == "timeout"]
    if stuck:
        raise WorkerFailed(f"ranks {stuck} did not finish within {timeout} s", rank=stuck[0])
    return [value for _, value in results]
