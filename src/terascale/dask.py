"""Run terascale jobs on Dask (one task per rank, each on a worker process of its own);
see :mod:`terascale.engines.dask`.

>>> import terascale.dask                                       # doctest: +SKIP
>>> client = distributed.Client(distributed.LocalCluster(n_workers=2))  # doctest: +SKIP
>>> terascale.dask.run(lambda: terascale.init().rank, num_workers=2)  # doctest: +SKIP
[0, 1]
>>> ddf = dask.dataframe.read_csv("train-*.csv")                # doctest: +SKIP
>>> model = terascale.dask.train_linear(ddf, format="csv", label="y", bfgs=20)  # doctest: +SKIP

dask is imported only when a function is called (extra ``terascale[dask]``).
"""

from .engines.dask import run, train_linear

__all__ = ["run", "train_linear"]
