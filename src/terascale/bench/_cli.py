"""``terascale bench KIND ...``: each KIND is contributed by the module that owns it.

A contributing module defines ``add_bench_parser(sub)``, adding one sub-command to the
``bench`` group; heavy imports happen only when the benchmark runs.
"""

from __future__ import annotations

import argparse
import importlib

__all__ = ["add_parser"]

_KINDS = ("terascale.bench.allreduce", "terascale.bench.costs", "terascale.bench.linear",
          "terascale.bench.torch", "terascale.bench.failures", "terascale.bench.engines")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("bench", help="benchmarks side by side with the peers",
                       description="Benchmarks run side by side with the peers in one run; "
                                   "results are reported as ratios.")
    kinds = p.add_subparsers(dest="bench_kind", metavar="KIND")
    for name in _KINDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:
                continue
            raise
        module.add_bench_parser(kinds)
    p.set_defaults(func=lambda args: p.print_help() or 2)
