"""``terascale vw --sgd`` / ``--invariant`` alone: VW's update rules without per-feature
learning rates.

VW's default update is adaptive, normalized and importance-invariant together; that is
terascale's online learner. Given ``--sgd``, ``--invariant``, ``--adaptive`` or
``--normalized``, VW turns on only the rules named. This module is VW's ``gd`` for the two
choices that use one global learning rate: ``--sgd`` (plain stochastic gradient) and
``--invariant`` (its importance-invariant step, Karampatziakis & Langford, UAI 2011). As in
VW they default to learning rate 10 and ``initial_t`` 1, the rate at example t is
``eta * initial_t^power_t * t^-power_t`` (t counting the importance weight learned from),
and the step of an example with features x is ``update * x`` where ``update`` is the
loss's unsafe update (``--sgd``) or its invariant one given ``sum x^2``.

It runs example by example in Python over the parsed examples (one worker; the small data
such options are used on): predictions, ``-p``/``-r``, holdout and VW's closing block as the
main learner gives them. ``--adaptive`` or ``--normalized`` without the other rules, L1/L2
and ``-n N`` are refused.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np

from .._errors import ConfigError

__all__ = ["train_vw_sgd"]

_F = np.float32


def train_vw_sgd(args: argparse.Namespace, options: dict[str, Any], paths: list[str],
                 how: str, opening: Any, learning_rate_given: bool,
                 initial_t_given: bool) -> int:
    """Train with VW's ``--sgd`` or ``--invariant`` rule (see the module)."""
    from ._losses import loss32, loss_code
    from ._vwbatch import _Data
    from ._vwtext import all_or_none, link, prediction_lines, prediction_writers

    invariant = bool(args.invariant)
    if args.adaptive or args.normalized:
        raise ConfigError("--adaptive/--normalized without the other update rules are not "
                          "supported by terascale vw (VW's default is all three; --sgd or "
                          "--invariant alone are)")
    if args.nprocs != 1 or args.oaa is not None or args.initial or options.get("l1") or \
            options.get("l2") or args.testonly and not args.initial:
        raise ConfigError("--sgd/--invariant: terascale vw runs VW's plain update on one "
                          "worker, from zero weights, without --oaa, --l1/--l2 or -i")
    loss = options["loss"]
    if loss not in ("squared", "classic", "logistic", "hinge") and not (
            invariant and loss == "quantile"):
        raise ConfigError(f"--loss_function {loss} with --sgd/--invariant is not supported "
                          f"by terascale vw")
    kind = loss_code(loss, raw_labels=True, tau=float(options.get("quantile_tau", 0.5)))
    passes = int(options.get("passes", 1))
    holdout_off = options.get("holdout") == 0.0 or passes == 1
    period = int(args.holdout_period or 10)
    data = _Data(paths, options, period, int(options.get("holdout_after", 0)), holdout_off)
    power_t = _F(options.get("power_t", 0.5))
    eta = _F(options.get("learning_rate", 0.5)) if learning_rate_given else _F(10.0)
    t = float(args.initial_t) if initial_t_given else 1.0
    eta = _F(eta * _F(np.power(_F(t), power_t)))
    opening()
    size = data.size
    w = np.zeros(size, _F)
    lo = _F(-50) if loss == "logistic" else _F(0)
    hi = _F(50) if loss == "logistic" else _F(0)
    X = data.X
    sumsq = np.asarray(data.X2.sum(axis=1, dtype=_F)).ravel().astype(_F)
    writers = prediction_writers(args)
    totals = []
    best, no_win = np.inf, 0
    seen_t = t  # VW's sd->t: initial_t plus every example's weight
    holdout_w = unlabelled_w = 0.0
    with all_or_none(writers):
        for _p in range(passes):
            preds = np.empty(data.n, _F)
            partials = np.empty(data.n, _F)
            tot = [0.0, 0.0, 0.0, 0.0, float(data.n)]
            for i in range(data.n):
                a, b = X.indptr[i], X.indptr[i + 1]
                idx, val = X.indices[a:b], X.data[a:b]
                y = data.labels[i]
                wt = float(data.weights[i])
                learn = bool(data.learn[i])
                if learn:  # VW's scorer widens the range before predicting
                    lo, hi = min(lo, y), max(hi, y)
                s = _F(0)
                for k in range(len(idx)):
                    s = _F(s + _F(w[idx[k]] * val[k]))
                partials[i] = s
                p = _F(0) if np.isnan(s) else _F(min(max(s, lo), hi))
                preds[i] = p
                if data.labelled[i] and wt > 0:
                    ex_loss = float(_F(_F(loss32(kind, float(p), float(y))) * _F(wt)))
                    if data.holdout[i]:
                        tot[2] += ex_loss
                        tot[3] += wt
                    else:
                        tot[0] += ex_loss
                        tot[1] += wt
                if learn and loss32(kind, float(p), float(y)) > 0:
                    tt = _F(seen_t + wt - holdout_w - unlabelled_w)
                    scale = _F(_F(eta * _F(wt)) * _F(np.power(tt, -power_t)))
                    update = _update(kind, loss, invariant, float(p), float(y), float(scale),
                                     float(sumsq[i]))
                    if not np.isnan(update) and update != 0:
                        for k in range(len(idx)):
                            w[idx[k]] = _F(w[idx[k]] + _F(_F(update) * val[k]))
                seen_t += wt
                if data.holdout[i]:
                    holdout_w += wt
                elif not data.labelled[i]:
                    unlabelled_w += wt
            for writer, linked in writers:
                writer.write(prediction_lines(link(preds, how, args.binary) if linked
                                              else partials, data.tags))
            totals.append(tot)
            if not holdout_off:
                this = tot[2] / tot[3] if tot[3] > 0 else np.inf
                if this < best:
                    best, no_win = this, 0
                else:
                    no_win += 1
                if no_win >= int(args.patience):
                    break
    _save(args, data, w, loss, float(lo), float(hi))
    if not args.quiet:
        from ._vwreport import closing_block, holdout_on

        print(closing_block({"pass_totals": totals, "examples": data.n,
                             "holdout": holdout_on(options),
                             "feature_count": int(data.features.sum())}), file=sys.stderr)
    return 0


