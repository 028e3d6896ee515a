"""How an option is named in an error: the Python parameter or the command-line flag.

``terascale.linear.train(learning_rate=0)`` must say ``learning_rate=``, and
``terascale linear train -l 0`` must say ``-l/--learning-rate``: the same check, two
audiences. Checks call :func:`opt` with the Python name; the command line runs them inside
:func:`cli_names`. This table is the one place where parameters map to flags.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

__all__ = ["FLAGS", "cli_names", "opt"]

FLAGS = {
    "format": "--format", "bits": "-b/--bits", "quadratic": "-q/--quadratic",
    "cubic": "--cubic", "interactions": "--interactions", "keep": "--keep",
    "ignore_linear": "--ignore_linear",
    "constant": "--noconstant", "label": "--label", "categorical": "--categorical",
    "ignore": "--ignore", "skip_bad": "--skip-bad", "loss": "--loss/--loss_function",
    "learning_rate": "-l/--learning-rate", "power_t": "--power-t",
    "decay_learning_rate": "--decay_learning_rate", "l1": "--l1",
    "l2": "--l2", "passes": "--passes", "bfgs": "--bfgs", "cg": "--cg", "memory": "--mem",
    "tol": "--tol", "normalize": "--normalize", "average": "--average",
    "average_every": "--average-every", "holdout": "--holdout",
    "patience": "--patience", "cache_dir": "--cache-dir", "cache": "-c/--cache",
    "binary": "--binary", "quantile_tau": "--quantile_tau",
    "expectile_q": "--expectile_q",
    "initial": "-i/--initial-regressor", "predictions": "-p/--predictions",
}

_CLI: contextvars.ContextVar[bool] = contextvars.ContextVar("terascale_linear_cli",
                                                            default=False)


def opt(name: str, *value: object) -> str:
    """``name=`` (or ``name=value``) from Python; the flag (or ``flag value``), as in
    ``FLAGS``, inside :func:`cli_names`."""
    if _CLI.get():
        flag = FLAGS.get(name, "--" + name.replace("_", "-"))
        return f"{flag} {value[0]}" if value else flag
    return f"{name}={value[0]!r}" if value else f"{name}="


@contextlib.contextmanager
def cli_names() -> Iterator[None]:
    """Name flags, not parameters, in the errors raised inside this block."""
    token = _CLI.set(True)
    try:
        yield
    finally:
        _CLI.reset(token)
