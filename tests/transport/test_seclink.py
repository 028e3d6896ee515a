"""The compiled record layer of authenticated links (``transport/_seclink.c``): built in CI,
the same bytes on the wire as the ``cryptography`` path, so either end may run either, and
a record that fails its tag hands nothing over."""

from __future__ import annotations

import os
import socket
import time

import numpy as np
import pytest

pytest.importorskip("cryptography")

from terascale import AuthError  # noqa: E402
from terascale.transport import _secure  # noqa: E402
from terascale.transport._secure import SecureLink  # noqa: E402
from terascale.transport._tcp_stream import drop_sent  # noqa: E402

SECRET = b"job-secret"
compiled = _secure._records(b"\0" * 32, b"\0" * 32, False) is not None
needs_c = pytest.mark.skipif(not compiled, reason="transport._seclink is not built here")


def test_the_record_layer_is_built_in_ci() -> None:
    """CI builds the package from source: a broken C build must fail here, not fall back."""
    if os.environ.get("CI") != "true":
        pytest.skip("only asserted in CI (CI=true)")
    assert compiled, "transport/_seclink.c was not built (libssl-dev missing?)"


def _pair(encrypt: bool, c_sender: bool, c_receiver: bool,
          cipher: str = _secure.GCM) -> tuple[SecureLink, SecureLink]:
    """Two ends of a link over a socket pair; an end without ``c_*`` runs the Python record
    path (under AEGIS-256X4 that path still seals through the compiled cipher)."""
    a, b = socket.socketpair()
    for s in (a, b):
        s.setblocking(False)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    nonces = bytes(range(64))
    tx = SecureLink(a, SECRET, nonces, "job", dialer=0, acceptor=1, rank=0, peer=1,
                    encrypt=encrypt, cipher=cipher)
    rx = SecureLink(b, SECRET, nonces, "job", dialer=0, acceptor=1, rank=1, peer=0,
                    encrypt=encrypt, cipher=cipher)
    if not c_sender:
        tx._c = None
    if not c_receiver:
        rx._c = None
    return tx, rx


def _receive(rx: SecureLink, head: bytearray, body: bytearray) -> None:
    views = [memoryview(head), memoryview(body)]
    total = len(head) + len(body)
    got = 0
    while got < total:
        n = rx.recvmsg_into([v for v in views if len(v)])[0]
        assert n > 0
        got += n
        while n:
            k = min(n, len(views[0]))
            views[0], n = views[0][k:], n - k
            if not len(views[0]) and len(views) > 1:
                views.pop(0)


# a test's mode: its link mode, and the cipher or MAC ("amac": AEGISMAC-128X4)
_CIPHER = {"integrity": _secure.GCM, "encrypt": _secure.GCM, "aegis": _secure.AEGIS,
           "amac": _secure.AEGISMAC}


def _needs_amac(mode: str) -> None:
    if mode == "amac" and _secure.AEGISMAC not in _secure.ciphers("integrity"):
        pytest.skip("AEGISMAC-128X4 needs the compiled record layer and AES instructions")


@needs_c
@pytest.mark.parametrize("mode", ["integrity", "amac", "encrypt", "aegis"])
@pytest.mark.parametrize("ends", [(True, False), (False, True), (True, True)])
def test_compiled_and_python_ends_understand_each_other(mode: str,
                                                        ends: tuple[bool, bool]) -> None:
    """Frames of every size around the compiled layer's limit, both ways round: each
    arrives bitwise, whichever end seals or opens it in C."""
    _needs_amac(mode)
    tx, rx = _pair(mode in ("encrypt", "aegis"), *ends, cipher=_CIPHER[mode])
    rng = np.random.default_rng(7)
    for size in (1, 100, 4096, _secure._C_MAX - 128, _secure._C_MAX - 127, _secure._C_MAX,
                 50_000, 200_000):
        head, payload = rng.bytes(128), rng.bytes(size)
        sent = 0
        views = [memoryview(head), memoryview(payload)]
        while sent < len(head) + len(payload):
            k = tx.sendmsg(views)
            tx.flush()
            sent += k
            drop_sent(views, k)
        assert tx.flush()
        got_h, got_p = bytearray(128), bytearray(size)
        _receive(rx, got_h, got_p)
        assert bytes(got_h) == head and bytes(got_p) == payload, size


