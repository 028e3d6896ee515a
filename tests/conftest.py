"""Shared fixtures. Multiprocess tests use terascale.testing.run_workers (real processes)."""

from __future__ import annotations

import os
import sys

import pytest

# Workers print through the launcher; keep numpy/BLAS from oversubscribing the 2 cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


@pytest.fixture
def python() -> str:
    return sys.executable
