"""The bodies of ``terascale linear train|predict|evaluate`` (flags: ``_cli``, their meaning: ``_cli_options``).

``train -n N`` starts N local workers through the launcher; each parses and caches its
shard of the input, then joins the job; rank 0 writes the model. ``train -t`` is VW's test
mode: it predicts with ``-i`` and learns nothing, as ``predict`` does, with VW's output.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from typing import Any

from ..._errors import ConfigError, DataError
from ..._files import storage_error
from ..._lazy import lazy_module
from .._losstable import VW_DEFAULT_LOSS, loss_code, loss_spec
from .._online._state import MAX_LABEL, MIN_LABEL

np = lazy_module("numpy", globals(), "np")

__all__ = ["evaluate", "predict", "train"]


def _inputs(args: argparse.Namespace) -> list[str]:
    """Positional files, then -d files; missing ones fail here, once, not in every worker.
    Standard input (``-``, ``/dev/stdin``) and other streams (a named pipe, ``<(cmd)``) are
    copied to a temporary file first (removed at exit): every pass, and every worker of
    ``-n N``, then reads its part of one file (a stream can be read only once, by one
    process)."""
    paths = [_spooled(p) for p in list(args.data) + list(args.data_flag)]
    if not paths:
        raise ConfigError("no input files: give DATA... or -d FILE")
    for p in paths:
        if not os.path.exists(p):
            raise DataError(f"{p}: no such file")
        if os.path.isdir(p):
            raise DataError(f"{p}: is a directory, not a data file")
    return paths


def _spooled(path: str) -> str:
    """``path`` itself when it is a regular file (or missing: _inputs says so), else a
    temporary copy of the stream it names."""
    import shutil
    import stat

    from ..._files import scratch_file

    # /dev/stdin, /dev/fd/N, /proc/self/fd/N name this process's descriptors: a worker
    # of -n N opening them would read its own standard input, not this one's
    proc_fd = os.path.abspath(path).startswith(("/dev/stdin", "/dev/fd/", "/proc/"))
    if path != "-" and not proc_fd:
        try:
            if not stat.S_ISFIFO(os.stat(path).st_mode) and not stat.S_ISCHR(
                    os.stat(path).st_mode) and not stat.S_ISSOCK(os.stat(path).st_mode):
                return _gzip_named(path, path)
        except OSError:
            return path
    fd, tmp = scratch_file("terascale-stdin-", ".vw")  # (removed with the run)
    try:
        with os.fdopen(fd, "wb") as out:
            if path == "-":
                shutil.copyfileobj(sys.stdin.buffer, out, 1 << 20)
            else:
                with open(path, "rb") as src:
                    shutil.copyfileobj(src, out, 1 << 20)
    except OSError as e:
        raise storage_error("cannot copy standard input to", tmp, e) from None
    # (VW's preamble names the stream as given: /dev/stdin, a pipe; standard input read
    # without a name, VW's no -d, is "stdin", and so is -)
    from .._vw._vwgen import INPUTS

    INPUTS[tmp] = "stdin" if path == "-" else path
    return _gzip_named(tmp, tmp)


def _gzip_named(path: str, given: str) -> str:
    """``path`` itself, or, where it holds gzip data under a name without ``.gz`` (VW's
    ``--compressed`` input, a compressed stream), a link to it named ``.gz``, which every
    reader decompresses; the preamble still names ``given``."""
    import atexit
    import shutil

    if path.endswith((".gz", ".zip")):
        return path
    try:
        with open(path, "rb") as f:
            if f.read(2) != b"\x1f\x8b":
                return path
    except OSError:
        return path  # (_inputs says what is wrong with it)
    where = tempfile.mkdtemp(prefix="terascale-gzip-")
    atexit.register(shutil.rmtree, where, True)
    link = os.path.join(where, os.path.basename(path) + ".gz")
    os.symlink(os.path.abspath(path), link)
    from .._vw._vwgen import INPUTS

    INPUTS[link] = given
    return link


def _check_output(path: str | None, flag: str, *, stream: bool = True) -> None:
    """Fail before any work when ``path`` cannot be written (not after minutes of training).

    Parameters
    ----------
    stream
        Text outputs may also go to ``-``, a link such as /dev/stdout, or a pipe; a model (``-f``)
        is renamed into place and must be a regular file.
    """
    from ..._files import replaceable

    if path is None:
        return
    if not replaceable(path) and not os.path.isdir(path):
        if stream:
            return  # standard output (/dev/stdout), a device or a named pipe
        raise ConfigError(f"{flag} {path}: not a regular file (the model is written to a "
                          f"temporary file and renamed into place); leave {flag} out to "
                          f"not save the model")
    if path == "-" and stream:
        return
    d = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ConfigError(f"{flag} {path}: is a directory, not a file name")
    if not os.path.isdir(d):
        raise ConfigError(f"{flag} {path}: directory {d} does not exist")
    if not os.access(d, os.W_OK):
        raise ConfigError(f"{flag} {path}: directory {d} is not writable")


def _load(path: str, args: argparse.Namespace | None = None, *, start: bool = True) -> Any:
    """A terascale model, or a Vowpal Wabbit binary model (a plain linear learner's; under
    ``terascale vw``, with the run's feature generation, which its header must record and
    its info then carries to what is written from it); ``start``: -i's model, with what
    the command line changes in it (:func:`vw_start`), not a model the run wrote."""
    from .._vw._vwmodel import load_model, run_generation

    generation = run_generation(args)
    model = load_model(path, generation)
    if generation:
        model.info = {**model.info, "vw_generation": generation}
    if args is not None and start:
        vw_start(model, args)
    return model


def header_range(args: argparse.Namespace) -> bool:
    """Whether a ``terascale vw`` run's logistic or poisson loss starts its prediction range
    at -i's VW model's header range (``TrainOptions.header_range``): VW reads a
    save_resume model's range over the [-50, 50] those losses start from (a squared loss
    model's [-3, 35.5] clips a logistic run's predictions there, widened to its labels);
    a ``--predict_only_model`` model's range it leaves at [-50, 50]."""
    if not (getattr(args, "vw_mode", False) and args.initial) or \
            getattr(args, "oaa", None) is not None:
        return False
    from .._losstable import loss_spec
    from .._vw._vwmodel import is_vw_model, read_vw_model

    if loss_spec(args.loss).clip != "labels50" or not is_vw_model(args.initial):
        return False
    header = read_vw_model(args.initial, plain=True, records=False)
    return bool(header.info.get("vw_counters"))


