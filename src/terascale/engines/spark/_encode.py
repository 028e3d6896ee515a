"""Spark rows -> hashed CSR examples, a chunk at a time (training and ``transform`` alike).

Three encodings, one per kind of input:

* ``vector``: an MLlib ``Vector`` column (sparse or dense). Element ``j`` is feature index
  ``j`` masked to ``bits`` (as :class:`terascale.linear.LinearClassifier` does for a
  matrix), zeros dropped, VW's constant feature appended.
* ``columns``: plain DataFrame columns, hashed exactly as the CSV reader of
  ``terascale.linear`` hashes a table: a number in column ``c`` is the value of feature
  ``c`` in namespace ``c``; any other cell (a string, a date) is the category
  feature ``str(cell)`` in namespace ``c`` with value 1; a column listed as categorical is
  categories throughout; a boolean is the number 1 or 0 (as pandas reads ``True`` in a CSV
  file); null and NaN cells are missing. A model trained on a DataFrame
  therefore predicts the same table written as CSV (``LinearModel.predict("t.csv")``).
* ``text``: one string column of VW or libsvm lines, parsed by
  :func:`terascale.linear.parse_lines`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..._errors import ConfigError, DataError
from ...linear import CONSTANT_HASH, Dataset, ParseOptions, hash_feature, hash_space, parse_lines
from ._vectorcsr import F32_MAX, vector_csr

_LINE = re.compile(r"<lines>, line (\d+): (.*)", re.S)

__all__ = ["Encoding", "not_a_vector"]

KINDS = ("vector", "columns", "text")


@dataclass(frozen=True)
class Encoding:
    """How the rows of a partition become examples; shipped to the tasks.

    Parameters
    ----------
    kind
        ``"vector"`` (one Vector column), ``"columns"`` (plain columns, hashed as the CSV reader
        hashes them) or ``"text"`` (one column of VW/libsvm lines).
    bits
        Hash bits of the model (``2**bits`` weights).
    features
        The Vector column, the plain feature columns, or the text column.
    label
        The label column (vector and columns kinds; None: no label).
    weight
        The importance-weight column (vector and columns kinds; None: weight 1).
    categorical
        Columns hashed as categories even when numeric (columns kind).
    numeric
        Per feature column: whether Spark's type is a number (else decided per cell).
    text
        The text kind's :func:`terascale.linear.parse_lines` options (``format``, ...).
    constant
        Add VW's constant (bias) feature (default True).
    skip_bad
        Drop rows with a bad cell instead of raising DataError (default False).
    require_label
        A null or NaN label is a DataError instead of "no label" (training).
    """

    kind: str
    bits: int
    features: tuple[str, ...]
    label: str | None = None
    weight: str | None = None
    categorical: tuple[str, ...] = ()
    numeric: tuple[bool, ...] = ()
    text: dict[str, Any] = field(default_factory=dict)
    constant: bool = True
    skip_bad: bool = False
    require_label: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ConfigError(f"encoding kind {self.kind!r}: use one of {', '.join(KINDS)}")
        ParseOptions(bits=self.bits)  # validates bits with the learner's message

    @property
    def columns(self) -> tuple[str, ...]:
        """The DataFrame columns a task needs, in the order rows carry them."""
        extra = tuple(c for c in (self.label, self.weight) if c)
        return self.features + extra

    def parse_options(self) -> ParseOptions | None:
        """What the trained model records: CSV options for columns, the text's own."""
        if self.kind == "text":
            opts: dict[str, Any] = {k: (tuple(v) if isinstance(v, list) else v)
                                    for k, v in self.text.items()}
            return ParseOptions(**opts)
        if self.kind == "columns":
            return ParseOptions(format="csv", bits=self.bits, label=self.label or "label",
                                categorical=self.categorical, constant=self.constant)
        return None

    def describe(self) -> str:
        """Everything that changes the encoded arrays (part of the cache key)."""
        return repr((self.kind, self.bits, self.features, self.label, self.weight,
                     self.categorical, self.numeric, sorted(self.text.items()),
                     self.constant, self.skip_bad, self.require_label))

    def encode(self, rows: Sequence[Any], first: int, where: str,
               with_labels: bool = True) -> Dataset:
        """Rows ``first .. first + len(rows)`` of a partition as one Dataset chunk.

        ``rows`` carry :attr:`columns` in order from position 0 (training), or with
        ``with_labels=False`` at least the feature columns from position 0 (scoring).
        ``where`` names the partition in errors.

        Parameters
        ----------
        rows
            Rows carrying :attr:`columns` in order from position 0.
        first
            The row number of the first row within its partition (for errors).
        where
            Names the partition in errors (``"partition 3"``).
        with_labels
            False for scoring: the rows need only the feature columns (default True).
        """
        if self.kind == "text":
            return self._text([r if isinstance(r, str) else r[0] for r in rows], first, where)
        n = len(rows)
        if self.kind == "vector":
            indptr, indices, values = vector_csr(*self._vectors(rows, first, where),
                                                 self.bits, self.constant, first, where,
                                                 self.features[0])
            keep = np.ones(n, bool)
        else:
            indptr, indices, values, keep = self._columns(rows, first, where)
        k = len(self.features)
        label = weight = None
        if with_labels and self.label:
            label = self.numbers([row[k] for row in rows], first, where, keep)
        if with_labels and self.weight:
            weight = self.numbers([row[k + (1 if self.label else 0)] for row in rows], first,
                                   where, keep, self.weight)
        return self._dataset(indptr, indices, values, keep, label, weight, first, where)

    def encode_arrow(self, batch: Any, first: int, where: str) -> Dataset:
        """:meth:`encode` for training on an Arrow record batch of :attr:`columns`: the
        same Dataset, bitwise, without a Python object per row (vector and text kinds;
        plain columns go through their Python values).

        Parameters
        ----------
        batch
            A ``pyarrow.RecordBatch`` of :attr:`columns`.
        first
            The row number of the first row within its partition (for errors).
        where
            Names the partition in errors (``"partition 3"``).
        """
        from ._arrow import lines, numbers, vectors

        if self.kind == "text":
            return self._text(lines(batch.column(0)), first, where)
        if self.kind == "columns":
            cols = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
            return self.encode(list(zip(*cols)), first, where)
        keep = np.ones(batch.num_rows, bool)
        indptr, indices, values = vector_csr(*vectors(batch.column(0), first, where,
                                                      self.features[0]), self.bits,
                                             self.constant, first, where, self.features[0])
        label = weight = None
        if self.label:
            label = numbers(batch.column(1), self, first, where, keep, self.label)
        if self.weight:
            weight = numbers(batch.column(2 if self.label else 1), self, first, where, keep,
                             self.weight)
        return self._dataset(indptr, indices, values, keep, label, weight, first, where)

    def _dataset(self, indptr: np.ndarray, indices: np.ndarray, values: np.ndarray,
                 keep: np.ndarray, label: np.ndarray | None, weight: np.ndarray | None,
                 first: int, where: str) -> Dataset:
        n = len(keep)
        labels = np.full(n, np.nan, np.float32) if label is None else label
        weights = np.ones(n, np.float32)
        if weight is not None:
            bad = np.flatnonzero(np.isnan(weight) | (weight < 0))
            if len(bad):
                raise DataError(f"{where}, row {first + int(bad[0])}: weight column "
                                f"{self.weight!r} must be a number >= 0, not {weight[bad[0]]}")
            weights = weight
        skipped = int(np.count_nonzero(~keep))
        if skipped:  # only with skip_bad: drop the rows with a bad cell
            counts = np.diff(indptr)[keep]
            take = np.repeat(keep, np.diff(indptr))
            indices, values = indices[take], values[take]
            indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
            labels, weights = labels[keep], weights[keep]
        return Dataset(indptr=indptr, indices=indices, values=values, labels=labels,
                       weights=weights, bits=self.bits, skipped=skipped,
                       parse=self.parse_options())

    def _text(self, lines: list[Any], first: int, where: str) -> Dataset:
        if any(line is None for line in lines):
            i = next(i for i, line in enumerate(lines) if line is None)
            raise DataError(f"{where}, row {first + i}: the text column is null")
        try:
            return parse_lines(lines, **self.text)
        except DataError as e:  # parse_lines: "<lines>, line N: ..." (N from 1 in the chunk)
            at = _LINE.match(str(e))
            if at is None:
                raise DataError(f"{where}, rows from {first}: {e}") from None
            raise DataError(f"{where}, row {first + int(at[1]) - 1}: {at[2]}") from None

    def _vectors(self, rows: Sequence[Any], first: int,
                 where: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows' Vectors -> (non-zeros per row, their indices, their values), flat."""
        from pyspark.ml.linalg import DenseVector, SparseVector

        idx: list[np.ndarray] = []
        val: list[np.ndarray] = []
        counts = np.empty(len(rows), np.int64)
        for r, row in enumerate(rows):
            v = row[0]
            i: np.ndarray
            if isinstance(v, SparseVector):
                i, x = v.indices, v.values
            elif isinstance(v, DenseVector):
                x = v.toArray()
                i = np.flatnonzero(x)
                x = x[i]
            else:
                raise DataError(not_a_vector(where, first + r, self.features[0], v))
            nz = x != 0
            if not nz.all():
                i, x = i[nz], x[nz]
            idx.append(np.asarray(i, np.int64))
            val.append(x)
            counts[r] = len(x)
        return (counts, np.concatenate(idx) if idx else np.zeros(0, np.int64),
                np.concatenate(val) if val else np.zeros(0))

    def _columns(self, rows: Sequence[Any], first: int, where: str
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        import pandas as pd

        n = len(rows)
        k = len(self.features) + (1 if self.constant else 0)
        idx = np.zeros((n, k), np.uint32)
        val = np.zeros((n, k), np.float32)
        keep = np.ones(n, bool)
        for j, c in enumerate(self.features):
            cells = [row[j] for row in rows]
            ns = hash_space(c)
            categorical = c in self.categorical
            numeric_type = bool(self.numeric[j]) if j < len(self.numeric) else False
            if categorical:
                num = np.full(n, np.nan)
            elif numeric_type:
                num = np.array([np.nan if v is None else float(v) for v in cells], np.float64)
                nan = [r for r, v in enumerate(cells) if v is not None and v != v]
                if nan:  # a NaN value, as in a Vector column (a null cell is missing)
                    if not self.skip_bad:
                        raise DataError(f"{where}, row {first + nan[0]}: column {c!r} has "
                                        f"a NaN value (a null cell is a missing feature, "
                                        f"NaN is refused as in a Vector column)")
                    keep[nan] = False
            else:
                bad_type = next((v for v in cells if isinstance(v, (list, dict, tuple))), None)
                if bad_type is not None:
                    raise DataError(f"{where}: column {c!r} holds {type(bad_type).__name__} "
                                    f"cells; plain columns must be numbers or strings (a "
                                    f"Vector column goes in featuresCol)")
                col = pd.Series(cells, dtype=object)
                num = np.array(pd.to_numeric(col, errors="coerce"), np.float64)
            isnum = ~np.isnan(num)
            huge = np.flatnonzero(isnum & (np.abs(num) > F32_MAX))
            if len(huge):
                if not self.skip_bad:
                    r = int(huge[0])
                    raise DataError(f"{where}, row {first + r}: column {c!r}: {cells[r]!r} "
                                    f"is not a finite number (within float32)")
                keep[huge] = False
                num[huge] = 0.0
            if numeric_type and not categorical:  # numbers only: NaN and null are missing
                idx[:, j] = hash_feature(c, ns, self.bits)
                val[:, j] = np.where(isnum, num, 0.0)
                continue
            # Categories: a null or NaN cell is missing, anything else is its text.
            text = [None if (v is None or (isinstance(v, float) and v != v) or isnum[r])
                    else str(v) for r, v in enumerate(cells)]
            codes, uniq = pd.factorize(pd.Series(text, dtype=object))
            h = np.array([hash_feature(str(u), ns, self.bits) for u in uniq] + [0], np.uint32)
            idx[:, j] = np.where(isnum, hash_feature(c, ns, self.bits), h[codes])
            val[:, j] = np.where(isnum, num, (codes >= 0).astype(np.float32))
        if self.constant:
            idx[:, -1] = CONSTANT_HASH & ((1 << self.bits) - 1)
            val[:, -1] = 1.0
        present = val != 0
        indptr = np.concatenate([[0], np.cumsum(present.sum(axis=1))]).astype(np.int64)
        return indptr, idx[present], val[present], keep

    def numbers(self, cells: Sequence[Any], first: int, where: str, keep: np.ndarray,
                 name: str | None = None) -> np.ndarray:
        """A label (or ``name``'s weight) column as float32 (null: NaN, i.e. no label).

        Parameters
        ----------
        cells
            The column's cells (numbers, None for no value).
        first
            The row number of the first row within its partition (for errors).
        where
            Names the partition in errors (``"partition 3"``).
        keep
            The rows kept so far (a bool array); a bad cell clears its row under ``skip_bad``.
        name
            The weight column's name (None: the label column).
        """
        x = np.empty(len(cells), np.float64)
        for r, v in enumerate(cells):
            try:
                x[r] = np.nan if v is None else float(v)
            except (TypeError, ValueError, OverflowError):
                x[r] = np.inf
        return self.checked(x, cells, first, where, keep, name)

    def checked(self, x: np.ndarray, cells: Any, first: int, where: str, keep: np.ndarray,
                name: str | None = None) -> np.ndarray:
        """float64 cells as float32; one not finite within float32 (NaN is no label) is a
        DataError naming the row, or with ``skip_bad`` drops it (``keep``).

        Parameters
        ----------
        x
            The cells as float64 (a cell that is no number as inf).
        cells
            The original cells, quoted in the error.
        first
            The row number of the first row within its partition (for errors).
        where
            Names the partition in errors (``"partition 3"``).
        keep
            The rows kept so far (a bool array); a bad cell clears its row under ``skip_bad``.
        name
            The weight column's name (None: the label column).
        """
        if self.require_label and name in (None, self.label):
            nan = np.flatnonzero(np.isnan(x))
            if len(nan):
                r = int(nan[0])
                raise DataError(f"{where}, row {first + r}: label column {self.label!r} is "
                                f"{'null' if cells[r] is None else 'NaN'}; every training "
                                f"row needs a label (drop or fill these rows)")
        bad = np.flatnonzero(~(np.isnan(x) | (np.abs(x) <= F32_MAX)))
        if len(bad):
            if not self.skip_bad:
                r = int(bad[0])
                cell = cells[r].item() if isinstance(cells[r], np.generic) else cells[r]
                raise DataError(f"{where}, row {first + r}: column "
                                f"{name or self.label!r}: {cell!r} is not a (finite) "
                                f"number")
            keep[bad] = False
            x[bad] = 0.0
        return x.astype(np.float32)


def not_a_vector(where: str, row: int, column: str, v: Any) -> str:
    if v is None:
        return (f"{where}, row {row}: Vector column {column!r} is null; every row needs a "
                f"vector (drop or fill these rows: VectorAssembler(handleInvalid='skip'))")
    return (f"{where}, row {row}: column {column!r} holds {type(v).__name__}, not an MLlib "
            f"Vector (use featureCols= for plain columns)")
