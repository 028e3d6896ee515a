"""Correctness matrix of the collectives: every algorithm, world sizes 1-9.

Every registered allreduce algorithm x world sizes 1-9 (non-powers of two included) x
element counts 0, 1, 3, 1000 (and 2**20+7 at some sizes) x dtypes x ops, checked against
numpy on the gathered inputs: exact for integers, close for floats, and bitwise identical
on every rank. The ranks are threads linked by the in-process transport
(:func:`terascale.testing.run_threads`): the algorithms are what is tested, and they run
over it unchanged. A subset runs on real processes over TCP, twice (bitwise identical
across runs too). ``TERASCALE_MATRIX_FULL=1`` (``make test-matrix``) runs the large count
at every size and every thread case twice. Alltoall and the async allgather/alltoall over
world sizes 1-9; sub-communicators from ``split`` into 2 and 3 groups (odd sizes, a rank
that joins none, a split of a split).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from _allreduce_check import check_matrix

from terascale import ConfigError
from terascale.collectives import ALLREDUCE, allreduce_names
from terascale.testing import run_threads, run_workers

FULL = os.environ.get("TERASCALE_MATRIX_FULL", "") not in ("", "0")
SIZES = range(1, 10)


def _hosts(algo: str) -> list[str] | None:
    # an algorithm for mixed hosts runs over two pretend hosts (ranks alternate), so both of
    # its phases run
    return ["a", "b"] if ALLREDUCE[algo].auto == "mixed hosts" else None


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("algo", allreduce_names())
def test_allreduce_matrix(n: int, algo: str) -> None:
    check_matrix(n, algo, big=FULL or n in (2, 5, 8), runs=2 if FULL else 1,
                 host_ids=_hosts(algo), runner=run_threads)


def _process_cases() -> list[tuple[int, str]]:
    # every algorithm once on real processes over TCP (two ranks: the per-call swap; mixed
    # hosts: four ranks on two pretend hosts)
    return [(4 if _hosts(a) else 2 if i == 0 else 3, a) for i, a in enumerate(allreduce_names())]


@pytest.mark.parametrize("n,algo", _process_cases())
def test_allreduce_matrix_processes(n: int, algo: str) -> None:
    check_matrix(n, algo, runs=2, host_ids=_hosts(algo))


def _shapes_and_layouts(comm) -> list:
    res = []
    base = np.arange(24, dtype=np.float64).reshape(2, 3, 4) * (comm.rank + 1)
    res.append(comm.allreduce(base))                 # multi-dimensional
    res.append(comm.allreduce(base[:, ::2, 1:]))     # non-contiguous
    res.append(comm.allreduce(np.float32(comm.rank)))  # 0-d
    x = np.ones(5, np.int32) * comm.rank
    y = comm.allreduce(x, out=x)                     # in place
    assert y is x
    res.append(x.copy())
    out = np.empty(5, np.int32)
    comm.allreduce(np.ones(5, np.int32), out=out, algorithm="ring")
    res.append(out)
    return res


@pytest.mark.parametrize("n", [1, 3])
def test_shapes_layouts_in_place(n: int) -> None:
    results = run_threads(_shapes_and_layouts, n)
    k = n * (n + 1) // 2
    base = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    for res in results:
        np.testing.assert_array_equal(res[0], base * k)
        np.testing.assert_array_equal(res[1], (base * k)[:, ::2, 1:])
        assert res[2].shape == () and res[2] == sum(range(n))
        np.testing.assert_array_equal(res[3], np.full(5, sum(range(n)), np.int32))
        np.testing.assert_array_equal(res[4], np.full(5, n, np.int32))


def _others(comm) -> dict:
    r, n = comm.rank, comm.size
    x = np.arange(7, dtype=np.int64) + 10 * r
    return {
        "bcast": [comm.broadcast(np.arange(5.0) * (r + 1), root=root).copy() for root in range(n)],
        "bcast_big": comm.broadcast(np.full(300_001, r, np.int32), root=n - 1)[::1000].copy(),
        "gather": comm.allgather(x),
        "gather_empty": comm.allgather(np.empty(0, np.float32)),
        "rs": comm.reduce_scatter(np.arange(4 * n + 1, dtype=np.int64).reshape(-1, 1) * (r + 1)),
        "rs_max": comm.reduce_scatter(np.arange(n * 3, dtype=np.float32) * (r + 1), op="max"),
        "obj": comm.broadcast_object({"from": r, "list": list(range(r))}, root=n // 2),
        "objs": comm.allgather_object(("rank", r, "x" * r)),
        "barrier": comm.barrier(),
    }


@pytest.mark.parametrize("n,runner", [*((n, run_threads) for n in SIZES), (3, run_workers)])
def test_broadcast_allgather_reduce_scatter_objects(n: int, runner) -> None:  # type: ignore[no-untyped-def]
    results = runner(_others, n, timeout=120)
    k = n * (n + 1) // 2
    rs_full = np.arange(4 * n + 1).reshape(-1, 1) * k
    blocks = np.array_split(rs_full, n)
    for r, res in enumerate(results):
        for root in range(n):
            np.testing.assert_array_equal(res["bcast"][root], np.arange(5.0) * (root + 1))
        assert (res["bcast_big"] == n - 1).all()
        np.testing.assert_array_equal(res["gather"],
                                      np.stack([np.arange(7) + 10 * i for i in range(n)]))
        assert res["gather_empty"].shape == (n, 0)
        np.testing.assert_array_equal(res["rs"], blocks[r])
        np.testing.assert_array_equal(res["rs_max"], np.array_split(np.arange(n * 3) * n, n)[r])
        assert res["obj"] == {"from": n // 2, "list": list(range(n // 2))}
        assert res["objs"] == [("rank", i, "x" * i) for i in range(n)]


def _async(comm) -> list:
    handles = [comm.allreduce_async(np.full(100_000 + i, float(comm.rank + i))) for i in range(6)]
    sync = comm.allreduce(np.ones(3))  # a blocking call behind queued async ones
    results = [handles[i].wait()[:2].tolist() for i in (5, 2, 0, 4, 1, 3)]  # any order
    return [results, sync.tolist()]


def test_async_handles_any_order() -> None:
    n = 3
    out = run_threads(_async, n)
    for results, sync in out:
        assert sync == [3.0, 3.0, 3.0]
        for i, vals in zip((5, 2, 0, 4, 1, 3), results):
            assert vals == [float(sum(r + i for r in range(n)))] * 2


def test_torch_tensors() -> None:
    torch = pytest.importorskip("torch")

    def fn(comm):
        t = torch.arange(6, dtype=torch.float32).reshape(2, 3) * (comm.rank + 1)
        y = comm.allreduce(t)
        assert isinstance(y, torch.Tensor) and y.shape == (2, 3)
        comm.allreduce(t, out=t)
        g = comm.allgather(torch.tensor([comm.rank]))
        return y.tolist(), t.tolist(), g.tolist()

    for y, t, g in run_workers(fn, 2):
        expect = (torch.arange(6.0).reshape(2, 3) * 3).tolist()
        assert y == expect and t == expect and g == [[0], [1]]


# -- alltoall and the async allgather / alltoall -------------------------------------------
A2A_DTYPES = ("int8", "uint8", "int64", "float16", "float32", "float64", "complex64", "bool")
A2A_BLOCKS = (0, 1, 3, 1000)  # elements per block (times a trailing axis of 2 below)


def _a2a_input(rank: int, n: int, per: int, dtype: str, seed: int = 0) -> np.ndarray:
    """Rank ``rank``'s alltoall input: ``n`` blocks of ``per`` rows of 2, distinct values."""
    from _allreduce_check import make_input

    return make_input(rank, n * per * 2, dtype, seed).reshape(n * per, 2)


