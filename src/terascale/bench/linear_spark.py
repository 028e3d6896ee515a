"""``terascale bench linear --spark``: terascale on Spark vs MLlib LogisticRegression, one run.

The same data for both, as a Spark user has it: a DataFrame of hashed sparse MLlib vectors
(Spark's own ``libsvm`` source over a file both learners read), ``repartition(workers)``,
persisted and materialized before any clock starts. Data sets:

* ``flights``: NYC flights 2013 (months 1-10 train, 11-12 test), the ten categorical
  namespaces hashed to ``bits`` bits by terascale's VW parser;
* ``click``: seeded click-style data -- Zipf-distributed ids in several fields, real-valued
  counters on raw scales, repeated tokens -- ``--spark-rows`` examples (80% train).

Learners, each in a fresh child process with its own ``local[workers]`` session (so that
an out-of-memory in one cannot take the others down, and no one profits from another's
JVM warm-up): MLlib ``LogisticRegression(maxIter=20)``; terascale's ``LinearLearner``
(one online pass, then up to 20 L-BFGS passes), fitted twice (the second fit reuses the
executors' cached parse); and ``terascale.spark.train_linear`` on the VW text file itself
(flights only). Fit times exclude session start-up; test AUC comes from each model's
``transform`` through MLlib's ``BinaryClassificationEvaluator``. Ratios: MLlib's fit time
over terascale's (higher is better for terascale) and AUC differences.
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

import numpy as np

__all__ = ["add_bench_parser", "run_spark", "write_click"]


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``--spark`` (and its options) to the ``bench linear`` sub-command."""
    p = kinds.choices.get("linear")
    if p is None:  # the linear benchmark is not installed: nothing to extend
        return
    _add_arguments(p)
    linear = p.get_default("func")

    def run(args: argparse.Namespace) -> int:
        if not args.spark:
            return int(linear(args)) if linear is not None else 2
        res = run_spark(args)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
        return 0

    p.set_defaults(func=run)


def _add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("--spark: terascale on Spark vs MLlib")
    g.add_argument("--spark", action="store_true",
                   help="terascale.spark vs MLlib LogisticRegression on local[workers]")
    g.add_argument("--spark-data", default="flights,click",
                   help="comma list of flights, click (default both)")
    g.add_argument("--spark-rows", type=int, default=1_000_000,
                   help="examples of the click-style data (default 1M)")
    g.add_argument("--spark-bits", type=int, default=22,
                   help="hash bits of the Spark comparison (default 22)")
    g.add_argument("--spark-driver-memory", default="4g",
                   help="spark.driver.memory of every child (default 4g)")


def write_click(out_dir: str, rows: int, bits: int, seed: int = 7) -> tuple[str, str]:
    """Seeded click-style data as libsvm files (train 80%, test 20%); their paths.

    Eight categorical fields with Zipf-distributed ids (a few very frequent, a long
    tail), four real-valued counters on raw scales (1 .. 1e4), a token field with repeats;
    the label follows a logistic model of the same features. Feature indices are the
    fields' ids hashed into ``2**bits`` (index 0 is left unused for libsvm).
    """
    train = os.path.join(out_dir, f"click-{rows}-{bits}-train.libsvm")
    test = os.path.join(out_dir, f"click-{rows}-{bits}-test.libsvm")
    if os.path.exists(train) and os.path.exists(test):
        return train, test
    os.makedirs(out_dir, exist_ok=True)
    rng = np.random.default_rng(seed)
    dim = 1 << bits
    salt = rng.integers(1, dim, size=16)
    effect = np.random.default_rng(seed + 1).standard_normal(1 << 16) * 0.7
    cut = int(rows * 0.8)
    tmp_train, tmp_test = train + ".tmp", test + ".tmp"
    with open(tmp_train, "w") as ftr, open(tmp_test, "w") as fte:
        done = 0
        while done < rows:
            m = min(65536, rows - done)
            ids = rng.zipf(1.3, size=(m, 8)) % 100_000
            cnt = np.round(rng.lognormal(mean=[0.5, 2.0, 4.0, 6.0], sigma=1.2, size=(m, 4)), 1)
            tok = rng.zipf(1.6, size=(m, 3)) % 5_000
            cols = np.concatenate([(ids * 2654435761 + salt[:8]) % (dim - 1) + 1,
                                   np.broadcast_to(salt[8:12] % (dim - 1) + 1, (m, 4)),
                                   (tok * 40503 + salt[12]) % (dim - 1) + 1], axis=1)
            vals = np.concatenate([np.ones((m, 8)), cnt, np.ones((m, 3))], axis=1)
            z = (effect[cols[:, :8] % (1 << 16)].sum(axis=1)
                 + 0.3 * np.log1p(cnt) @ np.array([1.0, -0.5, 0.25, -0.1])
                 + effect[cols[:, 12:] % (1 << 16)].sum(axis=1) * 0.5 - 0.5)
            y = rng.random(m) < 1.0 / (1.0 + np.exp(-z))
            for i in range(m):
                order = np.argsort(cols[i], kind="stable")
                c, v = cols[i][order], vals[i][order]
                keep = np.concatenate([[True], c[1:] != c[:-1]])  # libsvm: one value per index
                if not keep.all():  # repeated tokens add up
                    v = np.add.reduceat(v, np.flatnonzero(keep))
                    c = c[keep]
                line = ("1" if y[i] else "0") + " " + " ".join(
                    f"{a}:{b:g}" for a, b in zip(c.tolist(), v.tolist())) + "\n"
                (ftr if done + i < cut else fte).write(line)
            done += m
    os.replace(tmp_train, train)
    os.replace(tmp_test, test)
    return train, test


