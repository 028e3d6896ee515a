"""``DistributedSampler``: "shuffle the dataset every epoch and divide among all workers".

Every worker draws the same permutation (seeded with ``seed + epoch``, so a different one
each epoch after :meth:`DistributedSampler.set_epoch`) and takes every ``size``-th index
starting at its rank. By default shards are made even by repeating the first indices of
the permutation (as PyTorch does), so every worker runs the same number of steps; with
``drop_last=True`` the tail is dropped instead, and with ``even=False`` shards are disjoint
and differ by at most one sample (use :meth:`DistributedOptimizer.join` and
``set_batch_size`` to train on exactly every sample once).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sized

import torch
from torch.utils.data import Sampler

from .._errors import ConfigError
from ..communicator import Communicator
from ._comm import resolve

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler[int]):
    """Indices of this worker's shard of ``dataset`` (a sized dataset or a length).

    Parameters
    ----------
    dataset
        A sized dataset or its length.
    comm
        The communicator (default None: the process's ``terascale.init()``, made once on first use
        and shared by every object of ``terascale.torch``).
    num_replicas
        The number of workers, instead of asking ``comm`` (default None: ``comm.size``).
    rank
        This worker's place, instead of asking ``comm`` (default None: ``comm.rank``).
    shuffle
        A new permutation every epoch, the same on every worker (seeded by ``seed + epoch``; call
        :meth:`set_epoch`); False keeps the dataset's order.
    seed
        The base seed (default 0).
    drop_last
        Drop the tail so every worker gets ``len // size`` indices; otherwise, with ``even=True``
        (default), the first indices are repeated so every worker gets the same count (as torch's
        sampler), and ``even=False`` gives disjoint shards of unequal length (use
        ``DistributedOptimizer.join()`` for the worker that runs out first).
    even
        Without ``drop_last``: repeat the first indices so every worker gets the same count (default
        True, as torch's sampler); False gives disjoint shards of unequal length (use
        ``DistributedOptimizer.join()`` for the worker that runs out first).
    """

    def __init__(self, dataset: Sized | int, *, comm: Communicator | None = None,
                 num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False,
                 even: bool = True) -> None:
        self.length = dataset if isinstance(dataset, int) else len(dataset)
        if num_replicas is None or rank is None:
            c = resolve(comm)
            num_replicas = c.size if num_replicas is None else num_replicas
            rank = c.rank if rank is None else rank
        if num_replicas < 1 or not 0 <= rank < num_replicas:
            raise ConfigError(f"rank={rank} is not in 0..{num_replicas - 1}")
        self.size, self.rank = num_replicas, rank
        self.shuffle, self.seed, self.drop_last, self.even = shuffle, seed, drop_last, even
        self.epoch = 0
        if drop_last:
            self.total = (self.length // self.size) * self.size
        elif even:
            self.total = math.ceil(self.length / self.size) * self.size
        else:
            self.total = self.length

    def set_epoch(self, epoch: int) -> None:
        """Use the permutation of ``epoch`` (call at the start of every epoch).

        Parameters
        ----------
        epoch
            The epoch number, the same on every worker.
        """
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        if self.shuffle:
            g = torch.Generator()
            g.manual_seed(self.seed + self.epoch)
            order = torch.randperm(self.length, generator=g).tolist()
        else:
            order = list(range(self.length))
        if self.total > self.length:  # pad by repeating from the start (wrapping if needed)
            reps = math.ceil(self.total / max(self.length, 1))
            order = (order * reps)[: self.total]
        else:
            order = order[: self.total]
        return iter(order[self.rank::self.size])

    def __len__(self) -> int:
        return len(range(self.rank, self.total, self.size))
