"""The one table of losses (:data:`LOSS_TABLE`, a :class:`Loss` per row) and the codes the
kernels read; the kernels themselves are :mod:`._losses`, which re-exports these names.

Apart so that a process that only checks options (the launcher of ``-n N`` workers, which
learns nothing itself) reads the table without importing numba (a fifth of a second of its
start-up, before the first worker starts).
"""

from __future__ import annotations

from array import array
from typing import NamedTuple

from .._errors import ConfigError

__all__ = ["FIXED_RANGE", "LOSSES", "LOSS_TABLE", "RAW_LABELS", "VW_DEFAULT_LOSS", "Loss",
           "check_parameters", "loss_code", "loss_spec", "takes_tau"]


class Loss(NamedTuple):
    """One loss, as every path sees it (a row of :data:`LOSS_TABLE`).

    A front end reads the row rather than the loss's name: ``link == "logistic"`` for
    calibrated probabilities, ``classes`` for labels that are classes, ``metric`` for what
    ``evaluate`` reports; so a new loss needs no change there.

    Parameters
    ----------
    code
        The loss's code in the numba kernels of ``terascale.linear``.
    vw_name
        Vowpal Wabbit's name for it (``--loss_function``).
    link
        The link of its predictions: ``"identity"`` or ``"logistic"`` (probabilities).
    classes
        Whether labels are classes read by their sign (-1/+1, 0/1), else numbers.
    metric
        The metric ``evaluate`` reports: ``"logloss"``, ``"mse"``, ``"hinge"`` or
        ``"quantile"``.
    batch
        Whether the batch phase (L-BFGS/CG, which needs a smooth objective or at least a
        subgradient it can line-search) takes it.
    clip
        How the online pass clips a prediction: ``"fixed"`` to [-50, 50], ``"labels"`` to
        the labels' range, ``"labels50"`` to the labels' range widened to [-50, 50].
    curvature
        The batch form's largest second derivative (L-BFGS's first scaling; 0 for none).
    best_constant
        How VW's closing block finds the best constant prediction (``get_best_constant``):
        ``"mean"`` the weighted mean label, ``"log_odds"`` the log-odds of two labels,
        ``"majority"`` the label of more weight, ``"quantile"`` the one of two labels at
        the tau-quantile; ``""`` none (VW prints none).
    counts
        Whether labels are counts: VW learns nothing from a negative label and warns of
        it (``[warning]`` lines on standard output, where the progress table goes).
    warns
        The labels VW's loss function warns of where it computes the loss: ``"negative"``,
        ``"not -1 or 1"``, ``"outside [-1, 1]"``, or ``""`` none.
    warning
        VW's line then (``{}``: the label as VW's logger writes it).
    ranged
        Whether VW's ``get_loss`` of a prediction outside the label range it holds is the
        range edge's loss continued along its slope (the closing block's ``best
        constant's loss`` under ``-t``, whose range is the model's, not the labels').
    """

    code: int
    vw_name: str
    link: str
    classes: bool
    metric: str
    batch: bool
    clip: str
    curvature: float = 0.0
    best_constant: str = ""
    counts: bool = False
    warns: str = ""
    warning: str = ""
    ranged: bool = False


