"""Half-batch's momentum correction (``half_batch_momentum``; off by default, where weight
prediction, :mod:`terascale.torch._predict`, compensates the delay instead).

Momentum correction for the delay. A stale gradient behaves like extra momentum
(Mitliagkas, Zhang, Hadjis, Re 2016, "Asynchrony begets momentum"): momentum SGD at 0.9
with a one-step delay overshoots, and uncorrected loses much of its accuracy. Following that paper, the explicit
momentum is lowered so that the two compose to the one asked for,
``1 - mu = (1 - mu_explicit) (1 - implicit)``: the optimizer's own momentum ``mu`` is left as
it is and the gradient it receives is rewritten, ``h_t = g_t + (mu_explicit - mu) b_(t-1)``
with ``b_t = mu_explicit b_(t-1) + g_t``, so that its momentum buffer is exactly ``b_t``
(identical on every worker, like the gradients). ``half_batch_momentum="auto"`` uses
``implicit = 0.8``, so 0.9 becomes 0.5. Why so low: heavy-ball momentum with a one-step
delay, on a quadratic of curvature ``h``, is stable only while its effective step
``lr h / (1 - mu_explicit)`` stays below 1 (the product of the roots of
``z^2 - (1 + mu) z + mu + lr h`` is ``mu + lr h``), against ``2 (1 + mu) / (1 - mu)`` = 38
without the delay at 0.9; lowering the explicit momentum at the same LR lowers that
effective step on the stiff directions (the paper's queueing model gives ``implicit =
1/2``, i.e. 0.8, which keeps less of that margin). The price: flat directions move at
``lr / (1 - mu_explicit)``, 5x slower than ``lr / (1 - mu)``. A number sets ``mu_explicit``
(lower it if half-batch lags at a high LR); None turns the correction off.
"""

from __future__ import annotations

import torch

from .._errors import ConfigError

__all__ = ["DelayCorrection"]

_IMPLICIT = 0.8  # the momentum a one-step delay adds (module docstring)


class DelayCorrection:
    """Rewrites averaged gradients so that the optimizer's momentum buffer holds the
    corrected momentum; ``setting`` as ``half_batch_momentum`` (None: do nothing)."""

    def __init__(self, optimizer: torch.optim.Optimizer, setting: float | str | None) -> None:
        self.momenta: dict[int, tuple[float, float]] = {}  # id(param) -> (mu, explicit)
        self.buffers: dict[int, torch.Tensor] = {}
        if setting is None:
            return
        if isinstance(setting, str) and setting != "auto":
            raise ConfigError(f"half_batch_momentum={setting!r}: use 'auto', a momentum in "
                              "[0, 1), or None")
        if not isinstance(setting, str) and not 0.0 <= float(setting) < 1.0:
            raise ConfigError(f"half_batch_momentum={setting!r} must be in [0, 1)")
        for group in optimizer.param_groups:
            mu = float(group.get("momentum", 0.0) or 0.0)
            if mu <= 0.0:
                continue
            explicit = (max(0.0, 1.0 - (1.0 - mu) / (1.0 - _IMPLICIT)) if setting == "auto"
                        else float(setting))
            for p in group["params"]:
                self.momenta[id(p)] = (mu, explicit)

    def apply(self, params: list[torch.nn.Parameter]) -> None:
        """Call with the averaged gradients in place, before the optimizer steps."""
        for p in params:
            pair = self.momenta.get(id(p))
            if pair is None or p.grad is None:
                continue
            mu, explicit = pair
            previous = self.buffers.get(id(p))
            g = p.grad
            if previous is None:  # the first step: the optimizer's buffer starts at g too
                self.buffers[id(p)] = g.detach().clone()
                continue
            p.grad = g + (explicit - mu) * previous
            previous.mul_(explicit).add_(g)
