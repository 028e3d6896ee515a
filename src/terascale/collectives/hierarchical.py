"""Allreduce over shared memory inside hosts, TCP between hosts; the glue that runs shm.

``hierarchical`` (as in Horovod's hierarchical allreduce and NCCL's tree/ring over nodes):

1. inside each host, reduce to the host's leader (its lowest rank) through shared memory
   (:class:`~terascale.collectives.shm.ShmAllreduce` with ``to_leader``);
2. the leaders, one per host, allreduce over TCP with the tree (small messages) or the
   ring (large), run over the subgroup of leaders;
3. each leader broadcasts the result to its host through shared memory.

Only one rank per host touches the network, so the inter-host traffic is that of an
allreduce over ``hosts`` ranks instead of ``size``. The reduction order is fixed (ranks in
order inside a host, then the TCP algorithm's fixed order over hosts), and every rank gets
the bytes its leader got, so results are bitwise identical everywhere.

Hosts are told apart by ``comm.hosts`` (hostnames, or ``TERASCALE_HOST_ID`` /
``init(host_id=...)`` to pretend several hosts on one machine).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._arrays import reducer
from .._errors import ConfigError
from ..transport import Exchange
from ..transport.shm import ShmGroup
from .halving_doubling import HalvingDoublingAllreduce
from .ring import RingAllreduce
from .shm import AREA_BYTES, ShmAllreduce, shm_broadcast, ufunc_for
from .tree import TreeAllreduce

if TYPE_CHECKING:
    from ..communicator import Communicator

__all__ = ["host_groups", "run_shm_allreduce", "shm_barrier", "shm_group"]


def host_groups(hosts: list[str]) -> list[list[int]]:
    """Ranks grouped by host, hosts in order of their lowest rank."""
    groups: dict[str, list[int]] = {}
    for r, h in enumerate(hosts):
        groups.setdefault(h, []).append(r)
    return list(groups.values())


def shm_group(comm: Communicator, ex: Exchange, group: list[int]) -> ShmGroup:
    """The communicator's segment for ``group``, created collectively on first use."""
    groups: dict[tuple[int, ...], ShmGroup] = comm._shm_groups
    key = tuple(group)
    g = groups.get(key)
    if g is None:
        g = ShmGroup.create(ex, comm.rank, group, comm.job, AREA_BYTES)
        groups[key] = g
    return g


def run_shm_allreduce(comm: Communicator, ex: Exchange, algo: str, src: np.ndarray,
                      dst: np.ndarray, op: str) -> None:
    """Run ``algo`` ("shm" or "hierarchical") from flat ``src`` into flat ``dst``."""
    uf = ufunc_for(op, src.dtype)
    if algo == "shm":
        g = comm._shm_groups.get(())  # the whole communicator's segment, once set up
        if g is not None:
            ShmAllreduce(g, ex, src, dst, uf, ex.deadline).run()
            return
    groups = host_groups(comm.hosts)
    if algo == "shm":
        if len(groups) > 1:
            raise ConfigError(f"rank {comm.rank}: algorithm='shm' needs every rank on one host, "
                              f"but they are on {len(groups)}; use 'hierarchical' or 'auto'")
        g = comm._shm_groups[()] = shm_group(comm, ex, groups[0])
        ShmAllreduce(g, ex, src, dst, uf, ex.deadline).run()
        return
    local = next(grp for grp in groups if comm.rank in grp)
    g = shm_group(comm, ex, local) if len(local) > 1 else None
    if g is not None:
        ShmAllreduce(g, ex, src, dst, uf, ex.deadline, to_leader=True).run()
    elif dst is not src:
        np.copyto(dst, src)
    leaders = [grp[0] for grp in groups]
    if comm.rank == local[0] and len(leaders) > 1:
        from .select import choose_tcp

        impl = {"tree": TreeAllreduce, "ring": RingAllreduce,
                "halving_doubling": HalvingDoublingAllreduce}[choose_tcp(dst.nbytes, len(leaders))]
        impl(ex, leaders.index(comm.rank), len(leaders), dst, reducer(op, dst.dtype),
             group=leaders).run()
    if g is not None:
        shm_broadcast(g, ex, dst, ex.deadline)


def shm_barrier(comm: Communicator, ex: Exchange) -> bool:
    """A barrier through the one-host segment, if the job already has one; else False.

    Only once shared-memory allreduces set the segment up (the same on every rank): a job
    that never uses shared memory does not get a segment for its barriers.
    """
    g = comm._shm_groups.get(())
    if g is None:
        return False
    g.announce(ex)
    g.barrier(ex, ex.deadline, check=True)
    g.round += 1
    return True
