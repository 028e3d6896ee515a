"""Where the listeners listen: the address the job was given, every interface only if told.

The ``terascale rendezvous`` command and every rank's peer port, with real processes and
sockets (the runners', the multi-node launcher's, rank 0's and the torch backend's are
tested beside them: tests/engines, tests/launch/test_multinode.py, tests/test_init_env.py,
tests/torch/test_backend.py).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest
from _addresses import other_address

from terascale import ConfigError
from terascale._bind import bind_address, route_to
from terascale.rendezvous import RendezvousServer, join
from terascale.testing import listening

SECRET = "a-secret-for-the-bind-tests"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _addresses() -> list[str]:
    other = other_address()
    return ["127.0.0.1", "127.0.0.2"] + ([other] if other else [])


@pytest.mark.parametrize("how", ["default", "127.0.0.2", "interface", "--bind 0.0.0.0"])
def test_rendezvous_command_listens_on_the_host_it_was_given(how: str) -> None:
    host = {"default": "127.0.0.1", "--bind 0.0.0.0": "127.0.0.1",
            "interface": other_address()}.get(how, how)
    if host is None:
        pytest.skip("this host has no non-loopback IPv4 address")
    port = _port()
    argv = [sys.executable, "-m", "terascale", "rendezvous", "--port", str(port), "--size", "1",
            "--timeout", "60"]
    argv += {"default": [], "--bind 0.0.0.0": ["--bind", "0.0.0.0"]}.get(how, ["--host", host])
    env = dict(os.environ, TERASCALE_SECRET=SECRET)
    server = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not listening(port) and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert listening(port) == ["0.0.0.0" if how.startswith("--bind") else host]
        # A real worker joins at the address it was given; the command then exits 0.
        worker = subprocess.run(
            [sys.executable, "-c", "import terascale; terascale.init().close()"],
            env={**env, "TERASCALE_RANK": "0", "TERASCALE_SIZE": "1",
                 "TERASCALE_RENDEZVOUS": f"{host}:{port}"}, capture_output=True, text=True,
            timeout=60)
        assert worker.returncode == 0, worker.stderr
        assert server.wait(60) == 0
    finally:
        server.kill()
        server.wait()


def test_rendezvous_command_refuses_an_address_not_of_this_host() -> None:
    p = subprocess.run([sys.executable, "-m", "terascale", "rendezvous", "--host", "192.0.2.254",
                        "--port", str(_port()), "--size", "1"],
                       env=dict(os.environ, TERASCALE_SECRET=SECRET), capture_output=True,
                       text=True, timeout=60)
    if "192.0.2.254" in (other_address() or ""):
        pytest.skip("192.0.2.254 is this host's")
    assert p.returncode != 0
    assert "not an address of this host" in p.stderr and "--bind 0.0.0.0" in p.stderr, p.stderr


@pytest.mark.parametrize("host", _addresses())
def test_peer_port_listens_on_the_interface_that_reaches_the_rendezvous(host: str) -> None:
    with RendezvousServer(1, SECRET.encode(), host=host) as server:
        assert server.address[0] == host
        who = join(server.address, SECRET.encode(), slot=0, size=1, host_id="h", timeout=10)
        try:
            addr, port = who.listener.getsockname()[:2]
            # The kernel's source address towards the rendezvous: loopback for 127.x.
            assert addr == route_to(host) and addr != "0.0.0.0"
            assert listening(port) == [addr]
            assert who.endpoints == [f"{addr}:{port}"]  # what the other ranks are told to dial
        finally:
            who.listener.close()


def test_a_name_that_resolves_to_loopback_is_warned_about(caplog) -> None:  # type: ignore[no-untyped-def]
    name = socket.gethostname()
    resolved = socket.getaddrinfo(name, None, type=socket.SOCK_STREAM)[0][4][0]
    with caplog.at_level("WARNING", logger="terascale._bind"):
        assert bind_address("127.0.0.1") == "127.0.0.1"
        assert bind_address("localhost") in ("127.0.0.1", "::1")
        assert not caplog.records  # loopback given as loopback: nothing to say
        assert bind_address(name, what="--rendezvous host") == resolved
    if not resolved.startswith("127."):
        assert not caplog.records
    else:  # this host's name is loopback here: other machines could not reach it
        assert "resolves to" in caplog.text and "only this machine" in caplog.text


def test_bind_address_resolves_and_honours_the_opt_out() -> None:
    assert bind_address("127.0.0.1") == "127.0.0.1"
    assert bind_address("localhost") in ("127.0.0.1", "::1")
    assert bind_address("127.0.0.1", bind="0.0.0.0") == "0.0.0.0"
    with pytest.raises(ConfigError, match="no-such-host.invalid.*does not resolve.*check it"):
        bind_address("no-such-host.invalid", what="--host", hint="check it")
