"""Authenticated links (always) and encrypted ones (``TERASCALE_ENCRYPT=1``): same results,
nothing readable when encrypted, tampering aborts."""

from __future__ import annotations

import json
import select
import socket
import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

pytest.importorskip("cryptography")

from _tcp_pair import shut_both  # noqa: E402

from terascale import AuthError, CollectiveError  # noqa: E402
from terascale.communicator import Communicator  # noqa: E402
from terascale.testing import run_workers  # noqa: E402
from terascale.transport import connect_tcp, listen  # noqa: E402
from terascale.transport._secure import RECORD, RECORD_MAC, SecureLink, ciphers  # noqa: E402

SECRET = b"job-secret"


def _sums(comm) -> tuple[list[bytes], str]:
    out = []
    for algo in ("ring", "tree", "auto"):
        for n in (1, 1000, 700_001):  # 700,001 float64: many records per frame
            x = np.arange(n, dtype=np.float64) * (comm.rank + 1) / 7
            out.append(comm.allreduce(x, algorithm=algo).tobytes())
    return out, getattr(comm._transport.socks[(comm.rank + 1) % comm.size], "mode", "plain")


def test_every_link_mode_gives_the_same_bits() -> None:
    hosts = ["a", "b", "c"]  # one rank per host: every link is TCP
    plain = run_workers(_sums, 3, host_ids=hosts, timeout=120,
                        env={"TERASCALE_UNAUTHENTICATED_BENCHMARK": "1"})
    default = run_workers(_sums, 3, host_ids=hosts, timeout=120)
    secure = run_workers(_sums, 3, host_ids=hosts, timeout=120, env={"TERASCALE_ENCRYPT": "1"})
    assert {kind for _, kind in plain} == {"plain"}
    assert {kind for _, kind in default} == {"integrity"}
    assert {kind for _, kind in secure} == {"encrypt"}
    assert [bits for bits, _ in secure] == [bits for bits, _ in plain]
    assert [bits for bits, _ in default] == [bits for bits, _ in plain]


class _Proxy:
    """A man in the middle on loopback: forwards both ways, may flip one bit going up."""

    def __init__(self, target: tuple[str, int], flip_at: int | None) -> None:
        self.target, self.flip_at = target, flip_at
        self.up = bytearray()  # what the dialer sent, as seen on the wire
        self._lst = socket.create_server(("127.0.0.1", 0))
        self.address = self._lst.getsockname()[:2]
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        a, _ = self._lst.accept()
        b = socket.create_connection(self.target)
        threading.Thread(target=self._pump, args=(b, a, False), daemon=True).start()
        self._pump(a, b, True)

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        try:
            while chunk := src.recv(65536):
                if up:
                    data = bytearray(chunk)
                    at = len(self.up)
                    if self.flip_at is not None and at <= self.flip_at < at + len(data):
                        data[self.flip_at - at] ^= 0x10
                    self.up += chunk
                    chunk = bytes(data)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            shut_both(src, dst)


