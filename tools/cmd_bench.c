/* cmd_bench.c — `sparsekv bench`: prefill and decode speed in the spirit of llama-bench, set
 * against the machine's measured ceilings (FMA peak, read bandwidth), and decode on a compressed
 * cache against what the bytes predict. */
#include "cli.h"
#include "cli_args.h"
#include "cli_policy.h"

#include "kernels/roofline.h"
#include "threads.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CMD      "bench"
#define MAX_LIST 16

static void usage(FILE *f) {
    fprintf(f,
            "usage: sparsekv bench [-m MODEL] [-p N[,N...]] [-n N[,N...]] [-t T[,T...]]\n"
            "                      [-r REPS] [--depth D]\n"
            "                      [--policy P --keep F [--window W] [policy params]]\n"
            "                      [--kv-type f32|f16|q8_0] [--batch B] [--seed S]\n"
            "                      [--roofline] [--json]\n"
            "\n"
            "Measures, for each thread count T:\n"
            "  ppN    prefill of N random tokens in batches of B (default 512) after D tokens\n"
            "         of context: tokens/s and achieved GFLOP/s = (2 * (layer matrix params\n"
            "         * N + output matrix params: the last token's logits only) + attention\n"
            "         FLOPs over the entries in the cache) / time\n"
            "  tgN    decode of N tokens one at a time after D tokens of context: tokens/s\n"
            "         and achieved GB/s = (weight bytes + KV bytes read) per token / time\n"
            "         per token\n"
            "Each test runs REPS times (default 3) after one warm-up; t/s is the median with\n"
            "the min..max range. (A model small enough to stay in the CPU caches can read\n"
            "faster than the measured memory bandwidth, and a busy machine can measure a low\n"
            "ceiling: then %% of read BW may pass 100%%. --roofline measures the widest SIMD\n"
            "the CPU has, also under SKV_SIMD=avx2: the %% are of the machine's ceiling. The\n"
            "FMA peak is that of float math; quantized weights multiply in 8-bit integers,\n"
            "up to 4x as many products per instruction with AVX-512 VNNI, so their %% of FMA\n"
            "peak may pass 100%%.)\n"
            "\n"
            "  -m MODEL       GGUF model (default %s)\n"
            "  -p LIST        prompt lengths (default 512; 0 = no prefill test)\n"
            "  -n LIST        decode lengths (default 128; 0 = no decode test); the longest\n"
            "                 test (--depth + the largest -p or -n) must fit the model's\n"
            "                 context\n"
            "  -t LIST        thread counts (default: all %d cores)\n"
            "  -r REPS        repetitions (default 3)\n"
            "  --depth D      prefill D tokens first (once, cold: its time is reported) and\n"
            "                 run the pp and tg tests on copies of that context (ppN@dD,\n"
            "                 tgN@dD), as llama-bench -d does; each copy decodes one untimed\n"
            "                 token first (it grows the copy's cache: the timed tokens start\n"
            "                 from a warm one, at position D + 1)\n"
            "  --policy P     with --depth: also compress the D-token cache with policy P\n"
            "                 (engine protocol: the last W prompt positions are the window\n"
            "                 and are kept, as many as keep allows) and run the tests on it\n"
            "                 too; reports the compression time as %% of the prefill time and\n"
            "                 the measured decode speedup next to the one the bytes predict:\n"
            "                 (weights + dense KV) / (weights + kept KV), for decode bound by\n"
            "                 memory bandwidth; the measured one is usually above it, as the\n"
            "                 attention reads the cache slower than the matrices read their\n"
            "                 weights (with\n"
            "                 -n 0: the compression alone, its decode figures null in\n"
            "                 --json, - in the table). With h2o the depth prefill also\n"
            "                 sums its attention (h2o's scores): in its time\n"
            "  --keep F       fraction of the cache kept (default 0.1)\n"
            "  --window W     observation window W (default 32)\n"
            "  --sinks N --pool max|avg --kernel N --window-keep N\n"
            "  --positions original|rerotate\n"
            "                 the policy's parameters, as in compress (`sparsekv compress\n"
            "                 --help`; refused for a policy that does not read them); the\n"
            "                 compress record of --json gives those it reads\n"
            "  --kv-type T    cache type (default f32)\n"
            "  --batch B      prefill batch size (default 512)\n"
            "  --roofline     measure the machine's FMA peak and read bandwidth at each\n"
            "                 thread count first and print the %% of each the tests reach\n"
            "                 (with -p 0 -n 0: only the ceilings, no model loaded)\n"
            "  --json         one JSON object per result line instead of tables\n"
            "  --seed S       seed of the random tokens and of the random policy (default 1)\n",
            SKV_DEFAULT_MODEL, skv_n_cores());
}

/* ---- small helpers ------------------------------------------------------------------------- */

static int parse_list(const char *s, long lo, long hi, long *out) {
    int n = 0;
    const char *p = s;
    while (*p) {
        if (n == MAX_LIST) return -1;
        char buf[32];
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof buf) return -1;
        memcpy(buf, p, len);
        buf[len] = 0;
        if (!cli_parse_int(buf, lo, hi, &out[n])) return -1;
        n++;
        p += len;
        if (*p == ',' && !*++p) return -1; /* "1," names an empty item */
    }
    return n;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct stats {
    double median, min, max, mad;
} stats;

static stats stats_of(const double *v, int n) {
    stats s = {0, 0, 0, 0};
    if (n <= 0) return s;
    double *t = malloc((size_t)n * sizeof *t);
    if (!t) return s;
    memcpy(t, v, (size_t)n * sizeof *t);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    s.min = t[0];
    s.max = t[n - 1];
    s.median = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    for (int i = 0; i < n; i++) t[i] = fabs(t[i] - s.median);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    s.mad = n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
    free(t);
    return s;
}

