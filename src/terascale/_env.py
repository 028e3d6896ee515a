"""The environment contract between a launcher and ``terascale.init()``: one reader, one writer.

Every launcher of ours (``terascale run``, the Spark and Ray runners, the test harness
:func:`terascale.testing.run_workers`) describes a worker's place in its job as a
:class:`JobEnv` and writes it with :meth:`JobEnv.to_environ`; the worker reads it back with
:func:`read_env`. No other code writes these variables, so adding one is a change here only.

===========================  ==================================================================
``TERASCALE_RANK``/``SIZE``  this worker's rank and the job's size
``TERASCALE_RENDEZVOUS``     ``HOST:PORT`` of the rendezvous server
``TERASCALE_SECRET``         the job secret (HMAC key of the rendezvous and of every link)
``TERASCALE_ENCRYPT``        ``1``: every TCP link is encrypted and authenticated (AES-GCM)
``TERASCALE_JOB``            the job id (names shared-memory segments, shown in errors)
``TERASCALE_TIMEOUT``        default deadline of the rendezvous and of every collective (s)
``TERASCALE_RESTART``        the attempt number (0 first; ``Checkpoint`` users resume on > 0)
``TERASCALE_HOST_ID``        overrides how hosts are told apart (default: :func:`host_identity`)
``TERASCALE_TIMELINE``       where ``init()`` records the collectives (Chrome trace events)
``TERASCALE_LINK_RATE``      the links' rate between hosts (``100Mbit``, bits/s): ``auto``'s
                             cost model (the rendezvous gives every rank the smallest asked)
``TERASCALE_NODE_CORES``     the cores this node's workers share when the launcher bound each
                             to a block of them (the spin waits count these, not the block)
``RANK``/``WORLD_SIZE``      torchrun's names, written beside ours when ``master`` is set, with
``LOCAL_RANK``, ...          ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``: torch's
                             default ``env://`` initialization then works unchanged
===========================  ==================================================================

Other launchers' variables are read too (never written): torchrun (``RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``), Open MPI (``OMPI_COMM_WORLD_RANK``/
``SIZE``), MPICH (``PMI_RANK``/``SIZE``) and Slurm (``SLURM_PROCID``, ``SLURM_NTASKS``).
Those launchers make no secret, so the user gives one, read only here:
``TERASCALE_SECRET``, or ``TERASCALE_SECRET_FILE`` (a file only its owner can read);
``TERASCALE_INSECURE_NO_SECRET=1`` runs without one on a loopback rendezvous only;
``TERASCALE_BIND`` is where the servers started inside a process listen (rank 0's
rendezvous, the Spark and Ray runners' and the torch backend's; default: the job's own
address, loopback when that is loopback; ``0.0.0.0`` for every interface);
``TERASCALE_TCP_CONGESTION`` is the data links' congestion control (default ``cubic``,
``system`` for the host's; read by :mod:`terascale.transport._congestion`);
``TERASCALE_ALGORITHMS`` names modules (comma-separated) that register allreduce algorithms
of their own (:func:`terascale.collectives.register_algorithm`): every process imports them
on its first lookup of an algorithm, so workers started by ``terascale run`` or ``terascale
bench`` know what the parent registered (:func:`read_algorithm_modules`).
``TERASCALE_NO_CPU_BIND=1`` keeps ``terascale run`` from binding its workers to cores
(:mod:`terascale.launch.cpubind`).
``TERASCALE_TRANSPORT`` names the transport ``init()`` links the ranks with (default
``tcp``; see :mod:`terascale.transport.base`; every rank must name the same one).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, fields

from ._errors import ConfigError

__all__ = ["ENV_KEYS", "JobEnv", "SETTINGS", "host_identity", "parse_address",
           "read_algorithm_modules", "read_bind", "read_env", "read_flag", "read_link_rate",
           "read_node_cores",
           "read_setting", "read_switch", "read_timeout", "read_transport"]

ENV_KEYS = ("TERASCALE_RANK", "TERASCALE_SIZE", "TERASCALE_RENDEZVOUS", "TERASCALE_SECRET",
            "TERASCALE_JOB", "TERASCALE_TIMEOUT", "TERASCALE_RESTART", "TERASCALE_HOST_ID",
            "TERASCALE_TIMELINE", "TERASCALE_ENCRYPT", "TERASCALE_LINK_RATE",
            "TERASCALE_NODE_CORES")


_LAUNCHERS = [  # (name, rank variable, size variable)
    ("terascale run", "TERASCALE_RANK", "TERASCALE_SIZE"),
    ("torchrun", "RANK", "WORLD_SIZE"),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("MPICH", "PMI_RANK", "PMI_SIZE"),
    ("Slurm", "SLURM_PROCID", "SLURM_NTASKS"),
]


@dataclass(frozen=True)
class JobEnv:
    """Where this process stands in its job, as read from (or written to) the environment.

    ``launcher`` and ``serve`` are derived by :func:`read_env` (``serve``: this process
    starts the rendezvous server, as rank 0 does outside our own launchers); the optional
    fields are None where the variable is not set. Its ``repr`` shows the secret as
    ``<redacted>``.

    Parameters
    ----------
    launcher
        Who started the process (``"terascale run"``, ``"torchrun"``, ...), as
        :func:`read_env` recognised it from the variables.
    rank
        This worker's place in the job, 0 to ``size - 1``.
    size
        The number of workers in the job.
    rendezvous
        The rendezvous server's ``(host, port)``; None for a job of size 1.
    secret
        The job secret every rank shares (bytes; shown as ``<redacted>``).
    serve
        Whether this process starts the rendezvous server (rank 0 outside our launchers).
    job
        The job id (``TERASCALE_JOB``); also names the job's shared-memory segments.
    timeout
        The default deadline of every collective, in seconds (``TERASCALE_TIMEOUT``).
    restart
        The attempt number after a restart, 0 first (``TERASCALE_RESTART``).
    host_id
        How this host is told apart from the others (``TERASCALE_HOST_ID``).
    timeline
        Where collectives are recorded as Chrome trace events (``TERASCALE_TIMELINE``).
    local_rank
        This worker's place among the workers of its host.
    local_size
        The number of workers on this host.
    master
        torchrun's ``(MASTER_ADDR, MASTER_PORT)``, written beside ours when set.
    encrypt
        Whether every TCP link is encrypted (AES-GCM), not only authenticated.
    bind
        The address servers started inside the process listen on (``TERASCALE_BIND``).
    link_rate
        The rate of the links between hosts, in bits/s (``TERASCALE_LINK_RATE``).
    node_cores
        The cores this node's workers share, when the launcher bound each worker to a block
        of them (``TERASCALE_NODE_CORES``; default None: not bound).
    """

    launcher: str
    rank: int
    size: int
    rendezvous: tuple[str, int] | None
    secret: bytes
    serve: bool = False
    job: str | None = None
    timeout: float | None = None
    restart: int | None = None
    host_id: str | None = None
    timeline: str | None = None
    local_rank: int | None = None
    local_size: int | None = None
    master: tuple[str, int] | None = None
    encrypt: bool = False
    bind: str | None = None
    link_rate: float | None = None  # bits/s
    node_cores: int | None = None

    def to_environ(self) -> dict[str, str]:
        """The ``TERASCALE_*`` variables that make :func:`read_env` in a worker read this job.

        The one writer of the contract: launchers merge the result into the worker's
        environment. Unset optional fields are left out.
        """
        try:
            secret = self.secret.decode("utf-8")
        except UnicodeDecodeError:
            raise ConfigError("the job secret must be text to travel in TERASCALE_SECRET "
                              "(launchers use secrets.token_hex)") from None
        env = {"TERASCALE_RANK": str(self.rank), "TERASCALE_SIZE": str(self.size),
               "TERASCALE_SECRET": secret}
        if self.rendezvous is not None:
            env["TERASCALE_RENDEZVOUS"] = f"{self.rendezvous[0]}:{self.rendezvous[1]}"
        if self.job is not None:
            env["TERASCALE_JOB"] = self.job
        if self.timeout is not None:
            env["TERASCALE_TIMEOUT"] = repr(float(self.timeout))
        if self.restart is not None:
            env["TERASCALE_RESTART"] = str(self.restart)
        if self.host_id is not None:
            env["TERASCALE_HOST_ID"] = self.host_id
        if self.timeline is not None:
            env["TERASCALE_TIMELINE"] = self.timeline
        if self.encrypt:
            env["TERASCALE_ENCRYPT"] = "1"
        if self.link_rate is not None:
            env["TERASCALE_LINK_RATE"] = repr(float(self.link_rate))
        if self.node_cores is not None:
            env["TERASCALE_NODE_CORES"] = str(int(self.node_cores))
        if self.master is not None:  # what torchrun sets, for torch.distributed's env://
            env.update({"RANK": str(self.rank), "WORLD_SIZE": str(self.size),
                        "MASTER_ADDR": self.master[0], "MASTER_PORT": str(self.master[1]),
                        "LOCAL_RANK": str(self.rank if self.local_rank is None
                                          else self.local_rank),
                        "LOCAL_WORLD_SIZE": str(self.size if self.local_size is None
                                                else self.local_size)})
        return env

    def __repr__(self) -> str:
        # The secret is the job's key: never in a log line, a traceback or a print().
        shown = ", ".join(f"{f.name}=<redacted>" if f.name == "secret" else
                          f"{f.name}={getattr(self, f.name)!r}" for f in fields(self))
        return f"JobEnv({shown})"


def host_identity() -> str:
    """What tells this host from the others: ``hostname:digest`` of boot id and network namespace.

    Ranks with the same identity share memory (shm links, hierarchical's host groups), so
    it must never be the same on two machines or two containers. The hostname alone is not
    enough: cloned machines and containers often share one. The boot id differs between
    machines (and boots); the network namespace differs between containers and emulated
    hosts on one kernel (every machine's initial namespace has the same inode, hence both).
    ``TERASCALE_HOST_ID`` or ``--host-id`` overrides it, for hosts that share ``/dev/shm``
    across namespaces on purpose or for tests that pretend several hosts.
    """
    import hashlib
    import socket

    parts = []
    for path in ("/proc/sys/kernel/random/boot_id", "/proc/self/ns/net"):
        try:
            parts.append(os.readlink(path) if path.endswith("/net") else open(path).read().strip())
        except OSError:
            parts.append("")
    if not any(parts):  # not Linux: the hostname is all there is
        return socket.gethostname()
    digest = hashlib.sha256("|".join(parts).encode()).hexdigest()[:8]
    return f"{socket.gethostname()}:{digest}"


def _int_var(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise ConfigError(f"environment variable {name}={env[name]!r} is not an integer") from None


def parse_address(text: str, what: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` too) -> ``(host, port)``; ConfigError naming ``what``."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{what}={text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def read_timeout(env: Mapping[str, str] | None = None, *, default: float) -> float:
    """``TERASCALE_TIMEOUT`` in seconds (``default`` when unset); ConfigError if unreadable."""
    raw = (os.environ if env is None else env).get("TERASCALE_TIMEOUT")
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"TERASCALE_TIMEOUT={raw!r} is not a number of seconds") from None
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"TERASCALE_TIMEOUT={raw!r} must be positive and finite (seconds)")
    return value


def read_env(env: Mapping[str, str] | None = None, *, rendezvous: str | None = None,
             secret: str | bytes | None = None,
             secret_file: str | os.PathLike[str] | None = None) -> JobEnv | None:
    """The job this process belongs to, or None when no launcher started it.

    Bad values raise :class:`ConfigError` naming the variable.

    Parameters
    ----------
    env
        The variables to read (default ``os.environ``).
    rendezvous
        ``"HOST:PORT"``, overriding ``TERASCALE_RENDEZVOUS`` as :func:`terascale.init` does.
    secret
        The job secret, overriding ``TERASCALE_SECRET``.
    secret_file
        A file holding the secret, overriding ``TERASCALE_SECRET_FILE``.

    Examples
    --------
    >>> read_env({"TERASCALE_RANK": "1", "TERASCALE_SIZE": "4",
    ...           "TERASCALE_RENDEZVOUS": "10.0.0.1:29500", "TERASCALE_SECRET": "s"}).rank
    1
    """
    env = dict(os.environ if env is None else env)
    for name, rank_var, size_var in _LAUNCHERS:  # noqa: B007 (name is used after the loop)
        if rank_var in env and size_var in env:
            break
    else:
        if rendezvous is None:
            return None
        raise ConfigError("rendezvous= was given but no rank and size were found in the "
                          "environment; set TERASCALE_RANK and TERASCALE_SIZE")
    rank, size = _int_var(env, rank_var), _int_var(env, size_var)
    if size < 1 or not 0 <= rank < size:
        raise ConfigError(f"{rank_var}={rank} and {size_var}={size} do not describe a rank of a job")
    if rendezvous is not None:
        addr = parse_address(rendezvous, "rendezvous")
    elif "TERASCALE_RENDEZVOUS" in env:
        addr = parse_address(env["TERASCALE_RENDEZVOUS"], "TERASCALE_RENDEZVOUS")
    elif "MASTER_ADDR" in env and "MASTER_PORT" in env:
        host, port = parse_address(f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}", "MASTER_ADDR:MASTER_PORT")
        addr = (host, port + 1)
    elif size == 1:
        addr = None
    else:
        raise ConfigError(f"started by {name} as rank {rank} of {size}, but no rendezvous address "
                          "is set: pass init(rendezvous='HOST:PORT') or set TERASCALE_RENDEZVOUS "
                          "(or MASTER_ADDR and MASTER_PORT)")
    from ._secret import read_secret

    secret_bytes = read_secret(env, secret, secret_file, name, rank, size, addr)
    serve = name != "terascale run" and rank == 0 and addr is not None
    restart = _int_var(env, "TERASCALE_RESTART") if "TERASCALE_RESTART" in env else None
    timeout = read_timeout(env, default=math.nan) if "TERASCALE_TIMEOUT" in env else None
    local = {k: _int_var(env, k) for k in ("LOCAL_RANK", "LOCAL_WORLD_SIZE") if k in env}
    master = None
    if "MASTER_ADDR" in env and "MASTER_PORT" in env:
        master = parse_address(f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}",
                               "MASTER_ADDR:MASTER_PORT")
    return JobEnv(name, rank, size, addr, secret_bytes, serve, job=env.get("TERASCALE_JOB"),
                  timeout=timeout, restart=restart, host_id=env.get("TERASCALE_HOST_ID"),
                  timeline=env.get("TERASCALE_TIMELINE"), local_rank=local.get("LOCAL_RANK"),
                  local_size=local.get("LOCAL_WORLD_SIZE"), master=master,
                  encrypt=read_flag(env, "TERASCALE_ENCRYPT"), bind=read_bind(env),
                  link_rate=read_link_rate(env))


def read_link_rate(env: Mapping[str, str] | None = None) -> float | None:
    """``TERASCALE_LINK_RATE`` in bits/s (``100Mbit``, ``1e8``); None when unset or empty."""
    raw = (os.environ if env is None else env).get("TERASCALE_LINK_RATE", "").strip()
    if not raw:
        return None
    from ._units import parse_rate

    return parse_rate(float(raw) if _is_number(raw) else raw, flag="TERASCALE_LINK_RATE")


def read_node_cores(env: Mapping[str, str] | None = None) -> int | None:
    """``TERASCALE_NODE_CORES``: how many cores this node's workers share when the launcher
    bound each to a block of them; None when unset (or not a positive integer)."""
    raw = (os.environ if env is None else env).get("TERASCALE_NODE_CORES", "").strip()
    return int(raw) if raw.isdigit() and int(raw) > 0 else None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def read_timeline(env: Mapping[str, str] | None = None) -> str | None:
    """``TERASCALE_TIMELINE``: where this process records its collectives (a launcher sets
    it to merge every rank's part at the end); None when unset."""
    return (os.environ if env is None else env).get("TERASCALE_TIMELINE") or None


def read_host_id(env: Mapping[str, str] | None = None) -> str | None:
    """``TERASCALE_HOST_ID``: this host's identity as given (``--host-id``); None when unset
    (:func:`host_identity` then tells hosts apart)."""
    return (os.environ if env is None else env).get("TERASCALE_HOST_ID") or None


def read_bind(env: Mapping[str, str] | None = None) -> str | None:
    """``TERASCALE_BIND``: where the servers started in this process listen instead of the
    job's own address (``0.0.0.0``: every interface); None when unset."""
    return (os.environ if env is None else env).get("TERASCALE_BIND", "").strip() or None


# The process's own settings (never written by a launcher), each parsed by the one module
# that uses it; read through read_setting / read_switch so that this module lists them all.
SETTINGS = {
    "TERASCALE_NO_CEXT": "1: the pure-Python paths, no compiled module (terascale._cext)",
    "TERASCALE_NO_CMA": "1: shared memory never reads another member's memory "
                        "(terascale.transport._core)",
    "TERASCALE_LINK_MAC": "gmac: integrity-only links offer GMAC only, not AEGISMAC-128X4 "
                          "(terascale.transport._secure)",
    "TERASCALE_MALLOC": "system: leave glibc's allocator thresholds alone (terascale._malloc)",
    "TERASCALE_BACKGROUND_NICE": "the helper threads' nice, 0-19 (terascale._background)",
    "TERASCALE_EXEC_WORKERS": "1: the linear learner's -n N workers are programs of their "
                              "own; unset or 0: forked from the launcher once it has "
                              "loaded the learner (terascale.linear._warm.forking)",
}


def read_setting(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The raw text of one of :data:`SETTINGS` (None: unset), for its module to parse."""
    if name not in SETTINGS:
        raise KeyError(f"{name} is not one of terascale's settings ({', '.join(SETTINGS)})")
    return (os.environ if env is None else env).get(name)


def set_quiet() -> None:
    """Set ``TERASCALE_QUIET=1`` for this process and the workers it starts: the notice
    on a job of size 1 is left out (what ``--quiet`` asks for)."""
    os.environ["TERASCALE_QUIET"] = "1"


def read_switch(name: str, env: Mapping[str, str] | None = None) -> bool:
    """Whether one of :data:`SETTINGS` is set to anything but empty or ``0``."""
    return (read_setting(name, env) or "0") not in ("", "0")


def read_algorithm_modules(env: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """``TERASCALE_ALGORITHMS``: the modules to import for algorithms registered outside
    terascale (comma-separated dotted names; empty when unset); ConfigError for a name that
    is not a dotted module path."""
    raw = (os.environ if env is None else env).get("TERASCALE_ALGORITHMS", "")
    names = tuple(n.strip() for n in raw.split(",") if n.strip())
    for n in names:
        if not all(part.isidentifier() for part in n.split(".")):
            raise ConfigError(f"TERASCALE_ALGORITHMS: {n!r} is not a module name "
                              "(dotted Python names, comma-separated)")
    return names
def read_transport(env: Mapping[str, str] | None = None) -> str | None:
    """``TERASCALE_TRANSPORT``: the name of the transport to link the ranks with (a name of
    :data:`terascale.transport.TRANSPORTS`); None when unset (the default, ``tcp``)."""
    return (os.environ if env is None else env).get("TERASCALE_TRANSPORT", "").strip() or None


def read_flag(env: Mapping[str, str] | None, name: str) -> bool:
    """A 0/1 variable (unset: False) of ``env`` (None: ``os.environ``); ConfigError naming
    it otherwise."""
    env = os.environ if env is None else env
    raw = env.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no"):
        return False
    if raw in ("1", "true", "yes"):
        return True
    raise ConfigError(f"{name}={env[name]!r} must be 1 or 0")
