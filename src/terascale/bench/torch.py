"""``terascale bench torch``: data-parallel PyTorch side by side with DDP (gloo).

Three parts, all in one run (``--parts``):

* ``throughput``: samples/s of the same model and per-worker batch, one torch thread per
  worker, n = 1, 2, 4: torch ``DistributedDataParallel`` over gloo and over the
  ``"terascale"`` torch.distributed backend (``ddp-terascale``, and ``ddp-terascale-tcp``
  with one pretend host per rank); terascale's
  ``DistributedOptimizer`` with ``auto`` collectives (shared memory on one host) and with
  every rank pretending to be its own host (TCP, what crosses machines); half-batch;
  local SGD (model averaging every 8 steps); the parameter server, sync and async; and,
  when named in ``--impls``, ``onebit`` (1-bit compression from the first step) and
  ``onebit-auto`` (``compression="auto"``).
* ``bytes``: bytes each worker puts on its TCP links per step with no compression, fp16
  and 1-bit (one pretend host per rank, so everything crosses TCP).
* ``lmb``: the large-minibatch table (Goyal et al. 2017) on Fashion-MNIST with the small
  CNN: total batch 64/256/1024 with the LR unchanged, linearly scaled, linearly scaled with
  gradual warmup; plus 1-bit vs full precision at 256 on 4 real workers.
* ``compression``: the same CNN on the largest of ``--workers`` (default 4) x 64 at
  ``--momentum`` (default 0.9) for ``--epochs`` (default 5), LR warm-up over the first
  epoch then ``--schedule`` (cosine decay, or constant): full precision, 1-bit (its
  warm-up and momentum compression, as configured by default) and half-batch (its weight
  prediction), with each one's test accuracy and difference from full precision, per seed
  of ``--seeds``; the bytes each puts on the wire are the ``bytes`` part.
* ``p2p``: point-to-point latency, a ping-pong between two ranks (``dist.send`` then
  ``dist.recv``, rank 1 echoing) on a ``"terascale"`` group and on gloo over the same two
  processes, the two backends interleaved round by round so that both see the same load;
  the median round trip per ``--p2p-sizes`` and the ratio terascale/gloo (the two ranks
  run under torchrun).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

__all__ = ["add_bench_parser"]


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``torch`` to the ``terascale bench`` subcommands.

    Parameters
    ----------
    kinds
        The ``terascale bench`` sub-command parsers (``add_subparsers``' result).
    """
    p = kinds.add_parser("torch", help="data-parallel PyTorch vs DistributedDataParallel",
                         description=__doc__.splitlines()[0])
    p.add_argument("--parts", default="throughput,bytes,lmb",
                   help="comma list of throughput, bytes, lmb, compression, p2p")
    p.add_argument("--workers", default="1,2,4", help="world sizes for throughput")
    p.add_argument("--models", default="cnn,mlp", help="comma list of cnn, mlp (throughput)")
    p.add_argument("--impls",
                   default="ddp,ddp-terascale,ddp-terascale-tcp,terascale,terascale-tcp,"
                           "half-batch,local-sgd,ps-sync,ps-async",
                   help="comma list of the implementations to time (throughput; default: "
                        "all of these; onebit and onebit-auto only when named)")
    p.add_argument("--batch", type=int, default=64, help="per-worker batch (throughput)")
    p.add_argument("--steps", type=int, default=30, help="timed steps per throughput cell")
    p.add_argument("--warmup", type=int, default=5,
                   help="untimed steps before them (connections, allocator, caches)")
    p.add_argument("--repeats", type=int, default=2,
                   help="interleaved repetitions per throughput cell; the best is reported")
    p.add_argument("--epochs", type=int, default=5, help="epochs per large-minibatch run")
    p.add_argument("--limit", type=int, default=0, help="training images (0: all 60000)")
    p.add_argument("--lr", type=float, default=0.025,
                   help="base LR for batch 64 (Goyal et al.: 0.1 per 256)")
    p.add_argument("--momentum", type=float, default=0.9, help="momentum (compression)")
    p.add_argument("--schedule", choices=["cosine", "constant"], default="cosine",
                   help="LR after the warm-up (compression): cosine decay to 0 by the last "
                        "step, as training recipes end, or constant to the end")
    p.add_argument("--seeds", default="0",
                   help="comma list of seeds (compression): model init and data order")
    p.add_argument("--p2p-sizes", default="4096,65536,1048576,16777216",
                   help="message sizes in bytes (p2p)")
    p.add_argument("--p2p-rounds", type=int, default=200,
                   help="round trips per size and backend (p2p); a 10th of them, at least "
                        "2, warm up first")
    p.add_argument("--json", default="", help="also write the raw numbers here")
    p.set_defaults(func=_main)


