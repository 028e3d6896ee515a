"""What ``terascale simulate`` prints: per-algorithm predictions, and the two jobs on paper."""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import Any

import numpy as np

from .._errors import ConfigError
from .._units import format_rate, format_size, format_time, parse_rate, parse_size, parse_time
from ..collectives.registry import ALLREDUCE, allreduce_names
from .links import link_time
from .links import recorded as recorded_links
from .model import CostParams, predict
from .simulator import simulate, straggler_delays

__all__ = ["algorithms_for", "paper_report", "run_simulate", "sweep"]

SIM_MAX_CHUNKS = 64  # tree pipeline resolution in the simulator beyond 100 ranks


def algorithms_for(nodes: int, per_host: int) -> list[str]:
    """The registry's algorithms that can run on ``nodes`` hosts of ``per_host`` workers
    each and are priced (a cost formula), each once (shared memory inside hosts with one
    worker per host is its leaders' ring: :meth:`~terascale.collectives.AllreduceSpec.differs_on`).

    Parameters
    ----------
    nodes
        Hosts.
    per_host
        Workers on each host.
    """
    return [a for a in allreduce_names() if ALLREDUCE[a].differs_on(nodes, per_host)
            and ALLREDUCE[a].cost]


def _sim(algo: str, m: float, nodes: int, c: CostParams, q: int, **kw: Any) -> float:
    chunks = SIM_MAX_CHUNKS if nodes * q > 100 else None
    return simulate(algo, m, nodes, c, per_host=q, max_chunks=chunks, **kw).time


def _fmt(s: float) -> str:
    return format_time(s, digits=3)


def run_simulate(args: argparse.Namespace) -> dict[str, Any]:
    """``terascale simulate``: print the per-algorithm table, return it as a dict (``--json``).

    Parameters
    ----------
    args
        The parsed flags of ``terascale simulate``.
    """
    if args.nodes < 1 or args.workers_per_host < 1:
        raise ConfigError("--nodes and --workers-per-host must be at least 1")
    m = parse_size(args.bytes, flag="--bytes")
    link = parse_rate(args.link, flag="--link")
    c = CostParams(alpha=parse_time(args.latency, flag="--latency"), beta=8.0 / link,
                   gamma=8.0 / parse_rate(args.reduce_rate, flag="--reduce-rate"))
    nodes, q = args.nodes, args.workers_per_host
    p = nodes * q
    rng = np.random.default_rng(args.seed)
    try:
        delays = straggler_delays(args.stragglers, p, rng)
    except ValueError as e:
        raise ConfigError(f"--stragglers: {e}") from None
    fail = None
    if args.fail:
        rank, _, when = args.fail.partition("@")
        try:
            fail = (int(rank), parse_time(when or "0", flag="--fail"))
        except ValueError:
            raise ConfigError(f"--fail: cannot read {args.fail!r} (e.g. 17@10ms)") from None
        if not 0 <= fail[0] < p:
            raise ConfigError(f"--fail: rank {fail[0]} is not in 0..{p - 1}")
    print(f"allreduce of {format_size(m, si=True)} over {nodes} node(s) x {q} worker(s), link "
          f"{format_rate(link)}, alpha {c.alpha * 1e6:g} us, reduce {1 / c.gamma / 1e9:g} GB/s"
          + (f", stragglers {args.stragglers} (latest {delays.max() * 1e3:.2f} ms)"
             if args.stragglers != "none" else ""))
    # The TCP column: goodput, the busiest link of each schedule and how well TCP fills it,
    # calibrated on emulated hosts (terascale.sim.links), with this --latency per round.
    tcp = replace(recorded_links(), alpha=c.alpha)
    head = ("| algorithm | model | over TCP | simulated |"
            + (" with stragglers |" if args.stragglers != "none" else ""))
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    rows: dict[str, Any] = {}
    for algo in algorithms_for(nodes, q):
        spec = ALLREDUCE[algo]
        over = link_time(algo, m, nodes, link, tcp, per_host=q) \
            if spec.schedule is not None and spec.runs_on(2) else None
        row: dict[str, Any] = {"model_s": predict(algo, m, nodes, c, per_host=q), "tcp_s": over,
                               "simulated_s": _sim(algo, m, nodes, c, q)}
        line = (f"| {algo} | {_fmt(row['model_s'])} | {'-' if over is None else _fmt(over)} "
                f"| {_fmt(row['simulated_s'])} |")
        if args.stragglers != "none":
            row["stragglers_s"] = _sim(algo, m, nodes, c, q, start=delays)
            line += f" {_fmt(row['stragglers_s'])} |"
        rows[algo] = row
        print(line)
    key = "stragglers_s" if args.stragglers != "none" else "simulated_s"
    choice = min(rows, key=lambda a: rows[a][key])
    print(f"best: {choice} ({_fmt(rows[choice][key])}); bandwidth bound "
          f"2(p-1)/p m beta = {_fmt(2 * (nodes - 1) / nodes * m * c.beta)}")
    over_tcp = [a for a in rows if rows[a]["tcp_s"] is not None]
    if over_tcp:  # what the calibrated TCP model picks: ties of the ideal links broken
        tcp_choice = min(over_tcp, key=lambda a: rows[a]["tcp_s"])
        print(f"best over TCP: {tcp_choice} ({_fmt(rows[tcp_choice]['tcp_s'])}; TCP goodput, "
              f"the busiest link, efficiencies from emulated hosts: {tcp.source})")
    if p > 100:
        print(f"(tree simulated with at most {SIM_MAX_CHUNKS} pipeline chunks)")
    out: dict[str, Any] = {"bytes": m, "nodes": nodes, "per_host": q, "params": vars(c),
                           "algorithms": rows, "best": choice,
                           "best_over_tcp": min(over_tcp, key=lambda a: rows[a]["tcp_s"])
                           if over_tcp else None}
    if fail is not None:
        res = simulate(choice, m, nodes, c, per_host=q, start=delays, fail=fail)
        rerun = rows[choice][key]
        total = fail[1] + args.timeout + rerun
        print(f"node failure: rank {fail[0]} dies at {_fmt(fail[1])}: {res.blocked} of {p} ranks "
              f"never finish ({choice}); the deadline fires after {args.timeout:g} s and the job "
              f"reruns the allreduce: about {_fmt(total)} instead of {_fmt(rerun)} (plus the "
              "restart and the work since the last checkpoint)")
        out["failure"] = {"rank": fail[0], "at_s": fail[1], "blocked": res.blocked,
                          "total_s": total}
    if args.plot:
        from ._plot import plot_scaling

        compute = parse_time(args.compute, flag="--compute")
        plot_scaling(sweep(m, nodes, q, c, args.stragglers, args.seed), compute, args.plot,
                     f"{format_size(m, si=True)}, {format_rate(link)}, {q} worker(s)/host, "
                     f"stragglers {args.stragglers}")
        print(f"plot: {args.plot}")
    return out


