"""``LinearLearner`` / ``LinearLearnerModel``: the terascale linear learner as pyspark.ml.

An Estimator and its Model with the Params a pyspark.ml user expects -- ``featuresCol``
(an MLlib Vector column, sparse or dense) or ``featureCols`` (plain numeric, string or
boolean columns, hashed as the CSV reader hashes a table), ``labelCol``, ``weightCol``,
``predictionCol``, ``probabilityCol``, ``rawPredictionCol`` -- plus the learner's own
(``bits``, ``passes``, ``bfgs``, ``cg``, ``l1``, ``l2``, ``loss``, ``learningRate``,
``powerT``, ``average``, ``holdout``) and the job's (``numWorkers``, ``timeout``,
``cacheKey``, ``cacheDir``)::

    lr = LinearLearner(bits=22, passes=1, bfgs=20, l2=1.0)
    model = Pipeline(stages=[assembler, lr]).fit(train_df)   # or lr.fit(df)
    model.transform(test_df)    # + rawPrediction, probability, prediction (MLlib's layout)
    model.write().overwrite().save(path); PipelineModel.load(path)

``fit`` is one Spark barrier stage over the DataFrame's partitions: each task streams its
partition -- a Vector column as Arrow record batches (:mod:`._arrow`; building a Python
``Row`` and ``SparseVector`` per row costs more than the training) -- into a
memory-mapped shard on its executor (cached when the data has an
identity: see :func:`terascale.engines.spark._store.dataframe_identity`), joins the job and
trains with allreduce (Agarwal et al., JMLR 2014); nothing is collected to the driver but
the model. ``model.info`` is the training summary; ``model.info["spark"]["cache_hits"]``
counts the partitions that reused a cached parse, and its ``prepare_s``/``train_s``/...
lists say where each task's time went (README: where a fit's time goes). ``model.linear`` is the
:class:`terascale.linear.LinearModel` (``predict``/``evaluate`` on files, ``save``).

Saved models are directories as MLlib writes them: ``metadata/`` (the Params, JSON) and
``data/`` (one Parquet row holding the ``LinearModel`` file), on any Hadoop file system
(:mod:`._mlio`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np
from pyspark.ml import Estimator, Model
from pyspark.ml.param import Param, Params, TypeConverters
from pyspark.ml.param.shared import (
    HasFeaturesCol,
    HasLabelCol,
    HasPredictionCol,
    HasProbabilityCol,
    HasRawPredictionCol,
    HasWeightCol,
)
from pyspark.ml.util import (
    DefaultParamsReadable,
    DefaultParamsWritable,
    MLReadable,
    MLReader,
    MLWritable,
    MLWriter,
)

from ..._errors import ConfigError
from ...linear import LinearModel
from ._encode import Encoding
from ._linear import Source, by_arrow, fit_rdd, numeric_columns
from ._mlio import ModelReader, ModelWriter
from ._store import chunks, dataframe_identity

__all__ = ["LinearLearner", "LinearLearnerModel"]


def _p(name: str, doc: str, conv: Any) -> Param:
    return Param(Params._dummy(), name, doc, typeConverter=conv)


class _LinearLearnerParams(HasFeaturesCol, HasLabelCol, HasWeightCol, HasPredictionCol,
                           HasProbabilityCol, HasRawPredictionCol):
    featureCols = _p("featureCols", "plain columns used as features instead of featuresCol "
                     "(numbers are values, other cells categories)", TypeConverters.toListString)
    categoricalCols = _p("categoricalCols", "featureCols hashed as categories even when "
                         "numeric", TypeConverters.toListString)
    bits = _p("bits", "hash bits: 2^bits weights (VW's -b)", TypeConverters.toInt)
    passes = _p("passes", "online passes (adaptive normalized SGD)", TypeConverters.toInt)
    bfgs = _p("bfgs", "L-BFGS passes after the online passes (0: none)", TypeConverters.toInt)
    cg = _p("cg", "conjugate gradient passes instead of L-BFGS (0: none)",
            TypeConverters.toInt)
    loss = _p("loss", "logistic, squared or hinge", TypeConverters.toString)
    l1 = _p("l1", "L1 regularization (online passes only)", TypeConverters.toFloat)
    l2 = _p("l2", "L2 regularization (unset: the learner's default)", TypeConverters.toFloat)
    learningRate = _p("learningRate", "online learning rate", TypeConverters.toFloat)
    powerT = _p("powerT", "online learning-rate decay exponent", TypeConverters.toFloat)
    average = _p("average", "how workers' online learners combine: weighted or uniform "
                 "averaging, or chain (one learner handed on: one worker's model)",
                 TypeConverters.toString)
    holdout = _p("holdout", "fraction held out to stop the batch phase (unset: default)",
                 TypeConverters.toFloat)
    numWorkers = _p("numWorkers", "workers (unset: one per partition; else repartition)",
                    TypeConverters.toInt)
    timeout = _p("timeout", "seconds: rendezvous and per-collective deadline",
                 TypeConverters.toFloat)
    cacheKey = _p("cacheKey", "names the data so a later fit reuses the cached parse",
                  TypeConverters.toString)
    cacheDir = _p("cacheDir", "executor-local cache directory ('' disables the cache)",
                  TypeConverters.toString)

    _DEFAULTS: dict[str, Any] = {
        "featuresCol": "features", "labelCol": "label", "predictionCol": "prediction",
        "probabilityCol": "probability", "rawPredictionCol": "rawPrediction",
        "featureCols": [], "categoricalCols": [], "bits": 18, "passes": 1, "bfgs": 0, "cg": 0,
        "loss": "logistic", "l1": 0.0, "learningRate": 0.5, "powerT": 0.5,
        "average": "weighted", "timeout": 60.0}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self._setDefault(**self._DEFAULTS)
        self.setParams(**kwargs)

    def setParams(self, **kwargs: Any) -> Any:
        """Set Params by name (``lr.setParams(bits=22, passes=2)``)."""
        for k in kwargs:
            if not self.hasParam(k):
                names = ", ".join(sorted(p.name for p in self.params))
                raise ConfigError(f"{type(self).__name__} has no Param {k!r} (it has {names})")
        return self._set(**{k: v for k, v in kwargs.items() if v is not None})

    def _opt(self, name: str) -> Any:
        return self.getOrDefault(name) if self.isDefined(name) else None

    def _encoding(self, df: Any, *, fit: bool) -> Encoding:
        """How this DataFrame's rows become examples; clear errors for wrong columns."""
        from pyspark.ml.linalg import VectorUDT

        cols = set(df.columns)
        label = self.getOrDefault("labelCol") if fit else None
        weight = self._opt("weightCol") if fit else None
        for flag, c in (("labelCol", label), ("weightCol", weight)):
            if c and c not in cols:
                raise ConfigError(f"{flag}={c!r}: the DataFrame has no such column "
                                  f"(columns: {', '.join(df.columns)})")
        feats = tuple(self.getOrDefault("featureCols"))
        bits = self.getOrDefault("bits")
        if feats:
            missing = [c for c in feats if c not in cols]
            if missing:
                raise ConfigError(f"featureCols: the DataFrame has no column {missing[0]!r}")
            cat = tuple(self.getOrDefault("categoricalCols"))
            bad = [c for c in cat if c not in feats]
            if bad:
                raise ConfigError(f"categoricalCols: {bad[0]!r} is not one of featureCols")
            types = {f.name: f.dataType for f in df.schema.fields}
            vec = [c for c in feats if isinstance(types[c], VectorUDT)]
            if vec:
                raise ConfigError(f"featureCols: {vec[0]!r} is a Vector column; pass it as "
                                  f"featuresCol")
            return Encoding(kind="columns", bits=bits, features=feats, label=label or None,
                            weight=weight or None, categorical=cat,
                            numeric=numeric_columns(df, feats))
        fc = self.getOrDefault("featuresCol")
        types = {f.name: f.dataType for f in df.schema.fields}
        if fc not in types:
            raise ConfigError(f"featuresCol={fc!r}: the DataFrame has no such column; "
                              f"assemble one (VectorAssembler) or set featureCols to plain "
                              f"columns")
        if not isinstance(types[fc], VectorUDT):
            raise ConfigError(f"featuresCol={fc!r} has type {types[fc].simpleString()}, not "
                              f"an MLlib Vector; set featureCols=[...] for plain columns")
        return Encoding(kind="vector", bits=bits, features=(fc,), label=label or None,
                        weight=weight or None)


