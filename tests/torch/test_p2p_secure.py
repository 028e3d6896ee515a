"""The "terascale" backend's point-to-point links run the job's link security: every
``dist.send`` travels in authenticated records (encrypted under TERASCALE_ENCRYPT), on
keys of the pair's own. The attacks themselves: ``tests/transport/test_tamper.py``."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from terascale.testing import run_workers

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _send_and_report(comm: Any, port: int) -> dict[str, Any]:
    import datetime

    import torch.distributed as dist

    import terascale.torch  # noqa: F401

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank,
                            world_size=comm.size)
    g = dist.new_group(backend="terascale", timeout=datetime.timedelta(seconds=30))
    x = torch.arange(70_000, dtype=torch.float64) * (comm.rank + 1)  # > one record
    if comm.rank == 0:
        dist.send(x, 1, group=g, tag=7)
        got = None
    else:
        got = torch.zeros_like(x)
        dist.recv(got, 0, group=g, tag=7)
    import gc

    from terascale.torch._pg import TerascaleProcessGroup

    # (by type, not isinstance: isinstance on a dead weakref.proxy among the objects
    # raises ReferenceError through torch's metaclass checks)
    (pg,) = [o for o in gc.get_objects() if type(o) is TerascaleProcessGroup]
    links = pg._p2p.links
    used = links._out.get(1) if comm.rank == 0 else links._incoming[0]
    dist.barrier(group=g)
    ok = got is None or bool(torch.equal(got, torch.arange(70_000, dtype=torch.float64)))
    return {"security": links.security, "link": used.secure.mode, "ok": ok,
            "pair_secret": isinstance(links._secret, list)}


@pytest.mark.parametrize(("env", "hosts", "mode"), [
    ({}, ["a", "b"], "integrity"),  # TCP collectives links: their agreed mode
    ({"TERASCALE_ENCRYPT": "1"}, None, "encrypt")])  # one host: what the ranks asked for
def test_send_recv_runs_the_jobs_link_security(env: dict[str, str], hosts: Any,
                                               mode: str) -> None:
    res = run_workers(_send_and_report, 2, args=(_free_port(),), env=env, host_ids=hosts,
                      timeout=120)
    assert res == [{"security": mode, "link": mode, "ok": True, "pair_secret": True}] * 2, res
