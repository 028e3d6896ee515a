"""``terascale run -n N [--timeout S] [--max-restarts K] CMD ...``"""

from __future__ import annotations

import argparse

__all__ = ["add_parser"]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "run", help="run N local workers of a command (like torchrun / mpirun)",
        description="Start N workers of CMD on this machine. Each joins the job with "
                    "terascale.init(); the first worker to fail stops all others.")
    p.add_argument("-n", "--nprocs", type=int, required=True, metavar="N",
                   help="number of workers")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="rendezvous and default collective deadline in seconds (default 60)")
    p.add_argument("--max-restarts", type=int, default=0, metavar="K",
                   help="restart the whole group up to K times after a failure (default 0)")
    p.add_argument("--hosts", default=None, metavar="A,B,...",
                   help="pretend the ranks live on these hosts, round robin (for testing "
                        "hierarchical algorithms on one machine)")
    p.add_argument("--timeline", default=None, metavar="TRACE.json",
                   help="write every collective of every rank as Chrome trace events")
    p.add_argument("--no-prefix", action="store_true", help="do not prefix output with the rank")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="CMD ...")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from .._errors import ConfigError
    from .launcher import LaunchOptions, launch

    if args.max_restarts < 0:
        raise ConfigError(f"--max-restarts must be >= 0, got {args.max_restarts}")
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    hosts = args.hosts.split(",") if args.hosts else None
    opts = LaunchOptions(nprocs=args.nprocs, timeout=args.timeout, max_restarts=args.max_restarts,
                         host_ids=hosts, prefix_output=not args.no_prefix, timeline=args.timeline)
    return launch(cmd, opts)
