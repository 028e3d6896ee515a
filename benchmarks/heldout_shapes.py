"""VW-format data of shapes the wide bench does not have, and the real VW beside
``terascale vw`` on each, with the same flags, in the same run.

    python benchmarks/heldout_shapes.py DIR                 # every case
    python benchmarks/heldout_shapes.py DIR ns12 long-hinge # the cases named

Each data set is generated once into ``DIR`` (train and a held-out test set from another
seed of the same planted model). Each case runs ``python -m vowpalwabbit FLAGS -d train
-f vw.model -p vw.pred`` and ``terascale vw FLAGS -d train -f ts.model -p ts.pred`` in
fresh ``nice``d processes, one after the other (terascale's after an untimed run of the
same flags on the test set, which compiles its kernels into numba's cache), then each
tool predicts the test set with its own model (``-t -i``, untimed). Printed, one row a case: wall seconds and peak
RSS (``ru_maxrss`` from ``wait4``) of each tool, the speed ratio, the largest difference
between the two tools' progressive predictions (``-p``, one worker), and each tool's
test loss (the case's loss on the test set's labels and importance weights).

The shapes (``SHAPES``): many namespaces with short and long names, raw-scale numeric
values, importance weights and tags; long rows (500 features); very short rows (2-3
features, few distinct); 200k rows with ~20M distinct features (for ``-b 26``/``-b 28``);
two namespaces of very different widths (for ``-q``/``--cubic``); multiclass labels on
wide rows (``--oaa``; also 1M rows of 10 classes, and of 3).
"""

from __future__ import annotations

import gzip
import os
import shlex
import subprocess
import sys

import numpy as np

LONG_NAMES = ["a", "b", "c", "user_profile", "geo_location_region", "d", "Device",
              "e", "item_category_path", "f", "g", "publisher_site_domain"]


def _w(ids: np.ndarray) -> np.ndarray:
    """The planted weight of hashed ids: a fixed pseudo-random value in [-1, 1)."""
    h = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(40)
    return (h.astype(np.float64) / float(1 << 24)) * 2.0 - 1.0


