"""Shared-memory allreduce: correctness matrix, failures, mismatches, cleanup of /dev/shm."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest
from _allreduce_check import check_matrix

from terascale import CollectiveMismatch, PeerLost, PeerTimeout
from terascale.launch import job_prefix, remove_job_segments
from terascale.testing import run_workers
from terascale.transport import _core


@pytest.fixture(params=["core", "python"])
def path(request, monkeypatch) -> str:
    """Run the test over the compiled core and over the pure-Python path (workers fork)."""
    if request.param == "python":
        monkeypatch.setenv("TERASCALE_NO_CEXT", "1")
    else:
        monkeypatch.delenv("TERASCALE_NO_CEXT", raising=False)
        if _core.load() is None:
            pytest.skip("terascale._shmcore is not built here")
    return request.param


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8])
def test_matrix(n: int, path: str) -> None:
    if path == "python" and n > 5:
        pytest.skip("the pure-Python path: n <= 5 suffices (same code at every n)")
    check_matrix(n, "shm", big=n in (2, 3, 5), runs=2 if n == 3 else 1)


def _leftovers(job: str) -> list[str]:
    return [f for f in os.listdir("/dev/shm") if f.startswith(job_prefix(job))]


def test_async_layouts_and_segment_unlinked_while_running() -> None:
    def fn(comm):
        base = np.arange(60, dtype=np.float64).reshape(3, 4, 5) * (comm.rank + 1)
        h = comm.allreduce_async(np.full(100_003, comm.rank, np.int32), algorithm="shm")
        strided = comm.allreduce(base[:, ::2, 1:], algorithm="shm")   # non-contiguous input
        scalar = comm.allreduce(np.float32(comm.rank), algorithm="shm")  # 0-d
        out = np.empty_like(base)
        comm.allreduce(base, out=out, algorithm="shm")
        return h.wait()[::1000].tolist(), strided, scalar, out, _leftovers(comm.job), comm.job

    n = 3
    res = run_workers(fn, n)
    k = n * (n + 1) // 2
    base = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    for gathered, strided, scalar, out, left, _ in res:
        assert gathered == [sum(range(n))] * len(gathered)
        np.testing.assert_array_equal(strided, (base * k)[:, ::2, 1:])
        assert scalar.shape == () and scalar == sum(range(n))
        np.testing.assert_array_equal(out, base * k)
        assert left == []  # unlinked as soon as every rank had mapped it
    assert _leftovers(res[0][-1]) == []


def _segment_kib() -> tuple[int, int]:
    """(size, resident) KiB of this process's mapping of its shared-memory segment."""
    size = rss = 0
    mine = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and ":" not in head[0]:
                name = head[5] if len(head) > 5 else ""
                mine = name.startswith(("/memfd:terascale-", "/dev/shm/terascale-"))
                if mine:
                    lo, hi = (int(x, 16) for x in head[0].split("-"))
                    size += (hi - lo) >> 10
            elif mine and head and head[0] == "Rss:":
                rss += int(head[1])
    return size, rss


def test_two_members_hold_only_the_part_of_the_segment_they_use(path: str) -> None:
    """The segment is not populated whole: two members' calls, small or large, touch a
    flat round of each area (the rest would be 2 MiB areas nobody writes), and the
    results are the same."""
    def fn(comm):
        small = comm.allreduce(np.full(1000, comm.rank + 1.0), algorithm="shm")
        big = comm.allreduce(np.full(3 << 20, comm.rank + 1, np.float32), algorithm="shm")
        return small[0], float(big[0]), float(big[-1]), _segment_kib()

    from terascale.collectives.shm import AREA_BYTES
    from terascale.transport._shmlayout import control_bytes
    from terascale.transport.shmgroup import FAULTED_AREA_BYTES

    for small, first, last, (size, rss) in run_workers(fn, 2):
        assert (small, first, last) == (3.0, 3.0, 3.0)
        assert size >= 4 * AREA_BYTES >> 10  # the four areas are mapped...
        # ...a flat round of each resident, beside the control slots
        assert rss <= 4 * FAULTED_AREA_BYTES + control_bytes(2) >> 10


