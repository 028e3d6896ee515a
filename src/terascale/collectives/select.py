"""``algorithm="auto"``: pick the allreduce algorithm from measured costs.

``auto`` picks by role, never by name: each registry entry
(:class:`~terascale.collectives.AllreduceSpec`) may carry one of the roles ``"one host"``,
``"mixed hosts"``, ``"small"`` and ``"large"``, and this module decides which role a call
needs (:func:`choose_allreduce`); the entries of the built-in table are shared memory, the
hierarchical allreduce, the tree and the ring.

First by host layout (one host: shared memory; several hosts, some with several ranks:
hierarchical; see ``choose_allreduce``), then, with one rank per host, by size -- and, when
the job knows its link rate (``init(link_rate=)``, ``terascale run --link-rate``,
``TERASCALE_LINK_RATE``), by the TCP link model at that rate
(:func:`terascale.sim.links.link_time`, calibrated on emulated hosts): the tree's
thresholds below were measured on loopback, where a byte costs CPU time; over a slow link
a byte costs link time, and the tree, which moves up to 3x the bytes through a node, was
1.7-3.3x slower than the ring at 64-256 KiB on 100 Mbit/s links. The rate is one number
for the whole job (the rendezvous hands every rank the same one), so every rank still picks
the same algorithm, and the same one on every run.

The tree costs ``2 log2(n)`` message latencies but moves up to 3x the data through each
node; the ring costs ``2 (n-1)`` latencies but moves only ``2 (n-1)/n``. Below the crossover
size the tree wins. The crossover is timed on loopback TCP with
``terascale bench allreduce --algorithms tree,ring``; the choice depends only on arguments that every rank shares, so all ranks
pick the same algorithm.
"""

from __future__ import annotations

from collections.abc import Sequence

from .registry import ALLREDUCE, auto_choice

__all__ = ["ALLREDUCE_ALGORITHMS", "choose_allreduce", "choose_by_link", "choose_tcp"]

# What ``allreduce(algorithm=...)`` accepts: "auto" and every built-in name of the registry
# (``("auto", *allreduce_names())`` also lists those registered later).
ALLREDUCE_ALGORITHMS = ("auto", *ALLREDUCE)

# Crossover between tree and ring, in bytes, per world size: the largest size at which the
# tree was still at least as fast as the ring (timed with `terascale bench allreduce -n N
# --algorithms tree,ring,halving_doubling --sizes 16K,...,16M --vs ''` for N = 2, 3, 4).
# Larger worlds cannot be timed on a 2-core machine; in the alpha-beta model the ring's latency term 2(n-1) alpha grows faster than the tree's
# 2 log2(n) alpha, so the crossover grows with n and the n=4 value is a conservative bound.
TREE_MAX_BYTES = {2: 512 << 10, 3: 128 << 10, 4: 256 << 10}
TREE_MAX_BYTES_LARGE_WORLD = 256 << 10


def choose_tcp(nbytes: int, size: int) -> str:
    """The TCP algorithm for ``nbytes`` over ``size`` ranks: the registry's ``auto="small"``
    entry up to the crossover, its ``auto="large"`` one above.

    Parameters
    ----------
    nbytes
        The message size in bytes.
    size
        The number of ranks.
    """
    limit = TREE_MAX_BYTES.get(size, TREE_MAX_BYTES_LARGE_WORLD)
    return auto_choice("small" if nbytes <= limit else "large")


# Host layouts, timed with ``terascale bench costs --sizes 4K,64K,1M,16M --n 2,3,4``:
# * every rank on one host: shared memory beats every TCP algorithm at every size: one
#   memcpy-speed pass instead of loopback TCP's copies through the kernel.
# * several hosts, some with several ranks: "hierarchical" (only one rank per host on the
#   network) wins at almost every size on a quiet host; under load the tree can win small
#   messages, when the shared-memory waits lose their cores.
# * one rank per host: the TCP tree/ring choice above. Halving/doubling ties with the
#   ring on the world sizes this 2-core machine can time (n <= 4; within 10% either
#   way between runs), so auto does not pick it.


def choose_allreduce(nbytes: int, size: int, hosts: Sequence[str] | None = None,
                     link_rate: float | None = None) -> str:
    """The algorithm ``auto`` runs for ``nbytes`` over ``size`` ranks on ``hosts``.

    Its arguments are the same on every rank, so every rank picks the same algorithm.

    Parameters
    ----------
    nbytes
        The message size in bytes.
    size
        The number of ranks.
    hosts
        Each rank's host id, as in ``Communicator.hosts`` (default None: one host).
    link_rate
        Bits/s between hosts, ``Communicator.link_rate`` (default None: unknown).
    """
    if size > 1 and hosts is not None and len(hosts) == size:
        distinct = len(set(hosts))
        if distinct == 1:
            return auto_choice("one host")
        if distinct < size:
            return auto_choice("mixed hosts")
    if link_rate is not None and size > 1:
        return choose_by_link(nbytes, size, link_rate)
    return choose_tcp(nbytes, size)


# The TCP link model's constants (terascale/sim/link_cost.json, fitted on emulated hosts;
# tests/collectives/test_select.py keeps these equal to it): seconds per message round and
# the fraction of TCP goodput that the ring's single flow and the tree's coupled up and
# down streams get.
LINK_ALPHA_S = 1.8e-4
LINK_EFF_RING = 1.0
LINK_EFF_TREE = 0.9195
_PAYLOAD = 1448 / 1538  # TCP payload per byte of wire time at MTU 1500 (terascale.sim)


def choose_by_link(nbytes: int, size: int, link_rate: float) -> str:
    """Tree or ring over ``size`` hosts of one rank each joined by ``link_rate`` bits/s.

    The link model (:mod:`terascale.sim.links`) for one rank per host: the ring pays
    ``2(n-1)`` rounds and ``2(n-1)/n`` of the vector through every link; the heap tree
    ``2h`` rounds and, below a pipeline chunk, ``max(k, h(r+1))`` vectors through its
    busiest link (an interior node's parent and two children; the first chunk's climb and
    descent). The tree runs up to where the two cross, and never past the loopback
    thresholds above (where CPU time decides). Halving/doubling is not chosen: on one rank
    per host it ties with the ring at best (88.6-96.7% of the link rate against the ring's
    93.2-96.5% on 2-6 emulated hosts at 1-16 MiB), and the ring is the one measured across
    every layout.

    Parameters
    ----------
    nbytes
        The message size in bytes.
    size
        Hosts (one rank each).
    link_rate
        The links' rate in bits/s.
    """
    if size < 3:  # one link each way: the tree's swap is the ring's, in fewer rounds
        return choose_tcp(nbytes, size)
    h = size.bit_length() - 1
    k = 3 if size >= 4 else 2
    goodput = link_rate / 8 * _PAYLOAD
    per_byte = (max(k, h * 3) / LINK_EFF_TREE - 2 * (size - 1) / size / LINK_EFF_RING) / goodput
    crossover = (2 * (size - 1) - 2 * h) * LINK_ALPHA_S / per_byte
    return choose_tcp(nbytes, size) if nbytes <= crossover else auto_choice("large")
