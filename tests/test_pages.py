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


def _resident_kib(a: np.ndarray) -> int:
    """KiB of ``a``'s pages in memory (``mincore``: adjacent mappings with the same flags
    are one mapping in smaps)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    page = mmap.PAGESIZE
    addr = a.__array_interface__["data"][0]
    pages = (a.nbytes + page - 1) // page
    vec = ctypes.create_string_buffer(pages)
    assert libc.mincore(addr, pages * page, vec) == 0, ctypes.get_errno()
    return sum(b & 1 for b in vec.raw) * page // 1024


def _prefault_threads() -> list:
    import threading

    return [t for t in threading.enumerate() if t.name == "terascale-prefault"]


def _wait_faulted(pf: _pages.Prefault, nbytes: int, deadline: float = 30.0) -> None:
    import time

    end = time.monotonic() + deadline
    while pf.faulted < nbytes and not pf.unsupported and time.monotonic() < end:
        time.sleep(0.005)


@needs_smaps
@pytest.mark.parametrize("huge", [True, False])
def test_prefault_makes_the_pages_resident_and_leaves_them_zero(huge):
    pf = _pages.Prefault(chunk=1 << 20)
    try:
        a = _pages.zeros((12 << 20) // 8, np.float64, huge=huge)
        b = _pages.zeros(3 << 20, np.uint8, huge=huge)
        assert _resident_kib(a) == 0 and _resident_kib(b) == 0  # untouched so far
        pf.add(a)
        pf.add(b)
        _wait_faulted(pf, a.nbytes + b.nbytes)
        if pf.unsupported:
            pytest.skip("the kernel has no MADV_POPULATE_WRITE (Linux 5.14+)")
        assert pf.faulted == a.nbytes + b.nbytes
        assert _resident_kib(a) * 1024 >= a.nbytes and _resident_kib(b) * 1024 >= b.nbytes
        assert not a.any() and not b.any()  # faulted in as zeroed pages, nothing written
        a[7] = 1.5
        assert a.sum() == 1.5
    finally:
        assert pf.close(10.0)
    assert not pf.running and not _prefault_threads()


def test_prefault_stops_at_once_and_skips_arrays_dropped_before_their_turn():
    import weakref

    pf = _pages.Prefault(chunk=1 << 20)
    big = _pages.zeros(64 << 20, np.uint8, huge=True)
    dropped = _pages.zeros(8 << 20, np.uint8, huge=True)
    gone = weakref.ref(dropped)
    pf.add(big)
    pf.add(dropped)
    del dropped  # the thread holds no reference between chunks: the array goes now
    assert gone() is None
    assert pf.close(10.0)  # within one chunk, not after the 72 MiB
    assert not pf.running and not _prefault_threads()
    assert pf.faulted <= big.nbytes
    pf.add(_pages.zeros(1 << 20, np.uint8, huge=False))  # after close: nothing starts
    assert not pf.running


@needs_smaps
def test_prefaulting_works_only_with_a_core_beyond_the_workers():
    cores = len(os.sched_getaffinity(0))
    with _pages.prefaulting(cores) as pf:  # as many workers as cores: no thread
        assert pf is None
        a = _pages.zeros(4 << 20, np.uint8, huge=False, prefault=True)
        assert _resident_kib(a) == 0 and not _prefault_threads()
    assert not _pages.spare_core(cores) and _pages.spare_core(cores - 1) == (cores > 1)
    if cores < 2:
        return
    with _pages.prefaulting(cores - 1) as pf:
        assert pf is not None
        a = _pages.zeros(4 << 20, np.uint8, huge=False, prefault=True)
        plain = _pages.zeros(4 << 20, np.uint8, huge=False)  # not asked: left alone
        _wait_faulted(pf, a.nbytes)
        if not pf.unsupported:
            assert _resident_kib(a) * 1024 >= a.nbytes and _resident_kib(plain) == 0
    assert not _prefault_threads()  # joined when the block ends, even on an error
    with pytest.raises(KeyError), _pages.prefaulting(cores - 1):
        _pages.zeros(64 << 20, np.uint8, huge=True, prefault=True)
        raise KeyError("boom")
    assert not _prefault_threads()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a core beyond 1 worker")
def test_a_pass_from_the_cache_learns_the_same_bits_with_its_pages_prefaulted(tmp_path,
                                                                              monkeypatch):
    # one worker on a multi-core host: the table and the weights are handed to the
    # thread (spied on here, not replaced), which is gone when train() returns; with no
    # spare core nothing is handed over; both learn the same model to the bit
    from terascale.linear import synthetic, train

    path = synthetic.write_wide(str(tmp_path / "w.vw"), 3000, seed=5, vocab=100_000)
    kw = dict(bits=18, holdout=0.0, cache_dir=str(tmp_path / "c"), passes=2)
    train(path, **kw)  # writes the cache
    handed: list[int] = []
    add = _pages.Prefault.add
    monkeypatch.setattr(_pages.Prefault, "add",
                        lambda self, a: (handed.append(a.nbytes), add(self, a))[1])
    on = train(path, **kw)
    assert not _prefault_threads()
    assert handed[0] == 4 << 18  # the 2**18 lookup table, then w, g2, nrm
    assert handed[1:] == [4 * len(on.indices)] * 3
    handed.clear()
    monkeypatch.setattr(_pages, "spare_core", lambda workers: False)
    off = train(path, **kw)
    assert handed == [] and not _prefault_threads()
    assert np.array_equal(on.indices, off.indices)
    assert on.weights.tobytes() == off.weights.tobytes()
    for a, b in zip(on.adaptive[:2], off.adaptive[:2]):
        assert a.tobytes() == b.tobytes()


@needs_smaps
def test_give_back_frees_the_tail_and_keeps_the_head():
    a = _pages.zeros(4 << 20, np.uint32, huge=False)  # 16 MiB, every page touched
    a[:] = np.arange(len(a), dtype=np.uint32)
    assert _resident_kib(a) * 1024 >= a.nbytes
    head = a[:1000]
    _pages.give_back(a, head.nbytes)
    assert _resident_kib(a) <= 8  # the head's page (or two) is all that stays
    assert np.array_equal(head, np.arange(1000, dtype=np.uint32))
    assert not a[1 << 20:].any()  # the tail reads as zeros again, and is writable
    a[-1] = 7
    assert a[-1] == 7


def test_a_one_pass_cache_run_builds_its_model_in_the_tables_pages(tmp_path, monkeypatch):
    # the union, held as bits during the pass, comes back into the lookup table's pages
    # (no fresh array), and the model is the one a fresh array gives, to the bit
    from terascale.linear import _recipe, synthetic, train

    path = synthetic.write_wide(str(tmp_path / "w.vw"), 3000, seed=5, vocab=100_000)
    kw = dict(bits=18, holdout=0.0, cache_dir=str(tmp_path / "c"), passes=1)
    train(path, **kw)  # writes the cache
    rooms: list[bool] = []
    union = _recipe.Space.the_union
    monkeypatch.setattr(_recipe.Space, "the_union",
                        lambda self, room=None: (rooms.append(room is not None),
                                                 union(self, room))[1])
    kept = train(path, **kw)
    assert rooms == [True]
    monkeypatch.setattr(_recipe.Space, "the_union", lambda self, room=None: union(self))
    fresh = train(path, **kw)
    assert np.array_equal(kept.indices, fresh.indices)
    assert kept.weights.tobytes() == fresh.weights.tobytes()
    for a, b in zip(kept.adaptive[:2], fresh.adaptive[:2]):
        assert a.tobytes() == b.tobytes()


def _library_rss_kb(name: str) -> int:
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split(None, 1)[0]
            if "-" in head and not head.endswith(":"):
                inside = name in line
            elif inside and head == "Rss:":
                total += int(line.split()[1])
    return total


@needs_smaps
def test_a_librarys_read_only_pages_leave_the_resident_set_and_come_back_on_use():
    numba = pytest.importorskip("numba")

    @numba.njit
    def one_more(x):
        return x + 1

    assert one_more(1) == 2  # LLVM has run: its code is resident
    before = _library_rss_kb("libllvmlite")
    assert before > 0
    assert _pages.give_back_library("libllvmlite") > 0
    after = _library_rss_kb("libllvmlite")
    assert after < before / 2
    assert _pages.give_back_library("no-such-library-here") == 0

    @numba.njit
    def twice(x):  # compiling again faults the code back in, unchanged
        return 2 * x

    assert twice(21) == 42 and one_more(2) == 3


@needs_smaps
def test_the_vw_table_and_its_average_touch_only_the_rows_the_data_used():
    """The compiled learner's table is VW's weight array: rows no example reached cost no
    memory, after the workers' average too (writing its zeros back, or huge pages, made
    every page of a -b 24 table resident: 2.4x VW's peak on moderately wide data)."""
    from terascale.linear._combine._average import average_weights
    from terascale.linear._online._state import new_state
    from terascale.linear._vw import dense_table
    from terascale.testing import run_workers

    def fn(comm):
        table = dense_table(18, 3)  # 3 MiB, 768 pages
        table[5 + comm.rank] = [0.5, 1.0, 2.0]
        table[(1 << 17) + 7] = [-0.0, 1.0, 1.0] if comm.rank else [0.25, 1.0, 1.0]
        average_weights(comm, table[:, 0], table[:, 1], table[:, 2], new_state(), "uniform",
                        1 << 14)
        # smaps' Rss, not mincore: a page only read maps the shared zero page, which
        # mincore counts as resident and the resident set does not
        kib = int(_mapping(table)["Rss"].split()[0])
        return kib, table[[5, 6, (1 << 17) + 7]].tolist(), float(np.abs(table).sum())

    for kib, rows, total in run_workers(fn, 2):
        assert kib <= 256, kib  # the pages written (and any neighbour merged into the
        # mapping), not the table's 3 MiB
        # uniform: the weights' mean, the adaptive sums' total, the normalizers' largest
        assert rows == [[0.25, 1.0, 2.0], [0.25, 1.0, 2.0], [0.125, 2.0, 1.0]]
        assert total == 2 * (0.25 + 1.0 + 2.0) + 0.125 + 2.0 + 1.0
