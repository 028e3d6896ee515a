"""One worker of ``terascale linear train`` (started by the launcher with ``-n N``).

The job description (data files, model path, warm-start model, options) comes as one JSON
argument. The worker parses and caches its shard, joins the job, trains; rank 0 writes the
model and prints the summary.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["main", "run_train"]


def run_train(job: dict[str, Any],
              predictions: Callable[[np.ndarray, list[str] | None], None] | None = None
              ) -> Any:
    """Train as the job says; rank 0 saves the model (when the job names a path). Returns
    the model."""
    from ..._env import read_env
    from .._online._progress import CARRIED_T, LINK, PRESERVED
    from .._train import train
    from .._vw._vwmodel import load_model, save_model

    LINK[:] = [job.get("link") or "identity"]  # (the progress lines show what -p writes)
    env = read_env()
    rank = 0 if env is None else env.rank
    t0 = time.perf_counter()
    initial = load_model(job["initial"], job.get("generation")) if job.get("initial") \
        else None
    if initial is not None:  # (what the VW command line changes in -i's model)
        from types import SimpleNamespace

        from ._cli_run import vw_start

        vw_start(initial, SimpleNamespace(vw_interactions=job.get("interactions"),
                                          vw_initial_t=job.get("initial_t"),
                                          vw_range=job.get("range")))
    # one worker that no launcher started: a job of size 1 of its own (init()'s notice
    # that no launcher started the process is for scripts, not for the learner's CLI)
    alone = None
    if env is None:
        from ...communicator import Communicator

        alone = Communicator()
    PRESERVED.clear()  # (-i's counters the table goes on from: this run's only)
    PRESERVED.update(job.get("preserved") or {})
    if env is not None and env.size > 1 and PRESERVED:  # (-i's label sum, which the closing
        PRESERVED["weighted_labels"] = 0.0  # block and the model add once, not each worker's)
    counters = (initial.info.get("vw_counters") or {}) if initial is not None else {}
    CARRIED_T[0] = float(counters.get("t") or 0.0)  # (VW's t goes on from -i's)
    try:
        model = train(job["data"], comm=alone, initial=initial, predictions=predictions,
                      **job["options"])
    finally:
        PRESERVED.clear()
        CARRIED_T[0] = 0.0
        if alone is not None:
            alone.close()
    if job.get("predict_only") and model.adaptive is not None:
        # VW's learner without save_resume folds the lazy L1/L2 into the weights
        from .._online._update import sync_weights

        sync_weights(model.weights, model.adaptive[2])
    if rank == 0:
        if job.get("link"):  # (given, identity too: VW keeps it)
            model.info["link"] = job["link"]
        rows = model.info.get("pass_totals") or []
        if counters.get("t") and not (rows and len(rows[-1]) >= 14):
            # VW carries -i's t on (it resets the other counters; one worker's rows end
            # with VW's running t, from -i's on)
            model.info["vw_t0"] = float(counters["t"])
        if counters.get("initial_t"):  # (and the initial_t its model keeps)
            model.info["vw_initial_t"] = float(counters["initial_t"])
        if job["options"].get("binary"):
            model.info["binary"] = True  # (VW keeps --binary in its model)
        if job["options"].get("fixed_range") or job["options"].get("header_range"):
            model.info["fixed_range"] = True  # (VW's header holds it, whatever the loss)
        if job.get("rates"):
            model.info["vw_rates"] = job["rates"]
        if job.get("rules"):
            model.info["vw_rules"] = job["rules"]
        if job.get("generation"):
            model.info["vw_generation"] = job["generation"]
        if job.get("preserved"):  # (-i's counters, which -f's go on from)
            model.info["vw_preserved"] = job["preserved"]
        if job["model"]:
            save_model(model, job["model"], job.get("model_format", "terascale"),
                       predict_only=job.get("predict_only", False))
        i = model.info
        if job["options"].get("vw_text"):
            from .._vw._vwreport import closing_block, holdout_on

            if job["options"].get("progress"):
                opts = job["options"]
                print(closing_block({**i, "holdout": holdout_on(opts), "loss": model.loss,
                                     "vw_preserved": job.get("preserved") or {},
                                     "quantile_tau": opts.get("quantile_tau", 0.5),
                                     "best_constant": job.get("best_constant", True),
                                     "label_range": _fixed_range(opts, model)}),
                      file=sys.stderr)
            return model
        if not job["options"].get("progress", True):  # --quiet
            return model
        secs = time.perf_counter() - t0
        where = f"; model: {job['model']}" if job["model"] else " (no -f: model not saved)"
        print(f"trained on {i['examples']} examples, {i['feature_count']} features, "
              f"{i['features']} distinct hashed features, {i['workers']} worker(s) in "
              f"{secs:.2f} s ({i['examples'] / secs:,.0f} examples/s, "
              f"{i['feature_count'] / secs:,.0f} features/s){where}", file=sys.stderr)
    return model


def _fixed_range(opts: dict[str, Any], model: Any) -> list[float] | None:
    """The label range a run under ``--min_prediction``/``--max_prediction`` kept (the
    closing block's ``label_range``); None where the range is the labels'."""
    from .._online._state import MAX_LABEL, MIN_LABEL

    ad = model.adaptive
    if not opts.get("fixed_range") or ad is None or len(ad[2]) <= MAX_LABEL:
        return None
    return [float(ad[2][MIN_LABEL]), float(ad[2][MAX_LABEL])]


def main(argv: list[str]) -> int:
    """Run one worker (:func:`run_worker` of :func:`run_train`)."""
    return run_worker(run_train, argv)


def run_worker(run: Callable[[dict[str, Any]], object], argv: list[str],
               prog: str | None = None) -> int:
    """``run`` on the job given as one JSON argument; a user error (bad data, options) is
    one line on stderr, exit 2, as with ``-n 1``, instead of a traceback from every
    worker, starting with the command's name (``prog``, else the job's ``"prog"``), and
    naming a copy of an input (standard input's, a rewritten one) as the input, as
    ``-n 1`` does."""
    from ..._errors import TerascaleError
    from .._names import cli_names
    from .._vw._vwgen import as_given

    job = json.loads(argv[0])
    try:
        with cli_names():  # errors name the flags the user typed
            run(job)
    except TerascaleError as e:
        name = prog or (job.get("prog") if isinstance(job, dict) else None)
        print(f"{name or 'terascale linear'}: error: {as_given(str(e))}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    from .._warm import as_command

    as_command()  # a worker's process is the command's own, as -n 1's
    sys.exit(main(sys.argv[1:]))
