"""``terascale demo``: the README's main job.

Starts 4 local workers that allreduce real arrays with the tree and the ring, check the
result against numpy, and print a short report (size, algorithm, median time, bandwidth).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

__all__ = ["add_parser", "worker"]

SIZES = (4 << 10, 1 << 20, 16 << 20)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("demo", help="run the demo job on 4 local workers")
    p.add_argument("-n", "--nprocs", type=int, default=4, metavar="N", help="workers (default 4)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from .launch import LaunchOptions, launch

    return launch([sys.executable, "-m", "terascale._demo"],
                  LaunchOptions(nprocs=args.nprocs, prefix_output=False))


def _fmt_bytes(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


def worker() -> None:
    import terascale

    with terascale.init() as comm:
        rng = np.random.default_rng(comm.rank)
        rows = []
        for nbytes in SIZES:
            x = rng.standard_normal(nbytes // 4).astype(np.float32)
            expect = np.sum(comm.allgather(x), axis=0, dtype=np.float64)
            for algo in ("tree", "ring"):
                times = []
                for _ in range(5 if nbytes >= 1 << 24 else 20):
                    comm.barrier()
                    t0 = time.perf_counter()
                    y = comm.allreduce(x, algorithm=algo)
                    times.append(time.perf_counter() - t0)
                worst = comm.allreduce(np.array(times), op="max")
                ok = np.allclose(y, expect, rtol=1e-4, atol=1e-4)
                same = comm.allgather(y)
                identical = all(np.array_equal(same[0], s) for s in same)
                t = float(np.median(worst))
                busbw = nbytes / t * 2 * (comm.size - 1) / comm.size / 1e9
                rows.append((nbytes, algo, t, busbw, ok and identical))
        if comm.rank == 0:
            print(f"terascale demo: allreduce of float32 arrays over {comm.size} local workers\n")
            print(f"{'size':>8}  {'algorithm':<9} {'median':>10}  {'busbw':>10}  result")
            for nbytes, algo, t, busbw, good in rows:
                print(f"{_fmt_bytes(nbytes):>8}  {algo:<9} {t * 1e3:8.3f} ms  {busbw:6.2f} GB/s  "
                      f"{'correct, bitwise identical on all ranks' if good else 'WRONG'}")
            if not all(r[4] for r in rows):
                raise SystemExit(1)


if __name__ == "__main__":
    worker()
