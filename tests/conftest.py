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


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Under pytest-xdist (``make test`` runs ``-n 2 --dist loadfile``): a file's tests run
    on one worker, in order, and so do all of ``tests/engines`` (one Spark session, whose
    py4j socket a forked process must not inherit mid-use)."""
    from xdist.scheduler import LoadFileScheduling

    if config.getoption("dist") != "loadfile":
        return None

    class _Scheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith("tests/engines/"):
                return "tests/engines"
            return super()._split_scope(nodeid)

    return _Scheduling(config, log)