def vw_start(model: Any, args: argparse.Namespace) -> None:
    """What a ``terascale vw`` command line changes in -i's model, as VW does (the same
    from ``job["interactions"]`` and ``job["initial_t"]`` in a worker): ``-q``/``--cubic``/
    ``--interactions`` given replace the model's three, ``--ignore``/``--keep``/
    ``--ignore_linear`` given add to the model's and ``--noconstant`` given drops its
    constant feature (``args.vw_interactions``: those parse options; the constant's
    weight stays in the model, unused);
    ``--initial_t`` (``args.vw_initial_t``) gives every one of the 2**b weights that sum
    to start from (VW's gd sets it before it reads the model), the model's rows over it:
    their weights, and a save_resume model's sums and learner state; a model without that
    state starts the learner as ``--initial_t`` alone does (that many examples of norm 1).
    ``--min_prediction``/``--max_prediction`` (``args.vw_range``) replace the bounds of
    the label range a model without that state starts from (its header's); a save_resume
    model's own range wins, as in VW."""
    from .._online._state import MAX_LABEL, MIN_LABEL, new_state

    # (a VW model read without its save_resume state has no counters; terascale's models
    # keep the state wherever they have the sums)
    resume = model.adaptive is not None and bool(model.info.get("vw_counters", True))
    given = getattr(args, "vw_interactions", None)
    if given:
        import dataclasses

        model.parse = dataclasses.replace(model.parse, **{
            k: (tuple(dict.fromkeys((*getattr(model.parse, k), *v)))
                if k in ("ignore", "keep", "ignore_linear") else tuple(v)
                if isinstance(v, list) else v)
            for k, v in given.items()})
    bounds = getattr(args, "vw_range", None)
    if bounds and not resume:
        if model.adaptive is None:
            zeros = np.zeros(len(model.indices), np.float32)
            model.adaptive = (zeros, zeros.copy(), new_state())
        state = model.adaptive[2]
        for at, v in zip((MIN_LABEL, MAX_LABEL), bounds):
            if v is not None:
                state[at] = v
    t = getattr(args, "vw_initial_t", None)
    if t:
        _initial_t(model, float(t), resume)


def _initial_t(model: Any, t: float, resume: bool) -> None:
    from .._online._state import SUM_NORM_X, TOTAL_WEIGHT, new_state

    bits = model.parse.bits
    if bits > 24:
        raise ConfigError(f"--initial_t with -i sets all 2^b weights' sums: up to -b 24, "
                          f"not -b {bits}")
    size = 1 << bits
    idx = np.asarray(model.indices, np.int64)
    w, g2, nrm = np.zeros(size, np.float32), np.full(size, t, np.float32), \
        np.zeros(size, np.float32)
    w[idx] = model.weights
    if resume:
        g2[idx], nrm[idx] = model.adaptive[0], model.adaptive[1]
        state = model.adaptive[2]
    else:  # (VW's counters start at t, its model keeps initial_t)
        state = model.adaptive[2].copy() if model.adaptive is not None else new_state()
        state[TOTAL_WEIGHT] = state[SUM_NORM_X] = t
        model.info = {**model.info, "vw_counters": {"t": t, "initial_t": t}}
    model.indices = np.arange(size, dtype=np.uint32)
    model.weights, model.adaptive = w, (g2, nrm, state)


