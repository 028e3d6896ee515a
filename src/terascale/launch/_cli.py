"""``terascale run -n N [--timeout S] [--max-restarts K] CMD ...``; ``terascale rendezvous``."""

from __future__ import annotations

import argparse
import difflib
import os
import shutil
import sys

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
    p.add_argument("--encrypt", action="store_true",
                   help="encrypt every TCP link with AES-GCM (every link is authenticated "
                        "either way); shared memory between ranks of one host is not "
                        "encrypted")
    p.add_argument("--link-rate", default=None, metavar="RATE",
                   help="the rate of the links between hosts (100Mbit, 10Gbit/s, 1e8): "
                        "algorithm='auto' then chooses tree or ring with "
                        "the TCP link model at that rate (TERASCALE_LINK_RATE; the job uses "
                        "the smallest any node gives)")
    p.add_argument("--no-prefix", action="store_true", help="do not prefix output with the rank")
    p.add_argument("--nnodes", type=int, default=1, metavar="M",
                   help="run one job over M nodes: the same command on each, -n workers per "
                        "node, ranks node by node (default 1)")
    p.add_argument("--node-rank", type=int, default=0, metavar="K",
                   help="this node's number, 0..M-1; node 0 serves --rendezvous")
    p.add_argument("--rendezvous", default=None, metavar="HOST:PORT",
                   help="node 0's address and a free port on it (required with --nnodes)")
    p.add_argument("--secret-file", default=None, metavar="F",
                   help="file holding the job secret, the same on every node (default: "
                        "TERASCALE_SECRET); required with --nnodes")
    p.add_argument("--bind", default=None, metavar="ADDR",
                   help="with --nnodes, where node 0 listens (default: the address of the "
                        "--rendezvous host only; 0.0.0.0 for every interface)")
    p.add_argument("--host-id", default=None, metavar="NAME",
                   help="this node's host identity (default: hostname plus a digest of boot id "
                        "and network namespace); ranks with one identity share memory")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="CMD ...",
                   help="the command every worker runs, e.g. python train.py --epochs 3")
    p.set_defaults(func=_run)
    r = sub.add_parser(
        "rendezvous", help="serve one job's rendezvous (workers started by other tools)",
        description="Serve the rendezvous of one job of N workers at HOST:PORT, for workers "
                    "started by other tools (ssh, a scheduler, a container per worker) with "
                    "TERASCALE_RANK, TERASCALE_SIZE, TERASCALE_RENDEZVOUS and TERASCALE_SECRET "
                    "set. Exits 0 once every rank has joined (-v logs the host layout), "
                    "1 if they have not within --timeout.")
    r.add_argument("--port", type=int, required=True, metavar="P",
                   help="the port to serve on (the workers' TERASCALE_RENDEZVOUS port)")
    r.add_argument("--size", type=int, required=True, metavar="N", help="ranks in the job")
    r.add_argument("--host", default="127.0.0.1", metavar="ADDR",
                   help="the address the workers are given (their TERASCALE_RENDEZVOUS host); "
                        "listens there only (default 127.0.0.1: workers on this machine)")
    r.add_argument("--bind", default=None, metavar="ADDR",
                   help="listen on ADDR instead of --host's address (0.0.0.0: every "
                        "interface)")
    r.add_argument("--secret-file", default=None, metavar="F",
                   help="file holding the job secret (default: TERASCALE_SECRET); required")
    r.add_argument("--timeout", type=float, default=600.0, metavar="S",
                   help="give up when the job is not complete within S seconds (default 600)")
    r.set_defaults(func=_rendezvous)


