"""Test harnesses: real worker processes on this machine, ranks as threads, emulated hosts.

:func:`run_workers` runs a function on N real worker processes (the multiprocess harness of
the test suite); :func:`run_threads` runs it on N threads of this process linked by the
in-process transport (the fast harness: every collective, no process); :mod:`terascale.testing.cluster` builds K emulated hosts (network
namespaces on a rate-limited bridge) to run jobs across hosts on one machine;
:func:`listening` tells where a server listens (the check that nothing binds every
interface unasked).

>>> from terascale.testing import run_workers
>>> run_workers(lambda comm: int(comm.allreduce(comm.rank + 1)), 3)
[6, 6, 6]
"""

from __future__ import annotations

from ._sockets import listening
from ._threads import run_threads
from ._workers import WorkerFailed, run_workers

__all__ = ["WorkerFailed", "listening", "run_threads", "run_workers"]
