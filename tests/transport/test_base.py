"""The transport interface: TCP implements it, shared memory and the collectives use only it."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

import terascale.transport as tr
from terascale._errors import CollectiveError, CollectiveMismatch, PeerLost
from terascale.transport._frames import ABORT, DATA, pack_desc, pack_header, unpack_header
from terascale.transport._tcp_exchange import TcpExchange
from terascale.transport.base import Exchange, GroupView, Transport

SRC = Path(tr.__file__).resolve().parent.parent


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            out.add("." * node.level + (node.module or ""))
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_tcp_implements_the_interface() -> None:
    assert issubclass(tr.TcpTransport, Transport) and issubclass(TcpExchange, Exchange)
    assert not TcpExchange.__abstractmethods__ and not tr.TcpTransport.__abstractmethods__


def test_shared_memory_and_collectives_use_only_the_interface() -> None:
    shm = _imports(SRC / "transport" / "shmgroup.py")
    assert not {".tcp", "._tcp_exchange", "._tcp_stream", "._tcp_blame"} & shm, shm
    for path in (SRC / "transport").glob("*.py"):  # launch sits above transport
        assert not any("launch" in m for m in _imports(path)), path
    for path in (SRC / "collectives").glob("*.py"):
        assert not any(m.endswith(("tcp", "_tcp_exchange", "_tcp_stream", "_tcp_blame",
                                   "communicator")) for m in
                       _imports(path)), path


def test_header_carries_the_context() -> None:
    h = pack_header(DATA, 7, 40, pack_desc("allreduce(ring,float32[10],sum)"), context=0xABC)
    kind, seq, nbytes, desc, context = unpack_header(h)  # type: ignore[misc]
    assert (kind, seq, nbytes, context) == (DATA, 7, 40, 0xABC)
    assert desc.rstrip(b"\0") == b"allreduce(ring,float32[10],sum)"
    assert unpack_header(pack_header(ABORT, 0, 3, pack_desc("abort")))[4] == 0  # type: ignore[index]
    assert unpack_header(b"x" * 128) is None


class _Recorder(Exchange):
    """An exchange that records what is posted to it (for the renumbering of GroupView)."""

    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size, self.origin = rank, size, 100 + rank
        self.seq, self.desc, self.what, self.deadline, self.started = 3, "d", "w", 1.0, 0.0
        self.tag = b"t"
        self.log: list[tuple[str, int]] = []

    def send(self, peer, payload):  # type: ignore[no-untyped-def]
        self.log.append(("send", peer))

    def recv(self, peer, into, then=None):  # type: ignore[no-untyped-def]
        self.log.append(("recv", peer))

    def run(self) -> None:
        self.log.append(("run", -1))

    def peer_name(self, peer: int) -> int:
        return 100 + peer

    def lost(self, peer: int, why: str) -> CollectiveError:
        return PeerLost(f"lost {self.peer_name(peer)}: {why}", peer=self.peer_name(peer))

    def mismatch(self, peer: int, theirs: str) -> CollectiveMismatch:
        return CollectiveMismatch(theirs, peer=self.peer_name(peer))

    def abort(self, err: CollectiveError) -> None:
        self.log.append(("abort", -1))

    def check_peer(self, peer, arrived):  # type: ignore[no-untyped-def]
        return False

    def waitable(self, peer: int) -> int:
        return peer


def test_group_view_renumbers_peers() -> None:
    parent = _Recorder(rank=4, size=6)
    view = parent.subgroup([1, 4, 5])
    assert isinstance(view, GroupView) and (view.rank, view.size) == (1, 3)
    assert (view.seq, view.tag, view.origin) == (3, b"t", 104)
    view.send(2, memoryview(bytes(1)))
    view.recv(0, memoryview(bytearray(1)))
    view.run()
    assert parent.log == [("send", 5), ("recv", 1), ("run", -1)]
    assert view.lost(0, "gone").peer == 101 and view.peer_name(2) == 105
    assert view.subgroup([0, 1]).rank == 1  # views of views
    try:
        parent.subgroup([0, 1])
    except ValueError as e:
        assert "rank 4" in str(e)
    else:
        raise AssertionError("a view that leaves this rank out must be refused")


def test_segment_names_are_per_job_group_and_context() -> None:
    from terascale.transport.segments import job_prefix, segment_name

    a = segment_name("j1", [0, 1])
    assert a.startswith(job_prefix("j1")) and a != segment_name("j1", [0, 2])
    assert segment_name("j1", [0, 1], context=5) != a
    assert np.unique([segment_name("j", [r, r + 1], c) for r in range(20) for c in (0, 9)]).size == 40
