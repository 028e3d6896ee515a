"""The machine-limits measurement under a stranger on its port: it never hangs."""

from __future__ import annotations

import socket
import time

import pytest

from terascale import TerascaleError
from terascale.bench import _limits


def _squat_every_listener(monkeypatch: pytest.MonkeyPatch, hold: float) -> list[socket.socket]:
    """A stranger connects to each new listener at once and sends nothing."""
    listen = socket.socket.listen
    held: list[socket.socket] = []

    def squatted(self: socket.socket, n: int = 0) -> None:
        listen(self, n)
        held.append(socket.create_connection(self.getsockname(), timeout=hold))

    monkeypatch.setattr(socket.socket, "listen", squatted)
    return held


def test_a_silent_stranger_first_on_the_port_is_dropped(monkeypatch):
    held = _squat_every_listener(monkeypatch, hold=10)
    monkeypatch.setattr(_limits, "_HELLO", 0.3)
    began = time.monotonic()
    assert _limits._tcp(8 << 20, True) > 0
    assert time.monotonic() - began < 10
    for s in held:
        s.close()


def test_a_peer_that_never_comes_is_an_error_not_a_hang(monkeypatch):
    monkeypatch.setattr(_limits, "_DEADLINE", 1.0)
    monkeypatch.setattr(_limits, "_peer", lambda *a: time.sleep(3))
    began = time.monotonic()
    with pytest.raises(TerascaleError, match="TCP loopback measurement failed"):
        _limits._tcp(1 << 20, False)
    assert time.monotonic() - began < 8
