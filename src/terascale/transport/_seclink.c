/* terascale.transport._seclink: the per-record work of an authenticated link, compiled.
 *
 * transport/_secure.py (SecureLink) has the record format and the protocol; this module
 * only does, in one call each and on OpenSSL's libcrypto (EVP, AES-256-GCM), what a record
 * of a small frame costs in Python: gather the frame's pieces, seal them, send the record;
 * read what the kernel has, open the record at its front and scatter it into the caller's
 * buffers. It also computes and checks integrity tags over large buffers with the GIL
 * released, through one MAC interface (mac_start, mac_update, mac_final): AEGISMAC-128X4
 * (libaegis's AEGIS-128X4 as a MAC, draft-irtf-cfrg-aegis-aead) where the two ends agreed
 * on it, else GMAC: where the CPU has VPCLMULQDQ on a GHASH of its own (_ghash.c, about
 * 24-30 GB/s per core against libcrypto 3.0's 15), libcrypto then encrypting only the
 * tag's mask E_K(J0); elsewhere, or with Records(..., fast=False), on libcrypto's GCM.
 * Both GMACs give the same tags (tests/transport/test_seclink.py checks them against
 * cryptography's AES-GCM). With a compiled MAC, a large integrity frame is one call each
 * way (send_frame, recv_frame): its records tagged and sent, or read, checked and handed
 * over, with no Python per record. So is a large AEGIS-256X4 frame: each record sealed from
 * the caller's buffer into the send buffer and sent, or read in place and decrypted as it
 * lands.
 *
 * The cipher contexts are set up once per link (the key schedule once), then only the nonce
 * changes per record: that, not GHASH, is most of what a tag on a few KiB costs through a
 * general-purpose binding. The bytes on the wire are exactly those of the Python path:
 *
 *   integrity:  len u32 BE | plaintext | tag     tag = AES-GCM(nonce, "", aad=plaintext)
 *                                                 or AEGISMAC-128X4(key[:16], nonce | 0^32,
 *                                                                   plaintext)
 *   encrypt:    len u32 BE | ciphertext | tag    AES-GCM(nonce, plaintext, aad=len field)
 *
 * with len = body + 16 and nonce = kind u32 LE | sequence number u64 LE (kind 0: data, 1:
 * an abort record, whose len also has its top bit set).
 *
 * Encrypted links may run AEGIS-256X4 instead of AES-256-GCM (the two ends agree on it in
 * their sealed hello; transport/_secure.py): the same record, the ciphertext and 16-byte
 * tag of AEGIS-256X4 (draft-irtf-cfrg-aegis-aead) with the length field as associated data
 * and the 32-byte nonce kind u32 LE | sequence number u64 LE | 20 zero bytes. It comes from
 * libaegis (vendored in _aegis/, MIT), which picks VAES/AVX-512, VAES/AVX2, AES-NI or
 * portable code when the module loads; it runs at about twice AES-256-GCM's speed here.
 *
 * A large record that the caller's buffer holds whole is read straight into it
 * (direct_begin, then recv_direct until it is whole) and opened piece by piece as the
 * pieces land, while they are in the core's cache: decrypted in place (AEGIS-256X4) or
 * hashed (GMAC on the compiled GHASH); the tag is checked once the record is whole, and if
 * it fails, or the stream ends inside the record, every byte it wrote there is wiped.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <sys/uio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "_ghash.h"
#include "_aegis/common/cpu.h"
#include "aegis.h"

#define TAG 16
#define LEN 4
#define MAXPIECES 8
/* Release the GIL around the crypto only for buffers this large (below, the switch costs
 * more than it lets others run). */
#define NOGIL_BYTES (64 << 10)

/* A running MAC of an integrity record (mac_start, mac_update, mac_final): AEGISMAC-128X4,
 * or GMAC on the compiled GHASH (the tag's mask E_K(J0) needs the record's nonce). */
typedef struct {
    aegis128x4_mac_state am;
    gh_state gh;
    unsigned char nonce[12];
} mac_state;

typedef struct {
    PyObject_HEAD
    EVP_CIPHER_CTX *seal;
    EVP_CIPHER_CTX *open;
    int encrypt;
    /* A call is inside the sealing (sending) or opening (receiving) context, with the GIL
     * released: one thread may send while another receives, as on a socket. */
    int sealing, opening;
    /* Where the CPU has VPCLMULQDQ (_ghash.c): GMAC tags are GHASH there, and AES only for
     * E_K(J0) (AES-256-ECB contexts); NULL keys: libcrypto's GCM does the whole tag. */
    gh_key *gseal, *gopen;
    EVP_CIPHER_CTX *eseal, *eopen;
    /* cipher 1: encrypted records are AEGIS-256X4 under these keys (0: AES-256-GCM) */
    int aegis;
    /* amac 1: integrity records are tagged with AEGISMAC-128X4 under the first 16 bytes of
     * these keys (0: GMAC) */
    int amac;
    unsigned char kseal[32], kopen[32];
    /* A record being read in place (recv_direct): opened piece by piece as it lands, its
     * AEGIS-256X4 state (encrypted) or running MAC (integrity) kept here. */
    int dactive;
    aegis256x4_state dst;
    mac_state dmac;
} Records;

#define AEGIS_NONCE 32
/* AEGIS over a buffer of PF_MIN bytes or more goes PF_STEP bytes at a time, the lines
 * PF_AHEAD bytes on requested first: a large record's plaintext (sealing) or destination
 * (opening) is the caller's buffer, often out of the caches (a ring allreduce's own
 * segment), and the cipher alone would wait for each line in turn. Measured on a 64 MiB
 * stream in 1 MiB frames: the sending calls' CPU time 16-18 ms without, 13-15 ms with;
 * the receiving calls' 17-20 against 15-16.5. A step of 1 KiB (16 lines requested at a
 * time, what the core's line-fill buffers hold) rather than 4 KiB (64 lines, which waited
 * for free buffers): one 1 MiB frame 288-299 us against 309-320 us of CPU
 * (docs/benchmarks/security.md). */
#define PF_STEP 1024
#define PF_AHEAD 4096
#define PF_MIN (64 << 10)

/* A record's AEGIS-256X4 nonce from its 12-byte one (kind | sequence number), zero-padded. */
static void aegis_nonce(unsigned char out[AEGIS_NONCE], const unsigned char nonce[12]) {
    memset(out, 0, AEGIS_NONCE);
    memcpy(out, nonce, 12);
}

/* One piece into an AEGIS-256X4 state; a large one PF_STEP bytes at a time, the next
 * step's lines of ``ahead`` (what the cipher will touch that is likely out of the caches:
 * the plaintext sealing, the destination opening) requested first. 0, or -1 when opening
 * fails (the state's running tag check). */
static int aegis_piece(aegis256x4_state *st, int sealing, unsigned char *out,
                       const unsigned char *in, size_t len) {
    const unsigned char *ahead = sealing ? in : out;
    size_t step = len >= PF_MIN ? PF_STEP : len;
    for (size_t at = 0; at < len; at += step) {
        size_t k = len - at < step ? len - at : step;
        if (step == PF_STEP)
            for (size_t p = at + PF_AHEAD; p < at + PF_AHEAD + PF_STEP && p < len; p += 64) {
                if (sealing)  /* (the read/write hint must be a constant) */
                    __builtin_prefetch(ahead + p, 0, 3);
                else
                    __builtin_prefetch(ahead + p, 1, 3);
            }
        if (sealing)
            aegis256x4_state_encrypt_update(st, out + at, in + at, k);
        else if (aegis256x4_state_decrypt_update(st, out + at, in + at, k) != 0)
            return -1;
    }
    return 0;
}

