"""The options a ``terascale linear train`` command line stands for (``_cli`` parses it).

VW's forms become terascale's here: a bare ``--bfgs``/``--cg`` takes its passes from
``--passes`` with no online pass (VW's meaning), ``--holdout_period K`` is ``--holdout 1/K``.
The result is JSON-serializable: it is what each worker of ``train -n N`` receives.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

__all__ = ["job_json", "train_options"]


def train_options(args: argparse.Namespace) -> dict[str, Any]:
    """The train() options from parsed flags (JSON-serializable, for the workers)."""
    from ..._errors import ConfigError

    def cols(s: str) -> list[str]:
        return [c for c in s.split(",") if c]

    passes = 1 if args.passes is None else args.passes
    batch = {}
    for name in ("bfgs", "cg"):
        v = getattr(args, name)
        if v is None:
            batch[name] = 0
        elif v.isdigit():
            batch[name] = int(v)
        else:  # bare --bfgs: VW runs --passes passes of L-BFGS from the start
            if v:  # `--bfgs data.vw`: argparse took the file for the count
                args.data.append(v)
            flag = "--bfgs" if name == "bfgs" else "--cg/--conjugate_gradient"
            if args.passes is None or args.passes < 2:
                raise ConfigError(f"{flag} without a count takes its passes from --passes, "
                                  f"as VW does, and needs --passes >= 2 (VW: 'at least 2 "
                                  f"passes must be used'); or {flag} K for K passes after "
                                  f"--passes online passes (default 1)")
            batch[name], passes = args.passes, 0
    normalize = args.normalize
    if normalize not in ("auto", "std", "off") and os.path.exists(normalize):
        args.data.append(normalize)  # `--normalize data.csv`: argparse took the file
        normalize = "std"
    holdout = args.holdout
    period = args.holdout_period
    if period is not None and holdout != 0.0:  # (--holdout_off wins, as in VW)
        if holdout is not None:
            raise ConfigError("--holdout and --holdout_period: give one or the other")
        if period >= 2:
            holdout = 1.0 / period
        elif passes > 1 or any(batch.values()):
            raise ConfigError(f"--holdout_period {period} holds out every example of every "
                              f"pass (VW learns from none of them): give 2 or more, or "
                              f"--holdout_off" if period == 1 else
                              f"--holdout_period must be >= 2, not {period}")
        # (one pass holds nothing out, as VW's: a period below 2 is not used)
    if args.holdout_after < 0:
        raise ConfigError(f"--holdout_after must be >= 0, not {args.holdout_after}")
    holdout_after = 0 if args.holdout == 0.0 else args.holdout_after
    ignore = ([c for v in args.ignore for c in cols(v)] if args.format == "csv"
              else list(args.ignore))
    return {"format": args.format, "bits": args.bits, "quadratic": list(args.quadratic),
            "cubic": list(args.cubic), "interactions": list(args.interactions),
            "constant": not args.noconstant, "keep": list(args.keep),
            "ignore_linear": list(args.ignore_linear),
            "permutations": args.permutations,
            "leave_duplicates": args.leave_duplicate_interactions,
            "label": args.label, "categorical": cols(args.categorical),
            "ignore": ignore, "skip_bad": args.skip_bad,
            # terascale vw's: VW's reading of a label section it warns of (--oaa's
            # importance weight too; its label words are _oaa._first_malformed's)
            **({"lenient_labels": True} if getattr(args, "vw_mode", False) else {}),
            "loss": args.loss or "logistic", "quantile_tau": args.quantile_tau,
            "expectile_q": args.expectile_q,
            "learning_rate": args.learning_rate, "power_t": args.power_t,
            "decay_learning_rate": args.decay_learning_rate, "l1": args.l1,
            "l2": args.l2, "passes": passes, "memory": args.memory, "tol": args.tol,
            "patience": args.patience, "average": args.average,
            "average_every": args.average_every, "holdout": holdout,
            **({"holdout_after": holdout_after} if holdout_after else {}),
            "cache_dir": args.cache_dir, "cache": args.cache, "binary": args.binary,
            "progress": not args.quiet,
            "normalize": normalize, **batch}


def job_json(data: list[str], model: str, initial: str | None,
             options: dict[str, Any], *, model_format: str = "terascale",
             predict_only: bool = False, link: str = "identity",
             rates: dict[str, float] | None = None, best_constant: bool = True,
             generation: dict[str, list[str]] | None = None,
             preserved: dict[str, float] | None = None,
             interactions: dict[str, Any] | None = None,
             initial_t: float | None = None,
             label_range: list[float | None] | None = None,
             rules: list[str] | None = None,
             prog: str = "terascale linear") -> str:
    """The job a worker of ``train -n N`` runs (``_worker``); ``model_format`` "vw" writes
    VW's binary model (``predict_only``: its ``--predict_only_model`` form); ``link``: the
    run's ``--link``, which the model records (VW's ``-i`` applies it); ``rates``: the
    ``-l``/``--power_t`` a VW command line gave, which VW's model keeps; ``best_constant``:
    VW's closing block reports the best constant (False: ``--dont_output_best_constant``);
    ``generation``: a ``terascale vw`` run's VW feature generation (the model records it,
    -i's must equal it); ``preserved``: -i's counters under
    ``--preserve_performance_counters`` (the closing block adds them); ``interactions``:
    a ``terascale vw`` run's ``-q``/``--cubic``/``--interactions`` (and ``--noconstant``),
    which replace -i's (VW's rule); ``initial_t``, ``label_range``: its ``--initial_t`` and
    ``--min_prediction``/``--max_prediction`` with -i (``_cli_run.vw_start``); ``rules``:
    the update rules VW's model keeps (``_cli_run.kept_rules``); ``prog``: the command
    whose name a worker's error starts with."""
    return json.dumps({"data": data, "model": model, "initial": initial, "options": options,
                       "model_format": model_format, "predict_only": predict_only,
                       "link": link, "rates": rates or {}, "best_constant": best_constant,
                       "generation": generation or {}, "preserved": preserved or {},
                       "interactions": interactions or {}, "initial_t": initial_t,
                       "range": label_range, "rules": rules or [], "prog": prog})
