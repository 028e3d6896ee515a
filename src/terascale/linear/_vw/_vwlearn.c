/* VW's online learner (gd with --adaptive --normalized --invariant, its default) in C, for
 * the one-worker run of `terascale vw` (terascale.linear._vw._vwonline): the same
 * operations, in the same order and precision, as the numba pass
 * (terascale.linear._online._update.online_chunk and the float kernels of
 * terascale.linear._losses), so that its predictions and model are those bits: each
 * float32 step there is a float operation here (or a double one rounded once to float,
 * which is the same result for + - * / sqrt), the running sums are double, and exp, log,
 * and log are libm's float functions where the numba kernel's argument is a float (as
 * VW calls them on its floats; LLVM narrows numba's calls so), double ones elsewhere.
 * Compiled without fused multiply-adds, and with no builtin narrowing of libm's calls
 * (setup.py: -ffp-contract=off, -fno-builtin-*).
 *
 * The weights are VW's dense table: 2^b rows of (weight, adaptive sum, normalizer),
 * float32, indexed by the hashed feature, as the parser (_vwfast.parse) emits it.
 *
 * A loss is its code in terascale.linear._losstable (the low 3 bits; quantile's tau in
 * bits 4..39 in millionths; RAW_LABELS, FIXED_RANGE, HEADER_RANGE); how a loss reads
 * labels and clips predictions is the table's (its by_sign and clip rows, passed in by
 * the caller), the branches below are each code's formulas: LOSS_CODES (the module's
 * constant) lists the codes they cover (expectile's runs the numba pass); another code
 * raises ValueError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "_vwlearn.h"
#include "_vwtable.h"

#define RAW_LABELS 8LL
#define FIXED_RANGE (1LL << 40)
#define HEADER_RANGE (1LL << 41)
/* the learner's state fields (terascale.linear._online._state) */
enum { TOTAL_WEIGHT, SUM_NORM_X, CONTRACTION, GRAVITY, MIN_LABEL, MAX_LABEL,
       UPDATE_MULTIPLIER, STATE_SIZE };
#define AHEAD 2 /* examples ahead whose rows are prefetched */

static inline double f32(double x) { return (double)(float)x; }

/* VW's X_MIN (float) and its square, as _update's */
static double X_MIN, X2_MIN;

static inline double maxd(double a, double b) { return b > a ? b : a; }
static inline double mind(double a, double b) { return b < a ? b : a; }

static inline double tau_of(long long kind) {
    return f32((double)((kind & (FIXED_RANGE - 1)) >> 4) / 1e6);
}

static inline double exp_f(double x) { return x < 88.8 ? (double)expf((float)x) : INFINITY; }
static inline double log_f(double x) { return (double)logf((float)x); }
/* VW's poisson clamp of a score to [-44, 44], and its exp: VW's std::exp of the float,
 * expf (the double exp rounded to float is another number once in about 2000 scores) */
static inline double pclamp(double p) { return p < -44.0 ? -44.0 : p > 44.0 ? 44.0 : p; }
static inline double pexp(double c) { return c < 88.8 ? (double)expf((float)c) : INFINITY; }
static inline double soft(double y) { return f32(f32(y + 1.0) / 2.0); }
static inline double mix(double y, double a, double b) {
    double t = soft(y);
    return f32(f32(t * a) + f32(f32(1.0 - t) * b));
}
static inline double logloss32(double p, double y) {
    return (double)logf((float)(1.0 + exp_f(f32(-y * p))));
}

static inline double wexpmx(double x) {
    double w = x >= 1.0 ? 0.86 * x + 0.01 : exp(0.8 * x - 0.65);
    double r = x >= 1.0 ? x - log(w) - w : 0.2 * x + 0.65 - w;
    double t = 1.0 + w;
    double u = 2.0 * t * (t + 2.0 * r / 3.0);
    return f32(w * (1.0 + r / t * (u - r) / (u - 2.0 * r)) - x);
}

/* *bad set where the code has no branch */
static double loss32(long long kind, double p, double y, int *bad) {
    int k = (int)(kind & 7);
    switch (k) {
    case 0:
        if (y == 1.0 || y == -1.0)
            return logloss32(p, y);
        return mix(y, logloss32(p, 1.0), logloss32(p, -1.0));
    case 1:
    case 4: {
        double d = f32(p - y);
        return f32(d * d);
    }
    case 2: {
        double m = f32(1.0 - f32(y * p));
        return m > 0 ? m : 0.0;
    }
    case 3: {
        double tau = tau_of(kind), e = f32(y - p);
        return e > 0 ? f32(tau * e) : f32(f32(-f32(1.0 - tau)) * e);
    }
    case 5: { /* poisson's deviance */
        double c = pclamp(p);
        /* (a label below 0: C's logf gives a NaN with its sign bit set, which VW prints
         * -nan and never learns from) */
        double t = y + 1e-6 > 0 ? f32(y * f32(log_f(f32(y + f32(1e-6))) - c)) : -NAN;
        return f32(2.0 * f32(t - f32(y - pexp(c))));
    }
    }
    *bad = 1;
    return 0.0;
}

/* loss32 of a prediction clipped to [lo, hi], as VW's squared (and classic) get_loss
 * takes it: past a bound (only lo > hi leaves a clipped prediction there), the bound's
 * loss plus its slope on to the prediction, 0 where the label is that bound
 * (_losses.ranged_loss32) */
static double ranged_loss32(long long kind, double p, double y, double lo, double hi,
                            int *bad) {
    int k = (int)(kind & 7);
    if ((k != 1 && k != 4) || (p >= lo && p <= hi))
        return loss32(kind, p, y, bad);
    if (p < lo) {
        if (y == lo)
            return 0.0;
        double a = f32(y - lo);
        return f32(f32(a * a) + 2.0 * a * f32(lo - p));
    }
    if (y == hi)
        return 0.0;
    double a = f32(hi - y);
    return f32(f32(a * a) + 2.0 * a * f32(p - hi));
}

