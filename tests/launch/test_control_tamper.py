"""An on-path relay on a multi-node job's control link (node 1's launcher <-> node 0's
coordinator) that lacks the job secret can neither forge a verdict nor go unnoticed.

Node 1 joins through :class:`_Relay` (``--rendezvous`` names the relay); node 0's launcher
and the workers' own links go direct. The relay forwards each side's handshake untouched,
then rewrites what follows: a failure report turned into a success, or one flipped bit.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from _tcp_pair import shut_both

JOB = str(Path(__file__).parent / "_cluster_job.py")
_DIAL_PREFIX = 8 + 32 + 32  # the dialer's handshake answer: magic, nonce, proof
_ACCEPT_PREFIX = 8 + 32 + 2 + 32  # the acceptor's challenge, then its verdict and proof

Rewrite = Callable[[bytes], bytes]


class _Relay:
    """Forwards node 1's control connection to ``target``, rewriting each side's bytes
    after the handshake with ``up`` (node -> coordinator) / ``down``; ``seen`` keeps all the
    bytes that went up after the handshake."""

    def __init__(self, target: tuple[str, int], up: Rewrite | None = None,
                 down: Rewrite | None = None) -> None:
        self.target, self.up, self.down = target, up, down
        self.seen = bytearray()
        self.raw = bytearray()  # every byte node 1 sent, handshake included
        self._lst = socket.create_server(("127.0.0.1", 0))
        self.port = self._lst.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                a, _ = self._lst.accept()
            except OSError:
                return
            try:
                b = socket.create_connection(self.target, timeout=5)
            except OSError:  # node 0 is not listening yet: node 1 retries
                a.close()
                continue
            b.settimeout(None)
            threading.Thread(target=self._pump, args=(a, b, _DIAL_PREFIX, self.up, True),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(b, a, _ACCEPT_PREFIX, self.down, False),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, prefix: int,
              rewrite: Rewrite | None, up: bool) -> None:
        try:
            while chunk := src.recv(1 << 16):
                if up:
                    self.raw += chunk
                if prefix:
                    k = min(prefix, len(chunk))
                    dst.sendall(chunk[:k])
                    chunk, prefix = chunk[k:], prefix - k
                if chunk and up:
                    self.seen += chunk
                if chunk and rewrite is not None:
                    chunk = rewrite(chunk)
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            shut_both(src, dst)

    def close(self) -> None:
        self._lst.close()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _two_nodes(tmp_path: Path, relay_up: Rewrite | None = None,
               relay_down: Rewrite | None = None, env: dict[str, str] | None = None,
               replay: bytes = b"") -> tuple[list[tuple[int, str, float]], _Relay]:
    secret = tmp_path / "secret"
    if not secret.exists():
        secret.write_text(os.urandom(16).hex())
        secret.chmod(0o600)
    port = _port()
    relay = _Relay(("127.0.0.1", port), relay_up, relay_down)
    if replay:  # an old session, sent to node 0 before node 1 joins
        threading.Thread(target=_replay, args=(port, replay), daemon=True).start()
        time.sleep(0.5)
    procs = []
    t0 = time.monotonic()
    for k, rdv in ((0, port), (1, relay.port)):
        if k == 1 and replay:
            time.sleep(2.0)  # the replay reaches node 0 first
        argv = [sys.executable, "-m", "terascale", "run", "-n", "1", "--nnodes", "2",
                "--node-rank", str(k), "--rendezvous", f"127.0.0.1:{rdv}", "--secret-file",
                str(secret), "--host-id", f"node{k}", "--timeout", "10", sys.executable, JOB]
        procs.append(subprocess.Popen(argv, env={**os.environ, **(env or {})},
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      text=True))
    out = []
    try:
        for p in procs:
            _, err = p.communicate(timeout=60)
            out.append((p.returncode, err, time.monotonic() - t0))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        relay.close()
    return out, relay


def _replay(port: int, data: bytes) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(data)
                time.sleep(3)
                return
        except OSError:
            time.sleep(0.1)


def test_a_recorded_session_replayed_into_a_later_job_is_refused(tmp_path: Path) -> None:
    """Node 1's whole control session of one job (handshake, hello, reports), replayed to
    the next job's coordinator under the same secret: the fresh challenge refuses it, so
    it neither takes node 1's place nor changes the result; the real node 1 joins."""
    first, relay = _two_nodes(tmp_path, env={"JOB_MODE": "once"})
    assert [r[0] for r in first] == [0, 0], first
    second, _ = _two_nodes(tmp_path, env={"JOB_MODE": "once"}, replay=bytes(relay.raw))
    assert [r[0] for r in second] == [0, 0], second
    assert "1 failed authentication" in second[0][1], second[0][1]


def test_a_failure_report_cannot_be_rewritten_into_a_success(tmp_path: Path) -> None:
    """Rank 1 (node 1) exits 7; the relay turns every ``"status":7`` it can read in node 1's
    report into ``"status":0``. The job must still fail, named, on both nodes -- and the relay
    must not have read any control message at all."""
    forged = lambda b: b.replace(b'"status":7', b'"status":0')  # noqa: E731
    results, relay = _two_nodes(tmp_path, relay_up=forged,
                                env={"JOB_MODE": "die", "JOB_RANK": "1"})
    assert [r[0] for r in results] == [7, 7], results
    for _, err, _ in results:
        assert "rank 1 (node 1) failed first (exit status 7)" in err, err
    assert relay.seen, "the relay saw nothing after the handshake"
    assert b'"kind"' not in relay.seen and b"node1" not in relay.seen, bytes(relay.seen[:200])


def _flip_once() -> Rewrite:
    done = [False]

    def flip(chunk: bytes) -> bytes:
        if done[0] or len(chunk) < 8:
            return chunk
        done[0] = True
        b = bytearray(chunk)
        b[6] ^= 0x01  # inside the first message after the handshake, past any length field
        return bytes(b)
    return flip


def test_a_flipped_bit_on_the_control_link_ends_both_nodes_as_tampered(tmp_path: Path) -> None:
    """One bit flipped in the coordinator's first message to node 1: node 1 refuses it as
    tampered (an authentication failure naming the link), and the job ends on both nodes
    within the deadline, non-zero."""
    results, _ = _two_nodes(tmp_path, relay_down=_flip_once(), env={"JOB_MODE": "once"})
    assert all(r[0] != 0 for r in results), results
    assert all(r[2] < 45 for r in results), results
    err1 = results[1][1]
    assert "LinkTampered" in err1 and "node 0's launcher" in err1, err1
