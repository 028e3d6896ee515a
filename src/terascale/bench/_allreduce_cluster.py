"""``terascale bench allreduce --cluster K --link RATE``: algorithms across emulated hosts.

Builds K emulated hosts (:class:`terascale.testing.cluster.Cluster`: network namespaces on
a bridge, every link rate-limited both ways), runs the benchmark worker on each with the
multi-node launcher (``terascale run --nnodes K``, ``--per-host`` workers per host), and
prints per algorithm and size the busbw as a fraction of the link rate next to the
prediction of the calibrated TCP link model (:mod:`terascale.sim.links`: TCP/IP goodput,
the busiest link of each algorithm's schedule, per-message rounds and how well TCP fills a
link; its constants ship with the package, ``--link-cost FILE`` uses others). With
``--calibrate [EARLIER.json ...]`` it fits those constants to this run and the earlier
``--json`` reports and prints measured against predicted.

The emulation shares this machine's cores among all hosts: at high link rates the run is
CPU-bound, not link-bound, and says nothing about the algorithms (keep the rate low enough
that one core per rank outruns it; 100-200 Mbit/s on a small machine). Needs root.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from .._errors import ConfigError
from .._units import format_rate, format_size
from ..collectives.registry import ALLREDUCE, allreduce_names

__all__ = ["add_cluster_flags", "cluster_main", "format_cluster", "run_cluster_bench"]

_PORT = 29500


def run_cluster_bench(hosts: int, link: str, sizes: Sequence[int], algorithms: Sequence[str],
                      *, per_host: int = 1, iters: float = 1.0, timeout: float = 900.0,
                      link_cost: str | None = None, peers: Sequence[str] = ()) -> dict[str, Any]:
    """Run the algorithms over ``hosts`` emulated hosts; rows with busbw, link fraction, model
    (``link_cost``: a JSON file of :class:`terascale.sim.links.LinkCost`, default the
    recorded one). ``peers``: ``("mpi",)`` also times Open MPI's TCP BTL on the same hosts
    (rows ``openmpi:tcp``, :mod:`._cluster_mpi`)."""
    from ..sim import links
    from ..testing.cluster import Cluster, ClusterUnavailable, available

    cost = links.recorded(link_cost)  # read first: a bad file fails before the long run

    ok, why = available()
    if not ok:
        raise ConfigError(f"--cluster needs emulated hosts: {why}")
    if hosts < 2:
        raise ConfigError(f"--cluster must be at least 2 hosts, got {hosts}")
    cluster = Cluster(hosts, link=link)
    rate = cluster.rate
    assert rate is not None
    goodput = cost.goodput(rate)  # tc's tbf counts the Ethernet header only (framing 14)
    n = hosts * per_host
    skipped: list[str] = []
    mpi = bool({"mpi", "openmpi"} & set(peers))
    for peer in peers:
        if peer not in ("gloo", "mpi", "openmpi", "intelmpi", "mpich", "xgboost"):
            raise ConfigError(f"--vs: unknown peer {peer!r}; across emulated hosts: mpi")
        if peer not in ("mpi", "openmpi"):
            skipped.append(f"{peer}: not run across emulated hosts (only mpi is)")
    if mpi:
        from ._cluster_mpi import mpirun_unavailable

        why_not = mpirun_unavailable()
        if why_not:
            skipped.append(f"mpi: {why_not}")
            mpi = False
    with tempfile.TemporaryDirectory(prefix="terascale-bench-cluster-") as tmp:
        secret, out = os.path.join(tmp, "secret"), os.path.join(tmp, "rows.jsonl")
        with os.fdopen(os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(secrets.token_hex(16))  # owner-only, as a secret file must be
        worker = [sys.executable, "-m", "terascale.bench._allreduce_worker", "--system", "ours",
                  "--sizes", ",".join(str(s) for s in sizes), "--iters", str(iters),
                  "--out", out, "--algorithms", ",".join(algorithms),
                  "--timeout", str(timeout)]
        try:
            with cluster as c:
                procs = [c.popen(k, [sys.executable, "-m", "terascale", "run", "-n",
                                     str(per_host), "--nnodes", str(hosts), "--node-rank",
                                     str(k), "--rendezvous", f"{c.address(0)}:{_PORT}",
                                     "--secret-file", secret, "--timeout", str(timeout),
                                     # auto is told the link rate, as a user would tell it
                                     "--link-rate", repr(float(rate)), "--no-prefix",
                                     *worker],
                                 stdout=subprocess.DEVNULL if k else None)
                         for k in range(hosts)]
                codes = [p.wait(timeout + 60) for p in procs]
                if mpi:
                    codes.append(_run_mpi(c, tmp, sizes, iters, out, per_host, timeout))
        except ClusterUnavailable as e:
            raise ConfigError(f"--cluster: {e}") from None
        rows = []
        if os.path.exists(out):
            with open(out) as f:
                rows = [json.loads(line) for line in f if line.strip()]
    for r in rows:
        algo = r["system"].split(":", 1)[1]
        r["busbw"] = r["bytes"] / r["median_s"] * 2 * (n - 1) / n
        r["link_fraction"] = r["busbw"] * 8 / rate
        try:
            model = links.link_time(algo, r["bytes"], hosts, rate, cost, per_host=per_host)
        except ValueError:  # auto, or one-host algorithms
            model = None
        r["model_s"] = model
        r["model_link_fraction"] = (r["bytes"] / model * 2 * (n - 1) / n * 8 / rate
                                    if model else None)
    return {"hosts": hosts, "per_host": per_host, "link_bits": rate,
            "goodput_bytes_per_s": goodput, "link_cost": cost.source, "results": rows,
            "skipped": skipped,
            "failures": [(f"node {k}" if k < hosts else "Open MPI's mpirun")
                         + f" exit status {code}" for k, code in enumerate(codes) if code]}


def _run_mpi(c: Any, tmp: str, sizes: Sequence[int], iters: float, out: str, per_host: int,
             timeout: float) -> int:
    """Open MPI's TCP BTL on the same emulated hosts, timed by the same worker: exit status."""
    from ._cluster_mpi import CLUSTER_MPIRUN_ENV, cluster_mpirun_cmd, write_agent

    worker = [sys.executable, "-m", "terascale.bench._allreduce_worker", "--system", "mpi",
              "--variant", "openmpi:tcp", "--sizes", ",".join(str(s) for s in sizes),
              "--iters", str(iters), "--out", out]
    agent = write_agent(tmp, [c.namespace(k) for k in range(c.hosts)])
    cmd = cluster_mpirun_cmd(agent, c.hosts, per_host, worker)
    p = c.popen(0, cmd, env=CLUSTER_MPIRUN_ENV, stdin=subprocess.DEVNULL)
    try:
        return p.wait(timeout)
    except subprocess.TimeoutExpired:
        print(f"terascale bench: Open MPI across the emulated hosts did not finish in "
              f"{timeout:.0f} s", file=sys.stderr)
        return 124  # Cluster.down kills it with everything else on the hosts


