"""``terascale span-server``'s flags: the server (``_span``: sockets, threads) is imported
when the command runs, not when ``terascale vw`` builds its parser beside it."""

from __future__ import annotations

import argparse

__all__ = ["DEFAULT_PORT", "add_parser"]

DEFAULT_PORT = 26543  # VW's spanning-tree port


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("span-server", help="spanning-tree server for Vowpal Wabbit clusters",
                       description="Serve VW's spanning-tree protocol, so that vowpalwabbit "
                                   "(--span_server HOST --total N --node K --unique_id U) "
                                   "runs in cluster mode without VW's C++ daemon.")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"default {DEFAULT_PORT}")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default loopback: VW workers on this host "
                        "only; give the interface the other hosts reach, or 0.0.0.0 for "
                        "every interface -- VW's protocol has no authentication)")
    p.add_argument("--quiet", action="store_true",
                   help="log nothing but the listening line (default: every job to stderr)")
    p.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    import sys

    from ._span import SpanServer

    srv = SpanServer(args.port, args.host, quiet=args.quiet)
    print(f"span-server: listening on {args.host}:{srv.port}", file=sys.stderr, flush=True)
    srv.serve_forever()
    return 0