def test_killed_worker_is_detected_and_nothing_is_left(path: str) -> None:
    def fn(comm):
        x = np.ones(3 << 20, np.float32)
        comm.allreduce(x, algorithm="shm")
        with open(f"/tmp/terascale-test-job-{os.getppid()}", "w") as f:
            f.write(comm.job)
        if comm.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        start = time.monotonic()
        try:
            comm.allreduce(x, algorithm="shm")
        except PeerLost:
            # Detected through the dead rank's closed TCP link, well before the deadline.
            assert time.monotonic() - start < 20
            raise

    outcomes = run_workers(fn, 3, expect_failure=True, collective_timeout=30)
    assert outcomes[1][0] == "killed"
    for r in (0, 2):
        assert outcomes[r][0] == "error" and outcomes[r][1][0] == "PeerLost", outcomes[r]
    path = f"/tmp/terascale-test-job-{os.getpid()}"
    with open(path) as f:
        job = f.read()
    os.unlink(path)
    assert _leftovers(job) == []


def test_killed_before_unlink_is_cleaned_by_the_harness() -> None:
    """A rank killed while holding a segment that was never unlinked: run_workers cleans it."""
    from terascale.transport.shmgroup import segment_name

    def fn(comm):
        if comm.rank == 0:  # what a crash between create and unlink leaves behind
            with open(os.path.join("/dev/shm", segment_name(comm.job, [0, 1])), "wb") as f:
                f.write(b"x")
        comm.barrier()
        with open(f"/tmp/terascale-test-job2-{os.getppid()}", "w") as f:
            f.write(comm.job)
        if comm.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL)
        comm.barrier()

    run_workers(fn, 2, expect_failure=True, collective_timeout=30)
    path = f"/tmp/terascale-test-job2-{os.getpid()}"
    with open(path) as f:
        job = f.read()
    os.unlink(path)
    assert _leftovers(job) == []


def test_mismatch_between_shm_calls(path: str) -> None:
    def fn(comm):
        comm.allreduce(np.ones(4), algorithm="shm")
        n = 100 if comm.rank == 2 else 101
        comm.allreduce(np.ones(n), algorithm="shm")

    outcomes = run_workers(fn, 3, expect_failure=True)
    for status, (exc, text) in outcomes:
        assert status == "error" and exc == "CollectiveMismatch", text
    assert "float64[100]" in outcomes[0][1][1] and "float64[101]" in outcomes[2][1][1]


def test_mismatch_shm_against_tcp_collective(path: str) -> None:
    def fn(comm):
        x = np.ones(1000, np.float32)
        comm.allreduce(x, algorithm="shm")
        if comm.rank == 0:
            comm.allreduce(x, algorithm="shm")
        else:
            comm.allreduce(x, algorithm="ring")

    outcomes = run_workers(fn, 2, expect_failure=True, collective_timeout=30)
    for status, (exc, text) in outcomes:
        assert status == "error" and exc == CollectiveMismatch.__name__, text


def test_deadline_is_honoured(path: str) -> None:
    def fn(comm):
        comm.allreduce(np.ones(10), algorithm="shm")
        if comm.rank == 1:
            time.sleep(2.5)
        comm.allreduce(np.ones(10), algorithm="shm", timeout=0.5)

    outcomes = run_workers(fn, 2, expect_failure=True, collective_timeout=30)
    assert outcomes[0][0] == "error" and outcomes[0][1][0] == PeerTimeout.__name__
    assert "rank 1" in outcomes[0][1][1]
    assert outcomes[1][0] == "error"  # told by rank 0's abort


def test_peer_stopped_mid_collective_times_out_instead_of_spinning(path: str) -> None:
    """Spinning for a member known to be running (later rounds of a multi-round allreduce)
    is bounded: a member stopped in the middle still yields PeerTimeout at the deadline."""
    def fn(comm):
        import threading

        from terascale.transport import _spin

        _spin.host_busy = lambda: False  # spin for running members even on a loaded host
        pids = comm.allgather(np.array([os.getpid()]))[:, 0]
        x = np.ones(5 << 20 >> 2, np.float32)  # three rounds of the 2 MiB areas
        if comm.rank == 1:
            threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGSTOP)).start()
        start = time.monotonic()
        try:
            while time.monotonic() - start < 20:
                comm.allreduce(x, out=x, algorithm="shm", timeout=1.0)
                x.fill(1)
        except PeerTimeout:
            assert time.monotonic() - start < 5  # 0.3 s + the 1 s deadline + checks
            raise
        finally:
            if comm.rank == 0:
                os.kill(int(pids[1]), signal.SIGCONT)

    outcomes = run_workers(fn, 2, expect_failure=True, collective_timeout=30)
    assert outcomes[0][0] == "error" and outcomes[0][1][0] == PeerTimeout.__name__, outcomes[0]
    assert "rank 1" in outcomes[0][1][1]
    assert outcomes[1][0] == "error"  # told by rank 0's abort once it runs again


