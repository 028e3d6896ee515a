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
import warnings
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

from ..._errors import ConfigError, DataError
from ...linear import LOSS_TABLE, LinearModel
from ._encode import Encoding
from ._linear import Source, by_arrow, fit_layout, fit_rdd, numeric_columns
from ._mlio import ModelReader, ModelWriter
from ._store import chunks, dataframe_identity

__all__ = ["Evaluation", "LinearLearner", "LinearLearnerModel", "Summary"]


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
    average = _p("average", "how workers' online learners combine: auto (chained before a "
                 "batch phase, weighted otherwise), weighted or uniform averaging, or chain "
                 "(one learner handed on: one worker's model)",
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
    # MLlib's names (LogisticRegression), mapped onto the options above by _mllib_options
    maxIter = _p("maxIter", "MLlib's name: L-BFGS passes (sets bfgs; unset: bfgs)",
                 TypeConverters.toInt)
    regParam = _p("regParam", "MLlib's name: penalty on the mean loss (l2 = regParam * "
                  "rows with L-BFGS/CG, per-example l2 = regParam online)",
                  TypeConverters.toFloat)
    elasticNetParam = _p("elasticNetParam", "MLlib's name: the L1 share of regParam "
                         "(online passes only)", TypeConverters.toFloat)
    tol = _p("tol", "MLlib's name: stop the batch phase below this relative loss decrease",
             TypeConverters.toFloat)
    fitIntercept = _p("fitIntercept", "MLlib's name: learn a bias (VW's constant feature)",
                      TypeConverters.toBoolean)
    standardization = _p("standardization", "MLlib's name: regularize the standardized "
                         "weights in the batch phase (unset: the learner's default)",
                         TypeConverters.toBoolean)
    threshold = _p("threshold", "MLlib's name: prediction is 1 when probability[1] > "
                   "threshold (binary logistic)", TypeConverters.toFloat)
    family = _p("family", "MLlib's name: auto (labels 0..K-1 with K > 2 fit one-against-"
                "all), binomial or multinomial", TypeConverters.toString)

    _DEFAULTS: dict[str, Any] = {
        "featuresCol": "features", "labelCol": "label", "predictionCol": "prediction",
        "probabilityCol": "probability", "rawPredictionCol": "rawPrediction",
        "featureCols": [], "categoricalCols": [], "bits": 18, "passes": 1, "bfgs": 0, "cg": 0,
        "loss": "logistic", "l1": 0.0, "learningRate": 0.5, "powerT": 0.5,
        "average": "auto", "timeout": 60.0, "fitIntercept": True, "threshold": 0.5,
        "family": "auto"}

    def __init__(self, **kwargs: Any) -> None:
        super().__init__()
        self._setDefault(**self._DEFAULTS)
        self.setParams(**kwargs)

    def setParams(self, **kwargs: Any) -> Any:
        """Set Params by name (``lr.setParams(bits=22, passes=2)``); returns the estimator.

        Parameters
        ----------
        **kwargs
            Param names and their values (see :meth:`explainParams` for every Param, its
            default and meaning); None leaves a Param as it is. An unknown name is a
            ConfigError listing the Params there are.
        """
        for k in kwargs:
            if not self.hasParam(k):
                names = ", ".join(sorted(p.name for p in self.params))
                raise ConfigError(f"{type(self).__name__} has no Param {k!r} (it has {names})")
        return self._set(**{k: v for k, v in kwargs.items() if v is not None})

    def _opt(self, name: str) -> Any:
        return self.getOrDefault(name) if self.isDefined(name) else None

    def _encoding(self, df: Any, *, fit: bool, bits: int | None = None) -> Encoding:
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
        bits = bits if bits is not None else self.getOrDefault("bits")
        intercept = bool(self.getOrDefault("fitIntercept"))
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
            if fit:
                _warn_numeric_strings(df, feats, cat)
            return Encoding(kind="columns", bits=bits, features=feats, label=label or None,
                            weight=weight or None, categorical=cat,
                            numeric=numeric_columns(df, feats), constant=intercept,
                            require_label=fit)
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
                        weight=weight or None, constant=intercept, require_label=fit)


