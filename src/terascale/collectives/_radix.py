"""The mixed-radix schedule of the halving/doubling allreduce, derived from the host layout.

Ruefenacht, Bull & Booth, "Generalisation of recursive doubling for AllReduce" (Parallel
Computing 2017): write ``p = r_1 r_2 ... r_m`` (its prime factors) and a rank as a
mixed-radix number with one digit per factor. Step ``k`` of the reduce-scatter exchanges
with the ``r_k - 1`` ranks that differ only in digit ``k`` (its *group*): the current
segment is cut into ``r_k`` parts, part ``j`` goes to the member whose digit is ``j``. The
allgather mirrors it. Every rank sends ``2 (p-1)/p`` of the vector (the ring's bound) in
``2 sum(r_k - 1)`` messages over ``2m`` steps; powers of two are Rabenseifner's recursive
halving/doubling, a prime ``p`` is one direct exchange step each way.

A step is ``(stride, radix)``: digit ``(v // stride) % radix`` of rank ``v``. Which prime
sits at which digit position and the order of the steps come from the host layout
(:func:`radix_steps`); everything here is a pure function of it, so every rank derives the
same schedule.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterator, Sequence

__all__ = ["Step", "arrival_order", "block_of", "digit", "group", "held_order", "radix_steps",
           "segment", "traffic", "widths"]

Step = tuple[int, int]  # (stride, radix)
_MAX_CANDIDATES = 64  # digit placements tried (a multiset of k primes has up to k! of them)


def _primes(p: int) -> list[int]:
    out, f = [], 2
    while f * f <= p:
        while p % f == 0:
            out.append(f)
            p //= f
        f += 1
    if p > 1:
        out.append(p)
    return out


def _placements(primes: list[int]) -> Iterator[list[int]]:
    """Distinct orders of the multiset ``primes`` (lexicographic), at most a few dozen."""
    seen: set[tuple[int, ...]] = set()

    def rec(rest: list[int], acc: list[int]) -> Iterator[list[int]]:
        if not rest:
            yield acc
            return
        for i, f in enumerate(rest):
            if f in rest[:i]:
                continue
            yield from rec(rest[:i] + rest[i + 1:], [*acc, f])

    for order in rec(sorted(primes), []):
        if tuple(order) not in seen:
            seen.add(tuple(order))
            yield order
        if len(seen) >= _MAX_CANDIDATES:
            return


def digit(v: int, step: Step) -> int:
    stride, radix = step
    return (v // stride) % radix


def group(v: int, step: Step) -> list[int]:
    """The members of ``v``'s group at ``step``, by digit (``v`` itself among them)."""
    stride, radix = step
    base = v - digit(v, step) * stride
    return [base + j * stride for j in range(radix)]


def widths(p: int, steps: Sequence[Step]) -> list[int]:
    """Blocks per part at each step: ``p / (r_1 ... r_k)``."""
    out, w = [], p
    for _, r in steps:
        w //= r
        out.append(w)
    return out


def segment(v: int, steps: Sequence[Step], p: int, k: int) -> int:
    """First block of ``v``'s segment entering step ``k`` (it spans ``p / (r_1..r_{k-1})``)."""
    return sum(digit(v, s) * w for s, w in zip(steps[:k], widths(p, steps)))


def block_of(v: int, steps: Sequence[Step], p: int) -> int:
    """The block ``v`` owns after the reduce-scatter (a bijection of ranks to blocks)."""
    return segment(v, steps, p, len(steps))


