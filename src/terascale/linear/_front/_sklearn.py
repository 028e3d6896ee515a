"""scikit-learn estimators over the Terascale learner: fit / predict / predict_proba /
partial_fit, on dense or scipy-sparse matrices (column j is feature index j, masked to
``bits``; the constant feature is added). Inside a ``terascale run`` job, ``fit`` trains on
this worker's rows and every worker ends with the same model.

scikit-learn is optional: the estimators follow its protocol (``get_params``/``set_params``,
``__sklearn_tags__``, ``__sklearn_is_fitted__``, ``classes_``, ``n_features_in_``) without
inheriting from ``BaseEstimator``, so ``clone``, ``Pipeline``, ``cross_val_score`` and
``GridSearchCV`` work with it installed and ``import terascale.linear`` does not need it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..._errors import ConfigError, DataError
from .._io._dataset import Dataset, ParseOptions
from .._io._hashing import CONSTANT_HASH
from .._model import LinearModel
from .._online._update import new_state, online_chunk, sync_weights
from ._validate import check_target, check_weights, check_X, check_y

__all__ = ["LinearClassifier", "LinearRegressor"]


def _to_dataset(X: Any, y: Any, bits: int, sample_weight: Any = None) -> Dataset:
    import scipy.sparse as sp

    m = sp.csr_matrix(X, dtype=np.float32)
    m.eliminate_zeros()
    bad = np.flatnonzero(~np.isfinite(m.data))  # one NaN would make every weight NaN
    if len(bad):
        row = int(np.searchsorted(m.indptr, bad[0], side="right")) - 1
        raise DataError(f"X has a NaN or infinite value (or one beyond float32) at row "
                        f"{row}, column {int(m.indices[bad[0]])}")
    n = m.shape[0]
    mask = (1 << bits) - 1
    counts = np.diff(m.indptr) + 1
    indptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    indices = np.empty(indptr[-1], np.uint32)
    values = np.empty(indptr[-1], np.float32)
    const_pos = indptr[1:] - 1
    feat = np.ones(indptr[-1], bool)
    feat[const_pos] = False
    indices[feat] = m.indices.astype(np.uint32) & mask
    values[feat] = m.data
    indices[const_pos] = CONSTANT_HASH & mask
    values[const_pos] = 1.0
    labels = (np.full(n, np.nan, np.float32) if y is None
              else np.asarray(y, dtype=np.float32).reshape(-1))
    if y is not None and not np.all(np.isfinite(labels)):
        raise DataError(f"y has a NaN or infinite value at row "
                        f"{int(np.flatnonzero(~np.isfinite(labels))[0])}")
    w = (np.ones(n, np.float32) if sample_weight is None
         else np.asarray(sample_weight, np.float32))
    return Dataset(indptr=indptr, indices=indices, values=values, labels=labels, weights=w,
                   bits=bits)


_PARAMS = ("bits", "passes", "bfgs", "cg", "learning_rate", "power_t", "l1", "l2", "average",
           "holdout", "comm")


def _not_fitted(est: Any) -> Exception:
    msg = (f"This {type(est).__name__} instance is not fitted yet; call fit (or "
           f"partial_fit) first")
    try:
        from sklearn.exceptions import NotFittedError
    except ImportError:  # pragma: no cover - scikit-learn is optional
        return AttributeError(msg)
    return NotFittedError(msg)


class _Base:
    _loss = "squared"
    _estimator_type = "regressor"  # scikit-learn < 1.6 reads this instead of the tags
    # partial_fit's adaptive state (weights, squared gradients, norms, scalars); None after fit
    _online: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None

    def __init__(self, *, bits: int = 20, passes: int = 1, bfgs: int = 0, cg: int = 0,
                 learning_rate: float = 0.5, power_t: float = 0.5, l1: float = 0.0,
                 l2: float | None = None, average: str = "auto",
                 holdout: float | None = None, comm: Any = None) -> None:
        self.bits = bits
        self.passes = passes
        self.bfgs = bfgs
        self.cg = cg
        self.learning_rate = learning_rate
        self.power_t = power_t
        self.l1 = l1
        self.l2 = l2
        self.average = average
        self.holdout = holdout
        self.comm = comm

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The estimator's parameters, as scikit-learn's ``get_params``.

        Parameters
        ----------
        deep
            Ignored (no nested estimators); scikit-learn's signature.
        """
        return {k: getattr(self, k) for k in _PARAMS}

    def set_params(self, **params: Any) -> _Base:
        """Set parameters by name, as scikit-learn's ``set_params``; returns the estimator.

        Parameters
        ----------
        params
            Parameter names and values (those of the constructor).
        """
        for k, v in params.items():
            if k not in _PARAMS:

                raise ConfigError(f"{type(self).__name__} has no parameter {k!r} (it has "
                                  f"{', '.join(_PARAMS)})")
            setattr(self, k, v)
        return self

    def __repr__(self) -> str:
        changed = {k: v for k, v in self.get_params().items() if v != type(self)().__dict__[k]}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in changed.items())})"

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "model_")

    def __sklearn_tags__(self) -> Any:
        """scikit-learn >= 1.6 asks every estimator for its tags (only called with it)."""
        from sklearn.utils import ClassifierTags, InputTags, RegressorTags, Tags, TargetTags

        clf = self._estimator_type == "classifier"
        return Tags(estimator_type=self._estimator_type,
                    target_tags=TargetTags(required=True),
                    classifier_tags=ClassifierTags(multi_class=False) if clf else None,
                    regressor_tags=None if clf else RegressorTags(),
                    input_tags=InputTags(sparse=True))

    def _check_X(self, X: Any) -> Any:
        """X validated (``_validate.check_X``) and as wide as fit's."""
        if not hasattr(self, "model_"):
            raise _not_fitted(self)
        X = check_X(X)
        if X.shape[1] != self.n_features_in_:

            raise ConfigError(f"X has {X.shape[1]} features, but {type(self).__name__} is "
                              f"expecting {self.n_features_in_} features as input")
        return X

    def _labels(self, y: Any, classes: Any = None, reset: bool = True) -> np.ndarray:
        try:
            return np.asarray(y, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError) as e:
            raise DataError(f"y: a regression target must be numeric ({e})") from None

    def _check_bits(self) -> None:
        # before any array is sized by 1 << bits: bits=99 was an OverflowError deep in numpy
        if isinstance(self.bits, bool) or not isinstance(self.bits, (int, np.integer)):
            raise ConfigError(f"bits= must be an integer, not {self.bits!r}")
        ParseOptions(bits=int(self.bits))  # the range check, naming bits=

    def fit(self, X: Any, y: Any, sample_weight: Any = None) -> _Base:
        """Train on ``X`` and ``y`` (the whole recipe: online passes, then L-BFGS or CG when asked); returns the estimator.

        Parameters
        ----------
        X
            The features: an array or sparse matrix of shape ``(n_samples, n_features)`` (hashed by
            column index).
        y
            The labels (two values for the classifier, numbers for the regressor).
        sample_weight
            Per-example importance weights (default None: all 1).
        """
        from .._train import train

        self._check_bits()
        X = check_X(X)
        y = check_y(y, X.shape[0], type(self).__name__)
        sw = check_weights(sample_weight, X.shape[0])
        ds = _to_dataset(X, self._labels(y), self.bits, sw)
        self.n_features_in_ = int(X.shape[1])
        opts = {k: v for k, v in self.get_params().items() if k != "comm"}
        # comm=None: train reuses a communicator this process opened (and keeps it open)
        self.model_ = train(ds, comm=self.comm, loss=self._loss, **opts)
        self._online = None
        return self

    def partial_fit(self, X: Any, y: Any, sample_weight: Any = None, classes: Any = None,
                    **_: Any) -> _Base:
        """One online step over these rows, continuing the adaptive state (single worker).
        As in scikit-learn, ``classes`` (both labels) is needed on the first call when its
        rows may hold only one of them.

        Parameters
        ----------
        X
            The features: an array or sparse matrix of shape ``(n_samples, n_features)`` (hashed by
            column index).
        y
            The labels (two values for the classifier, numbers for the regressor).
        sample_weight
            Per-example importance weights (default None: all 1).
        classes
            Both labels (classifier; needed on the first call when its rows may hold only one;
            ignored by the regressor).
        """
        from .._io._dataset import ParseOptions
        from .._losses import LOSSES

        self._check_bits()
        online = getattr(self, "_online", None)
        fitted = online is None and hasattr(self, "model_")
        X = self._check_X(X) if hasattr(self, "model_") else check_X(X)
        y = check_y(y, X.shape[0], type(self).__name__)
        sw = check_weights(sample_weight, X.shape[0])
        ds = _to_dataset(X, self._labels(y, classes, reset=online is None and not fitted),
                         self.bits, sw)
        d = 1 << self.bits
        if online is None:
            # after fit, continue from its weights (the adaptive sums start afresh)
            w0 = self.model_.dense().astype(np.float64) if fitted else np.zeros(d)
            online = (w0, np.zeros(d), np.zeros(d), new_state())
            self._online = online
            self.n_features_in_ = int(X.shape[1])
        w, g2, nrm, state = online
        acc = np.zeros(8)
        # uint32 columns and float64 arrays: the kernel a worker's mixed pass compiles
        online_chunk(ds.indptr, np.asarray(ds.indices, np.uint32), ds.values, ds.labels,
                     ds.weights, np.zeros(len(ds), np.bool_), 0, len(ds), w, g2, nrm, state,
                     LOSSES[self._loss], self.learning_rate, self.power_t, self.l1,
                     self.l2 or 0.0, acc, None)
        wc = w.copy()
        st = state.copy()
        sync_weights(wc, st)
        nz = np.flatnonzero(wc)
        self.model_ = LinearModel(indices=nz.astype(np.uint32), weights=wc[nz],
                                  parse=ParseOptions(bits=self.bits), loss=self._loss)
        return self

    def _scores(self, X: Any) -> np.ndarray:
        X = self._check_X(X)
        return self.model_.decision_function(_to_dataset(X, None, self.bits))

    def _xfail_checks(self) -> dict[str, str]:
        """scikit-learn's estimator checks that fail by design, with the reason (pass it as
        ``parametrize_with_checks(..., expected_failed_checks=lambda e: e._xfail_checks())``;
        scikit-learn < 1.6 reads it from ``_more_tags``)."""
        why = ("an importance weight k is one importance-aware online update (Karampatziakis "
               "& Langford, UAI 2011), not k repeated updates, so online passes over "
               "weighted rows differ from passes over repeated rows; the batch optimum "
               "(bfgs=) is the same for both")
        return {"check_sample_weight_equivalence_on_dense_data": why,
                "check_sample_weight_equivalence_on_sparse_data": why}

    def _more_tags(self) -> dict[str, Any]:
        return {"_xfail_checks": self._xfail_checks(), "binary_only": True,
                "requires_y": True}


