"""``terascale.ray.train_linear``: the linear learner on a ``ray.data.Dataset``.

The Dataset is cut with ``streaming_split(num_workers)``: each actor of the job
(:func:`terascale.engines.ray.run`) pulls its own stream of blocks from Ray's object store,
encodes each Arrow batch as the Spark engine encodes a partition (table columns hashed
as the CSV reader hashes them, or a column of VW/libsvm lines parsed), then joins the
allreduce and trains -- delayed initialization, as in Hadoop AllReduce (Agarwal et al.,
JMLR 2014). Nothing but the model reaches the driver. Rank 0 writes the model to
``storage_path`` when one is given (a local or shared directory, or a URI that
``pyarrow.fs`` opens: ``s3://``, ``gs://``, ``hdfs://``). The metrics of every pass
(``terascale.linear.train``'s ``callback``) travel from rank 0 through a Ray queue to
``on_metrics`` on the driver *while the job runs*, and are kept in
``model.info["ray"]["metrics"]``.
"""

from __future__ import annotations

import os
import queue as _queue
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .._errors import ConfigError, DataError
from ..linear import Dataset, LinearModel
from ._common import split_parse_options

__all__ = ["train_linear"]

# Options that decide how rows become features (terascale.linear.ParseOptions).

def _encoding(schema: Any, column: str | None, parse: dict[str, Any]) -> Any:
    """How a batch of the Dataset becomes examples (the Spark engine's encodings)."""
    import pyarrow as pa

    from .spark import Encoding

    names = list(schema.names)
    types = dict(zip(names, schema.types))
    if parse.get("format", "vw") == "csv":
        label = parse.get("label", "label")
        if label not in names:
            raise ConfigError(f"label={label!r}: the Dataset has no such column "
                              f"(columns: {', '.join(names)})")
        ignore = set(parse.get("ignore", ()))
        feats = tuple(c for c in names if c != label and c not in ignore)
        for c in parse.get("categorical", ()):
            if c not in feats:
                raise ConfigError(f"categorical: the Dataset has no feature column {c!r}")

        def numeric(t: Any) -> bool:
            return bool(pa.types.is_integer(t) or pa.types.is_floating(t)
                        or pa.types.is_boolean(t))

        return Encoding(kind="columns", bits=parse["bits"], features=feats, label=label,
                        categorical=tuple(parse.get("categorical", ())),
                        numeric=tuple(numeric(types[c]) for c in feats),
                        constant=parse.get("constant", True),
                        skip_bad=parse.get("skip_bad", False))
    if column is None:
        if len(names) != 1:
            raise ConfigError(f"the Dataset has columns {names}: pass column= (the column "
                              f"of example lines) or format='csv'")
        column = names[0]
    if column not in names:
        raise ConfigError(f"column={column!r}: the Dataset has no such column")
    text = {k: v for k, v in parse.items() if k != "ignore"}
    return Encoding(kind="text", bits=parse["bits"], features=(column,), text=text)


def _worker(shards: list[Any], enc: Any, options: dict[str, Any], storage: str | None,
            batch_size: int, live: Any = None, timeout: float = 60.0) -> dict[str, Any]:
    """One actor: stream my shard, encode it, join the job, train; rank 0 keeps the model
    and sends each pass's metrics to the driver's queue ``live`` as it goes."""
    import terascale

    from ..linear import train

    comm = terascale.init()
    it = shards[comm.rank]
    where = f"Ray worker {comm.rank}"
    parts: list[Dataset] = []
    first = 0
    cols = list(enc.columns)
    for b in _batches(it, batch_size, timeout, where):
        if b.num_rows == 0:
            continue
        missing = [c for c in cols if c not in b.column_names]
        if missing:
            raise ConfigError(f"{where}: the Dataset has no column {missing[0]!r}")
        rows = list(zip(*[b.column(c).to_pylist() for c in cols]))
        parts.append(enc.encode(rows, first, where))
        first += b.num_rows
    total = comm.allreduce(np.array([float(first)]))
    if total[0] == 0:
        raise DataError("train_linear: the Dataset has no rows")
    data = Dataset.concat(parts) if parts else Dataset.concat([enc.encode([], 0, where)])
    metrics: list[dict[str, Any]] = []

    def report(m: dict[str, Any]) -> None:  # the same totals on every rank: rank 0 sends
        m = dict(m, time=time.time())
        metrics.append(m)
        if live is not None and comm.rank == 0:
            live.put(m, timeout=timeout)

    model = train(data, comm=comm, callback=report, **options)
    finished = time.time()
    saved = None
    if comm.rank == 0 and storage:
        saved = _store(model, storage)
    return {"model": model if comm.rank == 0 else None, "rows": first, "metrics": metrics,
            "saved": saved, "finished": finished}


