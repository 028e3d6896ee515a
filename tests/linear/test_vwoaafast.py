"""``terascale vw --oaa K`` and ``--binary`` in the compiled core (``_vwoaafast``,
``_vwlearn.c``'s ``oaa_learn``; ``_vwonline``'s ``--binary``) against the numba pass (the
same command with ``TERASCALE_NO_CEXT=1``) and the real VW: ``-p``, ``-r``, the progress
table and closing block, and ``-f``'s model, bit for bit; the compiled run imports no
numba. CI compares with VW (whose bytes the numba pass writes); the numba pass runs in
``make test-vw``. Two shapes: 7 classes of Zipf-drawn tokens, and 3 classes with importance
weights, unlabelled examples and ``-q``. CI runs one case of each; ``make test-vw``
(``TERASCALE_VW_SUITE=all``) runs every parametrization."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from _vw_runs import FULL, more

from terascale._cext import load
from terascale.linear._vw import VWFAST

pytest.importorskip("vowpalwabbit")
built = pytest.mark.skipif(load(*VWFAST) is None,
                           reason="terascale.linear._vw._vwfast was not built")

# the compiled run, in a process that says at its exit whether it imported numba or, one
# worker, the modules of a job (its memory is VW's)
_COMPILED = """
import sys
from terascale.cli import main
rc = main(["vw", *sys.argv[1:]])
print(rc, "numba" in sys.modules or "terascale.communicator" in sys.modules)
"""


def _zipf(n: int, seed: int, k: int = 7) -> list[str]:
    """``n`` rows of classes 1..k, each a bag of Zipf-drawn tokens (a few frequent, most
    rare) leaning to its class, and a length feature; half of them tagged."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        c = int(rng.integers(1, k + 1))
        toks = rng.zipf(1.3, size=int(rng.integers(3, 25))) % 3000
        words = " ".join(f"w{(t * 7 + c * (t % 3 == 0)) % 3000}" for t in toks)
        tag = f"'e{i}" if rng.random() < 0.5 else ""
        out.append(f"{c} {tag}|t {words} |m len:{len(toks) / 10:.2f}")
    return out


def _weighted(n: int, seed: int) -> list[str]:
    """``n`` rows of classes 1..3 in two namespaces, some with importance weights, some
    unlabelled, all tagged."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        c, r = int(rng.integers(1, 4)), rng.random()
        w = f" {rng.choice([0.25, 1.5, 2, 4.75])}" if r < 0.4 else ""
        lab = "" if r > 0.93 else f"{c}{w}"
        out.append(f"{lab} 'x{i}|a f{c * 2 + rng.integers(4)} g{rng.integers(30)}:"
                   f"{rng.normal():.3f} |b h{rng.integers(9)} k:{rng.random():.3f}")
    return out


def _signs(n: int, seed: int) -> list[str]:
    """``_weighted``'s rows labelled -1/+1 (class 3: +1)."""
    return [("1" if ln.startswith("3") else "-1" if ln[:1].isdigit() else "") +
            (ln[1:] if ln[:1].isdigit() else ln) for ln in _weighted(n, seed)]


def _run(cmd: list[str], cwd, env: dict | None = None) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300,
                       env={**os.environ, **(env or {})})
    assert r.returncode == 0, r.stderr
    return r


def _runs(tmp_path, data: str, args: list[str], numba: bool,
          files: str = "prm") -> dict[str, dict[str, bytes]]:
    """-p, -r, -f (``files``: those asked for; without ``m`` no ``-f``, a ``-t`` run) and
    stderr of the compiled path, VW, and (``numba``) the numba pass, each in its own
    directory under the same names; the compiled run imported no numba."""
    out = ["-d", f"../{data}", *args, "-p", "p", "-r", "r", *(["-f", "m"] if "m" in files
                                                              else [])]
    who = [("c", [sys.executable, "-c", _COMPILED], None),
           ("vw", [sys.executable, "-m", "vowpalwabbit"], None),
           *([("numba", [sys.executable, "-m", "terascale", "vw"],
               {"TERASCALE_NO_CEXT": "1"})] if numba else [])]
    got = {}
    for name, cmd, env in who:
        d = tmp_path / name
        d.mkdir()
        r = _run([*cmd, *out], d, env)
        got[name] = {"err": r.stderr.encode(), **{f: (d / f).read_bytes() for f in files}}
        if name == "c":
            assert r.stdout.splitlines()[-1] == "0 False", r.stdout  # (no numba, no job)
    return got