/* Seal the pieces (ciphertext to ``out``, then the 16-byte tag) under AEGIS-256X4. */
static void aegis_seal(const unsigned char *key, const unsigned char npub[AEGIS_NONCE],
                       const unsigned char *ad, size_t adlen,
                       const unsigned char *const *piece, const Py_ssize_t *size, int n,
                       unsigned char *out) {
    size_t total = 0;
    if (n == 1 && size[0] < PF_MIN) {
        total = (size_t)size[0];
        aegis256x4_encrypt_detached(out, out + total, TAG, piece[0], total, ad, adlen, npub, key);
        return;
    }
    aegis256x4_state st;
    aegis256x4_state_init(&st, ad, adlen, npub, key);
    for (int i = 0; i < n; i++) {
        aegis_piece(&st, 1, out + total, piece[i], (size_t)size[i]);
        total += (size_t)size[i];
    }
    aegis256x4_state_encrypt_final(&st, out + total, TAG);
    OPENSSL_cleanse(&st, sizeof st);
}

/* Open ``body`` bytes of ciphertext at ``src`` (its tag right after) into the pieces; 0, or
 * -1 when the tag fails, with every byte written to the pieces wiped. */
static int aegis_open(const unsigned char *key, const unsigned char npub[AEGIS_NONCE],
                      const unsigned char *ad, size_t adlen, const unsigned char *src,
                      Py_ssize_t body, unsigned char *const *piece, const Py_ssize_t *size,
                      int n) {
    int failed = 0;
    if (n == 1 && size[0] >= body && body < PF_MIN) {
        failed = aegis256x4_decrypt_detached(piece[0], src, (size_t)body, src + body, TAG, ad,
                                             adlen, npub, key) != 0;
    } else {
        aegis256x4_state st;
        aegis256x4_state_init(&st, ad, adlen, npub, key);
        Py_ssize_t left = body;
        const unsigned char *c = src;
        for (int i = 0; i < n && left && !failed; i++) {
            Py_ssize_t k = size[i] < left ? size[i] : left;
            failed = aegis_piece(&st, 0, piece[i], c, (size_t)k) != 0;
            c += k;
            left -= k;
        }
        failed = failed || left || aegis256x4_state_decrypt_final(&st, src + body, TAG) != 0;
        OPENSSL_cleanse(&st, sizeof st);
    }
    if (failed) {  /* nothing handed over: what was decrypted is wiped */
        Py_ssize_t wiped = body;
        for (int i = 0; i < n && wiped; i++) {
            Py_ssize_t k = size[i] < wiped ? size[i] : wiped;
            memset(piece[i], 0, (size_t)k);
            wiped -= k;
        }
    }
    return failed ? -1 : 0;
}

static void make_nonce(unsigned char nonce[12], unsigned kind, unsigned long long seq) {
    for (int i = 0; i < 4; i++) nonce[i] = (unsigned char)(kind >> (8 * i));
    for (int i = 0; i < 8; i++) nonce[4 + i] = (unsigned char)(seq >> (8 * i));
}

static void put_len(unsigned char *p, unsigned v) {
    p[0] = (unsigned char)(v >> 24); p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8); p[3] = (unsigned char)v;
}

static unsigned get_len(const unsigned char *p) {
    return ((unsigned)p[0] << 24) | ((unsigned)p[1] << 16) | ((unsigned)p[2] << 8) | p[3];
}

static int ssl_error(const char *what) {
    PyErr_Format(PyExc_RuntimeError, "libcrypto: %s failed", what);
    return -1;
}

/* GMAC of the pieces (as associated data) under ``nonce`` through libcrypto's GCM: sealing,
 * the tag into ``tag``; opening, whether ``tag`` holds. 0, or -1 (no exception set). */
static int gmac_evp(EVP_CIPHER_CTX *ctx, int sealing, const unsigned char nonce[12],
                const unsigned char *const *piece, const Py_ssize_t *size, int n,
                unsigned char tag[TAG]) {
    int outl;
    if (sealing) {
        if (!EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce)) return -1;
        for (int i = 0; i < n; i++)
            if (size[i] && !EVP_EncryptUpdate(ctx, NULL, &outl, piece[i], (int)size[i]))
                return -1;
        if (!EVP_EncryptFinal_ex(ctx, NULL, &outl)) return -1;
        return EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, TAG, tag) ? 0 : -1;
    }
    if (!EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, nonce)) return -1;
    for (int i = 0; i < n; i++)
        if (size[i] && !EVP_DecryptUpdate(ctx, NULL, &outl, piece[i], (int)size[i]))
            return -1;
    if (!EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG, tag)) return -1;
    return EVP_DecryptFinal_ex(ctx, NULL, &outl) > 0 ? 0 : -1;
}

/* E_K(J0) for a 96-bit nonce (J0 = nonce | 0^31 1), XORed into ``s`` (a GHASH). */
static int mask_tag(EVP_CIPHER_CTX *ecb, const unsigned char nonce[12], unsigned char s[TAG]) {
    unsigned char j0[16], e[16];
    int outl;
    memcpy(j0, nonce, 12);
    j0[12] = j0[13] = j0[14] = 0;
    j0[15] = 1;
    if (!EVP_EncryptUpdate(ecb, e, &outl, j0, 16) || outl != 16) return -1;
    for (int i = 0; i < TAG; i++) s[i] ^= e[i];
    return 0;
}

/* Whether this link's integrity records in one direction have a compiled MAC (mac_start,
 * mac_update, mac_final): AEGISMAC-128X4, or GMAC on the compiled GHASH; else only
 * libcrypto's GCM (mac() through gmac_evp), which is not run piece by piece here. */
static int mac_fast(const Records *self, int sealing) {
    return self->amac || (sealing ? self->gseal : self->gopen) != NULL;
}

/* Begin the MAC of the record under ``nonce`` (kind | sequence number). AEGISMAC-128X4's
 * 16-byte nonce is the record's 12 bytes zero-padded; its key, the first 16 bytes of the
 * direction's. Only where mac_fast. */
static void mac_start(Records *self, int sealing, mac_state *st, const unsigned char nonce[12]) {
    memcpy(st->nonce, nonce, 12);
    if (self->amac) {
        unsigned char npub[16] = {0};
        memcpy(npub, nonce, 12);
        aegis128x4_mac_init(&st->am, sealing ? self->kseal : self->kopen, npub);
    } else {
        gh_start(&st->gh);
    }
}

/* Hash ``len`` more bytes of the record (any split gives the same tag). */
static void mac_update(Records *self, int sealing, mac_state *st, const unsigned char *p,
                       size_t len) {
    if (!len) return;
    if (self->amac)
        aegis128x4_mac_update(&st->am, p, len);
    else
        gh_update(sealing ? self->gseal : self->gopen, &st->gh, p, len);
}

/* Sealing: the tag into ``tag``; opening: whether ``tag`` holds (compared in constant
 * time). 0, or -1 (a failed tag, or libcrypto failed; no exception set). The state is wiped. */
static int mac_final(Records *self, int sealing, mac_state *st, unsigned char tag[TAG]) {
    unsigned char t[TAG];
    int rc = 0;
    if (self->amac) {
        aegis128x4_mac_final(&st->am, t, TAG);
    } else {
        gh_final(sealing ? self->gseal : self->gopen, &st->gh, t);
        rc = mask_tag(sealing ? self->eseal : self->eopen, st->nonce, t);
    }
    if (!rc) {
        if (sealing)
            memcpy(tag, t, TAG);
        else
            rc = CRYPTO_memcmp(t, tag, TAG) ? -1 : 0;
    }
    OPENSSL_cleanse(t, sizeof t);
    if (self->amac)
        OPENSSL_cleanse(&st->am, sizeof st->am);
    return rc;
}

/* The MAC of a record's pieces under ``nonce``: sealing, the tag into ``tag``; opening,
 * whether ``tag`` holds (0, or -1 with no exception set). AEGISMAC-128X4, or GMAC as
 * gmac_evp does it: on the compiled GHASH where the link has it, the tag GHASH_H(pieces)
 * xor E_K(J0) (SP 800-38D with an empty plaintext), bit-equal to GCM's. */
