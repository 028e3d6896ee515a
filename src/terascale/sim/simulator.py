"""Discrete-event simulation of allreduce schedules over N nodes.

Every message of the real algorithms (ring, recursive halving/doubling, mixed radix for
other world sizes, pipelined binary tree chunk by chunk, hierarchical) is simulated as
events with times: a send starts when the sender has the data *and* its outgoing link is
free (and, in the lock-step ring and halving/doubling, the receiver's incoming link),
occupies the link for ``bytes * beta`` (times the number of workers of that host crossing
the NIC in the same step), arrives ``alpha`` later, and is reduced on the receiver's CPU
(``bytes * gamma``). Messages between workers of one host use the shared-memory costs
(``alpha_shm``, ``delta``) instead and no NIC.

Ring and halving/doubling move in steps in which every rank sends at most one message and
receives at most one, so their event times obey max-plus recurrences evaluated for all
ranks of a step at once with numpy (exact event times, 1,000 ranks in milliseconds). The
tree's up and down streams share links chunk after chunk, so it runs as a classic event
loop over a heap (links serve messages in simulated-time order). What the simulation adds
to :mod:`terascale.sim.model`:

* per-rank start times (stragglers drawn from a distribution, :func:`straggler_delays`);
* a node failure at a given time: every event that depends on the dead rank never happens
  (time ``inf``), which is what an allreduce does -- all ranks block until the deadline;
* overlap of transfer and reduction inside the tree's pipeline (the model adds them up),
  and the gaps where its up and down streams contend for a link;
* NIC sharing by several workers per host in the flat ring and halving/doubling, and the
  faster same-host hops of a host-ordered ring (the model prices every link alike).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from .._errors import ConfigError
from .._units import parse_time
from ..collectives.halving_doubling import as_ring, radix_steps
from ..collectives.registry import allreduce_spec
from .model import TREE_CHUNK, CostParams

__all__ = ["SimResult", "simulate", "straggler_delays"]


@dataclass(frozen=True)
class SimResult:
    """Finish time per rank (``inf``: never finished) and summaries.

    Parameters
    ----------
    algorithm
        The simulated algorithm's name.
    finish
        Each rank's finish time in seconds (``inf``: never finished).
    """

    algorithm: str
    finish: np.ndarray

    @property
    def time(self) -> float:
        """When the last rank has the result (``inf`` if any rank never gets it)."""
        return float(self.finish.max()) if self.finish.size else 0.0

    @property
    def blocked(self) -> int:
        return int(np.isinf(self.finish).sum())


class _Net:
    """Per-rank clocks and link occupancy; :meth:`send` runs one step of messages."""

    def __init__(self, p: int, per_host: int, c: CostParams, start: np.ndarray,
                 fail: tuple[int, float] | None) -> None:
        self.p, self.q, self.c = p, per_host, c
        self.t = start.astype(np.float64).copy()  # when each rank's data is ready
        self.out_free = np.zeros(p)
        self.in_free = np.zeros(p)
        self.host = np.arange(p) // per_host
        self.fail = fail

    def send(self, src: np.ndarray, dst: np.ndarray, nbytes: float, reduce: bool,
             ready: np.ndarray | None = None) -> None:
        """One step: ``src[i]`` sends ``nbytes`` to ``dst[i]`` (each rank at most once per side).

        ``ready`` is when each message's data is ready (default: the sender's clock).
        """
        if src.size == 0:
            return
        c = self.c
        t0 = self.t[src] if ready is None else ready
        local = self.host[src] == self.host[dst]
        beta = np.full(src.size, c.beta)
        if self.q > 1:  # workers of one host crossing the NIC in the same step share it
            remote_hosts = self.host[src][~local]
            share = np.bincount(remote_hosts, minlength=int(self.host.max()) + 1)
            beta[~local] *= share[remote_hosts]
            beta[local] = c.delta
        alpha = np.where(local, c.alpha_shm, c.alpha)
        start = np.maximum(np.maximum(t0, self.out_free[src]), self.in_free[dst])
        end = start + nbytes * beta
        if self.fail is not None:
            dead, when = self.fail
            end = np.where(((src == dead) | (dst == dead)) & (end > when), np.inf, end)
        self.out_free[src] = end
        self.in_free[dst] = end
        arrive = end + alpha
        cost = nbytes * c.gamma if reduce else 0.0
        np.maximum.at(self.t, dst, arrive)
        if reduce:
            self.t[dst] += cost


def _ring(net: _Net, ranks: np.ndarray, nbytes: float) -> None:
    n = ranks.size
    if n == 1:
        return
    if n == 2 and nbytes <= TREE_CHUNK:  # two ranks, a small message: the swap
        net.send(ranks, ranks[::-1], nbytes, reduce=True)
        return
    block = nbytes / n
    src, dst = ranks, np.roll(ranks, -1)
    for _ in range(n - 1):
        net.send(src, dst, block, reduce=True)
    for _ in range(n - 1):
        net.send(src, dst, block, reduce=False)


def _halving_doubling(net: _Net, nbytes: float) -> None:
    """Mixed-radix halving/doubling in the algorithm's own layout-derived schedule
    (radix_steps): at a radix-r step each rank sends a part to each of its r-1 group
    members one message after the other (each paying its latency, as the model counts
    them), or, where the algorithm runs the step as a ring (as_ring), r-1 times to the next
    member."""
    p = net.p
    if p == 2 and nbytes <= TREE_CHUNK:  # two ranks, a small message: the swap
        net.send(np.array([0, 1]), np.array([1, 0]), nbytes, reduce=True)
        return
    steps = radix_steps(net.host.tolist())
    ranks = np.arange(p)
    size = nbytes
    for stride, r in steps:  # reduce-scatter
        size /= r
        d = (ranks // stride) % r
        ring = as_ring(r, int(size))
        for k in range(1, r):
            net.send(ranks, ranks + (((d + (1 if ring else k)) % r) - d) * stride, size,
                     reduce=True)
    for stride, r in reversed(steps):  # allgather
        d = (ranks // stride) % r
        ring = as_ring(r, int(size))
        for k in range(1, r):
            net.send(ranks, ranks + (((d + (1 if ring else k)) % r) - d) * stride, size,
                     reduce=False)
        size *= r


def _tree(net: _Net, nbytes: float, chunk: int | None) -> None:
    """Pipelined binary tree as a true event simulation (a heap of timed events).

    The tree's up and down traffic share links at different chunks, so links must serve
    messages in the order they become ready in simulated time: a message whose link is
    busy waits and is retried when it frees up (never booked ahead of earlier ones). Only
    the sender's outgoing link is booked (the single-port send model): a parent receives
    its two children's chunks at once, as TCP interleaves them, instead of one after the
    other (booking both ends exclusively left links idle half the time).
    """
    p, c = net.p, net.c
    if p == 1:
        return
    size = nbytes if chunk is None or nbytes <= chunk else chunk
    chunks = 1 if chunk is None or nbytes <= chunk else math.ceil(nbytes / chunk)
    if p == 2 and chunks == 1:  # not a tree: the two ranks swap their vectors and both reduce
        net.send(np.array([0, 1]), np.array([1, 0]), nbytes, reduce=True)
        return
    kids = [[ch for ch in (2 * v + 1, 2 * v + 2) if ch < p] for v in range(p)]
    beta = [c.beta] * p
    alpha = [c.alpha] * p
    if net.q > 1:  # a same-host parent/child pair talks through shared memory
        for v in range(1, p):
            if v // net.q == ((v - 1) // 2) // net.q:
                beta[v], alpha[v] = c.delta, c.alpha_shm
    out_free = [0.0] * p
    cpu_free = [float(t) for t in net.t]
    deferred = [0] * p  # reductions waiting for the CPU, per node
    dead, when = net.fail if net.fail is not None else (-1, math.inf)
    pending = [[len(kids[v]) for v in range(p)] for _ in range(chunks)]
    latest = [[float(net.t[v]) for v in range(p)] for _ in range(chunks)]
    final = [[math.inf] * p for _ in range(chunks)]
    # (time, priority, seq, kind, k, src, dst): at equal times the broadcast goes first, so
    # finished chunks leave the pipeline (a fixed, deterministic tie-break).
    heap: list[tuple[float, int, int, int, int, int, int]] = []
    seq = 0
    UP, DOWN, RED = 0, 1, 2

    def push(t: float, kind: int, k: int, a: int, b: int) -> None:
        nonlocal seq
        heapq.heappush(heap, (t, 0 if kind == DOWN else 1, seq, kind, k, a, b))
        seq += 1

    for v in range(p):  # a leaf streams its chunks one after the other
        if not kids[v]:
            push(float(net.t[v]), UP, 0, v, (v - 1) // 2)
    while heap:
        t, _, _, kind, k, a, b = heapq.heappop(heap)
        if kind == RED:
            deferred[a] -= 1
            start = max(t, cpu_free[a])
            end = start + len(kids[a]) * size * c.gamma
            if a == dead and end > when:
                continue
            cpu_free[a] = end
            if a == 0:
                final[k][0] = end
                for ch in kids[0]:
                    push(end, DOWN, k, 0, ch)
            else:
                push(end, UP, k, a, (a - 1) // 2)
            continue
        link = a if kind == UP else b  # the child's index names the parent-child link
        if out_free[a] > t:
            push(out_free[a], kind, k, a, b)  # link busy: wait for it, in time order
            continue
        end = t + size * beta[link]
        if (a == dead or b == dead) and end > when:
            continue
        out_free[a] = end
        arrive = end + alpha[link]
        if kind == UP and not kids[a] and k + 1 < chunks:
            push(end, UP, k + 1, a, b)
        if kind == UP:
            latest[k][b] = max(latest[k][b], arrive)
            pending[k][b] -= 1
            if pending[k][b] == 0 and latest[k][b] >= cpu_free[b] and not deferred[b]:
                # Settle the reduction now (fewer events); the CPU serves chunks in order.
                end = latest[k][b] + len(kids[b]) * size * c.gamma
                if b == dead and end > when:
                    continue
                cpu_free[b] = end
                if b == 0:
                    final[k][0] = end
                    for ch in kids[0]:
                        push(end, DOWN, k, 0, ch)
                else:
                    push(end, UP, k, b, (b - 1) // 2)
            elif pending[k][b] == 0:
                deferred[b] += 1
                push(latest[k][b], RED, k, b, b)
        else:
            final[k][b] = arrive
            for ch in kids[b]:
                push(arrive, DOWN, k, b, ch)
    done = np.array([max(final[k][v] for k in range(chunks)) for v in range(p)])
    net.t = np.maximum(done, np.array(cpu_free))


def _shm_phase(net: _Net, ranks_by_host: np.ndarray, nbytes: float, copies: float,
               reduce_frac: float) -> np.ndarray:
    """Leaders' clocks after a shared-memory phase of each host (waits for its slowest)."""
    c = net.c
    q = ranks_by_host.shape[1]
    s = c.slowdown(q)
    ready = net.t[ranks_by_host].max(axis=1)
    return ready + s * (c.alpha_shm + nbytes * (copies * c.delta + reduce_frac * c.gamma))


