"""Data in and out of the learner: VW/libsvm/CSV readers, VW's hashing and interactions,
the in-memory :class:`Dataset`, bounded :class:`Blocks`, streamed text, the on-disk cache,
a worker's shard and the batch phase's spill."""
