"""Timelines: valid Chrome trace JSON, one track per rank, every collective recorded."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

from terascale._timeline import merge_parts
from terascale.launch import LaunchOptions, launch
from terascale.testing import run_workers


def _check_trace(path: str, ranks: int) -> list[dict]:
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {r: f"rank {r}" for r in range(ranks)}  # one track per rank
    spans = [e for e in events if e["ph"] == "X"]
    for e in spans:
        assert e["ts"] >= 0 and e["dur"] >= 0 and e["pid"] in names and e["tid"] == 0
    assert not [p for p in os.listdir(os.path.dirname(path)) if p.endswith(".part")]
    for e in spans:  # every phase lies inside its collective on the same track
        if e["cat"].endswith(".phase"):
            parent = [c for c in spans if c["pid"] == e["pid"] and not c["cat"].endswith(".phase")
                      and c["args"].get("seq") == e["args"]["seq"]]
            assert parent and parent[0]["ts"] <= e["ts"] + 1e-3
            assert e["ts"] + e["dur"] <= parent[0]["ts"] + parent[0]["dur"] + 1e-3
    return [e for e in spans if not e["cat"].endswith(".phase")]


def _work(comm) -> int:
    for algo in ("tree", "ring"):
        comm.allreduce(np.ones(50_000, np.float32), algorithm=algo)
    comm.allreduce_async(np.ones(10)).wait()
    comm.barrier()
    return comm.rank


def test_every_collective_of_every_rank(tmp_path) -> None:
    path = str(tmp_path / "trace.json")
    run_workers(_work, 3, env={"TERASCALE_TIMELINE": path})
    assert merge_parts(path) > 0
    spans = _check_trace(path, 3)
    events = json.load(open(path))["traceEvents"]
    phases = {(e["pid"], e["name"]) for e in events if e.get("cat", "").endswith(".phase")}
    assert {(r, "queued") for r in range(3)} <= phases  # the async allreduce waited in line
    assert {(r, "transfer+reduce") for r in range(3)} <= phases
    for rank in range(3):
        mine = [e for e in spans if e["pid"] == rank]
        assert [e["name"] for e in mine] == ["allreduce[tree]", "allreduce[ring]",
                                             mine[2]["name"], "barrier"]
        assert [e["args"]["seq"] for e in mine] == sorted(e["args"]["seq"] for e in mine)
        assert mine[1]["args"]["bytes_sent"] > 100_000  # ring moved the 200 kB vector
    counters = [e for e in json.load(open(path))["traceEvents"] if e["ph"] == "C"]
    assert {e["pid"] for e in counters} == {0, 1, 2}


def test_terascale_run_merges_the_parts(tmp_path) -> None:
    path = str(tmp_path / "run.json")
    code = ("import numpy as np, terascale\n"
            "c = terascale.init()\n"
            "c.allreduce(np.ones(1000)); c.broadcast(np.ones(4)); c.close()\n")
    status = launch([sys.executable, "-c", code],
                    LaunchOptions(nprocs=2, timeline=path, prefix_output=False))
    assert status == 0
    spans = _check_trace(path, 2)
    assert sorted((e["pid"], e["cat"]) for e in spans) == [
        (0, "allreduce"), (0, "broadcast"), (1, "allreduce"), (1, "broadcast")]


def test_init_timeline_in_a_single_process(tmp_path) -> None:
    path = str(tmp_path / "solo.json")
    code = (f"import terascale\nc = terascale.init(timeline={path!r})\n"
            "c.allreduce([1.0, 2.0]); c.barrier()\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERASCALE_")}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=60)
    spans = _check_trace(path, 1)  # merged by the process itself at exit
    assert [e["cat"] for e in spans] == ["allreduce", "barrier"]
