"""terascale on Spark, in one package (public as :mod:`terascale.spark`).

* :func:`run` -- any function as one barrier stage: every task is a rank and
  ``terascale.init()`` inside the function joins the job (:mod:`._runner`);
* :func:`train_linear` -- the terascale linear learner over the partitions of a DataFrame,
  an RDD of lines or files, each task streaming and caching its partition before it joins
  (:mod:`._linear`, :mod:`._store`, :mod:`._encode`; a DataFrame's Vector or text column
  arrives as Arrow batches, :mod:`._arrow`);
* :class:`LinearLearner` / :class:`LinearLearnerModel` -- the same learner as a
  ``pyspark.ml`` Estimator and Model: Params, ``fit``/``transform``, ``Pipeline``, ``save``
  and ``load`` (:mod:`._ml`, :mod:`._mlio`);
* :class:`Encoding` -- how rows of a table or of text lines become examples, shared with
  the Ray engine's ``train_linear``.

pyspark is imported only when a function is called or an ML class is first used (extra
``terascale[spark]``, Java 17).
"""

import typing

from ._encode import Encoding
from ._linear import train_linear
from ._runner import TaskSpec, check_cluster, run, run_on_rdd, session

if typing.TYPE_CHECKING:
    from ._ml import LinearLearner, LinearLearnerModel

__all__ = ["Encoding", "LinearLearner", "LinearLearnerModel", "TaskSpec", "check_cluster", "run",
           "run_on_rdd", "session", "train_linear"]


def __getattr__(name: str) -> typing.Any:
    # The ML classes subclass pyspark's: define them only when asked for.
    if name in ("LinearLearner", "LinearLearnerModel"):
        from . import _ml

        return getattr(_ml, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
