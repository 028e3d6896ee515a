"""What the engine adapters share: the job environment of a worker, stale-segment cleanup,
how a learner's parse options are told from its training options."""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .._env import ENV_KEYS, JobEnv, parse_address
from .._errors import ConfigError
from ..launch import remove_job_segments

__all__ = ["check_workers", "environ", "job_env", "new_run_id", "remove_stale_segments",
           "run_rank", "split_parse_options"]


def new_run_id() -> str:
    """Id of one ``run()`` call; every attempt's job id starts with it (see cleanup)."""
    return "e" + secrets.token_hex(6)


def check_workers(num_workers: object, timeout: object) -> None:
    if not isinstance(num_workers, int) or isinstance(num_workers, bool) or num_workers < 1:
        raise ConfigError(f"num_workers={num_workers!r} must be a positive integer")
    if not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ConfigError(f"timeout={timeout!r} must be a positive number of seconds")


@contextmanager
def job_env(*, rank: int, size: int, rendezvous: str, secret: str, job: str, timeout: float,
            restart: int | None = None) -> Iterator[None]:
    """Set the variables ``terascale.init()`` reads, for the duration of the block."""
    addr = parse_address(rendezvous, "rendezvous")
    with environ(JobEnv("engine", rank, size, addr, secret.encode(), job=job,
                        timeout=timeout, restart=restart).to_environ()):
        yield


@contextmanager
def environ(env: dict[str, str]) -> Iterator[None]:
    """Set ``env`` (a ``JobEnv(...).to_environ()``, as the job runner hands it to a worker)
    for the duration of the block.

    Engines reuse their Python worker processes for later tasks (Spark's
    ``spark.python.worker.reuse``, Ray's worker pool, Dask's workers), so the previous
    values are put back.
    """
    saved = {k: os.environ.get(k) for k in ENV_KEYS}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_rank(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
             env: dict[str, str], run_id: str, job: str, close: Callable[[], None]) -> Any:
    """One rank in an engine's worker (a Ray actor's call, a Dask task): ``fn(*args,
    **kwargs)`` with the job's environment ``env`` set, after removing what killed workers
    of earlier attempts of ``run_id`` left on this host; ``close()`` at the end, whatever
    happened (rank 0's process serves the rendezvous until rank 0 is done)."""
    remove_stale_segments(run_id, job)
    try:
        with environ(env):
            return fn(*args, **kwargs)
    finally:
        close()


def remove_stale_segments(run_id: str, current_job: str | None = None) -> list[str]:
    """Remove this host's shared-memory segments of earlier attempts of run ``run_id``.

    An attempt killed by the engine (a lost executor, a killed actor) cannot clean up after
    itself, and on a cluster the driver cannot reach the executors' /dev/shm; so every worker
    removes what earlier attempts of its run left on its host before it joins. Segments of
    ``current_job`` (the attempt being assembled) are kept.
    """
    return remove_job_segments(run_id, keep=current_job)


# the options of train_linear that say how data is parsed (terascale.linear.ParseOptions);
# every other option is the learner's (terascale.linear.train)
_PARSE_KEYS = ("format", "bits", "quadratic", "cubic", "interactions", "label", "categorical",
               "ignore", "keep", "ignore_linear", "skip_bad", "constant")


def split_parse_options(options: dict) -> dict:
    """Take the parse options out of ``options`` (in place) and return them, normalized
    (VW text and ``ParseOptions``' default bits unless given; a single interaction or column
    name as a one-element tuple) and checked on the driver, so bad options fail before any
    task starts."""
    from ..linear import ParseOptions

    parse = {k: options.pop(k) for k in _PARSE_KEYS if k in options}
    checked = ParseOptions(**parse)  # normalizes (a string alone is a 1-tuple) and checks
    return {k: getattr(checked, k) for k in ("format", "bits", *parse)}
