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

__all__ = ["is_loopback", "read_secret", "user_secret"]

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


def user_secret(env: Mapping[str, str], secret: str | bytes | None = None,
                secret_file: str | os.PathLike[str] | None = None, *,
                file_name: str = "secret_file") -> bytes | None:
    """The job secret the user gave, or None: ``secret``, else the file ``secret_file``,
    else TERASCALE_SECRET, else the file TERASCALE_SECRET_FILE.

    The one reader of those variables and files (``terascale.init``, ``terascale run``'s and
    ``terascale rendezvous``'s ``--secret-file``, the torch backend). ``file_name`` is how
    ``secret_file`` is named in errors (``--secret-file`` for a command's flag). A file must
    be a regular file of this user that nobody else may read, and not empty; anything else
    is a :class:`ConfigError` naming it (a FIFO is refused, never waited on).
    """
    where = "secret="
    if secret is None and secret_file is None:
        secret, where = env.get("TERASCALE_SECRET"), "TERASCALE_SECRET"
        if secret is None and env.get("TERASCALE_SECRET_FILE"):
            secret_file, file_name = env["TERASCALE_SECRET_FILE"], "TERASCALE_SECRET_FILE"
    if secret is None and secret_file is not None:
        return _secret_from_file(os.fspath(secret_file), file_name)
    if secret is None:
        return None
    data = secret.encode() if isinstance(secret, str) else bytes(secret)
    if not data:
        raise ConfigError(f"{where} is empty; the job secret must be a non-empty string known "
                          "to every rank")
    return data


def read_secret(env: Mapping[str, str], secret: str | bytes | None,
                secret_file: str | os.PathLike[str] | None, launcher: str, rank: int,
                size: int, addr: tuple[str, int] | None) -> bytes:
    """The job secret from the argument, TERASCALE_SECRET or a file (:func:`user_secret`);
    never derived.

    A secret every rank could compute from the job's address would be one an attacker can
    compute too, so outside our own launchers the user must provide it.
    """
    try:
        given = user_secret(env, secret, secret_file)
    except ConfigError as e:
        raise ConfigError(f"rank {rank}: {e}") from None
    if given is not None:
        return given
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


_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO (named pipe)",
          stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device"}


def _secret_from_file(path: str, name: str) -> bytes:
    # `--secret-file 'x'` for a command's flag, `secret_file='x'` for an argument or variable
    what = f"{name} {path!r}" if name.startswith("-") else f"{name}={path!r}"
    try:  # O_NONBLOCK: opening a FIFO must not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise ConfigError(f"{what}: cannot read the job secret ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
            raise ConfigError(f"{what} is {kind}; the job secret must be in a regular file "
                              "(chmod 600)")
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(f"{what} is readable by others (mode "
                              f"{stat.S_IMODE(st.st_mode):04o}); a job secret file must be "
                              f"readable only by its owner: chmod 600 {path}")
        if st.st_uid != os.getuid():
            raise ConfigError(f"{what} belongs to uid {st.st_uid}, not to this user "
                              f"({os.getuid()}); the secret file must be the user's own")
        try:
            data = os.read(fd, 64 * 1024)
        except OSError as e:
            raise ConfigError(f"{what}: cannot read the job secret ({e.strerror})") from None
    finally:
        os.close(fd)
    if not data.strip():
        raise ConfigError(f"{what} is empty; write the job secret into it")
    return data.strip()  # a trailing newline from `echo` is not part of the secret
