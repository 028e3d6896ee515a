"""What torch's own suite leaves out on CPU, on the "terascale" backend: a two-stage
pipeline-parallel training (1F1B over send/recv) against one process, torch's own
``torch.distributed.pipelining`` (GPipe and 1F1B schedules) against gloo, and DDP's modes
(find_unused_parameters, static_graph, no_sync, gradient_as_bucket_view) and SyncBatchNorm
against gloo on the same inputs in the same run (real worker processes)."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from terascale.testing import run_workers

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

MICRO, STEPS, LR = 4, 3, 0.1


def _pack(obj: Any) -> bytes:
    """Tensors back to the test as bytes (a worker's shared-memory tensors die with it)."""
    import io

    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _unpack(data: bytes) -> Any:
    import io

    return torch.load(io.BytesIO(data))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stages() -> tuple[Any, Any]:
    torch.manual_seed(0)
    return (torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh()),
            torch.nn.Linear(8, 2))


def _data() -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(16, 6, generator=g), torch.randn(16, 2, generator=g)


def _pipeline(comm: Any, port: int) -> dict[str, Any]:
    """Stage ``rank`` of a 1F1B schedule: stage 0 runs one forward ahead (warm-up), then
    alternates backward/forward; stage 1 alternates forward/backward. Activations go
    0 -> 1 and their gradients 1 -> 0, tagged with the micro-batch."""
    import torch.distributed as dist

    import terascale.torch  # noqa: F401

    dist.init_process_group("terascale", init_method=f"tcp://127.0.0.1:{port}",
                            rank=comm.rank, world_size=comm.size)
    stage = _stages()[comm.rank]
    opt = torch.optim.SGD(stage.parameters(), lr=LR)
    x, y = _data()
    xs, ys = x.chunk(MICRO), y.chunk(MICRO)
    outs: dict[int, Any] = {}  # stage 0's activations in flight, by micro-batch

    def forward(i: int) -> None:
        outs[i] = stage(xs[i])
        dist.isend(outs[i].detach(), 1, tag=i).wait()

    def backward(i: int) -> None:
        g = torch.empty_like(outs[i])
        dist.recv(g, 1, tag=100 + i)
        outs.pop(i).backward(g)

    for _ in range(STEPS):
        opt.zero_grad()
        if comm.rank == 0:
            forward(0)  # warm-up: one micro-batch in flight
            for i in range(1, MICRO):
                forward(i)
                backward(i - 1)
            backward(MICRO - 1)
        else:
            for i in range(MICRO):
                a = torch.empty(xs[i].shape[0], 8)
                dist.recv(a, 0, tag=i)
                a.requires_grad_(True)
                loss = torch.nn.functional.mse_loss(stage(a), ys[i]) / MICRO
                loss.backward()
                dist.send(a.grad, 0, tag=100 + i)
        opt.step()
    dist.destroy_process_group()
    return _pack(stage.state_dict())


def test_two_stage_1f1b_pipeline_matches_one_process() -> None:
    got = [_unpack(b) for b in run_workers(_pipeline, 2, args=(_free_port(),), timeout=120)]
    s0, s1 = _stages()
    model = torch.nn.Sequential(s0, s1)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = _data()
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    for ours, ref in zip(got, (s0, s1)):
        for k, v in ref.state_dict().items():
            torch.testing.assert_close(ours[k], v, rtol=1e-5, atol=1e-6)
    assert not torch.equal(got[1]["weight"], _stages()[1].weight)  # it did train


def _torch_pipelining(comm: Any, port: int) -> dict[str, Any]:
    """torch's own pipeline parallelism (``torch.distributed.pipelining``): two
    ``PipelineStage``s under ``ScheduleGPipe`` and ``Schedule1F1B``, on a terascale group
    and on gloo over the same two processes; each stage's trained weights per (schedule,
    backend)."""
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    import terascale.torch  # noqa: F401

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank,
                            world_size=comm.size)
    groups = {"terascale": dist.new_group(backend="terascale"), "gloo": dist.new_group()}
    x, y = _data()
    out = {}
    for schedule in (ScheduleGPipe, Schedule1F1B):
        for name, group in groups.items():
            module = _stages()[comm.rank]
            stage = PipelineStage(module, comm.rank, 2, torch.device("cpu"), group=group)
            run = schedule(stage, n_microbatches=MICRO,
                           loss_fn=lambda o, t: torch.nn.functional.mse_loss(o, t))
            opt = torch.optim.SGD(module.parameters(), lr=LR)
            for _ in range(STEPS):
                opt.zero_grad()
                if comm.rank == 0:
                    run.step(x)
                else:
                    run.step(target=y)
                opt.step()
            out[f"{schedule.__name__}/{name}"] = module.state_dict()
    dist.destroy_process_group()
    return _pack(out)


