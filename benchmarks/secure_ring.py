"""CPU time of a two-rank ring allreduce over TCP in each link mode, and its wall time.

Launches two workers with one pretend host each (every link TCP, never shared memory) per
link mode -- ``plain`` (unauthenticated, benchmark only), ``integrity`` (the default:
AEGISMAC-128X4 records where the compiled record layer is built and the CPU has AES
instructions, else GMAC), ``integrity-gmac`` (GMAC records: ``TERASCALE_LINK_MAC=gmac``;
not run unless named in ``MODES``) and ``encrypt`` (AEGIS-256X4 records where the compiled
record layer is built, else AES-256-GCM) -- each timing ITERS in-place ring
allreduces of float32 after a barrier, and prints rank 0's medians: wall time, and the
process's CPU time (user and system) per allreduce, and how often it slept (voluntary
context switches per allreduce: a rank that sleeps waits to be woken, and on a loaded host
for its core back, which its CPU time does not show). Wall time on a shared machine moves
with whatever else runs; CPU time per allreduce moves far less, so it is the figure to
compare link modes and code versions by there (``docs/benchmarks/security.md``).

    python benchmarks/secure_ring.py                  # 1 MiB and 64 MiB, 3 rounds
    SIZES=4K,1M ITERS=300 ROUNDS=5 python benchmarks/secure_ring.py

Two code versions side by side: ``TREES`` names their ``src`` directories (each built in
place), the first one's plain row is the reference of every ratio, and each round runs
every tree and mode in turn, so that all see the same machine; ``MODES`` picks the modes:

    TREES=/tmp/before/src,src MODES=plain,integrity python benchmarks/secure_ring.py
    MODES=plain,integrity-gmac,integrity python benchmarks/secure_ring.py   # the two MACs
"""

from __future__ import annotations

import os
import statistics
import sys
import time

MODES = ("plain", "integrity", "encrypt")


def worker(size: int, iters: int) -> None:
    """One rank: ``iters`` timed ring allreduces of ``size`` bytes; rank 0 prints medians."""
    import resource

    import numpy as np

    import terascale

    np.seterr(over="ignore", invalid="ignore")  # in-place sums reach inf, at the same cost
    comm = terascale.init(timeout=300)
    buf = np.ones(size // 4, np.float32)
    wall, cpu, sleeps = [], [], 0
    for i in range(iters + 2):  # two warm-up calls
        comm.barrier()
        s = resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw
        t, c = time.perf_counter(), time.process_time()
        comm.allreduce(buf, out=buf, algorithm="ring")
        if i >= 2:
            wall.append(time.perf_counter() - t)
            cpu.append(time.process_time() - c)
            sleeps += resource.getrusage(resource.RUSAGE_SELF).ru_nvcsw - s
    if comm.rank == 0:
        print(f"RESULT {statistics.median(wall)} {statistics.median(cpu)} {sleeps / iters}",
              flush=True)
    comm.close()


def run(mode: str, size: int, iters: int, src: str = "") -> tuple[float, float, float]:
    """(wall, CPU) seconds per allreduce, rank 0's medians, and its sleeps per allreduce,
    for one link mode (of the code in ``src``, else the one on the path)."""
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("TERASCALE_")}
    if src:
        env["PYTHONPATH"] = os.path.abspath(src)
    if mode == "plain":
        env["TERASCALE_UNAUTHENTICATED_BENCHMARK"] = "1"
    if mode == "integrity-gmac":
        env["TERASCALE_LINK_MAC"] = "gmac"
    cmd = [sys.executable, "-m", "terascale", "run", "-n", "2", "--hosts", "a,b",
           "--no-prefix", *(["--encrypt"] if mode == "encrypt" else []),
           sys.executable, __file__, "--worker", str(size), str(iters)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            wall, cpu, sleeps = map(float, line.split()[1:])
            return wall, cpu, sleeps
    raise RuntimeError(f"{mode}: no result\n{out.stdout}\n{out.stderr}")


def main() -> None:
    from terascale._units import format_size, parse_size

    sizes = [parse_size(s) for s in os.environ.get("SIZES", "1M,64M").split(",")]
    rounds = int(os.environ.get("ROUNDS", "3"))
    trees = [t for t in os.environ.get("TREES", "").split(",") if t] or [""]
    modes = [m for m in os.environ.get("MODES", ",".join(MODES)).split(",") if m]
    if "plain" not in modes:
        modes.insert(0, "plain")
    print(f"| size | code | mode | wall per allreduce | CPU per allreduce | CPU x plain "
          f"(median of {rounds} interleaved rounds) | wall x plain | sleeps per allreduce |")
    print("|------|------|------|------|------|------|------|------|")
    for size in sizes:
        iters = int(os.environ.get("ITERS", max(10, min(300, (256 << 20) // size))))
        runs = [(t, m) for t in trees for m in modes if m != "plain" or t == trees[0]]
        got: dict[tuple[str, str], list[tuple[float, float, float]]] = {r: [] for r in runs}
        for _ in range(rounds):  # interleaved: each round sees the same machine
            for tree, mode in runs:
                got[tree, mode].append(run(mode, size, iters, tree))
        base = [statistics.median(x[k] for x in got[trees[0], "plain"]) for k in (0, 1)]
        for tree, mode in runs:
            xs = got[tree, mode]
            wall = statistics.median(x[0] for x in xs)
            cpu = statistics.median(x[1] for x in xs)
            sleeps = statistics.median(x[2] for x in xs)
            print(f"| {format_size(size)} | {tree or '-'} | {mode} | {wall * 1e3:.3f} ms | "
                  f"{cpu * 1e3:.3f} ms | {cpu / base[1]:.2f} | {wall / base[0]:.2f} | "
                  f"{sleeps:.2f} |", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(int(sys.argv[2]), int(sys.argv[3]))
    else:
        main()
