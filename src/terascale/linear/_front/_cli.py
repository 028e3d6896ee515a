"""``terascale linear train|predict|evaluate``: terascale's flags and Vowpal Wabbit's.

A VW command line works as typed (``-d``, ``-f``, ``-i``, ``-t``, ``-p``, ``--link``,
``--binary``, ``--loss_function``, ``--bit_precision``, ``--holdout_off``, ``--bfgs`` without
a count, ...): VW's spellings are extra names of the same flags (``_vwflags``), and a VW
option terascale does not implement is refused with what to use instead. What the flags
mean is ``_cli_options``; the commands run in ``_cli_run``, and heavy imports (numba)
happen only there.
"""

from __future__ import annotations

import argparse

from .._vw import _vwflags as vw

__all__ = ["add_parser"]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from .._combine import _spancli
    from .._vw import _vwcli
    from .._warm import as_command

    _add_linear(sub)
    _vwcli.add_parser(sub)
    _spancli.add_parser(sub)
    for name in ("linear", "vw"):  # run as the process's own command: its start-up
        sub.choices[name].set_defaults(as_command=as_command)


def _command(name: str, parser: argparse.ArgumentParser) -> None:
    """Run ``_cli_run.<name>`` with flag-named errors; argparse's leftovers are refused by
    ``_vwflags.unknown_flags`` (VW's reductions say why and what to use instead)."""
    def run(args: argparse.Namespace) -> int:
        from .._names import cli_names
        from . import _cli_run

        with cli_names():
            return int(getattr(_cli_run, name)(args) or 0)

    parser.set_defaults(func=run,
                        unknown_args=lambda extras: vw.unknown_flags(name, extras, parser))


def _io_flags(p: argparse.ArgumentParser, *, predict: bool) -> None:
    p.add_argument("data", nargs="*", help="input files (plain, .gz or .zip)")
    p.add_argument("-d", "--data", dest="data_flag", action="append", default=[],
                   metavar="FILE", help="an input file, as VW's -d (repeatable)")
    p.add_argument("-i", *vw.names("--initial-regressor"), dest="initial",
                   required=predict, metavar="MODEL",
                   help="the model to predict with" if predict else
                   "warm start from this model (VW's -i): its weights and learner state; "
                   "its -b/-q/format are used, flags left at their defaults follow it")
    p.add_argument("-p", "--predictions", default=None, metavar="FILE",
                   help="predictions, one line per example in input order (default: "
                        "standard output)" if predict else
                   "progressive predictions while training (VW's -p): each example "
                   "predicted before it is learned, every pass; needs -n 1")
    p.add_argument("--link", default=None, metavar="identity|logistic|glf1|poisson",
                   help="VW's output link: logistic turns scores into probabilities, glf1 "
                        "into (-1, 1), poisson into rates exp(score) "
                        "(default: " + ("probabilities for logistic models)" if predict
                                        else "identity, raw scores as VW writes them)"))
    p.add_argument("--binary", action="store_true",
                   help="predictions are the sign, -1 or 1 (VW's --binary; with train, "
                        "progress lines report 0/1 loss)")
    p.add_argument("-t", "--testonly", action="store_true",
                   help="VW's test-only mode: predict with -i, learn nothing"
                   + (" (predict never learns)" if predict else ""))
    p.add_argument("--quiet", action="store_true",
                   help="nothing on standard error: no progress lines, no summary line, no notice "
                        "of the defaults that differ from VW's (errors still print)")


