"""A job's shared-memory segments: how they are made, shared between the ranks of a host,
named, and removed after a crash.

On Linux a segment is anonymous (``memfd_create``, its descriptor passed over a Unix socket:
``transport/_memfd.py``), so there is nothing to leak under any launcher. Elsewhere every segment of job ``J`` is ``/dev/shm/terascale-J-...``: the
shared-memory transport names them (:func:`segment_name`), and whoever outlives the
workers (``terascale run``, ``terascale.testing.run_workers``, the Spark and Ray runners)
removes what a worker killed between creating and unlinking one left behind
(:func:`remove_job_segments`).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence

__all__ = ["SHM_DIR", "job_prefix", "remove_job_segments", "segment_name"]

SHM_DIR = "/dev/shm"


def job_prefix(job: str) -> str:
    """Every shared-memory segment of job ``job`` is named with this prefix.

    Parameters
    ----------
    job
        The job id.
    """
    return f"terascale-{job}-"


def segment_name(job: str, group: Sequence[int], context: int = 0) -> str:
    """The segment of ``group`` (ranks of the job) in communicator ``context`` of ``job``.

    Parameters
    ----------
    job
        The job id.
    group
        The group's ranks in the job.
    context
        The communicator's context id (default 0: the job's).
    """
    key = ",".join(map(str, group)) + (f"@{context:x}" if context else "")
    tag = hashlib.blake2b(key.encode(), digest_size=6).hexdigest()
    return f"{job_prefix(job)}shm-{tag}"


def remove_job_segments(job: str, *, keep: str | None = None) -> list[str]:
    """Delete the segments in /dev/shm whose names start with ``job_prefix(job)``.

    Returns the names removed.

    Parameters
    ----------
    keep
        Spares the segments of this job id, which shares the prefix (a run's current
        attempt when ``job`` names the whole run); default None.
    job
        The job id (or a run's id, which prefixes its attempts' ids).
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

