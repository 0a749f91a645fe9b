/* attn_prefill_bench.c — the blocked prefill attention (skv_attn_prefill) against one
 * skv_attn_group call per token, single thread, on F32 and F16 entries:
 *   causal: n tokens over n entries, n_vis[i] = i + 1
 *   tail:   64 tokens at the end of a long context, n_vis[i] = entries - 63 + i
 * Attention FLOPs are 4 * hd * g * sum(n_vis); the machine's FMA peak is given by --peak
 * (GFLOP/s per core, default 135). Times are per-thread CPU time, best of several runs.
 *
 *   build: make lib && cc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -Isrc \
 *              bench/attn_prefill_bench.c build/libsparsekv.a -lm -pthread -o attn_prefill_bench
 *   usage: attn_prefill_bench [--g G] [--hd HD] [--n N] [--ctx ENTRIES] [--peak GFLOPS]
 *          (default: g 3, hd 64, n 512, ctx 8192) */
#include "kernels/attn_prefill.h"

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

typedef struct setup {
    int n, g, hd, entries;
    skv_type t;
    float *q, *out, *out2;
    void *k, *v, *work;
    int *n_vis;
} setup;

static void run_group(const setup *s) {
    size_t row = (size_t)s->g * s->hd;
    for (int i = 0; i < s->n; i++)
        skv_attn_group(s->out2 + i * row, s->q + i * row, s->g, s->hd, s->k, s->v, s->t,
                       s->n_vis[i], 1.0f / sqrtf((float)s->hd));
}

static void run_prefill(const setup *s) {
    size_t row = (size_t)s->g * s->hd;
    if (!skv_attn_prefill(s->out, row, s->q, row, s->n, s->g, s->hd, s->k, s->v, s->t, s->n_vis,
                          1.0f / sqrtf((float)s->hd), s->work)) {
        fprintf(stderr, "attn_prefill_bench: type not supported\n");
        exit(1);
    }
}

/* Best CPU time of runs repeated for at least ~0.3 s (and at least 3 times). */
static double best_time(void (*fn)(const setup *), const setup *s) {
    double best = 1e30, total = 0.0;
    for (int r = 0; r < 3 || total < 0.3; r++) {
        double t0 = cpu_s();
        fn(s);
        double dt = cpu_s() - t0;
        total += dt;
        best = dt < best ? dt : best;
        if (r > 200) break;
    }
    return best;
}

static void bench(const char *name, int n, int entries, int g, int hd, skv_type t, double peak,
                  int causal) {
    setup s = {.n = n, .g = g, .hd = hd, .entries = entries, .t = t};
    size_t row = (size_t)g * hd, rb = skv_row_bytes(t, hd);
    s.q = malloc(sizeof(float) * row * n);
    s.out = malloc(sizeof(float) * row * n);
    s.out2 = malloc(sizeof(float) * row * n);
    s.k = malloc(rb * entries);
    s.v = malloc(rb * entries);
    s.n_vis = malloc(sizeof(int) * n);
    s.work = malloc(skv_attn_prefill_work_size(n, g, hd));
    if (!s.q || !s.out || !s.out2 || !s.k || !s.v || !s.n_vis || !s.work) {
        fprintf(stderr, "attn_prefill_bench: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < row * n; i++) s.q[i] = rnd();
    float *tmp = malloc(sizeof(float) * hd);
    for (int j = 0; j < entries; j++) {
        for (int c = 0; c < hd; c++) tmp[c] = rnd();
        skv_quantize_row(t, tmp, (uint8_t *)s.k + (size_t)j * rb, hd);
        for (int c = 0; c < hd; c++) tmp[c] = rnd();
        skv_quantize_row(t, tmp, (uint8_t *)s.v + (size_t)j * rb, hd);
    }
    free(tmp);
    double vis = 0.0;
    for (int i = 0; i < n; i++) {
        s.n_vis[i] = causal ? i + 1 : entries - n + 1 + i;
        vis += s.n_vis[i];
    }
    double flop = 4.0 * hd * g * vis;
    double tg = best_time(run_group, &s), tp = best_time(run_prefill, &s);
    double maxdiff = 0.0;
    for (size_t i = 0; i < row * n; i++) maxdiff = fmax(maxdiff, fabs(s.out[i] - s.out2[i]));
    printf("%-7s %-3s n=%-4d ctx=%-5d g=%d hd=%-3d | group %8.3f ms %6.1f GF/s %5.1f%% | "
           "prefill %8.3f ms %6.1f GF/s %5.1f%% | x%.2f | max diff %.1e\n",
           name, t == SKV_TYPE_F16 ? "f16" : "f32", n, entries, g, hd, tg * 1e3, flop / tg * 1e-9,
           100.0 * flop / tg * 1e-9 / peak, tp * 1e3, flop / tp * 1e-9,
           100.0 * flop / tp * 1e-9 / peak, tg / tp, maxdiff);
    free(s.q), free(s.out), free(s.out2), free(s.k), free(s.v), free(s.n_vis), free(s.work);
}

int main(int argc, char **argv) {
    int g = 3, hd = 64, n = 512, ctx = 8192;
    double peak = 135.0;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--g"))
            g = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--hd"))
            hd = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--n"))
            n = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--ctx"))
            ctx = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--peak"))
            peak = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: attn_prefill_bench [--g G] [--hd HD] [--n N] [--ctx ENTRIES] "
                            "[--peak GFLOPS]\n");
            return 2;
        }
    }
    if (g < 1 || hd < 8 || hd % 8 || n < 1 || ctx < 64) {
        fprintf(stderr, "attn_prefill_bench: need g >= 1, hd a multiple of 8, n >= 1, ctx >= 64\n");
        return 2;
    }
    printf("kernels: %s\n", skv_kernels_impl());
    for (int t = 0; t < 2; t++) {
        skv_type ty = t ? SKV_TYPE_F16 : SKV_TYPE_F32;
        bench("causal", n, n, g, hd, ty, peak, 1);
        bench("tail", 64, ctx, g, hd, ty, peak, 0);
    }
    return 0;
}
