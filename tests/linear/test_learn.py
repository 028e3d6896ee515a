"""Learners: the online pass equals VW's, L-BFGS/CG reach scipy's optimum, averaging,
metrics, model round-trip, the scikit-learn estimators."""

from __future__ import annotations

import json

import numpy as np
import pytest
from _linear_data import vw_lines

from terascale import ConfigError, DataError
from terascale.linear import (
    LinearClassifier,
    LinearModel,
    LinearRegressor,
    auc,
    auprc,
    evaluate_scores,
    parse_lines,
    train,
)
from terascale.linear._combine._average import weighted_average
from terascale.testing import run_workers


@pytest.fixture(scope="module")
def vw_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("lin") / "train.vw"
    p.write_text("\n".join(vw_lines(3000, seed=1, weights=True)) + "\n")
    return str(p)


@pytest.mark.parametrize("loss,extra", [("logistic", {}), ("squared", {}), ("hinge", {}),
                                        ("logistic", {"l1": 1e-4, "l2": 1e-4}),
                                        ("logistic", {"power_t": 0.3, "learning_rate": 0.8})])
def test_online_pass_equals_vowpalwabbit(vw_file, tmp_path, loss, extra):
    pyvw = pytest.importorskip("vowpalwabbit.pyvw")
    flags = {"l1": "--l1", "l2": "--l2", "power_t": "--power_t",
             "learning_rate": "--learning_rate"}
    args = " ".join(f"{flags[k]} {v}" for k, v in extra.items())
    mpath = str(tmp_path / "vw.model")
    vw = pyvw.Workspace(f"--quiet -d {vw_file} --loss_function {loss} -b 18 -f {mpath} {args}")
    vw.finish()
    ppath = str(tmp_path / "vw.pred")
    vw = pyvw.Workspace(f"--quiet -d {vw_file} -t -i {mpath} -p {ppath}")
    vw.finish()
    theirs = np.loadtxt(ppath, usecols=0)
    model = train([vw_file], bits=18, loss=loss, holdout=0, cache_dir="", **extra)
    ours = model.decision_function(vw_file)
    if loss != "logistic":  # VW clips these predictions to the labels' range
        ours = np.clip(ours, -1, 1)
    np.testing.assert_allclose(ours, theirs, atol=2e-3, rtol=2e-3)


def _objective(ds, lam):
    import scipy.sparse as sp

    X = sp.csr_matrix((ds.values, ds.indices, ds.indptr), shape=(len(ds), 1 << ds.bits))
    y = np.where(ds.labels > 0, 1.0, -1.0)

    def f(w):
        z = X @ w
        m = -y * z
        loss = np.sum(np.logaddexp(0, m)) + 0.5 * lam * w @ w
        g = X.T @ (-y / (1 + np.exp(-m))) + lam * w
        return loss, g
    return f


@pytest.mark.parametrize("method", ["bfgs", "cg"])
def test_batch_reaches_scipy_optimum(method):
    from scipy.optimize import minimize

    ds = parse_lines(vw_lines(1500, seed=3), bits=10)
    lam = 2.0
    f = _objective(ds, lam)
    ref = minimize(f, np.zeros(1 << 10), jac=True, method="L-BFGS-B",
                   options={"gtol": 1e-10, "ftol": 1e-15, "maxiter": 5000}).x
    model = train(ds, passes=1, l2=lam, holdout=0, tol=1e-13, **{method: 300})
    w = model.dense()
    assert f(w)[0] == pytest.approx(f(ref)[0], rel=1e-7)
    np.testing.assert_allclose(w, ref, atol=2e-4)
    assert model.info["batch_iterations"] > 3


def test_holdout_stops_batch_phase():
    ds = parse_lines(vw_lines(2000, seed=4), bits=16, quadratic=["aa"])
    m = train(ds, bfgs=60, l2=1e-3, holdout=0.2, tol=0)
    assert m.info["batch_stopped"] in ("holdout", "line search")
    assert m.info["batch_passes"] < 60


