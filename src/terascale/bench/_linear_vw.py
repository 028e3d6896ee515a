"""The VW children of ``terascale bench linear`` (see :mod:`._linear_children`): VW 9.x
from the ``vowpalwabbit`` package, as a VW user runs it, with VW's own account of every run
(examples learned, sources, caches read and written) checked and kept in the result.

Caches: VW's ``-c`` names the cache ``<data>.cache`` beside the data file, and with
``--cache_file`` as well VW keeps a list of caches and reads *every* one that exists, one
after another. The data files are shared by every run of the bench, so a cache left beside
them by an earlier run made VW's "one pass from the cache" learn the data twice. Here each
run's cache is ``--cache_file D/vw.cache`` alone, in the run's own fresh directory ``D``;
VW writes it as ``vw.cache.writing`` and renames it when complete, so a run never reads a
half-written cache.
"""

from __future__ import annotations

import json
import os
import re
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np

from ._linear_children import ME, cut_shards, test_metrics

__all__ = ["run_cluster", "run_node", "run_vw"]


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _vw_cli(args: str) -> tuple[float, float, str]:
    """Run ``python -m vowpalwabbit ARGS``: (seconds, peak RSS MiB of the process, its
    stderr)."""
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "vowpalwabbit", *args.split()],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert p.stderr is not None
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    secs = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"vowpalwabbit {args} failed:\n{err.decode()[-2000:]}")
    return secs, ru.ru_maxrss / 1024.0, err.decode(errors="replace")


def _vw_lib(args: str) -> tuple[float, float, str]:
    """Run VW in this process (pyvw): (seconds, peak RSS MiB of this process so far, VW's
    log)."""
    from vowpalwabbit import pyvw

    t0 = time.perf_counter()
    ws = pyvw.Workspace(args, enable_logging=True)
    ws.finish()
    return time.perf_counter() - t0, _rss_mb(), "\n".join(ws.get_log())


def _own_cache(flags: str, path: str) -> str:
    """VW's ``-c`` spelled ``--cache_file PATH``: the same cache, in the run's own directory,
    and the only one (``-c`` with ``--cache_file`` would add ``<data>.cache``, see above)."""
    return " ".join(f"--cache_file {path}" if f == "-c" else f for f in flags.split())


def _vw_account(log: str) -> dict[str, Any]:
    """VW's own summary of a run: examples learned (per pass), passes, input sources, the
    caches it read and the ones it wrote."""
    def num(pattern: str, default: int) -> int:
        m = re.search(pattern, log, re.M)
        return int(m.group(1)) if m else default

    return {"examples": num(r"^number of examples(?: per pass)? = (\d+)", -1),
            "passes": num(r"^passes used = (\d+)", 1),
            "sources": num(r"^num sources = (\d+)", -1),
            "read": re.findall(r"^using cache_file = (\S+)", log, re.M),
            "wrote": re.findall(r"^creating cache_file = (\S+)", log, re.M)}


def _expect(cmd: str, acct: dict[str, Any], read: list[str], wrote: list[str],
            examples: int | None = None) -> None:
    """Fail (naming the command) unless VW read and wrote exactly these caches, from one
    source, and learned ``examples`` examples where given."""
    if (acct["read"], acct["wrote"], acct["sources"]) != (read, wrote, 1) or (
            examples is not None and acct["examples"] != examples):
        n = "" if examples is None else f", {examples} examples"
        raise SystemExit(f"vowpalwabbit {cmd}: expected to read {read or 'the text'}, write "
                         f"{wrote or 'no cache'}, from 1 source{n}; VW read {acct['read']}, "
                         f"wrote {acct['wrote']}, from {acct['sources']} sources, "
                         f"{acct['examples']} examples")