class LinearLearner(_LinearLearnerParams, Estimator, DefaultParamsReadable,
                    DefaultParamsWritable):
    """The terascale linear learner (VW-style online passes, allreduce averaging, L-BFGS)
    as a pyspark.ml Estimator; ``fit`` returns a :class:`LinearLearnerModel`."""

    __module__ = "terascale.spark"  # the saved metadata and pickles name the public module

    def _fit(self, dataset: Any) -> LinearLearnerModel:
        enc = self._encoding(dataset, fit=True)
        cache_dir = self._opt("cacheDir")
        identity = dataframe_identity(dataset, self._opt("cacheKey"))
        rows, arrow = by_arrow(dataset.select(*enc.columns), enc)
        before = (rows.rdd if arrow else rows).getNumPartitions()
        n = self._opt("numWorkers")
        if n is not None and n != before:
            rows = rows.repartition(n)
        if identity is not None:
            identity = repr((identity, before, n if n is not None else before))
        options: dict[str, Any] = {
            "passes": self.getOrDefault("passes"), "bfgs": self.getOrDefault("bfgs"),
            "cg": self.getOrDefault("cg"), "loss": self.getOrDefault("loss"),
            "l1": self.getOrDefault("l1"), "l2": self._opt("l2"),
            "learning_rate": self.getOrDefault("learningRate"),
            "power_t": self.getOrDefault("powerT"), "average": self.getOrDefault("average"),
            "holdout": self._opt("holdout")}
        linear = fit_rdd(dataset.sparkSession.sparkContext, rows,
                         Source(encoding=enc, identity=identity, cache_dir=cache_dir,
                                arrow=arrow), options, self.getOrDefault("timeout"))
        return self._copyValues(LinearLearnerModel(linear))