/* the prediction VW's squared (and classic) first_derivative takes, the lazy L1/L2's:
 * below lo gives lo, else above hi gives hi (_losses.ranged_prediction) */
static inline double ranged_prediction(long long kind, double p, double lo, double hi) {
    int k = (int)(kind & 7);
    if (k != 1 && k != 4)
        return p;
    return p < lo ? lo : p > hi ? hi : p;
}

static double dloss32(long long kind, double p, double y, int *bad) {
    int k = (int)(kind & 7);
    switch (k) {
    case 0:
        if (y == 1.0 || y == -1.0)
            return f32(-y / f32(1.0 + exp_f(f32(y * p))));
        return mix(y, f32(-1.0 / f32(1.0 + exp_f(p))), f32(1.0 / f32(1.0 + exp_f(-p))));
    case 1:
    case 4:
        return f32(2.0 * f32(p - y));
    case 2:
        return f32(y * p) < 1.0 ? -y : 0.0;
    case 3: {
        double e = f32(y - p);
        if (e == 0.0)
            return 0.0;
        return e > 0 ? -tau_of(kind) : f32(1.0 - tau_of(kind));
    }
    case 5:
        return f32(pexp(pclamp(p)) - y);
    }
    *bad = 1;
    return 0.0;
}

static inline double square_grad32(long long kind, double p, double y, int *bad) {
    int k = (int)(kind & 7);
    if (k == 1 || k == 4) {
        double d = f32(p - y);
        return f32(f32(4.0 * d) * d);
    }
    double g = dloss32(kind, p, y, bad);
    return f32(g * g);
}

static inline double logistic_update(double p, double y, double scale, double ppu,
                                     double sp) {
    double z = f32(y * p), d = exp_f(z);
    if (sp < 1e-6)
        return f32(f32(y * scale) / f32(1.0 + d));
    double x = f32(f32(sp + z) + d);
    return f32(-f32(f32(y * wexpmx(x)) + p) / ppu);
}

static inline double quantile_update(double p, double y, double scale, double ppu, double sp,
                                     double tau) {
    double err = f32(y - p);
    if (err == 0.0)
        return 0.0;
    if (err > 0)
        return f32(tau * sp) < err ? f32(tau * scale) : f32(err / ppu);
    double normal = f32(f32(-f32(1.0 - tau)) * sp);
    return normal > err ? f32(f32(tau - 1.0) * scale) : f32(err / ppu);
}

/* VW's poisson get_update in float, with its guards against overflow */
static inline double poisson_update(double p, double y, double scale, double ppu) {
    double c = pclamp(p), ep = pexp(c);
    if (y > 0) {
        double a = f32(f32(y * scale) * ppu);
        if (a > 44.0)
            return f32(-f32(c - log_f(y)) / ppu);
        double e = a < 88.7 ? (double)expm1f((float)a) : INFINITY;
        return f32(f32(y * scale) - f32((double)log1pf((float)f32(ep * e) / (float)y) / ppu));
    }
    double inner = f32(f32(ep * scale) * ppu);
    if (!isfinite(inner))
        return f32(-f32(c + log_f(f32(scale * ppu))) / ppu);
    return f32(-(double)log1pf((float)inner) / ppu);
}

/* VW's get_update in float (_losses.invariant_update) */
static double invariant_update(long long kind, double p, double y, double scale, double ppu,
                               int *bad) {
    double sp = f32(scale * ppu);
    int k = (int)(kind & 7);
    switch (k) {
    case 0:
        if (y == 1.0 || y == -1.0)
            return logistic_update(p, y, scale, ppu, sp);
        return mix(y, logistic_update(p, 1.0, scale, ppu, sp),
                   logistic_update(p, -1.0, scale, ppu, sp));
    case 3:
        return quantile_update(p, y, scale, ppu, sp, tau_of(kind));
    case 4:
        return f32(f32(2.0 * f32(y - p)) * scale);
    case 1: {
        if (sp < 1e-6)
            return f32(f32(2.0 * f32(y - p)) * scale);
        double e = exp_f(f32(f32(-2.0 * scale) * ppu));
        return f32(f32(f32(y - p) * f32(1.0 - e)) / ppu);
    }
    case 2: {
        if (f32(y * p) >= 1.0)
            return 0.0;
        double err = f32(1.0 - f32(y * p));
        return f32(y * (sp < err ? scale : f32(err / ppu))); /* (labels not +-1) */
    }
    case 5:
        return poisson_update(p, y, scale, ppu);
    }
    *bad = 1;
    return 0.0;
}

typedef struct {
    long long kind;
    int sign, clip, track, reg, sqrt_rate;
    double l1, l2, eta, minus_power_t, neg_norm_power;
} settings;

/* The rates and the L1/L2 in float, as VW keeps them. Not inlined, each rounded through a
 * float of its own: gcc 12 at -O3, converting l1 and l2 as a pair where the learner's
 * loop was inlined after it, stored the pair unrounded (a run with --l2 then drifted from
 * the numba pass and VW in the 7th digit). */
__attribute__((noinline)) static void set_rates(settings *st, double eta, double power_t,
                                                double l1, double l2) {
    volatile float l1f = (float)l1, l2f = (float)l2, etaf = (float)eta;
    st->l1 = l1f;
    st->l2 = l2f;
    st->eta = etaf;
    st->reg = st->l1 > 0.0 || st->l2 > 0.0;
    st->sqrt_rate = power_t == 0.5;
    st->minus_power_t = f32(-power_t);
    st->neg_norm_power = f32(f32(power_t) - 1.0);
}

/* VW's compute_rate_decay in float (_update._rate, float32 arrays) */
static inline double rate(float g2, float nrm, const settings *st) {
    if (st->sqrt_rate)
        return (double)((1.0f / sqrtf(g2)) * (1.0f / nrm));
    return f32((double)powf(g2, (float)st->minus_power_t) *
               (double)powf(nrm * nrm, (float)st->neg_norm_power));
}

