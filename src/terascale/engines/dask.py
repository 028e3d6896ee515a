"""terascale on Dask: one task per rank, each pinned to a Dask worker process of its own.

``run(fn, num_workers=N)`` picks N workers of the connected ``dask.distributed`` cluster,
submits ``fn`` to each as a task pinned there, and ``terascale.init()`` inside ``fn`` joins
the job. Dask schedules and moves data; our own transports carry the collectives.

How a job runs (:mod:`terascale.launch.runner`, the job runner every engine shares):

* **Rendezvous**: the first picked worker serves it (``Client.run`` starts a
  :class:`~terascale.rendezvous.RendezvousServer` in that worker process, a fresh job id and
  secret per attempt), listening on that worker's address (``TERASCALE_BIND`` in the
  workers' environment overrides it), never on every interface. Not on the client: a Dask
  client is often outside the cluster (a laptop, a notebook), a worker is inside it.
* **One rank per worker process**: ``terascale.init()`` reads its place from the process's
  environment, so two ranks never share a process; ``num_workers`` is at most the number of
  Dask workers (start them with ``nthreads`` as your function needs).
* **Failures**: a task that raises, or a worker process that dies (the scheduler drops it),
  ends the attempt: the first failure is blamed (an echo such as "lost peer rank 1" is not),
  every task still running is stopped by restarting its worker process (its nanny starts a
  fresh one), and the whole group starts again, up to ``max_restarts`` times, resuming from
  a :class:`terascale.Checkpoint`. Because the collectives are deterministic, the restarted
  run ends bitwise where a run without failures would. A :class:`terascale.ConfigError` or
  :class:`terascale.DataError` is the input's fault and is raised at once.

``train_linear(ddf, ...)`` is the linear learner on a dask DataFrame: partition ``p`` goes
to rank ``p mod num_workers`` (the partitions are computed on the cluster and handed to
that rank's task; nothing but the model reaches the client), each rank encodes its
partitions as the Ray learner encodes its split (table columns hashed as the CSV reader
hashes a file, or a column of VW/libsvm lines parsed), then joins the allreduce and trains
-- delayed initialization, as in Hadoop AllReduce (Agarwal et al., JMLR 2014). The
partitions stay in the cluster's memory for the job, so a restart replays the same split.
"""

from __future__ import annotations

import functools
import time
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np

from .._bind import bind_address
from .._env import read_bind
from .._errors import ConfigError, DataError
from ..launch.runner import Worker, run_job
from ..rendezvous import RendezvousServer
from ._common import check_workers, new_run_id, remove_stale_segments, run_rank, split_parse_options

__all__ = ["run", "train_linear"]

_POLL_S = 0.05  # how often a rank's waiter looks at its task
_MEMBERS_S = 0.25  # ... and asks the scheduler whether its worker process is still there
_servers: dict[str, RendezvousServer] = {}  # in a worker process: the rendezvous it serves


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise ConfigError("terascale.dask needs dask.distributed: pip install "
                          "'terascale[dask]'") from None
    return distributed


def _client(client: Any) -> Any:
    if client is not None:
        return client
    distributed = _distributed()
    try:
        return distributed.default_client()
    except ValueError:
        raise ConfigError("terascale.dask needs a dask.distributed cluster: create a Client "
                          "(distributed.Client(LocalCluster(...)) or Client('tcp://...')) "
                          "or pass client=") from None


def _serve(job: str, secret: str, size: int, host: str) -> str:
    """In the first picked worker's process: start the attempt's rendezvous; HOST:PORT."""
    bind = bind_address(host, bind=read_bind(), what="the Dask worker's address")
    server = RendezvousServer(size, secret.encode(), host=bind, job=job).start()
    _servers[job] = server
    return f"{host}:{server.address[1]}"


def _close(job: str) -> None:
    server = _servers.pop(job, None)
    if server is not None:
        server.close()


def _task(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
          env: dict[str, str], run_id: str, job: str) -> Any:
    """One rank, in a Dask worker's thread: fn with the job's environment set."""
    return run_rank(fn, args, kwargs, env, run_id, job, functools.partial(_close, job))


