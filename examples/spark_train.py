"""Checkpointed data-parallel training as a Spark barrier job that survives a failed task.

Each Spark task is one terascale rank; ``terascale.init()`` inside the function joins the
job. With ``--fail-at K`` rank 1 raises after committing checkpoint K on the first attempt;
Spark reruns the barrier stage, every rank resumes from checkpoint K, and the final weights
are bitwise those of the run without failure::

    python examples/spark_train.py --master "local[2]"
    python examples/spark_train.py --master "local[2]" --fail-at 4
    python examples/spark_train.py --master "local-cluster[2,1,1024]" --fail-at 4
    spark-submit --master "local[2]" examples/spark_train.py --fail-at 4
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile

import numpy as np

import terascale
import terascale.spark


def train(ckpt_dir: str, steps: int, fail_at: int | None, marker: str) -> bytes:
    with terascale.init() as comm:
        ckpt = terascale.Checkpoint(ckpt_dir, comm)
        found = ckpt.load()
        step, w = (0, np.zeros(50)) if found is None else (found[0], found[1]["w"])
        if found is not None and comm.rank == 0:
            print(f"resuming from checkpoint {step}", file=sys.stderr)
        rng = np.random.default_rng(1234 + comm.rank)  # this rank's shard
        x = rng.standard_normal((2000, 50))
        y = x @ np.linspace(-1, 1, 50) + 0.1 * rng.standard_normal(2000)
        while step < steps:
            grad = x.T @ (x @ w - y) / len(y)
            w = w - 0.05 * comm.allreduce(grad) / comm.size
            step += 1
            ckpt.save(step, {"w": w})
            if step == fail_at and comm.rank == 1 and not os.path.exists(marker):
                open(marker, "w").close()
                raise RuntimeError(f"injected failure after checkpoint {step}")
        return w.tobytes()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--master", default=None, help="default: spark-submit's, else local[*]")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--fail-at", type=int, default=None)
    args = ap.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName("terascale-example")
    spark = (builder.master(args.master) if args.master else builder).getOrCreate()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            ws = terascale.spark.run(train, num_workers=args.workers, spark=spark,
                                     args=(f"{tmp}/ckpt", args.steps, args.fail_at,
                                           f"{tmp}/failed-once"))
        assert all(w == ws[0] for w in ws), "ranks disagree"
        print(f"{args.workers} ranks agree; weights sha256 {hashlib.sha256(ws[0]).hexdigest()[:16]}")
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
