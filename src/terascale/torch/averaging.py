"""Model averaging (local SGD): the alternative to averaging gradients every step.

Each worker runs its own optimizer on its own data and, every ``every`` steps, all workers
replace their parameters by the average (weight averaging with ``AllReduce(weights)`` as in
Agarwal et al., JMLR 2014; Zinkevich et al. 2010; periodic averaging as in CNTK's model
averaging and "local SGD"). Communication drops by a factor ``every``; the price is that
workers drift apart between averagings. ``every=1`` with plain SGD equals gradient averaging.
"""

from __future__ import annotations

import torch

from .._errors import ConfigError
from ..communicator import Communicator
from ._comm import resolve
from ._flat import by_dtype, unflatten_into

__all__ = ["ModelAverager", "average_buffers", "average_tensors"]


def average_tensors(tensors: list[torch.Tensor], comm: Communicator) -> None:
    """Replace every tensor by its average over workers (one allreduce per dtype; float16
    and bfloat16 are summed in float32 and rounded once).

    Parameters
    ----------
    tensors
        The tensors to average in place, in the same order on every worker.
    comm
        The communicator.
    """
    for ts in by_dtype(t for t in tensors if t.is_floating_point()):
        flat = torch.cat([t.detach().reshape(-1) for t in ts])
        if flat.dtype in (torch.float16, torch.bfloat16):
            flat = flat.float()  # sum in float32, round once (unflatten_into casts back)
        total = comm.allreduce(flat)
        unflatten_into(ts, total / comm.size)


def average_buffers(model: torch.nn.Module, *, comm: Communicator | None = None) -> None:
    """Average floating-point buffers (batch-norm running statistics) over workers.

    Batch norm is per worker by default (Goyal et al.); call this before evaluation or
    checkpointing so that every worker holds the same statistics.

    Parameters
    ----------
    model
        Its floating-point buffers are averaged in place.
    comm
        The communicator (default None: the process's ``terascale.init()``, made once on first use
        and shared by every object of ``terascale.torch``).
    """
    average_tensors(list(model.buffers()), resolve(comm))


class ModelAverager:
    """Call :meth:`step` after every local optimizer step; averages every ``every`` steps.

    Parameters (and, with ``buffers=True``, floating-point buffers) become bitwise
    identical on all workers after each averaging. Optimizer state (momentum) stays local,
    as in local SGD.

    Parameters
    ----------
    model
        The module whose parameters are averaged.
    comm
        The communicator (default None: the process's ``terascale.init()``, made once on first use
        and shared by every object of ``terascale.torch``).
    every
        Average after every this many local steps (default 8); fewer: closer to synchronous SGD,
        more traffic.
    buffers
        Also average floating-point buffers, e.g. batch-norm statistics (default False).
    """

    def __init__(self, model: torch.nn.Module, *, every: int = 8,
                 comm: Communicator | None = None, buffers: bool = False) -> None:
        if every < 1:
            raise ConfigError(f"every={every} must be >= 1")
        self.model, self.every, self.buffers = model, every, buffers
        self.comm = resolve(comm)
        self.steps = 0

    def step(self) -> bool:
        """Count one local step; average if it is the ``every``-th. True if it averaged."""
        self.steps += 1
        if self.steps % self.every:
            return False
        self.average()
        return True

    def average(self) -> None:
        tensors: list[torch.Tensor] = list(self.model.parameters())
        if self.buffers:
            tensors += list(self.model.buffers())
        average_tensors(tensors, self.comm)
