"""Node 0's coordinator admits nodes concurrently: idle or dribbling strangers on its port
(a flood of them from the nodes' own address) do not stop a job over two nodes."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest

from terascale.testing import listening

JOB = str(Path(__file__).parent / "_cluster_job.py")


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    f = tmp_path / "secret"
    f.write_text(os.urandom(16).hex())
    f.chmod(0o600)
    return f


def _node(python: str, k: int, port: int, secret: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [python, "-m", "terascale", "run", "-n", "1", "--nnodes", "2", "--node-rank", str(k),
         "--host-id", f"node{k}", "--rendezvous", f"127.0.0.1:{port}", "--secret-file",
         str(secret), "--timeout", "20", python, JOB],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_idle_and_dribbling_connections_do_not_stop_a_two_node_job(python: str,
                                                                   secret: Path) -> None:
    port = _port()
    procs = [_node(python, 0, port, secret)]
    strangers: list[socket.socket] = []
    stop = threading.Event()

    def dribble(s: socket.socket) -> None:  # one byte of a handshake every half second
        for b in b"TSAUTH1\n" * 64:
            if stop.wait(0.5):
                return
            try:
                s.send(bytes([b]))
            except OSError:
                return

    try:
        deadline = time.monotonic() + 60
        while not listening(port):
            assert procs[0].poll() is None and time.monotonic() < deadline, procs[0].stderr
            time.sleep(0.05)
        strangers = [socket.create_connection(("127.0.0.1", port)) for _ in range(21)]
        threading.Thread(target=dribble, args=(strangers[-1],), daemon=True).start()
        time.sleep(0.2)  # the strangers are ahead of node 1
        start = time.monotonic()
        procs.append(_node(python, 1, port, secret))
        results = [(p.wait(90), *p.communicate()) for p in procs]
        took = time.monotonic() - start
    finally:
        stop.set()
        for s in strangers:
            s.close()
        for p in procs:
            p.kill()
    assert [r[0] for r in results] == [0, 0], results
    assert "rank 1/2 local 0/1 sum 3" in results[1][1], results
    # Inline, 5 s per handshake, the strangers held node 1 for 105 s, past --timeout 20.
    assert took < 60, (took, results)
    assert re.search(r"terascale run: dropped \d+ connection\(s\) to the coordinator's port",
                     results[0][2]), results[0][2]