def _add_linear(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("linear", help="terascale linear learning (VW-style)",
                       description="Online passes of adaptive normalized SGD, weight "
                                   "averaging and L-BFGS/CG over allreduce.")
    cmds = p.add_subparsers(dest="linear_command", metavar="COMMAND")
    t = cmds.add_parser("train", help="train a model on data files (VW's flags work too)",
                        allow_abbrev=False)
    train_flags(t)
    _command("train", t)
    pr = cmds.add_parser("predict", help="write predictions of a model", allow_abbrev=False)
    _io_flags(pr, predict=True)
    pr.add_argument("--raw", action="store_true", help="raw scores, as --link identity")
    vw.add_accepted(pr)
    _command("predict", pr)

    ev = cmds.add_parser("evaluate", help="metrics of a model on labelled data")
    ev.add_argument("data", nargs="*", help="labelled input files (plain, .gz or .zip)")
    ev.add_argument("-d", "--data", dest="data_flag", action="append", default=[],
                    metavar="FILE", help="a labelled input file, as VW's -d (repeatable)")
    ev.add_argument("-i", "--initial-regressor", dest="initial", required=True,
                    metavar="MODEL", help="the model to evaluate (written by -f)")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    _command("evaluate", ev)
    p.set_defaults(func=lambda args: p.print_help() or 2)


def train_flags(t: argparse.ArgumentParser) -> None:
    """The flags of ``linear train`` (``terascale vw`` takes the same, with VW's defaults)."""
    _io_flags(t, predict=False)
    t.add_argument("-n", "--nprocs", type=int, default=1, metavar="N",
                   help="local workers; each reads its shard of the input (default 1)")
    t.add_argument("-f", *vw.names("--final-regressor"), dest="model", default=None,
                   metavar="MODEL", help="where to write the model")
    t.add_argument("--model-format", default=None, metavar="vw|terascale",
                   help="-f's format: terascale's (default under linear train) or VW's "
                        "binary model, which vw -i loads (default under terascale vw)")
    t.add_argument("--readable_model", default=None, metavar="FILE",
                   help="also write the model as VW's readable text (index:weight)")
    t.add_argument("--invert_hash", default=None, metavar="FILE",
                   help="also write VW's readable text with feature names (reads the VW "
                        "input once more to collect them)")
    _data_flags(t)
    t.add_argument(*vw.names("--loss"), default=None,
                   help="logistic (default; with -i, the model's), squared, hinge, "
                        "quantile, classic (squared with plain SGD's step) or poisson; the "
                        "last three online passes only (terascale vw: squared by default)")
    t.add_argument("--quantile_tau", type=float, default=0.5, metavar="TAU",
                   help="the quantile that --loss quantile learns (default 0.5: the median)")
    t.add_argument("--expectile_q", type=float, default=None, metavar="Q",
                   help="the expectile that --loss expectile learns, in (0, 0.5], required "
                        "with it: the weight of labels below the prediction, 1 - Q that of "
                        "those above")
    t.add_argument("--passes", type=int, default=None,
                   help="online passes (default 1); with a bare --bfgs/--cg, as in VW, "
                        "the passes of L-BFGS/CG")
    g = t.add_mutually_exclusive_group()
    g.add_argument("--bfgs", nargs="?", const="", default=None, metavar="K",
                   help="then up to K passes of L-BFGS; bare --bfgs (VW): --passes passes "
                        "of L-BFGS and no online pass")
    g.add_argument(*vw.names("--cg"), dest="cg", nargs="?", const="", default=None,
                   metavar="K", help="then up to K passes of preconditioned conjugate "
                                     "gradient; bare, as --bfgs")
    t.add_argument("--oaa", type=int, default=None, metavar="K",
                   help="one-against-all multiclass with classes 1..K (VW's --oaa): one "
                        "binary learner per class, the prediction is the best-scoring class")
    t.add_argument("--probabilities", action="store_true",
                   help="with --oaa and logistic loss: -p writes each class's probability")
    t.add_argument("--indexing", type=int, choices=(0, 1), default=None,
                   help="with --oaa: classes 0..K-1 or 1..K from the start (VW's "
                        "--indexing; by default the first label 0 or K decides)")
    t.add_argument("--scores", action="store_true",
                   help="with --oaa: -p writes each class's score (VW's --scores)")
    t.add_argument("--mem", type=int, default=15, dest="memory", help="L-BFGS memory")
    t.add_argument("--normalize", nargs="?", const="std", default="auto", metavar="MODE",
                   help="with --bfgs/--cg: regularize the numeric columns standardized "
                        "(mean 0, std 1; the scaling is folded into the model's weights). "
                        "auto (default): std for --format csv, off otherwise; std, off")
    t.add_argument("--l1", type=float, default=0.0, help="L1 (online passes only)")
    t.add_argument("--l2", type=float, default=None,
                   help="L2: online only, VW's per-example shrinkage; with --bfgs/--cg the "
                        "objective's l2/2 ||w||^2 (default 1.0 then)")
    t.add_argument(*vw.names("--learning-rate", "-l"), type=float, default=0.5,
                   help="online learning rate of VW's adaptive, normalized update "
                        "(default 0.5)")
    t.add_argument(*vw.names("--power-t"), type=float, default=0.5,
                   help="exponent of the learning rate's decay (default 0.5)")
    t.add_argument("--decay_learning_rate", type=float, default=1.0, metavar="D",
                   help="each online pass learns at the rate of the one before times D "
                        "(VW's; default 1)")
    t.add_argument("--average", default="auto",
                   help="how workers' online learners are combined: auto (default: chain "
                        "before --bfgs/--cg, weighted otherwise), weighted "
                        "or uniform averaging at the end of each pass, or chain: the "
                        "workers learn one after another, each from the learner the one "
                        "before handed on, which gives one worker's exact model (the "
                        "shards parse in parallel, the learning does not)")
    t.add_argument("--average-every", type=int, default=None, metavar="K",
                   help="with 2+ workers: average the workers' online learners every K "
                        "examples of each shard during a pass (iterative parameter mixing; "
                        "closer to one learner, slower: 2 workers 10000, more 8000/N^2, "
                        "measured stable for N <= 4); default 0: only at the end of each "
                        "pass (--average)")
    h = t.add_mutually_exclusive_group()
    h.add_argument("--holdout", type=float, default=None, metavar="FRAC",
                   help="fraction held out to stop the batch phase (default 0.1 with "
                        "--bfgs/--cg or --passes > 1, else 0)")
    h.add_argument("--holdout_off", dest="holdout", action="store_const", const=0.0,
                   help="no holdout (VW)")
    t.add_argument("--holdout_period", type=int, default=None, metavar="K",
                   help="hold out every K-th example (VW; --holdout 1/K; --holdout_off "
                        "wins)")
    t.add_argument("--holdout_after", type=int, default=0, metavar="N",
                   help="VW: hold out every example after the first N of each pass, in "
                        "place of every K-th (one worker; --holdout_off wins)")
    t.add_argument(*vw.names("--tol"), type=float, default=1e-7,
                   help="relative loss decrease to stop the batch phase")
    t.add_argument(*vw.names("--patience"), type=int, default=3,
                   help="batch passes without holdout improvement before stopping")
    t.add_argument("--cache-dir", default=None,
                   help="cache directory (default: TMPDIR/terascale-cache; '' disables); "
                        "given, the data is cached, as with -c")
    t.add_argument("-c", "--cache", action="store_true", default=None,
                   help="cache the parsed data (VW's -c) even for one pass; it is cached "
                        "anyway when the run reads it more than once (--passes > 1, "
                        "--bfgs/--cg), and a cache written earlier is used when present")
    t.add_argument("--timeout", type=float, default=120.0,
                   help="seconds a worker waits for its peers (with -n)")
    vw.add_accepted(t)


def _data_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--format", default="vw", help="vw (default), libsvm or csv")
    p.add_argument(*vw.names("--bits", "-b"), type=int, default=18,
                   help="hash bits (default 18)")
    p.add_argument("-q", "--quadratic", action="append", default=[], metavar="AB",
                   help="cross namespaces A and B (first letters; ':' is every namespace, "
                        "as in VW: -q a: -q ::); repeatable")
    p.add_argument("--cubic", action="append", default=[], metavar="ABC",
                   help="cross three namespaces (':' wildcards allowed); repeatable")
    p.add_argument("--interactions", action="append", default=[], metavar="ABC...",
                   help="cross two or more namespaces (VW's --interactions); repeatable")
    p.add_argument("--noconstant", action="store_true", help="no constant (bias) feature")
    p.add_argument("--label", default="label", help="CSV: the label column")
    p.add_argument("--categorical", default="", help="CSV: comma-separated columns to hash "
                                                      "as categories even when numeric")
    p.add_argument("--ignore", action="append", default=[],
                   help="VW: namespaces (first letters) to leave out, as VW; CSV: "
                        "comma-separated columns to leave out; repeatable")
    p.add_argument("--keep", action="append", default=[],
                   help="VW: keep only namespaces starting with these letters; repeatable")
    p.add_argument("--ignore_linear", "--ignore-linear", action="append", default=[],
                   metavar="NS", help="VW: namespaces used only in interactions; repeatable")
    p.add_argument("--permutations", action="store_true",
                   help="VW: a namespace crossed with itself gives every ordered pair of its "
                        "features (default: pairs j >= i only)")
    p.add_argument("--leave_duplicate_interactions", action="store_true",
                   help="VW: keep interactions of the same namespaces (-q ab -q ba crosses "
                        "twice; wildcards expand to every ordered choice)")
    p.add_argument("--skip-bad", action="store_true",
                   help="skip malformed lines (counted and reported) instead of failing")