def _two_ranks_through(proxy_for, security: str) -> tuple[dict, dict, _Proxy]:
    listeners = [listen("127.0.0.1") for _ in range(2)]
    real = [lst.getsockname()[:2] for lst in listeners]
    proxy = proxy_for(real[0])
    addrs = {0: real, 1: [proxy.address, real[1]]}  # rank 1 reaches rank 0 via the proxy
    results: dict = {}
    errors: dict = {}

    def member(rank: int) -> None:
        try:
            mesh = connect_tcp(rank, 2, addrs[rank], listeners[rank], SECRET, "job",
                              time.monotonic() + 10, security=security)
            comm = Communicator(rank=rank, size=2, transport=mesh, timeout=10, job="job",
                                hosts=["a", "b"])
            try:
                x = np.full(4096, rank + 1.0, dtype=np.float32)
                y = float(comm.allreduce(x, algorithm="ring")[0])
                # Two ranks, 16 KiB: one swap, so a rank whose peer's frame was genuine may
                # finish it; the next collective is where it learns of the peer's failure.
                comm.barrier()
                results[rank] = y
            finally:
                comm.close()
        except Exception as e:
            errors[rank] = e

    threads = [threading.Thread(target=member, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results, errors, proxy


def _first_record_at(security: str) -> int:
    hello = json.dumps({"rank": 1, "job": "job", "security": security, "to": 0,
                        "ciphers": list(ciphers())}, separators=(",", ":")).encode()
    return 8 + 32 + 32 + 4 + len(hello) + 16  # handshake answer, sealed hello; then records


def test_wire_carries_no_header_or_payload_in_clear() -> None:
    results, errors, proxy = _two_ranks_through(lambda t: _Proxy(t, None), "integrity")
    assert not errors and results == {0: 3.0, 1: 3.0}
    assert b"TSF1" in proxy.up and b"allreduce" in proxy.up  # authenticated only: readable
    assert b"security" not in proxy.up  # the hello is sealed
    results, errors, proxy = _two_ranks_through(lambda t: _Proxy(t, None), "encrypt")
    assert not errors and results == {0: 3.0, 1: 3.0}
    wire = bytes(proxy.up[_first_record_at("encrypt"):])
    assert b"TSF1" not in wire and b"allreduce" not in wire
    assert np.full(4, 2.0, np.float32).tobytes() not in wire


@pytest.mark.parametrize("security", ["integrity", "encrypt"])
def test_flipped_bit_in_a_frame_is_an_auth_error_and_aborts_the_job(security: str) -> None:
    flip = _first_record_at(security) + 4 + 20  # inside the first record
    results, errors, _ = _two_ranks_through(lambda t: _Proxy(t, flip), security)
    assert not results
    assert isinstance(errors[0], AuthError) and isinstance(errors[0], CollectiveError)
    assert "rank 0: the link from rank 1 was tampered with" in str(errors[0])
    # The receiving rank aborts the job: rank 1 learns why instead of waiting out its deadline.
    assert isinstance(errors[1], CollectiveError)
    assert "aborted because rank 0 failed" in str(errors[1]) and "tampered" in str(errors[1])


def _link_pair(encrypt: bool = True) -> tuple[SecureLink, socket.socket, SecureLink, socket.socket]:
    """A sender whose wire we read raw, and a receiver we feed raw."""
    nonces = bytes(range(64))
    s_app, s_wire = socket.socketpair()
    r_app, r_wire = socket.socketpair()
    for s in (s_app, r_app, s_wire):
        s.setblocking(False)
    sender = SecureLink(s_app, SECRET, nonces, "job", dialer=1, acceptor=0, rank=1, peer=0,
                        encrypt=encrypt)
    receiver = SecureLink(r_app, SECRET, nonces, "job", dialer=1, acceptor=0, rank=0, peer=1,
                          encrypt=encrypt)
    return sender, s_wire, receiver, r_wire


def _record(sender: SecureLink, wire: socket.socket, data: bytes) -> bytes:
    assert sender.sendmsg([memoryview(data)]) == len(data)
    return wire.recv(1 << 20)


@pytest.mark.parametrize("encrypt", [False, True])
@pytest.mark.parametrize("order", ["replay", "reorder", "drop", "flip"])
def test_replayed_reordered_dropped_or_flipped_records_are_refused(order: str,
                                                                    encrypt: bool) -> None:
    sender, s_wire, receiver, r_wire = _link_pair(encrypt)
    first, second = _record(sender, s_wire, b"first"), _record(sender, s_wire, b"second")
    flipped = bytearray(first)
    flipped[6] ^= 1
    r_wire.sendall({"replay": first + first, "reorder": second + first, "drop": second,
                    "flip": bytes(flipped)}[order])
    buf = bytearray(64)
    with pytest.raises(AuthError, match="tampered with: record #"):
        n = receiver.recv_into(memoryview(buf))
        assert bytes(buf[:n]) == b"first"  # a replay: the first copy is genuine
        receiver.recv_into(memoryview(buf))
    with pytest.raises(AuthError):  # and the link stays refused
        receiver.recv(1)


def test_records_in_order_arrive_whole_and_peekable() -> None:
    sender, s_wire, receiver, r_wire = _link_pair()
    r_wire.sendall(_record(sender, s_wire, b"abc") + _record(sender, s_wire, b"defg"))
    assert receiver.recv(2, socket.MSG_PEEK) == b"ab"
    buf = bytearray(7)
    n, *_ = receiver.recvmsg_into([memoryview(buf)[:3], memoryview(buf)[3:]])
    assert n == 7 and bytes(buf) == b"abcdefg"
    with pytest.raises(BlockingIOError):
        receiver.recv(1)
    r_wire.close()
    assert receiver.recv(1) == b""


def _stream(sender: SecureLink, frames: list[list[bytes]]) -> None:
    for frame in frames:
        views = [memoryview(v) for v in frame if v]  # as the mesh: no empty views
        while views:
            try:
                n = sender.sendmsg(views)
            except BlockingIOError:
                select.select([], [sender], [], 1.0)
                continue
            while n and views:  # what the mesh does with the count
                if n >= len(views[0]):
                    n -= len(views[0])
                    views.pop(0)
                else:
                    views[0], n = views[0][n:], 0


@pytest.mark.parametrize("encrypt", [False, True])
def test_frames_of_every_size_arrive_bitwise_whatever_the_reads(encrypt: bool) -> None:
    """Headers with small payloads (one record), with large ones (the header alone, then the
    payload sealed from the caller's buffer), read as the mesh reads: a header and payload
    pair, then the payload's rest, in buffers smaller and larger than a record."""
    a, b = socket.socketpair()
    for s in (a, b):
        s.setblocking(False)
    nonces = bytes(range(64))
    sender = SecureLink(a, SECRET, nonces, "job", dialer=0, acceptor=1, rank=0, peer=1,
                        encrypt=encrypt)
    receiver = SecureLink(b, SECRET, nonces, "job", dialer=0, acceptor=1, rank=1, peer=0,
                          encrypt=encrypt)
    rng = np.random.default_rng(5)
    sizes = [0, 1, 4096, 65535, 65536, RECORD - 48, RECORD, RECORD + 1, 3 * RECORD + 7, 1 << 22]
    frames = [[rng.bytes(48), rng.bytes(n)] for n in sizes]
    t = threading.Thread(target=_stream, args=(sender, frames))
    t.start()
    try:
        for i, (header, payload) in enumerate(frames):
            got_h, got_p = bytearray(48), bytearray(len(payload))
            hg = pg = 0
            cap = [7, 1 << 20, 4096, 1 << 30][i % 4]  # the reader's buffer size
            while hg < 48 or pg < len(payload):
                try:
                    if i % 3 == 0 and hg == 0:  # the mesh peeks at headers, too
                        assert header.startswith(receiver.recv(48, socket.MSG_PEEK))
                    if hg < 48:
                        n = receiver.recvmsg_into([memoryview(got_h)[hg:],
                                                   memoryview(got_p)[pg: pg + cap]])[0]
                    else:
                        n = receiver.recv_into(memoryview(got_p)[pg: pg + cap])
                except BlockingIOError:
                    select.select([receiver], [], [], 1.0)
                    continue
                h = min(n, 48 - hg)
                hg, pg = hg + h, pg + n - h
            assert bytes(got_h) == header and bytes(got_p) == payload, sizes[i]
    finally:
        t.join(30)
    assert not t.is_alive()


@pytest.mark.parametrize("encrypt", [False, True])
def test_a_large_payloads_header_is_a_record_of_its_own(encrypt: bool) -> None:
    sender, s_wire, _, _ = _link_pair(encrypt)
    sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    header, payload = b"h" * 48, bytes(1 << 20)
    sent = sender.sendmsg([memoryview(header), memoryview(payload)])
    record = RECORD if encrypt else RECORD_MAC
    assert sent >= 48 + record and (sent - 48) % record == 0  # whole records, as many as fit
    wire = s_wire.recv(4 + 48 + 16 + 4)
    assert int.from_bytes(wire[:4], "big") == 48 + 16  # the header's record: the header alone
    # and the payload's first record with it (one system call), sealed from the caller's buffer
    assert int.from_bytes(wire[-4:], "big") == record + 16
    s_wire.recv(1 << 22)
    sender, s_wire, _, _ = _link_pair()
    assert sender.sendmsg([memoryview(header), memoryview(b"x" * 100)]) == 148
    assert sender._sent == 1  # noqa: SLF001 (small: one record)


@pytest.mark.parametrize("encrypt", [False, True])
def test_a_connection_closed_inside_a_record_is_tampering(encrypt: bool) -> None:
    sender, s_wire, receiver, r_wire = _link_pair(encrypt)
    record = _record(sender, s_wire, b"a whole record")
    r_wire.sendall(record[:-3])
    r_wire.close()
    with pytest.raises(AuthError, match="closed inside a record"):
        receiver.recv_into(memoryview(bytearray(64)))


def _outcome(receiver: SecureLink, room: int) -> str:
    """What reading a closed stream gives: ``eof``, ``tampered`` or ``data`` (bytes handed
    over)."""
    view = memoryview(bytearray(room))
    for _ in range(200):
        try:
            k = receiver.recv_into(view)
        except BlockingIOError:
            select.select([receiver], [], [], 0.5)
            continue
        except AuthError as e:
            assert "closed inside a record" in str(e), e
            return "tampered"
        return "eof" if k == 0 else "data"
    return "hang"


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "python"])
@pytest.mark.parametrize("encrypt", [False, True], ids=["integrity", "encrypt"])
@pytest.mark.parametrize("size", [14, 100_000])  # a small record; one read in place
def test_a_stream_cut_at_any_byte_of_a_record_hands_nothing_over(encrypt: bool, compiled: bool,
                                                                  size: int) -> None:
    """Cut in the length, the body or the tag, a record is never handed over (nor taken
    for a clean end); cut before it, the stream simply ended (``PeerLost`` above)."""
    sender, s_wire, _, _ = _link_pair(encrypt)
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    assert sender.sendmsg([memoryview(data)]) == size
    record = b""
    while len(record) < 4 + size + 16:
        record += s_wire.recv(1 << 20)
    n = len(record)
    cuts = range(n) if size < 64 else sorted({0, 1, 3, 4, 5, 4 + size // 2, n - 17, n - 16,
                                             n - 8, n - 1})
    for cut in cuts:
        _, _, receiver, r_wire = _link_pair(encrypt)
        if not compiled:
            receiver._c = None  # the pure-Python record layer (TERASCALE_NO_CEXT=1)
        r_wire.sendall(record[:cut])
        r_wire.close()
        assert _outcome(receiver, size) == ("eof" if cut == 0 else "tampered"), cut
        receiver.close()


