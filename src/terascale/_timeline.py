"""Timelines: every collective of every rank as Chrome trace events (like Horovod's timeline).

``terascale run --timeline trace.json`` (or ``terascale.init(timeline="trace.json")``) makes
each rank append one event per collective to its own part file, ``trace.json.rank<R>.part``
(JSON lines: cheap, crash-safe, no coordination between ranks). The parts are merged into
one Chrome trace (``{"traceEvents": [...]}``, the JSON Object Format of the Trace Event
Format) by the launcher when the workers end, or, without the launcher, by each rank when
its process exits (the last one to exit writes the complete file; the parts stay, except
for a single process). Open it in
https://ui.perfetto.dev or chrome://tracing: one track ("process") per rank, one complete
event (``ph: "X"``) per collective named ``allreduce[ring]`` etc., with the sequence number,
dtype/shape/op and the bytes this rank sent and received during it in ``args``; a counter
track per rank shows the cumulative bytes on the wire. Phases reported by the collective
(``{"phases": [(name, start, end), ...]}`` in the tracer's info) become nested events.

Timestamps are ``time.monotonic()`` (one clock for all processes of a Linux host), shifted
so that the trace starts at 0.
"""

from __future__ import annotations

import atexit
import glob
import json
import os
import re
import threading
from typing import Any

__all__ = ["TimelineWriter", "attach", "clear_parts", "merge_parts", "part_path"]

_PART = re.compile(r"\.rank(\d+)\.part$")


def part_path(path: str, rank: int) -> str:
    """The file rank ``rank`` appends its events to."""
    return f"{path}.rank{rank}.part"


class TimelineWriter:
    """The ``tracer`` of a :class:`~terascale.Communicator`: appends its events to a part file."""

    def __init__(self, path: str, rank: int, comm: Any = None) -> None:
        self.path = path
        self.rank = rank
        self._comm = comm
        self._lock = threading.Lock()
        self._file = open(part_path(path, rank), "a", buffering=1)  # noqa: SIM115  # line-buffered
        self._sent, self._received = self._bytes()  # count from here, not the handshakes

    def _bytes(self) -> tuple[int, int]:
        if self._comm is None:
            return 0, 0
        return int(self._comm.bytes_sent), int(self._comm.bytes_received)

    def __call__(self, name: str, seq: int, start: float, end: float,
                 info: dict[str, Any]) -> None:
        detail = str(info.get("detail", ""))
        algo = detail.split(",", 1)[0] if name == "allreduce" and detail else ""
        sent, received = self._bytes()
        with self._lock:
            args = {"seq": seq, "detail": detail, "bytes_sent": sent - self._sent,
                    "bytes_received": received - self._received}
            self._sent, self._received = sent, received
            events = [{"name": f"{name}[{algo}]" if algo else name, "cat": name, "ph": "X",
                       "ts": start * 1e6, "dur": max(end - start, 0.0) * 1e6,
                       "pid": self.rank, "tid": 0, "args": args}]
            for phase, p0, p1 in info.get("phases", ()):
                events.append({"name": str(phase), "cat": f"{name}.phase", "ph": "X",
                               "ts": p0 * 1e6, "dur": max(p1 - p0, 0.0) * 1e6,
                               "pid": self.rank, "tid": 0, "args": {"seq": seq}})
            events.append({"name": "bytes on the wire", "ph": "C", "ts": end * 1e6,
                           "pid": self.rank, "args": {"sent": sent, "received": received}})
            if not self._file.closed:
                self._file.write("".join(json.dumps(e) + "\n" for e in events))

    def close(self) -> None:
        with self._lock:
            self._file.close()


def attach(comm: Any, path: str | None, *, merge_at_exit: bool = True) -> Any:
    """Give ``comm`` a :class:`TimelineWriter` for ``path`` (no-op when ``path`` is falsy)."""
    if not path:
        return comm
    writer = TimelineWriter(path, comm.rank, comm)
    comm.tracer = writer

    def finish() -> None:
        writer.close()
        if merge_at_exit:
            try:
                merge_parts(path, remove=comm.size == 1)  # others may still be writing
            except OSError:
                pass

    atexit.register(finish)
    return comm


def clear_parts(path: str) -> None:
    """Remove part files left by an earlier run writing the same timeline."""
    for p in glob.glob(glob.escape(path) + ".rank*.part"):
        try:
            os.remove(p)
        except FileNotFoundError:
            pass


def merge_parts(path: str, *, remove: bool = True) -> int:
    """Merge every ``path.rank<R>.part`` into the Chrome trace ``path``; returns the event count.

    Truncated last lines (a rank killed mid-write) are skipped. The file is replaced
    atomically, so concurrent mergers never leave half a file.
    """
    parts = sorted(glob.glob(glob.escape(path) + ".rank*.part"))
    events: list[dict[str, Any]] = []
    ranks: list[int] = []
    for p in parts:
        m = _PART.search(p)
        if m is None:
            continue
        ranks.append(int(m.group(1)))
        with open(p) as f:
            for line in f:
                try:
                    events.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
    if not parts:
        return 0
    t0 = min((e["ts"] for e in events), default=0.0)
    for e in events:
        e["ts"] = round(e["ts"] - t0, 3)
        if "dur" in e:
            e["dur"] = round(e["dur"], 3)
    events.sort(key=lambda e: (e["pid"], e["ts"]))
    meta: list[dict[str, Any]] = []
    for r in sorted(set(ranks)):
        meta.append({"name": "process_name", "ph": "M", "pid": r, "args": {"name": f"rank {r}"}})
        meta.append({"name": "process_sort_index", "ph": "M", "pid": r, "args": {"sort_index": r}})
        meta.append({"name": "thread_name", "ph": "M", "pid": r, "tid": 0,
                     "args": {"name": "collectives"}})
    trace = {"traceEvents": meta + events, "displayTimeUnit": "ms",
             "otherData": {"producer": "terascale", "ranks": len(set(ranks))}}
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(trace, f)
    os.replace(tmp, path)
    if remove:
        for p in parts:
            os.remove(p)
    return len(events)
