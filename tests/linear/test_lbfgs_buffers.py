"""The batch phase's in-place algebra: the kernels that replace numpy's temporaries give
numpy's numbers, the raw weights computed in place give the iterate back bit for bit, and
L-BFGS on reused buffers reaches the optimum of a small problem."""

import math

import numpy as np
import pytest

from terascale.linear._batch._linalg import (
    axpy,
    axpy_dot,
    dot,
    lbfgs_direction,
    lbfgs_direction_into,
    step,
    store_pair,
    weighted_dot,
)
from terascale.linear._batch._normalize import Reparam
from terascale.linear._batch._optimizers import lbfgs


def test_axpy_and_weighted_dot_give_numpys_numbers():
    rng = np.random.default_rng(3)
    for n in (0, 1, 5, 1003):
        y, x = rng.normal(size=n), rng.normal(size=n)
        want = y + 0.37 * x
        axpy(y, 0.37, x)
        assert y.tobytes() == want.tobytes()  # numpy's bits: no fused multiply-add
        a = rng.normal(size=n).astype(np.float32)
        m = rng.uniform(0.1, 2.0, n).astype(np.float32)
        ref = float(np.sum(a.astype(np.float64) * (m.astype(np.float64) * a)))
        assert weighted_dot(a, m, a) == pytest.approx(ref, rel=1e-12, abs=1e-12)
        # the fused sweeps: numpy's bits, and the dots of _dot's order
        v, q, t = rng.normal(size=n), rng.normal(size=n), np.empty(n)
        step(t, v, q, -0.3)
        assert t.tobytes() == (v + -0.3 * q).tobytes()
        z, want = y.copy(), y + 1.5 * v
        assert axpy_dot(z, 1.5, v) == dot(v, v) and z.tobytes() == want.tobytes()
        gn, g = rng.normal(size=n), rng.normal(size=n)
        s32, y32 = np.empty(n, np.float32), np.empty(n, np.float32)
        sy, yy, ymy = store_pair(q, 0.7, gn, g, s32, y32, m)
        assert s32.tobytes() == (0.7 * q).astype(np.float32).tobytes()
        assert y32.tobytes() == (gn - g).astype(np.float32).tobytes()
        s64, y64 = s32.astype(np.float64), y32.astype(np.float64)
        assert sy == pytest.approx(float(s64 @ y64), rel=1e-12, abs=1e-12)
        assert yy == pytest.approx(float(y64 @ y64), rel=1e-12, abs=1e-12)
        assert ymy == pytest.approx(float(y64 @ (m * y64)), rel=1e-12, abs=1e-12)


def test_direction_into_a_reused_vector_is_the_fresh_one_bit_for_bit():
    rng = np.random.default_rng(4)
    d, m = 257, 4
    S = rng.normal(size=(m, d)).astype(np.float32)
    Y = (3 * S + rng.normal(size=(m, d)).astype(np.float32)).astype(np.float32)
    rho = 1.0 / np.array([dot(S[r], Y[r]) for r in range(m)])
    g, minv = rng.normal(size=d), rng.uniform(0.5, 2.0, d).astype(np.float32)
    order = np.array([1, 3, 0, 2])
    q = np.full(d, np.nan)  # whatever the buffer held before
    slope = lbfgs_direction_into(g, S, Y, rho, order, minv, 0.4, q)
    assert q.tobytes() == lbfgs_direction(g, S, Y, rho, order, minv, 0.4).tobytes()
    assert slope == dot(g, q) < 0  # a descent direction, its slope as dot() sums it
    assert lbfgs_direction_into(g, S, Y, rho, order[:0], minv, 0.4, q) == dot(g, q)


@pytest.mark.parametrize("bias", [-1, 2])
def test_raw_weights_in_place_are_forward_and_restore_exactly(bias):
    rng = np.random.default_rng(5)
    d = 50
    idx = np.array([0, 7, 9, 31])
    rep = Reparam.on(d, idx, rng.normal(size=4), rng.uniform(0.1, 9.0, 4), bias)
    v = rng.normal(size=d)
    keep = v.copy()
    want = rep.forward(v)
    saved = rep.to_raw(v)
    assert v.tobytes() == want.tobytes()
    rep.restore(v, saved)
    assert v.tobytes() == keep.tobytes()
    # the sparse map is the dense one: mean and scale rebuilt, the Gram diagonal
    full = Reparam(rep.mean, rep.scale, bias)
    assert full.forward(keep).tobytes() == want.tobytes()
    np.testing.assert_array_equal(full.gram_diag(), rep.gram_diag())