def _members(client: Any) -> set[str]:
    """The addresses of the cluster's worker processes, asked of the scheduler now.

    Not ``client.scheduler_info()["workers"]``: since distributed 2025 the client refreshes
    that shared copy every two seconds *without* per-worker entries, so a thread reading it
    right after its own update can find no workers at all (a live worker taken for a dead
    one). Its own ``identity`` call's answer is this thread's alone.
    """
    import inspect

    if "n_workers" in inspect.signature(client.scheduler_info).parameters:
        return set(client.sync(client.scheduler.identity, n_workers=-1)["workers"])
    return set(client.scheduler_info()["workers"])


def _host(address: str) -> str:
    """``tcp://10.0.0.5:40000`` -> ``10.0.0.5`` (``[::1]`` -> ``::1``)."""
    where = address.split("://", 1)[-1].rsplit(":", 1)[0]
    return where.strip("[]")


class _TaskRun(Worker):
    """One rank's task, for the job runner: done or raised, or its worker process gone."""

    def __init__(self, client: Any, future: Any, address: str, rank: int) -> None:
        self.client, self.future, self.address = client, future, address
        self.rank = rank
        self._tail: list[bytes] = []
        self._error: BaseException | None = None
        self._killed = False

    def _present(self) -> bool:
        # A worker process restarted by its nanny comes back at a new address (its port is
        # the kernel's pick unless fixed with --worker-port).
        try:
            return self.address in _members(self.client)
        except Exception:  # a query that failed is no death; a lost scheduler fails the task
            return True

    def wait(self) -> int:
        looked = time.monotonic()
        while not self.future.done():
            if self._killed:
                return 137
            if time.monotonic() - looked >= _MEMBERS_S:
                looked = time.monotonic()
                if not self._present():
                    self._tail = [f"WorkerLost: a worker died: the Dask worker {self.address} "
                                  f"of rank {self.rank} left the cluster\n".encode()]
                    return 137
            time.sleep(_POLL_S)
        if self.future.status == "finished":
            return 0
        try:
            exc = self.future.exception(timeout=5)
            tb = self.future.traceback(timeout=5)
        except Exception as e:  # cancelled, or the scheduler lost it
            exc, tb = e, None
        self._error = exc
        self._tail = [ln.encode() for block in traceback.format_exception(type(exc), exc, tb)
                      for ln in block.splitlines(keepends=True)]
        return 1

    def tail(self) -> list[bytes]:
        return self._tail

    def kill(self) -> None:
        if self._killed:
            return
        self._killed = True
        if self.future.done():
            return
        self.future.cancel()
        if self._present():  # still running fn: only a new process stops it
            try:
                self.client.restart_workers([self.address], raise_for_error=False)
            except Exception:  # no nanny: the task ends at its own deadline
                pass

    def result(self) -> Any:
        return self.future.result()

    def error(self) -> BaseException | None:
        return self._error


class _DaskEngine:
    """Each attempt: ``size`` Dask workers picked anew (a restarted one has a new address)."""

    def __init__(self, client: Any, fn: Callable[..., Any],
                 args: Callable[[int], list[tuple[Any, ...]]], kwargs: dict[str, Any], *,
                 timeout: float, run_id: str) -> None:
        self.client, self.fn, self.args, self.kwargs = client, fn, args, kwargs
        self.timeout, self.run_id = timeout, run_id
        self.workers: list[str] = []  # addresses by rank
        self.job = ""
        self.attempt = -1

    def serve(self, job: str, secret: str, size: int) -> str:
        self.workers = _pick(self.client, size, self.timeout)
        self.job, self.attempt = job, self.attempt + 1
        self.attempt_args = self.args(self.attempt)
        first = self.workers[0]
        return str(self.client.run(_serve, job, secret, size, _host(first),
                                   workers=[first])[first])

    def start(self, rank: int, env: dict[str, str]) -> Worker:
        address = self.workers[rank]
        future = self.client.submit(_task, self.fn, self.attempt_args[rank], self.kwargs, env,
                                    self.run_id, self.job, key=f"terascale-{self.job}-{rank}",
                                    workers=[address], allow_other_workers=False, pure=False,
                                    retries=0)
        return _TaskRun(self.client, future, address, rank)

    def cleanup(self) -> None:
        remove_stale_segments(self.run_id)  # the client's host
        present = _members(self.client)
        if self.workers and self.workers[0] in present:
            try:  # rank 0's task never ran: its server is still up
                self.client.run(_close, self.job, workers=[self.workers[0]])
            except Exception:
                pass


