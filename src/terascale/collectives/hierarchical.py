"""Allreduce over shared memory inside hosts, TCP between hosts.

**What it does.**
``hierarchical`` (as Horovod's hierarchical allreduce and NCCL's trees and rings over
nodes):

1. inside each host, reduce to the host's leader (its lowest rank) through shared memory
   (:class:`~terascale.collectives.shm.ShmAllreduce` with ``to_leader``);
2. the leaders, one per host, allreduce over TCP with the tree (small messages) or the
   ring (large), chosen as ``auto`` chooses for that many ranks, on a sub-group view of the
   exchange;
3. each leader broadcasts the result to its host through shared memory.

The host groups and the leaders' group are the splits of
:func:`~terascale.collectives.groups.split_groups` (``Communicator.split``'s rule: color =
host for the host groups; color 0 for each host's first rank and none for the others for
the leaders). The phases are parts of the one collective, checked as that collective.

**When to pick it.**
Several hosts with several ranks each: only one rank per host touches the network, so the
traffic between hosts is an allreduce over ``hosts`` ranks instead of ``size``, and the
rest is memory bandwidth. On one host it is the shared-memory allreduce; with one rank per
host it is the TCP algorithm. ``auto`` picks it across hosts of several ranks where the
link rate makes the network the bottleneck (:mod:`.select`).

**Cost model.**
The sum of its phases: a shared-memory reduce to the leader and a broadcast from it, each
priced by :mod:`.shm`'s formula for the ``per_host`` members, plus the leaders' TCP
allreduce over ``hosts`` ranks (the tree's or the ring's formula, Thakur, Rabenseifner &
Gropp, IJHPCA 2005) at the full link rate, since only the leader uses the link.

**Determinism.**
The reduction order is fixed (ranks in order inside a host, then the TCP algorithm's fixed
order over hosts), and every rank gets the bytes its leader got: bitwise identical
everywhere.

Hosts are told apart by the communicator's host ids (hostnames, or ``TERASCALE_HOST_ID`` /
``init(host_id=...)`` to pretend several hosts on one machine).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .groups import host_groups, split_groups
from .registry import AllreduceCall, allreduce_spec
from .ring import ring_time
from .select import choose_allreduce
from .shm import ShmAllreduce, shm_broadcast, shm_time

__all__ = ["HierarchicalAllreduce", "hierarchical_cost", "hierarchical_time", "host_groups"]


class HierarchicalAllreduce:
    """Set up from an :class:`AllreduceCall` (``src`` read in place, result in ``dst``).

    Parameters
    ----------
    call
        The allreduce as the registry describes it.
    """

    @classmethod
    def for_call(cls, call: AllreduceCall) -> HierarchicalAllreduce:
        """Built from the registry's description of one allreduce.

        Parameters
        ----------
        call
            The allreduce as the registry describes it.
        """
        return cls(call)

    def __init__(self, call: AllreduceCall) -> None:
        assert call.shm is not None, "shared memory needs the communicator's segments"
        self.call = call
        self.groups = host_groups(call.hosts)  # split(color=host)
        self.local = next(g for g in self.groups if call.ex.rank in g)
        firsts = {g[0] for g in self.groups}
        colors = [0 if r in firsts else None for r in range(len(call.hosts))]
        self.leaders = split_groups(colors)[0]  # split(color=0 if leader else undefined)

    def run(self) -> None:
        call, ex, src, dst = self.call, self.call.ex, self.call.src, self.call.dst
        assert call.shm is not None
        g = call.shm.get(ex, self.local) if len(self.local) > 1 else None
        if g is not None:
            ShmAllreduce(g, ex, src, dst, call.op, ex.deadline, to_leader=True).run()
        elif dst is not src:
            np.copyto(dst, src)
        if ex.rank == self.local[0] and len(self.leaders) > 1:
            leader_hosts = [call.hosts[r] for r in self.leaders]
            spec = allreduce_spec(choose_allreduce(dst.nbytes, len(self.leaders), leader_hosts,
                                                   call.link_rate))
            assert spec.subgroup and not spec.reads_input, spec
            between = ex.subgroup(self.leaders)
            spec.build(AllreduceCall(between, dst, dst, call.op, leader_hosts,
                                     link_rate=call.link_rate)).run()
        if g is not None:
            shm_broadcast(g, ex, dst, ex.deadline)


# -- cost (the registry's formula; terascale.sim.model) --------------------------------------
def hierarchical_time(nbytes: float, hosts: int, per_host: int, c: Any) -> float:
    r"""Shared memory inside each host + ring among the host leaders + broadcast back:
    :math:`T_{shm}(q) + T_{ring}(H)`.

    Parameters
    ----------
    nbytes
        The message size in bytes.
    hosts
        Hosts.
    per_host
        Ranks on each.
    c
        The machine's :class:`terascale.sim.CostParams`.
    """
    return shm_time(nbytes, per_host, c) + ring_time(nbytes, hosts, c)


def hierarchical_cost(nbytes: float, nodes: int, per_host: int, c: Any, **_: Any) -> float:
    """The registry's cost of the hierarchical allreduce over ``nodes`` hosts.

    Parameters
    ----------
    nbytes
        The message size in bytes.
    nodes
        Hosts.
    per_host
        Ranks on each host.
    c
        The machine's :class:`terascale.sim.CostParams`.
    """
    return hierarchical_time(nbytes, nodes, per_host, c)
