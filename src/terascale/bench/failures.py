"""``terascale bench failures``: how fast failures are detected, what mismatch detection costs.

::

    terascale bench failures [--algorithms ring,tree,shm] [--json out.json]

Prints: the time from a SIGKILL of rank 3 (of 4) during back-to-back 16 MB allreduces to
each survivor's ``PeerLost``, per algorithm; the time for every rank to raise
``CollectiveMismatch`` (a dtype differing on one rank), start-up included; and the CPU cost
of building and checking one message header (the check every message pays so that ranks
calling different collectives fail at the first message instead of reducing garbage).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import tempfile
import time
import timeit
from typing import Any

import numpy as np

from .._errors import ConfigError
from ..collectives.registry import auto_choice

__all__ = ["add_bench_parser", "run_failures"]


def _killed(comm: Any, algo: str, stamp: str) -> None:
    x = np.ones(4_000_000, np.float32)
    comm.allreduce(x, algorithm=algo)
    comm.barrier()
    if comm.rank == 3:
        time.sleep(0.2)  # the others are inside allreduces by now
        with open(stamp, "w") as f:  # the kill's wall-clock time (one host: one clock)
            f.write(repr(time.time()))
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        while True:
            comm.allreduce(x, algorithm=algo)
    except Exception as e:
        # the survivors report through their traceback: the job is broken, nothing returns
        raise RuntimeError(f"detected at {time.time()!r} {type(e).__name__}") from None


def _mismatch(comm: Any) -> None:
    comm.allreduce(np.ones(1000, np.float32 if comm.rank == 2 else np.float64))


def _header_cost(n: int = 200_000) -> tuple[float, float]:
    # The frame codec is the transport's private wire format; this micro-benchmark is its
    # one outside user (tests/test_architecture.py lists the exception).
    from ..transport._frames import DATA, pack_desc, pack_header, unpack_header

    desc = pack_desc("allreduce(ring,float32[1048576],sum)")
    header = pack_header(DATA, 17, 4096, desc)
    t_pack = timeit.timeit(lambda: pack_header(DATA, 17, 4096, desc), number=n) / n

    def check() -> bool:
        fields = unpack_header(header)
        return fields is not None and fields[1] == 17 and fields[3] == desc and fields[2] == 4096

    return t_pack, timeit.timeit(check, number=n) / n


def run_failures(algorithms: list[str]) -> dict[str, Any]:
    """Run the three measurements, print them, return them.

    Parameters
    ----------
    algorithms
        The allreduce algorithms whose failure detection is timed.
    """
    from ..testing import run_workers

    out: dict[str, Any] = {"detect_s": {}}
    print("SIGKILL of rank 3 of 4 during 16 MB allreduces: seconds until each survivor raised")
    for algo in algorithms:
        with tempfile.TemporaryDirectory(prefix="terascale-bench-") as tmp:
            stamp = os.path.join(tmp, "killed")
            res = run_workers(_killed, 4, args=(algo, stamp), expect_failure=True, timeout=60)
            with open(stamp) as f:
                killed = float(f.read())
        seen = []
        for status, detail in res[:3]:
            if status != "error":
                raise RuntimeError(f"a survivor ended with {status}: {detail}")
            at, kind = detail[1].strip().splitlines()[-1].split("detected at ")[1].split()
            seen.append((float(at) - killed, kind))
        out["detect_s"][algo] = {f"rank {r}": dt for r, (dt, _) in enumerate(seen)}
        print(f"  {algo:5s}: " + ", ".join(f"{dt:.4f} {kind}" for dt, kind in seen), flush=True)
    start = time.monotonic()
    res = run_workers(_mismatch, 4, expect_failure=True, timeout=60)
    kinds = sorted({o[1][0] for o in res})
    out["mismatch"] = {"raised": kinds, "job_s": time.monotonic() - start}
    print(f"mismatched dtype on rank 2 of 4: {kinds} on every rank, whole job incl. "
          f"start-up {out['mismatch']['job_s']:.2f} s")
    t_pack, t_check = _header_cost()
    out["header"] = {"bytes": 128, "build_s": t_pack, "check_s": t_check}
    print(f"header: 128 bytes per message; build {t_pack * 1e6:.2f} us, check "
          f"{t_check * 1e6:.2f} us")
    return out


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``failures`` to the ``terascale bench`` subcommands.

    Parameters
    ----------
    kinds
        The ``terascale bench`` sub-command parsers (``add_subparsers``' result).
    """
    p = kinds.add_parser("failures", help="failure detection time and mismatch-check cost",
                         description=__doc__.splitlines()[0])
    # auto's algorithms: large and small messages over TCP, one host's shared memory
    default = ",".join(auto_choice(role) for role in ("large", "small", "one host"))
    p.add_argument("--algorithms", default=default,
                   help=f"algorithms to kill a rank under (default {default})")
    p.add_argument("--json", default=None, metavar="OUT.json",
                   help="also write the results as JSON to OUT.json")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    from ..collectives import allreduce_names

    algos = [a for a in args.algorithms.split(",") if a]
    bad = sorted(set(algos) - set(allreduce_names()))
    if bad or not algos:
        raise ConfigError(f"--algorithms: unknown {', '.join(bad) or '(none given)'}; known: "
                          f"{', '.join(allreduce_names())}")
    out = run_failures(algos)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0
