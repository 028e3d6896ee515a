r"""The alpha-beta-gamma cost model of allreduce (Hockney's model with a reduction term).

Sending a message of ``m`` bytes costs ``alpha + m beta`` (``alpha``: latency plus per-message
software overhead; ``beta``: seconds per byte, 1/bandwidth); reducing ``m`` bytes costs
``m gamma``. For ``p`` ranks and a vector of ``m`` bytes, the classic results are
(Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in
MPICH", IJHPCA 2005; Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for
clusters of workstations", JPDC 2009):

* **ring** (reduce-scatter then allgather, ``p - 1`` steps each, blocks of ``m/p``):
  :math:`T = 2(p-1)\alpha + 2\frac{p-1}{p} m\beta + \frac{p-1}{p} m\gamma`.
  Bandwidth-optimal (Patarasuk & Yuan prove ``2(p-1)/p m`` is the lower bound on the bytes
  each rank must send), but the latency term grows linearly with ``p``.
* **recursive halving/doubling** (Rabenseifner; ``p`` a power of two):
  :math:`T = 2\log_2 p\,\alpha + 2\frac{p-1}{p} m\beta + \frac{p-1}{p} m\gamma`; for any
  ``p = r_1 \cdots r_m`` the mixed-radix generalization (Ruefenacht, Bull & Booth 2017)
  sends the same bytes in :math:`2\sum_k (r_k - 1)` messages. On several hosts of several
  workers its steps inside a host go first, so only the bytes of the busiest host link
  pay ``beta`` (the rest pays ``delta``, a copy), as :mod:`terascale.sim.links` counts them.
* **pipelined binary tree** (reduce to the root, broadcast back, ``K = \lceil m/c \rceil``
  chunks of ``c`` bytes, heap tree of depth ``h = \lfloor\log_2 p\rfloor``, at most ``r``
  children per node, at most ``k`` messages per chunk through one direction of the busiest
  node's link: ``k = r + 1`` for an interior node): the first chunk goes up the tree
  (``h`` levels; the children send at once, the parent reduces ``r`` chunks) and down
  (a parent sends to its ``r`` children one after the other), the others follow one
  bottleneck step behind each other; their latencies overlap (messages are streamed
  without waiting), so the steady state pays only the busiest link's bytes and the
  reductions:
  :math:`T = h(2\alpha + (r+1)c\beta + rc\gamma) + (K-1)(kc\beta + rc\gamma)`.
  With ``K = 1`` this is the unpipelined tree ``h(2\alpha + (r+1)m\beta + rm\gamma)``; for
  large ``m`` it tends to ``m(k\beta + r\gamma)`` -- about 3/2 of the ring's bandwidth term,
  the price of the tree's ``2 log p`` latency (each node sends and receives up to 3x the data,
  Agarwal et al. 2014).
  Two ranks and one chunk are not a tree but one swap (both send the whole vector at once,
  both reduce; what :mod:`terascale.collectives.tree` runs): :math:`T = \alpha + m\beta + m\gamma`.
  So are the ring and halving/doubling of two ranks up to the same size
  (:mod:`terascale.collectives._pair`): one latency instead of their two steps' two.
* **shared memory** (``q`` ranks on one host; copy in, reduce-scatter of the ``q`` slices,
  copy out): :math:`T = s\,(2\alpha_{shm} + m(2\delta + \frac{q-1}{q}\gamma))` with
  ``delta`` the seconds per byte of a memory copy.
* **hierarchical** (``H`` hosts of ``q`` ranks: shared memory inside each host, a ring among
  one leader per host, shared-memory broadcast back): :math:`T = T_{shm}(q) + T_{ring}(H)`.

Each formula is the ``cost`` of its algorithm's registry entry
(:class:`terascale.collectives.AllreduceSpec`) and lives in the algorithm's own module
(``ring_time`` in :mod:`terascale.collectives.ring`, re-exported here); :func:`predict`,
:func:`best`, the calibration and the simulator read it from the registry, so an algorithm
registered with :func:`terascale.collectives.register_algorithm` is priced like these.

The slow-down ``s = max(1, ranks per host / cores)`` accounts for ranks that share cores (on
this 2-core machine four ranks run at half speed): on loopback every cost is CPU time of
the ranks (the kernel's socket copies, the per-message system calls and wake-ups, the
reductions), so all of them stretch by ``s``. With ``cores=None`` (a cluster with a core
per rank) ``s = 1``. Likewise, with ``cache_bytes`` set, a message larger than the per-core
cache pays ``mem_factor`` times the per-byte costs (its copies and reductions stream from
memory instead of the cache: on this machine busbw drops between 1 and 2 MiB, the size of
the L2 cache). Both are for one machine; the cluster planner leaves them off.

The model ignores what :mod:`terascale.sim.simulator` shows: overlap of transfer and
reduction inside a pipeline, contention of several workers for one NIC, and waiting for
stragglers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .._errors import ConfigError
from ..collectives.halving_doubling import halving_doubling_time
from ..collectives.hierarchical import hierarchical_time
from ..collectives.registry import ALLREDUCE, allreduce_names, allreduce_spec
from ..collectives.ring import ring_time
from ..collectives.shm import shm_time
from ..collectives.tree import CHUNK_BYTES, tree_shape, tree_time

__all__ = ["ALGORITHMS", "CostParams", "best", "halving_doubling_time", "hierarchical_time",
           "predict", "ring_time", "shm_time", "tcp_goodput", "tree_shape", "tree_time"]

# The built-in algorithms (one registry, which gives each its cost formula); the registry
# itself (allreduce_names()) also lists those registered later.
ALGORITHMS = tuple(ALLREDUCE)
# bytes; the tree's pipeline chunk (collectives/tree.py), and the largest message two ranks
# swap in one frame each way whatever the algorithm (collectives/_pair.py)
TREE_CHUNK = CHUNK_BYTES


@dataclass(frozen=True, kw_only=True)
class CostParams:
    """Machine parameters of the model (seconds, seconds per byte).

    Parameters
    ----------
    alpha
        Seconds per message between hosts (latency plus software; default 25 us).
    beta
        Seconds per byte on a link (default 8/10e9: 10 Gbit/s).
    gamma
        Seconds per byte reduced (default 1/5e9).
    alpha_shm
        Seconds per synchronization inside a host (default 2 us).
    delta
        Seconds per byte copied in memory (default 1/10e9).
    cores
        Cores per host (default None: one per rank).
    cache_bytes
        Messages above this size pay ``mem_factor`` times every per-byte cost (default None: never).
    mem_factor
        The factor on per-byte costs above ``cache_bytes`` (default 1.0).
    """

    alpha: float = 25e-6       # per message between hosts (latency + software)
    beta: float = 8 / 10e9     # per byte on a link: 10 Gbit/s
    gamma: float = 1 / 5e9     # per byte reduced (float32 add, memory bound)
    alpha_shm: float = 2e-6    # per synchronization inside a host
    delta: float = 1 / 10e9    # per byte copied in memory
    cores: int | None = None   # cores per host; None: one core per rank
    cache_bytes: float | None = None  # messages above this size pay mem_factor per byte
    mem_factor: float = 1.0

    def for_message(self, nbytes: float) -> CostParams:
        """The parameters for a message of ``nbytes``: per-byte costs grow by ``mem_factor``
        once the message no longer fits in the (per-core) cache.

        Parameters
        ----------
        nbytes
            The message size in bytes.
        """
        if self.cache_bytes is None or nbytes <= self.cache_bytes or self.mem_factor == 1.0:
            return replace(self, cache_bytes=None)
        f = self.mem_factor
        return replace(self, beta=self.beta * f, gamma=self.gamma * f, delta=self.delta * f,
                       cache_bytes=None)

    def slowdown(self, ranks_per_host: int) -> float:
        """Factor on per-byte costs when ranks share cores (1 with a core per rank).

        Parameters
        ----------
        ranks_per_host
            Ranks sharing the host's cores.
        """
        if self.cores is None:
            return 1.0
        return max(1.0, ranks_per_host / self.cores)

    def scaled(self, ranks_per_host: int) -> CostParams:
        """These parameters with every cost multiplied by :meth:`slowdown` (``cores`` then None).

        Parameters
        ----------
        ranks_per_host
            Ranks sharing the host's cores.
        """
        s = self.slowdown(ranks_per_host)
        return replace(self, alpha=self.alpha * s, beta=self.beta * s, gamma=self.gamma * s,
                       alpha_shm=self.alpha_shm * s, delta=self.delta * s, cores=None)


def tcp_goodput(link_bits: float, *, mtu: int = 1500, framing: int = 38,
                tcp_ip_headers: int = 52) -> float:
    """Payload bytes per second that TCP/IP carries over a link of ``link_bits`` bit/s.

    Each frame of ``mtu`` bytes carries ``mtu - tcp_ip_headers`` bytes of payload (IPv4 20 +
    TCP 20 + timestamps 12) and costs ``mtu + framing`` bytes of link time (Ethernet header
    14, FCS 4, preamble 8, inter-frame gap 12 = 38; a ``tc`` rate limit on a veth counts the
    14-byte header only: ``framing=14``). At MTU 1500 that is 94.1% of the nominal rate
    (95.6% on an emulated link): the ceiling of busbw, before any per-message cost.

    Parameters
    ----------
    link_bits
        The link's nominal rate in bits/s.
    mtu
        Bytes per IP packet (default 1500; 9000 with jumbo frames).
    framing
        Bytes of link time per frame beyond the packet (default 38, a real Ethernet wire; 14 under a
        ``tc`` rate limit).
    tcp_ip_headers
        Header bytes per packet (default 52: IPv4, TCP and timestamps).
    """
    if mtu <= tcp_ip_headers:
        raise ValueError(f"mtu={mtu} leaves no room for {tcp_ip_headers} bytes of headers")
    return link_bits / 8 * (mtu - tcp_ip_headers) / (mtu + framing)


def predict(algorithm: str, nbytes: float, nodes: int, c: CostParams, *,
            per_host: int = 1, chunk: int | None = TREE_CHUNK) -> float:
    """Predicted time of ``algorithm`` for ``nodes`` hosts of ``per_host`` ranks each: the
    cost formula of its registry entry (:class:`terascale.collectives.AllreduceSpec`).

    Flat algorithms treat all ``nodes * per_host`` ranks alike; one placed on ``"one host"``
    needs ``nodes=1``. ``nodes=1, per_host=q`` describes one machine (loopback).

    Parameters
    ----------
    algorithm
        A name of the registry (:func:`terascale.collectives.allreduce_names`).
    nbytes
        The message size in bytes.
    nodes
        Hosts.
    c
        The machine's :class:`CostParams`.
    per_host
        Ranks on each host (default 1).
    chunk
        A pipelined algorithm's chunk in bytes (None: not pipelined).
    """
    try:
        spec = allreduce_spec(algorithm)
    except ConfigError:
        raise ValueError(f"unknown algorithm {algorithm!r}; known: "
                         f"{', '.join(allreduce_names())}") from None
    if not spec.runs_on(nodes):
        raise ValueError(f"{algorithm} works inside one host only")
    return spec.time(nbytes, nodes, per_host, c, chunk=chunk)


def best(nbytes: float, nodes: int, c: CostParams, *, per_host: int = 1) -> tuple[str, float]:
    """The fastest applicable algorithm and its predicted time (the first in registry order
    of those that tie).

    Parameters
    ----------
    nbytes
        The message size in bytes.
    nodes
        Hosts.
    c
        The machine's :class:`CostParams`.
    per_host
        Ranks on each (default 1).
    """
    names = [a for a, s in ALLREDUCE.items() if s.runs_on(nodes) and s.cost
             and s.runs_with(nodes * per_host)]
    times = {a: predict(a, nbytes, nodes, c, per_host=per_host) for a in names}
    name = min(times, key=times.__getitem__)
    return name, times[name]