def _pick(client: Any, size: int, timeout: float) -> list[str]:
    """``size`` workers' addresses, in address order; waits for them up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        workers = _members(client)
        if len(workers) >= size:
            return sorted(workers)[:size]
        if time.monotonic() >= deadline:
            raise ConfigError(f"num_workers={size} exceeds the {len(workers)} Dask workers "
                              f"of the cluster (one rank per worker process); start more "
                              f"workers or ask for fewer")
        time.sleep(0.1)


def run(fn: Callable[..., Any], *, num_workers: int, args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None, timeout: float = 60.0, max_restarts: int = 3,
        client: Any = None) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on ``num_workers`` Dask workers; returns results by rank.

    Raises :class:`terascale.launch.runner.JobFailed` (a :class:`terascale.TerascaleError`)
    naming the rank that failed first when every attempt failed.

    Parameters
    ----------
    fn
        The job: inside it, ``terascale.init()`` joins (rank = its place among the picked
        workers). It and its arguments are pickled to the workers (cloudpickle).
    num_workers
        Ranks, one per Dask worker process; at most the cluster's workers (waited for up to
        ``timeout`` while they start).
    args, kwargs
        Passed to ``fn``.
    timeout
        Seconds: bounds the wait for workers and the rendezvous, and is the default
        deadline of every collective.
    max_restarts
        How often the whole group is started again after a task raised or a worker process
        died (a worker still running is restarted by its nanny). ``fn`` resumes from its
        :class:`terascale.Checkpoint`; ``TERASCALE_RESTART`` tells it the attempt.
    client
        A ``distributed.Client`` (default: the current one; a ConfigError when there is
        none).
    """
    check_workers(num_workers, timeout)
    if not isinstance(max_restarts, int) or isinstance(max_restarts, bool) or max_restarts < 0:
        raise ConfigError(f"max_restarts={max_restarts!r} must be a non-negative integer")
    job_args = tuple(args)
    return _run(fn, num_workers, lambda attempt: [job_args] * num_workers, dict(kwargs or {}),
                float(timeout), max_restarts, _client(client))


def _run(fn: Callable[..., Any], num_workers: int,
         args: Callable[[int], list[tuple[Any, ...]]], kwargs: dict[str, Any], timeout: float,
         max_restarts: int, client: Any) -> list[Any]:
    run_id = new_run_id()
    engine = _DaskEngine(client, fn, args, kwargs, timeout=timeout, run_id=run_id)
    return run_job(engine, size=num_workers, run_id=run_id, timeout=timeout,
                   max_restarts=max_restarts, name="Dask")


def _train(parts: list[Any], enc: Any, options: dict[str, Any], storage: str | None,
           ) -> dict[str, Any]:
    """One rank: encode my partitions (pandas DataFrames), join the job, train."""
    import pyarrow as pa

    import terascale

    from ..linear import Dataset, train
    from ._ray_linear import _store

    comm = terascale.init()
    cols = list(enc.columns)
    encoded, first = [], 0
    for k, part in enumerate(parts):  # partitions rank, rank + size, rank + 2 size, ...
        if len(part) == 0:
            continue
        batch = pa.RecordBatch.from_pandas(part[cols], preserve_index=False)
        rows = list(zip(*[batch.column(c).to_pylist() for c in cols]))
        encoded.append(enc.encode(rows, 0, f"Dask partition {comm.rank + k * comm.size}"))
        first += len(rows)
    where = f"Dask rank {comm.rank}"
    total = comm.allreduce(np.array([float(first)]))
    if total[0] == 0:
        raise DataError("train_linear: the dask DataFrame has no rows")
    data = Dataset.concat(encoded) if encoded else Dataset.concat([enc.encode([], 0, where)])
    model = train(data, comm=comm, **options)
    metrics = [{"pass": i + 1, "loss": float(x)}
               for i, x in enumerate(model.info.get("online_loss", []))]
    if "objective" in model.info:
        metrics.append({"pass": len(metrics) + 1, "objective": float(model.info["objective"]),
                        "batch_passes": int(model.info.get("batch_passes", 0))})
    saved = _store(model, storage) if comm.rank == 0 and storage else None
    return {"model": model if comm.rank == 0 else None, "rows": first, "metrics": metrics,
            "saved": saved}


