"""``terascale bench allreduce``: our allreduce algorithms side by side with Gloo and Open MPI.

One run times, on the same machine and with the same method (see
:mod:`terascale.bench._allreduce_worker`): every algorithm of
:data:`terascale.collectives.ALLREDUCE` (the one algorithm registry) through real
``terascale.launch.launch`` workers; ``torch.distributed`` with the gloo backend (separate
processes, ``tcp://`` init); and ``mpi4py`` on Open MPI over shared memory
(``--mca btl self,vader``) and over TCP (``--mca btl self,tcp``), whichever are installed;
Intel MPI, MPICH and XGBoost's collective from PyPI in side environments (:mod:`._peers`,
``--install-peers``).

Reported per size: the median time, the algorithm bandwidth ``algbw = bytes / time`` and
the bus bandwidth ``busbw = algbw * 2 (n - 1) / n`` (the nccl-tests definition, which makes
numbers comparable across world sizes: it is the rate each rank's link carries for a
bandwidth-optimal allreduce), plus the speed ratio ``peer time / our time`` to each peer
(> 1: we are faster). The machine's ceilings (memcpy, ``np.add``, TCP loopback one way and
both ways) are measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import _units
from .._errors import ConfigError
from .._units import format_size
from ..launch.cpubind import cpu_blocks
from ..transport.shmgroup import compiled_core
from ._allreduce_cluster import add_cluster_flags
from ._allreduce_report import (
    crossover,
    format_encryption,
    format_limits,
    format_table,
    format_targets,
    systems_of,
)
from ._peers import available_peers, side_job

__all__ = ["BenchOptions", "add_bench_parser", "crossover", "format_table", "format_targets",
           "parse_size", "run_bench"]

DEFAULT_SIZES = tuple(4 << (10 + 2 * k) for k in range(9))  # 4 KiB, 16 KiB, ..., 256 MiB
QUICK_SIZES = (4 << 10, 64 << 10, 1 << 20, 16 << 20)
PEERS = ("gloo", "mpi", "openmpi", "intelmpi", "mpich", "xgboost")  # openmpi: another name for mpi


def parse_size(text: str) -> int:
    """One ``--sizes`` entry -> bytes: ``4K`` / ``64KiB`` (binary), ``100MB`` (SI), ``4096``.

    The spelling is :mod:`terascale._units`'s; a size here must also be a positive multiple
    of 4 bytes (the benchmark reduces float32).

    Parameters
    ----------
    text
        The entry, e.g. ``"64KiB"``.
    """
    value = _units.parse_size(text, flag="--sizes")
    if value < 4 or value % 4:
        raise ConfigError(f"--sizes: {text!r} must be a positive multiple of 4 bytes (float32)")
    return value


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    """What to run (the flags of ``terascale bench allreduce``).

    Parameters
    ----------
    nprocs
        Ranks of every system (``-n``).
    sizes
        Message sizes in bytes, each a multiple of 4 (float32; default 4 KiB to 256 MiB by 4x).
    algorithms
        Our algorithms to time (default None: every registered one and ``auto``).
    peers
        The other systems to time beside ours (gloo, MPI builds, XGBoost's collective); a missing
        one is skipped with a note.
    iters
        Multiplies the timed iteration counts (default 1; ``--quick`` uses 0.3).
    limits
        Also measure this machine's limits (memory bandwidth, loopback TCP) to read the figures
        against (default True).
    progress
        Print a line per finished system (default True).
    timeout
        Seconds one system's run may take before it is killed (default 900).
    encrypt
        Also time ours over plain TCP and AES-GCM links (rows ``tcp:``/``aes:``; default False).
    """

    nprocs: int
    sizes: tuple[int, ...] = DEFAULT_SIZES
    algorithms: tuple[str, ...] | None = None  # None: every one, read at run time
    peers: tuple[str, ...] = PEERS
    iters: float = 1.0
    limits: bool = True
    progress: bool = True
    timeout: float = 900.0
    encrypt: bool = False  # also time ours over plain TCP and AES-GCM links ("tcp:"/"aes:")


def our_algorithms() -> tuple[str, ...]:
    """Every allreduce algorithm the communicator knows, "auto" last."""
    from ..collectives.registry import allreduce_names

    return (*allreduce_names(), "auto")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _worker_cmd(system: str, sizes: Sequence[int], iters: float, out: str,
                extra: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", "terascale.bench._allreduce_worker", "--system", system,
            "--sizes", ",".join(str(s) for s in sizes), "--iters", str(iters), "--out", out,
            *extra]


def _run_launched(cmd: list[str], n: int, timeout: float, *, apart: bool = False,
                  security: str | None = None) -> int:
    from ..launch import LaunchOptions, launch

    # apart: one pretend host per rank, so that every link is TCP (never shared memory).
    hosts = [f"bench-host-{r}" for r in range(n)] if apart else None
    # "plain": unauthenticated links, which every worker must ask for itself (benchmark only)
    env = {"TERASCALE_UNAUTHENTICATED_BENCHMARK": "1"} if security == "plain" else {}
    return launch(cmd, LaunchOptions(nprocs=n, timeout=timeout, host_ids=hosts,
                                     encrypt=security == "encrypt", env=env))


def _mpirun_cmd(n: int, btl: str, cmd: list[str]) -> list[str]:
    mpirun = shutil.which("mpirun") or "mpirun"
    root = ["--allow-run-as-root"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    # pml ob1 makes the btl choice binding (no UCX).
    # Yielding when idle keeps Open MPI's busy polling from collapsing on a loaded machine
    # (1 MiB at n=2: 0.22 ms with it, 25-48 ms without at load 15); it is Open MPI's own
    # default whenever ranks outnumber cores. (btl_tcp_if_include lo made small messages
    # 500x slower here, so it is not set.)
    # Bound as our workers are (one block of cores each while n <= cores, else unbound).
    bind = "none" if cpu_blocks(n) is None else "core"
    return [mpirun, *root, "--oversubscribe", "--bind-to", bind, "-n", str(n),
            "--mca", "pml", "ob1", "--mca", "mpi_yield_when_idle", "1", "--mca", "btl", btl,
            *cmd]


def _jobs(opts: BenchOptions, out: str) -> list[tuple[str, int, Any]]:
    """(label, number of result rows it produces, callable) per system to run."""
    n, sizes = opts.nprocs, opts.sizes
    algos = opts.algorithms or our_algorithms()
    jobs: list[tuple[str, int, Any]] = []
    ours = _worker_cmd("ours", sizes, opts.iters, out,
                       ["--algorithms", ",".join(algos), "--timeout", str(opts.timeout)])
    jobs.append(("ours", len(algos) * len(sizes),
                 lambda: _run_launched(ours, n, opts.timeout)))
    if opts.encrypt:  # the cost of security: the same algorithms over plain, GMAC, AES-GCM TCP
        for label, secure in (("tcp", "plain"), ("mac", "integrity"), ("aes", "encrypt")):
            cmd = _worker_cmd("ours", sizes, opts.iters, out,
                              ["--algorithms", ",".join(algos), "--timeout", str(opts.timeout),
                               "--label", label])

            def run(cmd: list[str] = cmd, secure: str = secure) -> int:
                return _run_launched(cmd, n, opts.timeout, apart=True, security=secure)
            jobs.append((label, len(algos) * len(sizes), run))
    avail = available_peers()
    if "gloo" in opts.peers and avail["gloo"] is None:
        def gloo() -> int:
            cmd = _worker_cmd("gloo", sizes, opts.iters, out, ["--port", str(_free_port())])
            return _run_launched(cmd, n, opts.timeout)
        jobs.append(("gloo", len(sizes), gloo))
    if {"mpi", "openmpi"} & set(opts.peers) and avail["mpi"] is None:
        for variant, btl in (("mpi-shm", "self,vader"), ("mpi-tcp", "self,tcp")):
            cmd = _mpirun_cmd(n, btl, _worker_cmd("mpi", sizes, opts.iters, out,
                                                  ["--variant", variant]))

            def mpi(cmd: list[str] = cmd) -> int:
                return subprocess.run(cmd, timeout=opts.timeout, stdin=subprocess.DEVNULL).returncode
            jobs.append((variant, len(sizes), mpi))
    for name in ("intelmpi", "mpich", "xgboost"):
        if name in opts.peers and avail[name] is None:
            jobs.append((name, len(sizes), side_job(name, n, sizes, opts.iters, out,
                                                    opts.timeout)))
    for peer in opts.peers:
        if avail.get(peer):
            print(f"terascale bench: skipping {peer}: {avail[peer]}", file=sys.stderr)
    return jobs


def _count_lines(path: str) -> int:
    try:
        with open(path) as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0


def run_bench(opts: BenchOptions) -> dict[str, Any]:
    """Run every system; return ``{"n", "sizes", "limits", "results": [row, ...]}``.

    Parameters
    ----------
    opts
        What to run.
    """
    if opts.nprocs < 2:
        raise ConfigError(f"-n must be at least 2 for an allreduce benchmark, got {opts.nprocs}")
    unknown = set(opts.peers) - set(PEERS)
    if unknown:
        raise ConfigError(f"--vs: unknown peer(s) {', '.join(sorted(unknown))}; use "
                          f"{','.join(PEERS)}")
    if opts.algorithms:
        bad = set(opts.algorithms) - set(our_algorithms())
        if bad:
            raise ConfigError(f"--algorithms: unknown {', '.join(sorted(bad))}; known: "
                              f"{', '.join(our_algorithms())}")
    report: dict[str, Any] = {"n": opts.nprocs, "sizes": list(opts.sizes), "dtype": "float32",
                              "load": os.getloadavg()[0] if hasattr(os, "getloadavg") else None}
    if opts.limits:
        from ._limits import measure_limits

        report["limits"] = measure_limits().as_dict()
    with tempfile.TemporaryDirectory(prefix="terascale-bench-") as tmp:
        out = os.path.join(tmp, "rows.jsonl")
        jobs = _jobs(opts, out)
        total = sum(k for _, k, _ in jobs)
        bar = _progress(total, opts.progress)
        stop = threading.Event()

        def poll() -> None:
            while not stop.wait(0.2):
                bar.update(_count_lines(out) - bar.n)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        failures = []
        try:
            for label, _, job in jobs:
                bar.set_description(label)
                started = time.monotonic()
                code = job()
                if code != 0:
                    failures.append(f"{label} (exit status {code} after "
                                    f"{time.monotonic() - started:.0f} s)")
        finally:
            stop.set()
            poller.join()
            bar.update(_count_lines(out) - bar.n)
            bar.close()
        rows = []
        if os.path.exists(out):
            with open(out) as f:
                rows = [json.loads(line) for line in f if line.strip()]
    for r in rows:
        n = r["n"]
        r["algbw"] = r["bytes"] / r["median_s"]
        r["busbw"] = r["algbw"] * 2 * (n - 1) / n
    report["results"] = rows
    report["failures"] = failures
    return report


def _progress(total: int, enabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, unit="case", disable=not enabled, file=sys.stderr,
                dynamic_ncols=True)


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``allreduce`` to the ``terascale bench`` subcommands.

    Parameters
    ----------
    kinds
        The ``terascale bench`` sub-command parsers (``add_subparsers``' result).
    """
    p = kinds.add_parser(
        "allreduce", help="allreduce busbw vs Gloo and Open MPI, same run",
        description="Time every terascale allreduce algorithm and, when installed, "
                    "torch.distributed gloo and Open MPI (shared memory and TCP) in one run. "
                    "Median of many iterations after warm-up, barrier before each, slowest "
                    "rank counts; busbw = bytes/time * 2(n-1)/n.")
    p.add_argument("-n", "--nprocs", type=int, default=2, metavar="N", help="ranks (default 2)")
    p.add_argument("--sizes", default=None, metavar="4K,1M,...",
                   help="message sizes (default 4K to 256M by factors of 4)")
    p.add_argument("--vs", default=None, metavar="gloo,mpi",
                   help="peers to run in the same run: gloo, mpi (= openmpi), intelmpi, "
                        "mpich, xgboost ('' for none; default gloo,mpi; with --cluster: "
                        "only mpi, Open MPI's TCP BTL, and none by default)")
    p.add_argument("--install-peers", action="store_true",
                   help="first pip-install the side environments of the --vs peers that "
                        "need one (intelmpi, mpich, xgboost; all if --vs names none) into "
                        "~/.cache/terascale/peers/NAME, and run them")
    p.add_argument("--algorithms", default=None, metavar="tree,ring,...",
                   help="our algorithms to time (default: all, 'auto' included)")
    p.add_argument("--iters", type=float, default=1.0, metavar="X",
                   help="multiply the timed iteration counts by X (default 1)")
    p.add_argument("--quick", action="store_true",
                   help="4 sizes (4K, 64K, 1M, 16M) and 0.3x the iterations")
    p.add_argument("--json", default=None, metavar="OUT.json", help="write all results as JSON")
    p.add_argument("--plot", default=None, metavar="OUT.png", help="busbw vs size, one line per system")
    p.add_argument("--calibrate", nargs="*", default=None, metavar="EARLIER.json",
                   help="fit the alpha-beta-gamma cost model (terascale.sim) to these "
                        "measurements (plus those of earlier --json reports, e.g. the -n 2 "
                        "run) and print predicted vs measured")
    p.add_argument("--calibration-plot", default=None, metavar="OUT.png",
                   help="with --calibrate: measured vs predicted time")
    p.add_argument("--encrypt", action="store_true",
                   help="also time our algorithms over TCP links: unauthenticated (tcp:ALGO, "
                        "benchmark only), authenticated (mac:ALGO, the default) and AES-GCM "
                        "encrypted (aes:ALGO), and print what integrity and encryption cost")
    add_cluster_flags(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    for flag, value in (("--iters", args.iters), ("--cluster-timeout", args.cluster_timeout)):
        if not (value > 0 and math.isfinite(value)):  # 0 or NaN: no iteration, no deadline
            raise ConfigError(f"{flag} must be positive and finite, got {value}")
    sizes = QUICK_SIZES if args.quick else DEFAULT_SIZES
    if args.sizes:
        sizes = tuple(parse_size(s) for s in args.sizes.split(",") if s.strip())
    if args.cluster is not None:
        from ._allreduce_cluster import cluster_main

        return cluster_main(args, sizes)
    peers = tuple(p for p in ("gloo,mpi" if args.vs is None else args.vs).split(",") if p)
    if args.install_peers:
        from ._peers import SIDE_PEERS, install_peer

        side = [p for p in peers if p in SIDE_PEERS] or list(SIDE_PEERS)
        for name in side:
            install_peer(name)
        peers = (*peers, *(p for p in side if p not in peers))
    opts = BenchOptions(
        nprocs=args.nprocs, sizes=tuple(sizes),
        algorithms=tuple(args.algorithms.split(",")) if args.algorithms else None,
        peers=peers, iters=args.iters * (0.3 if args.quick else 1.0),
        progress=not args.no_progress, encrypt=args.encrypt)
    report = run_bench(opts)
    report["command"] = "terascale bench allreduce " + " ".join(sys.argv[3:]) \
        if sys.argv[1:3] == ["bench", "allreduce"] else None
    core = compiled_core()
    report["shm_core"] = core
    print(f"terascale bench allreduce: n={opts.nprocs}, float32 sum, in place; "
          f"load average {report['load']:.2f}; shared memory: "
          + ("compiled core" if core else "pure Python (the C extension is not built or "
             "TERASCALE_NO_CEXT is set; `pip install -e .` builds it)"))
    if "limits" in report:
        print(format_limits(report["limits"]))
    print(format_table(report))
    systems = systems_of(report)
    if "ours:auto" in systems and len(systems) > 1:
        print("\ntargets (busbw ratios, > 1: ours is faster):")
        print(format_targets(report))
    if "ours:tree" in systems and "ours:ring" in systems:
        cut = crossover(report)
        report["tree_ring_crossover"] = cut
        print(f"tree vs ring: the tree is as fast or faster up to "
              f"{format_size(cut) if cut else 'no measured size'} (n={opts.nprocs})")
    if opts.encrypt:
        print("\nlink security (every link TCP, one pretend host per rank; > 1: slower):")
        print(format_encryption(report))
    for f in report["failures"]:
        print(f"terascale bench: {f} failed; its rows are missing", file=sys.stderr)
    if args.calibrate is not None:
        from ..sim.calibrate import calibrate, format_calibration

        earlier = []
        for path in args.calibrate:
            with open(path) as f:
                earlier.append(json.load(f))
        cal = calibrate(report, *earlier)
        report["calibration"] = cal
        print(format_calibration(cal))
        if args.calibration_plot:
            from ._plot import plot_calibration

            plot_calibration(cal, args.calibration_plot)
    if args.plot:
        from ._plot import plot_busbw

        plot_busbw(report, args.plot)
        print(f"plot: {args.plot}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
        print(f"json: {args.json}")
    return 1 if report["failures"] else 0
