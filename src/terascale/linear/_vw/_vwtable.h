/* The compiled learner's per-chunk counts and its dense table's records in C
 * (_vwtable.c), exported to _vwfast's method table. */
#ifndef TERASCALE_VWTABLE_H
#define TERASCALE_VWTABLE_H
#include <Python.h>

PyObject *vw_counts(PyObject *self, PyObject *args);
PyObject *vw_records(PyObject *self, PyObject *args);
PyObject *vw_restore(PyObject *self, PyObject *args);
PyObject *vw_predicted(PyObject *self, PyObject *args);

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
