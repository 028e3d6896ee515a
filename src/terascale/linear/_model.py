"""A trained linear model: hashed indices and weights, plus the options it was trained with.

The file is a NumPy ``.npz`` holding the non-zero weights by hashed index and a JSON header
(format name and version, parse options: format, bits, interactions; loss; training
summary; after a standardized batch phase, a small versioned ``normalize`` entry, its
per-feature means and deviations stored as arrays beside the weights). It is written to a
temporary file in the target directory and renamed over the target (``os.replace``), so a
reader never sees a half-written model. Predicting re-parses
data with the model's own options, so ``-b``/``-q`` need not be repeated.
"""

from __future__ import annotations

import json
import os
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .._errors import ConfigError, DataError
from .._files import PieceWriter, fsync_dir, make_public, storage_error
from ._io._blocks import Block, Blocks, DatasetBlocks, as_blocks
from ._io._dataset import Dataset, ParseOptions
from ._io._hashnames import CONSTANT_HASH
from ._metrics import evaluate_scores
from ._names import opt
from ._online._state import STATE_SIZE

__all__ = ["LinearModel"]

MAGIC = "terascale-linear"
VERSION = 1


_BLOCK = 1 << 16  # (the features :func:`_every_kept` reads at a time)


def _every_kept(weights: np.ndarray, adaptive: np.ndarray) -> bool:
    """Whether every feature has a non-zero weight or (``adaptive`` not empty) a non-zero
    adaptive sum: read a block at a time, where two boolean masks over the whole arrays
    cost a byte a feature each at the end of a run's peak (14.5M features: 29 MB)."""
    check = len(adaptive) > 0
    for k in range(0, len(weights), _BLOCK):
        dropped = weights[k:k + _BLOCK] == 0
        if check:
            dropped &= adaptive[k:k + _BLOCK] == 0
        if dropped.any():
            return False
    return True


