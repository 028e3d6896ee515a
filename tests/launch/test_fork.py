"""Workers forked from the launcher (``LaunchOptions.fork``): real processes joining a real
job, their failures blamed on their rank, and what a forked worker does not inherit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

# the launcher: a script of its own that launches WORKER forked (the test's process is
# pytest's, with its threads: never forked)
LAUNCHER = """
import atexit, os, sys, threading
from terascale.launch import LaunchOptions, launch

out = sys.argv[1]
held = open(os.path.join(out, "held"), "w")  # a descriptor no worker may inherit
atexit.register(lambda: open(os.path.join(out, "launcher-exit"), "a").write(f"{{os.getpid()}}\\n"))
# the launcher's threads at each fork (a Popen without preexec_fn calls no hook)
os.register_at_fork(before=lambda: open(os.path.join(out, "forks"), "a").write(
    ",".join(t.name for t in threading.enumerate()) + "\\n"))
{setup}

def worker():
{body}

sys.exit(launch([sys.executable, "-c", "raise SystemExit(99)"],
                LaunchOptions(nprocs={n}, timeout={deadline}, fork=worker)))
"""


def _launch(tmp_path: Path, body: str, n: int = 2, timeout: float = 90, setup: str = "",
            deadline: float = 30) -> subprocess.CompletedProcess:
    script = tmp_path / "launcher.py"
    script.write_text(LAUNCHER.format(body=textwrap.indent(textwrap.dedent(body), "    "),
                                      n=n, setup=textwrap.dedent(setup), deadline=deadline))
    return subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                          text=True, timeout=timeout)


def test_forked_workers_join_and_reduce(tmp_path: Path) -> None:
    res = _launch(tmp_path, """
        import numpy as np, terascale
        with terascale.init() as comm:
            print("sum", int(comm.allreduce(np.array(comm.rank + 1))), "size", comm.size)
        return 0
    """, n=3)
    # (the command, which exits 99, never ran)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == [f"[{r}] sum 6 size 3" for r in range(3)]
    # each forked while the launcher ran no other thread (a lock one held then, such as
    # an import's, would stay held in the worker for good)
    assert (tmp_path / "forks").read_text().splitlines() == ["MainThread"] * 3


def test_a_launcher_with_another_thread_runs_the_command(tmp_path: Path) -> None:
    """A thread of the caller's may hold any lock at the fork: the workers are exec'd."""
    res = _launch(tmp_path, "return 0", setup="""
        import time
        threading.Thread(target=time.sleep, args=(60,), daemon=True, name="caller").start()
    """)
    assert res.returncode == 99, res.stderr  # the command's status: it ran, not worker()
    assert "failed first (exit status 99)" in res.stderr


def test_a_restart_forks_its_workers_again(tmp_path: Path) -> None:
    """The previous attempt's threads (its rendezvous server's, its watchers) have ended
    before the next attempt forks: its workers run the function, not the command."""
    script = tmp_path / "launcher.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        from terascale.launch import LaunchOptions, launch

        def worker():
            import terascale
            comm = terascale.init()
            if os.environ["TERASCALE_RESTART"] == "0" and comm.rank == 1:
                return 3
            comm.barrier()
            return 0

        sys.exit(launch([sys.executable, "-c", "raise SystemExit(99)"],
                        LaunchOptions(nprocs=2, timeout=30, max_restarts=1, fork=worker)))
    """))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=90)
    assert "restarting all 2 workers (restart 1 of 1)" in res.stderr
    assert res.returncode == 0, res.stderr


def test_a_forked_worker_that_never_joins_fails_the_job_at_the_deadline(tmp_path: Path
                                                                       ) -> None:
    res = _launch(tmp_path, """
        import terascale, time
        if os.environ["TERASCALE_RANK"] == "1":
            time.sleep(600)
        terascale.init()
        return 0
    """, deadline=3)
    assert res.returncode == 1, res.stderr
    assert "rank 0: 1 of 2 workers arrived within" in res.stderr
    assert "missing ranks [1]" in res.stderr


def test_a_worker_dying_at_start_fails_the_job_at_once(tmp_path: Path) -> None:
    # rank 1 dies before it joins; rank 0 waits in the rendezvous (30 s deadline)
    res = _launch(tmp_path, """
        import terascale
        if os.environ["TERASCALE_RANK"] == "1":
            os._exit(3)
        terascale.init()
        return 0
    """)
    assert res.returncode == 3, res.stderr
    assert "rank 1 failed first (exit status 3)" in res.stderr


def test_a_worker_killed_at_start_is_named(tmp_path: Path) -> None:
    start = time.monotonic()
    res = _launch(tmp_path, """
        import signal, terascale, time
        if os.environ["TERASCALE_RANK"] == "0":
            os.kill(os.getpid(), signal.SIGKILL)
        terascale.init()
        time.sleep(60)
        return 0
    """)
    assert res.returncode == 137, res.stderr
    assert "rank 0 failed first (exit status 137), killed by SIGKILL" in res.stderr
    assert time.monotonic() - start < 45  # nobody waited out the rendezvous or the sleep


def test_an_exception_is_reported_as_uncaught(tmp_path: Path) -> None:
    res = _launch(tmp_path, """
        import terascale
        comm = terascale.init()
        if comm.rank == 1:
            raise ValueError("bad shard")
        comm.barrier()
        return 0
    """)
    assert res.returncode == 1, res.stderr
    assert "rank 1: ValueError: bad shard" in res.stderr
    assert "Traceback" in res.stderr


def test_what_a_forked_worker_does_not_inherit(tmp_path: Path) -> None:
    res = _launch(tmp_path, """
        import atexit
        try:  # the launcher's open file
            os.fstat(held.fileno())
            print("inherited a descriptor")
        except OSError:
            pass
        rank = os.environ["TERASCALE_RANK"]
        # the worker's own exit handlers run; the launcher's do not
        atexit.register(lambda: open(os.path.join(out, "worker-exit"), "a").write(rank + "\\n"))
        print("stdout", rank)
        print("stderr", rank, file=sys.stderr)
        return 0
    """)
    assert res.returncode == 0, res.stderr
    assert "inherited" not in res.stdout
    assert sorted(res.stdout.splitlines()) == ["[0] stdout 0", "[1] stdout 1"]
    assert "[0] stderr 0" in res.stderr and "[1] stderr 1" in res.stderr
    assert len((tmp_path / "launcher-exit").read_text().split()) == 1
    assert sorted((tmp_path / "worker-exit").read_text().split()) == ["0", "1"]


def test_exec_is_used_without_fork(tmp_path: Path) -> None:
    """The command runs where no function is given (the fallback the option keeps)."""
    script = tmp_path / "launcher.py"
    script.write_text(textwrap.dedent("""
        import sys
        from terascale.launch import LaunchOptions, launch
        sys.exit(launch([sys.executable, "-c", "raise SystemExit(5)"], LaunchOptions(nprocs=2)))
    """))
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=90, env={**os.environ})
    assert res.returncode == 5, res.stderr
