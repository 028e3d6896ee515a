"""The parameter-server baseline's port, as a stranger on the host sees it: it appears in
``/proc/net/tcp`` the moment rank 0 listens, and anyone may connect before the workers do.
Idle strangers there must not stop the job (they once held rank 0's one accept loop, and so
every worker, forever), and the job's result must be the one it computes without them."""

from __future__ import annotations

import socket
import threading
import time

import pytest

torch = pytest.importorskip("torch")
import terascale.torch as tt  # noqa: E402
from terascale.testing import run_workers  # noqa: E402


def _listening() -> set[int]:
    ports = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state == "0A" and local.startswith("0100007F:"):
                ports.add(int(local.split(":")[1], 16))
    return ports


def _squat(before: set[int], held: list[tuple[int, socket.socket]],
           stop: threading.Event) -> None:
    """Connect three idle sockets to every new loopback listener, as soon as it appears."""
    while not stop.is_set():
        for port in _listening() - before:
            before.add(port)
            for _ in range(3):
                try:
                    held.append((port, socket.create_connection(("127.0.0.1", port),
                                                                timeout=1)))
                except OSError:
                    pass


def _train(comm, squat):  # type: ignore[no-untyped-def]
    held: list[tuple[int, socket.socket]] = []
    stop = threading.Event()
    if squat and comm.rank == 0:
        threading.Thread(target=_squat, args=(_listening(), held, stop), daemon=True).start()
    comm.barrier()
    real = socket.create_connection
    if squat and comm.rank == 1:  # dial a moment late: the port closes once every worker is in
        def late(*a, **k):  # type: ignore[no-untyped-def]
            time.sleep(1.0)
            return real(*a, **k)
        socket.create_connection = late  # type: ignore[assignment]
    torch.manual_seed(comm.rank)
    net = torch.nn.Linear(4, 2)
    ps = tt.ParameterServer(net, lr=0.1, comm=comm)
    socket.create_connection = real  # type: ignore[assignment]
    if squat and comm.rank == 0:  # the stranger holds the server's port before any step
        deadline = time.monotonic() + 20
        while ps.address[1] not in {p for p, _ in held} and time.monotonic() < deadline:
            time.sleep(0.01)
    t0 = time.monotonic()
    for _ in range(2):
        net.zero_grad()
        net(torch.ones(1, 4) * (comm.rank + 1)).sum().backward()
        ps.step()
    ps.close()
    stop.set()
    for _, s in held:
        s.close()
    squatted = sum(p == ps.address[1] for p, _ in held)
    return net.weight.detach().numpy().tobytes(), time.monotonic() - t0, squatted


def test_idle_strangers_on_the_parameter_servers_port_do_not_stop_the_job() -> None:
    clean = run_workers(_train, 2, timeout=60, args=(False,))
    squatted = run_workers(_train, 2, timeout=60, args=(True,))
    assert squatted[0][2] > 0, "the stranger never found the port"
    assert [r[0] for r in squatted] == [r[0] for r in clean]  # the same weights, bitwise
    assert max(r[1] for r in squatted) < 20, squatted


def test_a_parameter_server_message_altered_replayed_or_reflected_is_refused() -> None:
    """What a relay could do to the sealed messages: flip a bit, replay one, or send a
    side's own message back to it. Each ends in LinkTampered naming both ranks."""
    import os

    from terascale._errors import LinkTampered
    from terascale.torch.ps import _Sealed

    key, nonces = os.urandom(32), os.urandom(64)
    wire_a, wire_b = socket.socketpair()  # worker -> relay
    in_a, in_b = socket.socketpair()  # relay -> rank 0
    worker = _Sealed(wire_a, key, nonces, dialer=True, rank=1, peer=0, limit=64)
    server = _Sealed(in_b, key, nonces, dialer=False, rank=0, peer=1, limit=64)
    deadline = time.monotonic() + 5

    def captured(msg: bytes) -> bytes:
        worker.send(msg, deadline)
        return wire_b.recv(1 << 16)

    first = captured(b"g" * 32)
    in_a.sendall(first)
    assert server.recv(deadline) == b"g" * 32
    for attack in ("flip", "replay", "reflect"):
        if attack == "flip":
            raw = bytearray(captured(b"h" * 32))
            raw[12] ^= 1
            in_a.sendall(bytes(raw))
        elif attack == "replay":
            in_a.sendall(first)
        else:  # the server's own message, sent back to it
            out_a, out_b = socket.socketpair()
            echo = _Sealed(out_a, key, nonces, dialer=False, rank=0, peer=1, limit=64)
            echo.send(b"p" * 32, deadline)
            in_a.sendall(out_b.recv(1 << 16))
        fresh = _Sealed(in_b, key, nonces, dialer=False, rank=0, peer=1, limit=64)
        fresh._opened = 1  # the next message it expects is the worker's second
        with pytest.raises(LinkTampered, match="rank 0: parameter-server link with rank 1"):
            fresh.recv(deadline)


def _flooded(comm, n_idle):  # type: ignore[no-untyped-def]
    """Rank 0 floods its own server port with idle connections before worker 1 (held back
    a moment) dials; returns the most vetting threads rank 0 held, and the weights."""
    real = socket.create_connection
    if comm.rank == 1:  # the only connection made after init is the parameter server's
        def late(*a, **k):  # type: ignore[no-untyped-def]
            time.sleep(3.5)
            return real(*a, **k)
        socket.create_connection = late  # type: ignore[assignment]
    net = torch.nn.Linear(4, 2)
    ps = tt.ParameterServer(net, lr=0.1, comm=comm)
    socket.create_connection = real  # type: ignore[assignment]
    most, idle = 0, []
    if comm.rank == 0:  # connected without waiting, as a flood would
        for _ in range(n_idle):
            s = socket.socket()
            s.setblocking(False)
            s.connect_ex(ps.address)
            idle.append(s)
        end = time.monotonic() + 3.2
        while time.monotonic() < end:
            most = max(most, sum(t.name == "terascale-ps-serve" for t in threading.enumerate()))
            time.sleep(0.02)
    net.zero_grad()
    net(torch.ones(1, 4) * (comm.rank + 1)).sum().backward()
    ps.step()
    ps.close()
    for s in idle:
        s.close()
    return most, net.weight.detach().numpy().tobytes()


def test_a_flood_of_idle_connections_holds_a_bounded_number_of_threads() -> None:
    out = run_workers(_flooded, 2, timeout=60, args=(600,))
    assert out[0][1] == out[1][1]  # the job went on
    assert out[0][0] <= 30, f"rank 0 held {out[0][0]} vetting threads for 600 idle strangers"
