/* test_convert.c — llama2.c -> GGUF conversion against the shared reference conversion
 * (stories260K.gguf): every key/value and every tensor's bytes must match. Also legacy v0 and
 * unshared-classifier checkpoints rebuilt from the v1 file, truncated inputs, and the CLI. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gguf.h"
#include "support.h"

#include <stdio.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* stories260K hparams (README) */
enum { DIM = 64, HID = 172, NL = 5, NH = 8, NKV = 4, VOCAB = 512, SEQ = 512, HEAD = 8 };
enum { KVD = NKV * HEAD };

static char ck_path[4096], tok_path[4096], ref_path[4096];

static int setup(void **state) {
    (void)state;
    /* absent fixtures leave a path empty: the tests that need them skip (have_models) */
    const char *p;
    snprintf(ck_path, sizeof ck_path, "%s",
             (p = test_fixture_path("stories260K/stories260K.bin")) ? p : "");
    snprintf(tok_path, sizeof tok_path, "%s",
             (p = test_fixture_path("stories260K/tok512.bin")) ? p : "");
    snprintf(ref_path, sizeof ref_path, "%s",
             (p = test_fixture_path("stories260K/stories260K.gguf")) ? p : "");
    return 0;
}

static bool have_models(void) {
    return access(ck_path, R_OK) == 0 && access(tok_path, R_OK) == 0 && access(ref_path, R_OK) == 0;
}

/* Skips with the line test_model_path prints, naming the first absent fixture. */
static void skip_no_models(void) {
    test_model_path("stories260K/stories260K.bin");
    test_model_path("stories260K/tok512.bin");
    skip();
}

static void write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Deep equality of two values (floats bit for bit, so -0.0 != 0.0). */
static void assert_value_equal(const skv_gguf *ga, const skv_gguf_value *a, const skv_gguf *gb,
                               const skv_gguf_value *b, const char *key) {
    skv_gguf_vtype t = skv_gguf_value_type(a);
    if (t != skv_gguf_value_type(b)) fail_msg("key '%s': types differ", key);
    if (t == SKV_GGUF_STRING) {
        size_t la, lb;
        const char *sa = skv_gguf_value_str(ga, a, &la), *sb = skv_gguf_value_str(gb, b, &lb);
        if (la != lb || memcmp(sa, sb, la)) fail_msg("key '%s': '%s' != '%s'", key, sa, sb);
    } else if (t == SKV_GGUF_ARRAY) {
        skv_gguf_vtype et = skv_gguf_value_arr_type(a);
        uint64_t n = skv_gguf_value_arr_len(a);
        assert_int_equal(et, skv_gguf_value_arr_type(b));
        assert_int_equal(n, skv_gguf_value_arr_len(b));
        if (et == SKV_GGUF_STRING || et == SKV_GGUF_ARRAY) {
            for (uint64_t j = 0; j < n; j++)
                assert_value_equal(ga, skv_gguf_value_arr_elem(a, j), gb,
                                   skv_gguf_value_arr_elem(b, j), key);
        } else {
            size_t esz = et == SKV_GGUF_FLOAT32 || et == SKV_GGUF_INT32 || et == SKV_GGUF_UINT32 ? 4
                         : (et == SKV_GGUF_BOOL || et <= SKV_GGUF_INT8)                          ? 1
                                                                        : 0;
            assert_true(esz > 0); /* the reference only uses these */
            if (memcmp(skv_gguf_value_arr_data(a), skv_gguf_value_arr_data(b), n * esz))
                fail_msg("key '%s': array elements differ", key);
        }
    } else if (t == SKV_GGUF_FLOAT32 || t == SKV_GGUF_FLOAT64) {
        double x = 0, y = 0;
        assert_true(skv_gguf_value_float(a, &x) && skv_gguf_value_float(b, &y));
        if (memcmp(&x, &y, sizeof x)) fail_msg("key '%s': %g != %g", key, x, y);
    } else {
        int64_t x = 0, y = 0;
        assert_true(skv_gguf_value_int(a, &x) && skv_gguf_value_int(b, &y));
        if (x != y) fail_msg("key '%s': %lld != %lld", key, (long long)x, (long long)y);
    }
}

/* Every key (same order, type and value) and every tensor (type, shape, bytes) of ref is in out,
 * and out has nothing more. */
