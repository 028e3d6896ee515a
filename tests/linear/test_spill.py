"""The batch phase's spill: blocks come back as written, one-hot blocks without values, and
a gradient pass over the spill equals one over the original arrays bit for bit."""

import numpy as np
import pytest

from terascale.linear._batch._optimizers import loss_grad
from terascale.linear._io._spill import Spill


def _block(rng, n, d, unit):
    lens = rng.integers(0, 6, n)
    indptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    nnz = int(indptr[-1])
    cols = rng.integers(0, d, nnz).astype(np.int32)
    values = (np.ones(nnz) if unit else rng.normal(size=nnz)).astype(np.float32)
    labels = np.where(rng.random(n) < 0.5, 1.0, -1.0).astype(np.float32)
    labels[rng.random(n) < 0.1] = np.nan
    weights = rng.uniform(0.0, 2.0, n).astype(np.float32)
    hold = rng.random(n) < 0.2
    return indptr, cols, values, labels, weights, hold


@pytest.mark.parametrize("kind", [0, 1, 2])
def test_spill_round_trip_and_gradient_bitwise(tmp_path, kind):
    rng = np.random.default_rng(3)
    d = 50
    blocks = [_block(rng, n, d, unit) for n, unit in ((40, True), (0, False), (33, False),
                                                      (1, True), (57, False))]
    w = rng.normal(size=d)
    want = np.zeros(2 * d + 4)
    with Spill(str(tmp_path)) as spill:
        start = 0
        for b in blocks:
            spill.add(start, *b)
            loss_grad(b[0], b[1], b[2], b[3], b[4], b[5], w, kind, want, True)
            start += len(b[3])
        assert len(spill) == len(blocks) and spill.nbytes > 0
        for _ in range(2):  # every pass reads the same
            got = np.zeros(2 * d + 4)
            start = 0
            for cb, b in zip(spill, blocks):
                assert cb.start == start and len(cb) == len(b[3])
                np.testing.assert_array_equal(cb.indptr, b[0])
                np.testing.assert_array_equal(cb.cols, b[1])
                np.testing.assert_array_equal(cb.labels, b[3])
                np.testing.assert_array_equal(cb.weights, b[4])
                np.testing.assert_array_equal(cb.hold, b[5])
                if len(b[1]) and np.all(b[2] == 1.0):
                    assert len(cb.values) == 0  # one-hot: no values stored
                else:
                    np.testing.assert_array_equal(cb.values, b[2])
                loss_grad(cb.indptr, cb.cols, cb.values, cb.labels, cb.weights, cb.hold, w,
                          kind, got, True)
                start += len(b[3])
            assert got.tobytes() == want.tobytes()
    assert list(tmp_path.iterdir()) == []  # the spill file never had a name


def test_a_sealed_spill_refuses_more_blocks(tmp_path):
    rng = np.random.default_rng(0)
    with Spill(str(tmp_path)) as spill:
        spill.add(0, *_block(rng, 5, 10, True))
        spill.seal()
        with pytest.raises(ValueError, match="sealed"):
            spill.add(5, *_block(rng, 5, 10, True))
        assert [len(b) for b in spill] == [5]


def test_dot_and_direction_are_fixed_order_and_match_numpy():
    from terascale.linear._batch._linalg import dot, lbfgs_direction

    rng = np.random.default_rng(1)
    for n in (0, 1, 3, 4, 7, 1001):
        a, b = rng.normal(size=n), rng.normal(size=n)
        assert dot(a, b) == pytest.approx(float(a @ b), rel=1e-12, abs=1e-12)
    d, m = 40, 3
    S, Y = rng.normal(size=(m, d)), rng.normal(size=(m, d))
    Y += 3 * S  # y . s > 0
    rho = 1.0 / np.einsum("ij,ij->i", S, Y)
    g, minv = rng.normal(size=d), rng.uniform(0.5, 2.0, d)
    order = np.array([2, 0, 1])
    q = -g.copy()  # the textbook two-loop recursion in numpy
    al = []
    for r in order[::-1]:
        al.append(rho[r] * (S[r] @ q))
        q -= al[-1] * Y[r]
    q *= minv * 0.7
    for r, a in zip(order, al[::-1]):
        q += (a - rho[r] * (Y[r] @ q)) * S[r]
    got = lbfgs_direction(g, S, Y, rho, order, minv, 0.7)
    np.testing.assert_allclose(got, q, rtol=1e-10, atol=1e-12)
    assert got.tobytes() == lbfgs_direction(g, S, Y, rho, order, minv, 0.7).tobytes()


def test_gradient_pass_one_thread_or_two_same_bits(tmp_path):
    from terascale.linear._passes import gradient_pass

    rng = np.random.default_rng(5)
    d = 30
    with Spill(str(tmp_path)) as spill:
        start = 0
        for n, unit in ((17, True), (0, True), (40, False), (3, False), (21, True)):
            b = _block(rng, n, d, unit)
            spill.add(start, *b)
            start += n
        w = rng.normal(size=d)
        for diag in (False, True):
            one, two = (np.zeros(2 * d + 4 if diag else d + 4) for _ in range(2))
            gradient_pass(spill, w, 0, one, diag, threads=1)
            gradient_pass(spill, w, 0, two, diag, threads=2)
            assert one.tobytes() == two.tobytes()
            again = np.zeros_like(one)  # the mapped file and the scratch buffer, reused
            gradient_pass(spill, w, 0, again, diag, threads=1)
            assert again.tobytes() == one.tobytes()
            base = rng.normal(size=len(one))  # a pass adds into what out holds
            more = base.copy()
            gradient_pass(spill, w, 0, more, diag, threads=1)
            assert more.tobytes() == (base + one).tobytes()
            ref = np.zeros_like(one)  # the same sums, in another order
            for cb in spill:
                loss_grad(cb.indptr, cb.cols, cb.values, cb.labels, cb.weights, cb.hold, w,
                          0, ref, diag)
            np.testing.assert_allclose(one, ref, rtol=1e-12, atol=1e-12)


def test_an_unwritable_spill_directory_is_a_storage_error_naming_it(tmp_path):
    from terascale import StorageError

    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(StorageError, match="spill file in .*file"):
        Spill(str(blocker / "sub"))


def test_a_pass_over_many_blocks_reuses_buffers_without_overwriting(tmp_path):
    import time

    rng = np.random.default_rng(7)
    blocks = [_block(rng, int(n), 20, bool(n % 2)) for n in rng.integers(1, 30, 12)]
    with Spill(str(tmp_path)) as spill:
        start = 0
        for b in blocks:
            spill.add(start, *b)
            start += len(b[3])
        for cb, b in zip(spill, blocks):
            time.sleep(0.01)  # the reader runs ahead as far as it may meanwhile
            np.testing.assert_array_equal(cb.indptr, b[0])
            np.testing.assert_array_equal(cb.cols, b[1])
            np.testing.assert_array_equal(cb.labels, b[3])
            np.testing.assert_array_equal(cb.hold, b[5])