def _csv(text: str) -> list[str]:
    return [t for t in text.split(",") if t]


def _throughput(args: argparse.Namespace) -> list[dict[str, Any]]:
    from ..testing import run_workers
    from ._torch_workers import throughput_worker

    rows = []
    for model in _csv(args.models):
        for n in [int(v) for v in _csv(args.workers)]:
            times: dict[str, list[float]] = {impl: [] for impl in _csv(args.impls)}
            for _ in range(args.repeats):  # interleaved: A B C A B C, against load drift
                for impl in times:
                    tcp = impl.endswith("-tcp")  # one pretend host per rank: all over TCP
                    hosts = [f"h{i}" for i in range(n)] if tcp else None
                    real = impl[:-4] if tcp else impl
                    t = run_workers(throughput_worker, n, args=(real, model, args.batch,
                                                                args.steps, args.warmup),
                                    timeout=600, host_ids=hosts)[0]
                    times[impl].append(t)
                    print(f"  {model} n={n} {impl:14s} {1000 * t:8.2f} ms/step", flush=True)
            for impl, ts in times.items():
                t = min(ts)
                rows.append({"model": model, "n": n, "impl": impl, "step_s": t,
                             "median_step_s": statistics.median(ts),
                             "all_step_s": ts, "samples_s": n * args.batch / t})
    print("\n| model | n | impl | ms/step (best) | ms/step (median) | samples/s | "
          "step time / DDP |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        ddp = next((q["step_s"] for q in rows if q["model"] == r["model"] and q["n"] == r["n"]
                    and q["impl"] == "ddp"), None)
        ratio = f"{r['step_s'] / ddp:.2f}" if ddp else "-"
        print(f"| {r['model']} | {r['n']} | {r['impl']} | {1000 * r['step_s']:.2f} | "
              f"{1000 * r['median_step_s']:.2f} | {r['samples_s']:.0f} | {ratio} |")
    return rows


def _bytes(args: argparse.Namespace) -> list[dict[str, Any]]:
    from ..testing import run_workers
    from ._torch_workers import bytes_worker

    rows = []
    for model in _csv(args.models):
        for n in (2, 4):
            base = None
            for hook in ("none", "fp16", "onebit"):
                per_rank = run_workers(bytes_worker, n, args=(hook, model, 5), timeout=300,
                                       host_ids=[f"h{i}" for i in range(n)])
                b = sum(per_rank) / n
                base = base or b
                rows.append({"model": model, "n": n, "hook": hook, "bytes": b,
                             "reduction": base / b})
    print("\n| model | n | hook | bytes sent per worker per step | x fewer than none |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['n']} | {r['hook']} | {r['bytes']:.0f} | "
              f"{r['reduction']:.1f} |")
    return rows


def _lmb(args: argparse.Namespace) -> list[dict[str, Any]]:
    from .._init import init
    from ..testing import run_workers
    from ..torch.recipes import scale_lr
    from ._torch_workers import lmb_worker

    rows: list[dict[str, Any]] = []

    def run(label: str, n: int, **cfg: Any) -> None:
        cfg = {"epochs": args.epochs, "limit": args.limit, "hook": "none", "momentum": 0.9,
               "start_lr": args.lr, "warmup_epochs": 0.0, **cfg}
        t0 = time.perf_counter()
        if n == 1:
            with init() as comm:
                out = lmb_worker(comm, cfg)
        else:
            out = run_workers(lmb_worker, n, args=(cfg,), timeout=1800)[0]
        rows.append({"label": label, "workers": n, **cfg, **out,
                     "wall_s": time.perf_counter() - t0})
        print(f"  {label:40s} acc {out['accuracy']:.4f} loss {out['final_loss']:.3f} "
              f"{'DIVERGED ' if out['diverged'] else ''}({time.perf_counter() - t0:.0f} s)",
              flush=True)

    run("batch 64 (base)", 1, total_batch=64, lr=args.lr)
    for b in (256, 1024):
        lin = scale_lr(args.lr, b, 64)
        run(f"batch {b}, LR unchanged", 1, total_batch=b, lr=args.lr)
        run(f"batch {b}, linear LR, no warmup", 1, total_batch=b, lr=lin)
        run(f"batch {b}, linear LR + warmup", 1, total_batch=b, lr=lin, warmup_epochs=1.0)
    lin = scale_lr(args.lr, 256, 64)
    for hook, mom in (("none", 0.9), ("onebit", 0.9), ("onebit", 0.5)):
        run(f"4 workers x 64, {hook}, momentum {mom}", 4, total_batch=256, lr=lin,
            warmup_epochs=1.0, hook=hook, momentum=mom)
    print("\n| run | total batch | LR | warmup epochs | test accuracy | diff vs batch 64 |")
    print("|---|---|---|---|---|---|")
    base = rows[0]["accuracy"]
    for r in rows:
        print(f"| {r['label']} | {r['total_batch']} | {r['lr']:g} | {r['warmup_epochs']:g} | "
              f"{100 * r['accuracy']:.2f}% | {100 * (r['accuracy'] - base):+.2f} |")
    return rows