def _lines_ns12(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    ids = rng.zipf(1.3, size=(n, len(LONG_NAMES), 3)) % 200_000
    cnt = rng.integers(1, 4, size=(n, len(LONG_NAMES)))
    price = np.round(rng.lognormal(12.0, 2.0, n), 1)     # raw scale, ~1e5-1e7
    age = rng.integers(0, 90, n)
    neg = np.round(rng.normal(0, 50, n), 3)
    imp = rng.choice([0.5, 1.0, 1.0, 2.0, 3.0], n)
    wt = _w(ids + (np.arange(len(LONG_NAMES)) * 1_000_003)[None, :, None])
    wt = np.where(np.arange(3)[None, None, :] < cnt[:, :, None], wt, 0.0).sum((1, 2))
    for i in range(n):
        parts = []
        s = float(wt[i])
        for j, ns in enumerate(LONG_NAMES):
            k = cnt[i, j]
            toks = [f"f{v}" for v in ids[i, j, :k]]
            if ns == "user_profile":
                toks.append(f"age:{age[i]}")
                s += 0.01 * age[i] - 0.4
            if ns == "item_category_path":
                toks.append(f"price:{price[i]}")
                s += 0.3 * np.log(price[i]) - 3.6
            if ns == "d":
                toks.append(f"delta:{neg[i]}")
                s += 0.004 * neg[i]
            parts.append(f"|{ns} " + " ".join(toks))
        y = 1 if rng.random() < 1 / (1 + np.exp(-s)) else -1
        out.append(f"{y} {imp[i]} 't{i} " + " ".join(parts))
    return out


def _lines_fixed(n: int, seed: int, k: int, vocab: int, zipf: float = 0.0,
                 unique: bool = False) -> list[str]:
    """Rows of ``k`` features in one namespace (a few namespaces for long rows)."""
    rng = np.random.default_rng(seed)
    if unique:   # a tenth of the row from 1000 common ids, the rest nearly all new
        ids = rng.integers(0, vocab, size=(n, k))
        ids[:, : k // 10] = rng.integers(0, 1000, size=(n, k // 10))
    elif zipf:
        ids = rng.zipf(zipf, size=(n, k)) % vocab
    else:
        ids = rng.integers(0, vocab, size=(n, k))
    s = _w(ids).sum(1) / np.sqrt(k) * 2
    if unique:
        s = _w(ids[:, : k // 10]).sum(1) / np.sqrt(k // 10) * 2
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-s)), 1, -1)
    nsl = max(1, k // 100)
    out = []
    for i in range(n):
        row = ids[i]
        chunks = np.array_split(row, nsl)
        body = " ".join(f"|{chr(97 + j)} " + " ".join(f"{v:x}" if unique else str(v) for v in c)
                        for j, c in enumerate(chunks))
        out.append(f"{y[i]} {body}")
    return out


def _lines_short(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    k = rng.integers(2, 4, n)
    ids = rng.integers(0, 1000, size=(n, 3))
    s = _w(ids).sum(1)
    y = np.round(2.0 * s + rng.normal(0, 0.5, n), 3)       # a real-valued target
    out = []
    for i in range(n):
        out.append(f"{y[i]} |x " + " ".join(str(v) for v in ids[i, :k[i]]))
    return out


def _lines_widths(n: int, seed: int) -> list[str]:
    """``u``: one id of 1M (wide); ``w``: 40 of 50 (narrow); ``x``: 2 of 20."""
    rng = np.random.default_rng(seed)
    u = rng.zipf(1.2, n) % 1_000_000
    w = rng.integers(0, 50, size=(n, 40))
    x = rng.integers(0, 20, size=(n, 2))
    s = _w(u) + 0.2 * _w(w + 7).sum(1) / 6 + _w(u * 50 + w[:, 0])
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-s)), 1, -1)
    return [f"{y[i]} |u {u[i]} |w " + " ".join(f"w{v}" for v in w[i])
            + " |x " + " ".join(f"x{v}" for v in x[i]) for i in range(n)]


def _lines_click(n: int, seed: int) -> list[str]:
    """15 ids of a heavy-tailed draw over 200k in ``a``, a numeric feature in ``b``: a
    narrow click log for ``-b 18`` (the table small beside the run's other memory)."""
    rng = np.random.default_rng(seed)
    ids = rng.zipf(1.3, size=(n, 15)) % 200_000
    x = rng.random(n)
    s = _w(ids).sum(1) / 2 + x - 0.5
    y = np.where(rng.random(n) < 1 / (1 + np.exp(-s)), 1, -1)
    return [f"{y[i]} |a " + " ".join(f"f{v}" for v in ids[i])
            + f" |b x{ids[i, 0] % 100}:{x[i]:.3f}" for i in range(n)]


def _lines_oaa(n: int, seed: int, k: int = 10) -> list[str]:
    rng = np.random.default_rng(seed)
    ids = rng.zipf(1.3, size=(n, 20)) % 2_000_000
    cls = (np.abs(_w(ids[:, :3]).sum(1)) * k / 3).astype(int) % k + 1
    noise = rng.random(n) < 0.2
    cls[noise] = rng.integers(1, k + 1, noise.sum())
    return [f"{cls[i]} |a " + " ".join(map(str, ids[i, :10])) + " |b "
            + " ".join(map(str, ids[i, 10:])) for i in range(n)]


SHAPES = {
    # name: (lines(n, seed), train examples, test examples)
    "ns12": (_lines_ns12, 200_000, 20_000),
    "one": (_lines_ns12, 1, 1),  # each tool's start-up and exit
    "long": (lambda n, s: _lines_fixed(n, s, 500, 2_000_000, zipf=1.1), 20_000, 2_000),
    "short": (_lines_short, 3_000_000, 100_000),
    # ids in hexadecimal, hashed as strings (VW places integer names at their value)
    "distinct": (lambda n, s: _lines_fixed(n, s, 100, 1 << 40, unique=True), 200_000,
                 10_000),
    "widths": (_lines_widths, 300_000, 30_000),
    "oaa": (_lines_oaa, 200_000, 20_000),
    "click": (_lines_click, 1_200_000, 20_000),
    # the same draw, 1M examples: 10 classes, and 3
    "oaa1m": (_lines_oaa, 1_000_000, 20_000),
    "oaa3-1m": (lambda n, s: _lines_oaa(n, s, 3), 1_000_000, 20_000),
}

