"""A cluster in a box: K emulated hosts as network namespaces on a bridge, rate-limited links.

Each host is a Linux network namespace with its own loopback and one ``eth0`` (a veth pair
whose other end sits on a bridge in the root namespace), addressed ``10.213.0.(10+i)/24``.
Both ends of every veth carry a ``tbf`` token bucket at the link rate, so a host's upload
and download are each limited to it, as on a switched network with one NIC per host.
Nothing is routed outside the bridge: the hosts see only each other.

What this emulates well: link rate, TCP/IP's own overheads (headers, MTU 1500, slow start,
congestion control), per-host shared memory being unreachable from the other hosts' point
of view (hosts are told apart by network namespace, see ``terascale.init``), partitions
(:meth:`Cluster.set_link` takes a host's link down). What it does not: propagation delay and
loss (no ``netem`` here), and CPU: every host shares this machine's cores, so at high link
rates the run is CPU-bound, not link-bound (see the simulator's notes).

Names carry the cluster's job id (``tsc-<job>-<i>`` namespaces, ``tscb<job>`` bridge,
``tscv<job><i>`` veths) and a state file under ``/run/terascale-cluster`` records the owner
process. :func:`sweep` removes every cluster whose owner is gone, so a test killed with
SIGKILL leaves nothing behind for long: the next cluster (or ``python -m
terascale.testing.cluster down``) sweeps it.

>>> with Cluster(3, link="100Mbit") as c:                     # doctest: +SKIP
...     c.run(1, ["ping", "-c1", c.address(0)], timeout=5)

Command line: ``python -m terascale.testing.cluster up --hosts 4 --link 100Mbit`` (kept until
``down JOB``), ``down`` (sweep stale clusters), ``down JOB`` / ``down --all``.
Needs root and ``ip netns``; :func:`available` says why not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from .._errors import ConfigError, TerascaleError
from .._units import format_rate, parse_rate

__all__ = ["Cluster", "ClusterUnavailable", "available", "main", "sweep"]

SUBNET = "10.213.0"
STATE_DIR = "/run/terascale-cluster"
_MAX_HOSTS = 64  # addresses .10 to .73; veth names stay within 15 characters


class ClusterUnavailable(TerascaleError):
    """This machine cannot build emulated hosts (not root, no ``ip netns``, no ``tc``)."""


def _ip(*args: str, check: bool = True, timeout: float = 10.0) -> subprocess.CompletedProcess:
    p = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise ClusterUnavailable(f"`ip {' '.join(args)}` failed: {p.stderr.strip()}")
    return p


def _run_checked(argv: Sequence[str]) -> None:
    p = subprocess.run(list(argv), capture_output=True, text=True, timeout=10.0)
    if p.returncode != 0:
        raise ClusterUnavailable(f"`{' '.join(argv)}` failed: {p.stderr.strip()}")


_AVAILABLE: tuple[bool, str] | None = None


def available() -> tuple[bool, str]:
    """``(True, "")`` when emulated hosts can be built here, else ``(False, why)``."""
    global _AVAILABLE
    if _AVAILABLE is None:
        _AVAILABLE = _probe()
    return _AVAILABLE


def _probe() -> tuple[bool, str]:
    if not sys.platform.startswith("linux"):
        return False, "emulated hosts need Linux network namespaces"
    if os.geteuid() != 0:
        return False, "emulated hosts need root (network namespaces, veth, tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"emulated hosts need the `{tool}` command (iproute2)"
    name = f"tsc-probe{os.getpid()}"
    try:
        _ip("netns", "add", name)
    except (ClusterUnavailable, OSError, subprocess.TimeoutExpired) as e:
        return False, f"cannot create a network namespace: {e}"
    _ip("netns", "del", name, check=False)
    return True, ""


# -- owners and the sweeper ------------------------------------------------------------------
def _start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (tells a live owner from a recycled pid)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _state_path(job: str) -> str:
    return os.path.join(STATE_DIR, f"{job}.json")


def _owner_alive(job: str) -> bool:
    try:
        with open(_state_path(job)) as f:
            state = json.load(f)
    except (OSError, ValueError):
        return False
    pid = state.get("pid")
    if pid is None:  # made by `up` on the command line: kept until `down JOB`
        return True
    return _start_time(int(pid)) == state.get("start")


def _ours() -> dict[str, tuple[list[str], list[str]]]:
    """job -> (namespaces, links) of every cluster on this machine, live or stale."""
    found: dict[str, tuple[list[str], list[str]]] = {}
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith("tsc-") and name.count("-") == 2:
            found.setdefault(name.split("-")[1], ([], []))[0].append(name)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        parts = line.split(":")
        if len(parts) < 2:
            continue
        name = parts[1].strip().split("@")[0]
        if name.startswith(("tscb", "tscv")) and len(name) >= 10:
            found.setdefault(name[4:10], ([], []))[1].append(name)
    with contextlib.suppress(OSError):
        for entry in os.listdir(STATE_DIR):
            if entry.endswith(".json"):
                found.setdefault(entry[:-5], ([], []))
    return found


def _remove(job: str, namespaces: Sequence[str], links: Sequence[str]) -> None:
    for ns in namespaces:  # a namespace outlives `ip netns del` while processes are in it
        for pid in _ip("netns", "pids", ns, check=False).stdout.split():
            with contextlib.suppress(OSError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
    for link in sorted(links, key=lambda n: not n.startswith("tscv")):  # veths, then bridge
        _ip("link", "del", link, check=False)
    for ns in namespaces:
        _ip("netns", "del", ns, check=False)
    with contextlib.suppress(OSError):
        os.unlink(_state_path(job))


def sweep(*, everything: bool = False) -> list[str]:
    """Remove the clusters whose owner process is gone (all of ours with ``everything``).

    Returns the job ids removed. Safe to run at any time: live clusters are left alone.

    Parameters
    ----------
    everything
        Remove every emulated cluster of this machine, live ones too (default False).
    """
    removed = []
    for job, (namespaces, links) in sorted(_ours().items()):
        if everything or not _owner_alive(job):
            _remove(job, namespaces, links)
            removed.append(job)
    return removed


# -- the cluster -----------------------------------------------------------------------------
class Cluster:
    """``hosts`` emulated hosts joined by links of ``link`` (``100Mbit``; None: unlimited).

    A context manager: entering builds the hosts, leaving tears them down (and kills every
    process still running in them), whatever happened inside. Commands run on host ``i``
    with :meth:`popen` / :meth:`run`; they inherit this process's environment and files.

    Parameters
    ----------
    hosts
        How many emulated hosts (network namespaces), 1 up to the module's limit.
    link
        The rate of every host's link (``"100Mbit"``, ``"10Gbit"`` or bits/s; default ``"1Gbit"``;
        None: unlimited, at least 100kbit otherwise).
    job
        A 6-character id naming the namespaces and links (default None: a random one).
    keep
        Leave the cluster up after this process exits, until ``down`` (the command line's ``up``;
        default False).
    """

    def __init__(self, hosts: int, *, link: str | float | None = "1Gbit", job: str | None = None,
                 keep: bool = False) -> None:
        if not 1 <= hosts <= _MAX_HOSTS:
            raise ConfigError(f"hosts={hosts}: an emulated cluster has 1 to {_MAX_HOSTS} hosts")
        self.hosts = hosts
        self.rate = None if link is None else parse_rate(link, flag="link")
        if self.rate is not None and self.rate < 1e5:
            raise ConfigError(f"link={link!r}: the emulated link rate must be at least 100kbit")
        self.job = job or secrets.token_hex(3)
        if len(self.job) != 6 or not self.job.isalnum():
            raise ConfigError(f"job={self.job!r}: a cluster job id has 6 letters or digits")
        self._keep = keep  # the command line's `up`: no owner process, kept until `down`
        self._procs: list[subprocess.Popen] = []
        self._up = False

    def __repr__(self) -> str:
        rate = "unlimited" if self.rate is None else format_rate(self.rate)
        return f"Cluster(hosts={self.hosts}, link={rate!r}, job={self.job!r})"

    # names and addresses
    def namespace(self, host: int) -> str:
        """The network namespace of ``host`` (``ip netns exec`` runs in it).

        Parameters
        ----------
        host
            The host's index, 0 to ``hosts - 1``.
        """
        return f"tsc-{self.job}-{self._check(host)}"

    def address(self, host: int) -> str:
        """The IPv4 address of ``host`` on the cluster's bridge.

        Parameters
        ----------
        host
            The host's index, 0 to ``hosts - 1``.
        """
        return f"{SUBNET}.{10 + self._check(host)}"

    def _veth(self, host: int) -> str:
        return f"tscv{self.job}{host}"

    def _check(self, host: int) -> int:
        if not 0 <= host < self.hosts:
            raise ConfigError(f"host {host} is not in this cluster of {self.hosts} hosts")
        return host

    # building and tearing down
    def __enter__(self) -> Cluster:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> None:
        ok, why = available()
        if not ok:
            raise ClusterUnavailable(why)
        sweep()
        os.makedirs(STATE_DIR, exist_ok=True)
        pid = None if self._keep else os.getpid()
        state = {"pid": pid, "start": None if pid is None else _start_time(pid),
                 "hosts": self.hosts, "rate": self.rate}
        tmp = _state_path(self.job) + ".tmp"
        with open(tmp, "w") as f:  # atomic: the sweeper never reads half a file
            json.dump(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, _state_path(self.job))
        self._up = True
        try:
            bridge = f"tscb{self.job}"
            _ip("link", "add", bridge, "type", "bridge")
            _ip("link", "set", bridge, "up")
            for i in range(self.hosts):
                self._add_host(i, bridge)
        except BaseException:
            self.down()
            raise

    def _add_host(self, i: int, bridge: str) -> None:
        ns, veth, peer = self.namespace(i), self._veth(i), f"tscp{self.job}{i}"
        _ip("netns", "add", ns)
        _ip("link", "add", veth, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", ns)
        _ip("-n", ns, "link", "set", peer, "name", "eth0")
        _ip("-n", ns, "addr", "add", f"{self.address(i)}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "lo", "up")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("link", "set", veth, "master", bridge)
        _ip("link", "set", veth, "up")
        if self.rate is not None:
            # Token bucket on both ends: the host side shapes what host i receives, eth0 what
            # it sends. The bucket holds >= 4 ms of traffic (HZ timers) and at least a few
            # full frames; the 100 ms queue is what a switch port buffers, so TCP sees
            # queueing, not tail drops, at these rates.
            tbf = ["tbf", "rate", f"{int(self.rate)}bit",
                   "burst", str(max(int(self.rate / 8 / 250), 16 * 1514)), "latency", "100ms"]
            _run_checked(["tc", "qdisc", "add", "dev", veth, "root", *tbf])
            _run_checked(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0",
                          "root", *tbf])

    def down(self) -> None:
        """Kill what runs on the hosts and remove them (idempotent)."""
        for p in self._procs:
            if p.poll() is None:
                with contextlib.suppress(OSError):
                    os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(5)
        self._procs.clear()
        if self._up:
            namespaces = [f"tsc-{self.job}-{i}" for i in range(self.hosts)]
            links = [self._veth(i) for i in range(self.hosts)] + [f"tscb{self.job}"]
            _remove(self.job, namespaces, links)
            self._up = False

    # running commands
    def popen(self, host: int, argv: Sequence[str], *, env: Mapping[str, str] | None = None,
              **kwargs: Any) -> subprocess.Popen:
        """Start ``argv`` on ``host`` (its own session: :meth:`down` kills its whole group).

        ``env`` adds to this process's environment. Other arguments go to ``Popen``.

        Parameters
        ----------
        host
            The host's index, 0 to ``hosts - 1``.
        argv
            The command and its arguments.
        env
            Variables added to this process's environment (default None).
        kwargs
            Other arguments of ``subprocess.Popen`` (``stdout``, ``text``...).
        """
        full = {**os.environ, **(env or {})}
        p = subprocess.Popen(["ip", "netns", "exec", self.namespace(host), *argv], env=full,
                             start_new_session=True, **kwargs)
        self._procs.append(p)
        return p

    def run(self, host: int, argv: Sequence[str], *, timeout: float,
            env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
        """Run ``argv`` on ``host`` to completion (killed at ``timeout`` s: TimeoutExpired).

        Parameters
        ----------
        host
            The host's index, 0 to ``hosts - 1``.
        argv
            The command and its arguments.
        timeout
            Seconds before the command is killed (``subprocess.TimeoutExpired``).
        env
            Variables added to this process's environment (default None).
        """
        p = self.popen(host, argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(p.pid, signal.SIGKILL)
            p.communicate()
            raise
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    def set_link(self, host: int, up: bool) -> None:
        """Take ``host``'s link down (a partition: it reaches no other host) or back up.

        Parameters
        ----------
        host
            The host's index, 0 to ``hosts - 1``.
        up
            True: bring the link up; False: take it down.
        """
        _ip("link", "set", self._veth(self._check(host)), "up" if up else "down")


# -- command line ----------------------------------------------------------------------------
def main(argv: Sequence[str] | None = None) -> int:
    """``python -m terascale.testing.cluster up|down``; returns the exit status.

    Parameters
    ----------
    argv
        The arguments (default None: ``sys.argv[1:]``).
    """
    parser = argparse.ArgumentParser(prog="python -m terascale.testing.cluster",
                                     description="Emulated hosts (network namespaces) on a bridge.")
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="build a cluster and keep it until `down JOB`")
    up.add_argument("--hosts", type=int, default=2)
    up.add_argument("--link", default="1Gbit", help="rate of every link, e.g. 100Mbit")
    down = sub.add_parser("down", help="remove a cluster (default: every stale one)")
    down.add_argument("job", nargs="?")
    down.add_argument("--all", action="store_true", help="remove every emulated cluster")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "up":
            c = Cluster(args.hosts, link=args.link, keep=True)
            c.up()
            rate = "unlimited" if c.rate is None else format_rate(c.rate)
            print(f"job {c.job}: {c.hosts} hosts, link {rate}")
            for i in range(c.hosts):
                print(f"  host {i}: {c.address(i)}  (ip netns exec {c.namespace(i)} CMD)")
            return 0
        if args.job:
            found = _ours().get(args.job)
            if found is None:
                print(f"no emulated cluster with job {args.job}", file=sys.stderr)
                return 1
            _remove(args.job, *found)
            removed = [args.job]
        else:
            removed = sweep(everything=args.all)
        print("removed: " + (", ".join(removed) if removed else "nothing"))
        return 0
    except (ConfigError, ClusterUnavailable) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
