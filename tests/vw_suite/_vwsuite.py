"""Vowpal Wabbit's own conformance tests, run live through VW and through terascale.

``core.vwtest.json`` holds the tests of VW's ``test/core.vwtest.json`` whose options are a
plain linear learner's (no reduction other than ``--oaa``, no other input format), with
their input files under ``data/`` (the larger ones gzipped; VW's BSD-3 notice: ``LICENSE``).
Each test's command runs twice in its own working copy of ``data/``: through the pip
``vowpalwabbit`` (``python -m vowpalwabbit ARGS``) and through terascale (``terascale vw
ARGS`` by default; ``--front linear`` measures ``terascale linear train ARGS``). A test
reproduces VW when both exit 0, every prediction file it writes (``-p``, ``-r``) has the same
lines with every number within 1e-3, and the ``average loss`` of the closing block agrees
to 1e-3. A test whose ``depends_on`` test failed for a front is ``blocked`` there.

Run all of them and print the table::

    python tests/vw_suite/_vwsuite.py            # or: make test-vw
    python tests/vw_suite/_vwsuite.py --ids 3,4,9 --front linear --json out.json
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
TESTS = HERE / "core.vwtest.json"
DATA = HERE / "data"
TOL = 1e-3
TIMEOUT = 300.0

# flags whose value is a file the command writes
OUTPUTS = ("-f", "--final_regressor", "-p", "--predictions", "-r", "--raw_predictions",
           "--readable_model", "--invert_hash", "--cache_file")
PREDICTIONS = ("-p", "--predictions", "-r", "--raw_predictions")
FRONTS = {"vw": ["vw"], "linear": ["linear", "train"]}
_NUM = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:inf|nan)", re.I)
_AVG = re.compile(r"^average loss = (\S+)", re.M)


@dataclass
class Outcome:
    id: int
    status: str  # pass | differs | refused | blocked | vw-fails
    detail: str = ""
    seconds: float = 0.0


def load_tests() -> list[dict]:
    return json.loads(TESTS.read_text())


def closure(tests: list[dict], ids: set[int]) -> list[dict]:
    """``ids`` and every test they depend on, in the suite's order."""
    by_id = {t["id"]: t for t in tests}
    want: set[int] = set()
    todo = list(ids)
    while todo:
        i = todo.pop()
        if i in want:
            continue
        want.add(i)
        todo.extend(by_id[i].get("depends_on", []))
    return [t for t in tests if t["id"] in want]