def _batches(split: Any, batch_size: int, timeout: float, where: str) -> Iterator[Any]:
    """The Arrow batches of one ``streaming_split`` share, each within ``timeout`` s of the
    one before.

    Ray Data's iterator waits without end for blocks its tasks never make (e.g. the actors
    hold the CPUs those tasks need); read on a thread of its own, a batch that does not
    come by the deadline is a ConfigError on this rank, which ends the job (its actors are
    killed, the thread with them)."""
    batches: _queue.Queue[tuple[str, Any]] = _queue.Queue(maxsize=2)

    def read() -> None:
        try:
            for b in split.iter_batches(batch_size=batch_size, batch_format="pyarrow"):
                batches.put(("batch", b))
            batches.put(("end", None))
        except BaseException as e:  # handed to the reader below, raised there
            batches.put(("error", e))

    threading.Thread(target=read, daemon=True, name="terascale-ray-read").start()
    while True:
        try:
            kind, value = batches.get(timeout=timeout)
        except _queue.Empty:
            raise ConfigError(
                f"{where}: no batch of the Dataset arrived within {timeout:g} s; its blocks "
                f"come from Ray Data tasks, which need CPUs the actors leave free (lower "
                f"num_workers or resources_per_worker), or a slow source needs a longer "
                f"timeout") from None
        if kind == "end":
            return
        if kind == "error":
            raise value
        yield value


def _store(model: LinearModel, storage: str) -> str:
    """Write the model under ``storage`` (a directory or a pyarrow.fs URI); its path."""
    if "://" not in storage:
        os.makedirs(storage, exist_ok=True)
        path = os.path.join(storage, "model.npz")
        model.save(path)
        return path
    import pyarrow.fs as pafs

    fs, root = pafs.FileSystem.from_uri(storage)
    fs.create_dir(root, recursive=True)
    with tempfile.TemporaryDirectory() as d:
        local = os.path.join(d, "model.npz")
        model.save(local)
        with open(local, "rb") as src, fs.open_output_stream(f"{root}/model.npz") as dst:
            dst.write(src.read())
    return storage.rstrip("/") + "/model.npz"


