"""``terascale bench linear``: terascale linear vs Vowpal Wabbit (and scikit-learn), one run.

Data: NYC flights 2013 as VW text (see ``_flights``), months 1-10 train, 11-12 test, the
same files for every learner. Recipes: one online pass (parsing included, then again on data
cached by an earlier run); one online pass then up to 20 L-BFGS passes; one online pass with
``-q ch``; and the L-BFGS recipe on 2 local workers. Each run
is a fresh child process so that no learner profits from another's warm caches: terascale
parses into a new cache directory, VW parses its text (and writes its cache for the L-BFGS
passes). Times are measured inside the child (parse + learn, without interpreter start-up);
metrics are computed on the test months from each learner's raw scores by the same code.
scikit-learn's LogisticRegression (lbfgs, C = 1/l2) is fit on the same hashed features.
VW's cluster mode runs through ``terascale span-server`` (VW's spanning-tree protocol).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

__all__ = ["add_bench_parser"]

RECIPES = {  # name: (terascale options, VW stage-1 flags, VW stage-2 flags or None)
    "online": ({}, "", None),
    "online, data cached by an earlier run": ({}, "-c", None),
    "online+bfgs20": ({"bfgs": 20}, "--predict_only_model", "--bfgs --passes 20 -c -k --predict_only_model"),
    "online -q ch": ({"quadratic": ["ch"]}, "-q ch", None),
}


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = kinds.add_parser("linear", help="terascale linear vs Vowpal Wabbit, same run",
                         description=__doc__.split("\n\n")[1] if __doc__ else None)
    p.add_argument("-b", "--bits", type=int, default=24, help="hash bits (default 24)")
    p.add_argument("--workers", type=int, default=2, help="workers of the multi-worker run")
    p.add_argument("--dir", default=None, help="work directory (default: TMPDIR/"
                                                "terascale-bench-linear)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write results as JSON")
    p.add_argument("--no-sklearn", action="store_true", help="leave scikit-learn out")
    p.add_argument("--dense", action="store_true",
                   help="dense synthetic data instead (116k train + 29k test examples, 74 "
                        "numeric features, seeded): the one-pass recipes only")
    p.add_argument("--repeat", type=int, default=3,
                   help="runs of each learner, interleaved; the median time counts (default 3)")
    p.set_defaults(func=_run)


def _child(kind: str, spec: dict[str, Any]) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "terascale.linear._bench", kind,
                          json.dumps(spec)], capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        from .._errors import TerascaleError

        raise TerascaleError(f"bench child {kind} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _metrics_of(test: str, scores: Any) -> dict[str, float]:
    import numpy as np

    from ._metrics import evaluate_scores

    labels = np.array([float(line.split(" ", 1)[0]) for line in open(test)])
    return evaluate_scores(labels, np.asarray(scores))


# ---------------------------------------------------------------- children (own process)

def _child_ours(spec: dict[str, Any]) -> dict[str, Any]:
    from ._train import train

    if spec.get("warm"):  # an earlier run (another process) left the cache
        subprocess.run([sys.executable, "-m", "terascale.linear._bench", "ours",
                        json.dumps({**spec, "warm": False})], check=True, capture_output=True)
    t0 = time.perf_counter()
    model = train([spec["train"]], bits=spec["bits"], cache_dir=spec["cache"],
                  **spec["options"])
    t = time.perf_counter() - t0
    m = model.evaluate(spec["test"])
    return {**m, "seconds": t, "batch_s": model.info.get("batch_s"),
            "passes": model.info.get("batch_passes"), "examples": model.info["examples"],
            "test_examples": m["examples"], "features": model.info["feature_count"]}


def _child_ours_multi(spec: dict[str, Any]) -> dict[str, Any]:
    from ..launch import LaunchOptions, launch

    result = os.path.join(spec["cache"], "result.json")
    code = launch([sys.executable, "-m", "terascale.linear._bench", "worker", json.dumps(
        {**spec, "result": result})], LaunchOptions(nprocs=spec["workers"], timeout=300))
    if code:
        raise SystemExit(code)
    with open(result) as f:
        return json.load(f)


def _worker(spec: dict[str, Any]) -> None:
    from .._init import read_env
    from ._train import train

    t0 = time.perf_counter()
    model = train([spec["train"]], bits=spec["bits"], cache_dir=spec["cache"],
                  **spec["options"])
    t = time.perf_counter() - t0
    env = read_env()
    if env is None or env.rank == 0:
        m = model.evaluate(spec["test"])
        with open(spec["result"], "w") as f:
            json.dump({**m, "seconds": t, "batch_s": model.info.get("batch_s"),
                       "passes": model.info.get("batch_passes"),
                       "examples": model.info["examples"], "test_examples": m["examples"],
                       "features": model.info["feature_count"]}, f)


def _child_vw(spec: dict[str, Any]) -> dict[str, Any]:
    from vowpalwabbit import pyvw

    d = spec["cache"]
    m1, m2, pred = (os.path.join(d, n) for n in ("vw1.model", "vw2.model", "vw.pred"))
    common = f"--quiet --loss_function logistic -b {spec['bits']}"
    if "-c" in spec["stage1"].split():  # an earlier run leaves VW's cache file
        cache = f"--cache_file {os.path.join(d, 'vw1.cache')}"
        spec = {**spec, "stage1": spec["stage1"] + " " + cache}
        pyvw.Workspace(f"{common} -d {spec['train']} -f {m1} {spec['stage1']}").finish()
    t0 = time.perf_counter()
    vw = pyvw.Workspace(f"{common} -d {spec['train']} -f {m1} {spec['stage1']}")
    vw.finish()
    final = m1
    if spec["stage2"]:
        vw = pyvw.Workspace(f"--quiet -d {spec['train']} -i {m1} -f {m2} "
                            f"--cache_file {os.path.join(d, 'vw.cache')} {spec['stage2']}")
        vw.finish()
        final = m2
    t = time.perf_counter() - t0
    only = " --predict_only_model" if spec["stage2"] else ""
    vw = pyvw.Workspace(f"--quiet -d {spec['test']} -t -i {final} -p {pred}{only}")
    vw.finish()
    import numpy as np

    scores = np.loadtxt(pred, usecols=0)
    return {"seconds": t, **_metrics_of(spec["test"], scores)}


def _child_vw_cluster(spec: dict[str, Any]) -> dict[str, Any]:
    """VW's cluster mode: one process per node, rendezvous through our span server."""
    import numpy as np

    from ._readers import _byte_range
    from ._span import SpanServer

    n, d = spec["workers"], spec["cache"]
    buf = np.fromfile(spec["train"], np.uint8)
    for k in range(n):  # the same shards as terascale's
        s, e = _byte_range(buf, k, n)
        buf[s:e].tofile(os.path.join(d, f"shard{k}.vw"))
    srv = SpanServer(0).start()
    try:
        procs = [subprocess.Popen(
            [sys.executable, "-m", "terascale.linear._bench", "vw-node",
             json.dumps({**spec, "node": k, "port": srv.port})],
            stdout=subprocess.PIPE, text=True) for k in range(n)]
        outs = [json.loads(p.communicate(timeout=1800)[0].strip().splitlines()[-1])
                for p in procs]
    finally:
        srv.stop()
    if any(p.returncode for p in procs):
        raise SystemExit("a VW node failed")
    pred = os.path.join(d, "vw.pred")
    from vowpalwabbit import pyvw

    pyvw.Workspace(f"--quiet -d {spec['test']} -t -i {os.path.join(d, 'node0-2.model')} "
                   f"-p {pred} --predict_only_model").finish()
    return {"seconds": max(o["seconds"] for o in outs),
            **_metrics_of(spec["test"], np.loadtxt(pred, usecols=0))}


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


