"""Plan for 1,000 nodes: the alpha-beta-gamma cost model and an event simulator of allreduce.

>>> from terascale.sim import CostParams, predict, simulate
>>> c = CostParams(alpha=25e-6, beta=8 / 10e9, gamma=1 / 5e9)
>>> round(predict("ring", 64e6, 1000, c), 3), round(simulate("ring", 64e6, 1000, c).time, 3)
(0.165, 0.165)

``terascale simulate`` is the command line; ``terascale bench allreduce --calibrate`` fits
the parameters of this machine (:mod:`terascale.sim.calibrate`). Over rate-limited TCP
links, :mod:`terascale.sim.links` adds goodput, each schedule's busiest host link and
calibrated per-round and efficiency constants (fitted on emulated hosts with
``terascale bench allreduce --cluster K --link RATE``).
"""

from .model import (
    ALGORITHMS,
    CostParams,
    best,
    halving_doubling_time,
    hierarchical_time,
    predict,
    ring_time,
    shm_time,
    tcp_goodput,
    tree_shape,
    tree_time,
)
from .simulator import SimResult, simulate, straggler_delays

__all__ = [
    "ALGORITHMS",
    "CostParams",
    "SimResult",
    "best",
    "halving_doubling_time",
    "hierarchical_time",
    "predict",
    "ring_time",
    "shm_time",
    "simulate",
    "straggler_delays",
    "tcp_goodput",
    "tree_shape",
    "tree_time",
]
