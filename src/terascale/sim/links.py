r"""Allreduce over rate-limited TCP links: the cost model calibrated on emulated hosts.

:mod:`terascale.sim.model` prices a byte at the nominal link rate and every algorithm alike.
Over real TCP at a link-bound rate three more things decide the time, and this model has
one term for each:

* **TCP/IP goodput** (:func:`terascale.sim.tcp_goodput`): a 1500-byte frame carries 1448
  bytes of payload (IPv4 20 + TCP 20 + timestamps 12) for 1538 bytes of wire time
  (Ethernet 14 + FCS 4 + preamble 8 + gap 12; a ``tc`` rate limit counts the 14-byte header
  only): 94.1% of the nominal rate on a wire, 95.6% on an emulated link.
* **the busiest link**: per host and direction, the bytes that cross it, step by step of
  the algorithm's real schedule with ranks placed host by host (``terascale run`` does so):
  the ring's only cross-host hop per host, the halving/doubling steps whose partners live
  on other hosts (several workers of a host then share its NIC), the tree's parent and
  child edges that leave a host, the hierarchical ring of one leader per host.
* **how well TCP fills it**, one calibrated efficiency per kind of traffic: a single flow
  per link direction (the ring, the hierarchical leaders' ring, any algorithm on two
  hosts), halving/doubling's partners on other hosts, several workers of a host crossing
  its NIC at once, and the tree's up and down streams through an interior node, which
  share a node's link and wait on each other. On the transport's CUBIC links
  (:mod:`terascale.transport._congestion`) the first three fill the link (0.99-1.0 of
  goodput on emulated hosts) and the tree gets 0.93. Under BBR, which these links used
  before, two bulk flows per host to different peers moved 69-79% of the link rate and
  one 88-92% (6 emulated hosts, 100 Mbit/s), and halving/doubling got 0.90 (Patarasuk &
  Yuan, JPDC 2009, argue the ring's contention-free single stream is why it reaches the
  bandwidth bound on clusters of workstations; with CUBIC the others come close to it).

With ``G`` the goodput, ``B`` the busiest link's bytes, ``eta`` the efficiency of the
algorithm's kind and ``R`` its message rounds (the ring ``2(p-1)``, halving/doubling
``2 sum(r_k - 1)`` over the radices of its schedule, the tree ``2h`` plus one per chunk of
its pipeline, one for two ranks and a small message, where all three are one swap):
:math:`T = R\alpha + B / (G\eta) [+ T_{shm}]`, linear in ``alpha`` and the ``1/eta``:
:func:`fit` finds them by non-negative least squares on relative errors from
``terascale bench allreduce --cluster K --link RATE --json`` reports. The constants fitted
on this machine ship with the package (``link_cost.json``, :func:`recorded`); pass another
file to use others.
"""

from __future__ import annotations

import functools
import json
import math
import os
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .._errors import ConfigError
from ..collectives import tree
from ..collectives.halving_doubling import as_ring, radix_steps
from ..collectives.registry import ALLREDUCE, allreduce_spec
from .calibrate import nonnegative_lstsq
from .model import CostParams, shm_time, tcp_goodput, tree_shape

__all__ = ["KINDS", "LinkCost", "fit", "format_fit", "kind_of", "link_time", "recorded",
           "schedule"]

# The kinds of link traffic, each with its efficiency (LinkCost.eff_<kind>); see schedule().
KINDS = ("single", "halving_doubling", "shared_nic", "tree")
_RECORDED = "link_cost.json"  # beside this module, shipped with the package
# The traffic kind of each event schedule that has one of its own (else "single").
_TREE_KIND, _RADIX_KIND = KINDS[3], KINDS[1]