def _link(args: argparse.Namespace, default: str) -> str:
    from .._vw._vwflags import LINKS

    how = args.link or default
    if how not in LINKS:
        raise ConfigError(f"--link {how}: VW's links are {', '.join(LINKS)}")
    return how


def kept_link(args: argparse.Namespace, how: str) -> str | None:
    """The ``--link`` a run's model keeps: any but identity, and identity where it was
    given (or kept in -i's model), as VW keeps it; None: none."""
    return how if how != "identity" or args.link else None


def train(args: argparse.Namespace) -> int:
    from ._cli_options import train_options

    if args.nprocs < 1:
        raise ConfigError(f"-n must be >= 1, not {args.nprocs}")
    if args.quiet:  # not even the one line on a job of size 1 (terascale._init)
        from ..._env import set_quiet

        set_quiet()
    if args.holdout_after and args.nprocs > 1:
        raise ConfigError(f"--holdout_after {args.holdout_after} with -n N: the compiled "
                          f"workers' only (not with TERASCALE_NO_CEXT=1, --average-every, "
                          f"...; or give --holdout_period K)")
    options = train_options(args)  # (a bare `--bfgs FILE` gives FILE back to the inputs)
    vw_mode = getattr(args, "vw_mode", False)
    options["vw_text"] = options["vw_labels"] = vw_mode
    if getattr(args, "min_prediction", None) is not None or \
            getattr(args, "max_prediction", None) is not None:
        options["fixed_range"] = True
    if header_range(args):
        options["header_range"] = True
    paths = _inputs(args)
    how = _link(args, "identity")
    _binary_link(args.binary, args.link)
    raw = getattr(args, "raw_predictions", None)
    kept: list[dict[str, Any]] = [{}]  # (-i's model's -b, -q, ...: VW prints them)

    def opening() -> None:  # once the command line is known to be good
        if vw_mode and not args.quiet:
            from .._vw._vwmodel import model_t
            from .._vw._vwreport import preamble

            # (VW prints the t of -i's save_resume model there)
            t = (model_t(args.initial) if args.initial else 0.0) or args.initial_t or 0.0
            print(preamble({**kept[0], **options}, paths, model=args.model,
                           predictions=args.predictions,
                           raw=getattr(args, "raw_predictions", None), initial=args.initial,
                           cache=getattr(args, "vw_cache", None),
                           initial_t=t), file=sys.stderr)
        elif not args.quiet and not args.initial:
            _differences(options)

    if getattr(args, "indexing", None) is not None and not args.oaa:
        raise ConfigError("--indexing goes with --oaa K (VW keeps it in the model of the "
                          "binary learner too, where it means nothing; terascale refuses "
                          "it there)")
    if args.testonly and args.oaa is None:  # (--oaa -t: its K learners score the data)
        return _test_only(args, paths, how, opening)
    _check_output(args.model, "-f", stream=False)
    for path, flag in ((args.predictions, "-p"), (raw, "-r"),
                       (args.readable_model, "--readable_model"),
                       (args.invert_hash, "--invert_hash")):
        _check_output(path, flag)
    if (args.predictions or raw) and args.nprocs > 1:
        raise ConfigError("-p/--predictions (and -r) while training needs -n 1: progressive "
                          "predictions come from one learner in input order, and with -n N "
                          "each worker learns from its own shard; train with -n N, then "
                          "`terascale linear predict DATA -i MODEL -p FILE`")
    if args.probabilities and not args.oaa:
        raise ConfigError("--probabilities goes with --oaa K (each class's probability)")
    if getattr(args, "scores", False) and not args.oaa:
        raise ConfigError("--scores goes with --oaa K (each class's score)")
    if args.oaa is not None:
        from ._oaa import train_oaa

        return train_oaa(args, paths, options, opening)
    if args.initial:
        initial = _load(args.initial, args)  # a bad model fails here, once
        _follow_model(options, initial, args)
        kept[0] = initial.parse.to_dict()
        args.link = args.link or initial.info.get("link")  # (VW keeps --link: given)
        how = _link(args, "identity")
        if initial.info.get("binary"):  # (and --binary)
            args.binary = options["binary"] = True
        for k, v in initial.info.get("vw_rates", {}).items():  # VW's model's -l, --power_t
            if not getattr(args, f"{k}_given", True):
                options[k] = v
                args._model_rates = {**getattr(args, "_model_rates", {}), k: v}
    from .._options import TrainOptions

    # bad options fail here, once, rather than in every worker
    checked: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                               for k, v in options.items()}
    TrainOptions(**checked)
    opening()
    model_path = args.model
    tmp_dir = None
    if model_path is None and (args.readable_model or args.invert_hash) and args.nprocs > 1:
        tmp_dir = tempfile.mkdtemp(prefix="terascale-model-")
        model_path = os.path.join(tmp_dir, "model")
    try:
        model = _run_train(args, paths, model_path, options, how)
        if isinstance(model, int):
            if model:
                return model
            model = None
        if model is None and (args.readable_model or args.invert_hash):
            from .._vw._vwmodel import counters_out

            model = _load(model_path, args, start=False)  # type: ignore[arg-type]
            kept = counters_out(model.info.get("vw_counters") or {})
            if kept is not None:  # (the workers' VW model: the run's counters, as -n 1's)
                model.info = {**model.info, "vw_counters_out": kept}
        if model is not None and args.readable_model:
            from .._vw._vwtext import write_readable

            write_readable(model, args.readable_model,
                           predict_only=bool(getattr(args, "predict_only_model", False)))
        if model is not None and args.invert_hash:
            from .._vw._vwtext import feature_names, write_readable

            write_readable(model, args.invert_hash, feature_names(paths, model),
                           predict_only=bool(getattr(args, "predict_only_model", False)))
    finally:
        if tmp_dir is not None:
            import shutil

            shutil.rmtree(tmp_dir, ignore_errors=True)
    return 0