/* VW's order (finalize_prediction): above hi gives hi, else below lo gives lo, which a
 * range with lo > hi (--min_prediction over the other bound) tells from min-then-max */
static inline double clip_prediction(int mode, double p, double lo, double hi) {
    if (mode == 0)
        return mind(maxd(p, -50.0), 50.0);
    if (mode == 2)
        return mind(maxd(p, mind(lo, -50.0)), maxd(hi, 50.0));
    return p > hi ? hi : p < lo ? lo : p;
}

static inline double score(const uint32_t *cols, const float *values, int64_t a, int64_t b,
                           const float *t, double gravity, double contraction) {
    float g32 = (float)gravity, p32 = 0.0f;
    for (int64_t k = a; k < b; k++) {
        float wk = t[3 * (size_t)cols[k]];
        wk = g32 < fabsf(wk) ? wk - (wk > 0 ? g32 : -g32) : 0.0f;
        p32 += wk * values[k];
    }
    return f32((double)p32 * f32(contraction));
}

static inline double trunc_weight(double w, double g) {
    if (g < fabs(w))
        return w > 0 ? f32(w - g) : f32(w + g);
    return 0.0;
}

/* VW's sync_weights (_update.sync_weights) over the whole table (rows `rs` floats apart:
 * 3, or 3 K for one of --oaa K's learners) */
static void sync_table(float *t, size_t rows, size_t rs, double *state) {
    double c = state[CONTRACTION], g = state[GRAVITY];
    if (c == 1.0 && g == 0.0)
        return;
    double cf = f32(c), gf = f32(g);
    for (size_t j = 0; j < rows; j++)
        t[rs * j] = (float)(trunc_weight((double)t[rs * j], gf) * cf);
    state[CONTRACTION] = 1.0;
    state[GRAVITY] = 0.0;
}

/* What VW's gd tells of an example on its logger (a note: `learn`'s notes): NOTE_NAN_SCORE
 * its finalize_prediction's NaN score (predicted as 0), NOTE_NAN_UPDATE compute_update's
 * NaN update (replaced by 0), and NOTE_MAGNITUDE times the features whose float square
 * overflows (pred_per_update_feature's "too much magnitude"), in VW's order */
#define NOTE_NAN_SCORE 1
#define NOTE_NAN_UPDATE 2
#define NOTE_MAGNITUDE 4

/* _update._learn: the update from one example whose float loss is above 0 (`state`: the
 * learner's normalized sums; `lazy`: the lazy L1/L2 it reads and moves, its own or the
 * one one-against-all's K learners share; `pd`: the prediction the L1/L2's derivative
 * takes; `rs`: floats from one feature's row to the next's; `note`: the example's note,
 * added to); returns whether the lazy L1/L2 must be folded into the weights now */
static int learn_one(const uint32_t *cols, const float *values, int64_t a, int64_t b,
                     float *t, size_t rs, double *state, double *lazy, const settings *st,
                     double p, double y, double s, double pd, int *bad, int *note) {
    long long kind = st->kind;
    double gsq = f32(s * square_grad32(kind, p, y, bad));
    double ppu = 1.0;
    if (gsq != 0.0) {
        float norm_x32 = 0.0f, ppu32 = 0.0f;
        int huge = 0; /* (the features whose float square overflows) */
        for (int64_t k = a; k < b; k++) {
            float *row = t + rs * (size_t)cols[k];
            double x = values[k];
            double x2 = f32(x * x);
            if (x2 < X2_MIN) {
                x = x > 0 ? X_MIN : -X_MIN;
                x2 = X2_MIN;
            }
            row[1] = (float)((double)row[1] + f32(gsq * x2));
            double ax = fabs(x);
            if (ax > row[2]) {
                if (row[2] > 0.0f) {
                    if (st->sqrt_rate)
                        row[0] = (float)((double)row[0] * f32((double)row[2] / ax));
                    else {
                        double rs = f32(ax / row[2]);
                        row[0] = (float)((double)row[0] *
                                         (double)powf((float)(rs * rs), (float)st->neg_norm_power));
                    }
                }
                row[2] = (float)ax;
            }
            double nx2 = x2 <= FLT_MAX ? (double)((float)x2 / (row[2] * row[2])) : 1.0;
            huge += x2 > FLT_MAX;
            norm_x32 += (float)nx2;
            ppu32 += (float)(x2 * rate(row[1], row[2], st));
        }
        ppu = (double)ppu32;
        *note += huge * NOTE_MAGNITUDE;
        state[TOTAL_WEIGHT] += s;
        state[SUM_NORM_X] += s * (double)norm_x32;
        double tw = f32(state[TOTAL_WEIGHT]), sx = f32(state[SUM_NORM_X]);
        if (st->sqrt_rate)
            state[UPDATE_MULTIPLIER] = f32(sqrt(f32(tw / sx)));
        else
            state[UPDATE_MULTIPLIER] = (double)powf((float)(sx / tw), (float)st->neg_norm_power);
        ppu = f32(ppu * state[UPDATE_MULTIPLIER]);
    }
    double u = invariant_update(kind, p, y, f32(st->eta * s), ppu, bad);
    if (st->reg && fabs(u) > 1e-8) {
        double dl = dloss32(kind, pd, y, bad);
        double eta_bar = fabs(dl) > 1e-8 ? -u / dl : 0.0;
        if (fabs(dl) > 1e-8)
            lazy[CONTRACTION] *= 1.0 - st->l2 * eta_bar;
        u = f32(u / f32(lazy[CONTRACTION]));
        lazy[GRAVITY] += eta_bar * st->l1;
    }
    if (isnan(u)) {
        u = 0.0;
        *note |= NOTE_NAN_UPDATE;
    }
    if (u != 0.0) {
        u = f32(u * state[UPDATE_MULTIPLIER]);
        for (int64_t k = a; k < b; k++) {
            float *row = t + rs * (size_t)cols[k];
            double x = values[k];
            if (fabs(x) <= FLT_MAX) {
                double r = rate(row[1], row[2], st);
                row[0] = (float)((double)row[0] + f32(u * f32(x * r)));
            }
        }
    }
    return lazy[CONTRACTION] < 1e-9 || lazy[GRAVITY] > 1e3;
}

