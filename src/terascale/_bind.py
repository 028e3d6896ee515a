"""Where our listeners bind: the address the job was given, never every interface by default.

Every server socket of terascale (a rank-0 or standalone rendezvous, the multi-node
coordinator, the Spark and Ray runners' rendezvous, the torch backend's, the parameter
server, every rank's peer port) listens on one address: the one its peers were told to
use. A job whose address is loopback is then unreachable from the network at all, and a
job on one interface of a multi-homed host is not offered on the others. Every interface
(``0.0.0.0`` / ``::``) is used only when the user says so: ``TERASCALE_BIND=0.0.0.0`` for
the servers started inside a process, ``--bind 0.0.0.0`` for the commands.

The job secret stays the real protection (a stranger who reaches a port is refused); the
bind address only narrows who can reach it, which also keeps idle strangers from other
networks off the ports (see ``terascale._admission``).
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket

from ._errors import ConfigError

__all__ = ["bind_address", "bind_error", "route_to"]

log = logging.getLogger(__name__)  # terascale._bind


def bind_address(host: str, *, bind: str | None = None, what: str = "the rendezvous host",
                 hint: str = "") -> str:
    """The address to listen on for peers that connect to ``host``: ``bind`` when given,
    else ``host`` resolved (an IP address stays itself; loopback stays loopback).

    ``what`` names where ``host`` came from and ``hint`` what to check, for the ConfigError
    when it does not resolve.
    """
    if bind:
        return bind
    try:
        address = str(socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)[0][4][0])
    except socket.gaierror as e:
        raise ConfigError(f"{what} {host!r} does not resolve ({e.strerror})"
                          + (f"; {hint}" if hint else "")) from None
    if _loopback(address) and not _loopback(host) and host != "localhost":
        # A host name that this host resolves to loopback (Debian's "127.0.1.1 hostname"
        # line in /etc/hosts): other machines resolve it elsewhere and cannot reach us here.
        log.warning("%s %r resolves to %s (loopback) on this host: only this machine can "
                    "connect; give this host's network address instead, or the bind address "
                    "explicitly", what, host, address)
    return address


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:  # a host name
        return False


def bind_error(e: OSError, address: str, port: int, host: str, opt_out: str) -> Exception:
    """The error to raise when listening on ``address:port`` failed: a ConfigError that says
    what to do when ``address`` is not this host's (``opt_out`` names the setting that
    listens on every interface, e.g. ``--bind 0.0.0.0``); ``e`` itself otherwise."""
    if e.errno == errno.EADDRNOTAVAIL:
        return ConfigError(f"cannot listen on {address}:{port}: {host!r} is not an address of "
                           f"this host; run this there, or set {opt_out} to listen on every "
                           "interface")
    return e


def route_to(target: str | None) -> str:
    """This host's address on the route to ``target`` (loopback when there is none).

    What peers on ``target``'s network reach this host at: the source address the kernel
    would pick to send there (no packet is sent; a UDP ``connect`` only picks the route).
    """
    if target:
        try:
            family = socket.AF_INET6 if ":" in target else socket.AF_INET
            with socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect((target, 9))
                return str(s.getsockname()[0])
        except OSError:
            pass
    return "127.0.0.1"
