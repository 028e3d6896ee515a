"""The shared-memory segments a job left behind, for the cleanup tests: only those of the
jobs named (tests running side by side have segments of their own)."""

from __future__ import annotations

import os

from terascale.transport.segments import SHM_DIR, job_prefix


def job_segments(*jobs: str) -> list[str]:
    """Names in the shared-memory directory that belong to any of ``jobs``."""
    names = os.listdir(SHM_DIR) if os.path.isdir(SHM_DIR) else []
    return [n for n in names if any(n.startswith(job_prefix(j)) for j in jobs)]
