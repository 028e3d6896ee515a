"""Point-to-point links alone (no torch): a ping-pong between two processes on one host.

Rank 0 sends a message to rank 1 on ``terascale.transport.p2p.PointToPoint``, which sends
it back; prints the median round trip and rank 0's CPU time per round trip (all its
threads). Run the same command against two source trees (``PYTHONPATH=...``) to compare
two versions of the links on one machine, interleaved, under the same load::

    python benchmarks/p2p_links.py --size 4096 --rounds 2000
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import secrets
import statistics
import time


def _rank(rank: int, conn, results, secret: bytes, size: int, rounds: int) -> None:  # type: ignore[no-untyped-def]
    from terascale.transport.p2p import PointToPoint

    p = PointToPoint(rank, 2, secret, host="127.0.0.1")
    conn.send(p.address)
    other = tuple(conn.recv())
    p.connect_to([p.address, other] if rank == 0 else [other, p.address])
    out = memoryview(bytearray(size))
    msg = memoryview(bytearray(b"\x5a" * size))

    def round_trip(i: int) -> None:
        if rank == 0:
            p.send(1, i, msg, 30.0)
            p.post_recv(1, i, out, 30.0).wait()
        else:
            p.post_recv(0, i, out, 30.0).wait()
            p.send(0, i, out, 30.0)

    for i in range(max(rounds // 20, 10)):  # warm-up: the links come up
        round_trip(i)
    times = []
    cpu = time.process_time()
    for i in range(rounds):
        t0 = time.perf_counter()
        round_trip(i)
        times.append(time.perf_counter() - t0)
    cpu = time.process_time() - cpu
    if rank == 0:
        assert bytes(out) == bytes(msg), "the message came back changed"
        results.put((statistics.median(times), cpu / rounds))
    time.sleep(0.2)
    p.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=4096, help="message bytes")
    ap.add_argument("--rounds", type=int, default=2000, help="round trips timed")
    args = ap.parse_args()
    secret = secrets.token_bytes(32)
    a, b = mp.Pipe()  # between the two ranks: each sends the other its address
    results: mp.Queue = mp.Queue()
    procs = [mp.Process(target=_rank, args=(r, c, results, secret, args.size, args.rounds))
             for r, c in ((0, a), (1, b))]
    for p in procs:
        p.start()
    median, cpu = results.get(timeout=300)
    for p in procs:
        p.join(30)
    print(f"{args.size} B: median round trip {median * 1e6:.0f} us, rank 0 CPU "
          f"{cpu * 1e6:.0f} us per round trip")

if __name__ == "__main__":
    main()
