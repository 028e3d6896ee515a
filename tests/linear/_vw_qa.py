"""A VW user's pass over ``terascale vw``: shapes of data and command lines the
differential tests do not pin, each run through the real VW and through ``terascale vw``
side by side (``make test-vw``; a few minutes).

For each case: the progressive predictions (``-p``) and the closing block's average loss
equal VW's (1e-5), the progress table of every pass and the closing block are VW's line
for line, and the models move both ways (VW's ``-t`` with terascale's model, terascale's
``-t`` with VW's, both against VW's ``-t`` with its own); ``--readable_model`` and
``--invert_hash`` files are VW's byte for byte; a case on data ``A+B`` trains on A first
(``-f``), then runs with ``-i`` on B. Prints one row a case and exits 1 if any differs.

    python tests/linear/_vw_qa.py [--keep DIR] [CASE ...]
"""

from __future__ import annotations

import argparse
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile

import numpy as np


def write_data(d: str) -> None:
    """The data files (seeded): raw-scale dense values, many namespaces with scales and
    repeats, importance weights and tags, 0/1 and real labels, blank and label-only lines,
    tabs and trailing spaces, CRLF, bytes that are not UTF-8, a NUL inside a name, long
    lines, multiclass labels."""
    rng = np.random.default_rng(7)
    files: dict[str, list[bytes]] = {}

    def put(name: str, lines: list[str]) -> None:
        files[name] = [ln.encode() for ln in lines]

    put("dense_raw", [f"{1 if x[:3].sum() > 0 else -1} |f " + " ".join(
        f"d{j}:{v:.6g}" for j, v in enumerate(x))
        for x in (10 ** rng.uniform(-6, 6, (300, 6)) * rng.choice([-1, 1], (300, 6)))])
    many = []
    for _ in range(400):
        parts = []
        for ns in "abcdefghijklmnopqrstuvwxyzABCDEF"[:rng.integers(3, 21)]:
            feats = [f"{rng.choice(list('xyzwq'))}{rng.integers(6)}"
                     f"{rng.choice(['', ':0.5', ':-2', ':0', ':1e-3', ':3'])}"
                     for _ in range(rng.integers(0, 5))]
            if feats and rng.random() < 0.2:
                feats.append(feats[0])  # a repeated feature
            parts.append(ns + rng.choice(["", ":2.5", ":0.5", ":-1", ":0"]) + " "
                         + " ".join(feats))
        many.append(f"{rng.choice([-1, 1])} |" + " |".join(parts))
    put("many_ns", many)
    put("imp_tag", [f"{rng.choice(['-1', '1'])}{rng.choice(['', ' 2.0', ' 0.5', ' 0', ' 3'])}"
                    f"{rng.choice(['', f' {chr(39)}tag{i}', f' t{i}', chr(39) + 'q'])}"
                    f"|a x{rng.integers(21)} y{rng.integers(6)}:{rng.uniform(-1, 1):.3f} "
                    f"|b k{rng.integers(10)}" for i in range(300)])
    put("real", [f"{rng.normal(3, 10):.4f} |a x{rng.integers(21)}:{rng.uniform(0, 5):.3f} "
                 f"|b k{rng.integers(10)}" for _ in range(300)])
    odd = []
    for i in range(200):
        y = rng.choice([-1, 1])
        odd.append(["", f"{y} |a |b x{i % 7}", f"{y} |a\tx{i % 5}\ty{i % 3}  ",
                    f"{y} |nsé café{i % 4} 中{i % 3}", f"{y}", f"{y} |", f"{y} | anon{i % 4} b:2",
                    f"{y} |a x{i % 11} |b z{i % 6}"][rng.integers(8)])
    put("odd", odd)
    files["crlf"] = [f"{rng.choice([-1, 1])} |a x{i % 11} |b z{i % 6}\r".encode()
                     for i in range(200)]
    files["bytes"] = [f"{rng.choice([-1, 1])} 't{i % 5}\xff|a x{i % 11}".encode("latin-1")
                      + b" \xff\xfe%d |b z\x01%d" % (i % 3, i % 4) for i in range(200)]
    files["nul"] = [f"{rng.choice([-1, 1])} |a x{i % 11} ab\0cd{i % 3} |b z{i % 4}".encode()
                    for i in range(200)]
    put("long", [f"{rng.choice([-1, 1])} |a " + " ".join(
        f"f{j}:{v:.3f}" for j, v in zip(rng.integers(0, 100000, 3000), rng.uniform(-1, 1, 3000)))
        for _ in range(30)])
    put("labelonly", [str(rng.choice(["1", "-1", "1 |a x", "-1 |a y", "1 2 |a x", "1 2"]))
                      for _ in range(100)])
    put("multiclass", [f"{k} |a x{k * 3 + rng.integers(4)} y{rng.integers(10)} |b z{k}"
                       for k in rng.integers(1, 5, 400)])
    base = []
    for i in range(1000):
        a, b, c = rng.integers(31), rng.integers(11), rng.integers(6)
        z = (a % 3 == 0) + (b % 2) - 0.7 + rng.normal(0, 0.5) + 0.5 * (a * b % 5 == 0)
        base.append(f"{1 if z > 0 else -1} {rng.choice(['', '1.5 ', '0.5 '])}'e{i}|a x{a} "
                    f"v:{rng.uniform(-1, 1):.4f} |b y{b} |c w{c}:{rng.uniform(0, 3):.3f}")
    put("base", base)
    habits = []  # a second user's file: numbers written as C reads them (.5, 1e-3, +3,
    # 1E2, huge and negative values), namespace weights, empty namespaces, repeats in one
    # example, labels with weight and a zero base, tags with and without a space, UTF-8
    for i in range(300):
        y = rng.choice(["1", "-1"])
        label = rng.choice([y, f"{y} 2 0", f"{y} 0.5 0", f"{y} 1 0", f"{y} 1e-1"])
        tag = rng.choice(["", f" 'tag{i}", f"'t{i}"])
        v = rng.choice(["1e-3", ".5", "-7", "1e6", "-2.5e4", "1E2", "+3", "0.000001"])
        habits.append(f"{label}{tag}|a:{rng.choice(['2', '.5', '-1', '1e-2'])} x{i % 9}:{v} "
                      f"x{i % 9} y{i % 4}:-0.5 |b |c z{i % 5} z{i % 5}:2 |é ü{i % 3}:1.5")
    put("habits", habits)
    put("constonly", [str(rng.choice(["1 |", "-1 |a", f"1 |a x{i % 3}", "-1 |b ",
                                      f"1 0.5 |c :{i % 4} :2"])) for i in range(100)])
    put("sparse", [f"{rng.choice([-1, 1])} |w " + " ".join(
        f"f{j}:{v:.3f}" for j, v in zip(rng.integers(0, 10 ** 6, 20), rng.uniform(-1, 1, 20)))
        + f" |s t{rng.integers(50)}" for _ in range(400)])
    put("strings", [f"{rng.choice([-1, 1])} |u color:{rng.choice(['red', 'blue', 'Grün'])} "
                    f"age:{rng.integers(18, 80)} city:{rng.choice(['paris', 'São_Paulo', 'x1'])}"
                    f" |i cat:{rng.choice(['book', 'toy', 'a7'])} price:{rng.uniform(1, 50):.2f}"
                    for _ in range(300)])
    for name, lines in files.items():
        with open(os.path.join(d, f"{name}.vw"), "wb") as f:
            # (the habits file ends without a newline, as an editor may leave it)
            f.write(b"\n".join(lines) + (b"" if name == "habits" else b"\n"))
    half = len(files["habits"]) // 2  # (training continued in two steps)
    for name, part in (("habits_a", files["habits"][:half]), ("habits_b", files["habits"][half:])):
        with open(os.path.join(d, f"{name}.vw"), "wb") as f:
            f.write(b"\n".join(part) + b"\n")
    with open(os.path.join(d, "habits.vw"), "rb") as f, \
            open(os.path.join(d, "habits.gz"), "wb") as g:
        g.write(gzip.compress(f.read(), mtime=0))


