"""``algorithm="auto"``: pick the allreduce algorithm from measured costs.

First by host layout (one host: shared memory; several hosts, some with several ranks:
hierarchical; see ``choose_allreduce``), then, with one rank per host, by size:

The tree costs ``2 log2(n)`` message latencies but moves up to 3x the data through each
node; the ring costs ``2 (n-1)`` latencies but moves only ``2 (n-1)/n``. Below the crossover
size the tree wins. The crossover was measured on loopback TCP with
``terascale bench allreduce --algorithms tree,ring`` (see benchmarks/RESULTS.md, "auto
thresholds"); the choice depends only on arguments that every rank shares, so all ranks
pick the same algorithm.
"""

from __future__ import annotations

from collections.abc import Sequence

from .registry import allreduce_names

__all__ = ["ALLREDUCE_ALGORITHMS", "choose_allreduce", "choose_tcp"]

# What ``allreduce(algorithm=...)`` accepts: "auto" and every name in the registry.
ALLREDUCE_ALGORITHMS = ("auto", *allreduce_names())

# Crossover between tree and ring, in bytes, per world size: the largest size at which the
# tree was still at least as fast as the ring (RESULTS.md, "Auto thresholds", measured with
# `terascale bench allreduce -n N --algorithms tree,ring,halving_doubling --sizes 16K,...,16M
# --vs ''` for N = 2, 3, 4). Larger worlds cannot be timed on this machine; in the
# alpha-beta model the ring's latency term 2(n-1) alpha grows faster than the tree's
# 2 log2(n) alpha, so the crossover grows with n and the n=4 value is a conservative bound.
TREE_MAX_BYTES = {2: 512 << 10, 3: 128 << 10, 4: 256 << 10}
TREE_MAX_BYTES_LARGE_WORLD = 256 << 10


def choose_tcp(nbytes: int, size: int) -> str:
    """The TCP algorithm for ``nbytes`` over ``size`` ranks."""
    limit = TREE_MAX_BYTES.get(size, TREE_MAX_BYTES_LARGE_WORLD)
    return "tree" if nbytes <= limit else "ring"


# Host layouts, measured with ``terascale bench costs --sizes
# 4K,64K,1M,16M --n 2,3,4`` (tables in benchmarks/RESULTS.md, "Shared memory, halving/
# doubling, hierarchical, auto"):
# * every rank on one host: shared memory beats every TCP algorithm at every size (quiet
#   run: 11 of 12 rows; the other is "hierarchical", the same shm machinery): one
#   memcpy-speed pass instead of loopback TCP's copies through the kernel.
# * several hosts, some with several ranks: "hierarchical" (only one rank per host on the
#   network). Quiet run: it wins 7 of 8 rows at n = 3 and 4 on two pretend hosts, from
#   4 KiB (268 vs 336 us for the tree) to 16 MiB (16.9 vs 22.9 ms for the ring); under
#   load 14 the tree won at <= 64 KiB, but that is the shm waits losing their cores.
# * one rank per host: the TCP tree/ring choice above. Halving/doubling ties with the
#   ring on the world sizes this 2-core machine can time (n <= 4; within 10% either
#   way between runs), so auto does not pick it.


def choose_allreduce(nbytes: int, size: int, hosts: Sequence[str] | None = None) -> str:
    """The algorithm ``auto`` runs for ``nbytes`` over ``size`` ranks on ``hosts``.

    ``hosts`` (each rank's host id, as in ``Communicator.hosts``) is the same list on
    every rank, so every rank picks the same algorithm.
    """
    if size > 1 and hosts is not None and len(hosts) == size:
        distinct = len(set(hosts))
        if distinct == 1:
            return "shm"
        if distinct < size:
            return "hierarchical"
    return choose_tcp(nbytes, size)
