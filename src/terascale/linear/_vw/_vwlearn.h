/* VW's online learner in C (_vwlearn.c), exported to _vwfast's method table. */
#ifndef TERASCALE_VWLEARN_H
#define TERASCALE_VWLEARN_H
#include <Python.h>

PyObject *vw_learn(PyObject *self, PyObject *args);
PyObject *vw_passes(PyObject *self, PyObject *args);
PyObject *vw_sync(PyObject *self, PyObject *args);
PyObject *vw_loss32(PyObject *self, PyObject *args);
PyObject *vw_test(PyObject *self, PyObject *args);
PyObject *vw_oaa_learn(PyObject *self, PyObject *args);
void vw_learn_init(void);

#endif
