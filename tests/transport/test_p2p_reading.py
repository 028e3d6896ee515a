"""Who reads a point-to-point link: the thread that waits on a receive reads its source's
link itself; what arrives with nobody waiting is read by the link's reader thread, promptly
enough that a sender never waits long for a receiver that is busy elsewhere."""

from __future__ import annotations

import secrets
import threading
import time

import numpy as np
import pytest

from terascale._errors import PeerLost, PeerTimeout
from terascale.transport.p2p import PointToPoint


@pytest.fixture()
def pair():  # type: ignore[no-untyped-def]
    secret = secrets.token_bytes(32)
    a, b = PointToPoint(0, 2, secret, timeout=10.0), PointToPoint(1, 2, secret, timeout=10.0)
    for p in (a, b):
        p.connect_to([a.address, b.address])
    yield a, b
    a.close()
    b.close()


def _recv(p: PointToPoint, src: int | None, tag: int, n: int, timeout: float = 10.0):  # type: ignore[no-untyped-def]
    out = np.zeros(n, np.float32)
    seen: list[str] = []
    req = p.post_recv(src, tag, memoryview(out), timeout,
                      lambda r: seen.append(threading.current_thread().name))
    return req, out, seen


def test_a_waited_receive_is_read_by_the_waiting_thread(pair) -> None:  # type: ignore[no-untyped-def]
    a, b = pair
    # the first message brings the link up (its reader delivers it)
    b.send(0, 0, memoryview(np.ones(4, np.float32)), 5.0)
    req, _, _ = _recv(a, 1, 0, 4)
    assert req.wait() == 1
    readers = []
    for i in range(1, 40):
        req, out, seen = _recv(a, 1, i, 1024)
        sender = threading.Timer(0.005, b.send, (0, i, memoryview(np.full(1024, i, np.float32)),
                                                 5.0))
        sender.start()
        assert req.wait() == 1
        sender.join()
        assert (out == i).all()
        assert len(seen) == 1
        readers.append(seen[0])
    # no hand-off: the waiting thread reads; on a loaded host it may be descheduled between
    # posting and waiting for longer than the sender's delay, and then the reader delivers
    assert readers.count(threading.current_thread().name) >= 30, readers
    # messages that came before their receives are read whole, in order
    for i in range(40, 50):
        b.send(0, 7, memoryview(np.full(300, i, np.float32)), 5.0)
    for i in range(40, 50):
        req, out, _ = _recv(a, 1, 7, 300)
        assert req.wait() == 1 and (out == i).all()


def test_what_nobody_waits_for_is_read_by_the_reader(pair) -> None:  # type: ignore[no-untyped-def]
    a, b = pair
    b.send(0, 0, memoryview(np.ones(4, np.float32)), 5.0)
    _recv(a, 1, 0, 4)[0].wait()
    # right after a waited receive (the reader leaves the link to waiters for a moment), a
    # receive nobody waits on still completes, by its callback, in the reader thread
    req, _, _ = _recv(a, 1, 1, 4)
    b.send(0, 1, memoryview(np.ones(4, np.float32)), 5.0)
    req.wait()
    done = threading.Event()
    req, out, seen = _recv(a, 1, 2, 4)
    req.callback = lambda r: (seen.append(threading.current_thread().name), done.set())
    b.send(0, 2, memoryview(np.full(4, 2, np.float32)), 5.0)
    assert done.wait(5.0)
    assert seen and seen[0] != threading.current_thread().name and (out == 2).all()
    # a message far larger than the socket buffers, with nobody waiting: the reader drains
    # it, so the send returns (it would block until a receive was waited on otherwise)
    big = np.arange(8 << 20, dtype=np.float32)  # 32 MiB
    start = time.monotonic()
    b.send(0, 3, memoryview(big), 10.0)
    assert time.monotonic() - start < 5.0
    req, out, _ = _recv(a, 1, 3, big.size)
    assert req.wait() == 1 and np.array_equal(out, big)


def test_waiting_readers_fail_by_the_deadline_and_on_a_lost_peer(pair) -> None:  # type: ignore[no-untyped-def]
    a, b = pair
    b.send(0, 0, memoryview(np.ones(4, np.float32)), 5.0)
    _recv(a, 1, 0, 4)[0].wait()
    req, _, _ = _recv(a, 1, 9, 4, timeout=0.3)
    start = time.monotonic()
    with pytest.raises(PeerTimeout, match="Timed out: rank 0 .* recv from peer 1 .tag 9"):
        req.wait()
    assert time.monotonic() - start < 3.0
    req, _, _ = _recv(a, 1, 10, 4, timeout=30.0)
    threading.Timer(0.2, b.close).start()
    start = time.monotonic()
    with pytest.raises(PeerLost, match="peer 1"):
        req.wait()
    assert time.monotonic() - start < 5.0
