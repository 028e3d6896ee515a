"""``terascale bench linear --large``: VW vs terascale on large click-style data.

For every size of ``--sizes`` (training examples; the test set is a tenth of it, at least
10^4 and at most 10^6, drawn with another seed from the same planted model), the data is
generated once into ``--dir`` (:func:`terascale.linear.synthetic.write_click`) and three
recipes run, each learner in fresh processes:

* **one pass from text**: VW ``-d train`` (no cache); terascale ``train`` without a cache
  (``cache=False``; a one-pass run writes none by default either: the pass learns from the
  text as it is parsed);
* **one pass from the cache**: VW ``-c`` and terascale ``cache=True`` (``-c``) each time a
  pass over the cache that an untimed earlier run of the same command wrote from the text;
* **L-BFGS recipe**: one online pass, then 20 passes of L-BFGS (its cache written inside
  the timing; both learners hold out every 10th example to stop early, VW's default).

Exactly what VW runs (``vw`` = ``python -m vowpalwabbit``, ``D`` the run's own fresh
directory, removed when the run ends; ``B`` = ``-b``; the test predictions ``vw --quiet
-d test -t -i MODEL -p D/vw.pred`` are not timed)::

    text:   vw --loss_function logistic -b B -d train -f D/vw1.model
    cache:  vw --loss_function logistic -b B -d train -f D/vw1.model --cache_file D/vw.cache
            (run twice: the first, untimed, parses the text and writes D/vw.cache; the
            second, timed, reads it: "ignoring text input in favor of cache input")
    L-BFGS: vw --loss_function logistic -b B -d train -f D/vw1.model --predict_only_model
            vw -d train -i D/vw1.model -f D/vw2.model --cache_file D/vw.cache --bfgs
               --passes 20 -k --predict_only_model

``--cache_file`` is VW's ``-c`` with the cache kept in ``D``; ``-c`` as well would add a
second cache, ``train.cache`` beside the shared data file, and VW reads every cache that
exists, so one left there by an earlier run made VW's cache pass learn the data twice (see
:mod:`._linear_vw`). Every VW run's own summary (examples, sources, caches read and
written) is checked (the timed cache pass must read ``D/vw.cache`` alone and learn exactly
the examples that the writing run parsed) and kept in the JSON rows as ``vw``.

VW runs as ``python -m vowpalwabbit`` (one process: its start-up counts, as terascale's
kernel loading does); terascale with 1 worker and with ``--workers`` workers (each parses
its own byte range of the one file). In the text recipe VW's cluster mode runs too, on
``--workers`` nodes (``pyvw`` processes, ``--span_server`` through
:class:`terascale.linear.SpanServer`, each node one shard: the byte ranges terascale's
workers read, cut once into ``--dir`` untimed; time: the slowest node's, RSS: the largest):
the same algorithm as terascale's default (one pass, the weights averaged at its end,
weighted by the adaptive sums), so its test metrics are the like-for-like reference for
terascale's multi-worker run, as VW's one-node run is for one worker. In both one-pass
recipes terascale's workers also run chained (``average="chain"``: one learner handed from
worker to worker, :mod:`terascale.linear._combine._chain`), whose model is one worker's. Reported: wall
seconds, examples/s, speed as a ratio to VW, peak RSS per worker (``ru_maxrss`` of each
process, before evaluation), cache size, test logloss and AUC with their differences to
VW. ``--json`` keeps every row.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

from .._errors import ConfigError
from ._linear_children import child_in, work_dir

__all__ = ["parse_count", "run_large"]

# name: (terascale options, warm cache, VW stage-1 flags, VW stage-2 flags or None)
LARGE = {
    "one pass from text": ({"cache": False}, False, "", None),
    "one pass from cache": ({"cache": True}, True, "-c", None),
    "L-BFGS recipe": ({"bfgs": 20}, False, "--predict_only_model",
                      "--bfgs --passes 20 -c -k --predict_only_model"),
}


# short names for ``--recipes``
RECIPES = {"text": "one pass from text", "cache": "one pass from cache",
           "lbfgs": "L-BFGS recipe"}


def parse_recipes(text: str | None) -> list[str]:
    """``text,cache`` -> the recipe names of :data:`LARGE`; None -> every recipe."""
    if not text:
        return list(LARGE)
    names = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in names if t not in RECIPES]
    if bad:
        raise ConfigError(f"--recipes: unknown recipe {bad[0]!r} (choose from "
                          f"{', '.join(RECIPES)})")
    return [RECIPES[t] for t in names]


def parse_count(text: str) -> int:
    """``20k``, ``1M``, ``1.5M``, ``2G`` or a plain number of examples (:mod:`terascale._units`)."""
    from .._units import parse_count as parse

    return parse(text, flag="--sizes")


def _label(n: int) -> str:
    for unit, k in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if n >= k and n % (k // 10) == 0:
            v = n / k
            return f"{v:g}{unit}"
    return str(n)


def _data(work: str, n: int, wide: bool = False) -> tuple[str, str]:
    from terascale.linear.synthetic import write_click, write_wide

    kind = "wide" if wide else "click"
    train = os.path.join(work, f"{kind}-{_label(n)}-train.vw")
    test = os.path.join(work, f"{kind}-{_label(n)}-test.vw")
    n_test = min(max(n // 10, 10_000), 1_000_000)
    for path, m, seed in ((train, n, 1), (test, n_test, 2)):
        if not os.path.exists(path):
            t0 = time.perf_counter()
            print(f"  generating {path} ({m:,} examples) ...", end=" ", flush=True)
            (write_wide if wide else write_click)(path, m, seed=seed)
            print(f"{os.path.getsize(path) / 1e6:,.0f} MB in {time.perf_counter() - t0:.1f} s",
                  flush=True)
    return train, test


def _runs(args: argparse.Namespace, work: str, n: int, warm: bool) -> list[dict[str, Any]]:
    wide = bool(getattr(args, "wide", False))
    train, test = _data(work, n, wide)
    base = {"train": train, "test": test, "bits": args.bits}
    quad = [q for q in (getattr(args, "quadratic", None) or "").split(",") if q]
    vwq = "".join(f" -q {q}" for q in quad)
    rows: list[dict[str, Any]] = []

    if warm:  # load (or compile) numba's kernels once, outside the timings: with -q too
        # (its parser's kernels: compiled inside the first timed run they made it 52 s, 7 s
        # the next, on a loaded host)
        child_in(work, "ours", {**base, "train": test,
                                "options": {"bfgs": 2, **({"quadratic": quad} if quad else {})}})

    learners: list[tuple[str, Any]] = [
        ("vowpalwabbit", lambda o, w, s1, s2: child_in(
            work, "vw", {**base, "stage1": s1 + vwq, "stage2": s2, "cli": True})),
        ("terascale 1w", lambda o, w, s1, s2: child_in(
            work, "ours", {**base, "options": o, "warm": w})),
        (f"terascale {args.workers}w", lambda o, w, s1, s2: child_in(
            work, "multi", {**base, "options": o, "warm": w, "workers": args.workers})),
    ]
    # VW's cluster mode (one pass, averaged at its end as terascale's default): the same
    # shards as terascale's, cut once beside the data
    kind = "wide" if wide else "click"
    shards = [os.path.join(work, f"{kind}-{_label(n)}-shard{k}of{args.workers}.vw")
              for k in range(args.workers)]
    cluster = (f"vw cluster {args.workers}w", lambda o, w, s1, s2: child_in(
        work, "vw-cluster", {**base, "workers": args.workers, "shards": shards,
                             "one_pass": True}))
    # the workers chained (average="chain", one learner handed on: one worker's model)
    chained = (f"terascale {args.workers}w chain", lambda o, w, s1, s2: child_in(
        work, "multi", {**base, "options": {**o, "average": "chain"}, "warm": w,
                        "workers": args.workers}))
    for recipe in parse_recipes(getattr(args, "recipes", None)):
        opts, warm, s1, s2 = LARGE[recipe]
        if quad:
            opts = {**opts, "quadratic": quad}
        extra = {"one pass from text": [chained, cluster],
                 "one pass from cache": [chained]}.get(recipe, [])
        if wide or quad:  # (VW's cluster mode takes no -q here; the chain is --large's)
            extra = []
        for learner, run in learners + extra:
            print(f"  [{_label(n)}] {recipe}: {learner} ...", end=" ", flush=True)
            times = []
            for _ in range(args.repeat or 1):
                r = run(opts, warm, s1, s2)
                times.append(r["seconds"])
            r = {**r, "seconds": sorted(times)[len(times) // 2], "all_seconds": times}
            print(f"{r['seconds']:.2f} s, AUC {r['auc']:.4f}, RSS {r['rss_mb']:.0f} MB",
                  flush=True)
            rows.append({"size": n, "recipe": recipe + (f" -q {','.join(quad)}" if quad else ""),
                         "learner": learner, "bits": args.bits,
                         "examples_per_s": n / r["seconds"], **r})
    return rows


def _table(rows: list[dict[str, Any]]) -> None:
    print(f"\n{'size':>5} {'recipe':<20} {'learner':<18} {'seconds':>8} {'ex/s':>10} "
          f"{'xVW':>6} {'RSS MB':>7} {'tree MB':>7} {'cache MB':>8} {'logloss':>8} {'dLL':>7} "
          f"{'AUC':>7} {'dAUC':>7}")
    vw: dict[tuple[int, str], dict[str, Any]] = {}
    for r in rows:
        key = (r["size"], r["recipe"])
        if r["learner"] == "vowpalwabbit":
            vw[key] = r
        ref = vw.get(key, r)
        cache = r.get("cache_bytes") or 0
        print(f"{_label(r['size']):>5} {r['recipe']:<20} {r['learner']:<18} "
              f"{r['seconds']:8.2f} {r['examples_per_s']:10,.0f} "
              f"{ref['seconds'] / r['seconds']:6.2f} {r['rss_mb']:7.0f} "
              f"{sum(r.get('rss_mb_all') or [r['rss_mb']]):7.0f} "
              f"{cache / 1e6:8.1f} {r['logloss']:8.4f} {r['logloss'] - ref['logloss']:+7.4f} "
              f"{r['auc']:7.4f} {r['auc'] - ref['auc']:+7.4f}")


def run_large(args: argparse.Namespace) -> int:
    sizes = [parse_count(s) for s in args.sizes.split(",") if s.strip()]
    parse_recipes(getattr(args, "recipes", None))  # a bad name fails before any work
    work = work_dir(args.dir)
    os.makedirs(work, exist_ok=True)
    kind = "--wide" if getattr(args, "wide", False) else "--large"
    print(f"terascale bench linear {kind}: sizes {', '.join(map(_label, sizes))}, "
          f"-b {args.bits}, 1 and {args.workers} workers, {work}, "
          f"load {os.getloadavg()[0]:.2f}", flush=True)
    rows: list[dict[str, Any]] = []
    for i, n in enumerate(sizes):
        rows += _runs(args, work, n, warm=i == 0)
        if args.json:  # after every size: a long run keeps what it has measured
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
    _table(rows)
    return 0
