"""Side-by-side benchmarks against the peers (``terascale bench ...``).

One module per area, its worker entry points beside it: :mod:`terascale.bench.allreduce`
(vs Gloo and Open MPI), ``terascale bench linear`` (vs Vowpal Wabbit), ``terascale bench
torch`` (vs DDP), ``terascale bench engines`` and ``terascale bench failures``. Every
command prints a table of ratios and can write JSON; the docs' benchmark pages
(``docs/benchmarks/``) record the runs and the commands that produced them.
"""

__all__: list[str] = []