@needs_c
@pytest.mark.parametrize("encrypt", [False, True])
def test_the_compiled_layer_writes_the_pythons_bytes(encrypt: bool) -> None:
    """One frame sealed by each path under the same keys and sequence number: the same
    record on the wire."""
    wires = []
    for c in (True, False):
        a, b = socket.socketpair()
        tx = SecureLink(a, SECRET, bytes(64), "job", dialer=0, acceptor=1, rank=0, peer=1,
                        encrypt=encrypt)
        if not c:
            tx._c = None
        assert tx.sendmsg([b"h" * 128, b"p" * 4096]) == 128 + 4096
        wires.append(b.recv(1 << 16))
        a.close()
        b.close()
    assert wires[0] == wires[1] and len(wires[0]) == 4 + 128 + 4096 + 16


@needs_c
@pytest.mark.parametrize("mode", ["integrity", "amac", "encrypt", "aegis"])
@pytest.mark.parametrize("where", [0, 4 + 5, -1])
def test_a_tampered_compiled_record_hands_nothing_over(mode: str, where: int) -> None:
    """A bit flipped in the length, the body or the tag: AuthError, the caller's buffers
    untouched (zero), and the link refused from then on."""
    _needs_amac(mode)
    a, wire_in = socket.socketpair()
    wire_out, b = socket.socketpair()
    for s in (a, b):
        s.setblocking(False)
    encrypt, cipher = mode in ("encrypt", "aegis"), _CIPHER[mode]
    tx = SecureLink(a, SECRET, bytes(64), "job", dialer=0, acceptor=1, rank=0, peer=1,
                    encrypt=encrypt, cipher=cipher)
    rx = SecureLink(b, SECRET, bytes(64), "job", dialer=0, acceptor=1, rank=1, peer=0,
                    encrypt=encrypt, cipher=cipher)
    assert tx.sendmsg([b"h" * 128, b"p" * 2048]) == 128 + 2048
    record = bytearray(wire_in.recv(1 << 16))
    record[3 if where == 0 else where] ^= 1  # the length's low byte: a record of 1 byte less
    wire_out.sendall(bytes(record))
    got_h, got_p = bytearray(128), bytearray(2048)
    with pytest.raises(AuthError, match="tampered"):
        for _ in range(3):  # a shorter record may be read as one that has not ended yet
            try:
                rx.recvmsg_into([memoryview(got_h), memoryview(got_p)])
            except BlockingIOError:
                wire_out.close()  # the stream ends inside it: tampering too
    assert not any(got_h) and not any(got_p)
    with pytest.raises(AuthError):
        rx.recvmsg_into([memoryview(got_h), memoryview(got_p)])


