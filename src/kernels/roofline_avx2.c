/* roofline_avx2.c — measured FMA peak and memory read bandwidth (see roofline.h).
 *
 * This file is compiled with -mavx2 -mfma -mf16c, but only the *_avx2 loops may use those
 * instructions (and only the *_avx512 loop, marked with its own target, AVX-512): everything
 * else is marked PLAIN (no AVX at all) so that a CPU without AVX2 can call in, find out, and run
 * the scalar loops. The FMA peak is measured with the widest registers the CPU has, whatever
 * SKV_SIMD says: the ceiling is the machine's. */
#include "roofline.h"

#include "kernels.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#if defined(__x86_64__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
#define PLAIN          __attribute__((target("no-avx")))
#else
#define HAVE_AVX2_PATH 0
#define PLAIN
#endif

#define SINK_STRIDE 16 /* floats: one cache line per thread, no false sharing */

/* The widest SIMD the CPU has (the kernels' one CPUID probe, SKV_SIMD ignored): the ceilings
 * are the machine's, whatever level the kernels were told to run at. */
PLAIN static int cpu_has_avx2_fma(void) {
#if HAVE_AVX2_PATH
    return skv_simd_cpu_id() >= SKV_SIMD_AVX2;
#else
    return 0;
#endif
}

/* AVX-512 F as well: the FMA peak is then measured with 512-bit registers. */
PLAIN static int cpu_has_avx512(void) {
#if HAVE_AVX2_PATH
    return skv_simd_cpu_id() >= SKV_SIMD_AVX512;
#else
    return 0;
#endif
}

PLAIN const char *skv_roofline_impl(void) {
    return cpu_has_avx512() ? "avx512f" : cpu_has_avx2_fma() ? "avx2+fma" : "scalar";
}

/* ---- FMA peak ------------------------------------------------------------------------------
 * acc = acc * m + c on independent accumulators: enough chains in flight to cover the FMA
 * latency on both FMA pipes. With m just below 1 the values converge to c / (1 - m) and stay
 * normal (no denormal slow path). */

#define FMA_CHAINS 12

#if HAVE_AVX2_PATH
static float fma_loop_avx2(int64_t iters, float m_in, float c_in) {
    const __m256 m = _mm256_set1_ps(m_in), c = _mm256_set1_ps(c_in);
    __m256 a[FMA_CHAINS];
    for (int j = 0; j < FMA_CHAINS; j++) a[j] = _mm256_set1_ps(1.0f + 0.001f * (float)j);
    for (int64_t i = 0; i < iters; i++) {
        a[0] = _mm256_fmadd_ps(a[0], m, c);
        a[1] = _mm256_fmadd_ps(a[1], m, c);
        a[2] = _mm256_fmadd_ps(a[2], m, c);
        a[3] = _mm256_fmadd_ps(a[3], m, c);
        a[4] = _mm256_fmadd_ps(a[4], m, c);
        a[5] = _mm256_fmadd_ps(a[5], m, c);
        a[6] = _mm256_fmadd_ps(a[6], m, c);
        a[7] = _mm256_fmadd_ps(a[7], m, c);
        a[8] = _mm256_fmadd_ps(a[8], m, c);
        a[9] = _mm256_fmadd_ps(a[9], m, c);
        a[10] = _mm256_fmadd_ps(a[10], m, c);
        a[11] = _mm256_fmadd_ps(a[11], m, c);
    }
    __m256 s = a[0];
    for (int j = 1; j < FMA_CHAINS; j++) s = _mm256_add_ps(s, a[j]);
    float out[8];
    _mm256_storeu_ps(out, s);
    return out[0] + out[7];
}

/* The same 12 chains in 512-bit registers (this function alone may use AVX-512). */
__attribute__((target("avx512f"))) static float fma_loop_avx512(int64_t iters, float m_in,
                                                                float c_in) {
    const __m512 m = _mm512_set1_ps(m_in), c = _mm512_set1_ps(c_in);
    __m512 a[FMA_CHAINS];
    for (int j = 0; j < FMA_CHAINS; j++) a[j] = _mm512_set1_ps(1.0f + 0.001f * (float)j);
    for (int64_t i = 0; i < iters; i++) {
        a[0] = _mm512_fmadd_ps(a[0], m, c);
        a[1] = _mm512_fmadd_ps(a[1], m, c);
        a[2] = _mm512_fmadd_ps(a[2], m, c);
        a[3] = _mm512_fmadd_ps(a[3], m, c);
        a[4] = _mm512_fmadd_ps(a[4], m, c);
        a[5] = _mm512_fmadd_ps(a[5], m, c);
        a[6] = _mm512_fmadd_ps(a[6], m, c);
        a[7] = _mm512_fmadd_ps(a[7], m, c);
        a[8] = _mm512_fmadd_ps(a[8], m, c);
        a[9] = _mm512_fmadd_ps(a[9], m, c);
        a[10] = _mm512_fmadd_ps(a[10], m, c);
        a[11] = _mm512_fmadd_ps(a[11], m, c);
    }
    __m512 s = a[0];
    for (int j = 1; j < FMA_CHAINS; j++) s = _mm512_add_ps(s, a[j]);
    return _mm512_reduce_add_ps(s);
}
#endif