static int mac(Records *self, int sealing, const unsigned char nonce[12],
               const unsigned char *const *piece, const Py_ssize_t *size, int n,
               unsigned char tag[TAG]) {
    if (!mac_fast(self, sealing))
        return gmac_evp(sealing ? self->seal : self->open, sealing, nonce, piece, size, n, tag);
    mac_state st;
    mac_start(self, sealing, &st, nonce);
    for (int i = 0; i < n; i++) mac_update(self, sealing, &st, piece[i], (size_t)size[i]);
    return mac_final(self, sealing, &st, tag);
}

/* The compiled GHASH's key for AES key ``key`` (H = E_K(0)) and its ECB context, or
 * (NULL, NULL) where the CPU lacks the instructions or libcrypto failed. */
static void fast_keys(const unsigned char *key, gh_key **gk, EVP_CIPHER_CTX **ecb) {
    *gk = NULL;
    *ecb = NULL;
    if (!gh_available()) return;
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    unsigned char zero[16] = {0}, h[16];
    int outl;
    if (ctx == NULL || !EVP_EncryptInit_ex(ctx, EVP_aes_256_ecb(), NULL, key, NULL) ||
        !EVP_CIPHER_CTX_set_padding(ctx, 0) || !EVP_EncryptUpdate(ctx, h, &outl, zero, 16) ||
        outl != 16) {
        EVP_CIPHER_CTX_free(ctx);
        return;
    }
    gh_key *k = PyMem_RawMalloc(sizeof *k);
    if (k == NULL) {
        EVP_CIPHER_CTX_free(ctx);
        return;
    }
    gh_init(k, h);
    OPENSSL_cleanse(h, sizeof h);
    *gk = k;
    *ecb = ctx;
}

static EVP_CIPHER_CTX *new_ctx(const unsigned char *key, int sealing) {
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    if (ctx == NULL) return NULL;
    int ok = sealing ? EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key, NULL)
                     : EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key, NULL);
    if (!ok) {
        EVP_CIPHER_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

static int Records_init(Records *self, PyObject *args, PyObject *kw) {
    static char *names[] = {"seal_key", "open_key", "encrypt", "fast", "cipher", NULL};
    Py_buffer sk, ok;
    int encrypt, fast = 1;
    const char *cipher = "aes-256-gcm";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*y*p|ps", names, &sk, &ok, &encrypt, &fast,
                                     &cipher))
        return -1;
    int bad = sk.len != 32 || ok.len != 32;
    if (encrypt && strcmp(cipher, "aegis-256x4") == 0) {
        self->aegis = 1;
    } else if (!encrypt && strcmp(cipher, "aegismac-128x4") == 0) {
        self->amac = 1;
    } else if (strcmp(cipher, "aes-256-gcm") != 0 &&
               (encrypt || strcmp(cipher, "aes-256-gmac") != 0)) {
        PyBuffer_Release(&sk);
        PyBuffer_Release(&ok);
        PyErr_Format(PyExc_ValueError, "Records: cipher=%s is not aes-256-gcm or aegis-256x4 "
                     "(encrypting), aes-256-gmac or aegismac-128x4 (integrity)", cipher);
        return -1;
    }
    if (!bad) {
        memcpy(self->kseal, sk.buf, 32);
        memcpy(self->kopen, ok.buf, 32);
        self->seal = new_ctx(sk.buf, 1);
        self->open = new_ctx(ok.buf, 0);
        if (fast && !self->amac) {  /* the compiled GHASH where the CPU has it (False:
                                     * libcrypto's GCM) */
            fast_keys(sk.buf, &self->gseal, &self->eseal);
            fast_keys(ok.buf, &self->gopen, &self->eopen);
        }
    }
    PyBuffer_Release(&sk);
    PyBuffer_Release(&ok);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "Records: keys are 32 bytes (AES-256)");
        return -1;
    }
    if (self->seal == NULL || self->open == NULL) return ssl_error("AES-256-GCM set-up");
    self->encrypt = encrypt;
    return 0;
}

static void Records_dealloc(Records *self) {
    EVP_CIPHER_CTX_free(self->seal);
    EVP_CIPHER_CTX_free(self->open);
    EVP_CIPHER_CTX_free(self->eseal);
    EVP_CIPHER_CTX_free(self->eopen);
    if (self->gseal) OPENSSL_cleanse(self->gseal, sizeof *self->gseal);
    if (self->gopen) OPENSSL_cleanse(self->gopen, sizeof *self->gopen);
    PyMem_RawFree(self->gseal);
    PyMem_RawFree(self->gopen);
    OPENSSL_cleanse(self->kseal, sizeof self->kseal);
    OPENSSL_cleanse(self->kopen, sizeof self->kopen);
    OPENSSL_cleanse(&self->dst, sizeof self->dst);
    OPENSSL_cleanse(&self->dmac, sizeof self->dmac);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int enter(int *busy) {
    if (*busy) {
        PyErr_SetString(PyExc_RuntimeError,
                        "one direction of a link is used by two threads at once");
        return -1;
    }
    *busy = 1;
    return 0;
}

/* The buffers of a list of views (at most MAXPIECES): their count, or -1 with an error. */
static int get_views(PyObject *list, Py_buffer *views, int writable) {
    if (!PyList_Check(list) && !PyTuple_Check(list)) {
        PyErr_SetString(PyExc_TypeError, "views: a list or a tuple");
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(list);
    if (n > MAXPIECES) return -2;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(list, i), &views[i],
                               writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) {
            for (Py_ssize_t j = 0; j < i; j++) PyBuffer_Release(&views[j]);
            return -1;
        }
    }
    return (int)n;
}

static void release_views(Py_buffer *views, int n) {
    for (int i = 0; i < n; i++) PyBuffer_Release(&views[i]);
}

/* send_small(fd, views, seq, wbuf, limit) -> (plain bytes, bytes sent, record bytes), or
 * None when the frame is over ``limit`` bytes (or in too many pieces): the caller seals it
 * another way. The record is sealed into ``wbuf`` (len | body | tag) and sent with one
 * send(); what the kernel did not take is wbuf[sent:record], for the caller to send. */
static PyObject *Records_send_small(Records *self, PyObject *args) {
    int fd;
    PyObject *list;
    unsigned long long seq;
    Py_buffer wbuf;
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "iOKw*n", &fd, &list, &seq, &wbuf, &limit)) return NULL;
    Py_buffer views[MAXPIECES];
    int n = get_views(list, views, 0);
    PyObject *result = NULL;
    if (n < 0) {
        PyBuffer_Release(&wbuf);
        if (n == -2) Py_RETURN_NONE;
        return NULL;
    }
    Py_ssize_t total = 0;
    for (int i = 0; i < n; i++) total += views[i].len;
    if (!total) {  /* nothing to send: no record */
        release_views(views, n);
        PyBuffer_Release(&wbuf);
        return Py_BuildValue("nnn", (Py_ssize_t)0, (Py_ssize_t)0, (Py_ssize_t)0);
    }
    if (total > limit || LEN + total + TAG > wbuf.len) {
        release_views(views, n);
        PyBuffer_Release(&wbuf);
        Py_RETURN_NONE;
    }
    if (enter(&self->sealing) < 0) goto done;
    unsigned char *w = wbuf.buf, nonce[12], tag[TAG];
    Py_ssize_t end = LEN + total + TAG, sent = 0;
    int failed = 0, err = 0, outl;
    make_nonce(nonce, 0, seq);
    put_len(w, (unsigned)(total + TAG));
    EVP_CIPHER_CTX *ctx = self->seal;
    Py_BEGIN_ALLOW_THREADS
    if (self->encrypt && self->aegis) {  /* straight from the pieces, as below */
        const unsigned char *piece[MAXPIECES];
        Py_ssize_t size[MAXPIECES];
        for (int i = 0; i < n; i++) {
            piece[i] = views[i].buf;
            size[i] = views[i].len;
        }
        unsigned char npub[AEGIS_NONCE];
        aegis_nonce(npub, nonce);
        aegis_seal(self->kseal, npub, w, LEN, piece, size, n, w + LEN);
    } else if (self->encrypt) {  /* straight from the pieces into the record: no staging copy */
        unsigned char *out = w + LEN;
        failed = !EVP_EncryptInit_ex(ctx, NULL, NULL, NULL, nonce) ||
                 !EVP_EncryptUpdate(ctx, NULL, &outl, w, LEN);
        for (int i = 0; i < n && !failed; i++) {
            if (!views[i].len) continue;
            failed = !EVP_EncryptUpdate(ctx, out, &outl, views[i].buf, (int)views[i].len);
            out += outl;
        }
        failed = failed || !EVP_EncryptFinal_ex(ctx, out, &outl) ||
                 !EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, TAG, w + LEN + total);
    } else {  /* the plaintext as it is, then its tag */
        Py_ssize_t at = LEN;
        for (int i = 0; i < n; i++) {
            memcpy(w + at, views[i].buf, views[i].len);
            at += views[i].len;
        }
        const unsigned char *p = w + LEN;
        failed = mac(self, 1, nonce, &p, &total, 1, tag) < 0;
        memcpy(w + LEN + total, tag, TAG);
    }
    if (!failed) {
        while (sent < end) {
            ssize_t k = send(fd, w + sent, end - sent, MSG_NOSIGNAL);
            if (k < 0) {
                if (errno == EINTR) continue;
                if (errno != EAGAIN && errno != EWOULDBLOCK) err = errno;
                break;
            }
            sent += k;
            break;  /* one call, as a socket's send: the caller keeps the rest */
        }
    }
    Py_END_ALLOW_THREADS
    self->sealing = 0;
    if (failed) {
        ssl_error("sealing a record");
    } else if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
    } else {
        result = Py_BuildValue("nnn", total, sent, end);
    }
