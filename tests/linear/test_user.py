"""terascale linear as a user runs it: real data sets (scikit-learn's breast_cancer and
digits) through the CLI and the Python API, the estimators inside scikit-learn's tools,
and the one-line errors a user gets for bad paths and empty data."""

from __future__ import annotations

import numpy as np
import pytest

from terascale import ConfigError, DataError
from terascale.linear import LinearClassifier, LinearModel, LinearRegressor, parse_lines, train

sklearn = pytest.importorskip("sklearn")
from sklearn.datasets import load_breast_cancer  # noqa: E402


@pytest.fixture(scope="module")
def cancer():
    X, y = load_breast_cancer(return_X_y=True)
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))
    return X[idx[:400]], y[idx[:400]], X[idx[400:]], y[idx[400:]]


def _cli(capfd, *args):
    from terascale.cli import main

    capfd.readouterr()
    code = main(["linear", *args])
    out, err = capfd.readouterr()
    return code, out, err


# ---------------------------------------------------------------- scikit-learn protocol


def test_estimators_work_in_cross_val_score_pipeline_and_clone(cancer):
    from sklearn.base import clone, is_classifier, is_regressor
    from sklearn.model_selection import cross_val_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    Xtr, ytr, _, _ = cancer
    clf = LinearClassifier(bits=12, passes=2)
    assert is_classifier(clf) and is_regressor(LinearRegressor())
    c2 = clone(clf)
    assert c2.get_params() == clf.get_params() and repr(c2) == "LinearClassifier(bits=12, passes=2)"
    auc = cross_val_score(make_pipeline(StandardScaler(), clf), Xtr, ytr, cv=3,
                          scoring="roc_auc")
    assert auc.min() > 0.95
    acc = cross_val_score(clf, Xtr, ytr, cv=3)
    assert np.all(np.isfinite(acc))
    r2 = cross_val_score(LinearRegressor(bits=12, passes=2), Xtr, ytr.astype(float), cv=3)
    assert np.all(np.isfinite(r2))
    with pytest.raises(ConfigError, match="no parameter 'alpha'"):
        clf.set_params(alpha=1.0)
    from sklearn.metrics import accuracy_score, r2_score

    w = np.linspace(0.1, 2.0, len(ytr))
    fitted = clone(clf).fit(Xtr, ytr)
    assert fitted.score(Xtr, ytr, sample_weight=w) == pytest.approx(
        accuracy_score(ytr, fitted.predict(Xtr), sample_weight=w))
    reg = LinearRegressor(bits=12, passes=2).fit(Xtr, ytr.astype(float))
    assert reg.score(Xtr, ytr, sample_weight=w) == pytest.approx(
        r2_score(ytr, reg.predict(Xtr), sample_weight=w))
    with pytest.raises(ConfigError, match="X has 4 features"):
        fitted.partial_fit(Xtr[:, :4], ytr)


@pytest.mark.parametrize("labels", [("no", "yes"), (-1, 1), (2, 5), (False, True)])
def test_classifier_any_two_classes(cancer, labels):
    Xtr, ytr, Xte, yte = cancer
    y = np.where(ytr == 1, labels[1], labels[0])
    clf = LinearClassifier(bits=12, passes=2).fit(Xtr, y)
    assert list(clf.classes_) == sorted(labels)
    pred = clf.predict(Xte)
    assert set(pred.tolist()) <= set(labels)
    proba = clf.predict_proba(Xte)
    assert proba.shape == (len(Xte), 2) and np.allclose(proba.sum(axis=1), 1.0)
    # column 1 is classes_[1]'s probability: it agrees with predict
    assert np.array_equal(clf.classes_[(proba[:, 1] > 0.5).astype(int)], pred)
    assert clf.score(Xte, np.where(yte == 1, labels[1], labels[0])) > 0.8


def test_unfitted_wrong_width_and_partial_fit_classes(cancer):
    from sklearn.exceptions import NotFittedError

    Xtr, ytr, Xte, _ = cancer
    with pytest.raises(NotFittedError):
        LinearClassifier().predict(Xte)
    clf = LinearClassifier(bits=12).fit(Xtr, ytr)
    with pytest.raises(ConfigError, match="X has 5 features"):
        clf.predict(Xte[:, :5])
    inc = LinearClassifier(bits=12)
    inc.partial_fit(Xtr[ytr == 0][:20], np.zeros(20), classes=[0, 1])  # one class in batch
    inc.partial_fit(Xtr, ytr)
    assert list(inc.classes_) == [0, 1] and inc.score(Xtr, ytr) > 0.7
    with pytest.raises(ConfigError, match="not one of the classes"):
        inc.partial_fit(Xtr[:3], [0, 1, 7])
    with pytest.raises(DataError, match="Only binary classification is supported"):
        LinearClassifier().fit(Xtr, np.arange(len(ytr)) % 3)
    with pytest.raises(ConfigError, match="exactly two classes, got 1 class"):
        LinearClassifier().fit(Xtr[:5], np.ones(5))
    # partial_fit after fit continues from the fitted weights
    fitted = LinearClassifier(bits=12, passes=3).fit(Xtr, ytr)
    before = fitted.decision_function(Xte)
    fitted.partial_fit(Xtr[:1], ytr[:1])
    assert np.corrcoef(before, fitted.decision_function(Xte))[0, 1] > 0.9


