"""Saving and loading a ``LinearLearnerModel`` as MLlib lays out a saved model.

``metadata/`` is what ``DefaultParamsWriter`` writes (the Params, JSON) and ``data/`` one
Parquet row per :class:`terascale.linear.LinearModel` file (one per class of a
one-against-all model), on any Hadoop file
system; ``PipelineModel.load`` finds the reader through the class.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from pyspark.ml.util import DefaultParamsReader, DefaultParamsWriter, MLReader, MLWriter

from ..._errors import ConfigError, DataError
from ...linear import LinearModel

__all__ = ["ModelReader", "ModelWriter"]


def _model_bytes(m: LinearModel) -> bytes:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.npz")
        m.save(path)
        with open(path, "rb") as f:
            return f.read()


def _model_from_bytes(blob: bytes, where: str) -> LinearModel:
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "model.npz")
        with open(path, "wb") as f:
            f.write(blob)
        try:
            return LinearModel.load(path)
        except DataError as e:
            raise DataError(f"{where}: {e}") from None


class ModelWriter(MLWriter):
    """metadata/ as DefaultParamsWriter writes it, data/ one Parquet row (the model file)."""

    def __init__(self, instance: Any) -> None:
        super().__init__()
        self.instance = instance

    def saveImpl(self, path: str) -> None:
        if self.instance.linear is None:
            raise ConfigError("cannot save a LinearLearnerModel without a trained model")
        DefaultParamsWriter.saveMetadata(self.instance, path, self.sparkSession)
        rows = [(bytearray(_model_bytes(m)), k) for k, m in enumerate(self.instance.models)]
        (self.sparkSession.createDataFrame(rows, "model binary, class int")
         .coalesce(1).write.parquet(os.path.join(path, "data")))


class ModelReader(MLReader[Any]):
    def __init__(self, cls: type[Any]) -> None:
        super().__init__()
        self.cls = cls

    def load(self, path: str) -> Any:
        meta = DefaultParamsReader.loadMetadata(path, self.sparkSession)
        data = self.sparkSession.read.parquet(os.path.join(path, "data"))
        rows = data.collect()
        if not rows:
            raise DataError(f"{path}: no model data (data/ is empty)")
        if "class" in data.columns:
            rows = sorted(rows, key=lambda r: r["class"])
        instance = self.cls([_model_from_bytes(bytes(r["model"]), path) for r in rows])
        instance._resetUid(meta["uid"])
        DefaultParamsReader.getAndSetParams(instance, meta)
        return instance
