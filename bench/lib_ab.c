/* lib_ab.c — two builds of libsparsekv.so against each other in one process: each loaded with
 * dlopen (two files: two copies of the code and of every global, such as the SIMD dispatch),
 * each with its own model and context (and so its own thread pool), taking turns prefill by
 * prefill (and decode by decode) on the same random tokens, A B, then B A, and so on. Medians
 * over the rounds, and the ratio B/A of each round's two runs. Every forward call computes the
 * last token's logits, as `sparsekv bench` and llama-bench do (the output layer included).
 *
 * Why: whole `sparsekv bench` runs of two binaries, minutes apart, swung 10-20% on these VMs
 * (Zen 5, session 32), more than the 2-5% a kernel change is worth; two builds taking turns
 * seconds apart see the same machine. Any change can be judged this way, without a knob in the
 * library: build the base in a worktree and compare.
 *
 *   git worktree add /tmp/base HEAD && make -C /tmp/base lib
 *   make && build/bench_lib_ab /tmp/base/build/libsparsekv.so build/libsparsekv.so MODEL.gguf
 *
 * The same file twice (or a copy of it) measures the noise floor: B/A should read 1.00x and
 * the logits be identical. Different builds print how far their logits differ (a kernel change
 * that reorders sums moves the last bits, a wrong one much more).
 *
 * Both builds must share this header's skv_context_params and skv_hparams (returned by value,
 * read): a base from before a change to either is not comparable (a different version number
 * is refused; within one version, that is on whoever picks the base). */
#include "sparsekv.h"
#include "bench_args.h"

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_ROUNDS 1000

typedef struct lib {
    const char *path;
    void *handle;
    __typeof__(skv_model_load) *model_load;
    __typeof__(skv_model_free) *model_free;
    __typeof__(skv_model_hparams) *model_hparams;
    __typeof__(skv_context_default_params) *context_default_params;
    __typeof__(skv_context_new) *context_new;
    __typeof__(skv_context_free) *context_free;
    __typeof__(skv_context_reset) *context_reset;
    __typeof__(skv_forward) *forward;
    __typeof__(skv_simd_level) *simd_level;
    __typeof__(skv_version_number) *version_number;
    skv_model *model;
    skv_context *ctx;
    float *logits;  /* [n_vocab]: the last prompt token's, from the warm-up */
    float *scratch; /* [n_vocab]: the timed calls' logits */
    double pp[MAX_ROUNDS], tg[MAX_ROUNDS]; /* t/s per round */
} lib;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int usage_to(FILE *f) {
    fprintf(f, "usage: bench_lib_ab LIB_A.so LIB_B.so MODEL.gguf [--threads T] [--prompt N]\n"
               "                    [--decode N] [--rounds R] [--kv-type f32|f16|q8_0] [--seed S]\n"
               "  T 1..256 (2); N prompt tokens 0..65536 (512; 0 = no prefill test); decode N\n"
               "  tokens 0..65536 after the prompt (0); R 1..1000 rounds after one warm-up (7);\n"
               "  KV cache type (f16, as llama-bench's); seed of the random tokens (1).\n"
               "  Each timed call computes the last token's logits. The two builds must share\n"
               "  this program's header (skv_context_params, skv_hparams).\n");
    return 2;
}

/* (skv_type_from_name is the library's, and this program links none) */
static const char *const kv_names[] = {"f32", "f16", "q8_0"};
static const skv_type kv_types[] = {SKV_TYPE_F32, SKV_TYPE_F16, SKV_TYPE_Q8_0};

static bool kv_type_parse(const char *s, skv_type *out) {
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, kv_names[i])) return *out = kv_types[i], true;
    return false;
}

static const char *kv_type_name(skv_type t) {
    for (int i = 0; i < 3; i++)
        if (kv_types[i] == t) return kv_names[i];
    return "?";
}