def _vw_table(err: bytes) -> list[str]:
    """VW's stderr without the lines terascale does not print (its learner stack)."""
    return [ln for ln in err.decode().splitlines()
            if not ln.startswith(("Enabled", "Input", "Output"))]


def _check(got: dict[str, dict[str, bytes]], tmp_path, data: str) -> None:
    """The compiled run's files are VW's (-p, -r, stderr) and the numba pass's (all);
    VW reads its model as its own (the same -t predictions as from VW's model)."""
    assert got["c"]["p"] == got["vw"]["p"]
    assert got["c"]["r"] == got["vw"]["r"]
    assert got["c"]["err"].decode().splitlines() == _vw_table(got["vw"]["err"])
    if "numba" in got:
        for f in ("p", "r", "m", "err"):
            assert got["c"][f] == got["numba"][f], f
    for m in ("c", "vw"):
        _run([sys.executable, "-m", "vowpalwabbit", "-d", data, "-t", "-i", f"{m}/m",
              "-p", f"t{m}", "--quiet"], tmp_path)
    assert (tmp_path / "tc").read_bytes() == (tmp_path / "tvw").read_bytes()


@built
@pytest.mark.parametrize(("flags", "numba"), [
    (["--oaa", "7"], False),
    more(["--oaa", "7"], True),
    more(["--oaa", "7", "--loss_function", "logistic", "--probabilities"], True),
    more(["--oaa", "7", "--scores", "-b", "20", "--power_t", "0.3", "-l", "0.7"], True),
    more(["--oaa", "8", "--link", "logistic", "--loss_function", "logistic"], True)])
def test_oaa_on_zipf_tokens_is_vws_and_the_numba_pass(flags, numba, tmp_path):
    (tmp_path / "d.vw").write_text("\n".join(_zipf(500, 7)) + "\n")
    _check(_runs(tmp_path, "d.vw", flags, numba), tmp_path, "d.vw")


@built
@pytest.mark.parametrize(("flags", "numba"), [
    (["--oaa", "3", "-q", "ab", "--l2", "0.0005", "--link", "poisson"], False),
    more(["--oaa", "3", "-q", "ab", "--l2", "0.0005", "--link", "poisson"], True),
    more(["--oaa", "3", "-q", "ab"], True),
    more(["--oaa", "3", "-q", "ab", "--loss_function", "hinge", "--noconstant"], True),
    more(["--oaa", "3", "--predict_only_model", "--l1", "0.00001", "-q", "ab"], True),
    more(["--oaa", "3", "--indexing", "0", "-q", "ab"], False),
    # (the lazy L2 folded into every learner's interleaved rows, many times)
    more(["--oaa", "3", "--l2", "0.5", "-l", "10"], True),
    more(["--oaa", "5", "-b", "8", "-q", "ab", "--quiet"], False),
    # passes over the cache pass 1 writes: VW's holdout, its h lines, the early stop
    (["--oaa", "3", "--passes", "3", "-c", "-k", "--holdout_period", "4"], False),
    more(["--oaa", "3", "--passes", "5", "-c", "-k", "--early_terminate", "1",
          "--decay_learning_rate", "0.7", "--loss_function", "logistic", "--probabilities"],
         True),
    more(["--oaa", "3", "--passes", "2", "--cache_file", "cf", "--holdout_after", "500"],
         True),
    # (the features --ignore_linear leaves out counted in the table and model, as VW's)
    more(["--oaa", "3", "--ignore_linear", "a", "-q", "ab"], True)])
def test_oaa_with_importance_weights_is_vws_and_the_numba_pass(flags, numba, tmp_path):
    (tmp_path / "d.vw").write_text("\n".join(_weighted(800, 3)) + "\n")
    _check(_runs(tmp_path, "d.vw", flags, numba), tmp_path, "d.vw")


@built
@pytest.mark.parametrize(("flags", "numba"), [
    (["--min_prediction", "-0.3", "--max_prediction", "0.6"], False),
    more(["--min_prediction", "-0.3", "--max_prediction", "0.6"], True),
    more(["--max_prediction", "0.6", "--loss_function", "logistic", "--probabilities"], True),
    more(["--min_prediction", "0.5", "--max_prediction", "0.2"], True),
    more(["--min_prediction", "-0.3", "--max_prediction", "0.6", "--link", "logistic"], False),
    (["--min_prediction", "0.5", "--max_prediction", "-0.5", "--link", "logistic"], True),
    more(["--min_prediction", "-0.3", "--passes", "2", "-c", "-k", "--l2", "0.001"], True),
    (["--initial_t", "2"], False),
    more(["--initial_t", "0.5", "--min_prediction", "-0.3", "--passes", "2", "-c", "-k"],
         True)])
