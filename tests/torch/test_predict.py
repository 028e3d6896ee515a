"""Half-batch's weight prediction: the predicted weights are the optimizer's next step."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

import terascale.torch as tt  # noqa: E402
from terascale.torch._predict import WeightPrediction  # noqa: E402

OPTIMIZERS: dict[str, Any] = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "sgd momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "sgd nesterov, decay": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True,
                                                      weight_decay=1e-2),
    "sgd dampening, maximize": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.8,
                                                          dampening=0.3, maximize=True),
    "momentum-corrected sgd": lambda ps: tt.MomentumCorrectedSGD(ps, lr=0.1, momentum=0.9,
                                                                 weight_decay=5e-4),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_the_prediction_is_the_next_step_with_that_gradient(name: str) -> None:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(3))]
    opt = OPTIMIZERS[name](params)
    predict = WeightPrediction(opt, params)
    assert predict.exact
    for _ in range(3):
        grads = [torch.randn_like(p) for p in params]
        predict.restore()
        for p, g in zip(params, grads):
            p.grad = g.clone()
        opt.step()
        stepped = [p.detach().clone() for p in params]
        following = [torch.randn_like(p) for p in params]
        predict.hold()
        predict.step_ahead(following)
        predicted = [p.detach().clone() for p in params]
        predict.restore()  # the true weights are back ...
        assert all(torch.equal(p, w) for p, w in zip(params, stepped))
        for p, g in zip(params, following):  # ... and the next step lands on the prediction
            p.grad = g.clone()
        snapshot = {k: {kk: (vv.clone() if torch.is_tensor(vv) else vv) for kk, vv in v.items()}
                    for k, v in opt.state.items()}
        kept = [p.detach().clone() for p in params]
        opt.step()
        for a, b in zip(params, predicted):
            torch.testing.assert_close(a.detach(), b, rtol=1e-6, atol=1e-6)
        with torch.no_grad():  # undo that step: the loop takes it with its own gradient
            for p, w in zip(params, kept):
                p.copy_(w)
        opt.state.clear()
        opt.state.update(snapshot)


def test_other_optimizers_repeat_the_last_step() -> None:
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(4))]
    opt = torch.optim.Adam(params, lr=0.1)
    predict = WeightPrediction(opt, params)
    assert not predict.exact
    before = params[0].detach().clone()
    predict.restore()
    params[0].grad = torch.randn(4)
    opt.step()
    after = params[0].detach().clone()
    predict.hold()
    predict.step_ahead([None])
    torch.testing.assert_close(params[0].detach(), after + (after - before))
    predict.restore()
    assert torch.equal(params[0].detach(), after)
