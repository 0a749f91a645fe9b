/* test_eval_merge_checks.c — eval-merge merges only shards that belong together (issue 12):
 * the same model file (size and header hash), data file, configuration, cut sizes and KV type;
 * every shard of the set once, each finished; no sample twice. Each refusal is exit 2 naming
 * the shard and the field; --allow-partial merges anyway and says what is missing, on stderr
 * and in the merged run.json. Shards are real runs of stories260K; some mismatches are made by
 * editing a copy's run.json, the model and KV-type ones by real runs. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ARGS "-t 1 -q --samples 2 --policies sink_recent --keep 0.5 --greedy 4 --protocols seed"

static char root[4096], s0[4200], s1[4200];

static void sh(const char *fmt, ...) {
    char cmd[16384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    int st = -1;
    free(test_run(cmd, &st));
    if (st != 0) fail_msg("`%s` failed", cmd);
}

static void shard(const char *dir, const char *model, int k, const char *extra) {
    char args[16384];
    char *err = NULL;
    snprintf(args, sizeof args, "eval -m '%s' " ARGS " --shard %d/2 %s --out '%s'", model, k, extra,
             dir);
    int st = test_cli_stderr(args, &err);
    if (st != 0) fail_msg("eval shard %d failed (%d): %s", k, st, err);
    free(err);
}

/* A copy of shard 1 named NAME whose run.json has `from` replaced by `to`. */
static const char *edited(const char *name, const char *from, const char *to) {
    static char dir[4300];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    sh("rm -rf '%s' && cp -r '%s' '%s'", dir, s1, dir);
    char p[4400];
    snprintf(p, sizeof p, "%s/run.json", dir);
    char *s = test_read_file(p, NULL);
    assert_non_null(s);
    char *at = strstr(s, from);
    if (!at) fail_msg("'%s' not in %s: %s", from, p, s);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fwrite(s, 1, (size_t)(at - s), f);
    fputs(to, f);
    fputs(at + strlen(from), f);
    fclose(f);
    free(s);
    return dir;
}

/* eval-merge INPUTS must exit 2 naming the shard and the field. */
static void refused(const char *inputs, const char *shard_name, const char *field) {
    char args[16384];
    char *err = NULL;
    snprintf(args, sizeof args, "eval-merge %s --out '%s/merged' -q", inputs, root);
    int st = test_cli_stderr(args, &err);
    char want[256];
    snprintf(want, sizeof want, "field '%s'", field);
    if (st != 2 || !strstr(err, want) || !strstr(err, shard_name))
        fail_msg("eval-merge %s: exit %d (want 2), stderr:\n%s(want '%s' and '%s')", inputs, st,
                 err, shard_name, want);
    free(err);
}

static int setup(void **state) {
    (void)state;
    snprintf(root, sizeof root, "%s", test_tmp_path("_mergechk"));
    snprintf(s0, sizeof s0, "%s/s0", root);
    snprintf(s1, sizeof s1, "%s/s1", root);
    sh("mkdir -p '%s'", root);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    sh("rm -rf '%s'", root);
    return 0;
}