BFGS = "-b 20 --loss_function logistic --bfgs --passes 10 -k --predict_only_model"

# name: (shape, flags both tools get, input form)
# input form: "text", "gz", "cache" (-c, timed on the second run), "cache_file", "stdin";
# a fourth item: flags terascale alone gets (its workers)
CASES = {
    "start-up": ("one", "-b 20", "text"),
    "ns12": ("ns12", "-b 20", "text"),
    "ns12-logistic": ("ns12", "-b 20 --loss_function logistic -l 0.7 --power_t 0.3 "
                      "--l1 1e-8 --l2 1e-7", "text"),
    "ns12-hash-all": ("ns12", "-b 22 --hash all --noconstant --loss_function logistic",
                      "text"),
    "ns12-ignore": ("ns12", "-b 20 --ignore a --ignore u --loss_function logistic", "text"),
    "ns12-keep": ("ns12", "-b 20 --keep ugi --loss_function logistic", "text"),
    "ns12-interactions": ("ns12", "-b 22 --interactions ugi --interactions dD "
                          "--loss_function logistic", "text"),
    "ns12-gz": ("ns12", "-b 20 --loss_function logistic", "gz"),
    "ns12-cache": ("ns12", "-b 20 --loss_function logistic", "cache"),
    "ns12-cache_file": ("ns12", "-b 20 --loss_function logistic", "cache_file"),
    "ns12-stdin": ("ns12", "-b 20 --loss_function logistic", "stdin"),
    "long": ("long", "-b 24", "text"),
    "long-hinge": ("long", "-b 24 --loss_function hinge", "text"),
    "long-logistic": ("long", "-b 24 --loss_function logistic", "text"),
    "short": ("short", "-b 18", "text"),
    "short-quantile": ("short", "-b 18 --loss_function quantile --quantile_tau 0.3", "text"),
    "short-cache": ("short", "-b 18", "cache"),
    "distinct-b26": ("distinct", "-b 26 --loss_function logistic", "text"),
    "distinct-b28": ("distinct", "-b 28 --loss_function logistic", "text"),
    "widths-q": ("widths", "-b 24 -q uw --loss_function logistic", "text"),
    "widths-cubic": ("widths", "-b 24 --cubic uwx --loss_function logistic", "text"),
    "oaa": ("oaa", "-b 22 --oaa 10", "text"),
    "oaa-b18": ("oaa", "-b 18 --oaa 7", "text"),
    "oaa-b18-passes": ("oaa", "-b 18 --oaa 10 --passes 3", "cache"),
    "click-b18": ("click", "-b 18 --loss_function logistic", "text"),
    "click-b18-q": ("click", "-b 18 -q aa --loss_function logistic", "text"),
    "click-b18-binary": ("click", "-b 18 --binary --loss_function logistic", "text"),
    "click-b18-passes": ("click", "-b 18 --passes 3 -c --loss_function logistic", "text"),
    "click-b18-invert": ("click", "-b 18 --loss_function logistic --readable_model rm.txt "
                         "--invert_hash ih.txt", "text"),
    "oaa-1m": ("oaa1m", "-b 22 --oaa 10", "text"),
    "oaa3-1m": ("oaa3-1m", "-b 22 --oaa 3", "text"),
    "ns12-bfgs": ("ns12", BFGS, "cache"),
    # terascale with two workers (VW with one; -p needs one worker)
    "ns12-bfgs-2w": ("ns12", BFGS, "cache", "-n 2"),
    "ns12-2w": ("ns12", "-b 20 --loss_function logistic", "text", "-n 2"),
    "short-2w": ("short", "-b 18", "text", "-n 2"),
    "click-b18-2w": ("click", "-b 18 --loss_function logistic", "text", "-n 2"),
    "distinct-b24": ("distinct", "-b 24 --loss_function logistic", "text"),
    "distinct-b24-cache": ("distinct", "-b 24 --loss_function logistic", "cache"),
    "distinct-b24-2w": ("distinct", "-b 24 --loss_function logistic", "text", "-n 2"),
}


