"""One loss is one definition: its row in ``LOSS_TABLE`` and its branches in the kernels.

ARCHITECTURE.md: adding a loss is a row in ``linear/_losstable.py``, its branches in the
kernels of ``linear/_losses.py``, and its tests. These tests hold that true: every row goes through every
kernel (a code without a branch raises, it never trains another loss), the derivatives
are the values' derivatives, the rows' properties are what the paths read (the metric,
the link, the clip, the batch form's curvature), and no module outside those two
compares anything with a loss's name.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest

import terascale.linear as tl
from terascale import ConfigError
from terascale.linear import _losses as L
from terascale.linear._online._state import MAX_LABEL, MIN_LABEL, new_state
from terascale.linear._online._update import online_chunk

SRC = Path(L.__file__).resolve().parents[2]
ROWS = sorted(L.LOSS_TABLE.items())
UNUSED = sorted(set(range(8)) - {loss.code for loss in L.LOSS_TABLE.values()})
ONLINE = (L.loss32, L.dloss32, L.square_grad32)


def test_the_table_is_consistent():
    codes = [loss.code for loss in L.LOSS_TABLE.values()]
    assert len(set(codes)) == len(codes) and all(0 <= c < 8 for c in codes)
    assert L.LOSSES == {name: loss.code for name, loss in L.LOSS_TABLE.items()}
    for name, loss in ROWS:
        assert loss.link in ("identity", "logistic"), name
        assert loss.metric in ("logloss", "mse", "hinge", "quantile"), name
        assert loss.clip in ("fixed", "labels", "labels50"), name
        assert tl.TrainOptions(loss=name, expectile_q=0.3).loss == name
    assert L.VW_DEFAULT_LOSS in L.LOSS_TABLE
    assert UNUSED, "a code must be left to prove that unknown codes raise"


@pytest.mark.parametrize("name,loss", ROWS)
def test_every_row_has_its_branch_in_every_kernel(name, loss):
    code = L.loss_code(name, tau=0.3, q=0.3)
    for p, y in ((0.3, 1.0), (-2.0, -1.0), (0.5, 2.0), (-1.0, 0.5)):
        if (loss.classes and abs(y) != 1.0) or (not loss.classes and y < 0):
            continue
        for kernel in ONLINE:
            assert math.isfinite(kernel(code, p, y)), (name, kernel)
        assert math.isfinite(L.invariant_update(code, p, y, 0.1, 0.5))
    assert L.by_sign(code) == loss.classes
    assert L.clip_mode(code) == ("fixed", "labels", "labels50").index(loss.clip)
    batch = (L.loss_value, L.dloss, L.d2loss)
    for kernel in batch:
        if loss.batch:
            assert math.isfinite(kernel(loss.code, 0.3, 1.0))
        else:  # no batch form: the batch kernels refuse it, they never compute another's
            with pytest.raises(ValueError, match="batch form"):
                kernel(loss.code, 0.3, 1.0)


@pytest.mark.parametrize("code", UNUSED)
def test_a_code_without_a_row_raises_in_every_kernel(code):
    for kernel in ONLINE + (L.loss_value, L.dloss, L.d2loss):
        with pytest.raises(ValueError):
            kernel(code, 0.3, 1.0)
    with pytest.raises(ValueError):
        L.invariant_update(code, 0.3, 1.0, 0.1, 0.5)
    with pytest.raises(ValueError):
        L.sgd_update32(code, 0.3, 1.0, 0.1)
    for form in (L.batch_value32, L.batch_first32, L.batch_second32):
        with pytest.raises(ValueError):
            form(code, np.zeros(2, np.float32), np.ones(2, np.float32), 0, 1)
    for kernel in (L.by_sign, L.clip_mode):
        with pytest.raises(ValueError, match="unknown loss code"):
            kernel(code)
    # the online pass itself: an example of an unknown loss raises, it trains nothing
    z = np.zeros(4, np.float32)
    with pytest.raises(ValueError):
        online_chunk(np.array([0, 1]), np.array([0], np.uint32), np.ones(1, np.float32),
                     np.ones(1, np.float32), np.ones(1, np.float32), np.zeros(1, np.bool_),
                     0, 1, z, z.copy(), z.copy(), new_state(), code, 0.5, 0.5, 0.0, 0.0,
                     np.zeros(8))


@pytest.mark.parametrize("name,loss", ROWS)
def test_derivatives_are_the_values_derivatives(name, loss):
    code = L.loss_code(name, tau=0.3, q=0.3)
    ys = (1.0, -1.0) if loss.classes else (1.7, -0.4)
    if name == "poisson":
        ys = (3.0, 0.5)
    # VW reports poisson's loss as the deviance, twice the negative log-likelihood whose
    # derivative it learns from
    half = 0.5 if name == "poisson" else 1.0
    h = 1e-3
    for y in ys:
        for p in (-0.9, 0.2, 1.1):
            num = half * (L.loss32(code, p + h, y) - L.loss32(code, p - h, y)) / (2 * h)
            assert L.dloss32(code, p, y) == pytest.approx(num, rel=2e-2, abs=2e-2), (name, p, y)
            if loss.batch:
                num = (L.loss_value(loss.code, p + h, y) -
                       L.loss_value(loss.code, p - h, y)) / (2 * h)
                assert L.dloss(loss.code, p, y) == pytest.approx(num, rel=1e-5, abs=1e-6)
                assert L.loss_value(loss.code, p, y) == pytest.approx(
                    L.loss32(code, p, y), rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("name,loss", ROWS)
def test_vws_own_learners_read_the_same_rows(name, loss):
    """``terascale vw``'s --sgd step and --bfgs forms are the row's: the plain step is the
    negative gradient times the rate, the float32 batch forms are the batch form's values
    and derivatives; a loss without one raises, it never takes another's."""
    code = L.loss_code(name, raw_labels=True, tau=0.3, q=0.3)
    if L.has_sgd_update(name):
        for p, y in ((0.3, 1.0), (-2.0, -1.0), (0.5, 2.0)):
            if loss.classes and abs(y) != 1.0 or not loss.classes and y < 0:
                continue
            assert L.sgd_update32(code, p, y, 0.25) == pytest.approx(
                -0.25 * L.dloss32(code, p, y), rel=1e-5, abs=1e-7), (name, p, y)
    else:
        with pytest.raises(ValueError, match="plain SGD"):
            L.sgd_update32(code, 0.3, 1.0, 0.25)
    p = np.linspace(-3, 3, 13).astype(np.float32)
    lo, hi = np.float32(-10), np.float32(10)
    forms = (L.batch_value32, L.batch_first32, L.batch_second32)
    if name not in L.vw_batch_losses():
        assert not loss.batch
        for form in forms:
            with pytest.raises(ValueError, match="batch form"):
                form(code, p, np.ones_like(p), lo, hi)
        return
    if not loss.batch:  # (expectile) the online kernels' values, inside the range
        for y in (np.float32(1), np.float32(-1)):
            ys = np.full_like(p, y)
            v, d1, d2 = (form(code, p, ys, lo, hi) for form in forms)
            assert all(a.dtype == np.float32 for a in (v, d1, d2))
            for i, pi in enumerate(p.tolist()):
                assert v[i] == L.loss32(code, pi, float(y)), (name, pi)
                assert d1[i] == L.dloss32(code, pi, float(y)), (name, pi)
                if pi != y:  # squared's 2, times the side's weight (the loss over d^2)
                    assert d2[i] == pytest.approx(2 * v[i] / (pi - y) ** 2, rel=1e-6)
        return
    assert name in L.batch_losses()
    for y in (np.float32(1), np.float32(-1)):
        ys = np.full_like(p, y)
        v, d1, d2 = (form(code, p, ys, lo, hi) for form in forms)
        assert all(a.dtype == np.float32 for a in (v, d1, d2))
        for i, pi in enumerate(p.tolist()):
            assert v[i] == pytest.approx(L.loss_value(loss.code, pi, float(y)), rel=1e-5,
                                         abs=1e-6), (name, pi)
            assert d1[i] == pytest.approx(L.dloss(loss.code, pi, float(y)), rel=1e-5,
                                          abs=1e-6), (name, pi)
            if name != "squared":  # (VW's squared: 2 inside the range, as the batch form)
                assert d2[i] == pytest.approx(L.d2loss(loss.code, pi, float(y)), rel=1e-4,
                                              abs=1e-6), (name, pi)
            else:
                assert d2[i] == 2.0


