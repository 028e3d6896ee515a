"""Running terascale jobs on existing distributed engines (Spark, Ray, Dask).

terascale never manages a cluster itself: past one machine it borrows an engine's
scheduler, placement and failure detection, and keeps only the part the engine lacks --
rendezvous, the collectives, and deterministic restart from checkpoints. This is the
"Hadoop AllReduce" recipe of Agarwal, Chapelle, Dudik and Langford, *A Reliable Effective
Terascale Linear Learning System* (JMLR 2014): the engine moves the program to the data,
each worker reads and caches its data before it joins the allreduce (delayed
initialization), and a failure restarts the whole job from its last checkpoint.

* :mod:`terascale.engines.spark` -- barrier execution mode (``terascale.spark``);
* :mod:`terascale.engines.ray` -- actors in a placement group (``terascale.ray``);
* :mod:`terascale.engines.dask` -- one task pinned to each of N Dask worker processes
  (``terascale.dask``);
* :mod:`terascale.engines.jobs` -- reference jobs (an allreduce, a checkpointed loop that
  fails once on demand) that every engine runs in the tests and ``terascale bench engines``.

Neither pyspark, ray nor dask is imported until one of their functions is called.
"""

__all__: list[str] = []
