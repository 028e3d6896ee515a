"""A plain DistributedDataParallel script: run it on terascale by naming the backend.

    terascale run -n 2 python examples/ddp_backend.py --backend terascale
    terascale run -n 2 python examples/ddp_backend.py --backend gloo      # the same bits
    torchrun --nproc-per-node 2 examples/ddp_backend.py --backend terascale

Nothing here is terascale-specific except ``import terascale.torch`` (which registers the
backend) and the backend's name: ``init_process_group`` reads RANK, WORLD_SIZE, MASTER_ADDR
and MASTER_PORT (env://), which ``terascale run`` sets as torchrun does. Every worker trains
on its own shard of a fixed synthetic regression problem; ``--out`` writes the final
parameters (rank 0) so runs can be compared bit for bit.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import terascale.torch  # noqa: F401  (registers the "terascale" backend)


def data(n: int = 256, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    y = x @ torch.linspace(-1, 1, 8).unsqueeze(1) + 0.1 * torch.randn(n, 1, generator=g)
    return x, y


def model() -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="terascale")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=16, help="per-worker batch")
    ap.add_argument("--out", default="", help="write the final parameters here (rank 0)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group(args.backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    net = DistributedDataParallel(model())
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    x, y = data()
    for step in range(args.steps):
        lo = (step * size + rank) * args.batch % len(x)  # rank r takes its slice of the batch
        xb, yb = x[lo:lo + args.batch], y[lo:lo + args.batch]
        opt.zero_grad()
        torch.nn.functional.mse_loss(net(xb), yb).backward()
        opt.step()
    if rank == 0:
        print(f"{args.backend}: {size} workers, {args.steps} steps, loss "
              f"{torch.nn.functional.mse_loss(net(x), y).item():.6f}")
        if args.out:
            torch.save({k: v.detach().clone() for k, v in net.module.state_dict().items()},
                       args.out)
    dist.destroy_process_group()
    if args.backend == "gloo":
        # torch's gloo worker thread frees the last gradient bucket's work, which holds a
        # Python object, once it gets the GIL; if interpreter shutdown starts first the
        # process aborts ("terminate called without an active exception", torch 2.13,
        # pytorch/pytorch#190489). Sleeping hands it the GIL.
        time.sleep(0.1)


if __name__ == "__main__":
    main()
