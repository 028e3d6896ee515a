"""The TCP exchange's bounded spin (poll without sleeping before epoll_wait): data still
arrives whole, and a peer that died is still reported, not waited for."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest

from terascale import PeerLost
from terascale.transport import _tcp_exchange
from terascale.transport.tcp import TcpTransport


@pytest.fixture
def spinning(monkeypatch: pytest.MonkeyPatch) -> None:
    # The test machine is usually busy (no spin there): force the spinning path.
    monkeypatch.setattr(_tcp_exchange, "oversubscribed", lambda: False)


def _meshes() -> tuple[TcpTransport, TcpTransport]:
    with socket.create_server(("127.0.0.1", 0)) as srv:  # a real TCP link on loopback
        a = socket.create_connection(srv.getsockname(), timeout=10)
        b, _ = srv.accept()
    return TcpTransport(0, {1: a}), TcpTransport(1, {0: b})


def _swap(mesh: TcpTransport, seq: int, mine: np.ndarray, theirs: np.ndarray) -> None:
    ex = mesh.exchange(seq, "test(swap)", "swap", time.monotonic() + 10)
    peer = 1 - mesh.rank
    ex.send(peer, mine.data.cast("B"))
    ex.recv(peer, theirs.data.cast("B"))
    ex.run()


def test_spinning_exchanges_move_every_byte(spinning: None) -> None:
    m0, m1 = _meshes()
    got: dict[int, list[np.ndarray]] = {0: [], 1: []}

    def rank(mesh: TcpTransport) -> None:
        for seq in range(200):
            mine = np.full(1024, mesh.rank * 1000 + seq, np.float32)
            theirs = np.empty_like(mine)
            if mesh.rank == 1 and seq % 50 == 0:
                time.sleep(0.01)  # longer than the spin: the blocking poll takes over
            _swap(mesh, seq, mine, theirs)
            got[mesh.rank].append(theirs)

    threads = [threading.Thread(target=rank, args=(m,)) for m in (m0, m1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    m0.close()
    m1.close()
    assert all(len(v) == 200 for v in got.values())
    for seq in range(200):
        assert (got[0][seq] == 1000 + seq).all() and (got[1][seq] == seq).all()


def test_spinning_rank_still_finds_a_dead_peer(spinning: None) -> None:
    m0, m1 = _meshes()
    m1.close()  # the peer's process is gone
    buf = np.empty(1024, np.float32)
    t0 = time.monotonic()
    with pytest.raises(PeerLost, match="rank 1"):
        _swap(m0, 0, np.ones(1024, np.float32), buf)
    assert time.monotonic() - t0 < 5  # found at once, not at the 10 s deadline
    m0.close()


def test_spin_stops_only_when_tasks_outnumber_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    from terascale.transport import _spin

    runnable = [2]
    monkeypatch.setattr(_spin, "_loadavg_fd", lambda: -1)
    monkeypatch.setattr(_spin.os, "pread",
                        lambda fd, n, at: f"9.00 9.00 9.00 {runnable[0]}/400 77".encode())
    monkeypatch.setattr(_spin, "_CORES", 2)
    monkeypatch.setattr(_spin, "_over", [0.0, -1.0])
    monkeypatch.setattr(_spin, "CROWD_CHECK_S", 0.0)  # a reading on every call
    # Two emulated hosts on two cores, both ranks running: each has a core (the one-minute
    # average of 9 would have said busy).
    assert not _spin.oversubscribed()
    runnable[0] = 3
    assert not _spin.oversubscribed()  # one more task for one reading: still spinning
    runnable[0] = 12
    assert [_spin.oversubscribed() for _ in range(3)][-1]  # smoothed: a few readings
    runnable[0] = 1
    assert any(not _spin.oversubscribed() for _ in range(50))  # below the cores: spin again