def _differences(options: dict[str, Any]) -> None:
    """One line on where this run's defaults are not VW's (``terascale vw`` has VW's)."""
    from .._options import TrainOptions

    diffs = []
    if options["loss"] == TrainOptions.loss != VW_DEFAULT_LOSS:
        diffs.append(f"{TrainOptions.loss} loss (VW: {VW_DEFAULT_LOSS})")
    if options.get("bfgs") or options.get("cg"):
        if options["l2"] is None:
            diffs.append("L2 = 1 in the batch objective (VW: 0)")
        if options["normalize"] == "std" or (options["normalize"] == "auto"
                                             and options["format"] == "csv"):
            diffs.append("standardized columns (VW: raw)")
    if diffs:
        print(f"terascale linear train: {'; '.join(diffs)}; `terascale vw` runs with VW's "
              f"defaults", file=sys.stderr)


def _follow_model(options: dict[str, Any], initial: Any, args: argparse.Namespace) -> None:
    """With -i, parse flags left at their defaults follow the model (VW keeps -b and -q in
    the model file); flags given must agree (train() says which one does not)."""
    from .._io._dataset import ParseOptions
    from .._names import opt

    defaults = ParseOptions().to_dict()
    have = initial.parse.to_dict()
    for k in getattr(args, "vw_interactions", None) or {}:  # (vw_start made them -i's)
        options.pop(k, None)
    for k, v in defaults.items():
        if k in options and options[k] == v:
            del options[k]
        elif k in options and options[k] != have[k]:  # here, once, not in every worker
            raise ConfigError(f"{opt(k, options[k])}: the initial model {args.initial} was "
                              f"trained with {opt(k, have[k])}")
    if args.loss is None:
        del options["loss"]


def _rates(args: argparse.Namespace) -> dict[str, float]:
    """The -l/--power_t a VW command line gave, or -i's model had (VW keeps them in its
    model, and in the model it writes from it)."""
    given = {k: float(getattr(args, k)) for k in ("learning_rate", "power_t")
             if getattr(args, f"{k}_given", False)}
    return {**getattr(args, "_model_rates", {}), **given}


def kept_rules(args: argparse.Namespace) -> list[str]:
    """The update rules a VW command line named on VW's default update (all of
    ``--adaptive``, ``--normalized`` and ``--invariant``: the other choices are
    :mod:`.._vw._vwsgd`'s), which VW keeps in its save_resume model's options."""
    if getattr(args, "plain_rule", True):
        return []
    return [n for n in ("adaptive", "invariant", "normalized") if getattr(args, n, False)]


def _vw_run(args: argparse.Namespace) -> dict[str, Any]:
    """A ``terascale vw`` run's feature generation, -i's preserved counters and the
    --initial_t its starting weights carry, for the job (:func:`._cli_options.job_json`);
    ``prog``: the command whose name a worker's error starts with."""
    return {"generation": getattr(args, "vw_generation", None),
            "preserved": getattr(args, "vw_preserved", None),
            "interactions": getattr(args, "vw_interactions", None),
            "initial_t": getattr(args, "vw_initial_t", None),
            "label_range": getattr(args, "vw_range", None),
            "rules": kept_rules(args),
            "prog": "terascale vw" if hasattr(args, "vw_generation") else "terascale linear"}


