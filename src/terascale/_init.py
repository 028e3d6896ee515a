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
Outside ``terascale run``, rank 0 serves the rendezvous itself, on the rendezvous host's
own address (loopback when that is loopback; TERASCALE_BIND overrides it), and the user
provides the job secret: no launcher of ours made one, and a secret derived from the job's
address would be one any attacker can derive (see README, "Security model").
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
import weakref
from typing import TYPE_CHECKING, Any

from ._bind import bind_address, bind_error
from ._env import (
    JobEnv,
    host_identity,
    read_env,
    read_flag,
    read_host_id,
    read_link_rate,
    read_timeline,
    read_timeout,
    read_transport,
)
from ._errors import CollectiveError, ConfigError, PeerLost, SlotTaken
from ._timeline import attach as attach_timeline
from ._units import parse_rate
from .communicator import Communicator

if TYPE_CHECKING:  # imported by a job of several ranks only (a tenth of a second)
    from .rendezvous import RendezvousServer
    from .transport import Connector

__all__ = ["JobEnv", "connect", "init", "joined", "load_joining", "read_env"]

log = logging.getLogger("terascale")
DEFAULT_TIMEOUT = 60.0

# The jobs this process joined: a slot is held for the whole job, so a second init() for the
# same job returns the open communicator instead of being turned away as a duplicate copy.
_JOINED: dict[tuple[Any, ...], tuple[int, weakref.ref[Communicator]]] = {}

def init(*, timeout: float | None = None, rendezvous: str | None = None,
         secret: str | bytes | None = None, secret_file: str | os.PathLike[str] | None = None,
         encrypt: bool | None = None, host_id: str | None = None,
         timeline: str | None = None, link_rate: str | float | None = None) -> Communicator:
    """Join the job that launched this process and return its :class:`Communicator`.

    Every rank calls it once, with the same arguments; a script run without a launcher
    gets a communicator of size 1 (and a one-line notice, silent under ``TERASCALE_QUIET``).
    Every TCP link is authenticated (AES-GMAC records keyed per link and direction: nothing
    on the path alters, replays or reorders a byte unnoticed, see the security guide).
    A redundant copy of a worker (its slot already taken, as under speculative execution)
    prints why and exits with status 0. Calling ``init()`` again in the same process returns
    the same communicator while it is open (a process joins a job once; after ``close()``
    it cannot join again: ConfigError).

    Parameters
    ----------
    timeout
        Seconds; bounds the rendezvous and is the default deadline of every collective
        (default ``TERASCALE_TIMEOUT``, which ``terascale run --timeout`` sets, else 60).
        Raise it when one step legitimately takes longer (a large first batch, a slow
        checkpoint): a rank that waits longer raises :class:`~terascale.PeerTimeout`.
    rendezvous
        ``"HOST:PORT"`` of rank 0's rendezvous server (default ``TERASCALE_RENDEZVOUS``, or
        ``MASTER_ADDR:MASTER_PORT+1`` under torchrun). Needed only with a launcher that
        does not set it.
    secret
        The job secret every rank must share (default ``TERASCALE_SECRET``). ``terascale
        run`` makes one; other launchers do not, and joining without one is a ConfigError.
    secret_file
        A file holding the secret, readable only by its owner (default
        ``TERASCALE_SECRET_FILE``); an alternative to ``secret`` that keeps it out of the
        environment.
    encrypt
        Encrypt every link too (AES-GCM; default ``TERASCALE_ENCRYPT``, ``terascale run
        --encrypt``). The job is encrypted when any rank asks, and a rank that asked never
        runs a plaintext link (AuthError naming the peer that disagreed).
    host_id
        Overrides how hosts are told apart (default: the hostname plus a digest of the boot
        id and network namespace, see ``TERASCALE_HOST_ID``), e.g. to test hierarchical
        algorithms on one machine.
    timeline
        A path: record every collective as Chrome trace events there (default
        ``TERASCALE_TIMELINE``, ``terascale run --timeline``); off by default.
    link_rate
        The rate of the links between hosts (``"100Mbit"``, ``"10Gbit/s"`` or bits/s;
        default ``TERASCALE_LINK_RATE``, ``terascale run --link-rate``; unset: unknown).
        ``auto`` then chooses between tree and ring with the TCP link model at that rate
        (:mod:`terascale.sim.links`) instead of thresholds measured on loopback. The job
        gets one rate, the smallest any rank asked for (``Communicator.link_rate``), so
        every rank picks the same algorithm, run after run.
    """
    if timeout is None:
        timeout = read_timeout(default=DEFAULT_TIMEOUT)
    if not (timeout > 0 and math.isfinite(timeout)):  # nan and inf would break every deadline
        raise ConfigError(f"timeout={timeout} must be positive and finite (seconds)")
    job = read_env(rendezvous=rendezvous, secret=secret, secret_file=secret_file)
    launched_timeline = read_timeline()
    timeline = timeline or launched_timeline  # the launcher merges its parts at the end
    merge_at_exit = not (launched_timeline and timeline == launched_timeline)
    rate = parse_rate(link_rate, flag="link_rate") if link_rate is not None else \
        job.link_rate if job is not None else read_link_rate()
    if job is None and not read_flag(None, "TERASCALE_QUIET"):
        _notice_alone()
    if job is None or job.size == 1 and job.rendezvous is None:
        return attach_timeline(Communicator(timeout=timeout, link_rate=rate), timeline,
                               merge_at_exit=merge_at_exit)
    key = (job.launcher, job.rank, job.size, job.rendezvous, job.secret)
    pid, ref = _JOINED.get(key, (None, None))
    if pid == os.getpid() and ref is not None:  # (a forked child holds no slot of its own)
        previous = ref()
        if previous is not None and not previous._closed:
            return previous
        raise ConfigError(f"rank {job.rank}: this process already joined job "
                          f"{job.job or ''} and closed its communicator; "
                          "a process joins a job once: call terascale.init() once and close "
                          "the communicator at the end")
    server = None
    if job.serve:
        assert job.rendezvous is not None
        server = _serve(job)
    assert job.rendezvous is not None
    comm = connect(job.rank, job.size, job.rendezvous, job.secret, timeout=timeout,
                   host_id=host_id, server=server,
                   encrypt=job.encrypt if encrypt is None else encrypt, link_rate=rate)
    log.debug("rank %d of %d joined job %s via %s", comm.rank, comm.size, comm.job, job.launcher)
    comm = attach_timeline(comm, timeline, merge_at_exit=merge_at_exit)
    _JOINED[key] = (os.getpid(), weakref.ref(comm))
    return comm