def run_vw(spec: dict[str, Any]) -> dict[str, Any]:
    """VW: stage 1 (and stage 2, the batch passes), then test predictions; with ``cli``
    through ``python -m vowpalwabbit`` (its own process: its start-up counts, its RSS is
    measured alone), else in this process (pyvw). ``-c`` in a stage's flags becomes
    ``--cache_file D/vw.cache`` in the run's own directory (:func:`_own_cache`); ``stage1``
    with ``-c`` is timed reading the cache that the same command, run untimed just before,
    wrote from the text. VW's summary is checked (the timed run read that one cache, from
    one source, and learned exactly the examples that the writing run parsed) and returned
    as ``vw``, one entry per timed stage."""
    run = _vw_cli if spec.get("cli") else _vw_lib
    d = spec["cache"]
    m1, m2, pred = (os.path.join(d, n) for n in ("vw1.model", "vw2.model", "vw.pred"))
    cache = os.path.join(d, "vw.cache")
    cmd = (f"--loss_function logistic -b {spec['bits']} -d {spec['train']} -f {m1} "
           f"{_own_cache(spec['stage1'], cache)}")
    if cache in cmd.split():
        parsed = _vw_account(run(cmd)[2])  # writes the cache, untimed
        _expect(cmd, parsed, [], [cache])
        secs, rss, log = run(cmd)
        _expect(cmd, acct := _vw_account(log), [cache], [], parsed["examples"])
    else:
        secs, rss, log = run(cmd)
        _expect(cmd, acct := _vw_account(log), [], [])
    accounts, final = [acct], m1
    if spec["stage2"]:
        t2, r2, log2 = run(f"-d {spec['train']} -i {m1} -f {m2} "
                           f"{_own_cache(spec['stage2'], cache)}")
        accounts.append(_vw_account(log2))
        secs, rss, final = secs + t2, max(rss, r2), m2
    only = " --predict_only_model" if spec["stage2"] else ""
    run(f"--quiet -d {spec['test']} -t -i {final} -p {pred}{only}")
    return {"seconds": secs, "rss_mb": rss, **test_metrics(spec["test"],
                                                           np.loadtxt(pred, usecols=0)),
            "cache_bytes": os.path.getsize(cache) if os.path.exists(cache) else 0,
            "vw": accounts}


def run_cluster(spec: dict[str, Any]) -> dict[str, Any]:
    """VW's cluster mode: one process per node, rendezvous through terascale's span server."""
    from terascale.linear import SpanServer

    n, d = spec["workers"], spec["cache"]
    shards = _shards(spec)
    made = os.path.getmtime(spec["train"])
    if not all(os.path.exists(p) and os.path.getmtime(p) >= made for p in shards):
        cut_shards(spec["train"], n, shards)  # the same shards as terascale's (kept if given)
    srv = SpanServer(0).start()
    try:
        procs = [subprocess.Popen(
            [sys.executable, "-m", ME, "vw-node", json.dumps({**spec, "node": k,
                                                               "port": srv.port})],
            stdout=subprocess.PIPE, text=True) for k in range(n)]
        outs = [json.loads(p.communicate(timeout=7200)[0].strip().splitlines()[-1])
                for p in procs]
    finally:
        srv.stop()
    if any(p.returncode for p in procs):
        raise SystemExit("a VW node failed")
    pred = os.path.join(d, "vw.pred")
    final = "node0-1.model" if spec.get("one_pass") else "node0-2.model"
    _vw_cli(f"--quiet -d {spec['test']} -t -i {os.path.join(d, final)} "
            f"-p {pred} --predict_only_model")
    return {"seconds": max(o["seconds"] for o in outs),
            "rss_mb": max(o["rss_mb"] for o in outs),
            **test_metrics(spec["test"], np.loadtxt(pred, usecols=0))}


def _shards(spec: dict[str, Any]) -> list[str]:
    """The nodes' shard files: ``spec["shards"]``, else ``shardK.vw`` in the run's directory."""
    return spec.get("shards") or [os.path.join(spec["cache"], f"shard{k}.vw")
                                  for k in range(spec["workers"])]


def run_node(spec: dict[str, Any]) -> dict[str, Any]:
    from vowpalwabbit import pyvw

    k, d = spec["node"], spec["cache"]
    data = _shards(spec)[k]
    m1, m2 = os.path.join(d, f"node{k}-1.model"), os.path.join(d, f"node{k}-2.model")
    cluster = (f"--span_server 127.0.0.1 --span_server_port {spec['port']} "
               f"--total {spec['workers']} --node {k}")
    t0 = time.perf_counter()
    pyvw.Workspace(f"--quiet --loss_function logistic -b {spec['bits']} -d {data} -f {m1} "
                   f"--predict_only_model {cluster} --unique_id 101").finish()
    if not spec.get("one_pass"):
        pyvw.Workspace(f"--quiet -d {data} -i {m1} -f {m2} --cache_file {data}.cache "
                       f"--bfgs --passes 20 -k --predict_only_model {cluster} "
                       f"--unique_id 102").finish()
    return {"seconds": time.perf_counter() - t0,
            "rss_mb": _rss_mb()}