_PROBE = ("import sys, numpy as np, terascale\n"
          "kw = {'encrypt': True} if sys.argv[1:] == ['ask'] else {}\n"
          "with terascale.init(timeout=20, **kw) as c:\n"
          "    link = getattr(c._transport.socks[1 - c.rank], 'mode', 'plain')\n"
          "    print(link, float(c.allreduce(np.ones(3))[0]))\n")


def test_terascale_run_encrypt_flag() -> None:
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("TERASCALE_")}
    res = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "2", "--hosts", "a,b",
                          "--encrypt", "--no-prefix", sys.executable, "-c", _PROBE],
                         capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n").count("encrypt 2.0") == 2, res.stdout


def test_one_rank_asking_encrypts_the_whole_job() -> None:
    import os
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERASCALE_")}
    procs = [subprocess.Popen(
        [sys.executable, "-c", _PROBE, *(["ask"] if r == 0 else [])], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        env={**env, "OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": "2",
             "TERASCALE_RENDEZVOUS": f"127.0.0.1:{port}", "TERASCALE_SECRET": "s",
             "TERASCALE_HOST_ID": f"host{r}"}) for r in range(2)]
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert out.strip() == "encrypt 2.0"  # init(encrypt=True) on rank 0 only


def _wire_of(sender: SecureLink, wire: socket.socket, views: list[bytes]) -> bytes:
    """What ``sender`` puts on the wire for one frame of ``views``, drained as it goes."""
    out = bytearray()
    t = threading.Thread(target=_stream, args=(sender, [views]))
    t.start()
    while t.is_alive() or select.select([wire], [], [], 0.05)[0]:
        try:
            out += wire.recv(1 << 20)
        except BlockingIOError:
            select.select([wire], [], [], 0.05)
    t.join()
    return bytes(out)