def _child_sklearn(spec: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import scipy.sparse as sp
    from sklearn.linear_model import LogisticRegression

    from ._dataset import ParseOptions
    from ._readers import read_file

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
    from ._metrics import evaluate_scores

    return {"seconds": t, **evaluate_scores(te.labels, clf.decision_function(Xt))}


# ---------------------------------------------------------------- driver

def _run(args: argparse.Namespace) -> int:
    from ._flights import write_flights

    work = args.dir or os.path.join(tempfile.gettempdir(), "terascale-bench-linear")
    if args.dense:
        train_p, test_p = _write_dense(work)
        what = "dense synthetic data (74 numeric features)"
    else:
        train_p, test_p = write_flights(work)
        what = "NYC flights 2013"
    print(f"terascale bench linear: {what}, {train_p} / {test_p}, -b {args.bits}, "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    rows: list[dict[str, Any]] = []
    base = {"train": train_p, "test": test_p, "bits": args.bits}

    def fresh() -> str:
        return tempfile.mkdtemp(prefix="run-", dir=work)

    # warm numba's on-disk cache of compiled code once, outside the timings
    _child("ours", {**base, "cache": fresh(), "options": {"bfgs": 2}})
    for name, (opts, s1, s2) in RECIPES.items():
        if args.dense and name not in ("online", "online, data cached by an earlier run"):
            continue
        vws, uss = [], []
        for _ in range(args.repeat):
            vws.append(_child("vw", {**base, "cache": fresh(), "stage1": s1, "stage2": s2}))
            uss.append(_child("ours", {**base, "cache": fresh(), "options": opts,
                                       "warm": "-c" in s1.split()}))
        rows += [{"recipe": name, "learner": "vowpalwabbit", **_median(vws)},
                 {"recipe": name, "learner": "terascale", **_median(uss)}]
        _print_pair(rows[-2], rows[-1])
    if args.dense:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0
    one = rows[5]
    multi = _median([_child("multi", {**base, "cache": fresh(), "workers": args.workers,
                                      "options": RECIPES["online+bfgs20"][0]})
                     for _ in range(args.repeat)])
    vwc = _median([_child("vw-cluster", {**base, "cache": fresh(), "workers": args.workers})
                   for _ in range(args.repeat)])
    name = f"online+bfgs20, {args.workers} workers"
    rows += [{"recipe": name, "learner": "vowpalwabbit", **vwc},
             {"recipe": name, "learner": "terascale", **multi}]
    _print_pair(rows[-2], rows[-1])
    vw1 = rows[4]
    print(f"  {args.workers} vs 1 worker: terascale x{one['seconds'] / multi['seconds']:.2f} "
          f"(L-BFGS phase {multi['batch_s']:.3f} s vs {one['batch_s']:.3f} s, "
          f"x{one['batch_s'] / multi['batch_s']:.2f}); vowpalwabbit "
          f"x{vw1['seconds'] / vwc['seconds']:.2f} (cluster mode via terascale span-server)")
    if not args.no_sklearn:
        sk = _child("sklearn", {**base})
        rows.append({"recipe": "LogisticRegression C=1 (same hashed features)",
                     "learner": "scikit-learn", **sk})
        print(f"scikit-learn LogisticRegression: fit {sk['seconds']:.2f} s, test AUC "
              f"{sk['auc']:.4f}, logloss {sk['logloss']:.4f}, auPRC {sk['auprc']:.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def _write_dense(work: str) -> tuple[str, str]:
    """Dense logistic data in VW text, seeded: 74 numeric features in one namespace."""
    import numpy as np

    train, test = os.path.join(work, "dense-train.vw"), os.path.join(work, "dense-test.vw")
    if os.path.exists(train) and os.path.exists(test):
        return train, test
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(74)
    true = rng.normal(size=74) / 4
    for path, n in ((train, 116_000), (test, 29_000)):
        X = rng.normal(size=(n, 74)).astype(np.float32)
        y = np.where(rng.random(n) < 1 / (1 + np.exp(-(X @ true))), "1", "-1")
        feats = [" ".join(f"f{j}:{v:.4g}" for j, v in enumerate(row)) for row in X]
        with open(path + ".tmp", "w") as f:
            f.write("".join(f"{lab} |x {fs}\n" for lab, fs in zip(y, feats)))
        os.replace(path + ".tmp", path)
    return train, test


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median time, with every run's time listed."""
    ordered = sorted(runs, key=lambda r: r["seconds"])
    return {**ordered[len(ordered) // 2], "all_seconds": [r["seconds"] for r in runs]}


def _print_pair(vw: dict[str, Any], us: dict[str, Any]) -> None:
    n, f = us["examples"], us["features"]
    print(f"\n{vw['recipe']}")
    print(f"  {'learner':<13} {'seconds':>8} {'examples/s':>11} {'features/s':>11} "
          f"{'logloss':>8} {'AUC':>7} {'auPRC':>7}")
    for r in (vw, us):
        print(f"  {r['learner']:<13} {r['seconds']:8.2f} {n / r['seconds']:11,.0f} "
              f"{f / r['seconds']:11,.0f} {r['logloss']:8.4f} {r['auc']:7.4f} "
              f"{r['auprc']:7.4f}")
    print(f"  speed-up x{vw['seconds'] / us['seconds']:.2f}, AUC {us['auc'] - vw['auc']:+.4f}, "
          f"logloss {us['logloss'] - vw['logloss']:+.4f}", flush=True)


if __name__ == "__main__":
    kind, spec_json = sys.argv[1], sys.argv[2]
    spec = json.loads(spec_json)
    if kind == "worker":
        _worker(spec)
    else:
        fn = {"ours": _child_ours, "multi": _child_ours_multi, "vw": _child_vw,
              "vw-cluster": _child_vw_cluster, "vw-node": _vw_node,
              "sklearn": _child_sklearn}[kind]
        print(json.dumps(fn(spec)))
