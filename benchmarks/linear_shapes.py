"""``terascale vw`` beside the real VW on data shapes and flags the wide bench does not
cover: wall seconds and peak RSS, median of three alternating runs, and each tool's
average loss.

    python benchmarks/linear_shapes.py DIR                  # every case
    python benchmarks/linear_shapes.py DIR dense oaa100     # the cases named
    python benchmarks/linear_shapes.py DIR --reps 5 dense   # five runs of each tool

Each data set is generated once into ``DIR`` (about 1 GB for every case, and the caches
of a run; delete it after). Each case first runs each tool once, untimed, on the first
lines of its data (numba's kernels compiled into their cache; for ``-t -i``, each tool's model is trained
here, untimed, on the whole set), then ``REPS`` times VW and ``terascale vw`` one after
the other, each ``nice``d in a fresh process under ``/usr/bin/time`` (wall seconds, peak
RSS, user and system CPU seconds). A cache (``-c``) is deleted before every run, so each
run writes and reads its own, as a user's first run does. Printed, one row a case: the
medians, the speed ratios (VW's wall and CPU seconds over ours; above 1 is faster than VW;
on a loaded machine the CPU ratio is the steadier one), the memory ratio (ours over VW's;
below 1 is less), and the ``average loss`` each tool printed (VW has one worker always).

The shapes: ``dense`` (500 numeric features of 500 names per line), ``text`` (20-60 words
of a 50k-word zipf vocabulary, 50k lines, for ``--ngram 2``), ``wide`` (two namespaces of
10 and 5 ids of 2M, and one of 3 of 30, for ``-q`` and ``--cubic``), ``oaa`` (10 and 100 classes on 20 wide ids),
``big`` (40 ids of 2^40 per line: ~7M distinct features, for ``-b 28`` and a big model's
``-t -i``), ``long`` (2000 features a line), ``short`` (1-3 features, 10M lines).
"""

from __future__ import annotations

import os
import re
import shlex
import statistics
import subprocess
import sys
import time

import numpy as np


def _w(ids: np.ndarray) -> np.ndarray:
    """The planted weight of ids: a fixed pseudo-random value in [-1, 1)."""
    h = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)
    return (h.astype(np.float64) / float(1 << 24)) * 2.0 - 1.0


def _label(rng: np.random.Generator, s: np.ndarray) -> np.ndarray:
    return np.where(rng.random(len(s)) < 1 / (1 + np.exp(-s)), 1, -1)