def _warn_numeric_strings(df: Any, feats: tuple[str, ...], categorical: tuple[str, ...]
                          ) -> None:
    """A string column whose cells are numbers: say so (a cast makes it numeric)."""
    from pyspark.sql.types import StringType

    types = {f.name: f.dataType for f in df.schema.fields}
    cols = [c for c in feats if isinstance(types[c], StringType) and c not in categorical]
    if not cols:
        return
    sample = df.select(*cols).limit(200).collect()
    for j, c in enumerate(cols):
        cells = [r[j] for r in sample if r[j] is not None]
        try:
            [float(v) for v in cells]
        except ValueError:
            continue
        if cells:
            warnings.warn(f"featureCols: column {c!r} is stored as strings but holds numbers "
                          f"(e.g. {cells[0]!r}); they are read as numbers, but a cast "
                          f"(df.withColumn({c!r}, col({c!r}).cast('double'))) says so to "
                          f"Spark and is faster", stacklevel=4)


# A Vector column of at most this many entries leaves the JVM as a plain array of
# doubles (``vector_to_array``) rather than its struct form: one buffer per batch instead
# of four, about half the JVM's conversion time for dense rows (the transform measures).
ARRAY_MAX = 4096


def _fit_columns(df: Any, enc: Encoding, num_features: int) -> Any:
    """The columns a fit task reads: the Vector column as an array when it is small
    (a null Vector stays null, so that the task names its row)."""
    if enc.kind != "vector" or not 0 < num_features <= ARRAY_MAX:
        return df.select(*enc.columns)
    from pyspark.ml.functions import vector_to_array
    from pyspark.sql import functions as F

    fc = F.col(f"`{enc.features[0]}`")
    vec = F.when(fc.isNull(), F.lit(None)).otherwise(vector_to_array(fc))
    return df.select(vec.alias(enc.features[0]), *[F.col(f"`{c}`") for c in enc.columns[1:]])


def _vector_size(df: Any, column: str) -> int | None:
    """The size of a Vector column: VectorAssembler's metadata, else the first row's;
    None when the DataFrame has no rows."""
    meta = df.schema[column].metadata.get("ml_attr", {})
    if "num_attrs" in meta:
        return int(meta["num_attrs"])
    row = df.select(column).head()
    if row is None:
        return None
    if row[0] is None:
        return 0
    return int(row[0].size)