def data(root: str, shape: str) -> tuple[str, str]:
    """Write (once) and return the shape's train and test files."""
    fn, n, nt = SHAPES[shape]
    paths = []
    for part, count, seed in (("train", n, 1), ("test", nt, 2)):
        p = os.path.join(root, f"{shape}-{part}.vw")
        if not os.path.exists(p):
            tmp = p + ".tmp"
            with open(tmp, "w") as f:
                for a in range(0, count, 50_000):
                    f.write("\n".join(fn(min(50_000, count - a), seed * 1000 + a)) + "\n")
            os.replace(tmp, p)
        paths.append(p)
    gz = paths[0] + ".gz"
    if not os.path.exists(gz) and shape == "ns12":
        with open(paths[0], "rb") as f, gzip.open(gz + ".tmp", "wb", compresslevel=3) as g:
            g.write(f.read())
        os.replace(gz + ".tmp", gz)
    return paths[0], paths[1]


def timed(cmd: list[str], cwd: str, stdin: str | None = None) -> tuple[float, int, str]:
    """Run ``nice CMD`` under ``/usr/bin/time``: wall seconds, peak RSS in MB, stderr.

    ``/usr/bin/time`` reports the command's own peak: a child forked straight from this
    process would start from this process's high-water mark (Linux keeps it across exec).
    """
    fin = open(stdin, "rb") if stdin else subprocess.DEVNULL
    try:
        r = subprocess.run(["/usr/bin/time", "-f", "@@ %e %M", "nice", *cmd], cwd=cwd,
                           stdin=fin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           timeout=600)
    finally:
        if stdin:
            fin.close()
    err = r.stderr.decode(errors="replace")
    if r.returncode:
        raise RuntimeError(f"{shlex.join(cmd)} exited {r.returncode}: {err[-2000:]}")
    wall, kb = err.rsplit("@@ ", 1)[1].split()
    return float(wall), int(kb) // 1024, err


def _loss(kind: str, flags: str, y: np.ndarray, imp: np.ndarray, p: np.ndarray) -> float:
    if "--oaa" in flags:
        return float(np.average(p != y, weights=imp))
    if kind == "logistic":
        return float(np.average(np.logaddexp(0, -y * p), weights=imp))
    if kind == "hinge":
        return float(np.average(np.maximum(0, 1 - y * p), weights=imp))
    if kind == "quantile":
        tau = float(flags.split("--quantile_tau")[1].split()[0])
        r = y - p
        return float(np.average(np.where(r > 0, tau * r, (tau - 1) * r), weights=imp))
    return float(np.average((y - p) ** 2, weights=imp))


def _labels(test: str) -> tuple[np.ndarray, np.ndarray]:
    y, imp = [], []
    with open(test) as f:
        for ln in f:
            head = ln.split("|", 1)[0].split()
            y.append(float(head[0]))
            imp.append(float(head[1]) if len(head) > 1 and not head[1].startswith("'")
                       else 1.0)
    return np.array(y), np.array(imp)


def _preds(path: str) -> np.ndarray:
    with open(path) as f:
        return np.array([float(ln.split()[0]) for ln in f if ln.strip()])


