"""torch.compile, functional collectives and DTensor on the "terascale" backend, each
against gloo's result on the same inputs, bit for bit (two ranks: one addition per element,
so the summation order cannot differ)."""

from __future__ import annotations

import socket
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _functional(comm: Any, port: int, backend: str) -> dict[str, Any]:
    import torch.distributed as dist
    import torch.distributed._functional_collectives as fc
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor, init_device_mesh

    import terascale.torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank,
                            world_size=comm.size)
    n, world = comm.size, dist.group.WORLD
    x = torch.randn(4 * n, 3, generator=torch.Generator().manual_seed(comm.rank))
    out = {"all_reduce": fc.all_reduce(x, "sum", world),
           "all_gather": fc.all_gather_tensor(x, 0, world),
           "reduce_scatter": fc.reduce_scatter_tensor(x, "sum", 0, world),
           "all_to_all": fc.all_to_all_single(x, None, None, world)}
    mesh = init_device_mesh("cpu", (n,))
    out["full_tensor"] = distribute_tensor(torch.arange(8.0) * 1.5, mesh, [Shard(0)]).full_tensor()
    out["redistribute"] = distribute_tensor(x, mesh, [Shard(0)]).redistribute(
        mesh, [Replicate()]).to_local()
    dist.destroy_process_group()
    return {k: v.tolist() for k, v in out.items()}


def test_functional_collectives_and_dtensor_match_gloo() -> None:
    from terascale.testing import run_workers

    ours = run_workers(_functional, 2, args=(_free_port(), "terascale"), timeout=180)
    gloo = run_workers(_functional, 2, args=(_free_port(), "gloo"), timeout=180)
    assert ours == gloo
    assert ours[0]["all_reduce"] == ours[1]["all_reduce"] != ours[0]["all_gather"]


def _compiled(comm: Any, port: int, backend: str) -> dict[str, Any]:
    import torch.distributed as dist
    import torch.distributed._functional_collectives as fc

    import terascale.torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank,
                            world_size=comm.size)
    torch.manual_seed(0)
    # BatchNorm's buffers: DDP broadcasts them in forward, inside the compiled region
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8),
                              torch.nn.Linear(8, 2))
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    step = torch.compile(ddp, backend="eager")
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(comm.rank)
    for _ in range(3):
        opt.zero_grad()
        step(torch.randn(6, 4, generator=g)).square().mean().backward()
        opt.step()

    @torch.compile(backend="eager")
    def twice(t: Any) -> Any:
        return fc.all_reduce(t * 2, "sum", dist.group.WORLD) + 1

    out = {"params": [p.tolist() for p in net.parameters()],
           "buffers": [b.tolist() for b in net.buffers()],
           "functional": twice(torch.arange(4.0) + comm.rank).tolist()}
    dist.destroy_process_group()
    return out


def test_torch_compile_of_ddp_and_of_functional_collectives_matches_gloo() -> None:
    from terascale.testing import run_workers

    ours = run_workers(_compiled, 2, args=(_free_port(), "terascale"), timeout=300)
    gloo = run_workers(_compiled, 2, args=(_free_port(), "gloo"), timeout=300)
    assert ours == gloo
    assert ours[0]["params"] == ours[1]["params"]
