"""A large frame in one compiled call each way (``Records.send_frame`` and
``Records.recv_frame``), under GMAC, AEGISMAC-128X4 and AEGIS-256X4 (``--encrypt``): the
records on the wire are those of the Python path whatever the kernel takes per call, and on receive every cut near a record's
boundary, a byte flipped in the middle and records moved from their place hand nothing
unauthenticated over."""

from __future__ import annotations

import socket

import numpy as np
import pytest

pytest.importorskip("cryptography")

from test_seclink_inplace import _feed, _pair, _receive, _records, _wire  # noqa: E402

from terascale.transport._secure import (  # noqa: E402
    AEGIS,
    AEGISMAC,
    GCM,
    RECORD,
    RECORD_MAC,
    SecureLink,
    ciphers,
)

SECRET = b"job-secret"
# the integrity MACs, GMAC ("integrity") and AEGISMAC-128X4 ("amac"), and the encrypting
# AEGIS-256X4 ("aegis")
MODES = pytest.mark.parametrize("mode", ["integrity", "amac", "aegis"])


def _compiled_frames(mode: str = "integrity") -> None:
    if mode == "amac" and AEGISMAC not in ciphers("integrity"):
        pytest.skip("AEGISMAC-128X4 needs the compiled record layer and AES instructions")
    if mode == "aegis" and AEGIS not in ciphers():
        pytest.skip("AEGIS-256X4 needs the compiled record layer")
    a, b = socket.socketpair()
    link = SecureLink(a, SECRET, bytes(64), "job", dialer=0, acceptor=1, rank=0, peer=1,
                      encrypt=mode == "aegis",
                      cipher={"amac": AEGISMAC, "aegis": AEGIS}.get(mode, GCM))
    fast = link._frames
    a.close()
    b.close()
    if not fast:
        pytest.skip("needs the compiled record layer with its GHASH (VPCLMULQDQ)")


class _Counting:
    """The link's compiled record layer, counting the calls made of it."""

    def __init__(self, c: object) -> None:
        self._c = c
        self.calls: dict[str, int] = {}

    def __getattr__(self, name: str) -> object:
        value = getattr(self._c, name)
        if callable(value):
            def call(*args: object) -> object:
                self.calls[name] = self.calls.get(name, 0) + 1
                return value(*args)
            return call
        return value


def _frame(size: int) -> tuple[bytes, bytes]:
    return b"H" * 128, np.random.default_rng(size).bytes(size)


@MODES
@pytest.mark.parametrize("sndbuf", [0, 8192])
def test_send_frame_puts_the_python_paths_records_on_the_wire(sndbuf: int, mode: str) -> None:
    """Header and a payload of three whole records and a part of one, sent by the compiled
    call and by the Python path under the same keys: the same bytes, also when the kernel
    takes a few KiB per call (records left pending half-sent, finished by later calls)."""
    _compiled_frames(mode)
    rec = RECORD if mode == "aegis" else RECORD_MAC
    header, payload = _frame(3 * rec + 5000)
    wires = []
    for compiled in (True, False):
        sender, s_wire, _, _ = _pair(mode)
        if sndbuf:
            sender._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, sndbuf)
        if compiled:
            sender._c = counting = _Counting(sender._c)
        else:
            sender._c = None
        wires.append(_wire(sender, s_wire, [header, payload]))
        if compiled:
            assert counting.calls.get("send_frame", 0) >= 1, counting.calls
            assert not {"tag", "seal"} & set(counting.calls), "a record was sealed from Python"
    assert wires[0] == wires[1]
    assert [e - s for s, e in _records(wires[0])] == \
        [4 + 128 + 16] + [4 + rec + 16] * 3 + [4 + 5000 + 16]


@MODES
def test_recv_frame_takes_a_frame_in_one_call_and_it_arrives_bitwise(mode: str) -> None:
    """A whole frame waiting in the kernel: one compiled call hands over the header and the
    payload's record, checked; in pieces of any size it arrives bitwise too."""
    _compiled_frames(mode)
    header, payload = _frame(300_000)
    for chunks in ([1 << 20], [1], [7, 150, 4099], [4 + 128 + 16 + 4], [4 + 128 + 16 + 3]):
        sender, s_wire, receiver, r_wire = _pair(mode)
        receiver._c = counting = _Counting(receiver._c)
        wire = _wire(sender, s_wire, [header, payload])
        t = _feed(r_wire, wire, chunks if chunks != [1] else [1] * 300 + [1 << 20])
        head, body = bytearray(128), bytearray(len(payload))
        assert _receive(receiver, head, body) == ("whole", 128 + len(payload)), chunks
        assert bytes(head) == header and bytes(body) == payload, chunks
        assert counting.calls.get("recv_frame", 0) >= 1, counting.calls
        receiver.close()
        t.join(10)


