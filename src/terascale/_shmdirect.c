/* terascale._shmcore: the direct schedule of large allreduces, over cross-memory attach.
 *
 * The flat schedule (_shmcore.c) moves every byte through the segment: each member copies
 * its whole input in, then folds all n areas into its output. Here members reach into each
 * other's own buffers (process_vm_readv / process_vm_writev, Linux's cross-memory attach:
 * one kernel copy, nothing through the segment):
 *
 *   phase 0  publish our buffer addresses (src, dst) and the descriptor; barrier
 *            (descriptors compared);
 *   phase 1  for our slice of the message, in chunks that stay in L2: read the chunk of
 *            every other member's src into a landing buffer, fold the n parts in member
 *            order (our own read from src) into our dst, then write that folded chunk,
 *            still in L2, into every other member's dst; barrier (after it every dst is
 *            complete and nobody touches our buffers any more).
 *
 * The reduce-scatter + allgather of the ring in two barriers, with the allgather pushed
 * from cache: measured against pulling the folded slices after a third barrier, 1.3x less
 * CPU time per call (the pull reads them back from memory). Per member: the n - 1 other
 * slices of our part read once, our slice of src read once, our slice written n times.
 * The fold is the flat schedule's (x0 op x1 op ... op x{n-1}, elementwise, the same
 * kernels), so the bits are the same on every member and as on the copy path.
 *
 * Each slice of each member's buffers is touched by one member only, its owner: it reads
 * slice i of member j's src before it writes slice i of member j's dst, so src may be dst
 * (in place).
 *
 * A member never writes into one that has left the collective: before each chunk it checks
 * that member's epoch (a member that fails withdraws its arrival, transport/shmgroup.py), and
 * the buffers of a call that failed are kept alive (collectives/_shmdirect.py), so a write
 * already under way lands in memory nobody reuses. Every barrier spins as the flat
 * schedule's do and hands a late member back to Python (futex waits, link checks,
 * deadline), which resumes at the next phase. A failed read or write (a member gone:
 * ESRCH; one that left: ECANCELED, or EFAULT once its buffer is gone) is returned without
 * arriving, so no member passes the barrier with our part missing.
 */
#include "_shmcore.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/types.h>
#include <sys/uio.h>
#endif

#define PHASES 2
#define PAGE 4096

/* 0, or the errno of reading ``len`` bytes at ``remote`` in process ``pid`` into ``local``
 * (``write``: of writing ``local`` there). */
