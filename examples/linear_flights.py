"""Terascale linear learning from Python on NYC flights 2013, on any number of workers.

    terascale run -n 2 python examples/linear_flights.py        # 2 local workers
    python examples/linear_flights.py                           # 1 worker

Each worker parses and caches its half of the training file, then joins the job
(``terascale.linear.train`` calls ``terascale.init()`` only after the cache exists), runs one
online pass, averages the weights over the workers, then L-BFGS with gradients summed by
allreduce. Rank 0 evaluates on the test months and saves the model.
"""

from __future__ import annotations

import os
import tempfile

import terascale
import terascale.linear as tl
from terascale.linear._flights import write_flights


def main() -> None:
    train_file, test_file = write_flights(os.path.join(tempfile.gettempdir(), "terascale-demo"))
    model = tl.train([train_file], bits=24, passes=1, bfgs=20, progress=True)
    env = terascale.read_env()
    if env is None or env.rank == 0:
        print(model, model.evaluate(test_file))
        path = os.path.join(tempfile.gettempdir(), "flights.model")
        model.save(path)
        print("saved", path, "->", tl.LinearModel.load(path))


if __name__ == "__main__":
    main()
