"""A Spark partition's parsed examples: streamed to the executor's disk, memory-mapped back.

Delayed initialization (Agarwal, Chapelle, Dudik & Langford, JMLR 2014, sec. 3) asks every
worker to read and cache its data before it joins the allreduce. On Spark a task's data is
an iterator over its partition, and it may be larger than the task's memory, so a task
never holds its partition: it encodes the rows in chunks (``CHUNK`` rows at a time) and
appends each chunk's CSR arrays to files in a directory on the executor's local disk;
training then memory-maps those files.

When the data has a stable identity (see :func:`dataframe_identity`), that directory *is*
the cache: it is written into a temporary directory, fsynced and renamed into place, and a
later fit of the same data on the same executor maps it at once instead of parsing again.
Without an identity the directory is scratch space, removed after the fit.

The cache is never evicted by terascale: remove ``cache_dir`` (default
``$TMPDIR/terascale-cache/spark`` on every executor) when it grows too large.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._errors import ConfigError
from ..._files import private_dir
from ...linear import Dataset, ParseOptions

__all__ = ["CHUNK", "Shard", "ShardWriter", "chunks", "dataframe_identity", "default_cache_dir",
           "files_identity", "open_shard", "rdd_identity"]

CHUNK = 16384  # rows encoded at a time: bounds a task's memory while it reads its partition
_VERSION = 1
_ARRAYS = (("indptr", np.int64), ("indices", np.uint32), ("values", np.float32),
           ("labels", np.float32), ("weights", np.float32))


def default_cache_dir() -> str:
    return os.path.join(tempfile.gettempdir(), "terascale-cache", "spark")


def files_identity(paths: Sequence[str]) -> str:
    """Text files: absolute path, size and modification time of each."""
    out = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError as e:
            raise ConfigError(f"{p}: cannot read the input file ({e.strerror})") from None
        out.append([os.path.abspath(p), st.st_size, st.st_mtime_ns])
    return json.dumps(["files", out])


def _file_stamp(uri: str) -> list[Any] | None:
    """(path, size, mtime) of a local input file; None where it cannot be stat'ed here."""
    from urllib.parse import unquote, urlparse

    u = urlparse(uri)
    if u.scheme not in ("", "file"):
        return None  # hdfs://, s3a://: not visible to os.stat
    path = unquote(u.path) if u.scheme else uri
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [path, st.st_size, st.st_mtime_ns]


def dataframe_identity(df: Any, cache_key: str | None) -> str | None:
    """What makes a later fit's partitions the same as this fit's; None: not cacheable.

    * ``cache_key`` given by the user: that string (the user vouches for the data);
    * a DataFrame that reads only local files (``spark.read.parquet/csv/text``, then any
      deterministic transformations): its plan's semantic hash plus the path, size and
      modification time of every input file -- a rewritten file is a new identity;
    * a persisted DataFrame (``df.cache()``/``persist()``): its plan's semantic hash within
      this Spark application (its rows are fixed while it stays persisted).

    Anything else (an unpersisted DataFrame built from driver data, a non-local file
    system) is parsed afresh on every fit.
    """
    if cache_key:
        return json.dumps(["key", str(cache_key)])
    try:
        plan = int(df.semanticHash())
        files = list(df.inputFiles())
    except Exception:  # Spark Connect or an older Spark: no plan to key on
        return None
    stamps = [_file_stamp(f) for f in files]
    conf = df.sparkSession.conf
    # File partitions are cut by these two settings: part k must be the same rows.
    layout = [conf.get("spark.sql.files.maxPartitionBytes", None),
              conf.get("spark.sql.files.openCostInBytes", None)]
    if files and all(s is not None for s in stamps):
        return json.dumps(["plan+files", plan, sorted(stamps), layout])  # type: ignore[type-var]
    if df.is_cached:
        return json.dumps(["persisted", plan, df.sparkSession.sparkContext.applicationId])
    return None


def rdd_identity(rdd: Any, cache_key: str | None) -> str | None:
    """An RDD of lines: the user's key, or the persisted RDD within its application."""
    if cache_key:
        return json.dumps(["key", str(cache_key)])
    if rdd.is_cached:
        return json.dumps(["rdd", rdd.id(), rdd.context.applicationId])
    return None


@dataclass
class Shard:
    """One task's examples (memory-mapped), whether they came from the cache, and cleanup."""

    data: Dataset
    hit: bool
    scratch: str | None = None  # removed by release(): nothing to keep
    stamps: list[tuple[float, float]] = field(default_factory=list)  # (wall, CPU) stamps

    def release(self) -> None:
        if self.scratch is not None:  # the maps stay valid after the files are unlinked
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


