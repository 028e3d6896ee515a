"""DistributedOptimizer on real worker processes: averaging, identity, buckets, join."""

from __future__ import annotations

import hashlib

import pytest

torch = pytest.importorskip("torch")

import terascale.torch as tt  # noqa: E402
from terascale.testing import run_workers  # noqa: E402

pytestmark = pytest.mark.torch


class Net(torch.nn.Module):
    """Two used layers and one branch that only some ranks (or none) use."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(6, 16)
        self.b = torch.nn.Linear(16, 3)
        self.spare = torch.nn.Linear(16, 3)
        self.never = torch.nn.Linear(2, 2)

    def forward(self, x: torch.Tensor, use_spare: bool = False) -> torch.Tensor:
        h = torch.tanh(self.a(x))
        out = self.b(h)
        return out + self.spare(h) if use_spare else out


def _digest(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


def _data(n: int = 30) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    return torch.randn(n, 6, generator=g, dtype=torch.float64), torch.randint(0, 3, (n,),
                                                                                generator=g)


def _averaging(comm, sizes):  # type: ignore[no-untyped-def]
    torch.manual_seed(100 + comm.rank)  # different init everywhere: broadcast must fix it
    model = Net().double()
    tt.broadcast_parameters(model, comm=comm)
    x, y = _data(sum(sizes))
    lo = sum(sizes[: comm.rank])
    xs, ys = x[lo: lo + sizes[comm.rank]], y[lo: lo + sizes[comm.rank]]
    ref = Net().double()
    ref.load_state_dict(model.state_dict())
    torch.nn.functional.cross_entropy(ref(x), y).backward()
    opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model, comm=comm,
                                  bucket_mb=0.0002)  # ~200 bytes: several buckets
    opt.set_batch_size(len(xs))
    torch.nn.functional.cross_entropy(model(xs), ys).backward()
    opt.step()
    err = max(float((p.grad - r.grad).abs().max()) for p, r in
              zip(model.parameters(), ref.parameters()) if r.grad is not None)
    none = [p.grad is None for p in model.parameters()]
    return err, none, len(opt.buckets), _digest(model)


def test_weighted_average_equals_concatenated_batch() -> None:
    sizes = [5, 11, 14]  # uneven on purpose, weighted by set_batch_size
    out = run_workers(_averaging, 3, args=(sizes,), timeout=90)
    for err, none, nb, _ in out:
        assert err < 1e-12
        assert nb >= 3
        assert none == [False, False, False, False, True, True, True, True]
    assert len({d for *_, d in out}) == 1


def _identity(comm, hook_name):  # type: ignore[no-untyped-def]
    torch.manual_seed(comm.rank)
    model = Net()
    tt.broadcast_parameters(model, comm=comm)
    hook = {"none": None, "fp16": tt.fp16_hook, "onebit": tt.onebit_hook}[hook_name]
    # compressing from the second step, so that the lookahead moves the model between steps
    state = tt.OneBitState(warmup_steps=1) if hook_name == "onebit" else None
    sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt = tt.DistributedOptimizer(sgd, model, comm=comm, bucket_mb=0.001, hook=hook,
                                  hook_state=state)
    digests = []
    spare_grads = []
    g = torch.Generator().manual_seed(comm.rank)
    for step in range(4):
        opt.zero_grad()
        x = torch.randn(8, 6, generator=g)
        # rank 0 uses the spare branch on even steps only: its gradient must reach everyone
        use = comm.rank == 0 and step % 2 == 0
        model(x, use_spare=use).pow(2).mean().backward()
        opt.step()
        spare_grads.append(model.spare.weight.grad is not None)
        opt.flush()  # the true weights (1-bit's lookahead moves each worker's model apart)
        digests.append(_digest(model))
    return digests, spare_grads, model.never.weight.grad is None


@pytest.mark.parametrize("hook", ["none", "fp16", "onebit"])
def test_workers_bitwise_identical_after_every_step(hook: str) -> None:
    out = run_workers(_identity, 2, args=(hook,), timeout=90)
    assert out[0][0] == out[1][0]
    assert len(set(out[0][0])) == 4  # the model did change every step
    for _, spare, never_none in out:
        assert spare == [True, False, True, False]
        assert never_none


def _join(comm):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = Net()
    opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model, comm=comm)
    steps = 2 + 3 * comm.rank  # rank 0 runs out first
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(4, 6)).sum().backward()
        opt.step()
    mirrored = opt.join()
    return steps, mirrored, _digest(model)


def test_join_uneven_inputs_no_hang() -> None:
    out = run_workers(_join, 3, timeout=90)
    assert [m for _, m, _ in out] == [6, 3, 0]
    assert len({d for *_, d in out}) == 1


def _half_batch_and_accumulation(comm, predict):  # type: ignore[no-untyped-def]
    torch.manual_seed(0)
    model = Net()
    first = [p.detach().clone() for p in model.parameters()]
    opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                  model, comm=comm, half_batch=True, backward_passes_per_step=2,
                                  half_batch_predict=predict)
    unchanged = False
    for i in range(3):
        opt.zero_grad()
        for _ in range(2):
            model(torch.randn(4, 6) + comm.rank).sum().backward()
        opt.step()
        if i == 0:  # half-batch: the first step only launches (and, predicting, moves ahead)
            unchanged = all(torch.equal(a, b) for a, b in zip(first, model.parameters()))
    opt.flush()
    return unchanged, _digest(model)


@pytest.mark.parametrize("predict", [False, True])
def test_half_batch_with_accumulation(predict: bool) -> None:
    out = run_workers(_half_batch_and_accumulation, 2, args=(predict,), timeout=90)
    # without prediction the first step leaves the weights; with it every worker's model
    # moves ahead by its own gradient
    assert out[0][0] is out[1][0] is (not predict)
    assert out[0][1] == out[1][1]  # after flush: the true weights, the same on every worker


def test_extra_backward_pass_is_an_error_not_a_silent_loss() -> None:
    import terascale

    model = Net()
    opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model)
    model(torch.randn(2, 6)).sum().backward()
    with pytest.raises(terascale.ConfigError, match="backward_passes_per_step=1"):
        model(torch.randn(2, 6)).sum().backward()
    opt.zero_grad()
    with opt.no_sync():
        model(torch.randn(2, 6)).sum().backward()
