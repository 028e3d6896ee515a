"""Fusing many tensors into one flat buffer per dtype, and scattering it back."""

from __future__ import annotations

from collections.abc import Iterable

import torch

__all__ = ["by_dtype", "unflatten_into"]


def by_dtype(tensors: Iterable[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Tensors grouped by dtype, groups in the same (name) order on every worker."""
    groups: dict[torch.dtype, list[torch.Tensor]] = {}
    for t in tensors:
        groups.setdefault(t.dtype, []).append(t)
    return [groups[d] for d in sorted(groups, key=str)]


def unflatten_into(tensors: Iterable[torch.Tensor], flat: torch.Tensor) -> None:
    """Copy consecutive slices of ``flat`` into ``tensors`` (in place, no autograd)."""
    off = 0
    with torch.no_grad():
        for t in tensors:
            n = t.numel()
            t.copy_(flat[off:off + n].view_as(t))
            off += n