class ShardWriter:
    """Appends chunks of examples (each a small :class:`Dataset`) to one directory."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._files = {name: open(os.path.join(directory, name), "wb") for name, _ in _ARRAYS}
        self._files["indptr"].write(np.zeros(1, np.int64).tobytes())
        self.rows = 0
        self.nnz = 0
        self.skipped = 0

    def append(self, chunk: Dataset) -> None:
        f = self._files
        f["indptr"].write((np.asarray(chunk.indptr[1:], np.int64)
                           - int(chunk.indptr[0]) + self.nnz).tobytes())
        f["indices"].write(np.ascontiguousarray(chunk.indices, np.uint32).tobytes())
        f["values"].write(np.ascontiguousarray(chunk.values, np.float32).tobytes())
        f["labels"].write(np.ascontiguousarray(chunk.labels, np.float32).tobytes())
        f["weights"].write(np.ascontiguousarray(chunk.weights, np.float32).tobytes())
        self.rows += len(chunk)
        self.nnz += int(chunk.indptr[-1] - chunk.indptr[0])
        self.skipped += chunk.skipped

    def finish(self, meta: dict[str, Any]) -> None:
        """Flush and fsync every file, then write meta.json (whose presence marks done)."""
        for f in self._files.values():
            f.flush()
            os.fsync(f.fileno())
            f.close()
        meta = dict(meta, version=_VERSION, rows=self.rows, nnz=self.nnz,
                    skipped=self.skipped)
        with open(os.path.join(self.directory, "meta.json"), "w") as out:
            json.dump(meta, out)
            out.flush()
            os.fsync(out.fileno())

    def abort(self) -> None:
        for f in self._files.values():
            f.close()


def _map(directory: str, parse: ParseOptions | None, bits: int,
         sources: list[str]) -> Dataset:
    with open(os.path.join(directory, "meta.json")) as f:
        meta = json.load(f)
    if meta.get("version") != _VERSION:
        raise ValueError("old cache entry")
    sizes = {"indptr": meta["rows"] + 1, "indices": meta["nnz"], "values": meta["nnz"],
             "labels": meta["rows"], "weights": meta["rows"]}
    arrays = {}
    for name, dtype in _ARRAYS:
        path = os.path.join(directory, name)
        if os.path.getsize(path) != sizes[name] * np.dtype(dtype).itemsize:
            raise ValueError(f"truncated cache file {name}")
        # copy-on-write, never written: numba compiles its kernels once more for read-only
        # arrays, and the learner's are compiled (and warmed) for writable ones
        arrays[name] = (np.memmap(path, dtype=dtype, mode="c") if sizes[name]
                        else np.zeros(0, dtype))
    return Dataset(bits=bits, skipped=int(meta["skipped"]), sources=sources, parse=parse,
                   **arrays)


def open_shard(identity: str | None, cache_dir: str | None, part: tuple[int, int],
               fill: Callable[[ShardWriter], None], *, describe: str,
               parse: ParseOptions | None, bits: int, sources: list[str]) -> Shard:
    """This task's shard: mapped from the cache, or built by ``fill(writer)`` first.

    ``identity`` names the data (None: not cacheable), ``describe`` how rows become
    features (columns, bits, parse options); together with the partition ``part = (k, n)``
    they key the entry. ``cache_dir=""`` disables caching (scratch space only).
    """
    root = default_cache_dir() if cache_dir is None else cache_dir
    cacheable = identity is not None and root != ""
    if cacheable:  # an entry there is read back as this data: nobody else may write it
        parents = [os.path.dirname(root)] if cache_dir is None else []  # TMPDIR's fixed name
        for d in (*parents, root):
            private_dir(d, f"cacheDir {root}", "cacheDir='' for none")
    base = root if cacheable else tempfile.gettempdir()
    ident = json.dumps([_VERSION, identity, describe, list(part)])
    entry = os.path.join(base, f"p{part[0]}of{part[1]}-"
                               f"{hashlib.sha1(ident.encode()).hexdigest()[:20]}")
    if cacheable and os.path.exists(os.path.join(entry, "meta.json")):
        try:
            return Shard(_map(entry, parse, bits, sources), hit=True)
        except (OSError, ValueError, KeyError):
            pass  # unreadable or stale entry: build it again and replace it
    try:
        os.makedirs(base, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-spark-", dir=base)
    except OSError as e:
        raise ConfigError(f"cacheDir {base}: cannot write the partition cache there "
                          f"({e.strerror}); give a writable directory") from None
    writer = ShardWriter(tmp)
    try:
        fill(writer)
        writer.finish({"identity": identity, "describe": describe, "part": list(part)})
    except BaseException:
        writer.abort()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if not cacheable:
        return Shard(_map(tmp, parse, bits, sources), hit=False, scratch=tmp)
    try:
        if os.path.exists(entry):  # a stale entry (checked above): replace it
            shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
    except OSError:  # another task or fit got there first: theirs is as good
        shutil.rmtree(tmp, ignore_errors=True)
    return Shard(_map(entry, parse, bits, sources), hit=False)


def chunks(rows: Iterable[Any], size: int = CHUNK) -> Iterable[list[Any]]:
    """The rows of a partition, ``size`` at a time (never the whole partition)."""
    batch: list[Any] = []
    for r in rows:
        batch.append(r)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch
