/* terascale._gcm: AES-256-GCM one message at a time, on OpenSSL's libcrypto.
 *
 * The control channel (_auth.Channel: the rendezvous request and reply, a link's hello,
 * the launcher's control messages) seals its few small JSON messages with AES-256-GCM
 * under HKDF keys. Through this module a process that joins a job never loads the
 * cryptography package for them: libcrypto is already mapped by Python's own hashlib,
 * where the cryptography wheel's bundled OpenSSL and Rust core are ~6 MB of resident pages
 * more in every rank. The bytes are cryptography's AESGCM's (tests/transport/test_seclink.py
 * checks both directions); without this module (no compiler or no libssl-dev at install,
 * TERASCALE_NO_CEXT=1) the channel seals through cryptography.
 *
 * A context per call: a channel carries one or two messages, and a key schedule costs
 * less than a microsecond.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <string.h>

#include <openssl/evp.h>

#define TAG 16

/* gcm_seal(key, nonce, data, aad) -> ciphertext | tag: one AES-256-GCM message under a
 * 32-byte key and a 12-byte nonce, a context of its own: cryptography's
 * AESGCM(key).encrypt(nonce, data, aad), the same bytes. */
static PyObject *gcm_seal(PyObject *mod, PyObject *args) {
    Py_buffer key, nonce, data, ad;
    (void)mod;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &key, &nonce, &data, &ad)) return NULL;
    PyObject *out = NULL;
    EVP_CIPHER_CTX *ctx = NULL;
    if (key.len != 32 || nonce.len != 12 || data.len > INT_MAX - TAG || ad.len > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "gcm_seal: a 32-byte key, a 12-byte nonce");
    } else if ((out = PyBytes_FromStringAndSize(NULL, data.len + TAG)) != NULL) {
        unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
        int outl = 0, fin = 0;
        ctx = EVP_CIPHER_CTX_new();
        if (ctx == NULL || !EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key.buf, nonce.buf) ||
            (ad.len && !EVP_EncryptUpdate(ctx, NULL, &outl, ad.buf, (int)ad.len)) ||
            !EVP_EncryptUpdate(ctx, o, &outl, data.buf, (int)data.len) ||
            !EVP_EncryptFinal_ex(ctx, o + outl, &fin) || outl + fin != data.len ||
            !EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, TAG, o + data.len)) {
            Py_CLEAR(out);
            PyErr_SetString(PyExc_RuntimeError, "gcm_seal: libcrypto failed");
        }
    }
    EVP_CIPHER_CTX_free(ctx);
    PyBuffer_Release(&key);
    PyBuffer_Release(&nonce);
    PyBuffer_Release(&data);
    PyBuffer_Release(&ad);
    return out;
}

/* gcm_open(key, nonce, body, aad) -> the plaintext of body (ciphertext | tag), or None when
 * the tag does not hold (nothing of the plaintext is handed over). */
static PyObject *gcm_open(PyObject *mod, PyObject *args) {
    Py_buffer key, nonce, body, ad;
    (void)mod;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &key, &nonce, &body, &ad)) return NULL;
    PyObject *out = NULL;
    EVP_CIPHER_CTX *ctx = NULL;
    if (key.len != 32 || nonce.len != 12 || body.len < TAG || body.len > INT_MAX ||
        ad.len > INT_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "gcm_open: a 32-byte key, a 12-byte nonce, a body of 16 bytes or more");
    } else if ((out = PyBytes_FromStringAndSize(NULL, body.len - TAG)) != NULL) {
        unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
        const unsigned char *b = body.buf;
        Py_ssize_t n = body.len - TAG;
        unsigned char tag[TAG];
        int outl = 0, fin = 0;
        memcpy(tag, b + n, TAG);
        ctx = EVP_CIPHER_CTX_new();
        if (ctx == NULL || !EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key.buf, nonce.buf) ||
            (ad.len && !EVP_DecryptUpdate(ctx, NULL, &outl, ad.buf, (int)ad.len)) ||
            !EVP_DecryptUpdate(ctx, o, &outl, b, (int)n) ||
            !EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG, tag)) {
            Py_CLEAR(out);
            PyErr_SetString(PyExc_RuntimeError, "gcm_open: libcrypto failed");
        } else if (EVP_DecryptFinal_ex(ctx, o + outl, &fin) <= 0) {
            memset(o, 0, (size_t)n);
            Py_DECREF(out);
            out = Py_None;
            Py_INCREF(out);
        }
    }
    EVP_CIPHER_CTX_free(ctx);
    PyBuffer_Release(&key);
    PyBuffer_Release(&nonce);
    PyBuffer_Release(&body);
    PyBuffer_Release(&ad);
    return out;
}

static PyMethodDef module_methods[] = {
    {"gcm_seal", gcm_seal, METH_VARARGS,
     "gcm_seal(key, nonce, data, aad): AES-256-GCM ciphertext of data, then its 16-byte tag"},
    {"gcm_open", gcm_open, METH_VARARGS,
     "gcm_open(key, nonce, body, aad): the plaintext of body (ciphertext and tag), or None "
     "where its tag does not hold"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "terascale._gcm",
    "AES-256-GCM one message at a time, on OpenSSL's libcrypto (the control channel's).",
    -1, module_methods,
};

PyMODINIT_FUNC PyInit__gcm(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "ABI", 1) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
