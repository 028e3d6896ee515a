"""Shared correctness matrix for the allreduce algorithms (imported by tests).

Counts 0, 1, 3, 1000 and 2**20+7, every dtype and op, run for one algorithm inside the
workers; the parent checks against numpy and that every rank got bitwise the same bytes
(and, with ``runs=2``, the same bytes in a second run).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from terascale.testing import run_workers

__all__ = ["BIG", "COUNTS", "DTYPES", "OPS", "check_matrix", "expected", "make_input"]

COUNTS = (0, 1, 3, 1000)
BIG = 2**20 + 7
DTYPES = ("int8", "uint8", "int32", "int64", "float16", "float32", "float64", "complex64", "bool")
OPS = ("sum", "prod", "min", "max")


def make_input(rank: int, count: int, dtype: str, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(1000 * seed + rank)
    if dtype == "bool":
        return rng.random(count) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(1, 4, count).astype(dtype)  # small: products stay exact
    x = rng.uniform(0.5, 1.5, count)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.uniform(0.5, 1.5, count)
    return x.astype(dtype)


def expected(stack: np.ndarray, op: str) -> np.ndarray:
    if stack.dtype == bool:
        return stack.any(0) if op in ("sum", "max") else stack.all(0)
    wide = stack.astype(np.complex128 if stack.dtype.kind == "c" else
                        np.float64 if stack.dtype.kind == "f" else stack.dtype)
    f = {"sum": np.sum, "prod": np.prod, "min": np.min, "max": np.max}[op]
    return f(wide, axis=0).astype(stack.dtype)




def _cases(big: bool) -> list[tuple[int, str, str]]:
    cases = [(c, d, o) for c in COUNTS for d in DTYPES for o in OPS
             if not (d.startswith("complex") and o in ("min", "max"))]
    if big:
        cases += [(BIG, "float32", "sum"), (BIG, "int64", "max")]
    return cases


def _run(comm: Any, algo: str, seed: int, big: bool) -> dict:
    out = {}
    for count, dtype, op in _cases(big):
        x = make_input(comm.rank, count, dtype, seed)
        y = comm.allreduce(x, op=op, algorithm=algo)
        assert y.dtype == x.dtype and y.shape == x.shape
        out[(count, dtype, op)] = y
        if comm.size == 2:  # the same shape again: the per-call fast path (TCP's swap)
            again = comm.allreduce(x, op=op, algorithm=algo)
            assert again.tobytes() == y.tobytes(), (count, dtype, op)
        if count == 1000 and dtype == "float32" and op == "sum":  # out= in place, too
            z = x.copy()
            assert comm.allreduce(z, op=op, out=z, algorithm=algo) is z
            assert z.tobytes() == y.tobytes()
    return out


def check_matrix(n: int, algo: str, *, big: bool = True, runs: int = 1,
                 host_ids: list[str] | None = None,
                 runner: Callable[..., list[Any]] = run_workers) -> None:
    """Run the matrix on ``n`` ranks ``runs`` times; assert results and bitwise agreement.

    ``runner``: :func:`~terascale.testing.run_workers` (processes over TCP, the default) or
    :func:`~terascale.testing.run_threads` (threads over the in-process transport)."""
    results = [runner(_run, n, args=(algo, 0, big), timeout=120, host_ids=host_ids)
               for _ in range(runs)]
    first = results[0]
    for key, y0 in first[0].items():
        count, dtype, op = key
        stack = np.stack([make_input(r, count, dtype) for r in range(n)]) if count else \
            np.empty((n, 0), dtype)
        expect = expected(stack, op)
        if np.dtype(dtype).kind in "iub":
            np.testing.assert_array_equal(y0, expect, err_msg=str(key))
        else:
            rtol = 1e-2 if dtype == "float16" else 1e-5
            np.testing.assert_allclose(y0, expect, rtol=rtol, err_msg=str(key))
        for run in results:
            for rank in range(n):
                assert run[rank][key].tobytes() == y0.tobytes(), (algo, key, rank)