CASES = [(f, [], f) for f in ("dense_raw", "many_ns", "imp_tag", "real", "odd", "crlf",
                              "bytes", "nul", "long", "labelonly")] + [
    ("logistic", ["--loss_function", "logistic"], "base"),
    ("hinge", ["--loss_function", "hinge"], "base"),
    ("quantile", ["--loss_function", "quantile", "--quantile_tau", "0.3"], "real"),
    ("rates", ["-l", "0.3", "--power_t", "0.3", "--initial_t", "2"], "base"),
    ("l1 l2", ["--l1", "1e-5", "--l2", "1e-5"], "base"),
    ("decay, passes", ["--passes", "3", "-c", "-k", "--decay_learning_rate", "0.7"], "base"),
    ("cache_file", ["--passes", "3", "--cache_file", "c.cache", "-k"], "base"),
    ("holdout_off", ["--passes", "3", "-c", "-k", "--holdout_off"], "imp_tag"),
    ("-q", ["-q", "ab", "-q", "bc"], "base"),
    ("cubic, interactions", ["--cubic", "abc", "--interactions", "ac"], "base"),
    ("ignore, keep", ["--keep", "a", "--keep", "b", "-q", "ab"], "base"),
    ("noconstant -b 10", ["--noconstant", "-b", "10", "-q", "ab"], "base"),
    ("-q ::", ["-q", "::", "--loss_function", "logistic"], "many_ns"),
    ("oaa", ["--oaa", "4"], "multiclass"),
    ("adaptive", ["--adaptive"], "base"),
    ("normalized invariant", ["--normalized", "--invariant"], "base"),
    ("bfgs", ["--bfgs", "--passes", "4", "-c", "-k", "--predict_only_model"], "base"),
    ("conjugate_gradient", ["--conjugate_gradient", "--passes", "4", "-c", "-k",
                            "--predict_only_model"], "many_ns"),
    ("link logistic", ["--link", "logistic", "--loss_function", "logistic"], "base"),
    ("min/max prediction", ["--min_prediction", "-2", "--max_prediction", "5"], "real"),
    ("-P 100", ["-P", "100"], "base"),
    ("-P 1.5", ["-P", "1.5", "--loss_function", "logistic"], "imp_tag"),
    ("predict_only_model", ["--predict_only_model", "-q", "ab"], "base"),
    # everyday command lines on the shapes above: other update rules, passes with holdout,
    # L1/L2 with passes, the schedule's flags together, one-against-all over passes
    ("sgd, weights", ["--sgd"], "imp_tag"),
    ("sgd passes", ["--sgd", "-l", "0.1", "--passes", "3", "-c", "-k"], "real"),
    ("adaptive invariant passes", ["--adaptive", "--invariant", "--passes", "2", "-c", "-k",
                                   "--holdout_period", "5"], "base"),
    ("normalized logistic", ["--normalized", "--loss_function", "logistic", "-l", "0.3"],
     "base"),
    ("l1 passes", ["--l1", "1e-4", "--passes", "3", "-c", "-k"], "base"),
    ("l2 logistic", ["--l2", "1e-4", "--loss_function", "logistic"], "base"),
    ("hinge l1", ["--loss_function", "hinge", "--l1", "1e-5", "-q", "ab"], "base"),
    ("schedule, decay", ["--power_t", "0.4", "--initial_t", "1", "-l", "0.8",
                         "--decay_learning_rate", "0.9", "--passes", "2", "-c", "-k"], "base"),
    ("holdout_after", ["--holdout_after", "700"], "base"),
    ("quantile passes", ["--loss_function", "quantile", "--quantile_tau", "0.7", "--passes",
                         "2", "-c", "-k", "--holdout_off"], "real"),
    ("oaa passes", ["--oaa", "4", "--passes", "3", "-c", "-k"], "multiclass"),
    ("oaa logistic", ["--oaa", "4", "--loss_function", "logistic"], "multiclass"),
    ("no best constant", ["--dont_output_best_constant", "--loss_function", "logistic"],
     "imp_tag"),
    ("cubic logistic passes", ["--cubic", "abc", "--loss_function", "logistic", "--passes",
                               "2", "-c", "-k"], "base"),
    # a second user's habits on their own files (habits: see write_data)
    ("habits", [], "habits"),
    ("constant only", [], "constonly"),
    ("gzip input", [], "habits.gz"),
    ("habits passes", ["--passes", "3", "-c", "-k", "--holdout_off"], "habits"),
    ("habits link logistic", ["--link", "logistic", "--loss_function", "logistic"], "habits"),
    ("hinge binary", ["--loss_function", "hinge", "--binary"], "habits"),
    ("habits -q ::", ["-q", "::"], "habits"),
    ("habits ignore", ["--ignore", "c", "--noconstant"], "habits"),
    ("-b 30 sparse", ["-b", "30"], "sparse"),
    ("l1 sparse", ["--l1", "1e-6"], "sparse"),
    ("invert_hash", ["-q", "ac", "--invert_hash", "ih"], "habits"),
    ("string values", ["-q", "ui", "--invert_hash", "ih"], "strings"),
    ("invert_hash predict_only", ["-q", "ac", "--invert_hash", "ih", "--predict_only_model"],
     "habits"),
    ("readable_model l1", ["--l1", "1e-5", "--readable_model", "rm"], "habits"),
    ("sort_features", ["--sort_features", "-q", "ab"], "habits"),
    ("hash all, string values", ["--hash", "all", "-q", "ui"], "strings"),
    ("bfgs -q", ["--bfgs", "--passes", "4", "-c", "-k", "--predict_only_model", "-q", "ab"],
     "base"),
    # A+B: trained on A (-f), then -i of that model on B (each tool its own model)
    ("two steps", ["--save_resume", "--readable_model", "rm"], "habits_a+habits_b"),
    ("two steps passes", ["--passes", "2", "-c", "-k"], "habits_a+habits_b"),
]