static inline void ask(const int64_t *indptr, const uint32_t *cols, Py_ssize_t i,
                       Py_ssize_t end, const float *t) {
    if (i < end)
        for (int64_t k = indptr[i]; k < indptr[i + 1]; k++) {
            const float *row = t + 3 * (size_t)cols[k];
            __builtin_prefetch(row, 1, 3);
            __builtin_prefetch(row + 2, 1, 3);
        }
}

/* The checks of a call's arrays before examples [start, end) are learned (NULL: none
 * fails); the lengths in bytes. */
static const char *learn_checks(const Py_buffer *bp, const Py_buffer *bi, const Py_buffer *bv,
                                const Py_buffer *bl, const Py_buffer *bw, Py_ssize_t start,
                                Py_ssize_t end, size_t rows, const Py_buffer *bs,
                                const Py_buffer *bo, const Py_buffer *bpr,
                                const Py_buffer *bsg, const Py_buffer *bcl,
                                const Py_buffer *bh, const Py_buffer *bsu) {
    const int64_t *indptr = bp->buf;
    const uint32_t *cols = bi->buf;
    Py_ssize_t nex = bl->len / 4;
    if (bs->len < STATE_SIZE * 8 || bo->len < 8 * 8 || bsg->len < 8 * 8 || bcl->len < 8 * 8 ||
        bsu->len < 10 * 8)
        return "learn: state, out, by_sign, clip or sums is too short";
    if (start < 0 || end < start || end > nex || bw->len / 4 < end ||
        bp->len / 8 < end + 1 || (bpr->len && bpr->len / 8 < end - start) ||
        (bh->len && bh->len < end))
        return "learn: examples out of range";
    if (end > start && (indptr[start] < 0 || indptr[end] > bi->len / 4 ||
                        indptr[end] > bv->len / 4))
        return "learn: features out of range";
    for (int64_t k = end > start ? indptr[start] : 0; k < (end > start ? indptr[end] : 0); k++)
        if (cols[k] >= rows)
            return "learn: a feature index past the table";
    return NULL;
}

/* The learner's settings for loss code ``kind`` (its RAW_LABELS, FIXED_RANGE and
 * HEADER_RANGE bits included) at rate ``eta``; 0 where the code is unknown. */
static int learn_settings(settings *st, long long kind, const int64_t *by_sign,
                          const int64_t *clips, double eta, double power_t, double l1,
                          double l2) {
    st->kind = kind & ~(RAW_LABELS | FIXED_RANGE | HEADER_RANGE);
    int raw_labels = (kind & RAW_LABELS) != 0, fixed_range = (kind & FIXED_RANGE) != 0;
    if (by_sign[st->kind & 7] < 0 || clips[st->kind & 7] < 0)
        return 0;
    st->sign = by_sign[st->kind & 7] == 1 && !raw_labels;
    st->clip = (int)clips[st->kind & 7];
    /* (-i's VW model's header range: the labels' range from there, not [-50, 50] too) */
    if ((kind & HEADER_RANGE) && st->clip == 2)
        st->clip = 1;
    st->track = st->clip != 0 && !fixed_range;
    if (fixed_range) /* (--min_prediction/--max_prediction: VW clips every loss there) */
        st->clip = 1;
    set_rates(st, eta, power_t, l1, l2);
    return 1;
}

/* VW's online update over examples [start, end) (checked: learn_checks), without the GIL:
 * out gets the examples' sums (online_chunk's), sums VW's running sums (below), pred (raw)
 * the predictions (the scores before the clip) where not NULL; hold a byte per example,
 * nonzero where it is held out (NULL: none is); notes an int32 per example, set where
 * VW's logger tells of it (NULL: none kept, and the examples neither learned from nor
 * predicted are not scored), *noted counting them. Returns nonzero on an unknown loss
 * code. */
static int learn_range(const int64_t *indptr, const uint32_t *cols, const float *values,
                       const float *labels, const float *weights, Py_ssize_t start,
                       Py_ssize_t end, float *t, size_t rows, double *state, const settings *cst,
                       double *out, double *pred, double *raw, const uint8_t *hold,
                       double *sums, int32_t *notes, Py_ssize_t *noted) {
    settings st = *cst;
    int bad = 0;
    for (Py_ssize_t i = start; i < start + AHEAD && i < end; i++)
        ask(indptr, cols, i, end, t);
    for (Py_ssize_t i = start; i < end && !bad; i++) {
        ask(indptr, cols, i + AHEAD, end, t);
        double lab = labels[i], s = weights[i];
        int labelled = !isnan(lab), learn = labelled && s > 0.0;
        double y = lab;
        if (st.sign)
            y = lab > 0 ? 1.0 : -1.0;
        int held = hold && hold[i];
        /* (VW clips to the labels it learns from: held-out ones are not) */
        if (labelled && !held && st.track) {
            state[MIN_LABEL] = mind(state[MIN_LABEL], y);
            state[MAX_LABEL] = maxd(state[MAX_LABEL], y);
        }
        if (!learn && !pred && !notes)
            continue;
        int64_t a = indptr[i], b = indptr[i + 1];
        /* the lazy L1 truncates only where this run learns with L1 (VW) */
        double p = score(cols, values, a, b, t, st.l1 > 0.0 ? state[GRAVITY] : 0.0,
                         state[CONTRACTION]);
        int note = 0;
        if (raw) /* (-r: VW's raw score, NaN too) */
            raw[i - start] = p;
        if (isnan(p)) { /* (VW's finalize_prediction: a NaN score predicts 0) */
            p = 0.0;
            note = NOTE_NAN_SCORE;
        }
        p = clip_prediction(st.clip, p, state[MIN_LABEL], state[MAX_LABEL]);
        if (pred)
            pred[i - start] = p;
        if (!learn) {
            if (note && notes)
                notes[i] = note, ++*noted;
            continue;
        }
        double lv = ranged_loss32(st.kind, p, y, state[MIN_LABEL], state[MAX_LABEL],
                                  &bad);
        double slv = f32(lv * s);
        out[4] += 1.0;
        out[5] += (double)(b - a);
        out[6] = lab;
        out[7] = p;
        if (held) {
            if (note && notes)
                notes[i] = note, ++*noted;
            out[2] += slv;
            out[3] += s;
            sums[2] += slv;
            sums[3] += s;
            sums[6] += slv;
            sums[7] += s;
            sums[8] += slv;
            sums[9] += s;
            continue;
        }
        out[0] += slv;
        out[1] += s;
        sums[0] += slv;
        sums[1] += s;
        sums[4] += slv;
        sums[5] += s;
        if (lv > 0.0 && /* (a loss of 0 or NaN, poisson's negative label: as VW) */
            learn_one(cols, values, a, b, t, 3, state, state, &st, p, y, s,
                      ranged_prediction(st.kind, p, state[MIN_LABEL], state[MAX_LABEL]),
                      &bad, &note))
            sync_table(t, rows, 3, state);
        if (note && notes)
            notes[i] = note, ++*noted;
    }
    return bad;
}