static void assert_same_model(const skv_gguf *ref, const skv_gguf *out) {
    assert_int_equal(skv_gguf_n_kv(ref), skv_gguf_n_kv(out));
    for (int64_t i = 0; i < skv_gguf_n_kv(ref); i++) {
        const char *key = skv_gguf_key(ref, i);
        assert_string_equal(key, skv_gguf_key(out, i));
        assert_value_equal(ref, skv_gguf_kv_value(ref, i), out, skv_gguf_kv_value(out, i), key);
    }
    assert_int_equal(skv_gguf_n_tensors(ref), skv_gguf_n_tensors(out));
    for (int64_t i = 0; i < skv_gguf_n_tensors(ref); i++) {
        const skv_gguf_tensor *a = skv_gguf_tensor_at(ref, i);
        int64_t j = skv_gguf_find_tensor(out, a->name);
        if (j < 0) fail_msg("tensor '%s' missing", a->name);
        const skv_gguf_tensor *b = skv_gguf_tensor_at(out, j);
        assert_int_equal(a->type, b->type);
        assert_int_equal(a->n_dims, b->n_dims);
        for (int d = 0; d < SKV_GGUF_MAX_DIMS; d++) assert_int_equal(a->ne[d], b->ne[d]);
        assert_int_equal(a->size, b->size);
        if (memcmp(a->data, b->data, a->size)) fail_msg("tensor '%s': data differs", a->name);
    }
}

static void test_stories260k_matches_reference(void **state) {
    (void)state;
    if (!have_models()) skip_no_models();
    char out[4096];
    snprintf(out, sizeof out, "%s", test_tmp_path("_stories260K.gguf"));
    skv_err err = {0};
    assert_int_equal(skv_convert_llama2c(ck_path, tok_path, out, &err), SKV_OK);
    skv_gguf *ref = skv_gguf_open(ref_path, &err);
    assert_non_null(ref);
    skv_gguf *g = skv_gguf_open(out, &err);
    assert_non_null(g);
    assert_int_equal(skv_gguf_version(g), 3);
    assert_int_equal(skv_gguf_n_kv(g), 22);
    assert_int_equal(skv_gguf_n_tensors(g), 47);
    assert_same_model(ref, g);
    /* the layout follows the reference too, so the files are identical */
    size_t na, nb;
    const void *pa = skv_gguf_file_data(ref, &na), *pb = skv_gguf_file_data(g, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(pa, pb, na);
    skv_gguf_close(g);
    skv_gguf_close(ref);
    unlink(out);
}

/* --rope-theta: the one value a checkpoint does not record is written as given; nonsense is
 * refused before anything is written. */
static void test_rope_theta(void **state) {
    (void)state;
    if (!have_models()) skip_no_models();
    char out[4096];
    snprintf(out, sizeof out, "%s", test_tmp_path("_theta.gguf"));
    skv_err err = {0};
    skv_llama2c_params p = skv_llama2c_default_params();
    assert_true(p.rope_theta == 10000.0f);
    p.rope_theta = 500000.0f;
    assert_int_equal(skv_convert_llama2c_ex(ck_path, tok_path, out, &p, &err), SKV_OK);
    skv_gguf *g = skv_gguf_open(out, &err);
    assert_non_null(g);
    double v = 0;
    assert_true(skv_gguf_kv_float(g, skv_gguf_find_key(g, "llama.rope.freq_base"), &v));
    assert_true(v == 500000.0);
    skv_gguf_close(g);
    unlink(out);
    const float bad[] = {0.0f, -1.0f, NAN, INFINITY};
    for (int i = 0; i < 4; i++) {
        p.rope_theta = bad[i];
        assert_int_equal(skv_convert_llama2c_ex(ck_path, tok_path, out, &p, &err),
                         SKV_ERR_INVALID_ARG);
        assert_non_null(strstr(err.msg, "RoPE base frequency"));
        assert_int_equal(access(out, F_OK), -1);
    }
}

/* Section offsets (in floats, after the 256-byte header) of the v1 file. */
enum {
    V1_RMS_ATT = 0,
    V1_RMS_FFN = V1_RMS_ATT + NL * DIM,
    V1_RMS_FINAL = V1_RMS_FFN + NL * DIM,
    V1_TOK = V1_RMS_FINAL + DIM,
    V1_WQ = V1_TOK + VOCAB * DIM,
    V1_WK = V1_WQ + NL * DIM * DIM,
    V1_WV = V1_WK + NL * KVD * DIM,
    V1_WO = V1_WV + NL * KVD * DIM,
    V1_W1 = V1_WO + NL * DIM * DIM,
    V1_W2 = V1_W1 + NL * HID * DIM,
    V1_W3 = V1_W2 + NL * DIM * HID,
    V1_END = V1_W3 + NL * HID * DIM,
};

typedef struct fbuf {
    uint8_t *p;
    size_t n, cap;
} fbuf;

/* The capacity doubles: one realloc per 4-byte append made test_v0_and_unshared take over five
 * minutes under ASan (its realloc always copies; 32,768 appends of a ~1 MB buffer). */
static void app(fbuf *b, const void *src, size_t bytes) {
    if (b->n + bytes > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + bytes) cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, bytes);
    b->n += bytes;
}

