/* mem_compress.c — does compression give memory back? Fills a long cache on a model, compresses
 * it, and compares the process's resident memory before and after with the KV bytes removed.
 *
 *   build/bench_mem_compress MODEL [-c 4096] [--keep 0.1] [--policy sink_recent] [-t 2]
 *
 * Prints one markdown table row group. Not a test: resident memory depends on the allocator and
 * the kernel; the figure of merit is (RSS drop) / (KV bytes removed). */
#include "sparsekv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static double rss_mib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
        fclose(f);
    }
    return (double)resident * (double)sysconf(_SC_PAGESIZE) / 1048576.0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL [-c N] [--keep F] [--policy P] [-t N]\n", argv[0]);
        return 2;
    }
    const char *path = argv[1], *policy = "sink_recent";
    int n_ctx = 4096, threads = 0;
    double keep = 0.1;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "-c"))
            n_ctx = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--keep"))
            keep = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--policy"))
            policy = argv[i + 1];
        else if (!strcmp(argv[i], "-t"))
            threads = atoi(argv[i + 1]);
    }
    skv_err err = {0};
    skv_model *m = skv_model_load(path, &err);
    if (!m) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    skv_context_params cp = skv_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = threads;
    cp.capture_window = 32; /* so attention policies can run on the engine protocol */
    skv_context *ctx = skv_context_new(m, &cp, &err);
    if (!ctx) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const skv_hparams *hp = skv_model_hparams(m);
    int32_t *toks = malloc((size_t)n_ctx * sizeof *toks);
    skv_rng rng;
    skv_rng_seed(&rng, 1);
    for (int i = 0; i < n_ctx; i++) toks[i] = 3 + (int32_t)skv_rng_below(&rng, hp->n_vocab - 3);
    double rss0 = rss_mib(), t0 = skv_time_ms();
    if (skv_forward(ctx, toks, n_ctx, SKV_LOGITS_NONE, NULL, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    double t1 = skv_time_ms(), rss1 = rss_mib();
    skv_compress_params p = skv_compress_default_params();
    p.policy = policy;
    p.keep_frac = keep;
    p.protocol = SKV_PROTOCOL_ENGINE;
    p.n_window = skv_policy_needs_window(policy) ? 32 : 0;
    skv_compress_info info;
    if (skv_compress(ctx, &p, &info, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    double rss2 = rss_mib();
    double removed = (double)(info.bytes_before - info.bytes_after) / 1048576.0;
    printf("| model | positions | policy | keep | KV before MiB | KV after MiB | KV removed MiB "
           "| RSS full MiB | RSS compressed MiB | RSS drop MiB | drop / removed |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|\n");
    printf("| %s | %d | %s | %.2f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f%% |\n\n", path,
           n_ctx, info.policy, keep, info.bytes_before / 1048576.0, info.bytes_after / 1048576.0,
           removed, rss1, rss2, rss1 - rss2, 100.0 * (rss1 - rss2) / removed);
    fprintf(stderr,
            "prefill %d tokens: %.0f ms (%.1f t/s); compress %.2f ms (%.3f%% of prefill); "
            "RSS before prefill %.1f MiB\n",
            n_ctx, t1 - t0, n_ctx * 1e3 / (t1 - t0), info.compress_ms,
            100.0 * info.compress_ms / (t1 - t0), rss0);
    skv_compress_info_free(&info);
    free(toks);
    skv_context_free(ctx);
    skv_model_free(m);
    return 0;
}