def load_joining() -> None:
    """Import now what joining a job of two or more processes imports on its way: the
    control channel's cipher (``terascale._gcm``, AES-256-GCM on libcrypto), the
    shared-memory groups, the collectives. For a launcher that forks its workers
    (``LaunchOptions.fork``): each joins without importing them again (a tenth of a second
    of a worker's start-up on two busy cores), and the launcher's rendezvous server has
    them before the first worker calls. ``cryptography`` is not among them: only a link
    whose records go through it (AES-256-GCM or GMAC records the compiled record layer
    does not seal, or every record where it is not built) loads it, in that process (~6
    MB of resident library pages)."""
    import importlib

    for name in ("terascale._gcm", "encodings.idna"):
        try:
            importlib.import_module(name)
        except ImportError:  # (not built: the channel seals through cryptography)
            pass
    from .collectives import allgather, fastpath, registry, ring, select, shm, tree  # noqa: F401
    from .transport import shmgroup  # noqa: F401


_NOTICED: list[bool] = []


def _notice_alone() -> None:
    """One line, once per process: no launcher started it, so its job has size 1 (a script
    run as ``python train.py`` that meant ``terascale run -n 4 python train.py``)."""
    if not _NOTICED:
        _NOTICED.append(True)
        sys.stderr.write("terascale: no launcher started this process, so init() gives a job "
                         "of size 1; run N workers with: terascale run -n N python SCRIPT "
                         "(TERASCALE_QUIET=1 hides this line)\n")


def _serve(job: JobEnv) -> RendezvousServer:
    """Rank 0's rendezvous server, listening where the job said it would be (not 0.0.0.0)."""
    from .rendezvous import RendezvousServer

    assert job.rendezvous is not None
    host, port = job.rendezvous
    bind = bind_address(host, bind=job.bind, what="rank 0: rendezvous host",
                        hint="check MASTER_ADDR / TERASCALE_RENDEZVOUS")
    try:
        server = RendezvousServer(job.size, job.secret, host=bind, port=port)
    except OSError as e:
        err = bind_error(e, bind, port, host, "TERASCALE_BIND=0.0.0.0")
        if err is e:
            raise
        raise ConfigError(f"rank 0: {err}") from None
    return server.start()


