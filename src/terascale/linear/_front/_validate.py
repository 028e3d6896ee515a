"""Input checks of the scikit-learn estimators, with scikit-learn's own messages.

scikit-learn's tools (``check_estimator``, ``cross_val_score``, pipelines) expect an
estimator to refuse bad input with a ``ValueError`` whose message they recognize: complex
or empty data, 1-D X, NaN and infinities, X and y of different lengths, a continuous or
multiclass target for a binary classifier, a mis-shaped or all-zero ``sample_weight``, a
width that differs from ``fit``'s. With scikit-learn installed its ``check_array`` does
the array checks; without it (it is optional) a smaller version does. Every error is a
:class:`~terascale.DataError` (bad values) or :class:`~terascale.ConfigError` (bad
arguments), both ``ValueError`` s.
"""

from __future__ import annotations

import inspect
import warnings
from typing import Any

import numpy as np

from ..._errors import ConfigError, DataError

__all__ = ["check_target", "check_weights", "check_X", "check_y"]


def _sklearn_check_array() -> Any:
    try:
        from sklearn.utils import check_array
    except ImportError:  # scikit-learn is optional
        return None
    return check_array


def check_X(X: Any) -> Any:
    """X as a float ndarray or a CSR matrix; non-finite values are left for the row/column
    message of the dataset conversion."""
    import scipy.sparse as sp

    check_array = _sklearn_check_array()
    if check_array is not None:
        finite = ("ensure_all_finite" if "ensure_all_finite"
                  in inspect.signature(check_array).parameters else "force_all_finite")
        try:
            return check_array(X, accept_sparse="csr", dtype=(np.float64, np.float32),
                               **{finite: False})
        except ValueError as e:  # (a TypeError, such as a dict in X, stays one)
            raise DataError(str(e)) from None
    if sp.issparse(X):
        X = sp.csr_matrix(X)
        if np.iscomplexobj(X.data):
            raise DataError("Complex data not supported")
    else:
        X = np.asarray(X)
        if np.iscomplexobj(X):
            raise DataError("Complex data not supported")
        if X.ndim != 2:
            raise DataError(f"Expected 2D array, got {X.ndim}D array instead. Reshape your "
                            f"data either using array.reshape(-1, 1) if your data has a "
                            f"single feature or array.reshape(1, -1) if it contains a "
                            f"single sample.")
        try:
            X = X.astype(np.float64)
        except ValueError as e:
            raise DataError(f"X: {e}") from None
    if X.shape[0] == 0 or X.shape[1] == 0:
        raise DataError(f"Found array with shape {X.shape}: at least one sample and one "
                        f"feature are required")
    return X


def check_y(y: Any, n: int, name: str) -> np.ndarray:
    """y as a 1-D array of ``n`` entries."""
    if y is None:
        raise ConfigError(f"{name} requires y to be passed, but the target y is None")
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        try:
            from sklearn.exceptions import DataConversionWarning as warning
        except ImportError:
            warning = UserWarning  # type: ignore[assignment,misc]
        warnings.warn("A column-vector y was passed when a 1d array was expected; it is "
                      "read as y.ravel()", warning, stacklevel=3)
        y = y.reshape(-1)
    if y.ndim != 1:
        raise DataError(f"y should be a 1d array, got an array of shape {y.shape} instead")
    if len(y) != n:
        raise DataError(f"Found input variables with inconsistent numbers of samples: "
                        f"[{n}, {len(y)}] (X has {n} rows, y has {len(y)})")
    return y


def check_target(y: np.ndarray) -> None:
    """A binary classifier's target: two classes, not a continuous or multiclass one."""
    try:
        from sklearn.utils.multiclass import type_of_target
    except ImportError:
        kind = "multiclass" if len(np.unique(y)) > 2 else "binary"
    else:
        try:
            kind = type_of_target(y, input_name="y", raise_unknown=True)
        except ValueError as e:
            raise DataError(str(e)) from None
    if kind == "continuous":
        raise DataError("Unknown label type: continuous. A binary classifier needs two "
                        "class labels, not a continuous target (use LinearRegressor)")
    if kind not in ("binary",):
        raise DataError(f"Only binary classification is supported. The type of the target "
                        f"is {kind}. (Train one LinearClassifier per class, e.g. with "
                        f"scikit-learn's OneVsRestClassifier.)")


def check_weights(sample_weight: Any, n: int) -> np.ndarray | None:
    """``sample_weight`` as n finite non-negative floats, not all zero (or None)."""
    if sample_weight is None:
        return None
    sw = np.asarray(sample_weight, dtype=np.float64)
    if sw.ndim == 0:
        sw = np.full(n, float(sw))
    if sw.shape != (n,):
        raise ConfigError(f"sample_weight.shape == {sw.shape}, expected {(n,)}!")
    if not np.all(np.isfinite(sw)) or np.any(sw < 0):
        raise ConfigError("sample_weight= must be finite and non-negative")
    if not np.any(sw > 0):
        raise ConfigError("Sample weights must contain at least one non-zero number "
                          "(sample_weight= is all zero: nothing to learn from)")
    return sw