/* Scalar: a separate multiply and add (what the scalar kernels can do), 2 FLOPs per step. */
PLAIN static float fma_loop_scalar(int64_t iters, float m, float c) {
    float a[FMA_CHAINS];
    for (int j = 0; j < FMA_CHAINS; j++) a[j] = 1.0f + 0.001f * (float)j;
    for (int64_t i = 0; i < iters; i++)
        for (int j = 0; j < FMA_CHAINS; j++) a[j] = a[j] * m + c;
    float s = 0;
    for (int j = 0; j < FMA_CHAINS; j++) s += a[j];
    return s;
}

typedef struct fma_job {
    int64_t iters;
    float m, c;
    float *sink; /* [nth * SINK_STRIDE] */
} fma_job;

PLAIN static void fma_task(void *arg, int ith, int nth) {
    fma_job *j = arg;
    float r;
#if HAVE_AVX2_PATH
    if (cpu_has_avx512())
        r = fma_loop_avx512(j->iters, j->m, j->c);
    else if (cpu_has_avx2_fma())
        r = fma_loop_avx2(j->iters, j->m, j->c);
    else
#endif
        r = fma_loop_scalar(j->iters, j->m, j->c);
    j->sink[(size_t)ith * SINK_STRIDE] = r;
}

/* FLOPs one thread does per loop iteration. */
PLAIN static double fma_flops_per_iter(void) {
    return cpu_has_avx512()     ? FMA_CHAINS * 16.0 * 2.0
           : cpu_has_avx2_fma() ? FMA_CHAINS * 8.0 * 2.0
                                : FMA_CHAINS * 2.0;
}

PLAIN double skv_roofline_fma_gflops(skv_pool *pool, double run_ms) {
    int nth = pool ? skv_pool_size(pool) : 1;
    if (run_ms <= 0) run_ms = 50;
    float *sink = calloc((size_t)nth * SINK_STRIDE, sizeof *sink);
    if (!sink) return 0;
    volatile float vm = 0.9999999f, vc = 1e-7f; /* opaque to the compiler */
    fma_job job = {1 << 16, vm, vc, sink};
    /* Calibrate the iteration count on one thread so each timed run lasts about run_ms. */
    for (;;) {
        double t0 = skv_time_ms();
        fma_task(&job, 0, 1);
        double dt = skv_time_ms() - t0;
        if (dt > 5.0 || job.iters > ((int64_t)1 << 40)) {
            job.iters = (int64_t)((double)job.iters * run_ms / (dt > 0 ? dt : 1e-3)) + 1;
            break;
        }
        job.iters *= 4;
    }
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = skv_time_ms();
        skv_pool_run(pool, fma_task, &job);
        double dt = skv_time_ms() - t0;
        double gf = (double)job.iters * fma_flops_per_iter() * nth / (dt * 1e6);
        if (dt > 0 && gf > best) best = gf;
    }
    free(sink);
    return best;
}

/* ---- read bandwidth ------------------------------------------------------------------------ */

#define READ_BLOCK 256 /* bytes per loop step: 8 AVX2 loads */

#if HAVE_AVX2_PATH
/* S sequential streams at once (one per S-th of the range), S = 1 or 8. Which reads faster
 * depends on the machine: more streams keep more hardware prefetchers busy, but on the Zen 4
 * VMs measured here one stream per thread read up to 1.5x faster than eight (52 against 37
 * GB/s at best, two threads), so the figure is the better of the two. */
