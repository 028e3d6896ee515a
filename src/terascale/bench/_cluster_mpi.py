"""Open MPI across emulated hosts: its TCP BTL, one orted per network namespace.

The peer of ``terascale bench allreduce --cluster K --vs mpi``. ``mpirun`` itself runs in
host 0's namespace (its daemons must reach it back over TCP, and only the bridge joins the
hosts); its rsh launcher starts one ``orted`` per host through an agent script that runs
the daemon's command line inside the namespace named as the host (``ip netns exec``), so
``--host tsc-JOB-0,tsc-JOB-1`` puts one daemon, and ``--per-host`` ranks, on each
emulated host. Messages go over the TCP BTL on the namespaces' ``eth0`` (``btl tcp,self``:
no shared memory even where ranks share a host, the fair comparison with our TCP path
across hosts), out-of-band traffic over ``eth0`` too. The ranks run the benchmark's own
worker file, timed by the same lines as every other row.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Sequence

__all__ = ["mpirun_unavailable", "write_agent", "cluster_mpirun_cmd"]

# The agent is given `[options] HOST COMMAND...` like ssh; the command is a shell line.
_AGENT = """#!/bin/sh
# rsh agent of terascale bench --cluster --vs mpi: HOST names an emulated host's namespace.
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host="$1"; shift
case "$host" in tsc-*) ;; *) echo "agent: $host is not an emulated host" >&2; exit 2 ;; esac
exec ip netns exec "$host" sh -c "$*"
"""


def mpirun_unavailable() -> str | None:
    """None when Open MPI's ``mpirun`` and mpi4py can run the peer rows, else why not."""
    import importlib.util

    if shutil.which("mpirun") is None:
        return "mpirun is not on PATH"
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed"
    return None


def write_agent(directory: str) -> str:
    """Write the rsh agent script into ``directory``; return its path."""
    path = os.path.join(directory, "netns-agent.sh")
    with open(path, "w") as f:
        f.write(_AGENT)
    os.chmod(path, stat.S_IRWXU)
    return path


def cluster_mpirun_cmd(agent: str, namespaces: Sequence[str], per_host: int,
                       worker: Sequence[str]) -> list[str]:
    """``mpirun`` (run it in the first namespace) placing ``per_host`` ranks on each host."""
    mpirun = shutil.which("mpirun") or "mpirun"
    hosts = ",".join(f"{ns}:{per_host}" for ns in namespaces)
    # no_tree_spawn: mpirun starts every daemon itself (a daemon has no agent to start
    # others with). pml ob1 makes the btl choice binding (no UCX); yield_when_idle as in
    # the one-host rows: the emulated hosts share this machine's cores.
    return [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
            "-n", str(len(namespaces) * per_host), "--host", hosts,
            "--mca", "plm_rsh_agent", agent, "--mca", "plm_rsh_no_tree_spawn", "1",
            "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
            "--mca", "mpi_yield_when_idle", "1", *worker]