# VW options whose runs print no per-example progress table (VW's batch learner)
_NO_TABLE = {"--bfgs", "--conjugate_gradient"}


def _run(tool: str, args: list[str], cwd: str) -> subprocess.CompletedProcess[bytes]:
    cmd = ([sys.executable, "-m", "vowpalwabbit"] if tool == "vw"
           else [sys.executable, "-m", "terascale", "vw"])
    return subprocess.run([*cmd, *args], cwd=cwd, capture_output=True, timeout=600)


def _same_predictions(a: str, b: str) -> str:
    x = open(a, "rb").read().splitlines()
    y = open(b, "rb").read().splitlines()
    if len(x) != len(y):
        return f"{len(y)} lines, VW {len(x)}"
    for i, (u, v) in enumerate(zip(x, y), 1):
        su, sv = u.split(), v.split()
        if len(su) != len(sv) or su[1:] != sv[1:]:
            return f"line {i}: {v!r}, VW {u!r}"
        if su and abs(float(su[0]) - float(sv[0])) > 1e-5 * max(1.0, abs(float(su[0]))):
            return f"line {i}: {v!r}, VW {u!r}"
    return "ok"


def _table(err: bytes) -> list[bytes]:
    return [ln for ln in err.splitlines()  # (a holdout line ends with h)
            if re.match(rb"(\d|n\.a\.| unknown)", ln)
            and (len(ln.split()) == 7 or len(ln.split()) == 8 and ln.endswith(b" h"))]


