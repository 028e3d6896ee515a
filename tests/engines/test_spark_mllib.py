"""LinearLearner as an MLlib user meets it, next to MLlib in the same local[2] session:
the model's coefficients against transform's probabilities, MLlib's Param names, three
classes, bad input and DataFrames of any partitioning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

pytestmark = pytest.mark.spark

pyspark = pytest.importorskip("pyspark")

import terascale  # noqa: E402
import terascale.spark  # noqa: E402


@pytest.fixture
def spark(spark_sessions):  # one session per master: see conftest.py
    return spark_sessions.get("local[2]")


def _dense(spark, n: int, seed: int, classes: int = 2, parts: int = 2):
    """Dense Vectors of 6 columns of very different scales, labels from a linear model."""
    from pyspark.ml.linalg import Vectors

    rng = np.random.default_rng(seed)
    scale = np.array([1.0, 10.0, 0.1, 100.0, 1.0, 3.0])
    x = rng.standard_normal((n, 6)) * scale
    truth = np.random.default_rng(99).standard_normal((classes, 6)) / scale
    s = x @ truth.T + rng.standard_normal((n, classes))
    y = (s[:, 0] > 0).astype(float) if classes == 2 else np.argmax(s, axis=1).astype(float)
    rows = [(Vectors.dense(x[i]), float(y[i])) for i in range(n)]
    return spark.createDataFrame(rows, ["features", "label"]).repartition(parts)


def _rows(df, cols):
    return df.select(*cols).collect()


def test_coefficients_reproduce_probability_and_mllib_names(spark):
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.evaluation import BinaryClassificationEvaluator
    from pyspark.ml.linalg import DenseVector, Vectors

    train = _dense(spark, 1500, seed=1).cache()
    lr = (terascale.spark.LinearLearner().setMaxIter(15).setRegParam(0.01)
          .setStandardization(True).setThreshold(0.4))
    assert lr.getMaxIter() == 15 and lr.getFitIntercept() and lr.getBits() == 18
    model = lr.fit(train)
    assert isinstance(model.coefficients, DenseVector) and model.numFeatures == 6
    assert model.numClasses == 2 and model.summary["rows"] == 1500
    assert model.info["batch_passes"] <= 15 and model.info["standardized"]
    hist = model.summary["objectiveHistory"]
    assert len(hist) >= 2 and hist[-1] < hist[0]
    out = model.transform(train)
    got = _rows(out, ["features", "probability", "prediction", "rawPrediction"])
    x = np.array([r[0].toArray() for r in got])
    p = np.array([r[1][1] for r in got])
    mine = 1.0 / (1.0 + np.exp(-(x @ model.coefficients.toArray() + model.intercept)))
    assert np.max(np.abs(mine - p)) < 1e-6  # standardization is folded into the weights
    assert np.array_equal(np.array([r[2] for r in got]), (p > 0.4).astype(float))
    ev = BinaryClassificationEvaluator()
    ref = LogisticRegression(maxIter=15, regParam=0.01).fit(train)
    ours, theirs = ev.evaluate(out), ev.evaluate(ref.transform(train))
    assert ours >= theirs - 0.005, (ours, theirs)
    # MLlib's L1 share needs online passes; both penalties at once is ambiguous
    with pytest.raises(terascale.ConfigError, match="elasticNetParam"):
        lr.copy({lr.elasticNetParam: 0.5}).fit(train)
    with pytest.raises(terascale.ConfigError, match="regParam"):
        lr.copy({lr.l2: 1.0}).fit(train)
    train.unpersist()
    # hashed-size sparse Vectors (2^22, as FeatureHasher makes them): bits follow the size
    rng = np.random.default_rng(5)
    rows = []
    for i in range(400):
        idx = np.sort(rng.choice(1 << 22, 5, replace=False))
        rows.append((Vectors.sparse(1 << 22, idx.tolist(), rng.standard_normal(5).tolist()),
                     float(i % 2)))
    sparse = spark.createDataFrame(rows, ["features", "label"]).repartition(2)
    m = terascale.spark.LinearLearner(passes=2).fit(sparse)
    assert m.getBits() == 22 and m.numFeatures == 1 << 22
    got = _rows(m.transform(sparse), ["features", "probability"])
    c, b = m.coefficients.toArray(), m.intercept
    for r in got[:50]:
        v = r[0]
        assert abs(1 / (1 + np.exp(-(c[v.indices] @ v.values + b))) - r[1][1]) < 1e-6


def test_three_classes_fit_next_to_mllib_multinomial(spark, tmp_path):
    from pyspark.ml.classification import LogisticRegression
    from pyspark.sql import functions as F

    train = _dense(spark, 1500, seed=2, classes=3).cache()
    test = _dense(spark, 600, seed=3, classes=3)
    model = terascale.spark.LinearLearner(maxIter=20).fit(train)
    assert model.numClasses == 3 and model.coefficientMatrix.numRows == 3
    with pytest.raises(terascale.ConfigError, match="coefficientMatrix"):
        model.coefficients  # noqa: B018
    out = model.transform(test)
    got = _rows(out, ["probability", "prediction", "rawPrediction"])
    prob = np.array([r[0].toArray() for r in got])
    assert prob.shape == (600, 3) and np.allclose(prob.sum(axis=1), 1.0)
    assert np.array_equal([r[1] for r in got], np.argmax(prob, axis=1).astype(float))

    def acc(df):
        return df.select(F.avg((F.col("prediction") == F.col("label")).cast("double"))
                         ).first()[0]

    ref = LogisticRegression(maxIter=20, family="multinomial").fit(train)
    ours, theirs = acc(out), acc(ref.transform(test))
    assert ours >= theirs - 0.01, (ours, theirs)
    model.write().overwrite().save(str(tmp_path / "m"))
    back = terascale.spark.LinearLearnerModel.load(str(tmp_path / "m"))
    assert back.numClasses == 3
    again = _rows(back.transform(test), ["probability"])
    assert np.array_equal(np.array([r[0].toArray() for r in again]), prob)
    train.unpersist()


def test_bad_input_is_a_clear_error(spark):
    from pyspark.ml.linalg import Vectors

    good = [(Vectors.dense([1.0, float(i % 3)]), float(i % 2), float(i)) for i in range(40)]
    lr = terascale.spark.LinearLearner(bits=10)

    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql.types import DoubleType, StructField, StructType

    schema = StructType([StructField("features", VectorUDT()),
                         StructField("label", DoubleType()), StructField("a", DoubleType())])

    def frame(rows, parts=2):
        return spark.createDataFrame(rows, schema).repartition(parts)

    for bad, what in ((float("nan"), "NaN"), (None, "null")):
        rows = list(good)
        rows[17] = (rows[17][0], bad, 1.0)
        with pytest.raises(terascale.DataError, match=rf"Spark partition \d, row \d+: label "
                                                      rf"column 'label' is {what}"):
            lr.fit(frame(rows))
    rows = [(v, y + 0.5, a) for v, y, a in good]
    with pytest.raises(terascale.DataError, match="labels found are 0.5, 1.5"):
        lr.fit(frame(rows))
    with pytest.raises(terascale.DataError, match="no rows"):
        lr.fit(frame(good).limit(0))
    with pytest.raises(terascale.DataError, match="no rows"):
        lr.fit(frame(good).filter("label > 5"))
    rows = list(good)
    rows[5] = (None, 1.0, 1.0)
    with pytest.raises(terascale.DataError, match="null.*'features'|'features'.*null"):
        lr.fit(frame(rows))
    # NaN in a plain numeric column is refused as in a Vector column; null is missing
    rows = list(good)
    rows[9] = (rows[9][0], 1.0, float("nan"))
    cols = lr.copy({lr.featureCols: ["a"]})
    with pytest.raises(terascale.DataError, match=r"row \d+: column 'a' has a NaN"):
        cols.fit(frame(rows))
    strings = spark.createDataFrame([(str(i), float(i % 2)) for i in range(20)],
                                    "a string, label double")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cols.fit(strings)
    assert any("'a' is stored as strings" in str(w.message) for w in caught)


def test_any_partitioning_and_the_session_survives(spark):
    from pyspark.sql import functions as F

    rng = np.random.default_rng(4)
    x = rng.standard_normal((300, 3))
    df = spark.createDataFrame([(*map(float, r), float(r[0] + r[1] > 0)) for r in x],
                               "a double, b double, c double, label double")
    lr = terascale.spark.LinearLearner(featureCols=["a", "b", "c"], passes=2, bits=12)
    many = lr.fit(df.repartition(5))  # more partitions than local[2]'s two slots
    assert many.info["workers"] == 2 and many.info["examples"] == 300
    one = df.cache().coalesce(1)  # a barrier stage directly over coalesce stops Spark
    model = lr.fit(one)
    assert model.info["workers"] == 1
    assert spark.range(10).count() == 10  # the user's SparkContext is alive
    # numeric featureCols: coefficients in their order reproduce the probability
    got = _rows(model.transform(df), ["a", "b", "c", "probability"])
    xs = np.array([[r[0], r[1], r[2]] for r in got])
    c = model.coefficients.toArray()
    p = 1.0 / (1.0 + np.exp(-(xs @ c + model.intercept)))
    assert np.max(np.abs(p - np.array([r[3][1] for r in got]))) < 1e-6
    assert df.select(F.count("*")).first()[0] == 300
    df.unpersist()


def test_evaluate_predict_and_summary_read_as_mllibs(spark):
    """What an MLlib user calls on a LogisticRegressionModel after fit: ``evaluate``
    (its metrics defined as MLlib's: our Evaluation of MLlib's own predictions gives
    MLlib's numbers), ``predict``/``predictProbability``/``predictRaw`` of one Vector,
    ``hasSummary`` and ``summary.objectiveHistory``."""
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.linalg import DenseVector

    from terascale.engines.spark._ml import Evaluation

    train, test = _dense(spark, 1500, seed=5).cache(), _dense(spark, 500, seed=6).cache()
    ours = terascale.spark.LinearLearner(maxIter=15).fit(train)
    ref = LogisticRegression(maxIter=15).fit(train)
    mine, theirs = ours.evaluate(test), ref.evaluate(test)
    again = Evaluation(ref.transform(test), "label", "rawPrediction", "probability",
                       "prediction", None, "logistic")
    for name in ("accuracy", "areaUnderROC"):
        assert abs(getattr(again, name) - getattr(theirs, name)) < 1e-9, name
        assert abs(getattr(mine, name) - getattr(theirs, name)) < 0.02, name
    assert mine.predictions.count() == 500 and "probability" in mine.predictions.columns
    row = ours.transform(test).first()
    v = row["features"]
    assert isinstance(ours.predictProbability(v), DenseVector)
    assert np.allclose(ours.predictProbability(v).toArray(), row["probability"].toArray(),
                       atol=1e-9)
    assert np.allclose(ours.predictRaw(v).toArray(), row["rawPrediction"].toArray(),
                       atol=1e-9)
    assert ours.predict(v) == row["prediction"] and ref.predict(v) in (0.0, 1.0)
    assert ours.hasSummary and ref.hasSummary
    assert ours.summary.objectiveHistory == ours.summary["objectiveHistory"]
    assert ours.summary.totalIterations >= 1
    with pytest.raises(terascale.ConfigError, match="size 3"):
        ours.predict(DenseVector([1.0, 2.0, 3.0]))
    with pytest.raises(terascale.ConfigError, match="labelCol='label'"):
        ours.evaluate(test.drop("label"))
    train.unpersist()
    test.unpersist()
