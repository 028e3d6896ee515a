"""One worker of ``terascale bench allreduce``: times allreduce for one system.

Run as ``python -m terascale.bench._allreduce_worker --system ours|gloo|mpi|xgboost ...`` by the
benchmark driver (under ``terascale.launch.launch`` for ours and gloo, under ``mpirun`` for
Open MPI). Every system is timed the same way, the nccl-tests/OSU method:

* in-place float32 allreduce (sum) of the whole buffer (XGBoost's collective has no
  in-place form: its allreduce returns a new array),
* a barrier before every iteration (so every rank starts together),
* per iteration the *slowest* rank's time counts (the per-rank times are max-reduced once
  at the end, outside the timed region),
* the median over the timed iterations, after warm-up iterations.

Rank 0 writes one JSON line per (variant, size) to ``--out``; the driver reads that file to
drive its progress bar and to build the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable

import numpy as np

__all__ = ["iterations", "main"]

_DTYPE = np.float32


def iterations(nbytes: int, scale: float = 1.0) -> tuple[int, int]:
    """(warm-up, timed) iteration counts for a message of ``nbytes``.

    Small messages get many iterations (they are cheap and noisy); large ones 10 (a 256 MiB
    allreduce takes up to a second on this 2-core machine). ``scale`` multiplies the timed
    count (``--iters``); ``--quick`` uses 0.3.
    """
    timed = int(min(100, max(10, 2**27 // max(nbytes, 1))) * scale)
    timed = max(3, timed)
    warm = max(2, min(10, timed // 10))
    return warm, timed


def _time_loop(run: Callable[[], None], barrier: Callable[[], None], warm: int,
               timed: int) -> np.ndarray:
    for _ in range(warm):
        barrier()
        run()
    times = np.empty(timed, np.float64)
    for i in range(timed):
        barrier()
        t0 = time.perf_counter()
        run()
        times[i] = time.perf_counter() - t0
    return times


def _record(out: str, variant: str, nbytes: int, times: np.ndarray, n: int,
            link: str | None = None) -> None:
    med = float(np.median(times))
    row = {"system": variant, "bytes": nbytes, "n": n, "iters": int(times.size),
           "median_s": med, "p10_s": float(np.percentile(times, 10)),
           "p90_s": float(np.percentile(times, 90)), "min_s": float(times.min())}
    if link is not None:
        row["link"] = link
    with open(out, "a") as f:
        f.write(json.dumps(row) + "\n")


def _link_algorithm(comm: object) -> str | None:
    """The cipher or MAC of this rank's authenticated TCP links (what they agreed), or None
    where they are unauthenticated or not TCP."""
    socks = getattr(getattr(comm, "_transport", None), "socks", None)
    if not isinstance(socks, dict):
        return None
    return next((str(s.cipher) for s in socks.values() if hasattr(s, "cipher")), None)


def _ours(args: argparse.Namespace) -> None:
    import terascale
    from terascale._errors import ConfigError

    # Summing in place doubles the values every iteration: they reach inf, as they do in the
    # peers (inf arithmetic costs the same); numpy's overflow warnings would only be noise.
    np.seterr(over="ignore", invalid="ignore")
    comm = terascale.init(timeout=args.timeout)
    algos = list(dict.fromkeys(args.algorithms.split(",")))
    link = _link_algorithm(comm)
    try:
        # Sizes outside, algorithms inside: the algorithms compared at one size run back to
        # back, under the same conditions of a shared machine.
        for nbytes in args.sizes:
            x = np.ones(nbytes // 4, _DTYPE)
            warm, timed = iterations(nbytes, args.iters)
            for algo in list(algos):
                try:
                    times = _time_loop(lambda: comm.allreduce(x, out=x, algorithm=algo),  # noqa: B023
                                       comm.barrier, warm, timed)
                except ConfigError as e:  # raised on every rank alike (unknown algorithm)
                    if comm.rank == 0:
                        print(f"skipping ours:{algo}: {e}", file=sys.stderr)
                    algos.remove(algo)
                    continue
                times = comm.allreduce(times, op="max")
                if comm.rank == 0:
                    _record(args.out, f"{args.label}:{algo}", nbytes, times, comm.size, link)
    finally:
        comm.close()


def _gloo(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    # torchrun's variables, which our launcher writes beside its own for torch programs
    # (this file also runs where terascale is not importable)
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank,
                            world_size=size)
    try:
        for nbytes in args.sizes:
            x = torch.ones(nbytes // 4, dtype=torch.float32)
            warm, timed = iterations(nbytes, args.iters)
            times = _time_loop(lambda: dist.all_reduce(x), dist.barrier, warm, timed)  # noqa: B023
            t = torch.from_numpy(times)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            if rank == 0:
                _record(args.out, "gloo", nbytes, t.numpy(), size)
    finally:
        dist.destroy_process_group()


def _mpi(args: argparse.Namespace) -> None:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    for nbytes in args.sizes:
        x = np.ones(nbytes // 4, _DTYPE)
        warm, timed = iterations(nbytes, args.iters)
        times = _time_loop(lambda: comm.Allreduce(MPI.IN_PLACE, x, op=MPI.SUM),  # noqa: B023
                           comm.Barrier, warm, timed)
        slowest = np.empty_like(times)
        comm.Allreduce(times, slowest, op=MPI.MAX)
        if comm.Get_rank() == 0:
            _record(args.out, args.variant, nbytes, slowest, comm.Get_size())


def _xgboost_tracker(args: argparse.Namespace) -> None:
    """XGBoost's own tracker for ``--nprocs`` workers: prints its address, then waits."""
    from xgboost.tracker import RabitTracker

    tracker = RabitTracker(n_workers=args.nprocs, host_ip="127.0.0.1", timeout=int(args.timeout))
    tracker.start()
    print(json.dumps(tracker.worker_args()), flush=True)
    tracker.wait_for(int(args.timeout))


