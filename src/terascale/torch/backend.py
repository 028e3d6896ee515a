"""The ``torch.distributed`` backend ``"terascale"``: unchanged torch code on terascale.

``import terascale.torch`` registers it; then, under ``terascale run`` or torchrun::

    import torch.distributed as dist, terascale.torch
    dist.init_process_group("terascale")        # env:// as with gloo: RANK, MASTER_ADDR, ...
    model = torch.nn.parallel.DistributedDataParallel(model)

Every ``torch.distributed`` collective runs on a :class:`~terascale.Communicator`: terascale's
algorithm choice (shared memory on one host, tree or ring over TCP), a deadline on every
collective and its errors, which name the rank, the peer and the collective, raised instead of
a hang -- on every rank, through the work's future, so DDP's ``backward()`` and comm hooks
raise them too. The deadline is torch's: ``init_process_group(timeout=)`` /
``new_group(timeout=)``, 30 minutes when none is given (as gloo); terascale's own API keeps
its own default (``TERASCALE_TIMEOUT``, ``terascale run --timeout``, 60 s).

How a group joins: under ``terascale run`` (or any launcher of ours) the world group reuses
the job's communicator, the one ``terascale.init()`` and ``terascale.torch`` use, so DDP and
:class:`~terascale.torch.DistributedOptimizer` share one mesh. Otherwise (torchrun, a
``tcp://`` init method, ``new_group``) rank 0 of the group starts a rendezvous server and
passes its address and a fresh secret through torch's own store, which every rank of the
group already trusts (torch's TCPStore is not authenticated: set TERASCALE_SECRET or
TERASCALE_SECRET_FILE on every rank and the secret stays off the store; a rank that holds it
joins with it only, whatever the store says, so a forged entry can stop it but not move it
into a stranger's job).

Supported: ``all_reduce`` (SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR; sparse COO with
SUM), ``broadcast``, ``reduce``,
``all_gather``, ``all_gather_into_tensor``, ``gather``, ``scatter``, ``reduce_scatter``,
``reduce_scatter_tensor``, ``all_to_all``, ``all_to_all_single`` (uneven splits too),
``barrier``, the object collectives built on them, and ``async_op=True`` (``all_reduce``,
``all_gather`` and ``all_to_all`` progress in the background; the others complete before
returning their work). bfloat16 is reduced in float32 and rounded once, so every rank gets the
same bits. Point-to-point: ``send``, ``recv`` (from a rank or any source), ``isend``,
``irecv``, ``batch_isend_irecv``, with tags, on authenticated links of their own
(:mod:`terascale.transport.p2p`); ``monitored_barrier`` and the coalesced collectives too
(``docs/guide/torch-methods.md`` lists every method). CPU tensors; accelerator tensors go through host memory.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import secrets
import sys
import time
import traceback
from typing import Any

import torch.distributed as dist

from .._bind import route_to
from .._env import read_bind, read_env
from .._errors import ConfigError
from .._init import connect, init, joined
from .._secret import user_secret
from ..communicator import Communicator
from ..rendezvous import RendezvousServer
from ._pg import TerascaleProcessGroup

__all__ = ["BACKEND", "TerascaleProcessGroup", "register"]

BACKEND = "terascale"


def register() -> None:
    """Register the backend with ``torch.distributed`` (idempotent; importing the package does it)."""
    if BACKEND.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu", "cuda"])


def _create(opts: Any, _backend_options: Any) -> TerascaleProcessGroup:
    _report_to_torchrun()
    rank, size = int(opts.group_rank), int(opts.group_size)
    timeout = _seconds(opts.timeout)
    comm, owned = _communicator(opts.store, rank, size, list(opts.global_ranks_in_group),
                                timeout)
    return TerascaleProcessGroup(comm, owned=owned, timeout=timeout)


# What a survivor's error says about the rank it lost: "... aborted because rank 1 failed",
# "lost peer rank 1", "timed out after T s waiting for rank 1"
_BLAMES = re.compile(r"aborted because rank (\d+)|lost peer rank (\d+)|waiting for rank (\d+)")


def _cause_first(error: BaseException, rank: int | None) -> str | None:
    """The line a survivor's report begins with: which rank failed and how, as far as this
    rank can tell from its error; None for an error of this rank's own."""
    m = _BLAMES.search(str(error))
    if m is None:
        return None
    me = f"rank {rank}" if rank is not None else "this rank"
    if m.group(1):
        return f"rank {m.group(1)} failed first; {me} was aborted by it"
    if m.group(2):
        return (f"rank {m.group(2)} was lost first (it crashed, was killed, exited or closed "
                f"its group before the others); {me} lost it")
    return (f"rank {m.group(3)} stalled (it did not reach the collective within the deadline); "
            f"{me} gave up waiting for it")