static void app_floats(fbuf *b, const float *w, size_t first, size_t count) {
    app(b, w + first, count * 4);
}

/* The legacy v0 layout rebuilt by hand from the v1 file; with a distinct classifier when
 * unshared (the token embedding negated). */
static fbuf make_v0(const uint8_t *v1, bool shared) {
    fbuf b = {0};
    int32_t hdr[7] = {DIM, HID, NL, NH, NKV, shared ? VOCAB : -VOCAB, SEQ};
    app(&b, hdr, sizeof hdr);
    const float *w = (const float *)(v1 + 256);
    app_floats(&b, w, V1_TOK, VOCAB * DIM);
    app_floats(&b, w, V1_RMS_ATT, NL * DIM);
    app_floats(&b, w, V1_WQ, NL * DIM * DIM);
    app_floats(&b, w, V1_WK, NL * KVD * DIM);
    app_floats(&b, w, V1_WV, NL * KVD * DIM);
    app_floats(&b, w, V1_WO, NL * DIM * DIM);
    app_floats(&b, w, V1_RMS_FFN, NL * DIM);
    app_floats(&b, w, V1_W1, NL * HID * DIM);
    app_floats(&b, w, V1_W2, NL * DIM * HID);
    app_floats(&b, w, V1_W3, NL * HID * DIM);
    app_floats(&b, w, V1_RMS_FINAL, DIM);
    float *rope = calloc(SEQ * HEAD, sizeof(float)); /* freq_cis_real + imag, ignored */
    for (int i = 0; i < SEQ * HEAD; i++) rope[i] = 1234.5f;
    app(&b, rope, SEQ * HEAD * sizeof(float));
    free(rope);
    if (!shared)
        for (int i = 0; i < VOCAB * DIM; i++) {
            float x = -w[V1_TOK + i];
            app(&b, &x, 4);
        }
    return b;
}

/* Converts ck (bytes) and checks it against the reference: identical except for the extra
 * output.weight of an unshared classifier. */
static void convert_and_compare(const fbuf *ck, bool shared) {
    /* general.name comes from the file name: keep it "stories260K.bin" in a private dir */
    char dir[4096], in[4200], out[4096];
    snprintf(dir, sizeof dir, "%s", test_tmp_path("_dir"));
    assert_int_equal(mkdir(dir, 0700), 0);
    snprintf(in, sizeof in, "%s/stories260K.bin", dir);
    snprintf(out, sizeof out, "%s", test_tmp_path(".gguf"));
    write_file(in, ck->p, ck->n);
    skv_err err = {0};
    if (skv_convert_llama2c(in, tok_path, out, &err) != SKV_OK) fail_msg("%s", err.msg);
    skv_gguf *ref = skv_gguf_open(ref_path, &err);
    skv_gguf *g = skv_gguf_open(out, &err);
    assert_non_null(ref);
    assert_non_null(g);
    int64_t oi = skv_gguf_find_tensor(g, "output.weight");
    if (shared) {
        assert_same_model(ref, g);
        assert_int_equal(oi, -1);
    } else {
        assert_int_equal(skv_gguf_n_tensors(g), 48);
        const skv_gguf_tensor *o = skv_gguf_tensor_at(g, oi);
        assert_non_null(o);
        assert_int_equal(o->ne[0], DIM);
        assert_int_equal(o->ne[1], VOCAB);
        const skv_gguf_tensor *e =
            skv_gguf_tensor_at(ref, skv_gguf_find_tensor(ref, "token_embd.weight"));
        const float *ov = o->data, *ev = e->data;
        for (int i = 0; i < VOCAB * DIM; i++) assert_true(ov[i] == -ev[i]);
        /* everything else as in the reference */
        for (int64_t i = 0; i < skv_gguf_n_tensors(ref); i++) {
            const skv_gguf_tensor *a = skv_gguf_tensor_at(ref, i);
            const skv_gguf_tensor *b = skv_gguf_tensor_at(g, skv_gguf_find_tensor(g, a->name));
            assert_non_null(b);
            assert_int_equal(a->size, b->size);
            assert_memory_equal(a->data, b->data, a->size);
        }
    }
    skv_gguf_close(g);
    skv_gguf_close(ref);
    unlink(in);
    unlink(out);
    rmdir(dir);
}

