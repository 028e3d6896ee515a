"""Vowpal Wabbit compatibility: its text parser (numba and C), flags, model format, text
outputs, ``terascale vw`` and the VW-only learners behind it."""

# the compiled core (``_vwfast.c`` with ``_vwlearn.c`` and ``_vwbits.c``: VW text, VW's
# update, the cache's kernels) and the calling convention every caller speaks:
# ``terascale._cext.load(*VWFAST)``
VWFAST = ("terascale.linear._vw._vwfast", 20)
