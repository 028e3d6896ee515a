"""The ``terascale`` command: ``run``, ``demo``, ``bench``, ``linear``, ``simulate``, ...

Each area of the package contributes its sub-commands through an ``add_parser(sub)``
function in its ``_cli`` module; heavy imports happen only when a command runs.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import typing
from collections.abc import Sequence

from ._errors import TerascaleError

__all__ = ["main"]

# Modules that contribute sub-commands, in the order ``terascale --help`` lists them.
_AREAS = ("terascale.launch._cli", "terascale._demo", "terascale.bench._cli",
          "terascale.linear._cli", "terascale.sim._cli")


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag or value is one line naming it (the usage block above it
    buried the error); ``--help`` still prints the usage. Sub-command parsers inherit it."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="terascale", description="Allreduce-based parallel learning.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in _AREAS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:  # that area is not part of this build
                continue
            raise
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``terascale`` command with ``argv`` (default: ``sys.argv[1:]``); the exit status."""
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if extras:  # a command may explain its own unknown flags (linear: VW's, refused)
        explain = getattr(args, "unknown_args", None)
        if explain is None:
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
        print(f"terascale {args.command}: error: {explain(extras)}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="terascale: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except TerascaleError as e:
        print(f"terascale {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `train -p /dev/stdout | head`: the reader left before the end
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # no second error when Python flushes at exit
        print(f"terascale {args.command}: error: standard output was closed (broken pipe); "
              f"stopped", file=sys.stderr)
        return 141  # 128 + SIGPIPE, what the shell reports for a process the pipe ended


if __name__ == "__main__":
    sys.exit(main())