class LinearLearner(_LinearLearnerParams, Estimator, DefaultParamsReadable,
                    DefaultParamsWritable):
    """The terascale linear learner (VW-style online passes, allreduce averaging, L-BFGS)
    as a pyspark.ml Estimator; ``fit`` returns a :class:`LinearLearnerModel`.

    MLlib's ``LogisticRegression`` Params are accepted beside the learner's own:

    ==================  ==================================================================
    MLlib               terascale
    ==================  ==================================================================
    ``maxIter``         ``bfgs``: L-BFGS passes after ``passes`` online passes
    ``regParam`` = λ    with L-BFGS/CG: ``l2 = λ·(1-α)·N`` (N rows: MLlib penalizes the
                        *mean* loss, the learner the *sum*); online only: the per-example
                        ``l2 = λ·(1-α)``
    ``elasticNetParam`` α: ``l1 = λ·α`` (online passes only: L-BFGS needs a smooth
                        objective, so α > 0 with ``maxIter``/``bfgs`` is refused)
    ``tol``             the batch phase's relative loss decrease to stop at
    ``fitIntercept``    VW's constant feature (on by default, as in MLlib)
    ``standardization`` ``normalize="std"`` / ``"off"`` for the batch phase (unset: the
                        learner's default, std for ``featureCols``, raw for a Vector)
    ``threshold``       ``prediction = probability[1] > threshold``
    ``family``          ``auto``: labels 0/1 (or -1/+1) fit one model, labels 0..K-1 with
                        K > 2 fit K one-against-all models in the same job;
                        ``binomial`` refuses K > 2, ``multinomial`` always fits K models
    ==================  ==================================================================

    Parameters
    ----------
    **kwargs
        Params by name, as :meth:`setParams` takes them (``LinearLearner(bits=22,
        featureCols=["x1", "x2"], numWorkers=4)``); every Param has a ``setX`` and a
        ``getX`` too.
    """

    __module__ = "terascale.spark"  # the saved metadata and pickles name the public module

    def _options(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """(options of terascale.linear.train, what the job decides on the data)."""
        options: dict[str, Any] = {
            "passes": self.getOrDefault("passes"), "bfgs": self.getOrDefault("bfgs"),
            "cg": self.getOrDefault("cg"), "loss": self.getOrDefault("loss"),
            "l1": self.getOrDefault("l1"), "l2": self._opt("l2"),
            "learning_rate": self.getOrDefault("learningRate"),
            "power_t": self.getOrDefault("powerT"), "average": self.getOrDefault("average"),
            "holdout": self._opt("holdout")}
        if self.isSet("maxIter"):
            if self.isSet("bfgs") or self.isSet("cg"):
                raise ConfigError("maxIter is MLlib's name for bfgs: set one of maxIter, "
                                  "bfgs, cg")
            options["bfgs"] = self.getOrDefault("maxIter")
        if self.isSet("tol"):
            options["tol"] = self.getOrDefault("tol")
        batch = bool(options["bfgs"] or options["cg"])
        if self.isSet("standardization") and batch:
            options["normalize"] = "std" if self.getOrDefault("standardization") else "off"
        job: dict[str, Any] = {"family": self.getOrDefault("family")}
        if job["family"] not in ("auto", "binomial", "multinomial"):
            raise ConfigError(f"family={job['family']!r}: use auto, binomial or multinomial")
        lam = self._opt("regParam")
        alpha = self._opt("elasticNetParam") or 0.0
        if not 0.0 <= alpha <= 1.0:
            raise ConfigError(f"elasticNetParam={alpha}: must be in [0, 1]")
        if lam is not None:
            if lam < 0:
                raise ConfigError(f"regParam={lam}: must be >= 0")
            if self.isSet("l2") or (alpha and self.isSet("l1")):
                raise ConfigError("regParam is MLlib's penalty: set regParam "
                                  "(+ elasticNetParam) or the learner's l1/l2, not both")
            if alpha * lam > 0 and batch:
                raise ConfigError(f"elasticNetParam={alpha} (an L1 penalty) works with "
                                  f"online passes only; unset maxIter/bfgs/cg or set "
                                  f"elasticNetParam=0")
            if alpha:
                options["l1"] = alpha * lam
            if batch:  # the learner's batch objective sums the losses: scale by the rows
                job["l2_per_row"] = lam * (1.0 - alpha)
            else:
                options["l2"] = lam * (1.0 - alpha)
        return options, job

    def _fit(self, dataset: Any) -> LinearLearnerModel:
        options, job = self._options()
        bits = None
        num_features: int | None = None
        if not self.getOrDefault("featureCols"):
            fc = self.getOrDefault("featuresCol")
            if fc in dataset.columns:
                from pyspark.ml.linalg import VectorUDT

                if isinstance(dataset.schema[fc].dataType, VectorUDT):
                    num_features = _vector_size(dataset, fc)
                    if num_features is None:
                        raise DataError("LinearLearner.fit: the DataFrame has no rows")
                    if not self.isSet("bits") and num_features > (1 << 18):
                        bits = min(int(np.ceil(np.log2(num_features))), 30)
        enc = self._encoding(dataset, fit=True, bits=bits)
        if num_features is None:
            num_features = (len(enc.features) if enc.kind == "columns"
                            else 1 << enc.bits)
        cache_dir = self._opt("cacheDir")
        identity = dataframe_identity(dataset, self._opt("cacheKey"))
        rows, arrow = by_arrow(dataset.select(*enc.columns), enc)
        if arrow:
            rows = _fit_columns(dataset, enc, num_features)
        rows, before, after = fit_layout(dataset.sparkSession.sparkContext, rows, arrow,
                                         self._opt("numWorkers"), self.getOrDefault("timeout"))
        if identity is not None:
            identity = repr((identity, before, after))
        models = fit_rdd(dataset.sparkSession.sparkContext, rows,
                         Source(encoding=enc, identity=identity, cache_dir=cache_dir,
                                arrow=arrow), options, self.getOrDefault("timeout"), job=job)
        for m in models:
            m.info["mllib"] = {"numFeatures": int(num_features), "kind": enc.kind}
        model = self._copyValues(LinearLearnerModel(models))
        return model._set(bits=enc.bits)


class LinearLearnerModel(_LinearLearnerParams, Model, MLReadable, MLWritable):
    """A trained :class:`LinearLearner`: ``transform`` adds ``rawPrediction``,
    ``probability`` and ``prediction`` as MLlib's ``LogisticRegressionModel`` does (two
    entries each for a binary model, K for K classes; ``prediction`` is the raw score for
    squared loss); set an output column to ``""`` to leave it out.

    The model as MLlib users read it: :attr:`coefficients` and :attr:`intercept` (a binary
    model on a Vector column or numeric ``featureCols``), :attr:`coefficientMatrix` and
    :attr:`interceptVector` (K classes), :attr:`numFeatures`, :attr:`numClasses`,
    :attr:`summary`. ``linear`` is the :class:`terascale.linear.LinearModel` (``models``:
    all K of them), whose ``indices``/``weights``/``dense()`` are the hashed weights of
    any input (VW lines, string columns).

    Parameters
    ----------
    linear
        The trained :class:`terascale.linear.LinearModel`, or a list of K of them (one-against-all);
        ``fit`` passes it. None: an empty model, as ``load`` creates.
    kwargs
        Params by name, as for :class:`LinearLearner`.
    """

    __module__ = "terascale.spark"

    def __init__(self, linear: LinearModel | list[LinearModel] | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if isinstance(linear, LinearModel):
            linear = [linear]
        self.models: list[LinearModel] = list(linear or [])
        self.linear = self.models[0] if self.models else None

    @property
    def info(self) -> dict[str, Any]:
        """The training summary (losses, timings, workers, ``spark`` cache hits)."""
        return self.linear.info if self.linear is not None else {}

    def _trained(self) -> LinearModel:
        if self.linear is None:
            raise ConfigError("this LinearLearnerModel has no trained model (fit or load one)")
        return self.linear

    @property
    def numClasses(self) -> int:
        """2 for a binary model, K for a K-class (one-against-all) model."""
        return len(self.models) if len(self.models) > 1 else 2

    @property
    def numFeatures(self) -> int:
        """The Vector column's size, the number of ``featureCols``, or 2**bits (hashed)."""
        m = self._trained()
        return int(m.info.get("mllib", {}).get("numFeatures", 1 << m.bits))

    def _weights(self) -> np.ndarray:
        """``K x numFeatures`` weights in the input's own feature space."""
        m = self._trained()
        mask = (1 << m.bits) - 1
        if self.isDefined("featureCols") and self.getOrDefault("featureCols"):
            feats = self.getOrDefault("featureCols")
            cat = set(self.getOrDefault("categoricalCols"))
            parse = m.parse
            if cat or (parse is not None and parse.categorical):
                raise ConfigError(
                    "coefficients: this model hashes categorical columns into 2**bits "
                    "weights; read them as model.linear.dense()[terascale.linear."
                    "hash_feature(str(value), terascale.linear.hash_space(column), bits)]")
            from ...linear import hash_feature, hash_space

            idx = np.array([hash_feature(c, hash_space(c), m.bits) for c in feats])
        elif m.info.get("mllib", {}).get("kind", "vector") != "vector":
            raise ConfigError("coefficients: this model was trained on hashed text (VW or "
                              "libsvm lines); its weights are model.linear.indices / "
                              ".weights (hashed index -> weight) or model.linear.dense()")
        else:
            idx = np.arange(self.numFeatures) & mask
        return np.stack([mm.dense()[idx].astype(np.float64) for mm in self.models])

    def _intercepts(self) -> np.ndarray:
        from ...linear import CONSTANT_HASH

        m = self._trained()
        if not self.getOrDefault("fitIntercept"):
            return np.zeros(len(self.models))
        c = CONSTANT_HASH & ((1 << m.bits) - 1)
        return np.array([float(mm.dense()[c]) for mm in self.models])

    @property
    def coefficients(self) -> Any:
        """A binary model's weights as a DenseVector in the raw feature space of the Vector
        column (or of the numeric ``featureCols``, in their order):
        ``sigmoid(x . coefficients + intercept)`` is ``probability[1]``. Standardization
        in the batch phase is already folded into them."""
        from pyspark.ml.linalg import DenseVector

        if len(self.models) > 1:
            raise ConfigError("coefficients: a multiclass model has coefficientMatrix and "
                              "interceptVector (one row per class)")
        return DenseVector(self._weights()[0])

    @property
    def intercept(self) -> float:
        if len(self.models) > 1:
            raise ConfigError("intercept: a multiclass model has interceptVector")
        return float(self._intercepts()[0])

    @property
    def coefficientMatrix(self) -> Any:
        """``numClasses x numFeatures`` (one row for a binary model), a DenseMatrix."""
        from pyspark.ml.linalg import DenseMatrix

        w = self._weights()
        return DenseMatrix(w.shape[0], w.shape[1], w.ravel(order="F").tolist())

    @property
    def interceptVector(self) -> Any:
        from pyspark.ml.linalg import DenseVector

        return DenseVector(self._intercepts())

    @property
    def hasSummary(self) -> bool:
        """Whether :attr:`summary` is there: True for a fitted or loaded model (the
        training summary travels with the saved model)."""
        return self.linear is not None

    def evaluate(self, dataset: Any) -> Evaluation:
        """Score ``dataset`` (it needs the label column) and return its metrics as
        MLlib's ``LogisticRegressionModel.evaluate`` does: ``predictions`` and, computed
        when first read, ``accuracy``, ``areaUnderROC``/``areaUnderPR`` (binary),
        ``logLoss``, ``weightedPrecision``, ``weightedRecall``, ``weightedFMeasure``
        (squared loss: ``rootMeanSquaredError``, ``r2``, ``meanAbsoluteError``).

        Parameters
        ----------
        dataset
            A DataFrame with the features and the label column.
        """
        label = self.getOrDefault("labelCol")
        if label not in dataset.columns:
            raise ConfigError(f"evaluate: labelCol={label!r}: the DataFrame has no such "
                              f"column (columns: {', '.join(dataset.columns)})")
        return Evaluation(self.transform(dataset), label,
                          self.getOrDefault("rawPredictionCol"),
                          self.getOrDefault("probabilityCol"),
                          self.getOrDefault("predictionCol"),
                          self._opt("weightCol"), self._trained().loss)

    def predictRaw(self, value: Any) -> Any:
        """The raw scores of one Vector (on the driver): ``[-s, s]`` for a binary model,
        the K scores of a K-class one, as ``rawPrediction`` in :meth:`transform`.

        Parameters
        ----------
        value
            One feature Vector (``pyspark.ml.linalg``) of ``numFeatures`` entries.
        """
        from pyspark.ml.linalg import DenseVector

        s = self._scores(value)
        return DenseVector([-s[0], s[0]] if len(s) == 1 else s)

    def predictProbability(self, value: Any) -> Any:
        """``probability`` of one Vector, as :meth:`transform` computes it.

        Parameters
        ----------
        value
            One feature Vector (``pyspark.ml.linalg``) of ``numFeatures`` entries.
        """
        from pyspark.ml.linalg import DenseVector

        s = self._scores(value)
        with np.errstate(over="ignore"):
            sig = 1.0 / (1.0 + np.exp(-s))
        return DenseVector([1.0 - sig[0], sig[0]] if len(s) == 1 else sig / sig.sum())

    def predict(self, value: Any) -> float:
        """``prediction`` of one Vector, as :meth:`transform` computes it (the class, or
        the score for squared loss).

        Parameters
        ----------
        value
            One feature Vector (``pyspark.ml.linalg``) of ``numFeatures`` entries.
        """
        s = self._scores(value)
        if len(s) > 1:
            return float(np.argmax(s))
        spec = LOSS_TABLE[self._trained().loss]
        if not spec.classes:
            return float(s[0])
        if spec.link == "logistic":
            with np.errstate(over="ignore"):
                p = 1.0 / (1.0 + np.exp(-s[0]))
            return float(p > self.getOrDefault("threshold"))
        return float(s[0] > 0)

    def _scores(self, value: Any) -> np.ndarray:
        """The K raw scores of one MLlib Vector (a model of a Vector column)."""
        from pyspark.ml.linalg import Vector

        if not isinstance(value, Vector):
            raise ConfigError(f"predict: takes one MLlib Vector (a row of featuresCol), "
                              f"not {type(value).__name__}")
        if self.getOrDefault("featureCols"):
            raise ConfigError("predict: this model reads featureCols; score a DataFrame "
                              "with transform")
        n = self.numFeatures
        if value.size != n:
            raise ConfigError(f"predict: the Vector has size {value.size}, the model "
                              f"numFeatures={n}")
        return np.asarray(self.coefficientMatrix.toArray() @ value.toArray()
                          + self._intercepts(), np.float64)

    @property
    def summary(self) -> Summary:
        """The training summary; read it as MLlib's (``summary.objectiveHistory``,
        ``summary.totalIterations``) or as a dict (``summary["rows"]``):
        ``objectiveHistory`` (the training loss after each online pass, then the batch
        phase's final objective per row), ``totalIterations``, ``rows``, ``seconds``, and
        per class the learner's own ``info`` (``classes``)."""
        m = self._trained()
        rows = int(m.info.get("examples", 0))
        hist = [float(x) for x in m.info.get("online_loss", [])]
        if "objective" in m.info and rows:
            hist.append(float(m.info["objective"]) / rows)
        spark = m.info.get("spark", {})
        return Summary(objectiveHistory=hist,
                       totalIterations=int(m.info.get("online_passes", len(
                           m.info.get("online_loss", []))))
                       + int(m.info.get("batch_iterations", 0)),
                       rows=rows, seconds=float(spark.get("job_s", m.info.get("train_s", 0))),
                       classes=[mm.info for mm in self.models])

    def _transform(self, dataset: Any) -> Any:
        from ._score import Scorer, has_arrow_udf, score_columns

        linear = self._trained()
        enc = self._encoding(dataset, fit=False)
        if enc.bits != linear.bits:
            raise ConfigError(f"bits={enc.bits}: the model was trained with "
                              f"{linear.bits} bits")
        names = [self.getOrDefault(c) for c in ("rawPredictionCol", "probabilityCol",
                                               "predictionCol")]
        spec = LOSS_TABLE[linear.loss]
        if not spec.classes:  # a regression: the prediction only
            names = ["", "", names[2]]
        elif spec.link != "logistic":
            names[1] = ""  # (hinge) no calibrated probability
        for name in names:
            if name and name in dataset.columns:
                raise ConfigError(f"output column {name!r} already exists in the DataFrame; "
                                  f"set another name or drop it")
        if has_arrow_udf():
            return score_columns(dataset, Scorer(self.models, enc), loss=linear.loss,
                                 threshold=float(self.getOrDefault("threshold")),
                                 names=(names[0], names[1], names[2]),
                                 num_features=self.numFeatures)
        if len(self.models) > 1:
            raise ConfigError("transform of a multiclass model needs pyspark >= 4.1 "
                              "(arrow_udf)")
        return _transform_rows(dataset, linear, enc, names)

    def write(self) -> MLWriter:
        return ModelWriter(self)

    @classmethod
    def read(cls) -> MLReader[LinearLearnerModel]:
        return ModelReader(cls)


class Summary(dict):  # type: ignore[type-arg]
    """A model's training summary: a dict whose keys also read as attributes
    (``summary.objectiveHistory``, as MLlib's ``LogisticRegressionTrainingSummary``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"the summary has no {name!r} (it has "
                                 f"{', '.join(self)})") from None


class Evaluation:
    """What :meth:`LinearLearnerModel.evaluate` returns: the scored ``predictions`` and
    MLlib's metrics of them, each computed by MLlib's own evaluators when first read (so
    they are defined as MLlib's ``LogisticRegressionModel.evaluate`` defines them)."""

    def __init__(self, predictions: Any, label: str, raw: str, probability: str,
                 prediction: str, weight: str | None, loss: str) -> None:
        self.predictions = predictions
        self.labelCol, self.rawPredictionCol = label, raw
        self.probabilityCol, self.predictionCol = probability, prediction
        self.weightCol, self._loss = weight, loss

    def _multi(self, metric: str) -> float:
        from pyspark.ml.evaluation import MulticlassClassificationEvaluator

        ev = MulticlassClassificationEvaluator(
            metricName=metric, labelCol=self.labelCol, predictionCol=self.predictionCol,
            probabilityCol=self.probabilityCol)
        if self.weightCol:
            ev.setWeightCol(self.weightCol)
        return float(ev.evaluate(self.predictions))

    def _binary(self, metric: str) -> float:
        from pyspark.ml.evaluation import BinaryClassificationEvaluator

        if not LOSS_TABLE[self._loss].classes:
            raise ConfigError(f"{metric}: a regression ({self._loss} loss) model has "
                              f"rootMeanSquaredError, r2, meanAbsoluteError")
        ev = BinaryClassificationEvaluator(metricName=metric, labelCol=self.labelCol,
                                           rawPredictionCol=self.rawPredictionCol)
        if self.weightCol:
            ev.setWeightCol(self.weightCol)
        return float(ev.evaluate(self.predictions))

    def _regression(self, metric: str) -> float:
        from pyspark.ml.evaluation import RegressionEvaluator

        ev = RegressionEvaluator(metricName=metric, labelCol=self.labelCol,
                                 predictionCol=self.predictionCol)
        if self.weightCol:
            ev.setWeightCol(self.weightCol)
        return float(ev.evaluate(self.predictions))

    @functools.cached_property
    def areaUnderROC(self) -> float:
        return self._binary("areaUnderROC")

    @functools.cached_property
    def areaUnderPR(self) -> float:
        return self._binary("areaUnderPR")

    @functools.cached_property
    def accuracy(self) -> float:
        return self._multi("accuracy")

    @functools.cached_property
    def logLoss(self) -> float:
        return self._multi("logLoss")

    @functools.cached_property
    def weightedPrecision(self) -> float:
        return self._multi("weightedPrecision")

    @functools.cached_property
    def weightedRecall(self) -> float:
        return self._multi("weightedRecall")

    @functools.cached_property
    def weightedFMeasure(self) -> float:
        return self._multi("weightedFMeasure")

    @functools.cached_property
    def rootMeanSquaredError(self) -> float:
        return self._regression("rmse")

    @functools.cached_property
    def r2(self) -> float:
        return self._regression("r2")

    @functools.cached_property
    def meanAbsoluteError(self) -> float:
        return self._regression("mae")


def _transform_rows(dataset: Any, linear: LinearModel, enc: Encoding,
                    names: list[str]) -> Any:
    """transform without arrow_udf (pyspark < 4.1): rows through Python, slower."""
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql.types import DoubleType, StructField, StructType

    fields = list(dataset.schema.fields)
    for name, kind in zip(names, (VectorUDT(), VectorUDT(), DoubleType())):
        if name:
            fields.append(StructField(name, kind, nullable=False))
    pos = [dataset.columns.index(c) for c in enc.features]
    sc = dataset.sparkSession.sparkContext
    # A fresh copy: the broadcast carries the non-zero weights, not a dense cache.
    model = sc.broadcast(LinearModel(indices=linear.indices, weights=linear.weights,
                                     parse=linear.parse, loss=linear.loss))
    outputs = (bool(names[0]), bool(names[1]), bool(names[2]))
    rdd = dataset.rdd.mapPartitions(functools.partial(_score, enc, pos, model, outputs))
    return dataset.sparkSession.createDataFrame(rdd, StructType(fields), verifySchema=False)


def _score(enc: Encoding, pos: list[int], model: Any, outputs: tuple[bool, bool, bool],
           rows: Iterator[Any]) -> Iterator[tuple[Any, ...]]:
    """One partition of ``transform``: encode a chunk of rows, score it, append columns."""
    from pyspark import TaskContext
    from pyspark.ml.linalg import DenseVector

    linear: LinearModel = model.value
    spec = LOSS_TABLE[linear.loss]
    want_raw, want_prob, want_pred = outputs
    ctx = TaskContext.get()
    where = f"Spark partition {ctx.partitionId() if ctx else 0}"
    first = 0
    for batch in chunks(rows, 4096):
        ds = enc.encode([[row[p] for p in pos] for row in batch], first, where,
                        with_labels=False)
        first += len(batch)
        s = linear.decision_function(ds)
        p = (1.0 / (1.0 + np.exp(-np.clip(s, -50, 50)))) if spec.link == "logistic" else s
        for row, si, pi in zip(batch, s.tolist(), p.tolist()):
            extra: list[Any] = []
            if not spec.classes:
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


def _accessors(cls: type) -> None:
    """``setX``/``getX`` for every Param that lacks them (``setMaxIter``, ``getBits``...)."""
    for p in cls().params:  # type: ignore[call-arg]
        cap = p.name[0].upper() + p.name[1:]
        if not hasattr(cls, "set" + cap):
            def setter(self: Any, value: Any, _n: str = p.name) -> Any:
                return self._set(**{_n: value})
            setter.__name__ = setter.__qualname__ = "set" + cap
            doc = p.doc[:1].upper() + p.doc[1:].rstrip(".") + "."
            setter.__doc__ = (f"Set the Param ``{p.name}``; returns the estimator.\n\n"
                              f"Parameters\n----------\nvalue\n    {doc}\n")
            setattr(cls, "set" + cap, setter)
        if not hasattr(cls, "get" + cap):
            def getter(self: Any, _n: str = p.name) -> Any:
                return self.getOrDefault(_n)
            getter.__name__ = getter.__qualname__ = "get" + cap
            getter.__doc__ = f"The value of the Param ``{p.name}`` (its default when unset)."
            setattr(cls, "get" + cap, getter)


_accessors(LinearLearner)
_accessors(LinearLearnerModel)
