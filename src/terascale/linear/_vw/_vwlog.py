"""VW's logging options: which lines of VW's logger and of its driver a run prints, and where.

VW prints two kinds of text. Its driver's (the preamble, the progress table, the closing
block) goes to standard error, or standard output with ``--driver_output stdout``, or
nowhere with ``--driver_output_off``. Its logger's lines (``[info] ...``, ``[warning]
...``, ``[error] ...``, ``[critical] ...``) go to standard output, or standard error with
``--log_output stderr``; ``--log_output compat`` sends those VW writes with its ``out_*``
calls to standard output and the rest to standard error, after a warning that the mode is
deprecated. ``--log_level L`` drops the lines below L (``off``: every one) and
``--limit_output N`` every line after the N-th (the lines dropped for their level count
too; a ``[critical]`` one is never dropped), ending the run with a ``[critical]`` line
that says how many there were. ``--quiet`` is ``--log_level off --driver_output_off``,
whatever else is given.

terascale prints both kinds where VW does by default (standard error and standard output);
:func:`vw_streams` puts filters in place of ``sys.stdout`` and ``sys.stderr`` for the
run, so the options apply to every line wherever it is printed.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from collections.abc import Iterator
from typing import TextIO

__all__ = ["add_flags", "vw_streams"]

_LEVELS = ("info", "warn", "error", "critical", "off")
_TAGS = {"[info] ": 0, "[warning] ": 1, "[error] ": 2, "[critical] ": 3}
# the starts of the messages VW's logger writes with its out_* calls (standard output
# under --log_output compat; every other message is an err_* one: standard error)
_OUT_CALLS = ("The label ", "The poisson loss function expects", "label ",
              "Derivative 0 detected", "In bfgs_iter_middle", "Termination condition",
              "The namespace index must be", "--dont_output_best_constant is not")
_OMITTED = ("[critical] Omitted some log lines. Re-run without --limit_output N for full "
            "log. Total log lines: {}\n")


def add_flags(g: argparse._ArgumentGroup) -> None:
    """VW's logging options, in ``terascale vw``'s parser."""
    g.add_argument("--log_level", choices=_LEVELS, default=None,
                   help="VW's logger lines of this level and above (default info)")
    g.add_argument("--log_output", choices=("stdout", "stderr", "compat"), default=None,
                   help="where VW's logger lines go (default stdout)")
    g.add_argument("--limit_output", type=int, default=0, metavar="N",
                   help="at most N of VW's logger lines (0: all)")
    g.add_argument("--driver_output", choices=("stdout", "stderr"), default="stderr",
                   help="where the preamble, progress table and closing block go")
    g.add_argument("--driver_output_off", action="store_true",
                   help="no preamble, progress table or closing block")


class _Logger(io.TextIOBase):
    """Standard output with VW's logger lines filtered and routed: a line that starts with
    a level's tag is kept or dropped by its level and the line limit, and goes to the
    logger's stream; every other line (predictions to ``-p /dev/stdout``, ``--audit``'s)
    goes to standard output unchanged."""

    def __init__(self, out: TextIO, err: TextIO, level: int, location: str,
                 limit: int) -> None:
        self.out, self.err, self.level, self.location = out, err, level, location
        self.limit, self.count = limit or sys.maxsize, 0

    def log(self, line: str) -> None:
        """One line of VW's logger (its tag first, its newline last)."""
        tag = line[:line.index(" ") + 1]
        self.count += 1
        if _TAGS[tag] < self.level or (self.count > self.limit and tag != "[critical] "):
            return
        to = self.out if self.location == "stdout" else self.err
        if self.location == "compat" and line[len(tag):].startswith(_OUT_CALLS):
            to = self.out
        to.write(line)

    def write(self, text: str) -> int:
        if "[" not in text:  # (no logger line: predictions, audit lines)
            return self.out.write(text)
        for line in text.splitlines(keepends=True):
            if line.startswith(tuple(_TAGS)):
                self.log(line)
            else:
                self.out.write(line)
        return len(text)

    def flush(self) -> None:
        self.out.flush()
        self.err.flush()

    def fileno(self) -> int:
        return self.out.fileno()

    @property
    def buffer(self):  # type: ignore[no-untyped-def]  (bytes written as they were read)
        return self.out.buffer

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.out.encoding

    def summary(self) -> None:
        """VW's last line where the limit dropped some."""
        if self.count > self.limit:
            self.log(_OMITTED.format(self.count))


@contextlib.contextmanager
def vw_streams(args: argparse.Namespace) -> Iterator[None]:
    """The run with VW's logging options applied to what it prints (nothing changes
    without them, or with ``--quiet``, which prints nothing already)."""
    given = (args.log_level, args.log_output, args.limit_output, args.driver_output_off,
             args.driver_output != "stderr")
    if args.quiet or not any(given):
        yield
        return
    out, err = sys.stdout, sys.stderr
    logger = _Logger(out, err, _LEVELS.index(args.log_level or "info"),
                     args.log_output or "stdout", args.limit_output)
    driver = (open(os.devnull, "w") if args.driver_output_off  # noqa: SIM115 (closed below)
              else out if args.driver_output == "stdout" else err)
    if args.log_output == "compat":
        logger.log("[warning] 'compat' mode for --log_output is deprecated and will be "
                   "removed in a future release.\n")
    sys.stdout, sys.stderr = logger, driver  # type: ignore[assignment]
    try:
        yield
        logger.summary()
    finally:
        sys.stdout, sys.stderr = out, err
        if driver not in (out, err):
            driver.close()