static int move_peer(uint64_t pid, char *local, uint64_t remote, Py_ssize_t len, int write) {
#if defined(__linux__)
    while (len > 0) {
        struct iovec l = {local, (size_t)len}, r = {(void *)(uintptr_t)remote, (size_t)len};
        ssize_t got = write ? process_vm_writev((pid_t)pid, &l, 1, &r, 1, 0) :
                              process_vm_readv((pid_t)pid, &l, 1, &r, 1, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return got < 0 ? errno : EFAULT;
        local += got;
        remote += (uint64_t)got;
        len -= got;
    }
    return 0;
#else
    (void)pid; (void)local; (void)remote; (void)write;
    return len > 0 ? ENOSYS : 0;
#endif
}

static int read_peer(uint64_t pid, char *local, uint64_t remote, Py_ssize_t len) {
    return move_peer(pid, local, remote, len, 0);
}

/* Member ``j``'s slice of ``count`` elements: whole pages where the message allows, so a
 * read pins no page twice; the same cut on every member. */
static void slice_of(Py_ssize_t count, int itemsize, int n, int j, Py_ssize_t *lo,
                     Py_ssize_t *hi) {
    Py_ssize_t align = PAGE / itemsize;
    Py_ssize_t per = (count + n - 1) / n;
    per = (per + align - 1) / align * align;
    *lo = (Py_ssize_t)j * per < count ? (Py_ssize_t)j * per : count;
    *hi = *lo + per < count ? *lo + per : count;
}

void direct_release(Group *g) {
    free(g->scratch);
    g->scratch = NULL;
    g->scratch_bytes = 0;
}

/* probe(member) -> 0 when we can read ``member``'s memory (its pid and mapping, published
 * in its slot, read back through process_vm_readv equal what the segment holds), else an
 * errno (EPERM: ptrace rules or a seccomp filter forbid it; EINVAL: another process, e.g.
 * a pid of another namespace). */
PyObject *Group_probe(Group *self, PyObject *arg) {
    if (!live(self))
        return NULL;
    long i = PyLong_AsLong(arg);
    if (PyErr_Occurred())
        return NULL;
    if (i < 0 || i >= self->n || i == self->me) {
        PyErr_SetString(PyExc_ValueError, "probe: not another member");
        return NULL;
    }
    uint64_t pid = *slot_word(self, (int)i, OFF_PID), where = *slot_word(self, (int)i, OFF_BASE);
    uint64_t seen[2] = {0, 0};
    int err = pid == 0 || where == 0 ? EINVAL :
        read_peer(pid, (char *)seen, where + (uint64_t)i * SLOT + OFF_PID, sizeof seen);
    if (err == 0 && (seen[0] != pid || seen[1] != where))
        err = EINVAL;
    if (err == 0)  /* and write them back, unchanged: the schedule writes too */
        err = move_peer(pid, (char *)seen, where + (uint64_t)i * SLOT + OFF_PID, sizeof seen, 1);
    return PyLong_FromLong(err);
}

typedef struct {
    Group *g;
    const char *src;
    char *dst;
    Py_ssize_t count;
    int kind, op, isz;
    Py_ssize_t chunk;       /* elements per landing buffer */
    const void **parts;
    uint64_t arrived;       /* every member's epoch while it is in this collective */
    int failed;             /* the member whose read or write failed (with err) */
    int err;
} Run;

/* Phase 1: our slice, chunk by chunk: land every other member's part, fold all n, write
 * the result into every other member's output. */
static int reduce_slice(Run *r) {
    Group *g = r->g;
    Py_ssize_t lo, hi;
    slice_of(r->count, r->isz, g->n, g->me, &lo, &hi);
    for (Py_ssize_t at = lo; at < hi; at += r->chunk) {
        Py_ssize_t m = hi - at < r->chunk ? hi - at : r->chunk;
        Py_ssize_t off = at * r->isz;
        for (int k = 1; k < g->n; k++) {
            int j = (g->me + k) % g->n;  /* members start on different peers */
            char *land = g->scratch + (Py_ssize_t)(k - 1) * r->chunk * r->isz;
            int err = read_peer(*slot_word(g, j, OFF_PID),
                                land, *slot_word(g, j, OFF_SRC) + (uint64_t)off, m * r->isz);
            if (err) {
                r->failed = j;
                r->err = err;
                return -1;
            }
            r->parts[j] = land;
        }
        r->parts[g->me] = r->src + off;
        FOLDS[r->kind][r->op](r->dst + off, r->parts, g->n, m);
        for (int k = 1; k < g->n; k++) {  /* from L2, while it is there */
            int j = (g->me + k) % g->n;
            /* Not into a member that left (it withdrew its arrival: its epoch is 0). */
            int err = __atomic_load_n(epoch_word(g, j), __ATOMIC_SEQ_CST) < r->arrived ?
                ECANCELED : move_peer(*slot_word(g, j, OFF_PID), r->dst + off,
                                      *slot_word(g, j, OFF_DST) + (uint64_t)off, m * r->isz, 1);
            if (err) {
                r->failed = j;
                r->err = err;
                return -1;
            }
        }
    }
    return 0;
}

/* direct(src, dst, tag, epoch, round, phase, kind, op, chunk, spin_first, spin_running,
 *        yield, block) -> (phases completed, status, errno)
 *
 * Runs the phases from ``phase`` (0 at the start; k + 1 after Python completed the
 * barrier of phase k), phase k's barrier at epoch ``epoch + 1 + k``; ``tag`` (phase 0
 * only) goes to descriptor slot ``round & 1`` and is compared there. ``chunk``: bytes per
 * landing buffer; waits as spin_wait (``yield``, ``block`` as there). Returns (2, -1, 0)
 * when done. Otherwise (k, status, 0): we arrived at phase k's barrier and ``status`` is
 * the first member that has not (after the spin and the sleeps) or
 * ``-2 - i`` for a member i whose descriptor differs; or (k, j, errno): reading or writing
 * member j failed in phase k, and we did not arrive at its barrier. */
PyObject *Group_direct(Group *self, PyObject *const *args, Py_ssize_t nargs) {
    Call c;
    if (call_parse(self, "direct", args, nargs, &c) < 0)
        return NULL;
    int phase = PyLong_AsLong(args[5]);
    Py_ssize_t chunk = PyLong_AsSsize_t(args[8]);
    if (PyErr_Occurred())
        return NULL;
    if (c.op < 0 || chunk < PAGE || chunk % ITEMSIZE[c.kind] || phase < 0 || phase >= PHASES ||
        self->n < 2) {
        PyErr_SetString(PyExc_ValueError, "direct: unsupported op, chunk or phase");
        return NULL;
    }
    if (call_buffers(self, args, &c) < 0)
        return NULL;
    Py_ssize_t need = (Py_ssize_t)(self->n - 1) * chunk;
    if (self->scratch_bytes < need) {
        direct_release(self);
        void *p = NULL;
        if (posix_memalign(&p, PAGE, (size_t)need) != 0) {
            call_release(&c);
            return PyErr_NoMemory();
        }
        self->scratch = p;
        self->scratch_bytes = need;
    }
    int kind = c.kind, isz = ITEMSIZE[kind];
    Run r = {self, c.s.buf, c.d.buf, c.s.len / isz, kind, c.op, isz, chunk / isz, c.parts,
             c.epoch + 1, -1, 0};
    int parity = (int)(c.round0 & 1), status = -1;
    Py_BEGIN_ALLOW_THREADS
    for (; phase < PHASES; phase++) {
        int bad = 0;
        if (phase == 0) {
            write_tag(self, c.tag, parity);
            *slot_word(self, self->me, OFF_SRC) = (uint64_t)(uintptr_t)c.s.buf;
            *slot_word(self, self->me, OFF_DST) = (uint64_t)(uintptr_t)c.d.buf;
        } else {
            bad = reduce_slice(&r);
        }
        if (bad) {
            status = r.failed;
            break;
        }
        uint64_t target = c.epoch + 1 + (uint64_t)phase;
        arrive(self, target);
        int late = spin_wait(self, target, phase == 0 ? c.spin_first : c.spin_running,
                             c.yield, c.block);
        if (late < 0 && phase == 0 && c.tag != Py_None &&
            (late = check_descs(self, parity)) >= 0)
            late = -2 - late;
        if (late != -1) {
            status = late;
            break;
        }
    }
    Py_END_ALLOW_THREADS
    call_release(&c);
    return Py_BuildValue("(iii)", phase, status, r.err);
}
