"""Checkpointed data-parallel training on Ray actors that survives a killed actor.

One actor per rank in a placement group. With ``--crash-at K`` rank 1 SIGKILLs itself after
checkpoint K on the first attempt; the driver restarts the whole group (``max_restarts``),
which resumes from checkpoint K and ends bitwise where a run without failure ends::

    python examples/ray_train.py
    python examples/ray_train.py --crash-at 4
    RAY_ADDRESS=ray://head:10001 python examples/ray_train.py --workers 8   # a real cluster
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import tempfile

import numpy as np

import terascale
import terascale.ray


def train(ckpt_dir: str, steps: int, crash_at: int | None) -> bytes:
    with terascale.init() as comm:
        ckpt = terascale.Checkpoint(ckpt_dir, comm)
        found = ckpt.load()
        step, w = (0, np.zeros(50)) if found is None else (found[0], found[1]["w"])
        rng = np.random.default_rng(1234 + comm.rank)  # this rank's shard
        x = rng.standard_normal((2000, 50))
        y = x @ np.linspace(-1, 1, 50) + 0.1 * rng.standard_normal(2000)
        first_attempt = os.environ.get("TERASCALE_RESTART") == "0"
        while step < steps:
            grad = x.T @ (x @ w - y) / len(y)
            w = w - 0.05 * comm.allreduce(grad) / comm.size
            step += 1
            ckpt.save(step, {"w": w})
            if step == crash_at and comm.rank == 1 and first_attempt:
                os.kill(os.getpid(), signal.SIGKILL)
        return w.tobytes()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--crash-at", type=int, default=None)
    args = ap.parse_args()
    import ray

    if "RAY_ADDRESS" not in os.environ:
        ray.init(num_cpus=args.workers, include_dashboard=False)
    with tempfile.TemporaryDirectory() as tmp:  # on a cluster: a path rank 0 always sees
        ws = terascale.ray.run(train, num_workers=args.workers, max_restarts=2,
                               args=(f"{tmp}/ckpt", args.steps, args.crash_at))
    assert all(w == ws[0] for w in ws), "ranks disagree"
    print(f"{args.workers} ranks agree; weights sha256 {hashlib.sha256(ws[0]).hexdigest()[:16]}")


if __name__ == "__main__":
    main()