static void test_v0_and_unshared(void **state) {
    (void)state;
    if (!have_models()) skip_no_models();
    size_t n;
    uint8_t *v1 = test_read_file(ck_path, &n);
    assert_non_null(v1);
    assert_int_equal(n, 256 + (size_t)V1_END * 4); /* the README's layout, shared classifier */
    assert_int_equal(v1[36], 1);

    fbuf b = make_v0(v1, true);
    convert_and_compare(&b, true);
    free(b.p);
    b = make_v0(v1, false);
    convert_and_compare(&b, false);
    free(b.p);

    /* v1 with the shared flag cleared and a classifier appended */
    b = (fbuf){0};
    app(&b, v1, n);
    b.p[36] = 0;
    const float *emb = (const float *)(v1 + 256) + V1_TOK;
    for (int i = 0; i < VOCAB * DIM; i++) {
        float x = -emb[i];
        app(&b, &x, 4);
    }
    convert_and_compare(&b, false);
    free(b.p);
    free(v1);
}

static skv_status convert_bytes(const void *ck, size_t ck_n, const void *tok, size_t tok_n,
                                skv_err *err) {
    char in[4096], tk[4096], out[4096];
    snprintf(in, sizeof in, "%s", test_tmp_path(".bin"));
    snprintf(tk, sizeof tk, "%s", test_tmp_path(".tok"));
    snprintf(out, sizeof out, "%s", test_tmp_path(".gguf"));
    write_file(in, ck, ck_n);
    write_file(tk, tok, tok_n);
    skv_status st = skv_convert_llama2c(in, tk, out, err);
    if (st != SKV_OK) assert_int_equal(access(out, F_OK), -1); /* no partial output */
    unlink(in);
    unlink(tk);
    unlink(out);
    return st;
}

static void expect_error(const void *ck, size_t ck_n, const void *tok, size_t tok_n,
                         skv_status want, const char *substr) {
    skv_err err = {0};
    skv_status st = convert_bytes(ck, ck_n, tok, tok_n, &err);
    if (st != want || !strstr(err.msg, substr))
        fail_msg("status %d message '%s', expected %d with '%s'", st, err.msg, want, substr);
}

static void test_bad_inputs(void **state) {
    (void)state;
    if (!have_models()) skip_no_models();
    size_t n, tn;
    uint8_t *ck = test_read_file(ck_path, &n);
    uint8_t *tok = test_read_file(tok_path, &tn);
    assert_non_null(ck);
    assert_non_null(tok);
    /* truncated checkpoint: named, with both sizes */
    expect_error(ck, n - 4, tok, tn, SKV_ERR_FORMAT, "is truncated");
    expect_error(ck, n / 2, tok, tn, SKV_ERR_FORMAT, "needs 1040384 bytes but the file has");
    expect_error(ck, 100, tok, tn, SKV_ERR_FORMAT, "is truncated");
    expect_error(ck, 10, tok, tn, SKV_ERR_FORMAT, "smaller than a llama2.c header");
    /* extra bytes */
    uint8_t *big = malloc(n + 4);
    memcpy(big, ck, n);
    memset(big + n, 0, 4);
    expect_error(big, n + 4, tok, tn, SKV_ERR_FORMAT, "more than the 1040384");
    /* bad header fields */
    memcpy(big, ck, n);
    big[4] = 2; /* version 2: int8 quantized */
    expect_error(big, n, tok, tn, SKV_ERR_UNSUPPORTED, "version 2");
    memcpy(big, ck, n);
    memcpy(big + 8, &(int32_t){0}, 4); /* dim 0 */
    expect_error(big, n, tok, tn, SKV_ERR_FORMAT, "non-positive");
    memcpy(big, ck, n);
    memcpy(big + 8 + 12, &(int32_t){7}, 4); /* n_heads 7 does not divide dim 64 */
    expect_error(big, n, tok, tn, SKV_ERR_FORMAT, "inconsistent");
    memcpy(big, ck, n);
    memcpy(big + 8 + 20, &(int32_t){0x7fffffff}, 4); /* absurd vocab */
    expect_error(big, n, tok, tn, SKV_ERR_FORMAT, "is truncated");
    memcpy(big, ck, n);
    big[36] = 7;
    expect_error(big, n, tok, tn, SKV_ERR_FORMAT, "shared_classifier");
    free(big);
    /* tokenizer problems */
    expect_error(ck, n, tok, tn - 3, SKV_ERR_FORMAT, "tokenizer");
    expect_error(ck, n, tok, 100, SKV_ERR_FORMAT, "too small to hold the checkpoint's 512");
    uint8_t *tk2 = malloc(tn + 1);
    memcpy(tk2, tok, tn);
    tk2[tn] = 'x';
    expect_error(ck, n, tk2, tn + 1, SKV_ERR_FORMAT, "1 bytes after its 512 tokens");
    memcpy(tk2, tok, tn);
    memcpy(tk2 + 4 + 4, &(int32_t){1 << 30}, 4); /* token 0's length */
    expect_error(ck, n, tk2, tn, SKV_ERR_FORMAT, "token 0 has length 1073741824");
    free(tk2);
    /* missing files */
    skv_err err;
    assert_int_equal(skv_convert_llama2c("/nonexistent/ck.bin", tok_path, "/tmp/x.gguf", &err),
                     SKV_ERR_IO);
    assert_non_null(strstr(err.msg, "/nonexistent/ck.bin"));
    free(ck);
    free(tok);
}

