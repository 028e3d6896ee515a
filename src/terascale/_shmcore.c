/* terascale._shmcore: the per-call work of a shared-memory allreduce, compiled.
 *
 * One object per mapped segment (transport/_shmlayout.py has the layout): it publishes this
 * member's data and descriptor, arrives at the epoch barrier, spins on the other members'
 * epoch words with the GIL released, compares their descriptors and folds the members'
 * areas in member order (x0 op x1 op ... op x{n-1}, elementwise, one pass over memory
 * per block of BLOCK elements, so every member computes the same bits).
 *
 * Spinning is bounded by a budget the caller passes (seconds): when it runs out, the call
 * returns the first member that has not arrived and Python waits for it (futex sleeps,
 * link checks, deadline), so a dead or stalled member is detected as without this module.
 *
 * Memory order: the data and descriptor are written before the epoch store (release), a
 * waiter reads the epoch (acquire) before the data; the epoch store is sequentially
 * consistent so that the sleeping-flag read after it cannot pass it (a waiter sets its
 * flag, then re-reads our epoch before it blocks).
 */
#include "_shmcore.h"

#include <structmember.h>

#include <math.h>
#include <sched.h>
#include <string.h>
#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() do {} while (0)
#endif

/* ---- folding ----------------------------------------------------------------------------- */
const int ITEMSIZE[K_COUNT] = {4, 8, 1, 1, 2, 2, 4, 4, 8, 8};

/* numpy's minimum/maximum: NaN propagates (the first operand's when both are NaN), and for
 * equal operands (+0 and -0) the second one is returned. */
#define FMIN(a, b) (((a) < (b) || isnan(a)) ? (a) : (b))
#define FMAX(a, b) (((a) > (b) || isnan(a)) ? (a) : (b))
#define IMIN(a, b) ((a) < (b) ? (a) : (b))
#define IMAX(a, b) ((a) > (b) ? (a) : (b))
/* Integer sums and products wrap, as numpy's do: computed unsigned (no undefined overflow). */
#define ISUM(T, U) (T)((U)(a) + (U)(b))
#define IPROD(T, U) (T)((U)(a) * (U)(b))

#define DEFINE_FOLD(NAME, T, EXPR)                                                       \
    static void NAME(T *dst, const T *const *parts, int n, Py_ssize_t count) {           \
        T acc[BLOCK];                                                                    \
        for (Py_ssize_t lo = 0; lo < count; lo += BLOCK) {                               \
            Py_ssize_t m = count - lo < BLOCK ? count - lo : BLOCK;                      \
            const T *p0 = parts[0] + lo, *p1 = parts[1] + lo;                            \
            for (Py_ssize_t i = 0; i < m; i++) {                                         \
                T a = p0[i], b = p1[i];                                                  \
                acc[i] = EXPR;                                                           \
            }                                                                            \
            for (int k = 2; k < n; k++) {                                                \
                const T *pk = parts[k] + lo;                                             \
                for (Py_ssize_t i = 0; i < m; i++) {                                     \
                    T a = acc[i], b = pk[i];                                             \
                    acc[i] = EXPR;                                                       \
                }                                                                        \
            }                                                                            \
            memcpy(dst + lo, acc, (size_t)m * sizeof(T));                                \
        }                                                                                \
    }

