"""``terascale vw ARGS``: Vowpal Wabbit's command line, unchanged, with VW's defaults.

``terascale linear train`` keeps terascale's own defaults (logistic loss; with
``--bfgs``/``--cg``, standardized columns and L2 = 1). ``terascale vw`` takes the same flags
and VW's spellings, but defaults as VW does: squared loss, no standardization, no L2, VW's
holdout (every 10th example when passes > 1); it prints VW's preamble and closing block
(``average loss = ...``) instead of terascale's summary, and ``--quiet`` prints nothing.
VW options outside a linear learner (contextual bandits, learning to search, LDA, ...)
are refused with an error that names the option; ``_vwflags`` says why and what to use.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence

from ..._errors import ConfigError, DataError
from .._online._state import (
    CONTRACTION,
    GRAVITY,
    MAX_LABEL,
    MIN_LABEL,
    SUM_NORM_X,
    TOTAL_WEIGHT,
    new_state,
)
from . import _vwflags as vw

__all__ = ["add_parser"]

# VW's update-rule flags: given, only those named are on; all three is VW's default
_UPDATE_RULE = ("adaptive", "normalized", "invariant")


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from .._front._cli import train_flags

    p = sub.add_parser("vw", allow_abbrev=False,
                       help="Vowpal Wabbit's command line with VW's defaults (a drop-in)",
                       description=__doc__.split("\n\n")[1].replace("\n", " "))
    for action in (None, "store"):  # (VW's rule for an option given twice: GivenOnce)
        p.register("action", action, vw.GivenOnce)
    train_flags(p)
    # VW's values that start with '-' and a digit (--affix -3w,+2) are values, not flags
    p._negative_number_matcher = re.compile(r"^-\d[\w,+-]*$|^-\d*\.\d+$")
    g = p.add_argument_group("VW options of terascale vw")
    g.add_argument("--predict_only_model", action="store_true",
                   help="-f writes VW's predict-only model: the weights, without the "
                        "learner's state that continued training needs")
    g.add_argument("--cache_file", action="append", default=[], metavar="FILE",
                   help="cache the parsed data, as -c (terascale names and keys the cache "
                        "file itself, under --cache-dir)")
    g.add_argument("-r", "--raw_predictions", default=None, metavar="FILE",
                   help="raw scores (before --link/--binary), one line per example")
    g.add_argument("--initial_t", type=float, default=None,
                   help="VW's initial_t: the adaptive update starts as if it had seen "
                        "initial_t examples of gradient 1 (every feature's sum of squared "
                        "gradients starts there; up to -b 24)")
    g.add_argument("-P", "--progress", default=None, metavar="N",
                   help="progress lines every N examples (an integer), or at examples "
                        "growing by a factor (a number with a point; VW's default 2.0), "
                        "as VW (first pass, one worker)")
    g.add_argument("--random_seed", type=int, default=0,
                   help="the seed of --random_weights (nothing else in a linear learner "
                        "is random)")
    g.add_argument("--hash_seed", type=_unsigned32, default=None,
                   help="VW's hash seed: every hash of a name starts from it (default 0; "
                        "a negative one is its 32-bit unsigned value, as VW reads it)")
    g.add_argument("--hash", choices=("strings", "all"), default=None,
                   help="VW's hashing of names: strings (the default) takes a name of "
                        "digits as its own index (plus its namespace's hash); all hashes "
                        "every name with MurmurHash3")
    g.add_argument("-a", "--audit", action="store_true",
                   help="print every example's prediction and features (name, index, "
                        "value, weight, sum of squared gradients) on standard output, as VW "
                        "(online training on one worker)")
    f = p.add_argument_group("VW's feature generation (each line is rewritten before "
                             "terascale parses it)")
    f.add_argument("--ngram", action="append", default=[], metavar="[NS]N",
                   help="n-grams of each namespace's features, or of namespace NS only "
                        "(like a2); repeatable")
    f.add_argument("--skips", action="append", default=[], metavar="[NS]K",
                   help="with --ngram: skip-grams, up to K features skipped")
    f.add_argument("--affix", action="append", default=[], metavar="[+-]L[NS],...",
                   help="prefixes (+) or suffixes (-) of L characters of each feature name "
                        "of namespace NS (the default one without NS) as extra features, as "
                        "VW's --affix")
    f.add_argument("--spelling", action="append", default=[], metavar="NS",
                   help="VW's spelling features of namespace NS (_ for the default one): "
                        "each feature's name with its digits as 0, letters as a or A, other "
                        "characters but . as #, a feature of VW's spelling namespace")
    f.add_argument("--feature_limit", action="append", default=[], metavar="[NS]N",
                   help="keep the N features of lowest hash of each namespace (or of NS)")
    f.add_argument("--sort_features", action="store_true",
                   help="each namespace's features sorted by their index and a repeated "
                        "index kept once (the smallest value), as VW's")
    f.add_argument("--redefine", action="append", default=[], metavar="N:=S",
                   help="namespaces starting with a letter of S (':' all) count as "
                        "namespace N for -q, --ignore and --keep; repeatable, in order")
    for name, what in (("--l1_state", "L1 (VW's gravity, default 0)"),
                       ("--l2_state", "L2 (VW's contraction, default 1)")):
        g.add_argument(name, type=float, default=None, metavar="X",
                       help=f"the learner's accumulated {what} that -f saves, over -i's "
                            f"(VW's; in a run without data: --no_stdin and no -d)")
    g.add_argument("--named_labels", default=None, metavar="A,B,...",
                   help="with --oaa K: the K class names, in order (the data's labels are "
                        "names; predictions are written as names, and -f's model keeps them)")
    g.add_argument("--feature_mask", default=None, metavar="MODEL",
                   help="only the weights that are nonzero in MODEL (a VW or terascale "
                        "model) are learned, as VW's gd, which never updates a zero weight; "
                        "without -i training also starts from MODEL's weights; with -i, as "
                        "in VW, the nonzero weights of -i's model are the mask")
    g.add_argument("--save_per_pass", action="store_true",
                   help="with -f FILE: also write the model at the end of each pass K as "
                        "FILE.K (VW's; each is retrained from the start for K passes, so "
                        "passes cost N(N+1)/2 in all; one worker, online passes)")
    g.add_argument("--sparse_weights", action="store_true",
                   help="accepted: terascale keeps weights only for the features present")
    g.add_argument("--constant", type=float, default=0.0, metavar="C",
                   help="the constant (bias) feature's weight before training (VW's "
                        "initial constant)")
    g.add_argument("--initial_weight", type=float, default=0.0, metavar="W",
                   help="every weight's value before training (VW's; up to -b 24)")
    g.add_argument("--random_weights", action="store_true",
                   help="start from VW's uniform random weights in [-0.5, 0.5) "
                        "(--random_seed; up to -b 24)")
    g.add_argument("--normal_weights", action="store_true",
                   help="start from VW's standard normal weights (up to -b 24)")
    g.add_argument("--truncated_normal_weights", action="store_true",
                   help="start from VW's normal weights folded at twice their standard "
                        "deviation (up to -b 24)")
    g.add_argument("--min_prediction", type=float, default=None, metavar="LO",
                   help="the smallest prediction (VW's; default: the smallest label learned "
                        "from so far)")
    g.add_argument("--max_prediction", type=float, default=None, metavar="HI",
                   help="the largest prediction (VW's; default: the largest label learned "
                        "from so far)")
    g.add_argument("--onethread", action="store_true",
                   help="accepted: each worker parses and learns in one thread")
    g.add_argument("--hessian_on", action="store_true",
                   help="with --bfgs: a curvature pass after each gradient pass sets the "
                        "step (VW's; --conjugate_gradient always does)")
    for name, what in (("--output_feature_regularizer_binary", "binary"),
                       ("--output_feature_regularizer_text", "text")):
        g.add_argument(name, default=None, metavar="FILE",
                       help=f"with --bfgs: write each weight's L2 strength (--l2 plus its "
                            f"inverse curvature) and value, VW's {what} regularizer file, "
                            f"once the passes converge")
    g.add_argument("--input_feature_regularizer", default=None, metavar="FILE",
                   help="with --bfgs: regularize each weight toward the value in FILE "
                        "(VW's binary regularizer file) with its strength, starting there")
    g.add_argument("--no_bias_regularization", action="store_true",
                   help="with --bfgs/--conjugate_gradient: --l2 leaves the constant "
                        "(bias) weight out")
    for name in _UPDATE_RULE:
        g.add_argument("--" + name, action="store_true",
                       help=f"VW's {name} update (on by default; given, VW turns the "
                            f"rules not named off: --invariant alone is VW's invariant "
                            f"step with one global rate, as --sgd is plain SGD)")
    g.add_argument("--preserve_performance_counters", action="store_true",
                   help="with -i of a VW model: the closing block's average loss includes "
                        "the loss of the runs that trained it (VW's counters)")
    g.add_argument("--dont_output_best_constant", action="store_true",
                   help="accepted: terascale vw's closing block has no best constant line")
    g.add_argument("--sparse_l2", type=float, default=0.0, metavar="L",
                   help="VW's sparse L2: every update less L times the prediction (VW's gd "
                        "example by example in Python: one worker, small data)")
    g.add_argument("--sgd", action="store_true",
                   help="VW's plain SGD: one global learning rate (default 10), no "
                        "adaptive, normalized or invariant update")
    from ._vwlog import add_flags, vw_streams

    add_flags(p.add_argument_group("VW's logging options"))

    def run(args: argparse.Namespace) -> int:
        try:
            with vw_streams(args):
                return _run(args)
        except DataError as e:  # (a line of a rewritten input: named as the input's)
            from ._vwgen import as_given

            raise DataError(as_given(str(e))) from None

    def _run(args: argparse.Namespace) -> int:
        from .._front import _cli_run
        from .._names import cli_names
        from .._online._progress import CADENCE, cadence

        disagreeing = vw.disagreement(args)
        if disagreeing is not None:
            raise disagreeing
        args.data_flag[:] = dict.fromkeys(args.data_flag)  # (-d F -d F: F once, as VW)
        for attr in ("predictions", "raw_predictions"):  # (VW's -p - writes a file "-")
            if getattr(args, attr) == "-":
                from ._vwout import LiteralPath

                setattr(args, attr, LiteralPath("-"))
        # the run's feature generation (_generate) and -i's counters: with its options,
        # where its models are read and written and its closing block printed
        args.vw_generation, args.vw_preserved = {}, {}
        CADENCE[:] = [cadence(args.progress) if args.progress else (False, 2.0)]
        if args.initial:  # VW applies the model's --oaa K and --named_labels
            from ._vwmodel import model_oaa, model_rules

            for rule in model_rules(args.initial):  # and its learner (--bfgs, --sgd, ...)
                if rule in ("bfgs", "cg"):  # (-t predicts with its weights, as VW)
                    if args.bfgs is None and args.cg is None and not args.testonly:
                        setattr(args, rule, "")
                else:
                    setattr(args, rule, True)
            _check_sums(args)
            k, names = model_oaa(args.initial)
            args.oaa = args.oaa if args.oaa is not None else k
            if args.named_labels is None and names:
                args.named_labels = ",".join(names)
        if args.named_labels is not None and args.oaa is None:
            raise ConfigError("--named_labels goes with --oaa K (terascale vw's multiclass)")
        _overridden_interactions(args)
        _vw_defaults(args)
        if args.testonly and args.initial:  # (VW's preamble prints a model's -l/--power_t
            from ._vwmodel import model_options  # where they are left out; -t learns
            saved = model_options(args.initial)  # nothing)
            for a, b in zip(saved, saved[1:]):
                if a in ("--learning_rate", "--power_t") and \
                        not getattr(args, f"{a[2:]}_given"):
                    setattr(args, a[2:], float(b))
            rules = [n for n in _UPDATE_RULE if getattr(args, n)]
            if not args.learning_rate_given and "--learning_rate" not in saved and (
                    args.sgd or 0 < len(rules) < 3 and not (args.adaptive and
                                                            args.normalized)):
                args.learning_rate = 10.0  # (VW's default rate without those two rules)
        _progress_notes(args)
        _generation_notes(args)
        _interaction_notes(args)
        _notes(args)
        _namespace_lines(args)
        if not (args.data or args.data_flag) and not args._vw_noop_no_stdin:
            if args.cache_file:
                raise ConfigError(f"--cache_file {args.cache_file[-1]} without -d: VW reads "
                                  f"its cache then; terascale reads text and keeps its own "
                                  f"cache: give -d FILE (or - for standard input)")
            args.data_flag = ["-"]  # VW reads standard input when no -d is given
        with cli_names():
            _generate(args)
            if args.preserve_performance_counters and args.initial:
                from ._vwmodel import is_vw_model, load_model, read_vw_model

                # (a VW model's header alone: its records, and numba, are the learner's)
                kept = (read_vw_model(args.initial, oaa=args.oaa is not None,
                                      generation=args.vw_generation, plain=True,
                                      records=False)
                        if is_vw_model(args.initial)
                        else load_model(args.initial, args.vw_generation))
                args.vw_preserved = dict(kept.info.get("vw_counters", {}))
            if not (args.data or args.data_flag) and args._vw_noop_no_stdin:
                numba_start(args)  # (its model is the starting weights')
                return _no_data(args)
            if args.l1_state is not None or args.l2_state is not None:
                raise ConfigError("--l1_state/--l2_state: terascale vw sets them in a run "
                                  "without data (--no_stdin, no -d) only")
            if (args.bfgs is not None or args.cg is not None) and not args.testonly:
                return _batch(args)
            if args.hessian_on or args.no_bias_regularization or \
                    args.input_feature_regularizer or \
                    args.output_feature_regularizer_binary or \
                    args.output_feature_regularizer_text:
                raise ConfigError("--hessian_on/--no_bias_regularization and the "
                                  "feature regularizer files go with "
                                  "--bfgs/--conjugate_gradient")
            if args.plain_rule:
                return _plain(args)
            if args.save_per_pass:
                return _save_per_pass(args)
            if not args.audit:
                from ._vwonline import c_path, test, train

                if c_path(args) is None:  # (one worker, one pass: the compiled learner)
                    return test(args) if args.testonly else train(args)
                numba_start(args)
                return int(_cli_run.train(args) or 0)
            return _audited(args)

    # VW's --termination and --mem defaults (terascale linear train's --tol is 1e-7), told
    # apart from the values given (VW warns of them without --bfgs); -l and
    # --power_t left out are told apart from -l 0.5 (VW's other update rules default to 10)
    # and --power_t 0.5 (a VW model's own apply to -i where they are left out)
    p.set_defaults(func=run, unknown_args=lambda extras: _unknown(extras, p), tol=None,
                   memory=None, learning_rate=None, power_t=None, quantile_tau=None)


def _overridden_interactions(args: argparse.Namespace) -> None:
    """VW's -i with -q/--cubic/--interactions given: the command line's three replace the
    model's three (``args.vw_interactions``, which ``_cli_run.vw_start`` applies to the
    model wherever it is read), with VW's warning on standard output where the model had
    any; without any given, the model's apply. ``--noconstant`` given drops the model's
    constant feature, and ``--ignore``/``--keep``/``--ignore_linear`` given add their
    namespaces to the model's (VW's options add up: the model's apply too)."""
    args.vw_interactions = None
    if not args.initial:
        return
    given: dict[str, object] = {k: list(getattr(args, k))
                                for k in ("ignore", "keep", "ignore_linear")
                                if getattr(args, k)}  # (added to the model's, as VW's)
    if args.noconstant:
        given["constant"] = False
    args.vw_interactions = given or None
    if not (args.quadratic or args.cubic or args.interactions):
        return
    from ._vwmodel import model_interactions

    args.vw_interactions = {**(args.vw_interactions or {}),
                            **{k: list(getattr(args, k))
                               for k in ("quadratic", "cubic", "interactions")}}
    if not args.quiet and model_interactions(args.initial):
        print("[warning] model file has set of {-q, --cubic, --interactions} settings "
              "stored, but they'll be OVERRIDDEN by set of {-q, --cubic, --interactions} "
              "settings from command line.")