class _Logistic:
    """A small logistic regression with l2 as an Objective: f and its gradient into the
    caller's buffer, plus a holdout loss over other rows."""

    def __init__(self, seed: int) -> None:
        rng = np.random.default_rng(seed)
        self.X = rng.normal(size=(400, 12))
        w = rng.normal(size=12)
        self.y = np.where(rng.random(400) < 1 / (1 + np.exp(-self.X @ w)), 1.0, -1.0)
        self.size, self.width = 12, 16
        self.calls = 0

    def value(self, v: np.ndarray) -> tuple[float, np.ndarray]:
        z = self.y * (self.X @ v)
        f = float(np.sum(np.logaddexp(0.0, -z))) + 0.5 * float(v @ v)
        g = -(self.X.T @ (self.y / (1.0 + np.exp(z)))) + v
        return f, g

    def __call__(self, v: np.ndarray, out: np.ndarray) -> tuple[float, float]:
        self.calls += 1
        f, g = self.value(v)
        out[:12] = g
        out[12:] = -1.0  # the objective's own scratch: L-BFGS must not read it
        return f, math.nan


def test_lbfgs_on_buffers_reaches_the_optimum_and_never_allocates_per_pass():
    from scipy.optimize import minimize

    obj = _Logistic(6)
    ref = minimize(obj.value, np.zeros(12), jac=True, method="L-BFGS-B",
                   options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10_000})
    w0 = np.zeros(12)
    res = lbfgs(obj, w0, max_passes=200, memory=5, tol=1e-15)
    assert res.objective == pytest.approx(ref.fun, rel=1e-9)
    np.testing.assert_allclose(res.w, ref.x, atol=1e-4)
    assert res.passes == obj.calls
    again = lbfgs(obj, np.zeros(12), max_passes=200, memory=5, tol=1e-15)
    assert again.w.tobytes() == res.w.tobytes()  # the same bits, run after run
    # in a workspace handed over (the batch phase's statistics array): the same bits
    work = np.full(2 * obj.width + 2 * 12, np.nan)
    inside = lbfgs(obj, np.zeros(12), max_passes=200, memory=5, tol=1e-15, work=work)
    assert inside.w.tobytes() == res.w.tobytes()


def test_swept_arrays_start_unwritten_and_hold_what_is_written():
    from terascale.linear._batch._optimizers import swept_array

    a = swept_array((3, 5), np.float32)
    assert a.shape == (3, 5) and a.dtype == np.float32 and a.flags.writeable
    assert not a.any()  # an anonymous mapping: zero pages until written
    a[1] = np.arange(5)
    assert a.sum() == 10.0 and a[1].flags.c_contiguous
    assert swept_array((0,), np.float64).shape == (0,)


def _first_pass_both_ways(comm, spill_dir):
    from terascale.linear._batch._batchphase import _first_pass
    from terascale.linear._io._spill import Spill

    rng = np.random.default_rng(8)
    d = 40
    with Spill(spill_dir) as spill:
        start = 0
        for k in range(5):
            n = int(rng.integers(1, 30))
            lens = rng.integers(0, 6, n)
            indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
            nnz = int(indptr[-1])
            cols = rng.integers(0, d, nnz).astype(np.uint32)
            values = (np.ones(nnz) if k % 2 else rng.normal(size=nnz)).astype(np.float32)
            labels = np.where(rng.random(n) < 0.5, 1.0, -1.0).astype(np.float32)
            spill.add(start, indptr, cols, values, labels,
                      rng.uniform(0.1, 2.0, n).astype(np.float32), rng.random(n) < 0.2)
            start += n
        spill.seal()
        w = rng.normal(size=d)
        return [tuple(a.copy() for a in _first_pass(None, None, 10, w, 0, False, comm, spill,
                                                     threads))
                for threads in (1, 2)]


def test_the_statistics_pass_gives_the_same_bits_in_one_thread_or_two(tmp_path):
    from terascale.testing import run_workers

    [(one, two)] = run_workers(_first_pass_both_ways, 1, args=(str(tmp_path),), timeout=60)
    for a, b in zip(one, two):
        assert a.tobytes() == b.tobytes()
    assert one[1][-1] > 0 and np.any(one[0][:40])  # weights summed, a gradient


def test_vws_batch_sums_a_chunk_at_a_time_add_in_turn():
    """``terascale vw --bfgs``'s float64 sums over 2^b vectors, made a chunk at a time
    without the whole temporaries: each term added after the one before, as VW's loops
    over the weights add, to the bit, at every size."""
    from terascale.linear._vw._vwbatch import _SUM_CHUNK, _product_sum, _sum64

    rng = np.random.default_rng(5)
    for n in (7, 1000, 2 * _SUM_CHUNK, 1 << 19, 3 * _SUM_CHUNK):
        a = (rng.normal(size=n) * 10.0 ** rng.integers(-6, 6, n)).astype(np.float32)
        b = rng.normal(size=n).astype(np.float32)
        c = rng.random(n).astype(np.float32)
        a64 = a.astype(np.float64)
        want = 0.0
        for v in (a64 * a64 * c).tolist():
            want += v
        assert _sum64(lambda k, a=a, c=c: a[k].astype(np.float64) * a[k].astype(np.float64)
                      * c[k],
                      n) == want
        want = 0.0
        for v in (a64 * b).tolist():
            want += v
        assert _product_sum(a, b) == want