def format_cluster(report: dict[str, Any]) -> str:
    """The table: size, system, median time, busbw / link rate, the model's / link rate, and
    with Open MPI rows our time over Open MPI's at the same size (``vs mpi``, < 1: faster)."""
    rate = report["link_bits"]
    rows = report["results"]
    mpi = {r["bytes"]: r["median_s"] for r in rows if r["system"] == "openmpi:tcp"}
    lines = [f"{report['hosts']} emulated hosts x {report['per_host']}, links "
             f"{format_rate(rate)} (TCP goodput {report['goodput_bytes_per_s'] * 8 / rate:.1%} "
             "of it)",
             f"{'size':>10} {'system':<18} {'median':>10} {'busbw/link':>11} {'model':>8}"
             + (f" {'vs mpi':>7}" if mpi else "")]
    # In the order they ran (the worker times every algorithm of a size back to back in
    # the order given, then Open MPI's run): an alphabetical order hid which came first.
    for r in sorted(rows, key=lambda r: r["bytes"]):
        model = r["model_link_fraction"]
        name = r["system"] if r["system"].startswith("openmpi") else r["system"].split(":", 1)[1]
        line = (f"{format_size(r['bytes']):>10} {name:<18} {_time(r['median_s']):>10} "
                f"{r['link_fraction']:>10.1%} {'-' if model is None else f'{model:.1%}':>8}")
        if mpi and r["bytes"] in mpi and not r["system"].startswith("openmpi"):
            line += f" {r['median_s'] / mpi[r['bytes']]:>6.2f}x"
        lines.append(line)
    trip = [r for r in rows if r["bytes"] == 4096 and r["system"] in ("ours:auto", "openmpi:tcp")]
    if report["hosts"] * report["per_host"] == 2 and len(trip) == 2:
        # A 4 KiB allreduce between two hosts is one message each way: a round trip.
        ours, theirs = sorted(trip, key=lambda r: r["system"] != "ours:auto")
        lines.append(f"4 KiB round trip between 2 hosts: ours (auto) {_time(ours['median_s'])}, "
                     f"Open MPI TCP BTL {_time(theirs['median_s'])}: "
                     f"{ours['median_s'] / theirs['median_s']:.2f}x (target <= 1.5x)")
    for why in report.get("skipped", []):
        lines.append(f"skipped {why}")
    return "\n".join(lines)