static uint64_t read_avx2(const char *p, size_t n, int streams) {
    enum { S = 8 };
    __m256i x[S];
    for (int k = 0; k < S; k++) x[k] = _mm256_setzero_si256();
    const int ns = streams > 1 ? S : 1;
    size_t q = n / ((size_t)ns * 64) * 64; /* bytes per stream, whole cache lines */
    if (ns == 1) {
        for (size_t i = 0; i + 256 <= q; i += 256)
            for (int k = 0; k < S; k++)
                x[k] = _mm256_xor_si256(
                    x[k], _mm256_load_si256((const __m256i *)(const void *)(p + i + 32 * k)));
    } else {
        for (size_t i = 0; i < q; i += 64) {
            for (int k = 0; k < S; k++) {
                const char *a = p + (size_t)k * q + i;
                x[k] = _mm256_xor_si256(x[k], _mm256_load_si256((const __m256i *)(const void *)a));
                x[k] = _mm256_xor_si256(x[k],
                                        _mm256_load_si256((const __m256i *)(const void *)(a + 32)));
            }
        }
    }
    const size_t done = ns == 1 ? q / 256 * 256 : (size_t)S * q;
    for (size_t i = done; i + 32 <= n; i += 32) /* the remainder, one stream */
        x[0] = _mm256_xor_si256(x[0], _mm256_load_si256((const __m256i *)(const void *)(p + i)));
    for (int k = 1; k < S; k++) x[0] = _mm256_xor_si256(x[0], x[k]);
    return (uint64_t)_mm256_extract_epi64(x[0], 0) ^ (uint64_t)_mm256_extract_epi64(x[0], 3);
}
#endif

PLAIN static uint64_t read_scalar(const char *p, size_t n) {
    uint64_t x[8] = {0};
    for (size_t i = 0; i + 64 <= n; i += 64) {
        uint64_t v[8];
        memcpy(v, p + i, sizeof v);
        for (int j = 0; j < 8; j++) x[j] ^= v[j];
    }
    return x[0] ^ x[1] ^ x[2] ^ x[3] ^ x[4] ^ x[5] ^ x[6] ^ x[7];
}

typedef struct read_job {
    const char *buf; /* 32-byte aligned */
    size_t bytes;    /* multiple of READ_BLOCK */
    int streams;     /* per thread: 1 or 8 */
    uint64_t *sink;  /* [nth * 8] */
} read_job;

PLAIN static void read_task(void *arg, int ith, int nth) {
    read_job *j = arg;
    size_t blocks = j->bytes / READ_BLOCK;
    size_t a = blocks * (size_t)ith / (size_t)nth, b = blocks * (size_t)(ith + 1) / (size_t)nth;
    const char *p = j->buf + a * READ_BLOCK;
    size_t n = (b - a) * READ_BLOCK;
    uint64_t r;
#if HAVE_AVX2_PATH
    if (cpu_has_avx2_fma())
        r = read_avx2(p, n, j->streams);
    else
#endif
        r = read_scalar(p, n);
    j->sink[(size_t)ith * 8] = r;
}

PLAIN void *skv_roofline_buffer(size_t bytes) {
    const size_t huge = (size_t)2 << 20, rounded = (bytes + huge - 1) / huge * huge;
    if (bytes == 0 || rounded < bytes) return NULL;
    char *p = aligned_alloc(huge, rounded);
    if (!p) return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, rounded, MADV_HUGEPAGE); /* advice only */
#endif
    memset(p, 0x5a, bytes); /* first writes before any timing */
    return p;
}

PLAIN double skv_roofline_read_gbs(skv_pool *pool, const void *buf, size_t bytes, int reps) {
    int nth = pool ? skv_pool_size(pool) : 1;
    if (!buf) return 0;
    /* Align the start to 32 bytes (aligned loads) and the length to whole blocks. */
    uintptr_t start = ((uintptr_t)buf + 31) & ~(uintptr_t)31;
    size_t skip = (size_t)(start - (uintptr_t)buf);
    if (bytes <= skip + READ_BLOCK) return 0;
    size_t n = (bytes - skip) / READ_BLOCK * READ_BLOCK;
    uint64_t *sink = calloc((size_t)nth * 8, sizeof *sink);
    if (!sink) return 0;
    read_job job = {(const char *)start, n, 8, sink};
    double best = 0;
    /* one stream and eight per thread by turns (the machine's speed moves from second to
     * second: alternating gives both the same chances) */
    for (int rep = 0; rep < 2 * (reps > 0 ? reps : 1); rep++) {
        job.streams = rep % 2 ? 1 : 8;
        double t0 = skv_time_ms();
        skv_pool_run(pool, read_task, &job);
        double dt = skv_time_ms() - t0;
        double gbs = (double)n / (dt * 1e6);
        if (dt > 0 && gbs > best) best = gbs;
    }
    free(sink);
    return best;
}