done:
    release_views(views, n);
    PyBuffer_Release(&wbuf);
    return result;
}

/* send_frame(fd, views, seq, wbuf, maxrec, join) -> (plain, sealed, gsent, ghead, goff, glen)
 * or None.
 *
 * A large frame in one call with the GIL released, integrity records tagged by the compiled
 * MAC and sent straight from the caller's buffers, AEGIS-256X4 records sealed from them
 * into ``wbuf`` (the header's record first, then the payload's: one iovec) and sent: what SecureLink's general path
 * does record by record in Python, with the same records on the wire. ``views`` is either
 * [payload] (more than ``join`` bytes) or [header, payload] (a header of 1 to ``join``
 * bytes, a payload of at least ``join``): the header is a record of its own, sent in one
 * sendmsg with the payload's first record; the payload goes in records of at most
 * ``maxrec`` bytes. Records are tagged and sent while the kernel takes them whole; the
 * first it does not take whole (or at all) is still sealed: it stays pending.
 *
 * plain: the plaintext bytes of the records now wholly in the kernel; sealed: the records
 * sealed (sequence numbers used, from ``seq``); gsent -1 when nothing is pending, else the
 * pending records' bytes the kernel took, those records being ``wbuf[0:4] header
 * wbuf[4:20]`` when ``ghead`` >= 0 (the header's length), then ``wbuf[20:24]
 * payload[goff:goff+glen] wbuf[24:40]``; encrypting, the header's sealed record (when
 * ``ghead`` >= 0) then the payload's lie in ``wbuf`` from its start, which must hold
 * ``2 * (4 + 16) + join + maxrec`` bytes. None: not a frame for this call (AES-256-GCM
 * links, no compiled MAC, other shapes). */
