"""``algorithm="auto"``: pick the allreduce algorithm from measured costs.

The tree costs ``2 log2(n)`` message latencies but moves up to 3x the data through each
node; the ring costs ``2 (n-1)`` latencies but moves only ``2 (n-1)/n``. Below the crossover
size the tree wins. The crossover was measured on loopback TCP with
``terascale bench allreduce --algorithms tree,ring`` (see benchmarks/RESULTS.md, "auto
thresholds"); the choice depends only on arguments that every rank shares, so all ranks
pick the same algorithm.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ALLREDUCE_ALGORITHMS", "choose_allreduce", "choose_tcp"]

ALLREDUCE_ALGORITHMS = ("auto", "tree", "ring", "halving_doubling", "shm", "hierarchical")

# Crossover between tree and ring, in bytes, per world size (measured, see module doc).
TREE_MAX_BYTES = {2: 4 << 20, 3: 256 << 10, 4: 256 << 10}
TREE_MAX_BYTES_LARGE_WORLD = 128 << 10


def choose_tcp(nbytes: int, size: int) -> str:
    """The TCP algorithm for ``nbytes`` over ``size`` ranks."""
    limit = TREE_MAX_BYTES.get(size, TREE_MAX_BYTES_LARGE_WORLD)
    return "tree" if nbytes <= limit else "ring"


def choose_allreduce(nbytes: int, size: int, hosts: Sequence[str] | None = None) -> str:
    """The algorithm ``auto`` runs for ``nbytes`` over ``size`` ranks on ``hosts``."""
    return choose_tcp(nbytes, size)
