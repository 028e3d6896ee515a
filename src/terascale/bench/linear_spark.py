"""``terascale bench linear --spark``: terascale on Spark vs MLlib LogisticRegression, one run.

The same data for both, as a Spark user has it: a DataFrame of hashed sparse MLlib vectors
(Spark's own ``libsvm`` source over a file both learners read), ``repartition(workers)``,
persisted and materialized before any clock starts. Data sets:

* ``flights``: NYC flights 2013 (months 1-10 train, 11-12 test), the ten categorical
  namespaces hashed to ``bits`` bits by terascale's VW parser;
* ``click``: seeded click-style data from :func:`terascale.linear.synthetic.write_click`
  (Zipf-distributed ids, repeated tokens, real values on raw scales), ``--spark-rows``
  training examples and a fifth as many test examples, hashed alike.

Learners, each in a fresh child process with its own ``local[workers]`` session (so that
an out-of-memory in one cannot take the others down, and no one profits from another's
JVM warm-up): MLlib ``LogisticRegression(maxIter=20)``; terascale's ``LinearLearner``
with its documented defaults (one online pass: ``terascale`` in the table and JSON) and
with one online pass then up to 20 L-BFGS passes, MLlib's iteration count
(``terascale_lbfgs``), each fitted twice (the second fit reuses the executors' cached
parse); and ``terascale.spark.train_linear`` (the L-BFGS recipe) on the VW text file
itself (``spark.read.text``, parse included). ``stages`` in the JSON is each fit's
``model.info["spark"]``: where its time went, per task (launch, reading and caching the
partition, joining, training, back to the driver; wall and CPU seconds). Fit times exclude session start-up and follow one
warm-up fit on a 5% sample; test AUC comes from each model's
``transform`` through MLlib's ``BinaryClassificationEvaluator``. Ratios: MLlib's fit time
over terascale's (higher is better for terascale) and AUC differences.

``--spark-fit`` times ``fit`` side by side instead (:func:`_fit_child`): MLlib's
``LogisticRegression(maxIter=20)`` and ``LinearLearner(maxIter=20)`` (one online pass, then
up to 20 L-BFGS passes; the parse cache off, so every fit reads its partitions) in one
``local[workers]`` session, interleaved, on a dense table and on the hashed flights
Vectors, each model's test AUC and logloss beside its time.

``--spark-transform`` times scoring instead (:func:`_transform_child`): both models'
``transform`` in one session, every output column computed, on a dense table and on the
hashed sparse test Vectors.
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

from ._linear_children import work_dir

__all__ = ["add_spark_arguments", "run_spark"]


def add_spark_arguments(p: argparse.ArgumentParser) -> None:
    """The ``--spark`` flag and its options, on the ``bench linear`` parser.

    Parameters
    ----------
    p
        The ``bench linear`` parser.
    """
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
    g.add_argument("--spark-transform", action="store_true",
                   help="only time transform: LinearLearnerModel vs MLlib's "
                        "LogisticRegressionModel in one session, on dense Vectors "
                        "(--spark-dense-rows x 40) and on each data set's hashed test "
                        "Vectors (2^--spark-bits)")
    g.add_argument("--spark-fit", action="store_true",
                   help="only time fit: LinearLearner vs MLlib's LogisticRegression in one "
                        "session, interleaved, --repeat times, on a dense table "
                        "(--spark-dense-rows x 40) and each data set's hashed Vectors; "
                        "test AUC and logloss of each")
    g.add_argument("--spark-dense-rows", type=int, default=200_000,
                   help="--spark-transform/--spark-fit: rows of the dense table "
                        "(default 200k)")


def _libsvm(vw: str, bits: int) -> str:
    """The hashed features of a VW file as libsvm (0/1 labels, 1-based sorted indices,
    repeated indices summed: the same linear model), streamed chunk by chunk; its path."""
    from ..linear import ParseOptions, TextBlocks

    path = vw[:-3] + f".b{bits}.libsvm"
    if os.path.exists(path):
        return path
    with open(path + ".tmp", "w") as f:
        for ds in TextBlocks(vw, ParseOptions(bits=bits, constant=False)).datasets():
            ip, idx = np.asarray(ds.indptr), np.asarray(ds.indices).astype(np.int64) + 1
            val, lab = np.asarray(ds.values), np.asarray(ds.labels)
            row = np.repeat(np.arange(len(lab)), np.diff(ip))
            order = np.lexsort((idx, row))
            row, idx, val = row[order], idx[order], val[order]
            first = np.concatenate([[True], (row[1:] != row[:-1]) | (idx[1:] != idx[:-1])])
            starts = np.flatnonzero(first)
            val = np.add.reduceat(val, starts) if len(starts) else val
            row, idx = row[starts], idx[starts]
            ends = np.searchsorted(row, np.arange(len(lab) + 1))
            idx_l, val_l = idx.tolist(), val.tolist()
            f.write("".join(
                ("1" if lab[i] > 0 else "0") + " " + " ".join(
                    f"{a}:{b:g}" for a, b in zip(idx_l[ends[i]:ends[i + 1]],
                                                 val_l[ends[i]:ends[i + 1]])) + "\n"
                for i in range(len(lab))))
    os.replace(path + ".tmp", path)
    return path


def _data(name: str, work: str, rows: int, bits: int) -> dict[str, str]:
    """VW text and libsvm files of one data set (generated once into ``work``)."""
    if name == "flights":
        from ..linear import write_flights

        vw_train, vw_test = write_flights(work)
    elif name == "click":
        from ..linear.synthetic import write_click

        vw_train = os.path.join(work, f"click-{rows}-train.vw")
        vw_test = os.path.join(work, f"click-{rows}-test.vw")
        for path, n, seed in ((vw_train, rows, 1), (vw_test, max(rows // 5, 1000), 2)):
            if not os.path.exists(path):
                write_click(path, n, seed=seed)
    else:
        from .._errors import ConfigError

        raise ConfigError(f"--spark-data: unknown data set {name!r} (flights, click)")
    return {"vw_train": vw_train, "vw_test": vw_test, "train": _libsvm(vw_train, bits),
            "test": _libsvm(vw_test, bits)}


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
        # Warm-up outside the timings, on a 5% sample (discarded): the JVM's JIT for MLlib,
        # the Python workers and their compiled kernels for terascale. A long-lived session
        # pays these once, not per fit.
        warm = train.sample(fraction=0.05, seed=1)
        if spec["learner"] == "mllib":
            from pyspark.ml.classification import LogisticRegression

            LogisticRegression(maxIter=20).fit(warm)
            t = time.perf_counter()
            model = LogisticRegression(maxIter=20).fit(train)
            res["fit_s"] = time.perf_counter() - t
            res["test_auc"] = auc.evaluate(model.transform(test))
        elif spec["learner"] == "terascale":
            import terascale.spark

            # Two recipes, each with its own cache (so that each first fit parses): the
            # Estimator's documented defaults (one online pass), and one online pass then
            # up to 20 L-BFGS passes, MLlib's maxIter=20.
            recipes = {key: terascale.spark.LinearLearner(
                bits=spec["bits"], timeout=600.0, cacheDir=os.path.join(spec["cache"], key),
                **extra) for key, extra in (("defaults", {}),
                                            ("lbfgs", {"passes": 1, "bfgs": 20}))}
            for lr in recipes.values():  # every warm-up before any clock: no recipe is
                lr.fit(warm)             # timed on a session that is warmer for it
            for key, lr in recipes.items():
                t = time.perf_counter()
                model = lr.fit(train)
                fit_s = time.perf_counter() - t
                t = time.perf_counter()
                again = lr.fit(train)
                out = {"fit_s": fit_s, "second_fit_s": time.perf_counter() - t,
                       "second_fit_cache": again.info["spark"]["cache"],
                       "stages": model.info["spark"], "second_stages": again.info["spark"],
                       "test_auc": auc.evaluate(model.transform(test))}
                if key == "defaults":
                    res.update(out)
                else:
                    res[key] = out
        else:  # train_linear on the VW text, end to end (parse included)
            import terascale.spark

            def fit(text: Any) -> Any:
                return terascale.spark.train_linear(text.repartition(spec["workers"]),
                                                    spark=spark, bits=spec["bits"], passes=1,
                                                    bfgs=20, timeout=600.0, cache_dir="")

            lines = spark.read.text(spec["vw_train"])
            fit(lines.sample(fraction=0.05, seed=1))
            t = time.perf_counter()
            m = fit(lines)
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


def _tables(spark: Any, spec: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """(train, test) DataFrames of Vectors: a dense table (40 columns on raw scales, a
    logistic label) and each data set's hashed sparse test/train libsvm files."""
    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import functions as F

    workers = spec["workers"]
    out: dict[str, tuple[Any, Any]] = {}
    cols = [f"x{j}" for j in range(40)]

    def dense(n: int, seed: int) -> Any:
        raw = spark.range(n, numPartitions=workers).select(
            *[(F.randn(seed=seed * 100 + j) * (j + 1)).alias(c) for j, c in enumerate(cols)])
        z = sum((F.col(c) / (j + 1)) * (1.0 if j % 3 else -0.5) for j, c in
                enumerate(cols[:10]))
        raw = raw.withColumn("label", (z + F.randn(seed * 100 + 99) * 2 > 0).cast("double"))
        return VectorAssembler(inputCols=cols, outputCol="features").transform(
            raw).select("features", "label")

    n = spec["dense_rows"]
    out["dense"] = (dense(n, 1), dense(max(n // 4, 1000), 2))
    dim = 1 << spec["bits"]
    for name, paths in spec.get("sparse_sets", {}).items():
        out[name] = tuple(spark.read.format("libsvm").option("numFeatures", dim).load(p)
                          for p in (paths["train"], paths["test"]))  # type: ignore[assignment]
    return out


def _scores(model: Any, test: Any) -> dict[str, float]:
    """Test AUC (MLlib's evaluator) and logloss of a binary model's ``probability``."""
    from pyspark.ml.evaluation import BinaryClassificationEvaluator
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    pred = model.transform(test)
    auc = BinaryClassificationEvaluator(rawPredictionCol="rawPrediction",
                                        labelCol="label").evaluate(pred)
    p = F.least(F.greatest(vector_to_array("probability")[1], F.lit(1e-15)),
                F.lit(1 - 1e-15))
    ll = pred.select(F.avg(-(F.col("label") * F.log(p)
                             + (1 - F.col("label")) * F.log(1 - p)))).first()[0]
    return {"auc": float(auc), "logloss": float(ll)}


def _fit_child(spec: dict[str, Any]) -> dict[str, Any]:
    """fit, ours and MLlib's, side by side in one session: after one warm-up fit of each
    on a 5% sample, ``repeat`` fits each, interleaved; median times, the test AUC and
    logloss, and where our fit's time went (``model.info["spark"]``)."""
    from pyspark.ml.classification import LogisticRegression

    from terascale.spark import LinearLearner

    spark = _session(spec)
    workers = spec["workers"]
    out: dict[str, Any] = {"learner": "fit", "tables": {}}
    for name, (train, test) in _tables(spark, spec).items():
        train = train.repartition(workers).persist()
        test = test.repartition(workers).persist()
        rows = train.count()
        test.count()
        learners = {"mllib": LogisticRegression(maxIter=20),
                    "terascale": LinearLearner(maxIter=20, timeout=600.0, cacheDir="",
                                               bits=spec["bits"])}
        warm = train.sample(fraction=0.05, seed=1)
        for est in learners.values():
            est.fit(warm)
        times: dict[str, list[float]] = {k: [] for k in learners}
        models: dict[str, Any] = {}
        stages = []
        for _ in range(spec["repeat"]):
            for key, est in learners.items():
                t0 = time.perf_counter()
                models[key] = est.fit(train)
                times[key].append(time.perf_counter() - t0)
                if key == "terascale":
                    stages.append(models[key].info.get("spark", {}))
        med = {k: float(np.median(v)) for k, v in times.items()}
        out["tables"][name] = {
            "rows": rows, "times_s": times, "median_s": med,
            "speedup_vs_mllib": med["mllib"] / med["terascale"],
            "test": {k: _scores(m, test) for k, m in models.items()},
            "stages": stages}
        train.unpersist()
        test.unpersist()
    return out


def run_fit(args: argparse.Namespace) -> int:
    """``bench linear --spark --spark-fit``: fit times and test scores, one session."""
    work = work_dir(args.dir)
    os.makedirs(work, exist_ok=True)
    sets = {}
    for name in [d.strip() for d in args.spark_data.split(",") if d.strip()]:
        paths = _data(name, work, args.spark_rows, args.spark_bits)
        sets[name] = {"train": paths["train"], "test": paths["test"]}
    spec = {"learner": "fit", "bits": args.spark_bits, "workers": args.workers,
            "driver_memory": args.spark_driver_memory, "sparse_sets": sets,
            "dense_rows": args.spark_dense_rows, "repeat": args.repeat or 3}
    res = _spawn(spec)
    if "error" in res:
        print(f"fit benchmark FAILED: {res['error']}")
        return 1
    for name, r in res["tables"].items():
        m, t = r["median_s"], r["test"]
        print(f"{name:8s} {r['rows']:>9d} rows  fit: terascale {m['terascale']:.2f} s, "
              f"MLlib {m['mllib']:.2f} s, MLlib/terascale {r['speedup_vs_mllib']:.2f}; "
              f"test AUC {t['terascale']['auc']:.4f} vs {t['mllib']['auc']:.4f}, "
              f"logloss {t['terascale']['logloss']:.4f} vs {t['mllib']['logloss']:.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(res, master=f"local[{args.workers}]"), f, indent=1)
    return 0


def _transform_child(spec: dict[str, Any]) -> dict[str, Any]:
    """transform, ours and MLlib's, side by side in one session: each model fitted
    briefly, then every output column computed (a ``noop`` write: nothing is pruned)
    ``repeat`` times, interleaved; the medians and their ratio."""
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import functions as F

    from terascale.spark import LinearLearner

    spark = _session(spec)
    workers = spec["workers"]
    tables: dict[str, Any] = {}
    n = spec["dense_rows"]
    cols = [f"x{j}" for j in range(40)]
    raw = spark.range(n, numPartitions=workers).select(
        *[(F.randn(seed=j) * (j + 1)).alias(c) for j, c in enumerate(cols)])
    raw = raw.withColumn("label", (F.col("x0") - F.col("x1") / 2 + F.randn(99) > 0)
                         .cast("double"))
    tables["dense"] = VectorAssembler(inputCols=cols, outputCol="features").transform(
        raw).select("features", "label")
    dim = 1 << spec["bits"]
    for name, path in spec["sparse"].items():
        tables[name] = spark.read.format("libsvm").option("numFeatures", dim).load(path)
    out: dict[str, Any] = {"learner": "transform", "tables": {}}
    for name, df in tables.items():
        df = df.repartition(workers).persist()
        rows = df.count()
        ours = LinearLearner(passes=1).fit(df)
        ref = LogisticRegression(maxIter=5).fit(df)
        times: dict[str, list[float]] = {"terascale": [], "mllib": []}
        for _ in range(spec["repeat"]):
            for key, model in (("terascale", ours), ("mllib", ref)):
                t0 = time.perf_counter()
                model.transform(df).write.format("noop").mode("overwrite").save()
                times[key].append(time.perf_counter() - t0)
        med = {k: float(np.median(v)) for k, v in times.items()}
        out["tables"][name] = {"rows": rows, "times_s": times, "median_s": med,
                               "ratio_terascale_over_mllib": med["terascale"] / med["mllib"]}
        df.unpersist()
    return out


def run_transform(args: argparse.Namespace) -> int:
    """``bench linear --spark --spark-transform``: the table of transform times."""
    work = work_dir(args.dir)
    os.makedirs(work, exist_ok=True)
    sparse = {name: _data(name, work, args.spark_rows, args.spark_bits)["test"]
              for name in [d.strip() for d in args.spark_data.split(",") if d.strip()]}
    spec = {"learner": "transform", "bits": args.spark_bits, "workers": args.workers,
            "driver_memory": args.spark_driver_memory, "sparse": sparse,
            "dense_rows": args.spark_dense_rows, "repeat": args.repeat or 3}
    res = _spawn(spec)
    if "error" in res:
        print(f"transform benchmark FAILED: {res['error']}")
        return 1
    for name, r in res["tables"].items():
        m = r["median_s"]
        print(f"{name:8s} {r['rows']:>9d} rows  transform: terascale {m['terascale']:.2f} s, "
              f"MLlib {m['mllib']:.2f} s, ratio {r['ratio_terascale_over_mllib']:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(res, master=f"local[{args.workers}]"), f, indent=1)
    return 0


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


def run_spark(args: argparse.Namespace) -> int:
    """``bench linear --spark``: every data set, every learner; a table, and ``--json``.

    Parameters
    ----------
    args
        The parsed flags of ``terascale bench linear --spark``.
    """
    if args.spark_transform:
        return run_transform(args)
    if args.spark_fit:
        return run_fit(args)
    work = work_dir(args.dir)
    os.makedirs(work, exist_ok=True)
    bits, workers = args.spark_bits, args.workers
    results: dict[str, Any] = {"master": f"local[{workers}]", "bits": bits, "datasets": {}}
    for name in [d.strip() for d in args.spark_data.split(",") if d.strip()]:
        spec: dict[str, Any] = {"bits": bits, "workers": workers,
                                "driver_memory": args.spark_driver_memory}
        spec.update(_data(name, work, args.spark_rows, bits))
        learners = ["mllib", "terascale", "train_linear"]
        runs = {}
        for learner in learners:
            with tempfile.TemporaryDirectory(dir=work) as cache:
                runs[learner] = _spawn(dict(spec, learner=learner, cache=cache))
        if "lbfgs" in runs["terascale"]:  # the second recipe of the same child: its own row
            runs["terascale_lbfgs"] = dict(runs["terascale"].pop("lbfgs"),
                                           learner="terascale_lbfgs")
        row: dict[str, Any] = {"runs": runs}
        ml = runs["mllib"]
        for key, suffix in (("terascale", ""), ("terascale_lbfgs", "_lbfgs")):
            us = runs.get(key, {})
            if "fit_s" in ml and "fit_s" in us:
                row[f"speedup_vs_mllib{suffix}"] = ml["fit_s"] / us["fit_s"]
                row[f"auc_minus_mllib{suffix}"] = us["test_auc"] - ml["test_auc"]
            elif "error" in ml and "fit_s" in us:
                row["mllib_failed"] = ml["error"]
        tl = runs["train_linear"]
        if "fit_s" in ml and "fit_s" in tl:
            row["train_linear_speedup_vs_mllib"] = ml["fit_s"] / tl["fit_s"]
            row["train_linear_auc_minus_mllib"] = tl["test_auc"] - ml["test_auc"]
        results["datasets"][name] = row
        for learner, r in runs.items():
            extra = (f", second fit {r['second_fit_s']:.2f} s ({r['second_fit_cache']})"
                     if "second_fit_s" in r else "")
            print(f"{name:8s} {learner:13s} " + (
                f"fit {r['fit_s']:.2f} s, test AUC {r['test_auc']:.4f}{extra}"
                if "fit_s" in r else f"FAILED: {r.get('error')}"))
        for suffix, what in (("", "defaults"), ("_lbfgs", "+20 L-BFGS")):
            if f"speedup_vs_mllib{suffix}" in row:
                print(f"{name:8s} terascale ({what}) vs MLlib: "
                      f"{row[f'speedup_vs_mllib{suffix}']:.2f}x faster, "
                      f"AUC {row[f'auc_minus_mllib{suffix}']:+.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    _spec = json.loads(sys.argv[1])
    _run = {"transform": _transform_child, "fit": _fit_child}.get(_spec["learner"], _child)
    print(json.dumps(_run(_spec)))
