"""``terascale.spark.train_linear``: the terascale linear learner where the data already is.

This is Hadoop AllReduce (Agarwal, Chapelle, Dudik & Langford, JMLR 2014, sec. 3) on Spark:

1. *The program moves to the data*: one barrier task per partition of the DataFrame (or
   RDD of lines), scheduled by Spark next to its partition; for file paths, task ``k`` of
   ``n`` reads files ``k, k+n, ...`` itself.
2. *Delayed initialization*: each task streams its partition, a chunk of rows at a time,
   into CSR files on its executor's disk **before** it joins the allreduce, and trains on
   them memory-mapped (:mod:`._store`): the partition is never held in memory, nothing is
   collected to the driver. Most failures are failures to read data; they now happen
   before anyone waits on a collective.
3. The parsed partition is a cache entry when the data has an identity (file paths, a
   file-backed or persisted DataFrame, a ``cache_key``): a second fit maps it and does not
   parse again (``model.info["spark"]["cache_hits"]`` counts the partitions that did so).
4. Training is :func:`terascale.linear.train` on that shard (online passes, averaging,
   L-BFGS/CG over allreduce); every rank ends with bitwise-identical weights and rank 0's
   model is returned to the driver.

A rerun of the stage (a failed task, a lost executor) trains again; training is
deterministic, so the rerun returns the model a failure-free run would have.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._errors import ConfigError, DataError
from ...linear import LOSS_TABLE, LinearModel, ParseOptions, TextBlocks
from .._common import check_workers, new_run_id, split_parse_options
from ._encode import Encoding
from ._runner import (
    TaskSpec,
    barrier_safe,
    check_cluster,
    run_on_frame,
    run_on_rdd,
    session,
    task_slots,
)
from ._store import (
    Shard,
    ShardWriter,
    chunks,
    dataframe_identity,
    files_identity,
    open_shard,
    rdd_identity,
)

__all__ = ["Source", "by_arrow", "fit_layout", "fit_rdd", "numeric_columns", "train_linear"]


@dataclass(frozen=True)
class Source:
    """Where a task's examples come from; shipped to the tasks with the job."""

    encoding: Encoding | None = None     # rows of the partition -> examples
    identity: str | None = None          # names the data for the cache (None: no cache)
    cache_dir: str | None = None         # None: the default, "": no cache
    paths: tuple[str, ...] = ()          # or: files, task k reads k, k+n, ...
    parse: dict[str, Any] = field(default_factory=dict)  # ParseOptions of the files
    arrow: bool = False                  # rows come as Arrow record batches (run_on_frame)


def _prepare(source: Source, rows: Iterator[Any]) -> Shard:
    """In the barrier task, before it joins: this partition's examples (cached or built)."""
    from pyspark import BarrierTaskContext

    ctx = BarrierTaskContext.get()
    k, n = ctx.partitionId(), len(ctx.getTaskInfos())
    t0 = _stamp()
    shard = _shard(source, rows, k, n)
    shard.stamps = [t0, _stamp()]
    return shard


def _stamp() -> tuple[float, float]:
    """(wall clock, this process's CPU seconds): a stage's CPU time does not depend on
    how busy the machine is, its wall time does."""
    return time.time(), time.process_time()


def _shard(source: Source, rows: Iterator[Any], k: int, n: int) -> Shard:
    if source.paths:
        popts = ParseOptions(**source.parse)
        mine = list(source.paths[k::n])

        def fill_files(w: ShardWriter) -> None:
            for p in mine:  # parsed chunk by chunk (in threads), never a whole file
                for ds in TextBlocks(p, popts).datasets():
                    w.append(ds)

        return open_shard(source.identity, source.cache_dir, (k, n), fill_files,
                          describe=repr(sorted(source.parse.items())), parse=popts,
                          bits=popts.bits, sources=mine)
    enc = source.encoding
    assert enc is not None
    where = f"Spark partition {k}"

    def fill_rows(w: ShardWriter) -> None:
        first = 0
        if source.arrow:
            for b in rows:
                if b.num_rows:
                    w.append(enc.encode_arrow(b, first, where))
                    first += b.num_rows
            return
        for batch in chunks(rows):
            w.append(enc.encode(batch, first, where))
            first += len(batch)

    return open_shard(source.identity, source.cache_dir, (k, n), fill_rows,
                      describe=enc.describe(), parse=enc.parse_options(), bits=enc.bits,
                      sources=[where])


