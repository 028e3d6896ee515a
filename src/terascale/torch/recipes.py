"""Large-minibatch recipes (Goyal et al. 2017; Hoffer, Hubara, Soudry 2017).

* :func:`scale_lr`: "when the minibatch size is multiplied by k, multiply the learning rate
  by k" (linear, Goyal) or by sqrt(k) (Hoffer: keeps the covariance of the weight updates).
* :class:`GradualWarmup`: raise the LR linearly from ``start_factor * lr`` to ``lr`` over
  the first steps (Goyal: from eta to k*eta over 5 epochs) to avoid early instability.
* :class:`MomentumCorrectedSGD`: SGD in Goyal's form ``u = m u + lr (g + wd w); w -= u``,
  where the LR sits inside the momentum buffer, with *momentum correction* (``u *=
  lr_new / lr_old`` whenever the LR changes) and weight decay applied to the gradient, so
  that decay is scaled together with the LR (the paper's "weight decay" subtlety: scaling
  the loss instead of the LR would leave decay unscaled).
* :class:`GhostBatchNorm`: batch-norm statistics over virtual batches of a fixed size
  (Hoffer), so the noise of normalization does not shrink as the batch grows.
* Per-worker batch norm is the default everywhere in this package: statistics are computed
  on each worker's own batch and never synchronized unless asked
  (:func:`~terascale.torch.average_buffers`). Gradient clipping by global norm:
  :func:`clip_grad_norm` or ``DistributedOptimizer(max_grad_norm=...)``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import LRScheduler

from .._errors import ConfigError

__all__ = ["GhostBatchNorm", "GradualWarmup", "MomentumCorrectedSGD", "clip_grad_norm",
           "scale_lr"]


def scale_lr(base_lr: float, batch: int, base_batch: int, rule: str = "linear") -> float:
    """The learning rate for ``batch`` given ``base_lr`` tuned for ``base_batch``.

    Parameters
    ----------
    rule
        ``"linear"`` (default; Goyal et al. 2017: the LR grows with the batch) or ``"sqrt"`` (Hoffer
        et al. 2017: with its square root).
    base_lr
        The learning rate tuned for ``base_batch``.
    batch
        The global batch now (all workers together).
    base_batch
        The batch ``base_lr`` was tuned for.
    """
    if batch <= 0 or base_batch <= 0:
        raise ConfigError(f"batch={batch} and base_batch={base_batch} must be positive")
    k = batch / base_batch
    if rule == "linear":
        return base_lr * k
    if rule == "sqrt":
        return base_lr * math.sqrt(k)
    raise ConfigError(f"rule={rule!r} is not known; use 'linear' or 'sqrt'")


class GradualWarmup(LRScheduler):
    """Linear warmup from ``start_factor * lr`` to ``lr`` over ``warmup_steps`` steps.

    Call ``scheduler.step()`` after every optimizer step. Goyal et al. use
    ``start_factor = 1/k`` for a k-times larger batch (start at the small-batch LR) and 5
    epochs of warmup; ``after`` (optional) is a scheduler that takes over afterwards.

    Parameters
    ----------
    optimizer
        The optimizer whose learning rates are warmed up.
    warmup_steps
        Steps from ``start_factor * lr`` to ``lr``.
    start_factor
        The fraction of ``lr`` at step 0 (default 0.0).
    after
        A scheduler that takes over after the warm-up (default None: ``lr`` stays).
    last_epoch
        The index of the last step, for resuming (default -1: a fresh start, as torch's schedulers).
    """

    def __init__(self, optimizer: torch.optim.Optimizer, warmup_steps: int, *,
                 start_factor: float = 0.0, after: LRScheduler | None = None,
                 last_epoch: int = -1) -> None:
        if warmup_steps < 0 or not 0.0 <= start_factor <= 1.0:
            raise ConfigError("warmup_steps must be >= 0 and start_factor in [0, 1]")
        self.warmup_steps = warmup_steps
        self.start_factor = start_factor
        self.after = after
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float | torch.Tensor]:  # as LRScheduler (an lr may be a tensor)
        t = self.last_epoch
        if t >= self.warmup_steps:
            return list(self.base_lrs)
        f = self.start_factor + (1.0 - self.start_factor) * t / max(self.warmup_steps, 1)
        return [base * f for base in self.base_lrs]

    def step(self, epoch: int | None = None) -> None:
        if self.after is not None and self.last_epoch >= self.warmup_steps:
            self.after.step()
            self.last_epoch += 1
            return
        super().step()


class MomentumCorrectedSGD(torch.optim.Optimizer):
    """SGD with the LR inside the momentum (Goyal eq. 9-10) and momentum correction.

    With a constant LR it is the same as ``torch.optim.SGD``; when a schedule (warmup!)
    changes the LR from ``lr_old`` to ``lr_new``, the momentum buffer is rescaled by
    ``lr_new / lr_old`` so that the effective step follows the new LR at once.

    Parameters
    ----------
    params
        The parameters (or parameter groups) to optimize.
    lr
        The learning rate.
    momentum
        The momentum factor (default 0.9; 0 <= momentum < 1).
    weight_decay
        L2 penalty, scaled with the LR (default 0.0).
    """

    def __init__(self, params: Iterable[Any], lr: float, momentum: float = 0.9,
                 weight_decay: float = 0.0) -> None:
        if lr < 0 or not 0.0 <= momentum < 1.0 or weight_decay < 0:
            raise ConfigError("need lr >= 0, 0 <= momentum < 1, weight_decay >= 0")
        super().__init__(params, {"lr": lr, "momentum": momentum, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = closure() if closure is not None else None
        for group in self.param_groups:
            lr, m, wd = group["lr"], group["momentum"], group["weight_decay"]
            last = group.get("last_lr", lr)
            correction = lr / last if last > 0 else 1.0
            group["last_lr"] = lr
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad.add(p, alpha=wd) if wd else p.grad
                state = self.state[p]
                u = state.get("update")
                if u is None:
                    u = state["update"] = g.mul(lr)
                else:
                    u.mul_(m * correction).add_(g, alpha=lr)
                p.sub_(u)
        return loss


class GhostBatchNorm(torch.nn.Module):
    """Batch norm whose training statistics come from virtual batches of ``virtual_batch``.

    Hoffer et al. 2017: with large batches, normalizing over the whole batch removes the
    regularizing noise of small-batch BN; splitting the batch into "ghost" batches of e.g.
    32 samples restores it. Works on (N, C) and (N, C, H, W) inputs. In eval mode it is an
    ordinary batch norm with the running statistics (updated once per ghost batch).

    Its state dict has ``BatchNorm*d``'s keys (``weight``, ``bias``, ``running_mean``,
    ``running_var``, ``num_batches_tracked``, which counts ghost batches), so checkpoints
    load into ``BatchNorm1d``/``BatchNorm2d`` and back.

    Parameters
    ----------
    num_features
        Channels (C).
    virtual_batch
        Samples per ghost batch (default 32).
    eps
        Added to the variance for stability, as in ``torch.nn.BatchNorm2d`` (default 1e-5).
    momentum
        The running statistics' update factor, as in ``torch.nn.BatchNorm2d`` (default
        0.1).
    """

    running_mean: torch.Tensor  # buffers (registered in __init__)
    running_var: torch.Tensor
    num_batches_tracked: torch.Tensor

    def __init__(self, num_features: int, virtual_batch: int = 32, *, eps: float = 1e-5,
                 momentum: float = 0.1) -> None:
        super().__init__()
        if virtual_batch < 1:
            raise ConfigError(f"virtual_batch={virtual_batch} must be >= 1")
        self.virtual_batch = virtual_batch
        self.eps, self.momentum = eps, momentum
        self.weight = torch.nn.Parameter(torch.ones(num_features))
        self.bias = torch.nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def _load_from_state_dict(self, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
        # Checkpoints of BatchNorm from before num_batches_tracked existed (as BatchNorm does)
        state_dict.setdefault(prefix + "num_batches_tracked", torch.tensor(0, dtype=torch.long))
        super()._load_from_state_dict(state_dict, prefix, *args)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                                False, 0.0, self.eps)
        parts = [F.batch_norm(c, self.running_mean, self.running_var, self.weight, self.bias,
                              True, self.momentum, self.eps)
                 for c in x.split(self.virtual_batch, dim=0)]
        with torch.no_grad():
            self.num_batches_tracked.add_(len(parts))
        return torch.cat(parts, dim=0)


def clip_grad_norm(params: Iterable[torch.Tensor], max_norm: float) -> float:
    """Clip gradients to a global L2 norm of ``max_norm``; returns the norm before clipping.

    Apply it to *averaged* gradients (all workers then clip identically), e.g. through
    ``DistributedOptimizer(max_grad_norm=...)``.

    Parameters
    ----------
    params
        The parameters whose ``.grad`` are clipped in place.
    max_norm
        The largest global L2 norm allowed.
    """
    grads = [p for p in params if p.grad is not None]
    return float(torch.nn.utils.clip_grad_norm_(grads, max_norm))
