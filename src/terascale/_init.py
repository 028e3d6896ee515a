"""``terascale.init()``: join the job described by the environment.

Launchers and the variables they set, in the order they are tried:

=================  ==========================================================================
``terascale run``  TERASCALE_RANK, TERASCALE_SIZE, TERASCALE_RENDEZVOUS, TERASCALE_SECRET
torchrun           RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (rendezvous on MASTER_PORT + 1,
                   beside torch.distributed's own store on MASTER_PORT)
mpirun (Open MPI)  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE
mpirun (MPICH)     PMI_RANK, PMI_SIZE
srun (Slurm)       SLURM_PROCID, SLURM_NTASKS
=================  ==========================================================================

Under mpirun and srun the rendezvous address must be given (``rendezvous="host:port"``,
TERASCALE_RENDEZVOUS, or MASTER_ADDR and MASTER_PORT). Where no launcher started the
process, ``init()`` returns a communicator of size 1 whose collectives are identities.
Outside ``terascale run``, rank 0 serves the rendezvous itself.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import socket
import sys
import time
import weakref
from dataclasses import dataclass
from typing import Any

from ._errors import CollectiveError, ConfigError, PeerLost, SlotTaken
from ._timeline import attach as attach_timeline
from .communicator import Communicator
from .rendezvous import RendezvousServer, join
from .transport import build_mesh

__all__ = ["JobEnv", "init", "read_env"]

log = logging.getLogger("terascale")
DEFAULT_TIMEOUT = 60.0

# The jobs this process joined: a slot is held for the whole job, so a second init() for the
# same job returns the open communicator instead of being turned away as a duplicate copy.
_JOINED: dict[tuple[Any, ...], tuple[int, weakref.ref[Communicator]]] = {}

_LAUNCHERS = [  # (name, rank variable, size variable)
    ("terascale run", "TERASCALE_RANK", "TERASCALE_SIZE"),
    ("torchrun", "RANK", "WORLD_SIZE"),
    ("Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("MPICH", "PMI_RANK", "PMI_SIZE"),
    ("Slurm", "SLURM_PROCID", "SLURM_NTASKS"),
]


@dataclass(frozen=True)
class JobEnv:
    """Where this process stands in its job, as read from the environment."""

    launcher: str
    rank: int
    size: int
    rendezvous: tuple[str, int] | None
    secret: bytes
    serve: bool  # this process starts the rendezvous server (rank 0 outside our launcher)


def _int_var(env: dict[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise ConfigError(f"environment variable {name}={env[name]!r} is not an integer") from None


def _address(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{what}={text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def read_env(env: dict[str, str] | None = None, *, rendezvous: str | None = None,
             secret: str | bytes | None = None) -> JobEnv | None:
    """The job this process belongs to, or None when no launcher started it."""
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
        addr = _address(rendezvous, "rendezvous")
    elif "TERASCALE_RENDEZVOUS" in env:
        addr = _address(env["TERASCALE_RENDEZVOUS"], "TERASCALE_RENDEZVOUS")
    elif "MASTER_ADDR" in env and "MASTER_PORT" in env:
        host, port = _address(f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}", "MASTER_ADDR:MASTER_PORT")
        addr = (host, port + 1)
    elif size == 1:
        addr = None
    else:
        raise ConfigError(f"started by {name} as rank {rank} of {size}, but no rendezvous address "
                          "is set: pass init(rendezvous='HOST:PORT') or set TERASCALE_RENDEZVOUS "
                          "(or MASTER_ADDR and MASTER_PORT)")
    if secret is None:
        secret = env.get("TERASCALE_SECRET")
    if secret is None:
        # No launcher-made secret: derive one every rank can compute. It keeps strangers from
        # other jobs out, not attackers; set TERASCALE_SECRET for real authentication.
        basis = f"terascale|{env.get('TORCHELASTIC_RUN_ID', '')}|{addr}|{size}"
        secret_bytes = hashlib.sha256(basis.encode()).digest()
    else:
        secret_bytes = secret.encode() if isinstance(secret, str) else secret
    serve = name != "terascale run" and rank == 0 and addr is not None
    return JobEnv(name, rank, size, addr, secret_bytes, serve)


def init(*, timeout: float | None = None, rendezvous: str | None = None,
         secret: str | bytes | None = None, host_id: str | None = None,
         timeline: str | None = None) -> Communicator:
    """Join the job that launched this process and return its :class:`Communicator`.

    ``timeout`` (seconds) bounds the rendezvous and is the default deadline of every
    collective (``terascale run --timeout`` sets it for all workers; default 60).
    ``host_id`` overrides how hosts are told apart (default: the hostname), e.g. to test
    hierarchical algorithms on one machine.
    ``timeline`` (a path; ``terascale run --timeline`` sets TERASCALE_TIMELINE) records every
    collective as Chrome trace events (see :mod:`terascale._timeline`).

    A redundant copy of a worker (its slot already taken, as under speculative execution)
    prints why and exits with status 0. Calling ``init()`` again in the same process returns
    the same communicator while it is open (a process joins a job once; after ``close()``
    it cannot join again: ConfigError).
    """
    if timeout is None:
        raw = os.environ.get("TERASCALE_TIMEOUT", str(DEFAULT_TIMEOUT))
        try:
            timeout = float(raw)
        except ValueError:
            raise ConfigError(f"TERASCALE_TIMEOUT={raw!r} is not a number of seconds") from None
    if not (timeout > 0 and math.isfinite(timeout)):  # nan and inf would break every deadline
        raise ConfigError(f"timeout={timeout} must be positive and finite (seconds)")
    job = read_env(rendezvous=rendezvous, secret=secret)
    launched_timeline = os.environ.get("TERASCALE_TIMELINE")
    timeline = timeline or launched_timeline  # the launcher merges its parts at the end
    merge_at_exit = not (launched_timeline and timeline == launched_timeline)
    if job is None or job.size == 1 and job.rendezvous is None:
        return attach_timeline(Communicator(timeout=timeout), timeline, merge_at_exit=merge_at_exit)
    key = (job.launcher, job.rank, job.size, job.rendezvous, job.secret)
    pid, ref = _JOINED.get(key, (None, None))
    if pid == os.getpid() and ref is not None:  # (a forked child holds no slot of its own)
        previous = ref()
        if previous is not None and not previous._closed:
            return previous
        raise ConfigError(f"rank {job.rank}: this process already joined job "
                          f"{os.environ.get('TERASCALE_JOB', '')} and closed its communicator; "
                          "a process joins a job once: call terascale.init() once and close "
                          "the communicator at the end")
    hid = host_id or os.environ.get("TERASCALE_HOST_ID") or socket.gethostname()
    server = None
    if job.serve:
        assert job.rendezvous is not None
        server = RendezvousServer(job.size, job.secret, host="0.0.0.0", port=job.rendezvous[1])
        server.start()
    assert job.rendezvous is not None
    started = time.monotonic()
    try:
        who = join(job.rendezvous, job.secret, slot=job.rank, size=job.size, host_id=hid,
                   timeout=timeout)
    except SlotTaken as e:
        print(f"terascale: {e}; exiting (another copy of this worker is running)", file=sys.stderr)
        raise SystemExit(0) from None
    mesh = build_mesh(who.rank, who.size, who.addrs, who.listener, job.secret, who.job,
                      started + timeout + 5.0)
    comm = Communicator(rank=who.rank, size=who.size, local_rank=who.local_rank,
                        local_size=who.local_size, mesh=mesh, timeout=timeout, job=who.job,
                        hosts=who.hosts)
    comm._rendezvous_server = server  # type: ignore[attr-defined]  # keep it alive with rank 0
    log.debug("rank %d of %d joined job %s via %s", who.rank, who.size, who.job, job.launcher)
    _tell_peers_on_crash(comm)
    comm = attach_timeline(comm, timeline, merge_at_exit=merge_at_exit)
    _JOINED[key] = (os.getpid(), weakref.ref(comm))
    return comm


def _tell_peers_on_crash(comm: Communicator) -> None:
    """On an uncaught exception, send its one-line summary to every peer before exiting.

    Without this, peers only see a closed connection ("lost peer rank 1"); with it they
    report "aborted because rank 1 failed: rank 1: uncaught ValueError: ...".
    """
    ref = weakref.ref(comm)
    previous = sys.excepthook

    def hook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        c = ref()
        mesh = None if c is None else c._mesh
        if mesh is not None and mesh.broken is None and not issubclass(exc_type, CollectiveError):
            mesh.fail(PeerLost(f"rank {mesh.rank}: uncaught {exc_type.__name__}: {exc}",
                               rank=mesh.rank))
        previous(exc_type, exc, tb)

    sys.excepthook = hook
