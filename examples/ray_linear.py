"""terascale's linear learner on a ray.data.Dataset: every actor streams its own split.

A table made with pandas goes into Ray Data; ``train_linear`` fits it on two actors,
reports the loss of every pass and writes the model to a storage directory::

    python examples/ray_linear.py
    RAY_ADDRESS=ray://head:10001 python examples/ray_linear.py --workers 8 \
        --storage s3://bucket/runs/linear
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np

import terascale.ray


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--storage", default=None, help="where rank 0 writes model.npz")
    args = ap.parse_args()
    import pandas as pd
    import ray

    if not ray.is_initialized():
        ray.init(include_dashboard=False, log_to_driver=False)
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.standard_normal(args.rows),
                       "b": rng.standard_normal(args.rows) * 100,
                       "city": rng.choice(["paris", "oslo", "lima"], args.rows)})
    df["y"] = ((df.a - df.b / 100 + (df.city == "oslo")) > 0).astype(float)
    storage = args.storage or tempfile.mkdtemp(prefix="terascale-ray-")
    model = terascale.ray.train_linear(
        ray.data.from_pandas(df), format="csv", label="y", passes=2, bfgs=10,
        num_workers=args.workers, storage_path=storage,
        on_metrics=lambda m: print("pass", m))
    print("rows per worker", model.info["ray"]["rows"], "model at", model.info["ray"]["saved"])


if __name__ == "__main__":
    main()