def _xgboost(args: argparse.Namespace) -> None:
    """XGBoost's collective (the successor of Rabit), one worker of a tracker's job."""
    from xgboost import collective

    np.seterr(over="ignore", invalid="ignore")
    worker_args = {**json.loads(args.tracker), "dmlc_task_id": os.environ["RANK"]}
    one = np.zeros(1, _DTYPE)
    with collective.CommunicatorContext(**worker_args):
        size = collective.get_world_size()
        for nbytes in args.sizes:
            x = np.ones(nbytes // 4, _DTYPE)
            warm, timed = iterations(nbytes, args.iters)
            # Its allreduce returns the result (no in-place form); a one-element allreduce
            # is its barrier.
            times = _time_loop(lambda: collective.allreduce(x, collective.Op.SUM),  # noqa: B023
                               lambda: collective.allreduce(one, collective.Op.SUM), warm, timed)
            slowest = collective.allreduce(times, collective.Op.MAX)
            if collective.get_rank() == 0:
                _record(args.out, "xgboost", nbytes, slowest, size)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="terascale.bench._allreduce_worker")
    p.add_argument("--system", choices=("ours", "gloo", "mpi", "xgboost", "xgboost-tracker"),
                   required=True)
    p.add_argument("--variant", default="mpi", help="label of the mpi rows (mpi-shm, mpi-tcp)")
    p.add_argument("--algorithms", default="auto")
    p.add_argument("--label", default="ours", help="prefix of our rows (ours, tcp, aes)")
    p.add_argument("--sizes", type=lambda s: [int(v) for v in s.split(",")], default=[])
    p.add_argument("--iters", type=float, default=1.0)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--timeout", type=float, default=120.0)
    p.add_argument("--out", default="")
    p.add_argument("--nprocs", type=int, default=0, help="workers of the xgboost tracker")
    p.add_argument("--tracker", default="{}", help="the xgboost tracker's worker_args (JSON)")
    args = p.parse_args(argv)
    {"ours": _ours, "gloo": _gloo, "mpi": _mpi, "xgboost": _xgboost,
     "xgboost-tracker": _xgboost_tracker}[args.system](args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
