"""Seconds to write a file through the page cache, by the size of each ``write()`` call.

    python benchmarks/write_sizes.py DIR [--mb 64] [--rounds 2]

Writes ``--mb`` MiB of random bytes to a new file in ``DIR`` once per write size and round
(64 KiB ... 16 MiB a call, the sizes interleaved), keeping every file until the end (a
deleted file's page-cache pages are free memory the next file would reuse, which hides
what a fresh page costs), then deletes them. On Linux 6.x a write of 2 MiB or more may
be put in 2 MiB page-cache folios; on a virtual machine whose host takes free 2 MiB
blocks back (free page reporting) each is fresh memory to the host, and the write runs at
a fraction of the speed of smaller ones. ``_vw/_vwmodel._WRITE`` is the limit terascale's
model writer keeps under.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

SIZES = [64 << 10, 16 << 20, 256 << 10, 4 << 20, 512 << 10, 1 << 20, 128 << 10, 2 << 20]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir")
    ap.add_argument("--mb", type=int, default=64, help="MiB a file (default 64)")
    ap.add_argument("--rounds", type=int, default=2, help="files per write size (default 2)")
    args = ap.parse_args()
    data = memoryview(np.random.default_rng(0).integers(0, 256, args.mb << 20,
                                                        dtype=np.uint8).tobytes())
    paths, res = [], {s: [] for s in SIZES}
    try:
        for r in range(args.rounds):
            for step in SIZES:
                p = os.path.join(args.dir, f".write-sizes-{r}-{step}")
                paths.append(p)
                t = time.perf_counter()
                fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    for a in range(0, len(data), step):
                        os.write(fd, data[a:a + step])
                finally:
                    os.close(fd)
                res[step].append(time.perf_counter() - t)
    finally:
        for p in paths:
            if os.path.exists(p):
                os.unlink(p)
    print(f"{args.mb} MiB a file; seconds per file, one a round")
    for step in sorted(res):
        print(f"{step >> 10:>6} KiB a write: " + " ".join(f"{s:.3f}" for s in res[step]))


if __name__ == "__main__":
    main()