def _progress_notes(args: argparse.Namespace) -> None:
    """VW's warning on standard output about a -P value it changes (an integer below 1
    read as 1, a factor up to 1 raised by 1) or doubts (a factor over 9: VW's line, its
    empty quotes included), unless --quiet; the first of VW's notes."""
    if args.quiet or not args.progress:
        return
    try:
        v = float(args.progress)
    except ValueError:
        return  # (cadence refuses it)
    if "." not in args.progress:
        if v < 1:
            print("[warning] Additive --progress <int> can't be < 1: forcing to 1")
    elif v <= 1.0:
        print(f"[warning] Multiplicative --progress <float> '{args.progress}' is <= 1.0: "
              f"adding 1.0")
    elif v > 9.0:
        print("[warning] Multiplicative --progress <float> '' is > 9.0: Did you mean mean "
              "to use an integer?")


def _generation_notes(args: argparse.Namespace) -> None:
    """VW's notes on standard output about its parse-time features, unless --quiet: one
    per --ngram and --skips value (a model's with -i), then one per --feature_limit
    value, each number read as C's atoi reads it."""
    from ._vwgen import _atoi
    from ._vwmodel import model_generation

    if args.quiet:
        return
    grams, skips = list(args.ngram), list(args.skips)
    if args.initial and not (grams or skips):
        grams, skips = model_generation(args.initial)[:2]
    for values, what in ((grams, "grams"), (skips, "skips")):
        for v in values:
            if v[:1].isdigit():
                print(f"[info] Generating {_atoi(v)}-{what} for all namespaces.")
            elif v:
                print(f"[info] Generating {_atoi(v[1:])}-{what} for {v[0]} namespaces.")
    for v in args.feature_limit or []:
        if v[:1].isdigit():
            print(f"[warning] limiting to {_atoi(v)} features for each namespace.")
        elif v:
            print(f"[warning] limiting to {_atoi(v[1:])} for namespaces {v[0]}")


