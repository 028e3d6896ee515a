/* GHASH (NIST SP 800-38D) with VPCLMULQDQ: see _ghash.c. */
#ifndef TERASCALE_GHASH_H
#define TERASCALE_GHASH_H

#include <stddef.h>

/* Blocks hashed per step of the main loop: the key powers H^1..H^GH_STRIDE are kept. 64
 * rather than 32 halves the reductions and lane folds, which share the carry-less
 * multiplier's port with the products (5-8% more GB/s on a hot buffer here). */
#define GH_STRIDE 64

/* One hash key: its powers, preprocessed (byte-reflected, times x), highest first. */
typedef struct {
    unsigned char pw[GH_STRIDE][16];
} gh_key;

/* A running GHASH: the accumulator (byte-reflected), a partial block, the bytes hashed. */
typedef struct {
    unsigned char acc[16];
    unsigned char part[16];
    unsigned plen;
    unsigned long long len;
} gh_state;

/* 1 where this CPU and OS run the 512-bit path (AVX-512F/BW/VL and VPCLMULQDQ, zmm state
 * enabled); 0 otherwise, and the callers keep libcrypto's GHASH. */
int gh_available(void);
/* The key from H = E_K(0^128). Only after gh_available() said 1. */
void gh_init(gh_key *key, const unsigned char h[16]);
void gh_start(gh_state *s);
/* Hash n more bytes of the associated data (any split gives the same hash). */
void gh_update(const gh_key *key, gh_state *s, const unsigned char *p, size_t n);
/* GHASH_H(A, "") into out: zero-padding, then the length block (len(A) bits, 0). */
void gh_final(const gh_key *key, gh_state *s, unsigned char out[16]);

#endif
