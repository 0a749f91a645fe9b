/* test_simd_level.c — the run-time SIMD level: chosen once per process from CPUID, lowered by
 * SKV_SIMD (SKV_FORCE_SCALAR=1 its older spelling), an unknown value or a level the CPU or the
 * build lacks falling back with a note that the library keeps and the CLI prints on stderr.
 * Each setting needs a fresh process, so this runs the CLI (`info --system --json`, `bench
 * --json`). The CPU's own features come from /proc/cpuinfo, read here independently. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "sparsekv.h"
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value of the first /proc/cpuinfo line whose name is key ("flags", "vendor_id"), without
 * its newline, or "" (procfs files have no size: read line by line). */
static const char *cpuinfo_value(const char *key) {
    static char line[16384];
    FILE *f = fopen("/proc/cpuinfo", "r");
    const char *value = "";
    while (f && fgets(line, sizeof line, f)) {
        const char *colon = strchr(line, ':');
        if (!colon || strncmp(line, key, strlen(key)) != 0 ||
            strspn(line + strlen(key), " \t") != (size_t)(colon - line) - strlen(key))
            continue;
        line[strcspn(line, "\n")] = 0;
        value = colon + 1 + strspn(colon + 1, " \t");
        break;
    }
    if (f) fclose(f);
    return value;
}

static bool cpuinfo_has(const char *flag) {
    char line[16384];
    snprintf(line, sizeof line, " %s ", cpuinfo_value("flags"));
    char pat[64];
    snprintf(pat, sizeof pat, " %s ", flag);
    return strstr(line, pat) != NULL;
}

/* The CLI's `info --system --json` under an environment prefix; stderr into *err_out. */
static char *system_json(const char *env, char **err_out) {
    const char *errf = test_tmp_path(".err");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "env -u SKV_SIMD -u SKV_FORCE_SCALAR -u SKV_K16_PREFETCH %s %s info --system --json "
             "2>%s",
             env, test_cli(), errf);
    int st;
    char *out = test_run(cmd, &st);
    assert_int_equal(st, 0);
    *err_out = test_read_file(errf, NULL);
    if (!*err_out) *err_out = strdup("");
    remove(errf);
    return out;
}

static void expect(const char *env, const char *level, bool warn) {
    char *err;
    char *js = system_json(env, &err);
    char want[64];
    snprintf(want, sizeof want, "\"simd\":\"%s\"", level);
    if (!strstr(js, want)) fprintf(stderr, "%s: %s", env, js);
    assert_non_null(strstr(js, want));
    assert_int_equal(strstr(err, "warning") != NULL, warn);
    assert_int_equal(strstr(js, "\"simd_warning\":null") == NULL, warn);
    free(js);
    free(err);
}

/* Whether s is one JSON value of object type: braces and brackets balance outside strings and
 * close only at its end (then whitespace). */
static bool one_json_object(const char *s) {
    int depth = 0;
    bool str = false, closed = false;
    if (*s != '{') return false;
    for (; *s; s++) {
        if (closed) {
            if (*s != '\n' && *s != ' ') return false;
            continue;
        }
        if (str) {
            if (*s == '\\' && s[1])
                s++;
            else if (*s == '"')
                str = false;
            continue;
        }
        if (*s == '"')
            str = true;
        else if (*s == '{' || *s == '[')
            depth++;
        else if ((*s == '}' || *s == ']') && --depth == 0)
            closed = true;
    }
    return closed && !str;
}

/* `info --system --json MODEL`: one document, the system's facts under "system". */
static void test_system_with_model(void **s) {
    (void)s;
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s info --system --json models/stories260K.gguf", test_cli());
    int st;
    char *out = test_run(cmd, &st);
    assert_int_equal(st, 0);
    assert_true(one_json_object(out));
    const char *head = "{\"system\":{\"cpu_features\":";
    assert_true(strncmp(out, head, strlen(head)) == 0);
    assert_non_null(strstr(out, ",\"path\":"));
    assert_non_null(strstr(out, "\"tensors\":["));
    free(out);
    snprintf(cmd, sizeof cmd, "%s info --system --json", test_cli());
    out = test_run(cmd, &st);
    assert_int_equal(st, 0);
    assert_true(one_json_object(out));
    assert_null(strstr(out, "\"path\""));
    free(out);
}

static void test_levels(void **s) {
    (void)s;
    bool avx2 = cpuinfo_has("avx2") && cpuinfo_has("fma") && cpuinfo_has("f16c");
    bool avx512 = avx2 && cpuinfo_has("avx512f") && cpuinfo_has("avx512bw") &&
                  cpuinfo_has("avx512vl") && cpuinfo_has("avx512dq");
    const char *best = avx512 ? "avx512" : avx2 ? "avx2" : "scalar";
    char *err;
    char *js = system_json("", &err);
    char want[64];
    snprintf(want, sizeof want, "\"cpu_simd\":\"%s\"", avx512 ? "avx512" : best);
    assert_non_null(strstr(js, want));
    assert_int_equal(strstr(js, " avx2 ") != NULL || strstr(js, "\"avx2 ") != NULL ||
                         strstr(js, " avx2\"") != NULL,
                     avx2);
    free(js);
    free(err);
    expect("", best, false);
    expect("SKV_SIMD=auto", best, false);
    expect("SKV_SIMD=scalar", "scalar", false);
    expect("SKV_SIMD=SCALAR", "scalar", false); /* case-insensitive */
    expect("SKV_FORCE_SCALAR=1", "scalar", false);
    expect("SKV_FORCE_SCALAR=0", best, false);
    expect("SKV_SIMD=avx2", avx2 ? "avx2" : best, !avx2); /* without AVX2: falls back, noted */
    expect("SKV_SIMD=avx512", best, !avx512);             /* likewise without AVX-512 */
    expect("SKV_SIMD=sse9", best, true);                  /* unknown: ignored, with a note */
    /* The library's own answer in this process agrees with the CLI's default. */
    if (!getenv("SKV_SIMD") && !getenv("SKV_FORCE_SCALAR"))
        assert_string_equal(skv_simd_level(), best);
}

