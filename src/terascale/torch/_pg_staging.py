"""How the process group stages torch tensors for the communicator, and maps torch's ops.

The communicator moves CPU, contiguous NumPy-compatible buffers; torch hands it bfloat16,
strided and accelerator tensors too. Staging copies only what it must: moving data
(broadcast, gathers, all-to-all) carries bfloat16 as its int16 bits, so no bit changes;
reducing bfloat16 happens in a float32 copy that is rounded once, so every rank gets the
same bits (the determinism rule of the project's collectives). ``ReduceOp.AVG`` is a SUM
divided by the group's size afterwards.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from .._errors import ConfigError

__all__ = ["from_wire", "reduce_op", "reducible", "same_memory", "to_wire"]

_OPS = [(dist.ReduceOp.SUM, "sum"), (dist.ReduceOp.PRODUCT, "prod"),
        (dist.ReduceOp.MIN, "min"), (dist.ReduceOp.MAX, "max")]


def to_wire(t: torch.Tensor) -> torch.Tensor:
    """A CPU, contiguous tensor with ``t``'s bytes that the communicator can move.

    bfloat16 travels as int16 (the same 2 bytes): moving data never changes a bit.
    """
    s = t.detach()
    if s.device.type != "cpu":
        s = s.cpu()
    s = s.contiguous()
    return s.view(torch.int16) if s.dtype == torch.bfloat16 else s


def from_wire(s: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """The tensor :func:`to_wire` made (or one received like it), seen as ``like``'s dtype."""
    return s.view(torch.bfloat16) if like.dtype == torch.bfloat16 else s


def same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether staging ``a`` gave ``a`` itself (no copy back needed)."""
    return a.data_ptr() == b.data_ptr() and a.dtype == b.dtype and a.device == b.device


def reduce_op(opts: Any, rank: int) -> tuple[str, bool]:
    """(terascale op, divide by size afterwards) for ``opts.reduceOp``."""
    op = opts.reduceOp
    for torch_op, name in _OPS:
        if op == torch_op:
            return name, False
    if op == dist.ReduceOp.AVG:
        return "sum", True
    raise ConfigError(f"rank {rank}: the terascale backend reduces with SUM, AVG, PRODUCT, "
                      f"MIN, MAX, BAND, BOR or BXOR, not {op_name(op)}")


def op_name(op: Any) -> str:
    """``ReduceOp.BAND`` for a ``ReduceOp`` (whose own repr is an object's address)."""
    kind = getattr(op, "op", op)  # a ReduceOp holds its RedOpType in .op
    name = getattr(kind, "name", None)
    return f"ReduceOp.{name}" if name else repr(op)


def reducible(t: torch.Tensor, avg: bool, rank: int) -> torch.Tensor:
    """Where to reduce ``t``: itself when possible; bfloat16 in a float32 copy."""
    if avg and not (t.is_floating_point() or t.is_complex()):
        raise ConfigError(f"rank {rank}: ReduceOp.AVG needs a floating-point "
                          f"tensor, not {t.dtype}; use SUM and divide")
    s = t.detach()
    if s.dtype == torch.bfloat16:  # reduce in float32, round once: same bits everywhere
        return s.to("cpu", torch.float32)
    if s.device.type != "cpu" or not s.is_contiguous():
        return s.cpu().contiguous()
    return s
