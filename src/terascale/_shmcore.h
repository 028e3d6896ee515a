/* terascale._shmcore: what its compilation units share (the segment's layout, the group
 * object, the barrier and the folds). _shmcore.c has the protocol, _shmdirect.c the
 * large-message schedule over cross-memory attach. */
#ifndef TERASCALE_SHMCORE_H
#define TERASCALE_SHMCORE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <time.h>

/* One control slot per member (transport/_shmlayout.py has the layout). */
#define SLOT 512
#define OFF_EPOCH 0
#define OFF_SLEEPING 64
#define OFF_PID 128
#define OFF_BASE 136        /* where this member mapped the segment (the attach probe) */
#define OFF_SRC 144         /* this call's input and output, in this member's address space */
#define OFF_DST 152
#define OFF_DIRECT 160      /* 1: this member can reach every other member's memory */
#define OFF_DESC 256
#define DESC_BYTES 128
#define BLOCK 1024          /* elements folded per pass: 4-8 KiB, stays in L1 */
#define RELEASE_GIL 16384   /* bytes from which copies and folds release the GIL */

typedef struct {
    PyObject_HEAD
    Py_buffer view;
    int has_view;
    int n, me;
    Py_ssize_t ctl, area;
    unsigned long long sleeps, wakes;  /* futex sleeps and wake calls, for tuning */
    unsigned long long yields;         /* sched_yield calls while spinning, for tuning */
    double spun_s, slept_s;            /* seconds spent spinning and in futex sleeps */
    char *scratch;          /* the direct schedule's landing buffers (_shmdirect.c) */
    Py_ssize_t scratch_bytes;
    /* The group's counters and spin policy, kept here so that one call of a prepared small
     * collective (_shmsmall.c) does all its per-call work; transport/_shmrounds.py and
     * _shmwait.py read and set them as attributes (the policy's numbers are _spin.py's). */
    unsigned long long epoch;   /* barriers arrived at */
    long long round;            /* rounds run so far: the set of round r is r & 1 */
    double spin_s;              /* the adaptive budget for idle members, seconds */
    double spin_min, spin_cap;  /* its bounds */
    double oversub_cap;         /* more members than cores: the most a yielding spin lasts */
    double block_s;             /* futex sleeps before the Python wait takes over */
    double waking_spin_s;       /* the spin for a member that is asleep or waking up */
    double yield_after_s;       /* a spin longer than this yields between polls */
    double busy_check_s;        /* how often the load average is read */
    double busy_until;
    char oversub, share_cores, busy;
    int yield_mode, cores;
} Group;

static inline char *base(Group *g) { return (char *)g->view.buf; }
static inline uint64_t *slot_word(Group *g, int i, int off) {
    return (uint64_t *)(base(g) + (Py_ssize_t)i * SLOT + off);
}
static inline uint64_t *epoch_word(Group *g, int i) { return slot_word(g, i, OFF_EPOCH); }
static inline uint64_t *sleeping_word(Group *g, int i) { return slot_word(g, i, OFF_SLEEPING); }
static inline char *desc_slot(Group *g, int i, int parity) {
    return base(g) + (Py_ssize_t)i * SLOT + OFF_DESC + parity * DESC_BYTES;
}
static inline char *area_of(Group *g, int i, int parity) {
    return base(g) + g->ctl + (Py_ssize_t)(2 * i + parity) * g->area;
}

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- folding (in member order, elementwise: the same bits on every member) -------------- */
enum { OP_SUM, OP_PROD, OP_MIN, OP_MAX };
enum { K_F32, K_F64, K_I8, K_U8, K_I16, K_U16, K_I32, K_U32, K_I64, K_U64, K_COUNT };
extern const int ITEMSIZE[K_COUNT];
typedef void (*fold_fn)(void *, const void *const *, int, Py_ssize_t);
extern const fold_fn FOLDS[K_COUNT][4];

/* ---- the barrier (_shmcore.c) ------------------------------------------------------------ */
int live(Group *g);
int check_tag(PyObject *tag);
void write_tag(Group *g, PyObject *tag, int parity);
void arrive(Group *g, uint64_t target);
int spin_wait(Group *g, uint64_t target, double spin, int yield, double block);
int check_descs(Group *g, int parity);
int fold_parts(Group *g, const char *src, char *dst, Py_ssize_t nbytes, int parity, int kind,
               int op, int own, const void **parts);
int get_span(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t limit, const char *what);

/* ---- one call of a schedule: flat() and direct() take the same 13 arguments ----------------
 * (src, dst, tag, epoch, round, X, kind, op, Y, spin_first, spin_running, yield, block);
 * X and Y are the schedule's own (flat: chunk, own; direct: phase, chunk). */
typedef struct {
    PyObject *tag;
    unsigned long long epoch;
    long long round0;
    int kind, op, yield;
    double spin_first, spin_running, block;
    Py_buffer s, d;
    int has_s, has_d;
    const void **parts;     /* every member's part of a round, for the fold */
    const void *parts_small[8];
} Call;

/* Parse the shared arguments (``name`` for the errors); the caller checks X, Y and the op. */
int call_parse(Group *g, const char *name, PyObject *const *args, Py_ssize_t nargs, Call *c);
/* Take src and dst (equal sizes, whole items of ``kind``) and the parts array. */
int call_buffers(Group *g, PyObject *const *args, Call *c);
void call_release(Call *c);

/* ---- a prepared small collective (_shmsmall.c) ------------------------------------------ */
extern PyTypeObject SmallType;
PyObject *Group_prepare(Group *self, PyObject *const *args, Py_ssize_t nargs);

/* ---- the direct schedule (_shmdirect.c) --------------------------------------------------- */
PyObject *Group_direct(Group *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *Group_probe(Group *self, PyObject *arg);
void direct_release(Group *g);

#endif