def _compression(args: argparse.Namespace) -> list[dict[str, Any]]:
    from ..testing import run_workers
    from ..torch.recipes import scale_lr
    from ._torch_workers import lmb_worker

    n = max(int(v) for v in _csv(args.workers))
    lr = scale_lr(args.lr, 64 * n, 64)
    seeds = [int(v) for v in _csv(args.seeds)]
    variants: tuple[tuple[str, dict[str, Any]], ...] = (("full precision", {}), ("1-bit", {"hook": "onebit"}),
                ("half-batch", {"half_batch": True}))
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        for label, extra in variants:
            cfg = {"epochs": args.epochs, "limit": args.limit, "hook": "none",
                   "momentum": args.momentum, "start_lr": args.lr,
                   "warmup_epochs": min(1.0, args.epochs / 5), "total_batch": 64 * n,
                   "lr": lr, "seed": seed, "schedule": args.schedule, **extra}
            t0 = time.perf_counter()
            out = run_workers(lmb_worker, n, args=(cfg,), timeout=3600)[0]
            rows.append({"label": label, "workers": n, **cfg, **out,
                         "wall_s": time.perf_counter() - t0})
            print(f"  seed {seed} {label:16s} acc {out['accuracy']:.4f} "
                  f"loss {out['final_loss']:.3f} ({time.perf_counter() - t0:.0f} s)",
                  flush=True)
    print(f"\n| {n} workers x 64, momentum {args.momentum:g}, {args.epochs} epochs, "
          f"{args.schedule} LR | "
          + " | ".join(f"seed {s}" for s in seeds) + " | mean | mean diff vs full precision |")
    print("|---|" + "---|" * (len(seeds) + 2))
    mean = {label: sum(r["accuracy"] for r in rows if r["label"] == label) / len(seeds)
            for label, _ in variants}
    for label, _ in variants:
        accs = [r["accuracy"] for r in rows if r["label"] == label]
        print(f"| {label} | " + " | ".join(f"{100 * a:.2f}%" for a in accs)
              + f" | {100 * mean[label]:.2f}% | "
              f"{100 * (mean[label] - mean['full precision']):+.2f} |")
    return rows


def _p2p(args: argparse.Namespace) -> list[dict[str, Any]]:
    import os
    import socket
    import subprocess
    import sys

    sizes = [int(s) for s in _csv(args.p2p_sizes)]
    with socket.socket() as s:  # torch's store: a free port, as torchrun's rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # two ranks under torchrun, as a user launches them
    run = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
         "--master-port", str(port), "-m", "terascale.bench._torch_workers", args.p2p_sizes,
         str(args.p2p_rounds)], capture_output=True, text=True, timeout=1800,
        env={**os.environ, "OMP_NUM_THREADS": "1"})
    if run.returncode:
        raise RuntimeError(f"bench torch p2p: torchrun exited {run.returncode}:\n"
                           + run.stdout[-2000:] + run.stderr[-3000:])
    line = next(ln for ln in run.stdout.splitlines() if ln.startswith("P2P-RESULT "))
    medians = json.loads(line.split(" ", 1)[1])
    rows = []
    print("\n| message | terascale round trip | gloo round trip | terascale / gloo |")
    print("|---|---|---|---|")
    for n in sizes:
        ts, gl = medians["terascale"][str(n)], medians["gloo"][str(n)]
        rows.append({"bytes": n, "terascale_s": ts, "gloo_s": gl, "ratio": ts / gl})
        print(f"| {n} B | {ts * 1e6:.0f} us | {gl * 1e6:.0f} us | {ts / gl:.2f} |", flush=True)
    return rows


def _main(args: argparse.Namespace) -> int:
    import os

    import torch  # noqa: F401  (first: without the torch extra, the command says what to install)

    os.environ.setdefault("OMP_NUM_THREADS", "1")
    parts = _csv(args.parts)
    out: dict[str, Any] = {}
    for name, fn in (("throughput", _throughput), ("bytes", _bytes), ("lmb", _lmb),
                     ("compression", _compression), ("p2p", _p2p)):
        if name in parts:
            print(f"== {name}", flush=True)
            out[name] = fn(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0
