"""1-bit and half-batch at momentum 0.9 on a short real run: within a point of full
precision with the warm-up, momentum compression, lookahead and weight prediction; far behind
without."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import terascale.torch as tt  # noqa: E402
from terascale.testing import run_workers  # noqa: E402

pytestmark = [pytest.mark.torch, pytest.mark.skipif(
    not Path("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz").exists(),
    reason="dataset-fashion-mnist is not installed")]

CONFIGS: dict[str, dict[str, Any]] = {
    "full": {},
    "onebit": {"hook": True},  # the defaults: warm-up, momentum compressed, lookahead
    "onebit, no warm-up": {"hook": True, "warmup": 0},
    "onebit, no warm-up, no lookahead": {"hook": True, "warmup": 0, "lookahead": False},
    "onebit on the gradient": {"hook": True, "warmup": 0, "mu": 0.0,  # the old arrangement
                               "lookahead": False},
    "half-batch": {"half_batch": True},  # the default: weight prediction
    "half-batch, uncompensated": {"half_batch": True, "predict": False},
}


def _train(comm: Any, x: Any, y: Any, xt: Any, yt: Any) -> dict[str, float]:
    import torch.nn.functional as F

    torch.set_num_threads(1)
    out = {}
    for name, cfg in CONFIGS.items():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 128),
                                    torch.nn.ReLU(), torch.nn.Linear(128, 10))
        tt.broadcast_parameters(model, comm=comm)
        sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        state = None
        if cfg.get("hook"):
            state = tt.OneBitState(momentum=cfg.get("mu"), lookahead=cfg.get("lookahead", True))
            if "warmup" in cfg:
                state.warmup_steps = cfg["warmup"]
        opt = tt.DistributedOptimizer(sgd, model, comm=comm,
                                      hook=tt.onebit_hook if state else None, hook_state=state,
                                      half_batch=cfg.get("half_batch", False),
                                      half_batch_momentum=cfg.get("correct"),
                                      half_batch_predict=cfg.get("predict", True))
        g = torch.Generator().manual_seed(1)
        for _ in range(300):
            idx = torch.randint(0, len(x), (64,), generator=g)[comm.rank * 32:comm.rank * 32 + 32]
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
        opt.flush()
        with torch.no_grad():
            out[name] = float((model(xt).argmax(1) == yt).float().mean())
    return out


def test_onebit_and_half_batch_hold_at_momentum_09() -> None:
    from terascale.torch.datasets import fashion_mnist

    # Read once here: the forked workers inherit the tensors instead of each decompressing
    # all 70,000 images.
    x, y = fashion_mnist(True)
    xt, yt = fashion_mnist(False)
    data = (x[:6000].clone(), y[:6000].clone(), xt[:2000].clone(), yt[:2000].clone())
    del x, y, xt, yt
    acc, other = run_workers(_train, 2, args=data, timeout=400)
    assert acc == other  # every worker holds the same model
    full = acc["full"]
    assert full > 0.7, acc
    assert acc["onebit"] >= full - 0.01, acc
    assert acc["onebit, no warm-up"] >= full - 0.01, acc  # the lookahead is enough here
    assert acc["half-batch"] >= full - 0.01, acc
    # ... and what each remedy is for: without it the same run falls behind
    assert acc["onebit, no warm-up, no lookahead"] < full - 0.01, acc
    assert acc["onebit on the gradient"] < full - 0.05, acc
    assert acc["half-batch, uncompensated"] < full - 0.1, acc


def _quadratic(comm: Any) -> dict[str, float]:
    """Momentum SGD on a badly scaled quadratic with noisy gradients: the loss left after
    300 steps, full precision and 1-bit with and without preconditioning and lookahead."""
    torch.set_num_threads(1)
    out = {}
    for name, precondition, lookahead in (("full", None, False), ("plain", False, False),
                                          ("preconditioned", True, False),
                                          ("defaults", True, True)):
        torch.manual_seed(0)
        d = 512
        h = torch.logspace(-2, 0, d)[torch.randperm(d)]  # curvatures over two orders
        target = torch.randn(d) / h.sqrt()
        model = torch.nn.Linear(d, 1, bias=False)
        w = model.weight
        torch.nn.init.zeros_(w)
        sgd = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        state = None if precondition is None else tt.OneBitState(precondition=precondition,
                                                                 lookahead=lookahead)
        opt = tt.DistributedOptimizer(sgd, model, comm=comm, hook_state=state,
                                      hook=None if state is None else tt.onebit_hook)
        g = torch.Generator().manual_seed(1 + comm.rank)
        for _ in range(300):
            opt.zero_grad()
            noise = torch.randn(d, generator=g) * 0.1 * h.sqrt()
            (0.5 * (h * (w[0] - target) ** 2).sum() + (noise * w[0]).sum()).backward()
            opt.step()
        opt.flush()  # the true weights (1-bit moves the model past its residuals between steps)
        out[name] = float(0.5 * (h * (w.detach()[0] - target) ** 2).sum())
    return out


def test_preconditioning_and_lookahead_fit_the_sign_code_to_values_of_any_size() -> None:
    # from a loss of 283 at zero; values spread over two orders within every block
    loss, other = run_workers(_quadratic, 2, timeout=120)
    assert loss == other
    assert loss["full"] < 1.0, loss
    assert loss["preconditioned"] < 0.4 * loss["plain"], loss  # measured 3.9 vs 21.1
    # looking past the residuals too: measured 1.07 against 0.96 in full precision
    assert loss["defaults"] < 1.5 * loss["full"], loss
