"""Training that survives a crash: checkpoints, ``--max-restarts``, bitwise-identical result.

Data-parallel least squares by minibatch SGD: each rank computes the gradient on its shard,
the gradients are averaged with allreduce, every rank takes the same step. State is
checkpointed every 5 steps; after a failure ``terascale run`` restarts the group, which
resumes from the last checkpoint. Because the collectives are deterministic, the final
weights are bitwise identical to a run that never failed.

Run it without and with a failure (rank 1 kills itself with SIGKILL at step 13)::

    terascale run -n 3 python examples/restart_training.py --out /tmp/w_ok.npy --ckpt /tmp/ck1
    terascale run -n 3 --max-restarts 1 python examples/restart_training.py \\
        --out /tmp/w_crash.npy --ckpt /tmp/ck2 --crash-at 13
    cmp /tmp/w_ok.npy /tmp/w_crash.npy && echo identical
"""

from __future__ import annotations

import argparse
import os
import signal
import tempfile

import numpy as np

import terascale


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="where rank 0 writes the final weights (.npy)")
    ap.add_argument("--ckpt", required=True, help="checkpoint directory")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--crash-at", type=int, default=None,
                    help="rank 1 kills itself with SIGKILL at this step on the first attempt")
    args = ap.parse_args()

    with terascale.init() as comm:
        rng = np.random.default_rng(1234 + comm.rank)  # this rank's shard
        X = rng.standard_normal((2000, 50))
        y = X @ np.linspace(-1, 1, 50) + 0.1 * rng.standard_normal(2000)
        ckpt = terascale.Checkpoint(args.ckpt, comm)
        restored = ckpt.load()
        step, w = (0, np.zeros(50)) if restored is None else (restored[0], restored[1]["w"])
        first_attempt = os.environ.get("TERASCALE_RESTART", "0") == "0"
        while step < args.steps:
            if args.crash_at == step and comm.rank == 1 and first_attempt:
                os.kill(os.getpid(), signal.SIGKILL)
            batch = slice((step * 100) % 2000, (step * 100) % 2000 + 100)
            grad = X[batch].T @ (X[batch] @ w - y[batch]) / 100
            w = w - 0.05 * comm.allreduce(grad) / comm.size
            step += 1
            if step % 5 == 0:
                ckpt.save(step, {"w": w})
        if comm.rank == 0:
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(args.out)))
            with os.fdopen(fd, "wb") as f:
                np.save(f, w)
            os.replace(tmp, args.out)
            print(f"final loss-gradient norm {np.linalg.norm(grad):.6f}, weights -> {args.out}")


if __name__ == "__main__":
    main()
