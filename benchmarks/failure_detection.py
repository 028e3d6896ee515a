"""How fast failures are detected, and what mismatch detection costs (issue 4).

    python benchmarks/failure_detection.py

Prints: the time from a SIGKILL of rank 3 (of 4) during back-to-back 16 MB allreduces to
each survivor's PeerLost, per algorithm; the time for every rank to raise
CollectiveMismatch; and the CPU cost of building and checking one message header.
"""

from __future__ import annotations

import os
import signal
import time
import timeit

import numpy as np

from terascale.testing import run_workers
from terascale.transport._frames import DATA, pack_desc, pack_header, unpack_header


def _killed(comm, algo: str) -> float:
    x = np.ones(4_000_000, np.float32)
    comm.allreduce(x, algorithm=algo)
    comm.barrier()
    t_kill = time.time() + 0.2
    if comm.rank == 3:
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        while True:
            comm.allreduce(x, algorithm=algo)
    except Exception as e:
        raise RuntimeError(f"detected {time.time() - t_kill:.4f} {type(e).__name__}") from None


def _mismatch(comm) -> None:
    comm.allreduce(np.ones(1000, np.float32 if comm.rank == 2 else np.float64))


def main() -> None:
    print("SIGKILL of rank 3 of 4 during 16 MB allreduces: seconds until each survivor raised")
    for algo in ("ring", "tree", "shm"):
        out = run_workers(_killed, 4, args=(algo,), expect_failure=True, timeout=60)
        times = [o[1][1].strip().splitlines()[-1].split("detected ")[1] for o in out[:3]]
        print(f"  {algo:5s}: " + ", ".join(times))
    start = time.monotonic()
    out = run_workers(_mismatch, 4, expect_failure=True, timeout=60)
    kinds = {o[1][0] for o in out}
    print(f"mismatched dtype on rank 2 of 4: {sorted(kinds)} on every rank, whole job incl. "
          f"start-up {time.monotonic() - start:.2f} s")
    desc = pack_desc("allreduce(ring,float32[1048576],sum)")
    header = pack_header(DATA, 17, 4096, desc)
    n = 200_000
    t_pack = timeit.timeit(lambda: pack_header(DATA, 17, 4096, desc), number=n) / n

    def check() -> bool:
        _, seq, nbytes, d, _ctx = unpack_header(header)  # type: ignore[misc]
        return seq == 17 and d == desc and nbytes == 4096

    t_check = timeit.timeit(check, number=n) / n
    print(f"header: 128 bytes per message; build {t_pack * 1e6:.2f} us, check "
          f"{t_check * 1e6:.2f} us")


if __name__ == "__main__":
    main()
