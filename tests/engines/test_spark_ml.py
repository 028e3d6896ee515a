"""terascale.spark.LinearLearner on a real local Spark (local[2]): a pyspark.ml Estimator.

fit on a Vector column and on plain columns, transform, Pipeline, save/load, the cached
parse a second fit reuses, and an AUC next to MLlib's LogisticRegression on the same data.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytestmark = pytest.mark.spark
full = pytest.mark.skipif(os.environ.get("TERASCALE_SPARK_FULL", "") in ("", "0"),
                          reason="make test-engines (TERASCALE_SPARK_FULL=1)")

pyspark = pytest.importorskip("pyspark")

import terascale  # noqa: E402
import terascale.spark  # noqa: E402


@pytest.fixture
def spark(spark_sessions):  # one session per master: see conftest.py
    return spark_sessions.get("local[2]")


def _vectors(spark, n: int, seed: int, parts: int = 2):
    """Sparse and dense MLlib vectors from a noisy logistic model over 50 columns."""
    from pyspark.ml.linalg import Vectors

    truth = np.random.default_rng(0).standard_normal(50)  # one model, many samples
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        cols = np.sort(rng.choice(50, size=8, replace=False))
        vals = rng.standard_normal(8)
        p = 1.0 / (1.0 + np.exp(-(truth[cols] @ vals)))
        y = float(rng.random() < p)
        if i % 3 == 0:
            dense = np.zeros(50)
            dense[cols] = vals
            v = Vectors.dense(dense)
        else:
            v = Vectors.sparse(50, cols.tolist(), vals.tolist())
        rows.append((v, y, 1.0 + (i % 2)))
    return spark.createDataFrame(rows, ["features", "label", "w"]).repartition(parts)


def _auc(df, col="rawPrediction") -> float:
    from pyspark.ml.evaluation import BinaryClassificationEvaluator

    return BinaryClassificationEvaluator(rawPredictionCol=col, labelCol="label").evaluate(df)


def test_vector_column_fit_transform_and_auc_next_to_mllib(spark, tmp_path):
    from pyspark.ml.classification import LogisticRegression

    train = _vectors(spark, 2000, seed=1)
    test = _vectors(spark, 600, seed=2)
    lr = terascale.spark.LinearLearner(bits=12, passes=2, bfgs=10, cacheDir=str(tmp_path))
    model = lr.fit(train)
    assert model.info["workers"] == 2 and model.info["examples"] == 2000
    out = model.transform(test)
    assert out.columns == ["features", "label", "w", "rawPrediction", "probability",
                           "prediction"]
    rows = out.select("rawPrediction", "probability", "prediction").collect()
    raw = np.array([r[0][1] for r in rows])
    prob = np.array([r[1][1] for r in rows])
    assert np.allclose(prob, 1.0 / (1.0 + np.exp(-raw)))
    assert set(r[2] for r in rows) == {0.0, 1.0}
    ours = _auc(out)
    mllib = _auc(LogisticRegression(maxIter=20).fit(train).transform(test))
    assert ours > 0.8 and ours >= mllib - 0.01, (ours, mllib)
    # The weight column is read: doubling every other example's weight changes the model.
    weighted = lr.copy({lr.weightCol: "w"}).fit(train)
    assert not np.array_equal(weighted.linear.dense(), model.linear.dense())


def test_arrow_batches_train_the_model_rows_train(spark, monkeypatch):
    """A Vector column travels to the tasks as Arrow batches (mapInArrow): the model is,
    bitwise, the one of the Row path -- sparse rows with explicit zeros, empty rows, dense
    rows, indices beyond 2^bits, int labels, importance weights, batches of 7 rows."""
    pytest.importorskip("pyarrow")
    from pyspark.ml.linalg import Vectors

    from terascale.engines.spark import _ml

    rng = np.random.default_rng(11)
    rows = []
    for i in range(240):
        if i % 5 == 0:
            v = Vectors.sparse(1 << 20, [], [])
        elif i % 5 == 1:
            v = Vectors.dense(np.where(rng.random(30) < 0.3, rng.standard_normal(30), 0.0))
        else:
            idx = np.sort(rng.choice(1 << 20, 6, replace=False))
            val = rng.standard_normal(6)
            val[0] = 0.0
            v = Vectors.sparse(1 << 20, idx.tolist(), val.tolist())
        rows.append((v, i % 2, 1.0 + i % 3))
    df = spark.createDataFrame(rows, ["features", "label", "w"]).repartition(2).cache()
    lr = terascale.spark.LinearLearner(bits=10, passes=2, bfgs=3, weightCol="w", cacheDir="")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "7")
    try:
        arrow = lr.fit(df)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    monkeypatch.setattr(_ml, "by_arrow", lambda d, enc: (d.rdd, False))
    by_rows = lr.fit(df)
    df.unpersist()
    assert arrow.info["examples"] == by_rows.info["examples"] == 240
    assert np.array_equal(arrow.linear.dense(), by_rows.linear.dense())
    # a small Vector column leaves the JVM as plain arrays (vector_to_array): the same
    small = spark.createDataFrame(
        [(Vectors.dense(np.where(rng.random(30) < 0.5, rng.standard_normal(30), 0.0))
          if i % 3 else Vectors.sparse(30, [2, 7], [0.0, 1.5]), i % 2, 1.0)
         for i in range(120)], ["features", "label", "w"]).repartition(2).cache()
    by_rows = lr.fit(small)
    monkeypatch.undo()
    assert np.array_equal(lr.fit(small).linear.dense(), by_rows.linear.dense())
    small.unpersist()


def test_vector_csr_kernel_matches_numpy_and_names_the_bad_row():
    """The compiled CSR step: bitwise what numpy's mask/cast/insert gives (indices masked
    to bits, float32 values, the constant last), and a NaN/inf/huge value's row named."""
    from terascale._errors import DataError
    from terascale.engines.spark._vectorcsr import vector_csr
    from terascale.linear import CONSTANT_HASH

    rng = np.random.default_rng(3)
    counts = rng.integers(0, 5, 50)
    counts[[0, 7, 49]] = 0
    idx = rng.integers(0, 1 << 30, int(counts.sum()))
    flat = rng.standard_normal(int(counts.sum())) * 1e3
    for constant in (True, False):
        indptr, indices, values = vector_csr(counts, idx, flat, 12, constant, 0, "p", "f")
        ref_i, ref_v = (idx & 4095).astype(np.uint32), flat.astype(np.float32)
        ref_c = counts
        if constant:
            ends = np.cumsum(counts)
            ref_i = np.insert(ref_i, ends, np.uint32(CONSTANT_HASH & 4095))
            ref_v = np.insert(ref_v, ends, np.float32(1.0))
            ref_c = counts + 1
        assert np.array_equal(indptr, np.concatenate([[0], np.cumsum(ref_c)]))
        assert np.array_equal(indices, ref_i) and np.array_equal(values, ref_v)
        assert indices.dtype == np.uint32 and values.dtype == np.float32
    for bad in (np.nan, np.inf, 1e39):
        f = flat.copy()
        f[int(counts[:10].sum())] = bad  # the first entry of row 10 (rows 0..9 before it)
        with pytest.raises(DataError, match=r"part 3, row 110: column 'f'"):
            vector_csr(counts, idx, f, 12, True, 100, "part 3", "f")


