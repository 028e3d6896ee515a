/* The cache's bit-packed indices and sparse values (terascale.linear._io._cachefmt) in C,
 * exported to _vwfast's method table: the compiled learner reads and writes the cache
 * that the numba pass writes and reads without importing numba. Index k of a record
 * takes bits [k * bits, (k + 1) * bits) of its section, least significant bit first; a
 * value is stored where the bitmap's bit k is set (the others are 1.0). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_vwbits.h"

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
        uint64_t mask = bits == 32 ? 0xFFFFFFFFull : ((1ull << bits) - 1);
        Py_BEGIN_ALLOW_THREADS
        /* while 8 bytes are left at the index's first byte, one unaligned load */
        Py_ssize_t fast = bb.len >= 8 ? ((bb.len - 8) * 8) / bits + 1 : 0;
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
