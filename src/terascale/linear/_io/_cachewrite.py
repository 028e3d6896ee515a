"""Writing one cache entry: parsed blocks encoded in the parser's threads, appended to
``data.bin`` by a background thread, committed with fsync and a rename.

The writer is what lets the first pass learn while the cache is written: the parser's
threads encode their block (:func:`._cachefmt.encode_block`'s bytes: the compiled core's
where it is built, which needs no numpy, else numpy and nogil numba) and mark its features; the thread that hands the blocks out in order gives each record to
:meth:`EntryWriter.put`, which only queues it, and a writer thread appends it and syncs the
file every ``SYNC_BYTES`` as it goes, so the final ``fsync`` has little left to do and the
learner never waits on the disk. The queue is bounded (``DEPTH`` records): a slow disk
slows the parse down instead of filling memory.
"""

from __future__ import annotations

import json
import os
import queue
import threading
from array import array
from typing import NamedTuple

from ..._background import background
from ..._files import PieceWriter
from ._blocks import FeatureSet
from ._cachefmt import FIELDS, encode_block
from ._dataset import Dataset, ParseOptions
from ._npyfile import npy_header

__all__ = ["DEPTH", "SYNC_BYTES", "Encoded", "EntryWriter"]

DEPTH = 8                 # records queued for the writer thread
SYNC_BYTES = 32 << 20     # data written between two background syncs
_POLL = 0.05              # seconds between checks of the writer while waiting on it


class Encoded(NamedTuple):
    """One block as the cache stores it, with its row of the index."""

    rec: bytes
    flags: int
    ntag: int
    examples: int
    features: int
    skipped: int
    notes: list[str] | None = None  # VW's lines on its label sections (Dataset.notes)


def fsync_write(path: str, *parts: bytes) -> None:
    """Write ``parts`` in turn to the file ``path``, and sync it."""
    with open(path, "wb") as f:
        for data in parts:
            PieceWriter(f).write(data)
        f.flush()
        os.fsync(f.fileno())


class EntryWriter:
    """Writes the entry in directory ``tmp``: :meth:`encode` (any thread), :meth:`put` (in
    block order), then :meth:`finish` (or :meth:`abort`)."""

    def __init__(self, tmp: str, opts: ParseOptions, source: str, version: int) -> None:
        self.tmp, self.opts, self.source, self.version = tmp, opts, source, version
        self._feats = FeatureSet(opts.bits)
        self._lock = threading.Lock()
        self._rows: list[tuple[int, int, int, int, int, int]] = []
        self._notes: dict[int, list[str]] = {}  # by block: VW's lines on label sections
        self._off = self._examples = self._nnz = self._skipped = 0
        self._q: queue.Queue[bytes | None] = queue.Queue(DEPTH)
        self._error: BaseException | None = None
        self._stop = threading.Event()
        self._f = open(os.path.join(tmp, "data.bin"), "wb")  # noqa: SIM115 (closed in finish/abort)
        self._out = PieceWriter(self._f)  # large records handed to the kernel in pieces
        self._thread = threading.Thread(target=self._run, name="terascale-cache-writer",
                                        daemon=True)
        self._thread.start()

    def encode(self, ds: Dataset) -> Encoded:
        """The block's record (run it in the parser's threads)."""
        rec, flags, ntag = encode_block(ds.indptr, ds.indices, ds.values, ds.labels,
                                        ds.weights, ds.tag_ptr, ds.tag_blob, self.opts.bits,
                                        ds.blanks, ds.ignored)
        with self._lock:
            self._feats.add(ds.indices)
        return Encoded(rec, flags, ntag, len(ds), ds.n_features, ds.skipped, ds.notes)

    def put(self, e: Encoded) -> None:
        """Queue the next block's record for the writer thread (blocks only while the
        queue is full); raises what the writer thread met (a full disk)."""
        self._skipped += e.skipped
        if e.examples == 0:
            return
        if e.notes:
            self._notes[len(self._rows)] = list(e.notes)
        self._rows.append((self._off, len(e.rec), e.examples, e.features, e.flags, e.ntag))
        self._off += len(e.rec)
        self._examples += e.examples
        self._nnz += e.features
        while True:
            self._raise()
            try:
                self._q.put(e.rec, timeout=_POLL)
                return
            except queue.Full:
                continue

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error
        if not self._thread.is_alive():
            raise OSError("the cache writer thread ended")

    def _run(self) -> None:
        background()
        unsynced = 0
        try:
            while True:
                rec = self._q.get()
                if rec is None or self._stop.is_set():
                    return
                self._out.write(rec)
                unsynced += len(rec)
                if unsynced >= SYNC_BYTES:  # spread the final fsync's work over the pass
                    self._f.flush()
                    os.fdatasync(self._f.fileno())
                    unsynced = 0
        except BaseException as e:  # handed to the producer (put / finish)
            self._error = e

    def finish(self) -> None:
        """Write what is queued, sync, and write the index, the features and the meta."""
        while True:
            self._raise()
            try:
                self._q.put(None, timeout=_POLL)
                break
            except queue.Full:
                continue
        self._thread.join()
        if self._error is not None:
            raise self._error
        self._f.flush()
        os.fsync(self._f.fileno())
        self._f.close()
        tmp = self.tmp
        rows = array("q", [v for row in self._rows for v in row])
        fsync_write(os.path.join(tmp, "index.npy"),
                    npy_header("<i8", (len(self._rows), FIELDS)), rows.tobytes())
        feats = self._feats.sorted_bytes()
        fsync_write(os.path.join(tmp, "features.npy"),
                    npy_header("<u4", (len(feats) // 4,)), feats)
        meta = {"version": self.version, "source": self.source, "bits": self.opts.bits,
                "examples": self._examples, "features": self._nnz,
                "skipped": self._skipped, "bytes": self._off, "blocks": len(self._rows),
                **({"notes": {str(k): v for k, v in self._notes.items()}}
                   if self._notes else {})}
        fsync_write(os.path.join(tmp, "meta.json"), json.dumps(meta).encode())

    def abort(self) -> None:
        """Stop the writer thread and close the file (the caller removes ``tmp``)."""
        self._stop.set()
        try:
            self._q.put_nowait(None)
        except queue.Full:
            pass
        self._thread.join(timeout=10.0)
        try:
            self._f.close()
        except OSError:
            pass
