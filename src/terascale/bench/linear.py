"""``terascale bench linear``: terascale linear vs Vowpal Wabbit (and scikit-learn), one run.

Data: NYC flights 2013 as VW text (see ``terascale.linear.write_flights``), months 1-10
train, 11-12 test, the same files for every learner. Recipes: one online pass (parsing
included, then again on data cached by an earlier run); one online pass then up to 20
L-BFGS passes; one online pass with ``-q ch``; and the L-BFGS recipe on 2 local workers.
Each run is a fresh child process (:mod:`._linear_children`) so that no learner profits
from another's warm caches: terascale parses into a new cache directory, VW parses its
text (and writes its cache for the L-BFGS passes); in the cached recipe each reads the cache
that an untimed run of the same command wrote just before (VW: ``--cache_file`` in the
run's own directory, never ``-c`` beside the shared data, see :mod:`._linear_vw`). Times are measured inside the child
(parse + learn, without interpreter start-up); metrics are computed on the test months from
each learner's raw scores by the same code. scikit-learn's LogisticRegression (lbfgs, C =
1/l2) is fit on the same hashed features. VW's cluster mode runs through ``terascale
span-server`` (VW's spanning-tree protocol).

``--dense``: a dense synthetic set instead (one-pass recipes). ``--large``: seeded
click-style data at ``--sizes`` (see :mod:`._linear_large`): one pass from text, from the
cache and the L-BFGS recipe, VW and terascale on 1 and 2 workers, with wall time,
examples/s, peak RSS per worker, cache size and test metrics, as ratios to VW. ``--wide``: the same on wide sparse data
(~10^7 distinct hashed features at ``-b 24``), with ``--quadratic`` for ``-q``.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from ._linear_children import child, child_in, work_dir

__all__ = ["RECIPES", "add_bench_parser"]

RECIPES = {  # name: (terascale options, VW stage-1 flags, VW stage-2 flags or None)
    "online": ({}, "", None),
    "online, data cached by an earlier run": ({}, "-c", None),
    "online+bfgs20": ({"bfgs": 20}, "--predict_only_model", "--bfgs --passes 20 -c -k --predict_only_model"),
    "online -q ch": ({"quadratic": ["ch"]}, "-q ch", None),
}


def add_bench_parser(kinds: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``linear`` to the ``terascale bench`` subcommands.

    Parameters
    ----------
    kinds
        The ``terascale bench`` sub-command parsers (``add_subparsers``' result).
    """
    p = kinds.add_parser("linear", help="terascale linear vs Vowpal Wabbit, same run",
                         description=__doc__.split("\n\n")[1] if __doc__ else None)
    p.add_argument("-b", "--bits", type=int, default=24, help="hash bits (default 24)")
    p.add_argument("--workers", type=int, default=2, help="workers of the multi-worker run")
    p.add_argument("--dir", default=None, help="work directory (default: TMPDIR/"
                                                "terascale-bench-linear)")
    p.add_argument("--json", default=None, metavar="FILE", help="also write results as JSON")
    p.add_argument("--no-sklearn", action="store_true", help="leave scikit-learn out")
    p.add_argument("--dense", action="store_true",
                   help="dense synthetic data instead (116k train + 29k test examples, 74 "
                        "numeric features, seeded): the one-pass recipes only")
    p.add_argument("--large", action="store_true",
                   help="large click-style data (seeded, generated once into --dir): VW vs "
                        "terascale on 1 and --workers workers at every --sizes")
    p.add_argument("--wide", action="store_true",
                   help="wide sparse data (seeded: 28 ids per example from a heavy-headed "
                        "draw over 30M values, ~11M distinct features at -b 24 per 1M "
                        "examples, terascale.linear.synthetic.write_wide): the --large table "
                        "on it (sizes default 1M)")
    p.add_argument("--quadratic", default=None, metavar="AB[,CD]",
                   help="--large/--wide: -q pairs for both learners (e.g. ab)")
    p.add_argument("--recipes", default=None,
                   help="--large: comma list of recipes to run (text, cache, lbfgs; "
                        "default all)")
    p.add_argument("--sizes", default=None,
                   help="--large: training examples per run, comma list (20k, 1M, ...; "
                        "default 1M,3M,10M, --wide 1M)")
    p.add_argument("--repeat", type=int, default=None,
                   help="runs of each learner, interleaved; the median time counts "
                        "(default 3, --large 1)")
    from .linear_spark import add_spark_arguments

    add_spark_arguments(p)  # --spark: terascale.spark vs MLlib, its own module
    p.set_defaults(func=_run)