def _run_train(args: argparse.Namespace, paths: list[str], model_path: str | None,
               options: dict[str, Any], how: str) -> Any:
    """Train in this process (-n 1: returns the model) or on N workers (returns the
    launcher's exit status)."""
    from ._cli_options import job_json

    if args.nprocs == 1:
        from .._vw._vwout import all_or_none, link, prediction_lines, prediction_writers
        from ._worker import run_train

        writers = prediction_writers(args)

        def progressive(p: np.ndarray, tags: list[str] | None,
                        raw: np.ndarray | None = None) -> None:
            for writer, linked in writers:  # (-r: the scores before VW's clip)
                writer.write(prediction_lines(link(p, how, args.binary) if linked
                                              else p if raw is None else raw, tags))
        progressive.raw = any(not linked for _, linked in writers)  # type: ignore[attr-defined]
        with all_or_none(writers):
            model = run_train(json.loads(job_json(paths, model_path or "", args.initial,
                                                  options, **_model_format(args),
                                                  link=kept_link(args, how),
                                                  rates=_rates(args),
                                                  best_constant=_best_constant(args),
                                                  **_vw_run(args))),
                              predictions=progressive if writers else None)
        return model
    from ...launch import LaunchOptions, launch
    from .._warm import forking, warm_kernels  # not .kernels: that imports numba at once

    job = job_json(paths, model_path or "", args.initial, options, **_model_format(args),
                   link=kept_link(args, how), rates=_rates(args),
                   best_constant=_best_constant(args),
                   **_vw_run(args))
    # the workers forked from here, with the learner loaded (_warm.forking), or started
    # as programs of their own
    fork = forking(lambda: _worker_main(job), options)
    warm_kernels()  # compile once here rather than N times at once in the workers
    code = launch([sys.executable, "-m", "terascale.linear._front._worker", job],
                  # unbound: a worker's reader and statistics threads use every core, and
                  # in a chained pass one worker learns while the others wait
                  LaunchOptions(nprocs=args.nprocs, timeout=args.timeout,
                                prefix_output=False, cpu_bind=False, fork=fork))
    return code


def _worker_main(job: str) -> int:
    """A ``-n N`` worker forked from the launcher: the worker module's ``main``."""
    from ._worker import main

    return main([job])


def _best_constant(args: argparse.Namespace) -> bool:
    """Whether VW's closing block reports the best constant (not with
    ``--dont_output_best_constant``)."""
    return not getattr(args, "dont_output_best_constant", False)


def _model_format(args: argparse.Namespace) -> dict[str, Any]:
    """How -f writes the model: terascale's format or VW's (``--model-format``; VW's by
    default under ``terascale vw``), and VW's ``--predict_only_model`` form."""
    fmt = args.model_format or ("vw" if getattr(args, "vw_mode", False) else "terascale")
    if fmt not in ("vw", "terascale"):
        raise ConfigError(f"--model-format {fmt}: vw or terascale")
    return {"model_format": fmt,
            "predict_only": bool(getattr(args, "predict_only_model", False))}


def _clip(model: Any, s: np.ndarray, loss: str | None = None) -> np.ndarray:
    """VW's prediction bounds, as the loss's row says (``LOSS_TABLE``'s ``clip``): the
    labels the learner saw, or those widened to [-50, 50] (logistic, poisson);
    ``loss``: the run's, under ``terascale vw``: VW's -t clips to the range its model's
    header holds, whatever the loss (a logistic or poisson model's [-50, 50] widened to
    its labels, or the ``--min_prediction``/``--max_prediction`` it was trained with, one
    value where they were equal)."""
    s = np.where(np.isnan(s), 0.0, s)  # (VW's finalize_prediction: a NaN score gives 0)
    clip = loss_spec(loss or model.loss).clip
    lo, hi = _label_range(model)
    header = loss is not None and _has_range(model)
    if header:
        clip = "labels"
    if clip == "fixed":
        return np.clip(s, -50.0, 50.0)
    if clip == "labels50":
        return np.clip(s, min(lo, -50.0), max(hi, 50.0))
    if lo == hi and not header:  # (a model without the learner's range)
        return s
    return np.where(s > hi, hi, np.where(s < lo, lo, s))  # (VW's order: lo > hi clips too)


def _bounds(model: Any) -> tuple[float, float]:
    """The range :func:`_clip` clipped to (-inf, inf where it did not): VW's squared loss
    of a prediction past a bound (``_losses.ranged_loss32``)."""
    lo, hi = _label_range(model)
    return (lo, hi) if lo != hi else (-math.inf, math.inf)


def _has_range(model: Any) -> bool:
    """Whether the model holds its learner's label range (a VW model's header does)."""
    ad = model.adaptive
    return ad is not None and len(ad[2]) >= 6


def _label_range(model: Any) -> tuple[float, float]:
    """The label range the model's learner held ([0, 0] where it has none: VW's start)."""
    ad = model.adaptive
    return (float(ad[2][MIN_LABEL]), float(ad[2][MAX_LABEL])) if _has_range(model) \
        else (0.0, 0.0)


