"""Fit the alpha-beta-gamma model to ``terascale bench allreduce`` measurements of this machine.

The model is linear in its parameters, so the fit is a non-negative least-squares problem
on *relative* errors (every size counts alike, 4 KiB as much as 256 MiB): each measured
median of one of our algorithms at ``n`` ranks gives one row ``features(algorithm, n, m) .
theta = time`` with ``theta = (alpha, beta, gamma, alpha_shm, delta)``: ``alpha, beta`` are
the TCP loopback transport, ``alpha_shm, delta`` the shared-memory one, ``gamma`` the
reduction, shared by both. All ranks live on one host with ``os.cpu_count()`` cores, so the
model's core-sharing slow-down applies (:class:`terascale.sim.model.CostParams`), and so
does its memory factor for messages larger than the L2 cache (fitted by a grid search
around the linear fit).

Measurements from several runs (``-n 2`` and ``-n 4``) are fitted together, and every
prediction is checked against its measurement; the target is within 25% for sizes of
64 KiB and up.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

import numpy as np

from .._errors import ConfigError
from .._units import parse_size
from ..collectives.registry import ALLREDUCE, allreduce_names, allreduce_spec
from .model import CostParams

__all__ = ["cache_size", "calibrate", "format_calibration", "model_time", "modelled",
           "nonnegative_lstsq"]

_NAMES = ("alpha", "beta", "gamma", "alpha_shm", "delta")
MODELLED = tuple(ALLREDUCE)  # the built-in algorithms; modelled() also sees later ones
CHECK_FROM = 64 << 10


def model_time(algorithm: str, nbytes: float, n: int, c: CostParams) -> float:
    """Predicted time of one of our algorithms with ``n`` ranks on this one host: its registry
    entry's cost formula on one host of ``n`` ranks (ValueError when it has none).

    Parameters
    ----------
    algorithm
        A name of the registry.
    nbytes
        The message size in bytes.
    n
        Ranks on the host.
    c
        The machine's :class:`CostParams`.
    """
    try:
        spec = allreduce_spec(algorithm)
    except ConfigError:
        raise ValueError(f"no model for {algorithm!r}") from None
    return spec.time(nbytes, 1, n, c)


def modelled() -> tuple[str, ...]:
    """The registry's algorithms that have a cost formula (what the fit can use)."""
    return tuple(a for a in allreduce_names() if ALLREDUCE[a].cost)


def _features(algorithm: str, nbytes: float, n: int, cores: int, cache: float | None,
              mem_factor: float) -> np.ndarray:
    f = np.empty(len(_NAMES))
    for i, name in enumerate(_NAMES):
        unit = dict.fromkeys(_NAMES, 0.0)
        unit[name] = 1.0
        f[i] = model_time(algorithm, nbytes, n, CostParams(cores=cores, cache_bytes=cache,
                                                           mem_factor=mem_factor, **unit))
    return f


def cache_size() -> float | None:
    """The per-core (L2) cache of this machine in bytes, if the OS says."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for index in sorted(os.listdir(base)):
            path = os.path.join(base, index)
            if not index.startswith("index"):
                continue
            with open(os.path.join(path, "level")) as f:
                if f.read().strip() != "2":
                    continue
            with open(os.path.join(path, "size")) as f:
                text = f.read().strip().upper()
            return float(parse_size(text))  # sysfs writes "2048K": binary, as _units reads it
    except (OSError, ConfigError):
        return None
    return None


def _fit(pts: list[dict[str, Any]], cores: int, cache: float | None,
         mem_factor: float) -> tuple[np.ndarray, np.ndarray, float]:
    a = np.array([_features(p["algorithm"], p["bytes"], p["n"], cores, cache, mem_factor)
                  for p in pts])
    y = np.array([p["measured_s"] for p in pts])
    # Parameters no measured algorithm depends on stay at 0. (asarray: numpy's stubs allow a
    # scalar for any(axis=0); here it is always a 1-d array, returned as is.)
    used = np.asarray(a.any(axis=0))
    scale = a[:, used].max(axis=0)
    rel = a[:, used] / y[:, None] / scale
    theta_used = nonnegative_lstsq(rel, np.ones(len(y)))
    theta = np.zeros(len(_NAMES))
    theta[used] = theta_used / scale
    return theta, used, float(np.sum((rel @ theta_used - 1.0) ** 2))


def _points(reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: dict[tuple[str, int, int], dict[str, Any]] = {}
    for rep in reports:
        for r in rep["results"]:
            system = r["system"]
            if not system.startswith("ours:") or system[5:] not in modelled():
                continue
            seen[(system[5:], r["n"], r["bytes"])] = {
                "algorithm": system[5:], "n": r["n"], "bytes": r["bytes"],
                "measured_s": r["median_s"]}
    return list(seen.values())


def nonnegative_lstsq(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Least squares with x >= 0 for a handful of unknowns: drop the most negative and refit.

    Parameters
    ----------
    a
        The design matrix (one row per measurement).
    b
        The measured times.
    """
    active = list(range(a.shape[1]))
    x = np.zeros(a.shape[1])
    while active:
        sol = np.linalg.lstsq(a[:, active], b, rcond=None)[0]
        if (sol >= 0).all():
            x[active] = sol
            break
        active.pop(int(np.argmin(sol)))
    return x


