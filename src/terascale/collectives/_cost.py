"""Shared pieces of the algorithms' cost formulas (Hockney's alpha-beta model with a
reduction term gamma; :mod:`terascale.sim.model` explains it and prices every registered
algorithm through its entry's ``cost``).

The formulas take the machine's parameters as ``c`` (a :class:`terascale.sim.CostParams`:
``alpha``, ``beta``, ``gamma``, ``alpha_shm``, ``delta`` and its ``for_message``,
``scaled`` and ``slowdown``), read by attribute, so that this layer imports nothing of the
planner's.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check", "settle", "swap_time"]


def check(nbytes: float, p: int) -> None:
    """ValueError for fewer than one rank or a negative size."""
    if p < 1:
        raise ValueError(f"need at least one rank, got {p}")
    if nbytes < 0:
        raise ValueError(f"negative message size {nbytes}")


def swap_time(nbytes: float, c: Any) -> float:
    """Two ranks, one message each way at once, both reduce the whole vector (:mod:`._pair`)."""
    return float(c.alpha + nbytes * c.beta + nbytes * c.gamma)


def settle(nbytes: float, p: int, c: Any, ranks_per_host: int,
           swap_max: float) -> tuple[float | None, Any]:
    """What every allreduce formula does first: check the arguments, price the cases that
    need no formula, and set the machine's parameters for this message.

    Returns ``(seconds, c)``: ``seconds`` is the answer when the formula need not run (one
    rank: 0; two ranks and at most ``swap_max`` bytes: the swap, :func:`swap_time`), else
    None; ``c`` is ``c.for_message(nbytes).scaled(ranks_per_host)`` (``ranks_per_host``
    ranks share one host's link).
    """
    check(nbytes, p)
    if p == 1:
        return 0.0, c
    c = c.for_message(nbytes).scaled(ranks_per_host)
    if p == 2 and nbytes <= swap_max:
        return swap_time(nbytes, c), c
    return None, c