class LinearClassifier(_Base):
    """Binary logistic regression trained by terascale's linear learner, as a scikit-learn
    estimator (labels: any two values; ``classes_`` sorted).

    Features are hashed (``bits``) and learned with VW's online update, optionally followed
    by L-BFGS; ``predict_proba`` gives probabilities, ``partial_fit`` continues the online
    learner on a new batch.

    :param bits: hash bits; the model has ``2**bits`` weights (default 20).
    :param passes: online passes over the data (default 1).
    :param bfgs: passes of L-BFGS after the online passes, warm-started from their weights
        (default 0: none); the recipe of Agarwal et al. 2014 is ``passes=1, bfgs=20``.
    :param cg: passes of preconditioned conjugate gradient instead (default 0; excludes bfgs).
    :param learning_rate: online learning rate of VW's adaptive update (default 0.5).
    :param power_t: exponent of its decay (default 0.5).
    :param l1: L1 strength, online passes only (default 0.0).
    :param l2: L2 strength (default None: 0 online, 1.0 in the batch phase).
    :param average: how workers' learners are combined: ``"auto"`` (default: chained
        before a batch phase, weighted otherwise), ``"weighted"``, ``"uniform"`` or
        ``"chain"`` (see :class:`TrainOptions`).
    :param holdout: fraction held out to stop the batch phase (default None: 0.1 with
        bfgs/cg or several passes, else 0).
    :param comm: the communicator to train on (default None: the one this process opened,
        else ``terascale.init()``; inside a job every worker fits on its rows).

    Every option of :class:`TrainOptions` not listed here keeps its default. Bad input is a
    ``ValueError`` with scikit-learn's messages; both estimators pass scikit-learn's
    ``check_estimator``.
    """

    _loss = "logistic"
    _estimator_type = "classifier"

    def _labels(self, y: Any, classes: Any = None, reset: bool = True) -> np.ndarray:
        """+1 for ``classes_[1]``, -1 for ``classes_[0]``; ``classes_`` is set by fit and by
        the first partial_fit (from ``classes`` when given), later batches must use them."""
        from ..._errors import ConfigError

        y = np.asarray(y).reshape(-1)
        if reset or getattr(self, "classes_", None) is None:
            given = y if classes is None else np.asarray(classes)
            check_target(given)  # a continuous or multiclass target: scikit-learn's errors
            found = np.unique(given)
            if len(found) != 2:
                hint = (" (pass classes=[a, b] to the first partial_fit)"
                        if classes is None and len(found) == 1 else "")
                raise ConfigError(f"{type(self).__name__} is binary: it needs exactly two "
                                  f"classes, got {len(found)} class"
                                  f"{'' if len(found) == 1 else 'es'}: "
                                  f"{found[:5].tolist()}{hint}")
            self.classes_ = found
        unknown = ~np.isin(y, self.classes_)
        if unknown.any():
            raise ConfigError(f"label {y[unknown][:1].tolist()[0]!r} is not one of the classes "
                              f"{self.classes_.tolist()}")
        return np.where(y == self.classes_[1], 1.0, -1.0)

    def decision_function(self, X: Any) -> np.ndarray:
        """Raw scores (log-odds of ``classes_[1]``).

        Parameters
        ----------
        X
            The features: an array or sparse matrix of shape ``(n_samples, n_features)`` (hashed by
            column index).
        """
        return self._scores(X)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Probabilities of ``classes_[0]`` and ``classes_[1]``, shape ``(n_samples, 2)``.

        Parameters
        ----------
        X
            The features: an array or sparse matrix of shape ``(n_samples, n_features)`` (hashed by
            column index).
        """
        s = self._scores(X)
        p = 1.0 / (1.0 + np.exp(-np.clip(s, -50, 50)))
        return np.column_stack([1 - p, p])

    def predict(self, X: Any) -> np.ndarray:
        """The predicted label of each row (from ``classes_``).

        Parameters
        ----------
        X
            The features: an array or sparse matrix of shape ``(n_samples, n_features)`` (hashed by
            column index).
        """
        s = self._scores(X)  # raises NotFittedError before classes_ is read
        return self.classes_[(s > 0).astype(int)]

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """Mean accuracy (weighted by ``sample_weight`` when given).

        Parameters
        ----------
        X
            The features: an array or sparse matrix of shape ``(n_samples, n_features)`` (hashed by
            column index).
        y
            The true labels.
        sample_weight
            Per-example importance weights (default None: all 1).
        """
        return float(np.average(self.predict(X) == np.asarray(y).reshape(-1),
                                weights=sample_weight))


class LinearRegressor(_Base):
    """Least-squares linear regression trained by terascale's linear learner, as a
    scikit-learn estimator (the same learner and options as :class:`LinearClassifier`).

    :param bits: hash bits; the model has ``2**bits`` weights (default 20).
    :param passes: online passes over the data (default 1).
    :param bfgs: passes of L-BFGS after the online passes, warm-started from their weights
        (default 0: none); the recipe of Agarwal et al. 2014 is ``passes=1, bfgs=20``.
    :param cg: passes of preconditioned conjugate gradient instead (default 0; excludes bfgs).
    :param learning_rate: online learning rate of VW's adaptive update (default 0.5).
    :param power_t: exponent of its decay (default 0.5).
    :param l1: L1 strength, online passes only (default 0.0).
    :param l2: L2 strength (default None: 0 online, 1.0 in the batch phase).
    :param average: how workers' learners are combined: ``"auto"`` (default: chained
        before a batch phase, weighted otherwise), ``"weighted"``, ``"uniform"`` or
        ``"chain"`` (see :class:`TrainOptions`).
    :param holdout: fraction held out to stop the batch phase (default None: 0.1 with
        bfgs/cg or several passes, else 0).
    :param comm: the communicator to train on (default None: the one this process opened,
        else ``terascale.init()``; inside a job every worker fits on its rows).

    Every option of :class:`TrainOptions` not listed here keeps its default. Bad input is a
    ``ValueError`` with scikit-learn's messages; both estimators pass scikit-learn's
    ``check_estimator``.
    """

    _loss = "squared"

    def predict(self, X: Any) -> np.ndarray:
        """The predicted value of each row.

        Parameters
        ----------
        X
            The features: an array or sparse matrix of shape ``(n_samples, n_features)`` (hashed by
            column index).
        """
        return self._scores(X)

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """R^2 (weighted by ``sample_weight`` when given), as scikit-learn's.

        Parameters
        ----------
        X
            The features: an array or sparse matrix of shape ``(n_samples, n_features)`` (hashed by
            column index).
        y
            The true values.
        sample_weight
            Per-example importance weights (default None: all 1).
        """
        y = np.asarray(y, np.float64).reshape(-1)
        w = np.ones(len(y)) if sample_weight is None else np.asarray(sample_weight, np.float64)
        r = y - self.predict(X)
        mean = np.average(y, weights=w)
        return float(1 - (w @ (r * r)) / max(float(w @ ((y - mean) ** 2)), 1e-300))
