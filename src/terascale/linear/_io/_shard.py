"""``load_shard``: this worker's part of the input files, parsed and cached before it joins.

Delayed initialization (Agarwal, Chapelle, Dudík & Langford, JMLR 2014, sec. 3): a worker
reads and caches its shard *before* the allreduce is initialized, because most failures
happen while reading and a restarted worker then finds its cache and joins at once. With at
least as many files as workers, worker k of n takes the k-th of n runs of consecutive
files; with fewer, the k-th of n equal byte ranges of the files one after the other (cut
at line ends, at record ends for CSV): the workers' shards in rank order are the input in
its order, each of equal size (``_readers.shard_files``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..._errors import ConfigError
from ._blocks import Blocks, ChainBlocks
from ._dataset import ParseOptions

__all__ = ["job_rank", "load_shard", "shard_blocks"]


def job_rank() -> tuple[int, int]:
    """(rank, size) of this process from its launcher's environment, without joining."""
    from ..._env import read_env

    env = read_env()
    return (0, 1) if env is None else (env.rank, env.size)


def load_shard(paths: Sequence[str] | str, *, rank: int | None = None,
               size: int | None = None, cache_dir: str | None = None,
               **parse: Any) -> Blocks:
    """Worker ``rank`` of ``size``'s shard of ``paths`` as :class:`Blocks` (read block by
    block: a shard larger than memory is fine; ``.dataset()`` loads a small one whole).

    The first call streams the text into the cache, later calls (the next run, a restarted
    worker) find it and read nothing until a pass. ::

        ds = tl.load_shard(["day-1.vw", "day-2.vw"], bits=24)   # before terascale.init()
        with terascale.init() as comm:
            model = tl.train(ds, comm=comm, bfgs=20)

    ``train(paths)`` itself does not wait for the cache: its first online pass learns from
    the text as it is parsed while the cache is written (see :func:`shard_blocks`).

    Parameters
    ----------
    paths
        The job's input files (one path or several); each worker reads its share.
    rank
        This worker's place (default None: this process's place in the job its launcher
        started, read from the environment without joining; a plain process is rank 0 of 1
        and gets everything).
    size
        The number of workers (default None: from the environment, as ``rank``).
    cache_dir
        The cache's directory (default None: ``TMPDIR/terascale-cache``; ``""`` streams the
        text on every pass).
    **parse
        The fields of :class:`ParseOptions` (``format``, ``bits``, ``quadratic``,
        ``label``, ...).
    """
    return shard_blocks(paths, rank=rank, size=size, cache_dir=cache_dir, lazy=False,
                        **parse)


def shard_blocks(paths: Sequence[str] | str, *, rank: int | None, size: int | None,
                 cache_dir: str | None, lazy: bool, **parse: Any) -> Blocks:
    """:func:`load_shard`; with ``lazy`` a shard not cached yet comes as
    :class:`._cache.PendingCache` parts, whose first pass parses and writes the cache."""
    from ._cache import load_cached
    from ._readers import shard_files

    paths = [paths] if isinstance(paths, str) else list(paths)
    if (rank is None) != (size is None):
        raise ConfigError("load_shard: give both rank= and size=, or neither")
    if rank is None or size is None:
        rank, size = job_rank()
    if isinstance(rank, bool) or isinstance(size, bool) or not (0 <= rank < size):
        raise ConfigError(f"load_shard: rank={rank!r}, size={size!r} is not a rank of a job")
    try:
        popts = ParseOptions(**parse)
    except TypeError:
        names = ", ".join(f.name for f in ParseOptions.__dataclass_fields__.values())
        bad = sorted(set(parse) - set(ParseOptions.__dataclass_fields__))
        raise ConfigError(f"load_shard: unknown parse option(s) {', '.join(bad)} (they are "
                          f"{names})") from None
    parts = [load_cached(p, popts, shard=sh, cache_dir=cache_dir, lazy=lazy)[0]
             for p, sh in shard_files(paths, rank, size)]
    if not parts:  # more workers than files can happen only with zero files
        raise ConfigError("no input files for this worker")
    return parts[0] if len(parts) == 1 else ChainBlocks(parts)
