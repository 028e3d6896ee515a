"""The allreduce benchmark's peers: which can run here, and side environments for those
from PyPI (Intel MPI, MPICH, XGBoost's collective).

Intel MPI and MPICH are not Debian packages here, but both are on PyPI as runtime wheels
that mpi4py's own wheels load at run time (``pip install mpi4py impi-rt``, ``pip install
mpi4py mpich``). They cannot share one environment with each other nor with the Debian
Open MPI that the project's mpi4py is built against, so each gets its own virtual
environment under ``~/.cache/terascale/peers/<name>`` (``$XDG_CACHE_HOME`` honoured),
created by ``terascale bench allreduce --install-peers`` and reused afterwards.

The timing code is the benchmark's own worker file, run by the side environment's
interpreter under that environment's ``mpiexec``: it imports only numpy and mpi4py at
that point, so every MPI is timed by the same lines as Open MPI. Intel MPI runs with
``I_MPI_FABRICS=shm`` (one host: shared memory only, no network provider probing).
XGBoost (``xgboost-cpu``) runs its ``RabitTracker`` in one process of its environment and
its workers under our launcher, timed by the same worker file.
"""

from __future__ import annotations

import importlib.util
import os
import select
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence

from .._errors import ConfigError
from ..launch.cpubind import cpu_blocks

__all__ = ["SIDE_PEERS", "available_peers", "install_peer", "peer_command", "peer_environ",
           "peer_status", "peers_root", "side_job"]

# name -> what pip installs into its environment (by name, from the configured index)
SIDE_PEERS: dict[str, tuple[str, ...]] = {
    "intelmpi": ("mpi4py", "impi-rt", "numpy"),
    "mpich": ("mpi4py", "mpich", "numpy"),
    "xgboost": ("xgboost-cpu", "numpy"),  # the project's CPU-only wheel: no CUDA libraries
}
_ENV_VARS = {"intelmpi": {"I_MPI_FABRICS": "shm"}, "mpich": {}, "xgboost": {}}
_MPIS = ("intelmpi", "mpich")


def peers_root() -> str:
    """Where the side environments live."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "terascale", "peers")


def _bin(name: str, exe: str) -> str:
    return os.path.join(peers_root(), name, "bin", exe)


def peer_status(name: str) -> str | None:
    """None if side peer ``name`` is installed, else why it cannot run."""
    for exe in ("python", "mpiexec") if name in _MPIS else ("python",):
        if not os.access(_bin(name, exe), os.X_OK):
            return (f"{os.path.join(peers_root(), name)} has no bin/{exe}; run "
                    "`terascale bench allreduce --install-peers` once")
    return None


def install_peer(name: str, *, timeout: float = 1800.0) -> None:
    """Create ``name``'s environment and pip-install its packages (a no-op when present)."""
    if name not in SIDE_PEERS:
        raise ConfigError(f"--install-peers: {name!r} has no side environment; those that "
                          f"do: {', '.join(SIDE_PEERS)}")
    if peer_status(name) is None:
        return
    env = os.path.join(peers_root(), name)
    print(f"terascale bench: installing {name} into {env}: pip install "
          f"{' '.join(SIDE_PEERS[name])}", file=sys.stderr)
    steps = [[sys.executable, "-m", "venv", env],
             [_bin(name, "python"), "-m", "pip", "install", "-q", *SIDE_PEERS[name]]]
    for cmd in steps:
        try:
            done = subprocess.run(cmd, timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ConfigError(f"--install-peers: {' '.join(cmd)} did not finish in "
                              f"{timeout:.0f} s") from None
        if done.returncode:
            raise ConfigError(f"--install-peers: {' '.join(cmd)} failed (exit status "
                              f"{done.returncode})")
    why = peer_status(name)
    if why:
        raise ConfigError(f"--install-peers: {name} installed but unusable: {why}")


def peer_command(name: str, n: int, worker_args: list[str]) -> list[str]:
    """``mpiexec -n N python <the benchmark worker file> ...`` in ``name``'s environment."""
    from . import _allreduce_worker

    worker = os.path.abspath(_allreduce_worker.__file__)
    # Ranks bound as ours are: Intel MPI pins them by default, MPICH's hydra is asked to.
    bind = ["-bind-to", "core"] if name == "mpich" and cpu_blocks(n) is not None else []
    return [_bin(name, "mpiexec"), *bind, "-n", str(n), _bin(name, "python"), worker,
            *worker_args]


def peer_environ(name: str) -> dict[str, str]:
    """The environment ``name``'s ranks run with: ours minus what would mix in our Python
    packages or another MPI's settings, plus the MPI's own (``I_MPI_FABRICS=shm``)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
           and not k.startswith(("OMPI_", "PMIX_", "I_MPI_", "HYDRA_", "MPIR_"))}
    env["PATH"] = os.path.dirname(_bin(name, "python")) + os.pathsep + env.get("PATH", "")
    env.update(_ENV_VARS[name])
    return env


def available_peers() -> dict[str, str | None]:
    """Peer -> None if it can run here, else why not."""
    out: dict[str, str | None] = {}
    out["gloo"] = None if importlib.util.find_spec("torch") else "torch is not installed"
    for name in SIDE_PEERS:
        out[name] = peer_status(name)
    if importlib.util.find_spec("mpi4py") is None:
        out["mpi"] = "mpi4py is not installed"
    elif shutil.which("mpirun") is None:
        out["mpi"] = "mpirun is not on PATH"
    else:
        out["mpi"] = None
    out["openmpi"] = out["mpi"]
    return out


def side_job(name: str, n: int, sizes: Sequence[int], iters: float, out: str,
             timeout: float) -> Callable[[], int]:
    """Run side peer ``name`` on ``n`` ranks, timed by our worker: an MPI under its
    ``mpiexec``; XGBoost's collective under our launcher, with its own tracker."""
    args = ["--sizes", ",".join(map(str, sizes)), "--iters", str(iters), "--out", out]
    if name == "xgboost":
        return lambda: _run_xgboost(n, args, timeout)

    def run() -> int:
        return subprocess.run(peer_command(name, n, ["--system", "mpi", "--variant", name,
                                                      *args]),
                              env=peer_environ(name), timeout=timeout,
                              stdin=subprocess.DEVNULL).returncode
    return run


def _run_xgboost(n: int, args: list[str], timeout: float) -> int:
    """XGBoost's RabitTracker in one process, then ``n`` workers joining it."""
    from ..launch import LaunchOptions, launch
    from . import _allreduce_worker

    python, worker = _bin("xgboost", "python"), os.path.abspath(_allreduce_worker.__file__)
    tracker = subprocess.Popen([python, worker, "--system", "xgboost-tracker", "--nprocs",
                                str(n), "--timeout", str(int(timeout))],
                               env=peer_environ("xgboost"), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert tracker.stdout is not None
        ready, _, _ = select.select([tracker.stdout], [], [], 60)
        line = tracker.stdout.readline() if ready else ""
        if not line.startswith("{"):
            print(f"terascale bench: xgboost's tracker did not start ({line.strip()!r})",
                  file=sys.stderr)
            return 1
        cmd = [python, worker, "--system", "xgboost", "--tracker", line.strip(), *args]
        return launch(cmd, LaunchOptions(nprocs=n, timeout=timeout))
    finally:
        try:
            tracker.wait(10)
        except subprocess.TimeoutExpired:
            tracker.kill()
            tracker.wait()
