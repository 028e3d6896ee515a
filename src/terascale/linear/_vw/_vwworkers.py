"""``terascale vw -n N`` in the compiled learner: N workers, each ``_vwonline``'s learner on
its shard, their tables averaged at the end of each pass; no process imports numba.

The launcher checks the command line, prints VW's preamble and starts N workers (forked
from it where it is the command's own process, :func:`.._warm.forks`, else ``python -m``
this module). Worker k of N reads its part of the input (``_io._stream.shard_places``:
a run of consecutive files where there are N files or more, else the k-th of N equal
byte ranges, cut at line ends: the numba pass's shards, the same examples in the same
order), learns from it in VW's dense table as one worker learns from a whole input
(``_vwonline._Pass``: the compiled parser and ``_vwfast.learn``), and only then joins the
job (delayed initialization, as the numba pass's workers). The combine is the numba
pass's at the end of each pass (``_recipe._online_passes``):

* the lazy L1/L2 folded into each worker's weights (``_vwfast.sync``: VW's sync_weights);
* ``_combine._average.average_weights`` over the table's three columns, every one of the
  ``2**b`` rows: under ``--average auto``/``weighted`` (VW's nonuniform average) weight
  j becomes ``sum_k w_kj * (g_kj / sum_k g_kj)`` in float64, rounded once to float32 (0
  where no worker has an adaptive sum), its adaptive sum the total ``sum_k g_kj``, its
  normalizer the largest; ``uniform``: the mean of the weights. The training weight and
  the sum of normalized ``x**2`` become their totals, the label range the widest;
* the pass's ten sums (the closing block's and the model's ``pass_totals`` row) added
  over the workers, and the distinct labels (up to 3) of every shard gathered.

``--ngram``/``--skips`` and ``--spelling``, and ``--redefine``, ``--feature_limit``,
``--hash_seed``, ``--hash all``, ``--sort_features`` and ``--affix``, are made by each
worker's compiled parser (``_vwgen.FeatureGen.from_job``), as one worker's are; where a
worker's part is a byte
range of a file, it is the input's as given, where the numba pass's workers cut their
ranges in the rewritten copy of the file (the same parts where each worker reads whole
files).

A row that no worker saw stays zero, as a feature outside the union does in the numba
pass's compact columns, so the model (rank 0 writes ``-f`` from the averaged table, its
rows in use) and the closing block are the numba pass's bits (with two workers, or
several on one host, whose allreduce adds in rank order). The progress table is rank 0's,
of its shard, as there. ``--invert_hash``: rank 0 names the averaged table's rows in use
from the input read again (``_vwtext.feature_names``, the first name of each index in
the input's order, the rules' features as ``_vwgen`` names them), as the numba
pass's launcher names its model's.

``--passes K`` (with ``-c``/``--cache_file`` or without: terascale caches the parsed text
either way, as one worker does) runs as one worker's passes do (``_vwonline.train``),
each worker over its part: pass 1 parses the text and writes the part's cache entry
(``_vwpasses.Inputs``, an entry of its own keyed by the part's byte range, as a shard's
is), the later passes read it; VW's
holdout (every 10th example of each worker's part, ``--holdout_period``,
``--holdout_off``), ``--decay_learning_rate``; after each pass the tables are averaged
and the ten sums added as above, and ``--early_terminate`` decides on the job's holdout
sums, alike on every rank (rank 0 keeps the best pass's rows in use, as one worker
does). The model's counters are the job's sums of each pass (not VW's running sums of
one worker, which the rows of one-worker runs end with), as the numba pass's.

``-i MODEL`` (VW's format): every worker starts its table and learner state from the
model, as one worker does (``_vwonline._resume``), and marks the rows its shard has; the
workers' marks are or-ed (``union_bitmap``) and, after the average, rank 0 puts the
model's rows that no worker saw back as the model has them, read again from its file
(the numba pass averages the union of the workers' features and keeps the model's
others: ``_resume.merged``), so the run is the numba pass's ``-n N -i``, bit for bit.
What the command line changes in the model (``--initial_t``,
``--min_prediction``/``--max_prediction``: ``_cli_run.vw_start``) is changed in each
worker's copy; under ``--preserve_performance_counters`` each worker's table goes on from
the model's counters but for its label sum, which the closing block and ``-f`` add once
(as the numba pass's workers, ``_front._worker``).

``--holdout_after K`` holds out every example after the input's K-th: each worker counts
its part's examples from the part's place in the input (``_io._stream.lines_before``: the
lines before it, as VW counts examples), so the examples held out are one worker's
(the numba pass refuses it with ``-n N``).

VW's starting weights that ``_vwcli`` leaves to the compiled learner (``--initial_t``,
``--initial_weight``, ``--random_weights``, ``--constant``, the label range) are written
into each worker's table as one worker writes them (``_vwonline._starting``), and rank 0
puts back the rows no worker saw as it does -i's (:class:`_Starting`).

:func:`why_not` says which ``-n N`` runs this is not: ``-i`` of terascale's format (the
other starting weights' model), ``--skip-bad``, ``--average
chain``/``--average-every``, ``-p``/``-r`` (which ``-n N`` refuses); those run the numba
pass. ``-t`` runs in one process whatever ``-n`` says (``_vwonline.test``).

Tuning: a worker's memory is one-worker ``terascale vw``'s (its table, two chunks of
text and their arrays, numpy and the compiled module), what it inherits from the
launcher it is forked from (~29 MB at ``-b 18``: numpy, the command's and the job's
modules), and the job's, which comes after the pass: the chunks' memory the allocator
kept is handed back first (``malloc_trim``, ~4 MB), so the links (no ``cryptography``
where the compiled record layer runs them: ~2 MB), the shared-memory segment (1 MiB) and
the average's buffers (:func:`averaged_rows`: 384 KiB at ``-b 18``) fit under the pass's
peak. At ``-b 18`` on 1.2M click lines that is 36-37 MB a worker and 36 MB for the
launcher, where VW takes 38 (``benchmarks/heldout_shapes.py DIR click-b18-2w``; 1-2 MB
more where Python compiles the sources at every start, ``PYTHONDONTWRITEBYTECODE``).
Workers started as programs (``TERASCALE_EXEC_WORKERS=1``) import all that afresh: 42 MB
each. With ``-i``, a byte a row of the table marks the rows seen; the launcher reads the
model's header alone and each worker its rows, a slice at a time
(``_vwmodel.VWRecords.put``), and at the end rank 0 reads those no worker saw again:
300k click lines from a 1.6 MB model at ``-b 18``, the largest process 41.5 MB (VW, one process, 39.9 MB; the numba pass's ``-n 2 -i``
130-132 MB), from a 2 MB one at ``-b 22`` 90 MB (VW 101 MB).
``--passes``: where the early stop may restore a pass, rank 0 keeps that pass's rows in
use (16 bytes a row); ``--passes 3 -c --loss_function logistic`` on those lines, 48-49 MB
a worker, measured before the hand-back (the numba pass's 117-118 MB; VW 40-41 MB). The
average reads every row of the table, ``12 * 2**b`` bytes a worker, at memory speed.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..._lazy import lazy_module
from . import dense_table

np = lazy_module("numpy", globals(), "np")

__all__ = ["main", "train", "why_not"]

# rows of the table averaged per round of collectives: a 256th of the table, from 2**14
# (384 KiB of float64 buffers: at -b 18 2**16 rows, 1.5 MiB, were 1.2 MB more of a
# worker's peak) to 2**16 (at -b 24 2**14 took 15% longer to average than 2**16, whose
# buffers are under 1% of the table there). Any size gives the same bits.
_AVERAGED = (1 << 14, 1 << 16)


def averaged_rows(rows: int) -> int:
    """Rows of a table of ``rows`` averaged per round of collectives (:data:`_AVERAGED`)."""
    return min(max(rows >> 8, _AVERAGED[0]), _AVERAGED[1])


class Joining:
    """A worker's place in the job before it joins (``rank``, ``size``: its environment's,
    ``(0, 1)`` outside a job) and the job once it has (:meth:`comm`). A compiled worker
    learns its first pass, then joins: the parsed chunks' memory that the allocator kept
    is handed back first (``malloc_trim``, ~4 MB at ``-b 18``), so that the links, the
    shared-memory segment and the average's buffers fit under the pass's peak, where a
    worker that joined first carried them under it."""

    def __init__(self) -> None:
        from ..._env import read_env

        env = read_env()
        self.rank, self.size = (env.rank, env.size) if env is not None else (0, 1)
        self._comm: Any = None

    def comm(self) -> Any:
        """The job's communicator, joined on the first call."""
        if self._comm is None:
            from ..._init import init
            from ..._malloc import hand_back_freed_memory

            hand_back_freed_memory()  # the parsed chunks the allocator kept
            self._comm = init()
        return self._comm

    def close(self) -> None:
        """Leave the job, where it was joined (once)."""
        comm, self._comm = self._comm, None
        if comm is not None:
            comm.close()


