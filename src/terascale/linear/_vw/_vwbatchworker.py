"""One worker of ``terascale vw --bfgs -n N`` (started by the launcher; the job comes as
one JSON argument): it joins the job and runs VW's batch learner on its share of the
examples (:func:`._vwbatch.train_vw_batch` with the communicator), the passes' sums added
over the workers; rank 0 prints the per-pass table and the closing block and writes the
model."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["job_args", "job_of", "main"]


def job_of(args: argparse.Namespace, options: dict[str, Any], paths: list[str],
           how: str) -> str:
    """The JSON job the workers run: the command line's values (those JSON can carry:
    the run's VW feature generation among them), the training options, the inputs and
    the features the compiled parser makes (``args.vw_grams``, rebuilt by
    ``_vwgen.FeatureGen.from_job``)."""
    from ._vwgen import INPUTS, SOURCES

    values = {}
    for k, v in vars(args).items():
        try:
            json.dumps(v)
        except TypeError:
            continue
        values[k] = v
    gen = getattr(args, "vw_grams", None)
    return json.dumps({"args": values, "options": options, "paths": paths, "how": how,
                       "sources": SOURCES, "inputs": INPUTS,
                       "grams": gen.parser_job() if gen is not None else None})


def job_args(job: dict[str, Any]) -> argparse.Namespace:
    """A worker's side of :func:`job_of`: the run's VW feature generation restored in
    ``_vwgen`` (its sources and inputs) and the command line's values as ``args``."""
    from ._vwgen import INPUTS, SOURCES

    SOURCES.update({k: tuple(v) for k, v in job["sources"].items()})
    INPUTS.update(job["inputs"])
    return argparse.Namespace(**job["args"])


def main(argv: list[str]) -> int:
    """Run one worker; a user error is one line on stderr, exit 2 (as ``_worker``)."""
    from .._front._worker import run_worker

    return run_worker(_run, argv, prog="terascale vw")


def _run(job: dict[str, Any]) -> None:
    from ..._init import init
    from ._vwbatch import train_vw_batch

    args = job_args(job)
    comm = init()
    try:
        train_vw_batch(args, job["options"], job["paths"], job["how"], lambda *_: None, comm)
    finally:
        comm.close()


if __name__ == "__main__":
    from .._warm import as_command

    as_command()
    sys.exit(main(sys.argv[1:]))