static void test_cli_command(void **state) {
    (void)state;
    const char *cli = test_cli();
    if (access(cli, X_OK) != 0) skip();
    char cmd[20000];
    int status;
    snprintf(cmd, sizeof cmd, "%s convert-llama2c --help", cli);
    char *out = test_run(cmd, &status);
    assert_int_equal(status, 0);
    assert_non_null(strstr(out, "usage: sparsekv convert-llama2c"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s convert-llama2c a.bin 2>/dev/null", cli);
    free(test_run(cmd, &status));
    assert_int_equal(status, 2);
    snprintf(cmd, sizeof cmd, "%s convert-llama2c --bogus a b c 2>/dev/null", cli);
    free(test_run(cmd, &status));
    assert_int_equal(status, 2);
    snprintf(cmd, sizeof cmd, "%s convert-llama2c /nonexistent.bin %s /tmp/never.gguf 2>&1", cli,
             *tok_path ? tok_path : "tok512.bin"); /* the checkpoint is opened first */
    out = test_run(cmd, &status);
    assert_int_equal(status, 2); /* bad input, as for every command */
    assert_non_null(strstr(out, "sparsekv convert-llama2c: cannot open checkpoint"));
    free(out);
    char text[4096];
    snprintf(text, sizeof text, "%s", test_tmp_path(".md"));
    FILE *f = fopen(text, "w");
    assert_non_null(f);
    fputs("# not a checkpoint, long enough for a header\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s convert-llama2c %s %s /tmp/never.gguf 2>/dev/null", cli, text,
             *tok_path ? tok_path : "tok512.bin");
    free(test_run(cmd, &status));
    assert_int_equal(status, 2);
    unlink(text);
    assert_true(access("/tmp/never.gguf", F_OK) != 0);
    if (!have_models()) return;
    /* good inputs and an output in no directory: refused, the directory named */
    snprintf(cmd, sizeof cmd, "%s convert-llama2c %s %s /nonexistent-dir/x.gguf 2>&1", cli, ck_path,
             tok_path);
    out = test_run(cmd, &status);
    assert_int_equal(status, 2);
    assert_non_null(strstr(out, "/nonexistent-dir"));
    free(out);
    char dst[4096];
    snprintf(dst, sizeof dst, "%s", test_tmp_path(".gguf"));
    /* an existing output is kept without --overwrite, replaced with it */
    f = fopen(dst, "w");
    assert_non_null(f);
    fputs("keep me\n", f);
    fclose(f);
    snprintf(cmd, sizeof cmd, "%s convert-llama2c %s %s %s 2>&1", cli, ck_path, tok_path, dst);
    out = test_run(cmd, &status);
    assert_int_equal(status, 2);
    assert_non_null(strstr(out, "--overwrite"));
    free(out);
    size_t nk;
    char *kept = test_read_file(dst, &nk);
    assert_true(kept && nk == 8 && !memcmp(kept, "keep me\n", 8));
    free(kept);
    snprintf(cmd, sizeof cmd, "%s convert-llama2c --overwrite %s %s %s", cli, ck_path, tok_path,
             dst);
    free(test_run(cmd, &status));
    assert_int_equal(status, 0);
    size_t na, nb;
    void *a = test_read_file(dst, &na), *b = test_read_file(ref_path, &nb);
    assert_non_null(a);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    free(a);
    free(b);
    unlink(dst);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stories260k_matches_reference),
        cmocka_unit_test(test_rope_theta),
        cmocka_unit_test(test_v0_and_unshared),
        cmocka_unit_test(test_bad_inputs),
        cmocka_unit_test(test_cli_command),
    };
    return cmocka_run_group_tests(tests, setup, NULL);
}
