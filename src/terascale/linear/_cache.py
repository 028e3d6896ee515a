"""The binary, memory-mapped cache of a parsed shard (delayed initialization).

Agarwal et al. (JMLR 2014, sec. 3) read and cache all data *before* the allreduce is
initialized: most failures happen while reading, and a restarted worker then finds its
cache and joins at once. A cache entry is a directory of ``.npy`` arrays (CSR, labels,
weights, tags) plus ``meta.json``, keyed by the file's path, size and mtime, the parse
options and the shard; it is written into a temporary directory and renamed into place,
so a crash never leaves a half-written cache. Later passes and later runs map it read-only.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile

import numpy as np

from .._errors import ConfigError
from ._dataset import Dataset, ParseOptions
from ._readers import read_file

__all__ = ["cache_key", "default_cache_dir", "load_cached"]

_ARRAYS = ("indptr", "indices", "values", "labels", "weights", "tag_ptr", "tag_blob")
_VERSION = 2  # 2: CSV cells typed one by one, non-finite values rejected


def default_cache_dir() -> str:
    return os.path.join(tempfile.gettempdir(), "terascale-cache")


def cache_key(path: str, opts: ParseOptions, shard: tuple[int, int]) -> str:
    st = os.stat(path)
    ident = json.dumps([_VERSION, os.path.abspath(path), st.st_size, st.st_mtime_ns,
                        opts.to_dict(), opts.skip_bad, list(shard)], sort_keys=True)
    base = os.path.basename(path)[:40]
    return f"{base}.{hashlib.sha1(ident.encode()).hexdigest()[:16]}"


def load_cached(path: str, opts: ParseOptions, *, shard: tuple[int, int] = (0, 1),
                cache_dir: str | None = None) -> tuple[Dataset, bool]:
    """The shard's dataset from the cache, parsing and caching it first when needed.

    Returns (dataset, hit). ``cache_dir=""`` disables the cache.
    """
    if cache_dir == "":
        return read_file(path, opts, shard=shard), False
    root = cache_dir or default_cache_dir()
    if not os.path.exists(path):
        return read_file(path, opts, shard=shard), False  # raises the DataError
    entry = os.path.join(root, cache_key(path, opts, shard))
    meta_path = os.path.join(entry, "meta.json")
    if os.path.exists(meta_path):
        try:
            with open(meta_path) as f:
                meta = json.load(f)
            arrays = {a: np.load(os.path.join(entry, a + ".npy"), mmap_mode="r")
                      for a in _ARRAYS if a in meta["arrays"]}
            return Dataset(bits=opts.bits, skipped=int(meta["skipped"]), sources=[path],
                           parse=opts, **arrays), True
        except (OSError, ValueError, KeyError):
            pass  # unreadable entry: parse again and replace it
    ds = read_file(path, opts, shard=shard)
    try:
        os.makedirs(root, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-", dir=root)
    except OSError as e:
        raise ConfigError(f"--cache-dir {root}: cannot create the cache there ({e.strerror}); "
                          f"give a writable directory, or --cache-dir '' for none") from None
    try:
        present = []
        for a in _ARRAYS:
            arr = getattr(ds, a)
            if arr is not None:
                np.save(os.path.join(tmp, a + ".npy"), np.ascontiguousarray(arr))
                present.append(a)
        with open(os.path.join(tmp, "meta.json"), "w") as f:
            json.dump({"arrays": present, "skipped": ds.skipped, "source": path}, f)
        try:
            os.replace(tmp, entry)
        except OSError:  # another worker or run got there first: theirs is as good
            shutil.rmtree(tmp, ignore_errors=True)
    except OSError as e:  # disk full, quota
        shutil.rmtree(tmp, ignore_errors=True)
        raise ConfigError(f"--cache-dir {root}: cannot write the cache ({e.strerror}); "
                          f"--cache-dir '' trains without one") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return ds, False
