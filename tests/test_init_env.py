"""``terascale.init()`` under other launchers' variables, and its configuration errors."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import textwrap

import pytest

from terascale import ConfigError, JobEnv, RendezvousError, read_env

WORKER = textwrap.dedent("""
    import numpy as np, terascale
    with terascale.init(timeout=20) as comm:
        print(comm.rank, comm.size, int(comm.allreduce(np.array(comm.rank + 1))))
""")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawn(n: int, env_for, secret: dict[str, str] | None = None) -> list[str]:
    # Other launchers make no secret: the user gives every rank the same one.
    secret = {"TERASCALE_SECRET": "shared-by-the-user"} if secret is None else secret
    base = {k: v for k, v in os.environ.items() if not k.startswith("TERASCALE_SECRET")}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER],
                              env={**base, **secret, **env_for(r)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(n)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        outs.append(out.strip())
    return outs


def _clean() -> dict[str, str]:
    return {k: "" for k in ("TERASCALE_RANK", "TERASCALE_SIZE", "TERASCALE_RENDEZVOUS")}


def test_torchrun_variables() -> None:
    port = _free_port()
    outs = _spawn(3, lambda r: {"RANK": str(r), "WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1",
                                "MASTER_PORT": str(port - 1)})
    assert sorted(outs) == ["0 3 6", "1 3 6", "2 3 6"]


def test_openmpi_variables_with_explicit_rendezvous() -> None:
    port = _free_port()
    outs = _spawn(2, lambda r: {"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": "2",
                                "TERASCALE_RENDEZVOUS": f"127.0.0.1:{port}"})
    assert sorted(outs) == ["0 2 3", "1 2 3"]


def test_slurm_variables() -> None:
    port = _free_port()
    outs = _spawn(2, lambda r: {"SLURM_PROCID": str(r), "SLURM_NTASKS": "2",
                                "TERASCALE_RENDEZVOUS": f"127.0.0.1:{port}"})
    assert sorted(outs) == ["0 2 3", "1 2 3"]


def test_no_launcher_is_size_one() -> None:
    assert read_env({}) is None


@pytest.mark.parametrize("env, message", [
    ({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"}, "no rendezvous address"),
    ({"RANK": "x", "WORLD_SIZE": "2"}, "RANK='x' is not an integer"),
    ({"RANK": "3", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}, "do not describe"),
    ({"PMI_RANK": "0", "PMI_SIZE": "2", "TERASCALE_RENDEZVOUS": "nohostport"}, "not HOST:PORT"),
])
def test_bad_environment_is_a_config_error(env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        read_env(env)


def test_unreachable_rendezvous_fails_with_advice() -> None:
    import terascale

    port = _free_port()
    env = {"TERASCALE_RANK": "1", "TERASCALE_SIZE": "2", "TERASCALE_SECRET": "s",
           "TERASCALE_RENDEZVOUS": f"127.0.0.1:{port}"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with pytest.raises(RendezvousError, match="^rank 1: cannot reach the rendezvous server"):
            terascale.init(timeout=1)
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_ranks_missing_at_the_deadline_are_named_by_rank_0() -> None:
    # rank 0 of 2 started alone (torchrun's variables: rank 0 serves the rendezvous)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERASCALE_")}
    env.update(RANK="0", WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(_free_port() - 1), TERASCALE_SECRET="s")
    code = ("import terascale\n"
            "try:\n    terascale.init(timeout=1)\n"
            "except terascale.RendezvousError as e:\n    print(e)\n")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert re.fullmatch(r"rank 0: 1 of 2 workers arrived within \d\.\d s; missing ranks \[1\]",
                        res.stdout.strip()), res.stdout


def test_rendezvous_port_in_use_is_reported() -> None:
    busy = socket.socket()
    busy.bind(("0.0.0.0", 0))
    busy.listen()
    port = busy.getsockname()[1]
    env = {**os.environ, "RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": str(port - 1), "TERASCALE_SECRET": "s"}
    res = subprocess.run([sys.executable, "-c", "import terascale; terascale.init(timeout=2)"],
                         env=env, capture_output=True, text=True, timeout=60)
    busy.close()
    assert res.returncode != 0
    assert f"cannot listen on 127.0.0.1:{port}" in res.stderr  # MASTER_ADDR's, not 0.0.0.0


def test_to_environ_is_what_read_env_reads() -> None:
    job = JobEnv("terascale run", 2, 5, ("127.0.0.1", 4321), b"0123abcd", job="j7",
                 timeout=12.5, restart=1, host_id="hostB", timeline="/tmp/t.json")
    env = job.to_environ()
    assert all(k.startswith("TERASCALE_") for k in env)
    assert read_env(env) == job
    minimal = JobEnv("terascale run", 0, 1, None, b"s")
    assert read_env(minimal.to_environ()) == minimal
    with pytest.raises(ConfigError, match="TERASCALE_SECRET"):
        JobEnv("terascale run", 0, 1, None, b"\xff").to_environ()


def test_bad_optional_variables_name_the_variable() -> None:
    base = JobEnv("terascale run", 0, 2, ("h", 1), b"s").to_environ()
    with pytest.raises(ConfigError, match="TERASCALE_RESTART"):
        read_env({**base, "TERASCALE_RESTART": "first"})
    with pytest.raises(ConfigError, match="TERASCALE_TIMEOUT"):
        read_env({**base, "TERASCALE_TIMEOUT": "-1"})


# -- the job secret outside our launchers, and where rank 0 listens ---------------------------

_OMPI = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2",
         "TERASCALE_RENDEZVOUS": "127.0.0.1:29555"}


@pytest.mark.parametrize("launcher", [
    _OMPI,
    {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"},
    {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "TERASCALE_RENDEZVOUS": "10.0.0.1:1"},
])
def test_no_secret_outside_our_launchers_is_refused_with_advice(launcher: dict) -> None:
    # Before: a secret derived from the address, which any attacker could compute too.
    with pytest.raises(ConfigError, match="without a job secret.*TERASCALE_SECRET_FILE"):
        read_env(launcher)


def test_every_rank_refuses_to_start_without_a_secret() -> None:
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TERASCALE_")}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env={**env, "OMPI_COMM_WORLD_RANK": str(r),
                                   "OMPI_COMM_WORLD_SIZE": "2",
                                   "TERASCALE_RENDEZVOUS": f"127.0.0.1:{port}"})
             for r in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=60)
        assert p.returncode != 0
        assert "ConfigError" in err and "without a job secret" in err


def test_secret_file_must_be_private(tmp_path) -> None:
    path = tmp_path / "secret"
    path.write_text("s3cret\n")
    path.chmod(0o644)
    with pytest.raises(ConfigError, match=r"TERASCALE_SECRET_FILE=.*readable by others.*chmod 600"):
        read_env({**_OMPI, "TERASCALE_SECRET_FILE": str(path)})
    with pytest.raises(ConfigError, match="secret_file=.*readable by others"):
        read_env(_OMPI, secret_file=path)
    path.chmod(0o600)
    assert read_env({**_OMPI, "TERASCALE_SECRET_FILE": str(path)}).secret == b"s3cret"
    assert read_env(_OMPI, secret_file=str(path)).secret == b"s3cret"
    with pytest.raises(ConfigError, match="cannot read the job secret"):
        read_env({**_OMPI, "TERASCALE_SECRET_FILE": str(tmp_path / "missing")})
    with pytest.raises(ConfigError, match="is empty"):
        read_env({**_OMPI, "TERASCALE_SECRET": ""})


def test_insecure_opt_out_is_loopback_only() -> None:
    job = read_env({**_OMPI, "TERASCALE_INSECURE_NO_SECRET": "1"})
    assert job is not None and len(job.secret) == 32
    with pytest.raises(ConfigError, match="only with a loopback rendezvous"):
        read_env({**_OMPI, "TERASCALE_RENDEZVOUS": "10.1.2.3:29555",
                  "TERASCALE_INSECURE_NO_SECRET": "1"})


def test_opt_out_job_runs_on_one_machine() -> None:
    port = _free_port()
    outs = _spawn(2, lambda r: {"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": "2",
                                "TERASCALE_RENDEZVOUS": f"127.0.0.1:{port}"},
                  secret={"TERASCALE_INSECURE_NO_SECRET": "1"})
    assert sorted(outs) == ["0 2 3", "1 2 3"]


def test_rendezvous_binds_the_address_it_was_given() -> None:
    from terascale._init import _serve

    port = _free_port()
    base = {"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2", "TERASCALE_SECRET": "s",
            "TERASCALE_RENDEZVOUS": f"127.0.0.1:{port}"}
    server = _serve(read_env(base))
    try:
        assert server.address == ("127.0.0.1", port)  # not 0.0.0.0: loopback stays loopback
    finally:
        server.close()
    other = _free_port()  # (the closed server's port is held until its accept() returns)
    server = _serve(read_env({**base, "TERASCALE_BIND": "0.0.0.0",
                              "TERASCALE_RENDEZVOUS": f"127.0.0.1:{other}"}))
    try:
        assert server.address == ("0.0.0.0", other)  # only when told so
    finally:
        server.close()
    with pytest.raises(ConfigError, match="not an address of this host.*TERASCALE_BIND=0.0.0.0"):
        _serve(read_env({**base, "TERASCALE_RENDEZVOUS": f"192.0.2.1:{port}"}))


def test_link_rate_variable_is_read_and_checked() -> None:
    from terascale._env import read_link_rate

    assert read_link_rate({}) is None
    assert read_link_rate({"TERASCALE_LINK_RATE": "100Mbit"}) == 1e8
    assert read_link_rate({"TERASCALE_LINK_RATE": "1e9"}) == 1e9
    with pytest.raises(ConfigError, match="TERASCALE_LINK_RATE"):
        read_link_rate({"TERASCALE_LINK_RATE": "fast"})
    env = JobEnv("terascale run", 0, 2, ("127.0.0.1", 1), b"s", link_rate=2e8).to_environ()
    assert read_link_rate(env) == 2e8
