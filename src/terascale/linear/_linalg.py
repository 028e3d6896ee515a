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

__all__ = ["dot", "lbfgs_direction"]


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
def lbfgs_direction(g: np.ndarray, S: np.ndarray, Y: np.ndarray, rho: np.ndarray,
                    order: np.ndarray, minv: np.ndarray, gamma: float) -> np.ndarray:
    """``-H g`` for the L-BFGS inverse Hessian of the pairs ``S[order[k]], Y[order[k]]``
    (oldest first; ``rho = 1 / (y . s)`` per row) with ``H0 = gamma * diag(minv)``."""
    d = len(g)
    m = len(order)
    q = np.empty(d)
    for j in range(d):
        q[j] = -g[j]
    alphas = np.empty(m)
    for k in range(m - 1, -1, -1):
        r = order[k]
        a = rho[r] * _dot(S[r], q)
        alphas[k] = a
        y = Y[r]
        for j in range(d):
            q[j] -= a * y[j]
    for j in range(d):
        q[j] *= minv[j]
        q[j] *= gamma
    for k in range(m):
        r = order[k]
        c = alphas[k] - rho[r] * _dot(Y[r], q)
        s = S[r]
        for j in range(d):
            q[j] += c * s[j]
    return q
