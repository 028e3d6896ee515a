"""terascale on Spark (barrier execution mode); the package is :mod:`terascale.engines.spark`.

>>> import terascale.spark                                      # doctest: +SKIP
>>> terascale.spark.run(lambda: terascale.init().rank, num_workers=2)  # doctest: +SKIP
[0, 1]
>>> model = terascale.spark.train_linear(spark.read.text("train.vw"), bits=20, passes=2)  # doctest: +SKIP
>>> lr = terascale.spark.LinearLearner(bits=20, passes=2, bfgs=10)   # doctest: +SKIP
>>> lr.fit(df).transform(test_df)            # pyspark.ml Estimator/Model  # doctest: +SKIP

pyspark is imported only when a function is called (extra ``terascale[spark]``, Java 17).
"""

import typing

from .engines.spark import run, train_linear

if typing.TYPE_CHECKING:
    from .engines.spark import LinearLearner, LinearLearnerModel

__all__ = ["LinearLearner", "LinearLearnerModel", "run", "train_linear"]


def __getattr__(name: str) -> typing.Any:
    if name in ("LinearLearner", "LinearLearnerModel"):  # subclasses of pyspark.ml's
        from .engines import spark

        return getattr(spark, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
