"""The batch optimizers' vector algebra, in numba: dot products and the L-BFGS direction.

Why not numpy's ``@``: it calls a multi-threaded BLAS, whose threads for one dot product of
10^5 entries cost more than the product (OpenBLAS on 2 busy cores: 1.5 ms of CPU and up to
7 ms of wall time per product, against ~30 us here), and whose summation order depends on
the thread count and the CPU's kernels. Here every sum runs in one fixed order (four
interleaved partial sums, then ``(s0 + s1) + (s2 + s3)``, then the tail): the same bits on
every machine, every rank and every run, which the batch phase's determinism needs.

:func:`lbfgs_direction` is Nocedal's two-loop recursion (*Updating Quasi-Newton Matrices
with Limited Storage*, Math. Comp. 1980; Nocedal & Wright, *Numerical Optimization*, Alg.
7.4) over pairs kept in a ring buffer of rows, with the initial inverse Hessian
``gamma * diag(minv)`` (sec. 7.2).
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["axpy", "axpy_dot", "dot", "lbfgs_direction", "lbfgs_direction_into", "step",
           "store_pair", "weighted_dot"]


@numba.njit(cache=True, nogil=True)
def _dot(a: np.ndarray, b: np.ndarray) -> float:
    n = len(a)
    s0 = s1 = s2 = s3 = 0.0
    m = n - n % 4
    for i in range(0, m, 4):
        s0 += a[i] * b[i]
        s1 += a[i + 1] * b[i + 1]
        s2 += a[i + 2] * b[i + 2]
        s3 += a[i + 3] * b[i + 3]
    s = (s0 + s1) + (s2 + s3)
    for i in range(m, n):
        s += a[i] * b[i]
    return s


def dot(a: np.ndarray, b: np.ndarray) -> float:
    """``a @ b`` for float64 vectors, in a fixed order (see the module's docstring)."""
    return float(_dot(a, b))


@numba.njit(cache=True, nogil=True)
def _axpy(y: np.ndarray, a: float, x: np.ndarray) -> None:
    for i in range(len(y)):
        y[i] += a * x[i]


def axpy(y: np.ndarray, a: float, x: np.ndarray) -> None:
    """``y += a * x`` in place, the same bits as numpy's ``y += a * x`` without its
    temporary ``a * x`` (a fresh vector of the model's size, whose pages the system must
    zero on every call)."""
    _axpy(y, float(a), x)


@numba.njit(cache=True, nogil=True)
def _axpy_self_dot(y: np.ndarray, a: float, x: np.ndarray) -> float:
    n = len(y)
    s0 = s1 = s2 = s3 = 0.0
    k = n - n % 4
    for i in range(0, k, 4):
        y[i] += a * x[i]
        y[i + 1] += a * x[i + 1]
        y[i + 2] += a * x[i + 2]
        y[i + 3] += a * x[i + 3]
        s0 += x[i] * x[i]
        s1 += x[i + 1] * x[i + 1]
        s2 += x[i + 2] * x[i + 2]
        s3 += x[i + 3] * x[i + 3]
    s = (s0 + s1) + (s2 + s3)
    for i in range(k, n):
        y[i] += a * x[i]
        s += x[i] * x[i]
    return s


def axpy_dot(y: np.ndarray, a: float, x: np.ndarray) -> float:
    """:func:`axpy` and then ``dot(x, x)``, in one sweep (the l2 term's gradient and
    value), the same bits as the two apart."""
    return float(_axpy_self_dot(y, float(a), x))


@numba.njit(cache=True, nogil=True)
def _step(t: np.ndarray, v: np.ndarray, q: np.ndarray, a: float) -> None:
    for i in range(len(t)):
        t[i] = v[i] + a * q[i]


def step(t: np.ndarray, v: np.ndarray, q: np.ndarray, a: float) -> None:
    """``t = v + a * q`` in one sweep, the same bits as numpy's ``v + a * q``."""
    _step(t, v, q, float(a))


@numba.njit(cache=True, nogil=True)
def _store_pair(q: np.ndarray, a: float, gn: np.ndarray, g: np.ndarray, s: np.ndarray,
                y: np.ndarray, minv: np.ndarray) -> tuple[float, float, float]:
    n = len(q)
    sy = yy = ymy = 0.0
    # one running sum each, in index order (the pair's own numbers, not reused elsewhere)
    for i in range(n):
        si = np.float32(a * q[i])
        yi = np.float32(gn[i] - g[i])
        s[i] = si
        y[i] = yi
        sf, yf = np.float64(si), np.float64(yi)
        sy += sf * yf
        yy += yf * yf
        ymy += yf * (np.float64(minv[i]) * yf)
    return sy, yy, ymy


def store_pair(q: np.ndarray, a: float, gn: np.ndarray, g: np.ndarray, s: np.ndarray,
               y: np.ndarray, minv: np.ndarray) -> tuple[float, float, float]:
    """L-BFGS's new pair in one sweep: ``s = a q`` and ``y = gn - g`` rounded into the
    float32 rows ``s`` and ``y``, and, of the pair as stored, ``(s . y, y . y, y . minv
    y)`` (the curvature test, and the next direction's scaling ``gamma``)."""
    sy, yy, ymy = _store_pair(q, float(a), gn, g, s, y, minv)
    return float(sy), float(yy), float(ymy)


@numba.njit(cache=True, nogil=True)
def _weighted_dot(a: np.ndarray, m: np.ndarray, b: np.ndarray) -> float:
    n = len(a)
    s0 = s1 = s2 = s3 = 0.0
    k = n - n % 4
    for i in range(0, k, 4):
        s0 += np.float64(a[i]) * (np.float64(m[i]) * np.float64(b[i]))
        s1 += np.float64(a[i + 1]) * (np.float64(m[i + 1]) * np.float64(b[i + 1]))
        s2 += np.float64(a[i + 2]) * (np.float64(m[i + 2]) * np.float64(b[i + 2]))
        s3 += np.float64(a[i + 3]) * (np.float64(m[i + 3]) * np.float64(b[i + 3]))
    s = (s0 + s1) + (s2 + s3)
    for i in range(k, n):
        s += np.float64(a[i]) * (np.float64(m[i]) * np.float64(b[i]))
    return s


def weighted_dot(a: np.ndarray, m: np.ndarray, b: np.ndarray) -> float:
    """``sum a * m * b`` in float64 and :func:`dot`'s fixed order, without a temporary."""
    return float(_weighted_dot(a, m, b))


@numba.njit(cache=True, nogil=True, inline="always")
def _axpy_dot(q: np.ndarray, c: float, x: np.ndarray, z: np.ndarray) -> float:
    """``q += c * x`` and then ``z . q`` (of the updated ``q``) in one sweep over memory,
    summed in :func:`_dot`'s order; ``z`` may be empty: the sweep only updates ``q``."""
    n = len(q)
    s0 = s1 = s2 = s3 = 0.0
    if len(z) == 0:
        for j in range(n):
            q[j] += c * x[j]
        return 0.0
    m = n - n % 4
    for i in range(0, m, 4):
        q[i] += c * x[i]
        q[i + 1] += c * x[i + 1]
        q[i + 2] += c * x[i + 2]
        q[i + 3] += c * x[i + 3]
        s0 += z[i] * q[i]
        s1 += z[i + 1] * q[i + 1]
        s2 += z[i + 2] * q[i + 2]
        s3 += z[i + 3] * q[i + 3]
    s = (s0 + s1) + (s2 + s3)
    for i in range(m, n):
        q[i] += c * x[i]
        s += z[i] * q[i]
    return s


@numba.njit(cache=True, nogil=True, inline="always")
def _scale_dot(q: np.ndarray, minv: np.ndarray, gamma: float, z: np.ndarray) -> float:
    """``q *= minv; q *= gamma`` and then ``z . q``, in one sweep (``z`` may be empty)."""
    n = len(q)
    s0 = s1 = s2 = s3 = 0.0
    m = n - n % 4 if len(z) else 0
    for i in range(0, m, 4):
        for t in range(4):
            q[i + t] *= minv[i + t]
            q[i + t] *= gamma
        s0 += z[i] * q[i]
        s1 += z[i + 1] * q[i + 1]
        s2 += z[i + 2] * q[i + 2]
        s3 += z[i + 3] * q[i + 3]
    s = (s0 + s1) + (s2 + s3)
    for i in range(m, n):
        q[i] *= minv[i]
        q[i] *= gamma
        if len(z):
            s += z[i] * q[i]
    return s


@numba.njit(cache=True, nogil=True)
def lbfgs_direction(g: np.ndarray, S: np.ndarray, Y: np.ndarray, rho: np.ndarray,
                    order: np.ndarray, minv: np.ndarray, gamma: float) -> np.ndarray:
    """:func:`lbfgs_direction_into` a fresh vector."""
    q = np.empty(len(g))
    lbfgs_direction_into(g, S, Y, rho, order, minv, gamma, q)
    return q


@numba.njit(cache=True, nogil=True)
def lbfgs_direction_into(g: np.ndarray, S: np.ndarray, Y: np.ndarray, rho: np.ndarray,
                         order: np.ndarray, minv: np.ndarray, gamma: float,
                         q: np.ndarray) -> float:
    """``q = -H g`` (``q`` a float64 vector the caller owns, reused every iteration) for the
    L-BFGS inverse Hessian of the pairs ``S[order[k]], Y[order[k]]``
    (oldest first; ``rho = 1 / (y . s)`` per row) with ``H0 = gamma * diag(minv)``.

    Each update of ``q`` is fused with the dot product the recursion needs next (the next
    pair's ``s . q`` in the first loop, ``y . q`` in the second), so the two loops sweep
    the ``2m`` float32 rows and ``q`` once each per pair instead of twice: on wide data the
    direction is memory-bound, and the sums keep :func:`_dot`'s fixed order. The last
    sweep also sums ``g . q``, which it returns (the line search's slope, the same bits
    as ``dot(g, q)``)."""
    d = len(g)
    m = len(order)
    none = S[0][:0]
    for j in range(d):
        q[j] = -g[j]
    alphas = np.empty(m)
    sq = _dot(S[order[m - 1]], q) if m else 0.0
    for k in range(m - 1, -1, -1):
        r = order[k]
        a = rho[r] * sq
        alphas[k] = a
        sq = _axpy_dot(q, -a, Y[r], S[order[k - 1]] if k > 0 else none)
    if m == 0:
        return _scale_dot(q, minv, gamma, g)
    yq = _scale_dot(q, minv, gamma, Y[order[0]])
    for k in range(m - 1):
        r = order[k]
        c = alphas[k] - rho[r] * yq
        yq = _axpy_dot(q, c, S[r], Y[order[k + 1]])
    r = order[m - 1]
    return _axpy_dot(q, alphas[m - 1] - rho[r] * yq, S[r], g)