/* Whether F16/BF16 prefill runs on AMX tiles: never without the CPU's AMX-BF16 and AMX-TILE (the
 * OS may still refuse the tile state: then false too), never with SKV_NO_AMX=1 or below the
 * avx512 level. */
static void test_amx(void **s) {
    (void)s;
    char *err;
    char *js = system_json("", &err);
    const bool on = strstr(js, "\"amx\":true") != NULL;
    assert_true(on || strstr(js, "\"amx\":false") != NULL);
    if (!cpuinfo_has("amx_bf16") || !cpuinfo_has("amx_tile") || !cpuinfo_has("avx512_bf16"))
        assert_false(on);
    free(js);
    free(err);
    const char *off[] = {"SKV_NO_AMX=1", "SKV_SIMD=avx2", "SKV_SIMD=scalar"};
    for (int i = 0; i < 3; i++) {
        js = system_json(off[i], &err);
        if (!strstr(js, "\"amx\":false")) fprintf(stderr, "%s: %s", off[i], js);
        assert_non_null(strstr(js, "\"amx\":false"));
        free(js);
        free(err);
    }
    js = system_json("SKV_NO_AMX=0", &err); /* 0 is no */
    assert_int_equal(strstr(js, "\"amx\":true") != NULL, on);
    free(js);
    free(err);
    /* the text form says it either way (it had no amx line when the tiles were not in use) */
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "env -u SKV_SIMD -u SKV_NO_AMX %s info --system", test_cli());
    int st;
    char *txt = test_run(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(
        strstr(txt, on ? "amx          F16/BF16 prefill on AMX" : "amx          not used"));
    free(txt);
}

/* How Q4_K, Q8_0, Q4_0, Q5_0, Q4_1 and Q5_1 decode read their records: prefetched streams (never at
 * the scalar level, which has no such kernel), 3 KB ahead on AMD or Hygon up to family 0x18, 2 KB
 * on later AMD, 1 KB on other CPUs; SKV_K16_PREFETCH=0|1 overrides the CPU, any other value is
 * ignored with a warning.
 */
static void test_k16_prefetch(void **s) {
    (void)s;
    char vendor[64], *err;
    snprintf(vendor, sizeof vendor, "%s", cpuinfo_value("vendor_id"));
    const bool simd = cpuinfo_has("avx2") && cpuinfo_has("fma") && cpuinfo_has("f16c");
    const bool amd = !strcmp(vendor, "AuthenticAMD") || !strcmp(vendor, "HygonGenuine");
    const int family = atoi(cpuinfo_value("cpu family")); /* decimal: 23 is 0x17 */
    const bool dflt = simd;
    const int ahead = !amd ? 1024 : family <= 0x18 ? 3072 : 2048; /* Hygon: 0x18 */
    const struct {
        const char *env;
        bool on, warn;
    } cases[] = {{"", dflt, false},
                 {"SKV_K16_PREFETCH=1", simd, false},
                 {"SKV_K16_PREFETCH=0", false, false},
                 {"SKV_K16_PREFETCH=1 SKV_SIMD=scalar", false, false},
                 {"SKV_K16_PREFETCH=4", dflt, true}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *js = system_json(cases[i].env, &err);
        char want[96];
        snprintf(want, sizeof want, "\"k16_prefetch\":%s,\"k16_ahead\":%d",
                 cases[i].on ? "true" : "false", cases[i].on ? ahead : 0);
        if (!strstr(js, want)) fprintf(stderr, "vendor '%s' %s: %s", vendor, cases[i].env, js);
        assert_non_null(strstr(js, want));
        assert_int_equal(strstr(err, "SKV_K16_PREFETCH") != NULL, cases[i].warn);
        free(js);
        free(err);
    }
}

/* bench --json carries the level in every record. */
static void test_bench_json(void **s) {
    (void)s;
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "env SKV_SIMD=scalar %s bench --json -m %s -p 8 -n 2 -t 1 -r 1 2>/dev/null",
             test_cli(), test_model_path("stories260K/stories260K.gguf"));
    int st;
    char *out = test_run(cmd, &st);
    assert_int_equal(st, 0);
    int n = 0;
    for (char *p = out; (p = strstr(p, "\"record\":\"test\"")) != NULL; p++) {
        char *end = strchr(p, '\n');
        assert_non_null(end);
        *end = 0;
        assert_non_null(strstr(p, "\"simd\":\"scalar\",\"amx\":false"));
        *end = '\n';
        n++;
    }
    assert_int_equal(n, 2);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_levels),     cmocka_unit_test(test_system_with_model),
        cmocka_unit_test(test_amx),        cmocka_unit_test(test_k16_prefetch),
        cmocka_unit_test(test_bench_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
