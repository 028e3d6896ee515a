"""An on-path relay without the job secret cannot change a result, run code or lower security.

The relay (:class:`Relay`) sits between the ranks and the rendezvous server and between the
two ranks (the server advertises the relay's port as rank 0's peer port). It parses the
stream the way an attacker who knows the protocol would -- the fixed-size handshake, then
length-prefixed records (or, on unauthenticated benchmark links, frames) -- and rewrites
one of them. Every case must end with every rank raising ``AuthError`` (``PeerLost`` or
``PeerTimeout`` where traffic is only withheld) within the deadline, never a wrong result,
and no code run. The controls run the same relay against unauthenticated links, to show
that each attack does land when nothing stops it.
"""

from __future__ import annotations

import json
import os
import pickle
import secrets
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from _tcp_pair import shut_both

from terascale._auth import Channel, accept_handshake
from terascale.rendezvous import RendezvousServer

DEADLINE = 10.0  # every worker's timeout (rendezvous and collectives)
_DIAL_PREFIX = 8 + 32 + 32  # the dialer's handshake answer: magic, nonce, proof
_ACCEPT_PREFIX = 8 + 32 + 2 + 32  # the acceptor's challenge, then its verdict and proof
_HEADER = 128  # a frame's header (unauthenticated benchmark links only)

Mutator = Callable[[int, bytes], list[bytes]]


class Relay:
    """A TCP relay to ``target`` that may rewrite what flows each way.

    ``up``/``down`` see each unit (a record, or a frame on unauthenticated links) going
    from the dialer to the acceptor / back, numbered from 0 per connection (0 is the sealed
    hello or rendezvous message), and return what to forward instead."""

    dial_prefix = _DIAL_PREFIX  # the dialer's bytes before its first record

    def __init__(self, target: tuple[str, int], *, up: Mutator | None = None,
                 down: Mutator | None = None, frames: bool = False) -> None:
        self.target, self.up, self.down, self.frames = target, up, down, frames
        self.touched = 0  # units the mutators changed
        self._lst = socket.create_server(("127.0.0.1", 0))
        self.address: tuple[str, int] = self._lst.getsockname()[:2]
        threading.Thread(target=self._serve, daemon=True).start()

    def close(self) -> None:
        self._lst.close()

    def _serve(self) -> None:
        while True:
            try:
                a, _ = self._lst.accept()
            except OSError:
                return
            try:
                b = socket.create_connection(self.target, timeout=5)
            except OSError:
                a.close()
                continue
            b.settimeout(None)
            threading.Thread(target=self._pump, args=(a, b, self.dial_prefix, self.up),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(b, a, _ACCEPT_PREFIX, self.down),
                             daemon=True).start()

    def _unit(self, buf: bytearray, first: bool) -> int:
        """The size of the whole unit at the front of ``buf``, or 0 when incomplete."""
        if first or not self.frames:  # a record: length u32 big endian, then that much
            if len(buf) < 4:
                return 0
            n = 4 + (int.from_bytes(buf[:4], "big") & 0x7FFFFFFF)  # top bit: an abort record
        else:  # a frame: header (payload size at offset 16), then the payload
            if len(buf) < _HEADER:
                return 0
            n = _HEADER + int.from_bytes(buf[16:24], "little")
        return n if len(buf) >= n else 0

    def _pump(self, src: socket.socket, dst: socket.socket, prefix: int,
              mutate: Mutator | None) -> None:
        buf, index = bytearray(), 0
        try:
            while chunk := src.recv(1 << 20):
                if mutate is None:
                    dst.sendall(chunk)
                    continue
                buf += chunk
                if prefix:
                    k = min(prefix, len(buf))
                    dst.sendall(bytes(buf[:k]))
                    del buf[:k]
                    prefix -= k
                while prefix == 0 and (n := self._unit(buf, index == 0)):
                    unit = bytes(buf[:n])
                    del buf[:n]
                    out = mutate(index, unit)
                    if out != [unit]:
                        self.touched += 1
                    for piece in out:
                        dst.sendall(piece)
                    index += 1
        except OSError:
            pass
        finally:
            shut_both(src, dst)