def train_linear(dataset: Any, *, num_workers: int = 2, column: str | None = None,
                 timeout: float = 60.0, storage_path: str | None = None,
                 resources_per_worker: dict[str, float] | None = None,
                 on_metrics: Callable[[dict[str, Any]], None] | None = None,
                 batch_size: int = 4096, max_restarts: int = 0,
                 **options: Any) -> LinearModel:
    """Train a :class:`terascale.linear.LinearModel` on a ``ray.data.Dataset``.

    ``dataset`` holds either table columns (``format="csv"``, ``label=`` the label
    column; numbers are values, other cells categories, as the CSV reader hashes a file)
    or one column of VW/libsvm lines (``format="vw"``, the default; ``column=`` picks it
    when there are several). Each of ``num_workers`` actors streams its own share
    (``streaming_split``).

    ``on_metrics`` is called on the driver (in the calling thread) while the job runs,
    with each metrics dict as soon as rank 0 reports it: after every online pass
    ``{"phase": "online", "pass": 1, "loss": ..., "examples": ...}``, after every
    L-BFGS/CG iteration ``{"phase": "bfgs", "iteration": i, "pass": p, "objective":
    ..., "gradient_norm": ...}``, each with ``"time"`` (the worker's wall clock). Hand
    them on to your tracker (MLflow, Ray Train's ``report`` in a Train loop, a log).
    They are also in ``model.info["ray"]["metrics"]``, and ``model.info["ray"]
    ["finished"]`` is when rank 0 finished training.

    Parameters
    ----------
    dataset
        A ``ray.data.Dataset`` of table columns or of one column of lines.
    num_workers
        The number of actors (the world size; default 2), each streaming its share of the Dataset.
    column
        The column of lines when there are several (default None: the only one).
    timeout
        Seconds; bounds the rendezvous, every collective and each actor's wait for its next
        batch of the Dataset (default 60).
    storage_path
        A directory where rank 0 writes ``model.npz`` (default None: nowhere; the model comes back
        to the driver either way).
    resources_per_worker
        Ray resources of each actor, as in :func:`terascale.ray.run` (default ``{"CPU": 0.5}``: the
        actors leave CPUs to the Ray Data tasks that read and transform the blocks they wait for).
    on_metrics
        Called on the driver with each metrics dict while the job runs (see above; default None).
    batch_size
        Rows per Arrow batch an actor pulls from its split (default 4096); larger batches cost fewer
        calls and more memory.
    max_restarts
        How often the job is started again after an actor died or raised (default 0). A restart cuts
        the Dataset anew and trains from the start, so its source is read again.
    options
        Options of :func:`terascale.linear.train` (``bits``, ``passes``, ``bfgs``, ``l2``, ``loss``,
        ``format``...; see :class:`terascale.linear.TrainOptions`).
    """
    from .ray import run_attempts

    if not hasattr(dataset, "streaming_split"):
        raise ConfigError(f"train_linear takes a ray.data.Dataset, not "
                          f"{type(dataset).__name__}")
    parse = split_parse_options(options)
    schema = dataset.schema()
    if schema is None:
        raise DataError("train_linear: the Dataset has no rows (no schema)")
    enc = _encoding(schema, column, parse)
    columns = dataset.select_columns(list(enc.columns))
    # The actors wait on Ray Data's tasks for their blocks: they must not hold every CPU
    # those tasks need (default: half a CPU each, the rest left to reading).
    res = {"CPU": 0.5, **(resources_per_worker or {})}
    live = None
    if on_metrics is not None:
        from ray.util.queue import Queue

        live = Queue(actor_options={"num_cpus": 0})
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="terascale-ray-job") as pool:
            job = pool.submit(
                run_attempts, _worker, num_workers=num_workers, timeout=timeout,
                max_restarts=max_restarts, kwargs=None, num_cpus=1.0, strategy="PACK",
                args=lambda attempt: (columns.streaming_split(num_workers, equal=False), enc,
                                      options, storage_path, batch_size, live,
                                      float(timeout)),
                resources_per_worker=res)
            if live is not None and on_metrics is not None:
                _relay(live, job, on_metrics)
            out = job.result()
    finally:
        if live is not None:
            live.shutdown()
    model: LinearModel = out[0]["model"]
    model.info["ray"] = {"workers": num_workers, "rows": [o["rows"] for o in out],
                         "metrics": out[0]["metrics"], "saved": out[0]["saved"],
                         "finished": out[0]["finished"]}
    return model


def _relay(live: Any, job: Any, on_metrics: Callable[[dict[str, Any]], None]) -> None:
    """Hand the queue's metrics to ``on_metrics`` as they come, until the job has ended
    and the queue is drained."""
    from ray.util.queue import Empty

    while True:
        done = job.done()  # read before the queue: what rank 0 sent before it ended
        try:
            on_metrics(live.get(block=True, timeout=0.1))
            continue
        except (Empty, _queue.Empty):
            pass
        if done:
            return
