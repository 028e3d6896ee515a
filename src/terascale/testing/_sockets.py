"""Which addresses listen on a TCP port: the check that a server is not on every interface."""

from __future__ import annotations

import os
import socket

__all__ = ["listening"]


def listening(port: int, pid: int | None = None) -> list[str]:
    """The local addresses of the TCP sockets listening on ``port`` in this network namespace
    (``0.0.0.0`` / ``::`` for a wildcard bind), read from ``/proc/net/tcp`` and ``tcp6``.

    Every process's sockets are listed there, so a test, a Spark task or a Ray actor can tell
    where a server of another process of its host listens. Empty off Linux.

    Parameters
    ----------
    port
        The TCP port to look for.
    pid
        Only the sockets this process holds (its open descriptors): another process's
        server may listen on the same port number at another address of the host.
        Default None: every process's.
    """
    held = None if pid is None else _socket_inodes(pid)
    found = []
    for path, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            with open(path) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) < 4 or fields[3] != "0A":  # 0A: TCP_LISTEN
                continue
            addr, _, hexport = fields[1].partition(":")
            if int(hexport, 16) != port or (held is not None and fields[9] not in held):
                continue
            raw = bytes.fromhex(addr)  # 32-bit words in the kernel's (little-endian) order
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found.append(socket.inet_ntop(family, raw))
    return found


def _socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets process ``pid`` holds open (``socket:[N]`` links)."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return inodes
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes
