"""The processes of ``terascale bench linear``: one learner run each, a fresh process every
time so that no learner profits from another's warm caches.

``python -m terascale.bench._linear_children KIND SPEC_JSON`` prints one JSON line. Times
are taken inside the child around training (parse + learn); metrics are computed on the
test file from each learner's raw scores by the same code; peak RSS is the process's own
``ru_maxrss`` taken before evaluation (for VW, that of its command-line process). VW's
children live in :mod:`._linear_vw`.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import IO, Any

import numpy as np

from .._files import private_dir, replace_durably

__all__ = ["child", "child_in", "cut_shards", "test_metrics", "work_dir"]

ME = "terascale.bench._linear_children"


def child(kind: str, spec: dict[str, Any], timeout: float = 7200) -> dict[str, Any]:
    """Run one child process and return its JSON result."""
    out = subprocess.run([sys.executable, "-m", ME, kind, json.dumps(spec)],
                         capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        from terascale import TerascaleError

        raise TerascaleError(f"bench child {kind} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def child_in(work: str, kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    """:func:`child` with ``spec["cache"]`` a new directory under ``work``, removed once the
    child has returned (a 10M-example run leaves ~2 GB there: caches, models, predictions;
    the result carries what was measured in it)."""
    d = tempfile.mkdtemp(prefix="run-", dir=work)
    try:
        return child(kind, {**spec, "cache": d})
    finally:
        shutil.rmtree(d, ignore_errors=True)


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
    that start in the k-th n-th of the file), streaming; each shard appears whole or not
    at all (a benchmark reuses shards it finds)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        starts = [0]
        for k in range(1, n):
            f.seek(size * k // n - 1)
            f.readline()  # to the end of the record holding that byte
            starts.append(f.tell())
        starts.append(size)
        for k in range(n):
            def copy(o: IO[bytes], k: int = k) -> None:
                f.seek(starts[k])
                left = starts[k + 1] - starts[k]
                while left > 0:
                    data = f.read(min(left, 8 << 20))
                    o.write(data)
                    left -= len(data)
            replace_durably(out[k], copy, prefix=".tmp-shard-")


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
                  LaunchOptions(nprocs=spec["workers"], timeout=7200, cpu_bind=False))
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


def _kinds() -> dict[str, Any]:
    from . import _linear_vw as vw

    return {"ours": _ours, "multi": _multi, "vw": vw.run_vw, "vw-cluster": vw.run_cluster,
            "vw-node": vw.run_node, "sklearn": _sklearn}


if __name__ == "__main__":
    kind, spec_json = sys.argv[1], sys.argv[2]
    if kind == "worker":
        _worker(json.loads(spec_json))
    else:
        print(json.dumps(_kinds()[kind](json.loads(spec_json))))


def work_dir(given: str | None) -> str:
    """Where the linear benchmarks keep their data and outputs: ``--dir``, else
    ``TMPDIR/terascale-bench-linear``, made private and refused (``ConfigError``) when
    another user could write it: VW and the benchmark write predictions and models there by
    name, and would write through a link that user left in their place.

    Parameters
    ----------
    given
        The ``--dir`` flag's value (None or empty: the default).
    """
    if given:
        return given
    path = os.path.join(tempfile.gettempdir(), "terascale-bench-linear")
    return private_dir(path, f"terascale bench linear: {path}", "give --dir DIR")
