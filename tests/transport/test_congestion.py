"""The data links' TCP congestion control (terascale.transport._congestion): CUBIC by
default, the host's with ``system``, a named one or a clear error."""

from __future__ import annotations

import socket

import numpy as np
import pytest

from terascale import ConfigError
from terascale.testing import run_workers
from terascale.transport import listen
from terascale.transport._congestion import VARIABLE, choose, tune

pytestmark = pytest.mark.skipif(not hasattr(socket, "TCP_CONGESTION"),
                                reason="no per-socket congestion control on this platform")


def _allowed() -> set[str]:
    try:
        with open("/proc/sys/net/ipv4/tcp_allowed_congestion_control") as f:
            return set(f.read().split())
    except OSError:
        return set()


def _host_default() -> str:
    with open("/proc/sys/net/ipv4/tcp_congestion_control") as f:
        return f.read().strip()


def _algo(s: socket.socket) -> str:
    return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()


def _accepted(monkeypatch: pytest.MonkeyPatch, value: str | None) -> tuple[str, str]:
    """(listener's, accepted link's) congestion control with the variable at ``value``."""
    if value is None:
        monkeypatch.delenv(VARIABLE, raising=False)
    else:
        monkeypatch.setenv(VARIABLE, value)
    with listen("127.0.0.1") as srv, socket.create_connection(srv.getsockname(), 10):
        conn, _ = srv.accept()
        with conn:
            return _algo(srv), _algo(conn)


def test_choice_from_the_environment() -> None:
    assert choose({}) == ("cubic", False)
    assert choose({VARIABLE: " "}) == ("cubic", False)
    assert choose({VARIABLE: "system"}) == (None, False)
    assert choose({VARIABLE: "Reno"}) == ("reno", True)


@pytest.mark.skipif("cubic" not in _allowed(), reason="the kernel does not allow cubic")
def test_links_are_cubic_by_default_and_accepted_ones_inherit_it(monkeypatch) -> None:
    assert _accepted(monkeypatch, None) == ("cubic", "cubic")


def test_system_keeps_the_hosts_default(monkeypatch) -> None:
    assert _accepted(monkeypatch, "system") == (_host_default(),) * 2


def test_a_name_the_kernel_refuses_is_a_config_error(monkeypatch) -> None:
    monkeypatch.setenv(VARIABLE, "no-such-algorithm")
    with pytest.raises(ConfigError, match=f"{VARIABLE}=no-such-algorithm: the kernel refused"):
        listen("127.0.0.1")
    with socket.socket() as s, pytest.raises(ConfigError, match="allowed here"):
        tune(s)


def _sum(comm) -> list[float]:
    x = np.arange(4096, dtype=np.float32) * (comm.rank + 1)
    comm.allreduce(x, out=x)
    return x[:3].tolist()


@pytest.mark.skipif("reno" not in _allowed(), reason="the kernel does not allow reno")
def test_a_job_runs_with_a_named_algorithm() -> None:
    # Three "hosts": the ranks talk over TCP links set up with reno (the listener's
    # inheritance is checked above; this is the named path through a whole job).
    out = run_workers(_sum, 3, env={VARIABLE: "reno"}, host_ids=["a", "b", "c"])
    assert out == [[0.0, 6.0, 12.0]] * 3


def test_a_refused_name_fails_every_rank_with_its_name() -> None:
    out = run_workers(_sum, 2, env={VARIABLE: "no-such-algorithm"},
                      host_ids=["a", "b"], expect_failure=True, timeout=60)
    assert [kind for kind, _ in out] == ["error", "error"]
    for _, (exc_type, tb) in out:
        assert exc_type == "ConfigError" and f"{VARIABLE}=no-such-algorithm" in tb
