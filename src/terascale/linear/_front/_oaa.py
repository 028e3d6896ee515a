"""One-against-all multiclass (VW's ``--oaa K``): K binary learners, one per class.

VW's ``oaa`` reduction learns, for each example of class c, K binary examples: label +1
for class c's learner and -1 for the others. Each learner has its own weights (VW
interleaves them in one array, so they never collide) and its own learner state (VW
keeps the normalized update's sums per interleaved model). Training parses the data once
a pass and learns each block of examples with the K learners (:mod:`._oaapass`, with the
online learner terascale shares with VW bit for bit); ``-n N`` runs that pass in every
worker (:mod:`._oaaworker`) and averages each class's learner after each pass; ``-t``
runs the same pass with nothing learned. The prediction is the class whose
learner scores highest (the first on a tie, as VW), and with ``--probabilities`` each
learner's logistic probability, normalized to sum 1 (VW's output: ``1:0.25 2:0.25 ...``);
``-r`` writes every learner's score. With ``--link`` (not ``--probabilities``, which VW
runs with identity) each learner learns from its linked score, as VW's scorer hands
the linked score to oaa's update.

The reported ``average loss`` is VW's multiclass 0/1 loss of the progressive predictions
(with passes and holdout: the best pass's holdout error, marked ``h``).
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import math
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ..._errors import ConfigError, DataError
from .._losstable import loss_spec
from .._online._state import SUM_NORM_X, TOTAL_WEIGHT

__all__ = ["run_oaa", "split_oaa", "train_oaa"]


def _open_text(path: str) -> Any:
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8", errors="surrogateescape")
    return open(path, encoding="utf-8", errors="surrogateescape")


def _label(line: str, where: str, names: dict[str, int] | None = None, say: bool = True
           ) -> tuple[float, str, str, str]:
    """(class label or nan, the label's text, the rest of the line, the tag) of one VW
    line (``names``: --named_labels, each name's class 1..K)."""
    tokens, tag = _head_words(line)
    if not tokens:
        return math.nan, "", line, tag
    if names is not None and tokens[0] not in names:
        # VW's named-label dictionary reads a name it lacks as class 0 (which makes the
        # classes 0-indexed, as a label 0 does), and warns
        if say:  # (on standard output, as VW's, unless --quiet)
            print(f"[warning] Missing named label '{tokens[0]}'")
        start = line.index(tokens[0])
        return 0.0, tokens[0], line[start + len(tokens[0]):], tag
    try:
        y = float(names[tokens[0]] if names is not None else tokens[0])
    except ValueError:
        raise DataError(f"{where}: multiclass label {tokens[0]!r} is not a class number "
                        f"1..K (--oaa)") from None
    start = line.index(tokens[0])
    return y, tokens[0], line[start + len(tokens[0]):], tag


_FLUSH = 4096  # lines gathered before they are written (--named_labels' numbered copy)


def _head_words(line: str) -> tuple[list[str], str]:
    """(the label section's words before the tag, the tag) of one VW line, as VW reads
    them: the section runs to the first ``|`` (or the line's end), and its last word is
    the tag when it starts with ``'`` (without it) or touches the section's end (``2|a x``
    and a line ``2`` are unlabelled examples tagged ``2``)."""
    bar = line.find("|")
    head = line.rstrip("\r\n") if bar < 0 else line[:bar]
    tokens = head.split()
    if tokens and (tokens[-1].startswith("'") or not head[-1].isspace()):
        tag = tokens.pop()
        return tokens, tag[1:] if tag.startswith("'") else tag
    return tokens, ""


def _names(args: argparse.Namespace, k_classes: int) -> list[str] | None:
    """--named_labels A,B,...: the K class names (None without it)."""
    spec = getattr(args, "named_labels", None)
    if spec is None:
        return None
    names = spec.split(",")
    if len(names) != k_classes or len(set(names)) != k_classes or not all(names):
        raise ConfigError(f"--named_labels {spec}: {k_classes} distinct names for --oaa "
                          f"{k_classes}, separated by commas")
    return names


def _class(v: float, names: list[str] | None) -> str:
    """A predicted class as VW writes it: its number, or its name (nothing for class 0,
    which has none)."""
    if names is None:
        return str(int(v))
    return names[int(v) - 1] if 1 <= int(v) <= len(names) else ""


def _probabilities(scores: np.ndarray) -> np.ndarray:
    """VW's --probabilities in float: each class's logistic (C's expf), the row's sum taken
    class by class, then each times the sum's reciprocal (not divided by it)."""
    from .._vw._vwout import link

    p = link(scores.astype(np.float32).ravel(), "logistic", False).astype(np.float32)
    p = p.reshape(scores.shape)
    total = np.zeros(len(p), np.float32)
    for c in range(p.shape[1]):
        total += p[:, c]
    return p * (np.float32(1.0) / total)[:, None]


def _format(row: np.ndarray, base: int, names: list[str] | None = None) -> str:
    """VW's ``-p`` line of ``--probabilities``: each class (its name with
    ``--named_labels``: class 0 has none) and its probability."""
    if names is not None:
        return " ".join(f"{_class(c + base, names)}:{float(v):.6g}"
                        for c, v in enumerate(row))
    return " ".join(f"{c + base}:{float(v):.6g}" for c, v in enumerate(row))


def train_oaa(args: argparse.Namespace, paths: list[str], options: dict[str, Any],
              opening: Any = None, one: Any = None, make: Any = None) -> int:
    """``--oaa K``: K learners; on one worker VW's progressive multiclass predictions
    (``-p``) and its closing block, on ``-n N`` workers the averaged learners (``-f``).
    ``one``: the one-worker run of a job (``_train_one``'s ``run``: the compiled one,
    :mod:`.._vw._vwoaafast`), numba's pass without it; ``make``: what -i's learners are
    made as (:func:`split_oaa`)."""
    k_classes = int(args.oaa)
    if k_classes < 2:
        raise ConfigError(f"--oaa {k_classes}: needs at least 2 classes")
    if args.probabilities and getattr(args, "scores", False):
        args.scores = False  # (VW: --probabilities rules)
    if args.nprocs != 1 and (args.predictions or args.probabilities
                             or getattr(args, "scores", False)):
        raise ConfigError("--oaa with -n N: -p/--probabilities/--scores need -n 1 "
                          "(progressive predictions come from one learner in input "
                          "order); train with -n N and -f, then predict with -i MODEL -t")
    names = _names(args, k_classes)
    start = _initial(args, k_classes, make) if args.initial else None
    if start is None and getattr(args, "vw_oaa_range", None):
        start = ranged_start(args.vw_oaa_range, k_classes, options, make,
                             getattr(args, "vw_oaa_initial_t", None))
    if start is not None and getattr(args, "indexing", None) is None:
        args.indexing = start[0].info.get("indexing")  # (VW keeps --indexing)
    if start is not None and not args.link:
        args.link = start[0].info.get("link")  # (and --link)
    if start is not None and start[0].info.get("binary"):
        args.binary = True  # (and --binary)
    if args.link:
        from ._cli_run import _link

        _link(args, "identity")  # (VW's links only)
    if start is not None:  # VW's model sets -b (and the loss, unless given)
        options = dict(options, bits=start[0].parse.bits + (k_classes - 1).bit_length(),
                       loss=args.loss or start[0].loss)
        for k, v in start[0].info["vw_rates"].items():  # (and -l, --power_t it kept)
            if not getattr(args, f"{k}_given", True):
                options[k] = v
                args._model_rates = {**getattr(args, "_model_rates", {}), k: v}
    if args.model and getattr(args, "model_format", None) == "terascale":
        raise ConfigError("--oaa -f writes VW's one-against-all model only "
                          "(--model-format vw)")
    if (args.probabilities and loss_spec(options["loss"]).link != "logistic"
            and not args.quiet):
        # (VW's --probabilities takes each score's logistic whatever the loss, and warns)
        print(f"[warning] --probabilities should be used only with --loss_function="
              f"logistic, currently using: {options['loss']}")
    if opening is not None:  # the preamble, once the options are known to be good
        opening()
    shift = (k_classes - 1).bit_length()
    if options["bits"] - shift < 1:
        raise ConfigError(f"--oaa {k_classes} -b {options['bits']}: VW gives each "
                          f"class 2**(b - {shift}) weights; use -b {shift + 1} or more")
    if args.nprocs == 1 or args.testonly:  # (-t: one process, whatever -n)
        return _train_one(args, paths, dict(options, bits=options["bits"] - shift),
                          k_classes, names, start, one)
    return _launch(args, paths, dict(options, bits=options["bits"] - shift), k_classes,
                   names, compiled=one is not None)


def _launch(args: argparse.Namespace, paths: list[str], options: dict[str, Any],
            k_classes: int, names: list[str] | None, compiled: bool = False) -> int:
    """``--oaa K -n N``: N workers (:mod:`._oaaworker`), each learning the K learners on
    its shard in one pass over it, each class's learner averaged across the workers
    after every pass as the binary learner's is (``--average``: weighted by default);
    ``-f`` then writes VW's one-against-all model of the K averaged learners. Each worker
    numbers the classes from its own shard's labels (1..K until a label 0), as each
    node of VW's cluster mode does."""
    from ...launch import LaunchOptions, launch
    from .._warm import forking, warm_kernels

    tmp = tempfile.mkdtemp(prefix="terascale-oaa-")
    try:
        data = paths if names is None else _numbered(paths, k_classes, names, tmp,
                                                          not args.quiet)
        job = json.dumps({"data": data, "paths": paths, "options": options, "k": k_classes,
                          "names": names, "model": args.model, "quiet": bool(args.quiet),
                          "readable": args.readable_model, "invert": args.invert_hash,
                          "probabilities": False, "initial": args.initial,
                          "starting_weights": bool(getattr(args, "starting_weights", False)),
                          "range": getattr(args, "vw_oaa_range", None),
                          "initial_t": getattr(args, "vw_oaa_initial_t", None),
                          "rates": _rates(args), "indexing": getattr(args, "indexing", None),
                          "link": _scorer(args), "model_link": _kept_link(args),
                          "predict_only": bool(getattr(args, "predict_only_model", False)),
                          "malformed": None if names is not None
                          else _first_malformed(data, paths),
                          **_vw_run(args)})
        if compiled:  # (the compiled learner's workers, _vwoaafast: no numba)
            from .._warm import compiled_forking

            fork = compiled_forking(lambda: _oaa_worker(job, compiled=True))
            module = "terascale.linear._vw._vwoaafast"
        else:
            # forked from here once the learner is loaded (_warm.forking), or programs
            fork = forking(lambda: _oaa_worker(job), options)
            warm_kernels()  # compile once here rather than N times at once in the workers
            module = "terascale.linear._front._oaaworker"
        return launch([sys.executable, "-m", module, job],
                      LaunchOptions(nprocs=args.nprocs, timeout=args.timeout,
                                    prefix_output=False, fork=fork))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _oaa_worker(job: str, compiled: bool = False) -> int:
    """A ``--oaa K -n N`` worker forked from the launcher: its module's ``main``
    (``compiled``: the compiled learner's, ``_vw._vwoaafast``)."""
    if compiled:
        from .._vw._vwoaafast import main as compiled_main

        return compiled_main([job])
    from ._oaaworker import main

    return main([job])


def start_learners(arrays: np.ndarray, states: np.ndarray, start: list[Any] | None) -> None:
    """Fill the K learners' ``arrays`` (``(K, 2**bits, 3)``: each feature's weight,
    adaptive sum and normalizer, a view of any layout) and ``states`` from ``start`` (-i's
    learners, :func:`split_oaa`'s; None: they stay zeros), and round the shared label
    range to VW's two floats (``--min_prediction 0.6`` clips to 0.6f)."""
    from .._online._state import MAX_LABEL, MIN_LABEL

    for c, m in enumerate(start or []):
        idx = np.asarray(m.indices, np.int64)
        arrays[c, idx, 0] = m.weights
        if m.adaptive is not None:
            g2, nrm, state = m.adaptive
            arrays[c, idx, 1] = g2
            arrays[c, idx, 2] = nrm
            states[c, :len(state)] = state
    bounds = states[:, MIN_LABEL:MAX_LABEL + 1]
    bounds[:] = bounds.astype(np.float32)


def start_t(start: list[Any] | None) -> float:
    """-i's ``t`` (its learners' VW counters; 0 without -i), which VW's t goes on from."""
    kept = (start[0].info.get("vw_counters") or {}) if start else {}
    return float(kept.get("t") or 0.0)


def learners_options(job: dict[str, Any]) -> dict[str, Any]:
    """An ``-n N`` job's (:func:`_launch`'s) training options with VW's ``-b``, where the
    job's ``bits`` are each learner's (b - log2 K)."""
    options = job["options"]
    return dict(options, bits=options["bits"] + (int(job["k"]) - 1).bit_length())


def ranged_start(bounds: list[float | None], k_classes: int, options: dict[str, Any],
                  make: Any = None, initial_t: float | None = None) -> list[Any]:
    """The K learners of a run of ``--min_prediction``/``--max_prediction`` and
    ``--initial_t`` alone (the bounds as VW's floats, None: not given, 0 as VW's empty
    range): the range in their state (``options``: the run's, its ``bits`` VW's ``-b``;
    ``make``: as :func:`split_oaa`'s), as :func:`split_oaa` splits VW's starting weights
    (each worker's of ``-n N``: the job's ``range`` and ``initial_t``). No weights, or with
    ``initial_t`` VW's ``initial_t`` fake examples of norm and gradient 1: every weight's
    adaptive sum ``initial_t``, and the first class's total weight and norm sum (VW keeps
    one learner's, ``split_oaa``), and the counters VW's model keeps."""

    from .._online._state import MAX_LABEL, MIN_LABEL, SUM_NORM_X, TOTAL_WEIGHT, new_state
    from .._vw._vwonline import run_options

    if make is None:
        from .._model import LinearModel as make

    parse = run_options(options)[1]
    if initial_t and parse.bits > 24:  # (_vwcli._starting_weights' limit)
        raise ConfigError(f"--initial_t sets all 2^b weights: up to -b 24, not -b "
                          f"{parse.bits}")
    parse = dataclasses.replace(parse, bits=parse.bits - (k_classes - 1).bit_length())
    state = new_state()
    for at, v in zip((MIN_LABEL, MAX_LABEL), bounds):
        if v is not None:
            state[at] = v
    size = 1 << parse.bits if initial_t else 0
    zeros = np.zeros(size, np.float32)
    g2 = np.full(size, initial_t or 0.0, np.float32)
    counters = {"t": initial_t, "initial_t": initial_t} if initial_t else {}
    out = []
    for c in range(k_classes):
        own = state.copy()
        if initial_t and not c:
            own[TOTAL_WEIGHT] = own[SUM_NORM_X] = initial_t
        out.append(make(indices=np.arange(size, dtype=np.uint32), weights=zeros, parse=parse,
                        loss=options["loss"], adaptive=(g2, zeros, own),
                        info={"vw_counters": counters, "vw_rates": {}, "indexing": None,
                              "link": None, "binary": False}))
    return out


def split_oaa(model: Any, k_classes: int, make: Any = None) -> list[Any]:
    """VW's one-against-all model (read by :func:`._vwmodel.read_vw_model` with ``oaa``)
    as its K learners: class c's weight of feature index i is VW's weight ``i * 2**s + c``
    (s = ceil(log2 K)), with its adaptive sum and normalizer. VW's saved learner state
    holds one model's normalized-update sums (the first class's: VW writes and reads
    only that one), so the other classes' sums start at 0 in a warm start, as in VW.
    ``make``: what each learner is made as (``LinearModel``'s keyword arguments;
    ``LinearModel`` without it)."""

    if make is None:
        from .._model import LinearModel as make

    shift = (k_classes - 1).bit_length()
    counters = model.info.get("vw_counters") or {}
    idx = model.indices.astype(np.uint64)
    cls = (idx & np.uint64((1 << shift) - 1)).astype(np.int64)
    parse = dataclasses.replace(model.parse, bits=model.parse.bits - shift)
    out = []
    for c in range(k_classes):
        sel = cls == c
        adaptive = None
        if model.adaptive is not None:
            g2, nrm, state = model.adaptive
            state = np.array(state, np.float64)
            if c:
                state[TOTAL_WEIGHT] = state[SUM_NORM_X] = 0.0
            adaptive = (g2[sel], nrm[sel], state)
        out.append(make(indices=(idx[sel] >> np.uint64(shift)).astype(np.uint32),
                               weights=model.weights[sel], parse=parse, loss=model.loss,
                               adaptive=adaptive,
                               info={"vw_counters": counters,
                                     "vw_rates": model.info.get("vw_rates") or {},
                                     "indexing": model.info.get("indexing"),
                                     "link": model.info.get("link"),
                                     "binary": bool(model.info.get("binary"))}))
    return out


def signs(scores: np.ndarray) -> np.ndarray:
    """VW's ``--binary`` under ``oaa``: each learner's score as its sign (+1 above 0, else
    -1), which ``oaa`` then takes the first largest of (the first class with a positive
    score, else class 1), writes to ``-r`` and counts the 0/1 loss of; the learners learn
    from their scores, as without it."""
    return np.where(scores > 0, 1.0, -1.0)


def _scorer(args: argparse.Namespace) -> str | None:
    """The ``--link`` VW's K learners score through (None: identity; ``--probabilities``
    takes the scores' logistic itself, and VW replaces the link with identity there)."""
    how = args.link
    return None if how in (None, "identity") or args.probabilities else how


def _kept_link(args: argparse.Namespace) -> str | None:
    """The ``--link`` VW keeps in the model: the one given (``identity`` too), which
    ``--probabilities`` replaces with ``identity``."""
    return None if not args.link else "identity" if args.probabilities else args.link


def _rates(args: argparse.Namespace) -> dict[str, float]:
    """The ``-l``/``--power_t`` VW keeps in its save_resume model's options."""
    from ._cli_run import _rates as rates

    return dict(rates(args))


def _vw_run(args: argparse.Namespace) -> dict[str, Any]:
    """The ``terascale vw`` run's VW feature generation and update rules (the model
    records them; ``grams``: the features the compiled parser makes,
    ``_vwgen.FeatureGen.parser_job``), ``--preserve_performance_counters``' counters of -i
    (the closing block adds them) and ``--binary``."""
    from ._cli_run import kept_rules

    return {"generation": getattr(args, "vw_generation", None) or {},
            "preserved": getattr(args, "vw_preserved", None) or {},
            "binary": bool(getattr(args, "binary", False)), "rules": kept_rules(args),
            "grams": gen.parser_job() if (gen := getattr(args, "vw_grams", None)) else None}


def _initial(args: argparse.Namespace, k_classes: int, make: Any = None) -> list[Any]:
    """-i MODEL with --oaa K: VW's one-against-all model of K classes, as K learners; or
    VW's starting weights (``--initial_weight``, ``--random_weights``, ``--constant``,
    ``--initial_t``, ``--min_prediction``...: ``args.starting_weights``), drawn over VW's
    2**b interleaved weights as VW draws them, split as VW's model is."""
    from .._vw._vwmodel import is_vw_model, read_vw_model

    if getattr(args, "starting_weights", False):
        from .._model import LinearModel

        return split_oaa(LinearModel.load(args.initial), k_classes)
    if not is_vw_model(args.initial):
        raise ConfigError(f"--oaa -i {args.initial}: -i takes VW's one-against-all model "
                          f"(terascale writes its --oaa models in VW's format)")
    model = read_vw_model(args.initial, oaa=True,  # (plain: no LinearModel's numba)
                          generation=getattr(args, "vw_generation", None),
                          plain=make is not None)
    if getattr(args, "vw_initial_t", None) or getattr(args, "vw_range", None) or \
            getattr(args, "vw_interactions", None):
        # (--initial_t: every weight's sums under the model's; --min_prediction/
        # --max_prediction: a model without VW's learner state starts from them; -q,
        # --cubic, --interactions, --ignore, --keep, --noconstant given: as VW applies them)
        from types import SimpleNamespace

        from ._cli_run import vw_start

        vw_start(model, SimpleNamespace(vw_initial_t=getattr(args, "vw_initial_t", None),
                                        vw_range=getattr(args, "vw_range", None),
                                        vw_interactions=getattr(args, "vw_interactions",
                                                                None)))
    k = model.info.get("oaa")
    if k != k_classes:
        raise ConfigError(f"--oaa {k_classes}: -i {args.initial} is "
                          f"{f'a model of --oaa {k}' if k else 'not a one-against-all model'}")
    return split_oaa(model, k_classes, make)


def _numbered(paths: list[str], k_classes: int, names: list[str], out_dir: str,
              say: bool = True) -> list[str]:
    """--named_labels: the input once more with each name replaced by its class number
    (1..K; a label that is not a name is class 0, with VW's warning where ``say``), so
    that the data is parsed as numbered classes; one copy, whatever K, which an error
    names as the input it was written from (:func:`_copy_of`, :func:`_as_given`)."""
    table = {n: c for c, n in enumerate(names, 1)}
    out = []
    for n, path in enumerate(paths):
        name = _copy_of(path, os.path.join(out_dir, f"numbered-{n}.vw"))
        with _open_text(path) as f, open(name, "w", encoding="utf-8",
                                          errors="surrogateescape") as o:
            lines: list[str] = []
            for i, line in enumerate(f, 1):
                if line.strip():
                    y, _, rest, _ = _label(line, f"{path}:{i}", table, say)
                    if not math.isnan(y):
                        line = f"{int(y)}{rest}"
                lines.append(line)
                if len(lines) >= _FLUSH:
                    o.write("".join(lines))
                    lines.clear()
            o.write("".join(lines))
        out.append(name)
    return out


def _as_given(error: DataError) -> DataError:
    """``error`` naming the input where it names a numbered copy (:func:`_numbered`), and
    quoting the input's line: called while the copy exists, whose line it replaces."""
    from .._vw._vwgen import as_given

    return DataError(as_given(str(error)))


def _copy_of(path: str, name: str) -> str:
    """``name``, a copy of the input ``path`` line for line, which an error on one of its
    lines names as ``path`` (``_vwgen.as_given``)."""
    from .._vw._vwgen import INPUTS

    INPUTS[name] = INPUTS.get(path, path)  # (a copy of a copy names the input)
    return name


def _unsigned(labels: np.ndarray) -> np.ndarray:
    """Integer labels as VW's multiclass parser reads them: a C int taken as unsigned
    (modulo 2**32: -2 is the class 4294967294, which no learner has, a mistake whatever
    the prediction); 4294967295 (-1) is VW's "no class", an unlabelled example (NaN),
    whatever its importance weight."""
    lab = labels.astype(np.float64)
    if ((lab < 0) | (lab >= 4294967295.0)).any():
        lab = np.mod(lab, 4294967296.0)
        lab[lab == 4294967295.0] = np.nan
    return lab


def _until_malformed(blocks: Iterator[Any], job: dict[str, Any], refuse: bool,
                     quiet: bool, stopped: list[bool]) -> Iterator[Any]:
    """The blocks of the first pass up to the first example whose label section VW's
    multiclass parser throws at (``job["malformed"]``, :func:`_first_malformed`): a label
    word that C's ``strtol`` does not read whole (``1.5``, ``2.0``, ``1:1``, ``3e0``:
    ``Malformed example: label has trailing character(s): .``) or more than two label
    words; VW reads no more of the input, and the run learns the examples before it and
    ends as if the input ended there (its error on standard output, unless --quiet).
    ``refuse``: a holdout or several workers (VW then ends its run inside the first
    pass, with no holdout loss): the DataError of its file and line instead; over
    several passes without a holdout the run ends there, as VW's. ``stopped`` gets
    True where it stops (VW's model then counts no pass done)."""
    bad = job.get("malformed")
    if bad is None:
        yield from blocks
        return
    before = bad[4]
    if refuse:
        raise malformed_error(bad)
    seen = 0
    for blk in blocks:
        n = len(blk.labels)
        if seen + n <= before:
            seen += n
            yield blk
            continue
        stopped.append(True)
        # VW's parser runs ahead of its learner: its lines on the label sections before
        # the one it stops at, then its error, then the learner's lines
        if not quiet:
            say_stop(blk.notes, bad)
        if before > seen:
            yield dataclasses.replace(_head(blk, before - seen), notes=None)
        return


def say_stop(notes: Sequence[str] | None, bad: tuple[str, int, str, int, int]) -> None:
    """VW's lines where its multiclass parser stops (:func:`_until_malformed`): the
    parser's ``notes`` on the label sections before it, then its error."""
    for note in notes or ():
        _say(note)
    print(malformed_note(bad), flush=True)


def malformed_error(bad: tuple[str, int, str, int, int]) -> DataError:
    """The error of a run that does not stop where VW's multiclass parser throws (a
    holdout, several workers: :func:`_until_malformed`)."""
    where, word = bad[0], bad[2]
    return DataError(f"{where}: multiclass label {word!r} is not a class number 1..K "
                     f"(--oaa: an integer, then at most an importance weight); VW stops "
                     f"reading there, which terascale vw reproduces on one worker "
                     f"without a holdout")


def malformed_note(bad: tuple[str, int, str, int, int]) -> str:
    """VW's lines where its multiclass parser throws (:func:`_first_malformed`'s): its
    warning on a word of which ``strtol`` reads no integer (``abc``, ``nan``, ``-x``: read
    as 0), then its error."""
    _, number, word, words = bad[:4]
    if words > 2:
        return f"[error] vw example #{number}(multiclass.cc:71): Malformed example, " \
               f"words.size() = {words}"
    warn = f"[warning] '{word}' is not a good int, replacing with 0\n" \
        if _reads_no_int(word) else ""
    # (VW's throw for a label with a weight, without)
    return (f"{warn}[error] vw example #{number}(multiclass.cc:{65 if words == 2 else 52}): "
            f"Malformed example: label has trailing character(s): {_after_int(word)}")


def parse_notes(index: _Indexing, notes: Sequence[str] | None, p: int
                ) -> list[tuple[int, str]]:
    """A block's lines on standard output: the parser's on its label sections (VW's
    warning on an importance weight that is no number, read as 0; on the first pass, as
    VW prints them while it parses), then ``index``'s on its labels."""
    said = [(0, n) for n in notes] if notes and p == 0 and index.say else []
    return said + index.notes


def _reads_no_int(word: str) -> bool:
    """Whether C's ``strtol`` reads no integer at the start of ``word``."""
    return re.match(r"\s*[-+]?\d", word) is None


def _mended(paths: list[str], bad: tuple[str, int, str, int, int],
            out_dir: str) -> list[str]:
    """The text VW's multiclass parser reads up to the line it throws at (``bad``:
    :func:`_first_malformed`'s), that line written ``0 |``, an example the parser reads
    (its label word may be one of which ``strtol`` reads no integer, or its label section
    have more words than the parser takes; the run stops at that example: it is never
    learned from); the lines and files after it left out."""
    out: list[str] = []
    left = bad[1]  # (the lines before it, every file's, empty ones too)
    for n, path in enumerate(paths):
        name = _copy_of(path, os.path.join(out_dir, f"mended-{n}.vw"))
        out.append(name)
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f, \
                open(name, "wb") as o:
            for line in f:
                if left == 0:
                    o.write(b"0 |\n")
                    return out
                o.write(line)
                left -= 1
    return out


def _head(blk: Any, j: int) -> Any:
    """Block ``blk``'s first ``j`` examples."""

    nnz = int(blk.indptr[j])
    return dataclasses.replace(
        blk, indptr=blk.indptr[:j + 1], indices=blk.indices[:nnz], values=blk.values[:nnz],
        labels=blk.labels[:j], weights=blk.weights[:j],
        tag_ptr=None if blk.tag_ptr is None else blk.tag_ptr[:j + 1],
        blanks=None if blk.blanks is None else blk.blanks[blk.blanks < j],
        ignored=None if blk.ignored is None else blk.ignored[:j])


def _first_malformed(data: list[str], paths: list[str]
                     ) -> tuple[str, int, str, int, int] | None:
    """(file:line, VW's example number: the lines before it, empty ones too, its label
    word, its label section's word count, the examples before it) of the first line
    whose label section VW's multiclass parser throws at; None where there is none. The
    text is read in chunks of whole lines by ``multiclass_stop`` (the compiled core's where
    built: a compiled ``--oaa`` run imports no numba; else :mod:`.._vw._vwparse`'s)."""
    multiclass_stop = _multiclass_stop()

    lines_before = examples_before = 0
    for path, name in zip(data, paths):
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        line = 0
        with (gzip.open(path, "rb") if gz else open(path, "rb")) as f:
            rest = b""
            while True:
                chunk = f.read(_CHUNK)
                text = rest + chunk
                if not chunk:
                    rest = b""
                elif b"\n" in chunk:
                    cut = text.rindex(b"\n") + 1
                    text, rest = text[:cut], text[cut:]
                else:
                    rest, text = text, b""
                buf = np.frombuffer(text, np.uint8)
                kind, at, nex, count, s, e = multiclass_stop(buf)
                if kind:
                    word = bytes(buf[s:e]).decode("utf-8", "surrogateescape")
                    return (f"{name}:{line + at + 1}", lines_before + line + at, word,
                            count, examples_before + nex)
                line += at
                examples_before += nex
                if not chunk:
                    break
        lines_before += line
    return None


# bytes of text read at a time by _first_malformed: its scan is a small part of a run,
# and its chunk and the copy it is cut from stand over the run's table (16 MiB chunks:
# 44 MB peak against VW's 38 on 200k lines of --oaa 7 at -b 18)
_CHUNK = 1 << 18


def _multiclass_stop() -> Any:
    from ..._cext import load
    from .._vw import VWFAST

    fast = load(*VWFAST)
    if fast is not None:
        return fast.multiclass_stop
    from .._vw._vwparse import multiclass_stop

    return multiclass_stop


def _after_int(word: str) -> str:
    """The character after the integer C's ``strtol`` reads at the start of ``word`` (its
    first where it reads none), which VW's error names."""
    m = re.match(r"\s*[-+]?\d+", word)
    rest = word[m.end():] if m else word
    return rest[:1]


class _Indexing:
    """VW's oaa reads labels 1..K until a label 0 (then 0..K-1 from that example on) or a
    label K (1..K for good) of an example it learns from decides (a held-out one does
    not); each example is predicted with the classes as they were before its label was
    read, and learned (and named by --probabilities) as they are after it."""

    def __init__(self, k_classes: int, say: bool, given: int | None = None) -> None:
        self.k, self.say = k_classes, say
        # 2: undecided (classes 1..K meanwhile); then 0 or 1 (--indexing: from the start)
        self.state = 2 if given is None else int(given)
        self.first_after: int | None = None
        #: VW's lines on standard output the block's examples came with (its [info] on
        #: the decision, its warnings on labels out of range), each with its example
        self.notes: list[tuple[int, str]] = []

    def block(self, labels: np.ndarray, hold: np.ndarray, first: bool = True
              ) -> tuple[np.ndarray, np.ndarray]:
        """(each example's first class number when predicted, and once its label is read)
        of a block whose held-out examples are ``hold``; ``first``: of the first pass
        (the later passes keep the classes as it ended with them)."""
        n = len(labels)
        now = 0 if self.state == 0 else 1
        before, after = np.full(n, now, np.int64), np.full(n, now, np.int64)
        states = np.full(n, self.state, np.int64)
        learnt = ~np.isnan(labels) & ~hold
        if self.state == 2 and first:
            hit = np.flatnonzero(((labels == 0) | (labels == self.k)) & learnt)
            if len(hit):
                j = int(hit[0])
                self.state = states[j:] = 0 if labels[j] == 0 else 1
                before[j + 1:] = after[j:] = self.state
                if self.say:
                    self.notes.append((j, f"[info] label "
                                          f"{'0' if self.state == 0 else self.k} found -- "
                                          f"labels are now considered "
                                          f"{self.state}-indexed."))
        if self.first_after is None and n:
            self.first_after = int(after[0])
        if self.say:  # VW's warning for each label out of the classes' range it learns
            k = self.k
            out = learnt & (((states == 0) & (labels >= k))
                            | ((states == 1) & ((labels < 1) | (labels > k))))
            for j in np.flatnonzero(out).tolist():
                lo, hi, how = (0, k - 1, 0) if states[j] == 0 else (1, k, 1)
                self.notes.append((j, f"[warning] label {int(labels[j])} is not in "
                                      f"{{{lo},{hi}}}. This won't work for {how}-indexed "
                                      f"actions."))
            self.notes.sort(key=lambda t: t[0])  # (stable: the [info] line first)
        return before, after

    @property
    def base(self) -> int:
        """The first class number now (0 once a label 0 decided, else 1)."""
        return 0 if self.state == 0 else 1


class _Table:
    """VW's progress table of --oaa, line by line as the blocks are learned, and the
    sums of each pass for its closing block; with ``probabilities`` (``--probabilities``)
    VW's columns and losses of it: the predicted class with its probability (``2(38%)``),
    an unlabelled example's label as VW's unsigned ``4294967295`` (and counted a mistake,
    as VW's 0/1 loss of it counts it), and the multiclass log loss of the closing
    block."""

    def __init__(self, quiet: bool, holdout: bool, names: list[str] | None,
                 probabilities: bool = False, scores: bool = False,
                 kept: dict[str, float] | None = None, t0: float = 0.0) -> None:
        from .._online._progress import Progress

        self.prog = None if quiet else Progress(sys.stderr)
        self.cum, self.cum_w, self.cum_n = np.zeros(4), 0.0, 0
        self.due = 1.0
        #: -i's passes and loss the table goes on from (``kept``: its counters, under
        #: --preserve_performance_counters, :data:`.._online._progress.PRESERVED`)
        self.before, self.kept_loss = 0, 0.0
        #: VW's running sums over the passes (its shared_data's doubles): loss and
        #: labelled weight (-i's in them where the table goes on from its counters), the
        #: unlabelled weight and every example's weight (its t, from -i's ``t0`` on);
        #: each pass's row ends with them (after the label sum, 0: VW's multiclass
        #: learner keeps none)
        self.run = np.array([0.0, 0.0, 0.0, t0])
        self.label_sum = 0.0  # (-i's, which VW's multiclass learner adds nothing to)
        if kept and "examples" in kept:
            self.run[:3] = (kept["sum_loss"], kept["weighted_labeled_examples"],
                            kept.get("weighted_unlabeled_examples", 0.0))
            self.label_sum = float(kept.get("weighted_labels", 0.0))
        if self.prog is not None:
            self.prog.names, self.prog.holdout = names, holdout
            self.prog.header()
            self.due = self.prog.first_due()
            if kept and "examples" in kept:
                self.prog.go_on(kept)
                self.cum, self.cum_w = np.array(self.prog.done), self.prog.seen_w
                self.cum_n, self.due = self.prog.seen_n, self.prog.due
                self.before, self.kept_loss = self.prog.passes, kept["sum_loss"]
                self.prog.folds = False  # (the sums since a line: differences of these)
        self.passes: list[np.ndarray] = []
        self.probabilities, self.scores = probabilities, scores
        #: VW's multiclass log loss sums: of the examples learned from, and of its test
        #: examples (held out, or unlabelled)
        self.log_loss = np.zeros(2)

    def mark(self, job_totals: list[np.ndarray] | None = None) -> list[float]:
        """Where the printed table stands, as VW's model keeps it: the next line's
        weight, the loss since its last line (``job_totals``: every pass's sums over the
        job's workers, with -i's loss, less the loss at rank 0's last line; else this
        table's running sum) and the labelled weight at that line."""
        prog = self.prog
        assert prog is not None
        since = float(prog.since[0]) if job_totals is None else (
            float(sum(t[0] for t in job_totals)) + self.kept_loss - float(prog.prev[0]))
        return [float(self.due), since, float(prog.prev[1])]

    def block(self, p: int, truth: np.ndarray, pred: np.ndarray, weight: np.ndarray,
              hold: np.ndarray, feats: np.ndarray, probs: np.ndarray | None = None,
              first: np.ndarray | None = None, notes: Sequence[tuple[int, str]] = ()
              ) -> None:
        """Pass ``p``'s block: the labels (NaN: none), predicted classes, importance
        weights, the holdout and each example's feature count; with ``probabilities``
        each class's probability and each example's first class number once its label
        was read (``first``; ``--scores``: each class's score); ``notes``: VW's lines on standard output and the
        example before whose line each comes, in order."""
        if len(self.passes) <= p:
            self.passes.append(np.concatenate([np.zeros(9), [self.label_sum], self.run]))
        w = weight.astype(np.float64)
        labelled = ~np.isnan(truth)
        held = labelled & hold  # (VW holds out labelled examples only)
        counted, learnt = ~held, labelled & ~hold
        if probs is None:
            loss = np.where((pred != truth) & labelled, w, 0.0)  # VW's: a mistake's weight
        else:  # (an unlabelled example's class, VW's 4294967295, is never the predicted)
            loss = np.where(pred != truth, w, 0.0)
            if self.probabilities:
                ll = _log_losses(probs, truth, first, weight)
                test = hold | ~labelled  # (VW's test_only)
                self.log_loss += (ll[~test].sum(), ll[test].sum())
        t = self.passes[p]
        t[:9] += (0.0, 0.0, 0.0, 0.0, len(truth), 0.0, 0.0, counted.sum(), feats[counted].sum())
        for k, part in ((0, loss[counted]), (1, w[learnt]), (2, loss[held]), (3, w[held]),
                        (6, w[~labelled])):  # (VW's running sums, in turn: not by block)
            t[k] = np.cumsum(np.concatenate(([t[k]], part)))[-1]
        for k, part in enumerate((loss[counted], w[learnt], w[~labelled], w)):
            self.run[k] = np.cumsum(np.concatenate(([self.run[k]], part)))[-1]
        t[-len(self.run):] = self.run  # (the row's last slots: _vwreport.RUN_LOSS on)
        cum = np.cumsum(np.concatenate([self.cum[None], np.stack(
            [np.where(counted, loss, 0.0), np.where(learnt, w, 0.0),
             np.where(held, loss, 0.0), np.where(held, w, 0.0)], axis=1)]), axis=0)[1:]
        cum_w = np.cumsum(np.concatenate([[self.cum_w], np.where(counted, w, 0.0)]))[1:]
        cum_n = self.cum_n + np.cumsum(counted)
        prog, said, cut = self.prog, 0, 0
        # (VW's sums since the last line, each its own running sum: loss, -, holdout's)
        part = np.stack([np.where(counted, loss, 0.0), np.zeros(len(truth)),
                         np.where(held, loss, 0.0), np.where(held, w, 0.0)], axis=1)
        while prog is not None:
            at = max(int(np.searchsorted(cum_w, self.due)), cut)  # (a line an example at most)
            if at >= len(truth):
                prog.since[:] = _added(np.asarray(prog.since), part[cut:])
                break
            prog.since[:] = _added(np.asarray(prog.since), part[cut:at + 1])
            prog.folds, cut = True, at + 1
            while said < len(notes) and at >= notes[said][0]:
                _say(notes[said][1])
                said += 1
            text = None
            if probs is not None and prog.names is not None:
                # (VW names the label, and reads the predicted class where its
                # probabilities are: no class's name, ``unknown``)
                k = len(prog.names)
                text = (prog.names[int(truth[at]) - 1] if 1 <= truth[at] <= k
                        else "unknown", "unknown")
            elif probs is not None:  # (VW prints the label as its unsigned integer)
                pct = float(np.float32(100) * probs[at].max())
                text = ("4294967295" if np.isnan(truth[at]) else f"{int(truth[at])}",
                        f"{int(pred[at])}({pct:2.0f}%)" if self.probabilities
                        else f"{int(pred[at])}")
            prog.passes = p + self.before
            prog.line(cum[at], prog.prev, int(cum_n[at]), float(cum_w[at]), float(truth[at]),
                      float(pred[at]), int(feats[at]), classes=True, text=text)
            prog.prev = cum[at]
            self.due = prog.next_due(float(cum_w[at]))
        for _, line in notes[said:]:
            _say(line)
        if len(truth):
            self.cum, self.cum_w, self.cum_n = cum[-1], float(cum_w[-1]), int(cum_n[-1])


def _added(start: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``start`` plus each of ``rows`` in turn (a running double sum per column)."""
    return np.cumsum(np.concatenate([start[None], rows]), axis=0)[-1]


def _say(line: str) -> None:
    """VW's line on stdout (``[info]``, ``[warning]``), between the table's on stderr."""
    sys.stderr.flush()
    print(line, flush=True)


def _log_losses(probs: np.ndarray, truth: np.ndarray, first: np.ndarray | None,
                weight: np.ndarray) -> np.ndarray:
    """VW's multiclass log loss of each example, in float: minus the log of the
    probability of its class (VW's unsigned label, less 1 unless the classes are
    0-indexed, modulo K: an unlabelled example's 4294967295 picks one), times its weight;
    999 where that probability is 0 (not weighted, as in VW)."""
    n, k = probs.shape
    lab = np.where(np.isnan(truth), 4294967295.0, truth).astype(np.int64)
    shift = np.ones(n, np.int64) if first is None else (first != 0).astype(np.int64)
    idx = ((lab - shift) % (1 << 32)) % k
    p = probs[np.arange(n), idx]
    with np.errstate(divide="ignore", invalid="ignore"):
        ll = (-np.log(p.astype(np.float64))).astype(np.float32) * weight.astype(np.float32)
    return np.where(p > 0, ll, np.float32(999)).astype(np.float64)


def _train_one(args: argparse.Namespace, paths: list[str], options: dict[str, Any],
               k_classes: int, names: list[str] | None, start: list[Any] | None,
               run: Any = None) -> int:
    """``--oaa K`` on one worker: the data parsed once a pass, the K learners updated
    block by block (:mod:`._oaapass`), VW's progressive predictions (``-p``), table and
    closing block written as the blocks go; ``options["bits"]`` is each learner's.
    ``run(job, start, out, raw)`` learns (default :func:`_run_one`: the numba pass; the
    compiled one is :mod:`.._vw._vwoaafast`'s), ``out``/``raw`` the ``-p``/``-r`` files
    (or None), committed once it returns."""
    from .._vw._vwout import AtomicText

    bad = None if names is not None else _first_malformed(paths, paths)
    mend = bad is not None and (bad[3] > 2 or _reads_no_int(bad[2]))
    tmp = tempfile.mkdtemp(prefix="terascale-oaa-") if names is not None or mend else None
    out = raw = None
    try:
        data = paths if names is None else _numbered(paths, k_classes, names, tmp,
                                                          not args.quiet)
        if mend:  # (the text VW reads: up to that line, which the parser then reads)
            assert tmp is not None and bad is not None
            data = _mended(paths, bad, tmp)
            options = {**options, "cache": False}  # (read once: the run stops in pass 1)
        out = AtomicText(args.predictions) if args.predictions else None
        raw_path = getattr(args, "raw_predictions", None)
        raw = AtomicText(raw_path) if raw_path else None
        job = {"data": data, "paths": paths, "options": options, "k": k_classes,
               "names": names, "model": args.model,
               "quiet": bool(args.quiet), "probabilities": bool(args.probabilities),
               "scores": bool(getattr(args, "scores", False)),
               "test": bool(args.testonly), "readable": args.readable_model,
               "invert": args.invert_hash, "rates": _rates(args),
               "indexing": getattr(args, "indexing", None), "link": _scorer(args),
               "model_link": _kept_link(args),
               "predict_only": bool(getattr(args, "predict_only_model", False)),
               "malformed": bad, **_vw_run(args)}
        (run or _run_one)(job, start, out, raw)
        for f in (out, raw):
            if f is not None:
                f.commit()
        out = raw = None
    except DataError as e:
        raise _as_given(e) from None
    finally:
        for f in (out, raw):
            if f is not None:
                f.discard()
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    return 0


def _run_one(job: dict[str, Any], start: list[Any] | None, out: Any, raw: Any) -> None:
    """The numba pass of :func:`_train_one`'s ``job``, its blocks' ``-p``/``-r`` lines
    written to ``out``/``raw`` as they go."""
    names = job["names"]

    def write(blk: Any, s: np.ndarray, pred: np.ndarray, before: np.ndarray,
              after: np.ndarray, probs: np.ndarray | None) -> None:
        if out is not None:
            _write_block(out, probs, blk, pred, after, names)
        if raw is not None and probs is None:  # (VW's -r is empty with --probabilities)
            _write_lines(raw, blk, [_raw_line(r, b) for r, b in zip(s, before.tolist())])

    run_oaa(job, start, write)


def print_test_block(table: Any) -> None:
    """VW's closing block of a ``-t`` run (its first pass's counters, on standard error)."""
    from .._vw._vwreport import test_block

    t = table.passes[0] if table.passes else np.zeros(9)
    print(test_block(int(t[4]), float(t[1]), float(t[0]), float(t[1] + t[6]),
                     label_sum=0.0, features=int(t[8]),
                     log_loss=_log_loss_text(table, [t], False)), file=sys.stderr)


def run_oaa(job: dict[str, Any], start: list[Any] | None = None,
            write: Any = None, comm: Any = None) -> None:
    """Train the K learners of ``job`` on this worker's shard (every worker of a job
    with ``comm``: after each pass each class's learner is averaged over the workers as
    the binary learner's is, and rank 0 writes the model); ``write(block, scores,
    predicted classes, first class numbers before and after each label was read, each
    class's probability or None)`` gets each block's progressive predictions.

    ``job``: ``data`` (the files, classes numbered), ``paths`` (as the user named them),
    ``options`` (``TrainOptions``' fields, ``bits`` each learner's), ``k``, ``names``,
    ``model`` (VW's model to write, or None), ``quiet``, ``probabilities``, ``test``
    (``-t``: the learners score the examples, learn nothing; classes 1..K, as VW's indexing
    is decided by learning; VW's test block), ``generation`` and ``preserved``
    (:func:`_vw_run`)."""
    from .._combine._average import average_weights
    from .._io._shard import shard_blocks
    from .._online._update import sync_weights
    from .._options import TrainOptions
    from .._passes import EarlyStop
    from .._recipe import holdout_period
    from .._vw._vwout import _LINK_CODES
    from ._oaapass import Learners, blocks_once, oaa_pass

    k_classes, names, options = int(job["k"]), job["names"], dict(job["options"])
    rank, size = (comm.rank, comm.size) if comm is not None else (0, 1)
    if start is not None:  # VW's model's parse options (-q, --noconstant, ...) rule
        options.update({k: (tuple(v) if isinstance(v, list) else v)
                        for k, v in start[0].parse.to_dict().items()})
    opts = TrainOptions(**{k: (tuple(v) if isinstance(v, list) else v)
                           for k, v in options.items()
                           if k in TrainOptions.__dataclass_fields__})
    blocks = shard_blocks(job["data"], rank=rank, size=size, cache_dir=opts.cache_root(),
                          lazy=True, **opts.parse_options().__dict__)
    learners = Learners(k_classes, opts.bits, start)
    period = holdout_period(opts)
    test = bool(job.get("test"))
    passes = 1 if test else opts.passes
    stop = EarlyStop(opts.patience) if period and passes > 1 else None
    quiet = job["quiet"] or rank > 0
    index = _Indexing(k_classes, say=not quiet, given=job.get("indexing"))
    probabilities, scores = bool(job["probabilities"]), bool(job.get("scores"))
    table = _Table(quiet, bool(period) and passes > 1, names,  # (rank 0's shard's lines)
                   probabilities, scores, None if test else job.get("preserved"),
                   start_t(start))
    job_totals: list[np.ndarray] = []  # each pass's sums over every worker
    kind = opts.online_kind()
    l2 = opts.online_l2(0.0)
    rate = np.float32(opts.learning_rate)
    fixed: list[np.ndarray] = []  # each block's first class numbers (predicted, learned)
    labels = [np.zeros(0)]  # the block's classes, as VW reads them (_unsigned)
    at = [0]  # the pass under way
    stopped: list[bool] = []  # (VW's parser stopped inside the first pass)
    # VW's learners learn from their linked scores (its scorer links them first)
    linked = _LINK_CODES[job["link"]] if job.get("link") and not test else -1

    def targets(blk: Any, hold: np.ndarray) -> np.ndarray:
        lab = labels[0] = _unsigned(blk.labels)
        if test:  # (NaN: every learner scores the example, none learns)
            fixed[:] = [np.full(len(lab), index.base, np.int64)] * 2
            return np.full(len(lab), np.nan)
        fixed[:] = index.block(lab, hold, at[0] == 0)
        return lab.astype(np.float64) - fixed[1]  # (nan stays nan)

    marks: list[list[float]] = []  # (each pass's end: progress below)
    kept_passes = 0  # (the early stop's: the model is the first kept_passes passes')
    for p in range(passes):
        at[0] = p
        if p > 0 and opts.decay_learning_rate != 1.0:
            rate = np.float32(rate * np.float32(opts.decay_learning_rate))
        stream = blocks_once(blocks)
        if p == 0:  # (VW's multiclass parser stops at a label it cannot read)
            stream = _until_malformed(stream, job, size > 1 or bool(period), quiet,
                                      stopped)
        for sc in oaa_pass(stream, learners, targets, kind, float(rate),
                           opts.power_t, opts.l1, l2, period, linked):
            blk, s = sc.block, sc.scores
            if job.get("link"):  # (VW's scorer under oaa: each learner's score linked)
                from .._vw._vwout import link

                s = link(s.ravel(), job["link"], False).reshape(s.shape)
            if job.get("binary"):  # (VW's binary under oaa: each learner's sign)
                s = signs(s)
            before, after = fixed
            # the first of equal scores, as VW; predicted with the classes numbered as
            # before the label was read (--probabilities names them as after it)
            pred = np.argmax(s, axis=1) + (after if probabilities or scores else before)
            probs = (_probabilities(s) if probabilities
                     else s.astype(np.float32) if scores else None)
            table.block(p, labels[0], pred, blk.weights, sc.hold,
                        blk.counted(0, len(blk.labels)), probs, after,
                        parse_notes(index, blk.notes, p))
            index.notes = []
            if write is not None:
                write(blk, s, pred, before, after, probs)
        if (size > 1 and p == 0 and passes > 1
                and index.first_after not in (None, index.base)):
            raise DataError(f"{', '.join(job['paths'])}: the first label 0 comes after "
                            f"other labels: VW's --oaa then reads the labels before it as "
                            f"1..K in the first pass and as 0..K-1 in later ones, which "
                            f"the workers of -n N, each deciding on its shard, do not "
                            f"reproduce; write classes 1..K, train one pass, or -n 1")
        if size > 1:  # each class's learner averaged at the end of the pass
            for c in range(k_classes):
                w, g2, nrm, state = learners.views(c)
                sync_weights(w, state)
                average_weights(comm, w, g2, nrm, state, opts.averaging)
        t = table.passes[p] if p < len(table.passes) else np.zeros(9)
        job_totals.append(comm.allreduce(t[:9].copy()) if size > 1 else t)
        if p == 0 and not test:  # (--skip-bad's lines, the job's, as the binary run's)
            skipped = blocks.skipped()
            if size > 1:
                skipped = int(comm.allreduce(np.array([skipped], np.float64))[0])
            if skipped and not quiet:
                print(f"skipped {skipped} bad lines (--skip-bad)", file=sys.stderr)
        held = job_totals[-1][2:4]
        if table.prog is not None:  # (where the table stood: the counters of a kept pass)
            marks.append(table.mark(job_totals))
        if stop is not None and stop.end_pass(held[0], held[1], learners.arrays,
                                              learners.states):
            kept_passes = p + 1 - stop.patience
            break
        if stopped:  # (VW's run ends where its parser stopped)
            break
    if test:
        if not quiet:
            print_test_block(table)
        if not (job["model"] or job.get("readable") or job.get("invert")):
            return
    readable = bool(job.get("readable") or job.get("invert"))
    kept = (start[0].info.get("vw_counters") or {}) if start else {}
    t0 = float(kept.get("t") or 0.0)
    parse = start[0].parse if start is not None else opts.parse_options()
    totals = (job_totals if size > 1 else table.passes) or [np.zeros(9)]  # (none read: one)
    # (the loss since the table's last line: VW's sum, from this table's running sums)
    progress = None if table.prog is None else table.mark(totals if size > 1 else None)
    if kept_passes and marks:  # (VW's model is the kept pass's: its counters then)
        totals, progress = totals[:kept_passes], marks[kept_passes - 1]
    only = bool(job.get("predict_only"))
    if stopped:  # (VW's counters: no pass done)
        job = dict(job, current_pass=0)
    if not only and rank == 0 and (readable or job["model"]):
        # VW's save_resume form: the weights as VW keeps them, L1/L2 not applied
        model = _interleaved(job, learners, parse, opts.loss, totals, progress, t0,
                             float(kept.get("initial_t") or 0.0))
        if readable:
            _write_readable(job, model, parse, k_classes, test)
        if job["model"]:
            from .._vw._vwmodel import write_vw_oaa_resume

            write_vw_oaa_resume(model, job["model"], k_classes, names, bare=test)
    learners.finish()
    if only and readable and rank == 0:  # (L1/L2 applied, the nonzero weights)
        _write_readable(job, _interleaved(job, learners, parse, opts.loss, table.passes,
                                          progress, t0, float(kept.get("initial_t") or 0.0)),
                        parse, k_classes)
    if only and job["model"] and rank == 0:
        from .._vw._vwmodel import write_vw_oaa_model

        write_vw_oaa_model(learners.models(parse, opts.loss), job["model"], names,
                           job.get("generation"), job.get("indexing"),
                           job.get("model_link"), bool(job.get("binary")))
    if not quiet and not test:  # (the job's counts: every worker's sums)
        from .._vw._vwreport import closing_block, holdout_on

        totals = [list(map(float, t)) for t in (job_totals if size > 1 else table.passes)
                  ] or [[0.0] * 9]
        holdout = holdout_on({**options, "passes": passes})
        print(closing_block({"pass_totals": totals, "vw_preserved": job.get("preserved"),
                             "holdout": holdout, "examples": int(totals[0][4]),
                             "multiclass_log_loss": _log_loss_text(table, totals, holdout,
                                                                    job.get("preserved"))}),
              file=sys.stderr)


def _interleaved(job: dict[str, Any], learners: Any, parse: Any, loss: str,
                 totals: list[Any], progress: list[float] | None, t0: float,
                 initial_t: float = 0.0) -> Any:
    """The K learners as one VW model of ``--oaa K``, as VW keeps them: class c's row
    (weight, adaptive sum, normalizer) of feature i at ``i * 2**s + c`` (s =
    ceil(log2 K)) over VW's 2**b weights (the rows not all 0, as VW writes them), the
    first class's learner state, and the run's counters (``totals``: its per-pass sums;
    ``progress``: where its table stopped; ``t0``: -i's ``t``, which VW carries on;
    ``initial_t``: VW's ``--initial_t``, or -i's, which its header keeps)."""
    from types import SimpleNamespace

    from .._vw._vwmodel import run_counters

    k, a = learners.k, learners.arrays
    shift = (k - 1).bit_length()
    # VW's rows (not all 0), feature by feature and class by class, found a block of
    # features at a time, counted and then written into the one array of their indices;
    # their values are read from the learners a slice at a time as the writer asks
    # (_Learned): copies of them and their temporaries held the run's peak (200k lines of
    # --oaa 7 at -b 18), and so did the blocks' indices joined (twice the rows')
    itype = np.uint32 if parse.bits + shift < 32 else np.uint64
    blocks = range(0, a.shape[1], _FEATS)
    # (--initial_t gave every one of VW's 2**b rows its sum: the slots of the classes
    # past K too, whose rows VW writes with it)
    spare = (1 << shift) - k if initial_t else 0
    rows = np.empty(sum(int(np.count_nonzero(_kept(a, f0, spare))) for f0 in blocks), itype)
    at = 0
    for f0 in blocks:
        fi, ci = np.nonzero(_kept(a, f0, spare))
        rows[at:at + len(fi)] = ((fi + f0) << shift) + ci
        at += len(fi)
    cols = [_Learned(a, rows, shift, j, initial_t if j == 1 else 0.0) for j in range(3)]
    info = {"pass_totals": [[*map(float, t)] for t in totals],
            "vw_progress": progress, "vw_generation": job.get("generation") or {},
            "vw_rates": job.get("rates"), "vw_t0": t0, "vw_indexing": job.get("indexing"),
            "vw_initial_t": initial_t, "vw_rules": job.get("rules") or [],
            **({"vw_current_pass": job["current_pass"]} if "current_pass" in job else {}),
            "link": job.get("model_link"), "binary": bool(job.get("binary"))}
    if job.get("preserved"):  # (-i's counters, which the model's go on from)
        info["vw_preserved"] = job["preserved"]
    if job["options"].get("fixed_range"):
        info["fixed_range"] = True  # (VW's header holds it, whatever the loss)
    out = run_counters(info["pass_totals"], progress, job.get("preserved"))
    # (-i's t: in the rows' running t, where they have it)
    info["vw_counters_out"] = dict(out, t=out["t"] + (
        0.0 if totals and len(totals[-1]) >= 14 else t0))
    bits = parse.bits + shift
    return SimpleNamespace(indices=rows, weights=cols[0], bits=bits, loss=loss,
                           parse=dataclasses.replace(parse, bits=bits), info=info,
                           adaptive=(cols[1], cols[2], learners.states[0]))


_FEATS = 1 << 12  # features whose rows are found at a time (_interleaved)


def _kept(a: np.ndarray, f0: int, spare: int = 0) -> np.ndarray:
    """Which of the K learners ``a`` have a row (any of its three values not 0) for each
    feature of the block from ``f0`` (``(features, K + spare)``, a learner's column at a
    time: no ``(K, features, 3)`` mask); the ``spare`` slots after them have one for every
    feature."""
    part = a[:, f0:f0 + _FEATS]
    keep = np.zeros((part.shape[1], len(a) + spare), bool)
    keep[:, len(a):] = True
    for c in range(len(a)):
        for j in range(3):
            keep[:, c] |= part[c, :, j] != 0
    return keep


class _Learned:
    """Column ``j`` (weight, adaptive sum, normalizer) of the K learners ``a``'s rows
    ``rows`` (VW's indices: feature ``i`` of class ``c`` at ``i << shift | c``), read as the
    model writer slices it; ``spare``: the value of a slot past the K classes."""

    def __init__(self, a: np.ndarray, rows: np.ndarray, shift: int, j: int,
                 spare: float = 0.0) -> None:
        self.a, self.rows, self.shift, self.j, self.spare = a, rows, shift, j, spare

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, part: Any) -> np.ndarray:
        p = self.rows[part]
        c = p & ((1 << self.shift) - 1)
        if len(self.a) == 1 << self.shift:  # (no spare slot)
            return self.a[c, p >> self.shift, self.j]
        out = np.full(len(p), self.spare, self.a.dtype)
        ours = c < len(self.a)
        out[ours] = self.a[c[ours], p[ours] >> self.shift, self.j]
        return out


def _features(rows: np.ndarray, shift: int) -> np.ndarray:
    """The features of VW's one-against-all ``rows`` (ascending), each once."""
    f = rows >> shift
    return f[np.concatenate(([True], f[1:] != f[:-1]))] if len(f) else f


def _write_readable(job: dict[str, Any], model: Any, parse: Any, k: int,
                    bare: bool = False) -> None:
    """VW's ``--readable_model``/``--invert_hash`` of ``--oaa K`` (``model``:
    :func:`_interleaved`): its save_resume text, with ``--oaa K`` among the header's
    options, each name of ``--invert_hash`` with ``[c]`` after it for class c > 0;
    ``bare``: each nonzero weight without its sums (VW's text after a ``-t`` run)."""
    from types import SimpleNamespace

    from .._vw._vwgen import FeatureGen
    from .._vw._vwtext import feature_names, write_readable

    shift = (k - 1).bit_length()
    extra = ([f"--oaa {k}"] + ([f"--named_labels {','.join(job['names'])}"]
                               if job["names"] else [])
             + ([f"--indexing {job['indexing']}"] if job.get("indexing") is not None
                else []))
    only = bool(job.get("predict_only"))
    if job.get("readable"):
        write_readable(model, job["readable"], counters=not only, predict_only=only,
                       options=extra, bare=bare)
    if job.get("invert"):
        base = feature_names(job["paths"], SimpleNamespace(
            parse=parse, indices=_features(model.indices, shift)),
            FeatureGen.from_job(job.get("grams")))
        names = {(h << shift) + c: f"{n}[{c}]" if c else n
                 for h, n in base.items() for c in range(k)}
        write_readable(model, job["invert"], names, counters=not only, predict_only=only,
                       options=extra, bare=bare)


def _log_loss_text(table: _Table, totals: list[Any], holdout: bool,
                   kept: dict[str, float] | None = None) -> str | None:
    """VW's ``average multiclass log loss`` of a ``--probabilities`` run (None without):
    the log loss of the examples learned from, or with a holdout of its test examples,
    over the labelled weight learned from (``kept``: -i's counters under
    --preserve_performance_counters, whose labelled weight VW's counts too)."""
    if not table.probabilities:
        return None
    from .._vw._vwreport import multiclass_log_loss

    return multiclass_log_loss(float(table.log_loss[1 if holdout else 0]),
                               sum(float(t[1]) for t in totals)
                               + float((kept or {}).get("weighted_labeled_examples", 0.0)),
                               holdout)


def _write_block(out: Any, probs: np.ndarray | None, blk: Any, pred: np.ndarray,
                 after: np.ndarray, names: list[str] | None) -> None:
    """One block's lines of VW's ``-p`` of ``--oaa``: each class's probability
    (``probs``, ``--probabilities``), else the predicted class, each with its tag."""
    if probs is not None:
        text = [_format(r, b, names) for r, b in zip(probs, after.tolist())]
    elif names is None:
        if len(pred) and 0 <= pred.min() and pred.max() < 1 << 24:  # (exact in float32)
            # the class numbers as VW's -p numbers (an integer's digits) and the block's
            # tags, formatted in C: a str per example cost ~0.2 us, 0.2 s a million examples
            from .._online._progressive import block_tags
            from .._vw._vwout import prediction_lines

            out.write(prediction_lines(pred.astype(np.float64), block_tags(blk, 0, len(pred))))
            return
        text = [str(v) for v in pred.tolist()]
    else:
        text = [_class(v, names) for v in pred.tolist()]
    _write_lines(out, blk, text)


def _raw_line(scores: np.ndarray, first: int) -> str:
    """VW's ``-r`` line of ``--oaa``: every learner's score, numbered with the classes as
    the example was predicted (``first``); numbered from 0, VW lists the last learner's
    score first, as class 0, then learner i's as class i + 1 (its ``oaa.cc`` does so)."""
    v = [f"{float(x):g}" for x in scores]
    if first == 0:
        return " " + " ".join(f"{c}:{x}" for c, x in enumerate([v[-1], *v[:-1]]))
    return " " + " ".join(f"{c}:{x}" for c, x in enumerate(v, 1))


def _write_lines(out: Any, blk: Any, text: list[str]) -> None:
    """One line per example of ``blk``, each with its tag after it, as VW writes them."""
    if blk.has_tags:
        text = [f"{ln} {t}" if t else ln
                for ln, t in zip(text, (blk.tag(i) for i in range(len(text))))]
    out.write("".join(ln + "\n" for ln in text))