@MODES
def test_a_frame_cut_at_any_byte_near_its_record_boundaries_hands_nothing_over(mode: str) -> None:
    """The stream ends at every byte of the header's record, of the payload's length and
    first bytes, and of its last bytes and tag: a clean end before the first byte or between
    the records, else LinkTampered; the header is written only once its record passed,
    and nothing of the payload's record is left in the buffer."""
    _compiled_frames(mode)
    header, payload = _frame(100_000)
    sender, s_wire, _, _ = _pair(mode)
    wire = _wire(sender, s_wire, [header, payload])
    (_, h_end), (p_start, n) = _records(wire)
    cuts = sorted({*range(0, p_start + 200), *range(n - 200, n)})
    for cut in cuts:
        _, _, receiver, r_wire = _pair(mode)
        t = _feed(r_wire, wire[:cut], [65536])
        head, body = bytearray(128), bytearray(len(payload))
        outcome, got = _receive(receiver, head, body)
        if cut == 0:
            assert outcome == "eof", cut
        elif cut == h_end:  # a clean end between the records: the header arrived
            assert outcome == "eof" and got == 128, (cut, outcome)
        else:
            assert outcome.startswith("tampered:") and "closed inside a record" in outcome, \
                (cut, outcome)
        # a call that opened the header's record and went on into the cut one raises
        # without counting the header: handed over (checked) or not, never more
        assert got in ((0, 128) if cut > h_end else (128,) if cut == h_end else (0,)), (cut, got)
        assert bytes(head) == (header if cut >= h_end else bytes(128)), cut
        assert not any(body), cut
        receiver.close()
        t.join(10)


@MODES
@pytest.mark.parametrize("attack", ["header", "middle", "tag", "swap", "replay"])
def test_a_flipped_moved_or_replayed_record_of_a_frame_is_refused_and_wiped(attack: str,
                                                                         mode: str) -> None:
    """Two frames back to back; the first frame's header record flipped, its payload
    flipped in the middle or in its tag, its two records swapped, or the first frame's
    payload record replayed in place of the second's: LinkTampered naming the record, and
    nothing of a refused record left in the caller's buffers."""
    _compiled_frames(mode)
    header, payload = _frame(200_000)
    sender, s_wire, receiver, r_wire = _pair(mode)
    wire = bytearray(_wire(sender, s_wire, [header, payload]) +
                     _wire(sender, s_wire, [header, payload]))
    (a, b), (c, d), (e, f), (g, h) = _records(bytes(wire))
    refused = {"header": 0, "middle": 1, "tag": 1, "swap": 0, "replay": 3}[attack]
    if attack == "header":
        wire[a + 4 + 60] ^= 0x01
    elif attack == "middle":
        wire[c + 4 + 100_000] ^= 0x80
    elif attack == "tag":
        wire[d - 1] ^= 0x01
    elif attack == "swap":
        wire[a:d] = wire[c:d] + wire[a:b]
    else:
        wire[g:h] = wire[c:d]
    t = _feed(r_wire, bytes(wire), [65536, 3, 70_001])
    whole = 0
    while True:
        head, body = bytearray(128), bytearray(len(payload))
        outcome, got = _receive(receiver, head, body)
        if outcome != "whole":
            break
        assert bytes(head) == header and bytes(body) == payload
        whole += 1
    assert outcome.startswith("tampered:") and f"record #{refused} failed" in outcome, outcome
    assert whole == refused // 2  # the frames before the refused record arrived
    if refused % 2 == 0:  # the header's record: nothing at all handed over
        assert got == 0 and not any(head) and not any(body)
    else:
        assert got in (0, 128) and not any(body), got
    receiver.close()
    t.join(10)


@MODES
@pytest.mark.parametrize("record", [1, 2, 3])
def test_a_later_record_of_a_long_payload_flipped_is_refused_and_wiped(record: int,
                                                                      mode: str) -> None:
    """A payload of three whole records and a part, read in place one record after the
    other by the same call where the kernel has them: its ``record``-th record flipped in
    the middle is refused (LinkTampered naming it) and nothing of it is left in the
    buffer; the records before it arrived bitwise."""
    _compiled_frames(mode)
    rec = RECORD if mode == "aegis" else RECORD_MAC
    header, payload = _frame(3 * rec + 5000)
    sender, s_wire, receiver, r_wire = _pair(mode)
    wire = bytearray(_wire(sender, s_wire, [header, payload]))
    start, end = _records(bytes(wire))[record]
    wire[(start + end) // 2] ^= 0x04
    t = _feed(r_wire, bytes(wire), [1 << 20, 4 + rec + 16 + 2, 70_001])
    head, body = bytearray(128), bytearray(len(payload))
    outcome, _ = _receive(receiver, head, body)
    assert outcome.startswith("tampered:") and f"record #{record} failed" in outcome, outcome
    before = (record - 1) * rec
    assert bytes(body[:before]) == payload[:before]
    assert not any(body[before:])
    receiver.close()
    t.join(10)
