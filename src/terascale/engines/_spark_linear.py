"""``terascale.spark.train_linear``: the terascale linear learner where the data already is.

This is Hadoop AllReduce (Agarwal, Chapelle, Dudik & Langford, JMLR 2014, sec. 3) on Spark:

1. *The program moves to the data*: one barrier task per partition of the DataFrame (or
   RDD of lines), scheduled by Spark next to its partition; for file paths, task ``k`` of
   ``n`` reads files ``k, k+n, ...`` itself.
2. *Delayed initialization*: each task reads and parses its whole partition into memory
   **before** it joins the allreduce. Most failures are failures to read data; they now
   happen before anyone waits on a collective, and a rerun starts with the data in hand.
3. Training is :func:`terascale.linear.train` on that shard (online passes, averaging,
   L-BFGS/CG over allreduce); every rank ends with bitwise-identical weights and rank 0's
   model is returned to the driver.

A rerun of the stage (a failed task, a lost executor) reads and trains again; training is
deterministic, so the rerun returns the model a failure-free run would have.
"""

from __future__ import annotations

import csv
import functools
import io
import os
from collections.abc import Iterator, Sequence
from typing import Any

from .._errors import ConfigError
from ._common import check_workers, new_run_id
from .spark import TaskSpec, _check_cluster, run_on_rdd, session

__all__ = ["train_linear"]

# Options that decide how text becomes features (terascale.linear.ParseOptions).
_PARSE_KEYS = ("format", "bits", "quadratic", "label", "categorical", "ignore", "skip_bad",
               "constant")


def _parse_rows(parse: dict[str, Any], header: Sequence[str] | None,
                rows: Iterator[Any]) -> Any:
    """Parse this task's partition into a Dataset (text lines, or rows as CSV records)."""
    from ..linear import parse_lines

    if header is None:  # one string column (or an RDD of str): the lines themselves
        text: list[str] = [r if isinstance(r, str) else r[0] for r in rows]
    else:
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        writer.writerow(header)
        for r in rows:
            writer.writerow(["" if v is None else v for v in r])
        text = [buf.getvalue()]
    return parse_lines(text, **parse)


def _read_files(parse: dict[str, Any], paths: Sequence[str], rows: Iterator[Any]) -> Any:
    """Files ``rank, rank + n, ...``, parsed by the worker that trains on them."""
    from pyspark import BarrierTaskContext

    from ..linear import Dataset, ParseOptions, read_file

    ctx = BarrierTaskContext.get()
    rank, size = ctx.partitionId(), len(ctx.getTaskInfos())
    opts = ParseOptions(**parse)
    return Dataset.concat([read_file(p, opts) for p in paths[rank::size]])


def _fit(data: Any, options: dict[str, Any]) -> Any:
    """Train on the cached shard (``train`` joins the job now); rank 0 returns the model."""
    from ..linear import train

    model = train(data, **options)
    return model if os.environ.get("TERASCALE_RANK") == "0" else None


def train_linear(data: Any, *, num_workers: int | None = None, column: str | None = None,
                 timeout: float = 60.0, spark: Any = None, **options: Any) -> Any:
    """Train a :class:`terascale.linear.LinearModel` on Spark; returns it on the driver.

    ``data`` is one of

    * a DataFrame with one string column of example lines in ``format`` (``"vw"`` or
      ``"libsvm"``), e.g. ``spark.read.text(path)``; ``column=`` picks the column when
      there are several;
    * with ``format="csv"``: a DataFrame whose columns are the CSV columns (``label=``
      names the label column; ``ignore=`` columns are dropped from the DataFrame before
      training, so the model does not know them: predict on data without them);
    * an RDD of lines;
    * a path or a list of paths of VW/libsvm/CSV files, read by the tasks themselves
      (``num_workers`` defaults to the number of files).

    One task per partition (``num_workers`` repartitions a DataFrame or RDD first).
    ``options`` are those of :func:`terascale.linear.train` (``bits``, ``passes``,
    ``bfgs``, ``l2``, ``loss``, ...).
    """
    parse = {k: options.pop(k) for k in _PARSE_KEYS if k in options}
    fmt = parse.setdefault("format", "vw")
    for k in ("quadratic", "categorical", "ignore"):
        if isinstance(parse.get(k), str):
            parse[k] = (parse[k],)
    sess = session(spark)
    sc = sess.sparkContext
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
        rdd = sc.parallelize(range(n), n)
        prepare = functools.partial(_read_files, parse, paths)
    else:
        header: list[str] | None = None
        if hasattr(data, "rdd") and hasattr(data, "columns"):  # a DataFrame
            df = data
            if fmt == "csv":
                ignore = tuple(parse.pop("ignore", ()))
                df = df.drop(*ignore) if ignore else df
                header = list(df.columns)
            else:
                parse.pop("ignore", None)
                if column is None and len(df.columns) != 1:
                    raise ConfigError(f"the DataFrame has columns {df.columns}: pass column= "
                                      "(the column of example lines) or format='csv'")
                df = df.select(column or df.columns[0])
            rdd = df.rdd
        elif hasattr(data, "mapPartitions"):  # an RDD of lines
            parse.pop("ignore", None)
            rdd = data
        else:
            raise ConfigError(f"train_linear takes a DataFrame, an RDD of lines or file paths, "
                              f"not {type(data).__name__}")
        if num_workers is not None and num_workers != rdd.getNumPartitions():
            rdd = rdd.repartition(num_workers)
        n = rdd.getNumPartitions()
        check_workers(n, timeout)
        prepare = functools.partial(_parse_rows, parse, header)
    _check_cluster(sc, n, timeout)
    spec = TaskSpec(fn=_fit, size=n, timeout=float(timeout), run_id=new_run_id(),
                    args=(options,), prepare=prepare)
    return run_on_rdd(rdd, spec)[0]
