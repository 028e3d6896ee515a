"""terascale linear on inputs and workflows a new user tries first: the files it writes
(models, predictions, readable models) and what they look like on disk."""

from __future__ import annotations

import os
import stat

from terascale.cli import main


def _write_vw(path, n=200):
    with open(path, "w") as f:
        for i in range(n):
            y = 1 if (i * 7919) % 3 else -1
            f.write(f"{y} |a x{i % 13}:{(i % 5) * 0.3:.2f} |b t{i % 7}\n")


def _train(capfd, *args):
    capfd.readouterr()
    assert main(["linear", "train", "--quiet", *args]) == 0
    capfd.readouterr()


def test_model_files_are_bitwise_identical_across_runs(tmp_path, capfd):
    # the model once stored its wall-clock timings: two identical runs wrote different bytes
    data = tmp_path / "d.vw"
    _write_vw(data)
    for name in ("a", "b"):
        _train(capfd, str(data), "-n", "2", "--bfgs", "3", "-f", str(tmp_path / name))
    assert (tmp_path / "a").read_bytes() == (tmp_path / "b").read_bytes()


def test_written_files_follow_the_umask_not_mkstemps_0600(tmp_path, capfd):
    data = tmp_path / "d.vw"
    _write_vw(data)
    old = os.umask(0o022)
    try:
        _train(capfd, str(data), "-f", str(tmp_path / "m"), "-p", str(tmp_path / "p"),
               "--readable_model", str(tmp_path / "r"))
    finally:
        os.umask(old)
    for name in ("m", "p", "r"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o644, name


def test_a_killed_writers_temporary_cache_entry_is_removed_by_the_next_run(tmp_path, capfd):
    # SIGTERM/SIGKILL mid-parse run no cleanup: the writer's .tmp- directory stayed forever
    import socket
    import subprocess
    import sys

    data, cache = tmp_path / "d.vw", tmp_path / "cache"
    _write_vw(data)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    host = socket.gethostname()
    orphan = cache / f".tmp-{host}-{dead.pid}-abc"
    live = cache / f".tmp-{host}-{os.getpid()}-xyz"  # a live writer's: left alone
    for d in (orphan, live):
        d.mkdir(parents=True)
        (d / "data.bin").write_bytes(b"")
    _train(capfd, str(data), "-c", "--cache-dir", str(cache), "-f", str(tmp_path / "m"))
    assert not orphan.exists() and live.exists()
    assert [n for n in os.listdir(cache) if not n.startswith(".tmp-")]  # the new entry


def _cli_proc(*args, stdout=None):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "terascale.cli", "linear", *args],
                          stdout=stdout if stdout is not None else subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, timeout=300)


def test_a_full_disk_for_predictions_is_one_line_naming_the_file(tmp_path, capfd):
    # -p on a full disk, or standard output redirected to one, ended in an OSError traceback
    import pytest

    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    data, model = tmp_path / "d.vw", tmp_path / "m"
    _write_vw(data, 3000)
    _train(capfd, str(data), "-f", str(model))
    for args in (("train", str(data), "--quiet", "-p", "/dev/full"),
                 ("predict", str(data), "-i", str(model), "-p", "/dev/full")):
        r = _cli_proc(*args)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert r.stderr.strip().endswith("cannot write /dev/full: No space left on device")
    with open("/dev/full", "w") as full:
        r = _cli_proc("predict", str(data), "-i", str(model), stdout=full)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "standard output: No space left on device" in r.stderr


def test_progressive_predictions_into_a_closed_pipe_end_quietly(tmp_path):
    # `train -p /dev/stdout | head -1`: a BrokenPipeError traceback once head had its line
    import subprocess
    import sys

    data = tmp_path / "d.vw"
    _write_vw(data, 3000)
    p = subprocess.Popen([sys.executable, "-m", "terascale.cli", "linear", "train", str(data),
                          "--quiet", "-p", "/dev/stdout"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout is not None and p.stderr is not None
    p.stdout.close()  # the reader is gone before the first prediction is written
    err = p.stderr.read()
    assert p.wait(timeout=300) == 141
    assert "Traceback" not in err and "broken pipe" in err, err


def test_estimator_bits_out_of_range_is_a_config_error_naming_bits():
    # bits=99 was an OverflowError from numpy's mask, bits="18" a TypeError
    import numpy as np
    import pytest

    from terascale import ConfigError
    from terascale.linear import LinearClassifier, LinearRegressor

    X, y = np.eye(4), np.array([0, 1, 0, 1])
    for est in (LinearClassifier, LinearRegressor):
        for bits in (99, 0, "18", 2.5):
            for call in ("fit", "partial_fit"):
                kw = {"classes": [0, 1]} if call == "partial_fit" and est is LinearClassifier \
                    else {}
                with pytest.raises(ConfigError, match="bits="):
                    getattr(est(bits=bits), call)(X, y, **kw)


def test_a_bad_flag_value_is_one_line_naming_the_flag(capfd):
    # argparse printed a dozen lines of usage above the error
    import pytest

    for args in (["train", "d.vw", "--power-t", "abc"], ["train", "d.vw", "-b", "x"],
                 ["predict", "--raw", "x"], ["bogus"]):
        capfd.readouterr()
        with pytest.raises(SystemExit) as e:
            main(["linear", *args])
        assert e.value.code == 2
        err = capfd.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "usage" not in err, err
    assert err.startswith("terascale linear: error:")


def test_evaluate_takes_its_data_with_d_as_train_and_predict(tmp_path, capfd):
    # a VW user types -d everywhere: evaluate refused it as an unknown option
    import json

    data = tmp_path / "d.vw"
    _write_vw(data)
    _train(capfd, "-d", str(data), "-f", str(tmp_path / "m"))
    outs = []
    for args in ([str(data)], ["-d", str(data)]):
        assert main(["linear", "evaluate", "-i", str(tmp_path / "m"), "--json", *args]) == 0
        m = json.loads(capfd.readouterr().out)
        outs.append((m["examples"], m["logloss"]))
    assert outs[0] == outs[1] and outs[0][0] == 200
