"""Arrays with an explicit page policy (terascale._pages): the kernel's view of the mapping
(/proc/self/smaps), and that the arrays behave as numpy's zeros."""

import mmap
import os

import numpy as np
import pytest

from terascale import _pages
from terascale.linear._colindex import HashIndex
from terascale.linear._online._firstpass import LocalColumns, _DenseRows, _sort_columns

needs_smaps = pytest.mark.skipif(
    not os.path.exists("/proc/self/smaps") or not hasattr(mmap, "MADV_HUGEPAGE"),
    reason="needs Linux's /proc/self/smaps and madvise(MADV_HUGEPAGE)")


def _thp_enabled() -> str:
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return f.read()
    except OSError:
        return "[never]"


def _mapping(a: np.ndarray) -> dict[str, str]:
    """The smaps fields of the mapping that holds ``a``'s first byte."""
    addr = a.__array_interface__["data"][0]
    fields: dict[str, str] = {}
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                if inside:
                    break
                inside = lo <= addr < hi
                if inside:
                    fields["range"] = head
            elif inside:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
    assert fields, f"no mapping holds address {addr:#x}"
    return fields


@needs_smaps
@pytest.mark.parametrize("huge, flag, other", [(True, "hg", "nh"), (False, "nh", "hg")])
def test_the_mapping_carries_the_policy_asked(huge, flag, other):
    a = _pages.zeros((8 << 20) // 4, np.float32, huge=huge)  # 8 MiB: numpy would ask hg
    fields = _mapping(a)
    flags = fields["VmFlags"].split()
    assert flag in flags and other not in flags
    assert "sh" not in flags  # private: shared anonymous memory (shmem) ignores the advice
    if not huge:  # no huge page may back it, whatever the host's THP setting
        assert fields.get("THPeligible", "0") == "0"
    elif "[never]" not in _thp_enabled():
        assert fields.get("THPeligible") == "1"
    a[::1024] = 1.0  # touch it: still the same mapping, still the same policy
    assert flag in _mapping(a)["VmFlags"].split()


def test_arrays_are_zeroed_aligned_writable_and_outlive_their_mapping_object():
    for shape, dtype in [(0, np.float64), (1, np.uint8), ((3, 5), np.float32),
                         (1_000_003, np.uint64)]:
        a = _pages.zeros(shape, dtype, huge=False)
        dims = (shape,) if isinstance(shape, int) else shape
        assert a.shape == dims and a.dtype == dtype and a.flags.c_contiguous
        assert a.flags.writeable and not a.any()
        if a.size:
            assert a.__array_interface__["data"][0] % mmap.PAGESIZE == 0
    a = _pages.zeros(1 << 20, np.float64, huge=True)
    a[-1] = 2.5
    b = a[10:]  # the view keeps the mapping alive after the array goes
    del a
    assert b[-1] == 2.5 and b.sum() == 2.5


def test_grown_keeps_the_values_and_zeroes_the_rest():
    old = np.arange(1, 1001, dtype=np.float32)
    new = _pages.grown(old, 5000)
    assert new.dtype == old.dtype and len(new) == 5000
    assert np.array_equal(new[:1000], old) and not new[1000:].any()
    assert np.array_equal(_pages.grown(old, 1000), old)
    with pytest.raises(ValueError, match="below the array's 1000 entries"):
        _pages.grown(old, 999)


@needs_smaps
def test_the_first_pass_grows_on_small_pages_and_the_cache_pass_maps_huge():
    cols = LocalColumns(28)  # -b 28: the hashed map, grown as columns appear
    cols(np.arange(0, 3 << 20, 3, dtype=np.uint32))
    assert "nh" in _mapping(cols.hash.table)["VmFlags"].split()
    assert "nh" in _mapping(cols.order)["VmFlags"].split()
    rows = _DenseRows(1 << 20)  # the dense rows: written first during the pass too
    assert "nh" in _mapping(rows.rows)["VmFlags"].split()
    full = HashIndex(1 << 20)  # the cache pass's map, at full size from the start
    assert "hg" in _mapping(full.table)["VmFlags"].split()


def test_columns_sorted_by_index_as_argsort_sorts_them():
    rng = np.random.default_rng(3)
    idx = rng.choice(1 << 28, 200_000, replace=False).astype(np.uint32)
    srt, perm = _sort_columns(idx)
    ref = np.argsort(idx)
    assert np.array_equal(perm, ref) and np.array_equal(srt, idx[ref])
    assert len(_sort_columns(idx[:0])[0]) == 0
