/* attn_decode_bench.c — the decode attention (one token's g query heads over one kv head's n
 * entries) at each SIMD level the CPU has, on F32, F16 and Q8_0 entries, single thread. Reports
 * the K/V bytes read per second (decode attention streams the cache once per token) and the
 * speed-up of each level over the scalar loop. Times are per-thread CPU time, best of 7 runs.
 * A working set larger than the caches (the default: 8192 entries x 16 copies) measures the
 * memory-bound case; --copies 1 keeps it in L2 and measures the compute.
 *
 *   build: make lib && cc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc \
 *              bench/attn_decode_bench.c build/libsparsekv.a -lm -pthread -o attn_decode_bench
 *   usage: attn_decode_bench [--g G] [--hd HD] [--n N] [--copies C]
 *          (default: g 3, hd 64, n 8192, copies 16: SmolLM2-135M at depth 8192) */
#include "kernels/kernels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rng = 88172645463325252ull;
static float rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)(rng >> 40) / 8388608.0f - 1.0f;
}

typedef void (*attn_fn)(float *, float *, const float *, int, int, const void *, const void *,
                        skv_type, int, float);

static void attn_scalar(float *out, float *lse, const float *q, int g, int d, const void *k,
                        const void *v, skv_type t, int n, float scale) {
    skv_kernels_force_ref(true);
    skv_attn_group_lse(out, lse, q, g, d, k, v, t, n, scale);
    skv_kernels_force_ref(false);
}

/* Best seconds per call over the copies (each call reads one copy's K and V). */
static double time_fn(attn_fn f, float *out, const float *q, int g, int d, void **k, void **v,
                      skv_type t, int n, int copies) {
    float lse[64];
    double best = INFINITY;
    for (int r = 0; r < 7; r++) {
        double t0 = cpu_s();
        for (int c = 0; c < copies; c++) f(out, lse, q, g, d, k[c], v[c], t, n, 0.125f);
        best = fmin(best, (cpu_s() - t0) / copies);
    }
    return best;
}

int main(int argc, char **argv) {
    int g = 3, hd = 64, n = 8192, copies = 16;
    for (int i = 1; i + 1 < argc; i += 2) {
        int x = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "--g"))
            g = x;
        else if (!strcmp(argv[i], "--hd"))
            hd = x;
        else if (!strcmp(argv[i], "--n"))
            n = x;
        else if (!strcmp(argv[i], "--copies"))
            copies = x;
        else {
            fprintf(stderr, "unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (g < 1 || g > 64 || hd < 32 || hd % 32 || n < 1 || copies < 1 || copies > 256) {
        fprintf(stderr, "need 1 <= g <= 64, hd a multiple of 32, n >= 1, 1 <= copies <= 256\n");
        return 2;
    }
    skv_simd_id top = skv_simd_active_id();
    printf("decode attention, g %d, hd %d, n %d, %d copies, 1 thread, level %s\n", g, hd, n, copies,
           skv_simd_name(top));
    printf("| type | level | us/call | K+V GB/s | vs scalar |\n|---|---|---:|---:|---:|\n");
    float *q = malloc(sizeof(float) * (size_t)g * hd),
          *out = malloc(sizeof(float) * (size_t)g * hd);
    float *row = malloc(sizeof(float) * (size_t)hd);
    if (!q || !out || !row) return 1;
    for (int i = 0; i < g * hd; i++) q[i] = rnd();
    const skv_type types[] = {SKV_TYPE_F32, SKV_TYPE_F16, SKV_TYPE_Q8_0};
    for (int ti = 0; ti < 3; ti++) {
        skv_type t = types[ti];
        size_t rb = skv_row_bytes(t, hd), bytes = rb * (size_t)n;
        void *k[256], *v[256];
        for (int c = 0; c < copies; c++) {
            /* 64-byte aligned, as the cache's mmap'd rows are */
            size_t al = (bytes + 63) & ~(size_t)63;
            k[c] = aligned_alloc(64, al), v[c] = aligned_alloc(64, al);
            if (!k[c] || !v[c]) return 1;
            for (int j = 0; j < n; j++) {
                for (int e = 0; e < hd; e++) row[e] = rnd();
                skv_quantize_row(t, row, (char *)k[c] + (size_t)j * rb, hd);
                for (int e = 0; e < hd; e++) row[e] = rnd();
                skv_quantize_row(t, row, (char *)v[c] + (size_t)j * rb, hd);
            }
        }
        double ts = time_fn(attn_scalar, out, q, g, hd, k, v, t, n, copies);
        struct {
            const char *name;
            attn_fn f;
            bool on;
        } lv[] = {{"scalar", attn_scalar, true},
                  {"avx2", skv_attn_group_avx2, top >= SKV_SIMD_AVX2},
                  {"avx512", skv_attn_group_avx512, top >= SKV_SIMD_AVX512}};
        for (int l = 0; l < 3; l++) {
            if (!lv[l].on) continue;
            double s = l == 0 ? ts : time_fn(lv[l].f, out, q, g, hd, k, v, t, n, copies);
            printf("| %s | %s | %.1f | %.1f | %.2fx |\n", skv_type_name(t), lv[l].name, s * 1e6,
                   2.0 * (double)bytes / s / 1e9, ts / s);
        }
        for (int c = 0; c < copies; c++) free(k[c]), free(v[c]);
    }
    free(q), free(out), free(row);
    return 0;
}
