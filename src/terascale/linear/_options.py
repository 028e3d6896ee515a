"""The options of :func:`terascale.linear.train` (the flags of ``terascale linear train``)."""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral  # (numpy registers its integer types as Integral)
from typing import TextIO

from .._errors import ConfigError
from ._io._dataset import ParseOptions
from ._losstable import loss_spec
from ._names import opt

__all__ = ["TrainOptions"]


@dataclass(frozen=True, kw_only=True)
class TrainOptions:
    """Every option of :func:`train` (the flags of ``terascale linear train``).

    Pass them as keywords to :func:`train`, :class:`LinearClassifier`,
    :class:`LinearRegressor` or ``terascale.spark.train_linear``; an invalid value is a
    :class:`~terascale.ConfigError` naming the parameter. Each field below gives its type,
    its default and what it does; the command line's flag is in parentheses. The recipe of
    Agarwal et al. (JMLR 2014) is ``passes=1`` and ``bfgs=K``: one online pass whose
    averaged weights warm-start K passes of L-BFGS.
    """

    #: The input format, ``"vw"`` (VW text), ``"libsvm"`` (libsvm/svmlight) or ``"csv"``
    #: (``--format``).
    format: str = "vw"
    #: Hash bits; the model has ``2**bits`` weights (``-b``; 1 to 30).
    bits: int = 18
    #: Namespace pairs to cross, by first letter; ``":"`` is every namespace, as in VW
    #: (``-q ab``).
    quadratic: tuple[str, ...] = ()
    #: Namespace triples to cross (``--cubic abc``; ``":"`` wildcards allowed).
    cubic: tuple[str, ...] = ()
    #: Crosses of two or more namespaces (VW's ``--interactions``).
    interactions: tuple[str, ...] = ()
    #: The label column of CSV input.
    label: str = "label"
    #: Columns of CSV input hashed as categories even when numeric.
    categorical: tuple[str, ...] = ()
    #: Namespaces (first letters) left out of VW input, or columns left out of CSV input
    #: (``--ignore``).
    ignore: tuple[str, ...] = ()
    #: Keep only the VW namespaces starting with these letters (``--keep``).
    keep: tuple[str, ...] = ()
    #: VW namespaces used only inside interactions (``--ignore_linear``).
    ignore_linear: tuple[str, ...] = ()
    #: A namespace crossed with itself gives every ordered pair of its features, not only
    #: ``j >= i`` (VW's ``--permutations``).
    permutations: bool = False
    #: Keep interactions that are the same set of namespaces (``-q ab -q ba`` crosses
    #: twice; VW's ``--leave_duplicate_interactions``).
    leave_duplicates: bool = False
    #: Skip malformed lines, counting them, instead of raising
    #: :class:`~terascale.DataError` (``--skip-bad``).
    skip_bad: bool = False
    #: Read VW text's label sections as VW does where it warns and reads on
    #: (:attr:`.ParseOptions.lenient_labels`; ``terascale vw`` sets it, its lines printed
    #: on standard output with the progress lines).
    lenient_labels: bool = False
    #: Add VW's constant (bias) feature; False is ``--noconstant``.
    constant: bool = True
    #: ``"logistic"`` (labels -1/+1 or 0/1), ``"squared"`` or ``"hinge"`` (``--loss``).
    loss: str = "logistic"
    #: Online learning rate of VW's adaptive, normalized, invariant update (``-l``).
    learning_rate: float = 0.5
    #: Exponent of the learning-rate decay (``--power_t``).
    power_t: float = 0.5
    #: Each online pass after the first learns at the rate of the pass before times this
    #: (VW's ``--decay_learning_rate``; 1: every pass at ``learning_rate``). Below 1 it
    #: damps later passes, which revisit examples the learner has already fit.
    decay_learning_rate: float = 1.0
    #: L1 strength, VW's truncated gradient; online passes only (``--l1``).
    l1: float = 0.0
    #: L2 strength; online, VW's per-example shrinkage; with ``bfgs``/``cg`` the batch
    #: objective's ``l2/2 ||w||^2``. None: 0 online and 1.0 in the batch phase (``--l2``).
    l2: float | None = None
    #: Online passes over the data (``--passes``); 0 with ``bfgs``/``cg``: batch only.
    passes: int = 1
    #: Passes of L-BFGS after the online passes, warm-started from their averaged weights
    #: (``--bfgs K``); 0: none.
    bfgs: int = 0
    #: Passes of preconditioned nonlinear conjugate gradient after the online passes
    #: (``--cg K``); excludes ``bfgs``.
    cg: int = 0
    #: L-BFGS memory, the number of correction pairs kept (``--mem``).
    memory: int = 15
    #: Stop the batch phase when the loss decreases by less than this, relatively
    #: (``--tol``).
    tol: float = 1e-7
    #: How workers' online learners are combined at the end of a pass: ``"weighted"`` (by
    #: each worker's adaptive sums, VW's nonuniform average), ``"uniform"``, or ``"chain"``
    #: (the workers learn one after another: one learner's exact model). ``"auto"``: chain
    #: before a batch phase (N workers then end the recipe at one worker's model), weighted
    #: otherwise. Choose ``"weighted"`` for the talk's fully parallel recipe on many nodes,
    #: where a chain's serial online pass would cost more than its accuracy (``--average``).
    average: str = "auto"
    #: With 2+ workers, mix their online learners every K examples of each shard during a
    #: pass (iterative parameter mixing, McDonald et al. 2010): closer to one learner, slower.
    #: None or 0: only at the end of each pass (``--average-every``).
    average_every: int | None = None
    #: Fraction of examples held out to stop the batch phase early. None: 0.1 with
    #: ``bfgs``/``cg`` or ``passes > 1``, else 0 (``--holdout``).
    holdout: float | None = None
    #: Hold out every example after the first ``holdout_after`` of each pass instead
    #: (VW's ``--holdout_after``; one worker); 0: off.
    holdout_after: int = 0
    #: In the batch phase, regularize numeric columns standardized (``"std"``), raw
    #: (``"off"``), or ``"auto"``: std for CSV input, off otherwise (``--normalize``).
    normalize: str = "auto"
    #: Batch passes without holdout improvement before stopping (``--patience``).
    patience: int = 3
    #: Directory of the parsed-data cache. None: ``TMPDIR/terascale-cache``; ``""``
    #: disables the cache (``--cache-dir``).
    cache_dir: str | None = None
    #: Write the cache even for one pass (True, VW's ``-c``). None: when the data is read
    #: more than once or ``cache_dir`` is given.
    cache: bool | None = None
    #: VW's ``--binary``: predictions are -1/1 and progress reports the 0/1 loss.
    binary: bool = False
    #: Print VW's progress table while training.
    progress: bool = False
    #: Where the progress table goes (None: standard error).
    progress_file: TextIO | None = None
    #: Report as ``terascale vw`` does: VW's closing block, no terascale lines.
    vw_text: bool = False
    #: Online passes read labels as VW does (a label outside the loss's range as it is).
    vw_labels: bool = False
    #: Predictions stay clipped to the range of the initial model's state, not widened to
    #: the labels learned from (VW's ``--min_prediction``/``--max_prediction``).
    fixed_range: bool = False
    #: The logistic and poisson losses' prediction range starts at the initial model's
    #: state (VW reads ``-i``'s model's header range over their [-50, 50]), widened to the
    #: labels learned from, not to [-50, 50] as well.
    header_range: bool = False
    #: The quantile of ``loss="quantile"``, in (0, 1) (VW's ``--quantile_tau``).
    quantile_tau: float = 0.5
    #: The expectile of ``loss="expectile"``, in (0, 0.5], required with it (VW's
    #: ``--expectile_q``): the weight of a label below the prediction, 1 - q that of one
    #: above (0.5: half the squared loss; 0.1: a prediction near the labels' low tail).
    expectile_q: float | None = None

    def __post_init__(self) -> None:
        loss_spec(self.loss)  # a known loss, or an error naming them
        if self.average not in ("auto", "uniform", "weighted", "chain"):
            raise ConfigError(f"{opt('average')} must be auto, weighted, uniform or chain, not "
                              f"{self.average!r}")
        if self.average == "chain" and self.average_every:
            raise ConfigError(f"{opt('average', 'chain')} hands one learner from worker to "
                              f"worker: there is nothing to average every "
                              f"{self.average_every} examples ({opt('average_every')})")
        from ._losstable import LOSS_TABLE, check_parameters

        if (self.bfgs or self.cg) and not LOSS_TABLE[self.loss].batch:
            raise ConfigError(f"{opt('loss', self.loss)} has no batch form: L-BFGS/CG "
                              f"({opt('bfgs')}/{opt('cg')}) need logistic, squared or hinge")
        check_parameters(self.loss, tau=self.quantile_tau, q=self.expectile_q)
        if self.bfgs and self.cg:
            raise ConfigError(f"{opt('bfgs')} and {opt('cg')} exclude each other")
        if isinstance(self.normalize, bool):  # normalize=True/False from Python
            object.__setattr__(self, "normalize", "std" if self.normalize else "off")
        if self.normalize not in ("auto", "std", "off"):
            raise ConfigError(f"{opt('normalize')} must be auto, std or off, not "
                              f"{self.normalize!r}")
        if self.average_every is not None and (
                isinstance(self.average_every, bool)
                or not isinstance(self.average_every, Integral)
                or self.average_every < 0):
            raise ConfigError(f"{opt('average_every')} must be an integer >= 0 (examples "
                              f"per worker between averages; 0: at the end of a pass "
                              f"only), not {self.average_every!r}")
        for name in ("bits", "passes", "bfgs", "cg", "memory", "patience"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, Integral):
                raise ConfigError(f"{opt(name)} must be an integer, not {v!r}")
        for name in ("passes", "bfgs", "cg"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{opt(name)} must be >= 0")
        if self.memory < 1:
            raise ConfigError(f"{opt('memory')} must be >= 1, not {self.memory}")
        if self.passes == 0 and not (self.bfgs or self.cg):
            raise ConfigError(f"{opt('passes')} 0 needs {opt('bfgs')} or {opt('cg')}")
        if self.holdout is not None and not 0.0 <= self.holdout < 1.0:
            raise ConfigError(f"{opt('holdout')} must be in [0, 1), not {self.holdout}")
        # (VW's -l 0 learns nothing and sums the gradients: terascale vw takes it as VW)
        if not (self.learning_rate > 0 or (self.vw_text and self.learning_rate == 0)):
            raise ConfigError(f"{opt('learning_rate')} must be > 0, not {self.learning_rate}")
        if not self.decay_learning_rate > 0:
            raise ConfigError(f"{opt('decay_learning_rate')} must be > 0, not "
                              f"{self.decay_learning_rate}")
        if self.l1 < 0 or (self.l2 is not None and self.l2 < 0):
            raise ConfigError(f"{opt('l1')}/{opt('l2')} must be >= 0")
        if self.l1 > 0 and (self.bfgs or self.cg):
            raise ConfigError(f"{opt('l1')} works with online passes only (L-BFGS and CG "
                              f"need a smooth objective)")
        if self.normalize == "std" and not (self.bfgs or self.cg):
            raise ConfigError(f"{opt('normalize', 'std')} shapes the batch objective: it "
                              f"needs {opt('bfgs')} or {opt('cg')} (the online pass is "
                              f"scale-invariant already)")
        if self.cache not in (None, True, False):
            raise ConfigError(f"{opt('cache')} must be True, False or None, not {self.cache!r}")
        if self.cache and self.cache_dir == "":
            raise ConfigError(f"{opt('cache')} with {opt('cache_dir', '')}: the empty "
                              f"directory disables the cache")
        self.parse_options()  # validates format, bits, -q

    def cache_root(self) -> str | None:
        """The cache directory to read and write ("": none; None: the default one).

        The parsed data is cached when asked (``cache=True``, VW's ``-c``; or a
        ``cache_dir`` given, as VW's ``--cache_file`` implies ``-c``) and when this run
        reads it more than once (``passes`` > 1, an L-BFGS/CG phase). One online pass reads
        the text once, as VW without ``-c`` does: encoding and writing a cache that nothing
        reads would cost a fifth of that pass's CPU time."""
        if self.cache is False:
            return ""
        if self.cache or self.cache_dir is not None:
            return self.cache_dir
        return None if self.passes > 1 or self.batch else ""

    def parse_options(self) -> ParseOptions:
        return ParseOptions(format=self.format, bits=self.bits, quadratic=self.quadratic,
                            cubic=self.cubic, interactions=self.interactions,
                            label=self.label, categorical=self.categorical,
                            ignore=self.ignore, keep=self.keep,
                            ignore_linear=self.ignore_linear, skip_bad=self.skip_bad,
                            lenient_labels=self.lenient_labels,
                            constant=self.constant, permutations=self.permutations,
                            leave_duplicates=self.leave_duplicates)

    def chained(self, workers: int) -> bool:
        """Whether ``workers`` learn one after another (:mod:`._chain`): ``average="chain"``,
        and the default (``"auto"``, no ``average_every``) before a batch phase. The
        batch phase minimizes one objective whatever the number of workers, but it stops
        after a few passes; started from an average of N online learners it ends elsewhere
        than one worker's. Chained, the online pass ends at one worker's learner
        (exactly), so N workers end the recipe at one worker's model (the comparison:
        ``docs/benchmarks/linear-wide.md``, "More workers, the same test loss").

        Parameters
        ----------
        workers
            The number of workers in the job.
        """
        if workers <= 1:
            return False
        return self.average == "chain" or (self.average == "auto" and bool(self.batch)
                                           and not self.average_every)

    @property
    def averaging(self) -> str:
        """How averaged workers combine: ``"weighted"`` or ``"uniform"`` (``"auto"`` is
        weighted when it does not chain)."""
        return "weighted" if self.average == "auto" else self.average

    def mix_every(self, workers: int) -> int:
        """Examples per worker between averages during an online pass (0: none).

        Parameters
        ----------
        workers
            The number of workers in the job.
        """
        from ._combine._mixing import default_every

        if workers <= 1 or self.chained(workers):
            return 0
        return default_every(workers) if self.average_every is None else int(self.average_every)

    @property
    def batch(self) -> int:
        return self.bfgs or self.cg

    @property
    def standardized(self) -> bool:
        """Whether the batch objective is the one on standardized numeric columns. On
        tables whose columns have raw scales far apart (CSV input, typically), the l2
        term of the raw objective penalizes columns unevenly; standardized, it treats every
        column alike, which holds test AUC as l2 grows. So CSV input standardizes by
        default; other formats keep VW's raw objective."""
        return self.normalize == "std" or (self.normalize == "auto" and self.format == "csv")

    def online_kind(self) -> int:
        """The loss code of the online passes: with ``vw_labels`` and no batch phase,
        labels are used as VW uses them (a logistic label 0 is the soft label 1/2, not
        class -1); the batch phase always reads a label by its sign."""
        from ._losstable import loss_code

        return loss_code(self.loss, raw_labels=self.vw_labels and not self.batch,
                         tau=self.quantile_tau, q=self.expectile_q, fixed_range=self.fixed_range,
                         header_range=self.header_range)

    @property
    def labels_by_sign(self) -> bool:
        """Whether the online passes read labels as classes by their sign (so that any
        other label than -1/0/1 is refused)."""
        from ._losstable import LOSS_TABLE

        return LOSS_TABLE[self.loss].classes and not (self.vw_labels and not self.batch)

    @property
    def holdout_fraction(self) -> float:
        if self.holdout is not None:
            return self.holdout
        return 0.1 if (self.batch or self.passes > 1) else 0.0

    def online_l2(self, total_weight: float) -> float:
        """Online runs: VW's per-example shrinkage ``--l2``. Before a batch phase, the online
        pass does SGD on the batch objective, whose per-example share is l2 / N.

        Parameters
        ----------
        total_weight
            The sum of the examples' importance weights over the job (N).
        """
        if not self.batch:
            return 0.0 if self.l2 is None else self.l2
        return self.batch_l2 / max(total_weight, 1.0)

    @property
    def batch_l2(self) -> float:
        """The batch objective is sum of losses + l2/2 ||w||^2; 1.0 unless given."""
        return 1.0 if self.l2 is None else self.l2