def train_linear(ddf: Any, *, num_workers: int = 2, column: str | None = None,
                 timeout: float = 60.0, storage_path: str | None = None,
                 on_metrics: Callable[[dict[str, Any]], None] | None = None,
                 max_restarts: int = 0, client: Any = None, **options: Any) -> Any:
    """Train a :class:`terascale.linear.LinearModel` on a dask DataFrame.

    Parameters
    ----------
    ddf
        A ``dask.dataframe.DataFrame``: table columns (``format="csv"``, ``label=`` the
        label column; numbers are values, other cells categories, as the CSV reader hashes
        a file) or one column of VW/libsvm lines (``format="vw"``, the default).
    num_workers
        Ranks (one per Dask worker process). Partition ``p`` is read by rank
        ``p % num_workers``; the result equals, bitwise, terascale workers training on
        the same partitions parsed with :func:`terascale.linear.parse_lines`.
    column
        The column of example lines, when the DataFrame has several (``format="vw"``).
    timeout
        Seconds: the wait for workers, the rendezvous, every collective's deadline.
    storage_path
        Where rank 0 writes ``model.npz`` (a directory, or a URI ``pyarrow.fs`` opens:
        ``s3://``, ``gs://``, ``hdfs://``); ``model.info["dask"]["saved"]`` is its path.
    on_metrics
        Called on the client with each pass's metrics (``{"pass": 1, "loss": ...}``, the
        batch phase's ``objective`` last) when the job ends; also in
        ``model.info["dask"]["metrics"]``.
    max_restarts
        How often the job starts again after a task raised or a worker died; the partitions
        are kept in the cluster, so a restart reads the same split (and trains from the
        start).
    client
        A ``distributed.Client`` (default: the current one).
    options
        Those of :func:`terascale.linear.train` (``bits``, ``passes``, ``bfgs``, ``l2``,
        ``loss``, ``quadratic``...) and how rows are parsed (``format``, ``label``,
        ``categorical``, ``ignore``...), as for :func:`terascale.ray.train_linear`.
    """
    import pyarrow as pa

    from ._ray_linear import _encoding

    if not (hasattr(ddf, "to_delayed") and hasattr(ddf, "npartitions")
            and hasattr(ddf, "_meta")):
        raise ConfigError(f"train_linear takes a dask DataFrame, not {type(ddf).__name__}")
    check_workers(num_workers, timeout)
    if not isinstance(max_restarts, int) or isinstance(max_restarts, bool) or max_restarts < 0:
        raise ConfigError(f"max_restarts={max_restarts!r} must be a non-negative integer")
    client = _client(client)
    parse = split_parse_options(options)
    schema = pa.Schema.from_pandas(ddf._meta, preserve_index=False)
    enc = _encoding(schema, column, parse)
    # Computed on the cluster and kept there for the job (a restart reads them again).
    parts = client.compute(ddf[list(enc.columns)].to_delayed())
    shares = [(parts[r::num_workers], enc, options, storage_path) for r in range(num_workers)]
    out = _run(_train, num_workers, lambda attempt: shares, {}, float(timeout), max_restarts,
               client)
    model = out[0]["model"]
    model.info["dask"] = {"workers": num_workers, "rows": [o["rows"] for o in out],
                          "metrics": out[0]["metrics"], "saved": out[0]["saved"]}
    if on_metrics is not None:
        for m in out[0]["metrics"]:
            on_metrics(m)
    return model
