"""One rank of the failure matrix: a training loop in which rank 1 fails at step 3.

Run by ``terascale run`` or torchrun (env://): ``_fault_worker.py BACKEND FAULT MODE DEADLINE``.

FAULT: ``raise`` (an uncaught exception), ``kill`` (SIGKILL), ``mismatch`` (a collective of
another size), ``stall`` (sleeps past the deadline), ``exit`` (``os._exit(0)`` mid-step).
MODE: ``ddp``, ``hook`` (DDP with an allreduce comm hook), ``powersgd`` (DDP with PowerSGD,
whose callbacks issue and wait collectives), ``fsdp`` (FSDP2's ``fully_shard``), ``plain``
(``all_reduce``/``all_gather``/``broadcast`` calls).

Every surviving rank prints one line ``FAULT-REPORT {json}`` with the error it got and how
long after the step began, then exits with status 1 (the error re-raised).
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist

import terascale.torch  # noqa: F401  (registers the backend)

FAILING = 1
FAIL_STEP = 3


def model(mode: str) -> tuple[torch.nn.Module, torch.optim.Optimizer | None]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    if mode == "plain":
        return net, None
    if mode == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for layer in (net[0], net[2], net):
            fully_shard(layer, mesh=mesh)
        return net, torch.optim.SGD(net.parameters(), lr=0.05)
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    if mode == "hook":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    elif mode == "powersgd":
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd

        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                   start_powerSGD_iter=2, min_compression_rate=0.1)
        ddp.register_comm_hook(state, psgd.powerSGD_hook)
    return ddp, torch.optim.SGD(ddp.parameters(), lr=0.05)


def step(net: torch.nn.Module, opt: torch.optim.Optimizer | None, mode: str,
         x: torch.Tensor) -> None:
    if opt is None:  # plain collectives
        t = x.sum(0)
        dist.all_reduce(t)
        rows = [torch.empty_like(t) for _ in range(dist.get_world_size())]
        dist.all_gather(rows, t)
        dist.broadcast(t, 0)
        return
    opt.zero_grad()
    net(x).square().mean().backward()
    opt.step()


def fail(fault: str, deadline: float) -> None:
    if fault == "raise":
        raise RuntimeError("rank 1 fails on purpose")
    if fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "exit":
        sys.stdout.flush()
        os._exit(0)
    if fault == "stall":
        time.sleep(deadline + 30)  # the survivors give up first; the launcher stops us
    if fault == "mismatch":
        dist.all_reduce(torch.ones(77))  # not the collective the others are in


def main() -> None:
    backend, fault, mode, deadline = (sys.argv[1], sys.argv[2], sys.argv[3],
                                      float(sys.argv[4]))
    torch.set_num_threads(1)
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=deadline))
    rank = dist.get_rank()
    if rank != FAILING:
        # torchrun's agent stops the other workers (SIGTERM) at its first poll after rank 1
        # failed, which may be a moment later: a survivor that has not reported yet gets 10 s
        # to do it (what is under test is what it reports, not the agent's timing)
        def stopped(signum: int, frame: object) -> None:
            threading.Timer(10.0, os._exit, (128 + signum,)).start()

        signal.signal(signal.SIGTERM, stopped)
    net, opt = model(mode)
    g = torch.Generator().manual_seed(rank)
    for i in range(FAIL_STEP + 3):
        x = torch.randn(16, 8, generator=g)
        if i == FAIL_STEP and rank == FAILING:
            fail(fault, deadline)
        began = time.monotonic()
        try:
            step(net, opt, mode, x)
        except Exception as e:
            report = {"rank": rank, "step": i, "type": type(e).__name__,
                      "error": str(e)[:4000],
                      "elapsed": round(time.monotonic() - began, 3)}
            print("FAULT-REPORT " + json.dumps(report), flush=True)
            raise
    print(f"FAULT-REPORT {json.dumps({'rank': rank, 'type': None})}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
