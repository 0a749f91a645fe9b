/* decode_ab.c — how far ahead Q4_K, Q8_0, Q4_0, Q5_0, Q4_1 and Q5_1 decode should prefetch their
 * k16 records on this CPU, measured so that a noisy machine cannot decide it: one model, one
 * context, and the settings take turns token by token (a minute when the host is busier slows every
 * setting alike), medians over the tokens. A setting is a distance in bytes (the four prefetched
 * streams, skv_k16_ahead_cpu) or 0 (one stream on the hardware prefetcher, SKV_K16_PREFETCH=0).
 * Every setting computes the same bits; only the speed differs.
 *
 * Why tokens and not runs: on the Zen 1 VM whole `sparsekv bench` runs of one binary moved by
 * +-25% from minute to minute, more than the effects measured, and builds that differed only in
 * their code layout differed by 30% on this loop; here one binary is measured against itself.
 *
 *   build: make (it builds build/bench_decode_ab)
 *   usage: bench_decode_ab MODEL.gguf [--threads T] [--tokens N] [--depth D] [--ahead A,B,...]
 *          bench_decode_ab --help
 *          (default: 2 threads, 40 tokens per setting (at most 1000), depth 16, settings
 *          0,1024,2048,3072,4096 (at most 16, each 0..65536); a model with Q4_K or Q8_0 matrices,
 * e.g. `sparsekv synth-model --preset llama-3.2-1b --type q4_k -o m.gguf`) */
#include "kernels/kernels.h"
#include "sparsekv.h"
#include "bench_args.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_SETTINGS 16
#define MAX_TOKENS   1000

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int usage_to(FILE *f) {
    fprintf(f,
            "usage: bench_decode_ab MODEL.gguf [--threads T] [--tokens N] [--depth D] "
            "[--ahead A,B,...]\n"
            "  T 1..256 (2), N 1..%d tokens per setting (40), D 1..65536 (16), up to %d "
            "settings of 0..65536 bytes (0: one stream)\n",
            MAX_TOKENS, MAX_SETTINGS);
    return 2;
}

static int usage(void) {
    return usage_to(stderr);
}

