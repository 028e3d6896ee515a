"""Where two ranks sit decides how fast they answer each other: the evidence.

Two experiments, each printing one line per configuration (medians of 3000 rounds after
300 of warm-up):

``pingpong``
    Two processes and a socketpair, 4 KiB each way per round, no terascale at all: each
    side either sleeps in ``recv`` (``block``) or polls a non-blocking socket (``spin``),
    the two bound to one core or to two (``os.sched_setaffinity``), or left to the
    scheduler. Prints the round time and the cores the first process ran on.
``allreduce``
    A two-rank 4 KiB ring allreduce over TCP (one pretend host per rank, so never shared
    memory) under ``terascale run``: the ranks bound by the launcher (its default) or not
    (``TERASCALE_NO_CPU_BIND=1``), and optionally bound by hand to one core or two with
    the TCP waits' spin forced on or off. Per rank: the median time per call, the cores it
    was seen on (``/proc/self/stat``'s processor field, every 20 calls), and voluntary and
    involuntary context switches per call (``getrusage``).

    python benchmarks/small_exchange.py pingpong
    python benchmarks/small_exchange.py allreduce            # launcher-bound vs unbound
    python benchmarks/small_exchange.py allreduce --by-hand  # one core / two x spin on / off

Findings and figures: ``docs/benchmarks/security.md`` ("Two speeds of a small exchange").
"""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import time

N, ROUNDS, WARM = 4096, 3000, 300


def _cpu() -> int:
    with open("/proc/self/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[36])


def _pingpong(mode: str, cores: tuple[int, int] | None) -> str:
    a, b = socket.socketpair()

    def side(s: socket.socket, core: int | None, first: bool) -> tuple[list[float], set[int]]:
        if core is not None:
            os.sched_setaffinity(0, {core})
        buf, msg = bytearray(N), b"x" * N
        s.setblocking(mode == "block")
        view, times, seen = memoryview(buf), [], set()
        for i in range(WARM + ROUNDS):
            t = time.perf_counter()
            if first:
                s.sendall(msg)
            got = 0
            while got < N:
                try:
                    got += s.recv_into(view[got:])
                except BlockingIOError:
                    continue
            if not first:
                s.sendall(msg)
            times.append(time.perf_counter() - t)
            if i % 100 == 0:
                seen.add(_cpu())
        return times[WARM:], seen

    pid = os.fork()
    if pid == 0:
        side(b, None if cores is None else cores[1], False)
        os._exit(0)
    times, seen = side(a, None if cores is None else cores[0], True)
    os.waitpid(pid, 0)
    times.sort()
    where = "scheduler's choice" if cores is None else \
        "one core" if cores[0] == cores[1] else "two cores"
    return (f"{mode:5s} {where:18s}: median {times[len(times) // 2] * 1e6:6.1f} us, "
            f"p90 {times[9 * len(times) // 10] * 1e6:6.1f} us, first process seen on {sorted(seen)}")


def _worker() -> None:
    import numpy as np

    import terascale

    pin, spin = os.environ["SMALL_PIN"], os.environ["SMALL_SPIN"]
    rank = int(os.environ["TERASCALE_RANK"])
    if pin != "launcher":
        os.sched_setaffinity(0, {0} if pin == "one" else {rank})
    if spin != "auto":
        from terascale.transport import _tcp_exchange, _tcp_swap
        _tcp_exchange.oversubscribed = _tcp_swap.oversubscribed = lambda: spin == "off"
    comm = terascale.init()
    x = np.ones(N // 4, np.float32)
    for _ in range(WARM):
        comm.allreduce(x, algorithm="ring")
    comm.barrier()
    times, seen = [], {}
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    for i in range(ROUNDS):
        t = time.perf_counter()
        comm.allreduce(x, algorithm="ring")
        times.append(time.perf_counter() - t)
        if i % 20 == 0:
            c = _cpu()
            seen[c] = seen.get(c, 0) + 1
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    times.sort()
    print("ROW " + json.dumps({
        "rank": rank, "median_us": round(times[len(times) // 2] * 1e6, 1),
        "seen_on": seen, "voluntary_cs_per_call": round((r1.ru_nvcsw - r0.ru_nvcsw) / ROUNDS, 2),
        "involuntary_cs_per_call": round((r1.ru_nivcsw - r0.ru_nivcsw) / ROUNDS, 2)}), flush=True)
    comm.close()


def _allreduce(pin: str, spin: str, bind: bool) -> str:
    env = {**os.environ, "SMALL_PIN": pin, "SMALL_SPIN": spin,
           "TERASCALE_NO_CPU_BIND": "0" if bind else "1",
           "TERASCALE_UNAUTHENTICATED_BENCHMARK": "1"}
    argv = [sys.executable, "-m", "terascale", "run", "-n", "2", "--hosts", "h0,h1",
            sys.executable, __file__, "worker"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    rows = sorted((json.loads(line.split("ROW ", 1)[1]) for line in out.stdout.splitlines()
                   if "ROW " in line), key=lambda r: r["rank"])
    if len(rows) != 2:
        return f"failed: {out.stderr[-500:]}"
    label = {"launcher": "launcher-bound" if bind else "unbound", "one": "one core",
             "two": "two cores"}[pin]
    return f"{label:14s} spin={spin:4s}: " + "; ".join(
        f"rank {r['rank']} {r['median_us']} us, seen on {r['seen_on']}, cs/call "
        f"{r['voluntary_cs_per_call']}+{r['involuntary_cs_per_call']}" for r in rows)


def main() -> None:
    what = sys.argv[1] if len(sys.argv) > 1 else "pingpong"
    if what == "worker":
        return _worker()
    print(f"load average {os.getloadavg()[0]:.2f}, cores {sorted(os.sched_getaffinity(0))}")
    if what == "pingpong":
        for mode in ("block", "spin"):
            for cores in (None, (0, 1), (0, 0)):
                print(_pingpong(mode, cores), flush=True)
    elif "--by-hand" in sys.argv:
        for spin in ("off", "on"):
            for pin in ("one", "two"):
                print(_allreduce(pin, spin, False), flush=True)
    else:
        for bind in (False, True):
            print(_allreduce("launcher", "auto", bind), flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
