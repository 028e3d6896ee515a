"""Terascale linear learning from Python on NYC flights 2013, on any number of workers.

    terascale run -n 2 python examples/linear_flights.py        # 2 local workers
    python examples/linear_flights.py                           # 1 worker

Each worker parses and caches its half of the training file (``load_shard``, before it
joins the job: delayed initialization), then joins the job, runs one online pass, averages
the weights over the workers, then L-BFGS with gradients summed by allreduce. Rank 0
evaluates on the test months and saves the model.
"""

from __future__ import annotations

import os
import tempfile

import terascale
import terascale.linear as tl


def main() -> None:
    train_file, test_file = tl.write_flights(os.path.join(tempfile.gettempdir(),
                                                          "terascale-demo"))
    ds = tl.load_shard([train_file], bits=24)   # this worker's shard, from the cache
    with terascale.init() as comm:
        model = tl.train(ds, comm=comm, passes=1, bfgs=20, progress=comm.rank == 0)
        if comm.rank == 0:
            print(model, model.evaluate(test_file))
            path = os.path.join(tempfile.gettempdir(), "flights.model")
            model.save(path)
            print("saved", path, "->", tl.LinearModel.load(path))


if __name__ == "__main__":
    main()