def _report_to_torchrun() -> None:
    """Under torchrun, an uncaught error goes to torchelastic's error file, the lost rank
    first.

    torch's elastic agent names as the root cause the failed worker with the earliest error
    file timestamp (whole seconds; a worker without a file: when the agent saw it exit). A
    peer that stalls or exits with status 0 is no failure to it, so it names the survivor
    that gave up; a rank that raised or was killed and a survivor that saw it can exit
    within the same second. So, under torchrun (``TORCHELASTIC_ERROR_FILE``):

    * an error that blames a peer (a survivor's ``PeerLost``, ``PeerTimeout``, "aborted
      because rank N") goes to the error file with the cause first: the traceback torch
      prints under "Root Cause" begins ``rank 1 stalled ...`` / ``rank 1 was lost first
      ...`` / ``rank 1 failed first ...``, and the same line is printed on the survivor's
      stderr before its traceback. The file is stamped one second after the error: the
      failed rank, when the agent sees it fail too, comes first;
    * any other uncaught error (the failing rank's own) goes to the file as torch's
      ``@record`` writes it, stamped when it happened;
    * a file the program wrote itself (``@record``) is kept, with the cause line put first
      in its traceback when the error blames a peer.
    """
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path or getattr(sys.excepthook, "_terascale", False):
        return
    previous = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, tb: Any) -> None:
        try:
            if isinstance(error, Exception):
                rank = _rank_of(error)
                cause = _cause_first(error, rank)
                if cause is not None:
                    print(f"terascale: {cause}", file=sys.stderr, flush=True)
                _write_error_file(path, kind, error, tb, cause)
        except OSError:
            pass  # a report we could not write never hides the error itself
        finally:
            previous(kind, error, tb)

    hook._terascale = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def _rank_of(error: BaseException) -> int | None:
    rank = getattr(error, "rank", None)
    if rank is None and os.environ.get("RANK", "").isdigit():
        rank = int(os.environ["RANK"])
    return rank if isinstance(rank, int) else None


def _write_error_file(path: str, kind: type[BaseException], error: BaseException, tb: Any,
                      cause: str | None) -> None:
    """Write (or, for a program's own ``@record`` file, prefix) torchelastic's error file,
    in the layout torch's ``ErrorHandler`` writes."""
    if os.path.exists(path):
        if cause is None:
            return
        with open(path) as f:
            data = json.load(f)
        message = data.get("message") if isinstance(data, dict) else None
        info = message.get("extraInfo") if isinstance(message, dict) else None
        if not isinstance(info, dict) or str(info.get("py_callstack", "")).startswith(cause):
            return
        info["py_callstack"] = f"{cause}\n{info.get('py_callstack', '')}"
        message["message"] = f"{cause}: {message.get('message', '')}"
    else:
        text = "".join(traceback.format_exception(kind, error, tb))
        stamp = int(time.time()) + (1 if cause is not None else 0)
        headline = f"{kind.__name__}: {error}"
        if cause is not None:
            text, headline = f"{cause}\n{text}", f"{cause}: {headline}"
        data = {"message": {"message": headline,
                            "extraInfo": {"py_callstack": text, "timestamp": str(stamp)}}}
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.replace(path + ".tmp", path)


def _seconds(timeout: datetime.timedelta | None) -> float:
    """The group's deadline in seconds: ``init_process_group(timeout=)`` /
    ``new_group(timeout=)``, torch's default (30 minutes) when none was given."""
    from torch.distributed.constants import default_pg_timeout

    if timeout is None or timeout.total_seconds() <= 0:
        timeout = default_pg_timeout
    return float(timeout.total_seconds())