PyObject *vw_learn(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bp, bi, bv, bl, bw, bt, bs, bo, bpr, bsg, bcl, bh, bsu, bn;
    Py_ssize_t start, end;
    long long kind;
    double eta, power_t, l1, l2;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*nnw*w*Lddddw*w*y*y*y*w*w*", &bp, &bi, &bv, &bl,
                          &bw, &start, &end, &bt, &bs, &kind, &eta, &power_t, &l1, &l2, &bo,
                          &bpr, &bsg, &bcl, &bh, &bsu, &bn))
        return NULL;
    /* VW's running sums (Progress.sums, SUMS doubles): the run's loss, labelled weight,
     * holdout loss and weight; the loss and labelled weight since the last line, the
     * holdout loss and weight since the last holdout line; the holdout loss and weight
     * since the pass began. Each example's float loss x weight and weight is added to
     * them in turn, as VW adds it (online_chunk's, the same bits whatever the chunks) */
    size_t rows = (size_t)bt.len / 12;
    const char *err = learn_checks(&bp, &bi, &bv, &bl, &bw, start, end, rows, &bs, &bo, &bpr,
                                   &bsg, &bcl, &bh, &bsu);
    /* an int32 per example, set to its note where it has one (empty: none kept, and the
     * examples neither learned from nor predicted are not scored) */
    int32_t *notes = bn.len ? bn.buf : NULL;
    Py_ssize_t noted = 0;
    if (!err && notes && bn.len / 4 < end)
        err = "learn: examples out of range";
    settings st;
    if (!err && !learn_settings(&st, kind, bsg.buf, bcl.buf, eta, power_t, l1, l2))
        err = "learn: unknown loss code";
    if (!err) {
        double *pred = bpr.len ? bpr.buf : NULL;
        /* pred of twice the length: the second half gets the scores before the clip (-r) */
        double *raw = pred && bpr.len / 8 >= 2 * (end - start) ? pred + (end - start) : NULL;
        int bad;
        Py_BEGIN_ALLOW_THREADS
        bad = learn_range(bp.buf, bi.buf, bv.buf, bl.buf, bw.buf, start, end, bt.buf, rows,
                          bs.buf, &st, bo.buf, pred, raw, bh.len ? bh.buf : NULL, bsu.buf,
                          notes, &noted);
        Py_END_ALLOW_THREADS
        if (bad)
            err = "learn: unknown loss code";
    }
    Py_buffer *all[] = {&bp, &bi, &bv, &bl, &bw, &bt, &bs, &bo, &bpr, &bsg, &bcl, &bh, &bsu,
                        &bn};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++)
        PyBuffer_Release(all[k]);
    if (err) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    return PyLong_FromSsize_t(noted);  /* the examples with a note */
}

/* passes(indptr, indices, values, labels, weights, table, state, kind, eta, decay,
 * power_t, l1, l2, by_sign, clip, holdout, sums, carry, rows, notes): up to R more passes
 * over one chunk with nothing to report between them (no line, prediction or early stop
 * due: _vwpasses.Replay decides), as R calls of learn and the Python bookkeeping of each
 * pass (_vwonline._Pass.learn) would make them; where notes (an int32 per example, as
 * learn's; empty: none kept) is given, the passes stop after the first whose examples
 * VW's logger tells of, its notes left there. Returns the passes made. Each pass first
 * multiplies the rate (the float eta of the pass before) by the float decay; then learns
 * from the chunk's examples
 * and adds, in double and in turn, every labelled example not held out's label x weight to
 * carry[0] (Progress.label_sum), every unlabelled one's weight to carry[1] and every
 * one's to carry[2] (Progress.seen_sums): counts' sums 3-5 (_vwtable.c's chunk_counts). rows (R x PASS_ROW doubles) gets, a row a pass:
 * the pass's six sums (its holdout loss and weight from sums[8:10], which start over:
 * Progress.pass_over), three slots the caller fills, carry[0], the run's loss and
 * labelled weight (sums[0:2]), carry[1], carry[2], the pass's rate and the loss since
 * the last line (sums[4]). */
