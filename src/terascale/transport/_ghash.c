/* GHASH with 512-bit carry-less multiplication (VPCLMULQDQ), for GMAC tags of link records.
 *
 * GHASH_H(X_1..X_m) = X_1 H^m + X_2 H^(m-1) + ... + X_m H in GF(2^128) (NIST SP 800-38D).
 * Hashing one block at a time puts a multiplication and a reduction on the critical path
 * of every block; instead each step of the main loop takes GH_STRIDE (64) blocks, the
 * running hash folded into the first: four blocks per instruction, each multiplied by its
 * own power of H (H^64 .. H^1, computed once per key), the 256-bit products summed
 * unreduced, and one reduction per step ("aggregated reduction": Gueron and Kounavis,
 * "Intel Carry-Less Multiplication Instruction and its Usage for Computing the GCM Mode",
 * Intel white paper 323640, and Gueron, "AES-GCM for efficient authenticated encryption --
 * ending the reign of HMAC-SHA-1?", 2013). This is the structure of OpenSSL's and Linux's
 * AVX-512 GHASH; the system libcrypto 3.0 has only a 128-bit one, at about half the speed.
 *
 * Representation (as Linux's aes-gcm-avx10 does): blocks are byte-reflected (vpshufb), which
 * leaves GCM's reversed bit order a plain 128-bit integer; the key is multiplied by x once
 * (a shift and a conditional XOR), so products need no shift, and each reduction folds the
 * low 128 bits in with two multiplications by x^63 + x^62 + x^57 (the constant 0xc2 << 56).
 * Only AES itself (H = E_K(0), and E_K(J0) for a tag) stays with libcrypto (_seclink.c).
 *
 * The functions carry their own target attributes: the rest of the module, and machines
 * without these instructions, never run 512-bit code (gh_available() decides at run time).
 */
#include "_ghash.h"

#include <cpuid.h>
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* The main loop asks for the cache lines this far ahead: a buffer out of the caches (the
 * ring's first step sends each rank's own segment straight from memory) then hashes at
 * about 10 GB/s on the development host instead of 8 (hot: 30 GB/s either way). */
#define PREFETCH 4096
#define TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx2,vpclmulqdq,pclmul,sse4.1")))

int gh_available(void) {
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid(1, a, b, c, d);
    if (!(c & bit_OSXSAVE) || !(c & bit_PCLMUL)) return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    (void)hi;
    if ((lo & 0xe6) != 0xe6) return 0;  /* XMM, YMM, opmask and both halves of the ZMM state */
    __cpuid_count(7, 0, a, b, c, d);
    return (b & bit_AVX512F) && (b & bit_AVX512BW) && (b & bit_AVX512VL) && (b & bit_AVX2) &&
           (c & bit_VPCLMULQDQ);
}