def _communicator(store: Any, rank: int, size: int, members: list[int],
                  timeout: float) -> tuple[Communicator, bool]:
    """The communicator of one group, and whether the process group owns (closes) it."""
    whole = members in ([], list(range(size)))
    if whole:
        comm = joined()
        if comm is not None and (comm.rank, comm.size) == (rank, size):
            return comm, False
        try:
            job = read_env()
        except ConfigError:  # e.g. torchrun without TERASCALE_SECRET: torch's store serves
            job = None
        if job is not None and job.launcher != "torchrun" and (job.rank, job.size) == (rank, size):
            # one of our launchers: the job's own communicator, shared with terascale.torch;
            # its own default deadline stays for terascale's API, the group passes its own
            return init(), False
    if size == 1:
        return Communicator(timeout=timeout), True
    return _join_through_store(store, rank, size, timeout), True


def _join_through_store(store: Any, rank: int, size: int, timeout: float) -> Communicator:
    limit = timeout
    server = None
    own = _user_secret()
    if rank == 0:
        # torch's store is not authenticated: a secret the user gave stays off it.
        secret = own.decode() if own is not None else secrets.token_hex(16)
        host = _reachable_host(store)  # listen there only (TERASCALE_BIND says otherwise)
        server = RendezvousServer(size, secret.encode(), host=read_bind() or host,
                                  port=0).start()
        address = f"{host}:{server.address[1]}"
        store.set("terascale/rendezvous", address)
        store.set("terascale/secret", "" if own is not None else secret)
    try:
        store.set_timeout(datetime.timedelta(seconds=limit))
        address = store.get("terascale/rendezvous").decode()
        # A secret the user gave this rank is the only one it joins with: anyone who
        # reaches the store can write there, and must not move this rank into a job of
        # theirs (a forged address then ends in AuthError at the rendezvous).
        secret = own.decode() if own is not None else store.get("terascale/secret").decode()
    except Exception as e:  # the store raises RuntimeError/DistStoreError; say what we waited for
        if server is not None:
            server.close()
        raise ConfigError(f"rank {rank} of {size}: the terascale backend could not read the "
                          f"rendezvous address from torch's store within {limit:g} s ({e})"
                          ) from None
    if not secret:
        raise ConfigError(f"rank {rank} of {size}: rank 0 uses the job secret the user gave "
                          "(TERASCALE_SECRET / TERASCALE_SECRET_FILE); give it to this rank too")
    host, _, port = address.rpartition(":")
    try:
        return connect(rank, size, (host, int(port)), secret.encode(), timeout=limit,
                       server=server)
    finally:
        if server is not None:
            _forget_rendezvous(store)


def _forget_rendezvous(store: Any) -> None:
    """Rank 0, once its group joined or failed to: remove the address and secret from
    torch's store.

    Every rank read them before it joined, and the store outlives the group: torchrun's
    agent keeps one store across the attempts of an elastic restart (``--max-restarts``),
    and a program may make the group again after ``destroy_process_group``. A rank of the
    next attempt that started before its rank 0 must wait for the new address, not dial
    the old one until its deadline."""
    for key in ("terascale/rendezvous", "terascale/secret"):
        try:
            store.delete_key(key)
        except Exception:  # a store without deletion (FileStore): the keys stay
            pass


def _user_secret() -> bytes | None:
    """The job secret the user set (TERASCALE_SECRET or _FILE), if any; a bad secret file is
    the user's ConfigError."""
    return user_secret(os.environ)


def _reachable_host(store: Any) -> str:
    """An address of this host that the other ranks reach: the one that routes to the store."""
    base = getattr(store, "underlying_store", store)
    while hasattr(base, "underlying_store"):  # PrefixStore over PrefixStore over TCPStore
        base = base.underlying_store
    target = getattr(base, "host", None)
    if not target:
        try:
            job = read_env()
        except ConfigError:
            job = None
        target = job.master[0] if job is not None and job.master is not None else None
    return route_to(target)


register()