def why_not(args: argparse.Namespace) -> str:
    """Why an ``-n N`` run (N > 1) does not learn in the compiled workers (``"-n N with
    ..."``); ``""`` where it does, or where ``-n`` is 1."""
    if args.nprocs == 1 or args.testonly:  # (-t: one process, whatever -n)
        return ""
    checks = (
        (args.nprocs < 1, f"{args.nprocs} (which the numba pass refuses)"),
        (args.initial is not None and (bool(getattr(args, "starting_weights", False))
                                       or not _vw_model(args.initial)),
         "-i of terascale's model format (or starting weights)"),
        (args.average not in ("auto", "weighted", "uniform") or bool(args.average_every),
         "--average chain/--average-every"),
        (bool(args.predictions or args.raw_predictions), "-p/-r"),
        (bool(getattr(args, "skip_bad", False)), "--skip-bad"),  # (the numba parser's)
    )
    return next((f"-n N with {flag}" for off, flag in checks if off), "")


def _vw_model(path: str) -> bool:
    from ._vwmodel import is_vw_model

    return is_vw_model(path)


def train(args: argparse.Namespace) -> int:
    """Launch the ``-n N`` run :func:`why_not` admits: VW's preamble here, the workers'
    progress table (rank 0's), closing block and ``-f`` from rank 0."""
    from ...launch import LaunchOptions, launch
    from .._front import _cli_run
    from .._warm import compiled_forking
    from ._vwbatchworker import job_of
    from ._vwmodel import model_t
    from ._vwonline import _begin, _initial, run_options
    from ._vwreport import preamble

    _fast, options, paths, how = _begin(args)
    if args.initial:  # (-i's parse options, -l, --power_t, --binary and --link the run's)
        args.data, args.data_flag = paths, []  # (standard input read once)
        # (its header alone, unless --initial_t changes its rows: each worker reads them)
        model = _initial(args, options, records=_rows_changed(args))
        if model is None:  # (its -b: the numba pass)
            return int(_cli_run.train(args) or 0)
        args.link = args.link or model.info.get("link")  # (VW keeps --link: given)
        how = _cli_run._link(args, how)
        del model  # (each worker reads it: not in the forked workers' pages)
    run_options(options)  # (bad options fail here, once, rather than in every worker)
    _cli_run._check_output(args.model, "-f", stream=False)
    _cli_run._binary_link(bool(args.binary), how)
    if not args.quiet:
        print(preamble(options, paths, model=args.model, predictions=None, raw=None,
                       initial=args.initial, cache=getattr(args, "vw_cache", None),
                       initial_t=(model_t(args.initial) if args.initial else 0.0)
                       or args.initial_t or 0.0), file=sys.stderr)
    job = job_of(args, options, paths, how)
    fork = compiled_forking(lambda: main([job]))
    return launch([sys.executable, "-m", "terascale.linear._vw._vwworkers", job],
                  LaunchOptions(nprocs=args.nprocs, timeout=args.timeout,
                                prefix_output=False, cpu_bind=False, fork=fork))


