"""The on-disk cache of a parsed shard, written and read block by block.

Agarwal et al. (JMLR 2014, sec. 3) read and cache all data *before* the allreduce is
initialized: most failures happen while reading, and a restarted worker then finds its
cache and joins at once. The shard's text streams through the parser in chunks
(:mod:`._stream`); each parsed block is encoded (:mod:`._cachefmt`: bit-packed indices,
no stored 1.0 values, byte-coded labels) and appended to ``data.bin``; ``index.npy`` holds
one row per block (offset, length, examples, features, flags, tag bytes),
``features.npy`` the sorted distinct hashed indices (the learner's compact index space is
agreed from them without a pass), and ``meta.json`` the counts. Nothing holds the shard:
the writer holds a few blocks in flight, a reader one block at a time (read with
``pread``; a mapping of the whole file would count against the address space and stay
resident).

An entry is keyed by the file's path, size and mtime, the parse options and the shard; it
is written into a temporary directory, fsynced and renamed into place, so a crash never
leaves a half-written cache. Later passes and later runs read it.

Those keys are no secret (anyone who can list the data's directory can compute them), and
the default root sits in the shared temporary directory under a fixed name, so an entry is
only as trustworthy as the directory that holds it: a cache root that another user could
write (theirs, or group- or world-writable) is refused before anything in it is read
(:func:`checked_root`), since an entry planted or swapped there would be trained on as this
data without a word. A root made here is made private (mode 0700).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..._errors import ConfigError
from ..._files import fsync_dir, private_dir
from ..._lazy import lazy_module
from .._names import opt
from ._blocks import Block, Blocks, ShardStats
from ._cachefmt import (
    FIELDS,
    decode_blanks,
    decode_block,
    decode_chunk,
    decode_ignored,
    decode_labels,
    label_bytes,
)
from ._cachewrite import EntryWriter
from ._dataset import ParseOptions
from ._npyfile import read_rows

np = lazy_module("numpy", globals(), "np")

if TYPE_CHECKING:
    from ._stream import TextBlocks

__all__ = ["CacheBlocks", "PendingCache", "cache_key", "checked_root", "default_cache_dir",
           "load_cached"]

_VERSION = 8  # 8: the label section past a tab (7: VW's lines on label sections; 6:
# --ignore_linear's counts; 5: VW's empty lines; 4: VW's feature order)


def default_cache_dir() -> str:
    return os.path.join(tempfile.gettempdir(), "terascale-cache")


def checked_root(root: str) -> str:
    """``root``, made (private) when missing; ``ConfigError`` when another user could write
    it, so could plant or replace the entries a run reads as its data.

    Parameters
    ----------
    root
        The cache's directory (``cache_dir``, or :func:`default_cache_dir`).
    """
    return private_dir(root, opt("cache_dir", root), f"{opt('cache_dir', repr(''))} for none")


def cache_key(path: str, opts: ParseOptions, shard: tuple[int, ...]) -> str:
    st = os.stat(path)
    ident = json.dumps([_VERSION, os.path.abspath(path), st.st_size, st.st_mtime_ns,
                        opts.to_dict(), opts.skip_bad, opts.lenient_labels,
                        list(shard)], sort_keys=True)
    base = os.path.basename(path)[:40]
    return f"{base}.{_sha1_hex(ident.encode())[:16]}"


def _sha1_hex(data: bytes) -> str:
    """SHA-1 of ``data`` in hex: CPython's own ``_sha1`` where it is built, else hashlib's
    (the same digest); importing hashlib loads OpenSSL's libcrypto, 3.5 MB of a small
    ``terascale vw`` run's peak that reads or writes a cache."""
    try:
        from _sha1 import sha1
    except ImportError:
        from hashlib import sha1
    return sha1(data).hexdigest()


