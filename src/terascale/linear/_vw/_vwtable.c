/* What the one-worker compiled run (terascale.linear._vw._vwonline) does with a parsed
 * chunk and its dense table besides learning, in C, so that the run needs no array
 * library: a chunk's counts for the closing block, the model and the progress lines
 * (counts), the table's rows in use as VW's weight records (records), and a table put
 * back from such records (restore: the early stop's best pass), and its predictions as
 * -p writes them (predicted). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_vwtable.h"

/* counts' sums over the chunk's n examples (its arguments as buffers; hold, ignored,
 * cum_w, cum_n NULL for none): also what _vwlearn.c's passes adds each pass */
void chunk_counts(const int64_t *indptr, const float *labels, const float *weights,
                  const uint8_t *hold, const int64_t *ignored, Py_ssize_t n, double *sums,
                  double *cum_w, int64_t *cum_n, double seen_w, long long seen_n) {
    double local = 0.0;
    int64_t kept_n = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        double w = (double)weights[i];
        int unl = isnan(labels[i]);
        int held = hold && hold[i];
        int kept = unl || !held;
        if (unl) {
            sums[0] += w;
            sums[4] += w;
        }
        sums[5] += w;
        if (kept) {
            int64_t f = indptr[i + 1] - indptr[i] + (ignored ? ignored[i] : 0);
            sums[1] += 1.0;
            sums[2] += (double)f;
            kept_n++;
            local += w;
        }
        if (!unl && !held) {
            double lw = (double)labels[i] * w;
            sums[3] += lw;
        }
        if (cum_w)
            cum_w[i] = seen_w + local;
        if (cum_n)
            cum_n[i] = seen_n + kept_n;
    }
}

/* counts(indptr, labels, weights, hold, ignored, sums, cum_w, cum_n, seen_w, seen_n):
 * over a chunk of n examples (hold: a byte each, nonzero where held out, empty for none;
 * ignored: --ignore_linear's int64 count each, empty for none), adds to sums (doubles,
 * each example in turn, in its order): [0] the unlabelled examples' weight, [1] the
 * examples not held out (the unlabelled ones always count), [2] their features, [3] label
 * x weight of the labelled examples not held out (VW's weighted_labels), [4] the
 * unlabelled examples' weight and [5] every example's (VW's weighted_unlabeled_examples
 * and t). cum_w/cum_n (n each, or empty): the weight and examples not held out up to
 * each example, from seen_w/seen_n (the weight a running double sum from 0 within the
 * chunk, then added to seen_w, as the progress lines cut it). */
