"""Worker bodies of ``terascale bench torch`` (each runs inside ``run_workers``)."""

from __future__ import annotations

import math
import socket
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ..communicator import Communicator
from ..torch.averaging import ModelAverager
from ..torch.broadcast import broadcast_parameters
from ..torch.datasets import fashion_mnist
from ..torch.hooks import OneBitState, fp16_hook, onebit_hook
from ..torch.optimizer import DistributedOptimizer
from ..torch.ps import ParameterServer
from ..torch.recipes import GradualWarmup, MomentumCorrectedSGD
from ..torch.sampler import DistributedSampler
from ._torch_models import make_model

__all__ = ["bytes_worker", "lmb_worker", "p2p_worker", "throughput_worker"]

HOOKS = {"none": None, "fp16": fp16_hook, "onebit": onebit_hook}


def _batch(model: str, b: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, 1, 28, 28, generator=g), torch.randint(0, 10, (b,), generator=g)


def throughput_worker(comm: Communicator, impl: str, model_name: str, batch: int, steps: int,
                      warmup: int) -> float:
    """Seconds per step (slowest rank) of ``impl``: ddp (torch DDP over gloo), ddp-terascale
    (the same DDP over the ``"terascale"`` torch.distributed backend), terascale
    (DistributedOptimizer), onebit (DistributedOptimizer with 1-bit compression, compressing
    from the first step), onebit-auto (``compression="auto"``), half-batch, local-sgd,
    ps-sync or ps-async."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = make_model(model_name)
    x, y = _batch(model_name, batch, comm.rank)
    sgd = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    step: Callable[[], object]
    ddp = impl in ("ddp", "ddp-terascale")
    if ddp:
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        port = None
        if comm.rank == 0:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
        port = comm.broadcast_object(port)
        # "terascale" runs on this job's communicator (shared memory or, with one pretend
        # host per rank, TCP), as DistributedOptimizer does
        dist.init_process_group("gloo" if impl == "ddp" else "terascale",
                                init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank,
                                world_size=comm.size)
        net: torch.nn.Module = DistributedDataParallel(model)
        step = sgd.step
    elif impl.startswith("ps-"):
        net = model
        ps = ParameterServer(model, lr=0.01, momentum=0.9, mode=impl[3:], comm=comm)
        step = ps.step
    elif impl == "local-sgd":
        net = model
        broadcast_parameters(model, comm=comm)
        averager = ModelAverager(model, every=8, comm=comm)

        def local_step() -> None:
            sgd.step()
            averager.step()

        step = local_step
    else:
        net = model
        broadcast_parameters(model, comm=comm)
        extra: dict[str, Any] = {}
        if impl == "onebit":
            extra = {"hook": onebit_hook, "hook_state": OneBitState(warmup_steps=0)}
        elif impl == "onebit-auto":
            extra = {"compression": "auto", "hook_state": OneBitState(warmup_steps=0)}
        opt = DistributedOptimizer(sgd, model, comm=comm, half_batch=impl == "half-batch",
                                   **extra)
        step = opt.step
    elapsed = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            comm.barrier()
            start = time.perf_counter()
        sgd.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        step()
    elapsed = time.perf_counter() - start
    if ddp:
        import torch.distributed as dist

        dist.destroy_process_group()
    elif impl.startswith("ps-"):
        ps.close()
    slowest = comm.allreduce(torch.tensor([elapsed], dtype=torch.float64), op="max")
    return float(slowest[0]) / steps


def bytes_worker(comm: Communicator, hook: str, model_name: str, steps: int) -> float:
    """Bytes this rank put on its TCP links per step with ``hook``."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = make_model(model_name)
    x, y = _batch(model_name, 16, comm.rank)
    opt = DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01), model, comm=comm,
                               hook=HOOKS[hook], hook_state=OneBitState(warmup_steps=0))  # the compressed wire
    comm.barrier()
    before = comm.bytes_sent
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    sent = comm.bytes_sent - before
    return sent / steps