def workdir(prefix: str) -> Path:
    """A copy of ``data/`` (gzipped files unpacked) where the commands run."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    for src in DATA.rglob("*"):
        if src.is_dir():
            continue
        rel = src.relative_to(DATA)
        dst = root / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.suffix == ".gz":
            with gzip.open(src, "rb") as f:
                dst.with_suffix("").write_bytes(f.read())
        else:
            shutil.copyfile(src, dst)
    (root / "models").mkdir(exist_ok=True)
    return root


def _values(args: list[str], flags: tuple[str, ...]) -> list[str]:
    out = []
    for i, a in enumerate(args):
        if a in flags and i + 1 < len(args):
            out.append(args[i + 1])
        else:
            for f in flags:
                if f.startswith("--") and a.startswith(f + "="):
                    out.append(a.split("=", 1)[1])
    return out


@dataclass
class Run:
    rc: int
    stderr: str
    files: dict[str, str | None]
    seconds: float


def run_one(cmd: list[str], args: list[str], cwd: Path) -> Run:
    for path in _values(args, OUTPUTS):
        (cwd / path).parent.mkdir(parents=True, exist_ok=True)
    preds = _values(args, PREDICTIONS)
    for p in preds:  # a stale file from an earlier test must not pass for this one's
        if (cwd / p).exists():
            (cwd / p).unlink()
    env = dict(os.environ, PYTHONHASHSEED="0")
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd + args, cwd=cwd, capture_output=True, text=True,
                           timeout=TIMEOUT, env=env, stdin=subprocess.DEVNULL)
        rc, err = r.returncode, r.stderr + r.stdout
    except subprocess.TimeoutExpired:
        rc, err = 124, f"timed out after {TIMEOUT:.0f} s"
    files = {p: (cwd / p).read_text(errors="replace") if (cwd / p).exists() else None
             for p in preds}
    return Run(rc, err, files, time.perf_counter() - t0)


# runs several command lines of one module in turn in one interpreter (``run_many``): each
# run's stdout and stderr (the C++ or C ones too) go to a log of its own, and the prediction
# files it writes are read before the next run can overwrite them
_MANY = r"""
import ctypes, json, os, runpy, sys, tempfile, time, traceback
job = json.load(open(sys.argv[1]))
libc = ctypes.CDLL(None)
saved = os.dup(1), os.dup(2)
out = []
for args, preds in job["runs"]:
    for p in preds:
        if os.path.exists(p):
            os.unlink(p)
    log = tempfile.TemporaryFile()
    sys.stdout.flush(); sys.stderr.flush()
    os.dup2(log.fileno(), 1); os.dup2(log.fileno(), 2)
    sys.argv = [job["module"], *args]
    t0 = time.perf_counter()
    try:
        runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
        rc = 0
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else int(e.code is not None)
    except Exception:
        traceback.print_exc()
        rc = 1
    sys.stdout.flush(); sys.stderr.flush(); libc.fflush(None)
    os.dup2(saved[0], 1); os.dup2(saved[1], 2)
    log.seek(0)
    files = {p: open(p, errors="replace").read() if os.path.exists(p) else None for p in preds}
    out.append([rc, log.read().decode(errors="replace"), files, time.perf_counter() - t0])