#define PASS_ROW 16
PyObject *vw_passes(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bp, bi, bv, bl, bw, bt, bs, bsg, bcl, bh, bsu, bc, br, bn;
    long long kind;
    double eta, decay, power_t, l1, l2;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*w*Ldddddy*y*y*w*w*w*w*", &bp, &bi, &bv, &bl,
                          &bw, &bt, &bs, &kind, &eta, &decay, &power_t, &l1, &l2, &bsg, &bcl,
                          &bh, &bsu, &bc, &br, &bn))
        return NULL;
    Py_ssize_t n = bl.len / 4, passes = br.len / (PASS_ROW * 8);
    size_t rows = (size_t)bt.len / 12;
    Py_ssize_t made = 0;
    double seg[8];
    Py_buffer out = {0}, none = {0}; /* (the pass's sums; no predictions) */
    out.buf = seg;
    out.len = sizeof seg;
    const char *err = learn_checks(&bp, &bi, &bv, &bl, &bw, 0, n, rows, &bs, &out, &none,
                                   &bsg, &bcl, &bh, &bsu);
    if (!err && bc.len < 3 * 8)
        err = "passes: carry is too short";
    if (!err && bn.len && bn.len / 4 < n)
        err = "passes: notes is too short";
    settings st;
    if (!err && !learn_settings(&st, kind, bsg.buf, bcl.buf, eta, power_t, l1, l2))
        err = "learn: unknown loss code";
    if (!err) {
        const float *labels = bl.buf, *weights = bw.buf;
        const uint8_t *hold = bh.len ? bh.buf : NULL;
        double *sums = bsu.buf, *carry = bc.buf, *row = br.buf;
        float rate = (float)eta;
        int bad = 0;
        int32_t *notes = bn.len ? bn.buf : NULL;
        Py_ssize_t noted = 0;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t r = 0; r < passes && !bad && !noted; r++, row += PASS_ROW) {
            if (decay != 1.0)
                rate = rate * (float)decay;
            set_rates(&st, (double)rate, power_t, l1, l2);
            memset(seg, 0, sizeof seg);
            if (notes)
                memset(notes, 0, (size_t)n * sizeof *notes);
            bad = learn_range(bp.buf, bi.buf, bv.buf, labels, weights, 0, n, bt.buf, rows,
                              bs.buf, &st, seg, NULL, NULL, hold, sums, notes, &noted);
            double c[6] = {0.0, 0.0, 0.0, carry[0], carry[1], carry[2]};
            chunk_counts(bp.buf, labels, weights, hold, NULL, n, c, NULL, NULL, 0.0, 0);
            carry[0] = c[3], carry[1] = c[4], carry[2] = c[5];
            memcpy(row, seg, 6 * sizeof *row);
            row[2] = sums[8];
            row[3] = sums[9];
            sums[8] = sums[9] = 0.0;
            row[6] = row[7] = row[8] = 0.0;
            row[9] = carry[0];
            row[10] = sums[0];
            row[11] = sums[1];
            row[12] = carry[1];
            row[13] = carry[2];
            row[14] = (double)rate;
            row[15] = sums[4];
            made = r + 1;
        }
        Py_END_ALLOW_THREADS
        if (bad)
            err = "learn: unknown loss code";
    }
    Py_buffer *all[] = {&bp, &bi, &bv, &bl, &bw, &bt, &bs, &bsg, &bcl, &bh, &bsu, &bc, &br,
                        &bn};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++)
        PyBuffer_Release(all[k]);
    if (err) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    return PyLong_FromSsize_t(made);
}

/* sync(table, state[, k, c]): of learner c of --oaa K's interleaved rows (oaa_learn) */
PyObject *vw_sync(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bt, bs;
    Py_ssize_t k = 1, c = 0;
    if (!PyArg_ParseTuple(args, "w*w*|nn", &bt, &bs, &k, &c))
        return NULL;
    int ok = bs.len >= STATE_SIZE * 8 && k >= 1 && c >= 0 && c < k;
    if (ok)
        sync_table((float *)bt.buf + 3 * c, (size_t)bt.len / 12 / (size_t)k, 3 * (size_t)k,
                   bs.buf);
    PyBuffer_Release(&bt);
    PyBuffer_Release(&bs);
    if (!ok) {
        PyErr_SetString(PyExc_ValueError, "sync: state is too short, or c not in 0..k-1");
        return NULL;
    }
    Py_RETURN_NONE;
}

PyObject *vw_loss32(PyObject *self, PyObject *args) {
    (void)self;
    long long kind;
    double p, y;
    if (!PyArg_ParseTuple(args, "Ldd", &kind, &p, &y))
        return NULL;
    int bad = 0;
    double v = loss32(kind, p, y, &bad);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "unknown loss code");
        return NULL;
    }
    return PyFloat_FromDouble(v);
}

void vw_learn_init(void) {
    X_MIN = (double)(float)1.084202e-19;
    X2_MIN = (double)((float)X_MIN * (float)X_MIN);
}

/* VW's -t (terascale.linear._front._cli_run._test_only): each example's prediction from
 * the table's weights (summed in float, each product a float, as _model._scores_float:
 * the weights with the lazy L1/L2 already folded in, vw_sync) in `raw`, then clipped as
 * _cli_run._clip (`clip`: the run's loss's rule, the _losstable _CLIPS index; lo, hi:
 * VW's min and max label; the "labels" rule clips only where lo != hi, or where `kind`
 * has FIXED_RANGE: a VW model's header range, which VW's -t clips to even where lo == hi)
 * in `pred`, and
 * where labelled with weight > 0 its loss times its weight (_losses.losses32 of `kind`:
 * labels read by their sign where the loss reads classes; `binary`: the 0/1 loss), else 0,
 * in `loss`. Nothing is learned. The table's rows are of `stride` floats (3, the
 * default; 1: the weights alone, as a test run needs them). */
