"""The path that pickles written before ``linear/`` had folders give the scikit-learn estimators:
importing it gives :mod:`._front._sklearn` itself (the same classes), on first use only."""

import sys

from ._front import _sklearn

sys.modules[__name__] = _sklearn
