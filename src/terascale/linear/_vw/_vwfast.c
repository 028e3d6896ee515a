/* The common case of VW text, parsed in C: what click-style and most VW files are made of.
 *
 * terascale.linear._vw._vwparse.parse_vw_bytes (numba) reads every form of VW text as VW
 * does. This file reads a subset of it to the very same bits, faster, and says so when a
 * buffer holds anything outside the subset; the caller then parses that buffer with the
 * numba parser, which also reports errors with their line. The subset, per line:
 *
 *   [label [importance]] ['tag]|ns[:scale] f[:v] f2 ... |ns2 ...
 *
 * (a line without '|', empty lines included, goes to the numba parser: it keeps their count)
 *
 * numbers as [-]digits[.digits][e[-]digits] (no '+'), no --ignore_linear (--ignore and
 * --keep: the namespace characters to drop, as 256 bytes).
 * Features come out in VW's order: the parse order, or where a namespace character comes
 * back later in a line (|user x |geo y |unit z), grouped by namespace character in order
 * of first appearance as VW's ec.indices holds them; then the constant, then the
 * interactions (-q, --cubic, --interactions) built from each namespace character's run as
 * _interactions.emit_interactions builds them (VW's order, hashing and products).
 * grams (512 bytes: --ngram's n of each namespace character, then its --skips) appends
 * each namespace's n-grams after its features, as VW's kskip_ngram_transformer (and
 * _vwgen's rewrite of the text) does. spell (257 bytes: a nonzero byte for each namespace
 * character that --spelling names, then the character its spelling features are filed
 * under, _vwgen's name of VW's spelling namespace) adds, for each feature of a spelled
 * namespace that a zero value does not drop (one of an --ignore'd namespace included, as
 * VW spells it before --ignore drops the namespace), VW's hashstring of its name's
 * spelling (0 a A . #, one byte each) in the namespace's hash, of the feature's value; the
 * spelling namespace is listed where VW lists it: at its first feature, before a
 * namespace that is new on the line (a namespace named with that character: the caller).
 * gen (GEN_SPEC bytes, _vwgen.FeatureGen.spec) is the rest of VW's parse-time feature
 * generation: --redefine's table (256 bytes: the letter each named namespace's first
 * byte is filed under; its features keep their own namespace's hash), --feature_limit's
 * limit of each namespace letter (256 int32, -1 for none: a namespace of more features is
 * sorted by (index, value) and its first N distinct indices kept), --hash_seed (uint32:
 * the seed of every name's hash), --hash all (a byte: every name hashed with murmur3, an
 * all-digit one too) and --sort_features (a byte: each namespace sorted, a repeated index
 * kept once), as _vwgen's rewrite of the text does them; then, for --affix, the character
 * its features are filed under and each namespace character's affixes (16 bytes: codes
 * L << 1 | prefix, 0 ending them): each named feature of a nonzero value adds, for each,
 * its first (or last) L bytes hashed in the namespace's hash (as its name), times
 * 13903957 + code * 27942141 (VW's parse_example_text), of the feature's value; they are
 * kept apart and listed as the spelling namespace is (with --spelling too, in VW's order:
 * a feature's affixes before its spelling, each side namespace listed at its first).
 *
 * parse(buf, mask, constant, indptr, indices, values, labels, weights, tag_ptr, tag_blob
 *       [, table, rows, width[, ignore[, grams[, ignore_linear, ignored[, spell[, gen]]]]]])
 *       -> (status, examples, features, tag bytes)
 * (format_predictions, VW's -p lines, is at the end; learn, VW's online update, is
 * _vwlearn.c's.)
 * status 0: done; 1: the buffer holds something outside the subset (nothing usable);
 * 2: the output arrays are too small (MemoryError where the line's scratch cannot be had). The arrays are writable buffers of int64 (indptr,
 * one more than labels), uint32, float32, float32, float32, int64 (as indptr) and bytes;
 * table is _interactions.interaction_table's int32 array (rows x width, C order: the
 * order, plus 256 for permutations, then the namespace bytes), rows 0 for none;
 * ignore_linear 256 flags by namespace character, ignored int64 (one an example: how many
 * features --ignore_linear kept out of each, which VW counts).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "_vwbits.h"
#include "_vwtable.h"
#include "_vwlearn.h"
#include "_vwsparse.h"

#define CONSTANT_HASH 11650396u

static float NEG10[38], POS10[39];

static inline int is_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\r'; }

/* what ends a feature token: space, tab, CR, '|', LF */
static unsigned char SEP[256];

static inline uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

/* murmur3's finalization of the hash h of n bytes */
static inline uint32_t fmix32(uint32_t h, size_t n) {
    h ^= (uint32_t)n;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h;
}

/* murmur3's mix of one 4-byte block k (read little-endian) into h; and of the tail's k */
static inline uint32_t murmur3_tail(uint32_t h, uint32_t k) {
    k *= 0xcc9e2d51u;
    k = rotl32(k, 15);
    k *= 0x1b873593u;
    return h ^ k;
}

static inline uint32_t murmur3_block(uint32_t h, uint32_t k) {
    h = rotl32(murmur3_tail(h, k), 13);
    return h * 5 + 0xe6546b64u;
}

static uint32_t murmur3(const unsigned char *p, size_t n, uint32_t seed) {
    uint32_t h = seed;
    size_t nb = n / 4;
    for (size_t i = 0; i < nb; i++) {
        uint32_t k;
        memcpy(&k, p + 4 * i, 4); /* little-endian, as the numba version assembles it */
        h = murmur3_block(h, k);
    }
    const unsigned char *t = p + nb * 4;
    uint32_t k = 0;
    switch (n & 3) {
    case 3: k ^= (uint32_t)t[2] << 16; /* fall through */
    case 2: k ^= (uint32_t)t[1] << 8;  /* fall through */
    case 1:
        k ^= t[0];
        h = murmur3_tail(h, k);
    }
    return fmix32(h, n);
}

/* murmur3 of the n (1..7) low bytes of x: the same bits, read from the word */
static inline uint32_t murmur3_word(uint64_t x, int n, uint32_t seed) {
    uint32_t h = seed;
    if (n >= 4) {
        h = murmur3_block(h, (uint32_t)x);
        x >>= 32;
    }
    if (n & 3)
        h = murmur3_tail(h, (uint32_t)x & ((1u << (8 * (n & 3))) - 1));
    return fmix32(h, n);
}

/* VW's hashstring: an all-digit string hashes to its value plus the seed */
static inline uint32_t hashstring(const unsigned char *p, size_t n, uint32_t seed) {
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned c = p[i];
        if (c < '0' || c > '9')
            return murmur3(p, n, seed);
        v = (v * 10 + (c - '0')) & 0xFFFFFFFFFFFFull;
    }
    return (uint32_t)((v + seed) & 0xFFFFFFFFu);
}

/* --spelling: each byte of a name as VW spells it (0 a A . #) */
static unsigned char SPELT[256];

/* VW's hashstring of the spelling of the n bytes at p: an all-digit name's spelling is all
 * '0', of value 0 (the seed itself, as an empty spelling's); else murmur3 of the spelt
 * bytes */
static uint32_t spelling_hash(const unsigned char *p, size_t n, uint32_t seed) {
    size_t i = 0;
    while (i < n && p[i] >= '0' && p[i] <= '9')
        i++;
    if (i == n)
        return seed;
    uint32_t h = seed, k;
    size_t nb = n / 4;
    for (i = 0; i < nb; i++) {
        const unsigned char *t = p + 4 * i;
        h = murmur3_block(h, (uint32_t)SPELT[t[0]] | (uint32_t)SPELT[t[1]] << 8 |
                                 (uint32_t)SPELT[t[2]] << 16 | (uint32_t)SPELT[t[3]] << 24);
    }
    const unsigned char *t = p + nb * 4;
    k = 0;
    switch (n & 3) {
    case 3: k ^= (uint32_t)SPELT[t[2]] << 16; /* fall through */
    case 2: k ^= (uint32_t)SPELT[t[1]] << 8;  /* fall through */
    case 1:
        k ^= SPELT[t[0]];
        h = murmur3_tail(h, k);
    }
    return fmix32(h, n);
}

/* a line's spelling (or affix) features, kept apart until the line's namespaces are laid
 * out */
typedef struct {
    uint32_t *idx;
    float *val;
    Py_ssize_t n, cap;
    int seg; /* the segment whose feature made the first one (-1: none yet) */
    int ns;  /* the namespace character they are filed under (-1: none asked for) */
} spelt_t;

/* appends (h, v) made in segment seg; 0 where memory ran out */
static inline int spelt_push(spelt_t *sp, uint32_t h, float v, int seg) {
    if (sp->n == sp->cap) {
        Py_ssize_t cap = sp->cap ? 2 * sp->cap : 256;
        uint32_t *i2 = realloc(sp->idx, (size_t)cap * 4);
        if (!i2)
            return 0;
        sp->idx = i2;
        float *v2 = realloc(sp->val, (size_t)cap * 4);
        if (!v2)
            return 0;
        sp->val = v2;
        sp->cap = cap;
    }
    if (sp->n == 0)
        sp->seg = seg;
    sp->idx[sp->n] = h;
    sp->val[sp->n++] = v;
    return 1;
}

