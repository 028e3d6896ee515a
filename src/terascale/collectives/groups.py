"""Grouping ranks by color, as ``MPI_Comm_split`` does: the one rule sub-groups follow.

:meth:`terascale.Communicator.split` forms its sub-communicators with it, and the
hierarchical allreduce its host groups and its group of host leaders, so the two always
agree on who is in a group and in which order.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

__all__ = ["host_groups", "split_groups"]


def split_groups(colors: Sequence[Hashable | None],
                 keys: Sequence[int] | None = None) -> dict[Hashable, list[int]]:
    """Ranks by color, each group ordered by ``(key, rank)``; a None color joins no group.

    Groups appear in the order of their lowest rank. ``colors[r]`` and ``keys[r]`` are rank
    ``r``'s arguments; every rank computes the same groups from the same lists.

    Parameters
    ----------
    colors
        Each rank's color, in rank order (None: no group).
    keys
        Each rank's key (default None: the ranks themselves).
    """
    order = sorted(range(len(colors)), key=lambda r: (0 if keys is None else keys[r], r))
    first: dict[Hashable, int] = {}
    for r, c in enumerate(colors):
        if c is not None:
            first.setdefault(c, r)
    groups: dict[Hashable, list[int]] = {c: [] for c in sorted(first, key=first.__getitem__)}
    for r in order:
        c = colors[r]
        if c is not None:
            groups[c].append(r)
    return groups


def host_groups(hosts: Sequence[str]) -> list[list[int]]:
    """Ranks grouped by host, hosts in order of their lowest rank, ranks in order.

    Parameters
    ----------
    hosts
        Each rank's host id, in rank order.
    """
    return list(split_groups(hosts).values())
