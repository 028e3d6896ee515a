"""terascale.spark on local-cluster[2,1,1024]: separate executor JVMs, one of them killed.

A separate Spark session with executor JVMs of its own (a minute and a half in all): run by
``make test-engines`` (``TERASCALE_SPARK_FULL=1``); the suite runs the same features in
local mode.
"""

from __future__ import annotations

import os

import pytest

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(os.environ.get("TERASCALE_SPARK_FULL", "") in ("", "0"),
                                 reason="executor JVMs of their own: make test-engines "
                                        "(TERASCALE_SPARK_FULL=1)")]

pyspark = pytest.importorskip("pyspark")

import terascale.spark  # noqa: E402
from terascale.engines.jobs import (  # noqa: E402
    Fault,
    allreduce_job,
    checkpointed_job,
    listening_job,
)


@pytest.fixture
def spark(spark_sessions):  # one session per master: see conftest.py
    return spark_sessions.get("local-cluster[2,1,1024]")


def test_allreduce_across_two_executors(spark):
    out = terascale.spark.run(allreduce_job, num_workers=2, spark=spark)
    assert [o["rank"] for o in out] == [0, 1]
    assert all(o["sum"] == 3.0 and o["same"] for o in out)


def test_rendezvous_listens_on_loopback_under_a_local_master(spark):
    # Task 0's server, seen from both executors: loopback only, not every interface.
    out = terascale.spark.run(listening_job, num_workers=2, spark=spark)
    for o in out:
        assert o["rendezvous"].startswith("127.0.0.1:"), o
        assert o["listening"] == ["127.0.0.1"], o


def test_killed_executor_jvm_reruns_stage_and_resumes_bitwise(spark, tmp_path):
    clean = terascale.spark.run(checkpointed_job, num_workers=2,
                                args=(str(tmp_path / "clean"), 5), spark=spark)
    fault = Fault(rank=1, step=2, marker=str(tmp_path / "fired"), kind="executor")
    resumed = terascale.spark.run(checkpointed_job, num_workers=2,
                                  args=(str(tmp_path / "faulty"), 5),
                                  kwargs={"fault": fault}, spark=spark, timeout=30.0)
    assert os.path.exists(fault.marker)  # rank 1's executor JVM was SIGKILLed
    assert [start for start, _ in resumed] == [2, 2]
    assert [w for _, w in resumed] == [w for _, w in clean]


def _table(spark, n: int, seed: int, classes: int = 2):
    """Dense Vectors of 6 columns on different scales, labels from a linear model, in
    two partitions sliced from the rows (no shuffle: a shuffle's reader gets the blocks
    of several executors in whatever order they arrive, so the rows' order within a
    partition, which online learning sees, would differ from run to run)."""
    import numpy as np
    from pyspark.ml.linalg import Vectors

    rng = np.random.default_rng(seed)
    scale = np.array([1.0, 10.0, 0.1, 100.0, 1.0, 3.0])
    x = rng.standard_normal((n, 6)) * scale
    truth = np.random.default_rng(99).standard_normal((classes, 6)) / scale
    s = x @ truth.T + rng.standard_normal((n, classes))
    y = (s[:, 0] > 0).astype(float) if classes == 2 else np.argmax(s, axis=1).astype(float)
    rows = spark.sparkContext.parallelize(
        [(Vectors.dense(x[i]), float(y[i])) for i in range(n)], 2)
    return spark.createDataFrame(rows, ["features", "label"])


