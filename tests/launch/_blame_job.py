"""A worker for the blame tests (tests/launch/test_blame.py): every rank allreduces once,
then by ``JOB_MODE``:

``leave``: rank ``JOB_RANK`` exits 0 at once, mid-job, while the others keep allreducing;
``raise``: rank ``JOB_RANK`` raises ValueError, and its exit takes a second more (exit
handlers), so the ranks that lose it exit first; ``disk``: rank 0's disk is full when every
rank saves a checkpoint to ``JOB_CKPT``, and rank 0 takes a second more to exit.
"""

from __future__ import annotations

import atexit
import errno
import os
import time

import numpy as np

import terascale

mode, victim = os.environ["JOB_MODE"], int(os.environ.get("JOB_RANK", "0"))
with terascale.init() as comm:
    comm.allreduce(np.ones(10))
    if mode == "leave" and comm.rank == victim:
        os._exit(0)
    if mode == "raise" and comm.rank == victim:
        atexit.register(time.sleep, 1.0)
        raise ValueError("the model diverged")
    if mode == "disk":
        ck = terascale.Checkpoint(os.environ["JOB_CKPT"], comm)
        if comm.rank == 0:
            atexit.register(time.sleep, 1.0)

            def write(fd: int, data: bytes) -> int:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            os.write = write  # type: ignore[assignment]
        ck.save(1, {"w": np.zeros(3)})
    for _ in range(400):  # 20 s: longer than any test waits
        comm.allreduce(np.ones(1000))
        time.sleep(0.05)