def _dense(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    x = np.round(rng.normal(0, 1, size=(n, 500)), 3)
    y = _label(rng, x @ _w(np.arange(500)) / 10)
    return [f"{y[i]} |n " + " ".join(f"f{j}:{v}" for j, v in enumerate(x[i]))
            for i in range(n)]


def _text(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    k = rng.integers(20, 61, n)
    ids = rng.zipf(1.2, size=(n, 60)) % 50_000
    out = []
    for i in range(n):
        w = ids[i, : k[i]]
        y = 1 if rng.random() < 1 / (1 + np.exp(-_w(w).sum() / 3)) else -1
        out.append(f"{y} |t " + " ".join(f"w{v}" for v in w))
    return out


def _wide(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    a = rng.zipf(1.3, size=(n, 10)) % 2_000_000
    b = rng.zipf(1.3, size=(n, 5)) % 2_000_000
    c = rng.integers(0, 30, size=(n, 3))
    y = _label(rng, _w(a).sum(1) / 3 + _w(a[:, 0] * 7 + b[:, 0]))
    return [f"{y[i]} |a " + " ".join(map(str, a[i])) + " |b " + " ".join(map(str, b[i]))
            + " |c " + " ".join(f"c{v}" for v in c[i]) for i in range(n)]


def _oaa(n: int, seed: int, k: int) -> list[str]:
    rng = np.random.default_rng(seed)
    ids = rng.zipf(1.3, size=(n, 20)) % 2_000_000
    cls = (np.abs(_w(ids[:, :3]).sum(1)) * k / 3).astype(int) % k + 1
    noise = rng.random(n) < 0.2
    cls[noise] = rng.integers(1, k + 1, noise.sum())
    return [f"{cls[i]} |a " + " ".join(map(str, ids[i, :10])) + " |b "
            + " ".join(map(str, ids[i, 10:])) for i in range(n)]


def _big(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 1 << 40, size=(n, 40))
    ids[:, :4] = rng.integers(0, 1000, size=(n, 4))
    y = _label(rng, _w(ids[:, :4]).sum(1))
    return [f"{y[i]} |a " + " ".join(f"{v:x}" for v in ids[i]) for i in range(n)]


def _long(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    ids = rng.zipf(1.1, size=(n, 2000)) % 1_000_000
    y = _label(rng, _w(ids).sum(1) / 20)
    return [f"{y[i]} " + " ".join(f"|{chr(97 + j)} " + " ".join(map(str, c))
                                  for j, c in enumerate(np.array_split(ids[i], 20)))
            for i in range(n)]


def _short(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    k = rng.integers(1, 4, n)
    ids = rng.integers(0, 5000, size=(n, 3))
    y = np.round(2.0 * _w(ids[:, 0]) + rng.normal(0, 0.5, n), 2)
    return [f"{y[i]} |x " + " ".join(map(str, ids[i, :k[i]])) for i in range(n)]


SHAPES = {  # name: (lines(n, seed), examples)
    "dense": (_dense, 50_000),
    "text": (_text, 50_000),
    "wide": (_wide, 1_000_000),
    "oaa": (lambda n, s: _oaa(n, s, 10), 500_000),
    "oaa100": (lambda n, s: _oaa(n, s, 100), 200_000),
    "big": (_big, 500_000),
    "long": (_long, 10_000),
    "short": (_short, 10_000_000),
}

LOG = "--loss_function logistic"

# name: (shape, flags both tools get, terascale's own flags, form)
# form: "text" (-d FILE), "cache" (the flags have -c; the cache deleted before each run),
# "test" (-t -i MODEL of a model each tool trained on the set with the case's flags)
CASES = {
    "dense": ("dense", f"-b 18 {LOG}", "", "text"),
    "ngram2": ("text", f"-b 24 --ngram 2 {LOG}", "", "text"),
    "q-wide": ("wide", f"-b 24 -q ab {LOG}", "", "text"),
    "cubic": ("wide", f"-b 24 --cubic abc {LOG}", "", "text"),
    "oaa10": ("oaa", "-b 22 --oaa 10", "", "text"),
    "oaa100": ("oaa100", "-b 22 --oaa 100", "", "text"),
    "passes5": ("wide", f"-b 24 {LOG} --passes 5 -c -k", "", "cache"),
    "b28": ("big", f"-b 28 {LOG}", "", "text"),
    "bfgs10": ("wide", f"-b 22 {LOG} --bfgs --passes 10 -c -k", "", "cache"),
    "test-big": ("big", f"-b 26 {LOG}", "", "test"),
    "long2000": ("long", f"-b 22 {LOG}", "", "text"),
    "short10m": ("short", "-b 18", "", "text"),
    "n2": ("wide", f"-b 24 {LOG}", "-n 2", "text"),
}


def data(root: str, shape: str) -> tuple[str, str]:
    """Write (once) and return the shape's file and a file of its first 2000 lines."""
    fn, n = SHAPES[shape]
    path = os.path.join(root, f"{shape}.vw")
    if not os.path.exists(path):
        with open(path + ".tmp", "w") as f:
            for a in range(0, n, 100_000):
                f.write("\n".join(fn(min(100_000, n - a), 1000 + a)) + "\n")
        os.replace(path + ".tmp", path)
    head = os.path.join(root, f"{shape}-head.vw")
    if not os.path.exists(head):
        with open(path) as f, open(head, "w") as g:
            for _, ln in zip(range(2000), f):
                g.write(ln)
    return path, head


def timed(cmd: list[str], cwd: str) -> tuple[float, float, int, str]:
    """``nice CMD`` under ``/usr/bin/time``: wall seconds, CPU seconds (user and system),
    peak RSS in MB, stderr."""
    r = subprocess.run(["/usr/bin/time", "-f", "@@ %e %U %S %M", "nice", *cmd], cwd=cwd,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, timeout=900)
    err = r.stderr.decode(errors="replace")
    if r.returncode:
        raise RuntimeError(f"{shlex.join(cmd)} exited {r.returncode}: {err[-2000:]}")
    wall, user, system, kb = err.rsplit("@@ ", 1)[1].split()
    return float(wall), float(user) + float(system), int(kb) // 1024, err


def _avg_loss(err: str) -> str:
    m = re.findall(r"^average loss = (\S+)", err, re.M)
    return m[-1] if m else "-"


def run_case(root: str, name: str, reps: int) -> dict:
    shape, flags, own, form = CASES[name]
    path, head = data(root, shape)
    work = os.path.join(root, "run-" + name)
    os.makedirs(work, exist_ok=True)
    tools = {"vw": [sys.executable, "-m", "vowpalwabbit"],
             "ts": [sys.executable, "-m", "terascale", "vw"]}
    cmds = {}
    for tool, base in tools.items():
        extra = own.split() if tool == "ts" else []
        if form == "test":
            timed([*base, *flags.split(), "-d", path, "-f", f"{tool}.model", "--quiet"], work)
            cmds[tool] = [*base, "-t", "-i", f"{tool}.model", "-d", path]
            timed([*cmds[tool][:-1], head], work)
        else:
            cmd = [*base, *flags.split(), *extra, "-d", path]
            if form == "cache":
                cmd += ["--cache_file", f"{tool}.cache"]
            cmds[tool] = cmd
            warm = [*base, *flags.split(), *extra, "-d", head]
            if form == "cache":
                warm += ["--cache_file", f"{tool}-warm.cache"]
            timed(warm, work)
    walls: dict = {"vw": [], "ts": []}
    cpus: dict = {"vw": [], "ts": []}
    rss: dict = {"vw": [], "ts": []}
    loss = {}
    load = os.getloadavg()[0]
    for _ in range(reps):
        for tool in ("vw", "ts"):
            if form == "cache":
                for c in (f"{tool}.cache", f"{tool}-warm.cache"):
                    if os.path.exists(os.path.join(work, c)):
                        os.remove(os.path.join(work, c))
            wall, cpu, mb, err = timed(cmds[tool], work)
            walls[tool].append(wall)
            cpus[tool].append(cpu)
            rss[tool].append(mb)
            loss[tool] = _avg_loss(err)
    for tool in ("vw", "ts"):
        c = os.path.join(work, f"{tool}.cache")
        if os.path.exists(c):
            os.remove(c)
    row = {"case": name, "cmd": shlex.join(cmds["ts"][3:]).replace(path, f"{shape}.vw"),
           "load": (load + os.getloadavg()[0]) / 2}
    for tool in ("vw", "ts"):
        row[f"{tool}_s"] = statistics.median(walls[tool])
        row[f"{tool}_cpu"] = statistics.median(cpus[tool])
        row[f"{tool}_mb"] = statistics.median(rss[tool])
        row[f"{tool}_loss"] = loss[tool]
    row["speed"] = row["vw_s"] / row["ts_s"]
    row["cpu"] = row["vw_cpu"] / row["ts_cpu"]
    row["mem"] = row["ts_mb"] / row["vw_mb"]
    return row


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="linear_shapes.py", description="terascale vw beside VW on data shapes the "
        "wide bench does not cover: wall, peak RSS, average loss, median of REPS")
    parser.add_argument("dir", help="where the data sets are generated (once) and run")
    parser.add_argument("cases", nargs="*", metavar="CASE",
                        help=f"the cases to run (default: all): {', '.join(CASES)}")
    parser.add_argument("--reps", type=int, default=3, help="timed runs of each tool")
    args = parser.parse_intermixed_args(argv)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; the cases: {', '.join(CASES)}")
    os.makedirs(args.dir, exist_ok=True)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, median of {args.reps}")
    print("| case | terascale vw command | VW s | ours s | speed vs VW | VW CPU s | "
          "ours CPU s | CPU vs VW | VW MB | ours MB | ours/VW MB | VW avg loss | "
          "our avg loss | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name in args.cases or list(CASES):
        try:
            r = run_case(args.dir, name, args.reps)
        except Exception as e:  # one case's failure is a row, not the end of the run
            print(f"| {name} | FAILED: {str(e)[-400:]!r} |", flush=True)
            continue
        print(f"| {name} | `{r['cmd']}` | {r['vw_s']:.2f} | {r['ts_s']:.2f} | "
              f"{r['speed']:.2f}x | {r['vw_cpu']:.2f} | {r['ts_cpu']:.2f} | "
              f"{r['cpu']:.2f}x | {r['vw_mb']:.0f} | {r['ts_mb']:.0f} | {r['mem']:.2f} | "
              f"{r['vw_loss']} | {r['ts_loss']} | {r['load']:.1f} |", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