@dataclass(frozen=True, kw_only=True)
class LinkCost:
    """Calibrated constants of allreduce over TCP links (seconds; efficiencies in (0, 1]).

    Parameters
    ----------
    alpha
        Seconds per message round, a send/receive step (default 200 us).
    eff_single
        Fraction of goodput one flow per link direction gets (default 0.98).
    eff_halving_doubling
        Fraction halving/doubling gets, with several partners on other hosts (default 0.8).
    eff_shared_nic
        Fraction when several workers of a host cross its NIC in one step (default 0.8).
    eff_tree
        Fraction the tree's up and down streams through a node get (default 0.85).
    mtu
        Bytes per IP packet (default 1500).
    tcp_ip_headers
        Header bytes per packet (default 52).
    framing
        Link bytes per frame beyond the packet (default 14, what a ``tc`` rate limit counts; 38 on a
        real wire).
    source
        Where the constants come from (``"defaults"`` or the fit's description).
    """

    alpha: float = 200e-6          # per message round (a send/receive step)
    eff_single: float = 0.98       # one flow per link direction
    eff_halving_doubling: float = 0.8  # halving/doubling, several partners on other hosts
    eff_shared_nic: float = 0.8    # several workers of a host crossing its NIC in one step
    eff_tree: float = 0.85         # the tree's up and down streams through a node
    mtu: int = 1500
    tcp_ip_headers: int = 52
    framing: int = 14              # what a tc rate limit counts; 38 on a real wire
    source: str = "defaults"

    def goodput(self, link_bits: float) -> float:
        """TCP payload bytes per second on a link of ``link_bits`` bit/s.

        Parameters
        ----------
        link_bits
            The link's nominal rate in bits/s.
        """
        return tcp_goodput(link_bits, mtu=self.mtu, framing=self.framing,
                           tcp_ip_headers=self.tcp_ip_headers)

    def efficiency(self, kind: str) -> float:
        """The fraction of goodput that traffic of ``kind`` (one of :data:`KINDS`) gets.

        Parameters
        ----------
        kind
            A kind of traffic, one of :data:`KINDS`.
        """
        return float(getattr(self, f"eff_{kind}"))


def recorded(path: str | None = None) -> LinkCost:
    """The constants fitted on emulated hosts (``path``: another such JSON file).

    Parameters
    ----------
    path
        Another JSON file of constants (default None: the package's ``link_cost.json``).
    """
    if path is None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), _RECORDED)
    try:
        with open(path) as f:
            raw = json.load(f)
        known = set(LinkCost.__dataclass_fields__)
        cost = LinkCost(**{k: v for k, v in raw.items() if k in known})
    except (OSError, ValueError, TypeError) as e:
        raise ConfigError(f"{path}: not a link cost file ({e}); expected JSON with alpha and "
                          f"{', '.join('eff_' + k for k in KINDS)}") from None
    effs = [cost.efficiency(k) for k in KINDS]
    if not (cost.alpha >= 0 and all(0 < e <= 1.5 for e in effs)):
        raise ConfigError(f"{path}: alpha must be >= 0 and efficiencies in (0, 1.5]")
    return cost


@functools.cache
def _recorded() -> LinkCost:
    return recorded()  # the shipped constants, read once (auto consults them per shape)


# -- the schedules: bytes through the busiest host link, message rounds, partners ---------------
def _busiest(steps: list[tuple[np.ndarray, np.ndarray, float]], host: np.ndarray) -> float:
    """Bytes through the busiest host link direction over all ``steps`` (sources,
    destinations, bytes of each message). The algorithms pipeline their steps chunk by chunk,
    so a link's total, not the sum of each step's busiest link, bounds the time."""
    n = int(host.max()) + 1
    up, down = np.zeros(n), np.zeros(n)
    for src, dst, nbytes in steps:
        cross = host[src] != host[dst]
        np.add.at(up, host[src][cross], nbytes)
        np.add.at(down, host[dst][cross], nbytes)
    return float(max(up.max(), down.max()))