def main(argv: list[str]) -> int:
    """Run one worker; a user error is one line on stderr, exit 2 (as ``_worker``)."""
    from .._front._worker import run_worker

    return run_worker(_learn, argv, prog="terascale vw")


def _learn(job: dict[str, Any]) -> None:
    """One worker: learn from its shard, join the job, combine; rank 0 writes and prints."""
    from .._combine._average import average_weights, union_bitmap
    from .._holdout import EarlyStop, holdout_period
    from .._io._stream import lines_before, shard_places
    from .._online._progress import LINK, Progress
    from .._online._state import CONTRACTION, GRAVITY, new_state
    from ._vwbatchworker import job_args
    from ._vwgen import FeatureGen
    from ._vwonline import (
        _distinct,
        _fast,
        _fixed_range,
        _Parser,
        _Pass,
        _save,
        _used_rows,
        run_options,
    )
    from ._vwpasses import Inputs
    from ._vwreport import closing_block, holdout_on

    args = job_args(job)
    options, how = job["options"], job["how"]
    joining = Joining()
    rank, size = joining.rank, joining.size
    opts, parse = run_options(options)
    LINK[:] = [how]
    binary = bool(args.binary)
    fast = _fast()
    table = dense_table(parse.bits, 3)
    state = new_state()
    # (VW's starting weights: every worker's table starts from them, and rank 0 puts
    # back the rows no worker saw, as from -i's model)
    start = bool(getattr(args, "starting_weights", False)) and not args.initial
    warm = bool(args.initial) or start
    model = _resumed(args, table, state) if args.initial else \
        _Starting(args, table, state) if start else None
    if rank != 0:  # (rank 0 alone puts back its unseen rows and writes its counters)
        model = None
    out = sys.stderr if not args.quiet and rank == 0 else None
    prog = Progress(out)
    prog.header()
    prog.restart()
    prog.due = prog.first_due() if out else 1.0
    kept = getattr(args, "vw_preserved", None) or {}
    if "examples" in kept:  # --preserve_performance_counters: each table goes on from -i's
        # (but for its label sum, which the closing block and the model add once)
        prog.go_on({**kept, "weighted_labels": 0.0})
    period = holdout_period(opts)
    prog.holdout = bool(period)
    passes = max(int(opts.passes), 1)
    places = shard_places(job["paths"], rank, size)
    # VW's --holdout_after counts the input's examples: the part's first one's index
    offset = lines_before(job["paths"], places) if opts.holdout_after else 0
    args.vw_grams = FeatureGen.from_job(job.get("grams"))  # (rank 0's --invert_hash names)
    reader = _Parser(parse, args.vw_grams)
    inputs = (Inputs([p for _, p, _ in places], parse, opts.cache_root(), reader, _parsed,
                     places) if passes > 1 or opts.cache_root() != "" else None)
    # VW stops the passes on the holdout loss: rank 0 keeps the best pass's rows in use
    stop = EarlyStop(opts.patience) if period and passes > 1 else None
    best: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
    totals: list[list[float]] = []
    marks: list[list[float]] = []
    labels: list[float] = []
    own = 0.0  # (this worker's loss over the passes so far)
    used = passes
    rate = np.float32(opts.learning_rate)  # VW's eta, times the decay after each pass
    seen = np.zeros(len(table) if warm else 0, np.bool_)
    bitmap = np.zeros(0, np.uint8)
    try:
        for p in range(passes):
            if p > 0 and opts.decay_learning_rate != 1.0:
                rate = np.float32(rate * np.float32(opts.decay_learning_rate))
            run = _Pass(fast, opts, float(rate), table, state, prog, [], how, period, False,
                        p == 0, binary, offset)
            chunks = inputs.chunks() if inputs is not None else _parsed(places, reader)
            mine = run.learn(_marked(chunks, seen) if warm and p == 0 else chunks)
            if p == 0:  # (the job joined after the first pass, as the numba pass's)
                bitmap = np.packbits(seen, bitorder="little")
                del seen
                comm = joining.comm()
                if warm:  # (the rows some worker saw: the numba pass's union)
                    union_bitmap(comm, bitmap)
                mark = np.full(3, np.nan)
                mark[:len(run.labels)] = run.labels
                labels = _distinct([], np.ravel(comm.allgather(mark)))
            if state[CONTRACTION] != 1.0 or state[GRAVITY] != 0.0:
                fast.sync(table, state)
            average_weights(comm, table[:, 0], table[:, 1], table[:, 2], state,
                            opts.averaging, averaged_rows(len(table)))
            # the pass's ten sums added over the workers (the numba pass's rows of -n N:
            # VW's running sums, a row's last two on one worker, are the rows' sums here)
            tot = [float(v) for v in comm.allreduce(np.array(mine[:10], np.float64))]
            totals.append(tot)
            own += float(mine[0])
            # where rank 0's table stopped, and the other workers' loss since its last
            # line (the numba pass's counters of an -n N model)
            marks.append(prog.mark(float(prog.since[0])
                                   + (sum(t[0] for t in totals) - own)))
            if stop is None:
                continue
            if stop.end_pass(tot[2], tot[3]):
                used = p + 1 - stop.patience
                if rank == 0:
                    assert best is not None
                    table.fill(0.0)
                    table[best[0]] = best[1]
                    state[:] = best[2]
                break
            if stop.no_win == 0 and rank == 0:  # (kept where a later stop may restore it)
                best = None
                if p + stop.patience < passes:
                    idx = _used_rows(table)
                    best = (idx, table[idx], state.copy())
    finally:
        joining.close()
    if rank != 0:
        return
    # -i's rows that no worker saw, read again from the model: the numba pass keeps the
    # model's others as they were (_resume.merged), where the average added their sums
    if model is not None:
        model.records.put(table, bitmap)
    if args.model or args.readable_model or args.invert_hash:
        _save(args, parse, table, state, options, totals, how, marks[used - 1],
              (model.info.get("vw_counters") or {}) if model is not None else {},
              used if used < len(totals) else None, job["paths"])
    if not args.quiet:
        print(closing_block({"pass_totals": totals, "labels": labels,
                             "holdout": holdout_on(options), "loss": opts.loss,
                             "vw_preserved": kept, "quantile_tau": opts.quantile_tau,
                             "best_constant": not args.dont_output_best_constant,
                             "label_range": _fixed_range(options, state)}),
              file=sys.stderr)


