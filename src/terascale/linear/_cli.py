"""``terascale linear train|predict|evaluate``: VW-style flags over :mod:`terascale.linear`.

``train -n N`` starts N local workers through the launcher; each parses and caches its
shard of the input, then joins the job; rank 0 writes the model. Heavy imports (numba)
happen only inside the command functions.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

__all__ = ["add_parser", "train_options"]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from . import _span

    _add_linear(sub)
    _span.add_parser(sub)


def _add_linear(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("linear", help="terascale linear learning (VW-style)",
                       description="Online passes of adaptive normalized SGD, weight "
                                   "averaging and L-BFGS/CG over allreduce.")
    cmds = p.add_subparsers(dest="linear_command", metavar="COMMAND")
    t = cmds.add_parser("train", help="train a model on data files")
    t.add_argument("data", nargs="+", help="input files (plain, .gz or .zip)")
    t.add_argument("-n", "--nprocs", type=int, default=1, metavar="N",
                   help="local workers; each reads its shard of the input (default 1)")
    t.add_argument("-f", "--final-regressor", dest="model", required=True, metavar="MODEL",
                   help="where to write the model")
    _data_flags(t)
    t.add_argument("--loss", default="logistic", choices=("logistic", "squared", "hinge"))
    t.add_argument("--passes", type=int, default=1, help="online passes (default 1)")
    g = t.add_mutually_exclusive_group()
    g.add_argument("--bfgs", type=int, default=0, metavar="K",
                   help="then up to K passes of L-BFGS")
    g.add_argument("--cg", type=int, default=0, metavar="K",
                   help="then up to K passes of preconditioned conjugate gradient")
    t.add_argument("--mem", type=int, default=15, dest="memory", help="L-BFGS memory")
    t.add_argument("--l1", type=float, default=0.0, help="L1 (online passes only)")
    t.add_argument("--l2", type=float, default=None,
                   help="L2: online only, VW's per-example shrinkage; with --bfgs/--cg the "
                        "objective's l2/2 ||w||^2 (default 1.0 then)")
    t.add_argument("-l", "--learning-rate", type=float, default=0.5)
    t.add_argument("--power-t", type=float, default=0.5)
    t.add_argument("--average", default="weighted", choices=("uniform", "weighted"),
                   help="how workers' online weights are combined (default weighted)")
    t.add_argument("--holdout", type=float, default=None, metavar="FRAC",
                   help="fraction held out to stop the batch phase (default 0.1 with "
                        "--bfgs/--cg or --passes > 1, else 0)")
    t.add_argument("--tol", type=float, default=1e-7, help="relative loss decrease to stop")
    t.add_argument("--cache-dir", default=None,
                   help="cache directory (default: TMPDIR/terascale-cache; '' disables)")
    t.add_argument("--timeout", type=float, default=120.0,
                   help="seconds a worker waits for its peers (with -n)")
    t.add_argument("--quiet", action="store_true", help="no progress lines")
    t.set_defaults(func=_flag_errors(_train))

    pr = cmds.add_parser("predict", help="write predictions of a model")
    pr.add_argument("data", nargs="+")
    pr.add_argument("-i", "--initial-regressor", dest="model", required=True, metavar="MODEL")
    pr.add_argument("-p", "--predictions", default=None, metavar="OUT",
                    help="output file (default: standard output)")
    pr.add_argument("--raw", action="store_true", help="raw scores, not probabilities")
    pr.set_defaults(func=_flag_errors(_predict))

    ev = cmds.add_parser("evaluate", help="metrics of a model on labelled data")
    ev.add_argument("data", nargs="+")
    ev.add_argument("-i", "--initial-regressor", dest="model", required=True, metavar="MODEL")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    ev.set_defaults(func=_flag_errors(_evaluate))
    p.set_defaults(func=lambda args: p.print_help() or 2)


def _flag_errors(fn: Any) -> Any:
    """Run a command with option errors naming its flags, not Python parameters."""
    def run(args: argparse.Namespace) -> int:
        from ._names import cli_names

        with cli_names():
            return int(fn(args) or 0)
    return run


def _data_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", default="vw", choices=("vw", "libsvm", "csv"))
    p.add_argument("-b", "--bits", type=int, default=18, help="hash bits (default 18)")
    p.add_argument("-q", "--quadratic", action="append", default=[], metavar="AB",
                   help="cross namespaces A and B (first letters); repeatable")
    p.add_argument("--label", default="label", help="CSV: the label column")
    p.add_argument("--categorical", default="", help="CSV: comma-separated columns to hash "
                                                      "as categories even when numeric")
    p.add_argument("--ignore", default="", help="CSV: comma-separated columns to leave out")
    p.add_argument("--skip-bad", action="store_true",
                   help="skip malformed lines (counted and reported) instead of failing")


def train_options(args: argparse.Namespace) -> dict[str, Any]:
    """The train() options from parsed flags (JSON-serializable, for the workers)."""
    def cols(s: str) -> list[str]:
        return [c for c in s.split(",") if c]

    return {"format": args.format, "bits": args.bits, "quadratic": list(args.quadratic),
            "label": args.label, "categorical": cols(args.categorical),
            "ignore": cols(args.ignore), "skip_bad": args.skip_bad, "loss": args.loss,
            "learning_rate": args.learning_rate, "power_t": args.power_t, "l1": args.l1,
            "l2": args.l2, "passes": args.passes, "bfgs": args.bfgs, "cg": args.cg,
            "memory": args.memory, "tol": args.tol, "average": args.average,
            "holdout": args.holdout, "cache_dir": args.cache_dir,
            "progress": not args.quiet}


def _train(args: argparse.Namespace) -> int:
    from .._errors import ConfigError

    if args.nprocs < 1:
        raise ConfigError(f"-n must be >= 1, not {args.nprocs}")
    _check_output(args.model, "-f")
    _check_inputs(args.data)
    job = {"data": args.data, "model": args.model, "options": train_options(args)}
    if args.nprocs == 1:
        from ._worker import run_train

        run_train(job)
        return 0
    from ..launch import LaunchOptions, launch
    from ._warm import warm_kernels

    warm_kernels()  # compile once here rather than N times at once in the workers
    return launch([sys.executable, "-m", "terascale.linear._worker", json.dumps(job)],
                  LaunchOptions(nprocs=args.nprocs, timeout=args.timeout,
                                prefix_output=False))


def _check_inputs(paths: list[str]) -> None:
    """Missing inputs fail here, once, rather than in every worker."""
    import os

    from .._errors import DataError

    for p in paths:
        if not os.path.exists(p):
            raise DataError(f"{p}: no such file")
        if os.path.isdir(p):
            raise DataError(f"{p}: is a directory, not a data file")


def _check_output(path: str, flag: str) -> None:
    """Fail before any work when ``path`` cannot be written (not after minutes of training)."""
    import os

    from .._errors import ConfigError

    d = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ConfigError(f"{flag} {path}: is a directory, not a file name")
    if not os.path.isdir(d):
        raise ConfigError(f"{flag} {path}: directory {d} does not exist")
    if not os.access(d, os.W_OK):
        raise ConfigError(f"{flag} {path}: directory {d} is not writable")


def _predict(args: argparse.Namespace) -> int:
    import numpy as np

    from ._model import LinearModel

    model = LinearModel.load(args.model)
    if args.predictions:
        _check_output(args.predictions, "-p")
    out = open(args.predictions, "w") if args.predictions else sys.stdout  # noqa: SIM115
    try:
        for path in args.data:
            for blk, s in model.predict_blocks(path):  # streamed: any file size
                if not args.raw and model.loss == "logistic":
                    s = 1.0 / (1.0 + np.exp(-np.clip(s, -50, 50)))
                if blk.has_tags:
                    out.write("".join(f"{v:.6f} {blk.tag(i)}\n" for i, v in enumerate(s)))
                else:
                    np.savetxt(out, s, fmt="%.6f")
    except BrokenPipeError:  # `... | head`: the reader has what it wanted
        return 0
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from ._model import LinearModel

    t0 = time.perf_counter()
    model = LinearModel.load(args.model)
    m = model.evaluate(list(args.data))
    if not m["examples"]:
        from .._errors import DataError

        raise DataError(f"{', '.join(args.data)}: no labelled examples to evaluate on "
                        f"(use predict for unlabelled data)")
    m["seconds"] = round(time.perf_counter() - t0, 3)
    if args.json:  # strict JSON: an undefined metric (AUC of one class) is null, not NaN
        print(json.dumps({k: None if isinstance(v, float) and v != v else v
                          for k, v in m.items()}))
    else:
        for k, v in m.items():
            print(f"{k:<10} {v:.6f}" if isinstance(v, float) else f"{k:<10} {v}")
    return 0