def test_averaging_on_known_vectors():
    from terascale.linear._combine._average import average_weights
    from terascale.linear._online._update import new_state

    ws = np.array([[1.0, 2.0, 0.0, 4.0], [3.0, 4.0, 5.0, 8.0]])
    g2s = np.array([[1.0, 0.0, 0.0, 1.0], [3.0, 1.0, 0.0, 1.0]])
    expect_w = np.array([2.5, 4.0, 0.0, 6.0])
    np.testing.assert_array_equal(weighted_average(ws, g2s), expect_w)

    def fn(comm, how):
        w, g2 = ws[comm.rank].copy(), g2s[comm.rank].copy()
        nrm = np.array([1.0, 2.0, 3.0, 4.0]) * (comm.rank + 1)
        state = new_state()
        state[:2] = [10.0, 20.0]
        average_weights(comm, w, g2, nrm, state, how)
        return w, g2, nrm, state, (_mix(comm) if how == "weighted" else None)

    for how, ew in (("weighted", expect_w), ("uniform", ws.mean(axis=0))):
        for w, g2, nrm, state, mixed in run_workers(fn, 2, args=(how,)):
            np.testing.assert_array_equal(w, ew)
            np.testing.assert_array_equal(g2, g2s.sum(axis=0))
            np.testing.assert_array_equal(nrm, [2.0, 4.0, 6.0, 8.0])
            assert list(state[:2]) == [20.0, 40.0]
            if mixed is not None:
                (w, g2, nrm, state), flags = mixed
                # a feature only worker 1 changed keeps its change; one with a long history
                # gets the sum of the changes; a new one that both moved alike moves as one
                # learner would at the summed adaptive sum (steps ~ sqrt(G): 2 * sqrt(2))
                assert w[0] == 3.0 and abs(w[1] - 2.0) < 1e-6
                assert abs(w[2] - 2 * np.sqrt(2.0)) < 1e-12
                np.testing.assert_array_equal(g2, [9.0, 1e6 + 2, 8.0])
                np.testing.assert_array_equal(nrm, [1.0, 1.0, 4.0])
                f = np.float32
                assert list(state[:2]) == [13.0, 14.0] and state[6] == f(np.sqrt(f(13) / f(14)))
                assert flags == [False, False, True]  # True once every worker is done


def _mix(comm):
    from terascale.linear._combine._mixing import Mixer
    from terascale.linear._online._onlinepass import Weights
    from terascale.linear._online._update import new_state

    st = new_state()
    st[:2] = [1.0, 2.0]
    ws = Weights(np.array([0.0, 1.0, 0.0]), np.array([0.0, 1e6, 0.0]), np.ones(3), st)
    mixer = Mixer(comm, 10, 0.5)
    mixer.start(ws)
    mixer.seen(np.array([0, 1, 2]) if comm.rank == 0 else np.array([0, 2, 1]))
    ws.w[:] = [0.0, 1.5, 2.0] if comm.rank == 0 else [3.0, 1.5, 2.0]
    ws.g2[:] = [0.0, 1e6 + 1, 4.0] if comm.rank == 0 else [9.0, 1e6 + 1, 4.0]
    # (normalizers that grow rescale the weights: test_a_mix_sums_the_changes_in_...)
    ws.nrm[:] = [1.0, 1.0, 4.0]
    st[:2] += 6.0
    flags = [mixer.mix(ws, False), mixer.mix(ws, comm.rank == 0), mixer.mix(ws, True)]
    return (ws.w, ws.g2, ws.nrm, ws.state), flags


def _sparse_and_dense(comm, sparse):
    """Three mixes of 40 columns, each worker learning from its own random few of them
    (some columns learned by no worker, some by one, some by several)."""
    from terascale.linear._combine._mixing import Mixer
    from terascale.linear._online._onlinepass import Weights
    from terascale.linear._online._update import new_state

    rng = np.random.default_rng(7)  # the same start on every rank
    st = new_state()
    st[:2] = [1.0, 2.0]
    ws = Weights(rng.normal(size=40), rng.uniform(0, 5, 40), rng.uniform(1, 2, 40), st)
    mixer = Mixer(comm, 10, 0.5, sparse=sparse)
    mixer.start(ws)
    mine = np.random.default_rng(100 + comm.rank)
    for _ in range(3):
        cols = mine.choice(40, 6, replace=False)
        mixer.seen(cols)
        ws.w[cols] += mine.normal(size=6)
        ws.g2[cols] += mine.uniform(0, 1, 6)
        ws.nrm[cols[:2]] *= 1.5
        st[:2] += 1.0
        mixer.mix(ws, False)
    return ws.w.copy(), ws.g2.copy(), ws.nrm.copy(), ws.state.copy()


