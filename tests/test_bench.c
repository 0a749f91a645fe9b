/* test_bench.c — `sparsekv bench` on stories260K: the records it prints and the arithmetic behind
 * them (FLOPs, bytes per token, compression sizes), checked against hand-derived values. Nothing
 * here asserts on speed. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The number after "key": in the JSON line starting at line (NAN when absent). */
static double field(const char *line, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *end = strchr(line, '\n');
    const char *p = strstr(line, pat);
    if (!p || (end && p > end)) return NAN;
    return strtod(p + strlen(pat), NULL);
}

/* The line of out whose "test" (or "record") is value. */
static const char *find_line(const char *out, const char *key, const char *value) {
    char pat[96];
    snprintf(pat, sizeof pat, "\"%s\":\"%s\"", key, value);
    const char *p = strstr(out, pat);
    if (!p) return NULL;
    while (p > out && p[-1] != '\n') p--;
    return p;
}

static char *bench(const char *args, int *status) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s bench -m %s %s", test_cli(),
             test_model_path("stories260K/stories260K.gguf"), args);
    return test_run(cmd, status);
}

/* stories260K: dim 64, 5 layers, 8/4 heads of 8, ffn 172, vocab 512, F32, tied. */
#define LAYER_MATMUL   (64.0 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 172)
#define KV_ENTRY_BYTES (2 * 8 * 4 + 4) /* f32 K and V rows of 8, one int32 position */
#define KV_HEADS       (5 * 4)

static void test_prefill_and_decode_records(void **state) {
    (void)state;
    int st;
    char *out = bench("-p 16 -n 4 -t 1,2 -r 1 --json", &st);
    assert_non_null(out);
    assert_int_equal(st, 0);
    int lines = 0;
    for (const char *p = out; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, 4); /* pp16 and tg4 at 1 and 2 threads */
    const char *pp = find_line(out, "test", "pp16");
    const char *tg = find_line(out, "test", "tg4");
    assert_non_null(pp);
    assert_non_null(tg);
    double w = field(pp, "weight_bytes");
    assert_true(w > 0);
    assert_true(field(pp, "params") == 5 * (LAYER_MATMUL + 2 * 64) + 64 + 512 * 64);

    /* FLOPs: 2 per matrix weight per token, the output matrix for the last token only, and
     * causal attention 4 * head_dim * n_head per visible key (1 + 2 + ... + 16 keys). */
    double flops = 2.0 * 16 * 5 * LAYER_MATMUL + 2.0 * 512 * 64 + 4.0 * 8 * 8 * 5 * (16 * 17 / 2);
    double tps = field(pp, "tps_median");
    assert_true(tps > 0);
    double gflops = flops / (16 / tps) / 1e9;
    assert_true(fabs(field(pp, "gflops") - gflops) <= 0.01 * gflops + 2e-3);

    /* Bytes per decoded token: the weights plus the mean cache read over steps holding 1..4
     * entries per head. */
    double kv = KV_HEADS * KV_ENTRY_BYTES * (1 + 2 + 3 + 4) / 4.0;
    assert_true(fabs(field(tg, "bytes_per_token") - (w + kv)) <= 1);
    assert_true(field(tg, "tps_median") > 0);
    assert_true(isnan(field(tg, "pct_bw"))); /* no --roofline, no percentage */
    /* the settings that change the numbers are in every record */
    assert_non_null(strstr(pp, "\"kv_type\":\"f32\",\"batch\":512,"));
    assert_non_null(strstr(tg, "\"kv_type\":\"f32\",\"batch\":512,"));
    free(out);
    out = bench("-p 16 -n 0 -t 1 -r 1 --kv-type f16 --batch 8 --json", &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "\"kv_type\":\"f16\",\"batch\":8,"));
    free(out);
}