def _check_sums(args: argparse.Namespace) -> None:
    """-i of VW's save_resume model goes on with the update rules of the model and the
    command line together; VW reads its records with those rules' widths (the adaptive sum,
    the normalizer, neither or both after each weight), so a model whose records keep
    other sums is refused by name (VW reads garbage, or stops on an index out of range)."""
    from ._vwmodel import model_sums, record_sums

    have = model_sums(args.initial)
    if args.testonly or have is None:
        return
    given = [n for n in ("sgd", *_UPDATE_RULE) if getattr(args, n)]
    if record_sums(given) != have:
        named = {(True, True): "VW's default update (adaptive and normalized sums)",
                 (True, False): "--adaptive (its adaptive sums)",
                 (False, True): "--normalized (its normalizers)",
                 (False, False): "--sgd or --invariant (weights alone)"}
        raise ConfigError(f"-i {args.initial}: a model of {named[have]}, whose records "
                          f"keep other sums than those of this run's rules "
                          f"({' '.join('--' + n for n in given) or 'the default'}) "
                          f"read: leave out the rules the model was not trained with, or "
                          f"train on from its --predict_only_model form")


def _unsigned32(text: str) -> int:
    """An integer as VW reads an unsigned 32-bit option: -(2^32-1)..-1 is 2^32 more (-7 is
    4294967289); what is out of that range is left for the option's own check."""
    value = int(text)
    return value + (1 << 32) if -(1 << 32) < value < 0 else value


def _interactions(args: argparse.Namespace,
                  saved: list[str]) -> tuple[tuple[str, ...], ...]:
    """The run's -q, --cubic and --interactions: the command line's, or where it gives
    none, those of -i's model (``saved``: its options), as VW merges the model's."""
    if args.quadratic or args.cubic or args.interactions:
        return tuple(args.quadratic), tuple(args.cubic), tuple(args.interactions)
    return tuple(tuple(b for a, b in zip(saved, saved[1:]) if a == flag)
                 for flag in ("--quadratic", "--cubic", "--interactions"))


