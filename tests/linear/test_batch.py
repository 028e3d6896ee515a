"""The batch phase on badly scaled data: L-BFGS and CG reach scipy's optimum of the same
objective on raw numeric columns (1e-3 beside 1e5), and on a census-style CSV the
standardized objective gives scikit-learn's test AUC. All through real files."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from _linear_data import CENSUS_CATEGORICAL, census_rows, write_census

from terascale import ConfigError
from terascale.linear import LinearModel, ParseOptions, read_file, train
from terascale.testing import run_workers

SCALES = (1e-3, 1e-2, 1.0, 30.0, 1e3, 1e5)


def _write_dense(path, n, rng):
    """Raw-scale dense columns: each is mean + spread * noise, mean 3x the spread, so every
    column is also nearly parallel to the bias."""
    beta = rng.normal(size=len(SCALES))
    z = rng.normal(size=(n, len(SCALES)))
    x = (3.0 + z) * np.array(SCALES)
    y = rng.random(n) < 1 / (1 + np.exp(-(z @ beta)))
    with open(path, "w") as f:
        for xi, yi in zip(x, y):
            f.write(f"{1 if yi else -1} |n " + " ".join(f"c{j}:{v:.6g}" for j, v in
                                                      enumerate(xi)) + "\n")
    return ParseOptions(bits=12)


def _write_mixed(path, n, rng):
    """Census-style: one-hot columns of cardinality 3..60 and raw numeric columns."""
    header, rows = census_rows(n, seed=int(rng.integers(1 << 30)))
    with open(path, "w") as f:
        f.write(",".join(header) + "\n")
        f.writelines(",".join(map(str, r)) + "\n" for r in rows)
    return ParseOptions(format="csv", bits=14, categorical=CENSUS_CATEGORICAL)


def _write_tiny_huge(path, n, rng):
    """A column ~1e5 beside one ~1e-3, both informative, with importance weights."""
    a = rng.normal(size=n) * 1e-3
    b = 1e5 + rng.normal(size=n) * 2e4
    zt = a / 1e-3 - (b - 1e5) / 2e4
    y = rng.random(n) < 1 / (1 + np.exp(-zt))
    imp = rng.choice([0.5, 1.0, 3.0], size=n)
    with open(path, "w") as f:
        for ai, bi, yi, s in zip(a, b, y, imp):
            f.write(f"{1 if yi else -1} {s} |t a:{ai:.6g} |h b:{bi:.6g}\n")
    return ParseOptions(bits=10)


def _objective(ds, lam, loss):
    """sum of weighted losses + lam/2 ||w||^2 over the features present, by scipy.sparse."""
    used, cols = np.unique(ds.indices, return_inverse=True)
    X = sp.csr_matrix((ds.values.astype(np.float64), cols, ds.indptr),
                      shape=(len(ds), len(used)))
    s = ds.weights.astype(np.float64)
    y = np.where(ds.labels > 0, 1.0, -1.0) if loss == "logistic" else ds.labels.astype(float)

    def f(w):
        z = X @ w
        if loss == "logistic":
            val = s @ np.logaddexp(0, -y * z)
            dz = -y * s * np.exp(-np.logaddexp(0, y * z))
        else:
            val = s @ (z - y) ** 2
            dz = 2 * s * (z - y)
        return val + 0.5 * lam * w @ w, X.T @ dz + lam * w

    return f, used, X


def _scipy_optimum(f, X):
    """scipy's L-BFGS-B on the same objective. On raw columns of scale 1e5 it stalls as
    badly as any first-order method, so it runs in scaled coordinates w = v / rms(column)
    (a change of variables: the same objective, the same minimum)."""
    from scipy.optimize import minimize

    rms = np.sqrt(np.asarray(X.multiply(X).mean(axis=0)).ravel())
    rms[rms == 0] = 1.0

    def g(v):
        val, grad = f(v / rms)
        return val, grad / rms

    best = None
    for _ in range(3):  # restarts from its own end point tighten the last digits
        x0 = np.zeros(len(rms)) if best is None else best.x
        r = minimize(g, x0, jac=True, method="L-BFGS-B",
                     options={"maxiter": 20000, "ftol": 1e-15, "gtol": 1e-11, "maxcor": 30})
        best = r if best is None or r.fun < best.fun else best
    return best.fun


@pytest.mark.parametrize("shape", ["dense", "mixed", "tiny_huge"])
@pytest.mark.parametrize("method,loss", [("bfgs", "logistic"), ("cg", "logistic"),
                                         ("bfgs", "squared")])
def test_batch_objective_reaches_scipy_on_badly_scaled_columns(tmp_path, shape, method, loss):
    rng = np.random.default_rng({"dense": 1, "mixed": 2, "tiny_huge": 3}[shape])
    path = str(tmp_path / ("d.csv" if shape == "mixed" else "d.vw"))
    popts = {"dense": _write_dense, "mixed": _write_mixed,
             "tiny_huge": _write_tiny_huge}[shape](path, 1500, rng)
    lam = 1.0
    model = train([path], comm=None, **popts.to_dict(), loss=loss, l2=lam, holdout=0,
                  tol=1e-13, normalize="off", cache_dir=str(tmp_path / "cache"), **{method: 300})
    ds = read_file(path, popts)
    f, used, X = _objective(ds, lam, loss)
    ref = _scipy_optimum(f, X)
    ours = f(model.dense()[used].astype(np.float64))[0]
    gap = (ours - ref) / abs(ref)
    assert gap <= 1e-4, (shape, method, loss, ours, ref, model.info)
    assert model.info["objective"] == pytest.approx(ours, rel=1e-5)


def test_census_csv_auc_within_0002_of_sklearn_standardized(tmp_path, capfd):
    """`terascale linear train --format csv --bfgs 20` on raw columns (income-like ~1e5,
    capital gains mostly 0) against StandardScaler + one-hot + LogisticRegression(C=1/l2)."""
    import pandas as pd
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score
    from sklearn.preprocessing import OneHotEncoder, StandardScaler

    from terascale.cli import main

    tr, te = str(tmp_path / "train.csv"), str(tmp_path / "test.csv")
    write_census(tr, 20000, seed=11)
    write_census(te, 8000, seed=12)
    model_path = str(tmp_path / "census.model")
    capfd.readouterr()
    assert main(["linear", "train", tr, "--format", "csv", "--categorical",
                 ",".join(CENSUS_CATEGORICAL), "--bfgs", "20", "-f", model_path,
                 "--quiet", "--cache-dir", str(tmp_path / "cache")]) == 0
    assert main(["linear", "evaluate", te, "-i", model_path, "--json"]) == 0
    ours = json.loads(capfd.readouterr().out.strip().splitlines()[-1])["auc"]

    dtr, dte = pd.read_csv(tr), pd.read_csv(te)
    num = [c for c in dtr.columns if c not in (*CENSUS_CATEGORICAL, "label")]
    ct = ColumnTransformer([("c", OneHotEncoder(handle_unknown="ignore"),
                             list(CENSUS_CATEGORICAL)), ("n", StandardScaler(), num)])
    sk = LogisticRegression(C=1.0, max_iter=5000).fit(ct.fit_transform(dtr), dtr["label"])
    theirs = roc_auc_score(dte["label"], sk.decision_function(ct.transform(dte)))
    assert ours >= theirs - 0.002, (ours, theirs)

    m = LinearModel.load(model_path)
    rec, arrays = m.normalization
    assert rec["method"] == "std" and rec["version"] == 1 and rec["features"] == len(num)
    trained = dtr[num].to_numpy(float)[np.arange(len(dtr)) % 10 != 9]  # 10% held out
    np.testing.assert_allclose(np.sort(arrays["norm_mean"]), np.sort(trained.mean(axis=0)),
                               rtol=1e-9)
    np.testing.assert_allclose(np.sort(arrays["norm_std"]), np.sort(trained.std(axis=0)),
                               rtol=1e-6)


def _fit_shard(comm, path, popts):
    ds = read_file(path, popts, shard=(comm.rank, comm.size))
    m = train(ds, comm=comm, bfgs=150, holdout=0, tol=1e-12)
    return m.dense(), m.normalization, m.info["objective"]


def test_standardization_is_summed_over_workers_and_identical_on_every_rank(tmp_path):
    path = str(tmp_path / "c.csv")
    write_census(path, 3000, seed=5)
    popts = ParseOptions(format="csv", bits=14, categorical=CENSUS_CATEGORICAL)
    one = train([path], comm=None, **popts.to_dict(), bfgs=150, holdout=0, tol=1e-12,
                cache_dir=str(tmp_path / "cache"))
    (w0, n0, f0), (w1, n1, f1) = run_workers(_fit_shard, 2, args=(path, popts), timeout=120)
    assert np.array_equal(w0, w1) and f0 == f1
    for k in ("norm_indices", "norm_mean", "norm_std"):
        assert np.array_equal(n0[1][k], n1[1][k])
        np.testing.assert_allclose(n0[1][k], one.normalization[1][k], rtol=1e-9)
    assert f0 == pytest.approx(one.info["objective"], rel=1e-7)  # the same optimum
    ds = read_file(path, popts)
    np.testing.assert_allclose(LinearModel(indices=np.arange(len(w0)), weights=w0,
                                           parse=popts, loss="logistic").predict(ds),
                               one.predict(ds), atol=1e-3)


def test_normalize_folds_into_weights_and_round_trips(tmp_path):
    path = str(tmp_path / "c.csv")
    write_census(path, 2000, seed=8)
    opts = {"format": "csv", "categorical": list(CENSUS_CATEGORICAL), "bits": 14,
            "cache_dir": str(tmp_path / "cache"), "bfgs": 15}
    std = train([path], comm=None, **opts)
    off = train([path], comm=None, **opts, normalize="off")
    assert std.info["standardized"] and not off.info["standardized"]
    assert off.normalization is None
    save = str(tmp_path / "m.model")
    std.save(save)
    back = LinearModel.load(save)
    np.testing.assert_array_equal(back.predict(path), std.predict(path))
    assert back.normalization[0] == std.normalization[0]
    with pytest.raises(ConfigError, match="normalize='std' shapes the batch objective"):
        train([path], comm=None, **{**opts, "bfgs": 0}, normalize="std")
    with pytest.raises(ConfigError, match="normalize= must be auto, std or off"):
        train([path], comm=None, **opts, normalize="minmax")


def test_normalize_flag_without_batch_phase_is_refused_naming_the_flag(tmp_path, capfd):
    from terascale.cli import main

    path = str(tmp_path / "c.csv")
    write_census(path, 50, seed=9)
    capfd.readouterr()
    code = main(["linear", "train", path, "--format", "csv", "--normalize", "-f",
                 str(tmp_path / "m"), "--quiet", "--cache-dir", ""])
    assert code == 2 and "--normalize std shapes the batch objective" in capfd.readouterr().err