def _loss(kind: str, s: np.ndarray, y: np.ndarray, binary: bool, tau: float = 0.5,
          q: float | None = 0.5, raw: bool = False,
          bounds: tuple[float, float] = (-math.inf, math.inf)) -> np.ndarray:
    """Each example's loss (VW's, in float: ``_losses.losses32``); ``binary``: 0/1 loss
    where the label is -1 or 1 (VW's other labels keep the loss function's); ``raw``:
    labels as VW reads them (a hinge or logistic label as it is, not by its sign);
    ``bounds``: the range the predictions were clipped to (:func:`_bounds`)."""
    from .._losses import losses32

    lv = losses32(loss_code(kind, raw_labels=raw, tau=tau, q=q), np.asarray(s, np.float64),
                  np.asarray(y, np.float64), *bounds)
    if binary:
        pm = np.abs(y) == 1
        lv[pm] = (s[pm] > 0) != (y[pm] > 0)
    return lv


def _counted(blk: Any, i: int) -> int:
    """Example ``i``'s feature count as VW counts it (:meth:`Block.counted`; the compiled
    run's blocks hold no --ignore_linear)."""
    if hasattr(blk, "counted"):
        return int(blk.counted(i, i + 1)[0])
    return int(blk.indptr[i + 1] - blk.indptr[i])


class _TestProgress:
    """VW's progress table of a -t run, at VW's cadence in weight (``_progress``)."""

    def __init__(self, how: str, binary: bool) -> None:
        from .._online._progress import LINK, Progress

        LINK[:] = [how]
        self.prog, self.binary = Progress(sys.stderr), binary
        self.prog.header()
        self.due = self.prog.first_due()
        self.sums = np.zeros(2)  # labelled loss, labelled weight
        self.prev = self.sums.copy()
        self.weight, self.count = 0.0, 0
        #: the run's loss (its name): VW's lines on the labels it, or --binary, does not
        #: expect (``_progress.label_warnings``)
        self.loss = ""

    def block(self, blk: Any, s: np.ndarray, loss: np.ndarray, labelled: np.ndarray) -> None:
        """The lines due in one block: ``s`` its predictions, ``loss`` each example's
        weighted loss and ``labelled`` its weight where labelled (else 0)."""
        if self.loss:
            from .._online._progress import label_warnings, warns_of_labels

            if warns_of_labels(self.loss, self.binary):
                label_warnings(blk.labels, blk.weights, None, 0, len(s), False, sys.stdout,
                               loss=self.loss, binary=self.binary)
        cum_w = self.weight + np.cumsum(blk.weights.astype(np.float64))
        cum_l, cum_lw = self.sums[0] + np.cumsum(loss), self.sums[1] + np.cumsum(labelled)
        since = self.prog.since  # (VW's sums since the last line, kept apart: see fold)
        self.prog.folds = True
        cut = 0
        while True:
            at = max(int(np.searchsorted(cum_w, self.due)), cut)  # (a line an example at most)
            if at >= len(s):
                break
            since[0] += float(np.sum(loss[cut:at + 1]))
            since[1] += float(np.sum(labelled[cut:at + 1]))
            cut = at + 1
            now = np.array([cum_l[at], cum_lw[at]])
            self.prog.line(now, self.prev, self.count + at + 1, float(cum_w[at]),
                           float(blk.labels[at]), float(s[at]),
                           _counted(blk, at), self.binary)
            self.prev = now
            self.due = self.prog.next_due(float(cum_w[at]))
        since[0] += float(np.sum(loss[cut:]))
        since[1] += float(np.sum(labelled[cut:]))
        if len(s):
            self.weight, self.count = float(cum_w[-1]), self.count + len(s)
            self.sums = np.array([cum_l[-1], cum_lw[-1]])


def _binary_link(binary: bool, link: str | None) -> None:
    """--binary with a link whose output is always positive, given or kept in -i's model:
    refused (VW's --binary takes the sign of the linked prediction: every one 1)."""
    if binary and link in ("logistic", "poisson"):
        raise ConfigError(f"--binary with --link {link}: one or the other (VW applies "
                          f"--binary to the {link} link's output, which is always "
                          f"positive: every prediction 1)")


