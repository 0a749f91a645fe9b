/* rng.c — the project's one PRNG: xoshiro256** (Blackman & Vigna, 2018), seeded by expanding a
 * 64-bit seed through splitmix64 (the seeding the xoshiro authors recommend, and which never
 * yields the all-zero state). Small, fast, well tested statistically, and fully specified here,
 * so runs are reproducible across platforms. Not for cryptography. */
#include "common.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

void skv_rng_seed(skv_rng *rng, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&x);
}

uint64_t skv_rng_next(skv_rng *rng) {
    uint64_t *s = rng->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double skv_rng_uniform(skv_rng *rng) {
    /* the top 53 bits: every double in [0, 1) on a 2^-53 grid, equally likely */
    return (double)(skv_rng_next(rng) >> 11) * 0x1.0p-53;
}

uint64_t skv_rng_below(skv_rng *rng, uint64_t n) {
    if (n <= 1) return 0;
    /* Rejection: 2^64 mod n values at the bottom would make r % n biased; skip them. */
    uint64_t threshold = (0 - n) % n;
    for (;;) {
        uint64_t r = skv_rng_next(rng);
        if (r >= threshold) return r % n;
    }
}
