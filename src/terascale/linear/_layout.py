"""The order of the compact space's columns: frequent features first, next to each other.

The online learner reads and writes three arrays at each example's columns. Numbered in
hashed-index order (the sorted union), the few thousand features that nearly every
example has are scattered over the whole space (click data at 3M examples: 303k columns,
4.8 MB of learner state), and every example misses the cache on them. The first pass over
text numbers its local columns in order of first appearance, which puts them together at
the front, and its learner runs markedly faster per example than the same learner over
the sorted union.

So the passes over the union number the features of the shard's first block first, in
order of first appearance (every rank's, in rank order: the same on every rank), then the
rest in hashed-index order. The order changes no result: each weight's update reads only
its own state and the learner's, so the numbering of the columns does not change a bit;
the arrays are permuted into the column order before the passes and back after them.
Where the batch phase follows (its normalization and bias are kept by union position) the
columns stay in union order.
"""

from __future__ import annotations

import numpy as np

from ..communicator import Communicator
from ._io._blocks import Blocks, ChainBlocks
from ._io._cache import CacheBlocks
from ._io._setops import first_appearances

__all__ = ["HOT_PREFIX", "column_order", "first_block_features"]

HOT_PREFIX = 1 << 16  # at most this many features of a first pass's order go first


def first_block_features(blocks: Blocks) -> np.ndarray:
    """The distinct features of a cached shard's first block in order of first appearance
    (reading it costs one block); empty for other shards (text would start a parse)."""
    parts = list(blocks.parts) if isinstance(blocks, ChainBlocks) else [blocks]
    if not parts or not isinstance(parts[0], CacheBlocks):
        return np.zeros(0, np.uint32)
    for b in parts[0]:
        return first_appearances(np.asarray(b.indices, np.uint32))
    return np.zeros(0, np.uint32)


def column_order(union: np.ndarray, want: bool, hot: np.ndarray,
                 comm: Communicator) -> np.ndarray | None:
    """``perm`` (a collective where ``comm.size > 1``): column c holds the union's feature
    ``perm[c]``; every rank's ``hot`` features (in rank order, each once) first, then the
    others in union order. None (the union's own order) unless every rank asks (``want``):
    the workers' arrays are averaged element by element, so all or none are permuted."""
    parts = comm.allgather_object((want, hot)) if comm.size > 1 else [(want, hot)]
    if not all(w for w, _ in parts):
        return None
    hot = np.concatenate([h for _, h in parts])
    if not len(hot):
        return None
    hot = first_appearances(hot)
    at = np.searchsorted(union, hot)
    ok = at < len(union)
    at = at[ok][union[at[ok]] == hot[ok]]  # (every hot feature is in the union)
    rest = np.ones(len(union), np.bool_)
    rest[at] = False
    return np.concatenate([at, np.flatnonzero(rest)]).astype(np.int64)
