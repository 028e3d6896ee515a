"""Where the job secret could show to another user of the host, or land in a log: the
command lines of every process (``/proc/PID/cmdline`` is world-readable), the launcher's
and the workers' output (``-v``), ``repr`` of the job's settings. A worker of
``terascale run`` (one node, and several with ``--secret-file``) looks for it in all of
them; it travels only in the workers' environment, which only their user (and root) reads.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from test_multinode import _finish, _port

WORKER = r"""
import glob, os, sys
import terascale
secret = os.environ["TERASCALE_SECRET"]
leaks = []
for path in glob.glob("/proc/[0-9]*/cmdline"):
    try:
        with open(path, "rb") as f:
            if secret.encode() in f.read():
                leaks.append(path)
    except OSError:
        pass
env = terascale.read_env()
if secret in repr(env) or secret in str(env):
    leaks.append("repr(read_env())")
with terascale.init() as comm:
    comm.barrier()
with open(os.path.join(sys.argv[1], f"secret-{comm.rank}"), "w") as f:
    f.write(secret)
print("LEAKS", leaks, flush=True)
"""


def _check(outputs: list[str], where: Path, n: int) -> None:
    secrets = {(where / f"secret-{r}").read_text() for r in range(n)}
    assert len(secrets) == 1 and len(next(iter(secrets))) >= 16, secrets
    (secret,) = secrets
    text = "\n".join(outputs)
    assert text.count("LEAKS []") == n, text[-3000:]
    assert secret not in text, "the secret is in the launcher's or a worker's output"


def test_the_secret_is_in_no_command_line_log_or_repr(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    p = subprocess.run([sys.executable, "-m", "terascale", "-v", "run", "-n", "2",
                        sys.executable, str(script), str(tmp_path)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]
    _check([p.stdout, p.stderr], tmp_path, 2)


def test_nor_across_nodes(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    secret = tmp_path / "secret"
    secret.write_text(os.urandom(16).hex())
    secret.chmod(0o600)
    port = _port()
    procs = [subprocess.Popen(
        [sys.executable, "-m", "terascale", "-v", "run", "-n", "1", "--nnodes", "2", "--node-rank",
         str(k), "--rendezvous", f"127.0.0.1:{port}", "--secret-file", str(secret),
         "--host-id", f"node{k}", sys.executable, str(script), str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(2)]
    results = _finish(procs, 120)
    assert [r[0] for r in results] == [0, 0], results
    _check([x for _, o, e in results for x in (o, e)], tmp_path, 2)