def test_oaa_in_a_fixed_range_is_compiled_and_vws(flags, numba, tmp_path):
    """``--oaa K --min_prediction/--max_prediction``: the K learners' shared range fixed
    at VW's two floats, every loss clipped to it (a range with its bounds crossed too, the
    loss of a linked score past a bound VW's), in the compiled learner (no numba
    imported), as VW and the numba pass; ``--initial_t``'s sums too."""
    (tmp_path / "d.vw").write_text("\n".join(_weighted(300, 5)) + "\n")
    got = _runs(tmp_path, "d.vw", ["--oaa", "3", *flags], numba)
    for f in ("p", "r"):
        assert got["c"][f] == got["vw"][f], f
    assert got["c"]["err"].decode().splitlines() == _vw_table(got["vw"]["err"])
    c, vw = got["c"]["m"], got["vw"]["m"]  # (after the version string)
    assert c[4 + int.from_bytes(c[:4], "little"):] == vw[4 + int.from_bytes(vw[:4], "little"):]
    for f in ("p", "r", "m", "err") if numba else ():
        assert got["c"][f] == got["numba"][f], f


@built
def test_oaa_sums_of_weights_far_apart_are_vws(tmp_path):
    """Importance weights of 1e7 and 1e-3: the mistakes' weights and the labelled weight
    are VW's running double sums (a block's sum, added to the run's, rounds otherwise),
    in the table, the closing block and the model's counters."""
    rng = np.random.default_rng(4)
    rows = [f"{c} {rng.choice(['1e7', '0.001', '0.3'])} |a f{c * 3 + rng.integers(9)} "
            f"g{rng.integers(30)}" for c in rng.integers(1, 4, 2000)]
    (tmp_path / "d.vw").write_text("\n".join(rows) + "\n")
    got = _runs(tmp_path, "d.vw", ["--oaa", "3"], False, "m")
    assert got["c"]["err"].decode().splitlines() == _vw_table(got["vw"]["err"])
    body = [m[4 + int.from_bytes(m[:4], "little"):] for m in (got["c"]["m"], got["vw"]["m"])]
    assert body[0] == body[1]


@built
@pytest.mark.parametrize(("flags", "numba"), [
    (["--oaa", "3", "--binary"], False),
    more(["--oaa", "4", "--binary", "--loss_function", "logistic", "-q", "ab"], True)])
def test_oaa_binary_is_vws_and_the_numba_pass(flags, numba, tmp_path):
    """--oaa K --binary: each learner's score's sign (-r), the first class of a positive
    one else class 1 (-p), its 0/1 loss in the table; the learners learn as without it,
    and ``--binary`` is kept in -f's model (VW's -t of it predicts so)."""
    (tmp_path / "d.vw").write_text("\n".join(_weighted(300, 17)) + "\n")
    _check(_runs(tmp_path, "d.vw", flags, numba), tmp_path, "d.vw")


@built
@pytest.mark.parametrize(("flags", "numba"), [
    (["--binary", "-q", "ab"], False),
    more(["--binary", "--loss_function", "logistic", "--l2", "0.001"], True),
    more(["--binary", "--loss_function", "hinge"], True)])
def test_binary_learning_is_vws_and_the_numba_pass(flags, numba, tmp_path):
    """--binary while learning: the signs in -p, VW's 0/1 loss in the table and closing
    block, ``binary`` kept in -f's model (VW's -t of it writes signs)."""
    (tmp_path / "d.vw").write_text("\n".join(_signs(800, 5)) + "\n")
    _check(_runs(tmp_path, "d.vw", flags, numba), tmp_path, "d.vw")


