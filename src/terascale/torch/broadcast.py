"""Start every worker identical: broadcast parameters, buffers and optimizer state.

Data-parallel SGD keeps workers identical only if they *start* identical: the same
averaged gradient applied to different weights gives different models. Parameters (and
buffers such as batch-norm statistics) are fused per dtype into one host buffer and sent in
one broadcast each, which works for CPU and CUDA tensors alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from ..communicator import Communicator
from ._comm import resolve
from ._flat import by_dtype, unflatten_into

__all__ = ["broadcast_buffers", "broadcast_optimizer_state", "broadcast_parameters"]


def _broadcast_tensors(tensors: list[torch.Tensor], root: int, comm: Communicator) -> None:
    for ts in by_dtype(tensors):  # the same order on every worker
        dtype = ts[0].dtype
        if dtype == torch.bfloat16:
            flat = torch.cat([t.detach().reshape(-1).cpu().view(torch.int16) for t in ts])
        else:
            flat = torch.cat([t.detach().reshape(-1).cpu() for t in ts])
        comm.broadcast(flat.numpy(), root=root)
        if dtype == torch.bfloat16:
            flat = flat.view(torch.bfloat16)
        unflatten_into(ts, flat)


def broadcast_parameters(model: torch.nn.Module | Iterable[torch.Tensor], root: int = 0, *,
                         comm: Communicator | None = None, buffers: bool = True) -> None:
    """Overwrite every worker's parameters (and, by default, buffers) with ``root``'s.

    Parameters
    ----------
    comm
        The communicator (default None: the process's ``terascale.init()``, made once on first use
        and shared by every object of ``terascale.torch``).
    model
        A module or an iterable of tensors (e.g. ``model.parameters()``).
    root
        The rank whose parameters every worker gets (default 0).
    buffers
        With a module: also its buffers (default True).
    """
    comm = resolve(comm)
    if comm.size == 1:
        return
    if isinstance(model, torch.nn.Module):
        tensors = list(model.parameters()) + (list(model.buffers()) if buffers else [])
    else:
        tensors = list(model)
    _broadcast_tensors(tensors, root, comm)


def broadcast_buffers(model: torch.nn.Module, root: int = 0, *,
                      comm: Communicator | None = None) -> None:
    """Overwrite buffers (batch-norm running statistics, ...) with ``root``'s.

    Parameters
    ----------
    comm
        The communicator (default None: the process's ``terascale.init()``, made once on first use
        and shared by every object of ``terascale.torch``).
    model
        The module whose buffers are overwritten.
    root
        The rank whose buffers every worker gets (default 0).
    """
    comm = resolve(comm)
    if comm.size > 1:
        _broadcast_tensors(list(model.buffers()), root, comm)


def _to_cpu(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def broadcast_optimizer_state(optimizer: Any, root: int = 0, *,
                              comm: Communicator | None = None) -> None:
    """Overwrite the optimizer's state (momentum buffers, step counts, LR...) with ``root``'s.

    Works for any optimizer with ``state_dict``/``load_state_dict`` (also a
    :class:`~terascale.torch.DistributedOptimizer`); tensors travel through host memory and
    ``load_state_dict`` moves them to the parameters' devices.

    Parameters
    ----------
    comm
        The communicator (default None: the process's ``terascale.init()``, made once on first use
        and shared by every object of ``terascale.torch``).
    optimizer
        The optimizer whose state is overwritten.
    root
        The rank whose state every worker gets (default 0).
    """
    comm = resolve(comm)
    if comm.size == 1:
        return
    state = comm.broadcast_object(_to_cpu(optimizer.state_dict()) if comm.rank == root else None,
                                  root=root)
    if comm.rank != root:
        optimizer.load_state_dict(state)
