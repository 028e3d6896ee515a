"""The path that pickles written before ``linear/`` had folders give the block readers:
importing it gives :mod:`._io._blocks` itself (the same classes), on first use only."""

import sys

from ._io import _blocks

sys.modules[__name__] = _blocks