def _fit(shard: Shard, options: dict[str, Any], job: dict[str, Any] | None = None
         ) -> dict[str, Any]:
    """Train on the shard (``train`` joins the job now); rank 0 returns the model(s).

    With ``job`` (the pyspark.ml Estimator), the workers first agree on what the data
    asks for: the label set (binary, or K classes fit one-against-all, one after the other
    in this job over the same shard), the row count (MLlib's ``regParam`` penalizes the
    mean loss) and that there are rows at all."""
    from pyspark import BarrierTaskContext

    from ...linear import train

    joined = _stamp()
    try:
        if job is None:
            models = [train(shard.data, **options)]
        else:
            models = _fit_job(shard.data, options, job)
        rows = len(shard.data)
    finally:
        shard.release()
    rank = BarrierTaskContext.get().partitionId()
    # the task's stages: started, shard ready, job joined, trained
    stamps = [*shard.stamps, joined, _stamp()]
    return {"model": models if rank == 0 else None, "hit": shard.hit, "rows": rows,
            "stamps": stamps}


def _fit_job(data: Any, options: dict[str, Any], job: dict[str, Any]) -> list[LinearModel]:
    import dataclasses

    import terascale

    from ...linear import train

    comm = terascale.init()
    labels = np.asarray(data.labels)
    mine = np.unique(labels)[:1001]
    found = sorted(set().union(*[set(x) for x in comm.allgather_object(mine.tolist())]))
    totals = comm.allreduce(np.array([len(labels), float(np.sum(data.weights))]))
    if totals[0] == 0:
        raise DataError("LinearLearner.fit: the DataFrame has no rows")
    opts = dict(options)
    if "l2_per_row" in job:
        opts["l2"] = job["l2_per_row"] * float(totals[1])
    spec = LOSS_TABLE.get(opts.get("loss", "logistic"))
    if spec is not None and not spec.classes:  # a regression: labels are numbers
        return [train(data, comm=comm, **opts)]
    shown = ", ".join(f"{v:g}" for v in found[:20]) + (", ..." if len(found) > 20 else "")
    binary = set(found) <= {0.0, 1.0} or set(found) <= {-1.0, 1.0}
    ints = all(float(v).is_integer() and v >= 0 for v in found)
    family = job.get("family", "auto")
    if binary and family != "multinomial":
        return [train(data, comm=comm, **opts)]
    if family == "binomial" or not ints or len(found) > 1000:
        raise DataError(f"LinearLearner.fit: the labels found are {shown}; "
                        f"{opts.get('loss', 'logistic')} loss takes 0/1 (or -1/+1)"
                        + ("" if family == "binomial" else
                           ", and classes 0, 1, ..., K-1 for K > 2"))
    k = int(max(found)) + 1
    models = []
    for c in range(k):  # one against all, every class on the same shard and job
        y = (labels == c).astype(np.float32)
        models.append(train(dataclasses.replace(data, labels=y), comm=comm, **opts))
    return models


def fit_layout(sc: Any, data: Any, arrow: bool, num_workers: int | None,
               timeout: float) -> tuple[Any, int, int]:
    """``(data, partitions before, after)``: one task per partition, so a DataFrame (or
    RDD) with more partitions than the cluster's task slots is repartitioned to the slots
    (``num_workers`` when given), and one whose last stage changes the partition count
    (coalesce, union: Spark refuses a barrier stage over it and stops the SparkContext)
    is shuffled first."""
    rdd = data.rdd if arrow else data
    before = rdd.getNumPartitions()
    if before == 0:
        raise DataError("the DataFrame has no rows (it has no partitions)")
    if num_workers is not None:
        check_workers(num_workers, timeout)
        after = num_workers
    else:
        after = min(before, task_slots(sc))
    if after != before or not barrier_safe(data):
        data = data.repartition(after)
    return data, before, after