static void test_compressed_decode_record(void **state) {
    (void)state;
    int st;
    char *out = bench("-p 0 -n 4 -t 1 -r 1 --depth 100 --policy snapkv --keep 0.5 --json", &st);
    assert_non_null(out);
    assert_int_equal(st, 0);
    const char *c = find_line(out, "record", "compress");
    assert_non_null(c);
    assert_non_null(find_line(out, "test", "tg4@d100"));
    assert_non_null(find_line(out, "test", "prefill@d100"));
    assert_true(field(c, "depth") == 100);
    assert_true(field(c, "keep_tokens") == 50);
    assert_true(field(c, "kv_bytes_before") == KV_HEADS * KV_ENTRY_BYTES * 100.0);
    assert_true(field(c, "kv_bytes_after") == KV_HEADS * KV_ENTRY_BYTES * 50.0);
    /* predicted speedup: mean bytes per decode step, dense (101..104 entries per head) over
     * compressed (51..54) */
    double w = field(find_line(out, "test", "tg4@d100"), "weight_bytes");
    double dense = w + KV_HEADS * KV_ENTRY_BYTES * (101 + 102 + 103 + 104) / 4.0;
    double comp = w + KV_HEADS * KV_ENTRY_BYTES * (51 + 52 + 53 + 54) / 4.0;
    assert_true(fabs(field(c, "speedup_predicted") - dense / comp) < 1e-3);
    assert_true(field(c, "compress_ms") >= 0);
    assert_true(field(c, "prefill_ms") > 0);
    assert_true(fabs(field(c, "pct_prefill") -
                     100 * field(c, "compress_ms") / field(c, "prefill_ms")) < 1e-2);
    free(out);

    /* the markdown form has both tables */
    out = bench("-p 0 -n 2 -t 1 -r 1 --depth 64 --policy streaming --keep 0.25", &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "| tg2@d64 |"));
    assert_non_null(strstr(out, "| prefill@d64 (1 run) |")); /* the JSON's name, and the runs */
    assert_non_null(strstr(out, "Compressed-cache decode"));
    assert_non_null(strstr(out, "| 16 |")); /* kept per head: 0.25 * 64 */
    /* KV bytes in a unit that shows them: 64 and 16 positions of 5 layers x 4 kv heads x (k and
     * v of 8 f32 + a 4-byte position) = 87040 and 21760 bytes */
    assert_non_null(strstr(out, "| 85.0 KiB -> 21.2 KiB |"));
    free(out);

    /* h2o needs the depth prefill's attention summed: bench turns that on (it failed after the
     * dense tests, naming skv_context_accumulate_attention); prefill after the cut too */
    out = bench("-p 4 -n 2 -t 1 -r 1 --depth 64 --policy h2o --keep 0.25 --json", &st);
    assert_int_equal(st, 0);
    c = find_line(out, "record", "compress");
    assert_non_null(c);
    assert_true(field(c, "keep_tokens") == 16);
    assert_non_null(find_line(out, "test", "tg2@d64+h2o0.25"));
    assert_non_null(find_line(out, "test", "pp4@d64+h2o0.25"));
    free(out);

    /* the policy's parameters, as compress takes them, in the compress record */
    out = bench("-p 0 -n 2 -t 1 -r 1 --depth 64 --policy snapkv --kernel 3 --window-keep 4 "
                "--positions rerotate --json",
                &st);
    assert_int_equal(st, 0);
    c = find_line(out, "record", "compress");
    assert_non_null(c);
    assert_true(field(c, "kernel") == 3);
    assert_true(field(c, "window_keep") == 4);
    assert_non_null(strstr(c, "\"positions\":\"rerotate\""));
    assert_null(strstr(c, "\"sinks\"")); /* snapkv reads no sinks */
    free(out);
}

/* --depth with -p: prefill of 8 tokens on copies of the 100-token context, dense and
 * compressed; the FLOPs count the entries each query meets (100 or the 50 kept, plus the
 * causal new ones). */
static void test_prefill_at_depth_records(void **state) {
    (void)state;
    int st;
    char *out = bench("-p 8 -n 0 -t 1 -r 1 --depth 100 --policy snapkv --keep 0.5 --json", &st);
    assert_non_null(out);
    assert_int_equal(st, 0);
    const char *d = find_line(out, "test", "pp8@d100");
    const char *c = find_line(out, "test", "pp8@d100+attention0.5");
    assert_non_null(d);
    assert_non_null(c);
    assert_null(find_line(out, "test", "pp8")); /* no prefill at depth 0 */
    /* no decode test: the compression still has its record, without decode figures */
    const char *cr = find_line(out, "record", "compress");
    assert_non_null(cr);
    assert_true(field(cr, "keep_tokens") == 50);
    assert_true(field(cr, "kv_bytes_after") == KV_HEADS * KV_ENTRY_BYTES * 50.0);
    assert_true(field(cr, "tg") == 0);
    const char *nul = strstr(cr, "\"speedup\":null"), *eol = strchr(cr, '\n');
    assert_true(nul && (!eol || nul < eol));
    const double keys[2] = {8 * 100 + 8 * 9 / 2, 8 * 50 + 8 * 9 / 2};
    const char *rec[2] = {d, c};
    for (int i = 0; i < 2; i++) {
        double flops = 2.0 * 8 * 5 * LAYER_MATMUL + 2.0 * 512 * 64 + 4.0 * 8 * 8 * 5 * keys[i];
        double tps = field(rec[i], "tps_median");
        assert_true(tps > 0);
        double gflops = flops / (8 / tps) / 1e9;
        assert_true(fabs(field(rec[i], "gflops") - gflops) <= 0.01 * gflops + 2e-3);
    }
    free(out);
}

