"""Half precision in terascale.torch on real workers: float16 weights summed in float64,
bfloat16 gradients reduced in float32 and rounded once; GhostBatchNorm state dicts."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

import terascale.torch as tt  # noqa: E402
from terascale.testing import run_workers  # noqa: E402

pytestmark = pytest.mark.torch


def _fp16_big_weight(comm: Any) -> list[list[float]]:
    m = torch.nn.Linear(4, 1).half()
    opt = tt.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.0), m, comm=comm)
    opt.set_batch_size(40000 + comm.rank)  # a float16 sum of these is inf
    m(torch.ones(2, 4).half()).float().sum().backward()
    opt.step()
    grads = [p.grad.float().reshape(-1).tolist() for p in m.parameters()]

    # Mixed dtypes, the float16 parameter registered first: its bucket is the last one,
    # where the weights used to travel (and round to 0 or inf).
    a = torch.nn.Parameter(torch.zeros(3, dtype=torch.float16))
    b = torch.nn.Parameter(torch.zeros(2))
    holder = torch.nn.Module()
    holder.a, holder.b = a, b
    opt = tt.DistributedOptimizer(torch.optim.SGD(holder.parameters(), lr=0.0), holder,
                                  comm=comm)
    opt.set_batch_size(70000)
    (a.float().sum() * (comm.rank + 1) + b.sum()).backward()
    opt.step()
    return grads + [a.grad.float().tolist(), b.grad.tolist()]


def test_fp16_model_with_weight_40000_on_two_workers() -> None:
    for grads in run_workers(_fp16_big_weight, 2, timeout=90):
        assert grads[0] == [2.0] * 4 and grads[1] == [2.0]  # d/dw of sum over 2 rows of ones
        assert grads[2] == [1.5] * 3  # (1 + 2) / 2
        assert grads[3] == [1.0] * 2


def _bf16(comm: Any) -> dict[str, Any]:
    torch.manual_seed(comm.rank)  # different on purpose: broadcast_parameters fixes it
    model = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(),
                                torch.nn.Linear(7, 2)).to(torch.bfloat16)
    tt.broadcast_parameters(model, comm=comm)
    g = torch.Generator().manual_seed(10 + comm.rank)
    x = torch.randn(8, 5, generator=g).to(torch.bfloat16)
    # what the average must be: the two workers' bf16 gradients summed in float32, /2, rounded
    ref = [t.detach().clone() for t in model.parameters()]
    probe = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Tanh(),
                                torch.nn.Linear(7, 2)).to(torch.bfloat16)
    with torch.no_grad():
        for q, r in zip(probe.parameters(), ref):
            q.copy_(r)
    probe(x).float().square().sum().backward()
    mine = torch.cat([q.grad.float().reshape(-1) for q in probe.parameters()])
    both = comm.allgather(mine)
    expected = ((both[0] + both[1]) / 2).to(torch.bfloat16)

    opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model, comm=comm,
                                  bucket_mb=0.0001)
    model(x).float().square().sum().backward()
    opt.step()
    got = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    out = {"dtype": str(got.dtype), "exact": bool(torch.equal(got, expected)),
           "params": torch.cat([p.detach().reshape(-1) for p in model.parameters()])
           .view(torch.int16).tolist()}
    for name, hook in (("fp16", tt.fp16_hook), ("onebit", tt.onebit_hook)):
        opt.close()
        opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model,
                                      comm=comm, hook=hook,
                                      hook_state=tt.OneBitState() if name == "onebit" else None)
        opt.zero_grad()
        model(x).float().square().sum().backward()
        opt.step()
        out[name] = torch.cat([p.detach().reshape(-1) for p in model.parameters()]) \
            .view(torch.int16).tolist()
    holder = torch.nn.Module()
    holder.own = torch.nn.Parameter(torch.full((4,), 1.0 + comm.rank / 64,
                                               dtype=torch.bfloat16))
    assert tt.ModelAverager(holder, every=1, comm=comm).step()
    out["averaged"] = holder.own.detach().view(torch.int16).tolist()
    return out


def test_bf16_gradients_buckets_and_broadcasts() -> None:
    a, b = run_workers(_bf16, 2, timeout=120)
    assert a["dtype"] == "torch.bfloat16" and a["exact"] and b["exact"]
    for key in ("params", "fp16", "onebit", "averaged"):
        assert a[key] == b[key], key  # bitwise identical on both workers
    assert torch.tensor(a["averaged"], dtype=torch.int16).view(torch.bfloat16).tolist() == \
        [1.0 + 1 / 128] * 4


@pytest.mark.parametrize("dims", [1, 2])
def test_ghost_batch_norm_state_dict_is_batch_norms(dims: int) -> None:
    bn_cls = torch.nn.BatchNorm1d if dims == 1 else torch.nn.BatchNorm2d
    shape = (64, 3) if dims == 1 else (64, 3, 4, 4)
    ghost = tt.GhostBatchNorm(3, virtual_batch=16)
    ghost(torch.randn(*shape))  # 4 ghost batches
    state = ghost.state_dict()
    assert int(state["num_batches_tracked"]) == 4
    bn = bn_cls(3)
    bn.load_state_dict(state)  # strict: the same keys
    assert int(bn.num_batches_tracked) == 4
    assert torch.equal(bn.running_mean, ghost.running_mean)
    bn(torch.randn(*shape))
    back = tt.GhostBatchNorm(3)
    back.load_state_dict(bn.state_dict())
    assert int(back.num_batches_tracked) == 5
    ghost.eval(), bn.eval(), back.eval()
    x = torch.randn(*shape)
    assert torch.equal(back(x), bn(x))
    old = {k: v for k, v in state.items() if k != "num_batches_tracked"}  # older checkpoints
    tt.GhostBatchNorm(3).load_state_dict(old)
