"""``terascale vw -n N`` in the compiled learner: N workers, each ``_vwonline``'s learner on
its shard, their tables averaged at the end of the pass; no process imports numba.

The launcher checks the command line, prints VW's preamble and starts N workers (forked
from it where it is the command's own process, :func:`.._warm.forks`, else ``python -m``
this module). Worker k of N reads its part of the input (``_io._stream.shard_places``:
a run of consecutive files where there are N files or more, else the k-th of N equal
byte ranges, cut at line ends: the numba pass's shards, the same examples in the same
order), learns from it in VW's dense table as one worker learns from a whole input
(``_vwonline._Pass``: the compiled parser and ``_vwfast.learn``), and only then joins the
job (delayed initialization, as the numba pass's workers). The combine is the numba
pass's at the end of its one pass (``_recipe._online_passes``):

* the lazy L1/L2 folded into each worker's weights (``_vwfast.sync``: VW's sync_weights);
* ``_combine._average.average_weights`` over the table's three columns, every one of the
  ``2**b`` rows: under ``--average auto``/``weighted`` (VW's nonuniform average) weight
  j becomes ``sum_k w_kj * (g_kj / sum_k g_kj)`` in float64, rounded once to float32 (0
  where no worker has an adaptive sum), its adaptive sum the total ``sum_k g_kj``, its
  normalizer the largest; ``uniform``: the mean of the weights. The training weight and
  the sum of normalized ``x**2`` become their totals, the label range the widest;
* the pass's ten sums (the closing block's and the model's ``pass_totals`` row) added
  over the workers, and the distinct labels (up to 3) of every shard gathered.

A row that no worker saw stays zero, as a feature outside the union does in the numba
pass's compact columns, so the model (rank 0 writes ``-f`` from the averaged table, its
rows in use) and the closing block are the numba pass's bits (with two workers, or
several on one host, whose allreduce adds in rank order). The progress table is rank 0's,
of its shard, as there.

:func:`why_not` says which ``-n N`` runs this is not: ``--passes`` over one, ``-c``/
``--cache_file``, ``-i`` (and the starting weights), ``--oaa``, ``--ngram``/``--skips``,
``--average chain``/``--average-every``, ``-p``/``-r`` (which ``-n N`` refuses); those run
the numba pass. ``-t`` runs in one process whatever ``-n`` says (``_vwonline.test``).

Tuning: a worker's memory is one-worker ``terascale vw``'s (its table, two chunks of
text and their arrays, numpy and the compiled module), what it inherits from the
launcher it is forked from (~29 MB at ``-b 18``: numpy, the command's and the job's
modules), and the job's, which comes after the pass: the chunks' memory the allocator
kept is handed back first (``malloc_trim``, ~4 MB), so the links (no ``cryptography``
where the compiled record layer runs them: ~2 MB), the shared-memory segment (1 MiB) and
the average's buffers (``_AVERAGED``: 384 KiB at ``-b 18``) fit under the pass's peak. At
``-b 18`` on 1.2M click lines that is 36-37 MB a worker and 36 MB for the launcher, where
VW takes 38 (``benchmarks/heldout_shapes.py DIR click-b18-2w``; 1-2 MB more where Python
compiles the sources at every start, ``PYTHONDONTWRITEBYTECODE``). Workers started as
programs (``TERASCALE_EXEC_WORKERS=1``) import all that afresh: 42 MB each. The average
reads every row of the table, ``12 * 2**b`` bytes a worker, at memory speed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

__all__ = ["main", "train", "why_not"]

# rows of the table averaged per round of collectives: a 256th of the table, from 2**14
# (384 KiB of float64 buffers: at -b 18 2**16 rows, 1.5 MiB, were 1.2 MB more of a
# worker's peak) to 2**16 (at -b 24 2**14 took 15% longer to average than 2**16, whose
# buffers are under 1% of the table there). Any size gives the same bits.
_AVERAGED = (1 << 14, 1 << 16)


def why_not(args: argparse.Namespace) -> str:
    """Why an ``-n N`` run (N > 1) does not learn in the compiled workers (``"-n N with
    ..."``); ``""`` where it does, or where ``-n`` is 1."""
    if args.nprocs == 1 or args.testonly:  # (-t: one process, whatever -n)
        return ""
    checks = (
        (args.nprocs < 1, f"{args.nprocs} (which the numba pass refuses)"),
        (args.oaa is not None, "--oaa"),
        (args.initial is not None, "-i (or starting weights)"),
        (args.passes not in (None, 1), "--passes"),
        (bool(args.cache or args.cache_file), "-c/--cache_file"),
        (bool(args.holdout_after), "--holdout_after"),
        (bool(args.ngram or args.skips), "--ngram/--skips"),
        (args.average not in ("auto", "weighted", "uniform") or bool(args.average_every),
         "--average chain/--average-every"),
        (bool(args.predictions or args.raw_predictions), "-p/-r"),
        (bool(args.invert_hash), "--invert_hash"),  # (the names of every worker's shard)
    )
    return next((f"-n N with {flag}" for off, flag in checks if off), "")


def train(args: argparse.Namespace) -> int:
    """Launch the ``-n N`` run :func:`why_not` admits: VW's preamble here, the workers'
    progress table (rank 0's), closing block and ``-f`` from rank 0."""
    from ..._init import load_joining
    from ...launch import LaunchOptions, launch
    from .._front import _cli_run
    from .._holdout import holdout_period
    from .._options import TrainOptions
    from .._warm import forks
    from ._vwbatchworker import job_of
    from ._vwonline import _begin
    from ._vwreport import preamble

    _fast, options, paths, how = _begin(args)
    opts = TrainOptions(**{k: tuple(v) if isinstance(v, list) else v
                           for k, v in options.items()})
    if holdout_period(opts):  # (--holdout_period with one pass: the numba pass's count)
        args.data, args.data_flag = paths, []  # (standard input read once)
        return int(_cli_run.train(args) or 0)
    _cli_run._check_output(args.model, "-f", stream=False)
    _cli_run._binary_link(bool(args.binary), how)
    if not args.quiet:
        print(preamble(options, paths, model=args.model, predictions=None, raw=None,
                       initial=None, cache=getattr(args, "vw_cache", None),
                       initial_t=args.initial_t or 0.0), file=sys.stderr)
    job = job_of(args, options, paths, how)
    fork = None
    if forks():  # (the joining's modules loaded once, here, for every worker)
        load_joining()
        fork = lambda: main([job])  # noqa: E731
    return launch([sys.executable, "-m", "terascale.linear._vw._vwworkers", job],
                  LaunchOptions(nprocs=args.nprocs, timeout=args.timeout,
                                prefix_output=False, cpu_bind=False, fork=fork))


def main(argv: list[str]) -> int:
    """Run one worker; a user error is one line on stderr, exit 2 (as ``_worker``)."""
    from .._front._worker import run_worker

    return run_worker(_learn, argv)


def _learn(job: dict[str, Any]) -> None:
    """One worker: learn from its shard, join the job, combine; rank 0 writes and prints."""
    from ..._env import read_env
    from ..._init import init
    from ..._malloc import hand_back_freed_memory
    from .._combine._average import average_weights
    from .._io._dataset import ParseOptions
    from .._io._stream import shard_places
    from .._online._progress import LINK, Progress
    from .._online._state import CONTRACTION, GRAVITY, new_state
    from .._options import TrainOptions
    from ._vwgen import INPUTS, SOURCES
    from ._vwonline import _distinct, _fast, _fixed_range, _Parser, _Pass, _save
    from ._vwreport import closing_block, holdout_on

    SOURCES.update({k: tuple(v) for k, v in job["sources"].items()})
    INPUTS.update(job["inputs"])
    args = argparse.Namespace(**job["args"])
    options, how = job["options"], job["how"]
    env = read_env()
    rank, size = (env.rank, env.size) if env is not None else (0, 1)
    opts = TrainOptions(**{k: tuple(v) if isinstance(v, list) else v
                           for k, v in options.items()})
    parse = ParseOptions(**{k: tuple(v) if isinstance(v, list) else v
                            for k, v in options.items() if k in ParseOptions().to_dict()},
                         lenient_labels=opts.lenient_labels)
    LINK[:] = [how]
    binary = bool(args.binary)
    fast = _fast()
    table = np.zeros((1 << parse.bits, 3), np.float32)  # (calloc: pages on first touch)
    state = new_state()
    out = sys.stderr if not args.quiet and rank == 0 else None
    prog = Progress(out)
    prog.header()
    prog.restart()
    prog.due = prog.first_due() if out else 1.0
    run = _Pass(fast, opts, float(np.float32(opts.learning_rate)), table, state, prog, [],
                how, 0, False, True, binary)
    mine = run.learn(_parsed(shard_places(job["paths"], rank, size), _Parser(parse)))
    hand_back_freed_memory()  # the parsed chunks the allocator kept, before the job's own
    comm = init()
    try:
        if state[CONTRACTION] != 1.0 or state[GRAVITY] != 0.0:
            fast.sync(table, state)
        rows = min(max(len(table) >> 8, _AVERAGED[0]), _AVERAGED[1])
        average_weights(comm, table[:, 0], table[:, 1], table[:, 2], state, opts.averaging,
                        rows)
        totals = [float(v) for v in comm.allreduce(np.array(mine, np.float64))]
        seen = np.full(3, np.nan)
        seen[:len(run.labels)] = run.labels
        labels = _distinct([], np.ravel(comm.allgather(seen)))
    finally:
        comm.close()
    if rank != 0:
        return
    # where rank 0's table stopped, and the other workers' loss since its last line (the
    # numba pass's counters of an -n N model)
    since = float(prog.since[0]) + (totals[0] - float(mine[0]))
    if args.model or args.readable_model:
        _save(args, parse, table, state, options, [totals], how, prog.mark(since), {})
    if not args.quiet:
        print(closing_block({"pass_totals": [totals], "labels": labels,
                             "holdout": holdout_on(options), "loss": opts.loss,
                             "vw_preserved": {}, "quantile_tau": opts.quantile_tau,
                             "best_constant": not args.dont_output_best_constant,
                             "label_range": _fixed_range(options, state)}),
              file=sys.stderr)


def _parsed(places: list[tuple[int, str, tuple[int, ...]]], reader: Any) -> Any:
    """Each chunk of the worker's parts of the input, parsed, as ``_vwonline._parsed``
    parses a whole input: the next chunk in another thread while the caller learns from
    this one, the chunks sized by ``_vwonline._chunk_bytes``."""
    from .._io._stream import record_chunks
    from ._vwonline import _FIRST, _overlapped

    size = [_FIRST]
    return _overlapped(((text, path, line) for _, path, sh in places
                        for text, line in record_chunks(path, sh, size)), reader, size)


if __name__ == "__main__":
    from .._warm import as_command

    as_command()
    sys.exit(main(sys.argv[1:]))
