/* The sparse products of VW's batch learner (terascale vw --bfgs, _vwbatch.py) over the
 * examples' CSR rows, exported to _vwfast's method table: X times a weight vector (each
 * example's float sum of value x weight, its features in order, as VW's predict adds
 * them) and X's transpose times a per-example vector (each feature's sum of its
 * occurrences' terms x the example's value, in the examples' order, as VW's gradient
 * adds them). Each sum rounds every product and addition in its type, as numpy's
 * np.add.at over the same terms does (the fallback where the module is not built). An
 * index beyond the output stops the loop with an error (the output then half-written). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "_vwsparse.h"

/* the CSR rows' arrays: n + 1 offsets (ptr_len bytes) into nnz occurrences (and as many
 * values), from 0 or more, never decreasing; NULL where they agree, else what is wrong */
static const char *rows_check(const int64_t *ptr, Py_ssize_t ptr_len, Py_ssize_t n,
                              Py_ssize_t nnz, Py_ssize_t values) {
    if (ptr_len / 8 != n + 1 || values != nnz || (n && (ptr[0] < 0 || ptr[n] > nnz)))
        return "the rows' arrays disagree";
    for (Py_ssize_t i = 0; i < n; i++)
        if (ptr[i] > ptr[i + 1])
            return "indptr decreases";
    return NULL;
}

/* rows_dot(indptr int64, indices uint32, values float32, w float32, out float32):
 * out[i] = sum over row i of values[k] * w[indices[k]] */
PyObject *vw_rows_dot(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bp, bi, bv, bw, bo;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*", &bp, &bi, &bv, &bw, &bo))
        return NULL;
    Py_ssize_t n = bo.len / 4, nw = bw.len / 4, nnz = bi.len / 4;
    const int64_t *ptr = bp.buf;
    const uint32_t *idx = bi.buf;
    const float *val = bv.buf, *w = bw.buf;
    float *out = bo.buf;
    const char *err = rows_check(ptr, bp.len, n, nnz, bv.len / 4);
    if (!err) {
        int bad = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n && !bad; i++) {
            float s = 0.0f;
            for (int64_t k = ptr[i]; k < ptr[i + 1]; k++) {
                Py_ssize_t j = idx[k];
                bad |= j >= nw;
                s += val[k] * w[j < nw ? j : 0];  /* (a select: no branch in the sum) */
            }
            out[i] = s;
        }
        Py_END_ALLOW_THREADS
        if (bad)
            err = "a feature index beyond the weights";
    }
    PyBuffer_Release(&bp);
    PyBuffer_Release(&bi);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&bw);
    PyBuffer_Release(&bo);
    if (err) {
        PyErr_Format(PyExc_ValueError, "rows_dot: %s", err);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* cols_add(indptr int64, indices uint32, terms, v, out, double): out[indices[k]] +=
 * terms[k] * v[i] for each occurrence k of row i, in order; terms, v and out float32, or
 * float64 where double is true */
PyObject *vw_cols_add(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bp, bi, bt, bv, bo;
    int dbl;
    if (!PyArg_ParseTuple(args, "y*y*y*y*w*p", &bp, &bi, &bt, &bv, &bo, &dbl))
        return NULL;
    Py_ssize_t sz = dbl ? 8 : 4;
    Py_ssize_t n = bv.len / sz, nout = bo.len / sz, nnz = bi.len / 4;
    const int64_t *ptr = bp.buf;
    const uint32_t *idx = bi.buf;
    const char *err = rows_check(ptr, bp.len, n, nnz, bt.len / sz);
    if (!err) {
        int bad = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < n && !bad; i++)
            for (int64_t k = ptr[i]; k < ptr[i + 1]; k++) {
                if ((Py_ssize_t)idx[k] >= nout) {
                    bad = 1;
                    break;
                }
                if (dbl)
                    ((double *)bo.buf)[idx[k]] += ((const double *)bt.buf)[k]
                                                  * ((const double *)bv.buf)[i];
                else
                    ((float *)bo.buf)[idx[k]] += ((const float *)bt.buf)[k]
                                                 * ((const float *)bv.buf)[i];
            }
        Py_END_ALLOW_THREADS
        if (bad)
            err = "a feature index beyond the output";
    }
    PyBuffer_Release(&bp);
    PyBuffer_Release(&bi);
    PyBuffer_Release(&bt);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&bo);
    if (err) {
        PyErr_Format(PyExc_ValueError, "cols_add: %s", err);
        return NULL;
    }
    Py_RETURN_NONE;
}