class CacheBlocks(Blocks):
    """A cache entry read block by block: as numpy Blocks, or as ``terascale vw``'s chunks
    (:meth:`chunks`, no numpy)."""

    def __init__(self, entry: str, opts: ParseOptions, source: str) -> None:
        with open(os.path.join(entry, "meta.json")) as f:
            meta = json.load(f)
        if meta.get("version") != _VERSION or int(meta["bits"]) != opts.bits:
            raise ValueError("stale cache entry")
        self.entry = entry
        #: a row per block: (offset, bytes, examples, features, flags, tag bytes)
        self.index = read_rows(os.path.join(entry, "index.npy"), FIELDS)
        self.bits = opts.bits
        self.parse = opts
        self.sources = [source]
        self._stats = ShardStats(int(meta["examples"]), int(meta["features"]),
                                 int(meta["skipped"]))
        self.size_bytes = int(meta["bytes"])
        # by block: VW's lines on the text's label sections (ParseOptions.lenient_labels),
        # which terascale vw prints on the first pass whether it parsed the text or not
        self.notes = {int(k): tuple(v) for k, v in meta.get("notes", {}).items()}

    def _records(self, prefix: bool) -> Iterator[tuple[bytes, tuple[int, ...]]]:
        fd = os.open(os.path.join(self.entry, "data.bin"), os.O_RDONLY)
        try:
            for row in self.index:
                off, nbytes, n, nnz, flags, ntag = (int(x) for x in row)
                if prefix:
                    nbytes = label_bytes(n, nnz, flags, ntag, self.bits)
                rec = os.pread(fd, nbytes, off)
                if len(rec) != nbytes:
                    raise OSError(f"{self.entry}: cache data truncated")
                yield rec, row
        finally:
            os.close(fd)

    def __iter__(self) -> Iterator[Block]:
        start = 0
        for k, (raw, row) in enumerate(self._records(prefix=False)):
            n, nnz, flags, ntag = (int(x) for x in row[2:])
            rec = np.frombuffer(raw, np.uint8)
            indptr, indices, values, labels, weights, tp, tb = decode_block(
                rec, n, nnz, flags, ntag, self.bits)
            yield Block(start=start, indptr=indptr, indices=indices, values=values,
                        labels=labels, weights=weights, tag_ptr=tp, tag_blob=tb,
                        blanks=decode_blanks(rec, n, nnz, flags, ntag, self.bits),
                        ignored=decode_ignored(rec, n, nnz, flags, ntag, self.bits),
                        notes=self.notes.get(k))
            start += n

    def chunks(self) -> Iterator[tuple]:
        """The blocks as ``terascale vw``'s compiled learner takes parsed chunks
        (:func:`._cachefmt.decode_chunk`: typed memoryviews, decoded by the compiled core
        without numpy)."""
        for k, (rec, row) in enumerate(self._records(prefix=False)):
            n, nnz, flags, ntag = (int(x) for x in row[2:])
            yield decode_chunk(rec, n, nnz, flags, ntag, self.bits, self.notes.get(k))

    def label_blocks(self) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]]:
        start = 0
        for raw, row in self._records(prefix=True):
            n, nnz, flags, ntag = (int(x) for x in row[2:])
            rec = np.frombuffer(raw, np.uint8)
            labels, weights = decode_labels(rec, n, nnz, flags, ntag, self.bits)
            yield start, labels, weights, decode_blanks(rec, n, nnz, flags, ntag, self.bits)
            start += n

    def stats(self) -> ShardStats:
        return self._stats

    def skipped(self) -> int:
        return self._stats.skipped

    def features(self) -> np.ndarray:
        """The shard's distinct hashed features, sorted: ``features.npy`` mapped copy on
        write (a plain, writable array), not read into fresh memory. Its pages are the page
        cache's, already in memory after the cache was written or read, where a fresh array
        faults in 4 bytes a feature (44 MB at 11M features) of new pages, the costliest on
        a virtual machine whose host takes freed memory back."""
        return np.asarray(np.load(os.path.join(self.entry, "features.npy"), mmap_mode="c"))

    def distinct(self) -> int:
        """How many distinct hashed features the shard has (read from the header of
        ``features.npy``, not the features)."""
        return len(np.load(os.path.join(self.entry, "features.npy"), mmap_mode="r"))


def _write_entry(tmp: str, text: TextBlocks, opts: ParseOptions, path: str) -> None:
    w = EntryWriter(tmp, opts, path, _VERSION)
    try:
        for e in text.map_chunks(w.encode):
            w.put(e)
        w.finish()
    except BaseException:
        w.abort()
        raise


def _tmp_prefix(pid: int) -> str:
    # host and pid in the name: a later run can tell an entry whose writer was killed
    # (SIGTERM/SIGKILL run no cleanup) from one that another live worker is writing
    return f".tmp-{socket.gethostname()}-{pid}-"


def _sweep_orphans(root: str) -> None:
    """Remove the temporary entries of writers on this host that are no longer alive."""
    mine = f".tmp-{socket.gethostname()}-"
    try:
        names = [n for n in os.listdir(root) if n.startswith(mine)]
    except OSError:
        return
    for name in names:
        pid = name[len(mine):].split("-", 1)[0]
        if not pid.isdigit():
            continue
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        except OSError:  # alive, someone else's
            pass


def _new_tmp(root: str) -> str:
    try:
        os.makedirs(root, exist_ok=True)
        _sweep_orphans(root)
        return tempfile.mkdtemp(prefix=_tmp_prefix(os.getpid()), dir=root)
    except OSError as e:
        raise ConfigError(f"{opt('cache_dir', root)}: cannot create the cache there "
                          f"({e.strerror}); give a writable directory, or "
                          f"{opt('cache_dir', repr(''))} for none") from None