def run_case(root: str, name: str) -> dict:
    shape, flags, form, *extra = CASES[name]
    workers = extra[0].split() if extra else []
    train, test = data(root, shape)
    work = os.path.join(root, "run-" + name)
    os.makedirs(work, exist_ok=True)
    tools = {"vw": [sys.executable, "-m", "vowpalwabbit"],
             "ts": [sys.executable, "-m", "terascale", "vw"]}
    row: dict = {"case": name, "flags": flags, "form": form}
    kind = flags.split("--loss_function ")[1].split()[0] if "--loss_function" in flags \
        else "squared"
    y, imp = _labels(test)
    for tool, base in tools.items():
        cmd = [*base, *flags.split(), "-f", f"{tool}.model"]
        if tool == "ts" and workers:
            cmd += workers
        else:
            cmd += ["-p", f"{tool}.pred"]
        stdin = None
        if form == "gz":
            cmd += ["-d", train + ".gz"]
        elif form == "stdin":
            cmd += ["-d", "/dev/stdin"] if tool == "vw" else ["-d", "-"]
            stdin = train
        else:
            cmd += ["-d", train]
        if form == "cache":
            cmd += ["-c"]
        if form == "cache_file":
            cmd += ["--cache_file", f"{tool}.cache"]
        if tool == "ts":  # numba's kernels compiled (and cached) before the timing
            warm = [*cmd[:cmd.index("-f")], "-d", test, "--quiet"]
            if form in ("cache", "cache_file") or "--passes" in flags:
                warm += ["--cache_file", "warm.cache"]
            if os.path.exists(os.path.join(work, "warm.cache")):
                os.remove(os.path.join(work, "warm.cache"))
            for _ in range(2 if form in ("cache", "cache_file") else 1):
                timed(warm, work)
        if form in ("cache", "cache_file"):
            for stale in (train + ".cache", os.path.join(work, f"{tool}.cache")):
                if os.path.exists(stale):
                    os.remove(stale)
            timed(cmd, work)   # writes the cache, untimed
        wall, rss, _ = timed(cmd, work, stdin)
        row[f"{tool}_s"], row[f"{tool}_mb"] = wall, rss
        keep = ["--predict_only_model"] if "--predict_only_model" in flags else []
        timed([*base, "-t", "-i", f"{tool}.model", "-d", test, "-p", f"{tool}.test",
               "--quiet", *keep], work)
        p = _preds(os.path.join(work, f"{tool}.test"))
        if kind == "logistic" and "--link" not in flags:
            pass   # raw scores, as the loss wants
        row[f"{tool}_loss"] = _loss(kind, flags, y, imp, p)
    row["pred_diff"] = float("nan")
    if not workers:
        a, b = (_preds(os.path.join(work, f"{t}.pred")) for t in ("vw", "ts"))
        row["pred_diff"] = float(np.max(np.abs(a - b))) if len(a) == len(b) else float("nan")
    row["flags"] += (" (terascale " + " ".join(workers) + ")") if workers else ""
    row["speed"] = row["vw_s"] / row["ts_s"]
    return row


def main(argv: list[str]) -> None:
    import argparse

    parser = argparse.ArgumentParser(
        prog="heldout_shapes.py", description="VW-format data of held-out shapes; the real "
        "VW beside terascale vw on each, same flags, same run")
    parser.add_argument("dir", help="where the data sets are generated (once) and run")
    parser.add_argument("cases", nargs="*", metavar="CASE",
                        help=f"the cases to run (default: all): {', '.join(CASES)}")
    args = parser.parse_args(argv)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}; the cases: {', '.join(CASES)}")
    root, names = args.dir, args.cases or list(CASES)
    os.makedirs(root, exist_ok=True)
    print("| case | flags | input | VW s | terascale s | speed vs VW | VW MB | "
          "terascale MB | max pred diff | VW test loss | terascale test loss |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in names:
        try:
            r = run_case(root, name)
        except Exception as e:  # one case's failure is a row, not the end of the run
            print(f"| {name} | {CASES[name][1]} | {CASES[name][2]} | FAILED: "
                  f"{str(e)[-300:]!r} |", flush=True)
            continue
        print(f"| {name} | `{r['flags']}` | {r['form']} | {r['vw_s']:.2f} | "
              f"{r['ts_s']:.2f} | {r['speed']:.2f} | {r['vw_mb']} | {r['ts_mb']} | "
              f"{r['pred_diff']:.2g} | {r['vw_loss']:.5f} | {r['ts_loss']:.5f} |",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
