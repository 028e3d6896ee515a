"""The TCP swap (one frame each way without an exchange): every byte arrives, it meets the
exchange's frames on the other side, and what it cannot finish -- a partial send, a late,
dead, stalled or mismatched peer -- is finished by the exchange with its errors."""

from __future__ import annotations

import time

import numpy as np
import pytest
from _tcp_pair import loopback_meshes, run_both

from terascale import CollectiveMismatch, PeerLost, PeerTimeout
from terascale.transport import _tcp_swap
from terascale.transport.tcp import TcpTransport

DESC = "allreduce(tree,float32[1024],sum)"


@pytest.fixture(params=["spin", "no-spin"])
def spin(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    # The test machine is usually busy (no spin there): run both paths.
    monkeypatch.setattr(_tcp_swap, "oversubscribed", lambda: request.param == "no-spin")


def _by_swap(mesh: TcpTransport, seq: int, mine: np.ndarray, theirs: np.ndarray,
             desc: str = DESC, limit: float = 10) -> None:
    link = mesh.swap(1 - mesh.rank, desc, mine.nbytes)
    assert link is not None
    pending = link.start(seq, mine, theirs)
    if pending is not None:
        link.finish(mesh.exchange(seq, desc, "swap", time.monotonic() + limit), pending, mine,
                    theirs)


def _by_exchange(mesh: TcpTransport, seq: int, mine: np.ndarray, theirs: np.ndarray,
                 desc: str = DESC) -> None:
    ex = mesh.exchange(seq, desc, "swap", time.monotonic() + 10)
    ex.send(1 - mesh.rank, mine.data.cast("B"))
    ex.recv(1 - mesh.rank, theirs.data.cast("B"))
    ex.run()


@pytest.mark.parametrize("count", [0, 1024, 1 << 20])  # a barrier, 4 KiB, a partial send
def test_swaps_meet_swaps_and_exchanges(spin: None, count: int) -> None:
    m0, m1 = loopback_meshes()
    got: dict[int, list[bytes]] = {0: [], 1: []}
    desc = f"allreduce(tree,float32[{count}],sum)"
    rounds = 60 if count < 1 << 20 else 6  # 4 MiB: more than both socket buffers hold

    def rank(mesh: TcpTransport) -> None:
        for seq in range(rounds):
            mine = np.full(count, mesh.rank * 1000 + seq, np.float32)
            theirs = np.empty_like(mine)
            if mesh.rank == 1 and seq % 20 == 3:
                time.sleep(0.05)  # longer than the spin and the swap's sleep: the exchange
                # takes over
            # rank 1 alternates between the two paths: the frames are the same
            how = _by_swap if mesh.rank == 0 or seq % 2 else _by_exchange
            how(mesh, seq, mine, theirs, desc)
            got[mesh.rank].append(theirs.tobytes())

    run_both(lambda: rank(m0), lambda: rank(m1))
    m0.close()
    m1.close()
    for seq in range(rounds):
        assert got[0][seq] == np.full(count, 1000 + seq, np.float32).tobytes()
        assert got[1][seq] == np.full(count, seq, np.float32).tobytes()
    assert m0.bytes_sent == m1.bytes_received == rounds * (128 + 4 * count)


def test_swap_finds_a_dead_peer(spin: None) -> None:
    m0, m1 = loopback_meshes()
    m1.close()  # the peer's process is gone
    t0 = time.monotonic()
    with pytest.raises(PeerLost, match="rank 1") as e:
        _by_swap(m0, 0, np.ones(1024, np.float32), np.empty(1024, np.float32))
    assert time.monotonic() - t0 < 5  # found at once, not at the 10 s deadline
    assert (e.value.rank, e.value.peer, e.value.operation) == (0, 1, "swap")
    m0.close()


def test_swap_times_out_on_a_stalled_peer(spin: None) -> None:
    m0, m1 = loopback_meshes()  # m1 never sends: stalled
    with pytest.raises(PeerTimeout, match="rank 1 .receive.") as e:
        _by_swap(m0, 0, np.ones(1024, np.float32), np.empty(1024, np.float32), limit=0.3)
    assert (e.value.rank, e.value.peer, e.value.operation) == (0, 1, "swap")
    m0.close()
    m1.close()


def test_swap_reports_another_collective(spin: None) -> None:
    m0, m1 = loopback_meshes()
    a, b = np.ones(1024, np.float32), np.empty(1024, np.float32)
    with pytest.raises(CollectiveMismatch, match="ring"):
        run_both(lambda: _by_swap(m0, 0, a, b),
              lambda: _by_exchange(m1, 0, a.copy(), b.copy(),
                                   "allreduce(ring,float32[1024],sum)"))
    m0.close()
    m1.close()