def _interaction_notes(args: argparse.Namespace) -> None:
    """VW's notes on standard output about the interactions it deduplicates (a wildcard
    given; duplicates removed; characters reordered), unless --quiet or
    --leave_duplicate_interactions."""
    from .._io._interactions import duplicate_counts
    from ._vwmodel import model_options

    if args.quiet or args.leave_duplicate_interactions:
        return
    saved = model_options(args.initial) if args.initial else []
    given = _interactions(args, saved)
    if not any(given) or "--leave_duplicate_interactions" in saved:
        return
    wildcard, removed, reordered = duplicate_counts(*given)
    again = "You can use --leave_duplicate_interactions to disable this behaviour."
    if wildcard:
        print(f"[info] Any duplicate namespace interactions will be removed\n{again}")
    if removed:
        print(f"[warning] Duplicate namespace interactions were found. Removed: {removed}."
              f"\n{again}")
    if reordered:
        print(f"[warning] Some interactions contain duplicate characters and their "
              f"characters order has been changed. Interactions affected: {reordered}.")


def _notes(args: argparse.Namespace) -> None:
    """VW's notes on standard output about the options given, after those on the
    interactions and in VW's order, unless --quiet."""
    from .._f32 import f32
    from ._vwmodel import model_options

    if args.quiet:
        return
    if args._vw_noop_save_resume:
        print("[warning] --save_resume flag is deprecated -- learning can now continue on "
              "saved models by default.")
    if (args.readable_model or args.invert_hash) and not args.predict_only_model:
        print("[info] VW 9.0.0 introduced a change to the default model save behavior. "
              "Please use '--predict_only_model' when using either '--invert_hash' or "
              "'--readable_model' to get the old behavior. Details: "
              "https://vowpalwabbit.org/link/1")
    if args.raw_predictions and (args.binary or args.initial and "--binary" in
                                 model_options(args.initial)):  # (-i's model's too)
        print("[warning] --raw_predictions has no defined value when --binary specified, "
              "expect no output")
    last = f32(args.decay_learning_rate) ** int(args.passes or 1)
    if int(args.passes or 1) > 1 and last < 1e-4:  # (VW's double, its shortest digits)
        print(f"[warning] The learning rate for the last pass is multiplied by '{last!r}' "
              f"adjust --decay_learning_rate larger to avoid this.")
    if args.cg is None:  # (--conjugate_gradient's: after its learner's [info] line)
        print(*bfgs_option_warnings(args), sep="", end="")


def bfgs_option_warnings(args: argparse.Namespace) -> list[str]:
    """VW's warnings on --mem and --termination given without --bfgs (-i's model's
    included), the options only its BFGS enables, each a line to print (its text ending
    in a newline, as VW's logger writes it)."""
    from ._vwmodel import model_rules

    if args.bfgs is not None or (args.initial and "bfgs" in model_rules(args.initial)):
        return []
    return [f"[warning] Option '{name}' depends on another option (or combination of "
            f"options) which was not supplied. Possible combinations of options which "
            f"would enable this option are:\n\tbfgs\n\n"
            for name, given in (("mem", args.memory_given), ("termination", args.tol_given))
            if given]


def _namespace_lines(args: argparse.Namespace) -> None:
    """VW's first lines on standard error, unless --quiet: the interactions as given
    (``creating quadratic features for pairs: ui ic``, then the cubic and other ones),
    the namespaces' first bytes that --ignore, --ignore_linear and --keep name, in byte
    order, then ``only testing`` (-t), the named labels' count and the L1 (not with
    --bfgs) and L2. With -i of a VW model, its interactions where the command line gives none
    and its namespaces with the command line's, as VW merges the model's options."""
    import sys

    from ._vwmodel import model_options

    if args.quiet:
        return
    saved = model_options(args.initial) if args.initial else []

    def given(flag: str, name: str) -> list[str]:  # (the command line's, then -i's)
        return list(getattr(args, name) or []) + [b for a, b in zip(saved, saved[1:])
                                                   if a == flag]

    lines = []
    for values, text in zip(_interactions(args, saved),
                            ("quadratic features for pairs", "cubic features for triples",
                             "features for following interactions")):
        if values:
            lines.append(f"creating {text}: " + " ".join(values))
    for flag, name, text in (("--ignore", "ignore", "ignoring namespaces"),
                             ("--ignore_linear", "ignore_linear",
                              "ignoring linear terms for namespaces"),
                             ("--keep", "keep", "using namespaces")):
        values = given(flag, name)
        if values:
            first = sorted({b for v in values for b in v.encode()})
            lines.append(f"{text} beginning with:"  # (VW writes each byte as it is: a
                         + "".join(" " + bytes([b]).decode("utf-8", "surrogateescape")
                                   for b in first))  # UTF-8 letter's bytes apart)
    if args.testonly:  # (then the example options', and gd's regularization)
        lines.append("only testing")
    if args.named_labels:
        lines.append(f"parsed {len(args.named_labels.split(','))} named labels")
    l1 = 0.0 if args.bfgs is not None else args.l1  # (VW says nothing of it with --bfgs)
    lines += [f"using {name} regularization = {value:g}"
              for name, value in (("l1", l1), ("l2", args.l2)) if value]
    if lines:
        text = "\n".join(lines) + "\n"
        raw = getattr(sys.stderr, "buffer", None)
        if raw is None:
            sys.stderr.write(text.encode("utf-8", "surrogateescape").decode("utf-8", "replace"))
        else:
            sys.stderr.flush()
            raw.write(text.encode("utf-8", "surrogateescape"))
            raw.flush()


def _no_data(args: argparse.Namespace) -> int:
    """VW with --no_stdin and no -d: no example is read; -f and --readable_model write
    the model training starts from (-i's, or empty), with --l1_state/--l2_state set."""
    import sys

    import numpy as np

    from .._front._cli_options import train_options
    from .._io._dataset import ParseOptions
    from .._model import LinearModel
    from ._vwmodel import load_model, save_model
    from ._vwreport import closing_block, preamble
    from ._vwtext import write_readable

    if args.oaa is not None or args.invert_hash or args.audit:
        raise ConfigError("a run without data (--no_stdin, no -d): --oaa, --invert_hash "
                          "and --audit are not supported by terascale vw")
    options = train_options(args)
    if args.initial:  # (the interactions given replace the model's, as VW's)
        from .._front._cli_run import vw_start

        model = load_model(args.initial, args.vw_generation)
        vw_start(model, args)
    else:
        parse = ParseOptions(**{k: tuple(v) if isinstance(v, list) else v
                                for k, v in options.items()
                                if k in ParseOptions().to_dict()})
        state = new_state()
        empty = np.zeros(0, np.float32)
        model = LinearModel(indices=np.zeros(0, np.uint32), weights=empty, parse=parse,
                            loss=options["loss"], adaptive=(empty, empty, state))
    if model.adaptive is not None:  # VW's: a value given wins over the model's
        state = model.adaptive[2]
        if args.l1_state is not None:
            state[GRAVITY] = args.l1_state
        if args.l2_state is not None:
            state[CONTRACTION] = args.l2_state
    model.info = {"examples": 0, "feature_count": 0, "pass_totals": [],
                  "vw_generation": args.vw_generation, "vw_preserved": args.vw_preserved}
    for path, flag in ((args.model, "-f"), (args.readable_model, "--readable_model")):
        from .._front import _cli_run

        _cli_run._check_output(path, flag, stream=flag != "-f")
    if not args.quiet:
        print(preamble(options, [], model=args.model, predictions=None),
              file=sys.stderr)
    if args.model:
        save_model(model, args.model, "vw", predict_only=args.predict_only_model)
    if args.readable_model:
        write_readable(model, args.readable_model, counters=True)
    if not args.quiet:
        print(closing_block(model.info), file=sys.stderr)
    return 0