def _resumed(args: argparse.Namespace, table: np.ndarray, state: np.ndarray) -> Any:
    """-i's VW model, read as the launcher read it (``_vwonline._initial``, with what the
    command line changes in it), its learner state put in ``state`` and its rows in
    ``table``, a slice at a time from the file where the command line changes none of them
    (:func:`_rows_changed`), as one worker starts from it (``_vwonline._resume``)."""
    from .._front._cli_run import vw_start
    from ._vwmodel import HeldRecords, read_vw_model, run_generation

    whole = _rows_changed(args)
    model = read_vw_model(args.initial, generation=run_generation(args), plain=True,
                          records=whole)
    vw_start(model, args)
    if whole:
        model.records = HeldRecords(model)
    state[:len(model.adaptive[2])] = model.adaptive[2]
    model.records.put(table)
    return model


class _Starting:
    """VW's starting weights of a run without -i (``_vwcli`` left them to the compiled
    learner: ``_vwonline._starting``), written into a worker's ``table`` and ``state``,
    and serving the worker as -i's model does (:func:`_resumed`): ``info``'s counters,
    ``records.put`` the rows no worker saw."""

    def __init__(self, args: argparse.Namespace, table: np.ndarray, state: np.ndarray):
        from ._vwonline import _starting

        self.args, self.records = args, self
        t = args.initial_t
        self.info = {"vw_counters": {"t": t, "initial_t": t}} if t else {}
        _starting(_flat(table), state, args, len(table).bit_length() - 1)

    def put(self, table: np.ndarray, unseen: np.ndarray) -> None:
        """The starting rows of ``table`` where the bitmap ``unseen`` has no bit."""
        from .._online._state import new_state
        from ._vwonline import _starting

        fresh = np.zeros_like(table)
        _starting(_flat(fresh), new_state(), self.args, len(table).bit_length() - 1)
        off = np.unpackbits(unseen, count=len(table), bitorder="little") == 0
        table[off] = fresh[off]


def _flat(table: np.ndarray) -> memoryview:
    """A table's rows as one flat float32 buffer."""
    return memoryview(table).cast("B").cast("f")


def _rows_changed(args: argparse.Namespace) -> bool:
    """Whether the command line changes -i's rows (``--initial_t`` sets every row's
    adaptive sum: ``_cli_run.vw_start``): the model is then read whole and changed in
    memory, where otherwise its rows are read from the file a slice at a time (a label
    range changes the learner state alone)."""
    return bool(getattr(args, "vw_initial_t", None))


def _marked(chunks: Any, seen: np.ndarray) -> Any:
    """``chunks`` as they come, each one's hashed indices marked in ``seen``."""
    for b in chunks:
        seen[np.asarray(b[1])] = True
        yield b
        del b


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
