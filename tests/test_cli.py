"""The ``terascale`` command's start-up: a sub-command imports only its own area."""

from __future__ import annotations

import argparse
import gc
import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from terascale import cli

# imported by `terascale vw` before it parsed only the linear area's flags; never used by it
_NOT_FOR_VW = ("terascale.bench", "terascale.sim", "terascale.launch.launcher",
               "terascale.launch._cli", "terascale._demo", "terascale.testing",
               # numba's probes of optional packages its target runs at set-up, deferred
               # (linear._warm.defer_numba_probes): scipy's BLAS and cffi's C parser
               "scipy.linalg", "cffi.cparser", "pycparser")


def test_area_table_names_every_command_of_every_area():
    for area in cli._AREAS:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(area).add_parser(sub)
        assert {c for c, a in cli._AREA_OF.items() if a == area} == set(sub.choices), area
    full = cli.build_parser()._subparsers._group_actions[0].choices
    assert set(full) == set(cli._AREA_OF)


def test_one_line_vw_run_imports_only_the_linear_area(tmp_path: Path):
    data = tmp_path / "one.vw"
    data.write_text("1 |a x:2 y |b z\n")
    script = textwrap.dedent(f"""
        import gc, json, sys
        from terascale.cli import main
        sys.argv = ["terascale", "vw", "-b", "18", "-d", {str(data)!r}, "--quiet",
                    "-p", {str(tmp_path / "p.txt")!r}, "-f", {str(tmp_path / "m.vw")!r}]
        rc = main()
        with open({str(tmp_path / "mods.json")!r}, "w") as f:
            json.dump([rc, sorted(sys.modules), gc.get_threshold(),
                       os.environ.get("OPENBLAS_NUM_THREADS")], f)
    """).replace("import gc, json, sys", "import gc, json, os, sys")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120, env=env)
    rc, mods, thresholds, blas = json.loads((tmp_path / "mods.json").read_text())
    assert rc == 0
    assert tuple(thresholds) == cli._COMMAND_GC  # the command's process, its collector
    assert blas == "1"  # no BLAS threads started at numpy's import
    assert "terascale.linear._vw._vwonline" in mods  # it did learn: in the compiled core
    assert not [m for m in mods if m.startswith(("numba", "llvmlite"))]
    heavy = [m for m in mods if m.startswith(_NOT_FOR_VW)]
    assert heavy == [], heavy
    # what the run wrote is whole: the garbage was collected before the exit froze the rest
    assert (tmp_path / "p.txt").read_text() == "0\n"
    assert (tmp_path / "m.vw").stat().st_size > 0


def test_full_parser_still_serves_help_and_a_misspelled_command(capsys):
    before = gc.get_threshold()
    with pytest.raises(SystemExit):
        cli.main(["-v", "--help"])
    assert "simulate" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["simulat"])
    assert "did you mean 'simulate'" in capsys.readouterr().err
    assert gc.get_threshold() == before  # main(argv) from Python leaves the caller's collector