def _save_per_pass(args: argparse.Namespace) -> int:
    """VW's ``--save_per_pass``: the run as without it, then the model at the end of each
    pass K written as ``-f``'s FILE.K. Each is the final model of a run of K passes with
    the same holdout (a K-pass run is the N-pass run's first K passes: the same examples,
    order and learner state); a run that stops early on the holdout loss writes the passes
    it made, as VW. Without -f, VW writes files named ``.K``; terascale writes none."""
    import copy

    from .._front import _cli_run
    from .._front._cli_options import train_options

    if args.nprocs != 1 or args.oaa is not None or args.audit or args.testonly:
        raise ConfigError("--save_per_pass: terascale vw writes each pass's model for "
                          "online training on one worker (not with -n N, --oaa, --audit "
                          "or -t)")
    args.data, args.data_flag = _cli_run._inputs(args), []  # standard input: read once
    from ._vwonline import c_path, train

    ran: list[int] = []  # (the compiled learner's run: the passes it made)
    code = train(args, ran) if c_path(args) is None else int(_cli_run.train(args) or 0)
    if code or not args.model:
        return code
    if ran:  # (each pass's run compiled too)
        return _save_per_pass_c(args, ran[0])
    options = train_options(args)
    passes = int(options["passes"] or 1)
    if options["holdout"] is None:  # the N-pass run's holdout, also in shorter runs
        options["holdout"] = 0.1 if passes > 1 else 0.0
    options["vw_text"] = options["vw_labels"] = True
    options["progress"] = False
    if args.min_prediction is not None or args.max_prediction is not None:
        options["fixed_range"] = True
    quiet = copy.copy(args)
    quiet.predictions = quiet.raw_predictions = None
    quiet.readable_model = quiet.invert_hash = None
    for k in range(1, passes + 1):
        path = f"{args.model}.{k}"
        opts = dict(options, passes=k)
        if args.initial:
            _cli_run._follow_model(opts, _cli_run._load(args.initial, args), args)
        model = _cli_run._run_train(quiet, list(args.data), path, opts, "identity")
        if len(model.info.get("pass_totals", [])) < k:  # stopped early: VW saved no more
            import os

            os.unlink(path)
            break
    return 0


def _save_per_pass_c(args: argparse.Namespace, ran: int) -> int:
    """:func:`_save_per_pass`'s K-pass runs in the compiled learner (``_vwonline.train``),
    after its run of ``ran`` passes: each quiet, without -p/-r, with the N-pass run's
    holdout and without the model's link (as the numba pass's runs of them)."""
    import copy

    from .._front._cli_options import train_options
    from ._vwonline import train

    options = train_options(args)
    passes = int(options["passes"] or 1)
    quiet = copy.copy(args)
    quiet.predictions = quiet.raw_predictions = None
    quiet.quiet, quiet.link = True, None
    quiet.readable_model = quiet.invert_hash = None
    if options["holdout"] is None:  # the N-pass run's holdout, also in shorter runs
        quiet.holdout = 0.1 if passes > 1 else 0.0
    for k in range(1, ran + 1):  # (a run that stopped early: the passes it made)
        one = copy.copy(quiet)
        one.passes, one.model = k, f"{args.model}.{k}"
        train(one)
    return 0


def _plain(args: argparse.Namespace) -> int:
    """VW's gd with rules other than its default, or --sparse_l2 (``_vwsgd``)."""
    import sys

    from .._front import _cli_run
    from .._front._cli_options import train_options
    from ._vwreport import preamble
    from ._vwsgd import train_vw_sgd

    if args.bfgs is not None or args.cg is not None or args.audit:
        raise ConfigError("VW's other update rules (--sgd, --adaptive, --normalized, "
                          "--invariant alone, --sparse_l2) with --bfgs/--conjugate_gradient "
                          "or --audit are not supported by terascale vw")
    if getattr(args, "starting_weights", False):
        given = [flag for flag, on in (
            ("--constant", args.constant), ("--initial_weight", args.initial_weight),
            ("--random_weights", args.random_weights),
            ("--normal_weights", args.normal_weights),
            ("--truncated_normal_weights", args.truncated_normal_weights),
            ("--min_prediction", args.min_prediction is not None),
            ("--max_prediction", args.max_prediction is not None)) if on]
        raise ConfigError(f"VW's other update rules (--sgd, --adaptive, --normalized, "
                          f"--invariant alone, --sparse_l2) start from zero weights and "
                          f"the labels' range in terascale vw: not with "
                          f"{'/'.join(given) or '--constant/--initial_weight'}")
    options = train_options(args)
    paths = _cli_run._inputs(args)
    how = _cli_run._link(args, "identity")
    for path, flag in ((args.predictions, "-p"), (args.raw_predictions, "-r"),
                       (args.readable_model, "--readable_model")):
        _cli_run._check_output(path, flag)
    _cli_run._check_output(args.model, "-f", stream=False)
    if args.invert_hash:
        raise ConfigError("--invert_hash with VW's other update rules is not supported by "
                          "terascale vw (--readable_model is)")

    def opening(eta: float, t: float) -> None:
        """VW's preamble, with the rate and initial_t the rules start from (without the
        adaptive rule VW's rate is eta times initial_t^power_t, and prints so)."""
        if not args.quiet:
            print(preamble({**options, "learning_rate": eta}, paths, model=args.model,
                           predictions=args.predictions,
                           raw=getattr(args, "raw_predictions", None), initial=args.initial,
                           cache=getattr(args, "vw_cache", None), initial_t=t),
                  file=sys.stderr)

    return train_vw_sgd(args, options, paths, how, opening, args.learning_rate_given,
                        args.initial_t_given)


