"""Addresses of this machine for the bind tests: loopback, and one of another interface."""

from __future__ import annotations

import fcntl
import socket
import struct

_SIOCGIFADDR = 0x8915


def other_address() -> str | None:
    """An IPv4 address of a non-loopback interface of this host, or None when there is none.

    Binding it and connecting to it stay on this machine (the kernel routes to its own
    addresses over loopback), so a test can tell "the given interface" from loopback and
    from every interface without any network.
    """
    for _, name in socket.if_nameindex():
        if name == "lo":
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                packed = fcntl.ioctl(s.fileno(), _SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue
        addr = socket.inet_ntoa(packed[20:24])
        if not addr.startswith("127."):
            return addr
    return None