#define DEFINE_FLOAT(SUF, T)                      \
    DEFINE_FOLD(sum_##SUF, T, a + b)              \
    DEFINE_FOLD(prod_##SUF, T, a * b)             \
    DEFINE_FOLD(min_##SUF, T, FMIN(a, b))         \
    DEFINE_FOLD(max_##SUF, T, FMAX(a, b))
#define DEFINE_INT(SUF, T, U)                     \
    DEFINE_FOLD(sum_##SUF, T, ISUM(T, U))            \
    DEFINE_FOLD(prod_##SUF, T, IPROD(T, U))          \
    DEFINE_FOLD(min_##SUF, T, IMIN(a, b))         \
    DEFINE_FOLD(max_##SUF, T, IMAX(a, b))

DEFINE_FLOAT(f32, float)
DEFINE_FLOAT(f64, double)
DEFINE_INT(i8, int8_t, uint8_t)
DEFINE_INT(u8, uint8_t, unsigned int)
DEFINE_INT(i16, int16_t, uint16_t)
DEFINE_INT(u16, uint16_t, unsigned int)
DEFINE_INT(i32, int32_t, uint32_t)
DEFINE_INT(u32, uint32_t, uint32_t)
DEFINE_INT(i64, int64_t, uint64_t)
DEFINE_INT(u64, uint64_t, uint64_t)

#define ROW(SUF) {(fold_fn)sum_##SUF, (fold_fn)prod_##SUF, (fold_fn)min_##SUF, (fold_fn)max_##SUF}
const fold_fn FOLDS[K_COUNT][4] = {
    ROW(f32), ROW(f64), ROW(i8), ROW(u8), ROW(i16), ROW(u16), ROW(i32), ROW(u32), ROW(i64),
    ROW(u64),
};

/* ---- the group object -------------------------------------------------------------------- */
static int Group_init(Group *self, PyObject *args, PyObject *kwds) {
    PyObject *buf;
    int n, me;
    Py_ssize_t ctl, area;
    static char *kwlist[] = {"buffer", "n", "index", "control_bytes", "area_bytes", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Oiinn", kwlist, &buf, &n, &me, &ctl, &area))
        return -1;
    if (n < 1 || me < 0 || me >= n || ctl < (Py_ssize_t)n * SLOT || area < 0) {
        PyErr_SetString(PyExc_ValueError, "bad segment geometry");
        return -1;
    }
    if (self->has_view) {
        PyBuffer_Release(&self->view);
        self->has_view = 0;
    }
    if (PyObject_GetBuffer(buf, &self->view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    self->has_view = 1;
    if (self->view.len < ctl + 2 * (Py_ssize_t)n * area) {
        PyErr_SetString(PyExc_ValueError, "the buffer is smaller than the segment");
        return -1;
    }
    self->n = n;
    self->me = me;
    self->ctl = ctl;
    self->area = area;
    self->epoch = 0;
    self->round = 0;
    /* The spin policy until transport/_shmwait.py sets it: no spin, no sleeps (a wait
     * hands back at once), yielding from the first poll. */
    self->spin_s = self->spin_min = self->spin_cap = self->oversub_cap = 0.0;
    self->block_s = self->waking_spin_s = self->yield_after_s = 0.0;
    self->busy_check_s = 0.5;
    self->busy_until = 0.0;
    self->oversub = self->share_cores = 0;
    self->busy = 1;
    self->yield_mode = 0;
    self->cores = 1;
    /* For the members' attach probe: where our mapping is (see _shmdirect.c). */
    *slot_word(self, me, OFF_BASE) = (uint64_t)(uintptr_t)self->view.buf;
    return 0;
}

static void Group_dealloc(Group *self) {
    direct_release(self);
    if (self->has_view)
        PyBuffer_Release(&self->view);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

int live(Group *g) {
    if (!g->has_view) {
        PyErr_SetString(PyExc_ValueError, "the segment was released");
        return 0;
    }
    return 1;
}

static PyObject *Group_release(Group *self, PyObject *unused) {
    direct_release(self);
    if (self->has_view) {
        PyBuffer_Release(&self->view);
        self->has_view = 0;
    }
    Py_RETURN_NONE;
}

static void futex_wake_all(uint64_t *word) {
#if defined(__linux__) && defined(SYS_futex)
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, 0x7FFFFFFF, NULL, NULL, 0);
#else
    (void)word;
#endif
}

/* Block while the low 32 bits of ``word`` hold ``seen`` (little-endian: the u32 at its
 * address), at most ``secs``; elsewhere a short sleep. */
static void futex_sleep(uint64_t *word, uint64_t seen, double secs) {
    struct timespec ts;
    ts.tv_sec = (time_t)secs;
    ts.tv_nsec = (long)((secs - (double)ts.tv_sec) * 1e9);
#if defined(__linux__) && defined(SYS_futex)
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT, (uint32_t)seen, &ts, NULL, 0);
#else
    (void)word;
    (void)seen;
    nanosleep(&ts, NULL);
#endif
}

/* Store our epoch, then wake the members that sleep waiting for it. */
void arrive(Group *g, uint64_t target) {
    __atomic_store_n(epoch_word(g, g->me), target, __ATOMIC_SEQ_CST);
    for (int i = 0; i < g->n; i++) {
        if (i != g->me && __atomic_load_n(sleeping_word(g, i), __ATOMIC_SEQ_CST)) {
            g->wakes++;
            futex_wake_all(epoch_word(g, g->me));
            break;
        }
    }
}

static int first_late(Group *g, uint64_t target) {
    for (int i = 0; i < g->n; i++)
        if (i != g->me && __atomic_load_n(epoch_word(g, i), __ATOMIC_ACQUIRE) < target)
            return i;
    return -1;
}

#define BLOCK_S 2e-3  /* longest single futex sleep (a lost wake-up costs at most this) */

/* -1 when every other member reached ``target``, else the first that has not, after at most
 * ``spin`` seconds of polling and then ``block`` seconds of futex sleeps (both 0: look
 * once). ``yield``: 0 never gives up the core while polling, 1 yields every 64 polls (a
 * loaded host), 2 after every poll (more members than cores: the member we wait for is
 * likely queued on our core, and every poll that does not yield delays it). The sleeps
 * are the Python wait's (transport/shmgroup.py): set our sleeping flag, re-read the member's
 * epoch, sleep on its word; the member wakes us when it arrives. Both phases are bounded:
 * the caller's wait (link checks, deadline) takes over when they run out. */
int spin_wait(Group *g, uint64_t target, double spin, int yield, double block) {
    int first = first_late(g, target);
    if (first < 0 || (spin <= 0.0 && block <= 0.0))
        return first;
    /* A member whose sleeping flag is up is asleep in a wait of its own or was woken (by
     * our arrival) and has not run yet: it arrives after a wake-up, tens to hundreds of
     * microseconds. Sleeping for it too would make it wake us in turn, and two members
     * whose budgets had shrunk would pay a wake-up at every barrier from then on (measured,
     * 2 ranks on 2 cores, barrier + allreduce: 130-210 us per 16-256 KiB call instead of
     * 5-28 us). With a core each, outspin the wake-up instead. */
    if (!g->oversub && spin < g->waking_spin_s &&
        __atomic_load_n(sleeping_word(g, first), __ATOMIC_RELAXED))
        spin = g->waking_spin_s;
    double t0 = now_s(), until = t0 + spin;
    for (unsigned k = 0; spin > 0.0; k++) {
        if (yield >= 2) {
            g->yields++;
            sched_yield();  /* may give the core away for a whole time slice: look at once */
            if (now_s() >= until)
                break;
        } else if ((k & 63) == 63) {
            double t = now_s();
            if (t >= until)
                break;
            /* Yield on a loaded host, and on any once the wait is longer than a running
             * member takes: the member may be queued behind us on our core. A futex wake
             * tends to put the woken member on the waker's core, and a waiter that only
             * spins then keeps it off until the budget runs out and it sleeps, which puts
             * the two on one core again (measured, 2 ranks on 2 cores, 4 KiB: stretches of
             * 50-190 us per call, a sleep in every one, against 2.2 us). */
            if (yield || t - t0 >= g->yield_after_s) {
                g->yields++;
                sched_yield();
            }
        } else {
            CPU_RELAX();
        }
        if ((first = first_late(g, target)) < 0) {
            g->spun_s += now_s() - t0;
            return -1;
        }
    }
    double t1 = now_s();
    g->spun_s += t1 - t0;
    if (block <= 0.0)
        return first;
    uint64_t *flag = sleeping_word(g, g->me);
    double stop = t1 + block;
    for (;;) {
        double t = now_s(), left = stop - t;
        g->slept_s += t - t1;
        t1 = t;
        if (left <= 0.0)
            return first;
        /* Dekker with arrive(): our flag store and their epoch store are both sequentially
         * consistent, so either they see the flag and wake us or we see their epoch. */
        __atomic_store_n(flag, 1, __ATOMIC_SEQ_CST);
        uint64_t seen = __atomic_load_n(epoch_word(g, first), __ATOMIC_SEQ_CST);
        if (seen < target) {
            g->sleeps++;
            futex_sleep(epoch_word(g, first), seen, left < BLOCK_S ? left : BLOCK_S);
        }
        __atomic_store_n(flag, 0, __ATOMIC_RELAXED);
        if ((first = first_late(g, target)) < 0) {
            g->slept_s += now_s() - t1;
            return -1;
        }
    }
}

/* -1 when every other member's descriptor of ``parity`` equals ours, else the first that
 * differs. */
int check_descs(Group *g, int parity) {
    const char *mine = desc_slot(g, g->me, parity);
    for (int i = 0; i < g->n; i++)
        if (i != g->me && memcmp(desc_slot(g, i, parity), mine, DESC_BYTES) != 0)
            return i;
    return -1;
}

/* Callers check kind and op first (this runs without the GIL). */
int fold_parts(Group *g, const char *src, char *dst, Py_ssize_t nbytes, int parity,
                      int kind, int op, int own, const void **parts) {
    for (int i = 0; i < g->n; i++)
        parts[i] = (own && i == g->me && src) ? (const void *)src : area_of(g, i, parity);
    Py_ssize_t count = nbytes / ITEMSIZE[kind];
    if (g->n == 1) {
        if ((const void *)dst != parts[0])
            memmove(dst, parts[0], (size_t)nbytes);
        return 0;
    }
    FOLDS[kind][op](dst, parts, g->n, count);
    return 0;
}

int get_span(PyObject *obj, Py_buffer *view, int writable, Py_ssize_t limit,
                    const char *what) {
    if (PyObject_GetBuffer(obj, view, (writable ? PyBUF_WRITABLE : 0) | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (view->len > limit) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, more than an area (%zd)", what,
                     view->len, limit);
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* A descriptor tag: None (keep the published one) or bytes that fit its slot. */
int check_tag(PyObject *tag) {
    if (tag != Py_None && (!PyBytes_Check(tag) || PyBytes_GET_SIZE(tag) > DESC_BYTES)) {
        PyErr_SetString(PyExc_ValueError, "tag must be bytes of at most 128 or None");
        return -1;
    }
    return 0;
}

/* Write a checked tag (not None) into our descriptor slot ``parity``, zero-padded. */
void write_tag(Group *g, PyObject *tag, int parity) {
    if (tag == Py_None)
        return;
    char *slot = desc_slot(g, g->me, parity);
    Py_ssize_t k = PyBytes_GET_SIZE(tag);
    memcpy(slot, PyBytes_AS_STRING(tag), (size_t)k);
    memset(slot + k, 0, (size_t)(DESC_BYTES - k));
}

/* allreduce(src, dst, tag, target, parity, kind, op, own, spin, yield, block) -> int
 *
 * One round of the flat schedule: copy ``src`` into our area ``parity`` (and ``tag``, unless
 * None, into our descriptor slot), arrive at epoch ``target``, wait (spin_wait: ``spin``,
 * ``yield``, ``block``),
 * compare descriptors (when ``tag`` was given) and fold every area (our own part read from
 * ``src`` when ``own``) into ``dst``; ``op`` < 0: no fold (numpy folds, or nobody does).
 * Returns -1 when done, the index of the first member that has not arrived (after the
 * spin; the caller waits for it and calls fold), or -2 - i when member i's descriptor
 * differs from ours (nothing folded). */
static PyObject *Group_allreduce(Group *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "allreduce takes 11 arguments");
        return NULL;
    }
    if (!live(self))
        return NULL;
    PyObject *tag = args[2];
    unsigned long long target = PyLong_AsUnsignedLongLong(args[3]);
    int parity = PyLong_AsLong(args[4]) & 1;
    int kind = PyLong_AsLong(args[5]);
    int op = PyLong_AsLong(args[6]);
    int own = PyObject_IsTrue(args[7]);
    double spin = PyFloat_AsDouble(args[8]);
    int yield = PyLong_AsLong(args[9]);
    double block = PyFloat_AsDouble(args[10]);
    if (PyErr_Occurred())
        return NULL;
    if (check_tag(tag) < 0)
        return NULL;
    Py_buffer s, d;
    if (get_span(args[0], &s, 0, self->area, "src") < 0)
        return NULL;
    if (get_span(args[1], &d, 1, self->area, "dst") < 0) {
        PyBuffer_Release(&s);
        return NULL;
    }
    int result = -1;
    const void *parts_small[8];
    const void **parts = self->n <= 8 ? parts_small : PyMem_Malloc(sizeof(void *) * self->n);
    if (parts == NULL || d.len != s.len) {
        if (parts == NULL)
            PyErr_NoMemory();
        else
            PyErr_SetString(PyExc_ValueError, "src and dst differ in size");
        result = -100;
        goto done;
    }
    if (op >= 0 && (kind < 0 || kind >= K_COUNT || op > 3 || s.len % ITEMSIZE[kind])) {
        PyErr_SetString(PyExc_ValueError, "unsupported dtype code or op");
        result = -100;
        goto done;
    }
    write_tag(self, tag, parity);
    int big = s.len >= RELEASE_GIL;
    int nogil = big || spin > 0.0 || block > 0.0;
    PyThreadState *ts = nogil ? PyEval_SaveThread() : NULL;
    memcpy(area_of(self, self->me, parity), s.buf, (size_t)s.len);
    arrive(self, target);
    int late = spin_wait(self, target, spin, yield, block);
    if (late >= 0) {
        result = late;
    } else if (tag != Py_None && (late = check_descs(self, parity)) >= 0) {
        result = -2 - late;
    } else if (op >= 0) {
        fold_parts(self, s.buf, d.buf, s.len, parity, kind, op, own, parts);
    }
    if (ts)
        PyEval_RestoreThread(ts);
done:
    if (parts && parts != parts_small)
        PyMem_Free(parts);
    PyBuffer_Release(&s);
    PyBuffer_Release(&d);
    if (result == -100)
        return NULL;
    return PyLong_FromLong(result);
}

/* flat(src, dst, tag, epoch, round, chunk, kind, op, own, spin_first, spin_running, yield,
 *      block)
 *   -> (rounds completed, status)
 *
 * The whole flat schedule in rounds of ``chunk`` bytes (cache-sized: the round's input,
 * our area and the others' areas stay in L2 while it is copied in and folded), round r in
 * set ``(round + r) & 1`` at epoch ``epoch + 1 + r``; the descriptor (``tag``) is written
 * and checked in round 0 only. Status -1: every round completed. Otherwise the rounds
 * before the returned count completed, we arrived at the next one and ``status`` is the
 * first member that has not (after ``spin_first`` seconds in round 0, ``spin_running``
 * later, then ``block`` seconds of sleeps) or ``-2 - i`` for a member i whose descriptor differs; nothing of that round is
 * folded. ``op`` -1: no fold (a member of a reduce to the leader that is not it). */
static PyObject *Group_flat(Group *self, PyObject *const *args, Py_ssize_t nargs) {
    Call c;
    if (call_parse(self, "flat", args, nargs, &c) < 0)
        return NULL;
    Py_ssize_t chunk = PyLong_AsSsize_t(args[5]);
    int own = PyObject_IsTrue(args[8]);
    if (PyErr_Occurred())
        return NULL;
    if (c.op < -1 || chunk <= 0 || chunk > self->area || chunk % ITEMSIZE[c.kind]) {
        PyErr_SetString(PyExc_ValueError, "unsupported op or round size");
        return NULL;
    }
    if (call_buffers(self, args, &c) < 0)
        return NULL;
    Py_ssize_t len_all = c.s.len;
    write_tag(self, c.tag, (int)(c.round0 & 1));
    Py_ssize_t rounds = len_all == 0 ? 1 : (len_all + chunk - 1) / chunk;
    Py_ssize_t r = 0;
    int status = -1;
    Py_BEGIN_ALLOW_THREADS
    for (; r < rounds; r++) {
        int parity = (int)((c.round0 + r) & 1);
        Py_ssize_t lo = r * chunk, len = len_all - lo < chunk ? len_all - lo : chunk;
        const char *src = (const char *)c.s.buf + lo;
        memcpy(area_of(self, self->me, parity), src, (size_t)len);
        uint64_t target = c.epoch + 1 + (uint64_t)r;
        arrive(self, target);
        int late = spin_wait(self, target, r == 0 ? c.spin_first : c.spin_running, c.yield,
                             c.block);
        if (late < 0 && r == 0 && c.tag != Py_None && (late = check_descs(self, parity)) >= 0)
            late = -2 - late;
        if (late != -1) {
            status = late;
            break;
        }
        if (c.op >= 0)
            fold_parts(self, src, (char *)c.d.buf + lo, len, parity, c.kind, c.op, own,
                       c.parts);
    }
    Py_END_ALLOW_THREADS
    call_release(&c);
    return Py_BuildValue("(ni)", r, status);
}

int call_parse(Group *g, const char *name, PyObject *const *args, Py_ssize_t nargs, Call *c) {
    if (nargs != 13) {
        PyErr_Format(PyExc_TypeError, "%s takes 13 arguments", name);
        return -1;
    }
    if (!live(g))
        return -1;
    c->tag = args[2];
    c->epoch = PyLong_AsUnsignedLongLong(args[3]);
    c->round0 = PyLong_AsLongLong(args[4]);
    c->kind = PyLong_AsLong(args[6]);
    c->op = PyLong_AsLong(args[7]);
    c->spin_first = PyFloat_AsDouble(args[9]);
    c->spin_running = PyFloat_AsDouble(args[10]);
    c->yield = PyLong_AsLong(args[11]);
    c->block = PyFloat_AsDouble(args[12]);
    c->has_s = c->has_d = 0;
    c->parts = NULL;
    if (PyErr_Occurred() || check_tag(c->tag) < 0)
        return -1;
    if (c->kind < 0 || c->kind >= K_COUNT || c->op > 3) {
        PyErr_Format(PyExc_ValueError, "%s: unsupported dtype code or op", name);
        return -1;
    }
    return 0;
}

int call_buffers(Group *g, PyObject *const *args, Call *c) {
    if (PyObject_GetBuffer(args[0], &c->s, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    c->has_s = 1;
    if (PyObject_GetBuffer(args[1], &c->d, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        goto fail;
    c->has_d = 1;
    if (c->d.len != c->s.len || c->s.len % ITEMSIZE[c->kind]) {
        PyErr_SetString(PyExc_ValueError, "src and dst differ in size or are not whole items");
        goto fail;
    }
    c->parts = g->n <= 8 ? c->parts_small : PyMem_Malloc(sizeof(void *) * g->n);
    if (c->parts == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    return 0;
fail:
    call_release(c);
    return -1;
}

void call_release(Call *c) {
    if (c->parts && c->parts != c->parts_small)
        PyMem_Free(c->parts);
    c->parts = NULL;
    if (c->has_s)
        PyBuffer_Release(&c->s);
    if (c->has_d)
        PyBuffer_Release(&c->d);
    c->has_s = c->has_d = 0;
}

/* fold(src, dst, parity, kind, op, own): fold every member's area ``parity`` into ``dst``
 * (our own part from ``src`` when ``own``), in member order. */
static PyObject *Group_fold(Group *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "fold takes 6 arguments");
        return NULL;
    }
    if (!live(self))
        return NULL;
    int parity = PyLong_AsLong(args[2]) & 1;
    int kind = PyLong_AsLong(args[3]);
    int op = PyLong_AsLong(args[4]);
    int own = PyObject_IsTrue(args[5]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer s, d;
    if (get_span(args[0], &s, 0, self->area, "src") < 0)
        return NULL;
    if (get_span(args[1], &d, 1, self->area, "dst") < 0) {
        PyBuffer_Release(&s);
        return NULL;
    }
    int rc = 0;
    const void *parts_small[8];
    const void **parts = self->n <= 8 ? parts_small : PyMem_Malloc(sizeof(void *) * self->n);
    if (parts == NULL) {
        PyErr_NoMemory();
        rc = -1;
    } else if (d.len != s.len) {
        PyErr_SetString(PyExc_ValueError, "src and dst differ in size");
        rc = -1;
    } else {
        PyThreadState *ts = d.len >= RELEASE_GIL ? PyEval_SaveThread() : NULL;
        rc = kind < 0 || kind >= K_COUNT || op < 0 || op > 3 || s.len % ITEMSIZE[kind] ? -2 :
             fold_parts(self, s.buf, d.buf, s.len, parity, kind, op, own, parts);
        if (ts)
            PyEval_RestoreThread(ts);
        if (rc == -2)
            PyErr_SetString(PyExc_ValueError, "unsupported dtype code or op");
    }
    if (parts && parts != parts_small)
        PyMem_Free(parts);
    PyBuffer_Release(&s);
    PyBuffer_Release(&d);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* arrive(target): store our epoch and wake sleeping members. */
static PyObject *Group_arrive(Group *self, PyObject *arg) {
    if (!live(self))
        return NULL;
    unsigned long long target = PyLong_AsUnsignedLongLong(arg);
    if (PyErr_Occurred())
        return NULL;
    arrive(self, target);
    Py_RETURN_NONE;
}

/* wait(target, spin, yield, block) -> -1 or the first member that has not arrived. */
static PyObject *Group_wait(Group *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "wait takes 4 arguments");
        return NULL;
    }
    if (!live(self))
        return NULL;
    unsigned long long target = PyLong_AsUnsignedLongLong(args[0]);
    double spin = PyFloat_AsDouble(args[1]);
    int yield = PyLong_AsLong(args[2]);
    double block = PyFloat_AsDouble(args[3]);
    if (PyErr_Occurred())
        return NULL;
    int late;
    if (spin > 0.0 || block > 0.0) {
        Py_BEGIN_ALLOW_THREADS
        late = spin_wait(self, target, spin, yield, block);
        Py_END_ALLOW_THREADS
    } else {
        late = spin_wait(self, target, 0.0, 0, 0.0);
    }
    return PyLong_FromLong(late);
}

static PyMethodDef Group_methods[] = {
    {"allreduce", (PyCFunction)(void (*)(void))Group_allreduce, METH_FASTCALL,
     "allreduce(src, dst, tag, target, parity, kind, op, own, spin, yield, block) -> int"},
    {"flat", (PyCFunction)(void (*)(void))Group_flat, METH_FASTCALL,
     "flat(src, dst, tag, epoch, round, chunk, kind, op, own, spin_first, spin_running, "
     "yield, block) -> (rounds completed, status)"},
    {"fold", (PyCFunction)(void (*)(void))Group_fold, METH_FASTCALL,
     "fold(src, dst, parity, kind, op, own)"},
    {"arrive", (PyCFunction)Group_arrive, METH_O, "arrive(target)"},
    {"wait", (PyCFunction)(void (*)(void))Group_wait, METH_FASTCALL,
     "wait(target, spin, yield, block) -> int"},
    {"direct", (PyCFunction)(void (*)(void))Group_direct, METH_FASTCALL,
     "direct(src, dst, tag, epoch, round, phase, kind, op, chunk, spin_first, spin_running, "
     "yield, block) -> (phases completed, status, errno)"},
    {"probe", (PyCFunction)Group_probe, METH_O, "probe(member) -> errno (0: readable)"},
    {"prepare", (PyCFunction)(void (*)(void))Group_prepare, METH_FASTCALL,
     "prepare(context, field, kind, op, chunk) -> Small: one small collective's call"},
    {"release", (PyCFunction)Group_release, METH_NOARGS, "drop the segment's buffer"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Group_members[] = {
    {"sleeps", T_ULONGLONG, offsetof(Group, sleeps), READONLY,
     "futex sleeps of this member's waits so far"},
    {"wakes", T_ULONGLONG, offsetof(Group, wakes), READONLY,
     "futex wake calls of this member's arrivals so far"},
    {"yields", T_ULONGLONG, offsetof(Group, yields), READONLY,
     "sched_yield calls of this member's spinning waits so far"},
    {"spun_s", T_DOUBLE, offsetof(Group, spun_s), READONLY,
     "seconds this member's waits spent spinning so far"},
    {"slept_s", T_DOUBLE, offsetof(Group, slept_s), READONLY,
     "seconds this member's waits spent in futex sleeps so far (wall time)"},
    {"epoch", T_ULONGLONG, offsetof(Group, epoch), 0, "barriers arrived at"},
    {"round", T_LONGLONG, offsetof(Group, round), 0,
     "rounds run so far: the set of round r is r % 2"},
    {"spin_s", T_DOUBLE, offsetof(Group, spin_s), 0,
     "seconds a wait for an idle member spins before it sleeps (adaptive)"},
    {"spin_min", T_DOUBLE, offsetof(Group, spin_min), 0, "spin_s's lower bound"},
    {"spin_cap", T_DOUBLE, offsetof(Group, spin_cap), 0, "spin_s's upper bound"},
    {"oversub_cap", T_DOUBLE, offsetof(Group, oversub_cap), 0,
     "the longest yielding spin with more members than cores"},
    {"block_s", T_DOUBLE, offsetof(Group, block_s), 0,
     "seconds of futex sleeps before a wait is handed back"},
    {"waking_spin_s", T_DOUBLE, offsetof(Group, waking_spin_s), 0,
     "the spin for a member that is asleep or waking up"},
    {"yield_after_s", T_DOUBLE, offsetof(Group, yield_after_s), 0,
     "a spin longer than this yields the core between polls"},
    {"busy_check_s", T_DOUBLE, offsetof(Group, busy_check_s), 0,
     "how often the load average is read"},
    {"oversub", T_BOOL, offsetof(Group, oversub), 0, "more members than cores"},
    {"share_cores", T_BOOL, offsetof(Group, share_cores), 0,
     "whether our sched_yield reaches the other members"},
    {"yield_mode", T_INT, offsetof(Group, yield_mode), 0,
     "yield mode while spinning with more members than cores"},
    {"cores", T_INT, offsetof(Group, cores), 0, "the cores the load average is compared to"},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject GroupType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "terascale._shmcore.Group",
    .tp_basicsize = sizeof(Group),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Group(buffer, n, index, control_bytes, area_bytes): a mapped segment",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Group_init,
    .tp_dealloc = (destructor)Group_dealloc,
    .tp_methods = Group_methods,
    .tp_members = Group_members,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "terascale._shmcore",
    "Compiled per-call work of the shared-memory allreduce (see transport/shmgroup.py).", -1, NULL,
};

PyMODINIT_FUNC PyInit__shmcore(void) {
    if (PyType_Ready(&GroupType) < 0 || PyType_Ready(&SmallType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    Py_INCREF(&GroupType);
    if (PyModule_AddObject(m, "Group", (PyObject *)&GroupType) < 0) {
        Py_DECREF(&GroupType);
        Py_DECREF(m);
        return NULL;
    }
    /* The calling convention (transport/_core.py checks it): 2 added the sleep budget, 3
     * the direct schedule (direct, probe), 4 its two-phase form, 5 the wait counters
     * (yields, spun_s, slept_s), 6 the counters and spin policy as attributes and
     * prepare (a small collective in one call). */
    PyModule_AddIntConstant(m, "ABI", 6);
    PyModule_AddIntConstant(m, "SLOT", SLOT);
    PyModule_AddIntConstant(m, "DESC_BYTES", DESC_BYTES);
    return m;
}