def _audited(args: argparse.Namespace) -> int:
    """VW's audit of the run (``_vwaudit``): printed as the compiled learner learns, or
    else after training as usual, by a replay."""
    from .._front import _cli_run
    from .._front._cli_options import train_options
    from ._vwaudit import audit
    from ._vwonline import c_path, train

    if args.nprocs != 1 or args.oaa is not None or args.bfgs is not None or \
            args.cg is not None or args.testonly:
        raise ConfigError("--audit: terascale vw audits online training on one worker "
                          "(not with -n N, --oaa, --bfgs/--conjugate_gradient or -t)")
    args.data, args.data_flag = _cli_run._inputs(args), []  # standard input: read once
    if c_path(args, audit=True) is None:
        return train(args)
    code = int(_cli_run.train(args) or 0)
    if code:
        return code
    options = train_options(args)
    options["vw_text"] = options["vw_labels"] = True
    if args.min_prediction is not None or args.max_prediction is not None:
        options["fixed_range"] = True
    audit(args, list(args.data), options)
    return 0


def _generate(args: argparse.Namespace) -> None:
    """VW's parse-time feature generation (``_vwgen``): the inputs are rewritten once."""
    from .._front import _cli_run
    from ._vwgen import FeatureGen, rewrite_inputs
    from ._vwmodel import model_generation, model_options

    # (--hash and --hash_seed given, even at their defaults, are kept in VW's model)
    given = {"hash_seed": [args.hash_seed] if args.hash_seed is not None else [],
             "hash": [args.hash] if args.hash else [],
             "random_seed": [str(args.random_seed)] if args.random_seed else []}
    args.hash_seed = args.hash_seed or 0
    if args.initial and not args.random_seed:  # (VW's model keeps a seed other than 0)
        saved = model_options(args.initial)
        given["random_seed"] = [b for a, b in zip(saved, saved[1:])
                                if a == "--random_seed"][:1]
        args.random_seed = int(given["random_seed"][0]) if given["random_seed"] else 0
    if args.initial:  # VW's model keeps them
        grams, skips, seed, hashing, _ = model_generation(args.initial)
        if not (args.ngram or args.skips):
            args.ngram, args.skips = grams, skips
        args.hash_seed = args.hash_seed or seed
        if hashing == "all":
            args.hash = "all"
        saved = model_options(args.initial)  # (and its --redefine and --affix, which VW
        if not args.redefine:                # applies to -i's run)
            args.redefine = [b for a, b in zip(saved, saved[1:]) if a == "--redefine"]
        if not args.affix:
            args.affix = [b for a, b in zip(saved, saved[1:]) if a == "--affix"]
        if not args.spelling:
            args.spelling = [b for a, b in zip(saved, saved[1:]) if a == "--spelling"]
    keep = _feature_mask(args)
    gen = FeatureGen.from_flags(bits=args.bits, ngram=args.ngram, skips=args.skips,
                                feature_limit=args.feature_limit, redefine=args.redefine,
                                hash_seed=args.hash_seed, keep=keep,
                                affix=args.affix, hash_all=args.hash == "all",
                                sort_features=args.sort_features, spelling=args.spelling)
    if gen is None:
        args.vw_generation = {k: v for k, v in given.items() if v}
        return
    if args.initial:  # (-i's -b, as the run uses it)
        from ._vwmodel import load_model

        gen.bits = model_generation(args.initial)[4] or \
            load_model(args.initial, args.vw_generation).parse.bits
    if args.format != "vw":
        raise ConfigError("--ngram/--skips/--feature_limit/--redefine/--hash_seed/--hash all "
                          "work on VW text input (--format vw)")
    if args.affix and (args.ignore or args.keep or args.ignore_linear or
                       any(":" in v for v in (*args.quadratic, *args.cubic,
                                              *args.interactions))):
        raise ConfigError("--affix with --ignore/--keep/--ignore_linear or a ':' wildcard "
                          "interaction is not supported by terascale vw")
    if (gen.parser_made or gen.parser_rules) and not (args.plain_rule or args.save_per_pass):
        from ._vwonline import c_path

        if c_path(args) is None:  # the compiled parser makes them, line by line
            args.vw_grams = gen
            gen = None
    if gen is not None and (args.data or args.data_flag or not args._vw_noop_no_stdin):
        args.data = rewrite_inputs(_cli_run._inputs(args), gen)  # (a run without data
        args.data_flag = []                                       # keeps the flags only)
    args.vw_generation = {"ngram": list(args.ngram), "skips": list(args.skips),
                          "hash_seed": [args.hash_seed] if args.hash_seed else
                          given["hash_seed"],
                          "hash": ["all"] if args.hash == "all" else given["hash"],
                          "redefine": list(args.redefine or []),
                          "affix": list(args.affix or []),
                          "spelling": list(args.spelling or []),
                          "random_seed": given["random_seed"]}


def _feature_mask(args: argparse.Namespace) -> frozenset[int] | None:
    """VW's ``--feature_mask MODEL``: the indices training may update (None without it).

    VW loads MODEL's weights, then -i's over them (zeroed first) when -i is given, and its
    ``gd`` leaves every weight that is 0 alone: the mask is the nonzero weights of -i's model,
    or of MODEL without -i, which training then starts from. A constant whose weight is 0
    there is left out (``--noconstant``: the same predictions, and the model says so)."""
    if args.feature_mask is None or args.testonly:
        return None
    import numpy as np

    from .._io._hashing import CONSTANT_HASH
    from ._vwmodel import load_model

    if not args.initial:
        args.initial = args.feature_mask
    try:
        model = load_model(args.initial, getattr(args, "vw_generation", None))
    except OSError as e:
        raise ConfigError(f"--feature_mask/-i {args.initial}: {e.strerror or e}") from None
    parse = model.parse
    if parse.bits != args.bits and args.bits != 18:
        raise ConfigError(f"--feature_mask: {args.initial} has -b {parse.bits}, not -b "
                          f"{args.bits}")
    args.bits = parse.bits
    if (args.quadratic or args.cubic or args.interactions or parse.quadratic or parse.cubic
            or parse.interactions):
        raise ConfigError("--feature_mask with -q/--cubic/--interactions is not supported "
                          "by terascale vw (the mask applies to each feature as it is read)")
    if args.format != "vw":
        raise ConfigError("--feature_mask works on VW text input (--format vw)")
    keep = frozenset(int(i) for i in np.asarray(model.indices)[np.asarray(model.weights) != 0])
    size = 1 << parse.bits
    if parse.constant and (CONSTANT_HASH & (size - 1)) not in keep:
        # VW never learns it: its weight stays 0, as without it
        import dataclasses

        from .._model import LinearModel

        args.noconstant = True
        args.initial = _temporary_model(LinearModel(
            indices=model.indices, weights=model.weights, loss=model.loss,
            parse=dataclasses.replace(parse, constant=False), adaptive=model.adaptive))
    return keep


