"""Measure the allreduce algorithms to build the ``algorithm="auto"`` table (select.py).

Usage::

    python benchmarks/allreduce_costs.py [--sizes 4K,64K,1M,16M] [--n 2,3,4] [--json out.json]

For every world size, host layout (one host; two pretend hosts via TERASCALE_HOST_ID;
one rank per host), algorithm and size: float32 sum in place, a barrier before every
iteration, the slowest rank's time per iteration, the median over the iterations. Prints
a markdown table with the fastest algorithm per row marked.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from terascale.testing import run_workers

_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _size(text: str) -> int:
    text = text.strip().upper().rstrip("B").rstrip("I")
    return int(text[:-1]) * _UNITS[text[-1]] if text[-1] in _UNITS else int(text)


def _show(nbytes: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def _worker(comm, algos: list[str], sizes: list[int]) -> dict:
    out = {}
    for nbytes in sizes:
        x = np.ones(nbytes // 4, np.float32)
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4K,64K,1M,16M")
    ap.add_argument("--n", default="2,3,4")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    sizes = [_size(s) for s in args.sizes.split(",")]
    tcp = ["tree", "ring", "halving_doubling"]
    rows = []
    print(f"load average {os.getloadavg()[0]:.2f}; median of the slowest rank, microseconds")
    print("| n | layout | size | " + " | ".join(tcp + ["shm", "hierarchical"]) + " | best |")
    print("|---|---|---|" + "---|" * (len(tcp) + 3))
    for n in (int(v) for v in args.n.split(",")):
        layouts = {"one host": (None, tcp + ["shm", "hierarchical"]),
                   "2 hosts": (["a", "b"], tcp + ["hierarchical"]),
                   "1 rank/host": ([str(i) for i in range(n)], tcp)}
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
                cells = [f"{med[a] * 1e6:.0f}" if a in med else "" for a in
                         tcp + ["shm", "hierarchical"]]
                print(f"| {n} | {layout} | {_show(nbytes)} | " + " | ".join(cells) +
                      f" | {best} |", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