def simulate(algorithm: str, nbytes: float, nodes: int, c: CostParams, *, per_host: int = 1,
             start: np.ndarray | None = None, fail: tuple[int, float] | None = None,
             chunk: int | None = TREE_CHUNK, max_chunks: int | None = None) -> SimResult:
    """Simulate one allreduce of ``nbytes`` over ``nodes`` hosts of ``per_host`` ranks.

    Parameters
    ----------
    algorithm
        A name of the registry, simulated by its entry's ``schedule`` (one without: its cost
        formula, started when the last rank arrives, so a failure before the end blocks every rank).
    c
        The machine's :class:`CostParams`.
    chunk
        The tree's pipeline chunk in bytes.
    nbytes
        The message size in bytes.
    nodes
        Hosts.
    per_host
        Ranks on each host (default 1).
    start
        Each rank's arrival time at the collective in seconds (stragglers; default None: all 0).
    fail
        ``(rank, time)``: kill that rank at that time (default None: no failure).
    max_chunks
        Coarsens the tree's pipeline (larger chunks) to bound the number of events: the steady state
        is unchanged, the pipeline fill grows with the chunk (default None: no bound).
    """
    if chunk is not None and max_chunks is not None and nbytes > chunk * max_chunks:
        chunk = math.ceil(nbytes / max_chunks)
    p = nodes * per_host
    c = c.for_message(nbytes)
    t0 = np.zeros(p) if start is None else np.asarray(start, np.float64)
    if t0.shape != (p,):
        raise ValueError(f"start must have one time per rank ({p}), got shape {t0.shape}")
    try:
        spec = allreduce_spec(algorithm)
    except ConfigError:
        raise ValueError(f"unknown algorithm {algorithm!r}") from None
    if not spec.runs_on(nodes):
        raise ValueError(f"{algorithm} works inside one host only")
    segments = spec.schedule == "host segments"
    net = _Net(p, per_host, c.scaled(per_host) if per_host > 1 and not segments else c, t0,
               fail)
    if spec.schedule == "ring order":
        _ring(net, np.arange(p), nbytes)
    elif spec.schedule == "radix steps":
        _halving_doubling(net, nbytes)
    elif spec.schedule == "heap tree":
        _tree(net, nbytes, chunk)
    elif segments:
        grid = np.arange(p).reshape(nodes, per_host)
        q = per_host
        if q > 1:  # copy in + reduce-scatter inside each host
            net.t[grid[:, 0]] = _shm_phase(net, grid, nbytes, 1.0, (q - 1) / q)
        leaders = _Net(nodes, 1, c, net.t[grid[:, 0]], None)
        _ring(leaders, np.arange(nodes), nbytes)
        done = leaders.t
        if q > 1:  # broadcast back: every rank copies the result out
            done = done + c.slowdown(q) * (c.alpha_shm + nbytes * c.delta)
        net.t = np.repeat(done, q)
    else:  # no event schedule: the cost formula, from the last rank's arrival, for everyone
        net.t = np.full(p, float(t0.max()) + spec.time(nbytes, nodes, per_host, c, chunk=chunk))
        if fail is not None and fail[1] < net.t[0]:
            net.t[:] = np.inf
    finish = net.t.copy()
    if fail is not None:  # whoever had not finished when the rank died waits for ever
        if segments:
            finish[finish > fail[1]] = np.inf
        finish[fail[0]] = np.inf
    return SimResult(algorithm, finish)


