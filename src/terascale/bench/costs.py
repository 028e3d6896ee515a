"""``terascale bench costs``: the measurements behind ``algorithm="auto"`` (collectives/select.py).

::

    terascale bench costs [--sizes 4K,64K,1M,16M] [--n 2,3,4] [--json out.json]

For every world size, host layout (one host; two pretend hosts via ``TERASCALE_HOST_ID``;
one rank per host), algorithm and size: float32 sum in place, a barrier before every
iteration, the slowest rank's time per iteration, the median over the iterations. Prints a
Markdown table with the fastest algorithm per row; :mod:`terascale.collectives.select`
takes its host-layout rules from these tables. Sizes are spelled as in
every command (``4K`` = 4096 bytes, ``4KB`` = 4000; :mod:`terascale._units`).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import numpy as np

from .._errors import ConfigError
from .._units import format_size, parse_size
from ..collectives.registry import ALLREDUCE, allreduce_names

__all__ = ["add_bench_parser", "run_costs"]



def _layouts(n: int) -> dict[str, tuple[list[str] | None, list[str]]]:
    """Per host layout of ``n`` ranks: the host ids and the registry's algorithms to time
    there (each once: :meth:`~terascale.collectives.AllreduceSpec.differs_on`)."""
    names = allreduce_names()
    return {"one host": (None, list(names)),
            "2 hosts": (["a", "b"], [a for a in names if ALLREDUCE[a].differs_on(2, 2)]),
            "1 rank/host": ([str(i) for i in range(n)],
                            [a for a in names if ALLREDUCE[a].differs_on(n, 1)])}


def _worker(comm: Any, algos: list[str], sizes: list[int]) -> dict[tuple[str, int], np.ndarray]:
    out = {}
    for nbytes in sizes:
        # zeros: an in-place sum of ones doubles every call and overflows to inf within a
        # few hundred calls (float32), which is not the arithmetic being timed
        x = np.zeros(nbytes // 4, np.float32)
        iters = int(min(60, max(5, 2**26 // nbytes)))
        for algo in algos:
            comm.allreduce(x, out=x, algorithm=algo)  # warm-up (and segment set-up)
            times = np.empty(iters)
            for i in range(iters):
                comm.barrier()
                t0 = time.perf_counter()
                comm.allreduce(x, out=x, algorithm=algo)
                times[i] = time.perf_counter() - t0
            out[(algo, nbytes)] = times
    return out


def run_costs(sizes: list[int], world_sizes: list[int]) -> list[dict[str, Any]]:
    """Measure and print the table; return one row per (n, layout, size).

    Parameters
    ----------
    sizes
        Message sizes in bytes.
    world_sizes
        The ranks counts to time.
    """
    from ..testing import run_workers

    rows = []
    print(f"load average {os.getloadavg()[0]:.2f}; median of the slowest rank, microseconds")
    every = allreduce_names()
    print("| n | layout | size | " + " | ".join(every) + " | best |")
    print("|---|---|---|" + "---|" * (len(every) + 1))
    for n in world_sizes:
        layouts = _layouts(n)
        for layout, (hosts, algos) in layouts.items():
            if hosts is not None and len(set(hosts[:n])) == 1:
                continue
            res = run_workers(_worker, n, args=(algos, sizes), host_ids=hosts, timeout=600)
            for nbytes in sizes:
                med = {a: float(np.median(np.max([r[(a, nbytes)] for r in res], axis=0)))
                       for a in algos}
                best = min(med, key=med.__getitem__)
                rows.append({"n": n, "layout": layout, "bytes": nbytes, "median_s": med,
                             "best": best})
                cells = [f"{med[a] * 1e6:.0f}" if a in med else "" for a in every]
                print(f"| {n} | {layout} | {format_size(nbytes)} | " + " | ".join(cells) +
                      f" | {best} |", flush=True)
    return rows


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``costs`` to the ``terascale bench`` subcommands.

    Parameters
    ----------
    kinds
        The ``terascale bench`` sub-command parsers (``add_subparsers``' result).
    """
    p = kinds.add_parser("costs", help="per-layout allreduce times behind algorithm='auto'",
                         description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="4K,64K,1M,16M", help="message sizes (default 4K,64K,1M,16M)")
    p.add_argument("--n", default="2,3,4", help="world sizes (default 2,3,4)")
    p.add_argument("--json", default=None, metavar="OUT.json",
                   help="also write the results as JSON to OUT.json")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    sizes = [parse_size(s, flag="--sizes") for s in args.sizes.split(",") if s.strip()]
    if any(s < 4 or s % 4 for s in sizes):
        raise ConfigError(f"--sizes: {args.sizes!r}: every size must be a positive multiple "
                          "of 4 bytes (float32)")
    try:
        world = [int(v) for v in args.n.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"--n: {args.n!r} is not a comma list of world sizes") from None
    if not world or min(world) < 2:
        raise ConfigError(f"--n: {args.n!r}: world sizes must be at least 2")
    rows = run_costs(sizes, world)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0
