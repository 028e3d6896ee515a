"""The admission bookkeeping shared by the rendezvous and the peer ports, on real sockets.

(The servers' own behaviour under idle strangers and slow-loris floods is tested end to end
in tests/rendezvous/test_security_and_slots.py.)
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from terascale._admission import Admission


@pytest.fixture
def server() -> Iterator[socket.socket]:
    s = socket.create_server(("127.0.0.1", 0), backlog=64)
    yield s
    s.close()


def _pair(server: socket.socket, source: str) -> tuple[socket.socket, socket.socket, str]:
    """(client, accepted connection, the source address the server saw)."""
    client = socket.socket()
    client.bind((source, 0))
    client.connect(server.getsockname())
    conn, who = server.accept()
    return client, conn, str(who[0])


def _was_shut(client: socket.socket) -> bool:
    """The server side shut the connection down: the client reads end-of-stream at once."""
    client.settimeout(2.0)
    try:
        return client.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def _alive(client: socket.socket) -> bool:
    client.settimeout(0.05)
    try:
        client.recv(1)
    except TimeoutError:
        return True
    return False


def test_a_source_over_its_cap_loses_its_oldest_only(server: socket.socket) -> None:
    adm = Admission(per_source=2)
    other, other_conn, b = _pair(server, "127.0.0.3")
    adm.admit(other_conn, b)
    mine = [_pair(server, "127.0.0.2") for _ in range(3)]
    for _, conn, src in mine:
        adm.admit(conn, src)
    assert _was_shut(mine[0][0])  # the slow-loris evicted its own oldest connection
    assert _alive(mine[1][0]) and _alive(mine[2][0]) and _alive(other)
    assert adm.pending == 3  # the evicted one is no longer pending, before its thread notices
    for s in [other, other_conn, *[x for c, conn, _ in mine for x in (c, conn)]]:
        s.close()


def test_total_cap_evicts_the_oldest_of_all_and_done_protects(server: socket.socket) -> None:
    adm = Admission(per_source=10, total=2)
    a = _pair(server, "127.0.0.2")
    b = _pair(server, "127.0.0.3")
    adm.admit(a[1], a[2])
    adm.admit(b[1], b[2])
    adm.done(a[1])  # a authenticated: no longer a candidate
    adm.done(a[1])  # idempotent
    c = _pair(server, "127.0.0.4")
    adm.admit(c[1], c[2])
    d = _pair(server, "127.0.0.5")
    adm.admit(d[1], d[2])  # over the total: the oldest pending (b) goes, not a
    assert _was_shut(b[0])
    assert _alive(a[0]) and _alive(c[0]) and _alive(d[0])
    adm.shut_all()
    assert _was_shut(c[0]) and _was_shut(d[0]) and _alive(a[0])
    for x in (*a[:2], *b[:2], *c[:2], *d[:2]):
        x.close()


def test_evict_without_a_source_and_with_nothing_pending(server: socket.socket) -> None:
    adm = Admission(per_source=4)
    adm.evict(None)  # nothing pending: nothing happens
    a = _pair(server, "127.0.0.2")
    adm.admit(a[1], a[2])
    adm.evict("127.0.0.9")  # no such source
    assert _alive(a[0])
    adm.evict(None)
    assert _was_shut(a[0])
    for x in a[:2]:
        x.close()


def test_drops_are_counted_and_summarized_in_one_line() -> None:
    adm = Admission(per_source=1)
    assert adm.summary("rendezvous") is None and adm.drops == 0
    for source in ("10.0.0.1", "10.0.0.1", "10.0.0.2"):
        adm.dropped("timed out", source)
    adm.dropped("wrong secret", "10.0.0.3")
    assert adm.drops == 4
    assert adm.summary("rendezvous") == ("rendezvous: dropped 4 connection(s) from 3 "
                                         "address(es) (3 timed out, 1 wrong secret)")
    assert adm.summary("rank 2", "to the peer port") == (
        "rank 2: dropped 4 connection(s) to the peer port from 3 address(es) "
        "(3 timed out, 1 wrong secret)")