def straggler_delays(spec: str, p: int, rng: np.random.Generator) -> np.ndarray:
    """Per-rank arrival delays from a spec (seconds):

    ``none``; ``exp:MEAN`` (exponential); ``lognormal:MEDIAN:SIGMA``; ``one:DELAY`` (rank
    ``p-1`` late by DELAY); ``frac:F:DELAY`` (a random fraction F of the ranks late by DELAY).
    Times accept ``ms``/``us``/``s`` suffixes.

    Parameters
    ----------
    p
        Ranks.
    rng
        The numpy generator to draw from (seed it for repeatable plans).
    spec
        One of the forms above.
    """
    parts = spec.split(":")
    kind = parts[0]
    try:
        vals = [parse_time(v, flag="straggler spec") if i != 0 or kind != "frac" else float(v)
                for i, v in enumerate(parts[1:])]
        if kind == "none":
            return np.zeros(p)
        if kind == "exp":
            return rng.exponential(vals[0], p)
        if kind == "lognormal":
            return vals[0] * np.exp(rng.normal(0.0, float(parts[2]), p))
        if kind == "one":
            d = np.zeros(p)
            d[-1] = vals[0]
            return d
        if kind == "frac":
            d = np.zeros(p)
            late = rng.random(p) < vals[0]
            d[late] = vals[1]
            return d
    except (IndexError, ValueError, ConfigError):
        pass
    raise ValueError(f"cannot read straggler spec {spec!r}: use none, exp:MEAN, "
                     "lognormal:MEDIAN:SIGMA, one:DELAY or frac:F:DELAY")
