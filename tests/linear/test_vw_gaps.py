"""`terascale vw` against the vowpalwabbit package where VW's behaviour is easy to miss:
``--hash all`` (names of digits hashed as strings, on every input path: text, cache, -n N,
-i and -t, --audit, --invert_hash, --readable_model), --audit's lines with --ignore_linear,
--ignore, --keep and -q, and the progress table and closing block of --oaa K -n N."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from _vw_runs import FULL, ab_lines, more, real_label, run_ts, run_vw, stdouts

pytest.importorskip("vowpalwabbit")


def _digit_lines(n: int, seed: int) -> list[str]:
    """Rows whose feature names and one namespace's name are digits (where --hash all and
    VW's default differ), with named and anonymous features and a tag."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        a = rng.choice(60, size=4, replace=False)
        b = rng.choice(20, size=2, replace=False)
        x = rng.normal(size=2)
        y = 0.02 * a.sum() / 4 + 0.5 * x[0] + 0.1 * rng.normal()
        out.append(f"{y:.5f} 't{i}|a " + " ".join(str(j) for j in a) + f" w{a[0]}"
                   + f" 7:{x[0]:.4f} |12 " + " ".join(str(j) for j in b)
                   + f" |  :{x[1]:.4f} {b[0] + 100}")
    return out


@pytest.mark.parametrize("flags", [[], ["-q", "a1", "--passes", "3", "-c", "-k"],
                                   ["--hash_seed", "5", "-b", "20", "--l2", "1e-6"]])