def test_shm_needs_one_host() -> None:
    def fn(comm):
        comm.allreduce(np.ones(3), algorithm="shm")

    outcomes = run_workers(fn, 2, expect_failure=True, host_ids=["a", "b"])
    assert all(o[1][0] == "ConfigError" for o in outcomes)


_SLOW_MEMBER = """
import os, sys, time, numpy as np, terascale
comm = terascale.init(timeout=60)
comm.barrier()
if comm.rank == 1:
    time.sleep(60)  # a slow rank: has not mapped the segment when its creator dies
print(comm.job, flush=True)
comm.allreduce(np.ones(1000), algorithm="shm")
"""


def test_sigkill_of_the_creator_under_torchrun_variables_leaves_nothing_in_dev_shm(
        tmp_path) -> None:
    """No launcher of ours outlives the workers here, so nothing could clean up a name."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:  # terascale's rendezvous listens on MASTER_PORT + 1
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1] - 1
    script = tmp_path / "job.py"
    script.write_text(_SLOW_MEMBER)
    job = ""
    logs = [tmp_path / f"rank{r}.err" for r in range(2)]
    errs = [log.open("w") for log in logs]
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                              stderr=errs[r],
                              env={**os.environ, "RANK": str(r), "WORLD_SIZE": "2",
                                   "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2",
                                   "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
                                   "TERASCALE_SECRET": "shm-leak-test"})
             for r in range(2)]
    for f in errs:
        f.close()
    try:
        assert procs[0].stdout is not None
        job = procs[0].stdout.readline().strip()
        assert job, "rank 0 printed no job id:\n" + "\n".join(
            f"rank {r}: {log.read_text()}" for r, log in enumerate(logs))
        time.sleep(1.0)  # rank 0 has created the segment and waits for rank 1's mapping
        procs[0].kill()
        procs[0].wait(10)
        assert _leftovers(job) == []
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
        if job:
            remove_job_segments(job)  # a failing run must not leak either


def test_a_stranger_without_the_key_gets_no_segment() -> None:
    import mmap
    import socket

    from terascale.transport._memfd import HAVE_MEMFD, SegmentOffer, receive_segment

    if not HAVE_MEMFD:
        pytest.skip("no memfd_create here")
    offer = SegmentOffer(4096, "terascale-test", 1)
    try:
        token = offer.note[8:24]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(5)
            s.connect(b"\0terascale-seg-" + token.hex().encode())
            s.sendall(b"\0" * 32)  # the wrong key
            _, fds, _, _ = socket.recv_fds(s, 1, 1)
            assert fds == []  # closed without a descriptor
        fd, size = receive_segment(offer.note, time.monotonic() + 5)  # the member still can
        mine = mmap.mmap(offer.fd, 4096)
        theirs = mmap.mmap(fd, size)
        os.close(fd)
        mine[:5] = b"hello"
        assert size == 4096 and theirs[:5] == b"hello"
        mine.close()
        theirs.close()
    finally:
        offer.close()


def test_a_named_segment_squatted_before_its_creator_fails_every_member_at_once() -> None:
    """Without memfd_create segments are named files in /dev/shm: a name taken before the
    creator (here a directory, which even root cannot unlink as a file; a file of another
    user is the same for anyone else) is a CollectiveError on every member, never the
    squatter's file mapped, never a wait for the deadline."""
    from terascale.transport import shmgroup

    def fn(comm):
        import time

        shmgroup.HAVE_MEMFD = False  # this process's named fallback
        if comm.rank == 0:
            os.mkdir(os.path.join("/dev/shm", shmgroup.segment_name(comm.job, [0, 1])))
        comm.barrier()
        start = time.monotonic()
        try:
            comm.allreduce(np.ones(4), algorithm="shm")
            return "finished", "", 0.0
        except Exception as e:
            return type(e).__name__, str(e), time.monotonic() - start
        finally:
            if comm.rank == 0:
                os.rmdir(os.path.join("/dev/shm", shmgroup.segment_name(comm.job, [0, 1])))

    res = [value for _, value in run_workers(fn, 2, expect_failure=True, collective_timeout=30)]
    for rank, (kind, message, took) in enumerate(res):
        assert kind in ("CollectiveError", "PeerLost"), (rank, kind, message)  # never OSError
        assert took < 10, (rank, took, message)
    assert "cannot create the shared-memory segment" in res[0][1], res
    assert "aborted because rank 0 failed" in res[1][1], res
