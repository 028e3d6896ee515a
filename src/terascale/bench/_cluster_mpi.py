"""Open MPI across emulated hosts: its TCP BTL, one orted per network namespace.

The peer of ``terascale bench allreduce --cluster K --vs mpi``. ``mpirun`` itself runs in
host 0's namespace (its daemons must reach it back over TCP, and only the bridge joins the
hosts); its rsh launcher starts one ``orted`` per host through an agent script that runs
the daemon's command line inside the host's namespace (``ip netns exec``), so
``--host tscmpi-0,tscmpi-1`` puts one daemon, and ``--per-host`` ranks, on each
emulated host. The agent knows this run's namespaces only: a name other than
``tscmpi-K`` is refused, so it cannot be pointed at another namespace.

Messages go over the TCP BTL on the namespaces' ``eth0`` (``btl tcp,self``: no shared
memory even where ranks share a host, the fair comparison with our TCP path across
hosts), out-of-band traffic over ``eth0`` too. The ranks run the benchmark's own worker
file, timed by the same lines as every other row.

The emulated hosts share one file system and one host name, which Open MPI assumes no
two daemons do. Two of its shared-memory files then collide: hwloc's topology, mapped at
the "biggest hole" of the address space (the daemons segfaulted in
``hwloc_shmem_topology_write`` about one run in eight; ``rtc_hwloc_vmhole none`` maps
none), and PMIx's data store (``PMIX_MCA_gds=hash`` keeps it in each process). The
daemons stay attached to mpirun (``--leave-session-attached``), so a daemon that dies
ends the run with its exit status instead of leaving mpirun waiting for it.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Sequence

__all__ = ["mpirun_unavailable", "host_name", "write_agent", "cluster_mpirun_cmd",
           "CLUSTER_MPIRUN_ENV"]

# Added to mpirun's environment (the agent passes it on to each daemon).
CLUSTER_MPIRUN_ENV = {"PMIX_MCA_gds": "hash"}

# The agent is given `[options] HOST COMMAND...` like ssh; the command is a shell line.
_AGENT = """#!/bin/sh
# rsh agent of terascale bench --cluster --vs mpi: HOST is tscmpi-K, emulated host K.
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host="$1"; shift
case "$host" in
{cases}
*) echo "agent: $host is not an emulated host" >&2; exit 2 ;;
esac
exec ip netns exec "$ns" sh -c "$*"
"""


def host_name(k: int) -> str:
    """The name mpirun is given for emulated host ``k``."""
    return f"tscmpi-{k}"


def mpirun_unavailable() -> str | None:
    """None when Open MPI's ``mpirun`` and mpi4py can run the peer rows, else why not."""
    import importlib.util

    if shutil.which("mpirun") is None:
        return "mpirun is not on PATH"
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed"
    return None


def write_agent(directory: str, namespaces: Sequence[str]) -> str:
    """Write the rsh agent script into ``directory``, host ``k`` being ``namespaces[k]``;
    return its path."""
    for ns in namespaces:  # they go into a shell script: names as the cluster makes them
        if not ns.replace("-", "").isalnum():
            raise ValueError(f"namespace {ns!r}: letters, digits and '-' only")
    cases = "\n".join(f'{host_name(k)}) ns="{ns}" ;;' for k, ns in enumerate(namespaces))
    path = os.path.join(directory, "netns-agent.sh")
    with open(path, "w") as f:
        f.write(_AGENT.format(cases=cases))
    os.chmod(path, stat.S_IRWXU)
    return path


def cluster_mpirun_cmd(agent: str, hosts: int, per_host: int,
                       worker: Sequence[str]) -> list[str]:
    """``mpirun`` (run it in host 0's namespace) placing ``per_host`` ranks on each of
    ``hosts`` hosts, started through ``agent`` (:func:`write_agent`)."""
    mpirun = shutil.which("mpirun") or "mpirun"
    names = ",".join(f"{host_name(k)}:{per_host}" for k in range(hosts))
    # no_tree_spawn: mpirun starts every daemon itself (a daemon has no agent to start
    # others with). pml ob1 makes the btl choice binding (no UCX); yield_when_idle as in
    # the one-host rows: the emulated hosts share this machine's cores.
    return [mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
            "-n", str(hosts * per_host), "--host", names,
            "--leave-session-attached", "--mca", "rtc_hwloc_vmhole", "none",
            "--mca", "plm_rsh_agent", agent, "--mca", "plm_rsh_no_tree_spawn", "1",
            "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
            "--mca", "btl_tcp_if_include", "eth0", "--mca", "oob_tcp_if_include", "eth0",
            "--mca", "mpi_yield_when_idle", "1", *worker]
