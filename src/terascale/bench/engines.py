"""``terascale bench engines``: start-up, per-job and recovery time of terascale on Spark and
Ray, next to the local launcher ``terascale run``. Every engine runs the same two jobs from
:mod:`terascale.engines.jobs` on 2 workers:

* ``allreduce_job``: join, one allreduce of 1000 doubles, leave (pure orchestration cost);
* ``checkpointed_job``: 8 checkpointed gradient steps, clean and with one failure after
  step 4 (recovery = failed run minus clean run; the failure kind is the engine's own:
  a killed worker process, a task exception, a SIGKILLed executor JVM, a killed actor).

    terascale bench engines [--reps 5] [--only local,spark,cluster,ray] [--json out.json]
    terascale bench engines --only linear [--lines 400000]   # train_linear: Spark vs local

Each engine runs in a fresh process (its start-up includes the JVM or Ray).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from .._errors import ConfigError
from ..engines.jobs import Fault, allreduce_job, checkpointed_job

__all__ = ["add_bench_parser"]

N = 2
ENGINES = ("local", "spark", "cluster", "ray")


def _timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _recovery(run: Callable[..., Any], kind: str, tmp: str) -> tuple[float, float]:
    clean = _timed(lambda: run(checkpointed_job, args=(f"{tmp}/clean", 8)))
    fault = Fault(rank=1, step=4, marker=f"{tmp}/fired-{kind}", kind=kind)
    failed = _timed(lambda: run(checkpointed_job, args=(f"{tmp}/faulty", 8),
                                kwargs={"fault": fault}))
    if not os.path.exists(fault.marker):
        raise RuntimeError(f"the {kind} fault did not fire")
    return clean, failed


def local(reps: int) -> dict[str, Any]:
    code = ("import sys; from terascale.engines.jobs import *; "
            "f = Fault(rank=1, step=4, marker=sys.argv[2], kind='exit') if sys.argv[2] else None; "
            "checkpointed_job(sys.argv[1], 8, fault=f) if sys.argv[1] else allreduce_job()")

    def launch(*args: str, restarts: int = 0) -> None:
        subprocess.run([sys.executable, "-m", "terascale", "run", "-n", str(N),
                        "--max-restarts", str(restarts),
                        sys.executable, "-c", code, *args], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    jobs = [_timed(lambda: launch("", "")) for _ in range(reps)]
    with tempfile.TemporaryDirectory() as tmp:
        clean = _timed(lambda: launch(f"{tmp}/c", ""))
        failed = _timed(lambda: launch(f"{tmp}/f", f"{tmp}/fired", restarts=1))
    return {"engine": "terascale run (local processes)", "startup": 0.0, "first_job": jobs[0],
            "job": statistics.median(jobs), "clean": clean, "failed": failed,
            "fault": "worker SIGKILL"}  # start-up: none (each job starts its processes)


def spark(master: str, kind: str, reps: int) -> dict[str, Any]:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import terascale.spark
    from terascale.engines.spark import check_cluster

    t = time.perf_counter()
    session = (SparkSession.builder.master(master).config("spark.ui.enabled", "false")
               .config("spark.executor.memory", "512m").getOrCreate())
    session.sparkContext.setLogLevel("FATAL")
    check_cluster(session.sparkContext, N, 120.0)  # local-cluster: executor JVMs up
    startup = time.perf_counter() - t

    def run(fn: Callable[..., Any], **kw: Any) -> Any:
        return terascale.spark.run(fn, num_workers=N, spark=session, **kw)

    try:
        first = _timed(lambda: run(allreduce_job))
        jobs = [_timed(lambda: run(allreduce_job)) for _ in range(reps)]
        with tempfile.TemporaryDirectory() as tmp:
            clean, failed = _recovery(run, kind, tmp)
    finally:
        session.stop()
    return {"engine": f"Spark {master}", "startup": startup, "first_job": first,
            "job": statistics.median(jobs), "clean": clean, "failed": failed,
            "fault": {"raise": "task exception", "executor": "executor JVM SIGKILL"}[kind]}


def ray_engine(reps: int) -> dict[str, Any]:
    import ray

    import terascale.ray

    t = time.perf_counter()
    ray.init(num_cpus=N, include_dashboard=False, log_to_driver=False)
    startup = time.perf_counter() - t

    def run(fn: Callable[..., Any], **kw: Any) -> Any:
        return terascale.ray.run(fn, num_workers=N, max_restarts=1, **kw)

    try:
        first = _timed(lambda: run(allreduce_job))
        jobs = [_timed(lambda: run(allreduce_job)) for _ in range(reps)]
        with tempfile.TemporaryDirectory() as tmp:
            clean, failed = _recovery(run, "exit", tmp)
    finally:
        ray.shutdown()
    return {"engine": "Ray (local, 2 CPUs)", "startup": startup, "first_job": first,
            "job": statistics.median(jobs), "clean": clean, "failed": failed,
            "fault": "actor SIGKILL"}


def _vw_file(path: str, n: int, seed: int) -> None:
    from terascale.linear.synthetic import separable_lines, write_lines

    write_lines(path, separable_lines(n, seed, vocab=1000, k=20, scale=1.0, prefix="x"))


def linear(reps: int, lines: int = 100_000) -> dict[str, Any]:
    """train_linear on Spark local[2] vs the same training in 2 local worker processes."""
    import numpy as np

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import terascale.spark
    from terascale.linear import train
    from terascale.testing import run_workers

    opts: dict[str, Any] = {"bits": 18, "passes": 2, "bfgs": 10, "cache_dir": ""}
    out: dict[str, Any] = {"lines": lines}
    with tempfile.TemporaryDirectory() as tmp:
        files = [f"{tmp}/part-{k}.vw" for k in range(N)]
        for k, f in enumerate(files):
            _vw_file(f, lines // N, seed=k)
        # Warm the parent (numba functions loaded) so the forked workers start as warm as
        # Spark's reused Python workers after the first job.
        train(files[:1], **opts)
        local_runs = []
        for _ in range(reps):
            t = time.perf_counter()
            w_local = run_workers(lambda comm: train(files, comm=comm, **opts).dense(), N,
                                  timeout=600)[0]
            local_runs.append(time.perf_counter() - t)
        session = (SparkSession.builder.master(f"local[{N}]")
                   .config("spark.ui.enabled", "false").getOrCreate())
        session.sparkContext.setLogLevel("FATAL")
        try:
            terascale.spark.train_linear(files, spark=session, **opts)  # warm the workers
            spark_files, spark_df = [], []
            df = session.read.text(files).repartition(N).cache()
            df.count()
            for _ in range(reps):
                t = time.perf_counter()
                m = terascale.spark.train_linear(files, spark=session, **opts)
                spark_files.append(time.perf_counter() - t)
                t = time.perf_counter()
                terascale.spark.train_linear(df, spark=session, **opts)
                spark_df.append(time.perf_counter() - t)
        finally:
            session.stop()
    out.update(local=statistics.median(local_runs), spark_files=statistics.median(spark_files),
               spark_df=statistics.median(spark_df),
               same_model=bool(np.array_equal(m.dense(), w_local)))
    return out


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``engines`` to the ``terascale bench`` subcommands.

    Parameters
    ----------
    kinds
        The ``terascale bench`` sub-command parsers (``add_subparsers``' result).
    """
    p = kinds.add_parser("engines", help="start-up, per-job and recovery time on Spark and Ray",
                         description=__doc__.split("\n")[0])
    p.add_argument("--reps", type=int, default=5,
                   help="repetitions of each measurement; the median is reported")
    p.add_argument("--json", default=None, metavar="OUT.json",
                   help="also write the results as JSON to OUT.json")
    p.add_argument("--only", default=",".join(ENGINES),
                   help="comma list of local, spark, cluster, ray; or linear alone")
    p.add_argument("--lines", type=int, default=400_000, help="--only linear: data size")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    only = [o for o in args.only.split(",") if o]
    bad = sorted(set(only) - set(ENGINES) - {"linear"})
    if bad or not only or ("linear" in only and len(only) > 1):
        raise ConfigError(f"--only: {args.only!r}: use a comma list of {', '.join(ENGINES)}, "
                          "or linear alone")
    if args.reps < 1:
        raise ConfigError(f"--reps: {args.reps} must be at least 1")
    load = os.getloadavg()[0]
    rows = []
    if len(only) > 1:  # each engine in a fresh process: start-up includes the JVM / Ray
        for name in only:
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                subprocess.run([sys.executable, "-m", "terascale", "bench", "engines", "--reps",
                                str(args.reps), "--only", name, "--json", out.name], check=True,
                               stdout=subprocess.DEVNULL)
                with open(out.name) as f:
                    rows += json.load(f)["rows"]
    elif only == ["local"]:
        rows.append(local(args.reps))
    elif only == ["spark"]:
        rows.append(spark("local[2]", "raise", args.reps))
    elif only == ["cluster"]:
        rows.append(spark("local-cluster[2,1,1024]", "executor", args.reps))
    elif only == ["ray"]:
        rows.append(ray_engine(args.reps))
    else:
        r = linear(args.reps, args.lines)
        print(f"train_linear, {r['lines']} VW lines in {N} files, bits 18, 2 passes + 10 "
              f"L-BFGS, medians of {args.reps}: {N} local processes {r['local']:.2f} s; "
              f"Spark local[{N}] from the files {r['spark_files']:.2f} s "
              f"(x{r['spark_files'] / r['local']:.2f}), from a cached DataFrame "
              f"{r['spark_df']:.2f} s (x{r['spark_df'] / r['local']:.2f}); "
              f"same model bitwise (files): {r['same_model']}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(r, f, indent=1)
        return 0
    base = rows[0]["job"] if rows and only[0] == "local" else None
    print(f"load average at start: {load:.1f}")
    print("| engine | start-up s | first job s | per job s (median) | x local | "
          "8-step job s | with 1 failure s | recovery s | failure |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = f"{r['job'] / base:.1f}" if base else "-"
        print(f"| {r['engine']} | {r['startup']:.1f} | {r['first_job']:.2f} | {r['job']:.2f} | "
              f"{ratio} | {r['clean']:.2f} | {r['failed']:.2f} | "
              f"{r['failed'] - r['clean']:.2f} | {r['fault']} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"load": load, "rows": rows}, f, indent=1)
    return 0