def _score(enc: Encoding, pos: list[int], model: Any, outputs: tuple[bool, bool, bool],
           rows: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
    """One partition of ``transform``: encode a chunk of rows, score it, append columns."""
    from pyspark import TaskContext
    from pyspark.ml.linalg import DenseVector

    linear: LinearModel = model.value
    want_raw, want_prob, want_pred = outputs
    ctx = TaskContext.get()
    where = f"Spark partition {ctx.partitionId() if ctx else 0}"
    first = 0
    for batch in chunks(rows, 4096):
        ds = enc.encode([[row[p] for p in pos] for row in batch], first, where,
                        with_labels=False)
        first += len(batch)
        s = linear.decision_function(ds)
        p = (1.0 / (1.0 + np.exp(-np.clip(s, -50, 50)))) if linear.loss == "logistic" else s
        for row, si, pi in zip(batch, s.tolist(), p.tolist()):
            extra: list[Any] = []
            if linear.loss == "squared":
                if want_pred:
                    extra.append(si)
            else:
                if want_raw:
                    extra.append(DenseVector([-si, si]))
                if want_prob:
                    extra.append(DenseVector([1.0 - pi, pi]))
                if want_pred:
                    extra.append(1.0 if si > 0 else 0.0)
            yield (*row, *extra)


class LinearLearnerModel(_LinearLearnerParams, Model, MLReadable, MLWritable):
    """A trained :class:`LinearLearner`: ``transform`` adds ``rawPrediction`` ([-s, s]),
    ``probability`` ([1-p, p], logistic loss) and ``prediction`` (0/1; the raw score for
    squared loss); set an output column to ``""`` to leave it out."""

    __module__ = "terascale.spark"

    def __init__(self, linear: LinearModel | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.linear = linear

    @property
    def info(self) -> dict[str, Any]:
        """The training summary (losses, timings, workers, ``spark`` cache hits)."""
        return self.linear.info if self.linear is not None else {}

    def _transform(self, dataset: Any) -> Any:
        from pyspark.ml.linalg import VectorUDT
        from pyspark.sql.types import DoubleType, StructField, StructType

        if self.linear is None:
            raise ConfigError("this LinearLearnerModel has no trained model (fit or load one)")
        enc = self._encoding(dataset, fit=False)
        if enc.bits != self.linear.bits:
            raise ConfigError(f"bits={enc.bits}: the model was trained with "
                              f"{self.linear.bits} bits")
        names = [self.getOrDefault(c) for c in ("rawPredictionCol", "probabilityCol",
                                               "predictionCol")]
        if self.linear.loss == "squared":
            names = ["", "", names[2]]
        elif self.linear.loss != "logistic":
            names[1] = ""  # hinge: no calibrated probability
        fields = list(dataset.schema.fields)
        for name, kind in zip(names, (VectorUDT(), VectorUDT(), DoubleType())):
            if not name:
                continue
            if name in dataset.columns:
                raise ConfigError(f"output column {name!r} already exists in the DataFrame; "
                                  f"set another name or drop it")
            fields.append(StructField(name, kind, nullable=False))
        pos = [dataset.columns.index(c) for c in enc.features]
        sc = dataset.sparkSession.sparkContext
        # A fresh copy: the broadcast carries the non-zero weights, not a dense cache.
        model = sc.broadcast(LinearModel(indices=self.linear.indices,
                                         weights=self.linear.weights,
                                         parse=self.linear.parse, loss=self.linear.loss))
        outputs = (bool(names[0]), bool(names[1]), bool(names[2]))
        rdd = dataset.rdd.mapPartitions(functools.partial(_score, enc, pos, model, outputs))
        return dataset.sparkSession.createDataFrame(rdd, StructType(fields),
                                                    verifySchema=False)

    def write(self) -> MLWriter:
        return ModelWriter(self)

    @classmethod
    def read(cls) -> MLReader[LinearLearnerModel]:
        return ModelReader(cls)
