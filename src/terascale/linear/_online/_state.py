"""The online learner's state beside its per-feature arrays, as named fields.

VW keeps these few numbers in its learner: the examples' total weight and their
normalized squared norms (Ross, Mineiro & Langford, *Normalized Online Learning*, UAI
2013: the update's global scale), the lazy L2 contraction and L1 gravity (Langford, Li &
Zhang, *Sparse Online Learning via Truncated Gradient*, JMLR 2009), the range of labels
seen (predictions are clipped to it) and the update multiplier derived from the first two.
They live in one float64 array so that the numba kernels update them in place, the
workers' allreduce sums them, and a model saves them; every reader and writer names a
field by the constants below, never by its position.
"""

from __future__ import annotations

from ..._lazy import lazy_module

np = lazy_module("numpy", globals(), "np")

__all__ = ["CONTRACTION", "GRAVITY", "MAX_LABEL", "MIN_LABEL", "STATE_SIZE", "SUM_NORM_X",
           "TOTAL_WEIGHT", "UPDATE_MULTIPLIER", "new_state", "state_values"]

# The fields' places (numba reads them as constants: never renumber them, a saved model's
# state and numba's cached kernels hold this order).
TOTAL_WEIGHT = 0       # the examples' total importance weight (VW's t)
SUM_NORM_X = 1         # sum of weight x normalized |x|^2 (VW's normalized_sum_norm_x)
CONTRACTION = 2        # lazy L2: every weight is w * CONTRACTION
GRAVITY = 3            # lazy L1: every weight is moved GRAVITY towards 0 first
MIN_LABEL = 4          # the labels' range (predictions are clipped to it)
MAX_LABEL = 5
UPDATE_MULTIPLIER = 6  # the normalized update's global scale, from the first two
STATE_SIZE = 7


def state_values(min_label: float = 0.0, max_label: float = 0.0) -> list[float]:
    """A fresh learner's state as a list: no examples, no regularization applied yet, the
    label range ``[min_label, max_label]`` (VW's starts empty at 0, 0 and widens)."""
    s = [0.0] * STATE_SIZE
    s[CONTRACTION] = 1.0
    s[MIN_LABEL], s[MAX_LABEL] = min_label, max_label
    s[UPDATE_MULTIPLIER] = 1.0
    return s


def new_state(min_label: float = 0.0, max_label: float = 0.0) -> np.ndarray:
    """:func:`state_values` as the float64 array the kernels update."""
    return np.array(state_values(min_label, max_label), np.float64)
