"""A worker whose shared-memory segments get a squatter of another user (for
tests/transport/test_memfd.py): as each segment's socket appears, a process of uid 65534
connects to it first (ahead of every member) and then dribbles a byte every half second.
Every rank prints its allreduce's sum."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

import terascale
from terascale.transport import _memfd

SQUAT = """
import socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(bytes.fromhex(sys.argv[1]))
print("in", flush=True)
try:
    for _ in range(120):
        s.send(b"k")
        time.sleep(0.5)
except OSError:
    print("refused", flush=True)
"""
squatters: list[subprocess.Popen] = []


class Squatted(_memfd.SegmentOffer):
    def __init__(self, size: int, label: str, members: int) -> None:
        super().__init__(size, label, members)
        address = _memfd._address(self.note[8:24])
        p = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                              sys.executable, "-c", SQUAT, address.hex()],
                             stdout=subprocess.PIPE, text=True, cwd="/")
        assert p.stdout is not None and p.stdout.readline() == "in\n"  # it is queued first
        squatters.append(p)


_memfd.SegmentOffer = Squatted  # type: ignore[misc]
with terascale.init() as comm:
    x = comm.allreduce(np.full(1000, comm.rank + 1.0))
    print(f"rank {comm.rank} sum {x[0]:g} squatters {len(squatters)}", flush=True)
for p in squatters:
    p.kill()
    p.wait()