# ---------------------------------------------------------------- CLI errors


def test_cli_bad_paths_are_one_line_errors(tmp_path, capfd):
    data = tmp_path / "d.vw"
    data.write_text("1 |a x y\n-1 |a z\n")
    cases = [
        (["train", str(data), "-f", str(tmp_path / "no" / "m")], "-f", "does not exist"),
        (["train", str(data), "-f", str(tmp_path)], "-f", "is a directory"),
        (["train", str(tmp_path / "nope.vw"), "-f", str(tmp_path / "m"), "-n", "2"],
         "nope.vw", "no such file"),
        (["train", str(tmp_path), "-f", str(tmp_path / "m")], str(tmp_path), "directory"),
    ]
    for args, what, msg in cases:
        code, _, err = _cli(capfd, *args)
        assert code == 2 and what in err and msg in err and "Traceback" not in err, err
        assert len(err.strip().splitlines()) == 1, err
    model = str(tmp_path / "m")
    assert _cli(capfd, "train", str(data), "-f", model, "--quiet")[0] == 0
    code, _, err = _cli(capfd, "predict", str(data), "-i", model, "-p",
                        str(tmp_path / "no" / "p.txt"))
    assert code == 2 and "-p" in err and "Traceback" not in err


def test_cli_worker_errors_are_one_line_not_tracebacks(tmp_path, capfd):
    data = tmp_path / "d.vw"
    data.write_text("1 |a x y\n-1 |a z\n")
    code, _, err = _cli(capfd, "train", str(data), "--format", "libsvm", "-n", "2", "-f",
                        str(tmp_path / "m"), "--cache-dir", "")
    assert code == 2 and "Traceback" not in err
    assert "d.vw, line" in err and "not index:value" in err


def test_empty_training_data_is_an_error(tmp_path, capfd):
    empty = tmp_path / "e.vw"
    empty.write_text("\n  \n")
    code, _, err = _cli(capfd, "train", str(empty), "-f", str(tmp_path / "m"), "--quiet")
    assert code == 2 and "e.vw" in err and "no labelled examples" in err
    assert not (tmp_path / "m").exists()
    header_only = tmp_path / "h.csv"
    header_only.write_text("label,a,b\n")
    code, _, err = _cli(capfd, "train", str(header_only), "--format", "csv", "-f",
                        str(tmp_path / "m"), "--quiet", "--cache-dir", "")
    assert code == 2 and "no labelled examples" in err
    with pytest.raises(DataError, match="no labelled examples"):
        train(parse_lines(["|a x", "|a y"]), comm=None)


def test_model_save_to_bad_path_is_config_error(tmp_path):
    m = train(parse_lines(["1 |a x", "-1 |a y"]), comm=None)
    with pytest.raises(ConfigError, match="cannot write"):
        m.save(str(tmp_path / "no" / "m"))
    with pytest.raises(ConfigError, match="directory"):
        m.save(str(tmp_path))
    m.save(str(tmp_path / "ok"))
    assert LinearModel.load(str(tmp_path / "ok")).loss == "logistic"


# ---------------------------------------------------------------- quality