@pytest.mark.parametrize("n", [2, 3])
def test_a_sparse_mix_equals_the_dense_one(n):
    """A mix over the columns some worker learned from (the default) gives what the mix
    over every column gives: bitwise with 2 workers (a sum of two is one rounding in any
    order), to rounding with 3 (the allreduce may add them in another order)."""
    out = {s: run_workers(_sparse_and_dense, n, args=(s,)) for s in (True, False)}
    for r in range(n):
        for a, b in zip(out[True][r], out[False][r]):
            if n == 2:
                np.testing.assert_array_equal(a, b)
            else:
                np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
        for a, b in zip(out[True][r], out[True][0]):
            np.testing.assert_array_equal(a, b)  # every rank the same


def _one_mix(comm, cols, dw, dg, grow):
    """One mix of 4 columns from a common start (w 1, G 100, normalizer 1): rank r adds
    dw[r], dg[r] to columns cols[r] and, where grow[r] > 1, meets a value that large in
    column 0 first (its weight rescaled as the learner does)."""
    from terascale.linear._combine._mixing import Mixer
    from terascale.linear._online._onlinepass import Weights
    from terascale.linear._online._update import new_state

    st = new_state()
    st[:2] = [10.0, 30.0]
    ws = Weights(np.ones(4), np.full(4, 100.0), np.ones(4), st)
    mixer = Mixer(comm, 10, 0.5)
    mixer.start(ws)
    r = comm.rank
    if grow[r] > 1:
        ws.w[0] /= grow[r]  # sqrt rates: old / new
        ws.nrm[0] = grow[r]
    c = np.asarray(cols[r], np.int64)
    mixer.seen(c)
    ws.w[c] += dw[r]
    ws.g2[c] += dg[r]
    st[:2] += [5.0, 15.0]
    before = ws.w.copy()
    mixer.mix(ws, False)
    return before, ws.w.copy(), ws.nrm.copy()


def test_a_mix_sums_the_changes_in_the_larger_normalizers_scale():
    """Worker 0 met x = 4 in column 0 (normalizer 1 -> 4: its weight, 1 at the start, is
    0.25 before it learned +0.1); worker 1 learned +0.2 in the old scale. One learner would
    hold the start as 0.25 and worker 1's change as 0.05: the mix is 0.25 + s (0.1 + 0.05),
    s the advance ratio of the rates, on both ranks, normalizer 4."""
    out = run_workers(_one_mix, 2, args=([[0], [0]], [0.1, 0.2], [1.0, 3.0], [4.0, 1.0]))
    s = (np.sqrt(104.0) - 10.0) / ((np.sqrt(101.0) - 10.0) + (np.sqrt(103.0) - 10.0))
    for _, w, nrm in out:
        assert w[0] == pytest.approx(0.25 + s * (0.1 + 0.2 / 4.0), rel=1e-12)
        assert nrm[0] == 4.0 and np.all(w[1:] == 1.0)
    np.testing.assert_array_equal(out[0][1], out[1][1])


def test_a_feature_one_worker_learned_keeps_that_workers_change():
    """Columns 1 and 2, each learned by one worker, keep that worker's weight exactly; column
    0, learned by both from a long history, gets about the sum of their changes."""
    out = run_workers(_one_mix, 2, args=([[0, 1], [0, 2]], [0.3, 0.2], [50.0, 40.0],
                                         [1.0, 1.0]))
    (b0, w0, _), (b1, w1, _) = out
    assert w0[1] == b0[1] and w0[2] == b1[2] and w0[3] == 1.0
    np.testing.assert_array_equal(w0, w1)
    s = (np.sqrt(190.0) - 10.0) / ((np.sqrt(150.0) - 10.0) + (np.sqrt(140.0) - 10.0))
    assert w0[0] == pytest.approx(1.0 + s * 0.5, rel=1e-12) and 0.8 < s < 1.0