static const char *base_name(const char *path) {
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

/* b in the unit that shows it (a small model's compressed cache is a few KiB: "0.0 MiB" said
 * nothing). */
static void fmt_bytes(char *buf, size_t n, uint64_t b) {
    if (b >= (1ull << 30))
        snprintf(buf, n, "%.2f GiB", (double)b / (double)(1ull << 30));
    else if (b >= (1ull << 20))
        snprintf(buf, n, "%.1f MiB", (double)b / (double)(1ull << 20));
    else if (b >= 1024)
        snprintf(buf, n, "%.1f KiB", (double)b / 1024.0);
    else
        snprintf(buf, n, "%llu B", (unsigned long long)b);
}

/* ---- the model's arithmetic ------------------------------------------------------------- */

typedef struct model_facts {
    const char *name;
    const char *type;
    uint64_t weight_bytes;
    uint64_t params;
    double layer_matmul_params; /* per layer */
    double out_params;
    int n_layer, n_head, head_dim, n_vocab, n_ctx_train;
} model_facts;

static model_facts facts_of(const skv_model *m, const char *path) {
    const skv_hparams *hp = skv_model_hparams(m);
    model_facts f;
    double e = hp->n_embd, q = (double)hp->n_head * hp->head_dim,
           kv = (double)hp->n_head_kv * hp->head_dim, ff = hp->n_ff;
    f.name = base_name(path);
    f.type = skv_type_name(skv_model_weight_type(m));
    if (!f.type) f.type = "?";
    f.weight_bytes = skv_model_weight_bytes(m);
    f.layer_matmul_params = e * q + 2 * e * kv + q * e + 3 * e * ff;
    f.out_params = (double)hp->n_vocab * e;
    f.params = (uint64_t)(hp->n_layer * (f.layer_matmul_params + 2 * e) + e +
                          f.out_params * (hp->tied_output ? 1 : 2));
    f.n_layer = hp->n_layer;
    f.n_head = hp->n_head;
    f.head_dim = hp->head_dim;
    f.n_vocab = hp->n_vocab;
    f.n_ctx_train = hp->n_ctx_train;
    return f;
}

/* FLOPs of a prefill of n tokens after p0 cache entries (the first sees p0 + 1 keys) with logits
 * of the last one:
 * 2 per weight per token for the layer matrices, the output matrix once, and causal attention
 * (q.k and the weighted sum of v: 4 * head_dim per query head per visible key). */
static double prefill_flops(const model_facts *f, int p0, int n) {
    double keys = (double)n * p0 + (double)n * (n + 1) / 2; /* sum of (i + 1) */
    return 2.0 * n * f->n_layer * f->layer_matmul_params + 2.0 * f->out_params +
           4.0 * f->head_dim * f->n_head * f->n_layer * keys;
}

/* ---- options and results ------------------------------------------------------------------ */

typedef struct opts {
    const char *model;
    long pp[MAX_LIST], tg[MAX_LIST], th[MAX_LIST];
    int n_pp, n_tg, n_th;
    int reps;
    int depth;
    const char *policy;
    double keep;
    int window;
    skv_compress_params pp_params; /* --sinks --pool --kernel --window-keep --positions, and
                                      --seed for the random policy (cli_policy_take) */
    skv_type kv_type;
    int batch;
    bool roofline;
    bool json;
    uint64_t seed;
} opts;

typedef struct peaks {
    double fma, bw; /* 0 when not measured */
} peaks;

static void pct(char *buf, size_t n, double v, double peak) {
    if (peak > 0)
        snprintf(buf, n, "%.1f%%", 100.0 * v / peak);
    else
        snprintf(buf, n, "-");
}

static void print_header(const opts *o) {
    if (o->json) return;
    printf("SIMD level: %s (CPU: %s)%s\n", skv_simd_level(), skv_simd_cpu_level(),
           skv_simd_amx() ? "; F16/BF16 prefill on AMX tiles, which the FMA peak does not bound"
                          : "");
    printf("KV cache: %s (--kv-type); prefill in batches of %d tokens (--batch)\n\n",
           skv_type_name(o->kv_type), o->batch);
    printf("| model | type | size | params | threads | test | t/s | min..max | GFLOP/s | %% FMA "
           "peak | GB/s | %% read BW |\n");
    printf("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|\n");
}

/* One result row: either a prefill (flops > 0) or a decode (bytes > 0) result. flops and bytes
 * are per repetition; secs the per-repetition times. */
static void print_row(const opts *o, const model_facts *f, int threads, const char *test,
                      const double *secs, int n, int tokens, double flops, double bytes,
                      const peaks *pk) {
    double tps[64];
    for (int i = 0; i < n; i++) tps[i] = tokens / secs[i];
    stats s = stats_of(tps, n);
    stats ts = stats_of(secs, n);
    double gflops = flops > 0 ? flops / ts.median / 1e9 : 0;
    double gbs = bytes > 0 ? bytes / ts.median / 1e9 : 0;
    if (o->json) {
        printf("{\"record\":\"test\",\"simd\":\"%s\",\"amx\":%s,\"k16_prefetch\":%s,"
               "\"k16_ahead\":%d,\"model\":",
               skv_simd_level(), skv_simd_amx() ? "true" : "false",
               skv_simd_k16_prefetch() ? "true" : "false", skv_simd_k16_ahead());
        cli_json_string(stdout, f->name, strlen(f->name));
        printf(",\"type\":\"%s\",\"kv_type\":\"%s\",\"batch\":%d,\"weight_bytes\":%llu,"
               "\"params\":%llu,\"threads\":%d,\"test\":\"%s\",\"tokens\":%d,\"reps\":%d,"
               "\"tps_median\":%.4f,\"tps_min\":%.4f,\"tps_max\":%.4f,\"tps_mad\":%.4f",
               f->type, skv_type_name(o->kv_type), o->batch, (unsigned long long)f->weight_bytes,
               (unsigned long long)f->params, threads, test, tokens, n, s.median, s.min, s.max,
               s.mad);
        if (flops > 0) {
            printf(",\"gflops\":%.3f", gflops);
            if (pk->fma > 0)
                printf(",\"fma_peak\":%.3f,\"pct_fma\":%.2f", pk->fma, 100 * gflops / pk->fma);
        }
        if (bytes > 0) {
            printf(",\"gbs\":%.3f,\"bytes_per_token\":%.0f", gbs, bytes / tokens);
            if (pk->bw > 0) printf(",\"bw_peak\":%.3f,\"pct_bw\":%.2f", pk->bw, 100 * gbs / pk->bw);
        }
        printf("}\n");
    } else {
        char size[32], gf[32] = "-", pf[32] = "-", gb[32] = "-", pb[32] = "-";
        fmt_bytes(size, sizeof size, f->weight_bytes);
        if (flops > 0) {
            snprintf(gf, sizeof gf, "%.1f", gflops);
            pct(pf, sizeof pf, gflops, pk->fma);
        }
        if (bytes > 0) {
            snprintf(gb, sizeof gb, "%.2f", gbs);
            pct(pb, sizeof pb, gbs, pk->bw);
        }
        printf("| %s | %s | %s | %.1f M | %d | %s | %.2f | %.2f..%.2f | %s | %s | %s | %s |\n",
               f->name, f->type, size, (double)f->params / 1e6, threads, test, s.median, s.min,
               s.max, gf, pf, gb, pb);
    }
    fflush(stdout);
}

/* ---- the measurements ---------------------------------------------------------------------- */

typedef struct bench {
    const opts *o;
    const skv_model *model;
    model_facts f;
    int32_t *tokens; /* [n_tokens] random ids */
    int n_tokens;
    float *logits; /* [n_vocab] */
    FILE *notes;   /* compression table, printed after the main table */
    char *notes_buf;
    size_t notes_len;
    int n_notes;
} bench;

/* Feeds tokens[from .. from+n) in batches; logits of the last only. */
static bool prefill(bench *b, skv_context *ctx, int from, int n) {
    skv_err err = {0};
    for (int i = 0; i < n;) {
        int k = SKV_MIN(b->o->batch, n - i);
        /* with a policy, keep the last batch at least a window long so that it captures the
         * window's queries (the engine protocol's) */
        if (b->o->policy && n - i - k > 0 && n - i - k < b->o->window) k = n - i - b->o->window;
        if (k <= 0) k = n - i;
        bool last = i + k == n;
        if (skv_forward(ctx, b->tokens + from + i, k, last ? SKV_LOGITS_LAST : SKV_LOGITS_NONE,
                        last ? b->logits : NULL, &err) != SKV_OK) {
            cli_error(CMD, "%s", err.msg);
            return false;
        }
        i += k;
    }
    return true;
}

/* Decodes n tokens one by one; *kv_bytes receives the KV bytes the steps read in total (each
 * step reads the whole cache including its own entry). */
static bool decode(bench *b, skv_context *ctx, int from, int n, double *kv_bytes) {
    skv_err err = {0};
    double kv = 0;
    for (int i = 0; i < n; i++) {
        if (skv_forward(ctx, b->tokens + from + i, 1, SKV_LOGITS_LAST, b->logits, &err) != SKV_OK) {
            cli_error(CMD, "%s", err.msg);
            return false;
        }
        kv += (double)skv_cache_bytes(skv_context_cache_const(ctx), -1);
    }
    if (kv_bytes) *kv_bytes = kv;
    return true;
}

static skv_context *new_context(bench *b, int threads, int n_ctx, int capture) {
    skv_err err = {0};
    skv_context_params cp = skv_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_threads = threads;
    cp.kv_type = b->o->kv_type;
    cp.capture_window = capture;
    skv_context *ctx = skv_context_new(b->model, &cp, &err);
    if (!ctx) cli_error(CMD, "%s", err.msg);
    return ctx;
}

/* A copy of the depth context made ready for a timed run of n tokens: room for them (and one
 * more) in every head, and one untimed decode token at position D, so that the run starts from
 * a warm cache as the tests without --depth do (their warm-up run). A copy holds exactly its
 * entries: its first token grows every head, and on this project's VMs the first read of the
 * moved pages then cost more than the token itself (smollm2 f16 at depth 4096: ~120 ms against
 * ~12 ms; that pause inflated the dense side of the compressed-decode speedup, most at small
 * -n). The timed tokens start at D + 1. */
static bool ready_clone(bench *b, skv_context *c, int D, int n) {
    skv_err err = {0};
    if (skv_context_reserve(c, n + 1, &err) != SKV_OK) {
        cli_error(CMD, "%s", err.msg);
        return false;
    }
    return decode(b, c, D, 1, NULL);
}

static bool run_pp(bench *b, skv_context *ctx, int threads, int n, const peaks *pk) {
    double secs[64];
    int reps = b->o->reps;
    for (int r = -1; r < reps; r++) { /* r = -1: warm-up */
        skv_context_reset(ctx);
        double t0 = skv_time_ms();
        if (!prefill(b, ctx, 0, n)) return false;
        if (r >= 0) secs[r] = (skv_time_ms() - t0) / 1e3;
    }
    char test[32];
    snprintf(test, sizeof test, "pp%d", n);
    print_row(b->o, &b->f, threads, test, secs, reps, n, prefill_flops(&b->f, 0, n), 0, pk);
    return true;
}

static bool run_tg(bench *b, skv_context *ctx, int threads, int n, const peaks *pk) {
    double secs[64], kv = 0;
    int reps = b->o->reps;
    for (int r = -1; r < reps; r++) {
        skv_context_reset(ctx);
        double t0 = skv_time_ms();
        if (!decode(b, ctx, 0, n, &kv)) return false;
        if (r >= 0) secs[r] = (skv_time_ms() - t0) / 1e3;
    }
    char test[32];
    snprintf(test, sizeof test, "tg%d", n);
    print_row(b->o, &b->f, threads, test, secs, reps, n, 0, (double)b->f.weight_bytes * n + kv, pk);
    return true;
}

/* A clone of the depth context, compressed by --policy when compress is set (*info filled,
 * its ms in *compress_ms). The master's attention sums (h2o's) stop in the clone once they have
 * served (or at once for a dense clone): the tests time the forward pass without them. NULL
 * (reported) on failure. */
static skv_context *depth_clone(bench *b, const skv_context *master, bool compress,
                                skv_compress_info *info, double *compress_ms) {
    skv_err err = {0};
    skv_context *c = skv_context_clone(master, &err);
    if (!c) {
        cli_error(CMD, "%s", err.msg);
        return NULL;
    }
    if (!compress) {
        skv_context_accumulate_attention(c, false, NULL);
        return c;
    }
    skv_compress_params cp = b->o->pp_params;
    cp.seed = b->o->seed;
    cp.policy = b->o->policy;
    cp.keep_frac = b->o->keep;
    cp.protocol = SKV_PROTOCOL_ENGINE;
    cp.n_window = b->o->window;
    memset(info, 0, sizeof *info);
    double t1 = skv_time_ms();
    skv_status st = skv_compress(c, &cp, info, &err);
    *compress_ms = skv_time_ms() - t1;
    if (st != SKV_OK) {
        cli_error(CMD, "%s", err.msg);
        skv_context_free(c);
        return NULL;
    }
    skv_context_accumulate_attention(c, false, NULL);
    return c;
}

/* Prefill of n tokens after the D of the depth context, on clones of it (dense, and with
 * --policy compressed first): ppN@dD, as llama-bench's -d measures it. */
static bool run_pp_depth(bench *b, const skv_context *master, int threads, int n, bool compress,
                         const peaks *pk) {
    const opts *o = b->o;
    const int D = o->depth;
    double secs[64];
    int keys = D; /* cache entries each query meets before the new tokens (mean over heads) */
    for (int r = -1; r < o->reps; r++) {
        skv_compress_info info;
        double cms = 0;
        skv_context *c = depth_clone(b, master, compress, &info, &cms);
        if (!c) return false;
        if (compress) {
            double sum = 0;
            for (int i = 0; i < info.n_layer * info.n_head_kv; i++) sum += info.kept[i];
            keys = (int)lround(sum / (info.n_layer * info.n_head_kv));
            skv_compress_info_free(&info);
        }
        if (!ready_clone(b, c, D, n)) {
            skv_context_free(c);
            return false;
        }
        double t1 = skv_time_ms();
        bool ok = prefill(b, c, D + 1, n);
        if (r >= 0) secs[r] = (skv_time_ms() - t1) / 1e3;
        skv_context_free(c);
        if (!ok) return false;
    }
    char test[64];
    if (compress) {
        const char *canon = skv_policy_canonical(o->policy);
        snprintf(test, sizeof test, "pp%d@d%d+%s%.3g", n, D, canon ? canon : o->policy, o->keep);
    } else {
        snprintf(test, sizeof test, "pp%d@d%d", n, D);
    }
    print_row(o, &b->f, threads, test, secs, o->reps, n, prefill_flops(&b->f, keys, n), 0, pk);
    return true;
}

/* What one compression of the depth cache gave (the same every repetition). */
typedef struct compress_run {
    uint64_t bytes_before, bytes_after;
    int keep; /* entries kept per head */
} compress_run;

/* The compression record of --policy: its cost (comp_ms over the repetitions, against the depth
 * prefill) and, when a decode test of n tokens ran (n > 0), the decode speedup it bought next
 * to the one the bytes read per token predict (kv_d, kv_c: KV bytes read, dense / compressed). */
static void report_compress(bench *b, int threads, double prefill_ms, const double *comp_ms,
                            const compress_run *cr, int n, double tps_d, double tps_c, double kv_d,
                            double kv_c) {
    const opts *o = b->o;
    const int D = o->depth;
    const char *canon = skv_policy_canonical(o->policy), *pol = canon ? canon : o->policy;
    const stats cm = stats_of(comp_ms, o->reps);
    const double wb = (double)b->f.weight_bytes * n, pct_prefill = 100.0 * cm.median / prefill_ms;
    const double speedup = n > 0 ? tps_c / tps_d : 0,
                 predicted = n > 0 ? (wb + kv_d) / (wb + kv_c) : 0;
    if (o->json) {
        printf("{\"record\":\"compress\",\"simd\":\"%s\",\"model\":", skv_simd_level());
        cli_json_string(stdout, b->f.name, strlen(b->f.name));
        printf(",\"type\":\"%s\",\"kv_type\":\"%s\",\"threads\":%d,\"depth\":%d,\"policy\":\"%s\","
               "\"keep\":%.4f,"
               "\"window\":%d,\"keep_tokens\":%d,\"kv_bytes_before\":%llu,"
               "\"kv_bytes_after\":%llu,\"prefill_ms\":%.6f,\"compress_ms\":%.6f,"
               "\"compress_ms_min\":%.6f,\"compress_ms_max\":%.6f,\"pct_prefill\":%.6f",
               b->f.type, skv_type_name(o->kv_type), threads, D, pol, o->keep, o->window, cr->keep,
               (unsigned long long)cr->bytes_before, (unsigned long long)cr->bytes_after,
               prefill_ms, cm.median, cm.min, cm.max, pct_prefill);
        /* the parameters the policy reads, and the positions mode */
        const skv_compress_params *pp = &o->pp_params;
        if (cli_policy_reads(pol, "sinks")) printf(",\"sinks\":%d", pp->sinks);
        if (cli_policy_reads(pol, "pooling"))
            printf(",\"pooling\":\"%s\"", cli_pooling_name(pp->pooling));
        if (cli_policy_reads(pol, "kernel")) printf(",\"kernel\":%d", pp->kernel);
        if (cli_policy_reads(pol, "window_keep")) printf(",\"window_keep\":%d", pp->window_keep);
        if (cli_policy_reads(pol, "seed")) printf(",\"seed\":%llu", (unsigned long long)o->seed);
        printf(",\"positions\":\"%s\"", cli_positions_name(pp->positions));
        if (n > 0)
            printf(",\"tg\":%d,\"tps_dense\":%.4f,\"tps_compressed\":%.4f,\"speedup\":%.4f,"
                   "\"speedup_predicted\":%.4f,\"pct_predicted\":%.2f",
                   n, tps_d, tps_c, speedup, predicted, 100.0 * speedup / predicted);
        else
            printf(",\"tg\":0,\"tps_dense\":null,\"tps_compressed\":null,\"speedup\":null,"
                   "\"speedup_predicted\":null,\"pct_predicted\":null");
        printf("}\n");
    } else if (b->notes) {
        char kb[32], ka[32];
        fmt_bytes(kb, sizeof kb, cr->bytes_before);
        fmt_bytes(ka, sizeof ka, cr->bytes_after);
        if (!b->n_notes++)
            fprintf(b->notes,
                    "| model | weights | threads | depth | policy | keep | kept/head | KV "
                    "before -> after | prefill s | compress ms | %% of prefill | test | "
                    "dense t/s | compressed t/s | speedup | predicted | %% of predicted "
                    "|\n|---|---|---:|---:|---|---:|---:|---|---:|---:|---:|---|---:|---:|---:"
                    "|---:|---:|\n");
        fprintf(b->notes,
                "| %s | %s | %d | %d | %s | %.3g | %d | %s -> %s | %.3g | %.3g (%.3g..%.3g) "
                "| %.2f%% ",
                b->f.name, b->f.type, threads, D, pol, o->keep, cr->keep, kb, ka, prefill_ms / 1e3,
                cm.median, cm.min, cm.max, pct_prefill);
        if (n > 0)
            fprintf(b->notes, "| tg%d | %.2f | %.2f | %.2fx | %.2fx | %.0f%% |\n", n, tps_d, tps_c,
                    speedup, predicted, 100.0 * speedup / predicted);
        else
            fprintf(b->notes, "| - | - | - | - | - | - |\n");
    }
    fflush(stdout);
}

/* Prefill and decode on clones of a prefilled context (dense), and with --policy on clones
 * compressed first. */
static bool run_depth(bench *b, int threads, const peaks *pk) {
    const opts *o = b->o;
    int D = o->depth;
    int max_tg = 0;
    for (int i = 0; i < o->n_tg; i++) max_tg = SKV_MAX(max_tg, (int)o->tg[i]);
    for (int i = 0; i < o->n_pp; i++) max_tg = SKV_MAX(max_tg, (int)o->pp[i]);
    bool window = o->policy && skv_policy_needs_window(o->policy);
    skv_context *master = new_context(b, threads, D + max_tg + 1, window ? o->window : 0);
    if (!master) return false;
    if (o->policy && cli_policy_needs_prefill_attention(o->policy)) {
        /* h2o: the depth prefill sums its attention (its time is in the prefill row) */
        skv_err err = {0};
        if (skv_context_accumulate_attention(master, true, &err) != SKV_OK) {
            cli_error(CMD, "%s", err.msg);
            skv_context_free(master);
            return false;
        }
    }
    double t0 = skv_time_ms();
    bool ok = prefill(b, master, 0, D);
    double prefill_ms = skv_time_ms() - t0;
    if (!ok) goto fail;
    {
        char test[48];
        if (o->json)
            snprintf(test, sizeof test, "prefill@d%d", D);
        else
            snprintf(test, sizeof test, "prefill@d%d (1 run)", D);
        double secs = prefill_ms / 1e3;
        print_row(o, &b->f, threads, test, &secs, 1, D, prefill_flops(&b->f, 0, D), 0, pk);
    }
    for (int pi = 0; pi < o->n_pp; pi++) {
        int n = (int)o->pp[pi];
        if (n <= 0) continue;
        if (!run_pp_depth(b, master, threads, n, false, pk)) goto fail;
        if (o->policy && !run_pp_depth(b, master, threads, n, true, pk)) goto fail;
    }
    bool any_tg = false;
    for (int ti = 0; ti < o->n_tg; ti++) any_tg |= o->tg[ti] > 0;
    if (o->policy && !any_tg) { /* no decode test to pair it with: the compression alone */
        double comp_ms[64];
        compress_run cr = {0, 0, 0};
        for (int r = -1; r < o->reps; r++) {
            skv_compress_info info;
            double cms = 0;
            skv_context *c = depth_clone(b, master, true, &info, &cms);
            if (!c) goto fail;
            cr = (compress_run){info.bytes_before, info.bytes_after, info.keep};
            skv_compress_info_free(&info);
            skv_context_free(c);
            if (r >= 0) comp_ms[r] = cms;
        }
        report_compress(b, threads, prefill_ms, comp_ms, &cr, 0, 0, 0, 0, 0);
    }
    for (int ti = 0; ti < o->n_tg; ti++) {
        int n = (int)o->tg[ti];
        if (n <= 0) continue;
        double secs_d[64], secs_c[64], comp_ms[64], kv_d = 0, kv_c = 0;
        uint64_t bytes_before = 0, bytes_after = 0;
        int kept_keep = 0;
        for (int r = -1; r < o->reps; r++) {
            skv_context *c = depth_clone(b, master, false, NULL, NULL);
            if (!c) goto fail;
            if (!ready_clone(b, c, D, n)) {
                skv_context_free(c);
                goto fail;
            }
            double t1 = skv_time_ms();
            ok = decode(b, c, D + 1, n, &kv_d);
            if (r >= 0) secs_d[r] = (skv_time_ms() - t1) / 1e3;
            skv_context_free(c);
            if (!ok) goto fail;
        }
        char test[64];
        snprintf(test, sizeof test, "tg%d@d%d", n, D);
        print_row(o, &b->f, threads, test, secs_d, o->reps, n, 0,
                  (double)b->f.weight_bytes * n + kv_d, pk);
        if (!o->policy) continue;
        for (int r = -1; r < o->reps; r++) {
            skv_compress_info info;
            double cms = 0;
            skv_context *c = depth_clone(b, master, true, &info, &cms);
            if (!c) goto fail;
            bytes_before = info.bytes_before;
            bytes_after = info.bytes_after;
            kept_keep = info.keep;
            skv_compress_info_free(&info);
            if (!ready_clone(b, c, D, n)) {
                skv_context_free(c);
                goto fail;
            }
            double t1 = skv_time_ms();
            ok = decode(b, c, D + 1, n, &kv_c);
            if (r >= 0) {
                secs_c[r] = (skv_time_ms() - t1) / 1e3;
                comp_ms[r] = cms;
            }
            skv_context_free(c);
            if (!ok) goto fail;
        }
        const char *canon = skv_policy_canonical(o->policy);
        snprintf(test, sizeof test, "tg%d@d%d+%s%.3g", n, D, canon ? canon : o->policy, o->keep);
        print_row(o, &b->f, threads, test, secs_c, o->reps, n, 0,
                  (double)b->f.weight_bytes * n + kv_c, pk);

        double tps_d[64], tps_c[64];
        for (int r = 0; r < o->reps; r++) {
            tps_d[r] = n / secs_d[r];
            tps_c[r] = n / secs_c[r];
        }
        const compress_run cr = {bytes_before, bytes_after, kept_keep};
        report_compress(b, threads, prefill_ms, comp_ms, &cr, n, stats_of(tps_d, o->reps).median,
                        stats_of(tps_c, o->reps).median, kv_d, kv_c);
        fflush(stdout);
    }
    skv_context_free(master);
    return true;
fail:
    skv_context_free(master);
    return false;
}

/* ---- roofline ---------------------------------------------------------------------------- */

static bool measure_peaks(const opts *o, peaks *pk) {
    size_t bytes = (size_t)512 << 20;       /* >> any last-level cache here */
    char *buf = skv_roofline_buffer(bytes); /* in huge pages, as the weights */
    if (!buf) {
        cli_error(CMD, "out of memory for the %zu-byte bandwidth buffer", bytes);
        return false;
    }
    if (!o->json) {
        printf("Machine ceilings (%s loops; %d cores):\n\n", skv_roofline_impl(), skv_n_cores());
        printf("| threads | FMA peak GFLOP/s | read bandwidth GB/s |\n|---:|---:|---:|\n");
    }
    for (int i = 0; i < o->n_th; i++) {
        skv_pool *pool = skv_pool_new((int)o->th[i]);
        if (!pool) {
            free(buf);
            cli_error(CMD, "cannot start %ld threads", o->th[i]);
            return false;
        }
        pk[i].fma = skv_roofline_fma_gflops(pool, 100);
        pk[i].bw = skv_roofline_read_gbs(pool, buf, bytes, 5);
        skv_pool_free(pool);
        if (o->json)
            printf("{\"record\":\"roofline\",\"simd\":\"%s\",\"impl\":\"%s\",\"threads\":%ld,"
                   "\"fma_gflops\":%.3f,\"read_gbs\":%.3f}\n",
                   skv_simd_level(), skv_roofline_impl(), o->th[i], pk[i].fma, pk[i].bw);
        else
            printf("| %ld | %.1f | %.2f |\n", o->th[i], pk[i].fma, pk[i].bw);
    }
    if (!o->json) printf("\n");
    free(buf);
    return true;
}

/* ---- main ------------------------------------------------------------------------------------ */

int cmd_bench(int argc, char **argv) {
    opts o;
    memset(&o, 0, sizeof o);
    o.pp[0] = 512;
    o.n_pp = 1;
    o.tg[0] = 128;
    o.n_tg = 1;
    o.th[0] = skv_n_cores();
    o.n_th = 1;
    o.reps = 3;
    o.keep = 0.1;
    o.window = 32;
    o.kv_type = SKV_TYPE_F32;
    o.batch = 512;
    o.seed = 1;
    cli_policy_opts po; /* the policy parameters, parsed as compress and generate parse them */
    cli_policy_init(&po);
    const char *model_arg = NULL;
    enum { O_JSON = CLI_LONG, O_ROOFLINE, O_POLICY, O_KEEP, O_WINDOW, O_BATCH, O_SEED, O_KV_TYPE };
    static const cli_opt table[] = {
        {"help", 'h', false, NULL, false},
        {"model", 'm', true, NULL, false},
        {"n-prompt", 'p', true, NULL, false},
        {"n-gen", 'n', true, NULL, false},
        {"threads", 't', true, NULL, false},
        {"repetitions", 'r', true, NULL, false},
        {"depth", 'd', true, NULL, false},
        {"json", O_JSON, false, NULL, false},
        {"roofline", O_ROOFLINE, false, NULL, false},
        {"policy", O_POLICY, true, "policies", false},
        {"keep", O_KEEP, true, NULL, false},
        {"window", O_WINDOW, true, NULL, false},
        {"batch", O_BATCH, true, NULL, false},
        {"seed", O_SEED, true, NULL, false},
        {"kv-type", O_KV_TYPE, true, NULL, false},
        {"sinks", CLI_POLICY_SINKS, true, NULL, false},
        {"pool", CLI_POLICY_POOL, true, "pooling", false},
        {"kernel", CLI_POLICY_KERNEL, true, NULL, false},
        {"window-keep", CLI_POLICY_WINDOW_KEEP, true, NULL, false},
        {"positions", CLI_POLICY_POSITIONS, true, NULL, false},
        {0},
    };
    cli_args args;
    if (!cli_args_init(&args, CMD, argc, argv, table, NULL, NULL)) return 2;
    const char *v, *want = "";
    for (int key; (key = cli_args_next(&args, &v)) != CLI_DONE;) {
        long x;
        const int used = key >= CLI_POLICY_POLICY ? cli_policy_take(&po, &args, key, v) : 0;
        if (used < 0) return 2;
        if (used > 0) continue;
        switch (key) {
        case CLI_FAIL:
            return 2;
        case CLI_OPERAND:
            return cli_args_extra(&args, v), 2;
        case 'h':
            usage(stdout);
            return 0;
        case O_JSON:
            o.json = true;
            break;
        case O_ROOFLINE:
            o.roofline = true;
            break;
        case 'm':
            model_arg = v;
            break;
        case 'p':
            if ((o.n_pp = parse_list(v, 0, 1 << 20, o.pp)) < 0) {
                want = "token counts in [0, 1048576], comma-separated";
                goto bad_value;
            }
            break;
        case 'n':
            if ((o.n_tg = parse_list(v, 0, 1 << 20, o.tg)) < 0) {
                want = "token counts in [0, 1048576], comma-separated";
                goto bad_value;
            }
            break;
        case 't':
            if ((o.n_th = parse_list(v, 1, SKV_MAX_THREADS, o.th)) <= 0) {
                cli_error(CMD,
                          "-t must be thread counts in [1, %d], comma-separated (without -t: "
                          "all cores), got '%s'",
                          SKV_MAX_THREADS, v);
                return 2;
            }
            for (int i = 0; i < o.n_th; i++) cli_warn_threads(CMD, o.th[i]);
            break;
        case 'r':
            if (!cli_parse_int(v, 1, 64, &x)) {
                want = "an integer in [1, 64]";
                goto bad_value;
            }
            o.reps = (int)x;
            break;
        case 'd':
            if (!cli_parse_int(v, 0, 1 << 24, &x)) {
                want = "a token count in [0, 16777216]";
                goto bad_value;
            }
            o.depth = (int)x;
            break;
        case O_POLICY:
            o.policy = v;
            break;
        case O_KEEP:
            if (!cli_parse_double(v, 1e-9, 1.0, &o.keep)) {
                want = "a fraction in (0, 1]";
                goto bad_value;
            }
            break;
        case O_WINDOW:
            if (!cli_parse_int(v, 1, 1 << 16, &x)) {
                want = "an integer in [1, 65536]";
                goto bad_value;
            }
            o.window = (int)x;
            break;
        case O_BATCH:
            if (!cli_parse_int(v, 1, 1 << 16, &x)) {
                want = "an integer in [1, 65536]";
                goto bad_value;
            }
            o.batch = (int)x;
            break;
        case O_SEED:
            if (!cli_parse_u64(v, &o.seed)) {
                want = "an integer in [0, 2^64)";
                goto bad_value;
            }
            break;
        case O_KV_TYPE:
            if (!skv_type_from_name(v, &o.kv_type) ||
                (o.kv_type != SKV_TYPE_F32 && o.kv_type != SKV_TYPE_F16 &&
                 o.kv_type != SKV_TYPE_Q8_0)) {
                cli_error(CMD, "--kv-type must be f32, f16 or q8_0, not '%s'", v);
                return 2;
            }
            break;
        }
        continue;
    bad_value:
        cli_error(CMD, "%s must be %s, got '%s'", cli_args_spelling(&args), want, v);
        return 2;
    }
    if (!cli_args_requires(&args, O_KEEP, O_POLICY, NULL) ||
        !cli_args_requires(&args, O_WINDOW, O_POLICY, NULL))
        return 2;
    if (o.policy && !skv_policy_canonical(o.policy)) {
        cli_error(CMD, "unknown policy '%s' (valid: %s)", o.policy, cli_policy_names());
        return 2;
    }
    /* the policy parameters: with --policy, and only those the policy reads */
    static const int param_keys[] = {CLI_POLICY_SINKS, CLI_POLICY_POOL, CLI_POLICY_KERNEL,
                                     CLI_POLICY_WINDOW_KEEP, CLI_POLICY_POSITIONS};
    for (size_t k = 0; k < sizeof param_keys / sizeof param_keys[0]; k++)
        if (!cli_args_requires(&args, param_keys[k], O_POLICY, NULL)) return 2;
    if (!cli_policy_check_params(CMD, &args, o.policy, false)) return 2;
    o.pp_params = po.params;
    if (o.policy && o.depth <= 0) {
        cli_error(CMD, "--policy needs --depth D (the cache to compress)");
        return 2;
    }
    if (o.policy && o.depth <= o.window && skv_policy_needs_window(o.policy)) {
        cli_error(CMD, "--depth %d must be larger than the window %d", o.depth, o.window);
        return 2;
    }
    {
        bool any = false;
        for (int i = 0; i < o.n_pp; i++) any |= o.pp[i] > 0;
        for (int i = 0; i < o.n_tg; i++) any |= o.tg[i] > 0;
        any |= o.depth > 0; /* the depth prefill is a row of its own */
        if (!any && !o.roofline) {
            cli_error(CMD, "nothing to run: every -p and -n is 0 (and no --depth or --roofline)");
            return 2;
        }
        if (!any) { /* -p 0 -n 0 --roofline: the machine's ceilings alone, no model */
            peaks pk0[MAX_LIST];
            return measure_peaks(&o, pk0) ? 0 : 1;
        }
    }
    o.model = cli_model_path(CMD, model_arg);
    if (!o.model) return 2;

    skv_model *model = cli_load_model(CMD, o.model);
    if (!model) return cli_model_rc;
    bench b;
    memset(&b, 0, sizeof b);
    b.o = &o;
    b.model = model;
    b.f = facts_of(model, o.model);
    int max_pp = 0, max_tg = 0;
    for (int i = 0; i < o.n_pp; i++) max_pp = SKV_MAX(max_pp, (int)o.pp[i]);
    for (int i = 0; i < o.n_tg; i++) max_tg = SKV_MAX(max_tg, (int)o.tg[i]);
    b.n_tokens = o.depth + SKV_MAX(max_pp, max_tg) + 1;
    if (b.n_tokens - 1 > b.f.n_ctx_train) {
        cli_error(CMD,
                  "the longest test needs %d positions, more than the model's context of %d "
                  "(lower -p, -n or --depth)",
                  b.n_tokens - 1, b.f.n_ctx_train);
        skv_model_free(model);
        return 2;
    }
    b.tokens = malloc((size_t)b.n_tokens * sizeof *b.tokens);
    b.logits = malloc((size_t)b.f.n_vocab * sizeof *b.logits);
    peaks pk[MAX_LIST];
    memset(pk, 0, sizeof pk);
    int rc = 0;
    if (!o.json) b.notes = open_memstream(&b.notes_buf, &b.notes_len);
    if (!b.tokens || !b.logits || (!o.json && !b.notes)) {
        cli_error(CMD, "out of memory");
        rc = 1;
        goto done;
    }
    /* Random ids that are neither UNK, BOS nor EOS (for tiny vocabularies: anything). */
    skv_rng rng;
    skv_rng_seed(&rng, o.seed);
    for (int i = 0; i < b.n_tokens; i++)
        b.tokens[i] = b.f.n_vocab > 8 ? 3 + (int32_t)skv_rng_below(&rng, (uint64_t)b.f.n_vocab - 3)
                                      : (int32_t)skv_rng_below(&rng, (uint64_t)b.f.n_vocab);

    { /* a cache type the model cannot hold fails here, before anything is printed */
        skv_context *probe = new_context(&b, 1, 1, 0);
        if (!probe) {
            rc = 2;
            goto done;
        }
        skv_context_free(probe);
    }
    if (o.roofline && !measure_peaks(&o, pk)) {
        rc = 1;
        goto done;
    }
    print_header(&o);
    for (int ti = 0; ti < o.n_th && rc == 0; ti++) {
        int threads = (int)o.th[ti];
        if (o.depth == 0) {
            skv_context *ctx = new_context(&b, threads, SKV_MAX(max_pp, max_tg) + 1, 0);
            if (!ctx) {
                rc = 1;
                break;
            }
            for (int i = 0; i < o.n_pp && rc == 0; i++)
                if (o.pp[i] > 0 && !run_pp(&b, ctx, threads, (int)o.pp[i], &pk[ti])) rc = 1;
            for (int i = 0; i < o.n_tg && rc == 0; i++)
                if (o.tg[i] > 0 && !run_tg(&b, ctx, threads, (int)o.tg[i], &pk[ti])) rc = 1;
            skv_context_free(ctx);
        }
        if (rc == 0 && o.depth > 0 && !run_depth(&b, threads, &pk[ti])) rc = 1;
    }
done:
    if (b.notes) {
        fclose(b.notes);
        if (rc == 0 && b.n_notes > 0) printf("\nCompressed-cache decode:\n\n%s", b.notes_buf);
        free(b.notes_buf);
    }
    free(b.tokens);
    free(b.logits);
    skv_model_free(model);
    return rc;
}
