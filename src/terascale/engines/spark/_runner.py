"""terascale on Spark: one barrier stage is one terascale job.

``run(fn, num_workers=N)`` turns ``fn`` into the N tasks of a Spark *barrier* stage
(SPIP SPARK-24374, Spark >= 2.4): Spark starts all N tasks together or none of them, and
when one fails it kills the others and reruns the whole stage -- exactly the gang
semantics an allreduce job needs, and the "map job moves the program to the data" of
Hadoop AllReduce (Agarwal et al., JMLR 2014). Spark only schedules; our own transports
carry the data.

How a task joins (the rendezvous is exchanged with ``BarrierTaskContext.allGather``)
-----------------------------------------------------------------------------------------
Task 0 starts a :class:`~terascale.rendezvous.RendezvousServer` on its own executor and
makes a fresh secret (the server listens on loopback under a local master, on the
executor's address on a cluster, on every interface only with ``TERASCALE_BIND=0.0.0.0``
in the executors); one ``allGather`` hands ``host:port`` and the secret to every task,
which then sets the ``TERASCALE_*`` variables so that ``terascale.init()`` inside ``fn``
joins the job (rank = partition id). We chose this over a server on the driver because:

* every stage *attempt* needs a fresh rendezvous: the slots are first-copy-wins, so the
  tasks of a rerun would be turned away by a server that already assembled attempt 0, and
  a rendezvous that lives in task 0 is born and dies with its attempt;
* the driver need not be reachable from the executors (Spark Connect, notebooks behind
  NAT), and nothing stays open on the driver after a job;
* the secret travels over Spark's own RPC (authenticated and encrypted when
  ``spark.authenticate``/``spark.network.crypto.enabled`` are on), never in the closure.

It costs one ``allGather`` (about 1 s: the barrier coordinator polls once a second) per
attempt, not per collective.

Facts designed around (measured on Spark 4.x)
---------------------------------------------
* A failed barrier *ResultStage* aborts the job (a failed barrier *ShuffleMapStage* would
  be resubmitted by Spark). So one attempt is one Spark job,
  ``rdd.barrier().mapPartitions(task).collect()`` (for a DataFrame read as Arrow batches,
  ``df.mapInArrow(task, schema, barrier=True)``), and the attempts are the job runner's
  (:func:`terascale.launch.runner.restarts`, as for every engine): the whole stage again,
  up to ``spark.stage.maxConsecutiveAttempts`` attempts in all (default 4), each task told
  its attempt (``TERASCALE_RESTART``). With ``fn`` resuming from a
  :class:`terascale.Checkpoint`, a task exception or a lost executor costs one restart
  from the last checkpoint, and -- the collectives being deterministic -- ends in bitwise
  the same state as a run without failures.
* Barrier mode refuses dynamic allocation and never launches speculative copies.
  Speculation is safe for terascale anyway: the rendezvous's slots are first-copy-wins, so
  under a non-barrier engine a speculative duplicate of a worker is told its slot is taken
  and exits cleanly (``terascale.init()`` exits with status 0), while the first copy keeps
  the job -- "use the first to finish reading the data" of Hadoop AllReduce.
* Executors must run the driver's interpreter: when this module creates the session it
  sets ``PYSPARK_PYTHON`` to ``sys.executable`` (set it yourself for ``spark-submit``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import pickle
import re
import secrets
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..._bind import bind_address
from ..._env import read_bind
from ..._errors import ConfigError, DataError, TerascaleError
from ...launch.runner import JobFailed, restarts
from ...rendezvous import RendezvousServer
from .._common import check_workers, job_env, new_run_id, remove_stale_segments

__all__ = ["TaskSpec", "barrier_safe", "check_cluster", "run", "run_on_frame", "run_on_rdd",
           "session", "task_slots"]

log = logging.getLogger("terascale.spark")


@dataclass(frozen=True)
class TaskSpec:
    """What every barrier task runs; shipped to the executors (pickled by reference).

    Parameters
    ----------
    fn
        The function each task calls; inside it ``terascale.init()`` joins the job.
    size
        The number of tasks (the job's world size).
    timeout
        Seconds for the rendezvous and the default deadline of every collective.
    run_id
        A fresh id per call; names the job and its rendezvous.
    args
        Positional arguments of ``fn``.
    kwargs
        Keyword arguments of ``fn``.
    prepare
        Delayed initialization: when set, ``prepare(rows)`` reads and caches the task's
        partition before the task joins the allreduce, and ``fn`` is called as
        ``fn(prepared, *args, **kwargs)`` (default None).
    local
        Every task runs on the driver's host (a local master): the rendezvous listens on
        loopback (default False).
    restart
        The attempt, as the job runner counts restarts (``TERASCALE_RESTART`` in the
        tasks); default None: not yet placed.
    """

    fn: Callable[..., Any]
    size: int
    timeout: float
    run_id: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    prepare: Callable[[Iterator[Any]], Any] | None = None
    local: bool = False
    restart: int | None = None  # the attempt (TERASCALE_RESTART in the tasks)


def session(spark: Any = None) -> Any:
    """``spark`` or the active SparkSession, created (with the driver's interpreter) if none.

    Parameters
    ----------
    spark
        A SparkSession to use (default None: the active one, or a new one).
    """
    if spark is not None:
        return spark
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise ConfigError("terascale.spark needs pyspark: pip install 'terascale[spark]' "
                          "(and Java 17)") from None
    return SparkSession.builder.getOrCreate()


def _slots(master: str) -> int | None:
    """Task slots of a local master (None for a real cluster manager: Spark checks then)."""
    if master == "local":
        return 1
    m = re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", master)
    if m:
        return (os.cpu_count() or 1) if m.group(1) == "*" else int(m.group(1))
    m = re.fullmatch(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]", master)
    if m:
        return int(m.group(1)) * int(m.group(2))
    return None


def task_slots(sc: Any) -> int:
    """How many tasks the cluster runs at once: a local master's threads, else what the
    scheduler reports for the default resource profile (executors must have registered).
    A ConfigError saying what to set when it cannot be known."""
    slots = _slots(sc.master)
    if slots is not None:
        return slots
    try:
        jsc = sc._jsc.sc()
        n = int(jsc.maxNumConcurrentTasks(
            jsc.resourceProfileManager().defaultResourceProfile()))
    except Exception:  # a py4j detail changed, Spark Connect: no JVM to ask
        n = 0
    if n <= 0:
        raise ConfigError(f"cannot tell how many tasks master {sc.master!r} runs at once "
                          f"(no executors registered yet?): set numWorkers= / num_workers= "
                          f"to at most the task slots, or set spark.executor.instances")
    return n


# RDDs whose partitions differ from their parent's: Spark refuses a barrier stage over
# them (BarrierJobUnsupportedRDDChainException), and on Spark 4 the refusal stops the
# SparkContext. A shuffle (repartition) before the barrier stage avoids them.
_UNSAFE = re.compile(r"CoalescedRDD|UnionRDD|PartitionPruningRDD|PartitionwiseSampledRDD|"
                     r"PartitionerAwareUnionRDD|ZippedPartitions|CartesianRDD|SlicedRDD")


def barrier_safe(data: Any) -> bool:
    """Whether a barrier stage may run directly over ``data`` (a DataFrame or an RDD):
    no RDD in its last stage changes the number of partitions (coalesce, union,
    sample, limit). When unsure, False: the caller shuffles, which is always safe."""
    try:
        if hasattr(data, "_jdf"):
            text = str(data._jdf.queryExecution().toRdd().toDebugString())
        else:
            text = data.toDebugString().decode() if isinstance(
                data.toDebugString(), bytes) else str(data.toDebugString())
    except Exception:
        return False
    stage = []
    for line in text.splitlines():
        if "+-(" in line:  # the next stage (behind a shuffle) starts here
            break
        stage.append(line)
    return _UNSAFE.search("\n".join(stage)) is None


def _wait_for_executors(sc: Any, num_workers: int, timeout: float) -> None:
    """Under local-cluster[N,C,M], wait until enough executors registered.

    Barrier mode checks the free slots when the job is submitted and, when they are too
    few (executors still starting), retries only every 15 s
    (``spark.scheduler.barrier.maxConcurrentTasksCheck.interval``).
    """
    m = re.fullmatch(r"local-cluster\[\s*(\d+)\s*,\s*(\d+)\s*,\s*\d+\s*\]", sc.master)
    if m is None:
        return
    needed = -(-num_workers // int(m.group(2)))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:  # block managers: the driver's and one per executor
            if sc._jsc.sc().getExecutorMemoryStatus().size() - 1 >= needed:
                return
        except Exception:  # a py4j detail changed: let Spark's own check handle it
            return
        time.sleep(0.2)


def check_cluster(sc: Any, num_workers: int, timeout: float = 60.0) -> None:
    """Refuse what barrier mode cannot run (dynamic allocation, too few local slots) and,
    under local-cluster, wait for the executors: before a job, not minutes into it.

    Parameters
    ----------
    sc
        The SparkContext.
    num_workers
        The barrier tasks the job will start at once.
    timeout
        Seconds to wait for a local-cluster's executors to register (default 60).
    """
    conf = sc.getConf()
    if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
        raise ConfigError("Spark barrier mode does not run with dynamic allocation: set "
                          "spark.dynamicAllocation.enabled=false for terascale jobs")
    slots = _slots(sc.master)
    if slots is not None and num_workers > slots:
        # Spark itself would retry the slot check for minutes before failing.
        raise ConfigError(f"num_workers={num_workers} exceeds the {slots} task slots of "
                          f"master {sc.master!r}; barrier mode starts all tasks at once")
    _wait_for_executors(sc, num_workers, timeout)


@dataclass(frozen=True)
class _Refused:
    """A task's result when some task's partition was refused before the job started."""

    error: BaseException


def _barrier_task(spec: TaskSpec, rows: Iterator[Any]) -> Iterator[tuple[int, Any]]:
    """Body of one barrier task: (prepare), rendezvous via allGather, fn, (rank, result).

    A partition that ``prepare`` refuses (:class:`DataError`, :class:`ConfigError`: the
    input's fault, the same on every attempt) does not fail the task, which would run
    again ``spark.stage.maxConsecutiveAttempts`` times to the same end: every task learns of
    it in the ``allGather`` it makes anyway, none joins the job, and the driver raises the
    error itself. The same holds for such an error that ``fn`` raises on every rank (a
    check the workers make together); raised on some ranks only, the others' collectives
    fail and the stage runs again as for any failure."""
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    rank = ctx.partitionId()
    prepared, refused = None, None
    if spec.prepare is not None:
        try:
            prepared = spec.prepare(rows)
        except (DataError, ConfigError) as e:
            refused = e
    remove_stale_segments(spec.run_id)  # before the allGather: no task of ours made any yet
    server = None
    message: dict[str, Any] = {"refused": refused is not None}
    if rank == 0 and refused is None:
        secret = secrets.token_hex(32)
        # Listen where the other tasks reach task 0 and nowhere else: loopback under a
        # local master, else the executor's address (TERASCALE_BIND overrides it).
        host = "127.0.0.1" if spec.local else ctx.getTaskInfos()[0].address.rsplit(":", 1)[0]
        bind = bind_address(host, bind=read_bind(), what="the Spark executor's address")
        server = RendezvousServer(spec.size, secret.encode(), host=bind,
                                  job=f"{spec.run_id}-{secrets.token_hex(4)}").start()
        message.update(rendezvous=f"{host}:{server.address[1]}", secret=secret,
                       job=server.job)
    try:
        infos = [json.loads(m) for m in ctx.allGather(json.dumps(message))]
        if any(i["refused"] for i in infos):
            result: Any = _Refused(refused) if refused is not None else None
        else:
            info = infos[0]
            with job_env(rank=rank, size=spec.size, rendezvous=info["rendezvous"],
                         secret=info["secret"], job=info["job"], timeout=spec.timeout,
                         restart=spec.restart):
                try:
                    if spec.prepare is not None:
                        result = spec.fn(prepared, *spec.args, **spec.kwargs)
                    else:
                        result = spec.fn(*spec.args, **spec.kwargs)
                except (DataError, ConfigError) as e:  # found by the job (e.g. labels
                    result = _Refused(e)  # checked across workers): every rank has it
    finally:
        if server is not None:
            server.close()
    yield rank, result


def _arrow_task(spec: TaskSpec, batches: Iterator[Any]) -> Iterator[Any]:
    """:func:`_barrier_task` under ``mapInArrow``: rows come as Arrow record batches, the
    result leaves pickled in one ``(rank, result)`` row."""
    import pyarrow as pa

    for rank, result in _barrier_task(spec, batches):
        yield pa.RecordBatch.from_arrays(
            [pa.array([rank], pa.int32()),
             pa.array([pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL)], pa.binary())],
            names=["rank", "result"])


_LOST = re.compile(r"Lost task (\d+)\.\d+ in stage [\d.]+ \(TID \d+\) \(([^)]*)\)")
_DEATH = ("Python worker exited unexpectedly", "ExecutorLostFailure", "Executor lost",
          "worker lost", "killed")


# a survivor's PeerLost: "lost peer rank 1 (...)" over TCP, "rank 1 is gone" in shared memory
_ECHO = re.compile(r"lost peer rank (\d+)|\brank (\d+) is gone")


def _died(text: str) -> str:
    """"a worker died: ..." when Spark's message says a task's process or executor was
    lost (rather than raising), naming the task (= rank) and where it ran; else ""."""
    if not any(d in text for d in _DEATH):
        # Spark reported a survivor's error first: the rank it lost is the one that died
        m = _ECHO.search(text)
        if m is None:
            return ""
        n = m.group(1) or m.group(2)
        return f"a worker died: task {n} (rank {n}); "
    m = _LOST.search(text)
    if m:
        where = f"task {m.group(1)} (rank {m.group(1)}) on {m.group(2)}"
    else:  # a barrier stage's own wording, or the job's summary
        m = (re.search(r"barrier task \w+\(\d+, (\d+)\)", text)
             or re.search(r"Task (\d+) in stage [\d.]+ failed", text))
        where = f"task {m.group(1)} (rank {m.group(1)})" if m else "a task"
    return f"a worker died: {where}; "


def _python_error(e: BaseException) -> str:
    """The Python traceback inside a Py4J error (the Java stack around it is noise)."""
    text = str(e)
    start = text.rfind("Traceback (most recent call last)")
    if start < 0:
        return text.strip().splitlines()[0] if text.strip() else type(e).__name__
    lines = []
    for line in text[start:].splitlines():
        if line.startswith("\tat ") or line.startswith("\tat\u00a0"):
            break
        lines.append(line)
    return "\n".join(lines[-20:])


def run_on_rdd(rdd: Any, spec: TaskSpec) -> list[Any]:
    """Run ``spec`` as a barrier stage over ``rdd`` (one task per partition) -> results.

    Parameters
    ----------
    rdd
        The RDD whose partitions become the tasks (one rank per partition).
    spec
        What each task runs (:class:`TaskSpec`).
    """
    def collect(attempt: TaskSpec) -> list[tuple[int, Any]]:
        task = functools.partial(_barrier_task, attempt)
        return rdd.barrier().mapPartitions(task).collect()  # type: ignore[no-any-return]

    return _collect(_placed(spec, rdd.context), rdd.context, collect)


def run_on_frame(df: Any, spec: TaskSpec) -> list[Any]:
    """:func:`run_on_rdd` over a DataFrame's partitions, ``spec.prepare`` reading them as
    Arrow record batches (``mapInArrow(barrier=True)``, pyarrow): columns of numbers
    instead of a Python ``Row`` per row, which costs more than training on it."""
    def collect(attempt: TaskSpec) -> list[tuple[int, Any]]:
        task = functools.partial(_arrow_task, attempt)
        out = df.mapInArrow(task, "rank int, result binary", barrier=True).collect()
        return [(r[0], pickle.loads(r[1])) for r in out]

    sc = df.sparkSession.sparkContext
    return _collect(_placed(spec, sc), sc, collect)


def _placed(spec: TaskSpec, sc: Any) -> TaskSpec:
    return dataclasses.replace(spec, local=str(sc.master).startswith("local"))


def _attempts(sc: Any) -> int:
    """How many attempts a job gets: Spark's own setting for a stage's consecutive ones."""
    try:
        return max(1, int(sc.getConf().get("spark.stage.maxConsecutiveAttempts", "4")))
    except ValueError:
        return 4


def _collect(spec: TaskSpec, sc: Any,
             job: Callable[[TaskSpec], Iterable[tuple[int, Any]]]) -> list[Any]:
    """Run the barrier job's attempts (the job runner's :func:`restarts`), readable errors,
    stale segments removed; results by rank."""
    attempts = _attempts(sc)

    def attempt(n: int) -> tuple[Any, BaseException | None]:
        if n > 0:  # a lost executor's replacement may still be registering
            _wait_for_executors(sc, spec.size, spec.timeout)
        try:
            return job(dataclasses.replace(spec, restart=n)), None
        except Exception as e:  # Py4JJavaError and friends: keep the Python part readable
            if e.__class__.__module__.startswith(("py4j", "pyspark")):
                return None, e
            raise
        finally:
            remove_stale_segments(spec.run_id)  # the driver's host (all of it under local[N])

    def failed(n: int, result: tuple[Any, BaseException | None], again: bool) -> None:
        if again:
            err = result[1]
            last = (_python_error(err).splitlines() or [""])[-1] if err is not None else ""
            log.warning("terascale.spark: attempt %d failed (%s%s); restarting all %d tasks "
                        "from their checkpoint", n, _died(str(err)), last, spec.size)

    pairs, error = restarts(attempts - 1, attempt, lambda r: r[1] is None, failed)
    if error is not None:
        raise JobFailed(f"terascale Spark job failed {attempts} time(s); {_died(str(error))}"
                        f"every task was stopped. Last worker error:\n"
                        f"{_python_error(error)}") from error
    results = dict(pairs)
    for r in sorted(results):  # a refused partition: its own error, at once (no retries)
        if isinstance(results[r], _Refused):
            raise results[r].error
    if sorted(results) != list(range(spec.size)):
        raise TerascaleError(f"Spark returned results for ranks {sorted(results)}, expected "
                             f"0..{spec.size - 1}")
    return [results[r] for r in range(spec.size)]


def run(fn: Callable[..., Any], *, num_workers: int, args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None, timeout: float = 60.0,
        spark: Any = None) -> list[Any]:
    """Run ``fn(*args, **kwargs)`` on ``num_workers`` Spark barrier tasks; results by rank.

    Inside ``fn``, ``terascale.init()`` joins the job (rank = the task's partition id).
    A failing task
    reruns all tasks (``spark.stage.maxConsecutiveAttempts`` attempts in all, default 4);
    make ``fn`` resume from a :class:`terascale.Checkpoint` in a directory every attempt's
    rank 0 can read. Raises :class:`terascale.TerascaleError` when every attempt failed.

    Parameters
    ----------
    fn
        The function each task calls with ``*args, **kwargs``; it calls ``terascale.init()`` to join
        the job. Its return value, pickled, comes back.
    num_workers
        The number of barrier tasks (the world size); the cluster needs that many free task slots at
        once.
    args
        Positional arguments of ``fn`` (pickled to every task).
    kwargs
        Keyword arguments of ``fn`` (default None: none).
    timeout
        Seconds; bounds the rendezvous and is the default deadline of every collective (default 60).
    spark
        A SparkSession (default None: the active one, or a new one).
    """
    check_workers(num_workers, timeout)
    sc = session(spark).sparkContext
    check_cluster(sc, num_workers, timeout)
    spec = TaskSpec(fn=fn, size=num_workers, timeout=float(timeout), run_id=new_run_id(),
                    args=tuple(args), kwargs=dict(kwargs or {}))
    return run_on_rdd(sc.parallelize(range(num_workers), num_workers), spec)