class LinearModel:
    """Weights by hashed feature index; ``predict`` returns probabilities for logistic loss.

    Parameters
    ----------
    indices
        The hashed indices of the features with a weight (sorted).
    weights
        Their weights.
    parse
        How text is parsed for this model (bits, interactions, format...).
    loss
        The loss it was trained with (``"logistic"``, ``"squared"``...), which decides what
        ``predict`` returns.
    info
        The training summary (losses, timings, workers); default None: empty.
    adaptive
        The online learner's state (adaptive sums, normalizers, scalars) for a warm start (default
        None: none saved).
    """

    def __init__(self, *, indices: np.ndarray, weights: np.ndarray, parse: ParseOptions,
                 loss: str, info: dict[str, Any] | None = None,
                 adaptive: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> None:
        weights = np.asarray(weights)
        # a zero weight with adaptive sums still resumes
        g2 = np.zeros(0, np.float32) if adaptive is None else np.asarray(adaptive[0])
        # every feature kept (a wide model's usual case): float32 arrays are taken as they
        # are, not copied (a copy of 10^7 features is 40 MB an array at the run's peak)
        plain = weights.ndim == 1 and len(g2) in (0, len(weights))
        every = plain and _every_kept(weights, g2)
        keep = None
        if not every:  # (numpy's own errors for arrays of other shapes)
            keep = weights != 0
            if adaptive is not None:
                keep |= g2 != 0
            every = bool(keep.all())

        def kept(a: np.ndarray, dtype: type) -> np.ndarray:
            a = np.asarray(a)
            return np.ascontiguousarray(a if every else a[keep], dtype=dtype)

        self.indices = kept(indices, np.uint32)
        self.weights = kept(weights, np.float32)
        # The online learner's state for a warm start (VW's save_resume), aligned with
        # indices: sums of squared gradients, largest |x| seen, and the learner's scalars.
        self.adaptive = None if adaptive is None else (
            kept(adaptive[0], np.float32), kept(adaptive[1], np.float32),
            np.asarray(adaptive[2], dtype=np.float64).copy())
        self.parse = parse
        self.loss = loss
        self.info = dict(info or {})
        # (header entry, arrays) of the batch phase's standardization, or None: the weights
        # already include it, so it is a record (what the l2 term saw), not a step to apply
        self.normalization: tuple[dict[str, Any], dict[str, np.ndarray]] | None = None
        self._full: np.ndarray | None = None

    @property
    def bits(self) -> int:
        return self.parse.bits

    def dense(self) -> np.ndarray:
        """All 2**bits weights (float32), as they predict: a VW model's lazy L1 and L2
        (the learner's gravity and contraction, which VW saves unapplied) folded in."""
        if self._full is None:
            full = np.zeros(1 << self.bits, np.float32)
            full[self.indices] = self.weights
            if self.adaptive is not None and len(self.adaptive[2]) == STATE_SIZE:
                from ._online._update import sync_weights

                sync_weights(full, self.adaptive[2].copy())  # (on a copy of the state)
            self._full = full
        return self._full

    def _blocks(self, data: Dataset | Blocks | Sequence[str] | str) -> list[Blocks]:
        """The data as Blocks, one per file (files stream: they are never held whole)."""
        if isinstance(data, (Dataset, Blocks)):
            if data.bits != self.bits:
                raise ConfigError(f"the data was hashed with {opt('bits', data.bits)} but "
                                  f"the model was trained with {opt('bits', self.bits)}")
            if data.parse is not None:  # -q, format, constant, CSV columns must agree too
                have, want = data.parse.to_dict(), self.parse.to_dict()
                for k in want:
                    if k != "label" and have[k] != want[k]:
                        raise ConfigError(f"the data was parsed with {opt(k, have[k])} but "
                                          f"the model was trained with {opt(k, want[k])}")
            return [as_blocks(data)]
        from ._io._stream import TextBlocks

        paths = [data] if isinstance(data, str) else list(data)
        return [TextBlocks(p, self.parse, need_label=False) for p in paths]

    def predict_blocks(self, data: Dataset | Blocks | Sequence[str] | str, *,
                       vw_float: bool = False) -> Iterator[tuple[Block, np.ndarray]]:
        """(block, raw scores of its examples) for every block of the data, in order: what
        a caller that writes predictions of a file of any size iterates over.

        Parameters
        ----------
        data
            A :class:`Dataset`, :class:`Blocks`, a list of text lines, or a file path (parsed with
            the model's own options).
        vw_float
            Sum each example's score as ``vw -t`` does, in float (each product rounded to
            float): the digits VW prints, where a float64 sum (the default) can differ in
            the 6th digit on examples of thousands of features.
        """
        from ._modelnb import predict_scores, scores_float

        score = scores_float if vw_float else predict_scores
        full = self.dense()
        const = CONSTANT_HASH & self.parse.mask
        for part in self._blocks(data):
            first = self.parse.format == "csv" and not isinstance(part, DatasetBlocks)
            for blk in part:
                if first:  # decided on a file's first block, before any output
                    self._check_columns(blk, full, const, part.sources[0])
                    first = False
                yield blk, score(blk.indptr, blk.indices, blk.values, full)

    def _check_columns(self, blk: Block, full: np.ndarray, const: int, path: str) -> None:
        """A CSV file (which may lack the label column) none of whose columns the model
        knows is the wrong file (a VW file, another table): say so instead of predicting
        the bias for every row."""
        if not np.all(np.isnan(blk.labels)):
            return  # it has the label column: a table of the model's kind
        idx = blk.indices[blk.indices != const]
        if len(idx) and not np.any(full[idx]):
            raise DataError(f"{path}: none of its columns are features of this model "
                            f"(trained on CSV with label column {self.parse.label!r}); is "
                            f"it the right file?")

    def decision_function(self, data: Dataset | Blocks | Sequence[str] | str) -> np.ndarray:
        """Raw scores (the linear predictor) of every example.

        Parameters
        ----------
        data
            A :class:`Dataset`, :class:`Blocks`, a list of text lines, or a file path (parsed with
            the model's own options).
        """
        parts = [s for _, s in self.predict_blocks(data)]
        return np.concatenate(parts) if parts else np.zeros(0)

    def predict(self, data: Dataset | Blocks | Sequence[str] | str) -> np.ndarray:
        """Probabilities of the positive class for logistic loss, raw scores otherwise.

        Parameters
        ----------
        data
            A :class:`Dataset`, :class:`Blocks`, a list of text lines, or a file path (parsed with
            the model's own options).
        """
        s = self.decision_function(data)
        from ._losses import LOSS_TABLE

        if LOSS_TABLE[self.loss].link == "logistic":
            return 1.0 / (1.0 + np.exp(-np.clip(s, -50, 50)))
        return s

    def evaluate(self, data: Dataset | Blocks | Sequence[str] | str) -> dict[str, float]:
        """logloss, accuracy, AUC, auPRC and examples on labelled data (streamed; only the
        labels and scores, 12 bytes an example, are kept for the ranking metrics).

        Parameters
        ----------
        data
            A :class:`Dataset`, :class:`Blocks`, a list of text lines, or a file path (parsed with
            the model's own options).
        """
        labels, scores = [], []
        for blk, s in self.predict_blocks(data):
            labels.append(blk.labels)
            scores.append(s)
        lab = np.concatenate(labels) if labels else np.zeros(0, np.float32)
        sc = np.concatenate(scores) if scores else np.zeros(0)
        return evaluate_scores(lab, sc, self.loss)

    def save(self, path: str) -> None:
        """Write atomically (temporary file in the same directory, then rename).

        Parameters
        ----------
        path
            The model file (``.npz``); ``LinearModel.load(path)`` reads it back. A failure is a
            :class:`~terascale.StorageError` naming the path.
        """
        # wall-clock timings (``*_s``) stay in memory: in the file they would make two
        # identical trainings write different bytes, and models must compare bitwise
        info = {k: v for k, v in self.info.items() if not k.endswith("_s")}
        header = {"format": MAGIC, "version": VERSION, "parse": self.parse.to_dict(),
                  "loss": self.loss, "info": info}
        d = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            raise ConfigError(f"{path}: is a directory, cannot write the model there")
        special = ("/dev/", "/proc/")
        hop = (os.path.join(d, os.readlink(path)) if os.path.islink(path)
               else os.path.abspath(path))
        if (os.path.abspath(path).startswith(special) or hop.startswith(special)
                or (os.path.exists(path) and not os.path.isfile(path))):
            # renaming over /dev/null or /dev/stdout would replace the device or the link
            raise ConfigError(f"{path}: not a regular file; the model is written to a "
                              f"temporary file and renamed into place")
        if os.path.islink(path):  # write the link's target: the link stays
            path = os.path.realpath(path)
            d = os.path.dirname(path)
        try:
            fd, tmp = tempfile.mkstemp(prefix=".tmp-model-", suffix=".npz", dir=d)
        except OSError as e:
            raise ConfigError(f"{path}: cannot write the model: {e.strerror}") from None
        try:
            make_public(fd)
            with os.fdopen(fd, "wb") as f:
                extra = {} if self.adaptive is None else dict(
                    zip(("g2", "nrm", "scalars"), self.adaptive))
                if self.normalization is not None:
                    header["normalize"] = self.normalization[0]
                    extra.update(self.normalization[1])
                np.savez(PieceWriter(f), indices=self.indices, weights=self.weights,
                         header=np.frombuffer(json.dumps(header).encode(), np.uint8), **extra)
                f.flush()
                os.fsync(f.fileno())  # the data is on disk before the name points at it
            os.replace(tmp, path)
            fsync_dir(d)  # ... and the rename itself survives a power loss
        except BaseException as e:
            if os.path.exists(tmp):
                os.unlink(tmp)
            if isinstance(e, OSError):
                raise storage_error("cannot write the model", path, e) from None
            raise

    @classmethod
    def load(cls, path: str) -> LinearModel:
        """Read a model; a file that is not one, or of a newer version, is a clear error.

        Parameters
        ----------
        path
            A file written by :meth:`save`.
        """
        not_model = DataError(f"{path}: not a terascale linear model")
        if os.path.isdir(path):
            raise DataError(f"{path}: is a directory, not a model file")
        try:
            z = np.load(path, allow_pickle=False)
            if not isinstance(z, np.lib.npyio.NpzFile):  # a plain .npy array
                raise not_model
            with z:
                header = json.loads(bytes(z["header"]).decode())
                indices, weights = z["indices"], z["weights"]
                adaptive = (tuple(z[k] for k in ("g2", "nrm", "scalars"))
                            if "g2" in z.files else None)
                norm = ({k: z[k] for k in ("norm_indices", "norm_mean", "norm_std")}
                        if isinstance(header, dict) and "normalize" in header else None)
        except FileNotFoundError:
            raise DataError(f"{path}: no such model file") from None
        except PermissionError:
            raise DataError(f"{path}: cannot read the model file (permission denied)") from None
        except (OSError, KeyError, ValueError, EOFError, zipfile.BadZipFile,
                UnicodeDecodeError):
            raise not_model from None
        if not isinstance(header, dict) or header.get("format") != MAGIC:
            raise not_model
        if int(header.get("version", 0)) > VERSION:
            raise ConfigError(f"-i {path}: model version {header['version']} is newer than "
                              f"this terascale reads ({VERSION}); upgrade terascale")
        try:
            parse = ParseOptions.from_dict(header["parse"])
            loss = str(header["loss"])
        except (KeyError, TypeError) as e:
            raise DataError(f"{path}: model header lacks {e}") from None
        from ._losses import LOSSES

        if (loss not in LOSSES or indices.shape != weights.shape or indices.ndim != 1
                or (len(indices) and int(indices.max()) >> parse.bits)):
            raise DataError(f"{path}: corrupt terascale linear model (loss {loss!r}, "
                            f"{len(indices)} indices for {parse.bits} bits)")
        if adaptive is not None and not (adaptive[0].shape == adaptive[1].shape
                                         == indices.shape and adaptive[2].ndim == 1):
            raise DataError(f"{path}: corrupt terascale linear model (adaptive state of "
                            f"{len(adaptive[0])} weights for {len(indices)} indices)")
        model = cls(indices=indices, weights=weights, parse=parse, loss=loss,
                    info=header.get("info", {}), adaptive=adaptive)  # type: ignore[arg-type]
        if norm is not None:
            model.normalization = (header["normalize"], norm)
        return model

    def __repr__(self) -> str:
        return (f"LinearModel(loss={self.loss!r}, bits={self.bits}, "
                f"nonzero={len(self.weights)}, quadratic={list(self.parse.quadratic)})")
