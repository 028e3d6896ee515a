"""The machine's ceilings that bound any allreduce on it: memcpy, ``np.add``, TCP loopback.

An allreduce over shared memory cannot beat a few memory passes, and one over TCP cannot
beat the socket bandwidth with traffic in both directions at once (every rank sends and
receives at the same time). Printing these next to the results shows how close each system
comes to the physical limit.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass

import numpy as np

from .._errors import TerascaleError

__all__ = ["Limits", "measure_limits"]

_CHUNK = 1 << 20
# Every socket of the measurement has this deadline: a stranger that reaches the listener
# first, or a peer that dies, ends the measurement with an error instead of a hang.
_DEADLINE = 60.0
_TOKEN = 16  # the peer proves it is ours before the listener takes it
_HELLO = 2.0  # ... within this; a silent stranger is dropped after it


@dataclass(frozen=True)
class Limits:
    """Bandwidths in bytes per second (decimal GB/s = value / 1e9)."""

    memcpy: float
    add: float  # np.add(a, b, out=a): bytes of one operand per second
    tcp_one_way: float
    tcp_both_ways: float  # per direction, with both directions busy at once

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def _median_time(fn: object, reps: int) -> float:
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def _send_all(sock: socket.socket, nbytes: int) -> None:
    buf = memoryview(bytearray(_CHUNK))
    left = nbytes
    while left > 0:
        k = min(left, _CHUNK)
        sock.sendall(buf[:k])
        left -= k


def _recv_all(sock: socket.socket, nbytes: int) -> None:
    buf = memoryview(bytearray(_CHUNK))
    left = nbytes
    while left > 0:
        got = sock.recv_into(buf, min(left, _CHUNK))
        if got == 0:
            raise ConnectionError("peer closed the benchmark socket")
        left -= got


def _peer(port: int, nbytes: int, both: bool, token: bytes) -> None:
    s = socket.create_connection(("127.0.0.1", port), timeout=_DEADLINE)
    s.sendall(token)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sender = threading.Thread(target=_send_all, args=(s, nbytes)) if both else None
    if sender:
        sender.start()
    _recv_all(s, nbytes)
    if sender:
        sender.join()
    s.sendall(b"k")
    s.close()


def _tcp(nbytes: int, both: bool) -> float:
    """Per-direction bandwidth over loopback between two processes."""
    token = os.urandom(_TOKEN)
    lsock = socket.socket()
    lsock.bind(("127.0.0.1", 0))
    lsock.listen(8)
    lsock.settimeout(_DEADLINE)
    proc = mp.get_context("fork").Process(target=_peer, daemon=True,
                                          args=(lsock.getsockname()[1], nbytes, both, token))
    proc.start()
    conn = None
    try:
        conn = _accept_peer(lsock, token)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        t0 = time.perf_counter()
        recv = threading.Thread(target=_recv_all, args=(conn, nbytes), daemon=True) \
            if both else None
        if recv:
            recv.start()
        _send_all(conn, nbytes)
        if recv:
            recv.join(_DEADLINE)
            if recv.is_alive():
                raise TimeoutError(f"no data from the peer in {_DEADLINE:.0f} s")
        _recv_all(conn, 1)  # the peer has everything
        elapsed = time.perf_counter() - t0
    except OSError as e:  # socket.timeout is one
        raise TerascaleError(f"the TCP loopback measurement failed ({e}); its peer "
                             f"process exited with {proc.exitcode}") from e
    finally:
        if conn is not None:
            conn.close()
        lsock.close()
        proc.join(5)
        if proc.is_alive():
            proc.kill()
            proc.join()
    return nbytes / elapsed


def _accept_peer(lsock: socket.socket, token: bytes) -> socket.socket:
    """The connection of our own peer process: any other one (a stranger that found the
    port first) is closed, and the wait has the listener's deadline."""
    end = time.monotonic() + _DEADLINE
    while True:
        lsock.settimeout(max(0.1, end - time.monotonic()))
        conn, _ = lsock.accept()
        conn.settimeout(min(_HELLO, max(0.1, end - time.monotonic())))
        try:
            got = b""
            while len(got) < len(token):
                piece = conn.recv(len(token) - len(got))
                if not piece:
                    break
                got += piece
        except OSError:
            got = b""
        if got == token:
            conn.settimeout(_DEADLINE)
            return conn
        conn.close()
        if time.monotonic() >= end:
            raise TimeoutError("the peer process never connected")


def measure_limits(nbytes: int = 64 << 20, tcp_bytes: int = 256 << 20) -> Limits:
    """Measure the ceilings (about a second on an idle 2-core machine)."""
    a = np.ones(nbytes // 4, np.float32)
    b = np.ones_like(a)
    np.copyto(b, a)
    memcpy = nbytes / _median_time(lambda: np.copyto(b, a), 5)
    add = nbytes / _median_time(lambda: np.add(a, b, out=a), 5)
    one = max(_tcp(tcp_bytes, False) for _ in range(2))
    two = max(_tcp(tcp_bytes, True) for _ in range(2))
    return Limits(memcpy=memcpy, add=add, tcp_one_way=one, tcp_both_ways=two)
