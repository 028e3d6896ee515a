"""terascale's LinearLearner where MLlib's LogisticRegression was: same Params, same model.

A binary table and a 3-class table made by Spark itself, each fitted by MLlib and by
terascale with the same MLlib Param names, in one session; AUC, accuracy, the
coefficients and the transform's probability side by side::

    python examples/spark_mllib.py
    python examples/spark_mllib.py --rows 400000 --master "local[4]"
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import terascale.spark


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--rows", type=int, default=20000)
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.ml.classification import LogisticRegression
    from pyspark.ml.evaluation import BinaryClassificationEvaluator
    from pyspark.ml.feature import VectorAssembler
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (SparkSession.builder.master(args.master).config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    cols = [f"x{j}" for j in range(10)]
    df = spark.range(args.rows).select(*[(F.randn(seed=j) * (j + 1)).alias(c)
                                         for j, c in enumerate(cols)])
    df = df.withColumn("z", F.col("x0") - F.col("x1") / 2 + F.col("x2") / 3 + F.randn(7))
    df = df.withColumn("label", (F.col("z") > 0).cast("double"))
    df = df.withColumn("klass", F.when(F.col("z") < -1, 0.0).when(F.col("z") < 1, 1.0)
                       .otherwise(2.0))
    data = VectorAssembler(inputCols=cols, outputCol="features").transform(df).cache()
    train, test = data.randomSplit([0.8, 0.2], seed=1)

    params = {"maxIter": 20, "regParam": 0.001}
    ours = terascale.spark.LinearLearner(**params).fit(train)
    ref = LogisticRegression(**params).fit(train)
    auc = BinaryClassificationEvaluator()
    print(f"AUC terascale {auc.evaluate(ours.transform(test)):.4f}, "
          f"MLlib {auc.evaluate(ref.transform(test)):.4f}")
    print("coefficients", np.round(ours.coefficients.toArray(), 3), "intercept",
          round(ours.intercept, 3))
    row = ours.transform(test).select("features", "probability").first()
    p = 1 / (1 + np.exp(-(row.features.dot(ours.coefficients) + ours.intercept)))
    print(f"sigmoid(x.coefficients + intercept) = {p:.6f} = probability[1] "
          f"{row.probability[1]:.6f}")
    print("loss per pass", ours.summary["objectiveHistory"])

    three = terascale.spark.LinearLearner(labelCol="klass", **params).fit(train)
    ref3 = LogisticRegression(labelCol="klass", family="multinomial", **params).fit(train)

    def accuracy(model):
        out = model.transform(test)
        return out.select(F.avg((F.col("prediction") == F.col("klass")).cast("double"))
                          ).first()[0]

    print(f"3 classes: accuracy terascale {accuracy(three):.4f} ({three.numClasses} "
          f"classes, one against all), MLlib multinomial {accuracy(ref3):.4f}")
    spark.stop()


if __name__ == "__main__":
    main()