def _temporary_model(model: object) -> str:
    """``model`` saved to a temporary file (the run's scratch file: removed at exit, on
    SIGTERM, or after SIGKILL by the next run, ``_files.scratch_file``)."""
    import os

    from ..._files import scratch_file

    fd, path = scratch_file("terascale-start-", ".model")
    os.close(fd)
    model.save(path)  # type: ignore[attr-defined]
    return path


def _batch(args: argparse.Namespace) -> int:
    """VW's --bfgs/--conjugate_gradient (``_vwbatch``), on one worker or on -n N
    (``_vwbatchworker``: the passes' sums added over the workers)."""
    import sys

    from .._front import _cli_run
    from .._front._cli_options import train_options
    from ._vwbatch import train_vw_batch
    from ._vwreport import preamble

    options = train_options(args)
    if options["passes"] or not (options["bfgs"] or options["cg"]):
        raise ConfigError("terascale vw: --bfgs K / --cg K after online passes is terascale "
                          "linear train's recipe; VW's --bfgs takes no count (--passes N)")
    if args.oaa is not None:
        raise ConfigError("--oaa with --bfgs/--conjugate_gradient is not supported by "
                          "terascale vw")
    if getattr(args, "starting_weights", False):
        raise ConfigError("--constant/--initial_weight/--random_weights/--initial_t/"
                          "--min_prediction/--max_prediction with --bfgs/"
                          "--conjugate_gradient are not supported by terascale vw")
    paths = _cli_run._inputs(args)
    how = _cli_run._link(args, "identity")
    for path, flag in ((args.predictions, "-p"), (args.raw_predictions, "-r"),
                       (args.readable_model, "--readable_model"),
                       (args.invert_hash, "--invert_hash")):
        _cli_run._check_output(path, flag)
    _cli_run._check_output(args.model, "-f", stream=False)

    def opening(part: int | None = None) -> None:
        """VW's preamble; ``part`` 0: its lines up to the cache's (VW prints them before
        its batch learner's), 1: the rest."""
        if args.quiet:
            return
        text = preamble({**options, "passes": options["bfgs"] or options["cg"],
                         "cache": options.get("cache")}, paths, model=args.model,
                        predictions=args.predictions,
                        raw=getattr(args, "raw_predictions", None), initial=args.initial,
                        cache=(getattr(args, "vw_cache", None) or [])[:1 if part == 0 else None],
                        initial_t=args.initial_t).split("\n")  # (part 0: no cache's line)
        cut = next(i for i, ln in enumerate(text)
                   if ln.startswith(("creating cache_file", "using no cache")))
        text = text if part is None else text[:cut] if part == 0 else text[cut:]
        if text:
            print("\n".join(text), file=sys.stderr)

    if args.nprocs == 1:
        return train_vw_batch(args, options, paths, how, opening)
    # -n N: VW's batch learner in every worker, the passes' sums added over them
    from ...launch import LaunchOptions, launch
    from ._vwbatch import check_batch
    from ._vwbatchworker import job_of

    check_batch(args, options)
    opening()
    return launch([sys.executable, "-m", "terascale.linear._vw._vwbatchworker",
                   job_of(args, options, paths, how)],
                  LaunchOptions(nprocs=args.nprocs, timeout=args.timeout,
                                prefix_output=False))


def _vw_defaults(args: argparse.Namespace) -> None:
    """VW's meaning of the flags left out, and the VW options terascale refuses."""
    given = [n for n in _UPDATE_RULE if getattr(args, n)]
    args.learning_rate_given = args.learning_rate is not None
    if args.learning_rate is None:
        args.learning_rate = 0.5
    args.power_t_given = args.power_t is not None
    if args.power_t is None:
        args.power_t = 0.5
    for name, default in (("tol", 1e-3), ("memory", 15)):
        setattr(args, f"{name}_given", getattr(args, name) is not None)
        if getattr(args, name) is None:
            setattr(args, name, default)
    args.initial_t_given = args.initial_t is not None
    if args.initial_t is None:
        args.initial_t = 0.0
    # VW's --sgd, a strict subset of the three rules, or --sparse_l2: VW's gd in _vwsgd
    args.plain_rule = (args.sgd or 0 < len(given) < 3 or bool(args.sparse_l2)) \
        and not args.testonly
    if args.decay_learning_rate != 1.0 and (args.plain_rule or args.audit):
        raise ConfigError("--decay_learning_rate: terascale vw decays the rate of its "
                          "online passes (VW's default update), not with --sgd, "
                          "--adaptive/--normalized/--invariant alone, --sparse_l2 or --audit")
    if args.sparse_l2 < 0:
        raise ConfigError(f"--sparse_l2 must be >= 0, not {args.sparse_l2:g}")
    if args.initial_t < 0:
        raise ConfigError(f"--initial_t must be >= 0, not {args.initial_t:g}")
    if args.testonly and (args.passes or 1) > 1:
        raise ConfigError(f"-t with --passes {args.passes}: VW predicts every example "
                          f"{args.passes} times and holds out every 10th; terascale vw's "
                          f"-t predicts each once: give --passes 1")
    if args.patience < 1 and (args.passes or 1) > 1:  # (VW: a pass that wins ends the run)
        raise ConfigError(f"--early_terminate must be >= 1, not {args.patience} (VW stops "
                          f"after the first pass then, whatever its holdout loss: give "
                          f"--passes 1 for one pass)")
    if args.loss is None:  # (with -i too: VW's model does not keep the loss)
        from .._losstable import VW_DEFAULT_LOSS

        args.loss = VW_DEFAULT_LOSS
    if args.quantile_tau is not None:  # (VW's error: tau is the quantile loss's)
        from .._losstable import takes_tau
        from .._names import cli_names

        with cli_names():
            takes = takes_tau(args.loss)
        if not takes:
            raise ConfigError(f"--quantile_tau {args.quantile_tau:g} goes with "
                              f"--loss_function quantile (the loss is {args.loss})")
    else:
        args.quantile_tau = 0.5
    if args.normalize == "auto":
        args.normalize = "off"
    if args.l2 is None:
        args.l2 = 0.0
    # the cache files VW would create (--cache_file's, then -c's: the data file's name and
    # .cache), the first of which the preamble names; terascale keeps its own cache instead
    data = (args.data_flag or args.data or [""])[0]
    args.vw_cache = list(args.cache_file) + ([f"{data}.cache"] if args.cache else [])
    if args.cache_file:
        args.cache = True
    args.vw_mode = True
    from .._f32 import f32

    ranged = args.min_prediction is not None or args.max_prediction is not None
    bounds = [None if v is None else f32(v)  # (VW's floats)
              for v in (args.min_prediction, args.max_prediction)]
    # with -i: the range -i's model starts from, the bounds given over it
    # (_cli_run.vw_start); the range stays there (options' fixed_range)
    args.vw_range = bounds if ranged and args.initial else None
    # --initial_t with -i: the sums every weight starts from, under -i's model
    # (_cli_run.vw_start); -t learns nothing, VW's batch learner has no such sums
    args.vw_initial_t = None
    if args.initial and args.initial_t and not (args.plain_rule or args.testonly
                                                or args.bfgs is not None
                                                or args.cg is not None):
        args.vw_initial_t = args.initial_t
    # --oaa K with the range or --initial_t alone: its K learners start from them
    # (_oaa.train_oaa; with -n N each worker's, _oaa.ranged_start), the compiled learner's
    # run too; else a model of the starting weights, from which training starts as from -i
    args.vw_oaa_range = args.vw_oaa_initial_t = None
    if args.initial_t and not (args.plain_rule or args.initial):
        # VW's adaptive gd sets every weight to --initial_weight (and its sums to
        # initial_t) after drawing the random weights: --initial_t discards the draw
        args.random_weights = args.normal_weights = args.truncated_normal_weights = False
    others = (args.constant or args.initial_weight or args.random_weights
              or args.normal_weights or args.truncated_normal_weights)
    if ((ranged or args.initial_t) and not others and not args.initial
            and args.oaa is not None and not args.plain_rule):
        args.vw_oaa_range = bounds
        args.vw_oaa_initial_t = args.initial_t or None
    elif (others or ((ranged or (args.initial_t and not args.plain_rule))
                     and not args.initial)):
        args.starting_weights = True
        if _compiled_start(args):  # (the compiled learner writes them in its table)
            import copy

            args.vw_start = copy.copy(args)
        else:
            args.initial = _starting_weights(args)


