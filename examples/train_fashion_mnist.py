"""Data-parallel training of a small CNN on Fashion-MNIST with terascale.torch.

One worker (a plain process; terascale sees a job of size 1)::

    python examples/train_fashion_mnist.py --epochs 3

Four workers on this machine, each with a per-worker batch of 64 (total batch 256), the
learning rate scaled linearly from the batch-64 value, warmed up over the first epoch and
decayed by a cosine to the last step (``--schedule constant`` keeps it)::

    terascale run -n 4 python examples/train_fashion_mnist.py --epochs 3 --batch-size 64 \\
        --scale-lr linear --warmup-epochs 1

The LR warms up over ``--warmup-epochs`` (default 1) and then decays by a cosine to the last
step (``--schedule cosine``, the default, or ``constant``). Variations: ``--compression fp16``
or ``--compression onebit`` (1-bit SGD with error feedback), ``--half-batch`` (communication
one step behind compute, with weight prediction), ``--local-sgd 8``
(average the model every 8 steps instead of the gradients every step). Data: the IDX files of
Debian's ``dataset-fashion-mnist`` in /usr/share/datasets/fashion-mnist (``--data DIR``).

Every worker starts from rank 0's weights (broadcast), reads its own shard of a fresh
permutation every epoch (``DistributedSampler``), averages gradients with bucketed allreduce
overlapped with backward (``DistributedOptimizer``), keeps its own batch-norm statistics
(averaged only before evaluation) and prints, on rank 0, a progress bar per epoch and the
test accuracy after each epoch.
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from tqdm import tqdm

import terascale
import terascale.torch as tt
from terascale.torch.datasets import DEFAULT_ROOT, fashion_mnist


def small_cnn() -> torch.nn.Module:
    """~20k parameters: two 5x5 convolutions (8 and 16 channels), batch norm, two dense layers.

    Written out here on purpose, so that the example shows the whole model it trains;
    ``terascale bench torch`` times the same network (tests/torch/test_example.py checks
    that the two agree).
    """
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 5), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(256, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
             comm: terascale.Communicator) -> float:
    """Accuracy on the test set, each worker scoring its own slice; counts are allreduced."""
    model.eval()
    mine = slice(comm.rank * len(x) // comm.size, (comm.rank + 1) * len(x) // comm.size)
    with torch.no_grad():
        correct = sum(int((model(xb).argmax(1) == yb).sum())
                      for xb, yb in zip(x[mine].split(1000), y[mine].split(1000)))
    model.train()
    total = comm.allreduce(torch.tensor([correct, len(x[mine])], dtype=torch.float64))
    return float(total[0] / total[1])


def main(argv: list[str] | None = None) -> float:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64, help="per worker")
    ap.add_argument("--lr", type=float, default=0.05, help="LR for a total batch of 64")
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--scale-lr", choices=["none", "linear", "sqrt"], default="linear")
    ap.add_argument("--warmup-epochs", type=float, default=1.0,
                    help="raise the LR linearly from the batch-64 value over these epochs")
    ap.add_argument("--schedule", choices=["cosine", "constant"], default="cosine",
                    help="LR after the warm-up: cosine decay to 0 by the last step, or constant")
    ap.add_argument("--compression", choices=["none", "fp16", "onebit"], default="none")
    ap.add_argument("--onebit-block", type=int, default=256, help="values per 1-bit scale")
    ap.add_argument("--half-batch", action="store_true")
    ap.add_argument("--local-sgd", type=int, default=0, metavar="K",
                    help="average the model every K steps instead of gradients every step")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per worker")
    ap.add_argument("--limit", type=int, default=0, help="use only this many training images")
    ap.add_argument("--test-limit", type=int, default=0)
    ap.add_argument("--data", default=DEFAULT_ROOT)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    comm = terascale.init()
    torch.manual_seed(args.seed + comm.rank)
    x, y = fashion_mnist(True, args.data)
    xt, yt = fashion_mnist(False, args.data)
    if args.limit:
        x, y = x[: args.limit], y[: args.limit]
    if args.test_limit:
        xt, yt = xt[: args.test_limit], yt[: args.test_limit]

    model = small_cnn()
    tt.broadcast_parameters(model, comm=comm)  # everyone starts from rank 0's weights
    total_batch = args.batch_size * comm.size
    lr = args.lr if args.scale_lr == "none" else tt.scale_lr(args.lr, total_batch, 64,
                                                                args.scale_lr)
    sgd = tt.MomentumCorrectedSGD(model.parameters(), lr=lr, momentum=args.momentum,
                                  weight_decay=args.weight_decay)
    sampler = tt.DistributedSampler(len(x), comm=comm, seed=args.seed)
    steps_per_epoch = -(-len(sampler) // args.batch_size)
    warmup_steps = int(args.warmup_epochs * steps_per_epoch)
    decay = None
    if args.schedule == "cosine":  # built first: GradualWarmup hands over to it
        decay = torch.optim.lr_scheduler.CosineAnnealingLR(
            sgd, T_max=max(1, args.epochs * steps_per_epoch - warmup_steps))
    warmup = tt.GradualWarmup(sgd, warmup_steps, start_factor=min(1.0, args.lr / lr),
                              after=decay)
    if args.local_sgd:
        opt: tt.DistributedOptimizer | torch.optim.Optimizer = sgd
        averager = tt.ModelAverager(model, every=args.local_sgd, comm=comm)
    else:
        hook = {"none": None, "fp16": tt.fp16_hook, "onebit": tt.onebit_hook}[args.compression]
        opt = tt.DistributedOptimizer(sgd, model, comm=comm, hook=hook,
                                      hook_state=tt.OneBitState(block=args.onebit_block), half_batch=args.half_batch)
    if comm.rank == 0:
        print(f"{comm.size} worker(s), total batch {total_batch}, lr {lr:g}, "
              f"{steps_per_epoch} steps/epoch", flush=True)
    acc = 0.0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(sampler))
        start = time.perf_counter()
        bar = tqdm(idx.split(args.batch_size), desc=f"epoch {epoch + 1}/{args.epochs}",
                   disable=comm.rank != 0, leave=True)
        for batch in bar:
            opt.zero_grad()
            loss = F.cross_entropy(model(x[batch]), y[batch])
            loss.backward()
            opt.step()
            if args.local_sgd:
                averager.step()
            warmup.step()
            bar.set_postfix(loss=f"{loss.item():.3f}", refresh=False)
        if isinstance(opt, tt.DistributedOptimizer):
            opt.flush()  # half-batch: apply the gradient still in flight
        elif args.local_sgd:
            averager.average()
        tt.average_buffers(model, comm=comm)  # per-worker BN statistics, averaged to evaluate
        acc = evaluate(model, xt, yt, comm)
        if comm.rank == 0:
            print(f"epoch {epoch + 1}: test accuracy {acc:.4f} "
                  f"({time.perf_counter() - start:.1f} s)", flush=True)
    comm.close()
    return acc


if __name__ == "__main__":
    main()
