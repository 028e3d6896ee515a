/* terascale._shmcore: a prepared small collective, its whole per-call work in one call.
 *
 * A flat allreduce (or barrier) that fits one round costs a few microseconds of data
 * movement; the Python around a call of Group.flat (packing the descriptor, the spin
 * policy, advancing the counters) cost as much again. ``Group.prepare`` fixes what does
 * not change between calls of one shape (communicator context, descriptor, dtype, op) and
 * returns a Small whose ``run(seq, src, dst)`` does the rest in C: it writes the
 * descriptor of collective ``seq``, publishes ``src``, arrives, waits with the group's
 * adaptive spin budget, compares descriptors, folds into ``dst`` and advances the group's
 * epoch and round and its budget, exactly as a one-round call of transport/_shmrounds.py's
 * core_flat with _shmwait.py's SpinBudget does (same barrier targets, same descriptor
 * bytes, same fold: the same bits, and interchangeable with the Python-driven calls of the
 * same group).
 *
 * A wait that does not complete within the budget and the group's sleeps (a late, dead or
 * mismatched member) returns ``(status, 0, elements)`` as core_flat does, and the
 * caller finishes it in Python with every failure check.
 */
#include "_shmcore.h"

#include <stdlib.h>
#include <string.h>

#define FIELD_BYTES (DESC_BYTES - 16)  /* the descriptor after seq and context */

typedef struct {
    PyObject_HEAD
    Group *g;                  /* a strong reference */
    unsigned char head_context[8];
    char field[FIELD_BYTES];
    int kind, op;              /* op -1: no fold (a barrier) */
    Py_ssize_t chunk;          /* the flat schedule's round: one call moves at most this */
} Small;

/* _spin.host_busy's rule: the one-minute load average at or above the cores (read at most
 * every busy_check_s; unreadable: busy). */
static int host_busy(Group *g) {
    double t = now_s();
    if (t >= g->busy_until) {
        double load[1];
        g->busy = getloadavg(load, 1) < 1 || load[0] >= (double)g->cores;
        g->busy_until = t + g->busy_check_s;
    }
    return g->busy;
}

static void put_le64(unsigned char *p, uint64_t v) {
    for (int k = 0; k < 8; k++)
        p[k] = (unsigned char)(v >> (8 * k));
}

PyObject *Group_prepare(Group *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "prepare takes 5 arguments");
        return NULL;
    }
    unsigned long long context = PyLong_AsUnsignedLongLong(args[0]);
    int kind = PyLong_AsLong(args[2]);
    int op = PyLong_AsLong(args[3]);
    Py_ssize_t chunk = PyLong_AsSsize_t(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (!PyBytes_Check(args[1]) || PyBytes_GET_SIZE(args[1]) != FIELD_BYTES) {
        PyErr_Format(PyExc_ValueError, "field must be %d bytes", FIELD_BYTES);
        return NULL;
    }
    if (kind < 0 || kind >= K_COUNT || op < -1 || op > 3 || chunk <= 0 || chunk > self->area ||
        chunk % ITEMSIZE[kind]) {
        PyErr_SetString(PyExc_ValueError, "prepare: unsupported dtype code, op or round size");
        return NULL;
    }
    Small *s = PyObject_New(Small, &SmallType);
    if (s == NULL)
        return NULL;
    Py_INCREF(self);
    s->g = self;
    put_le64(s->head_context, context);
    memcpy(s->field, PyBytes_AS_STRING(args[1]), FIELD_BYTES);
    s->kind = kind;
    s->op = op;
    s->chunk = chunk;
    return (PyObject *)s;
}

static void Small_dealloc(Small *self) {
    Py_XDECREF(self->g);
    PyObject_Free(self);
}

/* run(seq, src, dst) -> None (done) or (status, 0, elements): see the top of this file. */
static PyObject *Small_run(Small *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "run takes 3 arguments");
        return NULL;
    }
    Group *g = self->g;
    if (!live(g))
        return NULL;
    unsigned long long seq = PyLong_AsUnsignedLongLong(args[0]);
    if (seq == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    /* src and dst (args[1], args[2]) taken and checked as flat() takes them */
    Call c;
    c.kind = self->kind;
    c.has_s = c.has_d = 0;
    c.parts = NULL;
    if (call_buffers(g, args + 1, &c) < 0)
        return NULL;
    if (c.s.len > self->chunk) {
        PyErr_Format(PyExc_ValueError, "src holds %zd bytes, more than a round (%zd)", c.s.len,
                     self->chunk);
        call_release(&c);
        return NULL;
    }
    int parity = (int)(g->round & 1);
    unsigned char *slot = (unsigned char *)desc_slot(g, g->me, parity);
    put_le64(slot, seq);
    memcpy(slot + 8, self->head_context, 8);
    memcpy(slot + 16, self->field, FIELD_BYTES);
    /* SpinBudget.budget(False) and rounds_yield() */
    double spin;
    int yield;
    if (g->oversub) {
        spin = g->share_cores ? (g->spin_s < g->oversub_cap ? g->spin_s : g->oversub_cap) : 0.0;
        yield = g->yield_mode;
    } else {
        spin = g->spin_s;
        yield = host_busy(g);
    }
    uint64_t target = g->epoch + 1;
    unsigned long long slept = g->sleeps;
    int status;
    Py_BEGIN_ALLOW_THREADS
    memcpy(area_of(g, g->me, parity), c.s.buf, (size_t)c.s.len);
    arrive(g, target);
    status = spin_wait(g, target, spin, yield, g->block_s);
    if (status == -1) {
        int other = check_descs(g, parity);
        if (other >= 0)
            status = -2 - other;
    }
    if (status == -1 && self->op >= 0)
        fold_parts(g, c.s.buf, c.d.buf, c.s.len, parity, self->kind, self->op, 1, c.parts);
    Py_END_ALLOW_THREADS
    Py_ssize_t elements = c.s.len / ITEMSIZE[self->kind];
    call_release(&c);
    g->epoch = target;
    if (status != -1)
        return Py_BuildValue("(inn)", status, (Py_ssize_t)0, elements);
    g->round += 1;
    /* SpinBudget.settle(False, slept): a wait that ended while spinning doubles the budget,
     * one that had to sleep halves it. */
    if (g->sleeps != slept)
        g->spin_s = g->spin_s / 2 > g->spin_min ? g->spin_s / 2 : g->spin_min;
    else
        g->spin_s = g->spin_s * 2 < g->spin_cap ? g->spin_s * 2 : g->spin_cap;
    Py_RETURN_NONE;
}

static PyMethodDef Small_methods[] = {
    {"run", (PyCFunction)(void (*)(void))Small_run, METH_FASTCALL,
     "run(seq, src, dst) -> None (done) or (status, 0, elements) to finish in Python"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject SmallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "terascale._shmcore.Small",
    .tp_basicsize = sizeof(Small),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A small collective of one group, prepared (Group.prepare)",
    .tp_dealloc = (destructor)Small_dealloc,
    .tp_methods = Small_methods,
};