@pytest.mark.parametrize("name,loss", [r for r in ROWS if r[1].batch])
def test_curvature_is_the_batch_forms_largest_second_derivative(name, loss):
    grid = np.linspace(-20, 20, 4001)
    top = max(L.d2loss(loss.code, p, y) for p in grid for y in (-1.0, 1.0))
    assert top == pytest.approx(loss.curvature, rel=1e-6, abs=1e-12)


def test_the_paths_read_the_rows():
    y = np.array([1.0, 0.0, 1.0, 0.0])
    s = np.array([2.0, -1.0, 0.3, 0.4])
    for name, loss in ROWS:
        m = tl.evaluate_scores(y, s, name)
        assert ("logloss" in m) == (loss.link == "logistic"), name
        assert ("mse" in m) == (not loss.classes), name
    with pytest.raises(ConfigError, match="loss="):
        tl.evaluate_scores(y, s, "logstic")
    with pytest.raises(ConfigError, match="loss="):
        tl.TrainOptions(loss="logstic")
    # the online clip follows the row: logistic [-50, 50], squared the labels' range
    st = new_state(min_label=-1.0, max_label=1.0)
    assert L.clip_prediction(L.clip_mode(L.LOSSES["logistic"]), 70.0, st[MIN_LABEL],
                             st[MAX_LABEL]) == 50.0
    assert L.clip_prediction(L.clip_mode(L.LOSSES["squared"]), 70.0, st[MIN_LABEL],
                             st[MAX_LABEL]) == 1.0
    assert L.clip_prediction(L.clip_mode(L.LOSSES["poisson"]), 70.0, st[MIN_LABEL],
                             st[MAX_LABEL]) == 50.0


