"""Test metrics: logloss, accuracy, AUC and auPRC (area under the precision-recall curve).

AUC is the Mann-Whitney statistic with ties counted half; auPRC is average precision (the
step-wise sum of precision times recall increments over distinct score thresholds), the same
definitions as scikit-learn's ``roc_auc_score`` and ``average_precision_score``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["auc", "auprc", "evaluate_scores"]


def auc(y: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve of binary labels (``y > 0`` is positive).

    Parameters
    ----------
    y
        The labels.
    score
        Any score that grows with the positive class (raw scores or probabilities).
    """
    pos = np.asarray(y) > 0
    n1 = int(pos.sum())
    n0 = len(pos) - n1
    if n1 == 0 or n0 == 0:
        return float("nan")
    s = np.asarray(score, dtype=np.float64)
    order = np.argsort(s, kind="mergesort")
    ss = s[order]
    # average rank of ties
    _, first, counts = np.unique(ss, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks = np.empty(len(s))
    ranks[order] = np.repeat(avg, counts)
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


def auprc(y: np.ndarray, score: np.ndarray) -> float:
    """Average precision of binary labels (``y > 0`` is positive).

    Parameters
    ----------
    y
        The labels.
    score
        Any score that grows with the positive class.
    """
    pos = np.asarray(y) > 0
    n1 = int(pos.sum())
    if n1 == 0:
        return float("nan")
    s = np.asarray(score, dtype=np.float64)
    order = np.argsort(-s, kind="mergesort")
    ss, pp = s[order], pos[order]
    tp = np.cumsum(pp)
    last = np.r_[np.flatnonzero(np.diff(ss) != 0), len(ss) - 1]  # end of each tie group
    tp = tp[last]
    fp = (last + 1) - tp
    precision = tp / (tp + fp)
    recall = tp / n1
    return float(np.sum(np.diff(np.r_[0.0, recall]) * precision))


def evaluate_scores(labels: np.ndarray, scores: np.ndarray, loss: str = "logistic",
                    weights: np.ndarray | None = None) -> dict[str, float]:
    """Metrics of raw scores against labels; examples without a label (NaN) are left out.

    Parameters
    ----------
    loss
        The model's loss (a name of ``TrainOptions.loss``), which decides the metrics: a
        regression loss (labels read as numbers) reports ``mse``, and on 0/1 or -1/+1
        labels also the classification metrics; logistic loss reports ``logloss`` of its
        probabilities; ``accuracy`` thresholds scores at 0 (at 0.5 for a regression loss
        on 0/1 labels). An unknown name is a ConfigError.
    weights
        Per-example importance weights (default None: all 1).
    labels
        The labels (NaN: no label, left out).
    scores
        The raw scores, one per label.
    """
    from ._losses import loss_spec

    spec = loss_spec(loss)
    y = np.asarray(labels, dtype=np.float64)
    s = np.asarray(scores, dtype=np.float64)
    keep = ~np.isnan(y)
    y, s = y[keep], s[keep]
    wt = np.ones(len(y)) if weights is None else np.asarray(weights, np.float64)[keep]
    out: dict[str, float] = {"examples": int(len(y))}
    if len(y) == 0:
        return out
    if not spec.classes:
        out["mse"] = float(np.average((s - y) ** 2, weights=wt))
        if not np.all((y == 0) | (y == 1) | (y == -1)):
            return out
    pos = y > 0
    p = 1.0 / (1.0 + np.exp(-np.clip(s, -50, 50))) if spec.link == "logistic" else None
    if p is not None:
        pc = np.clip(p, 1e-15, 1 - 1e-15)
        # Typed locals: numpy's stubs give ufunc results an unknown dtype, which would make
        # ``pos * log(pc)`` a bool array to a type checker.
        log_p: npt.NDArray[np.float64] = np.log(pc)
        log_q: npt.NDArray[np.float64] = np.log1p(-pc)
        out["logloss"] = float(np.average(-(pos * log_p + (~pos) * log_q), weights=wt))
    thresh = 0.5 if not spec.classes and not np.any(y < 0) else 0.0
    out["accuracy"] = float(np.average((s > thresh) == pos, weights=wt))
    out["auc"] = auc(y, s)
    out["auprc"] = auprc(y, s)
    return out
