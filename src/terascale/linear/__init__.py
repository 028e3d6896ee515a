"""Terascale linear learning (Agarwal, Chapelle, Dudík & Langford, JMLR 2014), VW-style.

Data in Vowpal Wabbit's text format, libsvm/svmlight or CSV is hashed exactly as VW hashes it
(MurmurHash3 x86_32, ``-b`` bits, ``-q`` crosses), cached per worker before the job is
joined, learned with online passes of adaptive, normalized, importance-invariant SGD,
averaged over workers by allreduce, and refined with L-BFGS or preconditioned CG whose
gradients are summed by allreduce. The API works in any job (``terascale run``, Spark, Ray)::

    import terascale.linear as tl

    ds = tl.parse_lines(["1 |a x y:2", "-1 |a z"], format="vw", bits=18)  # -> Dataset
    model = tl.train(ds, passes=1, bfgs=20)            # comm defaults to terascale.init()
    model = tl.train(["part-0.vw", "part-1.vw"], comm=comm, bits=24, quadratic=["ab"])
    p = model.predict(ds)                              # probabilities (logistic loss)
    model.evaluate(ds)                                 # logloss, accuracy, auc, auprc
    model.save("m.model"); tl.LinearModel.load("m.model")

    clf = tl.LinearClassifier(bits=20, passes=2).fit(X, y)   # scikit-learn estimator

    ds = tl.load_shard(["day-1.vw", "day-2.vw"], bits=24)   # this worker's shard, cached
    train_path, test_path = tl.write_flights("flights/")    # NYC flights 2013 as VW text
    model = tl.train(ds, initial=tl.LinearModel.load("m.model"))  # warm start (VW's -i)

With files, ``train`` reads this worker's shard of them (whole files when there are at
least as many files as workers, else the k-th of N byte ranges of the files one after
the other), streams it into the on-disk cache and joins the job only after parsing
(delayed initialization). Every learner reads data as :class:`Blocks` (bounded blocks of
examples: the cache, streamed text, or an in-memory Dataset), so memory stays flat however
large the shard. Options are
those of :class:`TrainOptions`.
"""

import typing as _typing

from .._lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    from ._combine._span import SpanServer
    from ._front._sklearn import LinearClassifier, LinearRegressor
    from ._io._blocks import Block, Blocks, ChainBlocks, DatasetBlocks
    from ._io._dataset import Dataset, ParseOptions
    from ._io._flights import write_flights
    from ._io._hashing import CONSTANT_HASH, hash_feature, hash_space, murmur3_32
    from ._io._readers import parse_lines, read_file
    from ._io._shard import load_shard
    from ._io._stream import TextBlocks
    from ._losses import LOSS_TABLE, Loss
    from ._metrics import auc, auprc, evaluate_scores
    from ._model import LinearModel
    from ._train import TrainOptions, train

# Each public name and the module that defines it, imported on first use (PEP 562): the
# ``terascale vw`` command imports only the modules its run uses (not the estimators, the
# span server or the flights data), a tenth of a second of a small run's start.
_LAZY = {
    **dict.fromkeys(["SpanServer"], "._combine._span"),
    **dict.fromkeys(["LinearClassifier", "LinearRegressor"], "._front._sklearn"),
    **dict.fromkeys(["Block", "Blocks", "ChainBlocks", "DatasetBlocks"], "._io._blocks"),
    **dict.fromkeys(["Dataset", "ParseOptions"], "._io._dataset"),
    **dict.fromkeys(["write_flights"], "._io._flights"),
    **dict.fromkeys(["CONSTANT_HASH", "hash_feature", "hash_space", "murmur3_32"],
                    "._io._hashing"),
    **dict.fromkeys(["parse_lines", "read_file"], "._io._readers"),
    **dict.fromkeys(["load_shard"], "._io._shard"),
    **dict.fromkeys(["TextBlocks"], "._io._stream"),
    **dict.fromkeys(["LOSS_TABLE", "Loss"], "._losses"),
    **dict.fromkeys(["auc", "auprc", "evaluate_scores"], "._metrics"),
    **dict.fromkeys(["LinearModel"], "._model"),
    **dict.fromkeys(["TrainOptions", "train"], "._train"),
}


__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())


__all__ = [
    "Block",
    "Blocks",
    "CONSTANT_HASH",
    "ChainBlocks",
    "Dataset",
    "DatasetBlocks",
    "LOSS_TABLE",
    "LinearClassifier",
    "LinearModel",
    "LinearRegressor",
    "Loss",
    "ParseOptions",
    "SpanServer",
    "TextBlocks",
    "TrainOptions",
    "auc",
    "auprc",
    "evaluate_scores",
    "hash_feature",
    "hash_space",
    "load_shard",
    "murmur3_32",
    "parse_lines",
    "read_file",
    "train",
    "write_flights",
]
