"""Running one command line through the real VW and through ``terascale vw``, and reading
what they wrote (the differential tests of the VW drop-in)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys

import numpy as np
import pytest

# the other parametrizations of a test, run by make test-vw (CI runs one case of each)
FULL = pytest.mark.skipif(os.environ.get("TERASCALE_VW_SUITE") != "all",
                          reason="one case in CI; all with TERASCALE_VW_SUITE=all")


def more(*values):
    """A parametrization that only ``make test-vw`` (``TERASCALE_VW_SUITE=all``) runs."""
    return pytest.param(*values, marks=FULL)


def hex_id_lines(n: int, seed: int, *, ids: int, common: int, of: int,
                 above: int) -> list[str]:
    """Rows of ``ids`` hexadecimal ids of 2**40 (nearly every feature new), the first
    ``common`` of them drawn from ``of`` common ones instead; the label is 1 where those
    common ids' residues mod 3 sum to more than ``above``, else -1."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        row = rng.integers(0, 1 << 40, size=ids)
        row[:common] = rng.integers(0, of, size=common)
        y = 1 if (row[:common] % 3).sum() > above else -1
        out.append(f"{y} |a " + " ".join(f"{v:x}" for v in row))
    return out


def run_vw(args: list[str], cwd) -> str:
    """``python -m vowpalwabbit ARGS`` in ``cwd``; its stderr (the progress and closing block)."""
    r = subprocess.run([sys.executable, "-m", "vowpalwabbit", *args], cwd=cwd,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stderr


def outputs(args: list[str], cwd) -> tuple[tuple[str, str], tuple[str, str]]:
    """The standard outputs and the standard errors of ``python -m vowpalwabbit ARGS``
    and of ``python -m terascale vw ARGS``, each run as a program in ``cwd``:
    ``(VW's stdout, terascale's), (VW's stderr, terascale's)``."""
    runs = []
    for cmd in ([sys.executable, "-m", "vowpalwabbit"],
                [sys.executable, "-m", "terascale", "vw"]):
        r = subprocess.run([*cmd, *args], cwd=cwd, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        runs.append((r.stdout, r.stderr))
    return (runs[0][0], runs[1][0]), (runs[0][1], runs[1][1])


def stdouts(args: list[str], cwd) -> tuple[str, str]:
    """The standard output (``--audit``'s lines) of ``python -m vowpalwabbit ARGS`` and of
    ``python -m terascale vw ARGS``, each run as a program in ``cwd``."""
    return outputs(args, cwd)[0]


def run_ts(capfd, args: list[str], cwd, monkeypatch) -> tuple[int, str]:
    """``terascale vw ARGS`` in this process, in ``cwd``: its exit status and stderr."""
    from terascale.cli import main

    monkeypatch.chdir(cwd)
    capfd.readouterr()
    code = main(["vw", *args])
    _, err = capfd.readouterr()
    return code, err


def numbers(path) -> np.ndarray:
    """Every number in a predictions or model file, in order."""
    return np.array([float(v) for ln in path.read_text().splitlines()
                     for v in re.findall(r"(?<![\w'])[-+]?\d+\.?\d*(?:e[-+]?\d+)?", ln)])


def ab_lines(n: int, seed: int, label) -> list[str]:
    """``n`` rows of two namespaces (``a``: four of 40 words and a real ``x``; ``b``: two
    of 15 and ``z``), tagged, labelled by ``label(rng, a, x)``."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        a = rng.choice(40, size=4, replace=False)
        b = rng.choice(15, size=2, replace=False)
        x = rng.normal(size=2)
        y = label(rng, a, x)
        feats = " ".join(f"f{j}" for j in a)
        out.append(f"{y} 't{i}|a {feats} x:{x[0]:.4f} |b " + " ".join(f"g{j}" for j in b)
                   + f" z:{x[1]:.4f}")
    return out


def real_label(rng, a, x) -> str:
    """A real label of :func:`ab_lines`' rows: linear in ``a``'s words and ``x``, noisy."""
    return f"{0.3 * a.sum() / 40 + 0.5 * x[0] + 0.1 * rng.normal():.5f}"


def run_ok(cmd: list[str], cwd, env: dict | None = None) -> str:
    """Run ``cmd`` in ``cwd`` (``env`` over this process's environment); it must exit 0.
    Returns its standard error."""
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300,
                       env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stderr
    return r.stderr


def vw_in_one_process(runs: list[list[str]], cwd,
                      roots: tuple[str, ...] = ("numba", "llvmlite")) -> list[str]:
    """``terascale vw ARGS`` for each ARGS of ``runs``, in turn, in one fresh interpreter
    in ``cwd`` (each must exit 0); returns the modules under ``roots`` it imported (numba
    and llvmlite's by default), and the inputs ``_vwgen`` rewrote in Python (the
    features the compiled parser makes are not rewritten)."""
    code = ("import ast, runpy, sys\n"
            f"for line in ast.literal_eval({str(runs)!r}):\n"
            "    sys.argv = ['terascale', 'vw', *line]\n"
            "    try:\n        runpy.run_module('terascale', run_name='__main__')\n"
            "    except SystemExit as e:\n        assert not e.code, e.code\n"
            "gen = sys.modules.get('terascale.linear._vw._vwgen')\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            f"{tuple(roots)!r}) + sorted(gen.INPUTS.values() if gen else []))\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return ast.literal_eval(r.stdout.strip().splitlines()[-1])
