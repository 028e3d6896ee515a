"""``terascale run``: the local launcher."""

from ..transport.segments import job_prefix, remove_job_segments
from .launcher import LaunchOptions, launch

__all__ = ["LaunchOptions", "job_prefix", "launch", "remove_job_segments"]
