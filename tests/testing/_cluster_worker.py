"""A worker of a job across emulated hosts (tests/testing/test_cluster.py starts it).

``python tests/testing/_cluster_worker.py OUT.npz ALGO...``: joins the job its environment
describes, runs the cross-host subset of the correctness matrix for every ALGO, and saves
each result's bytes, the bytes each algorithm sent, and what the rank knows of its host.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np

# tests/: the shared helpers (_allreduce_check) of the test suite
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from _allreduce_check import make_input  # noqa: E402

import terascale  # noqa: E402

CASES = [(c, d, o) for c in (0, 1, 1000) for d in ("int8", "int64", "float16", "float32",
                                                   "float64") for o in ("sum", "max")]
CASES += [(2**18 + 7, "float32", "sum"), (2**18 + 7, "int64", "max")]


def main() -> None:
    out, algos = sys.argv[1], sys.argv[2:]
    saved: dict[str, np.ndarray] = {}
    sent: dict[str, int] = {}
    with terascale.init() as comm:
        for algo in algos:
            if algo == "shm" and len(set(comm.hosts)) > 1:
                try:
                    comm.allreduce(np.ones(3), algorithm="shm")
                except terascale.ConfigError as e:
                    sent["shm refused"] = int("host" in str(e))
                continue
            before = comm.bytes_sent
            for count, dtype, op in CASES:
                y = comm.allreduce(make_input(comm.rank, count, dtype), op=op, algorithm=algo)
                saved[f"{algo}|{count}|{dtype}|{op}"] = np.frombuffer(y.tobytes(), np.uint8)
            sent[algo] = comm.bytes_sent - before
        comm.barrier()
        info = {"rank": comm.rank, "local_rank": comm.local_rank, "local_size": comm.local_size,
                "hosts": comm.hosts, "sent": sent}
    saved["info"] = np.frombuffer(json.dumps(info).encode(), np.uint8)
    np.savez(out, **saved)


if __name__ == "__main__":
    main()
