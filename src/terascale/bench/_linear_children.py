"""The processes of ``terascale bench linear``: one learner run each, a fresh process every
time so that no learner profits from another's warm caches.

``python -m terascale.bench._linear_children KIND SPEC_JSON`` prints one JSON line. Times
are taken inside the child around training (parse + learn); metrics are computed on the
test file from each learner's raw scores by the same code; peak RSS is the process's own
``ru_maxrss`` taken before evaluation (for VW, that of its command-line process).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np

__all__ = ["child", "cut_shards", "test_metrics"]

ME = "terascale.bench._linear_children"


def child(kind: str, spec: dict[str, Any], timeout: float = 7200) -> dict[str, Any]:
    """Run one child process and return its JSON result."""
    out = subprocess.run([sys.executable, "-m", ME, kind, json.dumps(spec)],
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        from terascale import TerascaleError

        raise TerascaleError(f"bench child {kind} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _labels(path: str) -> np.ndarray:
    """The first word of every line (VW's label), read a line at a time."""
    with open(path) as f:
        return np.array([float(line.split(" ", 1)[0]) for line in f], np.float64)


def test_metrics(test: str, scores: Any) -> dict[str, float]:
    from terascale.linear import evaluate_scores

    return evaluate_scores(_labels(test), np.asarray(scores))


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _dir_bytes(d: str) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(d) for f in fs)