def test_plain_columns_hash_like_the_csv_reader(spark, tmp_path):
    """Numeric, string (categories, numbers-as-text, nulls) and boolean columns: the model
    equals, bitwise, the one trained on the same partitions written as CSV files."""
    rng = np.random.default_rng(7)
    rows = []
    for i in range(800):
        a, b = float(rng.standard_normal()), int(rng.integers(0, 5))
        city = ["paris", "rome", None, "oslo"][i % 4]
        flag = bool(i % 3)
        y = int(a + (city == "rome") - 0.3 * b + 0.5 * rng.standard_normal() > 0)
        rows.append((y, a, b, city, flag))
    df = spark.createDataFrame(rows, "y int, a double, b long, city string, flag boolean")
    df = df.repartition(2)
    opts = {"bits": 14, "passes": 2, "bfgs": 5}
    lr = terascale.spark.LinearLearner(featureCols=["a", "b", "city", "flag"], labelCol="y",
                                       cacheDir=str(tmp_path / "c"), **opts)
    model = lr.fit(df)
    files = []
    for k, part in enumerate(df.rdd.glom().collect()):
        files.append(str(tmp_path / f"part-{k}.csv"))
        with open(files[-1], "w") as f:
            f.write("y,a,b,city,flag\n")
            for r in part:
                f.write(",".join("" if v is None else str(v) for v in r) + "\n")
    from_csv = terascale.spark.train_linear(files, spark=spark, format="csv", label="y",
                                            cache_dir="", **opts)
    assert np.array_equal(model.linear.dense(), from_csv.dense())
    assert model.linear.evaluate(files[0])["auc"] > 0.75  # the model reads the CSV, too
    pred = model.transform(df).select("prediction", "y").collect()
    assert np.mean([p == y for p, y in pred]) > 0.7