def _a2a(comm) -> dict:
    n, out = comm.size, {}
    for dtype in A2A_DTYPES:
        for per in A2A_BLOCKS:
            x = _a2a_input(comm.rank, n, per, dtype)
            h = comm.alltoall_async(x)
            g = comm.allgather_async(x)
            x[...] = 0  # async calls copied their input at the call
            y = comm.alltoall(_a2a_input(comm.rank, n, per, dtype))
            out[(dtype, per)] = (y, h.wait(), g.wait())
    big = np.arange(n * (2**18 + 3), dtype=np.float32) + comm.rank * 1e6
    out["big"] = (comm.alltoall(big), comm.alltoall_async(big).wait(), comm.allgather(big[:5]))
    return out


@pytest.mark.parametrize("n,runner", [*((n, run_threads) for n in SIZES), (3, run_workers)])
def test_alltoall_and_async_gathers(n: int, runner) -> None:  # type: ignore[no-untyped-def]
    results = runner(_a2a, n, timeout=180)
    for dtype in A2A_DTYPES:
        for per in A2A_BLOCKS:
            xs = [_a2a_input(r, n, per, dtype) for r in range(n)]
            gathered = np.stack(xs)
            for r, res in enumerate(results):
                y, ya, g = res[(dtype, per)]
                expect = np.concatenate([x[r * per:(r + 1) * per] for x in xs]) if per else \
                    np.empty((0, 2), dtype)
                assert y.dtype == np.dtype(dtype) and y.shape == (n * per, 2)
                assert y.tobytes() == expect.tobytes(), (dtype, per, r)
                assert ya.tobytes() == expect.tobytes(), (dtype, per, r)
                assert g.shape == (n, n * per, 2) and g.tobytes() == gathered.tobytes()
    m = 2**18 + 3
    for r, res in enumerate(results):
        y, ya, g = res["big"]
        expect = np.concatenate([np.arange(r * m, (r + 1) * m, dtype=np.float32) + i * 1e6
                                 for i in range(n)])
        assert y.tobytes() == expect.tobytes() and ya.tobytes() == expect.tobytes()
        assert g.tobytes() == results[0]["big"][2].tobytes()