# The one table of losses: adding one is a row here, its branches in the kernels below
# (a code without a branch raises in the kernel, it never falls into another loss), and
# its tests (tests/linear/test_losses.py checks every row against every kernel, and that
# no module outside this one names a loss).
# numba's cache of the online pass (``_online._update.online_chunk``, which inlines these
# kernels and reads the rows' clip and label reading) is keyed by _online/_update.py's text
# alone: a changed kernel or row here needs a change there too (or a cleared
# ``__pycache__``), else the old kernel keeps running.
LOSS_TABLE = {
    "logistic": Loss(0, "logistic", "logistic", True, "logloss", True, "labels50", 0.25,
                     "log_odds", warns="outside [-1, 1]", warning="[warning] The label {} "
                     "is not in the range [-1,1] as the logistic loss function expects."),
    "squared": Loss(1, "squared", "identity", False, "mse", True, "labels", 2.0, "mean",
                    ranged=True),
    "hinge": Loss(2, "hinge", "identity", True, "hinge", True, "labels", 0.0, "majority",
                  warns="not -1 or 1", warning="[warning] The label {} is not -1 or 1 or in "
                  "[0,1] as the hinge loss function expects."),
    "quantile": Loss(3, "quantile", "identity", False, "quantile", False, "labels", 0.0,
                     "quantile"),
    # squared loss with plain SGD's step 2 (y - p) * rate in place of the importance-
    # invariant one (VW's --loss_function classic)
    "classic": Loss(4, "classic", "identity", False, "mse", False, "labels", 0.0, "mean"),
    # Poisson regression of counts on the log scale (VW's deviance; --link poisson gives
    # the rates exp(score))
    "poisson": Loss(5, "poisson", "identity", False, "mse", False, "labels50", counts=True,
                    warns="negative", warning="[warning] The poisson loss function expects "
                    "a label >= 0 but received '{}'."),
    # the asymmetric squared loss of the q-expectile: squared's loss, derivatives and step
    # weighted q where the prediction is above the label, 1 - q where below (VW's
    # --loss_function expectile --expectile_q Q, q in (0, 0.5])
    "expectile": Loss(6, "expectile", "identity", False, "mse", False, "labels"),
}
VW_DEFAULT_LOSS = "squared"  # VW's --loss_function when none is given
LOSSES = {name: loss.code for name, loss in LOSS_TABLE.items()}
# The low 3 bits of a kernel's loss code are the loss; RAW_LABELS (bit 3) asks the online
# pass to use labels as given (VW's reading: a logistic label in [-1, 1] is the soft label
# (y + 1) / 2, hinge takes y as it is) rather than by their sign (terascale linear train's
# reading: 0/1 labels are two classes); bits 4.. carry quantile's tau or expectile's q in
# millionths.
RAW_LABELS = 8
_TAU = 16
# bit 40 asks the online pass to keep the prediction range the state starts with, where it
# otherwise widens it to every label learned from (VW's --min_prediction/--max_prediction)
FIXED_RANGE = 1 << 40
# bit 41 asks it to start the logistic and poisson losses' range at the state's (the
# header's range of -i's VW model, which VW reads over the [-50, 50] they start from) and
# clip to it, widened to the labels learned from, not to [-50, 50] as well
HEADER_RANGE = 1 << 41


_CLIPS = ("fixed", "labels", "labels50")
# the rows as the online kernel reads them, by code (-1: no loss has the code); int64
# buffers, which the compiled learner reads as they are (numba's kernels: ``_losses``'
# numpy copies)
_BY_SIGN = array("q", [-1] * 8)
_CLIP = array("q", [-1] * 8)
for _loss in LOSS_TABLE.values():
    _BY_SIGN[_loss.code] = int(_loss.classes)
    _CLIP[_loss.code] = _CLIPS.index(_loss.clip)
del _loss


def loss_spec(name: str, what: str = "loss") -> Loss:
    """The table's row of loss ``name``; an unknown name is a ConfigError naming ``what``
    (the parameter or flag it came from) and the losses there are."""
    from ._names import opt

    try:
        return LOSS_TABLE[name]
    except (KeyError, TypeError):
        raise ConfigError(f"{opt(what)} must be one of {', '.join(LOSS_TABLE)}, not "
                          f"{name!r}") from None


def takes_tau(name: str, what: str = "loss") -> bool:
    """Whether loss ``name`` reads ``--quantile_tau`` (VW refuses the option beside any
    other loss); an unknown name is :func:`loss_spec`'s error."""
    loss_spec(name, what)
    return name == "quantile"


def check_parameters(name: str, *, tau: float, q: float | None) -> None:
    """A ConfigError where loss ``name``'s parameter is outside its range: quantile's tau
    in (0, 1) (0.5 unless given), expectile's q in (0, 0.5], which must be given (as VW
    requires it: q = 0.5 is half the squared loss, no default a user would mean)."""
    from ._names import opt

    if not 0.0 < tau < 1.0:
        raise ConfigError(f"{opt('quantile_tau')} must be in (0, 1), not {tau}")
    if name == "expectile" and (q is None or not 0.0 < q <= 0.5):
        raise ConfigError(f"{opt('loss', 'expectile')} needs {opt('expectile_q')} in "
                          f"(0, 0.5]" + ("" if q is None else f", not {q}"))


def loss_code(name: str, *, raw_labels: bool = False, tau: float = 0.5,
              q: float | None = 0.5, fixed_range: bool = False,
              header_range: bool = False) -> int:
    """The kernel code of loss ``name`` (with VW's label reading; quantile's tau;
    expectile's q; a fixed prediction range; a range that starts at the state's)."""
    code = LOSSES[name] + (RAW_LABELS if raw_labels else 0) + (FIXED_RANGE if fixed_range
                                                               else 0)
    if header_range:
        code += HEADER_RANGE
    if name == "quantile":
        code += _TAU * round(tau * 1_000_000)
    elif name == "expectile":
        check_parameters(name, tau=tau, q=q)
        code += _TAU * round((q or 0.0) * 1_000_000)
    return code
