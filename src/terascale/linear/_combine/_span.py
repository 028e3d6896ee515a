"""``terascale span-server``: a spanning-tree server speaking Vowpal Wabbit's protocol.

VW's cluster mode (``--span_server HOST --total N --node K --unique_id U``) needs a
rendezvous daemon that puts the N nodes of a job into a binary tree for VW's allreduce. The
protocol (little-endian, as VW sends its ``size_t``/``int`` values raw on x86-64): a node
sends ``unique_id``, ``total``, ``node`` (3 x uint64); the server answers ``ok`` (int32).
When all ``total`` nodes of a ``unique_id`` are in, the server sorts them by (IP, arrival),
builds VW's balanced tree (root ``2^floor(log2 n) - 1``, recursively left and right), sends
every node its child count (uint16), reads back the port each node listens on (uint16,
network order, forwarded as is), and sends every node its parent's IPv4 address and port,
or all ones for the root. With it, users of the ``vowpalwabbit`` PyPI package can run
clusters without building VW's C++ daemon, and ``terascale bench linear`` runs VW's cluster
mode side by side with terascale.

VW's protocol has no authentication, but a stranger still cannot stall the server: every
connection is read in a thread of its own with ``_HELLO_S`` to send its hello, one address
holding more than ``_PER_SOURCE`` connections that have not said hello has its oldest shut
(:class:`terascale._admission.Admission`), and a complete job's nodes get ``_TREE_S`` to
send their ports. An idle connection therefore delays no job (VW's own daemon reads each
hello inline, so one idle connection stops every job behind it).
"""

from __future__ import annotations

import math
import socket
import struct
import sys
import threading
import time

from ..._admission import Admission
from ..._bind import bind_error
from ..._errors import ConfigError
from ._spancli import DEFAULT_PORT

__all__ = ["SpanServer", "build_tree"]

_HELLO_S = 5.0  # a connection must send its hello (unique id, total, node) within this
_TREE_S = 60.0  # once a job's nodes are all in, each must send its port within this
_PER_SOURCE = 64  # connections one address may hold before their hello; more evict its oldest


def build_tree(n: int) -> tuple[list[int], list[int]]:
    """(parent, kid count) per position for n nodes, VW's layout; the root's parent is -1."""
    parent = [-1] * n
    kids = [0] * n

    def build(count: int, offset: int) -> int:
        if count == 1:
            kids[offset] = 0
            return offset
        height = int(math.floor(math.log(count) / math.log(2.0)))
        root = (1 << height) - 1
        left = build(root, offset)
        oroot = root + offset
        parent[left] = oroot
        right_count = count - root - 1
        if right_count > 0:
            parent[build(right_count, oroot + 1)] = oroot
            kids[oroot] = 2
        else:
            kids[oroot] = 1
        return oroot

    if n > 0:
        parent[build(n, 0)] = -1
    return parent, kids


def _recv_exact(s: socket.socket, n: int, deadline: float) -> bytes:
    buf = b""
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"timed out after {len(buf)} of {n} bytes")
        s.settimeout(left)
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed")
        buf += chunk
    return buf


class SpanServer:
    """The server; ``start()`` runs it in a daemon thread, ``serve_forever()`` in this one.

    Parameters
    ----------
    port
        The port to listen on (default VW's 26543; 0: any free one).
    host
        The address to listen on (default loopback: VW workers on this host only; VW's protocol has
        no authentication).
    quiet
        Log nothing (default True); False logs every job to standard error.
    """

    def __init__(self, port: int = DEFAULT_PORT, host: str = "127.0.0.1", quiet: bool = True) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
        except OSError as e:
            self.sock.close()
            err = bind_error(e, host, port, host, "--host 0.0.0.0")
            if err is e:  # in use, no permission: still the flag's fault, not a crash
                err = ConfigError(f"span-server: cannot listen on {host}:{port}: {e.strerror}")
            raise err from e
        self.sock.listen(1024)
        self.port = self.sock.getsockname()[1]
        self.quiet = quiet
        self._stop = False
        self._pending: dict[int, dict[int, tuple[socket.socket, bytes, int]]] = {}
        self._arrival = 0
        self._lock = threading.Lock()
        self._admission = Admission(per_source=_PER_SOURCE)

    def start(self) -> SpanServer:
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop = True
        self._admission.shut_all()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def _log(self, msg: str) -> None:
        if not self.quiet:
            print(f"span-server: {msg}", file=sys.stderr, flush=True)

    def serve_forever(self) -> None:
        while not self._stop:
            try:
                conn, (ip, _) = self.sock.accept()
            except OSError:
                if self._stop:
                    return
                self._admission.evict(None)  # out of descriptors: shed the oldest stranger
                time.sleep(0.01)
                continue
            self._admission.admit(conn, ip)
            threading.Thread(target=self._client, args=(conn, ip), daemon=True,
                             name="terascale-span-client").start()

    def _client(self, conn: socket.socket, ip: str) -> None:
        try:
            self._handle(conn, ip)
        except (OSError, struct.error) as e:  # TimeoutError and ConnectionError included
            self._log(f"dropped a client from {ip}: {e}")
            conn.close()
        finally:
            self._admission.done(conn)

    def _handle(self, conn: socket.socket, ip: str) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        nonce, total, node = struct.unpack("<QQQ", _recv_exact(conn, 24,
                                                               time.monotonic() + _HELLO_S))
        self._admission.done(conn)  # a node now: no longer a candidate for eviction
        with self._lock:  # "ok" goes out before any other node can complete the job
            group = self._pending.setdefault(nonce, {})
            ok = node < total and node not in group
            conn.settimeout(_HELLO_S)
            conn.sendall(struct.pack("<i", 1 if ok else 0))
            if not ok:
                self._log(f"job {nonce}: rejected node {node} of {total}")
                conn.close()
                return
            self._arrival += 1
            group[node] = (conn, socket.inet_aton(ip), self._arrival)
            self._log(f"job {nonce}: node {node} of {total} from {ip} ({len(group)} in)")
            if len(group) < total:
                return
            del self._pending[nonce]
        nodes = sorted(group.values(), key=lambda c: (c[1], c[2]))
        try:
            self._tree(nodes, total)
        finally:
            for c, _, _ in nodes:
                c.close()
        self._log(f"job {nonce}: tree of {total} sent")

    @staticmethod
    def _tree(nodes: list[tuple[socket.socket, bytes, int]], total: int) -> None:
        deadline = time.monotonic() + _TREE_S
        parent, kids = build_tree(total)
        for (c, _, _), k in zip(nodes, kids):
            c.settimeout(_HELLO_S)
            c.sendall(struct.pack("<H", k))
        ports = [_recv_exact(c, 2, deadline) for c, _, _ in nodes]
        for i, (c, _, _) in enumerate(nodes):
            p = parent[i]
            if p >= 0:
                c.sendall(nodes[p][1] + ports[p])
            else:
                c.sendall(b"\xff" * 4 + struct.pack("<i", -1))
