"""Synthetic data shared by the linear tests (a module, not a fixture, so forked workers
can call it): the generators of :mod:`terascale.linear.synthetic`, and a census-style CSV."""

from __future__ import annotations

import numpy as np

from terascale.linear.synthetic import logistic_lines

__all__ = ["CENSUS_CATEGORICAL", "census_rows", "vw_lines", "write_census"]

vw_lines = logistic_lines


CENSUS_CATEGORICAL = ("workclass", "education", "marital", "occupation", "relationship",
                      "race", "sex", "country")


def census_rows(n: int, seed: int = 0) -> tuple[list[str], list[list[object]]]:
    """A census-style table (the shape of UCI Adult): 8 categorical columns of realistic
    cardinality (Zipf-like frequencies) and 6 numeric columns on raw scales (age, a sampling
    weight ~1e5 that carries no signal, years of education, capital gain and loss that are
    mostly 0 with values up to 1e5, hours per week), labelled by a planted logistic model.
    The same model for every seed, so seeds give train and test splits."""
    cards = {"workclass": 8, "education": 16, "marital": 7, "occupation": 14,
             "relationship": 6, "race": 5, "sex": 2, "country": 41}
    model = np.random.default_rng(2024)
    effect = {c: model.normal(scale=1.2, size=k) for c, k in cards.items()}
    rng = np.random.default_rng(seed)
    cols: dict[str, np.ndarray] = {}
    logit = np.full(n, -4.2)
    for c, k in cards.items():
        p = 1.0 / np.arange(1, k + 1) ** 1.2
        v = rng.choice(k, size=n, p=p / p.sum())
        cols[c] = v
        logit += effect[c][v]
    age = np.clip(rng.gamma(6.0, 6.5, n) + 17, 17, 90).round()
    fnlwgt = np.clip(rng.lognormal(12.0, 0.45, n), 1.2e4, 1.5e6).round()
    edu = np.clip(rng.normal(10 + cols["education"] * 0.3, 2.0), 1, 16).round()
    gain = np.where(rng.random(n) < 0.08, rng.lognormal(8.5, 1.0, n).clip(0, 99999), 0).round()
    loss = np.where(rng.random(n) < 0.05, rng.normal(1900, 350, n).clip(150, 4356), 0).round()
    hours = np.clip(rng.normal(40, 12, n), 1, 99).round()
    logit += (0.045 * (age - 38) - 0.0006 * (age - 38) ** 2 + 0.30 * (edu - 10)
              + 2.2e-4 * np.minimum(gain, 1.5e4) + 6e-4 * loss + 0.035 * (hours - 40))
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-logit))).astype(int)
    header = ["label", "age", *cards, "fnlwgt", "education_num", "capital_gain",
              "capital_loss", "hours_per_week"]
    rows = []
    for i in range(n):
        rows.append([y[i], int(age[i]), *(f"{c[:3]}{cols[c][i]}" for c in cards),
                     int(fnlwgt[i]), int(edu[i]), int(gain[i]), int(loss[i]), int(hours[i])])
    return header, rows


def write_census(path: str, n: int, seed: int = 0) -> None:
    header, rows = census_rows(n, seed)
    with open(path, "w") as f:
        f.write(",".join(header) + "\n")
        for r in rows:
            f.write(",".join(map(str, r)) + "\n")