@needs_c
def test_one_thread_may_send_while_another_receives_on_the_same_link() -> None:
    """As on a socket: each end sends from one thread and receives from another, both ways
    at once; every frame arrives, in order."""
    import select
    import threading

    tx, rx = _pair(False, True, True)
    count, results = 500, {}

    def send(link: SecureLink) -> None:
        for i in range(count):
            frame = i.to_bytes(4, "little") * 25
            while link.sendmsg([frame]) != 100 or not link.flush():
                select.select([], [link], [], 1.0)

    def recv(link: SecureLink, name: str) -> None:
        buf, seen = bytearray(100), []
        while len(seen) < count:
            try:
                n = link.recvmsg_into([memoryview(buf)])[0]
            except BlockingIOError:
                select.select([link], [], [], 1.0)
                continue
            assert n == 100
            seen.append(int.from_bytes(buf[:4], "little"))
        results[name] = seen

    threads = [threading.Thread(target=send, args=(tx,)), threading.Thread(target=send, args=(rx,)),
               threading.Thread(target=recv, args=(rx, "rx")),
               threading.Thread(target=recv, args=(tx, "tx"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert results == {"rx": list(range(count)), "tx": list(range(count))}


fast = compiled and _secure._records(b"\0" * 32, b"\0" * 32, False).fast
needs_fast = pytest.mark.skipif(not fast, reason="no VPCLMULQDQ GHASH on this CPU")


@needs_fast
def test_the_compiled_ghash_gives_gcms_tags_at_every_length() -> None:
    """GMAC on the compiled VPCLMULQDQ GHASH (``_ghash.c``) against ``cryptography``'s
    AES-GCM, random keys and nonces, every length up to 1100 bytes (every tail and the
    4-block and 64-block steps' edges) and random ones to 300 KiB; a flipped bit is
    refused. Every other length through libcrypto's GCM instead (``fast=False``), the
    path of CPUs without VPCLMULQDQ."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    from terascale.transport._seclink import Records

    rng = np.random.default_rng(31)
    lengths = [*range(1101), *(512 * k + d for k in range(2, 9) for d in (-17, -1, 1, 15)),
               *rng.integers(0, 300 << 10, 40).tolist()]
    for i, n in enumerate(lengths):
        key, seq, kind = rng.bytes(32), int(rng.integers(0, 2**63)), int(rng.integers(0, 2))
        records = Records(key, key, False, fast=i % 2 == 0)  # and libcrypto's GCM, the fallback
        data = rng.bytes(n)
        want = AESGCM(key).encrypt(_secure._NONCE.pack(kind, seq), b"", data)
        assert records.tag(seq, kind, data) == want, n
        assert records.check(seq, kind, data, want)
        if n:
            bad = bytearray(data)
            bad[int(rng.integers(0, n))] ^= 1 << int(rng.integers(0, 8))
            assert not records.check(seq, kind, bytes(bad), want)


@needs_fast
def test_links_with_and_without_the_compiled_ghash_understand_each_other() -> None:
    """Large integrity records tagged by the compiled GHASH are checked by the ``cryptography``
    path (and back): the wire does not change with the CPU."""
    for ends in ((True, False), (False, True)):
        tx, rx = _pair(False, *ends)
        rng = np.random.default_rng(5)
        for size in (_secure._C_MAX + 1, 200_000, _secure.RECORD_MAC + 12_345):
            head, payload = rng.bytes(128), rng.bytes(size)
            views = [memoryview(head), memoryview(payload)]
            got_h, got_p = bytearray(128), bytearray(size)
            sent = 0
            rviews = [memoryview(got_h), memoryview(got_p)]
            deadline = time.monotonic() + 30
            while sent < len(head) + len(payload) or rviews:
                assert time.monotonic() < deadline, "the frame did not arrive in 30 s"
                if sent < len(head) + len(payload):
                    k = tx.sendmsg(views)
                    sent += k
                    drop_sent(views, k)
                tx.flush()
                try:
                    n = rx.recvmsg_into(rviews)[0]
                except BlockingIOError:
                    continue
                while n:
                    d = min(n, len(rviews[0]))
                    rviews[0], n = rviews[0][d:], n - d
                    if not len(rviews[0]):
                        rviews.pop(0)
            assert bytes(got_h) == head and bytes(got_p) == payload, size


# AEGIS-256X4 (draft-irtf-cfrg-aegis-aead, test vector A.3 for AEGIS-256X4, 128-bit tag)
_KAT_KEY = bytes(range(32))
_KAT_NONCE = bytes(range(16, 48))
_KAT_AD = bytes([1, 2, 3, 4]) * 2
_KAT_MSG = bytes([4, 5, 6, 7]) * 30
_KAT_CT = bytes.fromhex(
    "bfc2085b7e8017da99b0b6d646ae4d01f4ba8f2e7dfca1d759ae48a135139b9aaac6b4f5db810d426be1fd"
    "aff4e1454153a34b11da78ed7e418ee2ee9853042e95536aecbb694cea1b16a478eb0d4d1bf6509b1ce652"
    "a45af58e0e46ffccfa2d0426e702391d2ff5813808b81748a490dd656465fed61f09")
_KAT_TAG = bytes.fromhex("b63b611b13975e2f3dc3cb6c2397bfcd")


@needs_c
def test_aegis_256x4_gives_the_drafts_test_vector() -> None:
    """The vendored libaegis, through the record layer's calls: the draft's ciphertext and
    tag, the message back from them, and a flipped bit of either refused with the
    destination wiped."""
    records = _secure._records(_KAT_KEY, _KAT_KEY, True, _secure.AEGIS)
    assert records.cipher == _secure.AEGIS
    out = bytearray(len(_KAT_MSG) + 16)
    records.seal(_KAT_NONCE, _KAT_MSG, _KAT_AD, out)
    assert bytes(out) == _KAT_CT + _KAT_TAG
    back = bytearray(len(_KAT_MSG))
    assert records.open(_KAT_NONCE, bytes(out), _KAT_AD, back) and bytes(back) == _KAT_MSG
    for at in (0, len(_KAT_MSG) + 3):  # the ciphertext, the tag
        bad = bytearray(out)
        bad[at] ^= 0x80
        back = bytearray(b"x" * len(_KAT_MSG))
        assert not records.open(_KAT_NONCE, bytes(bad), _KAT_AD, back)
        assert not any(back)


@needs_c
def test_a_large_aegis_record_round_trips_and_a_flipped_bit_is_wiped() -> None:
    """Records above the size that is sealed and opened in prefetched steps: every length
    around a step's edge comes back bitwise; a bit flipped anywhere is refused and leaves
    the destination zero."""
    records = _secure._records(_KAT_KEY, _KAT_KEY, True, _secure.AEGIS)
    rng = np.random.default_rng(3)
    for n in (64 << 10, (64 << 10) + 1, 200_003, 256 << 10):
        data = rng.bytes(n)
        out = bytearray(n + 16)
        records.seal(bytes(12), data, b"head", out)
        back = bytearray(n)
        assert records.open(bytes(12), bytes(out), b"head", back) and bytes(back) == data
        assert not records.open(bytes(12), bytes(out), b"hea!", back) and not any(back)
        bad = bytearray(out)
        bad[n - 4097] ^= 1
        back = bytearray(b"x" * n)
        assert not records.open(bytes(12), bytes(bad), b"head", back) and not any(back)


@needs_c
def test_an_aegis_record_is_the_documented_construction() -> None:
    """A record on an AEGIS-256X4 link is ``len | AEGIS-256X4(key, nonce, plaintext, ad=len)
    | tag``, the key from HKDF labelled with the cipher, the 32-byte nonce the record's
    kind and sequence number zero-padded: rebuilt here from those parts alone."""
    a, b = socket.socketpair()
    tx = SecureLink(a, SECRET, bytes(64), "job", dialer=0, acceptor=1, rank=0, peer=1,
                    encrypt=True, cipher=_secure.AEGIS)
    frame = b"h" * 128 + b"p" * 4096
    for seq in range(2):
        assert tx.sendmsg([frame[:128], frame[128:]]) == len(frame)
        wire = b.recv(1 << 16)
        key = _secure.link_keys(SECRET, bytes(64), "job", 0, 1, "encrypt", _secure.AEGIS)[0]
        assert key != _secure.link_keys(SECRET, bytes(64), "job", 0, 1, "encrypt")[0]
        head = (len(frame) + 16).to_bytes(4, "big")
        out = bytearray(len(frame) + 16)
        nonce = (0).to_bytes(4, "little") + seq.to_bytes(8, "little") + bytes(20)
        _secure._records(key, key, True, _secure.AEGIS).seal(nonce, frame, head, out)
        assert wire == head + bytes(out)
    a.close()
    b.close()


# draft-irtf-cfrg-aegis-aead, "AEGISMAC-128X4" test vector (libaegis's test suite has it too)
_MAC_KEY = bytes.fromhex("10010000000000000000000000000000")
_MAC_NONCE = bytes.fromhex("10000200000000000000000000000000")
_MAC_DATA = bytes(range(35))
_MAC_TAG = bytes.fromhex("c45a98fd9ab8956ce616eb008cfe4e53")


@needs_c
def test_aegismac_128x4_gives_the_drafts_test_vector() -> None:
    """The vendored AEGIS-128X4 as a MAC, through the record layer's ``tag``/``check`` (its
    key the first 16 bytes of the link's, its nonce the record's kind and sequence number
    zero-padded: here the draft's nonce): the draft's 128-bit tag, and a flipped bit of the
    data or the tag refused."""
    records = _secure._records(_MAC_KEY + bytes(16), _MAC_KEY + bytes(16), False,
                               _secure.AEGISMAC)
    assert records.cipher == _secure.AEGISMAC and records.fast
    kind, seq = int.from_bytes(_MAC_NONCE[:4], "little"), int.from_bytes(_MAC_NONCE[4:12], "little")
    assert not any(_MAC_NONCE[12:])
    assert records.tag(seq, kind, _MAC_DATA) == _MAC_TAG
    assert records.check(seq, kind, _MAC_DATA, _MAC_TAG)
    assert not records.check(seq, kind, _MAC_DATA[:-1] + b"\x23", _MAC_TAG)
    assert not records.check(seq, kind, _MAC_DATA, _MAC_TAG[:-1] + b"\x52")
    assert not records.check(seq + 1, kind, _MAC_DATA, _MAC_TAG)


@needs_c
def test_an_aegismac_record_is_the_documented_construction() -> None:
    """A record on an AEGISMAC-128X4 link is ``len | plaintext | AEGISMAC-128X4(key[:16],
    nonce, plaintext)``, the key from HKDF labelled with the MAC (no key shared with GMAC
    or a cipher), the 16-byte nonce the record's kind and sequence number zero-padded: an
    abort record's tag under kind 1. Rebuilt here from those parts alone."""
    _needs_amac("amac")
    a, b = socket.socketpair()
    tx = SecureLink(a, SECRET, bytes(64), "job", dialer=0, acceptor=1, rank=0, peer=1,
                    encrypt=False, cipher=_secure.AEGISMAC)
    assert tx.cipher == _secure.AEGISMAC
    key = _secure.link_keys(SECRET, bytes(64), "job", 0, 1, "integrity", _secure.AEGISMAC)[0]
    others = [_secure.link_keys(SECRET, bytes(64), "job", 0, 1, "integrity")[0],
              *(_secure.link_keys(SECRET, bytes(64), "job", 0, 1, "encrypt", c)[0]
                for c in _secure.CIPHERS)]
    assert key not in others
    mac = _secure._records(key, key, False, _secure.AEGISMAC)
    frame = b"h" * 128 + b"p" * 4096
    for seq in range(2):
        assert tx.sendmsg([frame[:128], frame[128:]]) == len(frame)
        wire = b.recv(1 << 16)
        assert wire == (len(frame) + 16).to_bytes(4, "big") + frame + mac.tag(seq, 0, frame)
    tx.queue_abort(b"ABORT")
    assert tx.flush()
    wire = b.recv(1 << 16)
    assert wire == (0x80000000 | 21).to_bytes(4, "big") + b"ABORT" + mac.tag(2, 1, b"ABORT")
    a.close()
    b.close()


@needs_c
def test_ends_that_disagree_on_the_mac_fail_their_first_record() -> None:
    """A link whose ends run different MACs (whatever made them disagree): the first record
    is refused as tampered, nothing handed over."""
    _needs_amac("amac")
    for mine, theirs in ((_secure.AEGISMAC, _secure.GMAC), (_secure.GMAC, _secure.AEGISMAC)):
        a, b = socket.socketpair()
        for s in (a, b):
            s.setblocking(False)
        tx = SecureLink(a, SECRET, bytes(64), "job", dialer=0, acceptor=1, rank=0, peer=1,
                        encrypt=False, cipher=mine)
        rx = SecureLink(b, SECRET, bytes(64), "job", dialer=0, acceptor=1, rank=1, peer=0,
                        encrypt=False, cipher=theirs)
        assert tx.sendmsg([b"h" * 128, b"p" * 2048]) == 128 + 2048
        got_h, got_p = bytearray(128), bytearray(2048)
        with pytest.raises(AuthError, match="tampered"):
            rx.recvmsg_into([memoryview(got_h), memoryview(got_p)])
        assert not any(got_h) and not any(got_p)
        a.close()
        b.close()


def test_the_mac_is_the_dialers_first_that_both_run(monkeypatch) -> None:
    """Integrity links: AEGISMAC-128X4 where both ends run it in hardware, GMAC (the floor)
    where either lacks it, says nothing or offers GMAC alone (``TERASCALE_LINK_MAC=gmac``);
    the dialer refuses an answer naming a MAC it did not offer."""
    mine = _secure.ciphers("integrity")
    assert mine[-1] == _secure.GMAC
    assert _secure.agree_cipher([_secure.GMAC], "integrity") == _secure.GMAC
    assert _secure.agree_cipher(None, "integrity") == _secure.GMAC
    # a build without MACs offers its ciphers and takes "aes-256-gcm" for GMAC, both ways
    assert _secure.agree_cipher([_secure.AEGIS, _secure.GCM], "integrity") == _secure.GCM
    assert _secure.chosen_cipher({"cipher": _secure.GCM}, 0, 1, "integrity") == _secure.GMAC
    assert _secure.agree_cipher(list(_secure.MACS), "integrity") == mine[0]
    assert _secure.agree_cipher(list(_secure.MACS), "encrypt") == _secure.GCM
    if compiled and _secure._compiled().AEGIS_HARDWARE:
        assert mine == (_secure.AEGISMAC, _secure.GMAC)
        assert _secure.chosen_cipher({"cipher": _secure.AEGISMAC}, 0, 1, "integrity") == \
            _secure.AEGISMAC
    assert _secure.chosen_cipher({}, 0, 1, "integrity") == _secure.GMAC
    monkeypatch.setenv("TERASCALE_LINK_MAC", "gmac")
    assert _secure.ciphers("integrity") == (_secure.GMAC,)
    assert _secure.agree_cipher(list(_secure.MACS), "integrity") == _secure.GMAC
    with pytest.raises(AuthError, match="did not offer"):
        _secure.chosen_cipher({"cipher": _secure.AEGISMAC}, 0, 1, "integrity")
    assert _secure.ciphers("encrypt") == _secure.ciphers()  # the ciphers are not touched
    monkeypatch.setenv("TERASCALE_LINK_MAC", "sha1")
    with pytest.raises(Exception, match="TERASCALE_LINK_MAC"):
        _secure.ciphers("integrity")


def test_the_cipher_is_the_dialers_first_that_both_run() -> None:
    """AEGIS-256X4 where both ends have it, AES-256-GCM (the floor) where either lacks it or
    says nothing; a cipher this process does not run is refused at the link."""
    mine = _secure.ciphers()
    assert mine[-1] == _secure.GCM
    assert _secure.agree_cipher([_secure.GCM]) == _secure.GCM
    assert _secure.agree_cipher(None) == _secure.GCM
    assert _secure.agree_cipher(["rot13", 7]) == _secure.GCM
    assert _secure.agree_cipher([_secure.AEGIS, _secure.GCM]) == mine[0]
    if compiled:
        assert mine == (_secure.AEGIS, _secure.GCM)
    a, b = socket.socketpair()
    with pytest.raises(Exception, match="not one this process runs"):
        SecureLink(a, SECRET, bytes(64), "job", dialer=0, acceptor=1, rank=0, peer=1,
                   encrypt=True, cipher="rot13")
    a.close()
    b.close()


_MIXED = """
import os, sys
if os.environ["TERASCALE_RANK"] in sys.argv[1].split(","):
    os.environ["TERASCALE_NO_CEXT"] = "1"
if os.environ["TERASCALE_RANK"] in sys.argv[2].split(","):
    os.environ["TERASCALE_LINK_MAC"] = "gmac"
import numpy as np
import terascale
comm = terascale.init(timeout=60)
x = np.arange(300_000, dtype=np.float32) * (comm.rank + 1)  # several records each way
comm.allreduce(x, out=x, algorithm="ring")
link = comm._transport.socks[1 - comm.rank]
print("RESULT", comm.rank, link.mode, link.cipher, x.tobytes() == (np.arange(300_000,
      dtype=np.float32) * 3).tobytes(), flush=True)
comm.close()
"""


@needs_c
@pytest.mark.parametrize("security, plain_ranks, gmac_ranks, cipher", [
    ("encrypt", "1", "", "aes-256-gcm"), ("encrypt", "", "", "aegis-256x4"),
    ("integrity", "", "", "best"), ("integrity", "0", "", "aes-256-gmac"),
    ("integrity", "1", "", "aes-256-gmac"), ("integrity", "", "0", "aes-256-gmac"),
    ("integrity", "", "1", "aes-256-gmac")])
def test_a_job_with_a_rank_without_the_compiled_layer(tmp_path, security: str, plain_ranks: str,
                                                      gmac_ranks: str, cipher: str) -> None:
    """Two real ranks over TCP. ``--encrypt``: where one runs without the compiled layer
    (``TERASCALE_NO_CEXT=1``) the link agrees on AES-256-GCM, else on AEGIS-256X4.
    Integrity-only: AEGISMAC-128X4 where both ends run it in hardware, GMAC where either
    end (the dialling or the accepting one) runs without the compiled layer or offers GMAC
    alone (``TERASCALE_LINK_MAC=gmac``). Either way both ranks run the same and get the
    bitwise same sum."""
    import subprocess
    import sys

    if cipher == "best":
        cipher = _secure.ciphers("integrity")[0]
    script = tmp_path / "mixed.py"
    script.write_text(_MIXED)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERASCALE_")}
    out = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "2", "--hosts", "a,b",
                          *(["--encrypt"] if security == "encrypt" else []), "--no-prefix",
                          sys.executable, str(script), plain_ranks, gmac_ranks],
                         capture_output=True, text=True, timeout=120, env=env)
    lines = sorted(x for x in out.stdout.splitlines() if x.startswith("RESULT"))
    assert lines == [f"RESULT 0 {security} {cipher} True", f"RESULT 1 {security} {cipher} True"], \
        out.stderr[-2000:]


def test_control_keys_are_rfc5869_hkdf_as_cryptography_derives_them() -> None:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    from terascale._auth import derive_keys

    for purpose, secret in (("rendezvous", SECRET), ("link|integrity|job|0>1", os.urandom(32)),
                            ("", b"")):
        nonces = os.urandom(64)
        okm = HKDF(algorithm=hashes.SHA256(), length=64, salt=nonces,
                   info=f"terascale v2|{purpose}".encode()).derive(secret)
        assert derive_keys(secret, nonces, purpose) == (okm[:32], okm[32:])


def test_control_messages_sealed_by_the_compiled_gcm_are_cryptographys_bytes() -> None:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from terascale import _auth

    if _auth._compiled_gcm() is None:
        assert os.environ.get("CI") != "true", "terascale/_gcm.c was not built in CI"
        pytest.skip("terascale._gcm is not built here")
    key = os.urandom(32)
    ours, theirs = _auth._gcm(key), AESGCM(key)
    assert not isinstance(ours, AESGCM)
    for n in (0, 1, 16, 17, 5000, 65 << 10):
        nonce, data, aad = os.urandom(12), os.urandom(n), os.urandom(4)
        sealed = ours.encrypt(nonce, data, aad)
        assert sealed == theirs.encrypt(nonce, data, aad)
        assert ours.decrypt(nonce, sealed, aad) == data
        for bad in (bytes([sealed[0] ^ 1]) + sealed[1:],
                    sealed[:-1] + bytes([sealed[-1] ^ 0x80])):
            with pytest.raises(ValueError):
                ours.decrypt(nonce, bad, aad)
        with pytest.raises(ValueError):
            ours.decrypt(nonce, sealed, aad[:3] + bytes([aad[3] ^ 1]))
        with pytest.raises(ValueError):
            ours.decrypt(os.urandom(12), sealed, aad)
