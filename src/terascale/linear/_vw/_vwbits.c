/* The cache's bit-packed indices and sparse values (terascale.linear._io._cachefmt) in C,
 * exported to _vwfast's method table: the compiled learner reads and writes the cache
 * that the numba pass writes and reads without importing numba. Index k of a record
 * takes bits [k * bits, (k + 1) * bits) of its section, least significant bit first; a
 * value is stored where the bitmap's bit k is set (the others are 1.0). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#include "_vwbits.h"

/* idx[0..n) at `bits` bits each into out (zeroed, ceil(n * bits / 8) bytes) */
static void pack_bits(const uint32_t *idx, Py_ssize_t n, int bits, uint8_t *out) {
    uint64_t acc = 0;
    int nacc = 0;
    Py_ssize_t o = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        acc |= (uint64_t)idx[k] << nacc;
        nacc += bits;
        while (nacc >= 8) {
            out[o++] = (uint8_t)(acc & 0xFF);
            acc >>= 8;
            nacc -= 8;
        }
    }
    if (nacc > 0)
        out[o] = (uint8_t)(acc & 0xFF);
}

/* the n indices of `bits` bits packed in buf[0..len) (len >= ceil(n * bits / 8)) */
static void unpack_bits(const uint8_t *buf, Py_ssize_t len, int bits, uint32_t *out,
                        Py_ssize_t n) {
    uint64_t mask = bits == 32 ? 0xFFFFFFFFull : ((1ull << bits) - 1);
    /* while 8 bytes are left at the index's first byte, one unaligned load */
    Py_ssize_t fast = len >= 8 ? ((len - 8) * 8) / bits + 1 : 0;
    if (fast > n)
        fast = n;
    for (Py_ssize_t k = 0; k < fast; k++) {
        uint64_t pos = (uint64_t)k * (uint64_t)bits, word;
        memcpy(&word, buf + (pos >> 3), 8);
        out[k] = (uint32_t)((word >> (pos & 7)) & mask);
    }
    for (Py_ssize_t k = fast; k < n; k++) {
        uint64_t pos = (uint64_t)k * (uint64_t)bits, acc = 0;
        Py_ssize_t p = (Py_ssize_t)(pos >> 3);
        int sh = (int)(pos & 7), got = 0;
        while (got < sh + bits) {
            acc |= (uint64_t)buf[p++] << got;
            got += 8;
        }
        out[k] = (uint32_t)((acc >> sh) & mask);
    }
}

