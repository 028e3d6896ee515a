"""Point-to-point on the "terascale" backend next to gloo: a ping-pong between two ranks.

Run under torchrun (or ``terascale run -n 2``)::

    torchrun --nproc-per-node 2 examples/p2p_pingpong.py

Each rank joins gloo's world group and a terascale group over the same processes; rank 0
sends a tensor to rank 1, which sends it back, ``--repeat`` times per size, on each backend
in turn. Rank 0 prints the median round trip and the one-way rate per size and backend,
and checks every message came back bit for bit.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist

import terascale.torch  # noqa: F401  registers the "terascale" backend


def pingpong(group: dist.ProcessGroup, nbytes: int, repeat: int) -> float:
    """Median round trip in seconds of ``nbytes`` from rank 0 to rank 1 and back."""
    x = torch.arange(max(nbytes // 4, 1), dtype=torch.float32)
    y = torch.empty_like(x)
    times = []
    for i in range(repeat + 2):  # two warm-up rounds
        t0 = time.perf_counter()
        if dist.get_rank() == 0:
            dist.send(x, 1, group=group, tag=i)
            dist.recv(y, 1, group=group, tag=i)
            if not torch.equal(x, y):
                raise SystemExit(f"round {i}: the message came back changed")
        else:
            dist.recv(y, 0, group=group, tag=i)
            dist.send(y, 0, group=group, tag=i)
        times.append(time.perf_counter() - t0)
    return statistics.median(times[2:])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", default="4096,1048576,16777216", help="message sizes in bytes")
    p.add_argument("--repeat", type=int, default=20)
    args = p.parse_args()
    dist.init_process_group("gloo")
    groups = {"terascale": dist.new_group(backend="terascale"), "gloo": dist.new_group()}
    for nbytes in (int(s) for s in args.sizes.split(",")):
        row = {name: pingpong(g, nbytes, args.repeat) for name, g in groups.items()}
        if dist.get_rank() == 0:
            cells = "  ".join(f"{name} {t * 1e6:9.0f} us ({nbytes / (t / 2) / 1e9:6.2f} GB/s)"
                              for name, t in row.items())
            print(f"{nbytes:>9} B  {cells}  terascale/gloo {row['terascale'] / row['gloo']:.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