def _flights_libsvm(work: str, bits: int) -> tuple[str, str, str, str]:
    """Flights as VW text and the same hashed features as libsvm (0/1 labels)."""
    from ..linear import ParseOptions, read_file, write_flights

    vw_train, vw_test = write_flights(work)
    out = []
    for vw in (vw_train, vw_test):
        path = os.path.join(work, os.path.basename(vw)[:-3] + f".b{bits}.libsvm")
        if not os.path.exists(path):
            ds = read_file(vw, ParseOptions(bits=bits, constant=False))
            ip, idx, val = np.asarray(ds.indptr), np.asarray(ds.indices), np.asarray(ds.values)
            lab = np.asarray(ds.labels)
            with open(path + ".tmp", "w") as f:
                for i in range(len(lab)):
                    s, e = int(ip[i]), int(ip[i + 1])
                    order = np.argsort(idx[s:e], kind="stable")
                    c, v = idx[s:e][order].astype(np.int64) + 1, val[s:e][order]
                    f.write(("1" if lab[i] > 0 else "0") + " " + " ".join(
                        f"{a}:{b:g}" for a, b in zip(c.tolist(), v.tolist())) + "\n")
            os.replace(path + ".tmp", path)
        out.append(path)
    return vw_train, vw_test, out[0], out[1]


def _session(spec: dict[str, Any]) -> Any:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    s = (SparkSession.builder.master(f"local[{spec['workers']}]")
         .appName(f"terascale-bench-{spec['learner']}")
         .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.memory", spec["driver_memory"])
         .config("spark.sql.shuffle.partitions", str(spec["workers"])).getOrCreate())
    s.sparkContext.setLogLevel("FATAL")
    return s


def _child(spec: dict[str, Any]) -> dict[str, Any]:
    """One learner on one data set, in this (fresh) process."""
    from pyspark.ml.evaluation import BinaryClassificationEvaluator

    spark = _session(spec)
    dim = 1 << spec["bits"]

    def load(path: str) -> Any:
        df = (spark.read.format("libsvm").option("numFeatures", dim).load(path)
              .repartition(spec["workers"]).persist())
        df.count()  # materialized before any clock starts
        return df

    auc = BinaryClassificationEvaluator(rawPredictionCol="rawPrediction", labelCol="label")
    res: dict[str, Any] = {"learner": spec["learner"]}
    try:
        train, test = load(spec["train"]), load(spec["test"])
        if spec["learner"] == "mllib":
            from pyspark.ml.classification import LogisticRegression

            t = time.perf_counter()
            model = LogisticRegression(maxIter=20).fit(train)
            res["fit_s"] = time.perf_counter() - t
            res["test_auc"] = auc.evaluate(model.transform(test))
        elif spec["learner"] == "terascale":
            import terascale.spark

            lr = terascale.spark.LinearLearner(bits=spec["bits"], passes=1, bfgs=20,
                                               cacheDir=spec["cache"], timeout=600.0)
            t = time.perf_counter()
            model = lr.fit(train)
            res["fit_s"] = time.perf_counter() - t
            t = time.perf_counter()
            again = lr.fit(train)
            res["second_fit_s"] = time.perf_counter() - t
            res["second_fit_cache"] = again.info["spark"]["cache"]
            res["test_auc"] = auc.evaluate(model.transform(test))
        else:  # train_linear on the VW text, end to end (parse included)
            import terascale.spark

            t = time.perf_counter()
            m = terascale.spark.train_linear(spark.read.text(spec["vw_train"])
                                             .repartition(spec["workers"]), spark=spark,
                                             bits=spec["bits"], passes=1, bfgs=20,
                                             timeout=600.0, cache_dir="")
            res["fit_s"] = time.perf_counter() - t
            res["test_auc"] = m.evaluate(spec["vw_test"])["auc"]
    except Exception as e:  # an out-of-memory is a result, not a crash of the bench
        text = str(e)
        res["error"] = ("OutOfMemoryError" if "OutOfMemoryError" in text or
                        "Java heap space" in text else text.strip().splitlines()[-1][:300])
    finally:
        try:
            spark.stop()
        except Exception:
            pass
    return res