def _test_only(args: argparse.Namespace, paths: list[str], how: str,
               opening: Any = None) -> int:
    """VW's -t: predictions of -i's model, no learning; the average loss on stderr."""

    vw_mode = getattr(args, "vw_mode", False)
    if not args.initial and not vw_mode:
        raise ConfigError("-t (test only) predicts with a trained model: give -i MODEL")
    _check_output(args.predictions, "-p")
    if args.model:
        _check_output(args.model, "-f", stream=False)
    scores = getattr(args, "raw_predictions", None)  # VW's -r: the scores before the clip
    for path, flag in ((scores, "-r"),
                       (getattr(args, "readable_model", None), "--readable_model"),
                       (getattr(args, "invert_hash", None), "--invert_hash")):
        _check_output(path, flag)
    model = _load(args.initial, args) if args.initial else _zero_model(args)
    if vw_mode and getattr(args, "oaa", None) is None:  # (VW's reading of label sections)
        import dataclasses

        model.parse = dataclasses.replace(model.parse, lenient_labels=True)
    how = _link(args, model.info.get("link", how))  # (VW keeps --link in the model)
    args.binary = args.binary or bool(model.info.get("binary"))  # (and --binary)
    _binary_link(args.binary, how)
    if opening is not None:
        opening()
    from .._online._onlinepass import LABELS, distinct_labels
    from .._online._progress import label_notes
    from .._vw._vwreport import nan_predictions, running_sum

    # VW reports the loss the command line names, whatever the model was trained with
    loss = (args.loss or model.loss) if vw_mode else model.loss
    total = np.zeros(6)  # loss, labelled weight, examples, all examples' weight, the
    # labelled examples' label x weight, features (VW's counters)
    labels: list[float] = []
    # VW's --holdout_after N holds the examples after the N-th out under -t too: the table
    # and counters are the first N's, the average loss the held-out ones' (marked h)
    after = int(getattr(args, "holdout_after", 0) or 0) if vw_mode else 0
    held = np.zeros(2)  # the held-out examples' loss and labelled weight
    seen = 0
    table = _TestProgress(how, args.binary) if vw_mode and not args.quiet else None
    if table is not None:
        table.loss = args.loss or model.loss
    with _Output(args.predictions) as out, _Output(scores) as raw_out:
        for blk, raw in model.predict_blocks(paths, vw_float=vw_mode):  # (streamed)
            nan_predictions(raw, seen, sys.stdout if table is not None else None)
            s = _clip(model, raw, loss if vw_mode else None)
            if args.predictions:  # VW's -t writes predictions only where -p says
                out.write(_lines(blk, s, how, args.binary))
            if scores:
                raw_out.write(_lines(blk, raw, "identity", False))
            y, w = blk.labels.astype(np.float64), blk.weights.astype(np.float64)
            ok = ~np.isnan(y) & (w > 0)
            lv = np.zeros(len(s))  # (VW's loss times the weight, in float)
            lv[ok] = np.float32(w[ok]) * np.float32(_loss(loss, s[ok], y[ok], args.binary,
                                                          args.quantile_tau,
                                                          args.expectile_q, raw=vw_mode,
                                                          bounds=_bounds(model)))
            if table is not None and blk.notes:  # (VW's parser tells of every example)
                label_notes(blk.notes, sys.stdout)
            if len(labels) < LABELS:
                labels = distinct_labels(labels, y[~np.isnan(y)])
            feats = np.asarray(blk.counted(0, len(s)))
            k = len(s) if not after else min(len(s), max(0, after - seen))
            seen += len(s)
            if k < len(s):  # (the examples after the N-th: held out)
                held[0] = running_sum(held[0], lv[k:])
                held[1] += float(w[k:][ok[k:]].sum())
                from types import SimpleNamespace

                blk = SimpleNamespace(labels=blk.labels[:k], weights=blk.weights[:k],
                                      indptr=blk.indptr[:k + 1], notes=(),
                                      counted=lambda a, b, f=feats: f[a:b])
                s, lv, y, w, ok, feats = s[:k], lv[:k], y[:k], w[:k], ok[:k], feats[:k]
            if table is not None:
                table.block(blk, s, lv, np.where(ok, w, 0.0))
            has = ~np.isnan(y)
            total[0] = running_sum(total[0], lv)  # (VW's double sum, in its order)
            total += [0.0, float(w[ok].sum()), len(s), float(w.sum()), 0.0,
                      int(feats.sum())]
            total[4] = running_sum(total[4], y[has].astype(np.float64)
                                   * w[has].astype(np.float64))  # (VW's label sum too)
    if getattr(args, "vw_mode", False):
        if not args.quiet:
            from .._vw._vwreport import test_block

            print(test_block(int(total[2]), float(total[1]), float(total[0]),
                             float(total[3]), label_sum=float(total[4]),
                             features=int(total[5]), labels=labels,
                             loss_name=loss if _best_constant(args) else None,
                             tau=args.quantile_tau, label_range=_label_range(model),
                             holdout=tuple(held) if after else None), file=sys.stderr)
    elif not args.quiet:
        avg = f"{total[0] / total[1]:.6f}" if total[1] else "n.a. (no labels)"
        print(f"test only: {int(total[2])} examples, average loss = {avg}"
              f"{' (0/1 loss)' if args.binary else ''}", file=sys.stderr)
    progress = None if table is None else [
        float(table.due), float(table.prog.since[0]), float(table.prev[1])]
    sums = [float(total[0]), float(total[1]), 0.0, 0.0, float(total[2]), float(total[5]),
            float(total[3] - total[1]), float(total[2]), float(total[5]), float(total[4])]
    _write_unchanged(args, model, paths, (sums, progress) if vw_mode else None)
    return 0