int main(int argc, char **argv) {
    bool help = false;
    for (int i = 1; i < argc; i++) help |= !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h");
    if (argc < 2 || argv[1][0] == '-' || help) { /* --help, or options before the model */
        usage_to(help ? stdout : stderr);
        return help ? 0 : 2;
    }
    const char *path = argv[1];
    int threads = 2, tokens = 40, depth = 16, n_set = 0;
    int ahead[MAX_SETTINGS];
    for (int i = 2; i < argc; i++) {
        if (i + 1 >= argc) return usage();
        const char *v = argv[++i];
        if (!strcmp(argv[i - 1], "--threads")) {
            if (!bench_parse_int(v, 1, 256, &threads)) return usage();
        } else if (!strcmp(argv[i - 1], "--tokens")) {
            if (!bench_parse_int(v, 1, MAX_TOKENS, &tokens)) return usage();
        } else if (!strcmp(argv[i - 1], "--depth")) {
            if (!bench_parse_int(v, 1, 65536, &depth)) return usage();
        } else if (!strcmp(argv[i - 1], "--ahead")) {
            char item[16];
            for (n_set = 0; *v; n_set++) { /* "A,B,...": no empty item, no trailing comma */
                const size_t len = strcspn(v, ",");
                if (n_set == MAX_SETTINGS || len == 0 || len >= sizeof item) return usage();
                memcpy(item, v, len);
                item[len] = 0;
                if (!bench_parse_int(item, 0, 65536, &ahead[n_set])) return usage();
                v += len;
                if (*v == ',' && !*++v) return usage();
            }
            if (n_set == 0) return usage();
        } else {
            return usage();
        }
    }
    if (n_set == 0) {
        const int dflt[] = {0, 1024, 2048, 3072, 4096};
        memcpy(ahead, dflt, sizeof dflt);
        n_set = 5;
    }
    if (!skv_kernels_use_simd()) {
        fprintf(
            stderr,
            "decode_ab: no SIMD level in use: Q4_K, Q8_0, Q4_0, Q5_0, Q4_1 and Q5_1 records are "
            "unpacked, not read\n");
        return 1;
    }

    skv_err err;
    skv_model *model = skv_model_load(path, &err);
    if (!model) {
        fprintf(stderr, "decode_ab: %s\n", err.msg);
        return 1;
    }
    /* the settings change the Q4_K, Q8_0, Q4_0, Q5_0, Q4_1 and Q5_1 records' decode */
    const skv_type wt = skv_model_weight_type(model);
    if (wt != SKV_TYPE_Q4_K && wt != SKV_TYPE_Q8_0 && wt != SKV_TYPE_Q4_0)
        fprintf(stderr,
                "decode_ab: warning: %s is mostly %s: the settings change only its Q4_K, "
                "Q8_0 and Q4_0 matrices, if any\n",
                path, skv_type_name(wt));
    skv_context_params cp = skv_context_default_params();
    cp.n_threads = threads;
    cp.n_ctx = depth + n_set * tokens + 8;
    cp.kv_type = SKV_TYPE_F16;
    skv_context *ctx = skv_context_new(model, &cp, &err);
    if (!ctx) {
        fprintf(stderr, "decode_ab: %s\n", err.msg);
        skv_model_free(model);
        return 1;
    }
    const int32_t tok = 1;
    double(*ms)[MAX_TOKENS] = calloc(MAX_SETTINGS, sizeof *ms);
    float *logits = malloc(sizeof(float) * (size_t)skv_model_hparams(model)->n_vocab);
    int rc = ms && logits ? 0 : 1;
    for (int i = 0; i < depth && rc == 0; i++) /* context, and warm-up */
        rc = skv_forward(ctx, &tok, 1, SKV_LOGITS_LAST, logits, &err) != SKV_OK;
    const int cpu_ahead = skv_k16_ahead_cpu, cpu_on = skv_kernels_use_k16_prefetch();
    for (int t = 0; t < tokens && rc == 0; t++)
        for (int j = 0; j < n_set && rc == 0; j++) {
            const int k = (j + t) % n_set; /* each setting in each place of the turn alike */
            /* between tokens the pool's workers are idle: its next task publishes the value */
            skv_kernels_k16_prefetch(ahead[k] > 0);
            if (ahead[k] > 0) skv_k16_ahead_cpu = ahead[k];
            const double t0 = now_ms();
            rc = skv_forward(ctx, &tok, 1, SKV_LOGITS_LAST, logits, &err) != SKV_OK;
            ms[k][t] = now_ms() - t0;
        }
    skv_k16_ahead_cpu = cpu_ahead;
    skv_kernels_k16_prefetch(-1);
    if (rc == 0) {
        printf("decode_ab: %s, %d threads, simd %s, %d tokens per setting after %d; the default "
               "here: %s%d%s\n",
               path, threads, skv_simd_level(), tokens, depth, cpu_on ? "" : "one stream (",
               cpu_ahead, cpu_on ? " bytes ahead" : " bytes ahead when streams are asked for)");
        printf("%-14s %10s %10s %10s %8s\n", "setting", "median t/s", "q1", "q3", "vs first");
        double first = 0;
        for (int k = 0; k < n_set; k++) {
            qsort(ms[k], (size_t)tokens, sizeof(double), cmp_double);
            const double med = 1e3 / ms[k][tokens / 2];
            if (k == 0) first = med;
            char name[32];
            if (ahead[k] > 0)
                snprintf(name, sizeof name, "%d B ahead", ahead[k]);
            else
                snprintf(name, sizeof name, "one stream");
            printf("%-14s %10.2f %10.2f %10.2f %7.2fx\n", name, med, 1e3 / ms[k][3 * tokens / 4],
                   1e3 / ms[k][tokens / 4], med / first);
        }
    } else {
        fprintf(stderr, "decode_ab: %s\n", ms && logits ? err.msg : "out of memory");
    }
    free(logits);
    free(ms);
    skv_context_free(ctx);
    skv_model_free(model);
    return rc;
}
