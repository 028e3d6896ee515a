"""Peak RSS of each worker, phase by phase, in one pass over the wide bench data.

Each worker samples its own resident set (``VmRSS`` of ``/proc/self/status``) every 2 ms
in a thread, and the phases of the end of the pass are marked by wrapping the recipe's
functions: ``pass`` (the first pass, before the union), ``space`` (the union; inside it
``union_features``, the exchange of feature lists, or ``average``, the dense rows
averaged in place), ``in_union`` (the learner moved into the union's arrays),
``average`` (after the passes, in the union), ``model``; ``name+`` is the rest of the
phase that called ``name``. Prints, per worker, the run's seconds, its peak RSS
(``ru_maxrss``), each phase's peak (and the anonymous, file-backed and shared-memory
parts of the resident set at that peak), and a hash of the model (the same bits before and
after a change).

    terascale bench linear --wide --sizes 1M --recipes text --repeat 1   # writes the data
    python benchmarks/wide_worker_memory.py --workers 2 --recipe text --quadratic ab DIR
    python benchmarks/wide_worker_memory.py --workers 2 --recipe cache DIR

``--recipe cache`` writes the workers' caches into ``DIR`` with a first, unmeasured run
where none is there yet.
"""

import argparse
import hashlib
import json
import os
import resource
import sys
import tempfile
import threading
import time

PATH = os.path.join(tempfile.gettempdir(), "terascale-bench-linear", "wide-1M-train.vw")

phase = ["pass"]
peaks: dict[str, int] = {}
order: list[str] = []


at_peak: dict[str, tuple[int, int, int]] = {}


def _rss_kb() -> tuple[int, int, int, int]:
    """VmRSS and its anonymous, file-backed and shared-memory parts, KiB."""
    got = dict.fromkeys(("VmRSS", "RssAnon", "RssFile", "RssShmem"), 0)
    with open("/proc/self/status") as f:
        for line in f:
            key = line.split(":", 1)[0]
            if key in got:
                got[key] = int(line.split()[1])
    return got["VmRSS"], got["RssAnon"], got["RssFile"], got["RssShmem"]


def _sample() -> None:
    while True:
        (r, *parts), p = _rss_kb(), phase[0]
        r //= 1024
        if p not in peaks:
            peaks[p] = 0
            order.append(p)
        if r > peaks[p]:
            peaks[p] = r
            at_peak[p] = tuple(x // 1024 for x in parts)
        time.sleep(0.002)


def _smaps() -> list[tuple[str, int]]:
    """The resident KiB of this process's mappings at the end of the run, by what is
    mapped (a file, ``[heap]``, anonymous memory), largest first."""
    by: dict[str, int] = {}
    name = ""
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and ":" not in head[0]:
                name = head[5] if len(head) > 5 else "[anon]"
            elif head and head[0] == "Rss:":
                by[name] = by.get(name, 0) + int(head[1])
    return sorted(by.items(), key=lambda kv: -kv[1])[:25]


def _mark(owner, name: str) -> None:
    f = getattr(owner, name)

    def marked(*a, **k):
        before = phase[0]
        phase[0] = name.lstrip("_")
        try:
            return f(*a, **k)
        finally:
            phase[0] = before + "+"

    setattr(owner, name, marked)


def _worker(spec: dict) -> None:
    from terascale._malloc import keep_freed_memory

    keep_freed_memory()  # as train() does, before this thread could take an arena of its own
    threading.Thread(target=_sample, daemon=True).start()
    from terascale import read_env
    from terascale.linear import _recipe, train
    from terascale.linear._online._firstpass import GrowingWeights

    for name in ("_space", "union_features", "average_weights", "_model"):
        _mark(_recipe, name)
    _mark(GrowingWeights, "in_union")
    opts = {"bits": spec["bits"], "cache_dir": spec["dir"], "cache": spec["cache"]}
    if spec["quadratic"]:
        opts["quadratic"] = [spec["quadratic"]]
    t = time.perf_counter()
    model = train([PATH], **opts)
    secs = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    env = read_env()
    rank = 0 if env is None else env.rank
    digest = hashlib.sha1(memoryview(model.indices))
    digest.update(memoryview(model.weights))
    with open(os.path.join(spec["dir"], f"phases.{rank}.json"), "w") as f:
        json.dump({"smaps": _smaps(), "seconds": secs, "peak": peak, "phases": [(p, peaks[p]) for p in order],
                   "parts": [(p, at_peak.get(p)) for p in order],
                   "features": len(model.indices), "model": digest.hexdigest()[:12]}, f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", help="a directory of this run's own (caches, results)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--recipe", choices=("text", "cache"), default="text")
    ap.add_argument("--quadratic", default="", help="e.g. ab (default none)")
    ap.add_argument("--bits", type=int, default=24)
    ap.add_argument("--smaps", action="store_true",
                    help="print each worker's largest resident mappings at the end")
    args = ap.parse_args()
    from terascale.launch import LaunchOptions, launch

    os.makedirs(args.dir, exist_ok=True)
    spec = {"bits": args.bits, "dir": args.dir, "cache": args.recipe == "cache",
            "quadratic": args.quadratic}

    def run() -> None:
        code = launch([sys.executable, __file__, "--worker", json.dumps(spec)],
                      LaunchOptions(nprocs=args.workers, timeout=3600, cpu_bind=False))
        if code:
            raise SystemExit(code)

    if args.recipe == "cache" and not os.path.exists(os.path.join(args.dir, "phases.0.json")):
        run()  # writes the caches
    run()
    for k in range(args.workers):
        with open(os.path.join(args.dir, f"phases.{k}.json")) as f:
            r = json.load(f)
        print(f"worker {k}: {r['seconds']:.2f} s, peak {r['peak']} MB, {r['features']} "
              f"features, model {r['model']}")
        print("  " + "  ".join(f"{p} {v}" for p, v in r["phases"]))
        print("  anon/file/shmem at each peak: " + "  ".join(
            f"{p} {'/'.join(map(str, v or ()))}" for p, v in r["parts"]))
        if args.smaps:
            print("  resident KiB by mapping at the end: " + ", ".join(
                f"{os.path.basename(n)} {kb}" for n, kb in r["smaps"]))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        _worker(json.loads(sys.argv[2]))
    else:
        main()