def _closing(err: bytes) -> list[bytes]:
    at = err.find(b"finished run")
    return err[at:].splitlines() if at >= 0 else []


def _average(err: bytes) -> bytes:
    m = re.findall(rb"average loss = (.*)", err)
    return m[-1] if m else b"?"


def check(name: str, flags: list[str], data: str, root: str) -> dict[str, str]:
    """One case: what differs from VW (every value "ok" where nothing does)."""
    d = os.path.join(root, re.sub(r"\W+", "_", name))
    os.makedirs(os.path.join(d, "vw"))
    os.makedirs(os.path.join(d, "ts"))
    first, _, data = data.rpartition("+")
    path = os.path.join(root, data if "." in data else f"{data}.vw")
    args = ["-d", path, *flags, "-p", "p", "-f", "m"]
    if first:  # the first step, then -i of its model
        for tool in ("vw", "ts"):
            _run(tool, ["-d", os.path.join(root, f"{first}.vw"), *flags, "-f", "m0"],
                 os.path.join(d, tool))
        args += ["-i", "m0"]
    want, got = _run("vw", args, os.path.join(d, "vw")), _run("ts", args, os.path.join(d, "ts"))
    out: dict[str, str] = {}
    if got.returncode:
        return {"run": got.stderr.decode(errors="replace").strip().splitlines()[-1]}
    for flag in ("--readable_model", "--invert_hash"):  # their text, line for line
        if flag in flags:
            file = flags[flags.index(flag) + 1]
            texts = [open(os.path.join(d, t, file), "rb").read() for t in ("vw", "ts")]
            out[flag] = "ok" if texts[0] == texts[1] else "differs"
    out.update({"predictions": _same_predictions(os.path.join(d, "vw", "p"),
                                                 os.path.join(d, "ts", "p")),
                "average loss": "ok" if _average(want.stderr) == _average(got.stderr)
                else f"{_average(got.stderr)!r}, VW {_average(want.stderr)!r}"})
    mine, theirs = _table(got.stderr), _table(want.stderr)
    if not set(flags) & _NO_TABLE:
        out["progress"] = "ok" if mine and mine == theirs else "differs"
    out["closing block"] = ("ok" if _closing(got.stderr) == _closing(want.stderr)
                            else f"{_closing(got.stderr)!r}, VW {_closing(want.stderr)!r}")
    keep = ["--predict_only_model"] if "--predict_only_model" in flags else []
    test = ["-t", "-d", path, *keep]
    ref = _run("vw", ["-i", "vw/m", *test, "-p", "ref.p"], d)
    for who, model, tool in (("vw -i (terascale's model)", "ts/m", "vw"),
                             ("terascale -i (VW's model)", "vw/m", "ts")):
        r = _run(tool, ["-i", model, *test, "-p", f"{tool}.p"], d)
        out[who] = (_same_predictions(os.path.join(d, "ref.p"), os.path.join(d, f"{tool}.p"))
                    if r.returncode == 0 and ref.returncode == 0
                    else r.stderr.decode(errors="replace").strip()[-200:])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", nargs="*", help="case names (default: all)")
    ap.add_argument("--keep", metavar="DIR", help="run in DIR and keep the files there")
    a = ap.parse_args()
    root = a.keep or tempfile.mkdtemp(prefix="terascale-vw-qa-")
    os.makedirs(root, exist_ok=True)
    try:
        write_data(root)
        bad = 0
        for name, flags, data in CASES:
            if a.cases and name not in a.cases:
                continue
            res = check(name, flags, data, root)
            worse = {k: v for k, v in res.items() if v != "ok"}
            bad += bool(worse)
            print(f"{name:<22} {data:<11} {'ok' if not worse else worse}", flush=True)
        print(f"{bad} case(s) differ from VW")
        return 1 if bad else 0
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
