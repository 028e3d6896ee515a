"""Vowpal Wabbit's command line on ``terascale linear train|predict``: spellings, refusals.

A VW user's command should work as typed, or fail with a message that says what to use
instead. Three tables: ``SPELLINGS`` (VW's names for flags terascale has, added to the same
arguments), ``ACCEPTED`` (VW flags that change nothing here, and why) and ``REFUSED`` (VW
reductions and options terascale does not implement, with the alternative). A flag in none
of them is an unknown option: a ConfigError listing what ``train`` supports.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ..._errors import ConfigError

__all__ = ["ACCEPTED", "LINKS", "REFUSED", "SPELLINGS", "GivenOnce", "disagreement", "names",
           "unknown_flags"]

LINKS = ("identity", "logistic", "glf1", "poisson")  # VW's --link, every one of them

# terascale flag -> VW's spellings of it
SPELLINGS: dict[str, tuple[str, ...]] = {
    "--loss": ("--loss_function",),
    "--learning-rate": ("--learning_rate",),
    "--power-t": ("--power_t",),
    "--bits": ("--bit_precision",),
    "--final-regressor": ("--final_regressor",),
    "--initial-regressor": ("--initial_regressor",),
    "--cg": ("--conjugate_gradient",),
    "--tol": ("--termination",),
    "--patience": ("--early_terminate",),
    "--raw": ("--raw_predictions_stdout",),
}

_MULTICLASS = ("multiclass reductions other than one-against-all (--oaa K) are not part "
               "of terascale: use --oaa K, or vowpalwabbit")
_BANDIT = "contextual bandits are not part of terascale: use vowpalwabbit"
_UPDATE = ("terascale's online update is VW's default (adaptive, normalized, invariant, all "
           "three); VW flags that choose another rule are not supported")
_CLUSTER = ("VW's cluster mode is replaced by terascale's own: `terascale linear train -n N` "
            "on one host, `terascale run` / Spark / Ray beyond it (to run vowpalwabbit's "
            "own cluster mode, `terascale span-server` is its spanning-tree daemon)")
_FEATURES = ("feature generation beyond -q/--interactions is not supported: write the "
             "features into the data")

# VW flag -> why terascale refuses it, and what to use instead
REFUSED: dict[str, str] = {
    **dict.fromkeys(("--ect", "--csoaa", "--csoaa_ldf", "--wap", "--wap_ldf",
                     "--log_multi", "--recall_tree", "--multilabel_oaa", "--plt"), _MULTICLASS),
    "--classweight": "VW's class weights are not supported: give each example its "
                     "importance weight in the data (the number after the label)",
    **dict.fromkeys(("--cb", "--cb_adf", "--cb_explore", "--cb_explore_adf", "--cbify",
                     "--warm_cb", "--explore_eval", "--ccb_explore_adf", "--slates",
                     "--cats", "--cb_dro"), _BANDIT),
    **dict.fromkeys(("--sgd", "--adaptive", "--normalized", "--invariant", "--sparse_l2"),
                    "linear train's update is VW's default; terascale vw runs VW's other "
                    "rules (--sgd, --adaptive, --normalized, --invariant, --sparse_l2)"),
    **dict.fromkeys(("--ftrl", "--pistol", "--coin", "--freegrad",
                     "--exact_adaptive_norm"), _UPDATE),
    **dict.fromkeys(("--span_server", "--total", "--node", "--unique_id", "--daemon",
                     "--port", "--num_children", "--threads"), _CLUSTER),
    "--affix": "linear train has no parse-time feature generation: terascale vw --affix "
               "adds VW's prefix and suffix features",
    "--spelling": "linear train has no parse-time feature generation: terascale vw "
                  "--spelling adds VW's spelling features",
    **dict.fromkeys(("--lrq", "--lrqfa",
                     "--stage_poly", "--new_mf", "--rank", "--autolink",
                     "--dictionary"), _FEATURES),
    **dict.fromkeys(("--ngram", "--skips", "--redefine", "--feature_limit"),
                    "linear train has no parse-time feature generation: terascale vw "
                    "applies --ngram/--skips/--redefine/--feature_limit as VW does"),
    "--ksvm": "kernel SVMs are not part of terascale: --loss hinge trains a linear SVM",
    "--lda": "topic models are not part of terascale: use vowpalwabbit, or scikit-learn's "
             "LatentDirichletAllocation",
    "--nn": "neural networks are terascale.torch's job (data-parallel PyTorch)",
    "--boosting": "ensembles are not part of terascale: use vowpalwabbit",
    "--bootstrap": "ensembles are not part of terascale: use vowpalwabbit",
    "--active": "active learning is not part of terascale: use vowpalwabbit",
    "--search": "learning to search is not part of terascale: use vowpalwabbit",
    "--top": "top-k prediction is not part of terascale",
    "--marginal": "the marginal reduction is not part of terascale",
    "--hash": "linear train hashes as VW's default (--hash strings); terascale vw --hash "
              "all hashes every name as VW's",
    "--hash_seed": "linear train hashes with VW's default seed 0; terascale vw --hash_seed "
                   "S seeds the hashes as VW does",
    "--cache_file": "terascale names and keys its caches itself: --cache-dir DIR sets where",
    "--audit": "linear train has no audit: terascale vw --audit prints VW's, or "
               "--invert_hash FILE writes the weights by feature name",
    "-a": "linear train has no audit (VW's --audit): terascale vw -a prints VW's, or "
          "--invert_hash FILE writes the weights by feature name",
    "--random_weights": "linear train starts from zero weights (or from -i MODEL); "
                        "terascale vw --random_weights starts from VW's random weights",
    "--initial_t": "linear train starts the adaptive sums at 0; terascale vw --initial_t T "
                   "starts them as VW does",
    "--initial_weight": "linear train starts from zero weights (or from -i MODEL); "
                        "terascale vw --initial_weight W starts every weight at W",
    "--random_seed": "nothing in terascale's training is random (holdout is every k-th "
                     "example): there is no seed to set",
    "--min_prediction": "linear train clips predictions to the labels learned from, as VW "
                        "by default; terascale vw --min_prediction LO fixes the bound",
    "--max_prediction": "linear train clips predictions to the labels learned from, as VW "
                        "by default; terascale vw --max_prediction HI fixes the bound",
    "--examples": "not supported: give the data you want to learn from",
    "--sort_features": "linear train has no parse-time feature generation: terascale vw "
                       "--sort_features sorts each namespace's features and drops repeats "
                       "as VW",
    "--save_per_pass": "linear train writes one model at the end (-f); terascale vw "
                       "--save_per_pass writes each pass's as VW",
    **dict.fromkeys(("--output_feature_regularizer_binary",
                     "--output_feature_regularizer_text", "--input_feature_regularizer"),
                    "linear train's batch phase is its own: terascale vw --bfgs writes and "
                    "reads VW's regularizer files"),
    "--feature_mask": "linear train has no feature mask: terascale vw --feature_mask MODEL "
                      "learns only MODEL's nonzero weights, as VW",
    "--onethread": "terascale parses and learns in one thread per worker already",
    "--invert_hash_all": "not supported: --invert_hash FILE",
}

# VW flags that are accepted and change nothing, with the reason (shown in --help)
ACCEPTED: dict[str, str] = {
    "-k": "VW's --kill_cache: caches are keyed by file size, mtime and options, never stale",
    "--kill_cache": "caches are keyed by file size, mtime and options, never stale",
    "--compressed": ".gz and .zip inputs are recognized by their contents",
    "--save_resume": "models keep the learner's state after online passes (VW 9's default)",
    "--no_stdin": "terascale never reads standard input",
}


def names(flag: str, *short: str) -> list[str]:
    """The option strings of a terascale flag: short forms, itself, VW's spellings."""
    return [*short, flag, *SPELLINGS.get(flag, ())]