def _storage(root: str, e: OSError) -> ConfigError:  # disk full, quota
    return ConfigError(f"{opt('cache_dir', root)}: cannot write the cache ({e.strerror}); "
                       f"{opt('cache_dir', repr(''))} trains without one")


def _commit(tmp: str, entry: str, root: str) -> None:
    try:
        os.replace(tmp, entry)
    except OSError:  # another worker or run got there first: theirs is as good
        shutil.rmtree(tmp, ignore_errors=True)
    try:  # the rename itself survives a crash only once the directory is synced
        fsync_dir(root)
    except OSError:
        pass


class PendingCache(Blocks):
    """A cache entry not written yet. :meth:`stream` is the one pass that parses the text:
    it hands out the parsed blocks as they come while a background thread writes the entry
    (:mod:`._cachewrite`), and commits it at the end, so the first pass of a training run
    learns from the text as it is parsed. Anything else (a pass, the counts, the
    features) writes the entry first, then reads it: a :class:`CacheBlocks`."""

    def __init__(self, text: TextBlocks, entry: str, root: str, opts: ParseOptions,
                 path: str) -> None:
        self.text, self.entry, self.root, self.opts, self.path = text, entry, root, opts, path
        self.bits = opts.bits
        self.parse = opts
        self.sources = [path]
        self._done: CacheBlocks | None = None

    @property
    def pending(self) -> bool:
        return self._done is None

    def stream(self) -> Iterator[Block]:
        """The shard's blocks, parsed once, the entry written meanwhile."""
        tmp = _new_tmp(self.root)
        ok = False
        w: EntryWriter | None = None
        try:
            w = EntryWriter(tmp, self.opts, self.path, _VERSION)
            start = 0
            for ds, e in self.text.map_chunks(lambda ds: (ds, w.encode(ds))):
                w.put(e)
                yield Block(start=start, indptr=ds.indptr, indices=ds.indices,
                            values=ds.values, labels=ds.labels, weights=ds.weights,
                            tag_ptr=ds.tag_ptr, tag_blob=ds.tag_blob, blanks=ds.blanks,
                            ignored=ds.ignored, notes=ds.notes and tuple(ds.notes))
                start += len(ds)
            w.finish()
            _commit(tmp, self.entry, self.root)
            self._done = CacheBlocks(self.entry, self.opts, self.path)
            ok = True
        except OSError as e:
            raise _storage(self.root, e) from None
        finally:
            if not ok:
                if w is not None:
                    w.abort()
                shutil.rmtree(tmp, ignore_errors=True)

    def done(self) -> CacheBlocks:
        """The written entry (written now when it is not yet)."""
        if self._done is None:
            for _ in self.stream():
                pass
        assert self._done is not None
        return self._done

    def __iter__(self) -> Iterator[Block]:
        return iter(self.done())

    def label_blocks(self) -> Iterator[tuple[int, np.ndarray, np.ndarray, np.ndarray | None]]:
        return self.done().label_blocks()

    def stats(self) -> ShardStats:
        return self.done().stats()

    def skipped(self) -> int:
        return self.done().skipped()

    def features(self) -> np.ndarray:
        return self.done().features()


def load_cached(path: str, opts: ParseOptions, *, shard: tuple[int, ...] = (0, 1),
                cache_dir: str | None = None, lazy: bool = False) -> tuple[Blocks, bool]:
    """The shard as Blocks from the cache, streaming it into the cache first when needed
    (``lazy``: a :class:`PendingCache`, written by its first pass instead).

    Returns (blocks, hit). ``cache_dir=""`` disables the cache: the Blocks then parse the
    text on every pass.
    """
    from ._stream import TextBlocks  # (zipfile and its kin: not for a run that reads none)

    text = TextBlocks(path, opts, shard=shard)
    if cache_dir == "" or not os.path.exists(path):
        if not os.path.exists(path):
            text.stats()  # raises the DataError (no such file)
        return text, False
    root = checked_root(cache_dir or default_cache_dir())
    entry = os.path.join(root, cache_key(path, opts, shard))
    if os.path.exists(os.path.join(entry, "meta.json")):
        try:
            return CacheBlocks(entry, opts, path), True
        except (OSError, ValueError, KeyError):
            shutil.rmtree(entry, ignore_errors=True)  # unreadable entry: parse again
    if lazy:
        return PendingCache(text, entry, root, opts, path), False
    tmp = _new_tmp(root)
    try:
        _write_entry(tmp, text, opts, path)
        _commit(tmp, entry, root)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        raise _storage(root, e) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return CacheBlocks(entry, opts, path), False