@pytest.mark.parametrize("extra", [0, 4])  # the payload record's length with the header's
@pytest.mark.parametrize("flip", [False, True])
def test_a_large_record_is_read_in_place_and_checked_before_it_is_handed_over(
        flip: bool, extra: int) -> None:
    sender, s_wire, receiver, r_wire = _link_pair(encrypt=False)
    header, payload = b"h" * 48, np.random.default_rng(1).bytes(RECORD)
    wire = bytearray(_wire_of(sender, s_wire, [header, payload]))
    head_len = 4 + 48 + 16  # the header's own record, then the payload's
    assert len(wire) == head_len + 4 + RECORD + 16
    if flip:
        wire[head_len + 4 + 1000] ^= 1
    got_h, got_p = bytearray(48), bytearray(RECORD)
    r_wire.sendall(wire[:head_len + extra])
    assert receiver.recvmsg_into([memoryview(got_h), memoryview(got_p)])[0] == 48
    half = head_len + 4 + RECORD // 2
    r_wire.sendall(wire[head_len + extra:half])
    with pytest.raises(BlockingIOError):  # half a record: nothing handed over yet
        receiver.recv_into(memoryview(got_p))
    assert receiver._dgot > 0  # noqa: SLF001 (it is being read in place)
    r_wire.sendall(wire[half:])
    if flip:
        with pytest.raises(AuthError, match="record #1 failed its authentication tag"):
            receiver.recv_into(memoryview(got_p))
    else:
        assert receiver.recv_into(memoryview(got_p)) == RECORD and bytes(got_p) == payload