PyObject *vw_test(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bp, bi, bv, bl, bw, bt, bsg, braw, bpr, bls;
    Py_ssize_t start, end;
    long long kind;
    int clip, binary;
    double lo, hi;
    Py_ssize_t stride = 3;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*nny*Liddpy*w*w*w*|n", &bp, &bi, &bv, &bl, &bw,
                          &start, &end, &bt, &kind, &clip, &lo, &hi, &binary, &bsg, &braw,
                          &bpr, &bls, &stride))
        return NULL;
    if (stride != 1)
        stride = 3;
    const int64_t *indptr = bp.buf;
    const uint32_t *cols = bi.buf;
    const float *values = bv.buf, *labels = bl.buf, *weights = bw.buf, *t = bt.buf;
    const int64_t *by_sign = bsg.buf;
    double *raw = braw.buf, *pred = bpr.buf, *loss = bls.buf;
    size_t rows = (size_t)bt.len / (4 * (size_t)stride);
    Py_ssize_t nex = bl.len / 4;
    const char *err = NULL;
    if (bsg.len < 8 * 8)
        err = "test: by_sign is too short";
    else if (start < 0 || end < start || end > nex || bw.len / 4 < end ||
             bp.len / 8 < end + 1 || braw.len / 8 < end - start ||
             bpr.len / 8 < end - start || bls.len / 8 < end - start)
        err = "test: examples out of range";
    else if (end > start && (indptr[start] < 0 || indptr[end] > bi.len / 4 ||
                             indptr[end] > bv.len / 4))
        err = "test: features out of range";
    else
        for (int64_t k = end > start ? indptr[start] : 0; k < (end > start ? indptr[end] : 0);
             k++)
            if (cols[k] >= rows) {
                err = "test: a feature index past the table";
                break;
            }
    long long code = kind & ~(RAW_LABELS | FIXED_RANGE);
    if (!err && (by_sign[code & 7] < 0 || clip < 0 || clip > 2))
        err = "test: unknown loss code or clip rule";
    int bad = 0;
    if (!err) {
        int sign = by_sign[code & 7] == 1 && !(kind & RAW_LABELS);
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = start; i < end && !bad; i++) {
            float p32 = 0.0f;
            for (int64_t k = indptr[i]; k < indptr[i + 1]; k++)
                p32 += t[stride * (size_t)cols[k]] * values[k];
            double p = p32;
            raw[i - start] = p;
            if (isnan(p))  /* (VW's finalize_prediction: a NaN score predicts 0) */
                p = 0.0;
            if (clip != 1 || lo != hi || (kind & FIXED_RANGE))
                p = clip_prediction(clip, p, lo, hi);
            pred[i - start] = p;
            double lab = labels[i], s = weights[i], lv = 0.0;
            if (!isnan(lab) && s > 0.0) {
                if (binary && (lab == 1.0 || lab == -1.0))  /* (other labels keep the
                                                                 * loss function's, as VW) */
                    lv = (p > 0) != (lab > 0);
                else if (clip == 1 && lo != hi)  /* (VW's squared loss past a bound) */
                    lv = ranged_loss32(code, p, sign ? (lab > 0 ? 1.0 : -1.0) : lab, lo, hi,
                                       &bad);
                else
                    lv = loss32(code, p, sign ? (lab > 0 ? 1.0 : -1.0) : lab, &bad);
                lv = (float)((float)s * (float)lv); /* (VW's ec.loss: a float product) */
            }
            loss[i - start] = lv;
        }
        Py_END_ALLOW_THREADS
    }
    Py_buffer *all[] = {&bp, &bi, &bv, &bl, &bw, &bt, &bsg, &braw, &bpr, &bls};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++)
        PyBuffer_Release(all[k]);
    if (bad)
        err = "test: unknown loss code";
    if (err) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* VW's multipredict of one learner (_update._multi_score): as score, but without L1 a
 * feature whose value is within 1e-10 of 0 adds nothing */
static inline double multi_score(const uint32_t *cols, const float *values, int64_t a,
                                 int64_t b, const float *t, size_t rs, double gravity,
                                 double contraction, int l1) {
    float g32 = (float)gravity, p32 = 0.0f;
    for (int64_t k = a; k < b; k++) {
        double x = values[k];
        if (!l1 && -1e-10 < x && x < 1e-10)
            continue;
        float wk = t[rs * (size_t)cols[k]];
        wk = g32 < fabsf(wk) ? wk - (wk > 0 ? g32 : -g32) : 0.0f;
        p32 += wk * values[k];
    }
    double p = f32((double)p32 * f32(contraction));
    return isnan(p) ? 0.0 : p;
}

/* VW's scorer's link of a clipped score in float (_update._linked): 0 logistic, 1 glf1,
 * 2 poisson */
static inline double linked(double p, int how) {
    float x = (float)p;
    if (how == 0)
        return (double)(1.0f / (1.0f + expf(-x)));
    if (how == 1)
        return (double)(2.0f / (1.0f + expf(-x)) - 1.0f);
    return (double)expf(x);
}

/* --oaa K's learners over examples [start, end) (_update.oaa_chunk, with the shared label
 * range widened as _oaapass.oaa_pass widens it): each example's K scores first, clipped to
 * the range the examples before it made, into scores[(i - start) * K + c]; then, where it
 * is labelled, the range widened to -1 (and +1 where its target is a class); where it is
 * learned from (weight > 0), each learner's update in class order, learner c with label
 * +1 where targets[i] == c, else -1 (NaN: unlabelled). The table holds 2^(b - s) features'
 * K rows (weight, adaptive sum, normalizer) side by side, learner c's row of feature f at
 * f K + c, as VW interleaves them: an example's K scores and updates touch one run of
 * 12 K bytes a feature (learner after learner, 2^(b - s) rows apart, took twice the
 * time: 10 classes at -b 22); states the K learners' state rows, the lazy L1/L2 in
 * learner 0's (shared, copied to the others).
 * `link` (-1 none): the learners learn from their linked scores. */