def calibrate(report: dict[str, Any], *more: dict[str, Any],
              cores: int | None = None) -> dict[str, Any]:
    """Fit the parameters to the reports' measurements; return them with every prediction.

    Parameters
    ----------
    report
        A ``terascale bench allreduce --json`` report of this host.
    more
        Further such reports, fitted together with the first.
    cores
        Cores of the host (default None: one per rank).
    """
    cores = cores or os.cpu_count() or 1
    pts = _points([report, *more])
    if not pts:
        raise ValueError("no measurements of an algorithm with a cost formula to calibrate on "
                         f"({', '.join(modelled())})")
    cache = cache_size()
    # The model is linear but for the memory factor: try a grid of it, keep the best fit.
    factors = np.linspace(1.0, 4.0, 31) if cache else np.array([1.0])
    fits = [(_fit(pts, cores, cache, float(f)), float(f)) for f in factors]
    (theta, used, _), mem_factor = min(fits, key=lambda fit: fit[0][2])
    params = CostParams(cores=cores, cache_bytes=cache, mem_factor=mem_factor,
                        **dict(zip(_NAMES, (float(v) for v in theta))))
    for p in pts:
        p["predicted_s"] = model_time(p["algorithm"], p["bytes"], p["n"], params)
        p["error"] = p["predicted_s"] / p["measured_s"] - 1.0
    checked = [p for p in pts if p["bytes"] >= CHECK_FROM]
    within = sum(abs(p["error"]) <= 0.25 for p in checked)
    return {"params": asdict(params), "fitted": [n for n, u in zip(_NAMES, used) if u],
            "points": sorted(pts, key=lambda p: (p["algorithm"], p["n"], p["bytes"])),
            "checked": len(checked), "within_25pct": within,
            "max_abs_error": max((abs(p["error"]) for p in checked), default=0.0)}


def format_calibration(cal: dict[str, Any]) -> str:
    """The fitted parameters and a Markdown table of predicted vs measured.

    Parameters
    ----------
    cal
        What :func:`calibrate` returned.
    """
    from .._units import format_size, format_time

    pr = cal["params"]
    lines = [
        "calibrated alpha-beta-gamma model (terascale.sim, fitted: "
        f"{', '.join(cal['fitted'])}; cores={pr['cores']}):",
        f"  alpha = {pr['alpha'] * 1e6:.1f} us/message (TCP), beta = "
        f"{pr['beta'] * 1e9:.3f} ns/byte ({1 / pr['beta'] / 1e9 if pr['beta'] else float('inf'):.2f} GB/s), "
        f"gamma = {pr['gamma'] * 1e9:.3f} ns/byte ({1 / pr['gamma'] / 1e9 if pr['gamma'] else float('inf'):.2f} GB/s)",
        f"  alpha_shm = {pr['alpha_shm'] * 1e6:.1f} us, delta = {pr['delta'] * 1e9:.3f} ns/byte; "
        f"above {(pr['cache_bytes'] or 0) / 2**20:g} MiB (L2) per-byte costs x "
        f"{pr['mem_factor']:.2f}",
        f"  predictions within 25% for sizes >= 64 KiB: {cal['within_25pct']} of {cal['checked']} "
        f"(worst {cal['max_abs_error'] * 100:.0f}%)",
        "",
        "| algorithm | n | size | measured | predicted | error |",
        "|---|---|---|---|---|---|",
    ]
    for p in cal["points"]:
        lines.append(f"| {p['algorithm']} | {p['n']} | {format_size(p['bytes'])} | "
                     f"{format_time(p['measured_s'])} | {format_time(p['predicted_s'])} | "
                     f"{p['error'] * 100:+.0f}% |")
    return "\n".join(lines)