static PyObject *Records_send_frame(Records *self, PyObject *args) {
    int fd;
    PyObject *list;
    unsigned long long seq;
    Py_buffer wbuf;
    Py_ssize_t maxrec, join;
    if (!PyArg_ParseTuple(args, "iOKw*nn", &fd, &list, &seq, &wbuf, &maxrec, &join))
        return NULL;
    if ((self->encrypt ? !self->aegis : !mac_fast(self, 1)) || wbuf.len < 2 * (LEN + TAG) ||
        maxrec <= 0 || (self->encrypt && wbuf.len < 2 * (LEN + TAG) + join + maxrec) ||
        (PyList_Check(list) || PyTuple_Check(list) ? PySequence_Fast_GET_SIZE(list) : 0) < 1) {
        PyBuffer_Release(&wbuf);
        if (!PyList_Check(list) && !PyTuple_Check(list))
            return PyErr_SetString(PyExc_TypeError, "views: a list or a tuple"), NULL;
        Py_RETURN_NONE;
    }
    Py_buffer views[MAXPIECES];
    int n = get_views(list, views, 0);
    if (n < 0) {
        PyBuffer_Release(&wbuf);
        if (n == -2) Py_RETURN_NONE;
        return NULL;
    }
    Py_buffer *head = n == 2 ? &views[0] : NULL, *pay = &views[n - 1];
    int shape = n == 1 ? pay->len > join
                       : n == 2 && head->len > 0 && head->len <= join && pay->len >= join;
    if (!shape || enter(&self->sealing) < 0) {
        release_views(views, n);
        PyBuffer_Release(&wbuf);
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    unsigned char *w = wbuf.buf, nonce[12];
    const unsigned char *pb = pay->buf;
    Py_ssize_t plen = pay->len, off = 0, done = 0, gsent = -1, ghead = -1, goff = 0, glen = 0;
    unsigned long long sealed = 0;
    int failed = 0, err = 0;
    Py_BEGIN_ALLOW_THREADS
    while (off < plen) {
        Py_ssize_t chunk = plen - off < maxrec ? plen - off : maxrec, total = 0;
        struct iovec iov[6];
        int cnt = 0;
        const unsigned char *p;
        if (self->encrypt) {  /* sealed into wbuf, the header's record first: one iovec */
            unsigned char npub[AEGIS_NONCE];
            if (head != NULL) {
                put_len(w, (unsigned)(head->len + TAG));
                make_nonce(nonce, 0, seq + sealed);
                aegis_nonce(npub, nonce);
                p = head->buf;
                aegis_seal(self->kseal, npub, w, LEN, &p, &head->len, 1, w + LEN);
                sealed++;
                total = LEN + head->len + TAG;
            }
            put_len(w + total, (unsigned)(chunk + TAG));
            make_nonce(nonce, 0, seq + sealed);
            aegis_nonce(npub, nonce);
            p = pb + off;
            aegis_seal(self->kseal, npub, w + total, LEN, &p, &chunk, 1, w + total + LEN);
            sealed++;
            total += LEN + chunk + TAG;
            iov[cnt].iov_base = w;
            iov[cnt++].iov_len = (size_t)total;
        } else {
            if (head != NULL) {  /* the header's record first, in the same call */
                put_len(w, (unsigned)(head->len + TAG));
                make_nonce(nonce, 0, seq + sealed);
                p = head->buf;
                failed = mac(self, 1, nonce, &p, &head->len, 1, w + LEN) < 0;
                sealed++;
                iov[cnt].iov_base = w;
                iov[cnt++].iov_len = LEN;
                iov[cnt].iov_base = head->buf;
                iov[cnt++].iov_len = (size_t)head->len;
                iov[cnt].iov_base = w + LEN;
                iov[cnt++].iov_len = TAG;
                total += LEN + head->len + TAG;
            }
            put_len(w + LEN + TAG, (unsigned)(chunk + TAG));
            make_nonce(nonce, 0, seq + sealed);
            p = pb + off;
            failed = failed || mac(self, 1, nonce, &p, &chunk, 1, w + 2 * LEN + TAG) < 0;
            sealed++;
            if (failed) break;
            iov[cnt].iov_base = w + LEN + TAG;
            iov[cnt++].iov_len = LEN;
            iov[cnt].iov_base = (void *)(pb + off);
            iov[cnt++].iov_len = (size_t)chunk;
            iov[cnt].iov_base = w + 2 * LEN + TAG;
            iov[cnt++].iov_len = TAG;
            total += LEN + chunk + TAG;
        }
        Py_ssize_t sent = 0;
        int first = 0;  /* the first iovec not wholly sent */
        while (sent < total) {
            struct msghdr msg;
            memset(&msg, 0, sizeof msg);
            msg.msg_iov = iov + first;
            msg.msg_iovlen = (size_t)(cnt - first);
            ssize_t k = sendmsg(fd, &msg, MSG_NOSIGNAL);
            if (k < 0) {
                if (errno == EINTR) continue;
                if (errno != EAGAIN && errno != EWOULDBLOCK) err = errno;
                break;
            }
            sent += k;
            while (k > 0 && first < cnt) {  /* step past what went */
                if ((size_t)k >= iov[first].iov_len) {
                    k -= (ssize_t)iov[first].iov_len;
                    first++;
                } else {
                    iov[first].iov_base = (unsigned char *)iov[first].iov_base + k;
                    iov[first].iov_len -= (size_t)k;
                    k = 0;
                }
            }
        }
        if (sent < total) {  /* sealed, not (all) sent: pending, for the caller to finish */
            gsent = sent;
            ghead = head != NULL ? head->len : -1;
            goff = off;
            glen = chunk;
            break;
        }
        done += (head != NULL ? head->len : 0) + chunk;
        off += chunk;
        head = NULL;
    }
    Py_END_ALLOW_THREADS
    self->sealing = 0;
    release_views(views, n);
    PyBuffer_Release(&wbuf);
    if (failed) return ssl_error("sealing a record"), NULL;
    if (err) {  /* a broken link, as socket.sendmsg raises it */
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return Py_BuildValue("nKnnnn", done, sealed, gsent, ghead, goff, glen);
}

/* recv_small(fd, raw, rstart, rlen, views, seq, direct) -> (status, rstart, rlen)
 *
 * The common receive in one call: when raw[rstart:rlen] is empty, read what the kernel has
 * into raw (one recv; not when the views hold ``direct`` bytes or more, which the caller
 * reads in place); then open the whole data record at raw[rstart:] into the views,
 * scattered. status: the plaintext bytes opened (>= 0); -1 when the next record is not one
 * for this call (partial, an abort record, larger than the views, claimed size out of
 * range: the caller's general path takes it, from the returned offsets); -2 at the end of
 * the stream with nothing buffered; -3 when the record failed its tag (nothing handed
 * over: under encryption what was decrypted into the views is wiped); -4 when nothing is
 * buffered and nothing came (EAGAIN). */
static PyObject *Records_recv_small(Records *self, PyObject *args) {
    int fd;
    PyObject *list;
    Py_buffer raw;
    Py_ssize_t rstart, rlen, direct, maxrec;
    unsigned long long seq;
    if (!PyArg_ParseTuple(args, "iw*nnOKnn", &fd, &raw, &rstart, &rlen, &list, &seq, &direct,
                          &maxrec))
        return NULL;
    if (rstart < 0 || rlen < rstart || rlen > raw.len) {
        PyBuffer_Release(&raw);
        PyErr_SetString(PyExc_ValueError, "recv_small: offsets outside the buffer");
        return NULL;
    }
    Py_buffer views[MAXPIECES];
    int n = get_views(list, views, 1);
    if (n < 0) {
        PyBuffer_Release(&raw);
        if (n == -2) return Py_BuildValue("inn", -1, rstart, rlen);
        return NULL;
    }
    Py_ssize_t room = 0;
    for (int i = 0; i < n; i++) room += views[i].len;
    long status = -1;
    PyObject *result = NULL;
    int err = 0;
    unsigned char *r = raw.buf;
    if (enter(&self->opening) < 0) goto done;
    if (rstart == rlen) {
        if (!room || room >= direct) goto out;
        ssize_t k;
        Py_BEGIN_ALLOW_THREADS
        do {
            k = recv(fd, r, raw.len, 0);
        } while (k < 0 && errno == EINTR);
        if (k < 0) err = errno;
        Py_END_ALLOW_THREADS
        if (k < 0) {
            if (err == EAGAIN || err == EWOULDBLOCK) {
                status = -4;
                err = 0;
            }
            rstart = rlen = 0;
            goto out;
        }
        rstart = 0;
        rlen = k;
        if (k == 0) {
            status = -2;
            goto out;
        }
    }
    if (rlen - rstart < LEN) goto out;
    unsigned size = get_len(r + rstart);
    if (size & 0x80000000u || size < TAG || (Py_ssize_t)size > maxrec + TAG) goto out;
    Py_ssize_t body = size - TAG;
    if (body > room || rlen - rstart < LEN + (Py_ssize_t)size) goto out;
    unsigned char nonce[12], *rec = r + rstart;
    const unsigned char *src = rec + LEN;
    int failed = 0, outl;
    make_nonce(nonce, 0, seq);
    EVP_CIPHER_CTX *ctx = self->open;
    if (self->encrypt && self->aegis) {  /* decrypted straight into the caller's pieces */
        unsigned char *piece[MAXPIECES];
        Py_ssize_t size[MAXPIECES];
        for (int i = 0; i < n; i++) {
            piece[i] = views[i].buf;
            size[i] = views[i].len;
        }
        unsigned char npub[AEGIS_NONCE];
        aegis_nonce(npub, nonce);
        failed = aegis_open(self->kopen, npub, rec, LEN, src, body, piece, size, n) < 0;
    } else if (self->encrypt) {  /* decrypted straight into the caller's pieces */
        failed = !EVP_DecryptInit_ex(ctx, NULL, NULL, NULL, nonce) ||
                 !EVP_DecryptUpdate(ctx, NULL, &outl, rec, LEN);
        Py_ssize_t left = body;
        for (int i = 0; i < n && left && !failed; i++) {
            Py_ssize_t k = views[i].len < left ? views[i].len : left;
            if (!k) continue;
            failed = !EVP_DecryptUpdate(ctx, views[i].buf, &outl, src, (int)k);
            src += k;
            left -= k;
        }
        unsigned char scratch[32];
        failed = failed ||
                 !EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG, rec + LEN + body) ||
                 EVP_DecryptFinal_ex(ctx, scratch, &outl) <= 0;
        if (failed) {  /* nothing handed over: what was decrypted is wiped */
            Py_ssize_t wiped = body;
            for (int i = 0; i < n && wiped; i++) {
                Py_ssize_t k = views[i].len < wiped ? views[i].len : wiped;
                memset(views[i].buf, 0, k);
                wiped -= k;
            }
        }
    } else {  /* checked where it lies, then copied out */
        failed = mac(self, 0, nonce, &src, &body, 1, rec + LEN + body) < 0;
        Py_ssize_t left = body;
        for (int i = 0; i < n && left && !failed; i++) {
            Py_ssize_t k = views[i].len < left ? views[i].len : left;
            memcpy(views[i].buf, src, k);
            src += k;
            left -= k;
        }
    }
    if (failed) {
        status = -3;
    } else {
        status = body;
        rstart += LEN + size;
    }
out:
    self->opening = 0;
    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
    } else {
        result = Py_BuildValue("lnn", status, rstart, rlen);
    }
done:
    release_views(views, n);
    PyBuffer_Release(&raw);
    return result;
}

/* tag(seq, kind, data) -> the 16-byte integrity tag of ``data`` (sealing direction). */
static PyObject *Records_tag(Records *self, PyObject *args) {
    unsigned long long seq;
    unsigned kind;
    Py_buffer data;
    if (!PyArg_ParseTuple(args, "KIy*", &seq, &kind, &data)) return NULL;
    if (enter(&self->sealing) < 0) {
        PyBuffer_Release(&data);
        return NULL;
    }
    unsigned char nonce[12], tag[TAG];
    const unsigned char *p = data.buf;
    int rc;
    make_nonce(nonce, kind, seq);
    if (data.len >= NOGIL_BYTES) {
        Py_BEGIN_ALLOW_THREADS
        rc = mac(self, 1, nonce, &p, &data.len, 1, tag);
        Py_END_ALLOW_THREADS
    } else {
        rc = mac(self, 1, nonce, &p, &data.len, 1, tag);
    }
    self->sealing = 0;
    PyBuffer_Release(&data);
    if (rc < 0) return ssl_error("GMAC"), NULL;
    return PyBytes_FromStringAndSize((const char *)tag, TAG);
}

