"""Two TCP meshes of one link on loopback, and running both ranks' sides at once.

Shared by the tests of the two-rank swap (tests/transport/test_tcp_swap.py) and of the
algorithms' two-rank fast paths (tests/collectives/test_pair.py); the on-path relays of the
tamper tests close their two sockets with :func:`shut_both`."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable

from terascale.transport.tcp import TcpTransport


def loopback_meshes() -> tuple[TcpTransport, TcpTransport]:
    """Ranks 0 and 1 of a two-rank mesh over one real TCP connection on loopback."""
    with socket.create_server(("127.0.0.1", 0)) as srv:
        a = socket.create_connection(srv.getsockname(), timeout=10)
        b, _ = srv.accept()
    return TcpTransport(0, {1: a}), TcpTransport(1, {0: b})


def run_both(a: Callable[[], None], b: Callable[[], None]) -> None:
    """Run ``a`` and ``b`` in two threads; both must end within 30 s; the first error
    either raised is raised here."""
    errors: list[BaseException] = []

    def guard(f: Callable[[], None]) -> None:
        try:
            f()
        except BaseException as e:  # re-raised in the test
            errors.append(e)

    threads = [threading.Thread(target=guard, args=(f,)) for f in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads)
    if errors:
        raise errors[0]


def shut_both(*socks: socket.socket) -> None:
    """Shut down each socket both ways, ignoring one that is already gone (a relay's two
    ends, so that the peers on either side see the end at once)."""
    for s in socks:
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