def _compiled_start(args: argparse.Namespace) -> bool:
    """Whether a run's starting weights may be left to the compiled learner
    (``_vwonline.train`` writes them into its table; ``args.vw_start``: the flags they come
    from) rather than written as a model that training starts from as from -i: a run
    learning (one worker or ``-n N``'s compiled workers) without -i, ``--oaa``,
    ``--audit`` or ``--save_per_pass``, from one value or VW's uniform draw
    (``--initial_weight``, ``--random_weights``, ``--constant``, ``--initial_t``, the
    label range; not the normal draws). Where the numba pass runs it after all,
    :func:`numba_start` writes that model first."""
    return not (args.initial or args.testonly or args.oaa is not None
                or args.plain_rule or args.preserve_performance_counters
                or args.save_per_pass or args.audit or args.bfgs is not None
                or args.cg is not None or args.normal_weights
                or args.truncated_normal_weights)


def numba_start(args: argparse.Namespace) -> None:
    """The model of a run's starting weights left to the compiled learner
    (:func:`_compiled_start`), written as ``-i`` for the numba pass, which runs it."""
    start = getattr(args, "vw_start", None)
    if start is not None:
        args.initial, args.vw_start = _starting_weights(start), None


def _starting_weights(args: argparse.Namespace) -> str:
    """VW's --initial_weight / --constant: a model holding only the starting weights (no
    learner state), from which training starts as from -i (written to a temporary file)."""
    import numpy as np

    from .._front._cli_options import train_options
    from .._io._dataset import ParseOptions
    from .._io._hashing import CONSTANT_HASH
    from .._model import LinearModel

    if args.initial:
        given = [flag for flag, on in (
            ("--constant", args.constant), ("--initial_weight", args.initial_weight),
            ("--random_weights", args.random_weights),
            ("--normal_weights", args.normal_weights),
            ("--truncated_normal_weights", args.truncated_normal_weights)) if on]
        raise ConfigError(f"{'/'.join(given) or '--constant/--initial_weight'} set the "
                          f"weights and sums training starts from: not supported with -i "
                          f"MODEL, whose weights it starts from, by terascale vw")
    o = train_options(args)
    parse = ParseOptions(**{k: tuple(v) if isinstance(v, list) else v
                            for k, v in o.items() if k in ParseOptions().to_dict()})
    size = 1 << parse.bits
    every = (args.initial_weight or args.random_weights or args.normal_weights
             or args.truncated_normal_weights or args.initial_t)
    if every and parse.bits > 24:
        raise ConfigError(f"--initial_weight/--random_weights/--normal_weights/--initial_t "
                          f"set all 2^b weights: up to -b 24, not -b {parse.bits}")
    if every:  # VW's order of precedence (initialize_regressor)
        from ._vwrandom import normal_weights, uniform_weights

        idx = np.arange(size, dtype=np.uint32)
        if args.initial_weight or not (args.random_weights or args.normal_weights
                                       or args.truncated_normal_weights):
            w = np.full(size, args.initial_weight, np.float32)
        elif args.random_weights:
            w = uniform_weights(size, args.random_seed)
        else:
            w = normal_weights(size, truncated=not args.normal_weights)
    else:
        idx, w = np.zeros(0, np.uint32), np.zeros(0, np.float32)
    if args.constant:  # (VW sets the weight at the constant's slot with --noconstant too)
        c = CONSTANT_HASH & (size - 1)
        if every:
            w[c] = args.constant
        else:
            idx, w = np.array([c], np.uint32), np.array([args.constant], np.float32)
    zeros = np.zeros(len(idx), np.float32)
    state = new_state()
    g2 = zeros
    if args.initial_t:  # VW's gd: initial_t fake examples, each of norm and gradient 1
        g2 = np.full(len(idx), args.initial_t, np.float32)
        state[TOTAL_WEIGHT] = state[SUM_NORM_X] = args.initial_t
    # the range stays there (_losses.FIXED_RANGE), as VW's two floats: 0.4 clips to 0.4f
    if args.min_prediction is not None:
        state[MIN_LABEL] = np.float32(args.min_prediction)
    if args.max_prediction is not None:
        state[MAX_LABEL] = np.float32(args.max_prediction)
    info = {"vw_counters": {"t": args.initial_t, "initial_t": args.initial_t}} \
        if args.initial_t else {}  # (VW's counters start at t, its model keeps initial_t)
    return _temporary_model(LinearModel(indices=idx, weights=w, parse=parse, loss=o["loss"],
                                        info=info, adaptive=(g2, zeros, state)))


def _unknown(extras: Sequence[str], parser: argparse.ArgumentParser) -> ConfigError:
    for arg in extras:
        flag = arg.split("=", 1)[0]
        if flag in vw.REFUSED:
            return ConfigError(f"{flag} (a Vowpal Wabbit option) is not supported by "
                               f"terascale vw: {vw.REFUSED[flag]}")
    flags = [a for a in extras if a.startswith("-") and a != "-"]
    what = (f"{flags[0]}: a Vowpal Wabbit option terascale vw does not know" if flags
            else f"unexpected argument {extras[0]!r}")
    return ConfigError(f"{what} (terascale vw --help lists the options it supports)")
