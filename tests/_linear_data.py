"""Synthetic data shared by the linear tests (a module, not a fixture, so forked workers
can call it): the generators of :mod:`terascale.linear.synthetic`."""

from __future__ import annotations

from terascale.linear.synthetic import logistic_lines

__all__ = ["vw_lines"]

vw_lines = logistic_lines
