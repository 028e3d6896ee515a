"""One-against-all multiclass (VW's ``--oaa K``): K binary learners, one per class.

VW's ``oaa`` reduction learns, for each example of class c, K binary examples: label +1
for class c's learner and -1 for the others. Each learner has its own weights (VW
interleaves them in one array, so they never collide) and its own learner state (VW
keeps the normalized update's sums per interleaved model), so the K learners are
independent and can be trained one after another on the same data with the labels
rewritten. That is what this module does, with the online learner terascale already
shares with VW bit for bit; the prediction is the class whose learner scores highest
(the first on a tie, as VW), and with ``--probabilities`` each learner's logistic
probability, normalized to sum 1 (VW's output: ``1:0.25 2:0.25 ...``).

The reported ``average loss`` is VW's multiclass 0/1 loss of the progressive predictions
(with passes and holdout: the best pass's holdout error, marked ``h``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import sys
import tempfile
from typing import Any

import numpy as np

from ..._errors import ConfigError, DataError
from .._losses import loss_spec

__all__ = ["relabel", "train_oaa"]


def _open_text(path: str) -> Any:
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8", errors="surrogateescape")
    return open(path, encoding="utf-8", errors="surrogateescape")


def _label(line: str, where: str) -> tuple[float, str, str]:
    """(class label or nan, the label's text, the rest of the line) of one VW line."""
    bar = line.find("|")
    head = line if bar < 0 else line[:bar]
    tokens = head.split()
    if not tokens or tokens[0].startswith("'"):
        return math.nan, "", line
    try:
        y = float(tokens[0])
    except ValueError:
        raise DataError(f"{where}: multiclass label {tokens[0]!r} is not a class number "
                        f"1..K (--oaa)") from None
    start = head.index(tokens[0])
    return y, tokens[0], line[start + len(tokens[0]):]


def relabel(paths: list[str], k_classes: int, out_dir: str
            ) -> tuple[list[list[str]], np.ndarray, np.ndarray]:
    """Write, for each learner c = 0..K-1, the input with labels +1 (its class) or -1
    (other classes), unlabelled lines unchanged. Returns the K lists of files, the
    examples' class labels (nan for unlabelled ones) and the first class number at each
    example (1 until a label 0 is seen, as VW's oaa: labels are then 0..K-1 from that
    example on; a label K first fixes them to 1..K)."""
    files: list[list[str]] = [[] for _ in range(k_classes)]
    labels: list[float] = []
    first: list[int] = []
    indexing = 2  # VW's: 2 undecided (classes 1..K meanwhile), then 0 or 1
    for n, path in enumerate(paths):
        outs = []
        for c in range(k_classes):
            name = os.path.join(out_dir, f"class{c + 1}-{n}.vw")
            files[c].append(name)
            outs.append(open(name, "w", encoding="utf-8", errors="surrogateescape"))
        try:
            with _open_text(path) as f:
                for i, line in enumerate(f, 1):
                    if not line.strip():
                        for o in outs:
                            o.write(line)
                        continue
                    y, _, rest = _label(line, f"{path}:{i}")
                    if indexing == 2 and y == 0:
                        indexing = 0
                    elif indexing == 2 and y == k_classes:
                        indexing = 1
                    labels.append(y)
                    base = 0 if indexing == 0 else 1
                    first.append(base)
                    for c, o in enumerate(outs):  # (a label out of range: -1 for all,
                        if math.isnan(y):             # as VW, which warns)
                            o.write(line)
                        else:
                            o.write(("1" if y == c + base else "-1") + rest)
        finally:
            for o in outs:
                o.close()
    return files, np.array(labels, np.float64), np.array(first, np.int64)


def _probabilities(scores: np.ndarray) -> np.ndarray:
    p = (1.0 / (1.0 + np.exp(-scores.astype(np.float32)))).astype(np.float32)
    return p / p.sum(axis=1, keepdims=True)


def _format(row: np.ndarray, base: int) -> str:
    return " ".join(f"{c + base}:{float(v):.6g}" for c, v in enumerate(row))


def train_oaa(args: argparse.Namespace, paths: list[str], options: dict[str, Any],
              opening: Any = None) -> int:
    """``--oaa K``: K learners; on one worker VW's progressive multiclass predictions
    (``-p``) and its closing block, on ``-n N`` workers the averaged learners (``-f``)."""
    from .._io._dataset import ParseOptions
    from .._passes import holdout_mask
    from .._vw._vwtext import AtomicText
    from ._cli_options import job_json
    from ._worker import run_train

    k_classes = int(args.oaa)
    if k_classes < 2:
        raise ConfigError(f"--oaa {k_classes}: needs at least 2 classes")
    if args.nprocs != 1 and (args.predictions or args.probabilities):
        raise ConfigError("--oaa with -n N: -p/--probabilities need -n 1 (progressive "
                          "predictions come from one learner in input order); train with "
                          "-n N and -f, then predict with -i MODEL -t")
    if args.readable_model or args.invert_hash or args.initial:
        raise ConfigError("--oaa: -i, --readable_model and --invert_hash are not "
                          "supported with one-against-all (predictions: -p; -f writes "
                          "VW's model)")
    if args.model and getattr(args, "model_format", None) == "terascale":
        raise ConfigError("--oaa -f writes VW's one-against-all model only "
                          "(--model-format vw)")
    if args.probabilities and loss_spec(options["loss"]).link != "logistic":
        raise ConfigError("--probabilities needs --loss_function logistic (as in VW)")
    if opening is not None:  # the preamble, once the options are known to be good
        opening()
    tmp = tempfile.mkdtemp(prefix="terascale-oaa-")
    try:
        files, labels, base = relabel(paths, k_classes, tmp)
        # VW interleaves the K learners in its 2**b weights: class c of feature index i
        # at (i * 2**s + c) mod 2**b, s = ceil(log2 K), so each learner has b - s bits
        shift = (k_classes - 1).bit_length()
        if options["bits"] - shift < 1:
            raise ConfigError(f"--oaa {k_classes} -b {options['bits']}: VW gives each "
                              f"class 2**(b - {shift}) weights; use -b {shift + 1} or more")
        options = dict(options, bits=options["bits"] - shift)
        seed = _seed(options, tmp)
        scores = []
        models = []
        opts = dict(options, progress=False, vw_text=False)
        for k in ParseOptions().to_dict():  # they come with the seed model
            opts.pop(k, None)
        if args.nprocs != 1:
            return _train_workers(args, files, seed, opts, tmp, k_classes)
        for c in range(k_classes):
            got: list[np.ndarray] = []
            model = run_train(json.loads(job_json(files[c], "", seed, opts)),
                              predictions=lambda p, tags, got=got: got.append(p.copy()))
            scores.append(np.concatenate(got) if got else np.zeros(0))
            models.append(model)
        s = np.stack(scores, axis=1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.model:
        from .._vw._vwmodel import write_vw_oaa_model

        write_vw_oaa_model(models, args.model)
    n = len(labels)
    if n == 0 or len(s) % n:
        raise DataError(f"{', '.join(paths)}: {len(s)} predictions for {n} examples "
                        f"(--oaa reads one example per non-empty line)")
    passes = len(s) // n
    if passes > 1 and base[0] != base[-1]:
        raise DataError(f"{', '.join(paths)}: the first label 0 comes after other labels: "
                        f"VW's --oaa then reads the labels before it as 1..K in the first "
                        f"pass and as 0..K-1 in later ones, which terascale does not "
                        f"reproduce; write classes 1..K, or train one pass")
    base = np.concatenate([base] + [np.full(n, base[-1])] * (passes - 1))
    pred = np.argmax(s, axis=1) + base  # the first of equal scores, as VW
    truth = np.tile(labels, passes)
    period = _period(options, passes)
    hold = np.tile(holdout_mask(0, n, period), passes)
    labelled = ~np.isnan(truth)
    wrong = (pred != truth) & labelled
    if args.predictions:
        out = AtomicText(args.predictions)
        text = ((_format(r, b) for r, b in zip(_probabilities(s), base))
                if args.probabilities else (str(int(v)) for v in pred))
        out.write("".join(line + "\n" for line in text))
        out.commit()
    if not args.quiet:
        per_pass = [(float(wrong[i * n:(i + 1) * n][~hold[i * n:(i + 1) * n]].sum()),
                     float((labelled & ~hold)[i * n:(i + 1) * n].sum()),
                     float(wrong[i * n:(i + 1) * n][hold[i * n:(i + 1) * n]].sum()),
                     float((labelled & hold)[i * n:(i + 1) * n].sum()), n)
                    for i in range(passes)]
        from .._vw._vwreport import closing_block

        print(closing_block({"pass_totals": [list(t) for t in per_pass],
                             "examples": n, "feature_count": model.info["feature_count"]}),
              file=sys.stderr)
    return 0


def _train_workers(args: argparse.Namespace, files: list[list[str]], seed: str,
                   opts: dict[str, Any], tmp: str, k_classes: int) -> int:
    """``--oaa K -n N``: each class's learner on N workers, one class after another, its
    weights averaged across the workers as the binary learner's are; ``-f`` then writes
    VW's one-against-all model of the K averaged learners."""
    from ...launch import LaunchOptions, launch
    from .._model import LinearModel
    from .._warm import warm_kernels
    from ._cli_options import job_json

    warm_kernels()  # compile once here rather than N times at once in the workers
    models = []
    for c in range(k_classes):
        path = os.path.join(tmp, f"class{c + 1}.model")
        code = launch([sys.executable, "-m", "terascale.linear._front._worker",
                       job_json(files[c], path, seed, opts)],
                      LaunchOptions(nprocs=args.nprocs, timeout=args.timeout,
                                    prefix_output=False))
        if code:
            return code
        models.append(LinearModel.load(path))
    if args.model:
        from .._vw._vwmodel import write_vw_oaa_model

        write_vw_oaa_model(models, args.model)
    return 0


def _seed(options: dict[str, Any], tmp: str) -> str:
    """A model with no weights whose learner has seen labels -1 and +1: in VW the K
    learners share the label range that squared, hinge and quantile predictions are
    clipped to, and after the first labelled example it is [-1, 1] for all of them (the
    first example's predictions are 0 either way)."""
    from .._io._dataset import ParseOptions
    from .._model import LinearModel
    from .._online._update import new_state

    parse = ParseOptions(**{k: v for k, v in options.items() if k in ParseOptions().to_dict()})
    state = new_state(min_label=-1.0, max_label=1.0)
    empty = np.zeros(0, np.float32)
    path = os.path.join(tmp, "seed.model")
    LinearModel(indices=np.zeros(0, np.uint32), weights=empty, parse=parse,
                loss=options["loss"], adaptive=(empty, empty, state)).save(path)
    return path


def _period(options: dict[str, Any], passes: int) -> int:
    frac = options.get("holdout")
    if frac is None:
        frac = 0.1 if passes > 1 else 0.0
    return max(2, round(1.0 / frac)) if frac > 0 else 0