print(json.dumps(out))
"""


def run_many(module: str, runs: list[list[str]], cwd: Path) -> list[Run]:
    """``python -m module ARGS`` for each ARGS of ``runs``, in turn, in one fresh
    interpreter in ``cwd``: what ``run_one`` gives for each, without an interpreter's
    start-up per run (a run that hangs times the whole batch out)."""
    for args in runs:
        for path in _values(args, OUTPUTS):
            (cwd / path).parent.mkdir(parents=True, exist_ok=True)
    job = cwd / ".runs.json"
    job.write_text(json.dumps({"module": module,
                               "runs": [[a, _values(a, PREDICTIONS)] for a in runs]}))
    env = dict(os.environ, PYTHONHASHSEED="0")
    try:
        r = subprocess.run([sys.executable, "-c", _MANY, str(job)], cwd=cwd,
                           capture_output=True, text=True, timeout=TIMEOUT * 2,
                           env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return [Run(124, f"timed out after {TIMEOUT * 2:.0f} s", {}, 0.0) for _ in runs]
    if r.returncode != 0:
        return [Run(r.returncode, r.stderr + r.stdout, {}, 0.0) for _ in runs]
    return [Run(*o) for o in json.loads(r.stdout.strip().splitlines()[-1])]


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= TOL * max(1.0, abs(a), abs(b))


def compare_predictions(ref: str, got: str) -> str:
    """'' when every line has the same numbers within TOL, else what differs first."""
    a, b = ref.splitlines(), got.splitlines()
    if len(a) != len(b):
        return f"{len(b)} prediction lines, VW wrote {len(a)}"
    worst, where = 0.0, ""
    for n, (x, y) in enumerate(zip(a, b), 1):
        xs, ys = [float(v) for v in _NUM.findall(x)], [float(v) for v in _NUM.findall(y)]
        if len(xs) != len(ys):
            return f"line {n}: {y!r}, VW {x!r}"
        for u, v in zip(xs, ys):
            if not _close(u, v):
                d = abs(u - v) if not (math.isnan(u) or math.isnan(v)) else math.inf
                if d > worst:
                    worst, where = d, f"line {n}: {y.strip()!r}, VW {x.strip()!r}"
    return f"max difference {worst:.4g} ({where})" if where else ""


def average_loss(stderr: str) -> str | None:
    m = _AVG.findall(stderr)
    return m[-1] if m else None


def compare(ref: Run, got: Run) -> str:
    for path, text in ref.files.items():
        mine = got.files.get(path)
        if text is None:
            continue
        if mine is None:
            return f"{path}: not written"
        why = compare_predictions(text, mine)
        if why:
            return f"{path}: {why}"
    a, b = average_loss(ref.stderr), average_loss(got.stderr)
    if a is not None:
        if b is None:
            return "no 'average loss = ...' line"
        try:
            same = _close(float(a), float(b))
        except ValueError:
            same = a == b
        if not same:
            return f"average loss {b}, VW {a}"
    return ""


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else ""


def run_suite(ids: set[int] | None = None, front: str = "vw", echo: bool = False,
              one_process: bool = False) -> list[Outcome]:
    """Run the tests ``ids`` (all when None; their dependencies too) through VW and
    through terascale's ``front``; one Outcome per test asked for. Each command runs in
    an interpreter of its own, or with ``one_process`` all VW's in one and all
    terascale's in another (in the suite's order, so each reads what earlier ones wrote)."""
    tests = load_tests()
    chosen = closure(tests, ids if ids is not None else {t["id"] for t in tests})
    ref_dir, our_dir = workdir("vwsuite-vw-"), workdir("vwsuite-ts-")
    vw_cmd = [sys.executable, "-m", "vowpalwabbit"]
    ts_cmd = [sys.executable, "-m", "terascale", *FRONTS[front]]
    failed: dict[int, str] = {}
    outcomes = []
    try:
        if one_process:
            argv = [shlex.split(t["vw_command"]) for t in chosen]
            refs = iter(run_many("vowpalwabbit", argv, ref_dir))
            ours = iter(run_many("terascale", [FRONTS[front] + a for a in argv], our_dir))
        for t in chosen:
            args = shlex.split(t["vw_command"])
            ref = next(refs) if one_process else run_one(vw_cmd, args, ref_dir)
            mine = next(ours) if one_process else None
            if ref.rc != 0:
                o = Outcome(t["id"], "vw-fails", _last_line(ref.stderr), ref.seconds)
            elif any(d in failed for d in t.get("depends_on", [])):
                o = Outcome(t["id"], "blocked", "depends on test(s) " + ", ".join(
                    str(d) for d in t.get("depends_on", []) if d in failed))
            else:
                got = mine or run_one(ts_cmd, args, our_dir)
                if got.rc != 0:
                    o = Outcome(t["id"], "refused", _last_line(got.stderr), got.seconds)
                else:
                    why = compare(ref, got)
                    o = Outcome(t["id"], "differs" if why else "pass", why, got.seconds)
            if o.status != "pass":
                failed[t["id"]] = o.status
            if ids is None or t["id"] in ids:
                outcomes.append(o)
                if echo:
                    print(f"{o.id:>4} {o.status:<8} {o.seconds:6.1f}s  {o.detail}",
                          flush=True)
    finally:
        shutil.rmtree(ref_dir, ignore_errors=True)
        shutil.rmtree(our_dir, ignore_errors=True)
    return outcomes


def summary(outcomes: list[Outcome]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for o in outcomes:
        counts[o.status] = counts.get(o.status, 0) + 1
    return counts


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ids", default="", help="comma-separated test ids (default: all)")
    p.add_argument("--front", choices=sorted(FRONTS), default="vw")
    p.add_argument("--json", default=None, help="also write the outcomes here")
    a = p.parse_args(argv)
    ids = {int(i) for i in a.ids.split(",") if i} or None
    outcomes = run_suite(ids, a.front, echo=True)
    counts = summary(outcomes)
    in_scope = len(outcomes) - counts.get("vw-fails", 0)
    print(f"\n{counts.get('pass', 0)} of {in_scope} tests that VW passes reproduce VW "
          f"(terascale {' '.join(FRONTS[a.front])}); "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if a.json:
        Path(a.json).write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