def test_torch_pipelining_runs_on_terascale_as_on_gloo() -> None:
    # torch's schedules average the micro-batch losses (each scaled by 1/MICRO), as the
    # one-process reference's mean over the whole batch does, to float rounding
    got = [_unpack(b) for b in run_workers(_torch_pipelining, 2, args=(_free_port(),),
                                           timeout=180)]
    s0, s1 = _stages()
    model = torch.nn.Sequential(s0, s1)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = _data()
    for _ in range(STEPS):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    for rank, ref in enumerate((s0, s1)):
        for schedule in ("ScheduleGPipe", "Schedule1F1B"):
            ours, theirs = got[rank][f"{schedule}/terascale"], got[rank][f"{schedule}/gloo"]
            for k, v in ref.state_dict().items():
                assert torch.equal(ours[k], theirs[k]), (rank, schedule, k)  # bit for bit
                torch.testing.assert_close(ours[k], v, rtol=1e-5, atol=1e-6)
    assert not torch.equal(got[1]["ScheduleGPipe/terascale"]["weight"], _stages()[1].weight)


class _Net(torch.nn.Module):
    def __init__(self, unused: bool) -> None:
        super().__init__()
        self.a = torch.nn.Linear(5, 7)
        self.b = torch.nn.Linear(7, 3)
        if unused:  # never reached: what find_unused_parameters is for
            self.unused = torch.nn.Linear(7, 3)

    def forward(self, x: Any) -> Any:
        return self.b(torch.relu(self.a(x)))


def _ddp_modes(comm: Any, port: int) -> dict[str, Any]:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import terascale.torch  # noqa: F401

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank,
                            world_size=comm.size)
    groups = {"terascale": dist.new_group(backend="terascale"), "gloo": dist.new_group()}
    modes = {"find_unused_parameters": {"find_unused_parameters": True},
             "static_graph": {"static_graph": True},
             "gradient_as_bucket_view": {"gradient_as_bucket_view": True},
             "no_sync": {}}
    g = torch.Generator().manual_seed(10 + comm.rank)
    x, y = torch.randn(6, 8, 5, generator=g), torch.randn(6, 8, 3, generator=g)
    out: dict[str, Any] = {}
    for label, pg in groups.items():
        for mode, kw in modes.items():
            torch.manual_seed(3)
            net = DDP(_Net(mode == "find_unused_parameters"), process_group=pg, bucket_cap_mb=0.0001, **kw)
            opt = torch.optim.SGD(net.parameters(), lr=0.05)
            for step in range(6):
                opt.zero_grad()
                if mode == "no_sync" and step % 2 == 0:
                    with net.no_sync():  # accumulate locally, reduce on the next step
                        torch.nn.functional.mse_loss(net(x[step]), y[step]).backward()
                    torch.nn.functional.mse_loss(net(x[step + 1]), y[step + 1]).backward()
                    continue
                torch.nn.functional.mse_loss(net(x[step]), y[step]).backward()
                opt.step()
            out[f"{label} {mode}"] = [p.detach().clone() for p in net.parameters()]
        bn = torch.nn.SyncBatchNorm(4, process_group=pg)
        try:
            bn(torch.randn(3, 4))
            out[f"{label} sync_bn train"] = "ran"
        except ValueError as e:  # torch refuses CPU input in training, on every backend
            out[f"{label} sync_bn train"] = str(e)
        bn.eval()
        out[f"{label} sync_bn eval"] = bn(torch.ones(3, 4) * comm.rank).detach()
    dist.destroy_process_group()
    return _pack(out)


def test_ddp_modes_and_sync_batchnorm_bitwise_as_gloo() -> None:
    results = [_unpack(b) for b in run_workers(_ddp_modes, 2, args=(_free_port(),), timeout=180)]
    for rank, res in enumerate(results):
        for key, gloo in res.items():
            if not key.startswith("gloo "):
                continue
            ours = res["terascale " + key[5:]]
            if isinstance(gloo, list):
                assert all(torch.equal(a, b) for a, b in zip(ours, gloo)), (rank, key)
            elif isinstance(gloo, str):
                assert ours == gloo, (rank, key)
            else:
                assert torch.equal(ours, gloo), (rank, key)
    assert "GPU" in results[0]["terascale sync_bn train"]
    # the ranks agree (data-parallel) and training moved the weights
    for key in results[0]:
        if isinstance(results[0][key], list):
            assert all(torch.equal(a, b) for a, b in zip(results[0][key], results[1][key]))
