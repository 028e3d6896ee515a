"""One worker of ``terascale linear train`` (started by the launcher with ``-n N``).

The job description (data files, model path, options) comes as one JSON argument. The
worker parses and caches its shard, joins the job, trains; rank 0 writes the model and
prints the summary.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

__all__ = ["main", "run_train"]


def run_train(job: dict[str, Any]) -> None:
    import terascale

    from .._init import read_env
    from ._train import train

    env = read_env()
    rank = 0 if env is None else env.rank
    t0 = time.perf_counter()
    model = train(job["data"], comm=None, **job["options"])
    if rank == 0:
        model.save(job["model"])
        i = model.info
        secs = time.perf_counter() - t0
        print(f"trained on {i['examples']} examples, {i['feature_count']} features, "
              f"{i['features']} distinct hashed features, {i['workers']} worker(s) in "
              f"{secs:.2f} s ({i['examples'] / secs:,.0f} examples/s, "
              f"{i['feature_count'] / secs:,.0f} features/s); model: {job['model']}",
              file=sys.stderr)
    del terascale


def main(argv: list[str]) -> int:
    """Run one worker; a user error (bad data, options) is one line on stderr, exit 2,
    as with ``-n 1``, instead of a traceback from every worker."""
    from .._errors import TerascaleError
    from ._names import cli_names

    try:
        with cli_names():  # errors name the flags the user typed
            run_train(json.loads(argv[0]))
    except TerascaleError as e:
        print(f"terascale linear: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