def test_pipeline_save_and_load(spark, tmp_path):
    from pyspark.ml import Pipeline, PipelineModel
    from pyspark.ml.feature import VectorAssembler

    rng = np.random.default_rng(3)
    x = rng.standard_normal((600, 3))
    y = (x @ np.array([1.0, -1.0, 0.5]) > 0).astype(float)
    df = spark.createDataFrame([(*map(float, r), float(t)) for r, t in zip(x, y)],
                               ["x0", "x1", "x2", "label"]).repartition(2)
    pipe = Pipeline(stages=[VectorAssembler(inputCols=["x0", "x1", "x2"], outputCol="vec"),
                            terascale.spark.LinearLearner(featuresCol="vec", bits=10,
                                                          passes=3, cacheKey="xyz",
                                                          cacheDir=str(tmp_path / "c"))])
    fitted = pipe.fit(df)
    # a stage's input is a new projection at every fit: a cacheKey names it for the cache
    assert pipe.fit(df).stages[-1].info["spark"]["cache"] == "hit"
    got = fitted.transform(df).select("probability", "label").collect()
    before = [r.probability[1] for r in got]
    fitted.write().overwrite().save(str(tmp_path / "pipe"))
    loaded = PipelineModel.load(str(tmp_path / "pipe"))
    stage = loaded.stages[-1]
    assert isinstance(stage, terascale.spark.LinearLearnerModel)
    assert stage.getOrDefault("featuresCol") == "vec" and stage.getOrDefault("passes") == 3
    # the same columns selected: Spark prunes columns below the shuffle of repartition(2),
    # whose row order depends on the columns it sorts (sortBeforeRepartition)
    after = [r.probability[1] for r in
             loaded.transform(df).select("probability", "label").collect()]
    assert before == after
    assert np.mean((np.array(after) > 0.5) == np.array([r.label for r in got])) > 0.9
    est = terascale.spark.LinearLearner(bits=11, l2=0.5)  # the Estimator saves too
    est.save(str(tmp_path / "est"))
    back = terascale.spark.LinearLearner.load(str(tmp_path / "est"))
    assert back.getOrDefault("bits") == 11 and back.getOrDefault("l2") == 0.5


@full
def test_second_fit_reuses_the_cached_parse(spark, tmp_path):
    cache = str(tmp_path / "cache")
    df = _vectors(spark, 1000, seed=4).cache()
    lr = terascale.spark.LinearLearner(bits=12, passes=2, cacheDir=cache)
    first, second = lr.fit(df), lr.fit(df)
    assert first.info["spark"]["cache"] == "miss" and first.info["spark"]["cache_hits"] == 0
    assert second.info["spark"]["cache"] == "hit" and second.info["spark"]["cache_hits"] == 2
    assert np.array_equal(first.linear.dense(), second.linear.dense())
    stages = first.info["spark"]  # where the fit's time went, per task
    for key in ("launch_s", "prepare_s", "prepare_cpu_s", "join_s", "train_s", "train_cpu_s"):
        assert len(stages[key]) == 2 and min(stages[key]) >= 0.0, key
    assert stages["job_s"] >= max(stages["train_s"]) and stages["return_s"] >= 0.0
    # another bits value is another encoding: parsed afresh
    assert lr.copy({lr.bits: 13}).fit(df).info["spark"]["cache_hits"] == 0
    df.unpersist()
    # an unpersisted DataFrame of driver data has no identity: no cache ...
    assert lr.fit(_vectors(spark, 200, seed=5)).info["spark"]["cache"] == "off"
    # ... unless the user names it
    keyed = lr.copy({lr.cacheKey: "vectors-seed-5"})
    keyed.fit(_vectors(spark, 200, seed=5))
    assert keyed.fit(_vectors(spark, 200, seed=5)).info["spark"]["cache"] == "hit"