def _hd_steps(host: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """halving_doubling's messages (sources, destinations, fraction of the vector each), in
    the algorithm's layout-derived step order: a radix-r step is r-1 of them, one per
    other group member, or r-1 to the next member where it runs as a ring (it does for
    large parts: the sizes this model is for)."""
    ranks = np.arange(len(host))
    steps = radix_steps(host.tolist())
    rs, frac = [], 1.0
    for stride, r in steps:
        frac /= r
        d = (ranks // stride) % r
        ring = as_ring(r, 1 << 40)
        rs.append([(ranks, ranks + ((d + (1 if ring else k)) % r - d) * stride, frac)
                   for k in range(1, r)])
    # The allgather undoes the steps in reverse, each message as large as its mirror's.
    return [m for batch in rs + rs[::-1] for m in batch]


def schedule(algorithm: str, hosts: int, per_host: int = 1) -> dict[str, Any]:
    """Per unit of vector: the busiest link's bytes, message rounds and kind of traffic, by
    the event schedule of ``algorithm``'s registry entry.

    ``link`` is in vectors (multiply by the size); ``fill`` counts the chunks (the
    algorithm's pipeline unit, ``chunk`` bytes) that pass in series on top of it: the tree's
    pipeline fill; ``segment`` is the ranks per host that first meet in shared memory.

    Parameters
    ----------
    algorithm
        A name of the registry.
    hosts
        Hosts.
    per_host
        Workers on each host (default 1).
    """
    try:
        spec = allreduce_spec(algorithm)
    except ConfigError:
        spec = None
    kind = None if spec is None else spec.schedule
    if kind is None or not spec.runs_on(2):  # type: ignore[union-attr]
        with_model = [a for a, s in ALLREDUCE.items() if s.schedule and s.runs_on(2)]
        raise ValueError(f"no link model for {algorithm!r} ({', '.join(with_model)})")
    return _schedule(kind, hosts, per_host)


def _schedule(kind: str, hosts: int, per_host: int) -> dict[str, Any]:
    p = hosts * per_host
    host = np.arange(p) // per_host
    if kind == "host segments":  # shared memory inside hosts, a ring of the leaders
        return {**_schedule("ring order", hosts, 1), "segment": per_host}
    if kind == "ring order":
        ranks = np.arange(p)
        link = _busiest([(ranks, (ranks + 1) % p, 1.0 / p)] * (2 * (p - 1)), host)
        return {"link": link, "fill": 0.0, "chunk": 0, "rounds": 2 * (p - 1),
                "kind": "single", "segment": 1}
    if kind == "radix steps":
        steps = _hd_steps(host)
        link = _busiest(steps, host)
        partners: dict[int, set[int]] = {}  # each rank's partners on other hosts
        shared = False  # several workers of one host cross its NIC in the same step
        for src, dst, _ in steps:
            cross = host[src] != host[dst]
            shared |= bool(cross.any()) and np.bincount(host[src][cross]).max() > 1
            for a, b in zip(src.tolist(), dst.tolist()):
                if host[a] != host[b]:
                    partners.setdefault(a, set()).add(b)
        several = max((len(v) for v in partners.values()), default=0) > 1
        traffic = "shared_nic" if shared else _RADIX_KIND if several else "single"
        return {"link": link, "fill": 0.0, "chunk": 0, "rounds": len(steps), "kind": traffic,
                "segment": 1}
    # the heap tree
    h, r, _ = tree_shape(p)
    up = np.zeros(hosts)
    down = np.zeros(hosts)
    for v in range(p):
        edges = [(v - 1) // 2] if v else []
        edges += [c for c in (2 * v + 1, 2 * v + 2) if c < p]
        remote = sum(1 for u in edges if host[u] != host[v])
        # Every chunk crosses each remote edge once each way: up the tree, then down.
        up[host[v]] += remote
        down[host[v]] += remote
    k = float(max(up.max(), down.max())) if hosts > 1 else 0.0
    # Pipeline fill: the first chunk climbs to the root (a parent waits for its r
    # children) and comes back down, each hop between hosts a chunk's time at the link
    # rate (hops inside a host are loopback: free at these rates); the steady state then
    # moves k chunks per chunk through the busiest link direction.
    v, hops = p - 1, 0
    while v:
        hops += int(host[v] != host[(v - 1) // 2])
        v = (v - 1) // 2
    return {"link": k, "fill": max(0.0, hops * (r + 1) - k), "chunk": tree.CHUNK_BYTES,
            "rounds": 2 * h, "kind": _TREE_KIND if k > 1 else "single", "segment": 1}


def kind_of(algorithm: str, hosts: int, per_host: int = 1) -> str:
    """Which efficiency prices ``algorithm``'s link traffic (one of :data:`KINDS`).

    Parameters
    ----------
    algorithm
        A name of the registry.
    hosts
        Hosts.
    per_host
        Workers on each host (default 1).
    """
    return str(schedule(algorithm, hosts, per_host)["kind"])


def _terms(algorithm: str, nbytes: float, hosts: int, per_host: int, link_bits: float,
           cost: LinkCost) -> tuple[float, float, str, float]:
    """(message rounds, link seconds at goodput, kind, shared-memory seconds)."""
    s = schedule(algorithm, hosts, per_host)
    if allreduce_spec(algorithm).fast_path == "swap" and hosts * per_host == 2 and \
            nbytes <= tree.CHUNK_BYTES:
        # Two ranks, a small message: the swap -- both send at once, one round, no fill.
        s = {**s, "rounds": 1, "fill": 0.0}
    g = cost.goodput(link_bits)
    link_bytes = s["link"] * nbytes
    rounds = float(s["rounds"])
    if s["fill"]:  # chunks stream: their rounds overlap, only their transfer adds up
        link_bytes += s["fill"] * min(float(s["chunk"]), nbytes)
    shm = shm_time(nbytes, s["segment"], CostParams()) if s["segment"] > 1 else 0.0
    return rounds, link_bytes / g, str(s["kind"]), shm


def link_time(algorithm: str, nbytes: float, hosts: int, link_bits: float,
              cost: LinkCost | None = None, *, per_host: int = 1) -> float:
    """Predicted seconds of one allreduce of ``nbytes`` over ``hosts`` hosts of ``per_host``
    workers joined by TCP links of ``link_bits`` bit/s (the recorded constants by default).

    Parameters
    ----------
    algorithm
        A name of the registry with an event schedule.
    nbytes
        The message size in bytes.
    hosts
        Hosts.
    link_bits
        The links' rate in bits/s.
    cost
        The constants (default None: :func:`recorded`).
    per_host
        Workers on each host (default 1).
    """
    if hosts * per_host == 1:
        return 0.0
    cost = cost or _recorded()
    rounds, link_s, kind, shm = _terms(algorithm, nbytes, hosts, per_host, link_bits, cost)
    return rounds * cost.alpha + link_s / cost.efficiency(kind) + shm


# -- calibration -------------------------------------------------------------------------------
def _points(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    pts = []
    for rep in reports:
        for r in rep.get("results", []):
            algo = r["system"].split(":", 1)[1]
            spec = ALLREDUCE.get(algo)
            if spec is None or spec.schedule is None or not spec.runs_on(2):
                continue
            pts.append({"algorithm": algo, "hosts": rep["hosts"], "per_host": rep["per_host"],
                        "link_bits": rep["link_bits"], "bytes": r["bytes"],
                        "measured_s": r["median_s"]})
    return pts


def fit(reports: list[dict[str, Any]], *, check: list[dict[str, Any]] | None = None,
        base: LinkCost = LinkCost(), alpha: float | None = None) -> dict[str, Any]:
    """Fit alpha and the efficiencies to cluster benchmark reports; with ``alpha`` (seconds)
    only the efficiencies, alpha held there (messages of a MiB and more cannot tell it).

    Returns the constants and every point (those of ``check`` too, not fitted on: a
    held-out test) with its prediction and relative error.

    Parameters
    ----------
    reports
        Cluster benchmark reports (``terascale bench allreduce --cluster --json``) to fit on.
    check
        Reports held out: predicted, not fitted on (default None).
    base
        The constants not fitted (MTU, framing) and the starting point (default: :class:`LinkCost`'s
        defaults).
    alpha
        Hold alpha at this many seconds and fit only the efficiencies (default None: fit it too).
    """
    pts = _points(reports)
    if not pts:
        raise ValueError("no rows of an algorithm with a link model to fit ("
                         f"{', '.join(a for a, s in ALLREDUCE.items() if s.schedule and s.runs_on(2))})")
    rows, ys = [], []
    for p in pts:
        rounds, link_s, kind, shm = _terms(p["algorithm"], p["bytes"], p["hosts"],
                                           p["per_host"], p["link_bits"], base)
        feat = np.zeros(1 + len(KINDS))
        feat[0] = rounds
        feat[1 + KINDS.index(kind)] = link_s
        rows.append(feat)
        ys.append(p["measured_s"] - shm)
    a, y = np.array(rows), np.array(ys)
    if alpha is not None:
        if not (math.isfinite(alpha) and alpha >= 0):
            raise ValueError(f"alpha must be a time >= 0, not {alpha!r}")
        y = y - a[:, 0] * alpha
        a[:, 0] = 0.0
    used = a.any(axis=0)
    scale = np.where(used, np.abs(a).max(axis=0), 1.0)
    rel = a[:, used] / scale[used] / y[:, None]
    theta = np.zeros(a.shape[1])
    theta[used] = nonnegative_lstsq(rel, np.ones(len(y))) / scale[used]
    # A kind no measurement has keeps its default efficiency.
    # No flow beats TCP goodput; a fit above 1 is tc's token bucket lending its burst.
    effs = {f"eff_{k}": min(1.0, round(1.0 / theta[1 + i], 4)) if theta[1 + i] > 0
            else base.efficiency(k) for i, k in enumerate(KINDS)}
    cost = LinkCost(alpha=float(theta[0] if alpha is None else alpha), **effs, mtu=base.mtu,
                    tcp_ip_headers=base.tcp_ip_headers, framing=base.framing,
                    source=f"fitted on {len(pts)} measurements")
    out = []
    for p, held in [(p, False) for p in pts] + [(p, True) for p in _points(check or [])]:
        pred = link_time(p["algorithm"], p["bytes"], p["hosts"], p["link_bits"], cost,
                         per_host=p["per_host"])
        out.append({**p, "predicted_s": pred, "error": pred / p["measured_s"] - 1.0,
                    "held_out": held})
    return {"cost": asdict(cost), "points": out}


def format_fit(result: dict[str, Any]) -> str:
    """The constants and a Markdown table: measured vs predicted busbw per point.

    Parameters
    ----------
    result
        What :func:`fit` returned.
    """
    from .._units import format_rate, format_size

    c = result["cost"]
    effs = ", ".join(f"{k} {c['eff_' + k]:.3f}" for k in KINDS)
    lines = [f"alpha = {c['alpha'] * 1e6:.0f} us per message round; TCP efficiency (of goodput, "
             f"MTU {c['mtu']}, headers {c['tcp_ip_headers']} B, framing {c['framing']} B): "
             f"{effs}", "",
             "| link | hosts x workers | size | algorithm | measured | busbw / goodput | "
             "predicted | error |", "|---|---|---|---|---|---|---|---|"]
    for p in sorted(result["points"], key=lambda p: (p["link_bits"], p["hosts"], p["per_host"],
                                                     p["bytes"], p["algorithm"])):
        n = p["hosts"] * p["per_host"]
        g = tcp_goodput(p["link_bits"], mtu=c["mtu"], framing=c["framing"],
                        tcp_ip_headers=c["tcp_ip_headers"])
        busbw = p["bytes"] / p["measured_s"] * 2 * (n - 1) / n
        lines.append(f"| {format_rate(p['link_bits'])} | {p['hosts']} x {p['per_host']} | "
                     f"{format_size(p['bytes'])} | {p['algorithm']} | "
                     f"{p['measured_s'] * 1e3:.0f} ms | {busbw / g:.1%} | "
                     f"{p['predicted_s'] * 1e3:.0f} ms | {p['error'] * 100:+.1f}%"
                     f"{' (held out)' if p['held_out'] else ''} |")
    return "\n".join(lines)