def test_fit_transform_and_three_classes_across_two_executors(spark):
    """LinearLearner's barrier stage with its tasks in two executor JVMs: the binary model
    reads as MLlib's (coefficients reproduce probability) and scores as well as MLlib's;
    three classes fit one-against-all within a point or two of MLlib's multinomial."""
    import numpy as np
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.evaluation import (
        BinaryClassificationEvaluator,
        MulticlassClassificationEvaluator,
    )

    train = _table(spark, 1200, seed=1).cache()
    model = terascale.spark.LinearLearner(maxIter=10).fit(train)
    assert model.summary["rows"] == 1200 and model.info["workers"] == 2
    out = model.transform(train).select("features", "probability").collect()
    x = np.array([r[0].toArray() for r in out])
    p = 1 / (1 + np.exp(-(x @ model.coefficients.toArray() + model.intercept)))
    assert np.abs(p - np.array([r[1][1] for r in out])).max() < 1e-6
    auc = BinaryClassificationEvaluator()
    ref = LogisticRegression(maxIter=10).fit(train)
    assert auc.evaluate(model.transform(train)) > auc.evaluate(ref.transform(train)) - 0.01

    three = _table(spark, 1500, seed=2, classes=3).cache()
    ours = terascale.spark.LinearLearner(maxIter=15).fit(three)
    mllib = LogisticRegression(maxIter=15, family="multinomial").fit(three)
    assert ours.numClasses == 3 and len(ours.transform(three).first()["probability"]) == 3
    acc = MulticlassClassificationEvaluator(metricName="accuracy")
    assert acc.evaluate(ours.transform(three)) > acc.evaluate(mllib.transform(three)) - 0.02
    train.unpersist()
    three.unpersist()


def test_fit_survives_a_killed_executor_with_the_same_model(spark, tmp_path):
    """An executor JVM SIGKILLed while its task reads the partition for fit: Spark starts
    a new executor and reruns the stage, and the model is bitwise the one a clean fit
    gives (training is deterministic)."""
    import numpy as np
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType

    from terascale.engines.jobs import _fire

    def killing_once(marker):
        def label_once(y):  # pickled by value: tests/ is not importable on the executors
            from pyspark import TaskContext

            if TaskContext.get().partitionId() == 1 and not os.path.exists(marker):
                _fire(Fault(rank=1, step=0, marker=marker, kind="executor"))
            return y

        return F.udf(label_once, DoubleType())

    data = _table(spark, 800, seed=3)
    lr = terascale.spark.LinearLearner(passes=2, cacheDir="")
    done = tmp_path / "already-fired"
    done.touch()  # the clean fit: the same lineage, the fault already spent
    clean = lr.fit(data.withColumn("label", killing_once(str(done))("label")))
    marker = str(tmp_path / "fired")
    again = lr.fit(data.withColumn("label", killing_once(marker)("label")))
    assert os.path.exists(marker)  # rank 1's executor JVM was SIGKILLed during the fit
    assert np.array_equal(again.linear.dense(), clean.linear.dense())


def test_bad_input_and_mllib_params_across_two_executors(spark):
    """On separate executor JVMs as in local mode: a NaN or null label is a DataError naming
    the column, the partition and the row; labels the loss cannot take are listed; an empty
    DataFrame has no rows; MLlib's Param names and setters fit."""
    from pyspark.ml.classification import LogisticRegression

    good = _table(spark, 400, seed=4)
    rows = good.collect()
    lr = terascale.spark.LinearLearner(cacheDir="")
    for bad, what in ((float("nan"), "NaN"), (None, "null")):
        broken = list(rows)
        broken[17] = (broken[17][0], bad)
        frame = spark.createDataFrame(spark.sparkContext.parallelize(broken, 2), good.schema)
        with pytest.raises(terascale.DataError, match=rf"Spark partition \d, row \d+: label "
                                                      rf"column 'label' is {what}"):
            lr.fit(frame)
    shifted = spark.createDataFrame(
        spark.sparkContext.parallelize([(v, y + 0.5) for v, y in rows], 2), good.schema)
    with pytest.raises(terascale.DataError, match="labels found are 0.5, 1.5"):
        lr.fit(shifted)
    with pytest.raises(terascale.DataError, match="no rows"):
        lr.fit(good.filter("label > 5"))
    ours = terascale.spark.LinearLearner().setMaxIter(8).setRegParam(0.01).fit(good)
    ref = LogisticRegression().setMaxIter(8).setRegParam(0.01).fit(good)
    assert ours.getOrDefault("maxIter") == 8 and ours.numFeatures == ref.numFeatures == 6
