"""Held-out loss of the Terascale recipe on 1, 2 and 4 workers, from the command line.

Writes train and test files drawn from one planted model (``test_multi._held_out``:
one-hot namespaces and raw-scale numerics), then for each loss and worker count runs
``terascale linear train -d TRAIN -n N --loss L --bfgs 20`` (one online pass, then 20
L-BFGS passes) and ``terascale linear evaluate``, and prints the test loss and its ratio to
one worker's; with ``--online`` also the online pass alone (no batch phase), which is
where more workers cost accuracy.

    python tests/linear/_recipe_workers.py [--train 40000] [--test 10000] [--online]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from test_multi import _held_out  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--train", type=int, default=40_000, help="training examples")
    ap.add_argument("--test", type=int, default=10_000, help="held-out examples")
    ap.add_argument("--online", action="store_true", help="also the online pass alone")
    a = ap.parse_args()
    cmd = [sys.executable, "-m", "terascale", "linear"]
    with tempfile.TemporaryDirectory(prefix="terascale-recipe-") as d:
        print(f"{'loss':<9} {'run':<16} {'workers':>7} {'test loss':>10} {'/ 1 worker':>10}")
        for loss in ("logistic", "squared"):
            paths = {}
            for part, n, seed in (("train", a.train, 1), ("test", a.test, 2)):
                paths[part] = os.path.join(d, f"{loss}-{part}.vw")
                with open(paths[part], "w") as f:
                    f.write("\n".join(_held_out(n, seed, loss)) + "\n")
            metric = "logloss" if loss == "logistic" else "mse"
            runs = [("1 pass + 20 bfgs", ["--bfgs", "20"])]
            if a.online:
                runs.append(("1 online pass", []))
            for name, extra in runs:
                one = None
                for n in (1, 2, 4):
                    model = os.path.join(d, f"{loss}-{n}.model")
                    subprocess.run([*cmd, "train", "-d", paths["train"], "-n", str(n),
                                    "--loss", loss, *extra, "-f", model, "--quiet"],
                                   check=True, timeout=600)
                    r = subprocess.run([*cmd, "evaluate", "-i", model, "-d", paths["test"],
                                        "--json"], check=True, capture_output=True,
                                       text=True, timeout=600)
                    got = json.loads(r.stdout)[metric]
                    one = got if one is None else one
                    print(f"{loss:<9} {name:<16} {n:>7} {got:>10.6f} {got / one:>10.4f}",
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
