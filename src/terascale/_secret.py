"""Where the job secret comes from: the caller, TERASCALE_SECRET, or an owner-only file.

Never derived: a secret every rank could compute from the job's address, size or run id is
one an attacker can compute too. ``terascale run`` and our engines make a fresh secret per
job; outside them the user provides it (read by :func:`terascale._env.read_env`, which
calls :func:`read_secret`).
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import secrets
import stat
from collections.abc import Mapping

from ._errors import ConfigError

__all__ = ["is_loopback", "read_secret"]

# A size-1 job needs no shared secret (nobody else may join it); one per process keeps
# repeated init() calls of that process on the same job.
_SOLO_SECRET = secrets.token_bytes(32)


def _flag(env: Mapping[str, str], name: str) -> bool:
    return env.get(name, "").strip().lower() in ("1", "true", "yes")


def is_loopback(host: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ::1 (no name lookup: a name could lie)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_secret(env: Mapping[str, str], secret: str | bytes | None,
                 secret_file: str | os.PathLike[str] | None, launcher: str, rank: int,
                 size: int, addr: tuple[str, int] | None) -> bytes:
    """The job secret from the argument, TERASCALE_SECRET or a file; never derived.

    A secret every rank could compute from the job's address would be one an attacker can
    compute too, so outside our own launchers the user must provide it.
    """
    where = "secret="
    if secret is None and secret_file is None:
        secret, where = env.get("TERASCALE_SECRET"), "TERASCALE_SECRET"
        if secret is None and env.get("TERASCALE_SECRET_FILE"):
            secret_file = env["TERASCALE_SECRET_FILE"]
    if secret is None and secret_file is not None:
        where = "secret_file=" if where == "secret=" else "TERASCALE_SECRET_FILE"
        secret = _secret_from_file(os.fspath(secret_file), where)
    if secret is not None:
        data = secret.encode() if isinstance(secret, str) else bytes(secret)
        if not data:
            raise ConfigError(f"rank {rank}: {where} is empty; the job secret must be a "
                              "non-empty string known to every rank")
        return data
    if size == 1:
        return _SOLO_SECRET
    if _flag(env, "TERASCALE_INSECURE_NO_SECRET"):
        if addr is None or not is_loopback(addr[0]):
            raise ConfigError(f"rank {rank}: TERASCALE_INSECURE_NO_SECRET=1 works only with a "
                              f"loopback rendezvous (127.0.0.1), not {addr}; set "
                              "TERASCALE_SECRET or TERASCALE_SECRET_FILE instead")
        # Anyone on this machine can compute it: the opt-out trusts every local user.
        return hashlib.sha256(f"terascale-insecure|{addr}|{size}".encode()).digest()
    raise ConfigError(
        f"rank {rank}: started by {launcher} as rank {rank} of {size} without a job secret. "
        "Give every rank the same secret: export TERASCALE_SECRET=$(python -c \"import secrets; "
        "print(secrets.token_hex(32))\") before launching, or TERASCALE_SECRET_FILE=PATH "
        "(a file only its owner can read: chmod 600), or init(secret=...) / "
        "init(secret_file=...). (terascale run makes one for you; on a trusted single "
        "machine TERASCALE_INSECURE_NO_SECRET=1 skips it for a loopback rendezvous.)")


def _secret_from_file(path: str, where: str) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        raise ConfigError(f"{where}={path!r}: cannot read the job secret ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(f"{where}={path!r} is readable by others (mode "
                              f"{stat.S_IMODE(st.st_mode):04o}); a job secret file must be "
                              f"readable only by its owner: chmod 600 {path}")
        if st.st_uid != os.getuid():
            raise ConfigError(f"{where}={path!r} belongs to uid {st.st_uid}, not to this "
                              f"user ({os.getuid()}); the secret file must be the user's own")
        data = os.read(fd, 64 * 1024)
    finally:
        os.close(fd)
    if not data.strip():
        raise ConfigError(f"{where}={path!r} is empty; write the job secret into it")
    return data.strip()  # a trailing newline from `echo` is not part of the secret
