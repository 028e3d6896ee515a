"""The job secret: a secret file that is a FIFO, a directory, unreadable or empty is a clear
ConfigError naming the flag (never a hang or a traceback), and no repr or log shows it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import terascale
from terascale._errors import ConfigError
from terascale._secret import user_secret


def _cli(*argv: str, user: list[str] | None = None,
         env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*(user or []), sys.executable, "-m", "terascale", *argv],
                          capture_output=True, text=True, timeout=30,
                          env={**os.environ, **(env or {})})


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    empty = tmp_path / "empty"
    empty.write_text("\n")
    empty.chmod(0o600)
    folder = tmp_path / "dir"
    folder.mkdir(mode=0o700)
    return {"fifo": (fifo, "is a FIFO (named pipe)"), "dir": (folder, "is a directory"),
            "empty": (empty, "is empty")}


@pytest.mark.parametrize("kind", ["fifo", "dir", "empty"])
def test_a_bad_secret_file_is_a_config_error_naming_the_flag(tmp_path: Path, kind: str) -> None:
    path, why = _bad_files(tmp_path)[kind]
    if kind == "dir":  # the flag of `terascale run --nnodes`, else `terascale rendezvous`'s
        argv = ["run", "-n", "1", "--nnodes", "2", "--rendezvous", "127.0.0.1:1",
                "--secret-file", str(path), sys.executable, "-c", "pass"]
    else:
        argv = ["rendezvous", "--port", "1", "--size", "2", "--secret-file", str(path)]
    p = _cli(*argv)  # a FIFO once hung here, a directory was a traceback
    assert p.returncode == 2, p
    assert f"error: --secret-file {str(path)!r} {why}" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_bad_secret_files_from_python_and_the_environment(tmp_path: Path) -> None:
    for path, why in _bad_files(tmp_path).values():
        with pytest.raises(ConfigError, match="^" + re.escape(f"secret_file={str(path)!r} {why}")):
            user_secret({}, secret_file=path)
        with pytest.raises(ConfigError, match="^" + re.escape(f"TERASCALE_SECRET_FILE={str(path)!r} {why}")):
            user_secret({"TERASCALE_SECRET_FILE": str(path)})
    with pytest.raises(ConfigError, match="^TERASCALE_SECRET is empty"):
        user_secret({"TERASCALE_SECRET": ""})
    assert user_secret({}) is None


def test_the_torch_backend_reads_the_secret_through_the_same_checks(tmp_path: Path,
                                                                    monkeypatch) -> None:
    pytest.importorskip("torch")
    from terascale.torch import backend

    monkeypatch.delenv("TERASCALE_SECRET", raising=False)
    monkeypatch.setenv("TERASCALE_SECRET_FILE", str(_bad_files(tmp_path)["fifo"][0]))
    monkeypatch.setenv("RANK", "1")  # torchrun's variables: a launcher terascale reads
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ConfigError, match="is a FIFO"):
        backend._user_secret()
    good = tmp_path / "good"
    good.write_text("s3cret\n")
    good.chmod(0o600)
    monkeypatch.setenv("TERASCALE_SECRET_FILE", str(good))
    assert backend._user_secret() == b"s3cret"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to read as another user")
def test_an_unreadable_secret_file_names_the_flag(tmp_path: Path) -> None:
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    probe = subprocess.run([*nobody, sys.executable, "-c", "import terascale"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:  # e.g. a checkout under a directory only its owner may enter
        pytest.skip(f"uid 65534 cannot import terascale here: {probe.stderr.strip()}")
    secret = tmp_path / "secret"
    secret.write_text("s3cret")
    secret.chmod(0o600)  # root's: uid 65534 may not read it
    with tempfile.TemporaryDirectory() as cache:  # numba's cache, where uid 65534 may write
        os.chmod(cache, 0o777)
        p = _cli("rendezvous", "--port", "1", "--size", "2", "--secret-file", str(secret),
                 user=nobody, env={"NUMBA_CACHE_DIR": cache})
    assert p.returncode == 2, p
    assert (f"error: --secret-file {str(secret)!r}: cannot read the job secret (Permission "
            "denied)") in p.stderr, p.stderr


def test_a_job_env_never_shows_its_secret() -> None:
    env = {"TERASCALE_RANK": "0", "TERASCALE_SIZE": "2",
           "TERASCALE_RENDEZVOUS": "127.0.0.1:29400", "TERASCALE_SECRET": "hunter2-s3cret"}
    job = terascale.read_env(env)
    assert job is not None and job.secret == b"hunter2-s3cret"
    for shown in (repr(job), str(job), f"{job}", f"{[job]}"):
        assert "hunter2" not in shown and "secret=<redacted>" in shown, shown
    assert "rank=0, size=2" in repr(job)


def test_a_worker_printing_its_job_env_under_the_launcher_leaks_nothing(tmp_path: Path) -> None:
    got = tmp_path / "secret-seen"
    job = ("import os, logging, terascale; "
           "logging.getLogger('terascale').debug('job %r', terascale.read_env()); "
           "print(terascale.read_env(), flush=True); "
           f"open({str(got)!r}, 'w').write(os.environ['TERASCALE_SECRET'])")
    p = _cli("-v", "run", "-n", "1", sys.executable, "-c", job)
    assert p.returncode == 0, p
    secret = got.read_text()
    assert len(secret) >= 32 and "secret=<redacted>" in p.stdout, p
    assert secret not in p.stdout + p.stderr