PyObject *vw_counts(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bp, bl, bw, bh, bi, bs, bc, bn;
    double seen_w;
    long long seen_n;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*w*w*dL", &bp, &bl, &bw, &bh, &bi, &bs, &bc,
                          &bn, &seen_w, &seen_n))
        return NULL;
    Py_ssize_t n = bl.len / 4;
    const char *err = NULL;
    if (bw.len / 4 < n || bp.len / 8 < n + 1 || (bh.len && bh.len < n) ||
        (bi.len && bi.len / 8 < n) || bs.len < 6 * 8 || (bc.len && bc.len / 8 < n) ||
        (bn.len && bn.len / 8 < n))
        err = "counts: a buffer is shorter than the chunk's examples";
    if (!err)
        chunk_counts(bp.buf, bl.buf, bw.buf, bh.len ? bh.buf : NULL, bi.len ? bi.buf : NULL,
                     n, bs.buf, bc.len ? bc.buf : NULL, bn.len ? bn.buf : NULL, seen_w, seen_n);
    PyBuffer_Release(&bp);
    PyBuffer_Release(&bl);
    PyBuffer_Release(&bw);
    PyBuffer_Release(&bh);
    PyBuffer_Release(&bi);
    PyBuffer_Release(&bs);
    PyBuffer_Release(&bc);
    PyBuffer_Release(&bn);
    if (err) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* records(table, start, mask, out) -> (records, next row): from row `start` of the
 * table (rows of 3 floats), VW's weight records of the rows where a column of `mask`
 * (bit j: column j) is not 0: the row's index (uint32), then those columns' floats, as
 * many as `out` holds; `next row` is where the next call starts (the table's rows: done) */
PyObject *vw_records(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bt, bo;
    Py_ssize_t start;
    int mask;
    if (!PyArg_ParseTuple(args, "y*niw*", &bt, &start, &mask, &bo))
        return NULL;
    Py_ssize_t rows = bt.len / 12, count = 0, r = start;
    int cols = (mask & 1) + ((mask >> 1) & 1) + ((mask >> 2) & 1);
    Py_ssize_t size = 4 + 4 * (Py_ssize_t)cols, room = bo.len / size;
    const char *err = NULL;
    if (mask < 1 || mask > 7 || start < 0)
        err = "records: mask out of 1..7, or a negative start";
    if (!err) {
        const float *t = bt.buf;
        uint8_t *out = bo.buf;
        Py_BEGIN_ALLOW_THREADS
        for (; r < rows && count < room; r++) {
            const float *row = t + 3 * r;
            float v[3];
            int k = 0, any = 0;
            for (int j = 0; j < 3; j++)
                if (mask >> j & 1) {
                    v[k] = row[j];
                    any |= v[k++] != 0.0f;
                }
            if (!any)
                continue;
            uint32_t idx = (uint32_t)r;
            memcpy(out, &idx, 4);
            memcpy(out + 4, v, 4 * (size_t)k);
            out += size;
            count++;
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&bt);
    PyBuffer_Release(&bo);
    if (err) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    return Py_BuildValue("nn", count, r);
}

/* restore(table, records): the table's rows in use zeroed, then each record of `records` (records'
 * of mask 7: a uint32 row index and the row's 3 floats) put back in its row */
PyObject *vw_restore(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bt, br;
    if (!PyArg_ParseTuple(args, "w*y*", &bt, &br))
        return NULL;
    Py_ssize_t rows = bt.len / 12, n = br.len / 16;
    const char *err = br.len % 16 ? "restore: records of 16 bytes each" : NULL;
    const uint8_t *rec = br.buf;
    for (Py_ssize_t k = 0; !err && k < n; k++) {
        uint32_t idx;
        memcpy(&idx, rec + 16 * k, 4);
        if ((Py_ssize_t)idx >= rows)
            err = "restore: a record past the table";
    }
    if (!err) {
        /* the rows in use zeroed, not the whole table: a row no example reached keeps a
         * page never written (reading it maps the shared zero page), as VW's array */
        uint32_t *t32 = bt.buf;
        for (Py_ssize_t r = 0; r < rows; r++) {
            uint32_t *row = t32 + 3 * (size_t)r;
            if (row[0] | row[1] | row[2])
                row[0] = row[1] = row[2] = 0;
        }
        float *t = bt.buf;
        for (Py_ssize_t k = 0; k < n; k++) {
            uint32_t idx;
            memcpy(&idx, rec + 16 * k, 4);
            memcpy(t + 3 * (size_t)idx, rec + 16 * k + 4, 12);
        }
    }
    PyBuffer_Release(&bt);
    PyBuffer_Release(&br);
    if (err) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* predicted(src, dst, code): -p's values of the float64 scores src into dst (float64, as
 * long), each a float32 as VW's are: code -2 --binary's signs (a score of 0 or NaN is -1),
 * -1 the score, 0..2 _vwfast.link's --link of it in float (logistic, glf1, poisson) */
PyObject *vw_predicted(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bs, bd;
    int code;
    if (!PyArg_ParseTuple(args, "y*w*i", &bs, &bd, &code))
        return NULL;
    if (bs.len != bd.len || bs.len % 8 || code < -2 || code > 2) {
        PyBuffer_Release(&bs);
        PyBuffer_Release(&bd);
        PyErr_SetString(PyExc_ValueError,
                        "predicted: src and dst are float64 arrays of one length, code -2..2");
        return NULL;
    }
    const double *src = bs.buf;
    double *dst = bd.buf;
    Py_ssize_t n = bs.len / 8;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        float s = (float)src[i];
        if (code == -2)
            dst[i] = src[i] > 0 ? 1.0 : -1.0;
        else
            dst[i] = (double)(code == -1 ? s : vw_link32(code, s));
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bs);
    PyBuffer_Release(&bd);
    Py_RETURN_NONE;
}

/* uniform(table, seed, width): VW's --random_weights in the first float of each of the
 * table's rows of width floats: its merand48 generator (state * 0xEECE66D5DEECE66D +
 * 2147483647, bits 25..47 as a float in [1, 2) less 1) stepped once per row in order from
 * seed, less 0.5, in float (_vwrandom.uniform_weights' values). */
PyObject *vw_uniform(PyObject *self, PyObject *args) {
    Py_buffer t;
    unsigned long long seed;
    Py_ssize_t width;
    if (!PyArg_ParseTuple(args, "w*Kn", &t, &seed, &width))
        return NULL;
    if (width < 1 || t.itemsize != 4 || t.len % (4 * width)) {
        PyBuffer_Release(&t);
        PyErr_SetString(PyExc_ValueError, "uniform: a table of float32 rows of width");
        return NULL;
    }
    float *w = (float *)t.buf;
    Py_ssize_t rows = t.len / (4 * width);
    uint64_t s = (uint64_t)seed;
    for (Py_ssize_t i = 0; i < rows; i++) {
        s = s * 0xEECE66D5DEECE66DULL + 2147483647ULL;
        uint32_t bits = (uint32_t)(((s >> 25) & 0x7FFFFF) | (127u << 23));
        float f;
        memcpy(&f, &bits, 4);
        w[i * width] = (f - 1.0f) - 0.5f;
    }
    PyBuffer_Release(&t);
    Py_RETURN_NONE;
}
