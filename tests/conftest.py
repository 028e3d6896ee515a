"""Shared fixtures. Multiprocess tests use terascale.testing.run_workers (real processes)."""

from __future__ import annotations

import os
import sys

import pytest

# Workers print through the launcher; keep numpy/BLAS from oversubscribing the 2 cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# init() outside a launcher says once that the job has size 1; tests that want it unset this.
os.environ.setdefault("TERASCALE_QUIET", "1")


@pytest.fixture
def python() -> str:
    return sys.executable


@pytest.fixture(scope="session", autouse=True)
def _numba_kernels_compiled_once():
    """On a fresh clone numba compiles the linear kernels on first use: here, once, rather
    than in every worker process of every test that starts a few at once."""
    try:
        from terascale.linear.kernels import warm_kernels
    except ImportError:  # the linear extra (numba) is not installed: those tests skip
        return
    warm_kernels(full=True)