def test_text_files_are_cached_by_path_and_mtime(spark, tmp_path):
    paths = []
    for k in range(2):
        paths.append(str(tmp_path / f"p{k}.vw"))
        with open(paths[-1], "w") as f:
            f.write("".join(f"{1 if (i + k) % 3 else -1} |f a:{i % 7} b{i % 5}\n"
                            for i in range(300)))
    cache = str(tmp_path / "cache")
    m1 = terascale.spark.train_linear(paths, spark=spark, bits=12, cache_dir=cache)
    m2 = terascale.spark.train_linear(paths, spark=spark, bits=12, cache_dir=cache)
    assert (m1.info["spark"]["cache_hits"], m2.info["spark"]["cache_hits"]) == (0, 2)
    df = spark.read.text(paths)  # a DataFrame over local files: keyed by plan + mtimes
    d1 = terascale.spark.train_linear(df, spark=spark, bits=12, cache_dir=cache)
    d2 = terascale.spark.train_linear(df, spark=spark, bits=12, cache_dir=cache)
    assert d2.info["spark"]["cache"] == "hit" and d1.info["spark"]["cache_hits"] == 0
    with open(paths[0], "a") as f:  # a rewritten file is new data
        f.write("1 |f a:3\n")
    os.utime(paths[0], ns=(0, os.stat(paths[0]).st_mtime_ns + 10**9))
    m3 = terascale.spark.train_linear(paths, spark=spark, bits=12, cache_dir=cache)
    assert m3.info["spark"]["cache_hits"] == 0 and m3.info["examples"] == 601


def test_bad_columns_are_clear_errors(spark):
    df = spark.createDataFrame([(1.0, "x", 1.0)], ["a", "s", "label"])
    lr = terascale.spark.LinearLearner()
    with pytest.raises(terascale.ConfigError, match="featuresCol='features'"):
        lr.fit(df)
    with pytest.raises(terascale.ConfigError, match="not an MLlib Vector"):
        lr.copy({lr.featuresCol: "s"}).fit(df)
    with pytest.raises(terascale.ConfigError, match="labelCol='y'"):
        lr.copy({lr.labelCol: "y", lr.featureCols: ["a"]}).fit(df)
    with pytest.raises(terascale.ConfigError, match="no Param 'bitz'"):
        terascale.spark.LinearLearner(bitz=3)


def test_a_bad_row_is_its_data_error_at_once_not_a_stage_retry(spark):
    """A partition the task refuses (a NaN feature) is raised on the driver as the task's
    own DataError, after one attempt: every task learns of it in the rendezvous's
    allGather, none joins the job, and Spark has no failed stage to rerun."""
    import time

    from pyspark.ml.linalg import Vectors

    rows = [(Vectors.dense([1.0, 2.0]), 1.0), (Vectors.sparse(2, [0], [3.0]), 0.0)] * 10
    rows[13] = (Vectors.dense([float("nan"), 2.0]), 1.0)
    df = spark.createDataFrame(rows, ["features", "label"]).coalesce(2)
    t0 = time.monotonic()
    with pytest.raises(terascale.DataError, match=r"Spark partition \d, row \d+: column "
                                                    r"'features' has a NaN"):
        terascale.spark.LinearLearner(bits=10).fit(df)
    assert time.monotonic() - t0 < 120  # a deadline, not a timing: four stage attempts
    # and their barrier timeouts would take minutes
    # labels the loss cannot take: found by the workers together, raised as it is, with
    # the labels found (7 would be an eighth class: not with family="binomial")
    rows[13] = (Vectors.dense([1.0, 2.0]), 7.0)
    df = spark.createDataFrame(rows, ["features", "label"]).coalesce(2)
    with pytest.raises(terascale.DataError, match="labels found are 0, 1, 7; logistic"):
        terascale.spark.LinearLearner(bits=10, family="binomial").fit(df)