/* check(seq, kind, data, tag) -> whether ``tag`` is the integrity tag of ``data`` (opening). */
static PyObject *Records_check(Records *self, PyObject *args) {
    unsigned long long seq;
    unsigned kind;
    Py_buffer data, tag;
    if (!PyArg_ParseTuple(args, "KIy*y*", &seq, &kind, &data, &tag)) return NULL;
    int rc = -1;
    if (tag.len == TAG && enter(&self->opening) == 0) {
        unsigned char nonce[12], t[TAG];
        const unsigned char *p = data.buf;
        memcpy(t, tag.buf, TAG);
        make_nonce(nonce, kind, seq);
        if (data.len >= NOGIL_BYTES) {
            Py_BEGIN_ALLOW_THREADS
            rc = mac(self, 0, nonce, &p, &data.len, 1, t);
            Py_END_ALLOW_THREADS
        } else {
            rc = mac(self, 0, nonce, &p, &data.len, 1, t);
        }
        self->opening = 0;
    }
    PyBuffer_Release(&data);
    PyBuffer_Release(&tag);
    if (PyErr_Occurred()) return NULL;
    return PyBool_FromLong(rc == 0);
}

/* The nonce argument of seal() and open(): a record's 12 bytes (kind, sequence number),
 * zero-padded, or a whole 32-byte AEGIS-256X4 nonce (the draft's test vectors). */
static int nonce_arg(Py_buffer *b, unsigned char npub[AEGIS_NONCE]) {
    if (b->len == 12) {
        aegis_nonce(npub, b->buf);
        return 0;
    }
    if (b->len == AEGIS_NONCE) {
        memcpy(npub, b->buf, AEGIS_NONCE);
        return 0;
    }
    PyErr_SetString(PyExc_ValueError, "a nonce is 12 bytes (a record's) or 32");
    return -1;
}

/* seal(nonce, data, aad, out): AEGIS-256X4 ciphertext of ``data`` then its tag into ``out``
 * (exactly len(data) + 16 bytes), as cryptography's AESGCM.encrypt_into does for GCM. */
static PyObject *Records_seal(Records *self, PyObject *args) {
    Py_buffer nb, data, ad, out;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &nb, &data, &ad, &out)) return NULL;
    unsigned char nonce[AEGIS_NONCE];
    PyObject *result = NULL;
    if (!self->aegis) {
        PyErr_SetString(PyExc_ValueError, "seal: this link's records are not AEGIS-256X4");
    } else if (nonce_arg(&nb, nonce) == 0) {
        if (out.len != data.len + TAG) {
            PyErr_SetString(PyExc_ValueError, "seal: out must hold the data and its tag");
        } else if (enter(&self->sealing) == 0) {
            const unsigned char *p = data.buf;
            if (data.len >= NOGIL_BYTES) {
                Py_BEGIN_ALLOW_THREADS
                aegis_seal(self->kseal, nonce, ad.buf, (size_t)ad.len, &p, &data.len, 1, out.buf);
                Py_END_ALLOW_THREADS
            } else {
                aegis_seal(self->kseal, nonce, ad.buf, (size_t)ad.len, &p, &data.len, 1, out.buf);
            }
            self->sealing = 0;
            result = Py_None;
            Py_INCREF(result);
        }
    }
    PyBuffer_Release(&nb);
    PyBuffer_Release(&data);
    PyBuffer_Release(&ad);
    PyBuffer_Release(&out);
    return result;
}

/* open(nonce, body, aad, dest) -> whether the tag at the end of ``body`` holds; the
 * plaintext goes to ``dest`` (exactly len(body) - 16 bytes), wiped when it does not. */
static PyObject *Records_open(Records *self, PyObject *args) {
    Py_buffer nb, body, ad, dest;
    if (!PyArg_ParseTuple(args, "y*y*y*w*", &nb, &body, &ad, &dest)) return NULL;
    unsigned char nonce[AEGIS_NONCE];
    PyObject *result = NULL;
    if (!self->aegis) {
        PyErr_SetString(PyExc_ValueError, "open: this link's records are not AEGIS-256X4");
    } else if (nonce_arg(&nb, nonce) == 0) {
        if (body.len < TAG || dest.len != body.len - TAG) {
            PyErr_SetString(PyExc_ValueError, "open: dest must hold the body less its tag");
        } else if (enter(&self->opening) == 0) {
            unsigned char *d = dest.buf;
            Py_ssize_t n = dest.len;
            int rc;
            if (n >= NOGIL_BYTES) {
                Py_BEGIN_ALLOW_THREADS
                rc = aegis_open(self->kopen, nonce, ad.buf, (size_t)ad.len, body.buf, n, &d, &n, 1);
                Py_END_ALLOW_THREADS
            } else {
                rc = aegis_open(self->kopen, nonce, ad.buf, (size_t)ad.len, body.buf, n, &d, &n, 1);
            }
            self->opening = 0;
            result = PyBool_FromLong(rc == 0);
        }
    }
    PyBuffer_Release(&nb);
    PyBuffer_Release(&body);
    PyBuffer_Release(&ad);
    PyBuffer_Release(&dest);
    return result;
}

/* Begin opening in place the record of ``kind`` and sequence number ``seq`` whose length
 * field is ``len``: AEGIS-256X4's state (the length field its associated data), or the
 * integrity MAC's. Its pieces then go through direct_take. */
static void direct_start(Records *self, unsigned kind, unsigned long long seq,
                         const unsigned char len[LEN]) {
    unsigned char nonce[12];
    make_nonce(nonce, kind, seq);
    if (self->encrypt) {
        unsigned char npub[AEGIS_NONCE];
        aegis_nonce(npub, nonce);
        aegis256x4_state_init(&self->dst, len, LEN, npub, self->kopen);
    } else {
        mac_start(self, 0, &self->dmac, nonce);
    }
    self->dactive = 1;
}

/* direct_begin(seq, kind, head): start opening the record whose 4-byte length field is
 * ``head`` in place (recv_direct). Only for records this object opens piece by piece:
 * AEGIS-256X4 ones, or integrity ones where it has the compiled GHASH (``fast``). */
static PyObject *Records_direct_begin(Records *self, PyObject *args) {
    unsigned long long seq;
    unsigned kind;
    Py_buffer head;
    if (!PyArg_ParseTuple(args, "KIy*", &seq, &kind, &head)) return NULL;
    PyObject *result = NULL;
    if (head.len != LEN) {
        PyErr_SetString(PyExc_ValueError, "direct_begin: head is the 4-byte length field");
    } else if (self->encrypt ? !self->aegis : !mac_fast(self, 0)) {
        PyErr_SetString(PyExc_ValueError, "direct_begin: this link's records are not opened "
                                          "in place (AES-256-GCM, or no compiled MAC)");
    } else if (enter(&self->opening) == 0) {
        direct_start(self, kind, seq, head.buf);
        self->opening = 0;
        result = Py_None;
        Py_INCREF(result);
    }
    PyBuffer_Release(&head);
    return result;
}

/* The bytes [from, to) of a record read in place just landed: decrypt them where they lie
 * (AEGIS-256X4), or hash them (the integrity MAC), while they are still in the core's cache. */
static void direct_take(Records *self, unsigned char *view, Py_ssize_t from, Py_ssize_t to) {
    if (to <= from) return;
    if (self->encrypt)
        aegis_piece(&self->dst, 0, view + from, view + from, (size_t)(to - from));
    else
        mac_update(self, 0, &self->dmac, view + from, (size_t)(to - from));
}