def lmb_worker(comm: Communicator, cfg: dict[str, Any]) -> dict[str, Any]:
    """Train the small CNN on Fashion-MNIST; total batch = workers x 64 x accumulation.

    Parameters
    ----------
    cfg
        Total_batch, lr, warmup_epochs, epochs, limit, hook, momentum, seed, half_batch, and
        optionally onebit (``OneBitState`` keyword arguments), half_batch_momentum and schedule
        (after the warm-up: "constant", the default, or "cosine" decay to 0). Each worker's
        micro-batch is 64 (batch norm over 64 samples, per worker, as in Goyal et al.); a total
        batch larger than ``64 * workers`` is made of accumulated micro-batches.
    """
    torch.set_num_threads(1)
    torch.manual_seed(cfg.get("seed", 0))
    x, y = fashion_mnist(True)
    xt, yt = fashion_mnist(False)
    if cfg.get("limit"):
        x, y = x[: cfg["limit"]], y[: cfg["limit"]]
    micro = 64
    accumulate = cfg["total_batch"] // (micro * comm.size)
    model = make_model("cnn")
    sgd = MomentumCorrectedSGD(model.parameters(), lr=cfg["lr"], momentum=cfg["momentum"],
                               weight_decay=5e-4)
    opt = DistributedOptimizer(sgd, model, comm=comm, hook=HOOKS[cfg["hook"]],
                               hook_state=OneBitState(**cfg.get("onebit", {})),
                               backward_passes_per_step=accumulate,
                               half_batch=cfg.get("half_batch", False),
                               half_batch_momentum=cfg.get("half_batch_momentum"))
    sampler = DistributedSampler(len(x), comm=comm, seed=cfg.get("seed", 0), drop_last=True)
    per_step = micro * accumulate
    steps_per_epoch = len(sampler) // per_step
    warmup_steps = int(cfg["warmup_epochs"] * steps_per_epoch)
    start_factor = min(1.0, cfg["start_lr"] / cfg["lr"])
    if cfg.get("schedule", "constant") == "cosine":  # warmup, then cosine decay to 0
        total = steps_per_epoch * cfg["epochs"]

        def factor(k: int) -> float:
            if k < warmup_steps:
                return start_factor + (1.0 - start_factor) * k / max(warmup_steps, 1)
            return 0.5 * (1.0 + math.cos(math.pi * (k - warmup_steps)
                                         / max(total - warmup_steps, 1)))

        warmup: Any = torch.optim.lr_scheduler.LambdaLR(sgd, factor)
    else:
        warmup = GradualWarmup(sgd, warmup_steps, start_factor=start_factor)
    start = time.perf_counter()
    losses = []
    for epoch in range(cfg["epochs"]):
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(sampler))
        for s in range(steps_per_epoch):
            opt.zero_grad()
            for a in range(accumulate):
                b = idx[s * per_step + a * micro: s * per_step + (a + 1) * micro]
                loss = F.cross_entropy(model(x[b]), y[b]) / accumulate
                loss.backward()
            opt.step()
            warmup.step()
            losses.append(float(loss.detach()) * accumulate)
    opt.flush()  # half-batch: the last gradient still in flight
    # per-worker BN statistics: average them, then score the full test set (rank 0's copy)
    from ..torch.averaging import average_buffers

    average_buffers(model, comm=comm)
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(xb).argmax(1) == yb).sum())
                      for xb, yb in zip(xt.split(1000), yt.split(1000)))
    return {"accuracy": correct / len(xt), "seconds": time.perf_counter() - start,
            "steps": steps_per_epoch * cfg["epochs"], "final_loss": sum(losses[-20:]) / 20,
            "diverged": not all(map(lambda v: v == v and v < 1e3, losses))}


def p2p_worker(sizes: list[int], rounds: int) -> dict[str, dict[int, float]]:
    """Median round trip in seconds per message size of a ping-pong between ranks 0 and 1
    (``dist.send`` then ``dist.recv``; rank 1 echoes), on a ``"terascale"`` group and on
    gloo's world group over the same two processes (``env://``: RANK, WORLD_SIZE,
    MASTER_ADDR, MASTER_PORT: run under torchrun), taking turns in blocks of ``rounds / 4`` (each block after a
    few warm-up rounds); every message checked bit for bit."""
    import statistics

    import torch.distributed as dist

    import terascale.torch  # noqa: F401  registers the backend

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    groups = {"terascale": dist.new_group(backend="terascale"), "gloo": dist.new_group()}
    warm = max(rounds // 40, 2)
    out: dict[str, dict[int, float]] = {name: {} for name in groups}
    try:
        for n in sizes:
            x = torch.arange(max(n // 4, 1), dtype=torch.float32)
            y = torch.empty_like(x)
            times: dict[str, list[float]] = {name: [] for name in groups}
            for _block in range(4):
                for name, g in groups.items():
                    for i in range(warm + rounds // 4):
                        t0 = time.perf_counter()
                        if rank == 0:
                            dist.send(x, 1, group=g, tag=i)
                            dist.recv(y, 1, group=g, tag=i)
                        else:
                            dist.recv(y, 0, group=g, tag=i)
                            dist.send(y, 0, group=g, tag=i)
                        if i >= warm:
                            times[name].append(time.perf_counter() - t0)
                        if rank == 0 and not torch.equal(x, y):
                            raise RuntimeError(f"{name}: a {n}-byte message came back changed")
            for name in groups:
                out[name][n] = statistics.median(times[name])
    finally:
        dist.destroy_process_group()
    return out


if __name__ == "__main__":  # one rank of ``terascale bench torch --parts p2p``
    import json
    import os
    import sys

    result = p2p_worker([int(s) for s in sys.argv[1].split(",")], int(sys.argv[2]))
    if os.environ.get("RANK") == "0":
        print("P2P-RESULT " + json.dumps(result), flush=True)
