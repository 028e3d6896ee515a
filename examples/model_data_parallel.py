"""Model and data parallelism at once, with sub-communicators from ``Communicator.split``.

A logistic regression whose weight vector is cut into ``--shards`` slices (model
parallelism: each rank of a model copy holds one slice of the features) and whose examples
are cut into ``size / shards`` parts (data parallelism: each copy of a slice sees its own
examples). Rank ``r`` holds slice ``r % shards`` of copy ``r // shards``; two splits give
every rank its two groups:

* ``mp = comm.split(copy)``: the slices of one model copy; the logits of an example are the
  sum of the slices' partial dot products (``mp.allreduce``);
* ``dp = comm.split(slice)``: the copies of one slice; the gradient of a slice is summed
  over every copy's examples (``dp.allreduce``), as in plain data parallelism.

Every layout computes the same full-batch gradient steps, so 1 worker and 2 x 2 workers
print the same loss (to rounding). The data is synthetic and generated alike on every rank
for the demo; a real job reads only its own rows and columns.

Run on 1 worker, then on 4 (2 slices x 2 copies) and 6 (3 x 2)::

    python examples/model_data_parallel.py
    terascale run -n 4 python examples/model_data_parallel.py --shards 2
    terascale run -n 6 python examples/model_data_parallel.py --shards 3
"""

import argparse

import numpy as np

import terascale

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--shards", type=int, default=1, help="model slices (divides the size)")
parser.add_argument("--steps", type=int, default=100)
parser.add_argument("--features", type=int, default=60)
parser.add_argument("--examples", type=int, default=3000)
parser.add_argument("--lr", type=float, default=1.0)
args = parser.parse_args()

with terascale.init() as comm:
    if args.shards < 1 or comm.size % args.shards:
        raise SystemExit(f"--shards {args.shards} must divide the number of workers {comm.size}")
    copies = comm.size // args.shards
    my_slice, my_copy = comm.rank % args.shards, comm.rank // args.shards
    mp = comm.split(my_copy)   # the slices of my model copy, ranked by slice
    dp = comm.split(my_slice)  # the copies of my slice, ranked by copy

    rng = np.random.default_rng(0)
    X = rng.standard_normal((args.examples, args.features))
    y = (X @ rng.standard_normal(args.features) + rng.standard_normal(args.examples) > 0)
    rows = np.array_split(np.arange(args.examples), copies)[my_copy]
    cols = np.array_split(np.arange(args.features), args.shards)[my_slice]
    X_mine, y_mine = X[np.ix_(rows, cols)], y[rows].astype(np.float64)

    w = np.zeros(len(cols))
    for _ in range(args.steps):
        z = mp.allreduce(X_mine @ w)           # logits of my copy's rows: sum over slices
        p = 1.0 / (1.0 + np.exp(-z))
        w -= args.lr * dp.allreduce(X_mine.T @ (p - y_mine)) / args.examples

    z = mp.allreduce(X_mine @ w)
    losses = np.logaddexp(0.0, -z) * y_mine + np.logaddexp(0.0, z) * (1 - y_mine)
    # Each copy's rows once: sum over the copies (one rank per copy counts, via dp).
    loss = dp.allreduce(np.array([losses.sum()]))[0] / args.examples
    weights = np.concatenate(mp.allgather_object(w))
    if comm.rank == 0:
        print(f"{comm.size} workers = {args.shards} slices x {copies} copies: "
              f"loss {loss:.12f}, |w| {np.linalg.norm(weights):.12f}")
    mp.close()
    dp.close()
