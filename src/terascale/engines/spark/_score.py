"""``LinearLearnerModel.transform``: scores computed on Arrow batches, columns in the JVM.

MLlib's ``LogisticRegressionModel.transform`` is a JVM expression per row. Ours has to
run in Python (the weights and the hashing live there), so the cost to beat is moving
rows between the JVM and Python. Three choices keep it near MLlib's:

* only the feature column(s) travel, as Arrow record batches of a scalar ``arrow_udf``
  (Spark >= 4.1); the other columns never leave the JVM, and Spark prunes the UDF away
  when no output column is used;
* a batch is scored with one numpy product: a dense Vector column is an ``n x d`` matrix
  times the weights (and ``n x K`` for K classes); a sparse one is a gather of the weights
  at its indices and a ``bincount`` per row; numeric ``featureCols`` are a matrix too;
* a small Vector column leaves the JVM as a plain array (``vector_to_array``: half the
  time of its struct form), a large (hashed) one in its sparse struct form;
* the UDF returns ``rawPrediction`` and ``probability`` already as MLlib Vectors (their
  Arrow struct form) and ``prediction``: building them with Spark SQL expressions
  (``array_to_vector``) cost more than the scoring.

The weights reach each Python worker once per model, as a Spark broadcast, and are
expanded to a dense array once per worker process (:func:`_dense`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from ..._errors import DataError
from ...linear import CONSTANT_HASH, LOSS_TABLE, hash_feature, hash_space
from ._encode import Encoding

__all__ = ["Scorer", "has_arrow_udf", "score_columns"]


class Scorer:
    """What a Python worker needs to score: the K weight vectors (hashed index -> weight),
    the encoding of the features and whether the constant feature is on. Pickled into a
    broadcast."""

    def __init__(self, models: list[Any], enc: Encoding) -> None:
        self.bits = enc.bits
        self.parts = [(np.asarray(m.indices), np.asarray(m.weights)) for m in models]
        self.enc = enc
        self.constant = enc.constant


_DENSE: dict[int, tuple[Any, np.ndarray]] = {}  # id(scorer) -> (scorer, K x 2^bits weights)


def _dense(scorer: Scorer) -> np.ndarray:
    """The scorer's weights as a dense ``K x 2**bits`` float32 array, built once per
    worker process and model (the broadcast value is one object per process)."""
    hit = _DENSE.get(id(scorer))
    if hit is not None and hit[0] is scorer:
        return hit[1]
    full = np.zeros((len(scorer.parts), 1 << scorer.bits), np.float32)
    for k, (idx, w) in enumerate(scorer.parts):
        full[k, idx] = w
    _DENSE.clear()  # one model at a time per worker: do not hold old models' weights
    _DENSE[id(scorer)] = (scorer, full)
    return full


def _intercepts(scorer: Scorer, full: np.ndarray) -> np.ndarray:
    if not scorer.constant:
        return np.zeros(len(full))
    return full[:, CONSTANT_HASH & ((1 << scorer.bits) - 1)].astype(np.float64)


def _refuse_nulls(scorer: Scorer, col: Any, where: str) -> None:
    """A null in a Vector column is a DataError naming its row, not a failure deeper down."""
    if col.null_count:
        r = int(np.flatnonzero(~col.is_valid().to_numpy(zero_copy_only=False))[0])
        raise DataError(f"{where}: row {r} of the batch has a null in Vector column "
                        f"{scorer.enc.features[0]!r}; a Vector column must have a vector "
                        f"in every row (fill or drop the nulls)")


def _array_scores(scorer: Scorer, col: Any, where: str) -> np.ndarray:
    """A Vector column as ``vector_to_array`` gives it (a list of doubles per row, the
    cheapest way out of the JVM for small vectors) -> ``n x K`` raw scores."""
    full = _dense(scorer)
    mask = (1 << scorer.bits) - 1
    n = len(col)
    _refuse_nulls(scorer, col, where)
    off = np.asarray(col.offsets, np.int64)
    flat = col.values.slice(int(off[0]), int(off[-1] - off[0])).to_numpy(zero_copy_only=False)
    counts = np.diff(off)
    b = _intercepts(scorer, full)
    if n and (counts == counts[0]).all():
        d = int(counts[0])
        return flat.reshape(n, d) @ full[:, np.arange(d) & mask].astype(np.float64).T + b
    rows = np.repeat(np.arange(n), counts)
    idx = (np.arange(len(flat), dtype=np.int64) - (np.cumsum(counts) - counts)[rows]) & mask
    out = np.empty((n, len(full)))
    for k in range(len(full)):
        out[:, k] = np.bincount(rows, weights=full[k, idx] * flat, minlength=n)
    return out + b


def _vector_scores(scorer: Scorer, col: Any, where: str) -> np.ndarray:
    """An Arrow Vector column (MLlib's struct form) -> ``n x K`` raw scores."""
    full = _dense(scorer)
    mask = (1 << scorer.bits) - 1
    n = len(col)
    _refuse_nulls(scorer, col, where)
    b = _intercepts(scorer, full)
    if n == 0:
        return np.zeros((0, len(full)))
    kind = col.field("type").to_numpy(zero_copy_only=False)
    vals = col.field("values")
    off = np.asarray(vals.offsets, np.int64)
    flat = vals.values.slice(int(off[0]), int(off[-1] - off[0])).to_numpy(
        zero_copy_only=False)
    counts = np.diff(off)
    if (kind == 1).all() and (counts == counts[0]).all():  # dense rows of one size
        d = int(counts[0])
        w = full[:, np.arange(d) & mask].astype(np.float64)  # K x d
        return flat.reshape(n, d) @ w.T + b
    ind = col.field("indices")
    ioff = np.asarray(ind.offsets, np.int64)
    sidx = ind.values.slice(int(ioff[0]), int(ioff[-1] - ioff[0])).to_numpy(
        zero_copy_only=False).astype(np.int64)
    rows = np.repeat(np.arange(n), counts)
    if (kind == 0).all():
        idx = sidx
    else:  # mixed: a dense row's entry j is feature j
        starts = np.cumsum(counts) - counts
        idx = np.arange(len(flat), dtype=np.int64) - starts[rows]
        idx[(kind == 0)[rows]] = sidx
    idx &= mask
    out = np.empty((n, len(full)))
    for k in range(len(full)):
        out[:, k] = np.bincount(rows, weights=full[k, idx] * flat, minlength=n)
    return out + b


def _column_scores(scorer: Scorer, cols: list[Any], where: str) -> np.ndarray:
    """Plain columns: numeric ones as one matrix product (a null cell is missing, a NaN
    gives a NaN score as in a Vector column), any other through the encoder."""
    import pyarrow as pa
    import pyarrow.compute as pc

    enc = scorer.enc
    full = _dense(scorer)
    n = len(cols[0]) if cols else 0
    numeric = all(enc.numeric[j] and c not in enc.categorical
                  for j, c in enumerate(enc.features))
    if numeric:
        x = np.empty((n, len(cols)))
        for j, c in enumerate(cols):
            v = pc.cast(c, pa.float64(), safe=False).to_numpy(zero_copy_only=False)
            x[:, j] = np.where(c.is_valid().to_numpy(zero_copy_only=False), v, 0.0)
        h = [hash_feature(c, hash_space(c), enc.bits) for c in enc.features]
        return x @ full[:, h].astype(np.float64).T + _intercepts(scorer, full)
    rows = list(zip(*[c.to_pylist() for c in cols]))
    return _csr_scores(enc.encode(rows, 0, where, with_labels=False), full)


def _csr_scores(ds: Any, full: np.ndarray) -> np.ndarray:
    """``n x K`` scores of an encoded chunk (CSR rows, the constant included)."""
    n = len(ds.indptr) - 1
    rows = np.repeat(np.arange(n), np.diff(ds.indptr))
    vals = np.asarray(ds.values, np.float64)
    return np.stack([np.bincount(rows, weights=f[ds.indices] * vals, minlength=n)
                     for f in full], axis=1)


def _text_scores(scorer: Scorer, col: Any, where: str) -> np.ndarray:
    return _csr_scores(scorer.enc.encode(col.to_pylist(), 0, where, with_labels=False),
                       _dense(scorer))


_VECTOR = pa.struct([("type", pa.int8()), ("size", pa.int32()),
                     ("indices", pa.list_(pa.int32())), ("values", pa.list_(pa.float64()))])


def _dense_vectors(m: np.ndarray) -> Any:
    """Rows of ``m`` as MLlib DenseVectors (their Arrow struct form)."""
    n, k = m.shape
    vals = pa.ListArray.from_arrays(pa.array(np.arange(0, k * n + 1, k, dtype=np.int32)),
                                    pa.array(np.ascontiguousarray(m).ravel(), pa.float64()))
    return pa.StructArray.from_arrays(
        [pa.array(np.ones(n, np.int8)), pa.nulls(n, pa.int32()),
         pa.nulls(n, pa.list_(pa.int32())), vals], fields=list(_VECTOR))


def _batch(bc: Any, how: dict[str, Any], *cols: Any) -> Any:
    """The arrow_udf body: one batch of feature columns -> a struct of rawPrediction,
    probability (MLlib Vectors) and prediction."""
    from pyspark import TaskContext

    scorer: Scorer = bc.value
    ctx = TaskContext.get()
    where = f"Spark partition {ctx.partitionId() if ctx else 0}"
    kind = scorer.enc.kind
    if kind == "vector":
        s = (_array_scores if how["arrays"] else _vector_scores)(scorer, cols[0], where)
    elif kind == "columns":
        s = _column_scores(scorer, [cols[0].field(i) for i in range(cols[0].type.num_fields)],
                           where)
    else:
        s = _text_scores(scorer, cols[0], where)
    with np.errstate(over="ignore"):
        if s.shape[1] > 1:  # one against all: K sigmoids, normalized; the largest wins
            raw = s
            sig = 1.0 / (1.0 + np.exp(-s))
            prob = sig / sig.sum(axis=1, keepdims=True)
            pred = np.argmax(s, axis=1).astype(np.float64)
        else:
            s = s[:, 0]
            raw = np.stack([-s, s], axis=1)
            p = 1.0 / (1.0 + np.exp(-s))
            prob = np.stack([1.0 - p, p], axis=1)
            spec = LOSS_TABLE[how["loss"]]
            if not spec.classes:
                pred = s
            elif spec.link == "logistic":
                pred = (p > how["threshold"]).astype(np.float64)
            else:
                pred = (s > 0).astype(np.float64)
    pack = _dense_vectors if how["udt"] else _lists
    return pa.StructArray.from_arrays([pack(raw), pack(prob), pa.array(pred, pa.float64())],
                                      names=["raw", "prob", "pred"])


def _lists(m: np.ndarray) -> Any:
    n, k = m.shape
    return pa.ListArray.from_arrays(pa.array(np.arange(0, k * n + 1, k, dtype=np.int32)),
                                    pa.array(np.ascontiguousarray(m).ravel(), pa.float64()))


def has_arrow_udf() -> bool:
    from pyspark.sql import functions as F

    return hasattr(F, "arrow_udf")


def score_columns(dataset: Any, scorer: Scorer, *, loss: str, threshold: float,
                  names: tuple[str, str, str], num_features: int) -> Any:
    """``dataset`` with the raw/probability/prediction columns ``names`` ("": left out)
    appended, the scores computed on Arrow batches (see the module docstring)."""
    from pyspark.ml.functions import array_to_vector, vector_to_array
    from pyspark.ml.linalg import VectorUDT
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, DoubleType, StructField, StructType

    sc = dataset.sparkSession.sparkContext
    bc = sc.broadcast(scorer)
    # small Vectors leave the JVM cheapest as plain arrays (vector_to_array densifies)
    arrays = scorer.enc.kind == "vector" and 0 < num_features <= 4096
    # Spark 4 returns a UDT from this UDF only when its input holds one (a Vector
    # column); for plain columns and text the vectors are built in the JVM from arrays
    udt = scorer.enc.kind == "vector"
    how = {"arrays": arrays, "loss": loss, "threshold": threshold, "udt": udt}

    def score(*cols: pa.Array) -> pa.Array:
        return _batch(bc, how, *cols)

    vec = VectorUDT() if udt else ArrayType(DoubleType())
    out = StructType([StructField("raw", vec), StructField("prob", vec),
                      StructField("pred", DoubleType())])
    udf = F.arrow_udf(score, out)
    tmp = "__terascale_score"
    # plain columns travel as one struct: a UDF of several columns cannot return a UDT
    args = ([vector_to_array(F.col(scorer.enc.features[0]))] if arrays
            else [F.struct(*[F.col(f"`{c}`") for c in scorer.enc.features])]
            if scorer.enc.kind == "columns" else [F.col(scorer.enc.features[0])])
    df = dataset.withColumn(tmp, udf(*args))
    raw_name, prob_name, pred_name = names
    outs = [(F.col(f"{tmp}.{f}") if udt or f == "pred" else
             array_to_vector(F.col(f"{tmp}.{f}"))).alias(n) for f, n in
            (("raw", raw_name), ("prob", prob_name), ("pred", pred_name)) if n]
    return df.select(*[F.col(f"`{c}`") for c in dataset.columns], *outs)
