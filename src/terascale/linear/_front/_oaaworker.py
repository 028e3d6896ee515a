"""One worker of ``--oaa K -n N`` (started by the launcher; the job comes as one JSON
argument): it joins the job, learns the K learners on its shard (:func:`._oaa.run_oaa`),
averaging each class's learner over the workers after every pass; rank 0 writes the
model."""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["main"]


def main(argv: list[str]) -> int:
    """Run one worker; a user error is one line on stderr, exit 2 (as ``_worker``)."""
    from ._worker import run_worker

    return run_worker(_run, argv)


def _run(job: dict[str, Any]) -> None:
    from ..._init import init
    from ._oaa import learners_options, ranged_start, run_oaa, split_oaa

    start = None
    if job.get("range"):  # (--min_prediction/--max_prediction, --initial_t alone)
        start = ranged_start(job["range"], int(job["k"]), learners_options(job),
                             initial_t=job.get("initial_t"))
    elif job.get("starting_weights"):  # (VW's starting weights: _oaa._initial)
        from .._model import LinearModel

        start = split_oaa(LinearModel.load(job["initial"]), int(job["k"]))
    elif job.get("initial"):
        from .._vw._vwmodel import read_vw_model

        start = split_oaa(read_vw_model(job["initial"], oaa=True,
                                        generation=job.get("generation")), int(job["k"]))
    comm = init()
    try:
        run_oaa(job, start, None, comm)
    finally:
        comm.close()


if __name__ == "__main__":
    from .._warm import as_command

    as_command()  # a worker's process is the command's own, as -n 1's
    sys.exit(main(sys.argv[1:]))
