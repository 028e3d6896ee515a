"""The compiled core of the shared-memory allreduce: built in CI, the fast per-call path's
failure handling, and the same bits as the pure-Python path."""

from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

from terascale import CollectiveMismatch, PeerLost, PeerTimeout
from terascale.testing import run_workers
from terascale.transport import _core

needs_core = pytest.mark.skipif(_core.load() is None and not _core.disabled(),
                                reason="terascale._shmcore is not built here")


def test_the_core_is_built_in_ci() -> None:
    """CI builds the package from source: a broken C build must fail here, not fall back."""
    if os.environ.get("CI") != "true":
        pytest.skip("only asserted in CI (CI=true)")
    from terascale import _shmcore
    assert _shmcore.ABI == _core.ABI, "the built core is older than its source"


def test_the_fast_path_tag_is_the_exchange_tag() -> None:
    """The fast path writes the descriptor without an exchange: the same bytes as one."""
    import socket

    from terascale.transport import TcpTransport
    from terascale.transport.shmgroup import ShmGroup, slot_tag, tag_field

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        a = socket.create_connection(srv.getsockname())
        b, _ = srv.accept()
    mesh = TcpTransport(0, {1: a})
    try:
        desc = "allreduce(shm,float32[1024],sum)"
        for seq, context in ((0, 0), (7, 0), (2**40 + 3, 0x1234_5678_9ABC_DEF1)):
            ex = mesh.exchange(seq, desc, "test", time.monotonic() + 5, context=context)
            assert slot_tag(seq, context, tag_field(desc)) == ShmGroup.tag_of(ex)
            assert len(ShmGroup.tag_of(ex)) == 128
    finally:
        mesh.close()
        b.close()


def _use_core(comm) -> None:
    os.environ.pop("TERASCALE_NO_CEXT", None)


def _sleep_at_once() -> None:
    """Wait as where the ranks' yields cannot reach each other (a session each, with
    autogroups): 3 ranks on 2 cores then sleep at once instead of spinning with yields."""
    from terascale.transport import _spin
    _spin.OVERSUBSCRIBED_SPIN_S = 0.0


@needs_core
def test_fast_path_is_taken_and_bitwise_equal_to_python_path() -> None:
    """Rank 1 runs the pure-Python path, the others the core (rank 2 sleeping at once, rank
    0 spinning with yields): the same bits everywhere."""
    def fn(comm):
        os.environ["TERASCALE_NO_CEXT"] = "1" if comm.rank == 1 else "0"
        if comm.rank == 2:
            _sleep_at_once()
        rng = np.random.default_rng(comm.rank)
        out = []
        for dtype in ("float32", "float64", "int32", "int64", "uint8", "float16", "bool"):
            for op in ("sum", "prod", "min", "max"):
                for count in (0, 1, 1000, 70_000) + ((300_001,) if op == "sum" else ()):
                    x = (rng.normal(size=count) * 100).astype(dtype)
                    if dtype.startswith("float") and count:
                        x[::97] = np.nan
                        x[::89] = -0.0
                    for _ in range(3):  # the third call of a shape takes the fast path
                        y = comm.allreduce(x, op=op, algorithm="shm")
                    out.append(y.tobytes())
        z = np.arange(10.0)
        comm.allreduce(z, out=z, algorithm="auto")
        comm.allreduce(z, out=z, algorithm="auto")
        assert comm.allreduce(z, out=z, algorithm="auto") is z
        out.append(z.tobytes())
        core = comm._shm.whole.core
        # The tuning counters: the core ranks waited for the slower pure-Python rank.
        waited = None if core is None else \
            (core.yields >= 0 and core.spun_s >= 0 and core.slept_s >= 0,
             core.spun_s + core.slept_s > 0)
        return out, core is not None, waited

    res = run_workers(fn, 3, timeout=120)
    assert [r[1] for r in res] == [True, False, True]
    assert res[0][2] == res[2][2] == (True, True)
    assert res[0][0] == res[1][0] == res[2][0]
    assert np.frombuffer(res[0][0][-1]) .tolist() == [v * 27 for v in range(10)]


@needs_core
def test_fast_path_mismatch_is_detected() -> None:
    def fn(comm):
        _use_core(comm)
        a, b = np.ones(100), np.ones(101)
        for _ in range(3):
            comm.allreduce(a, algorithm="shm")
            comm.allreduce(b, algorithm="shm")
        comm.allreduce(a if comm.rank == 2 else b, algorithm="shm")

    outcomes = run_workers(fn, 3, expect_failure=True, collective_timeout=30)
    for status, (exc, text) in outcomes:
        assert status == "error" and exc == CollectiveMismatch.__name__, text


@needs_core
@pytest.mark.parametrize(("stop", "count"), [("kill", 1000), ("stop", 1000), ("kill", 1 << 20),
                                            ("stop", 1 << 20)])
