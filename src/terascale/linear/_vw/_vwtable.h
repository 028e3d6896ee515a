/* The compiled learner's per-chunk counts and its dense table's records in C
 * (_vwtable.c), exported to _vwfast's method table. */
#ifndef TERASCALE_VWTABLE_H
#define TERASCALE_VWTABLE_H
#include <Python.h>

PyObject *vw_counts(PyObject *self, PyObject *args);
PyObject *vw_records(PyObject *self, PyObject *args);
PyObject *vw_restore(PyObject *self, PyObject *args);
PyObject *vw_predicted(PyObject *self, PyObject *args);

#endif
