"""The span server (VW's spanning-tree protocol) reads every client in a thread of its own
with a deadline: idle or dribbling connections delay no VW cluster job."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from _linear_data import vw_lines

from terascale.linear._combine._span import SpanServer


def test_idle_connections_do_not_stall_a_vowpalwabbit_cluster(tmp_path) -> None:
    pytest.importorskip("vowpalwabbit")
    for k in range(2):
        (tmp_path / f"s{k}.vw").write_text("\n".join(vw_lines(200, seed=30 + k)) + "\n")
    srv = SpanServer(0).start()
    stop = threading.Event()
    idle = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(3)]

    def dribble(s: socket.socket) -> None:  # a hello that never completes
        while not stop.wait(0.5):
            try:
                s.send(b"\0")
            except OSError:
                return

    threading.Thread(target=dribble, args=(idle[-1],), daemon=True).start()
    try:
        code = ("import sys; from vowpalwabbit import pyvw; k = sys.argv[1]; "
                "pyvw.Workspace(f'--quiet -d s{k}.vw -b 16 -f m{k}.model --span_server "
                f"127.0.0.1 --span_server_port {srv.port} --total 2 --node {{k}} "
                "--unique_id 7').finish(); "
                "pyvw.Workspace(f'--quiet -d s0.vw -t -i m{k}.model -p p{k}.txt').finish()")
        start = time.monotonic()
        procs = [subprocess.Popen([sys.executable, "-c", code, str(k)], cwd=tmp_path)
                 for k in range(2)]
        try:
            # read inline, the first idle connection would hold the server for ever
            assert [p.wait(timeout=60) for p in procs] == [0, 0]
        finally:
            for p in procs:
                p.kill()
        took = time.monotonic() - start
    finally:
        stop.set()
        for s in idle:
            s.close()
        srv.stop()
    assert took < 30, took
    p0, p1 = (np.loadtxt(tmp_path / f"p{k}.txt", usecols=0) for k in range(2))
    assert len(p0) == 200 and np.array_equal(p0, p1)  # averaged through the tree
