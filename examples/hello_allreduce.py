"""Hello, allreduce: every rank contributes its rank number; all get the sum.

Run on 1 worker (no launcher) and on 4 workers::

    python examples/hello_allreduce.py
    terascale run -n 4 python examples/hello_allreduce.py
"""

import numpy as np

import terascale

with terascale.init() as comm:
    x = np.full(4, comm.rank, dtype=np.float32)
    y = comm.allreduce(x)
    print(f"rank {comm.rank} of {comm.size}: allreduce({x.tolist()}) = {y.tolist()}")
