/* The cache's bit-packed indices and values in C (_vwbits.c), exported to _vwfast's
 * method table. */
#ifndef TERASCALE_VWBITS_H
#define TERASCALE_VWBITS_H
#include <Python.h>

PyObject *vw_pack(PyObject *self, PyObject *args);
PyObject *vw_unpack(PyObject *self, PyObject *args);
PyObject *vw_unvalues(PyObject *self, PyObject *args);
PyObject *vw_mark(PyObject *self, PyObject *args);
PyObject *vw_encode(PyObject *self, PyObject *args);
PyObject *vw_decode(PyObject *self, PyObject *args);
PyObject *vw_marked(PyObject *self, PyObject *args);

#endif
