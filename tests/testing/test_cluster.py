"""Emulated hosts (terascale.testing.cluster) and jobs across them: host identity, the
standalone rendezvous, the correctness matrix on 3 hosts x 1 and 2 hosts x 2 workers."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
from _allreduce_check import expected, make_input
from _cluster_worker import CASES

from terascale._env import JobEnv, host_identity
from terascale.collectives.registry import allreduce_names
from terascale.rendezvous import host_layout
from terascale.testing import cluster as tc

HERE = Path(__file__).parent
OK, WHY = tc.available()
needs_cluster = pytest.mark.skipif(not OK, reason=f"no emulated hosts here: {WHY}")
ALGOS = ["auto", *allreduce_names()]


# -- host identity and layout (no cluster needed) --------------------------------------------
def test_host_identity_is_hostname_plus_digest_and_stable() -> None:
    import socket

    hid = host_identity()
    assert hid.startswith(socket.gethostname())
    assert hid == host_identity()


def test_host_layout_names_ranks_per_host() -> None:
    assert host_layout(["a", "a", "b", "a"]) == "4 ranks on 2 hosts: a ranks 0-1,3, b rank 2"
    assert host_layout(["x"]) == "1 rank on 1 host: x rank 0"


def test_rendezvous_command_requires_a_secret(python: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TERASCALE_SECRET"}
    p = subprocess.run([python, "-m", "terascale", "rendezvous", "--port", "29999", "--size",
                        "2"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode != 0
    assert "--secret-file" in p.stderr and "TERASCALE_SECRET" in p.stderr


def test_cluster_options_are_checked() -> None:
    with pytest.raises(tc.ConfigError, match="hosts=0"):
        tc.Cluster(0)
    with pytest.raises(tc.ConfigError, match="link"):
        tc.Cluster(2, link="10bit")


# -- emulated hosts ---------------------------------------------------------------------------
def _leftovers(job: str) -> str:
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return "\n".join(line for line in (netns + links).splitlines() if job in line)


@needs_cluster
def test_hosts_reach_each_other_have_distinct_identities_and_are_torn_down(python: str) -> None:
    probe = "from terascale._env import host_identity; print(host_identity())"
    with tc.Cluster(2, link="100Mbit") as c:
        server = c.popen(0, [python, "-c", textwrap.dedent(f"""
            import socket
            s = socket.create_server(("{c.address(0)}", 29400)); print("ready", flush=True)
            conn, peer = s.accept(); print(peer[0], conn.recv(5).decode(), flush=True)""")],
            stdout=subprocess.PIPE, text=True)
        assert server.stdout is not None and server.stdout.readline().strip() == "ready"
        client = c.run(1, [python, "-c", f"import socket; socket.create_connection(("
                           f"'{c.address(0)}', 29400), timeout=10).sendall(b'hello')"],
                       timeout=30)
        assert client.returncode == 0, client.stderr
        assert server.stdout.readline().split() == [c.address(1), "hello"]
        server.wait(10)
        ids = {c.run(i, [python, "-c", probe], timeout=60).stdout.strip() for i in range(2)}
        assert len(ids) == 2 and host_identity() not in ids
        rate = subprocess.run(["tc", "qdisc", "show", "dev", f"tscv{c.job}1"],
                              capture_output=True, text=True).stdout
        assert "tbf" in rate and "100Mbit" in rate
        job = c.job
    assert _leftovers(job) == ""


@needs_cluster
def test_sweeper_removes_the_cluster_of_a_killed_owner(python: str) -> None:
    owner = subprocess.Popen([python, "-c", textwrap.dedent("""
        import sys, time
        from terascale.testing.cluster import Cluster
        c = Cluster(2, link=None); c.up(); print(c.job, flush=True)
        c.popen(1, ["sleep", "300"]); time.sleep(300)""")], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        job = owner.stdout.readline().strip()
        assert job and _leftovers(job)
        assert job not in tc.sweep()  # the owner is alive: left alone
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    assert job in tc.sweep()
    assert _leftovers(job) == ""
    assert not os.path.exists(os.path.join(tc.STATE_DIR, f"{job}.json"))


def _job_across_hosts(c: tc.Cluster, per_host: int, tmp: Path, python: str) -> list[dict]:
    """Run _cluster_worker.py with ``per_host`` ranks on every host; ranks host by host."""
    size, port = c.hosts * per_host, 29500
    secret = secrets.token_hex(16)
    (tmp / "secret").write_text(secret)
    (tmp / "secret").chmod(0o600)  # a secret file is readable by its owner only
    rdv = c.popen(0, [python, "-m", "terascale", "-v", "rendezvous", "--host", c.address(0),
                      "--port", str(port), "--size", str(size), "--secret-file", str(tmp / "secret"),
                      "--timeout", "120"], stderr=subprocess.PIPE, text=True)
    workers = []
    for rank in range(size):
        env = JobEnv("test", rank, size, (c.address(0), port), secret.encode(),
                     timeout=60.0).to_environ()
        workers.append(c.popen(rank // per_host, [python, str(HERE / "_cluster_worker.py"),
                                                  str(tmp / f"{rank}.npz"), *ALGOS], env=env))
    for rank, w in enumerate(workers):
        assert w.wait(240) == 0, f"rank {rank} failed"
    assert rdv.wait(60) == 0
    assert rdv.stderr is not None
    layout = rdv.stderr.read()
    assert f"{size} ranks on {c.hosts} hosts" in layout, layout
    out = []
    for rank in range(size):
        with np.load(tmp / f"{rank}.npz") as z:
            res = {k: z[k] for k in z.files}
        res["info"] = json.loads(res["info"].tobytes())
        out.append(res)
    return out


def _check(results: list[dict]) -> None:
    n = len(results)
    for algo in ALGOS:
        if algo == "shm":
            assert all(r["info"]["sent"]["shm refused"] == 1 for r in results)
            continue
        for count, dtype, op in CASES:
            key = f"{algo}|{count}|{dtype}|{op}"
            got = [r[key].tobytes() for r in results]
            assert len(set(got)) == 1, f"{key}: ranks disagree"
            stack = np.stack([make_input(r, count, dtype) for r in range(n)]) if count else \
                np.empty((n, 0), dtype)
            y = np.frombuffer(got[0], dtype)
            want = expected(stack, op)
            if np.dtype(dtype).kind == "f":
                np.testing.assert_allclose(y, want, rtol=2e-2 if dtype == "float16" else 1e-5,
                                           err_msg=key)
            else:
                assert np.array_equal(y, want), key


@needs_cluster
def test_matrix_on_3_hosts_x_1(tmp_path: Path, python: str) -> None:
    with tc.Cluster(3, link="1Gbit") as c:
        results = _job_across_hosts(c, 1, tmp_path, python)
    assert [len(set(r["info"]["hosts"])) for r in results] == [3, 3, 3]
    assert [(r["info"]["local_rank"], r["info"]["local_size"]) for r in results] == [(0, 1)] * 3
    _check(results)


@needs_cluster
def test_matrix_on_2_hosts_x_2_and_only_leaders_cross_hosts(tmp_path: Path,
                                                             python: str) -> None:
    with tc.Cluster(2, link="1Gbit") as c:
        results = _job_across_hosts(c, 2, tmp_path, python)
    info = [r["info"] for r in results]
    assert [(i["local_rank"], i["local_size"]) for i in info] == [(0, 2), (1, 2)] * 2
    hosts = info[0]["hosts"]
    assert hosts[0] == hosts[1] != hosts[2] == hosts[3]
    _check(results)
    # Hierarchical: shared memory inside a host, TCP only between the two leaders.
    sent = [i["sent"]["hierarchical"] for i in info]
    assert sent[1] == sent[3] == 0 and sent[0] > 0 and sent[2] > 0, sent
    assert all(i["sent"]["ring"] > 0 for i in info)
