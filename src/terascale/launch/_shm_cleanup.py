"""Removal of a job's shared-memory segments after its workers ended (even by SIGKILL)."""

from __future__ import annotations

import os

__all__ = ["SHM_DIR", "job_prefix", "remove_job_segments"]

SHM_DIR = "/dev/shm"


def job_prefix(job: str) -> str:
    """Every shared-memory segment of job ``job`` is named with this prefix."""
    return f"terascale-{job}-"


def remove_job_segments(job: str) -> list[str]:
    """Delete the job's segments left in /dev/shm; returns the names removed."""
    removed: list[str] = []
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return removed
    prefix = job_prefix(job)
    for name in names:
        if name.startswith(prefix):
            try:
                os.unlink(os.path.join(SHM_DIR, name))
                removed.append(name)
            except OSError:
                pass
    return removed