static void test_merge_checks(void **state) {
    (void)state;
    const char *model = test_model_path("stories260K/stories260K.gguf");
    char m[4096];
    snprintf(m, sizeof m, "%s", model);
    shard(s0, m, 0, "");
    shard(s1, m, 1, "");
    char in[16384], args[16384];
    char *err = NULL;

    /* the whole set merges; run.json says complete, nothing missing */
    snprintf(args, sizeof args, "eval-merge '%s' '%s' --out '%s/all' -q", s1, s0, root);
    int st = test_cli_stderr(args, &err);
    if (st != 0) fail_msg("merge failed (%d): %s", st, err);
    free(err);
    char p[4400];
    snprintf(p, sizeof p, "%s/all/run.json", root);
    char *rj = test_read_file(p, NULL);
    assert_non_null(rj);
    assert_non_null(strstr(rj, "\"complete\":true"));
    assert_null(strstr(rj, "\"missing\""));
    assert_non_null(strstr(rj, "\"merged_from\":["));
    free(rj);

    /* another model file: same size, one weight byte changed inside the hashed header MiB */
    char m2[4300], d2[4300];
    snprintf(m2, sizeof m2, "%s/other.gguf", root);
    sh("cp '%s' '%s'", m, m2);
    FILE *f = fopen(m2, "r+b");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    long at = (size < (1L << 20) ? size : (1L << 20)) - 4096;
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 1, f);
    fclose(f);
    snprintf(d2, sizeof d2, "%s/s1_model", root);
    shard(d2, m2, 1, "");
    snprintf(in, sizeof in, "'%s' '%s'", s0, d2);
    refused(in, d2, "model_hash");

    /* another KV type */
    snprintf(d2, sizeof d2, "%s/s1_f16", root);
    shard(d2, m, 1, "--kv-type f16");
    snprintf(in, sizeof in, "'%s' '%s'", s0, d2);
    refused(in, d2, "kv_type");

    /* shards run at different kernel levels (their results differ in the last bits): refused,
     * naming both levels */
    if (strcmp(skv_simd_level(), "scalar") != 0) {
        const char *was = getenv("SKV_SIMD");
        char *saved = was ? strdup(was) : NULL;
        setenv("SKV_SIMD", "scalar", 1); /* the shard's CLI inherits it */
        snprintf(d2, sizeof d2, "%s/s1_scalar", root);
        shard(d2, m, 1, "");
        if (saved)
            setenv("SKV_SIMD", saved, 1);
        else
            unsetenv("SKV_SIMD");
        free(saved);
        snprintf(args, sizeof args, "eval-merge '%s' '%s' --out '%s/merged' -q", s0, d2, root);
        st = test_cli_stderr(args, &err);
        if (st != 2 || !strstr(err, "ran with the scalar kernels") || !strstr(err, d2) ||
            !strstr(err, skv_simd_level()))
            fail_msg("shards at two levels: exit %d (want 2), stderr:\n%s", st, err);
        free(err);
    }

    /* a shard whose run.json predates "simd" (begun by an older build, resumed since) is not
     * checked for it: merged, as --resume takes it */
    {
        const char *d = edited("e_nosimd", "\"complete\":true", "\"complete\":true");
        sh("sed -i 's/,\"simd\":\"[^\"]*\"//' '%s/run.json' && ! grep -q simd '%s/run.json'", d, d);
        snprintf(args, sizeof args, "eval-merge '%s' '%s' --out '%s/merged_nosimd' -q", s0, d,
                 root);
        st = test_cli_stderr(args, &err);
        if (st != 0) fail_msg("merge with a shard without simd: exit %d: %s", st, err);
        free(err);
        /* ... and rows from before cache_ms: the mean of those that have it, never "nan" */
        sh("sed -i 's/,\"cache_ms\":[^,}]*//' '%s/results.jsonl' && ! grep -q cache_ms "
           "'%s/results.jsonl'",
           d, d);
        snprintf(args, sizeof args, "eval-merge '%s' '%s' --out '%s/merged_nocache' -q", s0, d,
                 root);
        st = test_cli_stderr(args, &err);
        if (st != 0) fail_msg("merge with rows without cache_ms: exit %d: %s", st, err);
        free(err);
        const char *files[] = {"timing.csv", "summary.md"};
        for (int i = 0; i < 2; i++) {
            snprintf(p, sizeof p, "%s/merged_nocache/%s", root, files[i]);
            char *t = test_read_file(p, NULL);
            assert_non_null(t);
            if (strstr(t, "nan")) fail_msg("%s holds nan:\n%s", p, t);
            free(t);
        }
    }

    /* the other fields, by editing a copy's run.json */
    struct {
        const char *name, *from, *to, *field;
    } cases[] = {
        {"e_bytes", "\"model_bytes\":\"", "\"model_bytes\":\"1", "model_bytes"},
        {"e_keep", "\"keep\":\"0.5,1\"", "\"keep\":\"0.25,1\"", "keep"},
        {"e_policies", "\"policies\":\"sink_recent\"", "\"policies\":\"random\"", "policies"},
        {"e_data", "\"data_hash\":\"", "\"data_hash\":\"f", "data_hash"},
        {"e_prefix", "\"prefix\":\"rest\"", "\"prefix\":\"100\"", "prefix"},
        {"e_window", "\"window\":\"32\"", "\"window\":\"16\"", "window"},
        {"e_cont", "\"continuation\":\"64\"", "\"continuation\":\"32\"", "continuation"},
        {"e_greedy", "\"greedy\":\"4\"", "\"greedy\":\"8\"", "greedy"},
        {"e_shardn", "\"shard\":\"1/2\"", "\"shard\":\"1/3\"", "shard"},
        {"e_incomplete", "\"complete\":true", "\"complete\":false", "complete"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *d = edited(cases[i].name, cases[i].from, cases[i].to);
        snprintf(in, sizeof in, "'%s' '%s'", s0, d);
        refused(in, d, cases[i].field);
    }

    /* no run.json: nothing shows the shard belongs, refused */
    const char *d = edited("e_norun", "\"complete\":true", "\"complete\":true");
    snprintf(p, sizeof p, "%s/run.json", d);
    unlink(p);
    snprintf(in, sizeof in, "'%s' '%s'", s0, d);
    refused(in, d, "run.json");

    /* a run.json that is no run.json (it is untrusted input too): refused, naming the shard */
    const char *bad[] = {"{",
                         "[]",
                         "{\"complete\":\"yes\",\"config\":{}}",
                         "{\"complete\":true,\"config\":{\"k\":1}}",
                         "{\"complete\":true,\"config\":{},\"shard\":\"3/2\"}",
                         "{\"complete\":true,\"config\":{},\"command\":[1]}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        d = edited("e_bad", "\"complete\":true", "\"complete\":true");
        snprintf(p, sizeof p, "%s/run.json", d);
        f = fopen(p, "w");
        assert_non_null(f);
        fputs(bad[i], f);
        fclose(f);
        snprintf(args, sizeof args, "eval-merge '%s' '%s' --out '%s/merged' -q", s0, d, root);
        st = test_cli_stderr(args, &err);
        if (st != 2 || !strstr(err, d) || !strstr(err, "run.json"))
            fail_msg("run.json '%s': exit %d, stderr:\n%s", bad[i], st, err);
        free(err);
    }

    /* a shard given twice, a shard missing */
    snprintf(in, sizeof in, "'%s' '%s' '%s'", s0, s1, s0);
    refused(in, s0, "shard");
    snprintf(in, sizeof in, "'%s'", s0);
    refused(in, "shard 1/2", "shard");

    /* a sample in the wrong shard (shard 1's rows under shard 0's run.json) */
    d = edited("e_sample", "\"shard\":\"1/2\"", "\"shard\":\"0/2\"");
    snprintf(in, sizeof in, "'%s' '%s'", s1, d);
    refused(in, d, "sample");

    /* rows missing from a shard that says it is complete */
    d = edited("e_rows", "\"complete\":true", "\"complete\":true");
    sh("head -n 1 '%s/results.jsonl' > '%s/r' && mv '%s/r' '%s/results.jsonl'", d, d, d, d);
    snprintf(in, sizeof in, "'%s' '%s'", s0, d);
    refused(in, d, "rows");

    /* --allow-partial: merged, loudly, and recorded in run.json */
    snprintf(args, sizeof args, "eval-merge '%s' --allow-partial --out '%s/part' -q", s0, root);
    st = test_cli_stderr(args, &err);
    if (st != 0) fail_msg("partial merge failed (%d): %s", st, err);
    assert_non_null(strstr(err, "PARTIAL MERGE"));
    assert_non_null(strstr(err, "shard 1/2 missing"));
    free(err);
    snprintf(p, sizeof p, "%s/part/run.json", root);
    rj = test_read_file(p, NULL);
    assert_non_null(rj);
    assert_non_null(strstr(rj, "\"complete\":false"));
    assert_non_null(strstr(rj, "\"missing\":[\"shard 1/2 missing\"]"));
    free(rj);
    /* a partial merge is itself unfinished: merging it again is refused */
    snprintf(in, sizeof in, "'%s/part'", root);
    refused(in, "part", "complete");

    d = edited("e_unfinished", "\"complete\":true", "\"complete\":false");
    snprintf(args, sizeof args, "eval-merge '%s' '%s' --allow-partial --out '%s/part2' -q", s0, d,
             root);
    st = test_cli_stderr(args, &err);
    if (st != 0) fail_msg("partial merge failed (%d): %s", st, err);
    assert_non_null(strstr(err, "unfinished"));
    free(err);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_checks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
