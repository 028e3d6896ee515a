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

__all__ = ["check", "swap_time"]


def check(nbytes: float, p: int) -> None:
    """ValueError for fewer than one rank or a negative size."""
    if p < 1:
        raise ValueError(f"need at least one rank, got {p}")
    if nbytes < 0:
        raise ValueError(f"negative message size {nbytes}")


def swap_time(nbytes: float, c: Any) -> float:
    """Two ranks, one message each way at once, both reduce the whole vector (:mod:`._pair`)."""
    return float(c.alpha + nbytes * c.beta + nbytes * c.gamma)