def test_alltoall_needs_equal_blocks() -> None:
    def fn(comm):
        with pytest.raises(ConfigError, match="multiple of the communicator size 2"):
            comm.alltoall(np.ones(3))
        with pytest.raises(ConfigError, match="equal blocks"):
            comm.alltoall(np.float32(1))
        return comm.alltoall(np.arange(4).reshape(2, 2) + 10 * comm.rank).tolist()

    assert run_workers(fn, 2) == [[[0, 1], [10, 11]], [[2, 3], [12, 13]]]


# -- sub-communicators (split) ---------------------------------------------------------------
def _split(comm, parts: int) -> dict:
    r, n = comm.rank, comm.size
    # Colors r % parts; keys reverse the order in color 1; the last rank of a 4+ world opts out.
    color = None if n >= 4 and r == n - 1 else r % parts
    sub = comm.split(color, key=-r if color == 1 else None)
    out: dict = {"none": sub is None}
    world = comm.allreduce(np.full(3, r + 1, np.int64))  # the parent works between and after
    if sub is None:
        out["world"] = [world, comm.allgather(np.int32(r))]
        return out
    s, k = sub.rank, sub.size
    x = np.arange(1001, dtype=np.float64) * (r + 1)
    out["who"] = (s, k, sub.allgather(np.int64(r)))
    for algo in (*allreduce_names(), "auto"):
        out[algo] = sub.allreduce(x, algorithm=algo)
    out["int_max"] = sub.allreduce(np.array([r, -r], np.int32), op="max")
    h = sub.allreduce_async(x[:10])
    g = sub.allgather_async(np.array([r, s]))
    a = sub.alltoall_async(np.arange(2 * k) + 100 * r)
    out["async"] = (h.wait(), g.wait(), a.wait())
    out["bcast"] = sub.broadcast(np.full(4, float(r)), root=k - 1)
    out["a2a"] = sub.alltoall(np.arange(3 * k, dtype=np.int16).reshape(k, 3) + 100 * r)
    out["obj"] = sub.broadcast_object({"root": r} if s == 0 else None, root=0)
    out["rs"] = sub.reduce_scatter(np.arange(2 * k + 1, dtype=np.int64) * (r + 1))
    out["objs"] = sub.allgather_object(("r", r))
    sub.barrier()
    nested = sub.split(s % 2)  # a split of a split: its own context again
    out["nested"] = nested.allgather(np.int64(r))
    nested.close()
    out["after_nested"] = sub.allreduce(np.ones(2, np.int64))
    sub.close()
    out["world"] = [world, comm.allgather(np.int32(r))]
    return out