/* The loop of recv_direct, with the GIL released: read the record begun in place into ``v``
 * (``n`` bytes) and its tag into ``t``, opening each piece as it lands, until it is whole,
 * the kernel has no more, or a read comes back short; then check its tag. Its status (as
 * recv_direct's); ``*err`` an errno for a failed read. */
static int direct_loop(Records *self, int fd, unsigned char *v, Py_ssize_t n, unsigned char *t,
                       Py_ssize_t *gotp, Py_ssize_t *tgotp, int *errp) {
    Py_ssize_t got = *gotp, tgot = *tgotp;
    int status = 0, err = 0;
    while (got < n || tgot < TAG) {
        struct iovec iov[2];
        int cnt = 0;
        if (got < n) {
            iov[cnt].iov_base = v + got;
            iov[cnt++].iov_len = (size_t)(n - got);
        }
        iov[cnt].iov_base = t + tgot;
        iov[cnt++].iov_len = (size_t)(TAG - tgot);
        size_t want = 0;
        for (int i = 0; i < cnt; i++) want += iov[i].iov_len;
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = iov;
        msg.msg_iovlen = (size_t)cnt;
        ssize_t k = recvmsg(fd, &msg, 0);
        if (k < 0) {
            if (errno == EINTR) continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) err = errno;
            break;
        }
        if (k == 0) {
            status = -2;
            break;
        }
        Py_ssize_t d = n - got < (Py_ssize_t)k ? n - got : (Py_ssize_t)k;
        direct_take(self, v, got, got + d);
        got += d;
        tgot += (Py_ssize_t)k - d;
        if ((size_t)k < want && (got < n || tgot < TAG))
            break;  /* the kernel had no more: no second call only to hear so */
    }
    if (!status && !err && got == n && tgot == TAG) {
        int ok;
        if (self->encrypt) {
            ok = aegis256x4_state_decrypt_final(&self->dst, t, TAG) == 0;
        } else {
            ok = mac_final(self, 0, &self->dmac, t) == 0;
        }
        status = ok ? 1 : -1;
    }
    if (status < 0)  /* nothing handed over: what landed (and was decrypted) is wiped */
        memset(v, 0, (size_t)n);
    *gotp = got;
    *tgotp = tgot;
    *errp = err;
    return status;
}

/* recv_frame(fd, raw, views, seq, direct, maxrec, tag)
 *     -> (status, got, opened, rstart, rlen, dlen, dgot, tgot)
 *
 * The receive of a large integrity or AEGIS-256X4 frame in one call, the GIL released: what SecureLink's
 * general path does in Python, on the same records. For an empty receive buffer ``raw`` and
 * ``views`` either [header, payload] (a header buffer under ``direct`` bytes, a payload
 * buffer of at least ``direct``) or [payload]: one recv of the header's record and the next
 * record's length and no further (so that the payload's record is still in the kernel),
 * the header's record checked and copied out (decrypted straight into its buffer, wiped if it
 * fails), then the payload's record, if it is a data
 * record of ``direct`` to ``maxrec`` bytes that the payload buffer holds whole, begun in
 * place and read as recv_direct reads it (its tag into ``tag``); once it passed, the next
 * record's length (one recv of 4 bytes, where the payload buffer has ``direct`` bytes left)
 * and that record the same way, while the kernel has them.
 *
 * status 0: ``got`` plaintext bytes handed over, ``opened`` records opened (from ``seq``),
 * the receive buffer now raw[rstart:rlen], and when ``dlen`` > 0 a record of ``dlen`` bytes
 * read in place is on its way, in the payload buffer right after the payload bytes handed
 * over (``dgot`` and ``tgot`` of its body and tag came: go on with
 * recv_direct). -1: not for this call (another shape, a partial, abort or other record):
 * nothing handed over, what was read is in raw[rstart:rlen] for the general path. -2: the
 * stream ended with nothing read. -3: record ``seq + opened`` failed its tag (a payload
 * record read in place is wiped). -4: nothing came (EAGAIN). -5: the stream ended inside
 * the record read in place (wiped). */
static PyObject *Records_recv_frame(Records *self, PyObject *args) {
    int fd;
    Py_buffer raw, tag;
    PyObject *list;
    unsigned long long seq;
    Py_ssize_t direct, maxrec;
    if (!PyArg_ParseTuple(args, "iw*OKnnw*", &fd, &raw, &list, &seq, &direct, &maxrec, &tag))
        return NULL;
    Py_buffer views[MAXPIECES];
    int n = get_views(list, views, 1);
    PyObject *result = NULL;
    if (n == -1) goto release;
    long status = -1;
    Py_ssize_t got = 0, rstart = 0, rlen = 0, dlen = 0, dgot = 0, tgot = 0;
    int opened = 0, err = 0;
    Py_buffer *head = n == 2 ? &views[0] : NULL, *pay = n >= 1 ? &views[n - 1] : NULL;
    Py_ssize_t hlen = head != NULL ? head->len : 0;
    if ((self->encrypt ? !self->aegis : !mac_fast(self, 0)) || self->dactive || tag.len != TAG ||
        n < 1 || n > 2 || pay->len < direct || hlen >= direct || hlen > maxrec ||
        (head != NULL && !hlen) || raw.len < 2 * LEN + hlen + TAG) {
        result = Py_BuildValue("lninnnnn", status, got, opened, rstart, rlen, dlen, dgot, tgot);
        goto release;
    }
    if (enter(&self->opening) < 0) goto release;
    unsigned char *r = raw.buf, nonce[12];
    Py_ssize_t cap = head != NULL ? 2 * LEN + hlen + TAG : LEN;
    Py_BEGIN_ALLOW_THREADS
    ssize_t k;
    do {
        k = recv(fd, r, (size_t)cap, 0);
    } while (k < 0 && errno == EINTR);
    if (k < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) status = -4;
        else err = errno;
    } else if (k == 0) {
        status = -2;
    } else {
        rlen = k;
        if (head != NULL && k >= LEN) {  /* the header's record, if whole and of its size */
            unsigned size = get_len(r);
            if (size == (unsigned)(hlen + TAG) && k >= LEN + (ssize_t)size) {
                const unsigned char *src = r + LEN;
                make_nonce(nonce, 0, seq);
                unsigned char npub[AEGIS_NONCE], *hb = head->buf;
                aegis_nonce(npub, nonce);
                if (self->encrypt ? aegis_open(self->kopen, npub, r, LEN, src, hlen, &hb, &hlen, 1)
                                    < 0
                                  : mac(self, 0, nonce, &src, &hlen, 1, r + LEN + hlen) < 0) {
                    status = -3;
                } else {
                    if (!self->encrypt) memcpy(head->buf, src, (size_t)hlen);
                    got = hlen;
                    opened = 1;
                    rstart = LEN + size;
                    status = 0;
                }
            }
        }
        /* the payload's records, each read in place, while the kernel has them whole */
        Py_ssize_t poff = 0;
        while (rlen - rstart == LEN && (head == NULL || status == 0)) {
            unsigned size = get_len(r + rstart);
            Py_ssize_t body = (Py_ssize_t)(size & 0x7fffffffu) - TAG;
            if (size & 0x80000000u || body < direct || body > maxrec || body > pay->len - poff)
                break;
            direct_start(self, 0, seq + (unsigned long long)opened, r + rstart);
            rstart = rlen = 0;
            dlen = body;
            dgot = tgot = 0;
            int ds = direct_loop(self, fd, (unsigned char *)pay->buf + poff, body, tag.buf,
                                 &dgot, &tgot, &err);
            status = 0;
            if (ds) {
                self->dactive = 0;
                dlen = 0;
                OPENSSL_cleanse(&self->dst, sizeof self->dst);
                OPENSSL_cleanse(&self->dmac, sizeof self->dmac);
            }
            if (ds == -1) {
                status = -3;
            } else if (ds == -2) {
                status = -5;
            }
            if (ds != 1)
                break;
            got += body;
            opened++;
            poff += body;
            if (pay->len - poff < direct)
                break;
            /* the next record's length, and no further: its body is read in place */
            do {
                k = recv(fd, r, LEN, 0);
            } while (k < 0 && errno == EINTR);
            if (k <= 0)  /* nothing yet, or the end or an error: the next call hears it */
                break;
            rlen = k;
        }
    }
    Py_END_ALLOW_THREADS
    self->opening = 0;
    if (err && status != -3 && status != -5) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
    } else {
        result = Py_BuildValue("lninnnnn", status, got, opened, rstart, rlen, dlen, dgot, tgot);
    }