def cut_shards(path: str, n: int, out: list[str]) -> None:
    """Split a text file into the byte-range shards terascale's workers read (the records
    that start in the k-th n-th of the file), streaming."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        starts = [0]
        for k in range(1, n):
            f.seek(size * k // n - 1)
            f.readline()  # to the end of the record holding that byte
            starts.append(f.tell())
        starts.append(size)
        for k in range(n):
            f.seek(starts[k])
            left = starts[k + 1] - starts[k]
            with open(out[k], "wb") as o:
                while left > 0:
                    data = f.read(min(left, 8 << 20))
                    o.write(data)
                    left -= len(data)


# ------------------------------------------------------------------------------- terascale

def _train(spec: dict[str, Any]) -> tuple[Any, float]:
    from terascale.linear import train

    t0 = time.perf_counter()
    model = train([spec["train"]], bits=spec["bits"], cache_dir=spec["cache"],
                  **spec["options"])
    return model, time.perf_counter() - t0


def _summary(model: Any, secs: float, test: str) -> dict[str, Any]:
    m = model.evaluate(test)
    return {**m, "seconds": secs, "batch_s": model.info.get("batch_s"),
            "passes": model.info.get("batch_passes"), "examples": model.info["examples"],
            "test_examples": m["examples"], "features": model.info["feature_count"]}


def _ours(spec: dict[str, Any]) -> dict[str, Any]:
    if spec.get("warm"):  # an earlier run (another process) leaves the cache
        child("ours", {**spec, "warm": False})
    model, secs = _train(spec)
    rss = _rss_mb()
    return {**_summary(model, secs, spec["test"]), "rss_mb": rss,
            "cache_bytes": _dir_bytes(spec["cache"])}


def _multi(spec: dict[str, Any]) -> dict[str, Any]:
    from terascale.launch import LaunchOptions, launch

    if spec.get("warm"):
        child("multi", {**spec, "warm": False})
    result = os.path.join(spec["cache"], "result")
    code = launch([sys.executable, "-m", ME, "worker", json.dumps({**spec, "result": result})],
                  LaunchOptions(nprocs=spec["workers"], timeout=7200))
    if code:
        raise SystemExit(code)
    with open(result + ".json") as f:
        out = json.load(f)
    rss = []
    for k in range(spec["workers"]):
        with open(f"{result}.{k}.rss") as f:
            rss.append(float(f.read()))
    return {**out, "rss_mb": max(rss), "rss_mb_all": rss,
            "cache_bytes": _dir_bytes(spec["cache"]) - os.path.getsize(result + ".json")
            - sum(os.path.getsize(f"{result}.{k}.rss") for k in range(spec["workers"]))}


def _worker(spec: dict[str, Any]) -> None:
    from terascale import read_env

    model, secs = _train(spec)
    env = read_env()
    rank = 0 if env is None else env.rank
    with open(f"{spec['result']}.{rank}.rss", "w") as f:
        f.write(str(_rss_mb()))
    if rank == 0:
        with open(spec["result"] + ".json", "w") as f:
            json.dump(_summary(model, secs, spec["test"]), f)


# ------------------------------------------------------------------------------- VW

def _vw_cli(args: str) -> tuple[float, float]:
    """Run ``python -m vowpalwabbit ARGS``: (seconds, peak RSS MiB of the process)."""
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
    return secs, ru.ru_maxrss / 1024.0


def _vw_lib(args: str) -> tuple[float, float]:
    """Run VW in this process (pyvw): (seconds, peak RSS MiB of this process so far)."""
    from vowpalwabbit import pyvw

    t0 = time.perf_counter()
    pyvw.Workspace(args).finish()
    return time.perf_counter() - t0, _rss_mb()


def _vw(spec: dict[str, Any]) -> dict[str, Any]:
    """VW: stage 1 (and stage 2, the batch passes), then test predictions; with ``cli``
    through ``python -m vowpalwabbit`` (its own process: its start-up counts, its RSS is
    measured alone), else in this process (pyvw). ``stage1`` with ``-c`` reads a cache
    that an untimed earlier run wrote."""
    run = _vw_cli if spec.get("cli") else _vw_lib
    d = spec["cache"]
    m1, m2, pred = (os.path.join(d, n) for n in ("vw1.model", "vw2.model", "vw.pred"))
    common = f"--quiet --loss_function logistic -b {spec['bits']} -d {spec['train']}"
    s1 = spec["stage1"]
    cache = os.path.join(d, "vw1.cache")
    if "-c" in s1.split():
        s1 = f"{s1} --cache_file {cache}"
        run(f"{common} -f {m1} {s1}")  # writes the cache, untimed
    secs, rss = run(f"{common} -f {m1} {s1}")
    final = m1
    if spec["stage2"]:
        s2, r2 = run(f"--quiet -d {spec['train']} -i {m1} -f {m2} --cache_file "
                         f"{os.path.join(d, 'vw.cache')} {spec['stage2']}")
        secs, rss, final = secs + s2, max(rss, r2), m2
    only = " --predict_only_model" if spec["stage2"] else ""
    run(f"--quiet -d {spec['test']} -t -i {final} -p {pred}{only}")
    caches = [p for p in (cache, os.path.join(d, "vw.cache")) if os.path.exists(p)]
    return {"seconds": secs, "rss_mb": rss, **test_metrics(spec["test"],
                                                           np.loadtxt(pred, usecols=0)),
            "cache_bytes": max((os.path.getsize(p) for p in caches), default=0)}


def _vw_cluster(spec: dict[str, Any]) -> dict[str, Any]:
    """VW's cluster mode: one process per node, rendezvous through terascale's span server."""
    from terascale.linear import SpanServer

    n, d = spec["workers"], spec["cache"]
    shards = [os.path.join(d, f"shard{k}.vw") for k in range(n)]
    cut_shards(spec["train"], n, shards)  # the same shards as terascale's
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
    _vw_cli(f"--quiet -d {spec['test']} -t -i {os.path.join(d, 'node0-2.model')} "
            f"-p {pred} --predict_only_model")
    return {"seconds": max(o["seconds"] for o in outs),
            **test_metrics(spec["test"], np.loadtxt(pred, usecols=0))}


def _vw_node(spec: dict[str, Any]) -> dict[str, Any]:
    from vowpalwabbit import pyvw

    k, d = spec["node"], spec["cache"]
    data = os.path.join(d, f"shard{k}.vw")
    m1, m2 = os.path.join(d, f"node{k}-1.model"), os.path.join(d, f"node{k}-2.model")
    cluster = (f"--span_server 127.0.0.1 --span_server_port {spec['port']} "
               f"--total {spec['workers']} --node {k}")
    t0 = time.perf_counter()
    pyvw.Workspace(f"--quiet --loss_function logistic -b {spec['bits']} -d {data} -f {m1} "
                   f"--predict_only_model {cluster} --unique_id 101").finish()
    pyvw.Workspace(f"--quiet -d {data} -i {m1} -f {m2} --cache_file {data}.cache "
                   f"--bfgs --passes 20 -c -k --predict_only_model {cluster} "
                   f"--unique_id 102").finish()
    return {"seconds": time.perf_counter() - t0}


# ------------------------------------------------------------------------------- sklearn

def _sklearn(spec: dict[str, Any]) -> dict[str, Any]:
    import scipy.sparse as sp
    from sklearn.linear_model import LogisticRegression

    from terascale.linear import ParseOptions, evaluate_scores, read_file

    opts = ParseOptions(bits=spec["bits"])
    tr, te = read_file(spec["train"], opts), read_file(spec["test"], opts)
    union, cols = np.unique(tr.indices, return_inverse=True)
    X = sp.csr_matrix((tr.values, cols.ravel(), tr.indptr), shape=(len(tr), len(union)))
    pos = np.searchsorted(union, te.indices)
    ok = (pos < len(union)) & (union[np.minimum(pos, len(union) - 1)] == te.indices)
    Xt = sp.csr_matrix((np.where(ok, te.values, 0), np.where(ok, pos, 0), te.indptr),
                       shape=(len(te), len(union)))
    t0 = time.perf_counter()
    clf = LogisticRegression(C=1.0, max_iter=200, fit_intercept=False)
    clf.fit(X, tr.labels > 0)
    t = time.perf_counter() - t0
    return {"seconds": t, **evaluate_scores(te.labels, clf.decision_function(Xt))}


_KINDS = {"ours": _ours, "multi": _multi, "vw": _vw, "vw-cluster": _vw_cluster,
          "vw-node": _vw_node, "sklearn": _sklearn}

if __name__ == "__main__":
    kind, spec_json = sys.argv[1], sys.argv[2]
    if kind == "worker":
        _worker(json.loads(spec_json))
    else:
        print(json.dumps(_KINDS[kind](json.loads(spec_json))))