def _run(args: argparse.Namespace) -> int:
    from .._errors import ConfigError
    from .launcher import LaunchOptions, launch

    if args.max_restarts < 0:
        raise ConfigError(f"--max-restarts must be >= 0, got {args.max_restarts}")
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    script = cmd[0] if cmd and cmd[0].endswith(".py") else None
    if script is not None and os.path.isfile(script) and not os.access(script, os.X_OK):
        raise ConfigError(f"cannot execute {cmd[0]!r}: a Python script runs through the "
                          f"interpreter: terascale run -n {args.nprocs} python "
                          f"{' '.join(cmd)}")
    if cmd and os.sep not in cmd[0] and shutil.which(cmd[0]) is None:
        pythons = ["python", "python3", os.path.basename(sys.executable)]
        close = difflib.get_close_matches(cmd[0], pythons, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else " (check its spelling and PATH)"
        raise ConfigError(f"command not found: {cmd[0]!r}{hint}")
    if args.nnodes != 1 or args.rendezvous is not None:
        return _run_nodes(args, cmd)
    if args.bind is not None:
        raise ConfigError("--bind is for --nnodes (where node 0 listens); a job on one "
                          "machine listens on loopback only")
    hosts = args.hosts.split(",") if args.hosts else None
    if args.host_id is not None:
        hosts = [args.host_id]
    opts = LaunchOptions(nprocs=args.nprocs, timeout=args.timeout, max_restarts=args.max_restarts,
                         host_ids=hosts, prefix_output=not args.no_prefix, timeline=args.timeline,
                         encrypt=args.encrypt, link_rate=_link_rate(args))
    return launch(cmd, opts)


def _link_rate(args: argparse.Namespace) -> float | None:
    from .._units import parse_rate

    if args.link_rate is None:
        return None
    try:  # plain bits/s (1e8) as well as 100Mbit
        return parse_rate(float(args.link_rate), flag="--link-rate")
    except ValueError:
        return parse_rate(args.link_rate, flag="--link-rate")


def _secret(path: str | None) -> bytes:
    """The job secret from ``--secret-file``, TERASCALE_SECRET or TERASCALE_SECRET_FILE:
    required across hosts (read by ``terascale._secret``, which checks the file)."""
    import os

    from .._errors import ConfigError
    from .._secret import user_secret

    secret = user_secret(os.environ, None, path, file_name="--secret-file")
    if secret is None:
        raise ConfigError("a job across hosts needs a secret: pass --secret-file F (chmod 600) "
                          "or set TERASCALE_SECRET (the same on every host; e.g. "
                          "`python -c 'import secrets; print(secrets.token_hex(16))' > F`)")
    return secret


def _rendezvous(args: argparse.Namespace) -> int:
    import sys
    import time

    from .._bind import bind_address, bind_error
    from .._errors import ConfigError
    from ..rendezvous import RendezvousServer

    if args.size < 1:
        raise ConfigError(f"--size must be >= 1, got {args.size}")
    if not 0 < args.port < 65536:
        raise ConfigError(f"--port {args.port} is not a port number")
    if not args.timeout > 0:
        raise ConfigError(f"--timeout must be positive, got {args.timeout}")
    secret = _secret(args.secret_file)
    bind = bind_address(args.host, bind=args.bind, what="--host")
    try:
        server = RendezvousServer(args.size, secret, host=bind, port=args.port)
    except OSError as e:
        err = bind_error(e, bind, args.port, args.host, "--bind 0.0.0.0")
        if err is e:
            raise ConfigError(str(e)) from None
        raise err from None
    with server:
        where = "" if bind == args.host else f" (listening on {bind})"
        print(f"terascale rendezvous: job {server.job} of {args.size} ranks at "
              f"{args.host}:{server.address[1]}{where}", file=sys.stderr, flush=True)
        deadline = time.monotonic() + args.timeout
        while not server.complete:
            if time.monotonic() > deadline:
                missing = sorted(set(range(args.size)) - set(server.waiting))
                print(f"terascale rendezvous: ranks {missing} did not join within "
                      f"{args.timeout:g} s", file=sys.stderr)
                return 1
            time.sleep(0.05)
        # The rank table goes out on each worker's own connection: let those replies leave.
        until = time.monotonic() + 10.0
        while server.replied < args.size and time.monotonic() < until:
            time.sleep(0.05)
    return 0


def _run_nodes(args: argparse.Namespace, cmd: list[str]) -> int:
    from .._env import host_identity, parse_address
    from .._errors import ConfigError
    from ._multinode import launch_nodes
    from .launcher import LaunchOptions

    if args.rendezvous is None:
        raise ConfigError("--nnodes needs --rendezvous HOST:PORT (node 0's address and a free "
                          "port there), the same on every node")
    if args.hosts is not None:
        raise ConfigError("--hosts pretends hosts on one machine; with --nnodes use --host-id")
    if args.host_id is not None and not args.host_id.strip():
        raise ConfigError("--host-id is empty")
    opts = LaunchOptions(nprocs=args.nprocs, timeout=args.timeout, max_restarts=args.max_restarts,
                         prefix_output=not args.no_prefix, timeline=args.timeline,
                         encrypt=args.encrypt, link_rate=_link_rate(args))
    return launch_nodes(cmd, opts, nnodes=args.nnodes, node_rank=args.node_rank,
                        rendezvous=parse_address(args.rendezvous, "--rendezvous"),
                        secret=_secret(args.secret_file), host_id=args.host_id or host_identity(),
                        bind=args.bind)