def _update(kind: int, loss: str, invariant: bool, p: float, y: float, scale: float,
            ppu: float) -> float:
    """VW's get_update (invariant) or get_unsafe_update (plain SGD), in float."""
    from ._losses import invariant_update

    if invariant:
        return float(invariant_update(kind, p, y, scale, ppu))
    f = _F
    if loss in ("squared", "classic"):
        return float(f(f(2.0 * f(y - p)) * f(scale)))
    if loss == "hinge":
        return float(f(y * scale)) if f(y * p) < 1 else 0.0
    st = f(f(y + 1) / f(2))  # logistic, VW's soft label in [-1, 1]
    a = f(f(1.0 * scale) / f(1 + f(np.exp(f(p)))))
    b = f(f(-1.0 * scale) / f(1 + f(np.exp(f(-p)))))
    return float(f(f(st * a) + f(f(1 - st) * b)))


def _save(args: argparse.Namespace, data: Any, w: np.ndarray, loss: str, lo: float,
          hi: float) -> None:
    from ._model import LinearModel
    from ._online import new_state

    if not (args.model or args.readable_model):
        return
    nz = np.flatnonzero(w)
    state = new_state()
    state[4], state[5] = lo, hi  # the prediction range VW's model keeps
    zeros = np.zeros(len(nz), _F)
    model = LinearModel(indices=nz.astype(np.uint32), weights=w[nz], parse=data.parse,
                        loss=loss, adaptive=(zeros, zeros, state))
    if args.model:
        from ._vwmodel import save_model

        save_model(model, args.model, args.model_format or "vw", predict_only=True)
    if args.readable_model:
        from ._vwtext import write_readable

        write_readable(LinearModel(indices=model.indices, weights=model.weights,
                                   parse=model.parse, loss=model.loss),
                       args.readable_model)
