"""``compression="auto"``: no compression on one host (bitwise the uncompressed path),
1-bit across (pretend) hosts; the CPU 1-bit exchange matches its device path."""

from __future__ import annotations

import os
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import terascale.torch as tt  # noqa: E402
from terascale._errors import ConfigError  # noqa: E402
from terascale.testing import run_workers  # noqa: E402

pytestmark = pytest.mark.torch


def _train(comm: Any, compression: str | None, hook: bool) -> tuple[str, bool, list[Any]]:
    import torch.nn.functional as F

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 3))
    tt.broadcast_parameters(model, comm=comm)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = tt.OneBitState(warmup_steps=0) if compression or hook else None
    opt = tt.DistributedOptimizer(sgd, model, comm=comm, compression=compression,
                                  hook=tt.onebit_hook if hook else None, hook_state=state,
                                  bucket_mb=0.001, first_bucket_mb=0.001)
    g = torch.Generator().manual_seed(comm.rank)
    for _ in range(6):
        opt.zero_grad()
        F.cross_entropy(model(torch.randn(16, 20, generator=g)),
                        torch.randint(0, 3, (16,), generator=g)).backward()
        opt.step()
    opt.flush()
    compressed = bool(state is not None and state.worker_error)
    return opt.compression, compressed, [p.detach().numpy().copy() for p in model.parameters()]


def test_auto_on_one_host_is_the_uncompressed_path_bitwise() -> None:
    auto = run_workers(_train, 2, args=("auto", False), timeout=120)
    plain = run_workers(_train, 2, args=(None, False), timeout=120)
    for (name, compressed, params), (_, _, exact) in zip(auto, plain):
        assert (name, compressed) == ("none", False)
        assert all((a == b).all() for a, b in zip(params, exact))


def test_auto_across_hosts_compresses_and_an_explicit_onebit_always_does() -> None:
    auto = run_workers(_train, 2, args=("auto", False), timeout=120, host_ids=["a", "b"])
    explicit = run_workers(_train, 2, args=("onebit", False), timeout=120, host_ids=["a", "b"])
    one_host = run_workers(_train, 2, args=(None, True), timeout=120)  # hook=onebit_hook
    plain = run_workers(_train, 2, args=(None, False), timeout=120, host_ids=["a", "b"])
    for run in (auto, explicit, one_host):
        assert [(name, compressed) for name, compressed, _ in run] == [("onebit", True)] * 2
        # bitwise the same on every rank, and not the exact sums' weights
        assert all((a == b).all() for a, b in zip(run[0][2], run[1][2]))
        assert not all((a == b).all() for a, b in zip(run[0][2], plain[0][2]))
    # the same exchange, whatever the host layout: the decision is the only difference
    assert all((a == b).all() for a, b in zip(auto[0][2], one_host[0][2]))


def test_bad_compression_settings_are_refused() -> None:
    model = torch.nn.Linear(2, 1)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ConfigError, match="compression='2bit'"):
        tt.DistributedOptimizer(sgd, model, compression="2bit")
    with pytest.raises(ConfigError, match="give one"):
        tt.DistributedOptimizer(sgd, model, compression="auto", hook=tt.onebit_hook)


def _exchange(comm: Any, device_path: bool) -> list[Any]:
    from terascale.torch import _onebit

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(comm.rank)
    worker: dict[int, Any] = {}
    server: dict[int, Any] = {}
    out = []
    for _ in range(3):
        grad = torch.randn(1000, generator=g)
        if device_path:  # the torch code path that runs on accelerators, here on the CPU
            n, m = comm.size, 512
            err = worker.setdefault(0, torch.zeros(n * m))
            send = _onebit._quantize_torch(err, grad, n, m, grad.numel(), 256)
            serr = server.setdefault(0, _onebit.np.zeros((1, m), _onebit.np.float32))
            handle = comm.alltoall_async(send)
            result = _onebit._Result(comm, handle, grad, m, grad.numel(), 256, serr).wait()
        else:
            result = _onebit.compressed_allreduce(comm, grad, 0, worker, server, 256).wait()
        out.append(result.numpy().copy())
    return out


def test_the_cpu_exchange_matches_the_device_path() -> None:
    fast = run_workers(_exchange, 2, args=(False,), timeout=120)
    slow = run_workers(_exchange, 2, args=(True,), timeout=120)
    for a, b in zip(fast, slow):
        for x, y in zip(a, b):
            assert (x == y).all()  # bitwise: the same scales, signs and sums
    assert all((x == y).all() for x, y in zip(fast[0], fast[1]))


SCRIPT = """
import torch, terascale, terascale.torch as tt
comm = terascale.init()
model = torch.nn.Linear(8, 2)
opt = tt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                              model, comm=comm, compression="auto")
print(f"rank {comm.rank}: {opt.compression}")
comm.close()
"""


@pytest.mark.parametrize(("flags", "expected"), [
    (["--hosts", "a,b"], "onebit"),
    pytest.param(["--hosts", "a,b", "--link-rate", "25Gbit"], "none",  # a fast link stated
                 marks=pytest.mark.skipif(os.environ.get("TERASCALE_TORCH_FULL") != "1",
                                          reason="the rule's other branch is the next case: "
                                                 "TERASCALE_TORCH_FULL=1 (make test-torch)")),
    ([], "none"),
])
def test_the_launchers_pretend_hosts_decide(tmp_path: Any, flags: list[str],
                                            expected: str) -> None:
    import subprocess
    import sys

    script = tmp_path / "auto.py"
    script.write_text(SCRIPT)
    done = subprocess.run([sys.executable, "-m", "terascale", "run", "-n", "2", *flags,
                           sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert sorted(line.split("] ")[-1] for line in done.stdout.splitlines()
                  if ": " in line) == [f"rank {r}: {expected}" for r in range(2)], done.stdout