static void test_roofline_record(void **state) {
    (void)state;
    int st;
    char *out = bench("-p 0 -n 0 -t 1 --roofline --json", &st);
    assert_int_equal(st, 0);
    const char *r = find_line(out, "record", "roofline");
    assert_non_null(r);
    assert_true(field(r, "fma_gflops") > 0);
    assert_true(field(r, "read_gbs") > 0);
    free(out);
}

static void test_usage_errors(void **state) {
    (void)state;
    const char *bad[] = {"--policy snapkv 2>/dev/null",            /* no --depth */
                         "--depth 64 --policy nope 2>/dev/null",   /* unknown policy */
                         "--kv-type q4_0 2>/dev/null",             /* not a cache type */
                         "-t 0 2>/dev/null",                       /* no threads */
                         "-p 1,x 2>/dev/null",                     /* bad list */
                         "--frobnicate 2>/dev/null",               /* unknown option */
                         "--depth 16 --policy snapkv 2>/dev/null", /* depth <= window */
                         "--sinks 2 2>/dev/null",                  /* a parameter, no policy */
                         "--depth 64 --policy knorm --kernel 3 2>/dev/null" /* not read */};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int st;
        free(bench(bad[i], &st));
        if (st != 2) fprintf(stderr, "bench %s: exit %d\n", bad[i], st);
        assert_int_equal(st, 2);
    }
    int st;
    char *out = bench("--help", &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "--roofline"));
    free(out);
}

/* bench_lib_ab (bench/lib_ab.c) with this build's shared library as A and a copy of it as B: two
 * copies in one process, each with its own globals, must compute the same logits; and with the
 * same file twice it says so. SKV_BUILD (set by make test) names the build directory. */
static void test_lib_ab(void **state) {
    (void)state;
    const char *build = getenv("SKV_BUILD");
    if (!build) skip();
    char lib[1024], copy[1024], cmd[4096];
    snprintf(lib, sizeof lib, "%s/libsparsekv.so", build);
    /* beside the build's own, not in TMPDIR (which may be mounted noexec) */
    snprintf(copy, sizeof copy, "%s/libsparsekv_test_copy.so", build);
    size_t n;
    void *bytes = test_read_file(lib, &n);
    assert_non_null(bytes);
    FILE *f = fopen(copy, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(bytes, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
    free(bytes);
    const char *model = test_model_path("stories260K/stories260K.gguf");
    int st;
    snprintf(cmd, sizeof cmd, "%s/bench_lib_ab %s %s %s --prompt 32 --decode 4 --rounds 2", build,
             lib, copy, model);
    char *out = test_run(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "| pp32 | "));
    assert_non_null(strstr(out, "| tg4 | "));
    assert_non_null(strstr(out, "logits of the last prompt token: identical"));
    assert_null(strstr(out, "the same copy"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s/bench_lib_ab %s %s %s --prompt 16 --rounds 1", build, lib, lib,
             model);
    out = test_run(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "- the same copy as A"));
    assert_null(strstr(out, "| tg"));
    free(out);
    const char *bad[] = {"--rounds 0", "--prompt 0", "--kv-type q4_0", "--threads", "--nope 1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "%s/bench_lib_ab %s %s %s %s 2>/dev/null", build, lib, copy,
                 model, bad[i]);
        free(test_run(cmd, &st));
        if (st != 2) fprintf(stderr, "bench_lib_ab ... %s: exit %d\n", bad[i], st);
        assert_int_equal(st, 2);
    }
    snprintf(cmd, sizeof cmd, "%s/bench_lib_ab %s %s.absent %s 2>/dev/null", build, lib, copy,
             model);
    free(test_run(cmd, &st));
    assert_int_equal(st, 1);
    remove(copy);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prefill_and_decode_records),
        cmocka_unit_test(test_compressed_decode_record),
        cmocka_unit_test(test_prefill_at_depth_records),
        cmocka_unit_test(test_roofline_record),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_lib_ab),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
