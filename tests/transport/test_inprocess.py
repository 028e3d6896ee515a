"""The in-process transport and the transport registry: ranks as threads, failures named,
deadlines kept, transports chosen by name, scratch memory taken from the transport."""

from __future__ import annotations

import re
import secrets
import threading
import time
import warnings

import numpy as np
import pytest

from terascale import ConfigError
from terascale._init import connect
from terascale.communicator import Communicator
from terascale.rendezvous import RendezvousServer
from terascale.testing import run_threads, run_workers
from terascale.transport import TRANSPORTS, Transport, connector, register_transport
from terascale.transport.inprocess import (
    InProcessConnector,
    InProcessExchange,
    InProcessTransport,
)


def test_it_implements_the_interface() -> None:
    assert issubclass(InProcessTransport, Transport)
    assert not InProcessTransport.__abstractmethods__
    assert not InProcessExchange.__abstractmethods__
    assert isinstance(connector("inprocess"), InProcessConnector)
    assert connector("inprocess").name == "inprocess" and connector().name == "tcp"


@pytest.mark.parametrize("algo", ["tree", "ring", "shm"])
def test_a_rank_that_raises_is_named_by_the_others(algo: str) -> None:
    def fn(comm):  # type: ignore[no-untyped-def]
        comm.allreduce(np.ones(10), algorithm=algo)  # all healthy once
        if comm.rank == 2:
            raise ValueError("bad shard")
        return comm.allreduce(np.ones(1000), algorithm=algo)

    start = time.monotonic()
    out = run_threads(fn, 4, collective_timeout=30, expect_failure=True)
    assert time.monotonic() - start < 10  # told at once, not at the 30 s deadline
    assert out[2][0] == "error" and out[2][1][0] == "ValueError"
    for r in (0, 1, 3):
        status, (exc, text) = out[r]
        assert status == "error" and exc == "PeerLost", out[r]
        # (#0 when rank 2's ABORT overtakes its share of the first: a peer may still be in it)
        assert re.search(f"rank {r}: allreduce #[01]", text) and "rank 2 failed" in text, text
        assert "uncaught ValueError: bad shard" in text, text


def test_a_rank_that_does_not_come_times_out_naming_it() -> None:
    def fn(comm):  # type: ignore[no-untyped-def]
        if comm.rank == 1:
            time.sleep(2.5)  # late, then gone: its peers must not wait for it
            return None
        comm.allreduce(np.ones(4), algorithm="tree")
        return None

    start = time.monotonic()
    out = run_threads(fn, 2, collective_timeout=0.8, expect_failure=True)
    assert time.monotonic() - start < 8
    assert out[1] == ("ok", None)
    status, (exc, text) = out[0]
    assert status == "error" and exc == "PeerTimeout", out[0]
    assert "rank 0: allreduce #0 (tree,float64[4],sum) timed out after 0.8 s waiting for " \
        "rank 1 (receive)" in text, text


def test_a_thread_that_ends_early_is_a_lost_peer() -> None:
    def fn(comm):  # type: ignore[no-untyped-def]
        if comm.rank == 0:
            return None  # closes its communicator: the others see it leave
        return comm.allreduce(np.ones(4), timeout=20)

    out = run_threads(fn, 3, expect_failure=True)
    for r in (1, 2):
        status, (exc, text) = out[r]
        assert status == "error" and exc == "PeerLost" and "rank 0" in text, out[r]


def test_a_mismatch_is_reported_by_every_rank() -> None:
    def fn(comm):  # type: ignore[no-untyped-def]
        comm.allreduce(np.ones(3 if comm.rank == 1 else 4), algorithm="ring")

    out = run_threads(fn, 3, collective_timeout=20, expect_failure=True)
    assert {o[1][0] for o in out} == {"CollectiveMismatch"}, out
    assert any("float64[3]" in o[1][1] and "float64[4]" in o[1][1] for o in out)