/* [-]digits[.digits][(e|E)[-]digits] in [s, e), read as VW reads it (its float loop and
 * its float powers of ten: _vwfloat.parse_float32); 0: not that form, or a value VW's
 * reading refuses (the numba parser then reports it). The digits are summed as an integer
 * where every step of VW's float loop is exact (at most 15 digits, partial sums below
 * 2^24), else VW's loop is replayed: every operation rounded to float, as VW's (compiled
 * without FMA contraction). */
static inline int read_number(const unsigned char *s, const unsigned char *e, float *out) {
    int neg = 0;
    if (s < e && *s == '-') {
        neg = 1;
        s++;
    }
    const unsigned char *d0 = s;
    int64_t acc = 0;
    int nd = 0, dec = 0;
    while (s < e && (unsigned)(*s - '0') <= 9) {
        if (nd < 18)
            acc = acc * 10 + (*s - '0');
        s++;
        nd++;
    }
    const unsigned char *dot = s;
    if (s < e && *s == '.') {
        s++;
        while (s < e && (unsigned)(*s - '0') <= 9) {
            if (dec < 35) {
                if (nd < 18)
                    acc = acc * 10 + (*s - '0');
                dec++;
            }
            s++;
            nd++;
        }
    }
    const unsigned char *mend = s;
    if (nd == 0)
        return 0;
    int x = -dec;
    if (s < e && (*s == 'e' || *s == 'E')) {
        s++;
        int eneg = 0, ed = 0, ev = 0;
        if (s < e && *s == '-') {
            eneg = 1;
            s++;
        }
        while (s < e && (unsigned)(*s - '0') <= 9) {
            ev = ev * 10 + (*s - '0');
            if (ev > 100000)
                ev = 100000;
            s++;
            ed++;
        }
        if (ed == 0)
            return 0;
        x = (eneg ? -ev : ev) - dec;
    }
    if (s != e || x < -128 || x > 127)
        return 0;
    float f;
    if (nd <= 15 && acc < 16777160) {
        f = (float)acc;
    } else {
        f = 0.0f;
        const unsigned char *q = d0;
        for (; q < dot; q++) {
            float t = f * 10.0f;
            t = t + (float)*q;
            f = t - 48.0f;
        }
        if (dot < mend) {
            int k = 0;
            for (q = dot + 1; q < mend; q++) {
                if (k < 35) {
                    float t = f * 10.0f;
                    f = t + (float)(*q - '0');
                    k++;
                }
            }
        }
    }
    float p = x > 38 ? __builtin_inff() : x < -37 ? 0.0f : x >= 0 ? POS10[x] : NEG10[-x];
    float v = f * p;
    if (!(v <= 3.4028234663852886e38f && v >= -3.4028234663852886e38f))
        return 0; /* an overflow (or 0 * inf): the numba parser reports it */
    *out = neg ? -v : v;
    return 1;
}

/* murmur3(data, seed) -> int: VW's uniform_hash of the bytes data (MurmurHash3 x86_32)
 * (any bytes-like object) under a 32-bit seed, for the names hashed in Python (_hashnames.murmur3_32's bits, at a
 * thirtieth of its time: --invert_hash and --audit name every feature of the lines they
 * read) */
static PyObject *vw_murmur3(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "murmur3(data, seed) takes 2 arguments");
        return NULL;
    }
    unsigned long long seed = PyLong_AsUnsignedLongLongMask(args[1]);
    if (seed == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (PyBytes_Check(args[0])) /* (the common case, without a buffer's bookkeeping) */
        return PyLong_FromUnsignedLong(murmur3(
            (const unsigned char *)PyBytes_AS_STRING(args[0]),
            (size_t)PyBytes_GET_SIZE(args[0]), (uint32_t)seed));
    Py_buffer b;
    if (PyObject_GetBuffer(args[0], &b, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t h = murmur3((const unsigned char *)b.buf, (size_t)b.len, (uint32_t)seed);
    PyBuffer_Release(&b);
    return PyLong_FromUnsignedLong(h);
}

/* number(text) -> float, or None: read_number's value of the whole of text (bytes), None
 * where it is not that form (_vwgen's rewrite then reads it as the numba parser does) */
static PyObject *vw_number(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "y*", &b))
        return NULL;
    float v = 0.0f;
    const unsigned char *s = b.buf;
    int ok = read_number(s, s + b.len, &v);
    PyBuffer_Release(&b);
    if (!ok)
        Py_RETURN_NONE;
    return PyFloat_FromDouble((double)v);
}

/* Eight bytes at a time: most feature names are short (a few letters and digits), and a
 * byte-by-byte scan pays a mispredicted branch where each name ends and another where its
 * digits end. A word of the next eight bytes (little-endian: the first byte lowest) says
 * at once where the name stops, whether it is all digits and, if so, its value. */
#define ONES 0x0101010101010101ull
#define HIGHS 0x8080808080808080ull

/* the high bit of every zero byte of v, exact up to the lowest one (a borrow can mark a
 * byte above it; only the lowest is used) */
static inline uint64_t zero_bytes(uint64_t v) { return (v - ONES) & ~v & HIGHS; }

/* the bytes of x that end a feature's name: space, tab, CR, LF, '|' and ':' */
static inline uint64_t name_stops(uint64_t x) {
    return zero_bytes(x ^ (ONES * ' ')) | zero_bytes(x ^ (ONES * '\t')) |
           zero_bytes(x ^ (ONES * '\r')) | zero_bytes(x ^ (ONES * '\n')) |
           zero_bytes(x ^ (ONES * '|')) | zero_bytes(x ^ (ONES * ':'));
}

/* the first byte at or after q that ends a token (space, tab, CR, LF, '|'), or end */
static inline const unsigned char *token_end(const unsigned char *q, const unsigned char *end) {
    while (end - q >= 8) {
        uint64_t x;
        memcpy(&x, q, 8);
        uint64_t st = zero_bytes(x ^ (ONES * ' ')) | zero_bytes(x ^ (ONES * '\t')) |
                      zero_bytes(x ^ (ONES * '\r')) | zero_bytes(x ^ (ONES * '\n')) |
                      zero_bytes(x ^ (ONES * '|'));
        if (st)
            return q + (__builtin_ctzll(st) >> 3);
        q += 8;
    }
    while (q < end && !SEP[*q])
        q++;
    return q;
}

/* whether the bytes of x under keep are all '0'..'9' (a byte 0x3N with N + 6 < 16); the
 * carry of x + 0x06.. out of a byte >= 0xFA only reaches bytes above one already refused */
static inline int all_digits(uint64_t x, uint64_t keep) {
    const uint64_t hi = 0xF0F0F0F0F0F0F0F0ull, d = ONES * 0x30;
    return ((((x & hi) ^ d) | (((x + ONES * 6) & hi) ^ d)) & keep) == 0;
}

/* the value of the n (1..8) decimal digits in the low bytes of x: they are moved to the
 * top as a zero-padded 8-digit number, whose digits are combined in pairs, fours, eights
 * (Lemire, "Faster integer parsing", 2018); a borrow of the subtraction only moves up
 * from the bytes past the digits, which the shift drops */
static inline uint32_t digits_value(uint64_t x, int n) {
    uint64_t t = (x - ONES * '0') << (8 * (8 - n));
    t = t * 10 + (t >> 8);
    t = (((t & 0x000000FF000000FFull) * (100 + (1000000ull << 32))) +
         (((t >> 16) & 0x000000FF000000FFull) * (1 + (10000ull << 32)))) >> 32;
    return (uint32_t)t;
}

#define MAX_ORDER 32 /* longer interactions go to the numba parser */
#define MAX_SEGS 1024 /* namespaces opened on one line (more: the numba parser) */

/* The table's namespace runs, written to skip (rows x width): skip[t * width + k] is the first
 * row after t without row t's term k (namespace character) among its terms. Where that
 * namespace is absent from an example, every row up to there is absent too: VW's order
 * (sorted, wildcards expanded in order) puts the rows of a namespace together, so an
 * example with few of a wildcard's namespaces looks at few of its rows. */
static void namespace_runs(const int32_t *tab, Py_ssize_t rows, Py_ssize_t width,
                           int32_t *skip) {
    int32_t last[256], end[256]; /* (the row last seen with c, going up; its run's end) */
    for (int c = 0; c < 256; c++)
        last[c] = -1;
    for (Py_ssize_t t = rows - 1; t >= 0; t--) {
        const int32_t *row = tab + t * width;
        int order = row[0] & 255;
        for (int k = 0; k < order; k++) {
            int c = row[1 + k];
            if (last[c] != t + 1 && last[c] != t)
                end[c] = (int32_t)(t + 1);
            last[c] = (int32_t)t;
        }
        for (int k = 0; k < order; k++)
            skip[t * width + k] = end[row[1 + k]];
    }
}