def arrival_order(v: int, steps: Sequence[Step], p: int, k: int, blocks: range) -> list[int]:
    """``blocks`` (``v``'s part at step ``k``) in the order ``v`` passes them on: the blocks
    that leave it at step k+1 first (then k+2, ...; its own block last), the destinations
    of one step interleaved, so that its next sends overlap this step's receives."""
    later = steps[k + 1:]
    ws = widths(p, steps)[k + 1:]
    mine = [digit(v, s) for s in later]

    def key(b: int) -> tuple[tuple[bool, ...], tuple[int, ...]]:
        d = [(b // w) % s[1] for s, w in zip(later, ws)]
        return tuple(x == y for x, y in zip(d, mine)), tuple(reversed(d))

    return sorted(blocks, key=key)


def held_order(v: int, steps: Sequence[Step], p: int, k: int) -> list[int]:
    """Blocks ``v`` holds after the allgather has undone steps ``m-1 .. k`` (its own block
    when ``k == m``), in the order it sends them on: its own part first, then each group
    member's, digits before its own first (a, a-1, a-2, ...: the order they arrive in
    round a ring that sends to a+1)."""
    if k == len(steps):
        return [block_of(v, steps, p)]
    members = group(v, steps[k])
    a = digit(v, steps[k])
    r = len(members)
    return [b for i in range(r) for b in held_order(members[(a - i) % r], steps, p, k + 1)]


def traffic(steps: Sequence[Step], hosts: Sequence[Hashable]) -> tuple[float, float, float]:
    """(busiest host link direction, all host-crossing traffic, the most a rank sends inside
    its host), in vectors, of the schedule ``steps`` over ``hosts`` (both phases).

    Parameters
    ----------
    steps
        The schedule, as :func:`radix_steps` returns it.
    hosts
        Each rank's host.
    """
    p = len(hosts)
    up: dict[Hashable, float] = {}
    local = [0.0] * p
    seg = 1.0
    for s in steps:
        part = seg / s[1]
        for v in range(p):
            cross = sum(hosts[u] != hosts[v] for u in group(v, s))
            if cross:
                up[hosts[v]] = up.get(hosts[v], 0.0) + 2 * part * cross
            local[v] += 2 * part * (s[1] - 1 - cross)
        seg = part
    return max(up.values(), default=0.0), sum(up.values()), max(local, default=0.0)


def radix_steps(hosts: Sequence[Hashable]) -> list[Step]:
    """The reduce-scatter's steps ``(stride, radix)`` in order (the allgather: reversed).

    ``hosts`` is each rank's host. A step moves ``(r-1)/r`` of the current segment, so the
    first step moves the most: steps whose groups stay inside a host go first (sorted by
    the share of group members on other hosts, per extra member; an exchange argument shows
    this order minimizes the bytes a rank sends off its host). Each placement of the primes
    on the digit positions (a few dozen at most) is ordered that way and the one with the
    least loaded host link wins, so 2 hosts x 3 workers runs the radix-3 step inside each
    host and only the radix-2 step across. Without a layout (every rank its own host) ties
    go to the larger radix first (a radix > 2 step with large parts runs as a ring, the
    pattern that fills rate-limited TCP links best, so most bytes move that way), then the
    larger stride: for a power of two the textbook distances
    ``p/2, p/4, ..., 1``.

    Parameters
    ----------
    hosts
        Each rank's host.
    """
    return list(_radix_steps(tuple(hosts)))


@functools.lru_cache(maxsize=64)
def _radix_steps(hosts: tuple[Hashable, ...]) -> tuple[Step, ...]:
    p = len(hosts)
    if p <= 1:
        return ()
    best: list[Step] | None = None
    best_cost = (0.0, 0.0)
    for placement in _placements(_primes(p)):
        steps, stride = [], 1
        for r in placement:
            steps.append((stride, r))
            stride *= r

        def key(s: Step) -> tuple[float, int, int]:
            cross = sum(hosts[u] != hosts[v] for v in range(p) for u in group(v, s))
            return (cross / (s[1] - 1), -s[1], -s[0])

        steps.sort(key=key)
        cost = traffic(steps, hosts)[:2]
        if best is None or cost < best_cost:
            best, best_cost = steps, cost
    assert best is not None
    return tuple(best)