def test_run_threads_raises_the_root_cause() -> None:
    from terascale.testing import WorkerFailed

    def fn(comm):  # type: ignore[no-untyped-def]
        if comm.rank == 1:
            raise KeyError("missing")
        comm.barrier()

    with pytest.raises(WorkerFailed, match="rank 1 failed") as info:
        run_threads(fn, 3, collective_timeout=20)
    assert info.value.rank == 1 and info.value.exc_type == "KeyError"


def test_an_unknown_transport_names_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="'carrier-pigeon'.*inprocess, tcp"):
        connector("carrier-pigeon")


class _Counting(InProcessConnector):
    """The in-process transport with a scratch hook that counts what the algorithms took."""

    taken: list[int] = []

    def connect(self, handle, rank, size, endpoints, **kw):  # type: ignore[no-untyped-def]
        base = super().connect(handle, rank, size, endpoints, **kw)
        taken = self.taken

        class Exchange(InProcessExchange):
            def scratch(self, nbytes: int) -> np.ndarray:
                taken.append(nbytes)
                return super().scratch(nbytes)

        class Counting(InProcessTransport):
            def exchange(self, seq, desc, what, deadline, *, context=0,  # type: ignore[no-untyped-def]
                         members=None):
                return Exchange(self, seq, desc, what, deadline, context,
                                range(self.size) if members is None else members)

        t = Counting(base.rank, base.size, base.mine, base.peers)
        return t


def test_a_registered_transport_is_selectable_and_gives_the_algorithms_their_scratch() -> None:
    register_transport("counting", _Counting())
    try:
        secret = secrets.token_hex(8).encode()
        with RendezvousServer(3, secret) as server:
            got: dict[int, object] = {}

            def go(rank: int) -> None:
                with connect(rank, 3, server.address, secret, timeout=20,
                             transport="counting") as comm:
                    got[rank] = (comm.allreduce(np.arange(1000.0) * (rank + 1),
                                                algorithm="ring"),
                                 type(comm._transport).__name__)

            threads = [threading.Thread(target=go, args=(r,)) for r in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
        for r in range(3):
            y, kind = got[r]  # type: ignore[misc]
            assert kind == "Counting"
            np.testing.assert_array_equal(y, np.arange(1000.0) * 6)
        assert _Counting.taken and all(n > 0 for n in _Counting.taken)
    finally:
        TRANSPORTS.pop("counting", None)


def test_ranks_that_name_different_transports_are_refused() -> None:
    secret = secrets.token_hex(8).encode()
    errors: dict[int, BaseException] = {}
    with RendezvousServer(2, secret) as server:

        def go(rank: int, name: str) -> None:
            try:
                connect(rank, 2, server.address, secret, timeout=10, transport=name).close()
            except BaseException as e:
                errors[rank] = e

        threads = [threading.Thread(target=go, args=a) for a in ((0, "inprocess"), (1, "tcp"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(20)
    for r in (0, 1):
        assert isinstance(errors.get(r), ConfigError), errors
        assert "different transports" in str(errors[r]) and "TERASCALE_TRANSPORT" in str(errors[r])


def test_processes_cannot_share_the_in_process_transport() -> None:
    out = run_workers(lambda comm: comm.size, 2, env={"TERASCALE_TRANSPORT": "inprocess"},
                      expect_failure=True, timeout=60)
    for status, value in out:
        assert status == "error" and value[0] == "ConfigError", out
        assert "threads of one process" in value[1]


def test_the_old_names_still_work_with_a_warning() -> None:
    import terascale.transport as tr

    with pytest.warns(DeprecationWarning, match="TcpTransport"):
        assert tr.TcpMesh is tr.TcpTransport
    with pytest.warns(DeprecationWarning, match="connect_tcp"):
        assert tr.build_mesh is tr.connect_tcp
    with pytest.warns(DeprecationWarning, match="transport="):
        comm = Communicator(rank=0, size=1, mesh=_Solo())
    assert isinstance(comm._transport, _Solo)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Communicator(rank=0, size=1)  # no warning without the old keyword


class _Solo(InProcessTransport):
    def __init__(self) -> None:  # a transport of one rank, for the constructor only
        super().__init__(0, 1, InProcessConnector().listen("local"), {})