def sweep(m: float, nodes: int, q: int, c: CostParams, stragglers: str,
          seed: int) -> dict[str, Any]:
    """Model and simulated time per algorithm for node counts 2, 4, ... up to ``nodes``.

    Parameters
    ----------
    m
        The message size in bytes.
    nodes
        The largest host count.
    q
        Workers per host.
    c
        The machine's :class:`CostParams`.
    stragglers
        A straggler spec of :func:`straggler_delays` (``"none"``, ``"exp:1ms"``, ...).
    seed
        Seed of the straggler draws.
    """
    counts = sorted({2 ** k for k in range(1, 31) if 2 ** k < nodes} | {max(nodes, 2)})
    rng = np.random.default_rng(seed)
    data: dict[str, Any] = {"nodes": counts, "model": {}, "sim": {}}
    for algo in algorithms_for(max(nodes, 2), q):
        data["model"][algo] = [predict(algo, m, n, c, per_host=q) for n in counts]
        data["sim"][algo] = [_sim(algo, m, n, c, q, start=straggler_delays(stragglers, n * q, rng))
                             for n in counts]
    return data


def paper_report(*, calibrate: bool = False, example_cost: str | None = None) -> dict[str, Any]:
    """``terascale simulate --paper``: the Terascale run and Goyal et al.'s ResNet-50 on paper.

    Plans with the per-example costs recorded with the package (or read from
    ``example_cost``), so the answer is the same on every run; ``calibrate`` times this
    machine's kernels instead (seconds, and as noisy as the machine is busy).

    Parameters
    ----------
    calibrate
        Time this machine's kernels instead of the recorded costs (default False).
    example_cost
        A JSON file of per-example costs to plan with (default None: the recorded ones).
    """
    from .plans import goyal_plan, measure_example_cost, recorded_example_cost, terascale_plan

    cost = measure_example_cost() if calibrate else recorded_example_cost(example_cost)
    t = terascale_plan(cost)
    a = t["assumptions"]
    print("The Terascale run on paper (17B examples, 2.1T features, 16M parameters, 1,000 nodes, "
          "1 Gbit/s; reported: 70 minutes)")
    print(f"  per-example cost: online {cost.online_s * 1e6:.2f} us, gradient "
          f"{cost.gradient_s * 1e6:.2f} us at {cost.features_per_example} features "
          f"({cost.source})")
    print(f"  per node and pass: online {t['online_pass_s']:.0f} s, gradient "
          f"{t['gradient_pass_s']:.0f} s, disk read {t['io_pass_s']:.0f} s "
          f"({a['cache_bytes_per_feature']:g} B/feature at {a['disk_bytes_per_s'] / 1e6:g} MB/s)")
    print("  allreduce of 64 MB over 1,000 nodes: " + ", ".join(
        f"{k} {v:.2f} s" for k, v in t["allreduce_s"].items()))
    print(f"  {a['online_passes']} online + {a['lbfgs_passes']} L-BFGS passes: compute "
          f"{t['compute_s'] / 60:.1f} min + allreduce (tree) {t['comm_s'] / 60:.1f} min = "
          f"{t['total_in_memory_s'] / 60:.1f} min (data in memory); from disk "
          f"{t['total_from_disk_s'] / 60:.1f} min")
    g = goyal_plan()
    print("Goyal et al. ResNet-50 (256 workers = 32 hosts x 8, 25M params = 100 MB, 50 Gbit/s): "
          "communication per iteration")
    for algo in (k for k in g if k in ALLREDUCE):
        print(f"  {algo}: model {g[algo]['model_s'] * 1e3:.1f} ms, simulated "
              f"{g[algo]['simulated_s'] * 1e3:.1f} ms")
    print(f"  bandwidth bound over the 32 host links: {g['bandwidth_bound_s'] * 1e3:.1f} ms")
    return {"terascale": t, "goyal": g}