/* Whether namespace character c has features in the example: opened on stamp, not empty. */
#define HAS_FEATURES(c) (opened[c] == stamp && ge[c] > gs[c])

/* The rows of the table whose namespaces all have features in the example, in order,
 * written to live; their count. A row with an absent namespace goes on past that
 * namespace's run (namespace_runs). */
static Py_ssize_t live_rows(const int32_t *tab, const int32_t *skip, Py_ssize_t rows,
                            Py_ssize_t width, const uint32_t *opened, uint32_t stamp,
                            const Py_ssize_t *gs, const Py_ssize_t *ge, int32_t *live) {
    Py_ssize_t n = 0;
    for (Py_ssize_t t = 0; t < rows;) {
        const int32_t *row = tab + t * width;
        int order = row[0] & 255, ok = 1;
        int32_t next = 0;
        for (int k = 0; k < order; k++) {
            int c = row[1 + k];
            if (!HAS_FEATURES(c)) {
                int32_t past = skip[t * width + k];
                if (ok || past > next)
                    next = past;
                ok = 0;
            }
        }
        if (ok)
            live[n++] = (int32_t)t++;
        else
            t = next;
    }
    return n;
}

/* The interaction features of one example over the table's rows live[0, nlive) (live_rows),
 * appended at *nnz (status 2 where they do not fit): namespace character c's features are
 * indices/values [gs[c], ge[c]). An odometer over the terms, the last one fastest; a term
 * that repeats the previous namespace starts at the previous term's feature (VW's
 * combinations) unless the row permutes. The index is h = i1, then h = h * 16777619 ^ ik
 * (FNV prime, 32 bits), masked at the end; the value the product of the values, in float. */
static int emit_interactions(const int32_t *tab, const int32_t *live, Py_ssize_t nlive,
                             Py_ssize_t width, const Py_ssize_t *gs, const Py_ssize_t *ge,
                             uint32_t *indices, float *values, Py_ssize_t *nnz_p,
                             Py_ssize_t fcap, uint32_t m) {
    Py_ssize_t nnz = *nnz_p;
    Py_ssize_t pos[MAX_ORDER];
    uint32_t hs[MAX_ORDER];
    float vs[MAX_ORDER];
    for (Py_ssize_t i = 0; i < nlive; i++) {
        const int32_t *row = tab + (Py_ssize_t)live[i] * width;
        int order = row[0] & 255, permute = row[0] >= 256;
        int k = 0;
        pos[0] = gs[row[1]];
        while (k >= 0) {
            int c = row[1 + k];
            if (pos[k] >= ge[c]) {
                k--;
                if (k >= 0)
                    pos[k]++;
                continue;
            }
            Py_ssize_t p = pos[k];
            if (k == 0) {
                hs[0] = indices[p];
                vs[0] = values[p];
            } else {
                hs[k] = (hs[k - 1] * 16777619u) ^ indices[p];
                vs[k] = vs[k - 1] * values[p];
            }
            if (k == order - 1) {
                if (nnz >= fcap)
                    return 2;
                indices[nnz] = hs[k] & m;
                values[nnz] = vs[k];
                nnz++;
                pos[k]++;
            } else {
                int nc = row[2 + k];
                pos[k + 1] = nc == c && !permute ? p : gs[nc];
                k++;
            }
        }
    }
    *nnz_p = nnz;
    return 0;
}

#define GRAM_CONSTANT 27942141ull /* VW's multiplier of an n-gram's indices */

/* VW's add_grams (kskip_ngram_transformer) over one namespace's indices idx[0, len): the
 * n-grams with up to skip_gram skips, of value 1, appended at *pos (2: no room). mask
 * holds the offsets of the words of the gram being built (mask[0] = 0). */
static int add_grams(const uint32_t *idx, Py_ssize_t len, int ngram, int skip_gram, int *mask,
                     int nmask, int skips, uint32_t *out_i, float *out_v, Py_ssize_t *pos,
                     Py_ssize_t fcap, uint32_t m) {
    if (ngram == 0 && mask[nmask - 1] < len) {
        for (Py_ssize_t i = 0; i < len - mask[nmask - 1]; i++) {
            uint64_t h = idx[i];
            for (int k = 1; k < nmask; k++)
                h = h * GRAM_CONSTANT + idx[i + mask[k]];
            if (*pos >= fcap)
                return 2;
            out_i[*pos] = (uint32_t)h & m;
            out_v[*pos] = 1.0f;
            (*pos)++;
        }
    }
    if (ngram > 0) {
        mask[nmask] = mask[nmask - 1] + 1 + skips;
        int st = add_grams(idx, len, ngram - 1, skip_gram, mask, nmask + 1, 0, out_i, out_v, pos,
                           fcap, m);
        if (st)
            return st;
    }
    if (skip_gram > 0 && ngram > 0)
        return add_grams(idx, len, ngram, skip_gram - 1, mask, nmask, skips + 1, out_i, out_v,
                         pos, fcap, m);
    return 0;
}

#define MAX_GRAM 16 /* longer n-grams (or more skips) go to the caller's rewrite */

/* The namespace characters of the line (line_ns) that have features, in the order of
 * their runs' starts gs[c] (runs [gs[c], ge[c])), written to order; returns how many. */
static int line_order(const unsigned char *line_ns, int n_line_ns, const Py_ssize_t *gs,
                      const Py_ssize_t *ge, unsigned char *order) {
    int no = 0;
    for (int j = 0; j < n_line_ns; j++) {
        unsigned char c = line_ns[j];
        if (ge[c] <= gs[c])
            continue;
        int a = no++;
        while (a > 0 && gs[order[a - 1]] > gs[c]) {
            order[a] = order[a - 1];
            a--;
        }
        order[a] = c;
    }
    return no;
}

/* The line's features [start, nnz) copied to the scratch tmp_i/tmp_v, from which the
 * caller lays its runs out again. */
static void line_copy(Py_ssize_t start, const uint32_t *indices, const float *values,
                      Py_ssize_t nnz, uint32_t *tmp_i, float *tmp_v) {
    memcpy(tmp_i, indices + start, (size_t)(nnz - start) * 4);
    memcpy(tmp_v, values + start, (size_t)(nnz - start) * 4);
}

/* --ngram/--skips: each namespace's n-grams right after its features (VW's order; the
 * interactions then cross them too). The line's features [start, *nnz_p), in runs
 * gs[c]..ge[c] of its namespace characters line_ns, are laid out again through tmp_i/tmp_v
 * (cap entries, the line's features at least). */
static int line_grams(const unsigned char *gn, const unsigned char *gk,
                      const unsigned char *line_ns, int n_line_ns, Py_ssize_t *gs,
                      Py_ssize_t *ge, Py_ssize_t start, uint32_t *indices, float *values,
                      Py_ssize_t *nnz_p, Py_ssize_t fcap, uint32_t m, uint32_t *tmp_i,
                      float *tmp_v) {
    unsigned char order[256];
    int no = line_order(line_ns, n_line_ns, gs, ge, order), any = 0;
    for (int j = 0; j < no; j++)
        any |= gn[order[j]] > 1;
    if (!any)
        return 0;
    Py_ssize_t pos = start;
    line_copy(start, indices, values, *nnz_p, tmp_i, tmp_v);
    for (int j = 0; j < no; j++) {
        unsigned char c = order[j];
        Py_ssize_t len = ge[c] - gs[c], from = gs[c] - start;
        if (pos + len > fcap)
            return 2;
        memcpy(indices + pos, tmp_i + from, (size_t)len * 4);
        memcpy(values + pos, tmp_v + from, (size_t)len * 4);
        gs[c] = pos;
        pos += len;
        int mask[MAX_GRAM + 2];
        for (int n = 1; n < gn[c]; n++) {
            mask[0] = 0;
            int st = add_grams(indices + gs[c], len, n, gk[c], mask, 1, 0, indices, values,
                               &pos, fcap, m);
            if (st)
                return st;
        }
        ge[c] = pos;
    }
    *nnz_p = pos;
    return 0;
}

/* Grows the line's scratch copies of its indices and values to 2 n (the old ones freed);
   0 where memory ran out (*cap is then 0; the caller's exit path frees what is left). */
static int grow_scratch(uint32_t **idx, float **val, Py_ssize_t *cap, Py_ssize_t n) {
    free(*idx);
    free(*val);
    *cap = 2 * n;
    *idx = malloc((size_t)*cap * 4);
    *val = malloc((size_t)*cap * 4);
    if (!*idx || !*val) {
        *cap = 0;
        return 0;
    }
    return 1;
}

/* --ignore_linear: the runs [gs[c], ge[c]) of the line's namespace characters c that
 * linear_off names, taken out of the example's features from ex_start to *nnz_p (the rest,
 * constant and crosses included, moved down in order); returns how many (VW counts them) */
