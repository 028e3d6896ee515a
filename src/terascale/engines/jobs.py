"""Reference jobs for the engine adapters' tests, examples and benchmarks (public, so that
``terascale bench engines`` and user tests of their own cluster can run them).

They live in the package (not in the test files) because Spark executors and Ray workers
unpickle a job function by importing its module, and the test directory is not importable
there. ``checkpointed_job`` is the restart story in miniature: a deterministic
data-parallel gradient loop that commits a :class:`terascale.Checkpoint` every step and can
be made to fail once -- by an exception, by its process dying, or by killing its Spark
executor's JVM -- at a chosen rank and step.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .._checkpoint import Checkpoint
from .._env import read_env
from .._errors import ConfigError
from .._init import init
from ..testing import listening

__all__ = ["Fault", "allreduce_job", "checkpointed_job", "listening_job"]


@dataclass(frozen=True)
class Fault:
    """Fail once: at ``rank`` right after checkpoint ``step`` is committed.

    Parameters
    ----------
    rank
        The rank that fails.
    step
        The checkpoint after which it fails.
    marker
        A file path every worker can see; created when the fault fires, so the restarted
        attempt runs through.
    kind
        ``"raise"`` (an exception in the task, the default), ``"exit"`` (the worker
        process is SIGKILLed) or ``"executor"`` (the Spark executor JVM that runs the task
        is SIGKILLed, taking the task and its shuffle files with it).
    """

    rank: int
    step: int
    marker: str
    kind: str = "raise"


def allreduce_job(length: int = 1000) -> dict[str, Any]:
    """Join, allreduce ``rank + 1`` over ``length`` elements, report who we were.

    Parameters
    ----------
    length
        Elements of the allreduced array (default 1000).
    """
    with init() as comm:
        x = np.full(length, comm.rank + 1, np.float64)
        total = comm.allreduce(x)
        return {"rank": comm.rank, "size": comm.size, "job": comm.job, "pid": os.getpid(),
                "sum": float(total[0]), "same": bool(np.all(total == total[0]))}


def listening_job() -> dict[str, Any]:
    """Join, and report where the job's rendezvous is and where it listens.

    ``rendezvous`` is the HOST:PORT the workers were given; ``listening`` the addresses on
    which this host listens on that port while the job runs (empty where the rendezvous is
    on another host): the check that a runner's server is not on every interface.
    """
    job = read_env()
    with init() as comm:
        rendezvous = "" if job is None or job.rendezvous is None else \
            f"{job.rendezvous[0]}:{job.rendezvous[1]}"
        where = listening(job.rendezvous[1]) if rendezvous else []
        comm.barrier()  # rank 0's server is up until every rank has looked
        return {"rank": comm.rank, "rendezvous": rendezvous, "listening": where}


def _executor_pid() -> int:
    """The Spark executor JVM above this Python worker (local-cluster or a real cluster)."""
    pid = os.getppid()
    while pid > 1:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        if b"CoarseGrainedExecutorBackend" in cmdline:
            return pid
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    raise ConfigError("no Spark executor JVM above this task (local[N] runs tasks in the "
                      "driver's JVM; use local-cluster[...] or a cluster)")


def _fire(fault: Fault) -> None:
    Path(fault.marker).touch()
    if fault.kind == "raise":
        raise RuntimeError(f"injected failure at step {fault.step} of rank {fault.rank}")
    if fault.kind == "exit":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault.kind == "executor":
        os.kill(_executor_pid(), signal.SIGKILL)
        signal.pause()  # the dying executor takes this worker with it
    raise ConfigError(f"Fault.kind={fault.kind!r}: use 'raise', 'exit' or 'executor'")


def checkpointed_job(directory: str, steps: int = 8, dim: int = 64,
                     fault: Fault | None = None) -> tuple[int, bytes]:
    """Gradient steps on a per-rank least-squares problem, checkpointed after every step.

    Returns ``(first step of this attempt, final weights as bytes)``; the bytes of a run
    that failed and resumed equal those of a run that never failed.

    Parameters
    ----------
    directory
        Where the checkpoints go; every attempt's rank 0 must be able to read it.
    steps
        Gradient steps in all (default 8).
    dim
        Length of the weight vector (default 64).
    fault
        A :class:`Fault` to inject once (default None: none).
    """
    with init() as comm:
        ckpt = Checkpoint(directory, comm)
        found = ckpt.load()
        start, w = (0, np.zeros(dim)) if found is None else (found[0], found[1]["w"])
        rng = np.random.default_rng(1234 + comm.rank)  # this rank's shard of the data
        a = rng.standard_normal((32, dim))
        b = a @ np.linspace(-1.0, 1.0, dim) + 0.01 * rng.standard_normal(32)
        for step in range(start, steps):
            grad = a.T @ (a @ w - b) / len(b)
            w = w - 0.05 * comm.allreduce(grad) / comm.size
            ckpt.save(step + 1, {"w": w})
            if (fault is not None and comm.rank == fault.rank and step + 1 == fault.step
                    and not os.path.exists(fault.marker)):
                _fire(fault)
        return start, w.tobytes()
