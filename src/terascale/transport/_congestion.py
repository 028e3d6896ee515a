"""The TCP congestion control of the data links: CUBIC unless told otherwise.

An allreduce's flows are bulk transfers that start and stop at every step, each to a
different peer (halving/doubling, the tree), often into a link that another flow is still
filling. BBR (v1, the default of some distributions and of this project's test machine)
handles that badly: a flow that restarts after an idle step probes its bandwidth and
round-trip time again, and two BBR flows through one rate-limited link leave it idle part
of the time, with no retransmission: the difference is how each algorithm paces, not
loss (the figures and their command: ``docs/benchmarks/cluster.md``, "CUBIC against BBR").
A connection switched to CUBIC after its handshake keeps the pacing BBR turned on, so the
algorithm is set on the listener, which accepted links inherit, and on the dialing socket
before it connects. CUBIC is Linux's own default.

``TERASCALE_TCP_CONGESTION`` chooses: unset, ``cubic`` where the kernel allows it
(``net.ipv4.tcp_allowed_congestion_control``; it nearly always does) and the host's
default otherwise; ``system``, the host's default whatever it is; any other name (``bbr``,
``reno``, ``dctcp``...), that one, or a ``ConfigError`` saying which the kernel allows.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from .._errors import ConfigError

__all__ = ["DEFAULT", "VARIABLE", "choose", "tune"]

VARIABLE = "TERASCALE_TCP_CONGESTION"
DEFAULT = "cubic"
_ALLOWED = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"


def choose(env: Mapping[str, str] | None = None) -> tuple[str | None, bool]:
    """(algorithm to set or None to leave the host's, whether it was asked for by name)."""
    raw = (os.environ if env is None else env).get(VARIABLE, "").strip().lower()
    if raw == "system":
        return None, False
    if raw:
        return raw, True
    return DEFAULT, False


def tune(sock: socket.socket, env: Mapping[str, str] | None = None) -> None:
    """Set the chosen congestion control on ``sock`` (before it connects or listens).

    The default quietly keeps the host's choice where CUBIC is not allowed (or the platform
    has no ``TCP_CONGESTION``); a name the user gave must take, or ``ConfigError``."""
    algo, explicit = choose(env)
    if algo is None:
        return
    option = getattr(socket, "TCP_CONGESTION", None)
    if option is None:
        if explicit:
            raise ConfigError(f"{VARIABLE}={algo}: this platform has no per-socket "
                              "congestion control (TCP_CONGESTION); unset it or use 'system'")
        return
    try:
        sock.setsockopt(socket.IPPROTO_TCP, option, algo.encode())
    except OSError as e:
        if explicit:
            raise ConfigError(f"{VARIABLE}={algo}: the kernel refused it ({e.strerror}); "
                              f"allowed here: {_allowed()} ({_ALLOWED}), or 'system' for the "
                              "host's default") from None


def _allowed() -> str:
    try:
        with open(_ALLOWED) as f:
            return f.read().strip() or "none"
    except OSError:
        return "unknown"