release:
    if (n > 0) release_views(views, n);
    PyBuffer_Release(&raw);
    PyBuffer_Release(&tag);
    return result;
}

/* recv_direct(fd, view, got, tag, tgot) -> (got, tgot, status)
 *
 * Read the body of the record begun with direct_begin straight into ``view`` (its exact
 * plaintext size) and its tag into ``tag``, ``got`` and ``tgot`` bytes of them having come
 * before; each piece is opened where it landed as it lands (decrypted in place, or
 * hashed). Reads until the record is whole, the kernel has no more, or a read comes back
 * short. status: 0 not whole yet; 1 whole and its tag passed (the plaintext is in
 * ``view``); -1 its tag failed, -2 the stream ended inside it: both with ``view`` wiped
 * (nothing of an unauthenticated record stays in the caller's buffer). */
static PyObject *Records_recv_direct(Records *self, PyObject *args) {
    int fd;
    Py_buffer view, tag;
    Py_ssize_t got, tgot;
    if (!PyArg_ParseTuple(args, "iw*nw*n", &fd, &view, &got, &tag, &tgot)) return NULL;
    PyObject *result = NULL;
    if (!self->dactive) {
        PyErr_SetString(PyExc_ValueError, "recv_direct: no record begun (direct_begin)");
        goto done;
    }
    if (tag.len != TAG || got < 0 || got > view.len || tgot < 0 || tgot > TAG ||
        (tgot && got < view.len)) {
        PyErr_SetString(PyExc_ValueError, "recv_direct: offsets outside the record");
        goto done;
    }
    if (enter(&self->opening) < 0) goto done;
    unsigned char *v = view.buf, *t = tag.buf;
    Py_ssize_t n = view.len;
    int status, err;
    Py_BEGIN_ALLOW_THREADS
    status = direct_loop(self, fd, v, n, t, &got, &tgot, &err);
    Py_END_ALLOW_THREADS
    if (status) {
        self->dactive = 0;
        OPENSSL_cleanse(&self->dst, sizeof self->dst);
        OPENSSL_cleanse(&self->dmac, sizeof self->dmac);
    }
    self->opening = 0;
    if (err) {
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
    } else {
        result = Py_BuildValue("nni", got, tgot, status);
    }
done:
    PyBuffer_Release(&view);
    PyBuffer_Release(&tag);
    return result;
}

static PyObject *Records_get_fast(Records *self, void *closure) {
    (void)closure;
    return PyBool_FromLong(mac_fast(self, 1) && mac_fast(self, 0));
}

static PyObject *Records_get_cipher(Records *self, void *closure) {
    (void)closure;
    if (self->encrypt)
        return PyUnicode_FromString(self->aegis ? "aegis-256x4" : "aes-256-gcm");
    return PyUnicode_FromString(self->amac ? "aegismac-128x4" : "aes-256-gmac");
}

static PyGetSetDef Records_getset[] = {
    {"fast", (getter)Records_get_fast, NULL,
     "whether integrity tags run on a compiled MAC (AEGISMAC-128X4, or GMAC on the "
     "VPCLMULQDQ GHASH; else libcrypto's GCM)", NULL},
    {"cipher", (getter)Records_get_cipher, NULL,
     "the records' algorithm: encrypting 'aes-256-gcm' or 'aegis-256x4'; integrity "
     "'aes-256-gmac' or 'aegismac-128x4'", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Records_methods[] = {
    {"send_small", (PyCFunction)Records_send_small, METH_VARARGS,
     "send_small(fd, views, seq, wbuf, limit): seal a small frame as one record and send it"},
    {"send_frame", (PyCFunction)Records_send_frame, METH_VARARGS,
     "send_frame(fd, views, seq, wbuf, maxrec, join): seal and send a large frame"},
    {"recv_small", (PyCFunction)Records_recv_small, METH_VARARGS,
     "recv_small(fd, raw, rstart, rlen, views, seq, direct, maxrec): read, open, scatter"},
    {"tag", (PyCFunction)Records_tag, METH_VARARGS,
     "tag(seq, kind, data): an integrity record's tag (GMAC or AEGISMAC-128X4)"},
    {"check", (PyCFunction)Records_check, METH_VARARGS,
     "check(seq, kind, data, tag): whether an integrity record's tag holds"},
    {"seal", (PyCFunction)Records_seal, METH_VARARGS,
     "seal(nonce, data, aad, out): AEGIS-256X4 ciphertext and tag of data into out"},
    {"open", (PyCFunction)Records_open, METH_VARARGS,
     "open(nonce, body, aad, dest): whether body's AEGIS-256X4 tag holds; plaintext to dest"},
    {"direct_begin", (PyCFunction)Records_direct_begin, METH_VARARGS,
     "direct_begin(seq, kind, head): start opening a record in place (recv_direct)"},
    {"recv_frame", (PyCFunction)Records_recv_frame, METH_VARARGS,
     "recv_frame(fd, raw, views, seq, direct, maxrec, tag): receive a large frame"},
    {"recv_direct", (PyCFunction)Records_recv_direct, METH_VARARGS,
     "recv_direct(fd, view, got, tag, tgot): read a record into view, opening it as it lands"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RecordsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "terascale.transport._seclink.Records",
    .tp_basicsize = sizeof(Records),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Records(seal_key, open_key, encrypt, fast=True, cipher='aes-256-gcm'): one "
              "link's record contexts (fast: GMAC on the compiled GHASH where the CPU has "
              "VPCLMULQDQ; cipher: of encrypted records, 'aes-256-gcm' or 'aegis-256x4'; of "
              "integrity records, 'aes-256-gmac' (also 'aes-256-gcm') or 'aegismac-128x4')",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Records_init,
    .tp_dealloc = (destructor)Records_dealloc,
    .tp_methods = Records_methods,
    .tp_getset = Records_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "terascale.transport._seclink",
    "The per-record work of authenticated links (AES-256-GCM on libcrypto, AEGIS-256X4 and "
    "AEGISMAC-128X4 on libaegis).", -1, NULL,
};

/* Whether libaegis runs AEGIS-128X4 on the CPU's AES instructions here (the implementation
 * aegis_init picked is not the portable one): only then is AEGISMAC-128X4 offered for
 * integrity links, where it is faster than GMAC. */
static int aegis_in_hardware(void) {
#if defined(__aarch64__) || defined(_M_ARM64)
    return aegis_runtime_has_neon_aes();
#elif defined(__x86_64__) || defined(_M_AMD64) || defined(__i386__) || defined(_M_IX86)
    return aegis_runtime_has_aesni() && aegis_runtime_has_avx();
#elif defined(__ALTIVEC__) && defined(__CRYPTO__)
    return aegis_runtime_has_altivec();
#else
    return 0;
#endif
}

PyMODINIT_FUNC PyInit__seclink(void) {
    if (aegis_init() != 0) {
        PyErr_SetString(PyExc_RuntimeError, "libaegis: no implementation of AEGIS");
        return NULL;
    }
    if (PyType_Ready(&RecordsType) < 0) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&RecordsType);
    if (PyModule_AddObject(m, "Records", (PyObject *)&RecordsType) < 0) {
        Py_DECREF(&RecordsType);
        Py_DECREF(m);
        return NULL;
    }
    PyModule_AddIntConstant(m, "ABI", 6);
    PyModule_AddIntConstant(m, "AEGIS_HARDWARE", aegis_in_hardware());
    return m;
}