#define SYM(L, name)                                                                               \
    do {                                                                                           \
        (L)->name = (__typeof__((L)->name))dlsym((L)->handle, "skv_" #name);                       \
        if (!(L)->name) {                                                                          \
            fprintf(stderr, "lib_ab: %s has no skv_" #name "\n", (L)->path);                       \
            return false;                                                                          \
        }                                                                                          \
    } while (0)

static bool lib_open(lib *L) {
    /* RTLD_LOCAL: the second copy's symbols stay its own (its calls bind inside it) */
    L->handle = dlopen(L->path, RTLD_NOW | RTLD_LOCAL);
    if (!L->handle) {
        fprintf(stderr, "lib_ab: %s\n", dlerror());
        return false;
    }
    SYM(L, model_load);
    SYM(L, model_free);
    SYM(L, model_hparams);
    SYM(L, context_default_params);
    SYM(L, context_new);
    SYM(L, context_free);
    SYM(L, context_reset);
    SYM(L, forward);
    SYM(L, simd_level);
    SYM(L, version_number);
    if (L->version_number() != SKV_VERSION_NUMBER) {
        fprintf(stderr, "lib_ab: %s is version %d, this program's header %d\n", L->path,
                L->version_number(), SKV_VERSION_NUMBER);
        return false;
    }
    return true;
}

static bool lib_load(lib *L, const char *model, int threads, int n_ctx, skv_type kv) {
    skv_err err;
    L->model = L->model_load(model, &err);
    if (!L->model) {
        fprintf(stderr, "lib_ab: %s: %s\n", L->path, err.msg);
        return false;
    }
    skv_context_params cp = L->context_default_params();
    cp.n_threads = threads;
    cp.n_ctx = n_ctx;
    cp.kv_type = kv;
    L->ctx = L->context_new(L->model, &cp, &err);
    L->logits = malloc(sizeof(float) * (size_t)L->model_hparams(L->model)->n_vocab);
    L->scratch = malloc(sizeof(float) * (size_t)L->model_hparams(L->model)->n_vocab);
    if (!L->ctx || !L->logits || !L->scratch) {
        fprintf(stderr, "lib_ab: %s: %s\n", L->path, L->ctx ? "out of memory" : err.msg);
        return false;
    }
    return true;
}

/* One turn: the prompt from an empty cache, then n_tg tokens one at a time. round < 0: the
 * warm-up, whose prompt logits are kept for the comparison. */
static bool lib_turn(lib *L, const int32_t *tok, int n_pp, int n_tg, int round) {
    skv_err err;
    L->context_reset(L->ctx);
    const double t0 = now_s();
    if (n_pp > 0 && L->forward(L->ctx, tok, n_pp, SKV_LOGITS_LAST,
                               round < 0 ? L->logits : L->scratch, &err) != SKV_OK)
        goto fail;
    const double t1 = now_s();
    for (int i = 0; i < n_tg; i++)
        if (L->forward(L->ctx, tok + n_pp + i, 1, SKV_LOGITS_LAST, L->scratch, &err) != SKV_OK)
            goto fail;
    const double t2 = now_s();
    if (round >= 0) {
        L->pp[round] = n_pp / (t1 - t0);
        L->tg[round] = n_tg / (t2 - t1);
    }
    /* let this copy's pool stop spinning (1 ms at most) before the other one runs */
    nanosleep(&(struct timespec){0, 5000000}, NULL);
    return true;
fail:
    fprintf(stderr, "lib_ab: %s: %s\n", L->path, err.msg);
    return false;
}

/* The median of sorted v[n] (the mean of the two middle values when n is even). */
static double median(const double *v, int n) {
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void report(const char *test, const double *a, const double *b, int n) {
    double ra[MAX_ROUNDS], rb[MAX_ROUNDS], q[MAX_ROUNDS];
    for (int i = 0; i < n; i++) q[i] = b[i] / a[i];
    memcpy(ra, a, sizeof(double) * (size_t)n);
    memcpy(rb, b, sizeof(double) * (size_t)n);
    qsort(ra, (size_t)n, sizeof(double), cmp_double);
    qsort(rb, (size_t)n, sizeof(double), cmp_double);
    qsort(q, (size_t)n, sizeof(double), cmp_double);
    printf("| %s | %.2f (%.2f..%.2f) | %.2f (%.2f..%.2f) | %.3fx | %.3fx (%.3f..%.3f) |\n", test,
           median(ra, n), ra[0], ra[n - 1], median(rb, n), rb[0], rb[n - 1],
           median(rb, n) / median(ra, n), median(q, n), q[0], q[n - 1]);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) return usage_to(stdout), 0;
    if (argc < 4) return usage_to(stderr);
    int threads = 2, n_pp = 512, n_tg = 0, rounds = 7, seed = 1;
    skv_type kv = SKV_TYPE_F16;
    for (int i = 4; i < argc; i++) {
        if (i + 1 >= argc) {
            fprintf(stderr, "lib_ab: %s wants a value\n", argv[i]);
            return usage_to(stderr);
        }
        const char *o = argv[i], *v = argv[++i];
        bool ok;
        if (!strcmp(o, "--threads"))
            ok = bench_parse_int(v, 1, 256, &threads);
        else if (!strcmp(o, "--prompt"))
            ok = bench_parse_int(v, 0, 65536, &n_pp);
        else if (!strcmp(o, "--decode"))
            ok = bench_parse_int(v, 0, 65536, &n_tg);
        else if (!strcmp(o, "--rounds"))
            ok = bench_parse_int(v, 1, MAX_ROUNDS, &rounds);
        else if (!strcmp(o, "--seed"))
            ok = bench_parse_int(v, 0, 1 << 30, &seed);
        else if (!strcmp(o, "--kv-type"))
            ok = kv_type_parse(v, &kv);
        else
            ok = false;
        if (!ok) {
            fprintf(stderr, "lib_ab: bad option or value: %s %s\n", o, v);
            return usage_to(stderr);
        }
    }
    if (n_pp + n_tg == 0) {
        fprintf(stderr, "lib_ab: nothing to measure (--prompt 0 --decode 0)\n");
        return 2;
    }
    lib *L = calloc(2, sizeof *L);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)(n_pp + n_tg));
    int rc = 1;
    if (!L || !tok) {
        fprintf(stderr, "lib_ab: out of memory\n");
        goto done;
    }
    L[0].path = argv[1];
    L[1].path = argv[2];
    for (int s = 0; s < 2; s++)
        if (!lib_open(&L[s]) || !lib_load(&L[s], argv[3], threads, n_pp + n_tg + 8, kv)) goto done;
    const int n_vocab = L[0].model_hparams(L[0].model)->n_vocab;
    uint64_t r = 0x9e3779b97f4a7c15u * (uint64_t)(seed + 1);
    for (int i = 0; i < n_pp + n_tg; i++) { /* xorshift64: the same tokens for both */
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        tok[i] = (int32_t)(r % (uint64_t)n_vocab);
    }
    for (int s = 0; s < 2; s++) /* warm-up: page faults, repacking, the pools' first start */
        if (!lib_turn(&L[s], tok, n_pp, n_tg, -1)) goto done;
    for (int k = 0; k < rounds; k++)
        for (int j = 0; j < 2; j++) { /* A B, B A, ...: each first as often */
            const int s = (j + k) % 2;
            if (!lib_turn(&L[s], tok, n_pp, n_tg, k)) goto done;
        }
    printf("lib_ab: %s, %d threads, %s cache, %d rounds after a warm-up\n", argv[3], threads,
           kv_type_name(kv), rounds);
    printf("A: %s (simd %s)\nB: %s (simd %s)%s\n\n", L[0].path, L[0].simd_level(), L[1].path,
           L[1].simd_level(), L[0].handle == L[1].handle ? " - the same copy as A" : "");
    printf("| test | A t/s median (min..max) | B t/s | B/A of the medians | B/A per round "
           "median (min..max) |\n|---|---:|---:|---:|---:|\n");
    char name[32];
    if (n_pp > 0) {
        snprintf(name, sizeof name, "pp%d", n_pp);
        report(name, L[0].pp, L[1].pp, rounds);
    }
    if (n_tg > 0) {
        snprintf(name, sizeof name, "tg%d", n_tg);
        report(name, L[0].tg, L[1].tg, rounds);
    }
    if (n_pp > 0) {
        double dmax = 0, amax = 0;
        for (int i = 0; i < n_vocab; i++) {
            dmax = fmax(dmax, fabs((double)L[1].logits[i] - (double)L[0].logits[i]));
            amax = fmax(amax, fabs((double)L[0].logits[i]));
        }
        if (!memcmp(L[0].logits, L[1].logits, sizeof(float) * (size_t)n_vocab))
            printf("\nlogits of the last prompt token: identical\n");
        else
            printf("\nlogits of the last prompt token: max |B - A| = %.3g (max |A| %.3g)\n", dmax,
                   amax);
    }
    rc = 0;
done:
    for (int s = 0; L && s < 2; s++) {
        if (L[s].ctx) L[s].context_free(L[s].ctx);
        if (L[s].model) L[s].model_free(L[s].model);
        free(L[s].logits);
        free(L[s].scratch);
    }
    /* (the contexts' pools joined their threads in context_free) */
    for (int s = 0; L && s < 2; s++)
        if (L[s].handle && (s == 0 || L[1].handle != L[0].handle)) dlclose(L[s].handle);
    free(tok);
    free(L);
    return rc;
}