def connect(rank: int, size: int, rendezvous: tuple[str, int], secret: bytes, *,
            timeout: float, host_id: str | None = None,
            server: RendezvousServer | None = None,
            encrypt: bool | None = None, link_rate: float | None = None,
            transport: str | Connector | None = None) -> Communicator:
    """Join the rendezvous at ``rendezvous`` as ``rank`` of ``size`` and link the ranks.

    The part of :func:`init` that does not read the environment: the ``torch.distributed``
    backend uses it to join with an address and secret passed through torch's store.
    ``server`` (the rendezvous server this process runs, if any) lives as long as the
    communicator. A redundant copy of a worker (its slot taken) exits with status 0.
    ``encrypt`` defaults to TERASCALE_ENCRYPT, ``link_rate`` (bits/s) to TERASCALE_LINK_RATE.
    ``transport`` (a name of :data:`terascale.transport.TRANSPORTS` or a
    :class:`~terascale.transport.Connector`) defaults to TERASCALE_TRANSPORT, else ``tcp``;
    every rank must name the same one (the rendezvous refuses the job otherwise).
    """
    from .rendezvous import join
    from .transport import Connector, connector

    if encrypt is None:
        encrypt = read_flag(None, "TERASCALE_ENCRYPT")
    # Every TCP link is authenticated; encrypted too when asked. Plain links exist only to
    # measure that cost, and only for a rank that asks for them itself (never a peer).
    security = "encrypt" if encrypt else \
        "plain" if read_flag(None, "TERASCALE_UNAUTHENTICATED_BENCHMARK") else "integrity"
    if link_rate is None:
        link_rate = read_link_rate()
    hid = host_id or read_host_id() or host_identity()
    link = transport if isinstance(transport, Connector) else \
        connector(transport or read_transport())
    started = time.monotonic()
    try:
        who = join(rendezvous, secret, slot=rank, size=size, host_id=hid, timeout=timeout,
                   security=security, link_rate=link_rate, transport=link)
    except SlotTaken as e:
        print(f"terascale: {e}; exiting (another copy of this worker is running)", file=sys.stderr)
        raise SystemExit(0) from None
    links = link.connect(who.listener, who.rank, who.size, who.endpoints, secret=secret,
                         job=who.job, deadline=started + timeout + 5.0, security=who.security)
    comm = Communicator(rank=who.rank, size=who.size, local_rank=who.local_rank,
                        local_size=who.local_size, transport=links, timeout=timeout,
                        job=who.job, hosts=who.hosts, addresses=who.addresses,
                        link_rate=who.link_rate)
    comm._rendezvous_server = server  # type: ignore[attr-defined]  # keep it alive with rank 0
    _tell_peers_on_crash(comm)
    return comm


def joined() -> Communicator | None:
    """The open communicator this process already joined its job with, or None.

    Libraries that call ``init()`` on the user's behalf (``terascale.linear.train``, the
    estimators) use it to tell a communicator they open, and must close, from one the user
    or ``terascale.torch`` opened, which they reuse and leave open.
    """
    try:
        job = read_env()
    except ConfigError:
        return None
    if job is None or job.size == 1 and job.rendezvous is None:
        return None  # size 1 outside a job: every init() is a fresh identity communicator
    pid, ref = _JOINED.get((job.launcher, job.rank, job.size, job.rendezvous, job.secret),
                           (None, None))
    comm = ref() if pid == os.getpid() and ref is not None else None
    return comm if comm is not None and not comm._closed else None


_CRASH_TOLD: weakref.WeakSet[Communicator] = weakref.WeakSet()
_HOOKED: list[bool] = []


def _tell_peers_on_crash(comm: Communicator) -> None:
    """On an uncaught exception, send its one-line summary to every peer before exiting.

    Without this, peers only see a closed connection ("lost peer rank 1"); with it they
    report "aborted because rank 1 failed: rank 1: uncaught ValueError: ...". One hook per
    process serves every communicator it joined.
    """
    _CRASH_TOLD.add(comm)
    if _HOOKED:
        return
    _HOOKED.append(True)
    previous = sys.excepthook

    def hook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        for c in list(_CRASH_TOLD):
            links = c._transport
            if links is not None and links.broken is None and \
                    not issubclass(exc_type, CollectiveError):
                links.fail(PeerLost(f"rank {links.rank}: uncaught {exc_type.__name__}: {exc}",
                                    rank=links.rank))
        previous(exc_type, exc, tb)

    sys.excepthook = hook