def test_hash_all_gives_vws_predictions_models_and_names(flags, tmp_path, capfd,
                                                         monkeypatch):
    (tmp_path / "d.vw").write_text("\n".join(_digit_lines(300, 3)) + "\n")
    named = "-c" not in flags  # (VW's --invert_hash reads no cache)
    args = ["-d", "d.vw", "--hash", "all", *flags, "--readable_model", "rm.txt",
            *(["--invert_hash", "inv.txt"] if named else [])]
    run_vw([*args, "-p", "vw.p", "-f", "vw.model"], tmp_path)
    for f in ("inv.txt", "rm.txt")[not named:]:
        (tmp_path / f).rename(tmp_path / f"vw.{f}")
    code, err = run_ts(capfd, [*args, "-p", "ts.p", "-f", "ts.model"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()
    strings = tmp_path / "strings.p"
    run_vw(["-d", "d.vw", *flags, "-p", str(strings)], tmp_path)
    assert strings.read_text() != (tmp_path / "vw.p").read_text()  # (the data tell them apart)
    # the weights by index and by name: VW's to the bit (the header's options included)
    assert (tmp_path / "rm.txt").read_text() == (tmp_path / "vw.rm.txt").read_text()
    if named:
        assert sorted((tmp_path / "inv.txt").read_text().splitlines()) == \
            sorted((tmp_path / "vw.inv.txt").read_text().splitlines())
    # each model carries --hash all: -t with either one, in either program, predicts alike
    run_vw(["-i", "ts.model", "-t", "-d", "d.vw", "-p", "vw_from_ts.t"], tmp_path)
    code, err = run_ts(capfd, ["-i", "vw.model", "-t", "-d", "d.vw", "-p", "ts_from_vw.t"],
                       tmp_path, monkeypatch)
    assert code == 0, err
    run_vw(["-i", "vw.model", "-t", "-d", "d.vw", "-p", "vw.t"], tmp_path)
    want = (tmp_path / "vw.t").read_text()
    assert (tmp_path / "vw_from_ts.t").read_text() == want
    assert (tmp_path / "ts_from_vw.t").read_text() == want


def test_hash_all_on_two_workers_and_in_linear_train(tmp_path, capfd, monkeypatch):
    """-n 2 hashes as one worker does (its model's weights equal one worker's where both
    learn the same indices); terascale linear train still refuses --hash by name."""
    from terascale.cli import main

    (tmp_path / "d.vw").write_text("\n".join(_digit_lines(400, 4)) + "\n")
    run_vw(["-d", "d.vw", "--hash", "all", "--readable_model", "vw.rm"], tmp_path)
    code, err = run_ts(capfd, ["-d", "d.vw", "--hash", "all", "-n", "2",
                               "--readable_model", "ts.rm"], tmp_path, monkeypatch)
    assert code == 0, err
    idx = lambda p: set(re.findall(r"^(\d+):", p.read_text(), re.M))  # noqa: E731
    assert len(idx(tmp_path / "vw.rm")) > 100
    assert idx(tmp_path / "ts.rm") == idx(tmp_path / "vw.rm")
    capfd.readouterr()
    assert main(["linear", "train", "-d", str(tmp_path / "d.vw"), "--hash", "all"]) != 0
    assert "--hash" in capfd.readouterr().err


def test_hash_all_audit_prints_vws_lines(tmp_path):
    (tmp_path / "d.vw").write_text("\n".join(_digit_lines(40, 5)) + "\n")
    args = ["-d", "d.vw", "--audit", "--hash", "all", "-q", "1a", "-b", "14"]
    assert _audits(args, tmp_path)


def test_audit_streams_vws_lines_and_warnings_across_chunks(tmp_path):
    """--audit over more text than the compiled learner's first chunk (16 KiB), with --hash
    all (the names read from the input beside the copy it rewrites) and logistic's lines
    on the labels outside [-1, 1], each printed where VW prints it: after the example's
    audit lines."""
    (tmp_path / "d.vw").write_text("\n".join(_digit_lines(300, 6)) + "\n")
    assert (tmp_path / "d.vw").stat().st_size > 1 << 14
    args = ["-d", "d.vw", "--audit", "--hash", "all", "-q", "1a", "-b", "14",
            "--loss_function", "logistic"]
    runs = stdouts(args, tmp_path)
    assert runs[0].count("[warning] The label") > 20 and "\t12^" in runs[0]
    assert runs[1] == runs[0]


def _audits(args: list[str], cwd) -> bool:
    runs = stdouts(args, cwd)
    assert runs[0].count("\n") > 20 and "\ta^" in runs[0] + runs[1]
    assert runs[1] == runs[0]
    return True


def _namespace_lines(n: int, seed: int) -> list[str]:
    """Rows of three namespaces, one of which comes back later in the line."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        a = rng.choice(40, size=3, replace=False)
        b = rng.choice(10, size=2, replace=False)
        x = rng.normal()
        y = 0.3 * a.sum() / 40 + 0.5 * x
        out.append(f"{y:.4f} 't{i}|a " + " ".join(f"f{j}" for j in a) + f" x:{x:.3f} |b "
                   + " ".join(f"g{j}" for j in b) + f" |c h{i % 5} |a k{i % 3}")
    return out


@pytest.mark.parametrize("flags", [
    ["--ignore_linear", "a", "-q", "ab"],
    ["--ignore_linear", "ab", "--cubic", "abc"],
    ["-q", "aa", "--ignore_linear", "a"],
    ["--ignore", "b", "-q", "ac"],
    ["--keep", "ab", "-q", "ab", "--ignore_linear", "a", "-b", "10"],
    # colliding indices (-b 8): an ignored linear feature shows the weight learned there
    ["--ignore", "c", "--ignore_linear", "b", "-q", "ab", "-b", "8", "--passes", "3", "-c",
     "-k", "--holdout_off"],
    # VW's notes on standard output before the lines: a wildcard, a duplicate removed,
    # characters reordered
    ["--interactions", "a:", "--ignore_linear", "c"],
    ["--cubic", "a::", "-q", "ab", "-q", "ba", "-b", "12"]])
def test_audit_with_ignore_linear_ignore_keep_and_crosses(flags, tmp_path):
    (tmp_path / "d.vw").write_text("\n".join(_namespace_lines(40, 1)) + "\n")
    assert _audits(["-d", "d.vw", "--audit", *flags], tmp_path)


def _class_lines(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        a = rng.choice(40, size=4, replace=False)
        x = rng.normal(size=2)
        out.append(f"{1 + int(a[0] % 3)} 't{i}|a " + " ".join(f"f{j}" for j in a)
                   + f" x:{x[0]:.4f} |b z:{x[1]:.4f}")
    return out


def _block(err: str) -> dict[str, str]:
    tail = err[err.index("finished run"):]
    return dict(ln.split(" = ", 1) for ln in tail.splitlines() if " = " in ln)


@pytest.mark.parametrize("workers", [pytest.param(2, marks=FULL), 3])
def test_oaa_on_workers_prints_the_jobs_table_and_closing_block(workers, tmp_path, capfd,
                                                                 monkeypatch):
    """--oaa K -n N: rank 0 prints VW's table (over its shard, as the binary learner's
    -n N does) and one closing block whose counters are the whole job's: VW's on the
    same data, where they do not depend on the learner."""
    (tmp_path / "d.vw").write_text("\n".join(_class_lines(1500, 6)) + "\n")
    want = run_vw(["-d", "d.vw", "--oaa", "3"], tmp_path)
    code, got = run_ts(capfd, ["-d", "d.vw", "--oaa", "3", "-n", str(workers)], tmp_path,
                       monkeypatch)
    assert code == 0, got
    assert got.count("finished run") == 1 and got.count("average  since") == 1
    lines = [ln for ln in got.splitlines() if re.match(r"^\d\.\d{6} \d\.\d{6} +\d+ ", ln)]
    assert len(lines) >= 8  # (1, 2, 4, ... of rank 0's shard of 1500 / N examples)
    g, w = _block(got), _block(want)
    assert set(g) == set(w)
    for key in ("number of examples", "weighted example sum", "weighted label sum",
                "total feature number"):
        assert g[key] == w[key], key
    assert 0.2 < float(g["average loss"]) < 0.8  # (mistakes over the job's 1500 examples)
    code, got = run_ts(capfd, ["-d", "d.vw", "--oaa", "3", "-n", str(workers), "--quiet"],
                       tmp_path, monkeypatch)
    assert code == 0 and got == ""


def _real_lines(n: int, seed: int, logistic: bool = False) -> list[str]:
    return ab_lines(n, seed, _signed if logistic else real_label)


def _signed(rng, a, x) -> int:
    return 1 if 0.3 * a.sum() / 40 + 0.5 * x[0] + 0.1 * rng.normal() > 0.6 else -1


def _predicted(model: str, cwd) -> np.ndarray:
    run_vw(["-i", model, "-t", "-d", "d.vw", "-p", f"{model}.p", "--predict_only_model",
            "--quiet"], cwd)
    return np.loadtxt(cwd / f"{model}.p", usecols=0)


@pytest.mark.parametrize("flags", [
    pytest.param(["--bfgs", "--passes", "8", "--l2", "0.01"], marks=FULL),
    ["--bfgs", "--passes", "12", "--l2", "0.001", "--holdout_off", "-q", "ab"],
    ["--conjugate_gradient", "--passes", "6", "--l2", "0.01"],
    pytest.param(["--bfgs", "--passes", "10", "--hessian_on", "--loss_function", "logistic",
                  "--l2", "0.1"], marks=FULL)])
def test_bfgs_on_workers_is_vws_batch_learner(flags, tmp_path, capfd, monkeypatch):
    """--bfgs -n N: VW's batch learner with each pass's sums added over the workers: 3
    workers end within 1e-4 (relative) of one worker's predictions and of VW's
    single-node model, with VW's closing block (the holdout and the counts the whole
    input's)."""
    logistic = "logistic" in flags
    (tmp_path / "d.vw").write_text("\n".join(_real_lines(1200, 5, logistic)) + "\n")
    args = ["-d", "d.vw", *flags, "-c", "-k", "--predict_only_model"]
    want = run_vw([*args, "-f", "vw.m"], tmp_path)
    vw = _predicted("vw.m", tmp_path)
    got = {}
    for n in (1, 3):  # (2 workers run the same sums: the oaa and heldout tests take -n 2)
        code, err = run_ts(capfd, [*args, "-n", str(n), "-f", f"ts{n}.m"], tmp_path,
                           monkeypatch)
        assert code == 0, err
        got[n] = _predicted(f"ts{n}.m", tmp_path)
        assert err.count("finished run") == 1
        # the closing block: N workers' counts are one worker's, whose are VW's (but for
        # the total feature number with -q, which terascale counts with the crosses)
        block = _block(err)
        loss_t = block.pop("average loss")
        ref = {k: v for k, v in _block(want).items() if k != "average loss"}
        if "-q" in flags:  # (terascale's count takes the crossed features, VW's does not)
            block.pop("total feature number"), ref.pop("total feature number")
        assert block == ref
        # relative 1e-4, and where a prediction is near 0 (a sum of larger weights'
        # terms) 1e-5 of the largest prediction
        atol = 1e-5 * float(np.abs(vw).max())
        np.testing.assert_allclose(got[n], vw, rtol=1e-4, atol=atol, err_msg=f"-n {n}")
        np.testing.assert_allclose(got[n], got[1], rtol=1e-4, atol=atol, err_msg=f"-n {n}")
        if n == 1:
            np.testing.assert_allclose(got[1], vw, rtol=1e-5, atol=2e-6)
        loss_w = _block(want)["average loss"]
        assert loss_t.endswith("h") == loss_w.endswith("h")
        assert abs(float(loss_t.split()[0]) / float(loss_w.split()[0]) - 1) < 1e-4
    assert not np.array_equal(vw, np.zeros_like(vw))


def test_bfgs_on_workers_refuses_progressive_predictions(tmp_path, capfd, monkeypatch):
    (tmp_path / "d.vw").write_text("\n".join(_real_lines(100, 5)) + "\n")
    code, err = run_ts(capfd, ["-d", "d.vw", "--bfgs", "--passes", "3", "-n", "2", "-p",
                               "p.txt"], tmp_path, monkeypatch)
    assert code != 0 and "-p" in err and "-n 1" in err


def _env() -> dict[str, str]:
    """This process's environment, the terascale it imports first on the path."""
    import terascale

    src = os.path.dirname(os.path.dirname(terascale.__file__))
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        [src, *filter(None, [os.environ.get("PYTHONPATH")])])}


