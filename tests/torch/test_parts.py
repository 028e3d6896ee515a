"""terascale.torch pieces: 1-bit error feedback, sampler, recipes, averaging, parameter server."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import terascale  # noqa: E402
import terascale.torch as tt  # noqa: E402
from terascale.testing import run_workers  # noqa: E402
from terascale.torch._onebit import pack_signs, unpack_signs  # noqa: E402

pytestmark = pytest.mark.torch


def test_error_feedback_carries_the_residual() -> None:
    comm = terascale.init()  # size 1: quantization still happens, locally
    state = tt.OneBitState(warmup_steps=0, momentum=0.0)  # error feedback on the gradient
    g = torch.tensor([1.0, -2.0, 3.0, -4.0, 0.5, -0.5, 2.0, 6.0])
    out = tt.onebit_hook(state, comm, 0, g).wait()
    scale = g.abs().mean()  # 2.375
    assert torch.allclose(out, scale * torch.sign(g))
    residual = g - scale * torch.sign(g)
    assert torch.allclose(state.worker_error[0][:8], residual)
    # the next gradient is compensated with the residual before quantizing
    g2 = torch.tensor([0.1, 0.1, -0.1, -0.1, 0.1, 0.1, -0.1, -0.1])
    out2 = tt.onebit_hook(state, comm, 0, g2).wait()
    comp = g2 + residual
    assert torch.allclose(out2, comp.abs().mean() * torch.sign(comp))
    # nothing is lost, only delayed: sent + residual == sum of true gradients
    sent, true = out + out2, g + g2
    assert torch.allclose(sent + state.worker_error[0][:8], true, atol=1e-6)


def test_error_feedback_bounded_over_many_steps() -> None:
    comm = terascale.init()
    state = tt.OneBitState(warmup_steps=0, momentum=0.0)
    gen = torch.Generator().manual_seed(0)
    sent = torch.zeros(100)
    true = torch.zeros(100)
    for _ in range(200):
        g = torch.randn(100, generator=gen) + 0.3
        sent += tt.onebit_hook(state, comm, 3, g).wait()
        true += g
    assert float((true - sent).abs().max()) < 10.0  # vs |true| ~ 60: bounded residual
    assert float((true - sent - state.worker_error[3][:100]).abs().max()) < 1e-3


@pytest.mark.parametrize("precondition", [False, True])
def test_onebit_compresses_the_momentum_after_its_warm_up(precondition: bool) -> None:
    """With momentum mu the hook sends the workers' momenta (error feedback on them) and
    returns the gradient whose momentum buffer, in the optimizer, is what was sent; with
    ``precondition`` the values sent are the momenta divided by the magnitude frozen at the
    end of the warm-up (the root mean square of the exact sums), multiplied back on arrival."""
    comm = terascale.init()
    mu = 0.9
    state = tt.OneBitState(warmup_steps=3, momentum=mu, precondition=precondition)
    gen = torch.Generator().manual_seed(0)
    spread = torch.logspace(-3, 1, 64)  # magnitudes over four orders
    buf = torch.zeros(64)  # what SGD(momentum=mu) would hold
    mom = torch.zeros(64)  # the exact local momentum
    squares = torch.zeros(64)
    sent_total = torch.zeros(64)
    mom_total = torch.zeros(64)
    for step in range(40):
        g = (torch.randn(64, generator=gen) + 0.2) * spread
        out = tt.onebit_hook(state, comm, 0, g).wait()
        buf = mu * buf + out
        mom = mu * mom + g
        assert torch.allclose(buf, state.average_momentum[0], rtol=1e-4, atol=1e-5)
        if step < 3:  # warm-up: full precision, the buffer is the exact momentum
            assert torch.allclose(buf, mom, rtol=1e-5, atol=1e-6)
            assert not state.worker_error
            squares += mom.square()
        else:  # compressed: 2 levels per block (after the division), nothing lost, only delayed
            sigma = state.magnitude[0]
            if precondition:
                rms = (squares / 3).sqrt()
                expected = torch.maximum(rms, state.floor * rms.mean())
                assert sigma is not None and torch.allclose(sigma, expected)
            else:
                assert sigma is None
                sigma = torch.ones(64)
            levels = (state.average_momentum[0] / sigma).abs()
            assert torch.allclose(levels, levels.max().expand(64), rtol=1e-5)
            sent_total += buf
            mom_total += mom
    owed = state.worker_error[0][:64] * sigma
    assert torch.allclose(sent_total + owed, mom_total, rtol=1e-4, atol=1e-3)


def test_sign_packing_round_trip() -> None:
    x = torch.tensor([[True, False, True, True, False, False, False, True] * 2])
    packed = pack_signs(x)
    assert packed.dtype == torch.uint8 and packed.shape == (1, 2)
    assert int(packed[0, 0]) == 0b10110001
    assert torch.equal(unpack_signs(packed), x)


def _bytes(comm):  # type: ignore[no-untyped-def]
    sent = {}
    for name, hook in (("none", None), ("fp16", tt.fp16_hook), ("onebit", tt.onebit_hook)):
        model = torch.nn.Linear(1000, 100)
        opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model,
                                      comm=comm, hook=hook, hook_state=tt.OneBitState(warmup_steps=0))
        # before backward: the buckets' allreduces start during it, on the progress thread
        before = comm.bytes_sent
        model(torch.randn(4, 1000)).sum().backward()
        opt.step()
        sent[name] = comm.bytes_sent - before
        opt.close()
    return sent


def test_compression_sends_fewer_bytes() -> None:
    # one pretend host per rank: allreduce goes over TCP, where bytes_sent counts the wire
    sent = run_workers(_bytes, 2, timeout=60, host_ids=["a", "b"])[0]
    assert sent["fp16"] < 0.6 * sent["none"]
    assert sent["onebit"] * 20 < sent["none"]


@pytest.mark.parametrize("n,length", [(3, 30), (4, 30), (3, 7)])
def test_sampler_shards_disjoint_and_covering(n: int, length: int) -> None:
    for even in (True, False):
        shards = [list(tt.DistributedSampler(length, num_replicas=n, rank=r, seed=5, even=even))
                  for r in range(n)]
        flat = [i for s in shards for i in s]
        assert set(flat) == set(range(length))
        if even:
            assert len({len(s) for s in shards}) == 1
            assert len(flat) - len(set(flat)) == (-length) % n  # only the padding repeats
        else:
            assert len(flat) == length  # disjoint
    s = tt.DistributedSampler(length, num_replicas=n, rank=0, seed=5)
    first = list(s)
    s.set_epoch(1)
    assert list(s) != first  # reshuffled every epoch


def test_scale_lr_and_warmup() -> None:
    assert tt.scale_lr(0.1, 1024, 64) == pytest.approx(1.6)
    assert tt.scale_lr(0.1, 1024, 64, rule="sqrt") == pytest.approx(0.4)
    with pytest.raises(terascale.ConfigError):
        tt.scale_lr(0.1, 8, 4, rule="cubic")
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1.6)
    sched = tt.GradualWarmup(opt, 4, start_factor=1 / 16)
    lrs = []
    for _ in range(6):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs[0] == pytest.approx(0.1) and lrs[4:] == [pytest.approx(1.6)] * 2
    assert lrs == sorted(lrs)


def test_momentum_correction_and_weight_decay() -> None:
    p1 = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    p2 = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
    ours = tt.MomentumCorrectedSGD([p1], lr=0.1, momentum=0.9, weight_decay=0.01)
    ref = torch.optim.SGD([p2], lr=0.1, momentum=0.9, weight_decay=0.01)
    for _ in range(3):  # constant LR: same as torch SGD
        for p, o in ((p1, ours), (p2, ref)):
            p.grad = torch.tensor([0.5, 0.25])
            o.step()
    assert torch.allclose(p1, p2)
    u = ours.state[p1]["update"].clone()
    ours.param_groups[0]["lr"] = 0.2  # LR doubles: the momentum buffer is rescaled by 2
    p1.grad = torch.zeros(2)
    before = p1.detach().clone()
    ours.step()
    wd = 0.01 * before * 0.2
    assert torch.allclose(before - p1.detach(), 0.9 * 2 * u + wd)


def test_ghost_batch_norm_uses_virtual_batches() -> None:
    gbn = tt.GhostBatchNorm(2, virtual_batch=4)
    x = torch.cat([torch.randn(4, 2), torch.randn(4, 2) * 10 + 5])
    y = gbn(x)
    for part in y.split(4):  # each ghost batch is normalized on its own
        assert torch.allclose(part.mean(0), torch.zeros(2), atol=1e-5)
    gbn.eval()
    assert gbn(x).shape == x.shape


def _averaging_and_ps(comm):  # type: ignore[no-untyped-def]
    torch.manual_seed(comm.rank)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    tt.broadcast_optimizer_state(sgd, comm=comm)
    avg = tt.ModelAverager(model, every=2, comm=comm, buffers=True)
    flags = []
    for _ in range(4):
        sgd.zero_grad()
        model(torch.randn(8, 4)).sum().backward()
        sgd.step()
        flags.append(avg.step())
    local = [p.detach().clone() for p in model.parameters()] + [model[1].running_mean.clone()]
    results = {"avg": ([t.numpy().tobytes() for t in local], flags)}
    tt.broadcast_optimizer_state(sgd, comm=comm)  # momentum buffers differ until now
    results["momentum"] = [sgd.state[p]["momentum_buffer"].numpy().tobytes()
                           for p in model.parameters()]
    for mode in ("sync", "async"):
        torch.manual_seed(comm.rank + 10)
        net = torch.nn.Linear(4, 2)
        ps = tt.ParameterServer(net, lr=0.1, mode=mode, comm=comm)
        start = net.weight.detach().clone()
        for _ in range(3):
            net.zero_grad()
            net(torch.randn(5, 4)).pow(2).sum().backward()
            ps.step()
        ps.close()
        updates = ps.server.updates if ps.server is not None else None
        results[mode] = (start.numpy().tobytes(), net.weight.detach().numpy().tobytes(), updates)
    return results


def test_model_averaging_and_parameter_server() -> None:
    a, b = run_workers(_averaging_and_ps, 2, timeout=90)
    assert a["avg"] == b["avg"] and a["avg"][1] == [False, True, False, True]
    assert a["momentum"] == b["momentum"]
    # sync: same start everywhere, a deterministic round of 2 gradients per update
    assert a["sync"][0] == b["sync"][0]
    assert a["sync"][1] == b["sync"][1]  # both pulled after the last full round
    assert a["sync"][2] == 3
    assert a["async"][0] == b["async"][0] and a["async"][2] == 6  # every push is an update


def _ps_address(comm):  # type: ignore[no-untyped-def]
    net = torch.nn.Linear(4, 2)
    ps = tt.ParameterServer(net, lr=0.1, comm=comm)
    net(torch.ones(1, 4)).sum().backward()
    ps.step()
    ps.close()
    return ps.address, comm.addresses


def test_parameter_server_listens_on_rank_0s_job_address() -> None:
    # Two pretended hosts: not loopback by "same host", but rank 0's rendezvous address.
    (a, addrs), (b, _) = run_workers(_ps_address, 2, timeout=90, host_ids=["a", "b"])
    assert a == b and a[0] == addrs[0] == "127.0.0.1"  # the job's, never 0.0.0.0


_PS_ACROSS_HOSTS = """
import torch, terascale, terascale.torch as tt
with terascale.init() as comm:
    net = torch.nn.Linear(4, 2)
    ps = tt.ParameterServer(net, lr=0.1, comm=comm)
    for _ in range(2):
        net.zero_grad()
        net(torch.ones(1, 4) * (comm.rank + 1)).sum().backward()
        ps.step()
    ps.close()
    print(ps.address[0], comm.addresses[0], net.weight.detach().numpy().tobytes().hex())