static int64_t drop_linear(const unsigned char *linear_off, const unsigned char *line_ns,
                           int n_line_ns, const Py_ssize_t *gs, const Py_ssize_t *ge,
                           Py_ssize_t ex_start, uint32_t *indices, float *values,
                           Py_ssize_t *nnz_p) {
    Py_ssize_t rs[256], re[256];
    int nr = 0;
    for (int j = 0; j < n_line_ns; j++) { /* (the runs, by where they start) */
        unsigned char c = line_ns[j];
        if (!linear_off[c] || ge[c] <= gs[c])
            continue;
        int a = nr++;
        while (a > 0 && rs[a - 1] > gs[c]) {
            rs[a] = rs[a - 1];
            re[a] = re[a - 1];
            a--;
        }
        rs[a] = gs[c];
        re[a] = ge[c];
    }
    Py_ssize_t w = ex_start, from = ex_start;
    int64_t dropped = 0;
    for (int r = 0; r <= nr; r++) {
        Py_ssize_t to = r < nr ? rs[r] : *nnz_p;
        memmove(indices + w, indices + from, (size_t)(to - from) * 4);
        memmove(values + w, values + from, (size_t)(to - from) * 4);
        w += to - from;
        if (r < nr) {
            dropped += re[r] - rs[r];
            from = re[r];
        }
    }
    *nnz_p = w;
    return dropped;
}

#define GEN_SPEC 1286 /* --redefine, --feature_limit, --hash_seed, --hash all, --sort_features */
#define GEN_AFFIX (GEN_SPEC + 1 + 256 * 16) /* and --affix */
#define AFFIX_CONSTANT 13903957u

/* --affix: the affixes (codes, 0-ended, at most 16) of a feature named by the n bytes at
 * p, in namespace hash ns_hash, of value v, made in segment seg; 0 where memory ran out */
static int affix_push(spelt_t *sp, const unsigned char *codes, const unsigned char *p,
                      size_t n, uint32_t ns_hash, int hash_all, float v, uint32_t m, int seg) {
    for (int k = 0; k < 16 && codes[k]; k++) {
        size_t ln = codes[k] >> 1;
        if (ln > n)
            ln = n;
        const unsigned char *part = codes[k] & 1 ? p : p + n - ln;
        uint32_t h = hash_all ? murmur3(part, ln, ns_hash) : hashstring(part, ln, ns_hash);
        if (!spelt_push(sp, h * (AFFIX_CONSTANT + codes[k] * (uint32_t)GRAM_CONSTANT) & m, v,
                        seg))
            return 0;
    }
    return 1;
}

/* the side features of a feature named by the n bytes at p, of value v, made in segment
 * seg, in VW's order: its affixes (afx: the namespace's codes; none for an anonymous
 * feature, n == 0), then its spelling (spelled); side[0..1] list the two side buffers in
 * order of their first feature. 0 where memory ran out */
static int side_push(spelt_t *ap, const unsigned char *afx, spelt_t *sp, int spelled,
                     spelt_t **side, const unsigned char *p, size_t n, uint32_t ns_hash,
                     int hash_all, float v, uint32_t m, int seg) {
    if (afx && n) {
        if (!ap->n)
            side[side[0] != NULL] = ap;
        if (!affix_push(ap, afx, p, n, ns_hash, hash_all, v, m, seg))
            return 0; /* (afx holds one code at least: ap has a feature now) */
    }
    if (spelled) {
        if (!sp->n)
            side[side[0] != NULL] = sp;
        if (!spelt_push(sp, spelling_hash(p, n, ns_hash) & m, v, seg))
            return 0;
    }
    return 1;
}

/* a float's bits as an unsigned key of the same order (no NaN reaches here) */
static inline uint32_t float_key(float v) {
    uint32_t b;
    memcpy(&b, &v, 4);
    return b & 0x80000000u ? ~b : b | 0x80000000u;
}