@pytest.mark.parametrize("n,parts,runner", [(3, 2, run_threads), (5, 2, run_threads),
                                             (5, 3, run_threads), (7, 3, run_threads),
                                             (2, 3, run_threads), (5, 2, run_workers)])
def test_split_matrix(n: int, parts: int, runner) -> None:  # type: ignore[no-untyped-def]
    results = runner(_split, n, args=(parts,), timeout=180)
    colors = [None if n >= 4 and r == n - 1 else r % parts for r in range(n)]
    groups: dict[int, list[int]] = {}
    for r in sorted(range(n), key=lambda r: (-r if colors[r] == 1 else r, r)):
        if colors[r] is not None:
            groups.setdefault(colors[r], []).append(r)
    x = np.arange(1001, dtype=np.float64)
    for r, res in enumerate(results):
        np.testing.assert_array_equal(res["world"][0], np.full(3, n * (n + 1) // 2))
        np.testing.assert_array_equal(res["world"][1], np.arange(n))
        assert res["none"] == (colors[r] is None)
        if colors[r] is None:
            continue
        members = groups[colors[r]]
        s, k, who = res["who"]
        assert (s, k) == (members.index(r), len(members)) and who.tolist() == members
        total = sum(m + 1 for m in members)
        for algo in (*allreduce_names(), "auto"):
            np.testing.assert_allclose(res[algo], x * total, err_msg=algo)
        assert res["int_max"].tolist() == [max(members), -min(members)]
        ar, ag, aa = res["async"]
        np.testing.assert_allclose(ar, x[:10] * total)
        assert ag.tolist() == [[m, i] for i, m in enumerate(members)]
        assert aa.tolist() == [2 * s + j + 100 * m for m in members for j in range(2)]
        assert (res["bcast"] == members[-1]).all()
        assert res["a2a"].tolist() == [[3 * s + j + 100 * m for j in range(3)] for m in members]
        assert res["obj"] == {"root": members[0]}
        full = np.arange(2 * k + 1) * total
        np.testing.assert_array_equal(res["rs"], np.array_split(full, k)[s])
        assert res["objs"] == [("r", m) for m in members]
        assert res["nested"].tolist() == [m for i, m in enumerate(members) if i % 2 == s % 2]
        assert res["after_nested"].tolist() == [k, k]
        # bitwise identical inside each group
        first = results[members[0]]
        for algo in (*allreduce_names(), "auto"):
            assert res[algo].tobytes() == first[algo].tobytes(), (algo, r)


def test_split_hierarchical_and_mismatch() -> None:
    """hierarchical on a sub-communicator spread over pretend hosts; a mismatch inside a
    group is reported by its members and names what each called."""

    def fn(comm):
        sub = comm.split(comm.rank % 2)
        y = sub.allreduce(np.arange(5.0) + comm.rank, algorithm="hierarchical")
        n = 3 if comm.rank == 2 else 4  # ranks 0, 2, 4 disagree inside their group
        if comm.rank % 2 == 0:
            sub.allreduce(np.ones(n))
        return y.tolist()

    out = run_workers(fn, 5, host_ids=["a", "a", "b", "b", "b"], expect_failure=True)
    assert out[1] == ("ok", (np.arange(5.0) * 2 + 4).tolist())
    assert out[3] == ("ok", (np.arange(5.0) * 2 + 4).tolist())
    for r in (0, 2, 4):
        status, (exc, text) = out[r]
        assert status == "error" and exc == "CollectiveMismatch", out[r]
        assert "sub-communicator" in text