"""


def test_parameter_server_across_network_namespaces(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Each emulated host is a network namespace, where the hostname's address is loopback
    or another namespace's: the server must use the job's address (the rendezvous's)."""
    import os
    import subprocess
    import sys

    from terascale._env import JobEnv
    from terascale.testing import cluster as tc

    ok, why = tc.available()
    if not ok:
        pytest.skip(f"no emulated hosts here: {why}")
    secret = os.urandom(16).hex()
    (tmp_path / "secret").write_text(secret)
    (tmp_path / "secret").chmod(0o600)
    with tc.Cluster(2, link=None) as c:
        rdv = c.popen(0, [sys.executable, "-m", "terascale", "rendezvous", "--host", c.address(0),
                          "--port", "29500", "--size", "2", "--secret-file",
                          str(tmp_path / "secret"), "--timeout", "120"])
        workers = [c.popen(r, [sys.executable, "-c", _PS_ACROSS_HOSTS], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True,
                           env=JobEnv("test", r, 2, (c.address(0), 29500), secret.encode(),
                                      timeout=60.0).to_environ())
                   for r in range(2)]
        outs = [w.communicate(timeout=240) for w in workers]
        assert [w.returncode for w in workers] == [0, 0], outs
        assert rdv.wait(60) == 0
    lines = [o.split() for o, _ in outs]
    assert lines[0] == lines[1], lines  # same server address, same final weights
    assert lines[0][0] == lines[0][1] == c.address(0)


def _cuda_identity(comm):  # type: ignore[no-untyped-def]
    torch.manual_seed(comm.rank)
    model = torch.nn.Linear(8, 4).cuda()
    tt.broadcast_parameters(model, comm=comm)
    opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model, comm=comm,
                                  hook=tt.onebit_hook, hook_state=tt.OneBitState(warmup_steps=0))
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 8, device="cuda")).sum().backward()
        opt.step()
    assert model.weight.grad.device.type == "cuda"
    return model.weight.detach().cpu().numpy().tobytes()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_stay_on_device_and_identical() -> None:
    a, b = run_workers(_cuda_identity, 2, timeout=120)
    assert a == b