def fit_rdd(sc: Any, rdd: Any, source: Source, options: dict[str, Any],
            timeout: float, job: dict[str, Any] | None = None) -> Any:
    """One barrier task per partition of ``rdd`` -- or of a DataFrame read as Arrow
    batches when ``source.arrow`` -- prepare the shard, train; the model, whose
    ``info["spark"]`` counts cache hits and times each task's stages (:func:`_stages`).
    With ``job`` (see :func:`_fit`): the list of models, one per class."""
    n = (rdd.rdd if source.arrow else rdd).getNumPartitions()
    check_workers(n, timeout)
    try:
        check_cluster(sc, n, timeout)
    except ConfigError as e:  # say where n came from and what to do about it
        raise ConfigError(f"{e} (the input has {n} partitions, one task each: pass "
                          f"num_workers= / numWorkers= to repartition it)") from None
    spec = TaskSpec(fn=_fit, size=n, timeout=float(timeout), run_id=new_run_id(),
                    args=(options, job), prepare=functools.partial(_prepare, source))
    t0 = time.time()  # the tasks' stamps are wall-clock times on the same hosts' clocks
    results = run_on_frame(rdd, spec) if source.arrow else run_on_rdd(rdd, spec)
    t1 = time.time()
    models: list[LinearModel] = results[0]["model"]
    hits = sum(bool(r["hit"]) for r in results)
    cached = source.identity is not None and source.cache_dir != ""
    spark = {
        "partitions": n, "rows": [int(r["rows"]) for r in results], "cache_hits": hits,
        "cache": ("off" if not cached else "hit" if hits == n else
                  "miss" if hits == 0 else "partial"),
        **_stages(t0, t1, [r["stamps"] for r in results])}
    for m in models:
        m.info["spark"] = spark
    return models if job is not None else models[0]


def _stages(t0: float, t1: float, stamps: list[list[tuple[float, float]]]
            ) -> dict[str, Any]:
    """Where a fit's time went: the driver's wall clock around the Spark job, and per task
    the wall (``*_s``) and CPU (``*_cpu_s``) seconds of each stage -- launch, reading and
    caching the partition, joining the job, training, and back to the driver."""
    out: dict[str, Any] = {"job_s": t1 - t0, "launch_s": [s[0][0] - t0 for s in stamps],
                           "return_s": t1 - max(s[3][0] for s in stamps)}
    for i, name in enumerate(("prepare", "join", "train")):
        out[f"{name}_s"] = [s[i + 1][0] - s[i][0] for s in stamps]
        out[f"{name}_cpu_s"] = [s[i + 1][1] - s[i][1] for s in stamps]
    return out


def by_arrow(df: Any, enc: Encoding) -> tuple[Any, bool]:
    """``(df, True)`` where its partitions can travel as Arrow batches (a Vector or text
    column, pyarrow installed), else ``(df.rdd, False)``: ``Row`` objects. Plain columns
    keep rows, whose Python values (dates, decimals, timestamps) the CSV hashing sees."""
    if enc.kind != "columns" and importlib.util.find_spec("pyarrow") is not None:
        return df, True
    return df.rdd, False


def numeric_columns(df: Any, columns: Sequence[str]) -> tuple[bool, ...]:
    """Which columns Spark types as numbers or booleans (cells are values, not categories)."""
    from pyspark.sql.types import BooleanType, NumericType

    types = {f.name: f.dataType for f in df.schema.fields}
    return tuple(isinstance(types[c], (NumericType, BooleanType)) for c in columns)


def _with_layout(identity: str | None, before: int, after: int) -> str | None:
    """A repartitioned input's parts are other rows: the layout is part of the identity."""
    return None if identity is None else json.dumps([identity, before, after])