def add_accepted(p: argparse.ArgumentParser) -> None:
    """The no-op VW flags (a group in --help that says why they change nothing)."""
    g = p.add_argument_group("VW flags accepted for compatibility (they change nothing)")
    done: set[str] = set()
    pairs = (("-k", "--kill_cache"), ("--compressed",), ("--save_resume",),
             ("--no_stdin",))
    for flags in pairs:
        g.add_argument(*flags, action="store_true", dest="_vw_noop_" + flags[-1].strip("-"),
                       help=ACCEPTED[flags[-1]])
        done.update(flags)
    assert done == set(ACCEPTED)


def unknown_flags(command: str, extras: Sequence[str], parser: argparse.ArgumentParser
                  ) -> ConfigError:
    """The error for arguments argparse did not recognize: a refused VW flag says why and
    what to use instead; anything else lists the flags ``command`` supports."""
    for arg in extras:
        flag = arg.split("=", 1)[0]
        if flag in REFUSED:
            return ConfigError(f"{flag} (a Vowpal Wabbit option) is not supported by "
                               f"terascale linear {command}: {REFUSED[flag]}")
    flags = [a for a in extras if a.startswith("-") and a != "-"]
    supported = sorted({s for a in parser._actions for s in a.option_strings
                        if not s.startswith("--_")} - {"-h", "--help"},
                       key=lambda s: s.lstrip("-").lower())
    what = (f"unknown option {flags[0]}" if flags
            else f"unexpected argument {extras[0]!r}")
    return ConfigError(f"{what} for terascale linear {command} (neither a terascale flag nor "
                       f"a Vowpal Wabbit flag terascale knows). Supported: "
                       f"{' '.join(supported)}")


# VW's options of one value that a later value may override (``allow_override`` in VW's
# option definitions: the first value given is used, as for a model's options after the
# command line's), and -i, a list in VW of which it reads the first model
_FIRST_WINS = frozenset({"learning_rate", "power_t", "l1_state", "l2_state", "initial"})


class GivenOnce(argparse._StoreAction):
    """VW's rule for an option of one value given more than once: the same value again
    changes nothing; another value is an error (:func:`disagreement`), but for the options
    whose first value VW keeps (``_FIRST_WINS``). argparse's own rule, the last value wins,
    is the one ``terascale linear`` keeps."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: object, option_string: str | None = None) -> None:
        given = namespace.__dict__.setdefault("_vw_given", {})
        if self.dest not in given:
            given[self.dest] = values
            setattr(namespace, self.dest, values)
        elif values != given[self.dest] and self.dest not in _FIRST_WINS and \
                "_vw_disagreeing" not in namespace.__dict__:
            name = next(s for s in reversed(self.option_strings) if s.startswith("--"))
            namespace._vw_disagreeing = (name[2:], given[self.dest], values)


def disagreement(args: argparse.Namespace) -> ConfigError | None:
    """VW's error for the first option given twice with values that differ, else None
    (``-d`` is a list here: terascale reads each file named, once)."""
    found = args.__dict__.get("_vw_disagreeing")
    if found is None:
        return None
    name, a, b = found
    text = [f"{v:g}" if isinstance(v, float) else str(v) for v in (a, b)]
    return ConfigError(f"Disagreeing option values for '{name}': '{text[0]}' vs '{text[1]}'")
