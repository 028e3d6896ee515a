"""The options of :func:`terascale.linear.train` (the flags of ``terascale linear train``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TextIO

import numpy as np

from .._errors import ConfigError
from ._dataset import ParseOptions
from ._losses import LOSSES
from ._names import opt

__all__ = ["TrainOptions"]


@dataclass(frozen=True, kw_only=True)
class TrainOptions:
    """Every option of :func:`train` (the flags of ``terascale linear train``)."""

    format: str = "vw"
    bits: int = 18
    quadratic: tuple[str, ...] = ()
    cubic: tuple[str, ...] = ()
    interactions: tuple[str, ...] = ()
    label: str = "label"
    categorical: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()
    ignore_linear: tuple[str, ...] = ()
    skip_bad: bool = False
    constant: bool = True          # VW's bias feature
    loss: str = "logistic"
    learning_rate: float = 0.5
    power_t: float = 0.5
    l1: float = 0.0
    l2: float | None = None        # see online_l2 / batch_l2
    passes: int = 1
    bfgs: int = 0                  # passes of L-BFGS after the online passes
    cg: int = 0                    # passes of preconditioned CG after the online passes
    memory: int = 15               # L-BFGS memory
    tol: float = 1e-7              # stop on relative loss decrease below this
    average: str = "weighted"      # "uniform" | "weighted" | "chain" (_chain)
    average_every: int | None = None  # workers mix every K examples of a pass (_mixing);
                                   # None: _mixing.default_every, 0: at the end only
    holdout: float | None = None   # fraction held out to stop the batch phase
    normalize: str = "auto"        # batch objective on standardized numeric columns:
                                   # "std", "off", "auto" (std for CSV input)
    patience: int = 3              # batch iterations without holdout improvement
    cache_dir: str | None = None   # "" disables the cache
    cache: bool | None = None      # write the cache? see cache_root
    binary: bool = False           # VW's --binary: progress and pass losses are 0/1 loss
    progress: bool = False
    progress_file: TextIO | None = None

    def __post_init__(self) -> None:
        if self.loss not in LOSSES:
            raise ConfigError(f"{opt('loss')} must be one of {', '.join(LOSSES)}, not "
                              f"{self.loss!r}")
        if self.average not in ("uniform", "weighted", "chain"):
            raise ConfigError(f"{opt('average')} must be weighted, uniform or chain, not "
                              f"{self.average!r}")
        if self.average == "chain" and self.average_every:
            raise ConfigError(f"{opt('average', 'chain')} hands one learner from worker to "
                              f"worker: there is nothing to average every "
                              f"{self.average_every} examples ({opt('average_every')})")
        if self.bfgs and self.cg:
            raise ConfigError(f"{opt('bfgs')} and {opt('cg')} exclude each other")
        if isinstance(self.normalize, bool):  # normalize=True/False from Python
            object.__setattr__(self, "normalize", "std" if self.normalize else "off")
        if self.normalize not in ("auto", "std", "off"):
            raise ConfigError(f"{opt('normalize')} must be auto, std or off, not "
                              f"{self.normalize!r}")
        if self.average_every is not None and (
                isinstance(self.average_every, bool)
                or not isinstance(self.average_every, (int, np.integer))
                or self.average_every < 0):
            raise ConfigError(f"{opt('average_every')} must be an integer >= 0 (examples "
                              f"per worker between averages; 0: at the end of a pass "
                              f"only), not {self.average_every!r}")
        for name in ("bits", "passes", "bfgs", "cg", "memory", "patience"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
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
        if not self.learning_rate > 0:
            raise ConfigError(f"{opt('learning_rate')} must be > 0, not {self.learning_rate}")
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
        reads cost 1.1-1.7 s of the ~7.5 s of CPU of that pass (click data, 1M examples,
        task-clock of two pairs of runs; wall times on the 2-core host moved by more than
        that between runs)."""
        if self.cache is False:
            return ""
        if self.cache or self.cache_dir is not None:
            return self.cache_dir
        return None if self.passes > 1 or self.batch else ""

    def parse_options(self) -> ParseOptions:
        return ParseOptions(format=self.format, bits=self.bits, quadratic=tuple(self.quadratic),
                            cubic=tuple(self.cubic), interactions=tuple(self.interactions),
                            label=self.label, categorical=tuple(self.categorical),
                            ignore=tuple(self.ignore), keep=tuple(self.keep),
                            ignore_linear=tuple(self.ignore_linear), skip_bad=self.skip_bad,
                            constant=self.constant)

    def chained(self, workers: int) -> bool:
        """Whether ``workers`` learn one after another (:mod:`._chain`): ``average="chain"``,
        and the default (``"weighted"``, no ``average_every``) before a batch phase. The
        batch phase minimizes one objective whatever the number of workers, but it stops
        after a few passes; started from an average of N online learners it ends elsewhere
        than one worker's (measured: +5% test logloss at 2 workers, squared loss 35.0
        against 23.2 test MSE). Chained, the online pass ends at one worker's learner
        (exactly), so N workers end the recipe at one worker's model."""
        if workers <= 1:
            return False
        return self.average == "chain" or (self.average == "weighted" and bool(self.batch)
                                           and not self.average_every)

    def mix_every(self, workers: int) -> int:
        """Examples per worker between averages during an online pass (0: none)."""
        from ._mixing import default_every

        if workers <= 1 or self.chained(workers):
            return 0
        return default_every(workers) if self.average_every is None else int(self.average_every)

    @property
    def batch(self) -> int:
        return self.bfgs or self.cg

    @property
    def standardized(self) -> bool:
        """Whether the batch objective is the one on standardized numeric columns. Measured
        with ``--bfgs 20``: on a census-style table (raw columns up to ~1e5) test AUC equals
        the raw objective's at l2 = 1 and beats it as l2 grows (0.8924 vs 0.8872 at
        l2 = 100); on breast_cancer as CSV (columns 1e-3..4e3) 0.9948 vs 0.9888 at l2 = 1,
        0.9805 vs 0.9663 at l2 = 100: the l2 term then treats every column alike. So CSV
        input standardizes by default; other formats keep VW's raw objective."""
        return self.normalize == "std" or (self.normalize == "auto" and self.format == "csv")

    @property
    def holdout_fraction(self) -> float:
        if self.holdout is not None:
            return self.holdout
        return 0.1 if (self.batch or self.passes > 1) else 0.0

    def online_l2(self, total_weight: float) -> float:
        """Online runs: VW's per-example shrinkage ``--l2``. Before a batch phase, the online
        pass does SGD on the batch objective, whose per-example share is l2 / N."""
        if not self.batch:
            return 0.0 if self.l2 is None else self.l2
        return self.batch_l2 / max(total_weight, 1.0)

    @property
    def batch_l2(self) -> float:
        """The batch objective is sum of losses + l2/2 ||w||^2; 1.0 unless given."""
        return 1.0 if self.l2 is None else self.l2