def _spawn(spec: dict[str, Any]) -> dict[str, Any]:
    try:
        out = subprocess.run([sys.executable, "-m", "terascale.bench.linear_spark",
                              json.dumps(spec)], capture_output=True, text=True, timeout=3600)
    except subprocess.TimeoutExpired:
        return {"learner": spec["learner"], "error": "timed out after 3600 s"}
    lines = [ln for ln in out.stdout.strip().splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        err = out.stderr.strip().splitlines()
        oom = "OutOfMemoryError" in out.stderr or "Java heap space" in out.stderr
        return {"learner": spec["learner"], "error": "OutOfMemoryError" if oom else
                (err[-1][:300] if err else f"exit status {out.returncode}")}
    return json.loads(lines[-1])


def run_spark(args: argparse.Namespace) -> dict[str, Any]:
    """Every data set, every learner; prints a table and returns the JSON-able results."""
    work = args.dir or os.path.join(tempfile.gettempdir(), "terascale-bench-linear")
    os.makedirs(work, exist_ok=True)
    bits, workers = args.spark_bits, args.workers
    results: dict[str, Any] = {"master": f"local[{workers}]", "bits": bits, "datasets": {}}
    for name in [d.strip() for d in args.spark_data.split(",") if d.strip()]:
        spec: dict[str, Any] = {"bits": bits, "workers": workers,
                                "driver_memory": args.spark_driver_memory}
        learners = ["mllib", "terascale"]
        if name == "flights":
            vw_train, vw_test, spec["train"], spec["test"] = _flights_libsvm(work, bits)
            spec.update(vw_train=vw_train, vw_test=vw_test)
            learners.append("train_linear")
        elif name == "click":
            spec["train"], spec["test"] = write_click(work, args.spark_rows, bits)
        else:
            from .._errors import ConfigError

            raise ConfigError(f"--spark-data: unknown data set {name!r} (flights, click)")
        runs = {}
        for learner in learners:
            with tempfile.TemporaryDirectory(dir=work) as cache:
                runs[learner] = _spawn(dict(spec, learner=learner, cache=cache))
        row: dict[str, Any] = {"runs": runs}
        ml, us = runs["mllib"], runs["terascale"]
        if "fit_s" in ml and "fit_s" in us:
            row["speedup_vs_mllib"] = ml["fit_s"] / us["fit_s"]
            row["auc_minus_mllib"] = us["test_auc"] - ml["test_auc"]
        elif "error" in ml and "fit_s" in us:
            row["mllib_failed"] = ml["error"]
        results["datasets"][name] = row
        for learner, r in runs.items():
            extra = (f", second fit {r['second_fit_s']:.2f} s ({r['second_fit_cache']})"
                     if "second_fit_s" in r else "")
            print(f"{name:8s} {learner:13s} " + (
                f"fit {r['fit_s']:.2f} s, test AUC {r['test_auc']:.4f}{extra}"
                if "fit_s" in r else f"FAILED: {r.get('error')}"))
        if "speedup_vs_mllib" in row:
            print(f"{name:8s} terascale/MLlib: {row['speedup_vs_mllib']:.2f}x faster, "
                  f"AUC {row['auc_minus_mllib']:+.4f}")
    return results


if __name__ == "__main__":
    print(json.dumps(_child(json.loads(sys.argv[1]))))