static TARGET inline __m128i bswap128(__m128i x) {
    return _mm_shuffle_epi8(x, _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
}

static TARGET inline __m512i bswap512(__m512i x) {
    const __m512i m = _mm512_broadcast_i32x4(
        _mm_set_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
    return _mm512_shuffle_epi8(x, m);
}

static TARGET inline __m128i xor3(__m128i a, __m128i b, __m128i c) {
    return _mm_ternarylogic_epi32(a, b, c, 0x96);
}

/* Products of x and h, lane by lane, added to the unreduced sums lo, mi, hi. */
static TARGET inline void mul512(__m512i x, __m512i h, __m512i *lo, __m512i *mi, __m512i *hi) {
    *lo = _mm512_xor_si512(*lo, _mm512_clmulepi64_epi128(x, h, 0x00));
    *hi = _mm512_xor_si512(*hi, _mm512_clmulepi64_epi128(x, h, 0x11));
    *mi = _mm512_ternarylogic_epi32(*mi, _mm512_clmulepi64_epi128(x, h, 0x01),
                                    _mm512_clmulepi64_epi128(x, h, 0x10), 0x96);
}

static TARGET inline void mul128(__m128i x, __m128i h, __m128i *lo, __m128i *mi, __m128i *hi) {
    *lo = _mm_xor_si128(*lo, _mm_clmulepi64_si128(x, h, 0x00));
    *hi = _mm_xor_si128(*hi, _mm_clmulepi64_si128(x, h, 0x11));
    *mi = xor3(*mi, _mm_clmulepi64_si128(x, h, 0x01), _mm_clmulepi64_si128(x, h, 0x10));
}

static TARGET inline __m128i fold512(__m512i v) {
    __m256i y = _mm256_xor_si256(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    return _mm_xor_si128(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
}

/* The 256-bit sum lo + mi x^64 + hi x^128, reduced (the Montgomery-style folding above). */
static TARGET inline __m128i reduce(__m128i lo, __m128i mi, __m128i hi) {
    const __m128i poly = _mm_set_epi64x((long long)0xc200000000000000ULL, 1);
    __m128i t = _mm_clmulepi64_si128(poly, lo, 0x01);
    mi = xor3(mi, t, _mm_shuffle_epi32(lo, 0x4e));
    t = _mm_clmulepi64_si128(poly, mi, 0x01);
    return xor3(hi, t, _mm_shuffle_epi32(mi, 0x4e));
}

static TARGET __m128i mul(__m128i a, __m128i b) {
    __m128i lo = _mm_setzero_si128(), mi = lo, hi = lo;
    mul128(a, b, &lo, &mi, &hi);
    return reduce(lo, mi, hi);
}

void TARGET gh_init(gh_key *key, const unsigned char h[16]) {
    /* byte-reflect H, then multiply it by x: shift left one bit, and where a bit was carried
     * out, XOR in the reduction constant (x^128 = (0xc2 << 120) | 1 here) */
    __m128i r = bswap128(_mm_loadu_si128((const __m128i *)h));
    uint64_t v[2];
    _mm_storeu_si128((__m128i *)v, r);
    uint64_t carry = v[1] >> 63;
    v[1] = (v[1] << 1) | (v[0] >> 63);
    v[0] <<= 1;
    if (carry) {
        v[1] ^= 0xc200000000000000ULL;
        v[0] ^= 1;
    }
    __m128i h1 = _mm_loadu_si128((const __m128i *)v), p = h1;
    for (int i = GH_STRIDE - 1; i >= 0; i--) {  /* pw[i] = H^(GH_STRIDE - i) */
        _mm_storeu_si128((__m128i *)key->pw[i], p);
        p = mul(p, h1);
    }
}

/* The running hash acc over nblocks more whole blocks. */
static TARGET void blocks(const gh_key *key, unsigned char accp[16], const unsigned char *p,
                          size_t nblocks) {
    __m128i acc = _mm_loadu_si128((const __m128i *)accp);
    const unsigned char *pw = key->pw[0];
    while (nblocks >= GH_STRIDE) {
        __m512i lo = _mm512_setzero_si512(), mi = lo, hi = lo;
        for (int k = 0; k < GH_STRIDE / 4; k++)  /* the lines 4 KiB on: cold data streams */
            _mm_prefetch((const char *)p + PREFETCH + 64 * k, _MM_HINT_T0);
        for (int k = GH_STRIDE / 4 - 1; k >= 1; k--)  /* the running hash's product last */
            mul512(bswap512(_mm512_loadu_si512(p + 64 * k)), _mm512_loadu_si512(pw + 64 * k),
                   &lo, &mi, &hi);
        __m512i x0 = _mm512_xor_si512(bswap512(_mm512_loadu_si512(p)),
                                      _mm512_zextsi128_si512(acc));
        mul512(x0, _mm512_loadu_si512(pw), &lo, &mi, &hi);
        acc = reduce(fold512(lo), fold512(mi), fold512(hi));
        p += 16 * GH_STRIDE;
        nblocks -= GH_STRIDE;
    }
    if (nblocks) {  /* the last n < GH_STRIDE blocks: powers H^n .. H^1 */
        size_t n = nblocks, j = 0;
        const unsigned char *pn = pw + 16 * (GH_STRIDE - n);
        __m512i lo = _mm512_setzero_si512(), mi = lo, hi = lo;
        __m128i l = _mm_setzero_si128(), m = l, h = l;
        for (; j + 4 <= n; j += 4) {
            __m512i x = bswap512(_mm512_loadu_si512(p + 16 * j));
            if (!j) x = _mm512_xor_si512(x, _mm512_zextsi128_si512(acc));
            mul512(x, _mm512_loadu_si512(pn + 16 * j), &lo, &mi, &hi);
        }
        for (; j < n; j++) {
            __m128i x = bswap128(_mm_loadu_si128((const __m128i *)(p + 16 * j)));
            if (!j) x = _mm_xor_si128(x, acc);
            mul128(x, _mm_loadu_si128((const __m128i *)(pn + 16 * j)), &l, &m, &h);
        }
        acc = reduce(_mm_xor_si128(l, fold512(lo)), _mm_xor_si128(m, fold512(mi)),
                     _mm_xor_si128(h, fold512(hi)));
    }
    _mm_storeu_si128((__m128i *)accp, acc);
}

void gh_start(gh_state *s) {
    memset(s, 0, sizeof *s);
}

void gh_update(const gh_key *key, gh_state *s, const unsigned char *p, size_t n) {
    s->len += n;
    if (s->plen) {
        size_t k = 16 - s->plen < n ? 16 - s->plen : n;
        memcpy(s->part + s->plen, p, k);
        s->plen += (unsigned)k;
        p += k;
        n -= k;
        if (s->plen < 16) return;
        blocks(key, s->acc, s->part, 1);
        s->plen = 0;
    }
    if (n >= 16) blocks(key, s->acc, p, n / 16);
    p += n & ~(size_t)15;
    n &= 15;
    memcpy(s->part, p, n);
    s->plen = (unsigned)n;
}

void TARGET gh_final(const gh_key *key, gh_state *s, unsigned char out[16]) {
    unsigned char last[32] = {0};
    size_t nb = 1;
    if (s->plen) {  /* zero-padded */
        memcpy(last, s->part, s->plen);
        nb = 2;
    }
    unsigned long long bits = s->len * 8;  /* the length block: len(A) in bits, len(C) = 0 */
    unsigned char *lb = last + 16 * (nb - 1);
    for (int i = 0; i < 8; i++) lb[i] = (unsigned char)(bits >> (56 - 8 * i));
    blocks(key, s->acc, last, nb);
    _mm_storeu_si128((__m128i *)out, bswap128(_mm_loadu_si128((const __m128i *)s->acc)));
}