def _write_unchanged(args: argparse.Namespace, model: Any, paths: list[str],
                     run: tuple[list[float], list[float] | None] | None = None) -> None:
    """-t with -f, --readable_model or --invert_hash: VW writes the model it tested with
    (nothing learned), so that ``-t -i A -f B`` converts a model; here, too. ``run``:
    the test run's sums (a row of ``pass_totals``) and where its table stopped
    (:func:`.._vw._vwmodel.run_counters`): the text of a VW model (either form) is then
    VW's, the test run's counters (``t`` going on from a save_resume model's) with each
    nonzero weight alone."""
    from .._vw._vwmodel import run_generation, save_model

    if run_generation(args):
        model.info = {**model.info, "vw_generation": run_generation(args)}
    if args.model:
        fmt = _model_format(args)
        save_model(model, args.model, fmt["model_format"], predict_only=fmt["predict_only"])
    predict_only = bool(getattr(args, "predict_only_model", False))
    bare = run is not None and not predict_only and model.adaptive is not None
    if bare:  # (VW's counters of the test run, its one pass; its t goes on from the model's)
        import copy

        model = copy.copy(model)
        t0 = float((model.info.get("vw_counters") or {}).get("t", 0.0))
        model.info = {**model.info, "pass_totals": [run[0]], "vw_progress": run[1],
                      "vw_current_pass": 1, "vw_t0": t0}
    if getattr(args, "readable_model", None):
        from .._vw._vwtext import write_readable

        write_readable(model, args.readable_model, predict_only=predict_only,
                       counters=bare, bare=bare)
    if getattr(args, "invert_hash", None):
        from .._vw._vwtext import feature_names, write_readable

        write_readable(model, args.invert_hash, feature_names(paths, model),
                       predict_only=predict_only, counters=bare, bare=bare)


def _zero_model(args: argparse.Namespace) -> Any:
    """VW's ``-t`` without ``-i``: every weight 0, every prediction 0."""
    from .._io._dataset import ParseOptions
    from .._model import LinearModel
    from ._cli_options import train_options

    o = train_options(args)
    parse = ParseOptions(**{k: v for k, v in o.items() if k in ParseOptions().to_dict()})
    return LinearModel(indices=np.zeros(0, np.uint32), weights=np.zeros(0, np.float32),
                       parse=parse, loss=o["loss"])


def _lines(blk: Any, s: np.ndarray, how: str, binary: bool) -> str:
    from .._online._progressive import block_tags
    from .._vw._vwout import link, prediction_lines

    return prediction_lines(link(s, how, binary), block_tags(blk, 0, len(s)))


class _Output:
    """-p FILE written atomically, or standard output (a closed pipe ends quietly)."""

    def __init__(self, path: str | None) -> None:
        from .._vw._vwout import AtomicText

        self.file = AtomicText(path) if path else None

    def write(self, text: str) -> None:
        if self.file is not None:
            self.file.write(text)
            return
        try:
            sys.stdout.write(text)
        except BrokenPipeError:
            raise
        except OSError as e:  # `> /dev/full`, a full disk: one line, not a traceback
            raise storage_error("cannot write the predictions to", "standard output",
                                e) from None

    def __enter__(self) -> _Output:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if self.file is not None:
            if exc_type is None:
                self.file.commit()
            else:
                self.file.discard()
        return exc_type is BrokenPipeError  # `... | head`: the reader has what it wanted


def predict(args: argparse.Namespace) -> int:

    paths = _inputs(args)
    _check_output(args.predictions, "-p")
    model = _load(args.initial)
    how = _link(args, "identity" if args.raw else loss_spec(model.loss).link)
    if args.raw and args.link == "logistic":
        raise ConfigError("--raw and --link logistic exclude each other")
    with _Output(args.predictions) as out:
        for blk, raw in model.predict_blocks(paths):  # streamed: any file size
            out.write(_lines(blk, _clip(model, raw), how, args.binary))
    return 0


def evaluate(args: argparse.Namespace) -> int:

    t0 = time.perf_counter()
    paths = _inputs(args)
    model = _load(args.initial)
    m = model.evaluate(paths)
    if not m["examples"]:
        raise DataError(f"{', '.join(paths)}: no labelled examples to evaluate on "
                        f"(use predict for unlabelled data)")
    m["seconds"] = round(time.perf_counter() - t0, 3)
    if args.json:  # strict JSON: an undefined metric (AUC of one class) is null, not NaN
        print(json.dumps({k: None if isinstance(v, float) and v != v else v
                          for k, v in m.items()}))
    else:
        for k, v in m.items():
            print(f"{k:<10} {v:.6f}" if isinstance(v, float) else f"{k:<10} {v}")
    return 0
