/* The compiled learner's per-chunk counts and its dense table's records in C
 * (_vwtable.c), exported to _vwfast's method table. */
#ifndef TERASCALE_VWTABLE_H
#define TERASCALE_VWTABLE_H
#include <Python.h>

PyObject *vw_counts(PyObject *self, PyObject *args);
PyObject *vw_records(PyObject *self, PyObject *args);
PyObject *vw_restore(PyObject *self, PyObject *args);
PyObject *vw_predicted(PyObject *self, PyObject *args);
PyObject *vw_uniform(PyObject *self, PyObject *args);

#include <stdint.h>

/* counts' sums over a chunk of n examples, with C arrays (NULL: none) */
void chunk_counts(const int64_t *indptr, const float *labels, const float *weights,
                  const uint8_t *hold, const int64_t *ignored, Py_ssize_t n, double *sums,
                  double *cum_w, int64_t *cum_n, double seen_w, long long seen_n);

#include <math.h>

/* VW's --link of a float score, in float: code 0 logistic, 1 glf1, 2 poisson (_vwfast's
 * link, and -p's values in predicted) */
static inline float vw_link32(int code, float s) {
    if (code == 0)
        return 1.0f / (1.0f + expf(-s));
    if (code == 1)
        return 2.0f / (1.0f + expf(-s)) - 1.0f;
    return expf(s);
}

#endif
