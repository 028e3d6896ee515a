"""Half-batch's weight prediction: each gradient is computed where it will be applied.

With half-batch, the gradient a worker computes on the weights ``w_t`` is applied one step
later, to ``w_(t+1)``. Momentum SGD with such a one-step delay is stable only while
``lr h / (1 - mu) < 1`` on a direction of curvature ``h`` (0.1 at momentum 0.9, against
``2 (1 + mu)`` = 3.8 without the delay), which is why, uncompensated, it falls behind at the
momentum everyone uses. Weight prediction (Chen et al. 2018, "Efficient and Robust Parallel
DNN Training through Model Parallelism on Multi-GPU Platform"; Kosson et al. 2021,
"Pipelined Backpropagation at Scale") removes the delay instead of living with it: after
every step the model is moved to where the *next* step will put it, the forward and
backward run there, and the true weights are put back before the optimizer steps.

The next step of momentum SGD is known but for one term: ``u_(t+1) = mu u_t + lr (g + wd
w)``, with ``g`` the average that is still in flight. Each worker uses its own gradient of
the step it just computed in its place, so the prediction is exact up to ``lr`` times that
gradient's sampling noise, and the delayed iteration keeps the undelayed one's stability
(3.8 at momentum 0.9 on the quadratic model). For optimizers other than ``torch.optim.SGD``
and :class:`~terascale.torch.MomentumCorrectedSGD` the prediction repeats the last step
(``w + (w - w_prev)``: stable to 0.27 on the same model).

With it half-batch ends within a few hundredths of a point of full precision's test
accuracy at momentum 0.9 (``terascale bench torch --parts compression``; the figures are
in ``docs/benchmarks/pytorch.md``, "1-bit and half-batch at momentum 0.9"), closer than
lowering the momentum (:mod:`terascale.torch._delay`) or no compensation. What it
costs: one more copy of the weights (two for the fallback) and a few element-wise passes
per step; the workers' models differ between steps (each predicted with its own gradient)
while the true weights stay bitwise identical.

1-bit's lookahead (:class:`~terascale.torch.OneBitState`) uses the same machinery to move
the model past what its error-feedback residuals still hold back.
"""

from __future__ import annotations

import torch

from .recipes import MomentumCorrectedSGD

__all__ = ["SGD_FAMILY", "WeightPrediction"]

# optimizers whose step is ``lr`` times a momentum buffer the code here can read and predict
SGD_FAMILY = (torch.optim.SGD, MomentumCorrectedSGD)


class WeightPrediction:
    """Keeps the true weights while the model holds moved ones.

    Call :meth:`restore` before the optimizer steps (and at the end of training), then
    :meth:`hold` after it, and move the model: :meth:`step_ahead` (half-batch's next step,
    with this worker's own gradients of the step) and/or :meth:`move` (any other known
    displacement, e.g. what 1-bit's residuals hold back).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, params: list[torch.nn.Parameter], *,
                 ahead: bool = True) -> None:
        self.optimizer = optimizer
        self.params = params
        self.ahead = ahead
        self.true = [torch.empty_like(p, memory_format=torch.preserve_format) for p in params]
        self.holding = False  # the model holds moved weights, the true ones are in .true
        self.before: list[torch.Tensor] | None = None
        self._groups = {id(p): g for g in optimizer.param_groups for p in g["params"]}
        self.exact = isinstance(optimizer, SGD_FAMILY)

    @torch.no_grad()
    def restore(self) -> None:
        """Put the true weights back into the model (a no-op when they are there)."""
        if self.holding:
            for p, w in zip(self.params, self.true):
                p.copy_(w)
            self.holding = False
        if self.ahead and not self.exact:  # the fallback repeats the step about to be taken
            self.before = [p.detach().clone() for p in self.params]

    @torch.no_grad()
    def hold(self) -> None:
        """After a step: keep the weights stepped to as the true ones."""
        for p, w in zip(self.params, self.true):
            w.copy_(p)
        self.holding = True

    @torch.no_grad()
    def step_ahead(self, local: list[torch.Tensor | None]) -> None:
        """Move the model to where the next step will put it (after :meth:`hold`)."""
        if not self.exact:
            assert self.before is not None
            for p, w, b in zip(self.params, self.true, self.before):
                p.add_(w - b)
            self.before = None
            return
        for p, g in zip(self.params, local):
            self._take_next_step(p, g)

    @torch.no_grad()
    def move(self, p: torch.Tensor, delta: torch.Tensor, scale: float = 1.0) -> None:
        """Move ``p`` by ``-lr * scale * delta``, ``delta`` in the units of a gradient (after
        :meth:`hold`)."""
        p.sub_(delta.view_as(p).to(p.dtype), alpha=self._groups[id(p)]["lr"] * scale)

    def _take_next_step(self, p: torch.Tensor, g: torch.Tensor | None) -> None:
        """Subtract from ``p`` what the next ``optimizer.step()`` would if its gradient were
        ``g``, in place: ``p (1 - lr c wd) - lr c g - k buffer`` (three passes, no copies)."""
        group = self._groups[id(p)]
        lr, mu = group["lr"], group.get("momentum", 0.0)
        wd = group.get("weight_decay", 0.0)
        state = self.optimizer.state.get(p, {})
        if isinstance(self.optimizer, MomentumCorrectedSGD):  # u' = mu u + lr (g + wd p)
            c, buf = 1.0, state.get("update")
            k = mu  # the buffer already holds the LR
        else:  # torch.optim.SGD
            buf = state.get("momentum_buffer") if mu else None
            damp = group.get("dampening", 0.0)
            nesterov = group.get("nesterov", False)
            if buf is None:  # no momentum, or its first step (the buffer starts at d)
                c, k = (1.0 + mu if nesterov else 1.0), 0.0
            else:
                c = 1.0 + mu * (1.0 - damp) if nesterov else 1.0 - damp
                k = lr * mu * mu if nesterov else lr * mu
        if wd:
            p.mul_(1.0 - lr * c * wd)
        if buf is not None and k:
            p.add_(buf, alpha=-k)
        if g is not None:
            p.add_(g, alpha=(lr * c if group.get("maximize", False) else -lr * c))
