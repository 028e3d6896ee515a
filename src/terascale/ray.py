"""Run terascale jobs on Ray (actors in a placement group); see :mod:`terascale.engines.ray`.

>>> import terascale.ray                                        # doctest: +SKIP
>>> terascale.ray.run(lambda: terascale.init().rank, num_workers=2)  # doctest: +SKIP
[0, 1]
>>> terascale.ray.run(fn, num_workers=4, resources_per_worker={"GPU": 1})  # doctest: +SKIP
>>> ds = ray.data.read_csv("train.csv")                        # doctest: +SKIP
>>> model = terascale.ray.train_linear(ds, format="csv", label="y", bfgs=20,
...                                    storage_path="/shared/run1")  # doctest: +SKIP

ray is imported only when a function is called (extra ``terascale[ray]``).
"""

from .engines.ray import run, train_linear

__all__ = ["run", "train_linear"]
