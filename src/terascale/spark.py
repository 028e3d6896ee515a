"""Run terascale jobs on Spark (barrier execution mode); see :mod:`terascale.engines.spark`.

>>> import terascale.spark                                      # doctest: +SKIP
>>> terascale.spark.run(lambda: terascale.init().rank, num_workers=2)  # doctest: +SKIP
[0, 1]
>>> model = terascale.spark.train_linear(spark.read.text("train.vw"), bits=20, passes=2)  # doctest: +SKIP

pyspark is imported only when a function is called (extra ``terascale[spark]``, Java 17).
"""

from .engines._spark_linear import train_linear
from .engines.spark import run

__all__ = ["run", "train_linear"]
