"""Terascale linear learning on Spark: each task parses its partition, then joins the job.

Trains logistic regression on a VW-format text file (a synthetic one when ``--data`` is not
given) read with ``spark.read.text``; one barrier task per partition::

    python examples/spark_linear.py --partitions 2
    python examples/spark_linear.py --data train.vw --partitions 8 --master "local[8]"
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import terascale.spark


def synthetic(path: str, n: int = 20000, seed: int = 0) -> None:
    from terascale.linear.synthetic import separable_lines, write_lines

    write_lines(path, separable_lines(n, seed, vocab=200, k=10, scale=1.0, prefix="x"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--data", default=None, help="VW text file (default: synthetic)")
    ap.add_argument("--partitions", type=int, default=2)
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master(args.master).appName("terascale-linear").getOrCreate()
    with tempfile.TemporaryDirectory() as tmp:
        path = args.data or os.path.join(tmp, "train.vw")
        if args.data is None:
            synthetic(path)
        df = spark.read.text(path).repartition(args.partitions)
        model = terascale.spark.train_linear(df, spark=spark, bits=18, passes=2, bfgs=10,
                                             cache_dir=os.path.join(tmp, "cache"))
        print(model.evaluate(path))  # the model is back on the driver
        model.save(os.path.join(tmp, "model.npz"))
    spark.stop()


if __name__ == "__main__":
    main()
