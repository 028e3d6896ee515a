"""What a Vowpal Wabbit user types works in `terascale linear train/predict`, checked
against the vowpalwabbit package itself: -p during training, -i warm starts, -t, --binary,
--link logistic, --readable_model / --invert_hash, VW's spellings of flags; and VW options
terascale does not implement are refused with a message saying what to use instead."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from _linear_data import vw_lines

pytest.importorskip("vowpalwabbit")

LINES = vw_lines(300, seed=11, weights=True)


def _vw(*args: str, cwd) -> None:
    r = subprocess.run([sys.executable, "-m", "vowpalwabbit", "--quiet", *args], cwd=cwd,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


def _ts(capfd, *args: str) -> tuple[int, str, str]:
    from terascale.cli import main

    capfd.readouterr()
    code = main(["linear", *args])
    out, err = capfd.readouterr()
    return code, out, err


def _preds(path) -> tuple[np.ndarray, list[str]]:
    rows = [ln.split(" ", 1) for ln in path.read_text().splitlines()]
    return np.array([float(r[0]) for r in rows]), [r[1] if len(r) > 1 else "" for r in rows]


@pytest.fixture()
def data(tmp_path):
    a, b = tmp_path / "a.vw", tmp_path / "b.vw"
    a.write_text("\n".join(LINES[:200] + ["|a c1 c2"]) + "\n")  # one unlabelled example
    b.write_text("\n".join(LINES[200:]) + "\n")
    return tmp_path


def _same(tmp, vw_file, ts_file, rtol=1e-4, atol=1e-5):
    pv, tv = _preds(tmp / vw_file)
    pt, tt = _preds(tmp / ts_file)
    assert tv == tt and len(pv) == len(pt)  # same lines, tags, order
    np.testing.assert_allclose(pt, pv, rtol=rtol, atol=atol)


@pytest.mark.parametrize("flags", [
    ["--loss_function", "squared"],
    ["--loss_function", "logistic", "--link", "logistic"],
    ["--loss_function", "logistic", "--binary"],
    ["--loss_function", "squared", "--learning_rate", "0.3", "--power_t", "0.4",
     "--bit_precision", "20", "-q", "ab", "--holdout_off", "--passes", "2", "-c", "-k"],
])
def test_progressive_predictions_warm_start_and_test_only_equal_vw(data, capfd, flags):
    d = str(data)
    cache = ["--cache-dir", str(data / "cache")]
    _vw("-d", "a.vw", *flags, "-p", "vw_a.p", "-f", "vw_a.m", cwd=d)
    code, _, err = _ts(capfd, "train", "-d", str(data / "a.vw"), *flags, "-p",
                       str(data / "ts_a.p"), "-f", str(data / "ts_a.m"), "--quiet", *cache)
    assert code == 0, err
    _same(data, "vw_a.p", "ts_a.p")
    # -i: continue training on b (VW 9 keeps the learner's state in the model; so do we)
    keep = flags
    _vw("-d", "b.vw", "-i", "vw_a.m", *keep, "-p", "vw_b.p", "-f", "vw_b.m", cwd=d)
    code, _, err = _ts(capfd, "train", str(data / "b.vw"), "-i", str(data / "ts_a.m"), *keep,
                       "-p", str(data / "ts_b.p"), "-f", str(data / "ts_b.m"), *cache)
    assert code == 0, err
    _same(data, "vw_b.p", "ts_b.p")
    # -t: predict with the model, learn nothing
    out = (["--binary"] if "--binary" in keep else []) + \
        (["--link", "logistic"] if "--link" in keep else [])
    _vw("-d", "a.vw", "-i", "vw_b.m", "-t", *out, "-p", "vw_t.p", cwd=d)
    code, _, err = _ts(capfd, "train", "-d", str(data / "a.vw"), "-i", str(data / "ts_b.m"),
                       "-t", *out, "-p", str(data / "ts_t.p"))
    assert code == 0 and "average loss" in err, err
    _same(data, "vw_t.p", "ts_t.p")
    code, _, err = _ts(capfd, "predict", "-d", str(data / "a.vw"), "-i",
                       str(data / "ts_b.m"), "-t", *out, "-p", str(data / "ts_pr.p"),
                       *([] if out else ["--link", "identity"]))
    assert code == 0, err
    _same(data, "vw_t.p", "ts_pr.p")


def test_binary_reports_zero_one_loss_as_vw(data, capfd):
    r = subprocess.run([sys.executable, "-m", "vowpalwabbit", "-d", "a.vw", "--binary",
                        "--loss_function", "logistic"], cwd=data, capture_output=True,
                       text=True, timeout=120)
    vw_loss = float(r.stderr.split("average loss = ")[1].split()[0])
    code, _, err = _ts(capfd, "train", str(data / "a.vw"), "--binary")
    assert code == 0, err
    ours = float(err.split("pass 1: average loss ")[1].split()[0])
    assert ours == pytest.approx(vw_loss, abs=1e-6)
    assert 0 < ours < 0.5  # a 0/1 loss, not a logloss


@pytest.mark.parametrize("flags", [["-q", "ab"], ["-q", "a:", "--cubic", "abb"]])
def test_readable_model_and_invert_hash_in_vw_layout(data, capfd, flags):
    d = str(data)
    flags = [*flags, "--loss_function", "logistic"]
    _vw("-d", "a.vw", *flags, "--readable_model", "vw.r", "--invert_hash", "vw.ih", cwd=d)
    code, _, err = _ts(capfd, "train", str(data / "a.vw"), *flags, "--quiet",
                       "--readable_model", str(data / "ts.r"), "--invert_hash",
                       str(data / "ts.ih"))
    assert code == 0, err

    def parse(path, named):
        head, weights = [], {}
        for ln in path.read_text().splitlines():
            parts = ln.split(":")
            if len(parts) == (3 if named else 2) and parts[-2].isdigit():
                key = (parts[0], int(parts[1])) if named else int(parts[0])
                weights[key] = [float(v) for v in parts[-1].split()]
            else:
                head.append(ln)
        return head, weights

    for name, named in (("r", False), ("ih", True)):
        vh, vw_w = parse(data / f"vw.{name}", named)
        th, ts_w = parse(data / f"ts.{name}", named)
        # the same header up to the learner's state, VW's checksum of it too
        cut = vh.index(":1") + 1
        assert th[:cut] == vh[:cut]
        assert set(ts_w) == set(vw_w)  # same indices (and, inverted, the same names)
        for k, v in vw_w.items():  # weight, sum of squared gradients, norm
            np.testing.assert_allclose(ts_w[k], v, rtol=2e-3, atol=1e-5)


def test_vw_flags_terascale_does_not_have_are_refused_clearly(data, capfd):
    f = str(data / "a.vw")
    code, _, err = _ts(capfd, "train", f, "--ect", "3")
    assert code == 2 and "--ect (a Vowpal Wabbit option) is not supported" in err
    assert "--oaa K" in err
    code, _, err = _ts(capfd, "train", f, "--nn", "10")
    assert code == 2 and "terascale.torch" in err
    code, _, err = _ts(capfd, "train", f, "--frobnicate")
    assert code == 2 and "unknown option --frobnicate" in err and "--loss_function" in err
    code, _, err = _ts(capfd, "train", f, "-p", str(data / "p"), "-n", "2")
    assert code == 2 and "needs -n 1" in err
    code, _, err = _ts(capfd, "train", f, "--bfgs")
    assert code == 2 and "needs --passes >= 2" in err
    code, _, err = _ts(capfd, "train", f, "--link", "probit")
    assert code == 2 and "--link probit" in err and "glf1" in err
    code, _, err = _ts(capfd, "train", f, "-t")
    assert code == 2 and "give -i MODEL" in err
    _vw("-d", "a.vw", "-f", "vw.model", cwd=str(data))
    code, _, err = _ts(capfd, "predict", f, "-i", str(data / "vw.model"))
    assert code == 0, err  # a VW model is read (tests/linear/test_vw_dropin.py)
    (data / "cb.vw").write_text("1:2:0.5 | a b\n2:1:0.5 | a c\n")
    _vw("-d", "cb.vw", "--cb", "2", "-f", "cb.model", cwd=str(data))
    code, _, err = _ts(capfd, "predict", f, "-i", str(data / "cb.model"))
    assert code == 2 and "a Vowpal Wabbit model of --cb" in err
    code, _, err = _ts(capfd, "train", "--loss_function", "pinball", f)
    assert code == 2 and "--loss/--loss_function must be one of" in err
    code, _, err = _ts(capfd, "train", "--loss_function", "expectile", f)
    assert code == 2 and "needs --expectile_q in (0, 0.5]" in err


def test_bare_bfgs_takes_its_passes_from_passes_as_vw(data, capfd):
    m = str(data / "m")
    code, _, err = _ts(capfd, "train", "--bfgs", str(data / "a.vw"), "--passes", "4",
                       "-f", m, "--holdout_off", "--loss_function", "logistic")
    assert code == 0, err
    assert "pass 1: average loss" not in err  # no online pass, as in VW
    assert "L-BFGS" in err
    from terascale.linear import LinearModel

    info = LinearModel.load(m).info
    assert info["batch_passes"] <= 4 and "online_loss" not in info


def test_test_only_writes_predictions_only_with_p(data, capfd):
    m = str(data / "m")
    assert _ts(capfd, "train", str(data / "a.vw"), "-f", m, "--quiet")[0] == 0
    code, out, err = _ts(capfd, "train", "-d", str(data / "b.vw"), "-i", m, "-t")
    assert code == 0 and out == "" and "test only: 100 examples, average loss" in err
    code, out, _ = _ts(capfd, "predict", str(data / "b.vw"), "-i", m)  # predict: stdout
    assert code == 0 and len(out.splitlines()) == 100


def test_outputs_to_standard_output_and_devices_are_never_replaced(data, capfd):
    import os
    import stat

    code, out, _ = _ts(capfd, "train", str(data / "b.vw"), "-p", "-", "--quiet")
    assert code == 0 and len(out.splitlines()) == 100  # VW's `-p /dev/stdout`
    code, _, err = _ts(capfd, "train", str(data / "b.vw"), "-f", os.devnull)
    assert code == 2 and "not a regular file" in err
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)  # still the device
    from terascale import ConfigError
    from terascale.linear import LinearModel

    model = LinearModel.load(str(data / "m")) if (data / "m").exists() else None
    if model is None:
        assert _ts(capfd, "train", str(data / "b.vw"), "-f", str(data / "m"), "--quiet")[0] == 0
        model = LinearModel.load(str(data / "m"))
    with pytest.raises(ConfigError, match="not a regular file"):
        model.save(os.devnull)
    os.symlink("m", data / "latest")
    model.save(str(data / "latest"))  # through the link: the link stays a link
    assert os.path.islink(data / "latest") and LinearModel.load(str(data / "latest"))


def test_a_vw_run_sees_no_other_runs_feature_generation(tmp_path, monkeypatch):
    """``terascale vw``'s feature generation (--ngram, --hash_seed) goes with the run's
    options: a run that starts and ends in the same process while another is about to
    write its model changes neither model (each equals the model its run writes alone)."""
    import threading

    from terascale.cli import main
    from terascale.linear._vw import _vwmodel

    data = tmp_path / "d.vw"
    data.write_text("\n".join(LINES) + "\n")
    runs = {"gen": ["--ngram", "2", "--hash_seed", "7"], "plain": []}

    def line(name: str, where) -> list[str]:
        return ["vw", "-d", str(data), *runs[name], "-f", str(where / name), "--quiet"]

    alone = tmp_path / "alone"
    alone.mkdir()
    for name in runs:
        r = subprocess.run([sys.executable, "-m", "terascale", *line(name, alone)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
    together = tmp_path / "together"
    together.mkdir()
    go, done = threading.Event(), threading.Event()
    write = _vwmodel.write_vw_model

    def write_after_the_other_run(model, path, **kw):
        if path.endswith("gen"):  # the other run starts and ends here
            go.set()
            assert done.wait(300)
        write(model, path, **kw)

    monkeypatch.setattr(_vwmodel, "write_vw_model", write_after_the_other_run)
    codes = {}

    def plain() -> None:
        assert go.wait(300)
        try:
            codes["plain"] = main(line("plain", together))
        finally:
            done.set()

    t = threading.Thread(target=plain)
    t.start()
    codes["gen"] = main(line("gen", together))
    t.join(300)
    assert codes == {"gen": 0, "plain": 0}
    for name in runs:
        assert (together / name).read_bytes() == (alone / name).read_bytes(), name