@built
@pytest.mark.parametrize("numba", [False, more(True)])
def test_the_early_stops_model_keeps_the_kept_passs_counters_as_vws(numba, tmp_path):
    """--early_terminate with --oaa: VW's model (and --readable_model) is the kept pass's,
    its counters (t, the losses, current_pass...) those at that pass's end, not the last
    pass's; -f after its version and --readable_model are VW's bytes."""
    rng = np.random.default_rng(4)
    lines = [f"{k} |a x{k * 3 + rng.integers(4)} y{rng.integers(10)} |b z"
             f"{rng.integers(1, 6) if rng.random() < 0.3 else k}"
             for k in rng.integers(1, 6, 200)]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    got = _runs(tmp_path, "d.vw", ["--oaa", "5", "--passes", "4", "-c", "-k",
                                   "--early_terminate", "1", "--readable_model", "rm"],
                numba, "prm")
    _check(got, tmp_path, "d.vw")
    readable = {m: (tmp_path / m / "rm").read_bytes() for m in got}
    assert b"\ncurrent_pass 2\n" in readable["vw"]  # (the passes stopped at the 3rd)
    assert len({r for r in readable.values()}) == 1

    def body(b: bytes) -> bytes:  # (after VW's version string, which terascale's is not)
        return b[4 + int.from_bytes(b[:4], "little"):]
    assert len({body(g["m"]) for g in got.values()}) == 1


@built
@FULL
def test_an_empty_input_writes_vws_oaa_model_in_both_passes(tmp_path):
    """--oaa on an empty input: -f after its version and --readable_model are VW's bytes
    (one pass counted), from the compiled run and the numba pass."""
    (tmp_path / "d.vw").write_text("")
    got = _runs(tmp_path, "d.vw", ["--oaa", "3", "--readable_model", "rm"], True, "prm")
    readable = {(tmp_path / m / "rm").read_bytes() for m in got}
    assert len(readable) == 1 and b"\ncurrent_pass 1\n" in readable.pop()
    assert len({g["m"][4 + int.from_bytes(g["m"][:4], "little"):]
                for g in got.values()}) == 1


@built
@FULL
def test_a_label_with_a_fraction_stops_the_compiled_oaa_run_as_vws(tmp_path):
    """VW's multiclass parser stops at a label ``2.5`` (its error on standard output):
    the compiled run learns the examples before it and ends there, as VW's."""
    lines = _weighted(300, 9)
    lines[120] = "2.5" + lines[120][lines[120].index(" '"):]
    (tmp_path / "d.vw").write_text("\n".join(lines) + "\n")
    got = _runs(tmp_path, "d.vw", ["--oaa", "3"], True)
    _check(got, tmp_path, "d.vw")


@built
@pytest.mark.parametrize(("first", "then", "numba"), [
    (["-q", "ab"], ["-t"], False),
    # a model of a label range: VW's -t clips every score there, the logistic loss's too
    (["--loss_function", "logistic", "--min_prediction", "-0.5", "--max_prediction", "0.7"],
     ["-t", "--loss_function", "logistic"], False),
    more(["--loss_function", "logistic", "--link", "logistic"], ["-t", "--probabilities"],
         True),
    more(["--predict_only_model", "--l2", "0.001"], ["-t", "--scores"], True),
    more(["-q", "ab"], [], True),  # (a run that learns on from VW's model)
    more(["--predict_only_model"], ["--l1", "0.0001"], True),
    more(["--binary"], ["-t"], True)])
def test_oaa_from_vws_model_is_vws_and_the_numba_pass(first, then, numba, tmp_path):
    """-i of VW's one-against-all model (VW's own): -t scores with its K learners, a run
    without -t learns on from them; -p, -r and stderr as VW's and the numba pass's."""
    (tmp_path / "d.vw").write_text("\n".join(_weighted(600, 21)) + "\n")
    _run([sys.executable, "-m", "vowpalwabbit", "-d", "d.vw", "--oaa", "3", *first, "-f",
          "m0", "--quiet"], tmp_path)
    got = _runs(tmp_path, "d.vw", ["--oaa", "3", "-i", "../m0", *then], numba, "pr")
    for f in ("p", "r"):
        assert got["c"][f] == got["vw"][f], f
    assert got["c"]["err"].decode().splitlines() == _vw_table(got["vw"]["err"])
    if numba:
        assert got["c"] == got["numba"]



@built
@pytest.mark.parametrize("text", [
    b"1 |a x\n2.0 |a y\n", b"\n\n3 'tag |a x\r\n1:1 |a y\n", b"1 2 3 |a x\n", b"+2 |a x\n-1 |b\n",
    b"x\t2 0.5 |a z\n1 |a\n", b"3e0 |a x\n", b"1\n2\r\n\r\n", b"", b"|a x\n'tag |b y\n",
])
def test_the_compiled_multiclass_stop_finds_what_the_numba_one_finds(text: bytes) -> None:
    from terascale.linear._vw._vwparse import multiclass_stop

    fast = load(*VWFAST)
    assert fast.multiclass_stop(text) == multiclass_stop(np.frombuffer(text, np.uint8))
