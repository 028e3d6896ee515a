"""Correctness matrix of the collectives over real worker processes.

World sizes 1-8 (non-powers of two included) x element counts 0, 1, 3, 1000, 2**20+7 x
dtypes x ops x algorithms, checked against numpy on the gathered inputs: exact for
integers, close for floats, and bitwise identical on every rank and across two runs.
"""

from __future__ import annotations

import numpy as np
import pytest
from _allreduce_check import check_matrix

from terascale.testing import run_workers


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 8])
@pytest.mark.parametrize("algo", ["tree", "ring"])
def test_allreduce_matrix(n: int, algo: str) -> None:
    check_matrix(n, algo, runs=2)


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
    results = run_workers(_shapes_and_layouts, n)
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


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_broadcast_allgather_reduce_scatter_objects(n: int) -> None:
    results = run_workers(_others, n, timeout=120)
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
    out = run_workers(_async, n)
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