PyObject *vw_oaa_learn(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bp, bi, bv, bl, bw, bt, bs, bsc, bsg, bcl;
    Py_ssize_t start, end, k;
    long long kind;
    double eta, power_t, l1, l2;
    int how;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*nnw*w*nLddddiw*y*y*", &bp, &bi, &bv, &bl, &bw,
                          &start, &end, &bt, &bs, &k, &kind, &eta, &power_t, &l1, &l2,
                          &how, &bsc, &bsg, &bcl))
        return NULL;
    const int64_t *indptr = bp.buf;
    const uint32_t *cols = bi.buf;
    const float *values = bv.buf, *weights = bw.buf;
    const double *targets = bl.buf;
    float *t = bt.buf;
    double *states = bs.buf, *scores = bsc.buf;
    const int64_t *by_sign = bsg.buf, *clips = bcl.buf;
    size_t rows = k > 0 ? (size_t)bt.len / 12 / (size_t)k : 0;
    const char *err = NULL;
    Py_ssize_t nex = bl.len / 8;
    if (k < 2 || (size_t)bt.len != 12 * rows * (size_t)k)
        err = "oaa_learn: the table is not K learners' rows";
    else if (bs.len < (Py_ssize_t)(STATE_SIZE * 8) * k || bsg.len < 8 * 8 || bcl.len < 8 * 8)
        err = "oaa_learn: states, by_sign or clip is too short";
    else if (start < 0 || end < start || end > nex || bw.len / 4 < end ||
             bp.len / 8 < end + 1 || bsc.len / 8 < (end - start) * k)
        err = "oaa_learn: examples out of range";
    else if (end > start && (indptr[start] < 0 || indptr[end] > bi.len / 4 ||
                             indptr[end] > bv.len / 4))
        err = "oaa_learn: features out of range";
    else
        for (int64_t j = end > start ? indptr[start] : 0; j < (end > start ? indptr[end] : 0);
             j++)
            if (cols[j] >= rows) {
                err = "oaa_learn: a feature index past the table";
                break;
            }
    settings st;
    st.kind = kind & ~(RAW_LABELS | FIXED_RANGE);
    if (!err && (by_sign[st.kind & 7] < 0 || clips[st.kind & 7] < 0))
        err = "oaa_learn: unknown loss code";
    int bad = 0;
    if (!err) {
        st.sign = 0; /* (the targets are -1 and +1) */
        st.clip = (int)clips[st.kind & 7];
        st.track = !(kind & FIXED_RANGE); /* (whatever the clip: the model keeps it) */
        int fixed = !st.track;
        if (fixed) /* (--min_prediction/--max_prediction: VW clips every loss there) */
            st.clip = 1;
        set_rates(&st, eta, power_t, l1, l2);
        int squared = st.kind == 1;
        size_t rs = 3 * (size_t)k; /* (a feature's K rows side by side) */
        int note = 0; /* (--oaa keeps no notes) */
        double *lazy = states;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = start; i < end && !bad; i++) {
            double tg = targets[i], s = weights[i];
            int labelled = !isnan(tg), learn = labelled && s > 0.0;
            int64_t a = indptr[i], b = indptr[i + 1];
            double *sc = scores + (size_t)(i - start) * (size_t)k;
            double gravity = st.l1 > 0.0 ? lazy[GRAVITY] : 0.0;
            for (Py_ssize_t c = 0; c < k; c++) {
                double *sc_state = states + c * STATE_SIZE;
                double p = multi_score(cols, values, a, b, t + 3 * c, rs, gravity,
                                       lazy[CONTRACTION], st.l1 > 0.0);
                sc[c] = clip_prediction(st.clip, p, sc_state[MIN_LABEL], sc_state[MAX_LABEL]);
            }
            double lo = states[MIN_LABEL], hi = states[MAX_LABEL];
            if (labelled && st.track) { /* (K >= 2: some learner learns -1) */
                double nlo = mind(lo, -1.0);
                double nhi = tg >= 0 && tg < (double)k ? maxd(hi, 1.0) : hi;
                for (Py_ssize_t c = 0; c < k; c++) {
                    states[c * STATE_SIZE + MIN_LABEL] = nlo;
                    states[c * STATE_SIZE + MAX_LABEL] = nhi;
                }
            }
            if (!learn)
                continue;
            for (Py_ssize_t c = 0; c < k && !bad; c++) {
                double y = tg == (double)c ? 1.0 : -1.0;
                double p = sc[c], pd = p;
                if (how >= 0 && fixed) { /* (VW's squared loss of a linked score past a
                                            * bound of the range, which may be lo > hi) */
                    p = linked(p, how);
                    pd = ranged_prediction(st.kind, p, lo, hi);
                } else if (how >= 0) {
                    p = pd = linked(p, how);
                    if (st.track) {
                        lo = mind(lo, y);
                        hi = maxd(hi, y);
                    }
                    if (squared && ((p > hi && y == hi) || (p < lo && y == lo)))
                        continue;
                    if (squared)
                        pd = mind(maxd(p, lo), hi);
                } else if (fixed) /* (a range lo > hi: VW's squared loss past a bound) */
                    pd = ranged_prediction(st.kind, p, lo, hi);
                if (!((fixed ? ranged_loss32(st.kind, p, y, lo, hi, &bad)
                                        : loss32(st.kind, p, y, &bad)) > 0.0))
                    continue;
                if (learn_one(cols, values, a, b, t + 3 * c, rs, states + c * STATE_SIZE,
                              lazy, &st, p, y, s, pd, &bad, &note)) {
                    for (Py_ssize_t cc = 0; cc < k; cc++) {
                        states[cc * STATE_SIZE + CONTRACTION] = lazy[CONTRACTION];
                        states[cc * STATE_SIZE + GRAVITY] = lazy[GRAVITY];
                    }
                    for (Py_ssize_t cc = k - 1; cc >= 0; cc--)
                        sync_table(t + 3 * cc, rows, rs, states + cc * STATE_SIZE);
                }
            }
            if (st.reg)
                for (Py_ssize_t c = 1; c < k; c++) {
                    states[c * STATE_SIZE + CONTRACTION] = lazy[CONTRACTION];
                    states[c * STATE_SIZE + GRAVITY] = lazy[GRAVITY];
                }
        }
        Py_END_ALLOW_THREADS
    }
    Py_buffer *all[] = {&bp, &bi, &bv, &bl, &bw, &bt, &bs, &bsc, &bsg, &bcl};
    for (size_t j = 0; j < sizeof all / sizeof *all; j++)
        PyBuffer_Release(all[j]);
    if (bad)
        err = "oaa_learn: unknown loss code";
    if (err) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}