def test_bfgs_takes_expectile_with_its_q_as_vw(tmp_path):
    """--loss_function expectile --expectile_q Q with --bfgs (VW takes the pair): every
    pass's predictions and the weights are VW's to the bit without holdout; with VW's
    holdout, within float rounding; another q gives other predictions."""
    (tmp_path / "d.vw").write_text("\n".join(_real_lines(400, 5)) + "\n")
    base = ["-d", "d.vw", "--bfgs", "--passes", "6", "--l2", "0.01", "-c", "-k",
            "--loss_function", "expectile", "--predict_only_model"]
    got = {}
    for q, holdout in (("0.3", ["--holdout_off"]), ("0.05", [])):
        args = [*base, "--expectile_q", q, *holdout]
        run_vw([*args, "-p", "vw.p", "--readable_model", "vw.rm"], tmp_path)
        # (as a program: the bits are VW's where no library loaded beside it sets the
        # float unit's modes)
        r = subprocess.run([sys.executable, "-m", "terascale", "vw", *args, "-p", "ts.p",
                            "--readable_model", "ts.rm"], cwd=tmp_path, env=_env(),
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        vw, ts = (np.loadtxt(tmp_path / f, usecols=0) for f in ("vw.p", "ts.p"))
        got[q] = ts
        weights = [(tmp_path / f).read_text().split("\n:0\n", 1)[1] for f in ("vw.rm", "ts.rm")]
        if not holdout:  # (VW's holdout)
            np.testing.assert_allclose(ts, vw, rtol=1e-5, atol=1e-6)
        else:
            assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()
            assert weights[1] == weights[0]
    assert not np.allclose(got["0.3"], got["0.05"], rtol=1e-2)


def test_hash_all_model_through_a_run_without_data(tmp_path, capfd, monkeypatch):
    """-i of a --hash all model with --no_stdin and no -d: -f writes it with --hash all
    (as VW), and vw -t predicts with it as with the original."""
    (tmp_path / "d.vw").write_text("\n".join(_digit_lines(200, 8)) + "\n")
    run_vw(["-d", "d.vw", "--hash", "all", "-f", "vw.model"], tmp_path)
    code, err = run_ts(capfd, ["-i", "vw.model", "--no_stdin", "-f", "ts.model"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    for m in ("vw", "ts"):
        run_vw(["-i", f"{m}.model", "-t", "-d", "d.vw", "-p", f"{m}.t"], tmp_path)
    assert (tmp_path / "ts.t").read_text() == (tmp_path / "vw.t").read_text()


@pytest.mark.parametrize("flags", [["-q", "a:", "-q", ":a", "--cubic", "a::"],
                                   ["-q", "ab", "-q", "ba", "--cubic", "aab", "--cubic",
                                    "bab"],
                                   ["-q", "aa", "--cubic", "a::", "--quiet"],
                                   ["-q", "a:", "--leave_duplicate_interactions"],
                                   ["-q", "a:", "--termination", "0.1", "--mem", "5"],
                                   ["--conjugate_gradient", "--passes", "2", "-c", "-k",
                                    "--mem", "3", "--termination", "0.1"]])
def test_interaction_notes_on_standard_output(flags, tmp_path):
    """VW's [info]/[warning] lines about deduplicated interactions, and those on --mem
    and --termination given without --bfgs (with --conjugate_gradient after its [info]
    line), on standard output (where VW's logger writes them), the same text."""
    (tmp_path / "d.vw").write_text("\n".join(_namespace_lines(20, 2)) + "\n")
    outs = []
    for cmd in ([sys.executable, "-m", "vowpalwabbit"],
                [sys.executable, "-m", "terascale", "vw"]):
        r = subprocess.run([*cmd, "-d", "d.vw", *flags], cwd=tmp_path, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        outs.append(r.stdout)
    assert outs[1] == outs[0]
    assert ("[" in outs[0]) == ("--quiet" not in flags and "--leave_duplicate_interactions"
                                not in flags)


@pytest.mark.parametrize("flags", [["-t"], ["--passes", "2", "-c", "-k"]])
def test_interaction_notes_of_an_initial_models_wildcards(flags, tmp_path):
    """-i of a VW model of wildcard interactions: VW's notes on the model's interactions
    (it merges them as if given), the same text on standard output."""
    (tmp_path / "d.vw").write_text("\n".join(_namespace_lines(20, 2)) + "\n")
    run_vw(["-d", "d.vw", "-q", "a:", "--cubic", "a::", "-f", "m"], tmp_path)
    outs = [subprocess.run([*cmd, "-d", "d.vw", "-i", "m", *flags], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120, check=True).stdout
            for cmd in ([sys.executable, "-m", "vowpalwabbit"],
                        [sys.executable, "-m", "terascale", "vw"])]
    assert outs[1] == outs[0]
    assert "[info] Any duplicate namespace interactions will be removed" in outs[0]


def _shares(comm, paths, options):
    from terascale.linear._vw._vwbatch import _Data

    d = _Data(paths, options, 10, 0, False, comm)
    return (d.n, d.labels, d.holdout, d.learn, d.range_lo, d.range_hi, d.range_all,
            d.total, d.closing)


@pytest.mark.parametrize("compiled", [True, False])
def test_bfgs_holds_each_example_once(compiled, tmp_path, monkeypatch):
    """--bfgs's examples are held once, as the parse's CSR arrays: the gradient and the
    predictions multiply by them and their transpose in place (compiled, or with numpy's
    np.add.at where the compiled core is not built), and the -p lines' tags are the
    parse's bytes (not a str per example)."""
    from terascale.linear._vw import _vwbatch
    from terascale.linear._vw._vwbatch import _Data

    tags = [f"t{i}" if i % 3 else "" for i in range(40)]
    lines = [f"{i % 2} '{t}|a f{i % 7} g:{i / 4}" if t else f"{i % 2} |a f{i % 7} g:{i / 4}"
             for i, t in enumerate(tags)]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    d = _Data([str(tmp_path / "d.vw")], {"bits": 12}, 10, 0, False)
    if not compiled:
        monkeypatch.setattr(_vwbatch, "_fast", lambda: None)
    elif _vwbatch._fast() is None:
        pytest.skip("the compiled core is not built")
    dense = np.zeros(d.X.shape, np.float32)
    for i in range(d.n):  # (each occurrence added: a repeated feature counts twice)
        a, b = d.X.indptr[i], d.X.indptr[i + 1]
        np.add.at(dense[i], d.X.indices[a:b], d.X.data[a:b])
    values = d.X.data.copy()
    v = np.arange(d.n, dtype=np.float32)
    np.testing.assert_array_equal(d.gradient(v), dense.T @ v)
    np.testing.assert_array_equal(d.gradient(v.astype(np.float64)), dense.T @ v)
    w = np.arange(d.X.shape[1], dtype=np.float32) / 64
    np.testing.assert_array_equal(d.dot(w), dense @ w)
    np.testing.assert_array_equal(d.X.data, values)  # (the products leave X as it was)
    assert not isinstance(d.tags, list) and len(d.tags) == 40
    assert list(d.tags) == tags


@pytest.mark.parametrize("files", [1, 2, 4])
def test_bfgs_workers_read_only_their_share(files, tmp_path):
    """--bfgs -n N: each worker parses only its share (the k-th of N byte ranges of the
    files one after the other, or a run of consecutive files when there are N or more, as
    the one-pass -n N reads), yet its
    holdout, prediction ranges and closing counts are the whole input's at its examples'
    places: one worker's, share by share."""
    from terascale.linear._io._dataset import ParseOptions
    from terascale.linear._io._readers import read_file, shard_places
    from terascale.testing import run_threads

    lines = _real_lines(331, 7)
    lines[5] = "|a f1 f2"  # (an example without a label: learned from by none)
    paths = []
    for i in range(files):
        part = lines[i * len(lines) // files:(i + 1) * len(lines) // files]
        (tmp_path / f"d{i}.vw").write_text("\n".join(part) + "\n")
        paths.append(str(tmp_path / f"d{i}.vw"))
    options = {"bits": 18}
    one = _shares(None, paths, options)
    got = run_threads(_shares, 3, args=(paths, options))
    assert sum(g[0] for g in got) == one[0] == len(lines) == one[7]
    assert all(0 < g[0] < one[0] for g in got)
    # the whole input's order: the workers' shares in rank order (shard_places)
    order = []
    at = 0
    for k in range(3):
        for _, p, sh in shard_places(paths, k, 3):
            size = len(read_file(p, ParseOptions(), shard=sh, need_label=False))
            order.append((k, at, size))
            at += size
    seen = [0, 0, 0]
    for k, start, size in order:
        for field in (1, 2, 3, 4, 5):
            np.testing.assert_array_equal(got[k][field][seen[k]:seen[k] + size],
                                          one[field][start:start + size])
        seen[k] += size
    for g in got:
        assert g[6] == one[6] and g[7] == one[7] and g[8] == one[8]
    assert np.any(one[2]) and one[4][0] > one[4][-1]  # (a holdout; the range widens)


def test_bfgs_workers_shares_of_gzip_and_standard_input(tmp_path):
    """--bfgs -n 2 reads its shares of a .gz file's text and of standard input (copied to
    a file first, as the one-pass -n N does): the same model to the bit as from the plain
    file, and as 3 workers'; a truncated .gz is an error naming it."""
    import gzip

    text = "\n".join(_real_lines(600, 9)) + "\n"
    (tmp_path / "d.vw").write_text(text)
    (tmp_path / "d.vw.gz").write_bytes(gzip.compress(text.encode()))
    (tmp_path / "cut.vw.gz").write_bytes(gzip.compress(text.encode())[:-200])
    flags = ["--bfgs", "--passes", "5", "--l2", "0.01", "--quiet", "--predict_only_model",
             "--readable_model"]
    ts = [sys.executable, "-m", "terascale", "vw"]
    models = []
    for name, data in (("plain", ["-d", "d.vw", "-n", "2"]),
                       ("gz", ["-d", "d.vw.gz", "-n", "2"]), ("stdin", ["-n", "2"]),
                       ("three", ["-d", "d.vw", "-n", "3"])):
        r = subprocess.run([*ts, *data, *flags, f"{name}.rm"], cwd=tmp_path, env=_env(),
                           input=text if name == "stdin" else None, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        models.append((tmp_path / f"{name}.rm").read_text())
    assert models[1] == models[0] and models[2] == models[0]
    # the workers' sums are float64 until their total: 3 workers' weights are 2 workers'
    assert models[3] == models[0]
    r = subprocess.run([*ts, "-d", "cut.vw.gz", "-n", "2", *flags, "cut.rm"], cwd=tmp_path,
                       env=_env(), capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "cut.vw.gz: cannot read" in r.stderr


_GRAM_LINES = ["1 |text w1 w2 w3:abc |b x y", "-1 |text w2 w4 :3 w1 |t2 q r",
               "1 |t2 w1 w2 w3 |b y", "0.5 | w1 w2 w3 |b y z"]


@pytest.mark.parametrize("flags", [
    ["--ngram", "3", "--skips", "1", "-q", "tb"],
    more(["--ngram", "t2", "--redefine", "s:=t", "--feature_limit", "b1", "--hash_seed", "3",
          "--ignore_linear", "t", "-q", "::"]),
    more(["--affix", "+2t", "-q", "tb"])])
def test_invert_hash_names_generated_features_by_their_words(flags, tmp_path, capfd,
                                                             monkeypatch):
    """--invert_hash after --ngram/--skips (and the other rewrites of the features):
    VW's names (``text^w1^w2``, the first word's namespace, a string value left out of
    the n-gram; ``affix^t+2=ab``; crosses of them), VW's lines to the bit."""
    (tmp_path / "d.vw").write_text("\n".join(_GRAM_LINES * 3) + "\n")
    run_vw(["-d", "d.vw", *flags, "--invert_hash", "vw.ih"], tmp_path)
    code, err = run_ts(capfd, ["-d", "d.vw", *flags, "--invert_hash", "ts.ih"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    got = sorted((tmp_path / "ts.ih").read_text().splitlines())
    assert got == sorted((tmp_path / "vw.ih").read_text().splitlines())
    assert not any(re.search(r"\^\d{5,}", ln) for ln in got)  # (none named by a hash)


@pytest.mark.parametrize("learner", ["--bfgs", more("--conjugate_gradient")])
def test_test_only_of_a_batch_model_prints_the_batch_learners_lines(learner, tmp_path):
    """-t -i MODEL of a --bfgs/--conjugate_gradient model: VW's batch learner's opening,
    its [info] note, its one -nan pass line and the test block (no online table); the
    predictions VW's."""
    (tmp_path / "d.vw").write_text("\n".join(_real_lines(200, 5)) + "\n")
    run_vw(["-d", "d.vw", learner, "--passes", "3", "-c", "-k", "--predict_only_model",
            "-f", "m", "--quiet"], tmp_path)
    runs = []
    for cmd in ([sys.executable, "-m", "vowpalwabbit"],
                [sys.executable, "-m", "terascale", "vw"]):
        r = subprocess.run([*cmd, "-t", "-i", "m", "-d", "d.vw", "--predict_only_model",
                            "-p", "p"], cwd=tmp_path, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        err = [ln for ln in r.stderr.splitlines()  # (VW's lines on its reductions)
               if not ln.startswith(("Enabled learners", "Input label", "Output pred"))]
        runs.append((err, r.stdout, (tmp_path / "p").read_text()))
    assert runs[1] == runs[0]
    assert any(ln.startswith(" 1 -nan") for ln in runs[1][0])


_SPELLED = ["1 |text W1 w2.3 Ab#c:2 |b x y 12 |text more", "-1 |text w2 w4 :0 :3 w1 |t2 q r",
            "1 |t2 w1 w2 w3:abc |b y", "0.5 | w1 Zz 33 |b:0.5 y z"]


@pytest.mark.parametrize("flags", [["--spelling", "t", "--spelling", "_", "-q", "tb"],
                                   more(["--spelling", "b", "--affix", "+2t", "--redefine", "s:=t",
                                         "--hash", "all", "--hash_seed", "7"])])
def test_spelling_features_are_vws(flags, tmp_path, capfd, monkeypatch):
    """--spelling NS: VW's spelling features (0/a/A/./# per byte of each name, an anonymous
    feature's empty spelling hashed to the namespace's hash, the spelling namespace listed
    before the namespace that made it): VW's predictions, --invert_hash names and
    --readable_model to the bit; each tool's -i of the other's model (which keeps
    --spelling) predicts as VW's own."""
    (tmp_path / "d.vw").write_text("\n".join(_SPELLED * 4) + "\n")
    args = ["-d", "d.vw", *flags, "--quiet"]
    outs = ["-p", "{}.p", "--invert_hash", "{}.ih", "--readable_model", "{}.rm", "-f", "{}.m"]
    run_vw([*args, *(o.format("vw") for o in outs)], tmp_path)
    code, err = run_ts(capfd, [*args, *(o.format("ts") for o in outs)], tmp_path, monkeypatch)
    assert code == 0, err
    for ext in ("p", "rm"):
        assert (tmp_path / f"ts.{ext}").read_text() == (tmp_path / f"vw.{ext}").read_text()
    assert sorted((tmp_path / "ts.ih").read_text().splitlines()) == \
        sorted((tmp_path / "vw.ih").read_text().splitlines())
    assert "spelling^t_Aa#a" in (tmp_path / "ts.ih").read_text() or "-q" not in flags
    run_vw(["-d", "d.vw", "-i", "ts.m", "-p", "vw_ts.p", "--quiet"], tmp_path)
    run_vw(["-d", "d.vw", "-i", "vw.m", "-p", "want.p", "--quiet"], tmp_path)
    code, err = run_ts(capfd, ["-d", "d.vw", "-i", "vw.m", "-p", "ts_vw.p", "--quiet"],
                       tmp_path, monkeypatch)
    assert code == 0, err
    for other in ("vw_ts.p", "ts_vw.p"):
        assert (tmp_path / other).read_text() == (tmp_path / "want.p").read_text()


@pytest.mark.parametrize(("flags", "empty"), [
    (["--spelling", "b", "--affix", "-1c", "-q", "bc"], []), more(["--ngram", "b2"], []),
    more([], []), (["-q", "bc"], ["e:", "g: 2", "h: w", "k:|u"])])
def test_string_values_under_a_scale_and_two_generated_namespaces_are_vws(
        flags, empty, tmp_path, capfd, monkeypatch):
    """A string value (``color:red``) is 1 whatever its namespace's scale, as VW's; the
    spelling and affix namespaces are two (listed where VW lists them); a value left
    empty (``e:``) is read on past as VW reads it (``e`` at the line's end, the number
    after the blanks, else the word after them, ``|`` included, as a string value): VW's
    predictions to the bit."""
    rng = np.random.default_rng(7)
    lines = [f"{rng.choice(['1', '-1'])} |b:0.5 "
             + " ".join(rng.choice(["color:red", "color:blue", "x:2", "Cd", "y3", *empty], 3))
             + f" |c {rng.choice(['wq', 'v', 'uu'])} v" for _ in range(200)]
    if empty:  # (and at the line's end)
        lines[::7] = [ln + " e:" for ln in lines[::7]]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    run_vw(["-d", "d.vw", *flags, "-p", "vw.p", "--quiet"], tmp_path)
    code, err = run_ts(capfd, ["-d", "d.vw", *flags, "-p", "ts.p", "--quiet"], tmp_path,
                       monkeypatch)
    assert code == 0, err
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()


@pytest.mark.parametrize(("flags", "text", "error"), [
    (["--spelling", "a"], "1 |a x y\n1 -2 |a z\n",
     "line 2: an importance weight is negative: '1 -2 |a z'"),
    (["--oaa", "3", "--named_labels", "x,y,z"], "y |a x\nz -1 |a x\n",
     "line 2: an importance weight is negative: 'z -1 |a x'"),
])
def test_a_bad_line_of_a_rewritten_input_is_named_as_the_users(flags, text, error, tmp_path,
                                                               capfd, monkeypatch):
    """--spelling (like --affix and the other rewrites) and --named_labels (the classes
    numbered) read a rewritten copy of the input: an error in it names the user's file,
    line and text, not the copy's."""
    import gzip

    (tmp_path / "d.vw").write_text(text)
    with gzip.open(tmp_path / "d.vw.gz", "wt") as f:
        f.write(text)
    for name in ("d.vw", "d.vw.gz"):
        code, err = run_ts(capfd, ["-d", name, *flags, "--quiet"], tmp_path, monkeypatch)
        assert code == 2
        assert f"{name}, {error}" in err, err
        assert "terascale-vwgen" not in err and "terascale-oaa" not in err


def test_binary_with_an_always_positive_link_is_refused_in_test_runs_too(tmp_path, capfd,
                                                                         monkeypatch):
    """VW's --binary takes the sign of the linked prediction: with --link logistic every
    prediction is 1. Refused under -t as in training, given or kept in -i's model."""
    (tmp_path / "d.vw").write_text("1 |a x y\n-1 |a z\n" * 5)
    run_vw(["-d", "d.vw", "--link", "logistic", "--loss_function", "logistic", "-f", "l.m",
            "--quiet"], tmp_path)
    run_vw(["-d", "d.vw", "--link", "logistic", "--loss_function", "logistic", "--binary",
            "-f", "lb.m", "--quiet"], tmp_path)
    for model, extra in (("l.m", ["--binary"]), ("lb.m", [])):
        code, err = run_ts(capfd, ["-d", "d.vw", "-t", "-i", model, *extra, "-p", "p"],
                           tmp_path, monkeypatch)
        assert code == 2 and "--binary with --link logistic: one or the other" in err, err


@pytest.mark.parametrize("flags", [["--holdout_after", "120"],
                                   more(["--holdout_after", "40", "--loss_function",
                                         "logistic", "-P", "5"]),
                                   more(["--holdout_after", "500"])])
def test_test_only_holds_out_after_n_as_vw(flags, tmp_path, capfd, monkeypatch):
    """-t -i MODEL --holdout_after N: VW holds the examples after the N-th out under -t
    too: its table and counters are the first N examples', its average loss the held-out
    ones' (marked h; "undefined (no holdout)" without any); every example predicted."""
    (tmp_path / "d.vw").write_text("\n".join(_real_lines(300, 9, logistic=True)) + "\n")
    run_vw(["-d", "d.vw", "--loss_function", "logistic", "-f", "m", "--quiet"], tmp_path)
    args = ["-t", "-i", "m", "-d", "d.vw", *flags, "-p"]
    want = run_vw([*args, "vw.p"], tmp_path)
    code, got = run_ts(capfd, [*args, "ts.p"], tmp_path, monkeypatch)
    assert code == 0, got
    assert got[got.index("average  since"):] == want[want.index("average  since"):]
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()
    assert " h\n" in got or "undefined" in got


def _weighted_real_lines(n: int, seed: int) -> list[str]:
    """Real labels far from a logistic model's scores, with importance weights that are
    not powers of two (each example's weighted loss rounds in float)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        a, x = rng.integers(0, 300, 6), rng.normal()
        y, w = round(float(x * 2 + a[0] % 5), 3), rng.choice([1, 1, 2, 0.5, 3])
        out.append(f"{y} {w} |a " + " ".join(f"w{v}" for v in a) + f" x:{x:.4f} |b z"
                   f"{rng.integers(0, 20)}")
    return out


@pytest.mark.parametrize("numba_pass", [False, more(True)])
def test_test_only_sums_the_losses_as_vw(numba_pass, tmp_path, capfd, monkeypatch):
    """-t's closing block: each example's loss times its weight in float, added one at a
    time in double, as VW's sum_loss (a large average loss's sixth decimal moved with a
    product in double or numpy's pairwise sum), on the compiled and the numba -t."""
    (tmp_path / "d.vw").write_text("\n".join(_weighted_real_lines(400, 101)) + "\n")
    run_vw(["-d", "d.vw", "--loss_function", "logistic", "--link", "logistic", "-q", "ab",
            "--passes", "2", "-c", "-k", "-f", "m", "--quiet"], tmp_path)
    args = ["-t", "-i", "m", "-d", "d.vw", *(["-f", "{}.m"] if numba_pass else [])]
    want = run_vw([a.format("vw") for a in args], tmp_path)
    code, got = run_ts(capfd, [a.format("ts") for a in args], tmp_path, monkeypatch)
    assert code == 0, got
    assert got[got.index("average  since"):] == want[want.index("average  since"):]
    assert float(re.findall(r"average loss = (\S+)", got)[0]) > 100  # (a large loss)


@pytest.mark.parametrize("quiet,form", [(["--quiet"], ["--predict_only_model"]),
                                        more([], ["--predict_only_model"]),
                                        (["--quiet"], [])])
def test_test_only_readable_model_is_vws(quiet, form, tmp_path, capfd, monkeypatch):
    """-t -i MODEL --readable_model of a --predict_only_model model (no counters, no
    sums) or of a save_resume one: VW's text, the test run's counters (and where its table
    stopped; t going on from the model's) with each nonzero weight alone; --invert_hash
    too."""
    rng = np.random.default_rng(4)
    (tmp_path / "d.vw").write_text("".join(
        f"{'' if rng.random() < 0.1 else rng.choice(['-1', '1 2', '1 0.5'])} |a "
        f"f{rng.integers(9)} x:{rng.normal():.3f} |b k{rng.integers(5)}\n"
        for _ in range(150)))
    run_vw(["-d", "d.vw", "-q", "ab", "-f", "m", *form, "--quiet"], tmp_path)
    for flag in ("--readable_model", "--invert_hash"):
        run_vw(["-d", "d.vw", "-t", "-i", "m", flag, "vw.txt", *quiet], tmp_path)
        code, err = run_ts(capfd, ["-d", "d.vw", "-t", "-i", "m", flag, "ts.txt", *quiet],
                           tmp_path, monkeypatch)
        assert code == 0, err
        want = (tmp_path / "vw.txt").read_text()
        assert "example_number 150" in want and "0 0" not in want
        assert (tmp_path / "ts.txt").read_text() == want


@FULL  # (two -n 2 jobs: ~4 s each)
@pytest.mark.parametrize("quiet", [True, False])
def test_workers_model_counts_the_loss_since_the_last_line_over_the_job(quiet, tmp_path,
                                                                       capfd, monkeypatch):
    """-n N -f: the model's counters are the whole job's; its loss since the last line of
    the table is the job's where no table is printed (--quiet: VW's one run's, the whole
    loss, as VW's own quiet model keeps it), else rank 0's since its table's last line
    plus the other workers' loss."""
    from terascale.linear._vw._vwmodel import read_vw_model

    (tmp_path / "d.vw").write_text("\n".join(_real_lines(400, 9)) + "\n")
    run_vw(["-d", "d.vw", "-f", "vw.m", "--quiet"], tmp_path)
    vw = read_vw_model(str(tmp_path / "vw.m")).info["vw_counters"]
    assert vw["since"] == vw["sum_loss"] and vw["dump"] == 1.0
    code, err = run_ts(capfd, ["-d", "d.vw", "-n", "2", "-f", "ts.m",
                               *(["--quiet"] if quiet else [])], tmp_path, monkeypatch)
    assert code == 0, err
    ts = read_vw_model(str(tmp_path / "ts.m")).info["vw_counters"]
    assert ts["examples"] == vw["examples"] == 400
    if quiet:
        assert ts["since"] == ts["sum_loss"] and ts["dump"] == 1.0 and ts["old"] == 0.0
    else:  # (rank 0's last line at 128 of its 200: the other worker's 200 after it)
        rows = [ln.split() for ln in err.splitlines() if ln.endswith(" 9")]
        assert rows[-1][2] == "128" and ts["dump"] == 256.0 and ts["old"] == 128.0
        (tmp_path / "d0.vw").write_text("\n".join(_real_lines(400, 9)[:200]) + "\n")
        alone = run_ts(capfd, ["-d", "d0.vw"], tmp_path, monkeypatch)[1]
        rank0 = float(re.search(r"average loss = (\S+)", alone).group(1)) * 200
        since0 = rank0 - float(rows[-1][0]) * 128
        assert abs(ts["since"] - (since0 + ts["sum_loss"] - rank0)) < 1e-3


def test_bfgs_logistic_with_l2_is_vws_to_the_bit(tmp_path, capfd, monkeypatch):
    """--bfgs --loss_function logistic --l2: every pass's -p and the per-pass table are
    VW's to the bit (the loss's exponential as C's expf, not numpy's float32 one, whose
    last bits the passes amplify into the sixth digit)."""
    rng = np.random.default_rng(11)
    w = rng.normal(size=40)
    lines = []
    for _ in range(300):
        idx, x = rng.choice(40, 6, replace=False), rng.normal(size=6) * 3
        y = 1 if (w[idx] * x).sum() + rng.normal() > 0 else -1
        lines.append(f"{y} |a " + " ".join(f"f{j}:{v:.3f}" for j, v in zip(idx, x)))
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    args = ["-d", "d.vw", "--bfgs", "--passes", "8", "--loss_function", "logistic",
            "--l2", "0.01", "--holdout_off", "-c", "-k"]
    want = run_vw([*args, "-p", "vw.p"], tmp_path)
    code, got = run_ts(capfd, [*args, "-p", "ts.p"], tmp_path, monkeypatch)
    assert code == 0, got
    assert (tmp_path / "ts.p").read_text() == (tmp_path / "vw.p").read_text()
    table = [ln for ln in want.splitlines() if re.match(r"^ ?\d+ ", ln)]
    assert len(table) >= 6 and table == [ln for ln in got.splitlines()
                                         if re.match(r"^ ?\d+ ", ln)]


def _vw_run(args: list[str], cwd) -> subprocess.CompletedProcess:
    """``python -m vowpalwabbit ARGS`` in ``cwd``, whatever its exit status."""
    return subprocess.run([sys.executable, "-m", "vowpalwabbit", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("given", [
    ["-b", "18", "--bit_precision=20"],
    ["-l", "0.4", "-l", "0.3", "--power_t", "0.2", "--power_t", "0.3", "-d", "a.vw",
     "-b", "18", "-b", "18"],
    more(["--loss_function", "logistic", "--loss_function", "hinge"]),
    more(["--l1", "1e-7", "--l1", "2e-7"]),
])
def test_an_option_given_twice_is_vws(given, tmp_path, capfd, monkeypatch):
    """An option of one value given twice: VW's error where the values differ, else VW's
    run (-l and --power_t: the first value, as VW lets them be overridden; -d F -d F reads
    F once)."""
    (tmp_path / "a.vw").write_text("\n".join(_real_lines(30, 3)) + "\n")
    vw = _vw_run(["-d", "a.vw", *given], tmp_path)
    code, err = run_ts(capfd, ["-d", "a.vw", *given], tmp_path, monkeypatch)
    wrong = re.search(r"Disagreeing option values for .*", vw.stderr)
    if wrong:
        assert vw.returncode == 1 and code == 2
        assert err == f"terascale vw: error: {wrong.group(0)}\n"
    else:
        assert vw.returncode == 0 and code == 0, err
        assert err.splitlines() == [ln for ln in vw.stderr.splitlines()
                                    if not ln.startswith(("Enabled", "Input", "Output"))]


@pytest.mark.parametrize("flag", ["-p", more("-r")])
def test_dash_as_a_prediction_file_is_a_file_named_dash(flag, tmp_path):
    """VW's ``-p -`` (``-r -``) writes a file named ``-``, not standard output; ``-p
    /dev/stdout`` writes standard output (checked on terascale's side only: VW as root may
    replace a device it is given)."""
    (tmp_path / "a.vw").write_text("\n".join(_real_lines(30, 3)) + "\n")
    out = {}
    for who, cmd in (("vw", ["vowpalwabbit"]), ("ts", ["terascale", "vw"])):
        (tmp_path / who).mkdir()
        r = subprocess.run([sys.executable, "-m", *cmd, "-d", "../a.vw", flag, "-",
                            "--quiet"], cwd=tmp_path / who, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0 and r.stdout == "", r.stderr
        out[who] = (tmp_path / who / "-").read_text()
    assert out["ts"] == out["vw"] and out["vw"]
    r = subprocess.run([sys.executable, "-m", "terascale", "vw", "-d", "a.vw", flag,
                        "/dev/stdout", "--quiet"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout == out["vw"]


@pytest.mark.parametrize("flags", [
    ["--log_output", "compat", "--limit_output", "3"],
    ["--log_level", "error", "--driver_output", "stdout"],
    more(["--log_output", "stderr", "--driver_output_off"]),
    more(["--log_level", "warn", "--limit_output", "1"]),
    more(["--quiet", "--log_level", "info"]),
])
def test_vws_logging_options(flags, tmp_path):
    """--log_level, --log_output, --limit_output, --driver_output(_off): VW's logger lines
    (a NaN score, huge features, a label logistic loss does not expect) and its driver's
    lines, each kept or dropped and on the stream VW puts it on."""
    (tmp_path / "d.vw").write_text("1 |a x:1e30\n3 |a x:1 y:2\n1 |a y:1e20\n-1 |a y:1\n")
    args = ["-d", "d.vw", "--loss_function", "logistic", "-q", "aa", *flags]
    runs = [subprocess.run([sys.executable, "-m", *cmd, *args], cwd=tmp_path,
                           capture_output=True, text=True, timeout=120)
            for cmd in (["vowpalwabbit"], ["terascale", "vw"])]
    assert runs[0].returncode == 0 and runs[1].returncode == 0, runs[1].stderr
    mine = ("Enabled", "Input label", "Output pred")
    for vw, ts in ((runs[0].stdout, runs[1].stdout), (runs[0].stderr, runs[1].stderr)):
        assert ts.splitlines() == [ln for ln in vw.splitlines() if not ln.startswith(mine)]


_VW_ONLY = ("Enabled", "Input label", "Output pred")  # (the preamble lines VW alone prints)


@pytest.mark.parametrize("flags", [["-P", "1"], more(["--passes", "2", "-c", "-k",
                                                      "--holdout_off"])])
def test_huge_and_tiny_importance_weights_print_vws_table(flags, tmp_path, capfd,
                                                         monkeypatch):
    """Importance weights of 1e30 and 1e-30: VW's progress table cuts the weight column to
    its 14 characters (no dots, as the label's), and a NaN in the closing block keeps its
    sign (`-nan`: a weight of 3.4e38 makes the best constant's loss one)."""
    (tmp_path / "d.vw").write_text("1 1e30 |a x\n-1 1e-30 |a y\n1 1e14 |a z\n-1 2 |a x\n"
                                   " |a q\n-1 1e30 |a z\n1 1e-30 |a x\n")
    (tmp_path / "e.vw").write_text("1 1e30 |a x\n-1 3.4e38 |a y\n1 1e-30 |a z\n")
    for data in ("d.vw", "e.vw"):
        args = ["-d", data, *flags]
        want = [ln for ln in run_vw(args, tmp_path).splitlines() if not ln.startswith(_VW_ONLY)]
        code, err = run_ts(capfd, args, tmp_path, monkeypatch)
        assert code == 0
        if data == "d.vw":
            assert " 10000000150474 " in "\n".join(want)
            assert err.splitlines() == want
        else:  # (the closing block)
            assert "best constant's loss = -nan" in want
            assert err.splitlines()[-4:] == want[-4:]