static inline float key_float(uint32_t k) {
    uint32_t b = k & 0x80000000u ? k & 0x7FFFFFFFu : ~k;
    float v;
    memcpy(&v, &b, 4);
    return v;
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* --feature_limit and --sort_features (VW's feature_limit, _vwgen._limited): each
 * namespace character's run [gs[c], ge[c]) of the line's features [start, *nnz_p) that is
 * longer than its limit (any, with sort) is sorted by (index, value) and only the first of
 * each index kept, up to the limit; the runs are laid out again in their order through
 * tmp_i/tmp_v, keys (the line's features at least). */
static void line_limit(const int32_t *limit, int sort, const unsigned char *line_ns,
                       int n_line_ns, Py_ssize_t *gs, Py_ssize_t *ge, Py_ssize_t start,
                       uint32_t *indices, float *values, Py_ssize_t *nnz_p, uint32_t *tmp_i,
                       float *tmp_v, uint64_t *keys) {
    unsigned char order[256];
    int no = line_order(line_ns, n_line_ns, gs, ge, order);
    Py_ssize_t pos = start;
    line_copy(start, indices, values, *nnz_p, tmp_i, tmp_v);
    for (int j = 0; j < no; j++) {
        unsigned char c = order[j];
        Py_ssize_t len = ge[c] - gs[c], from = gs[c] - start;
        gs[c] = pos;
        if (!sort && !(limit[c] >= 0 && limit[c] < len)) {
            memcpy(indices + pos, tmp_i + from, (size_t)len * 4);
            memcpy(values + pos, tmp_v + from, (size_t)len * 4);
            pos += len;
            ge[c] = pos;
            continue;
        }
        Py_ssize_t keep = limit[c] >= 0 && limit[c] < len ? limit[c] : len;
        for (Py_ssize_t a = 0; a < len; a++)
            keys[a] = (uint64_t)tmp_i[from + a] << 32 | float_key(tmp_v[from + a]);
        if (len <= 16) {
            for (Py_ssize_t a = 1; a < len; a++) {
                uint64_t k = keys[a];
                Py_ssize_t b = a;
                for (; b > 0 && keys[b - 1] > k; b--)
                    keys[b] = keys[b - 1];
                keys[b] = k;
            }
        } else {
            qsort(keys, (size_t)len, 8, cmp_u64);
        }
        Py_ssize_t kept = 0;
        for (Py_ssize_t a = 0; a < len && kept < keep; a++) {
            if (kept && (uint32_t)(keys[a] >> 32) == indices[pos - 1])
                continue;
            indices[pos] = (uint32_t)(keys[a] >> 32);
            values[pos++] = key_float((uint32_t)keys[a]);
            kept++;
        }
        ge[c] = pos;
    }
    *nnz_p = pos;
}

static PyObject *parse(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bb, bp, bi, bv, bl, bw, btp, btb, bt = {0}, bg = {0}, bn = {0}, bo = {0},
              bx = {0}, bs = {0}, bz = {0};
    unsigned long mask;
    int constant;
    Py_ssize_t rows = 0, width = 0;
    if (!PyArg_ParseTuple(args, "y*kpw*w*w*w*w*w*w*|y*nny*y*y*w*y*y*", &bb, &mask, &constant,
                          &bp, &bi, &bv, &bl, &bw, &btp, &btb, &bt, &rows, &width, &bg, &bn,
                          &bo, &bx, &bs, &bz))
        return NULL;
    /* --redefine, --feature_limit, --hash_seed, --hash all, --sort_features */
    unsigned char redef[256];
    int32_t limit[256];
    uint32_t seed = 0;
    int hash_all = 0, sort = 0, limited = 0, status = 0, affix_ns = -1;
    const unsigned char *affix = NULL, *afx = NULL; /* --affix: all, the namespace's */
    for (int c = 0; c < 256; c++) {
        redef[c] = (unsigned char)c;
        limit[c] = -1;
    }
    if (bz.obj && bz.len >= GEN_SPEC) {
        const unsigned char *g = bz.buf;
        memcpy(redef, g, 256);
        memcpy(limit, g + 256, 1024);
        memcpy(&seed, g + 1280, 4);
        hash_all = g[1284] != 0;
        sort = g[1285] != 0;
        if (bz.len >= GEN_AFFIX) {
            affix = g + GEN_SPEC + 1;
            affix_ns = g[GEN_SPEC];
        }
    }
    for (int c = 0; c < 256; c++)
        limited |= limit[c] >= 0;
    /* the default namespace's hash: murmur3 of no bytes in the seed (0 without one) */
    const uint32_t blank_h = seed ? murmur3((const unsigned char *)"", 0, seed) : 0;
    /* --spelling: the namespace characters spelled, then the spelling namespace's */
    unsigned char spell[256];
    memset(spell, 0, sizeof spell);
    int spell_ns = -1;
    if (bs.obj && bs.len >= 257) {
        memcpy(spell, bs.buf, 256);
        spell_ns = ((const unsigned char *)bs.buf)[256];
    }
    /* --ignore_linear: a nonzero byte keeps that namespace character's features out of
     * the linear ones (crossed all the same); each example's count of them in `ignored` */
    unsigned char linear_off[256];
    memset(linear_off, 0, sizeof linear_off);
    int any_off = 0;
    if (bo.obj)
        memcpy(linear_off, bo.buf, bo.len < 256 ? (size_t)bo.len : 256);
    for (int c = 0; c < 256; c++)
        any_off |= linear_off[c];
    int64_t *ignored = bx.obj ? bx.buf : NULL;
    /* --ngram/--skips: n (0 or 1: none) of each namespace character, then its skips */
    const unsigned char *gram_n = NULL, *gram_k = NULL;
    if (bn.obj && bn.len >= 512) {
        gram_n = bn.buf;
        gram_k = gram_n + 256;
    }
    /* --ignore/--keep: a nonzero byte drops that namespace character's features */
    unsigned char drop[256];
    memset(drop, 0, sizeof drop);
    if (bg.obj)
        memcpy(drop, bg.buf, bg.len < 256 ? (size_t)bg.len : 256);
    const int32_t *tab = bt.buf;
    status |= any_off && !ignored; /* (no room for the counts: the numba parser) */
    if (rows < 0 || width < 2 || (size_t)bt.len < (size_t)(rows * width) * 4)
        rows = 0;
    for (Py_ssize_t t = 0; t < rows; t++) { /* anything unusual: the numba parser */
        int order = tab[t * width] & 255;
        if (order < 1 || order > MAX_ORDER || order > width - 1)
            status = 1;
        for (int k = 1; k <= order && !status; k++)
            if (tab[t * width + k] < 0 || tab[t * width + k] > 255)
                status = 1;
    }
    const unsigned char *buf = bb.buf;
    const unsigned char *end = buf + bb.len;
    int64_t *indptr = bp.buf;
    uint32_t *indices = bi.buf;
    float *values = bv.buf;
    float *labels = bl.buf;
    float *weights = bw.buf;
    int64_t *tag_ptr = btp.buf;
    unsigned char *tag_blob = btb.buf;
    Py_ssize_t tcap = btb.len;
    Py_ssize_t fcap = bi.len / 4, ncap = bl.len / 4;
    if (bv.len / 4 < fcap)
        fcap = bv.len / 4;
    if (bw.len / 4 < ncap)
        ncap = bw.len / 4;
    if (bp.len / 8 - 1 < ncap)
        ncap = bp.len / 8 - 1;
    if (btp.len / 8 - 1 < ncap)
        ncap = btp.len / 8 - 1;
    if (any_off && ignored && bx.len / 8 < ncap)
        ncap = bx.len / 8;
    Py_ssize_t nex = 0, nnz = 0, ntag = 0;
    uint32_t m = (uint32_t)mask;
    Py_BEGIN_ALLOW_THREADS
    const unsigned char *p = buf;
    uint32_t opened[256]; /* the line (+1) on which a namespace character was opened */
    memset(opened, 0, sizeof opened);
    Py_ssize_t gs[256], ge[256]; /* that line's run of each namespace character's features */
    uint32_t stamp = 0;
    const unsigned char *ns_name[256]; /* each character's last namespace name, its hash */
    size_t ns_len[256];
    uint32_t ns_h[256];
    for (int c = 0; c < 256; c++)
        ns_len[c] = SIZE_MAX;
    unsigned char line_ns[256]; /* the namespace characters opened on the line, in order */
    int n_line_ns = 0;
    /* a namespace character opened again after another one (|user_id x |geo y |unit z:
     * u twice): the line's features are grouped by namespace character, in order of
     * first appearance, as VW's ec.indices and the numba parser order them. Each '|'
     * starts a segment of the line's features (seg_s: where in indices); the segments of
     * one character are chained (seg_next) from first_seg to last_seg, and a line that
     * reopens a character is moved through tmp_i/tmp_v a segment at a time. A line with
     * more than MAX_SEGS namespaces goes to the numba parser. */
    Py_ssize_t seg_s[MAX_SEGS + 1];
    int seg_next[MAX_SEGS], first_seg[256], last_seg[256], n_seg = 0;
    unsigned char seg_c[MAX_SEGS];
    uint32_t *tmp_i = NULL;
    float *tmp_v = NULL;
    uint64_t *keys = NULL; /* (--feature_limit/--sort_features: a run's sort keys) */
    Py_ssize_t tmp_cap = 0, key_cap = 0;
    int32_t *skip = NULL; /* (the interactions' namespace runs) */
    int32_t *live = NULL; /* (the rows crossed for the namespaces with features in live_key) */
    uint64_t live_key[4];
    Py_ssize_t nlive = -1; /* (-1: none yet) */
    unsigned char tab_ns[256]; /* (the namespace characters the table crosses) */
    int n_tab_ns = 0;
    spelt_t sp = {NULL, NULL, 0, 0, -1, spell_ns}, ap = {NULL, NULL, 0, 0, -1, affix_ns};
    spelt_t *side[2]; /* the line's side buffers, in order of their first feature */
    int spelled = 0; /* whether the namespace being read is spelled */
    if (ncap >= 0)
        indptr[0] = tag_ptr[0] = 0;
    if (rows && !status) {
        if (!(skip = malloc((size_t)(rows * width) * sizeof *skip)) ||
            !(live = malloc((size_t)rows * sizeof *live))) {
            status = 3;
            goto done;
        }
        namespace_runs(tab, rows, width, skip);
        char in_tab[256] = {0};
        for (Py_ssize_t t = 0; t < rows; t++)
            for (int k = 0; k < (tab[t * width] & 255); k++)
                in_tab[tab[t * width + 1 + k] & 255] = 1;
        for (int c = 0; c < 256; c++)
            if (in_tab[c])
                tab_ns[n_tab_ns++] = (unsigned char)c;
    }
    for (int c = 0; gram_n && c < 256; c++)
        if (gram_n[c] > MAX_GRAM || gram_k[c] > MAX_GRAM)
            status = 1;
    if (status)
        p = end;
    while (p < end) {
        stamp++;
        /* the label section: words up to the first '|'; the last one is the tag if it
         * starts with ' or touches the '|' */
        const unsigned char *q = p, *tag_s = NULL, *tag_e = NULL;
        float label = __builtin_nanf(""), weight = 1.0f;
        int nnum = 0;
        for (;;) {
            while (q < end && is_space(*q)) {
                /* VW reads the label section from past its first tab: the numba parser */
                if (*q == '\t') { status = 1; goto done; }
                q++;
            }
            if (q == end || *q == '\n' || *q == '|')
                break;
            const unsigned char *ts = q;
            while (q < end && !SEP[*q])
                q++;
            if ((q < end && *q == '|') || *ts == '\'') {
                const unsigned char *j = q;
                while (j < end && is_space(*j))
                    j++;
                if (j < end && *j == '|') {
                    tag_s = *ts == '\'' ? ts + 1 : ts;
                    tag_e = q;
                    continue;
                }
            }
            float v;
            if (!read_number(ts, q, &v) || nnum >= 2) { status = 1; goto done; }
            if (nnum == 0)
                label = v;
            else if (v < 0) { status = 1; goto done; }
            else
                weight = v;
            nnum++;
        }
        if (q == end || *q == '\n') {
            /* no '|': an error line, an example of the constant only, or an empty line
             * (VW counts it for the holdout): the numba parser reads them */
            status = 1;
            goto done;
        }
        if (nex >= ncap) { status = 2; goto done; }
        /* the features, from the first '|' to the line's end */
        uint32_t ns_hash = 0, anon = 0; /* anon: the namespace's running count of :v features */
        n_line_ns = n_seg = 0;
        sp.n = ap.n = 0;
        sp.seg = ap.seg = -1;
        side[0] = side[1] = NULL;
        int ns_c = -1, regroup = 0;
        const Py_ssize_t ex_start = nnz;
        float scale = 1.0f;
        while (q < end && *q != '\n') {
            unsigned char c = *q;
            if (c == '|') {
                q++;
                const unsigned char *ts = q;
                q = token_end(q, end);
                int nc = ts == q ? ' ' : *ts;
                if (nc == ':') { status = 1; goto done; } /* |:2: the numba parser refuses it */
                if (ts != q) /* (--redefine: a named namespace's letter) */
                    nc = redef[nc];
                /* |name:scale (the first ':'): the scale multiplies the values, in float */
                const unsigned char *colon = memchr(ts, ':', (size_t)(q - ts));
                scale = 1.0f;
                if (colon && !read_number(colon + 1, q, &scale)) { status = 1; goto done; }
                if (n_seg == MAX_SEGS || nc == spell_ns || nc == affix_ns)
                    { status = 1; goto done; }
                spelled = spell[nc] && !(spell_ns >= 0 && drop[spell_ns]);
                afx = affix && affix[16 * nc] && !drop[affix_ns] ? affix + 16 * nc : NULL;
                seg_s[n_seg] = nnz;
                seg_next[n_seg] = -1;
                seg_c[n_seg] = (unsigned char)nc;
                if (opened[nc] == stamp) {
                    regroup |= nc != ns_c;
                    seg_next[last_seg[nc]] = n_seg;
                } else {
                    first_seg[nc] = n_seg;
                    line_ns[n_line_ns++] = (unsigned char)nc;
                }
                last_seg[nc] = n_seg++;
                opened[nc] = stamp;
                ns_c = nc;
                /* the namespace's hash: the last one of this character's, where the name
                 * is the same (most lines open the same namespaces) */
                size_t nl = (size_t)((colon ? colon : q) - ts);
                if (nl == ns_len[nc] && memcmp(ts, ns_name[nc], nl) == 0) {
                    ns_hash = ns_h[nc];
                } else {
                    ns_hash = !nl ? blank_h : hash_all ? murmur3(ts, nl, seed)
                                                       : hashstring(ts, nl, seed);
                    ns_name[nc] = ts;
                    ns_len[nc] = nl;
                    ns_h[nc] = ns_hash;
                }
                anon = 0;
                continue;
            }
            if (is_space(c)) {
                q++;
                continue;
            }
            if (end - q >= 8) { /* a name of 1-7 bytes, no value: a word at a time */
                uint64_t x;
                memcpy(&x, q, 8);
                uint64_t st = name_stops(x);
                int n = st ? __builtin_ctzll(st) >> 3 : 0;
                if (n > 0 && q[n] != ':') {
                    q += n;
                    if (scale == 0.0f) /* (the value: scale * 1, exactly) */
                        continue;
                    if ((spelled || afx) &&
                        !side_push(&ap, afx, &sp, spelled, side, q - n, (size_t)n, ns_hash,
                                   hash_all, scale, m, n_seg - 1)) {
                        status = 3;
                        goto done;
                    }
                    if (drop[ns_c])
                        continue;
                    uint32_t h = !hash_all && all_digits(x, (1ull << (8 * n)) - 1)
                                     ? digits_value(x, n) + ns_hash /* VW's hashstring */
                                     : murmur3_word(x, n, ns_hash);
                    if (nnz >= fcap) { status = 2; goto done; }
                    indices[nnz] = h & m;
                    values[nnz] = scale;
                    nnz++;
                    continue;
                }
                if (n > 0) { /* name:value, the name of 1-7 bytes in the word */
                    const unsigned char *nm = q, *vs = q + n + 1;
                    q = token_end(vs, end);
                    float v;
                    /* (a second ':' is no number: the numba parser refuses x:1:2) */
                    if (!read_number(vs, q, &v)) { status = 1; goto done; }
                    v = scale * v;
                    if (v == 0.0f)
                        continue;
                    if ((spelled || afx) &&
                        !side_push(&ap, afx, &sp, spelled, side, nm, (size_t)n, ns_hash,
                                   hash_all, v, m, n_seg - 1)) {
                        status = 3;
                        goto done;
                    }
                    if (drop[ns_c])
                        continue;
                    uint32_t h = !hash_all && all_digits(x, (1ull << (8 * n)) - 1)
                                     ? digits_value(x, n) + ns_hash
                                     : murmur3_word(x, n, ns_hash);
                    if (nnz >= fcap) { status = 2; goto done; }
                    indices[nnz] = h & m;
                    values[nnz] = v;
                    nnz++;
                    continue;
                }
            }
            const unsigned char *ts = q;
            q = token_end(q, end);
            const unsigned char *colon = memchr(ts, ':', (size_t)(q - ts));
            if (colon && memchr(colon + 1, ':', (size_t)(q - colon - 1)))
                { status = 1; goto done; } /* x:1:2: the numba parser refuses it */
            float v = 1.0f;
            const unsigned char *ne = q;
            if (colon) {
                ne = colon;
                if (!read_number(colon + 1, q, &v)) { status = 1; goto done; }
            }
            v = scale * v; /* VW: the namespace's scale times the value, in float */
            /* an anonymous feature (:v) is the namespace hash plus its running count in
             * this namespace, counted before a zero value drops it, as VW's parser does */
            uint32_t h = 0;
            if (ne == ts)
                h = ns_hash + anon++;
            if (v == 0.0f)
                continue;
            /* (an anonymous feature's spelling is empty: the namespace's hash) */
            if ((spelled || afx) &&
                !side_push(&ap, afx, &sp, spelled, side, ts, (size_t)(ne - ts), ns_hash,
                           hash_all, v, m, n_seg - 1)) {
                status = 3;
                goto done;
            }
            if (drop[ns_c])
                continue;
            if (ne != ts) {
                unsigned c0 = *ts;
                h = hash_all || c0 < '0' || c0 > '9'
                        ? murmur3(ts, (size_t)(ne - ts), ns_hash)
                        : hashstring(ts, (size_t)(ne - ts), ns_hash);
            }
            if (nnz >= fcap) { status = 2; goto done; }
            indices[nnz] = h & m;
            values[nnz] = v;
            nnz++;
        }
        seg_s[n_seg] = nnz; /* (the last segment's end) */
        for (int j = 0; j < 2 && side[j]; j++) { /* the side namespaces join the line's */
            regroup = 1;
            line_ns[n_line_ns++] = (unsigned char)side[j]->ns;
            opened[side[j]->ns] = stamp;
            first_seg[side[j]->ns] = -1;
        }
        if (regroup) {
            Py_ssize_t cnt = nnz - ex_start + sp.n + ap.n;
            if (ex_start + cnt > fcap) { status = 2; goto done; }
            if (cnt > tmp_cap && !grow_scratch(&tmp_i, &tmp_v, &tmp_cap, cnt)) {
                status = 3;
                goto done;
            }
            /* in order of each character's first feature (one without: empty); a side
             * namespace before the segment that made its first feature */
            unsigned char order[256];
            int no = 0;
            for (int j = 0; j < n_line_ns; j++)
                gs[line_ns[j]] = ge[line_ns[j]] = -1;
            for (int g = 0; g < n_seg; g++) {
                unsigned char c = seg_c[g];
                for (int j = 0; j < 2 && side[j]; j++)
                    if (g == side[j]->seg) {
                        gs[side[j]->ns] = 0;
                        order[no++] = (unsigned char)side[j]->ns;
                    }
                if (seg_s[g + 1] > seg_s[g] && gs[c] < 0) {
                    gs[c] = 0;
                    order[no++] = c;
                }
            }
            for (int j = 0; j < n_line_ns; j++)
                if (gs[line_ns[j]] < 0)
                    gs[line_ns[j]] = ge[line_ns[j]] = ex_start;
            Py_ssize_t off = 0;
            for (int j = 0; j < no; j++) {
                unsigned char c = order[j];
                gs[c] = ex_start + off;
                for (int j = 0; j < 2 && side[j]; j++)
                    if (c == side[j]->ns) {
                        memcpy(tmp_i + off, side[j]->idx, (size_t)side[j]->n * 4);
                        memcpy(tmp_v + off, side[j]->val, (size_t)side[j]->n * 4);
                        off += side[j]->n;
                    }
                for (int g = first_seg[c]; g >= 0; g = seg_next[g]) {
                    for (Py_ssize_t a = seg_s[g]; a < seg_s[g + 1]; a++, off++) {
                        tmp_i[off] = indices[a]; /* (a few features a segment) */
                        tmp_v[off] = values[a];
                    }
                }
                ge[c] = ex_start + off;
            }
            memcpy(indices + ex_start, tmp_i, (size_t)cnt * 4);
            memcpy(values + ex_start, tmp_v, (size_t)cnt * 4);
            nnz = ex_start + cnt;
        } else {
            /* each character's segments are adjacent (|a x |a y): one run */
            for (int j = 0; j < n_line_ns; j++) {
                unsigned char c = line_ns[j];
                gs[c] = seg_s[first_seg[c]];
                ge[c] = seg_s[last_seg[c] + 1];
            }
        }
        if ((sort || limited) && nnz > ex_start) {
            Py_ssize_t cnt = nnz - ex_start;
            if (cnt > tmp_cap && !grow_scratch(&tmp_i, &tmp_v, &tmp_cap, cnt)) {
                status = 3;
                goto done;
            }
            if (key_cap < tmp_cap) { /* (as large as the scratch) */
                free(keys);
                key_cap = tmp_cap;
                if (!(keys = malloc((size_t)key_cap * 8))) {
                    status = 3;
                    goto done;
                }
            }
            line_limit(limit, sort, line_ns, n_line_ns, gs, ge, ex_start, indices, values,
                       &nnz, tmp_i, tmp_v, keys);
        }
        if (gram_n) {
            Py_ssize_t cnt = nnz - ex_start;
            if (cnt > tmp_cap && !grow_scratch(&tmp_i, &tmp_v, &tmp_cap, cnt)) {
                status = 3;
                goto done;
            }
            if ((status = line_grams(gram_n, gram_k, line_ns, n_line_ns, gs, ge, ex_start,
                                     indices, values, &nnz, fcap, m, tmp_i, tmp_v)))
                goto done;
        }
        if (constant) {
            if (nnz >= fcap) { status = 2; goto done; }
            indices[nnz] = CONSTANT_HASH & m;
            values[nnz] = 1.0f;
            nnz++;
        }
        if (rows) { /* (the live rows kept while the namespaces with features stay) */
            uint64_t key[4] = {0, 0, 0, 0};
            for (int j = 0; j < n_tab_ns; j++) {
                int c = tab_ns[j];
                if (HAS_FEATURES(c))
                    key[c >> 6] |= 1ull << (c & 63);
            }
            if (nlive < 0 || memcmp(key, live_key, sizeof key)) {
                nlive = live_rows(tab, skip, rows, width, opened, stamp, gs, ge, live);
                memcpy(live_key, key, sizeof key);
            }
            if ((status = emit_interactions(tab, live, nlive, width, gs, ge, indices, values,
                                            &nnz, fcap, m)))
                goto done;
        }
        if (any_off) /* (after the crosses, which read the namespaces' runs) */
            ignored[nex] = drop_linear(linear_off, line_ns, n_line_ns, gs, ge, ex_start,
                                       indices, values, &nnz);
        if (tag_e > tag_s) {
            if (ntag + (tag_e - tag_s) > tcap) { status = 2; goto done; }
            memcpy(tag_blob + ntag, tag_s, (size_t)(tag_e - tag_s));
            ntag += tag_e - tag_s;
        }
        labels[nex] = label;
        weights[nex] = weight;
        nex++;
        indptr[nex] = nnz;
        tag_ptr[nex] = ntag;
        p = q + 1;
    }
done:
    free(tmp_i);
    free(tmp_v);
    free(keys);
    free(skip);
    free(live);
    free(sp.idx);
    free(sp.val);
    free(ap.idx);
    free(ap.val);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bb);
    PyBuffer_Release(&bp);
    PyBuffer_Release(&bi);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&bl);
    PyBuffer_Release(&bw);
    PyBuffer_Release(&btp);
    PyBuffer_Release(&btb);
    if (bt.obj)
        PyBuffer_Release(&bt);
    if (bg.obj)
        PyBuffer_Release(&bg);
    if (bn.obj)
        PyBuffer_Release(&bn);
    if (bo.obj)
        PyBuffer_Release(&bo);
    if (bx.obj)
        PyBuffer_Release(&bx);
    if (bs.obj)
        PyBuffer_Release(&bs);
    if (bz.obj)
        PyBuffer_Release(&bz);
    if (status == 3)
        return PyErr_NoMemory();
    return Py_BuildValue("innn", status, nex, nnz, ntag);
}

/* the decimal digits of u at out; their count */
static inline int put_u64(char *out, uint64_t u) {
    char t[24];
    int n = 0;
    do {
        t[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    for (int i = 0; i < n; i++)
        out[i] = t[n - 1 - i];
    return n;
}

/* x as str(int(x)) (a whole number) or as "%.6f", at out; the bytes written.
 * A float32's value times 10^6 is exact in a double (at most 24 + 14 significant bits),
 * so below 2^53 / 10^6 its "%.6f" is that product rounded half to even, as printf rounds
 * the exact decimal value; anything else goes to snprintf. */
static inline int put_prediction(char *out, size_t room, double x) {
    if (x == 0.0) {
        out[0] = '0'; /* (-0.0 too: str(int(-0.0))) */
        return 1;
    }
    double a = fabs(x);
    int k = 0;
    if (x == floor(x)) { /* (VW: std::fixed with precision 0) */
        if (a >= 1e15)
            return snprintf(out, room, "%.0f", x);
        if (x < 0)
            out[k++] = '-';
        return k + put_u64(out + k, (uint64_t)a);
    }
    if (a < 9e9 && (double)(float)x == x && a >= 1e-30) {
        double r = nearbyint(a * 1e6); /* (exact product; ties to even) */
        uint64_t u = (uint64_t)r, ip = u / 1000000, fp = u % 1000000;
        if (x < 0)
            out[k++] = '-';
        k += put_u64(out + k, ip);
        out[k++] = '.';
        for (int i = 5; i >= 0; i--) {
            out[k + i] = (char)('0' + fp % 10);
            fp /= 10;
        }
        return k + 6;
    }
    return snprintf(out, room, "%.6f", x);
}

/* VW's -p lines (terascale.linear._vw._vwout.prediction_lines): each float64 value (a
 * float32 widened) as Python's str(int(v)) where it is a whole number, else as
 * f"{v:.6f}" (both correctly rounded, as glibc's printf), then " tag"
 * where the example has a tag, then a newline. tag_ptr (int64, n + 1 entries) and
 * tag_blob (uint8) are a Block's, read from example `first` on; an empty tag_ptr: none.
 * Non-finite values, and tags that do not cover the examples, are the caller's (returns
 * None). */
static PyObject *format_predictions(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bv, bp, bb;
    Py_ssize_t first;
    if (!PyArg_ParseTuple(args, "y*y*y*n", &bv, &bp, &bb, &first))
        return NULL;
    const double *v = bv.buf;
    Py_ssize_t n = bv.len / 8;
    const int64_t *tp = bp.buf;
    const unsigned char *blob = bb.buf;
    int tags = bp.len > 0;
    PyObject *out = NULL;
    Py_ssize_t cap = 0;
    int ok = !tags || (first >= 0 && bp.len / 8 >= first + n + 1); /* else: the caller's */
    for (Py_ssize_t i = 0; i < n && ok; i++) {
        if (!isfinite(v[i]))
            ok = 0;
    }
    if (tags && ok) { /* the tags' bytes, checked against the blob once */
        int64_t a = tp[first], b = tp[first + n];
        if (a < 0 || b < a || b > bb.len)
            ok = 0;
        for (Py_ssize_t i = first; i < first + n && ok; i++)
            if (tp[i + 1] < tp[i])
                ok = 0;
        cap = ok ? (Py_ssize_t)(b - a) + n : 0;
    }
    if (!ok) {
        PyBuffer_Release(&bv);
        PyBuffer_Release(&bp);
        PyBuffer_Release(&bb);
        Py_RETURN_NONE;
    }
    cap += n * 48 + 1; /* a float32's %.6f: at most 39 digits, sign, point, 6 decimals */
    char *buf = malloc((size_t)cap);
    if (!buf) {
        PyBuffer_Release(&bv);
        PyBuffer_Release(&bp);
        PyBuffer_Release(&bb);
        return PyErr_NoMemory();
    }
    Py_ssize_t k = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        k += put_prediction(buf + k, (size_t)(cap - k), v[i]);
        if (tags && tp[first + i + 1] > tp[first + i]) {
            Py_ssize_t len = (Py_ssize_t)(tp[first + i + 1] - tp[first + i]);
            buf[k++] = ' ';
            memcpy(buf + k, blob + tp[first + i], (size_t)len);
            k += len;
        }
        buf[k++] = '\n';
    }
    Py_END_ALLOW_THREADS
    out = PyBytes_FromStringAndSize(buf, k);
    free(buf);
    PyBuffer_Release(&bv);
    PyBuffer_Release(&bp);
    PyBuffer_Release(&bb);
    return out;
}

/* VW's --link in float (its scorer: C's expf on float32 scores), for each score of src
 * into dst: code 0 logistic 1 / (1 + expf(-s)), 1 glf1 2 / (1 + expf(-s)) - 1, 2 poisson
 * expf(s); expf called as written (-fno-builtin-expf), as numba's float32 exp and VW
 * call it. A double exp rounded to float, or numpy's float32 exp, differs from it in the
 * last bit, which -p's six digits show. */
/* multiclass_stop(buf) -> (kind, line, examples, count, start, end): where VW's multiclass
 * label parser (--oaa) throws in the whole lines of buf, as
 * terascale.linear._vw._vwparse.multiclass_stop (numba) finds it: kind 0 nowhere (line and
 * examples: buf's counts), 1 the label word at start:end is not one integer that C's strtol
 * reads whole, 2 the label section has count words, more than two. */
static PyObject *vw_multiclass_stop(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bb;
    if (!PyArg_ParseTuple(args, "y*", &bb))
        return NULL;
    const unsigned char *buf = bb.buf;
    Py_ssize_t n = bb.len, pos = 0, line = 0, nex = 0, words = 0, fs = 0, fe = 0;
    int kind = 0;
    Py_BEGIN_ALLOW_THREADS
    while (pos < n) {
        Py_ssize_t ls = pos, bar = ls;
        while (bar < n && buf[bar] != '|' && buf[bar] != '\n')
            bar++;
        Py_ssize_t end = bar;
        while (end < n && buf[end] != '\n')
            end++;
        Py_ssize_t lend = bar;
        if (bar == n || buf[bar] == '\n') {
            if (bar == ls || (bar == ls + 1 && buf[ls] == '\r')) { /* an empty line */
                line++;
                pos = end + 1;
                continue;
            }
            if (buf[lend - 1] == '\r')
                lend--;
        }
        Py_ssize_t i = ls; /* the label section: after the line's first tab, if any */
        for (Py_ssize_t k = ls; k < lend; k++)
            if (buf[k] == '\t') {
                i = k + 1;
                break;
            }
        Py_ssize_t w = 0, s0 = ls, e0 = ls;
        while (i < lend) {
            while (i < lend && is_space(buf[i]))
                i++;
            if (i >= lend)
                break;
            Py_ssize_t ts = i;
            while (i < lend && !is_space(buf[i]))
                i++;
            Py_ssize_t te = i;
            if (te == lend || buf[ts] == '\'') { /* the tag: the section's last word */
                Py_ssize_t j = te;
                while (j < lend && is_space(buf[j]))
                    j++;
                if (j == lend)
                    continue;
            }
            if (w == 0) {
                s0 = ts;
                e0 = te;
            }
            w++;
        }
        if (w) {
            Py_ssize_t d = buf[s0] == '+' || buf[s0] == '-' ? s0 + 1 : s0, g = d;
            while (g < e0 && buf[g] >= '0' && buf[g] <= '9')
                g++;
            if (w > 2 || g == d || g != e0) {
                kind = w > 2 ? 2 : 1;
                words = w;
                fs = s0;
                fe = e0;
                break;
            }
        }
        line++;
        nex++;
        pos = end + 1;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bb);
    return Py_BuildValue("(innnnn)", kind, line, nex, words, fs, fe);
}

static PyObject *vw_link(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bs, bd;
    int code;
    if (!PyArg_ParseTuple(args, "y*w*i", &bs, &bd, &code))
        return NULL;
    if (bs.len != bd.len || bs.len % 4 || code < 0 || code > 2) {
        PyBuffer_Release(&bs);
        PyBuffer_Release(&bd);
        PyErr_SetString(PyExc_ValueError,
                        "link: src and dst are float32 arrays of one length, code 0, 1 or 2");
        return NULL;
    }
    const float *src = bs.buf;
    float *dst = bd.buf;
    Py_ssize_t n = bs.len / 4;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        dst[i] = vw_link32(code, src[i]);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bs);
    PyBuffer_Release(&bd);
    Py_RETURN_NONE;
}

static PyMethodDef METHODS[] = {
    {"link", vw_link, METH_VARARGS,
     "link(src, dst, code): VW's --link of float32 scores in float (0 logistic, 1 glf1, "
     "2 poisson)"},
    {"multiclass_stop", vw_multiclass_stop, METH_VARARGS,
     "multiclass_stop(buf) -> (kind, line, examples, count, start, end): where VW's "
     "multiclass label parser throws in buf's whole lines (_vwparse.multiclass_stop's)"},
    {"format_predictions", format_predictions, METH_VARARGS,
     "format_predictions(values, tag_ptr, tag_blob, first) -> bytes (None: a value is not "
     "finite)"},
    {"learn", vw_learn, METH_VARARGS,
     "learn(indptr, indices, values, labels, weights, start, end, table, state, kind, eta, "
     "power_t, l1, l2, out, pred, by_sign, clip, holdout, sums, notes) -> int: VW's online "
     "update over examples [start, end) (_vwlearn.c; holdout: a byte per example, empty for "
     "none; sums: VW's running sums, Progress.sums; notes: an int32 per example, set where "
     "VW's logger tells of it, empty for none); the number of examples noted"},
    {"passes", vw_passes, METH_VARARGS,
     "passes(indptr, indices, values, labels, weights, table, state, kind, eta, decay, "
     "power_t, l1, l2, by_sign, clip, holdout, sums, carry, rows, notes) -> int: more passes "
     "over one chunk with nothing to report between them, a row of sums a pass, stopping "
     "after one with notes (an int32 per example, empty for none kept; _vwlearn.c); the "
     "passes made"},
    {"oaa_learn", vw_oaa_learn, METH_VARARGS,
     "oaa_learn(indptr, indices, values, targets, weights, start, end, table, states, k, "
     "kind, eta, power_t, l1, l2, link, scores, by_sign, clip): --oaa K's learners over "
     "examples [start, end) (_vwlearn.c)"},
    {"loss32", vw_loss32, METH_VARARGS, "loss32(kind, p, y): VW's get_loss in float"},
    {"test", vw_test, METH_VARARGS,
     "test(indptr, indices, values, labels, weights, start, end, table, kind, clip, lo, hi, "
     "binary, by_sign, raw, pred, loss): VW's -t scores, predictions and weighted losses "
     "over examples [start, end) (_vwlearn.c)"},
    {"sync", vw_sync, METH_VARARGS,
     "sync(table, state): fold the lazy L1/L2 into the table's weights"},
    {"parse", parse, METH_VARARGS,
     "parse(buf, mask, constant, indptr, indices, values, labels, weights, tag_ptr, "
     "tag_blob[, table, rows, width[, ignore[, grams[, ignore_linear, ignored[, spell]]]]]) -> "
     "(status, examples, features, tag bytes)"},
    {"pack", vw_pack, METH_VARARGS,
     "pack(indices, bits, out): the cache's bit-packed indices (_vwbits.c)"},
    {"unpack", vw_unpack, METH_VARARGS,
     "unpack(buf, bits, out): the cache's indices from their packed bits (_vwbits.c)"},
    {"unvalues", vw_unvalues, METH_VARARGS,
     "unvalues(bitmap, stored, out) -> the stored values used (-1: too few) (_vwbits.c)"},
    {"mark", vw_mark, METH_VARARGS, "mark(bitmap, indices): bitmap[indices] = 1 (_vwbits.c)"},
    {"encode", vw_encode, METH_VARARGS,
     "encode(indptr, indices, values, labels, weights, tag_ptr, tag_blob, bits, blanks, "
     "ignored) -> (record, flags, tag bytes): _cachefmt.encode_block's (_vwbits.c)"},
    {"decode", vw_decode, METH_VARARGS,
     "decode(record, n, nnz, flags, ntag, bits) -> (indptr, indices, values, labels, "
     "weights, tag_ptr, tag_blob, blanks, ignored) as bytearrays: _cachefmt.decode_block's "
     "(_vwbits.c)"},
    {"marked", vw_marked, METH_VARARGS,
     "marked(bitmap) -> bytes: the uint32 indices of its nonzero bytes (_vwbits.c)"},
    {"counts", vw_counts, METH_VARARGS,
     "counts(indptr, labels, weights, hold, ignored, sums, cum_w, cum_n, seen_w, seen_n): a "
     "chunk's counts for the closing block and the progress lines (_vwtable.c)"},
    {"records", vw_records, METH_VARARGS,
     "records(table, start, mask, out) -> (records, next row): the table's rows in use as "
     "VW's weight records (_vwtable.c)"},
    {"restore", vw_restore, METH_VARARGS,
     "restore(table, records): the table zeroed, then the records' rows put back "
     "(_vwtable.c)"},
    {"predicted", vw_predicted, METH_VARARGS,
     "predicted(src, dst, code): -p's float32 values of float64 scores (-2 --binary, -1 "
     "the score, 0..2 link's codes) (_vwtable.c)"},
    {"uniform", vw_uniform, METH_VARARGS,
     "uniform(table, seed, width): VW's --random_weights in the first float of each row "
     "of width floats (_vwtable.c)"},
    {"murmur3", (PyCFunction)(void (*)(void))vw_murmur3, METH_FASTCALL,
     "murmur3(data, seed) -> VW's uniform_hash of the bytes data under a 32-bit seed"},
    {"rows_dot", vw_rows_dot, METH_VARARGS,
     "rows_dot(indptr, indices, values, w, out): X times w, each row's float sum in order "
     "(_vwsparse.c)"},
    {"cols_add", vw_cols_add, METH_VARARGS,
     "cols_add(indptr, indices, terms, v, out, double): out[indices[k]] += terms[k] * v[row], "
     "the rows in order (_vwsparse.c)"},
    {"number", vw_number, METH_VARARGS,
     "number(text) -> the float VW reads from text ([-]digits[.digits][e[-]digits]), or None"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_vwfast", NULL, -1, METHODS};

PyMODINIT_FUNC PyInit__vwfast(void) {
    float p = 1.0f;
    for (int k = 0; k < 38; k++) { /* VW's tables: repeated float division by ten */
        NEG10[k] = p;
        p = p / 10.0f;
    }
    p = 1.0f;
    for (int k = 0; k < 39; k++) { /* ... and multiplication */
        POS10[k] = p;
        p = p * 10.0f;
    }
    vw_learn_init();
    memset(SEP, 0, sizeof SEP);
    SEP[' '] = SEP['\t'] = SEP['\r'] = SEP['|'] = SEP['\n'] = 1;
    for (int c = 0; c < 256; c++) /* (VW's spelling of a byte) */
        SPELT[c] = c >= '0' && c <= '9' ? '0' : c >= 'a' && c <= 'z' ? 'a'
                 : c >= 'A' && c <= 'Z' ? 'A' : c == '.' ? '.' : '#';
    PyObject *mod = PyModule_Create(&MODULE);
    /* (the calling convention: terascale.linear._vw.VWFAST's number) */
    if (mod && (PyModule_AddIntConstant(mod, "ABI", 28) < 0 ||
                PyModule_AddObject(mod, "LOSS_CODES", Py_BuildValue("(iiiiii)", 0, 1, 2, 3, 4, 5)) < 0)) {
        Py_DECREF(mod);
        return NULL;
    }
    return mod;
}
