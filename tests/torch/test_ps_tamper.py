"""The parameter-server baseline's links under a relay on the path, end to end.

A relay between worker 1 and rank 0's server port flips one byte of a sealed message (or
cuts the connection) mid-training. Whichever side detects it, every rank must end with an
error naming rank, peer and operation within its deadline: the side that failed the tag
with ``LinkTampered``, the other side told so over the direction that is still intact (a
sealed notice, which nobody without the key can forge), and any other worker waiting on the
same synchronous round with the same verdict -- never a rank left waiting forever on a
round that cannot complete, never a step applied from altered bytes.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
from _tcp_pair import shut_both

torch = pytest.importorskip("torch")
import terascale.torch as tt  # noqa: E402
from terascale.testing import run_workers  # noqa: E402

DEADLINE = 6.0  # the communicator's timeout in every worker
NUMEL = 10  # Linear(4, 2): 8 weights, 2 biases
_UP_PREFIX = 8 + 8 + 32 + 32  # the worker's rank, then its handshake answer
_DOWN_PREFIX = 8 + 32 + 2 + 32  # rank 0's challenge, then its verdict and proof
_MESSAGE = 8 + NUMEL * 4 + 16  # length u64, the float32 values, the tag
_connect = socket.create_connection  # the relay's own, whatever a worker patches


_RELAYS: list[_Relay] = []  # worker 1's, in its own process


class _Relay:
    """Relays one connection to ``target``; flips the byte at ``flip_at`` of one direction's
    stream, or cuts both at ``cut_at`` bytes upstream."""

    def __init__(self, target: tuple[str, int], way: str, at: int, cut: bool) -> None:
        self.target, self.way, self.at, self.cut = target, way, at, cut
        self._lst = socket.create_server(("127.0.0.1", 0))
        self.address = self._lst.getsockname()[:2]
        self.pumps: list[threading.Thread] = []
        threading.Thread(target=self._serve, daemon=True).start()
        _RELAYS.append(self)

    def _serve(self) -> None:
        a, _ = self._lst.accept()
        self._lst.close()
        b = _connect(self.target, timeout=5)
        b.settimeout(None)
        for src, dst, way in ((a, b, "up"), (b, a, "down")):
            t = threading.Thread(target=self._pump, args=(src, dst, way), daemon=True)
            t.start()
            self.pumps.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, way: str) -> None:
        seen = 0
        try:
            while chunk := src.recv(1 << 16):
                data = bytearray(chunk)
                if way == self.way and seen <= self.at < seen + len(data):
                    if self.cut:
                        dst.sendall(bytes(data[: self.at - seen]))
                        break
                    data[self.at - seen] ^= 0x01
                seen += len(chunk)
                dst.sendall(bytes(data))
        except OSError:
            pass
        finally:
            shut_both(src, dst)


def _train(comm, way: str, at: int, cut: bool):  # type: ignore[no-untyped-def]
    """Three ranks train through a parameter server; worker 1 reaches it through the relay."""
    if comm.rank == 1:  # the only connection made after init is the parameter server's
        socket.create_connection = lambda address, *a, **k: _connect(  # type: ignore[assignment]
            _Relay(address, way, at, cut).address, *a, **k)
    torch.manual_seed(comm.rank)
    net = torch.nn.Linear(4, 2)
    t0 = time.monotonic()
    ps = None
    try:
        ps = tt.ParameterServer(net, lr=0.1, comm=comm)
        socket.create_connection = _connect  # type: ignore[assignment]
        for _ in range(4):
            net.zero_grad()
            net(torch.ones(1, 4) * (comm.rank + 1)).sum().backward()
            ps.step()
        ps.close()
    except Exception as e:  # reported, not raised: the test checks every rank's outcome
        elapsed = time.monotonic() - t0
        _drain(ps)
        return ("error", [c.__name__ for c in type(e).__mro__], str(e),
                getattr(e, "rank", None), getattr(e, "peer", None), elapsed)
    return ("ok", net.weight.detach().numpy().tolist(), "", comm.rank, None,
            time.monotonic() - t0)


def _drain(ps) -> None:  # type: ignore[no-untyped-def]
    """Close worker 1's end and let its relay forward what it holds: the relay's threads live
    in this worker's process and would die with it, taking a notice just sent to rank 0
    with them (a relay of its own process forwards it)."""
    conn = getattr(ps, "_conn", None)
    if conn is not None:
        conn.close()
    for relay in _RELAYS:
        for t in relay.pumps:
            t.join(timeout=5.0)


@pytest.mark.parametrize(("way", "at", "cut", "kind"), [
    # worker 1's second gradient altered: rank 0 fails its tag
    ("up", _UP_PREFIX + _MESSAGE + 12, False, "LinkTampered"),
    # rank 0's answer to worker 1's first step altered: worker 1 fails its tag
    ("down", _DOWN_PREFIX + _MESSAGE + 12, False, "LinkTampered"),
    # worker 1's second gradient cut off in the middle
    ("up", _UP_PREFIX + _MESSAGE + 20, True, "PeerLost"),
], ids=["altered-gradient", "altered-parameters", "cut-gradient"])
def test_a_tampered_parameter_server_link_fails_every_rank_within_the_deadline(
        way: str, at: int, cut: bool, kind: str) -> None:
    out = run_workers(_train, 3, timeout=4 * DEADLINE + 20, args=(way, at, cut),
                      collective_timeout=DEADLINE, expect_failure=True)
    for rank, (status, value) in enumerate(out):
        assert status == "ok", f"rank {rank} did not report: {status} {value}"
        result, kinds, message, err_rank, _, elapsed = value
        assert result == "error", f"rank {rank} trained on through the relay: {value}"
        assert elapsed < 2 * DEADLINE + 2, f"rank {rank} took {elapsed:.1f} s: {message}"
        assert f"rank {rank}" in message and err_rank == rank, (rank, message)
        assert "parameter server" in message or "parameter-server" in message, message
    # the detector's verdict on every rank: told over the direction still intact
    for rank, (_, value) in enumerate(out):
        assert kind in value[1], (rank, value[1], value[2])