@pytest.mark.parametrize("encrypt", [False, True])
def test_small_frames_through_a_tiny_send_buffer_arrive_whole_and_in_order(encrypt: bool) -> None:
    """Small frames are one record each, sealed and sent in one call; a kernel that takes a
    record in part leaves the rest pending for the next call. Read as the two-rank swap
    reads (header and payload scattered), several records per read when they queued."""
    sender, _, receiver, _ = _link_pair(encrypt)
    a, b = socket.socketpair()
    for s in (a, b):
        s.setblocking(False)
    a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    sender._sock, receiver._sock = a, b  # noqa: SLF001 (one wire, a small send buffer)
    rng = np.random.default_rng(7)
    frames = [[rng.bytes(48), rng.bytes(int(n))] for n in rng.integers(0, 60_000, 120)]
    t = threading.Thread(target=_stream, args=(sender, frames))
    t.start()
    try:
        got = bytearray()
        want = b"".join(h + p for h, p in frames)
        buf = bytearray(48 + 60_000)
        while len(got) < len(want):
            n_h = 48
            try:
                n = receiver.recvmsg_into([memoryview(buf)[:n_h], memoryview(buf)[n_h:]])[0]
            except BlockingIOError:
                select.select([receiver], [], [], 1.0)
                continue
            got += buf[:n]
        assert bytes(got) == want
    finally:
        t.join(30)
    assert not t.is_alive()


@pytest.mark.parametrize("encrypt", [False, True])
def test_a_flipped_bit_in_a_small_scattered_record_hands_nothing_over(encrypt: bool) -> None:
    sender, s_wire, receiver, r_wire = _link_pair(encrypt)
    header, payload = b"h" * 48, b"p" * 4096
    assert sender.sendmsg([memoryview(header), memoryview(payload)]) == 48 + 4096
    wire = bytearray(s_wire.recv(1 << 20))
    assert len(wire) == 4 + 48 + 4096 + 16  # one record
    wire[4 + 48 + 100] ^= 1
    r_wire.sendall(wire)
    got_h, got_p = bytearray(48), bytearray(4096)
    with pytest.raises(AuthError, match="record #0 failed its authentication tag"):
        receiver.recvmsg_into([memoryview(got_h), memoryview(got_p)])
    assert not any(got_h) and not any(got_p)