class RelayedServer(RendezvousServer):
    """The job's genuine rendezvous server, advertising rank 0's peer port behind a relay."""

    def __init__(self, *args, link: dict, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.link, self.relays = dict(link), []
        self.relay_cls = self.link.pop("relay", Relay)  # a Relay subclass, if given

    def advertise(self, slot: int, addr: str, endpoint: str) -> str:
        if slot != 0:
            return endpoint
        host, _, port = endpoint.rpartition(":")
        relay = self.relay_cls((host, int(port)), **self.link)
        self.relays.append(relay)
        return f"{relay.address[0]}:{relay.address[1]}"


_WORKER = r"""
import json, os, sys, time
import numpy as np
import terascale
marker = sys.argv[1]
start = time.monotonic()
out = {}
try:
    comm = terascale.init(timeout=float(os.environ["DEADLINE"]))
    n = comm.size
    out["mode"] = getattr(comm._transport.socks[(comm.rank + 1) % n], "mode", "plain")
    out["compiled"] = getattr(comm._transport.socks[(comm.rank + 1) % n], "_c", None) is not None
    out["cipher"] = getattr(comm._transport.socks[(comm.rank + 1) % n], "cipher", None)
    x = np.full(1 << 18, comm.rank + 1.0, np.float32)  # 1 MiB: several records per frame
    for i in range(8):
        y = comm.allreduce(x.copy())
        if not (y == n * (n + 1) / 2).all():
            raise AssertionError(f"wrong sum at step {i}: {sorted(set(y.tolist()))[:4]}")
        obj = comm.broadcast_object({"note": "HARMLESS-" + "o" * 200} if comm.rank == 0
                                    else None)
        if obj != {"note": "HARMLESS-" + "o" * 200}:
            raise AssertionError(f"wrong object: {obj!r:.80}")
        objs = comm.allgather_object({"note": "HARMLESS-" + "o" * 200})
        if objs != [{"note": "HARMLESS-" + "o" * 200}] * n:
            raise AssertionError(f"wrong objects: {objs!r:.80}")
    comm.close()
    out["ok"] = True
except BaseException as e:
    out["error"] = type(e).__name__
    out["kinds"] = [c.__name__ for c in type(e).__mro__]
    out["message"] = str(e)
out["elapsed"] = time.monotonic() - start
print("RESULT " + json.dumps(out), flush=True)
"""


def _run_job(rendezvous: tuple[str, int], secret: bytes, marker: Path,
             env: list[dict[str, str]] | None = None, n: int = 2) -> list[dict]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("TERASCALE_")}
    procs = []
    for r in range(n):
        e = {**base, "TERASCALE_RANK": str(r), "TERASCALE_SIZE": str(n),
             "TERASCALE_SECRET": secret.decode(), "TERASCALE_HOST_ID": f"host{r}",
             "TERASCALE_RENDEZVOUS": f"{rendezvous[0]}:{rendezvous[1]}",
             "DEADLINE": str(DEADLINE), **(env[r] if env else {})}
        procs.append(subprocess.Popen([sys.executable, "-c", _WORKER, str(marker)], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        out, err = p.communicate(timeout=3 * DEADLINE + 30)
        lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
        assert lines, f"a worker reported nothing (exit {p.returncode}): {err[-2000:]}"
        results.append(json.loads(lines[-1][7:]))
    return results


def _job(tmp_path: Path, *, link: dict | None = None, rendezvous: dict | None = None,
         env: list[dict[str, str]] | None = None,
         secret: bytes | None = None) -> tuple[list[dict], Path, list[Relay]]:
    secret = secret or secrets.token_hex(16).encode()
    marker = tmp_path / "attacker-code-ran"
    with RelayedServer(2, secret, link=link or {}) as server:
        front = Relay(server.address, **(rendezvous or {}))
        try:
            results = _run_job(front.address, secret, marker, env)
        finally:
            front.close()
            for r in server.relays:
                r.close()
    return results, marker, [front, *server.relays]


def _all_refused(results: list[dict], kinds: tuple[str, ...] = ("AuthError",)) -> None:
    for rank, res in enumerate(results):
        assert "error" in res, f"rank {rank} finished despite the relay: {res}"
        assert set(kinds) & set(res["kinds"]), f"rank {rank}: {res}"
        assert "AssertionError" not in res["kinds"], f"rank {rank}: {res}"
        assert res["elapsed"] < DEADLINE, f"rank {rank} took {res['elapsed']:.1f} s"


# -- the rendezvous ----------------------------------------------------------------------------

def _ctr_rewrite(old: bytes, new: bytes) -> Mutator:
    """XOR the start of the rendezvous reply's ciphertext so that, were it only encrypted
    (AES-GCM is a stream cipher), ``old`` would read ``new``: the classic downgrade."""
    def mutate(index: int, unit: bytes) -> list[bytes]:
        if index != 0:
            return [unit]
        body = bytearray(unit)
        for i, (a, b) in enumerate(zip(old, new)):
            body[4 + i] ^= a ^ b
        return [bytes(body)]
    return mutate


def test_rewriting_the_rendezvous_replys_security_is_refused(tmp_path: Path) -> None:
    old, new = b'{"security":"encrypt"', b'{"security":"plain"  '
    results, marker, relays = _job(tmp_path, rendezvous={"down": _ctr_rewrite(old, new)},
                                   env=[{"TERASCALE_ENCRYPT": "1"}, {}])
    _all_refused(results)
    assert all("rendezvous reply failed its authentication tag" in r["message"]
               for r in results), results
    assert relays[0].touched == 2


class _HandshakeFlipper(Relay):
    """Flips one bit of the handshake itself: of the dialer's nonce (``up``) or of the
    acceptor's challenge (``down``)."""

    def __init__(self, target: tuple[str, int], way: str) -> None:
        self.way = way
        super().__init__(target)

    def _pump(self, src, dst, prefix, mutate):  # type: ignore[no-untyped-def]
        up = prefix == self.dial_prefix
        at = 8 + 5  # past the magic, inside the nonce or the challenge
        if up != (self.way == "up"):
            return super()._pump(src, dst, prefix, mutate)
        buf = bytearray()
        try:
            while len(buf) <= at and (chunk := src.recv(1 << 16)):
                buf += chunk
            buf[at] ^= 0x01
            dst.sendall(bytes(buf))
            while chunk := src.recv(1 << 16):
                dst.sendall(chunk)
        except (OSError, IndexError):
            pass
        finally:
            shut_both(src, dst)


@pytest.mark.parametrize("way", ["up", "down"])
def test_a_flipped_bit_in_the_rendezvous_handshake_is_refused(tmp_path: Path, way: str) -> None:
    secret = secrets.token_hex(16).encode()
    with RendezvousServer(2, secret) as server:
        front = _HandshakeFlipper(server.address, way)
        try:
            results = _run_job(front.address, secret, tmp_path / "m")
        finally:
            front.close()
    _all_refused(results)
    assert all("or the handshake was altered on the way" in r["message"] for r in results), \
        results


def test_rewriting_a_rendezvous_request_is_refused(tmp_path: Path) -> None:
    def flip(index: int, unit: bytes) -> list[bytes]:
        return [unit[:10] + bytes([unit[10] ^ 1]) + unit[11:]] if index == 0 else [unit]

    results, _, relays = _job(tmp_path, rendezvous={"up": flip})
    _all_refused(results)  # the server refuses it, and says so in the sealed reply
    assert all("rendezvous request failed its authentication tag" in r["message"]
               for r in results), results
    assert relays[0].touched == 2


# -- the links between ranks -------------------------------------------------------------------
# Rank 1 dials rank 0 through the relay: "up" is rank 1 -> rank 0. Unit 0 is the sealed
# hello; each 1 MiB allreduce step is a header record and two 256 KiB payload records.

def _flip(index: int, unit: bytes) -> list[bytes]:
    return [unit[:40] + bytes([unit[40] ^ 0x04]) + unit[41:]] if index == 2 else [unit]


def _drop(index: int, unit: bytes) -> list[bytes]:
    return [] if index == 2 else [unit]


def _duplicate(index: int, unit: bytes) -> list[bytes]:
    return [unit, unit] if index == 2 else [unit]


def _reorderer() -> Mutator:
    held: list[bytes] = []

    def mutate(index: int, unit: bytes) -> list[bytes]:
        if index == 2:  # the first payload record of a frame: the second follows at once
            held.append(unit)
            return []
        if index == 3:
            return [unit, *held]
        return [unit]
    return mutate


def _replayer() -> Mutator:
    seen: dict[int, bytes] = {}

    def mutate(index: int, unit: bytes) -> list[bytes]:
        seen[index] = unit
        return [seen[1], unit] if index == 5 else [unit]  # an old header record, again
    return mutate


# The ranks' environment per link security: the default (integrity-only, AEGISMAC-128X4 where
# the CPU runs it in hardware, else GMAC), GMAC alone, encryption.
_SECURITY = {"integrity": {}, "gmac": {"TERASCALE_LINK_MAC": "gmac"},
             "encrypt": {"TERASCALE_ENCRYPT": "1"}}


def _security_env(security: str) -> list[dict[str, str]]:
    return [_SECURITY[security]] * 2


def _ran(results: list[dict], security: str) -> None:
    """Every rank's links ran the MAC (or cipher) that ``security`` stands for."""
    from terascale.transport._secure import GMAC, ciphers

    want = {"integrity": ciphers("integrity")[0], "gmac": GMAC,
            "encrypt": ciphers("encrypt")[0]}[security]
    assert [r.get("cipher") for r in results] == [want] * len(results), results


# Records are framed alike in both modes and under both MACs: every attack on the default,
# two on GMAC where the default is AEGISMAC-128X4, two on encryption.
@pytest.mark.parametrize(("security", "attack"), [
    *(("integrity", a) for a in ("flip", "drop", "duplicate", "reorder", "replay")),
    ("gmac", "flip"), ("gmac", "replay"), ("encrypt", "flip"), ("encrypt", "reorder")])
def test_altered_frames_abort_the_job_on_every_rank(tmp_path: Path, attack: str,
                                                    security: str) -> None:
    mutate = {"flip": _flip, "drop": _drop, "duplicate": _duplicate,
              "reorder": _reorderer(), "replay": _replayer()}[attack]
    results, _, relays = _job(tmp_path, link={"up": mutate}, env=_security_env(security))
    _ran(results, security)
    _all_refused(results)
    assert "tampered" in results[0]["message"] and "from rank 1" in results[0]["message"]
    assert "aborted because rank 0 failed" in results[1]["message"]
    assert relays[1].touched == (2 if attack == "reorder" else 1)


def _reflector() -> tuple[Mutator, Mutator]:
    """Rank 1's own latest data record, sent back to it once in place of one of rank 0's."""
    mine: list[bytes] = []
    done: list[bool] = []

    def up(index: int, unit: bytes) -> list[bytes]:
        if index >= 1:
            mine.append(unit)
        return [unit]

    def down(index: int, unit: bytes) -> list[bytes]:
        if index >= 2 and mine and not done:
            done.append(True)
            return [mine[-1]]
        return [unit]
    return up, down


def _abort_bit(index: int, unit: bytes) -> list[bytes]:
    """A data record passed off as an abort record (the top bit of its length)."""
    return [bytes([unit[0] | 0x80]) + unit[1:]] if index == 2 else [unit]


def _huge(index: int, unit: bytes) -> list[bytes]:
    """A record that claims 2 GiB, then 64 KiB of noise: refused before anything is allocated."""
    return [b"\x7f\xff\xff\xff" + os.urandom(64 << 10)] if index == 2 else [unit]


class _Truncator(Relay):
    """Forwards half of rank 1's record 2, then cuts both ways."""

    def _pump(self, src, dst, prefix, mutate):  # type: ignore[no-untyped-def]
        return super()._pump(src, dst, prefix, _half_of_unit_two(dst, mutate))


def _half_of_unit_two(dst, mutate):  # type: ignore[no-untyped-def]
    """A relay's mutation (where it mutates this direction at all) that forwards half of
    unit 2 to ``dst``, then cuts the connection."""
    def half(index: int, unit: bytes) -> list[bytes]:
        if index == 2:
            dst.sendall(unit[: len(unit) // 2])
            raise OSError("cut")
        return [unit]
    return half if mutate is not None else None


@pytest.mark.parametrize("security", ["integrity", "gmac"])
@pytest.mark.parametrize("attack", ["reflect", "abort-bit", "huge-length"])
def test_reflected_relabelled_or_oversized_records_abort_the_job(tmp_path: Path, attack: str,
                                                                security: str) -> None:
    if attack == "reflect":
        up, down = _reflector()
        link: dict = {"up": up, "down": down}
        victim, sender = 1, 0
    else:
        link = {"up": _abort_bit if attack == "abort-bit" else _huge}
        victim, sender = 0, 1
    results, _, relays = _job(tmp_path, link=link, env=_security_env(security))
    _ran(results, security)
    _all_refused(results)
    assert "tampered" in results[victim]["message"], results
    assert f"from rank {sender}" in results[victim]["message"], results
    assert f"aborted because rank {victim} failed" in results[sender]["message"], results


def _forged_choice(index: int, unit: bytes) -> list[bytes]:
    """The accepting rank's sealed hello (unit 0 back to the dialer: its link security and
    the MAC or cipher it chose) with one bit of its sealed body changed."""
    return [unit[:-20] + bytes([unit[-20] ^ 1]) + unit[-19:]] if index == 0 else [unit]


def test_a_forged_choice_of_mac_is_refused_before_any_record(tmp_path: Path) -> None:
    """Both ends of a link take the MAC the accepting end chose in its sealed hello; a relay
    that alters that hello (to name another MAC, or anything else) is refused at once by the
    dialling rank, naming the link, and the job ends on every rank without running."""
    results, _, relays = _job(tmp_path, link={"down": _forged_choice})
    assert relays[1].touched >= 1
    _all_refused(results, ("AuthError", "PeerLost"))
    assert "refused" in results[1]["message"] and "rank 0" in results[1]["message"], results


@pytest.mark.parametrize("security", ["integrity", "gmac"])
def test_a_record_cut_in_half_ends_the_job_on_both_ranks(tmp_path: Path, security: str) -> None:
    results, _, relays = _job(tmp_path, link={"up": lambda index, unit: [unit],
                                              "relay": _Truncator}, env=_security_env(security))
    _ran(results, security)
    _all_refused(results, ("AuthError", "PeerLost"))


def test_a_record_of_an_earlier_job_with_the_same_secret_is_refused(tmp_path: Path) -> None:
    """Same secret, new job (a restart): every link is keyed afresh, so an old record fails."""
    secret = secrets.token_hex(16).encode()
    old: dict[int, bytes] = {}

    def record(index: int, unit: bytes) -> list[bytes]:
        old.setdefault(index, unit)
        return [unit]

    first, _, _ = _job(tmp_path, link={"up": record}, secret=secret)
    assert all(r.get("ok") for r in first), first
    assert 2 in old

    def splice(index: int, unit: bytes) -> list[bytes]:
        return [old[2]] if index == 2 else [unit]

    results, _, relays = _job(tmp_path, link={"up": splice}, secret=secret)
    _all_refused(results)
    assert "tampered" in results[0]["message"] and "from rank 1" in results[0]["message"]
    assert relays[1].touched == 1


def _pickle_swap(marker: Path) -> Mutator:
    legit = pickle.dumps({"note": "HARMLESS-" + "o" * 200}, protocol=pickle.HIGHEST_PROTOCOL)

    class Evil:
        def __reduce__(self):  # what unpickling it would run
            return (os.system, (f"touch {marker}",))

    evil = pickle.dumps(Evil(), protocol=pickle.HIGHEST_PROTOCOL)
    assert len(evil) < len(legit)
    swapped = evil + b"." * (len(legit) - len(evil))  # bytes past STOP are never read

    def mutate(index: int, unit: bytes) -> list[bytes]:
        return [unit.replace(legit, swapped)]
    return mutate


@pytest.mark.parametrize("way", ["down", "up"])
def test_a_swapped_pickle_is_never_unpickled(tmp_path: Path, way: str) -> None:
    marker = tmp_path / "attacker-code-ran"
    # down: rank 0 (the acceptor) sends broadcast_object's pickle to rank 1 first;
    # up: rank 1 sends none but its allgather_object pickle.
    results, marker, relays = _job(tmp_path, link={way: _pickle_swap(marker)})
    _all_refused(results)
    assert not marker.exists()
    victim, sender = (1, 0) if way == "down" else (0, 1)
    assert "tampered" in results[victim]["message"]
    assert f"from rank {sender}" in results[victim]["message"]
    assert relays[1].touched == 1


# -- controls: the same relay against unauthenticated (benchmark-only) links ------------------

_PLAIN = [{"TERASCALE_UNAUTHENTICATED_BENCHMARK": "1"}] * 2


def test_control_the_pickle_swap_lands_on_unauthenticated_links(tmp_path: Path) -> None:
    marker = tmp_path / "attacker-code-ran"
    results, marker, relays = _job(tmp_path, link={"down": _pickle_swap(marker), "frames": True},
                                   env=_PLAIN)
    assert relays[1].touched >= 1 and marker.exists()  # the relay works: this is what stops it
    assert results[0].get("mode") == "plain"


def test_control_a_flipped_bit_changes_the_sum_on_unauthenticated_links(tmp_path: Path) -> None:
    def flip(index: int, unit: bytes) -> list[bytes]:
        if index != 2 or len(unit) <= _HEADER + 4:
            return [unit]
        return [unit[:_HEADER + 3] + bytes([unit[_HEADER + 3] ^ 0x01]) + unit[_HEADER + 4:]]

    results, _, relays = _job(tmp_path, link={"up": flip, "frames": True}, env=_PLAIN)
    assert relays[1].touched == 1
    assert "wrong sum" in results[0].get("message", ""), results


# -- the job's security policy is agreed, not announced ---------------------------------------

def _lying_server(secret: bytes, told: str) -> tuple[socket.socket, list[tuple[str, int]]]:
    """A rendezvous server that holds the secret but tells every worker ``told`` links."""
    lst = socket.create_server(("127.0.0.1", 0))
    asked: list[tuple[str, int]] = []

    def serve() -> None:
        conns = []
        while len(conns) < 2:
            c, _ = lst.accept()
            nonces = accept_handshake(c, secret, time.monotonic() + 5)
            ch = Channel(secret, nonces, dialer=False, purpose="rendezvous")
            req = ch.recv(c, time.monotonic() + 5)
            asked.append((req["security"], req["slot"]))
            conns.append((c, ch, req))
        table = [{"addr": r["addr"], "endpoint": r["endpoint"], "host": r["host"]}
                 for _, _, r in sorted(conns, key=lambda t: t[2]["slot"])]
        for c, ch, req in conns:
            ch.send(c, {"security": told, "ok": True, "rank": req["slot"], "job": "j",
                        "peers": table, "link_rate": None}, time.monotonic() + 5)
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    return lst, asked


def test_a_rank_that_asked_for_encryption_refuses_a_plaintext_mesh(tmp_path: Path) -> None:
    secret = secrets.token_hex(16).encode()
    lst, asked = _lying_server(secret, "integrity")
    try:
        results = _run_job(lst.getsockname()[:2], secret, tmp_path / "m",
                           [{"TERASCALE_ENCRYPT": "1"}, {}])
    finally:
        lst.close()
    assert sorted(asked) == [("encrypt", 0), ("integrity", 1)]
    _all_refused(results)
    assert "rank 0: rank 1 offers integrity links where this rank asked for encrypt" in \
        results[0]["message"]
    assert "rank 1: rank 0 requires encrypt links" in results[1]["message"]


# -- point-to-point links (the torch backend's send/recv) --------------------------------------
# Rank 1 sends to rank 0 through the relay; rank 1 names its rank (8 bytes) before the
# handshake. Unit 0 is the sealed hello; a message of up to 64 KiB is one record after it.

class P2PRelay(Relay):
    dial_prefix = 8 + _DIAL_PREFIX


_P2P_WORKER = r"""
import json, os, sys, time
import numpy as np
from terascale.transport.p2p import PointToPoint
rank, sizes = int(sys.argv[1]), json.loads(sys.argv[2])
p2p = PointToPoint(rank, 2, bytes.fromhex(os.environ["P2P_SECRET"]),
                   security=os.environ["P2P_SECURITY"], timeout=float(os.environ["DEADLINE"]))
print("ADDR " + json.dumps(p2p.address), flush=True)
p2p.connect_to([tuple(a) for a in json.loads(sys.stdin.readline())])
out, start = {"got": []}, time.monotonic()
try:
    for i, n in enumerate(sizes):
        if rank == 1:
            p2p.send(0, i, memoryview(np.full(n, i + 1.0, np.float32)), 10.0)
        else:
            buf = np.zeros(n, np.float32)
            p2p.post_recv(1, i, memoryview(buf), float(os.environ["DEADLINE"])).wait()
            if not (buf == i + 1.0).all():
                raise AssertionError(f"wrong message {i}: {sorted(set(buf.tolist()))[:4]}")
            out["got"].append(i)
    if rank == 1:
        sys.stdin.readline()  # the receiver is done: only now say goodbye
except BaseException as e:
    out.update(error=type(e).__name__, kinds=[c.__name__ for c in type(e).__mro__],
               message=str(e), rank=getattr(e, "rank", None), peer=getattr(e, "peer", None))
out["elapsed"] = time.monotonic() - start
p2p.close()
print("RESULT " + json.dumps(out), flush=True)
"""


def _p2p_job(sizes: list[int], up: Mutator, security: str = "integrity",
             relay_cls: type[Relay] = P2PRelay) -> tuple[dict, Relay]:
    """Rank 1 sends ``sizes`` float32 messages to rank 0 (two processes) through a relay
    that rewrites rank 1's stream with ``up``; rank 0's result."""
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TERASCALE_")},
           "P2P_SECRET": secrets.token_hex(32), "P2P_SECURITY": security,
           "DEADLINE": str(DEADLINE)}
    procs = [subprocess.Popen([sys.executable, "-c", _P2P_WORKER, str(r), json.dumps(sizes)],
                              env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(2)]
    relay = None
    try:
        addrs = []
        for p in procs:
            line = p.stdout.readline()
            assert line.startswith("ADDR "), p.communicate(timeout=30)[1][-2000:]
            addrs.append(tuple(json.loads(line[5:])))
        relay = relay_cls(addrs[0], up=up)
        procs[0].stdin.write(json.dumps(addrs) + "\n")
        procs[1].stdin.write(json.dumps([relay.address, addrs[1]]) + "\n")
        for p in procs:
            p.stdin.flush()
        out0, err0 = procs[0].communicate(timeout=3 * DEADLINE + 30)
        procs[1].stdin.write("done\n")
        procs[1].communicate(timeout=30)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        if relay is not None:
            relay.close()
    lines = [ln for ln in out0.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"rank 0 reported nothing: {err0[-2000:]}"
    return json.loads(lines[-1][7:]), relay


def _p2p_replayer() -> Mutator:
    seen: dict[int, bytes] = {}

    def mutate(index: int, unit: bytes) -> list[bytes]:
        seen[index] = unit
        return [seen[1]] if index == 3 else [unit]  # message 0's record in place of 2's
    return mutate


def _p2p_flip(index: int, unit: bytes) -> list[bytes]:
    return [unit[:30] + bytes([unit[30] ^ 0x10]) + unit[31:]] if index == 2 else [unit]


@pytest.mark.parametrize(("security", "attack", "sizes", "good"), [
    ("integrity", "flip", [1024] * 3, [0]),
    ("integrity", "replay", [1024] * 3, [0, 1]),
    ("integrity", "drop", [1024] * 3, [0]),
    ("integrity", "reorder", [1024] * 3, [0]),
    ("integrity", "flip", [1024, 1 << 18], [0]),  # 1 MiB: its header's record, then payload's
    ("encrypt", "flip", [1024] * 3, [0])])
def test_an_altered_point_to_point_message_fails_the_receive(
        security: str, attack: str, sizes: list[int], good: list[int]) -> None:
    mutate = {"flip": _p2p_flip, "replay": _p2p_replayer(), "drop": _drop,
              "reorder": _reorderer()}[attack]
    if attack == "flip" and sizes[1] > 1024:  # the first payload record of the large one
        def mutate(index: int, unit: bytes) -> list[bytes]:
            return _p2p_flip(2, unit) if index == 3 else [unit]
    res, relay = _p2p_job(sizes, mutate, security)
    assert relay.touched >= 1
    assert res.get("got") == good, res  # every message before the attack, intact
    assert "AuthError" in res.get("kinds", []), res
    assert (res["rank"], res["peer"]) == (0, 1), res
    assert "tampered" in res["message"] and "rank 1" in res["message"], res
    assert res["elapsed"] < DEADLINE, res


class _Cutter(P2PRelay):
    """Forwards half of rank 1's message 1 (unit 2), then closes both ways: what a sender
    killed in mid-send (or a path that cuts the connection) looks like."""

    def _pump(self, src, dst, prefix, mutate):  # type: ignore[no-untyped-def]
        return super()._pump(src, dst, prefix, _half_of_unit_two(dst, mutate))


def test_a_sender_cut_off_in_mid_message_is_a_lost_peer() -> None:
    res, _ = _p2p_job([1024, 1 << 14, 8], lambda index, unit: [unit], relay_cls=_Cutter)
    assert res.get("got") == [0] and res.get("error") == "PeerLost", res
    assert (res["rank"], res["peer"]) == (0, 1) and res["elapsed"] < DEADLINE, res


def test_point_to_point_links_are_intact_through_a_quiet_relay() -> None:
    res, relay = _p2p_job([1024, 1 << 18, 7], lambda index, unit: [unit])
    assert res.get("got") == [0, 1, 2] and "error" not in res, res
    assert relay.touched == 0


def test_idle_strangers_on_the_point_to_point_port_do_not_block_a_send() -> None:
    import numpy as np

    from terascale.transport.p2p import PointToPoint

    secret = secrets.token_bytes(32)
    a, b = PointToPoint(0, 2, secret), PointToPoint(1, 2, secret)
    strangers = []
    try:
        for p in (a, b):
            p.connect_to([a.address, b.address])
        # idle connections, one dribbling bytes, one speaking garbage: each is vetted in a
        # thread of its own (10 s deadline), so none of them delays rank 1's connection
        strangers = [socket.create_connection(a.address) for _ in range(40)]
        strangers[0].sendall(b"\x01")
        strangers[1].sendall(os.urandom(200))
        time.sleep(0.2)
        start = time.monotonic()
        out = np.zeros(256, np.float32)
        req = a.post_recv(1, 3, memoryview(out), 5.0)
        b.send(0, 3, memoryview(np.full(256, 2.0, np.float32)), 5.0)
        assert req.wait() == 1 and (out == 2.0).all()
        assert time.monotonic() - start < 3.0
    finally:
        for s in strangers:
            s.close()
        a.close()
        b.close()


def test_point_to_point_peers_agree_on_link_security() -> None:
    from terascale._errors import AuthError
    from terascale.transport.p2p import PointToPoint

    secret = secrets.token_bytes(32)
    a = PointToPoint(0, 2, secret, security="encrypt")
    b = PointToPoint(1, 2, secret, security="integrity")
    try:
        for p in (a, b):
            p.connect_to([a.address, b.address])
        with pytest.raises(AuthError, match="rank 1: point-to-point link to rank 0 refused.*"
                                            "runs encrypt"):
            b.send(0, 0, memoryview(b"x" * 8), 5.0)
    finally:
        a.close()
        b.close()


def test_the_benchmark_plaintext_mode_needs_every_rank_to_ask_for_it(tmp_path: Path) -> None:
    """One rank's TERASCALE_UNAUTHENTICATED_BENCHMARK never lowers another's links: the job
    runs the strongest mode any rank asked for, so both ranks authenticate."""
    results, _, _ = _job(tmp_path, env=[{"TERASCALE_UNAUTHENTICATED_BENCHMARK": "1"}, {}])
    assert [(r.get("ok"), r.get("mode")) for r in results] == [(True, "integrity")] * 2, results


class _Recorder(Relay):
    """Forwards untouched and keeps every byte each dialer sent, per connection."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.sessions: list[bytearray] = []
        super().__init__(target)

    def _pump(self, src, dst, prefix, mutate):  # type: ignore[no-untyped-def]
        if prefix != self.dial_prefix:
            return super()._pump(src, dst, prefix, mutate)
        seen = bytearray()
        self.sessions.append(seen)
        try:
            while chunk := src.recv(1 << 16):
                seen += chunk
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            shut_both(src, dst)


def _join_both(address: tuple[str, int], secret: bytes) -> list[int]:
    """Two workers join the rendezvous at ``address`` (threads); their ranks."""
    from terascale.rendezvous import join

    ranks: list[int] = []

    def go(slot: int) -> None:
        a = join(address, secret, slot=slot, size=2, host_id="h", timeout=DEADLINE)
        a.listener.close()
        ranks.append(a.rank)

    threads = [threading.Thread(target=go, args=(slot,)) for slot in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE + 5)
    return sorted(ranks)


def test_a_recorded_rendezvous_session_replayed_into_a_new_job_is_refused() -> None:
    """Same secret, a later job: the recorded handshake answers an old challenge."""
    secret = secrets.token_hex(16).encode()
    with RendezvousServer(2, secret) as server:
        rec = _Recorder(server.address)
        try:
            assert _join_both(rec.address, secret) == [0, 1]
        finally:
            rec.close()
    old = bytes(rec.sessions[0])
    assert len(old) > _DIAL_PREFIX
    with RendezvousServer(2, secret) as server:
        with socket.create_connection(server.address, timeout=5) as s:
            s.settimeout(5)
            challenge = s.recv(40)
            s.sendall(old)
            verdict = b""
            while len(verdict) < 34 and (chunk := s.recv(34 - len(verdict))):
                verdict += chunk
        assert challenge.startswith(b"TSAUTH1\n")
        assert verdict[:2] == b"NO", verdict
        assert _join_both(server.address, secret) == [0, 1]  # the job is unaffected


def _splicer() -> Mutator:
    """Each stream through the relay (a connection's direction) has a pump thread of its
    own: once one stream reaches a record that another stream already had at the same
    place (past the hellos), it gets the other stream's record instead."""
    seen: dict[int, dict[int, bytes]] = {}
    done: list[bool] = []

    def mutate(index: int, unit: bytes) -> list[bytes]:
        me = threading.get_ident()
        seen.setdefault(me, {})[index] = unit
        if index < 1 or done:
            return [unit]
        other = next((u[index] for t, u in list(seen.items()) if t != me and index in u), None)
        if other is None or other == unit:
            return [unit]
        done.append(True)
        return [other]
    return mutate


def test_a_record_spliced_from_another_ranks_link_is_refused(tmp_path: Path) -> None:
    """Three ranks: the links of ranks 1 and 2 to rank 0 both pass the relay, which moves a
    record from one stream (a link's direction) onto another, at the same place."""
    secret = secrets.token_hex(16).encode()
    mutate = _splicer()
    with RelayedServer(3, secret, link={"up": mutate, "down": mutate}) as server:
        try:
            results = _run_job(server.address, secret, tmp_path / "m", n=3)
        finally:
            for r in server.relays:
                r.close()
    assert server.relays[0].touched == 1
    _all_refused(results)
    assert all("tampered" in r["message"] for r in results), results  # the cause, everywhere


# The pure-Python record layer (no compiled module, as where it was not built) checks the
# same records: the attacks above, on ranks that run it, in both modes.
@pytest.mark.parametrize(("security", "attack"), [
    ("integrity", "flip"), ("integrity", "abort-bit"), ("integrity", "huge-length"),
    ("encrypt", "replay"), ("encrypt", "reflect"), ("integrity", "cut")])
def test_the_python_record_layer_refuses_the_same_attacks(tmp_path: Path, security: str,
                                                          attack: str) -> None:
    env = [{"TERASCALE_NO_CEXT": "1", **({"TERASCALE_ENCRYPT": "1"} if security == "encrypt"
                                         else {})}] * 2
    victim, sender = 0, 1
    if attack == "reflect":
        up, down = _reflector()
        link: dict = {"up": up, "down": down}
        victim, sender = 1, 0
    elif attack == "cut":
        link = {"up": lambda index, unit: [unit], "relay": _Truncator}
    else:
        link = {"up": {"flip": _flip, "abort-bit": _abort_bit, "huge-length": _huge,
                       "replay": _replayer()}[attack]}
    results, _, _ = _job(tmp_path, link=link, env=env)
    assert not any(r.get("compiled", True) for r in results), results  # the Python layer ran
    if attack == "cut":
        _all_refused(results, ("AuthError", "PeerLost"))
        return
    _all_refused(results)
    assert "tampered" in results[victim]["message"], results
    assert f"from rank {sender}" in results[victim]["message"], results
    assert f"aborted because rank {victim} failed" in results[sender]["message"], results


def _hello_flip(index: int, unit: bytes) -> list[bytes]:
    """One bit of the dialling end's sealed hello (unit 0) changed."""
    return [unit[:-20] + bytes([unit[-20] ^ 1]) + unit[-19:]] if index == 0 else [unit]


@pytest.mark.parametrize("security", ["integrity", "encrypt"])
def test_a_point_to_point_hello_altered_on_the_path_fails_the_send(security: str) -> None:
    """The receiver answers a hello that failed its tag after a good handshake, sealed, so
    the sender's send fails at once with an AuthError naming both ranks (not a lost peer)."""
    from terascale import AuthError
    from terascale.transport.p2p import PointToPoint

    secret = secrets.token_bytes(32)
    ends = [PointToPoint(r, 2, secret, security=security, timeout=DEADLINE) for r in (0, 1)]
    relay = P2PRelay(tuple(ends[0].address), up=_hello_flip)
    try:
        ends[0].connect_to([tuple(ends[0].address), tuple(ends[1].address)])
        ends[1].connect_to([relay.address, tuple(ends[1].address)])
        with pytest.raises(AuthError, match="rank 1: point-to-point link to rank 0 refused: "
                                            "rank 0 says this rank's hello failed"):
            ends[1].send(0, 0, memoryview(bytes(64)), DEADLINE)
        assert relay.touched == 1
    finally:
        relay.close()
        for end in ends:
            end.close()


class _CrossSplicer(Relay):
    """Relays both of rank 0's links in a job of three (from ranks 1 and 2), and once puts a
    data record of one link (either direction) in place of a data record of the other link,
    or of the other direction: the records are genuine, only on the wrong link."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.seen: dict[tuple, bytes] = {}  # (dialer's address, way) -> its latest data record
        self.done = False
        self._lock = threading.Lock()

    def _pump(self, src, dst, prefix, mutate):  # type: ignore[no-untyped-def]
        up = prefix == self.dial_prefix
        key = (src.getpeername() if up else dst.getpeername(), up)

        def splice(index: int, unit: bytes) -> list[bytes]:
            with self._lock:
                other = [u for k, u in self.seen.items() if k[0] != key[0] or k[1] != up]
                if index >= 2:
                    self.seen[key] = unit
                if index >= 2 and other and not self.done:
                    self.done = True
                    return [other[0]]
            return [unit]
        return super()._pump(src, dst, prefix, splice)


@pytest.mark.parametrize("security", ["integrity", "encrypt"])
def test_a_record_spliced_from_another_link_of_the_job_is_refused(tmp_path: Path,
                                                                  security: str) -> None:
    """Three ranks; a genuine record of one of rank 0's links (or of its other direction)
    replayed on another: keys are per connection, direction and pair of ranks, so it fails
    its tag and every rank stops."""
    secret = secrets.token_hex(16).encode()
    link = {"up": lambda index, unit: [unit], "down": lambda index, unit: [unit],
            "relay": _CrossSplicer}
    with RelayedServer(3, secret, link=link) as server:
        try:
            results = _run_job(server.address, secret, tmp_path / "attacker-code-ran",
                               [_SECURITY[security]] * 3, n=3)
        finally:
            for r in server.relays:
                r.close()
    assert [r.touched for r in server.relays] == [1]
    _all_refused(results)
    assert any("tampered" in r["message"] for r in results), results


_NO_CEXT = {"TERASCALE_NO_CEXT": "1"}


@pytest.mark.parametrize(("ends", "agreed"), [
    ([_NO_CEXT, {}], "aes-256-gmac"),  # the compiled layer off on one end only
    ([{}, _NO_CEXT], "aes-256-gmac"),
    ([{}, _SECURITY["gmac"]], "aes-256-gmac"),  # GMAC forced on one end only
    ([_SECURITY["encrypt"], {**_SECURITY["encrypt"], **_NO_CEXT}], "aes-256-gcm")])
def test_ends_that_agreed_on_the_floor_still_refuse_an_altered_record(
        tmp_path: Path, ends: list[dict[str, str]], agreed: str) -> None:
    """Two ends that differ (one without the compiled layer, or offering GMAC alone) agree
    on GMAC (or AES-256-GCM), and a flipped or replayed record still stops the job."""
    for attack in (_flip, _replayer()):
        results, _, relays = _job(tmp_path, link={"up": attack}, env=ends)
        assert [r.get("cipher") for r in results] == [agreed] * 2, results
        _all_refused(results)
        assert "tampered" in results[0]["message"] and "from rank 1" in results[0]["message"]
        assert relays[1].touched == 1


_MALFORMED: dict[str, Mutator] = {
    # a record of no bytes (with a tag of noise, or with none) before a genuine one
    "zero-length": lambda i, u: [b"\0\0\0\0" + os.urandom(16), u] if i == 2 else [u],
    "empty-abort": lambda i, u: [b"\x80\0\0\0", u] if i == 2 else [u],
    # an abort record of noise: its tag cannot pass
    "forged-abort": lambda i, u: [b"\x80\0\0\x10" + os.urandom(16), u] if i == 2 else [u],
    # a genuine record with its tag cut off and its length made to match
    "tag-stripped": lambda i, u: ([(int.from_bytes(u[:4], "big") - 16).to_bytes(4, "big")
                                   + u[4:-16]] if i == 2 else [u]),
}


@pytest.mark.parametrize("security", ["integrity", "encrypt"])
@pytest.mark.parametrize("attack", sorted(_MALFORMED))
def test_empty_forged_abort_or_tagless_records_abort_the_job(tmp_path: Path, attack: str,
                                                            security: str) -> None:
    results, _, relays = _job(tmp_path, link={"up": _MALFORMED[attack]},
                              env=_security_env(security))
    _ran(results, security)
    _all_refused(results)
    assert "tampered" in results[0]["message"] and "from rank 1" in results[0]["message"]
    assert relays[1].touched == 1