def test_fast_path_dead_or_stalled_member(stop: str, count: int) -> None:
    """A member killed (PeerLost) or stopped (PeerTimeout at the communicator's deadline)
    while the others wait in the core (one round, or 4 MiB: the direct schedule, whose
    members write into each other's buffers; rank 0 spinning with yields, rank 2 sleeping
    at once): detected, no hang."""
    def fn(comm):
        _use_core(comm)
        if comm.rank == 2:
            _sleep_at_once()
        pids = comm.allgather(np.array([os.getpid()]))[:, 0]
        x = np.ones(count, np.float32)
        for _ in range(3):
            comm.allreduce(x, algorithm="shm")
        if comm.rank == 1:
            os.kill(os.getpid(), signal.SIGKILL if stop == "kill" else signal.SIGSTOP)
        start = time.monotonic()
        try:
            while time.monotonic() - start < 20:
                comm.allreduce(x, algorithm="shm")
        finally:
            if comm.rank == 0 and stop == "stop":
                os.kill(int(pids[1]), signal.SIGCONT)

    outcomes = run_workers(fn, 3, expect_failure=True, collective_timeout=2.0)
    expect = PeerLost if stop == "kill" else PeerTimeout
    for r in (0, 2):
        assert outcomes[r][0] == "error", outcomes[r]
        assert outcomes[r][1][0] in (expect.__name__, PeerLost.__name__), outcomes[r]
    assert outcomes[0][1][0] == expect.__name__, outcomes[0]
    assert "rank 1" in outcomes[0][1][1]


@needs_core
def test_fast_barrier_meets_the_python_barrier_and_detects_a_dead_member() -> None:
    """Barriers through the core (rank 0) and through Python (rank 1) meet; a killed
    member is PeerLost at the next barrier, not a hang."""
    def fn(comm):
        os.environ["TERASCALE_NO_CEXT"] = "1" if comm.rank == 1 else "0"
        comm.allreduce(np.ones(3), algorithm="shm")  # the segment exists from here on
        for i in range(50):
            comm.barrier()
            if i % 10 == 0:
                comm.allreduce(np.ones(3), algorithm="shm")
        if comm.rank == 2:
            os.kill(os.getpid(), signal.SIGKILL)
        for _ in range(1000):
            comm.barrier()

    outcomes = run_workers(fn, 3, expect_failure=True, collective_timeout=30)
    assert outcomes[2][0] == "killed"
    for r in (0, 1):
        assert outcomes[r][0] == "error" and outcomes[r][1][0] == PeerLost.__name__, outcomes[r]


@needs_core
def test_direct_schedule_gives_the_copy_paths_bits_and_can_be_turned_off() -> None:
    """Large allreduces reach into the other members' buffers (cross-memory attach) where
    every member can; ``TERASCALE_NO_CMA=1`` in one member (as a refused process_vm_readv
    does) turns that off for all, and both paths give the same bits."""
    def fn(comm):
        _use_core(comm)
        rng = np.random.default_rng(comm.rank)
        x = (rng.normal(size=(1 << 20) + 5) * 100).astype(np.float32)  # 4 MiB: direct
        x[::97] = np.nan
        x[::89] = -0.0
        k = rng.integers(-50, 50, (1 << 19) + 1).astype(np.int64)

        def run(c):
            out = [c.allreduce(x, op=op, algorithm="shm").tobytes() for op in ("sum", "max")]
            out.append(c.allreduce(k, op="prod", algorithm="shm").tobytes())
            z = x.copy()
            for _ in range(3):  # in place, through the communicator's fast path
                z[:] = x
                c.allreduce(z, out=z, algorithm="shm")
            return [*out, z.tobytes()], c._shm.whole.direct

        direct, flags = run(comm)
        if comm.rank == 1:
            os.environ["TERASCALE_NO_CMA"] = "1"
        sub = comm.split(0)  # a new segment: the members agree again
        copied, sub_flags = run(sub)
        return direct, flags, copied, sub_flags

    res = run_workers(fn, 3, timeout=120)
    assert len({r[1] for r in res}) == 1  # every member agreed
    assert [r[3] for r in res] == [False] * 3
    for direct, _, copied, _ in res:
        assert direct == copied == res[0][0]


@needs_core
def test_prepared_small_calls_share_the_groups_counters_and_budget() -> None:
    """A small allreduce is one call of the core's prepared collective (``Group.prepare``):
    it advances the same epoch and round as the Python-driven calls it is interleaved with
    (multi-round, direct, barriers), and adapts the same spin budget (a wait that had to
    sleep halves it)."""
    from terascale.transport import _spin

    def fn(comm):
        _use_core(comm)
        x = np.arange(1000, dtype=np.float64)
        big = np.ones((1 << 20) + 5, np.float32)  # 4 MiB: the direct schedule
        mid = np.ones(100_000, np.float32)  # 400 KB: two flat rounds
        for _ in range(3):
            comm.allreduce(x, algorithm="shm")
        g = comm._shm.whole
        fast = comm._fast[("shm", "sum", x.dtype, x.shape)][0]
        prepared = type(fast.start).__name__ == "builtin_function_or_method"
        results = []
        for i in range(20):
            before = (g.epoch, g.round)
            results.append(comm.allreduce(x, algorithm="shm").tobytes())
            assert (g.epoch, g.round) == (before[0] + 1, before[1] + 1)
            if i % 5 == 0:
                results.append(comm.allreduce(mid, algorithm="shm").tobytes())
                results.append(comm.allreduce(big, algorithm="shm").tobytes())
                comm.barrier()
        comm.barrier()
        g.spin.spin_s = _spin.SPIN_S
        if comm.rank == 1:
            time.sleep(0.05)  # rank 0 spins its whole budget, then sleeps in the core
        comm.allreduce(x, algorithm="shm")
        return prepared, results, g.spin.spin_s, g.core.spin_s, g.oversubscribed

    res = run_workers(fn, 2, timeout=120)
    assert res[0][0] and res[1][0]
    assert res[0][1] == res[1][1]
    assert np.frombuffer(res[0][1][0]).tolist() == [2.0 * v for v in range(1000)]
    prepared, _, budget, in_core, oversubscribed = res[0]
    assert budget == in_core
    if not oversubscribed:
        assert budget == max(_spin.SPIN_S / 2, _spin.MIN_SPIN_S)