def test_metrics_equal_sklearn():
    from sklearn.metrics import average_precision_score, log_loss, roc_auc_score

    rng = np.random.default_rng(0)
    y = rng.choice([-1.0, 1.0], size=500)
    s = np.round(rng.normal(size=500) + 0.5 * y, 1)  # rounding makes ties
    assert auc(y, s) == pytest.approx(roc_auc_score(y > 0, s), abs=1e-12)
    assert auprc(y, s) == pytest.approx(average_precision_score(y > 0, s), abs=1e-12)
    m = evaluate_scores(y, s)
    assert m["logloss"] == pytest.approx(log_loss(y > 0, 1 / (1 + np.exp(-s))), rel=1e-9)
    assert m["accuracy"] == pytest.approx(np.mean((s > 0) == (y > 0)))
    assert m["examples"] == 500


def test_model_round_trip_and_errors(tmp_path):
    ds = parse_lines(vw_lines(500, seed=5), bits=16, quadratic=["ab"])
    m = train(ds, bits=16, quadratic=["ab"], bfgs=5)
    path = str(tmp_path / "m.model")
    m.save(path)
    m2 = LinearModel.load(path)
    assert m2.parse == m.parse and m2.loss == "logistic" and m2.parse.quadratic == ("ab",)
    np.testing.assert_array_equal(m2.predict(ds), m.predict(ds))
    assert [p.name for p in tmp_path.iterdir()] == ["m.model"]  # no temporary left behind
    with pytest.raises(ConfigError, match="hashed with bits=18 but the model was trained with bits=16"):
        m2.predict(parse_lines(vw_lines(5), bits=18))
    (tmp_path / "junk").write_text("not a model")
    with pytest.raises(DataError, match="not a terascale linear model"):
        LinearModel.load(str(tmp_path / "junk"))
    with np.load(path) as z:
        arrays = dict(z)
    header = json.loads(bytes(arrays["header"]).decode())
    header["version"] = 99
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    np.savez(tmp_path / "new.npz", **arrays)
    with pytest.raises(ConfigError, match="newer"):
        LinearModel.load(str(tmp_path / "new.npz"))


def test_sklearn_estimators():
    from sklearn.datasets import load_breast_cancer, load_diabetes
    from sklearn.preprocessing import StandardScaler

    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    clf = LinearClassifier(bits=12, passes=3, bfgs=20).fit(X, y)
    assert clf.score(X, y) > 0.95
    proba = clf.predict_proba(X)
    assert proba.shape == (len(y), 2) and np.allclose(proba.sum(axis=1), 1)
    assert set(clf.predict(X)) <= {0, 1}
    inc = LinearClassifier(bits=12)
    for i in range(0, len(y), 100):
        inc.partial_fit(X[i:i + 100], y[i:i + 100])
    assert inc.score(X, y) > 0.9
    Xd, yd = load_diabetes(return_X_y=True)
    reg = LinearRegressor(bits=12, passes=1, bfgs=50, l2=1e-3).fit(
        StandardScaler().fit_transform(Xd), (yd - yd.mean()) / yd.std())
    assert reg.score(StandardScaler().fit_transform(Xd), (yd - yd.mean()) / yd.std()) > 0.45
    with pytest.raises(ConfigError, match="unknown option"):
        train(parse_lines(["1 |a x"]), bogus=1)


def test_examples_without_features_and_without_labels():
    ds = parse_lines(["1 |a x", "-1 |a", "|a y", "1 |a x y"], constant=False)
    m = train(ds, passes=2, holdout=0)
    assert np.all(np.isfinite(m.weights)) and len(m.weights) == 2
    assert np.isfinite(m.decision_function(ds)).all()
