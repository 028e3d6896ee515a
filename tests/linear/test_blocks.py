"""Blocks' prefetch: numba's one-time set-up runs on the learner's thread, not the helper's."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def test_first_kernel_set_up_runs_on_the_learners_thread(tmp_path: Path):
    # a fresh process: numba's CPU target is set up once per process, by whichever thread
    # calls a kernel first (the prefetch thread runs at nice 19)
    data = tmp_path / "one.vw"
    data.write_text("1 |a x:2 y |b z\n-1 |a y |b w\n")
    script = textwrap.dedent(f"""
        import threading
        from numba.core import cpu
        from terascale.cli import main
        from terascale.linear._vw import _vwonline

        _vwonline.c_path = lambda args: "the numba pass"  # (not the compiled learner)
        load = cpu.CPUContext.load_additional_registries
        threads = []

        def record(self):
            threads.append(threading.current_thread().name)
            return load(self)

        cpu.CPUContext.load_additional_registries = record
        assert main(["vw", "-b", "18", "-d", {str(data)!r}, "--quiet"]) == 0
        print(threads[0])
    """)
    out = subprocess.run([sys.executable, "-c", script], check=True, timeout=120,
                         capture_output=True, text=True).stdout
    assert out.splitlines()[-1] == "MainThread"
