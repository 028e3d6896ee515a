"""Removal of a job's shared-memory segments after its workers ended (even by SIGKILL)."""

from __future__ import annotations

import os

__all__ = ["SHM_DIR", "job_prefix", "remove_job_segments"]

SHM_DIR = "/dev/shm"


def job_prefix(job: str) -> str:
    """Every shared-memory segment of job ``job`` is named with this prefix."""
    return f"terascale-{job}-"


def remove_job_segments(job: str, *, keep: str | None = None) -> list[str]:
    """Delete the segments in /dev/shm whose names start with ``job_prefix(job)``.

    ``keep`` spares those of another job id sharing that prefix (a run's current attempt
    when ``job`` names the whole run). Returns the names removed.
    """
    removed: list[str] = []
    try:
        names = os.listdir(SHM_DIR)
    except OSError:
        return removed
    prefix, spared = job_prefix(job), job_prefix(keep) if keep else None
    for name in names:
        if name.startswith(prefix) and not (spared and name.startswith(spared)):
            try:
                os.unlink(os.path.join(SHM_DIR, name))
                removed.append(name)
            except OSError:
                pass
    return removed
