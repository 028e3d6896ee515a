"""Vowpal Wabbit compatibility: its text parser (numba and C), flags, model format, text
outputs, ``terascale vw`` and the VW-only learners behind it."""

# the compiled core (``_vwfast.c`` with ``_vwlearn.c``, ``_vwbits.c``, ``_vwtable.c`` and
# ``_vwsparse.c``: VW text, VW's update, the cache's kernels, the one-worker run's counts
# and records, the batch learner's sparse products)
# and the calling convention every caller speaks: ``terascale._cext.load(*VWFAST)``
VWFAST = ("terascale.linear._vw._vwfast", 28)


def dense_table(bits: int, *width: int):
    """The compiled learner's zeroed table of ``2**bits`` rows of ``width`` float32 (VW's
    weight array), on 4 KiB pages: a row the data never touches costs no memory, as in
    VW's array. numpy would ask for huge pages for an array this size, and then one
    feature in a 2 MiB page makes the whole page resident (2.4x VW's peak at ``-b 24``
    on data of ~1M distinct features, where VW's touched pages are a third of its array)."""
    import numpy as np

    from ..._pages import zeros

    return zeros((1 << bits, *width), np.float32, huge=False)