/* pack(indices uint32, bits, out uint8): out must hold ceil(n * bits / 8) bytes, zeroed */
PyObject *vw_pack(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bi, bo;
    int bits;
    if (!PyArg_ParseTuple(args, "y*iw*", &bi, &bits, &bo))
        return NULL;
    Py_ssize_t n = bi.len / 4;
    const char *err = NULL;
    if (bits < 1 || bits > 32)
        err = "pack: bits out of 1..32";
    else if (bo.len < (n * bits + 7) / 8)
        err = "pack: the output is too short";
    if (!err) {
        const uint32_t *idx = bi.buf;
        uint8_t *out = bo.buf;
        Py_BEGIN_ALLOW_THREADS
        pack_bits(idx, n, bits, out);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&bi);
    PyBuffer_Release(&bo);
    if (err) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* unpack(buf uint8, bits, out uint32): the len(out) indices packed in buf */
PyObject *vw_unpack(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bb, bo;
    int bits;
    if (!PyArg_ParseTuple(args, "y*iw*", &bb, &bits, &bo))
        return NULL;
    Py_ssize_t n = bo.len / 4;
    const char *err = NULL;
    if (bits < 1 || bits > 32)
        err = "unpack: bits out of 1..32";
    else if (bb.len < (n * bits + 7) / 8)
        err = "unpack: the packed section is too short";
    if (!err) {
        const uint8_t *buf = bb.buf;
        uint32_t *out = bo.buf;
        Py_BEGIN_ALLOW_THREADS
        unpack_bits(buf, bb.len, bits, out, n);
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&bb);
    PyBuffer_Release(&bo);
    if (err) {
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* unvalues(bitmap uint8, stored float32, out float32) -> the stored values used, -1 where
 * the bitmap asks for more than there are */
PyObject *vw_unvalues(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bm, bs, bo;
    if (!PyArg_ParseTuple(args, "y*y*w*", &bm, &bs, &bo))
        return NULL;
    Py_ssize_t n = bo.len / 4, m = bs.len / 4, j = 0;
    int short_map = bm.len < (n + 7) / 8;
    if (!short_map) {
        const uint8_t *map = bm.buf;
        const float *stored = bs.buf;
        float *out = bo.buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = 0; k < n; k++) {
            int bit = (map[k >> 3] >> (k & 7)) & 1;
            float v = j < m ? stored[j] : 1.0f;
            out[k] = bit ? v : 1.0f;
            j += bit;
        }
        Py_END_ALLOW_THREADS
    }
    PyBuffer_Release(&bm);
    PyBuffer_Release(&bs);
    PyBuffer_Release(&bo);
    if (short_map) {
        PyErr_SetString(PyExc_ValueError, "unvalues: the bitmap is too short");
        return NULL;
    }
    return PyLong_FromSsize_t(j <= m ? j : -1);
}

/* mark(bitmap, indices uint32): bitmap[indices] = 1 (a byte each) */
PyObject *vw_mark(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bm, bi;
    if (!PyArg_ParseTuple(args, "w*y*", &bm, &bi))
        return NULL;
    Py_ssize_t n = bi.len / 4;
    const uint32_t *idx = bi.buf;
    uint8_t *map = bm.buf;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < n; k++) {
        if ((Py_ssize_t)idx[k] >= bm.len) {
            bad = 1;
            break;
        }
        map[idx[k]] = 1;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&bm);
    PyBuffer_Release(&bi);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "mark: an index past the bitmap");
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ---- whole records: _cachefmt.encode_block's bytes and decode_block's arrays ---- */

enum { F_W = 1, F_LCODE = 2, F_TAGS = 4, LW_SHIFT = 3, F_BLANKS = 32, F_IGNORED = 64,
       NAN_CODE = 127 };

/* buf as a C-contiguous buffer of items of `size` bytes (float ones where `real`), or None
 * (buf->obj NULL) where `optional`; a wrong one sets ValueError naming it */
static int typed(PyObject *o, Py_buffer *buf, Py_ssize_t size, int real, int optional,
                 const char *name) {
    buf->obj = NULL;
    if (o == Py_None && optional)
        return 0;
    if (PyObject_GetBuffer(o, buf, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    const char *f = buf->format ? buf->format : "B";
    if (*f == '<' || *f == '=' || *f == '@')
        f++;
    int isreal = *f == 'f' || *f == 'd';
    if (buf->itemsize != size || isreal != real || f[1] != '\0') {
        PyErr_Format(PyExc_ValueError, "encode: %s must be an array of %s%d", name,
                     real ? "float" : "int", (int)(8 * size));
        PyBuffer_Release(buf);
        buf->obj = NULL;
        return -1;
    }
    return 0;
}

static void release(Py_buffer *bufs, int n) {
    for (int k = 0; k < n; k++)
        if (bufs[k].obj)
            PyBuffer_Release(&bufs[k]);
}

static int is_one(float v) { return v == 1.0f; }

/* encode(indptr int64, indices uint32, values float32, labels float32, weights float32,
 * tag_ptr int64|None, tag_blob uint8|None, bits, blanks int64|None, ignored int64|None)
 * -> (record bytes, flags, tag bytes): _cachefmt.encode_block's, byte for byte */
PyObject *vw_encode(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *o[10];
    int bits;
    if (!PyArg_ParseTuple(args, "OOOOOOOiOO", &o[0], &o[1], &o[2], &o[3], &o[4], &o[5],
                          &o[6], &bits, &o[8], &o[9]))
        return NULL;
    Py_buffer b[10];
    memset(b, 0, sizeof b);
    static const int size[10] = {8, 4, 4, 4, 4, 8, 1, 0, 8, 8};
    static const int real[10] = {0, 0, 1, 1, 1, 0, 0, 0, 0, 0};
    static const char *name[10] = {"indptr", "indices", "values", "labels", "weights",
                                   "tag_ptr", "tag_blob", "", "blanks", "ignored"};
    for (int k = 0; k < 10; k++)
        if (k != 7 && typed(o[k], &b[k], size[k], real[k], k >= 5, name[k]) < 0) {
            release(b, 10);
            return NULL;
        }
    const int64_t *indptr = b[0].buf, *tp = b[5].buf, *blanks = b[8].buf, *ign = b[9].buf;
    const uint32_t *idx = b[1].buf;
    const float *vals = b[2].buf, *lab = b[3].buf, *w = b[4].buf;
    const uint8_t *tblob = b[6].buf;
    Py_ssize_t n = b[3].len / 4, nnz = b[0].len >= 8 ? (Py_ssize_t)indptr[b[0].len / 8 - 1] : -1;
    Py_ssize_t nblank = b[8].obj ? b[8].len / 8 : 0;
    const char *err = NULL;
    if (bits < 1 || bits > 32)
        err = "encode: bits out of 1..32";
    else if (b[0].len != 8 * (n + 1) || indptr[0] != 0 || nnz != b[1].len / 4 ||
             nnz != b[2].len / 4 || b[4].len != 4 * n)
        err = "encode: indptr, indices, values, labels and weights do not match";
    else if (b[9].obj && b[9].len != 8 * n)
        err = "encode: ignored needs a count per example";
    int have_tags = b[5].obj && b[6].obj; /* (the tags: both, or none) */
    if (!err && have_tags && b[5].len != 8 * (n + 1))
        err = "encode: tag_ptr needs n + 1 offsets";
    Py_ssize_t top = 0;
    for (Py_ssize_t i = 0; !err && i < n; i++) {
        Py_ssize_t len = (Py_ssize_t)(indptr[i + 1] - indptr[i]);
        if (len < 0)
            err = "encode: indptr decreases";
        else if (len > top)
            top = len;
    }
    for (Py_ssize_t i = 0; !err && i < nblank; i++)
        if (blanks[i] < 0 || blanks[i] > n)
            err = "encode: an empty line past the examples";
    int64_t t0 = 0, t1 = 0;
    if (!err && have_tags) {
        t0 = tp[0];
        t1 = tp[n];
        if (t1 > 0 && (t0 < 0 || t1 < t0 || t1 > b[6].len))
            err = "encode: tag_ptr past tag_blob";
        for (Py_ssize_t i = 0; !err && t1 > 0 && i < n; i++)
            if (tp[i + 1] < tp[i])
                err = "encode: tag_ptr decreases";
    }
    if (err) {
        release(b, 10);
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    int lw = top < 256 ? 1 : top < 65536 ? 2 : 4;
    int flags = (lw == 1 ? 0 : lw == 2 ? 1 : 2) << LW_SHIFT;
    int codes = 1, ones = 1, any_ignored = 0;
    Py_ssize_t stored = 0;
    for (Py_ssize_t i = 0; i < n && codes; i++) { /* (-0.0 is a float: not a code) */
        float v = lab[i];
        codes = v != v || v == -1.0f || v == 1.0f || (v == 0.0f && !signbit(v));
    }
    for (Py_ssize_t i = 0; i < n && ones; i++)
        ones = is_one(w[i]);
    for (Py_ssize_t i = 0; b[9].obj && i < n && !any_ignored; i++)
        any_ignored = ign[i] != 0;
    for (Py_ssize_t j = 0; j < nnz; j++)
        stored += !is_one(vals[j]);
    int tags = have_tags && t1 > 0;
    Py_ssize_t ntag = tags ? (Py_ssize_t)(t1 - t0) : 0;
    flags |= (codes ? F_LCODE : 0) | (ones ? 0 : F_W) | (tags ? F_TAGS : 0) |
             (nblank ? F_BLANKS : 0) | (any_ignored ? F_IGNORED : 0);
    Py_ssize_t packed = (nnz * bits + 7) / 8;
    Py_ssize_t total = n * lw + (codes ? n : 4 * n) + (ones ? 0 : 4 * n) +
                       (nblank ? 4 * (n + 1) : 0) + (any_ignored ? 4 * n : 0) +
                       (tags ? 4 * n + ntag : 0) + packed + (nnz + 7) / 8 + 4 * stored;
    PyObject *rec = PyBytes_FromStringAndSize(NULL, total);
    if (!rec) {
        release(b, 10);
        return NULL;
    }
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(rec);
    Py_BEGIN_ALLOW_THREADS
    memset(out, 0, (size_t)total);
    uint8_t *p = out;
    for (Py_ssize_t i = 0; i < n; i++) { /* each example's feature count, little endian */
        uint32_t len = (uint32_t)(indptr[i + 1] - indptr[i]);
        for (int k = 0; k < lw; k++)
            *p++ = (uint8_t)(len >> (8 * k));
    }
    if (codes)
        for (Py_ssize_t i = 0; i < n; i++)
            *p++ = lab[i] != lab[i] ? NAN_CODE : (uint8_t)(int8_t)lab[i];
    else {
        memcpy(p, lab, 4 * (size_t)n);
        p += 4 * n;
    }
    if (!ones) {
        memcpy(p, w, 4 * (size_t)n);
        p += 4 * n;
    }
    if (nblank) { /* the empty lines before each example, and after the last */
        uint32_t *c = (uint32_t *)p;
        for (Py_ssize_t i = 0; i < nblank; i++) {
            uint32_t v;
            memcpy(&v, c + blanks[i], 4);
            v++;
            memcpy(c + blanks[i], &v, 4);
        }
        p += 4 * (n + 1);
    }
    if (any_ignored)
        for (Py_ssize_t i = 0; i < n; i++, p += 4) {
            uint32_t v = (uint32_t)ign[i];
            memcpy(p, &v, 4);
        }
    if (tags) {
        for (Py_ssize_t i = 0; i < n; i++, p += 4) {
            uint32_t v = (uint32_t)(tp[i + 1] - tp[i]);
            memcpy(p, &v, 4);
        }
        memcpy(p, tblob + t0, (size_t)ntag);
        p += ntag;
    }
    pack_bits(idx, nnz, bits, p);
    p += packed;
    uint8_t *map = p, *sv = p + (nnz + 7) / 8;
    for (Py_ssize_t j = 0; j < nnz; j++)
        if (!is_one(vals[j])) {
            map[j >> 3] |= (uint8_t)(1u << (j & 7));
            memcpy(sv, vals + j, 4);
            sv += 4;
        }
    Py_END_ALLOW_THREADS
    release(b, 10);
    PyObject *res = Py_BuildValue("(Nin)", rec, flags, ntag);
    return res;
}

/* decode(rec, n, nnz, flags, ntag, bits) -> (indptr, indices, values, labels, weights,
 * tag_ptr, tag_blob, blanks, ignored): decode_block's arrays as bytearrays (int64, uint32,
 * float32 x 3, int64, bytes, int64 or None, int64 or None); tag_ptr is zeros and tag_blob
 * empty where the record keeps no tags */
PyObject *vw_decode(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer br;
    Py_ssize_t n, nnz, ntag;
    int flags, bits;
    if (!PyArg_ParseTuple(args, "y*nnini", &br, &n, &nnz, &flags, &ntag, &bits))
        return NULL;
    int lw = (int[]){1, 2, 4, 0}[(flags >> LW_SHIFT) & 3];
    Py_ssize_t off[10], size[9];
    const char *err = NULL;
    if (bits < 1 || bits > 32 || n < 0 || nnz < 0 || ntag < 0 || lw == 0)
        err = "cache record: bad sizes in its index";
    else {
        size[0] = n * lw;
        size[1] = flags & F_LCODE ? n : 4 * n;
        size[2] = flags & F_W ? 4 * n : 0;
        size[3] = flags & F_BLANKS ? 4 * (n + 1) : 0;
        size[4] = flags & F_IGNORED ? 4 * n : 0;
        size[5] = flags & F_TAGS ? 4 * n : 0;
        size[6] = flags & F_TAGS ? ntag : 0;
        size[7] = (nnz * bits + 7) / 8;
        size[8] = (nnz + 7) / 8;
        off[0] = 0;
        for (int k = 0; k < 9; k++)
            off[k + 1] = off[k] + size[k];
        if (br.len < off[9])
            err = "cache record: shorter than its sections";
    }
    const uint8_t *rec = br.buf;
    /* the examples' counts must add up to the features and the tags' lengths to the tag
     * bytes: the learner indexes the arrays by them */
    int64_t sum = 0, tsum = 0;
    for (Py_ssize_t i = 0; !err && i < n; i++) {
        uint32_t len = 0, c = 0;
        for (int k = 0; k < lw; k++)
            len |= (uint32_t)rec[off[0] + i * lw + k] << (8 * k);
        if (flags & F_TAGS)
            memcpy(&c, rec + off[5] + 4 * i, 4);
        sum += len;
        tsum += c;
    }
    if (!err && (sum != nnz || ((flags & F_TAGS) && tsum != ntag)))
        err = "cache record: its counts do not add up to its sections";
    Py_ssize_t stored = err ? 0 : (br.len - off[9]) / 4, used = 0, nblank = 0;
    for (Py_ssize_t j = 0; !err && j < nnz; j++)
        used += (rec[off[8] + (j >> 3)] >> (j & 7)) & 1;
    if (!err && used != stored)
        err = "cache record: its values do not match its bitmap";
    for (Py_ssize_t i = 0; !err && (flags & F_BLANKS) && i <= n; i++) {
        uint32_t c;
        memcpy(&c, rec + off[3] + 4 * i, 4);
        nblank += c;
    }
    if (err) {
        PyBuffer_Release(&br);
        PyErr_SetString(PyExc_ValueError, err);
        return NULL;
    }
    PyObject *a[9] = {NULL};
    Py_ssize_t bytes[9] = {8 * (n + 1), 4 * nnz, 4 * nnz, 4 * n, 4 * n, 8 * (n + 1),
                           flags & F_TAGS ? ntag : 0, 8 * nblank, 8 * n};
    int ok = 1;
    for (int k = 0; k < 9 && ok; k++) {
        if ((k == 7 && !(flags & F_BLANKS)) || (k == 8 && !(flags & F_IGNORED))) {
            a[k] = Py_NewRef(Py_None);
            continue;
        }
        a[k] = PyByteArray_FromStringAndSize(NULL, bytes[k]);
        ok = a[k] != NULL;
    }
    if (!ok) {
        for (int k = 0; k < 9; k++)
            Py_XDECREF(a[k]);
        PyBuffer_Release(&br);
        return NULL;
    }
#define OUT(k, T) ((T *)PyByteArray_AS_STRING(a[k]))
    int64_t *indptr = OUT(0, int64_t), *tp = OUT(5, int64_t);
    uint32_t *idx = OUT(1, uint32_t);
    float *vals = OUT(2, float), *lab = OUT(3, float), *w = OUT(4, float);
    uint8_t *tblob = OUT(6, uint8_t);
    int64_t *blanks = a[7] != Py_None ? OUT(7, int64_t) : NULL;
    int64_t *ign = a[8] != Py_None ? OUT(8, int64_t) : NULL;
#undef OUT
    Py_BEGIN_ALLOW_THREADS
    indptr[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t len = 0;
        for (int k = 0; k < lw; k++)
            len |= (uint32_t)rec[off[0] + i * lw + k] << (8 * k);
        indptr[i + 1] = indptr[i] + len;
    }
    if (flags & F_LCODE) {
        union { uint32_t u; float f; } qnan = {0x7FC00000u}; /* (np.float32(np.nan)) */
        for (Py_ssize_t i = 0; i < n; i++) {
            int8_t c = (int8_t)rec[off[1] + i];
            lab[i] = c == NAN_CODE ? qnan.f : (float)c;
        }
    } else
        memcpy(lab, rec + off[1], 4 * (size_t)n);
    if (flags & F_W)
        memcpy(w, rec + off[2], 4 * (size_t)n);
    else
        for (Py_ssize_t i = 0; i < n; i++)
            w[i] = 1.0f;
    if (blanks) { /* each empty line as the example it precedes */
        Py_ssize_t m = 0;
        for (Py_ssize_t i = 0; i <= n; i++) {
            uint32_t c;
            memcpy(&c, rec + off[3] + 4 * i, 4);
            for (uint32_t r = 0; r < c; r++)
                blanks[m++] = i;
        }
    }
    for (Py_ssize_t i = 0; ign && i < n; i++) {
        uint32_t c;
        memcpy(&c, rec + off[4] + 4 * i, 4);
        ign[i] = c;
    }
    tp[0] = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t c = 0;
        if (flags & F_TAGS)
            memcpy(&c, rec + off[5] + 4 * i, 4);
        tp[i + 1] = tp[i] + c;
    }
    if (flags & F_TAGS)
        memcpy(tblob, rec + off[6], (size_t)ntag);
    unpack_bits(rec + off[7], size[7], bits, idx, nnz);
    const uint8_t *map = rec + off[8];
    const uint8_t *sv = rec + off[9];
    for (Py_ssize_t j = 0, s = 0; j < nnz; j++) {
        if ((map[j >> 3] >> (j & 7)) & 1)
            memcpy(vals + j, sv + 4 * s++, 4);
        else
            vals[j] = 1.0f;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&br);
    return Py_BuildValue("(NNNNNNNNN)", a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]);
}

/* marked(bitmap) -> bytes: the uint32 indices of the bitmap's nonzero bytes, in order */
PyObject *vw_marked(PyObject *self, PyObject *args) {
    (void)self;
    Py_buffer bm;
    if (!PyArg_ParseTuple(args, "y*", &bm))
        return NULL;
    const uint8_t *map = bm.buf;
    Py_ssize_t m = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t k = 0; k < bm.len; k++)
        m += map[k] != 0;
    Py_END_ALLOW_THREADS
    PyObject *out = bm.len <= 0x100000000LL ? PyBytes_FromStringAndSize(NULL, 4 * m) : NULL;
    if (out) {
        uint32_t *o = (uint32_t *)PyBytes_AS_STRING(out);
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t k = 0, j = 0; k < bm.len; k++)
            if (map[k])
                o[j++] = (uint32_t)k;
        Py_END_ALLOW_THREADS
    } else if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "marked: a bitmap past 2**32 entries");
    PyBuffer_Release(&bm);
    return out;
}