def _loss_name_comparisons(tree: ast.AST, text: str) -> list[tuple[int, str]]:
    """Comparisons of an expression that reads a loss (its text says ``loss`` or
    ``kind``) with a loss's name, or a tuple holding one (links of the same name, such as
    ``args.link == "logistic"``, are not losses)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        names = [n.value for n in sides if isinstance(n, ast.Constant)
                 and n.value in L.LOSS_TABLE]
        names += [e.value for n in sides if isinstance(n, (ast.Tuple, ast.List, ast.Set))
                  for e in n.elts if isinstance(e, ast.Constant) and e.value in L.LOSS_TABLE]
        if not names:
            continue  # (get_source_segment splits the whole text at each call: only here)
        other = " ".join(ast.get_source_segment(text, n) or "" for n in sides)
        if names and ("loss" in other or "kind" in other or ".name" in other) and \
                "link" not in other:
            found += [(node.lineno, n) for n in names]
    return found


def test_no_module_outside_the_table_names_a_loss():
    bad = []
    for path in sorted((SRC / "terascale").rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in ("terascale/linear/_losstable.py", "terascale/linear/_losses.py"):
            continue
        text = path.read_text()
        hits = _loss_name_comparisons(ast.parse(text), text)
        bad += [f"src/{rel}:{line}: {name!r}" for line, name in hits]
    assert not bad, ("read the loss's row (terascale.linear.LOSS_TABLE, loss_spec) "
                     "instead of comparing with its name:\n" + "\n".join(bad))
    probe = 'if model.loss == "logistic": pass\nif args.link == "logistic": pass\n' \
            'if kind in ("squared", "hinge"): pass\nif spec(m.loss).link == "logistic": pass\n'
    assert [n for _, n in _loss_name_comparisons(ast.parse(probe), probe)] == \
        ["logistic", "squared", "hinge"]


def test_vws_own_learners_refuse_a_loss_without_their_form(tmp_path, capfd):
    """``terascale vw --sgd`` and ``--bfgs`` ask the row, and say which losses they take."""
    from terascale.cli import main

    data = tmp_path / "q.vw"
    data.write_text("1 |a x:1\n2 |a y:2\n")
    assert not L.has_sgd_update("quantile") and L.has_sgd_update("squared")
    assert main(["vw", "-d", str(data), "--sgd", "--loss_function", "quantile"]) == 2
    assert "--loss_function quantile with --sgd is not supported" in capfd.readouterr().err
    assert main(["vw", "-d", str(data), "--bfgs", "--passes", "2", "--loss_function",
                 "quantile"]) == 2
    err = capfd.readouterr().err
    assert "quantile has no batch form" in err
    assert ", ".join(L.vw_batch_losses()) in err and "quantile" not in L.vw_batch_losses()


def test_expectile_weighs_the_two_sides_of_the_label_q_and_1_minus_q():
    """The q-expectile's loss is squared loss weighted q where the prediction is above the
    label and 1 - q below: its minimizer over a sample is the q-expectile (below the mean
    for q < 0.5)."""
    code = L.loss_code("expectile", q=0.2)
    assert L.loss32(code, 3.0, 1.0) == pytest.approx(0.2 * 4.0)
    assert L.loss32(code, -1.0, 1.0) == pytest.approx(0.8 * 4.0)
    assert L.square_grad32(code, 3.0, 1.0) == pytest.approx(0.04 * 16.0)
    ys = np.array([0.0, 1.0, 5.0])
    ps = np.linspace(-1, 6, 7001)
    best = ps[np.argmin([sum(L.loss32(code, p, y) for y in ys) for p in ps])]
    # 0.2 (e - 0) + 0.2 (e - 1) = 0.8 (5 - e): e = 3.5, the mean being 2
    assert best == pytest.approx(3.5, abs=2e-3)
    with pytest.raises(ConfigError, match="expectile_q"):
        tl.TrainOptions(loss="expectile", expectile_q=0.6)
