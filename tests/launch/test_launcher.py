"""``terascale run`` end to end: exit codes, abort-all, output prefixes, restarts, env errors."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

RUN = [sys.executable, "-m", "terascale", "run"]


def _script(tmp_path: Path, body: str) -> str:
    p = tmp_path / "job.py"
    p.write_text(textwrap.dedent(body))
    return str(p)


def _run(args: list[str], timeout: float = 60, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(RUN + args, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def test_success_prefixes_output(tmp_path: Path) -> None:
    job = _script(tmp_path, """
        import numpy as np, terascale
        with terascale.init() as comm:
            print("sum", int(comm.allreduce(np.array(comm.rank + 1))), "size", comm.size)
    """)
    res = _run(["-n", "3", sys.executable, job])
    assert res.returncode == 0, res.stderr
    lines = sorted(res.stdout.splitlines())
    assert lines == [f"[{r}] sum 6 size 3" for r in range(3)]


def test_first_failure_stops_all_and_sets_exit_code(tmp_path: Path) -> None:
    job = _script(tmp_path, """
        import sys, time, terascale
        comm = terascale.init()
        if comm.rank == 2:
            raise SystemExit(7)
        time.sleep(60)
    """)
    start = time.monotonic()
    res = _run(["-n", "4", sys.executable, job])
    assert res.returncode == 7
    # Nobody waited for the 60 s sleepers. (Not tighter: 4 workers on 2 cores share one
    # session, hence one scheduling group, and start slowly on a loaded host.)
    assert time.monotonic() - start < 45
    assert "rank 2 failed first" in res.stderr


def test_traceback_shown_once_at_the_end(tmp_path: Path) -> None:
    job = _script(tmp_path, """
        import numpy as np, terascale
        comm = terascale.init()
        if comm.rank == 1:
            raise ValueError("bad things on rank one")
        comm.allreduce(np.ones(3))
    """)
    res = _run(["-n", "3", sys.executable, job])
    assert res.returncode == 1
    tail = res.stderr.split("failed first")[1]
    assert "ValueError: bad things on rank one" in tail
    assert "Traceback" in tail


def test_no_orphans_after_abort(tmp_path: Path) -> None:
    marker = tmp_path / "pids"
    job = _script(tmp_path, f"""
        import os, subprocess, sys, time, terascale
        comm = terascale.init()
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        with open({str(marker)!r}, "a") as f:
            f.write(f"{{os.getpid()}} {{child.pid}}\\n")
        comm.barrier()
        if comm.rank == 0:
            raise SystemExit(3)
        time.sleep(120)
    """)
    res = _run(["-n", "3", sys.executable, job])
    assert res.returncode == 3
    time.sleep(0.5)
    for line in marker.read_text().split("\n"):
        for pid in line.split():
            assert not Path(f"/proc/{pid}").exists() or \
                Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z", f"pid {pid} survived"


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_sigkill_of_the_launcher_leaves_no_worker(tmp_path: Path) -> None:
    marker = tmp_path / "pids"
    job = _script(tmp_path, f"""
        import os, subprocess, sys, time, terascale
        comm = terascale.init()
        comm.barrier()
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        with open({str(marker)!r}, "a") as f:
            f.write(f"{{os.getpid()}} {{child.pid}}\\n")
        time.sleep(120)
    """)
    launcher = subprocess.Popen(RUN + ["-n", "3", sys.executable, job],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            pids = [int(p) for p in marker.read_text().split()] if marker.exists() else []
            if len(pids) == 6:
                break
            time.sleep(0.1)
        assert len(pids) == 6, "the workers did not start"
        launcher.kill()  # SIGKILL: no handler of the launcher runs
        launcher.wait(10)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        survivors = [p for p in pids if _alive(p)]
        for p in survivors:
            os.kill(p, 9)
        assert not survivors, f"workers or their children {survivors} outlived the launcher"
    finally:
        if launcher.poll() is None:
            launcher.kill()


@pytest.mark.parametrize("n, algorithm", [(3, "tree"), (4, "ring")])
def test_launcher_blames_the_sigstopped_rank(tmp_path: Path, n: int, algorithm: str) -> None:
    # In a ring the first rank to give up is usually waiting on a healthy neighbour (which
    # waits on the stalled rank): the launcher must still name the stopped one.
    job = _script(tmp_path, f"""
        import os, signal, numpy as np, terascale
        comm = terascale.init()
        comm.barrier()
        if comm.rank == 1:
            os.kill(os.getpid(), signal.SIGSTOP)
        comm.allreduce(np.ones(100_000), algorithm={algorithm!r})
    """)
    res = _run(["-n", str(n), "--timeout", "3", sys.executable, job])
    assert res.returncode == 1, res.stderr
    summary = res.stderr[res.stderr.index("\nterascale run: "):]
    assert "rank 1 stalled (its process was stopped)" in summary, res.stderr
    assert "failed first" not in summary


def test_launcher_blames_a_rank_that_never_reaches_the_collective(tmp_path: Path) -> None:
    job = _script(tmp_path, """
        import time, numpy as np, terascale
        comm = terascale.init()
        comm.barrier()
        if comm.rank == 2:
            time.sleep(120)  # running, but never calls the allreduce
        comm.allreduce(np.ones(10))
    """)
    res = _run(["-n", "3", "--timeout", "3", sys.executable, job])
    assert res.returncode == 1, res.stderr
    assert "terascale run: rank 2 stalled" in res.stderr, res.stderr


def test_killed_worker_status(tmp_path: Path) -> None:
    job = _script(tmp_path, """
        import os, signal, terascale
        comm = terascale.init()
        if comm.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        comm.barrier()
    """)
    res = _run(["-n", "2", sys.executable, job])
    assert res.returncode == 128 + 9


def test_max_restarts_reruns_the_group(tmp_path: Path) -> None:
    job = _script(tmp_path, """
        import os, terascale
        comm = terascale.init()
        attempt = int(os.environ["TERASCALE_RESTART"])
        if attempt == 0 and comm.rank == 1:
            raise SystemExit(5)
        comm.barrier()
        print("done on attempt", attempt)
    """)
    res = _run(["-n", "2", "--max-restarts", "1", sys.executable, job])
    assert res.returncode == 0, res.stderr
    assert "restarting all 2 workers" in res.stderr
    assert res.stdout.count("done on attempt 1") == 2


@pytest.mark.parametrize("args, message", [
    (["-n", "0", "true"], "-n must be at least 1"),
    (["-n", "2"], "no command given"),
    (["-n", "2", "/no/such/program"], "command not found"),
    (["-n", "2", "--timeout", "-1", "true"], "--timeout must be positive"),
])
def test_bad_invocations_give_one_line_errors(args: list[str], message: str) -> None:
    res = _run(args)
    assert res.returncode == 2
    assert message in res.stderr
    assert "Traceback" not in res.stderr


def test_missing_rank_reported_by_rendezvous(tmp_path: Path) -> None:
    job = _script(tmp_path, """
        import os, terascale
        if os.environ["TERASCALE_RANK"] == "2":
            raise SystemExit(0)  # never joins
        terascale.init(timeout=2)
    """)
    res = _run(["-n", "3", sys.executable, job])
    assert res.returncode == 1
    assert "2 of 3 workers arrived" in res.stderr and "missing ranks [2]" in res.stderr


def test_carriage_returns_get_prefixes_so_progress_bars_redraw(tmp_path: Path) -> None:
    job = _script(tmp_path, """
        import sys
        for i in range(3):
            sys.stdout.write(f"progress {i}\\r")
            sys.stdout.flush()
        print("done")
        sys.stdout.write("no newline at the end")
    """)
    res = subprocess.run(RUN + ["-n", "1", sys.executable, job], capture_output=True, timeout=60)
    assert res.returncode == 0
    assert res.stdout == (b"[0] progress 0\r[0] progress 1\r[0] progress 2\r[0] done\n"
                          b"[0] no newline at the end")
