"""Run terascale jobs on Ray (actors in a placement group); see :mod:`terascale.engines.ray`.

>>> import terascale.ray                                        # doctest: +SKIP
>>> terascale.ray.run(lambda: terascale.init().rank, num_workers=2)  # doctest: +SKIP
[0, 1]

ray is imported only when :func:`run` is called (extra ``terascale[ray]``).
"""

from .engines.ray import run

__all__ = ["run"]
