"""The buckets of :class:`~terascale.torch.DistributedOptimizer`: fixed at construction."""

from __future__ import annotations

import torch

from .._errors import ConfigError

__all__ = ["Bucket", "assign_buckets"]


class Bucket:
    """A fixed group of parameters of one dtype and device, reduced as one flat buffer."""

    def __init__(self, index: int, params: list[tuple[int, torch.nn.Parameter]]) -> None:
        self.index = index
        self.params = params  # (global parameter number, parameter)
        self.offsets: list[tuple[int, int]] = []
        n = 0
        for _, p in params:
            self.offsets.append((n, p.numel()))
            n += p.numel()
        self.numel = n
        self.dtype = params[0][1].dtype
        self.device = params[0][1].device
        # Half-precision gradients (float16, bfloat16) are summed in float32 and rounded to
        # their dtype once, after the division: the weighted sum cannot overflow, rounding
        # happens once, and every worker rounds the same float32 bits to the same value.
        # (For half the bytes on the wire, use fp16_hook.)
        self.wire = torch.float32 if self.dtype in (torch.float16, torch.bfloat16) else self.dtype
        self.ready = 0


def assign_buckets(params: list[torch.nn.Parameter], cap: int, first_cap: int) -> list[Bucket]:
    """Reverse registration order, split by (dtype, device) and by ``cap`` bytes.

    The first bucket closes at ``first_cap`` bytes (as DDP does), so that the first
    allreduce starts while most of backward is still ahead.
    """
    open_: dict[tuple[torch.dtype, torch.device], list[tuple[int, torch.nn.Parameter]]] = {}
    closed: list[list[tuple[int, torch.nn.Parameter]]] = []
    for num in range(len(params) - 1, -1, -1):
        p = params[num]
        if p.is_sparse:
            raise ConfigError("sparse gradients are not supported by DistributedOptimizer")
        key = (p.dtype, p.device)
        cur = open_.setdefault(key, [])
        cur.append((num, p))
        limit = first_cap if not closed else cap
        if sum(q.numel() * q.element_size() for _, q in cur) >= limit:
            closed.append(cur)
            open_[key] = []
    closed.extend(group for group in open_.values() if group)
    return [Bucket(i, group) for i, group in enumerate(closed)]