def _connect_three(view: Callable[[list], dict], late: int | None = None
                   ) -> tuple[dict, dict]:
    """Three ranks connect, each over its view of the others' addresses (``view(real)``:
    rank -> the three addresses it dials; rank ``late`` starts a second late): what each
    raised and how long it took."""
    listeners = [listen("127.0.0.1") for _ in range(3)]
    addrs = view([lst.getsockname()[:2] for lst in listeners])
    errors: dict = {}
    took: dict = {}

    def member(rank: int) -> None:
        if rank == late:
            time.sleep(1.0)
        start = time.monotonic()
        try:
            connect_tcp(rank, 3, addrs[rank], listeners[rank], SECRET, "job",
                        time.monotonic() + 3).close()
        except Exception as e:
            errors[rank] = e
        took[rank] = time.monotonic() - start

    threads = [threading.Thread(target=member, args=(r,)) for r in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    return errors, took


def test_a_connection_reflected_to_the_dialers_own_port_is_refused_at_connect() -> None:
    """Rank 1's connection to rank 0, sent back on the path to rank 1's own peer port (where
    it accepts rank 2): the dialer then answers its own challenge and the handshake passes
    (both ends hold the secret), but the sealed hello names its target, so rank 1's acceptor
    refuses it and its dialer fails at once with an AuthError -- no rank ever takes itself
    for a peer."""
    # rank 1's rank 0: itself; rank 2 starts later, so rank 1's port still vets (it waits
    # for rank 2) when the reflected connection arrives
    errors, took = _connect_three(lambda real: {0: real, 1: [real[1], real[1], real[2]],
                                                2: real}, late=2)
    assert isinstance(errors.get(1), AuthError), errors
    assert "rank 1: the connection to rank 0" in str(errors[1])
    assert "reached rank 1 instead" in str(errors[1])
    assert took[1] < 2  # at connect, not at the deadline
    assert 0 in errors  # rank 0 never gets rank 1's link: it does not run


def test_a_connection_redirected_to_another_rank_fails_at_connect_naming_both() -> None:
    """Rank 2's connection meant for rank 0 reaches rank 1 (a redirect on the path, or a
    stale address): the sealed hello names its target, so rank 1 refuses it and says who it
    is, and rank 2 fails at once with an AuthError naming both ranks -- rather than rank 1
    taking it for rank 2's own link and the job failing later."""
    # rank 2's rank 0 is rank 1
    errors, took = _connect_three(lambda real: {0: real, 1: real,
                                                2: [real[1], real[1], real[2]]})
    assert isinstance(errors.get(2), AuthError), errors
    assert "rank 2: the connection to rank 0" in str(errors[2])
    assert "reached rank 1 instead" in str(errors[2])
    assert took[2] < 2  # at connect, not at the deadline
    assert set(errors) == {0, 1, 2}  # the others never see rank 2's links: nobody runs


def test_a_hello_altered_on_the_path_fails_the_dialer_at_connect() -> None:
    """A relay flips one bit of rank 1's sealed hello to rank 0. The handshake before it
    passed (both ends hold the secret), so rank 0 answers, sealed, that the hello failed its
    tag, and rank 1 fails at once with an AuthError naming both ranks and the altered hello,
    instead of dialling again through the same relay until its deadline."""
    hello_body = 8 + 32 + 32 + 4 + 10  # handshake answer, the hello's length, into its body
    listeners = [listen("127.0.0.1") for _ in range(2)]
    real = [lst.getsockname()[:2] for lst in listeners]
    proxy = _Proxy(real[0], hello_body)
    addrs = {0: real, 1: [proxy.address, real[1]]}
    errors: dict = {}
    took: dict = {}

    def member(rank: int) -> None:
        start = time.monotonic()
        try:
            connect_tcp(rank, 2, addrs[rank], listeners[rank], SECRET, "job",
                        time.monotonic() + 3).close()
        except Exception as e:
            errors[rank] = e
        took[rank] = time.monotonic() - start

    threads = [threading.Thread(target=member, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert isinstance(errors.get(1), AuthError), errors
    assert "rank 1: connection to rank 0 refused" in str(errors[1]), errors
    assert "hello" in str(errors[1]) and "failed its authentication tag" in str(errors[1])
    assert took[1] < 2  # at connect, not at the deadline
    assert 0 in errors  # rank 0 never gets rank 1's link: it does not run