def _time(seconds: float) -> str:
    return f"{seconds * 1e6:.0f}us" if seconds < 1e-3 else f"{seconds * 1e3:.2f}ms"


def add_cluster_flags(p: argparse.ArgumentParser) -> None:
    """``--cluster K``, ``--link RATE``, ``--per-host Q`` of ``terascale bench allreduce``."""
    p.add_argument("--cluster", type=int, default=None, metavar="K",
                   help="run across K emulated hosts (network namespaces, needs root) instead; "
                        "busbw as a fraction of --link beside the cost model's prediction")
    p.add_argument("--link", default="100Mbit", metavar="RATE",
                   help="with --cluster: every link's rate (default 100Mbit)")
    p.add_argument("--per-host", type=int, default=1, metavar="Q",
                   help="with --cluster: workers per emulated host (default 1)")
    p.add_argument("--cluster-timeout", type=float, default=900.0, metavar="S",
                   help="with --cluster: seconds a worker waits for its peers, and each "
                        "job (ours, Open MPI's) may take (default 900)")
    p.add_argument("--link-cost", default=None, metavar="COST.json",
                   help="with --cluster: the TCP link model's constants from this file "
                        "(default: those recorded with the package, terascale/sim/link_cost.json)")


def cluster_main(args: argparse.Namespace, sizes: Sequence[int]) -> int:
    """``terascale bench allreduce --cluster K``: run, print the table, write --json."""
    # auto too: what users get, and the row of the 4 KiB round-trip line on 2 hosts
    algos = args.algorithms.split(",") if args.algorithms else [
        *(a for a in allreduce_names()
          if ALLREDUCE[a].differs_on(args.cluster, args.per_host) and ALLREDUCE[a].subgroup),
        "auto",
        *(a for a in allreduce_names() if ALLREDUCE[a].differs_on(args.cluster, args.per_host)
          and not ALLREDUCE[a].subgroup)]
    earlier = []
    for path in args.calibrate or []:  # read first: a bad file fails before the long run
        with open(path) as f:
            earlier.append(json.load(f))
    rep = run_cluster_bench(args.cluster, args.link, sizes, algos, per_host=args.per_host,
                            iters=args.iters * (0.3 if args.quick else 1.0),
                            link_cost=args.link_cost, timeout=args.cluster_timeout,
                            peers=[p for p in (args.vs or "").split(",") if p])
    print(format_cluster(rep))
    if args.calibrate is not None and rep["results"]:
        from ..sim.links import fit, format_fit

        rep["link_fit"] = fit([rep, *earlier])
        print("\nTCP link model fitted to this run" + (" and earlier ones" if earlier else "")
              + ":\n" + format_fit(rep["link_fit"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rep, f, indent=1)
    return 1 if rep["failures"] else 0
