"""Two published jobs on paper: the Terascale linear learning run and Goyal et al.'s ResNet-50.

* **Terascale** (Agarwal, Chapelle, Dudik & Langford, "A Reliable Effective Terascale Linear
  Learning System", JMLR 2014): 17B examples, 2.1T non-zero features
  (about 124 per example), 16M parameters, 1,000 nodes with 1 Gbit/s links, one online pass
  then L-BFGS, reported at 70 minutes. Per node and pass: compute over 17M examples at the
  *measured* per-example cost of :mod:`terascale.linear`'s kernels on this machine, or
  reading the cached shard from disk, whichever is slower; per pass: one allreduce of the
  16M float32 weights or gradients (64 MB) plus a few scalars, timed by the simulator.
* **Goyal et al.** ("Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour", 2017):
  ResNet-50 (25M parameters, 100 MB of float32 gradients per iteration), 256 workers = 32
  servers of 8 GPUs, 50 Gbit/s Ethernet between servers; the communication time of one
  iteration, flat and hierarchical.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..collectives.registry import ALLREDUCE, auto_choice
from .model import CostParams, best, predict
from .simulator import simulate

__all__ = ["ExampleCost", "TerascalePlan", "goyal_plan", "measure_example_cost",
           "recorded_example_cost", "terascale_plan"]


@dataclass(frozen=True)
class ExampleCost:
    """Seconds per example of one online pass and of one gradient pass, and how measured.

    Parameters
    ----------
    online_s
        Seconds per example of one online pass.
    gradient_s
        Seconds per example of one gradient (L-BFGS) pass.
    features_per_example
        Features per example when measured.
    source
        How it was measured (machine, date, or ``"recorded"``).
    """

    online_s: float
    gradient_s: float
    features_per_example: int
    source: str


def measure_example_cost(features: int = 124, examples: int = 200_000, bits: int = 24,
                         seed: int = 0, reps: int = 3) -> ExampleCost:
    """Time :mod:`terascale.linear`'s kernels on synthetic hashed examples.

    :func:`terascale.linear.kernels.kernel_cost` times the adaptive, normalized,
    importance-invariant SGD pass and the logistic loss-and-gradient pass of L-BFGS.

    Parameters
    ----------
    features
        Features per example (default 124).
    examples
        Examples timed (default 200000).
    bits
        Hash bits of the weights (default 24).
    seed
        Seed of the synthetic data (default 0).
    reps
        Repetitions; the fastest counts (default 3).
    """
    from ..linear.kernels import kernel_cost  # numba compiles on first use: import late

    k = kernel_cost(features=features, examples=examples, bits=bits, seed=seed, reps=reps)
    return ExampleCost(k.online_s, k.gradient_s, features,
                       "terascale.linear kernels (online_chunk, loss_grad), 1 core, best of "
                       f"{reps}, {examples} synthetic examples x {features} features, "
                       f"2^{bits} weights")


_RECORDED = "example_cost.json"  # beside this module, shipped with the package
# The tree's pipeline is simulated with at most this many chunks: 17 s -> 1 s of CPU for
# 64 MB over 1,000 nodes, for a pipeline fill 4% longer (2.13 s instead of 2.05 s; 256
# ranks, 100 MB: 56.1 ms instead of 53.5 ms). The steady state is unchanged.
_PAPER_CHUNKS = 64


def recorded_example_cost(path: str | None = None) -> ExampleCost:
    """The per-example costs recorded on a quiet machine (``path``: another such JSON file).

    What ``terascale simulate --paper`` plans with, so that its answer is the same on every
    run and takes no measurement: timing the kernels at run time measured the machine's
    load as much as the kernels. Re-record with ``terascale simulate --paper --calibrate
    --json OUT.json`` (its ``terascale.example_cost``) on a quiet machine.

    Parameters
    ----------
    path
        Another JSON file of costs (default None: the package's ``example_cost.json``).
    """
    import json
    import os

    if path is None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), _RECORDED)
    try:
        with open(path) as f:
            raw = json.load(f)
        cost = ExampleCost(float(raw["online_s"]), float(raw["gradient_s"]),
                           int(raw["features_per_example"]), str(raw["source"]))
    except (OSError, ValueError, KeyError, TypeError) as e:
        from .._errors import ConfigError

        raise ConfigError(f"{path}: not a recorded example cost ({e}); expected JSON with "
                          "online_s, gradient_s, features_per_example, source") from None
    if not (cost.online_s > 0 and cost.gradient_s > 0 and cost.features_per_example > 0):
        from .._errors import ConfigError

        raise ConfigError(f"{path}: costs and features per example must be positive")
    return cost


@dataclass(frozen=True, kw_only=True)
class TerascalePlan:
    """Assumptions of the Terascale run on paper (defaults: the job of Agarwal et al. 2014).

    Parameters
    ----------
    examples
        Training examples (default 17e9).
    features
        Nonzero features in all (default 2.1e12).
    params
        Weights, the allreduced vector's length (default 2**24).
    nodes
        Workers, one per node (default 1000).
    link_bits
        Each node's link in bits/s (default 1 Gbit/s).
    latency
        Seconds per message (default 100 us: a 2011 Hadoop cluster's TCP).
    online_passes
        Online passes (default 1).
    lbfgs_passes
        L-BFGS passes, one data pass each (default 20, the CLI's ``--bfgs 20``).
    cache_bytes_per_feature
        Bytes per feature in the cache (default 4: compressed index, value 1 implicit).
    disk_bytes_per_s
        Each node's disk rate in bytes/s (default 100e6: one 2011 disk).
    straggler
        A straggler spec of :func:`straggler_delays` (``"none"``, ``"exp:1ms"``, ...). Default
        ``"none"``.
    """

    examples: float = 17e9
    features: float = 2.1e12
    params: int = 16 << 20
    nodes: int = 1000
    link_bits: float = 1e9
    latency: float = 100e-6        # per message, 2011 Hadoop cluster TCP
    online_passes: int = 1
    lbfgs_passes: int = 20         # the CLI's --bfgs 20; each one data pass
    cache_bytes_per_feature: float = 4.0  # VW cache: compressed index, value 1 implicit
    disk_bytes_per_s: float = 100e6       # one 2011 disk per node
    straggler: str = "none"


def _flat() -> list[str]:
    """The registry's algorithms simulated message by message over every rank alike."""
    return [a for a, s in ALLREDUCE.items()
            if s.schedule in ("ring order", "radix steps", "heap tree")]


def terascale_plan(cost: ExampleCost, plan: TerascalePlan = TerascalePlan(),
                   seed: int = 0) -> dict[str, Any]:
    """Predicted wall time of the Terascale job, term by term.

    Parameters
    ----------
    cost
        The per-example costs (:func:`recorded_example_cost` or :func:`measure_example_cost`).
    plan
        The assumptions (default: the paper's job).
    seed
        Seed of the straggler draw (default 0).
    """
    from .simulator import straggler_delays

    per_node = plan.examples / plan.nodes
    m = plan.params * 4.0
    c = CostParams(alpha=plan.latency, beta=8.0 / plan.link_bits, gamma=1 / 5e9)
    start = straggler_delays(plan.straggler, plan.nodes, np.random.default_rng(seed))
    allreduce = {a: simulate(a, m, plan.nodes, c, start=start,
                             max_chunks=_PAPER_CHUNKS).time - float(start.max())
                 for a in _flat()}
    # The paper's AllReduce is the pipelined tree: the algorithm auto runs for small messages
    tree = allreduce[auto_choice("small")]
    io_pass = plan.features / plan.nodes * plan.cache_bytes_per_feature / plan.disk_bytes_per_s
    scale = plan.features / plan.examples / cost.features_per_example
    online = per_node * cost.online_s * scale
    grad = per_node * cost.gradient_s * scale
    passes = plan.online_passes + plan.lbfgs_passes
    compute = plan.online_passes * online + plan.lbfgs_passes * grad
    comm = passes * tree
    io = passes * io_pass
    return {"assumptions": asdict(plan), "example_cost": asdict(cost),
            "per_node_examples": per_node, "allreduce_s": allreduce,
            "online_pass_s": online, "gradient_pass_s": grad, "io_pass_s": io_pass,
            "compute_s": compute, "io_s": io, "comm_s": comm,
            "total_in_memory_s": compute + comm, "total_from_disk_s": max(compute, io) + comm,
            "features_per_s_in_memory": plan.features * passes / (compute + comm)}


def goyal_plan(*, workers: int = 256, per_host: int = 8, params: int = 25_000_000,
               link_bits: float = 50e9, latency: float = 10e-6,
               intra_bytes_per_s: float = 20e9) -> dict[str, Any]:
    """Per-iteration allreduce time of ResNet-50 gradients, flat and hierarchical.

    Parameters
    ----------
    workers
        GPUs (default 256).
    per_host
        GPUs per host (default 8).
    params
        Model parameters, float32 (default 25e6: ResNet-50).
    link_bits
        Each host's link in bits/s (default 50 Gbit/s).
    latency
        Seconds per message between hosts (default 10 us).
    intra_bytes_per_s
        Bytes/s copied inside a host (default 20e9).
    """
    hosts = workers // per_host
    m = params * 4.0
    c = CostParams(alpha=latency, beta=8.0 / link_bits, gamma=1 / 20e9, alpha_shm=5e-6,
                   delta=1 / intra_bytes_per_s)
    out: dict[str, Any] = {"assumptions": {"workers": workers, "per_host": per_host,
                                           "params": params, "bytes": m,
                                           "link_bits_per_s": link_bits, "latency_s": latency,
                                           "intra_host_bytes_per_s": intra_bytes_per_s}}
    algos = [a for a in _flat() if ALLREDUCE[a].schedule != "heap tree"] + \
        [a for a in _flat() if ALLREDUCE[a].schedule == "heap tree"] + \
        [a for a, s in ALLREDUCE.items() if s.schedule == "host segments" and s.runs_on(hosts)]
    for algo in algos:
        out[algo] = {"model_s": predict(algo, m, hosts, c, per_host=per_host),
                     "simulated_s": simulate(algo, m, hosts, c, per_host=per_host,
                                             max_chunks=_PAPER_CHUNKS).time}
    radix = next(a for a in _flat() if ALLREDUCE[a].schedule == "radix steps")
    out[f"leaders_only_{radix}_s"] = predict(radix, m, hosts, c)
    out["best_flat_one_worker_per_host"] = best(m, hosts, c)
    out["bandwidth_bound_s"] = 2 * (hosts - 1) / hosts * m * c.beta
    return out
