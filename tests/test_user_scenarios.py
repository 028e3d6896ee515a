"""What users try that the other suites did not: odd inputs, threads, odd world sizes, pipes.

Each test is a regression test for a bug found by using the collective core as a user
would (the comment above each says what went wrong before the fix).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import terascale
from terascale.testing import run_workers


def _outcome(f: Any) -> Any:
    try:
        return ("ok", f())
    except Exception as e:  # the error type and message travel back to the test
        return (type(e).__name__, str(e))


def test_broadcast_writes_into_every_writable_input_and_replaces_lists() -> None:
    # Before: a list or scalar came back unchanged on non-root ranks (the copy was dropped),
    # and strided or Fortran-order arrays were silently left unchanged (no in-place write).
    def fn(comm: Any) -> Any:
        r = comm.rank
        base = np.arange(10.0) + r
        view = base[::-2]
        fort = np.asfortranarray(np.arange(6.0).reshape(2, 3) + r)
        got_view = comm.broadcast(view, root=1)
        got_fort = comm.broadcast(fort, root=1)
        return (comm.broadcast([r, r], root=1).tolist(), int(comm.broadcast(r, root=1)),
                got_view is view, base.tolist(), got_fort is fort, fort.tolist())

    for rank, (lst, scalar, same_view, base, same_fort, fort) in enumerate(run_workers(fn, 3)):
        assert lst == [1, 1] and scalar == 1
        assert same_view and base == [i + (1 if i % 2 else rank) for i in range(10)]
        assert same_fort and fort == (np.arange(6.0).reshape(2, 3) + 1).tolist()


def test_object_and_structured_dtypes_are_config_errors_on_every_rank() -> None:
    # Before: broadcast/allgather of an object array sent raw heap pointers to other ranks.
    def fn(comm: Any) -> Any:
        objs = np.array([1, "a"], dtype=object)
        rec = np.zeros(2, dtype=[("a", "f4")])
        out = [_outcome(lambda: comm.broadcast(objs)), _outcome(lambda: comm.allgather(objs)),
               _outcome(lambda: comm.broadcast(rec)), _outcome(lambda: comm.allreduce(objs))]
        out.append(_outcome(lambda: float(comm.allreduce(np.ones(1))[0])))  # still usable
        return out

    for rank, res in enumerate(run_workers(fn, 3)):
        for kind, msg in res[:4]:
            assert kind == "ConfigError" and "dtype" in msg, (rank, kind, msg)
        assert "broadcast" in res[0][1] and f"rank {rank}" in res[0][1]
        assert res[4] == ("ok", 3.0)


def test_allreduce_into_read_only_out_is_a_config_error() -> None:
    # Before: a bare numpy ValueError ("assignment destination is read-only").
    def fn(comm: Any) -> Any:
        x = np.arange(4.0)
        return _outcome(lambda: comm.allreduce(x, out=np.frombuffer(x.tobytes())))

    for rank, (kind, msg) in enumerate(run_workers(fn, 2)):
        assert kind == "ConfigError" and "out=" in msg and f"rank {rank}" in msg


def test_reduce_scatter_of_a_0d_array_is_a_one_element_vector() -> None:
    # Before: rank 0 got shape (1, 1) and the others (0, 1) from a 0-d input.
    def fn(comm: Any) -> Any:
        return comm.reduce_scatter(np.float64(comm.rank + 1))

    blocks = run_workers(fn, 3)
    assert blocks[0].shape == (1,) and blocks[0][0] == 6.0
    assert [b.shape for b in blocks[1:]] == [(0,), (0,)]
    with terascale.init() as comm:  # size 1, outside a job
        assert comm.reduce_scatter(np.float32(2)).shape == (1,)


def test_unpicklable_objects_fail_on_every_rank_without_a_hang() -> None:
    # Before: the root raised TypeError and every other rank waited for the payload until
    # the collective deadline (60 s), then the communicator was broken.
    def fn(comm: Any) -> Any:
        lock = threading.Lock()
        b = _outcome(lambda: comm.broadcast_object(lock if comm.rank == 0 else None))
        a = _outcome(lambda: comm.allgather_object(lock if comm.rank == 2 else comm.rank))
        big = comm.broadcast_object(b"x" * (20 << 20) if comm.rank == 0 else None)
        return b, a, len(big), comm.allgather_object(comm.rank)

    for rank, (b, a, nbig, objs) in enumerate(run_workers(fn, 3, collective_timeout=20)):
        assert b[0] == "ConfigError" and "root rank 0 could not pickle" in b[1]
        assert f"rank {rank}" in b[1] and "lock" in b[1]
        assert a[0] == "ConfigError" and "rank 2: TypeError" in a[1]
        assert nbig == 20 << 20 and objs == [0, 1, 2]


@pytest.mark.parametrize("algorithm", ["tree", "shm"])
def test_collectives_from_two_threads_keep_their_order(algorithm: str) -> None:
    # Before: a thread could take a sequence number and another thread run the next one
    # first, so peers saw #2 before #1: CollectiveMismatch (or a hang) on correct programs.
    # (Threads must still agree on what they call: here every call is the same.)
    def fn(comm: Any) -> Any:
        errors: list[str] = []
        sums: set[float] = set()

        def work() -> None:
            try:
                for _ in range(100):
                    sums.add(float(comm.allreduce(np.ones(16), algorithm=algorithm)[0]))
                    h = comm.allreduce_async(np.ones(16), algorithm=algorithm)
                    sums.add(float(h.wait()[0]))
            except Exception as e:  # reported to the test, not lost in the thread
                errors.append(repr(e))

        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return errors, sums

    for errors, sums in run_workers(fn, 3, collective_timeout=20):
        assert errors == [] and sums == {3.0}


def test_odd_world_sizes_and_uneven_hosts_with_odd_inputs() -> None:
    # Guards the matrix that found the bugs above: 9 ranks on hosts of 5, 2 and 2 ranks.
    def fn(comm: Any) -> Any:
        r, n = comm.rank, comm.size
        base = np.arange(40, dtype=np.float32).reshape(5, 8)
        inputs = [np.float64(r), np.zeros((0, 3)), base[:, ::2] + r, (base + r)[::-1],
                  np.asfortranarray(base + r), np.frombuffer((base + r).tobytes(), np.float32),
                  (base + r).astype(">f4")]
        for algo in ("tree", "ring", "halving_doubling", "hierarchical", "auto"):
            for x in inputs:
                want = np.asarray(x, np.float64) * n + (n * (n - 1) // 2 - r * n)
                got = comm.allreduce(x, algorithm=algo)
                if got.shape != x.shape or not np.array_equal(got, want):
                    return f"{algo} {x.dtype} {x.shape}"
                got = comm.allreduce_async(x, algorithm=algo).wait()
                if not np.array_equal(got, want):
                    return f"async {algo} {x.dtype} {x.shape}"
        rows = comm.reduce_scatter(np.ones((4, 2)))  # fewer rows than ranks
        return rows.shape

    shapes = run_workers(fn, 9, host_ids=["a", "b", "c", "a", "a"])
    assert shapes == [(1, 2)] * 4 + [(0, 2)] * 5


def test_launcher_keeps_running_when_its_output_is_closed(tmp_path: Path) -> None:
    # Before: `terascale run ... | head -1` hung forever: the forwarding thread died on
    # BrokenPipeError and the workers blocked on their full pipes.
    job = tmp_path / "a script with spaces.py"
    job.write_text(textwrap.dedent("""
        import numpy as np, terascale
        with terascale.init() as comm:
            for i in range(30000):
                print(i, "x" * 60)
            print("sum", int(comm.allreduce(np.array(1))))
    """))
    proc = subprocess.Popen([sys.executable, "-m", "terascale", "run", "-n", "2",
                             sys.executable, str(job)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env={**os.environ})
    assert proc.stdout is not None
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away, as `head -1` does
    try:
        code = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert first.startswith(b"[") and code == 0


def test_launcher_does_not_cut_lines_written_in_pieces(tmp_path: Path) -> None:
    # Before: output was forwarded in whatever pieces arrived, so `print(a, b)` (one write
    # per piece, unbuffered) of several ranks came out as "[1] 1[0] 0 ..." mixed lines.
    job = tmp_path / "pieces.py"
    job.write_text(textwrap.dedent("""
        import os, sys
        r = os.environ["TERASCALE_RANK"]
        for i in range(300):
            for piece in ("rank", r, "line", str(i), "end"):
                sys.stdout.write(piece + " ")
                sys.stdout.flush()
            sys.stdout.write("\\n")
            sys.stdout.flush()
    """))
    res = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "3", sys.executable,
                          str(job)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 900
    bad = [ln for ln in lines if not (ln.startswith(f"[{ln[1]}] rank {ln[1]} line ")
                                      and ln.endswith(" end "))]
    assert bad == [], bad[:5]


@pytest.mark.parametrize("flags, message", [
    (["--timeout", "nan"], "--timeout must be positive and finite"),
    (["--timeout", "inf"], "--timeout must be positive and finite"),
    (["--hosts", "a,,b"], "--hosts has an empty host name"),
])
def test_launcher_rejects_unusable_flags(flags: list[str], message: str) -> None:
    # Before: nan/inf crashed every worker inside socket.settimeout; an empty --hosts entry
    # silently became the machine's hostname.
    res = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "2", *flags, "true"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and message in res.stderr, res.stderr


def test_unusable_timeouts_are_config_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: TERASCALE_TIMEOUT=abc was a bare ValueError; per-call timeout=0, nan or inf
    # numbered a collective that then failed (or never timed out).
    monkeypatch.setenv("TERASCALE_TIMEOUT", "abc")
    with pytest.raises(terascale.ConfigError, match="TERASCALE_TIMEOUT"):
        terascale.init()
    monkeypatch.delenv("TERASCALE_TIMEOUT")
    with pytest.raises(terascale.ConfigError, match="finite"):
        terascale.init(timeout=float("inf"))
    with terascale.init() as comm:
        for bad in (0, -1.0, float("nan"), float("inf"), "x", [1.0]):
            with pytest.raises(terascale.ConfigError, match="rank 0: allreduce timeout="):
                comm.allreduce(np.ones(2), timeout=bad)
        assert comm.allreduce(np.ones(2), timeout=0.001).tolist() == [1.0, 1.0]


def test_tensors_numpy_cannot_view_are_config_errors() -> None:
    # Before: a bare TypeError (sparse) or RuntimeError (conjugate bit) from torch.
    torch = pytest.importorskip("torch")
    with terascale.init() as comm:
        for t in (torch.eye(2).to_sparse(), torch.ones(2, dtype=torch.complex64).conj()):
            with pytest.raises(terascale.ConfigError, match="cannot communicate this tensor"):
                comm.allreduce(t)


def test_init_twice_in_a_worker_returns_the_same_communicator() -> None:
    # Before: the second init() was turned away as a "redundant copy" of the worker and
    # exited the process with status 0, so the job silently did nothing and "succeeded".
    def fn(comm: Any) -> Any:
        again = terascale.init()
        total = float(again.allreduce(np.ones(1))[0])
        comm.close()
        after = _outcome(terascale.init)
        return again is comm, total, after

    for rank, (same, total, (kind, msg)) in enumerate(run_workers(fn, 2)):
        assert same and total == 2.0
        assert kind == "ConfigError" and f"rank {rank}" in msg and "joins a job once" in msg


def test_allreduce_out_must_be_an_array_or_tensor() -> None:
    # Before: out=[0.0, 0.0] was copied into a temporary, so the result went nowhere and
    # the unchanged list came back as if it held the sum.
    with terascale.init() as comm:
        for bad in ([0.0, 0.0], 0.0):
            with pytest.raises(terascale.ConfigError, match="out= must be a numpy array"):
                comm.allreduce(np.ones(2), out=bad)
        dest = np.zeros(2)
        assert comm.allreduce(np.ones(2), out=dest) is dest and dest.tolist() == [1.0, 1.0]


def test_launcher_stops_at_once_when_a_rank_leaves_before_joining(tmp_path: Path) -> None:
    # Before: the others waited out the whole rendezvous deadline (60 s by default) for a
    # rank that had already exited with status 0.
    job = tmp_path / "early.py"
    job.write_text(textwrap.dedent("""
        import os, sys, numpy as np, terascale
        if os.environ["TERASCALE_RANK"] == "1":
            sys.exit(0)
        with terascale.init() as comm:
            comm.allreduce(np.ones(1))
    """))
    res = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "3", "--timeout", "50",
                          sys.executable, str(job)], capture_output=True, text=True, timeout=40)
    assert res.returncode == 1, res.stderr
    assert "2 of 3 workers arrived; missing ranks [1]: rank 1 exited with status 0" in res.stderr


def test_launcher_exit_status_follows_the_signal_that_stopped_it(tmp_path: Path) -> None:
    import signal
    import time

    job = tmp_path / "sleeper.py"
    job.write_text("import time, terascale\nterascale.init()\nprint('up', flush=True)\n"
                   "time.sleep(120)\n")
    for sig, status in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        p = subprocess.Popen([sys.executable, "-m", "terascale", "run", "-n", "2", sys.executable,
                              str(job)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.stdout is not None
        p.stdout.readline()  # a worker is up: the launcher's handlers are installed
        time.sleep(0.2)
        p.send_signal(sig)
        assert p.wait(timeout=60) == status
        p.stdout.close()
        p.stderr.close()  # type: ignore[union-attr]
