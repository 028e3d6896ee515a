"""Two ranks and a small message: tree, ring and halving/doubling are one swap each way
(collectives/_pair.py), through an exchange or the communicator's fast path, and each
gives the very bits of its own two steps."""

from __future__ import annotations

import time

import numpy as np
import pytest
from _allreduce_check import make_input
from _tcp_pair import loopback_meshes, run_both

from terascale._arrays import ReduceOp
from terascale.collectives import ALLREDUCE, allreduce_spec
from terascale.collectives._pair import PAIR_MAX_BYTES, PairAllreduce
from terascale.transport.tcp import TcpTransport

# every algorithm whose two ranks swap (the registry says which)
ALGOS = tuple(a for a, s in ALLREDUCE.items() if s.fast_path == "swap")
# (count, dtype, op): odd counts (unequal halves), complex products (their loops round
# differently in place and out of place), a NaN, an empty buffer.
CASES = [(1001, "float32", "sum"), (333, "complex64", "prod"), (1000, "float16", "sum"),
         (77, "float64", "min"), (5, "int8", "prod"), (1, "float32", "max"),
         (0, "float32", "sum"), (PAIR_MAX_BYTES // 4, "float32", "sum"),
         (PAIR_MAX_BYTES // 4 + 1, "float32", "sum")]  # the largest swap; no swap


def _input(rank: int, count: int, dtype: str) -> np.ndarray:
    x = make_input(rank, count, dtype)
    if count == 77 and rank == 1:
        x[3] = np.nan  # min propagates it: the same NaN on both ranks
    return x


@pytest.mark.parametrize("algo", ALGOS)
def test_swap_gives_each_algorithms_own_bits(algo: str) -> None:
    m = loopback_meshes()
    spec = allreduce_spec(algo)
    cls = spec.load()
    got: dict[tuple[str, int, int], bytes] = {}
    seq = [0, 0]

    def rank(mesh: TcpTransport) -> None:
        r = mesh.rank
        for i, (count, dtype, op) in enumerate(CASES):
            rop = ReduceOp(op, np.dtype(dtype))
            desc = f"allreduce({algo},{dtype}[{count}],{op})"
            for how in ("steps", "exchange", "fast"):
                x = _input(r, count, dtype)
                s = seq[r]
                seq[r] += 1
                ex = mesh.exchange(s, desc, f"#{s}", time.monotonic() + 20)
                if how == "fast":
                    pieces = spec.pair_pieces(count, x.itemsize)
                    fast = PairAllreduce.plan(mesh, r, 2, rop, x.shape, desc, 0, None, pieces)
                    assert (fast is None) == (x.nbytes > PAIR_MAX_BYTES)
                    if fast is None:
                        continue
                    dst = np.empty_like(x)  # out of place: src is left as it was
                    pending = fast.start(s, x, dst)
                    if pending is not None:
                        fast.finish(ex, pending, x, dst)
                    assert x.tobytes() == _input(r, count, dtype).tobytes()
                    x = dst
                else:
                    kw = {"swap": how == "exchange"}
                    cls(ex, r, 2, x, rop, **kw).run()
                got[(how, i, r)] = x.tobytes()

    run_both(lambda: rank(m[0]), lambda: rank(m[1]))
    for mesh in m:
        mesh.close()
    for i in range(len(CASES)):
        want = got[("steps", i, 0)]
        assert got[("steps", i, 1)] == want
        for how in ("exchange", "fast"):
            for r in (0, 1):
                if (how, i, r) in got:
                    assert got[(how, i, r)] == want, (how, CASES[i], r)
    # Each rank's own halves, not one rank's order everywhere (ring and halving/doubling):
    # their swap reduces half the vector on each rank, the tree everything on rank 0.
    pieces = spec.pair_pieces(1001, 4)
    assert {first for *_, first in pieces} == ({0} if algo == "tree" else {0, 1})
