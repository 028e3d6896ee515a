/* The batch learner's sparse products in C (_vwsparse.c), exported to _vwfast's method
 * table. */
#ifndef TERASCALE_VWSPARSE_H
#define TERASCALE_VWSPARSE_H
#include <Python.h>

PyObject *vw_rows_dot(PyObject *self, PyObject *args);
PyObject *vw_cols_add(PyObject *self, PyObject *args);

#endif