# ---------------------------------------------------------------- driver

def _run(args: argparse.Namespace) -> int:
    if args.spark:
        from .linear_spark import run_spark

        return run_spark(args)
    from terascale.linear import write_flights
    from terascale.linear.synthetic import write_dense

    if args.large or args.wide:
        from ._linear_large import run_large

        if args.sizes is None:
            args.sizes = "1M" if args.wide else "1M,3M,10M"

        return run_large(args)
    repeat = args.repeat or 3

    work = work_dir(args.dir)
    if args.dense:
        os.makedirs(work, exist_ok=True)
        train_p, test_p = (os.path.join(work, f"dense-{k}.vw") for k in ("train", "test"))
        if not (os.path.exists(train_p) and os.path.exists(test_p)):
            write_dense(train_p, test_p)
        what = "dense synthetic data (74 numeric features)"
    else:
        train_p, test_p = write_flights(work)
        what = "NYC flights 2013"
    print(f"terascale bench linear: {what}, {train_p} / {test_p}, -b {args.bits}, "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    rows: list[dict[str, Any]] = []
    base = {"train": train_p, "test": test_p, "bits": args.bits}

    # warm numba's on-disk cache of compiled code once, outside the timings
    child_in(work, "ours", {**base, "options": {"bfgs": 2}})
    for name, (opts, s1, s2) in RECIPES.items():
        if args.dense and name not in ("online", "online, data cached by an earlier run"):
            continue
        vws, uss = [], []
        for _ in range(repeat):
            vws.append(child_in(work, "vw", {**base, "stage1": s1, "stage2": s2}))
            uss.append(child_in(work, "ours", {**base, "options": opts,
                                       "warm": "-c" in s1.split()}))
        rows += [{"recipe": name, "learner": "vowpalwabbit", **_median(vws)},
                 {"recipe": name, "learner": "terascale", **_median(uss)}]
        _print_pair(rows[-2], rows[-1])
    if args.dense:
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
        return 0
    one = rows[5]
    multi = _median([child_in(work, "multi", {**base, "workers": args.workers,
                                      "options": RECIPES["online+bfgs20"][0]})
                     for _ in range(repeat)])
    vwc = _median([child_in(work, "vw-cluster", {**base, "workers": args.workers})
                   for _ in range(repeat)])
    name = f"online+bfgs20, {args.workers} workers"
    rows += [{"recipe": name, "learner": "vowpalwabbit", **vwc},
             {"recipe": name, "learner": "terascale", **multi}]
    _print_pair(rows[-2], rows[-1])
    vw1 = rows[4]
    print(f"  {args.workers} vs 1 worker: terascale x{one['seconds'] / multi['seconds']:.2f} "
          f"(L-BFGS phase {multi['batch_s']:.3f} s vs {one['batch_s']:.3f} s, "
          f"x{one['batch_s'] / multi['batch_s']:.2f}); vowpalwabbit "
          f"x{vw1['seconds'] / vwc['seconds']:.2f} (cluster mode via terascale span-server)")
    if not args.no_sklearn:
        sk = child("sklearn", {**base})
        rows.append({"recipe": "LogisticRegression C=1 (same hashed features)",
                     "learner": "scikit-learn", **sk})
        print(f"scikit-learn LogisticRegression: fit {sk['seconds']:.2f} s, test AUC "
              f"{sk['auc']:.4f}, logloss {sk['logloss']:.4f}, auPRC {sk['auprc']:.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


def _median(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median time, with every run's time listed."""
    ordered = sorted(runs, key=lambda r: r["seconds"])
    return {**ordered[len(ordered) // 2], "all_seconds": [r["seconds"] for r in runs]}


def _print_pair(vw: dict[str, Any], us: dict[str, Any]) -> None:
    n, f = us["examples"], us["features"]
    print(f"\n{vw['recipe']}")
    print(f"  {'learner':<13} {'seconds':>8} {'examples/s':>11} {'features/s':>11} "
          f"{'logloss':>8} {'AUC':>7} {'auPRC':>7}")
    for r in (vw, us):
        print(f"  {r['learner']:<13} {r['seconds']:8.2f} {n / r['seconds']:11,.0f} "
              f"{f / r['seconds']:11,.0f} {r['logloss']:8.4f} {r['auc']:7.4f} "
              f"{r['auprc']:7.4f}")
    print(f"  speed-up x{vw['seconds'] / us['seconds']:.2f}, AUC {us['auc'] - vw['auc']:+.4f}, "
          f"logloss {us['logloss'] - vw['logloss']:+.4f}", flush=True)


