"""The path that pickles written before ``linear/`` had folders give Dataset and ParseOptions:
importing it gives :mod:`._io._dataset` itself (the same classes), on first use only."""

import sys

from ._io import _dataset

sys.modules[__name__] = _dataset