def test_bfgs_on_unscaled_breast_cancer_is_close_to_sklearn(cancer):
    """Raw breast_cancer columns span 1e-3..4e3; L-BFGS must not stall on that scale
    (it stopped after 3 iterations at AUC 0.972 before the diagonal start)."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    Xtr, ytr, Xte, yte = cancer
    ref = LogisticRegression(max_iter=10000).fit(Xtr, ytr).predict_proba(Xte)[:, 1]
    ds = parse_lines([f"{2 * t - 1} |f " + " ".join(f"c{j}:{v:.6g}" for j, v in enumerate(x))
                      for x, t in zip(Xtr, ytr)], bits=12)
    model = train(ds, comm=None, bfgs=20)
    te = parse_lines(["|f " + " ".join(f"c{j}:{v:.6g}" for j, v in enumerate(x)) for x in Xte],
                     bits=12)
    assert roc_auc_score(yte, model.decision_function(te)) > roc_auc_score(yte, ref) - 0.01
    clf = LinearClassifier(bits=12, bfgs=20).fit(Xtr, ytr)
    assert roc_auc_score(yte, clf.predict_proba(Xte)[:, 1]) > 0.985


# ---------------------------------------------------------------- readers


def test_csv_stray_text_in_numeric_column_changes_only_its_row(tmp_path):
    """A "?" for a missing value used to turn the whole column into categories in that file
    (or that worker's shard) only, so test rows no longer matched the trained features."""
    clean = ["label,radius,grp", "1,12.5,a", "0,7.25,b", "1,3,a"]
    dirty = clean + ["0,?,b"]
    a = parse_lines(clean, format="csv")
    b = parse_lines(dirty, format="csv")
    n = a.indptr[-1]
    assert np.array_equal(a.indptr, b.indptr[:4]) and np.array_equal(a.indices, b.indices[:n])
    assert np.array_equal(a.values, b.values[:n])
    assert b.indptr[4] - b.indptr[3] == 3  # "?" is a category (plus grp and the constant)
    # the same through files, with a header and CRLF line ends
    p = tmp_path / "d.csv"
    p.write_bytes(("\r\n".join(dirty) + "\r\n").encode())
    from terascale.linear import read_file
    from terascale.linear._io._dataset import ParseOptions

    c = read_file(str(p), ParseOptions(format="csv"))
    assert np.array_equal(c.indices, b.indices) and np.array_equal(c.values, b.values)


def test_csv_predict_without_label_column_and_flag_typos(tmp_path, capfd):
    train_p, test_p = tmp_path / "tr.csv", tmp_path / "te.csv"
    train_p.write_text("y,size,kind\n1,10,a\n0,1,b\n1,9,a\n0,2,b\n")
    test_p.write_text("size,kind\n10,a\n1,b\n")  # unlabelled: no y column
    model = str(tmp_path / "m")
    code, _, err = _cli(capfd, "train", str(train_p), "--format", "csv", "--label", "y",
                        "--categorical", "knid", "-f", model, "--cache-dir", "")
    assert code == 2 and "--categorical" in err and "knid" in err
    assert _cli(capfd, "train", str(train_p), "--format", "csv", "--label", "y",
                "--passes", "5", "-f", model, "--cache-dir", "", "--quiet")[0] == 0
    code, out, err = _cli(capfd, "predict", str(test_p), "-i", model)
    assert code == 0, err
    p = [float(v) for v in out.split()]
    assert len(p) == 2 and p[0] > p[1]
    assert LinearModel.load(model).predict(str(test_p)).shape == (2,)
    code, _, err = _cli(capfd, "evaluate", str(test_p), "-i", model)
    assert code == 2 and "no labelled examples" in err


def test_logistic_rejects_labels_it_would_read_as_one_class():
    """LIBSVM's breast-cancer file labels its classes 2 and 4: with ``label > 0`` as the
    positive class that trained a constant model silently."""
    lines = ["2 1:0.5 2:1", "4 1:2 3:1", "2 2:1", "4 3:2"]
    with pytest.raises(DataError, match="needs labels -1/\\+1 or 0/1, the data has 2, 4"):
        train(parse_lines(lines, format="libsvm"), comm=None)
    assert train(parse_lines(lines, format="libsvm"), comm=None, loss="squared").loss == "squared"
    for labels in (("0", "1"), ("-1", "+1")):
        ok = [f"{labels[i % 2]} {i % 3 + 1}:1" for i in range(6)]
        train(parse_lines(ok, format="libsvm"), comm=None)


def test_broken_model_files_are_clear_errors(tmp_path, capfd):
    import json

    data = tmp_path / "d.vw"
    data.write_text("1 |a x\n-1 |a y\n")
    good = str(tmp_path / "good")
    train(str(data), comm=None, cache_dir="").save(good)
    raw = open(good, "rb").read()
    hdr = {"format": "terascale-linear", "version": 1, "loss": "weird",
           "parse": {"format": "vw", "bits": 18, "quadratic": [], "constant": True,
                     "label": "label", "categorical": [], "ignore": []}}
    files = {"empty": b"", "truncated": raw[:200], "random": bytes(range(256)) * 4}
    for name, blob in files.items():
        (tmp_path / name).write_bytes(blob)
    np.save(tmp_path / "arr.npy", np.arange(3))
    np.savez(tmp_path / "list.npz", header=np.frombuffer(b"[1, 2]", np.uint8))
    np.savez(tmp_path / "loss.npz", indices=np.zeros(1, np.uint32),
             weights=np.ones(1, np.float32),
             header=np.frombuffer(json.dumps(hdr).encode(), np.uint8))
    for name in [*files, "arr.npy", "list.npz", "loss.npz", "."]:
        path = str(tmp_path / name)
        with pytest.raises(DataError, match="model"):
            LinearModel.load(path)
        code, _, err = _cli(capfd, "predict", str(data), "-i", path)
        assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_nan_and_infinite_values_are_errors_not_nan_models(cancer, tmp_path):
    """One NaN in X (or "inf"/"1e400" in a file) made every weight NaN: all predictions
    NaN and no error."""
    Xtr, ytr, _, _ = cancer
    X = Xtr.copy()
    X[5, 3] = np.nan
    with pytest.raises(DataError, match="row 5, column 3"):
        LinearClassifier().fit(X, ytr)
    with pytest.raises(DataError, match="y has a NaN"):
        LinearRegressor().fit(Xtr, np.where(ytr == 1, np.nan, 0.0))
    for line, fmt in (("1 |a x:1e39", "vw"), ("1e400 |a x", "vw"), ("1 3:1e400", "libsvm")):
        with pytest.raises(DataError, match="line 1"):
            parse_lines([line], format=fmt)
    p = tmp_path / "inf.csv"
    p.write_text("label,a,b\n1,inf,2\n0,1,3\n1,2,1e400\n0,3,1\n")
    from terascale.linear import read_file
    from terascale.linear._io._dataset import ParseOptions

    with pytest.raises(DataError, match="inf.csv, line 2: column 'a'"):
        read_file(str(p), ParseOptions(format="csv"))
    ds = read_file(str(p), ParseOptions(format="csv", skip_bad=True))
    assert len(ds) == 2 and ds.skipped == 2 and np.all(np.isfinite(ds.values))


@pytest.mark.parametrize("bad", [{"passes": 2.5}, {"bfgs": True}, {"bfgs": 3, "memory": 0}])
def test_train_option_types_are_config_errors(bad):
    with pytest.raises(ConfigError, match=f"^{next(reversed(bad))}= must be"):
        train(parse_lines(["1 |a x", "0 |a y"]), comm=None, **bad)


def test_predict_refuses_data_parsed_unlike_the_model():
    lines = ["1 |a x |b y", "0 |a z |b w"]
    m = train(parse_lines(lines, quadratic=["ab"]), comm=None)
    assert m.predict(parse_lines(lines, quadratic=["ab"])).shape == (2,)
    with pytest.raises(ConfigError, match="quadratic"):
        m.predict(parse_lines(lines))  # without -q ab the crosses would silently be missing
    with pytest.raises(ConfigError, match="bits"):
        m.evaluate(parse_lines(lines, bits=12, quadratic=["ab"]))


def test_csv_model_on_a_foreign_file_is_an_error(tmp_path, capfd):
    train_p, vw = tmp_path / "tr.csv", tmp_path / "d.vw"
    train_p.write_text("y,size\n1,10\n0,1\n1,9\n0,2\n")
    vw.write_text("1 |a x\n-1 |a y\n")
    model = str(tmp_path / "m")
    assert _cli(capfd, "train", str(train_p), "--format", "csv", "--label", "y", "-f", model,
                "--cache-dir", "", "--quiet")[0] == 0
    code, out, err = _cli(capfd, "predict", str(vw), "-i", model)
    assert code == 2 and "d.vw" in err and "right file" in err and not out


def test_unusable_cache_dir_is_a_config_error(tmp_path, capfd):
    data = tmp_path / "d.vw"
    data.write_text("1 |a x\n-1 |a y\n")
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, _, err = _cli(capfd, "train", str(data), "-f", str(tmp_path / "m"), "--quiet",
                        "--cache-dir", str(blocker / "cache"))
    assert code == 2 and "--cache-dir" in err and "Traceback" not in err


def test_evaluate_json_is_strict_json(tmp_path, capfd):
    import json

    data, pos = tmp_path / "d.vw", tmp_path / "pos.vw"
    data.write_text("1 |a x\n-1 |a y\n")
    pos.write_text("1 |a x\n1 |a y\n")  # one class: AUC is undefined
    model = str(tmp_path / "m")
    assert _cli(capfd, "train", str(data), "-f", model, "--quiet", "--cache-dir", "")[0] == 0
    code, out, _ = _cli(capfd, "evaluate", str(pos), "-i", model, "--json")
    m = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert code == 0 and m["auc"] is None and m["examples"] == 2


def test_csv_shards_do_not_cut_quoted_line_breaks(tmp_path):
    from terascale.linear import read_file
    from terascale.linear._io._dataset import ParseOptions

    rows = ["label,a,note"] + [f'{i % 2},{i},"first line\nsecond, with ""quotes"""'
                               if i % 3 else f"{i % 2},{i},plain" for i in range(60)]
    p = tmp_path / "q.csv"
    p.write_text("\n".join(rows) + "\n")
    opts = ParseOptions(format="csv")
    whole = read_file(str(p), opts)
    assert len(whole) == 60
    for n in (2, 3, 4, 7):
        parts = [read_file(str(p), opts, shard=(k, n)) for k in range(n)]
        assert sum(len(d) for d in parts) == 60
        assert np.array_equal(np.concatenate([d.values for d in parts]), whole.values)