def train_linear(data: Any, *, num_workers: int | None = None, column: str | None = None,
                 timeout: float = 60.0, spark: Any = None, cache_key: str | None = None,
                 cache_dir: str | None = None, **options: Any) -> LinearModel:
    """Train a :class:`terascale.linear.LinearModel` on Spark; returns it on the driver.

    ``data`` is one of

    * a DataFrame with one string column of example lines in ``format`` (``"vw"`` or
      ``"libsvm"``), e.g. ``spark.read.text(path)``; ``column=`` picks the column when
      there are several;
    * with ``format="csv"``: a DataFrame whose columns are the table's columns, hashed as
      the CSV reader hashes them, without a CSV round trip (``label=`` names the label
      column; ``ignore=`` columns are left out, so the model does not know them);
    * an RDD of lines;
    * a path or a list of paths of VW/libsvm/CSV files, read by the tasks themselves
      (``num_workers`` defaults to the number of files).

    One task per partition (``num_workers`` repartitions a DataFrame or RDD first). Each
    task's parsed partition is cached on its executor's disk under ``cache_dir`` when the
    data has an identity -- file paths (path, size, mtime), a DataFrame read from local
    files or persisted, or a user-given ``cache_key`` -- so a second call on the same data
    does not parse again; ``cache_dir=""`` disables the cache.

    Parameters
    ----------
    data
        A DataFrame, an RDD of lines, or a path or list of paths (see above).
    num_workers
        The number of tasks (default None: the DataFrame's or RDD's partitions, or one per file); a
        DataFrame or RDD is repartitioned to it.
    column
        The DataFrame's text column when it has several (default None: the only string column).
    timeout
        Seconds each task waits for its peers at the rendezvous and in every collective (default
        60).
    spark
        A SparkSession (default None: the active one, or a new one).
    cache_key
        Names the data for the executors' cache when Spark cannot tell its identity (a DataFrame
        computed in memory); the same key must mean the same data.
    cache_dir
        Where each executor caches its parsed partition (default None: the learner's default cache
        root); ``""`` disables the cache.
    options
        Options of :func:`terascale.linear.train` (``bits``, ``passes``, ``bfgs``, ``l2``, ``loss``,
        ``format``...; see :class:`terascale.linear.TrainOptions`).
    """
    parse = split_parse_options(options)
    fmt = parse["format"]
    sc = session(spark).sparkContext
    if isinstance(data, (str, os.PathLike)) or (
            isinstance(data, Sequence) and all(isinstance(p, (str, os.PathLike)) for p in data)):
        paths = [os.fspath(data)] if isinstance(data, (str, os.PathLike)) else [
            os.fspath(p) for p in data]
        if not paths:
            raise ConfigError("train_linear: no input files")
        n = len(paths) if num_workers is None else num_workers
        check_workers(n, timeout)
        if n > len(paths):
            raise ConfigError(f"num_workers={n} exceeds the {len(paths)} input files; each "
                              "worker reads whole files")
        identity = None if cache_dir == "" else files_identity(paths)
        source = Source(identity=identity, cache_dir=cache_dir, paths=tuple(paths),
                        parse=parse)
        return fit_rdd(sc, sc.parallelize(range(n), n), source, options, timeout)
    if hasattr(data, "rdd") and hasattr(data, "columns"):  # a DataFrame
        identity = dataframe_identity(data, cache_key)
        df = data
        if fmt == "csv":
            ignore = set(parse.get("ignore", ()))
            label = parse.get("label", "label")
            if label not in df.columns:
                raise ConfigError(f"label={label!r}: the DataFrame has no such column "
                                  f"(columns: {', '.join(df.columns)})")
            feats = tuple(c for c in df.columns if c != label and c not in ignore)
            for c in parse.get("categorical", ()):
                if c not in feats:
                    raise ConfigError(f"categorical: the DataFrame has no feature column "
                                      f"{c!r}")
            enc = Encoding(kind="columns", bits=parse["bits"], features=feats, label=label,
                           categorical=tuple(parse.get("categorical", ())),
                           numeric=numeric_columns(df, feats),
                           constant=parse.get("constant", True),
                           skip_bad=parse.get("skip_bad", False))
        else:
            parse.pop("ignore", None)
            if column is None and len(df.columns) != 1:
                raise ConfigError(f"the DataFrame has columns {df.columns}: pass column= "
                                  "(the column of example lines) or format='csv'")
            col = column or df.columns[0]
            enc = Encoding(kind="text", bits=parse["bits"], features=(col,), text=parse)
        rdd, arrow = by_arrow(df.select(*enc.columns), enc)
    elif hasattr(data, "mapPartitions"):  # an RDD of lines
        parse.pop("ignore", None)
        identity = rdd_identity(data, cache_key)
        enc = Encoding(kind="text", bits=parse["bits"], features=("value",), text=parse)
        rdd, arrow = data, False
    else:
        raise ConfigError(f"train_linear takes a DataFrame, an RDD of lines or file paths, "
                          f"not {type(data).__name__}")
    rdd, before, after = fit_layout(sc, rdd, arrow, num_workers, timeout)
    source = Source(encoding=enc, identity=_with_layout(identity, before, after),
                    cache_dir=cache_dir, arrow=arrow)
    return fit_rdd(sc, rdd, source, options, timeout)
