/* test_quant_mix.c — the Q4_K_M mix: its layer rule against hand-listed layers, and a
 * hand-built GGUF (K-quant-wide rows) quantized to it: every tensor's type by its role, the
 * file type, and each matrix's values back within its type's error (searched vs simple). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "gguf.h"
#include "kernels/kernels.h"
#include "sparsekv.h"
#include "support.h"
#include "model/synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The layers that get Q6_K, listed by hand from the rule "the first and last eighth (n/8 and
 * 7n/8 rounded down), and every third layer from n/8 + 2 on". */
static void test_more_bits_rule(void **s) {
    (void)s;
    const int l30[] = {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 26, 27, 28, 29}; /* SmolLM2-135M */
    const int l32[] = {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31};
    const int l8[] = {0, 3, 6, 7};
    const int l5[] = {2, 4}; /* stories260K: n/8 = 0, 7n/8 = 4 */
    const struct {
        int n;
        const int *l;
        int nl;
    } c[] = {{30, l30, 14}, {32, l32, 16}, {8, l8, 4}, {5, l5, 2}};
    for (int k = 0; k < 4; k++) {
        int got = 0;
        for (int i = 0; i < c[k].n; i++) {
            bool want = false;
            for (int j = 0; j < c[k].nl; j++) want |= c[k].l[j] == i;
            assert_int_equal(skv_quant_mix_more_bits(i, c[k].n), want);
            got += want;
        }
        assert_int_equal(got, c[k].nl);
    }
    assert_false(skv_quant_mix_more_bits(-1, 8));
    assert_false(skv_quant_mix_more_bits(8, 8));
}

static void test_mix_types(void **s) {
    (void)s;
    const skv_quant_mix m = SKV_QMIX_Q4_K_M;
    assert_int_equal(skv_quant_mix_type(m, "output.weight", 8, 1, true), SKV_TYPE_Q6_K);
    assert_int_equal(skv_quant_mix_type(m, "token_embd.weight", 8, 1, true), SKV_TYPE_Q4_K);
    assert_int_equal(skv_quant_mix_type(m, "token_embd.weight", 8, 1, false), SKV_TYPE_Q6_K);
    assert_int_equal(skv_quant_mix_type(m, "blk.3.attn_v.weight", 8, 1, true), SKV_TYPE_Q6_K);
    assert_int_equal(skv_quant_mix_type(m, "blk.4.attn_v.weight", 8, 1, true), SKV_TYPE_Q4_K);
    assert_int_equal(skv_quant_mix_type(m, "blk.7.ffn_down.weight", 8, 1, true), SKV_TYPE_Q6_K);
    assert_int_equal(skv_quant_mix_type(m, "blk.7.ffn_up.weight", 8, 1, true), SKV_TYPE_Q4_K);
    assert_int_equal(skv_quant_mix_type(m, "blk.0.attn_k.weight", 8, 1, true), SKV_TYPE_Q4_K);
    assert_int_equal(skv_quant_mix_type(m, "blk.x.attn_v.weight", 8, 1, true), SKV_TYPE_Q4_K);
    assert_int_equal(skv_quant_mix_type(m, "blk.12.attn_v.weight", 8, 1, true), SKV_TYPE_Q4_K);
    /* Q2_K_M, llama-quantize's Q2_K: Q6_K output (or tied embedding), Q3_K attn_output and
     * ffn_down, attn_v Q4_K from 4 query heads per kv head (else Q3_K), Q2_K elsewhere */
    const skv_quant_mix q2 = SKV_QMIX_Q2_K_M;
    assert_int_equal(skv_quant_mix_type(q2, "output.weight", 8, 1, true), SKV_TYPE_Q6_K);
    assert_int_equal(skv_quant_mix_type(q2, "token_embd.weight", 8, 1, true), SKV_TYPE_Q2_K);
    assert_int_equal(skv_quant_mix_type(q2, "token_embd.weight", 8, 1, false), SKV_TYPE_Q6_K);
    assert_int_equal(skv_quant_mix_type(q2, "blk.0.attn_v.weight", 8, 1, true), SKV_TYPE_Q3_K);
    assert_int_equal(skv_quant_mix_type(q2, "blk.0.attn_v.weight", 8, 3, true), SKV_TYPE_Q3_K);
    assert_int_equal(skv_quant_mix_type(q2, "blk.5.attn_v.weight", 8, 4, true), SKV_TYPE_Q4_K);
    assert_int_equal(skv_quant_mix_type(q2, "blk.7.ffn_down.weight", 8, 4, true), SKV_TYPE_Q3_K);
    assert_int_equal(skv_quant_mix_type(q2, "blk.2.attn_output.weight", 8, 4, true), SKV_TYPE_Q3_K);
    assert_int_equal(skv_quant_mix_type(q2, "blk.2.ffn_up.weight", 8, 4, true), SKV_TYPE_Q2_K);
    assert_int_equal(skv_quant_mix_type(q2, "blk.2.attn_q.weight", 8, 4, true), SKV_TYPE_Q2_K);
    assert_int_equal(skv_quant_mix_ftype(q2), 10);
    /* Q3_K_M, llama-quantize's: Q6_K output, attn_v Q5_K in layers 0-1 else Q4_K, ffn_down Q5_K
     * in the first n_layer/16 layers else Q4_K, attn_output and attn_qkv Q4_K, Q3_K elsewhere */
    const skv_quant_mix q3 = SKV_QMIX_Q3_K_M;
    assert_int_equal(skv_quant_mix_type(q3, "output.weight", 32, 4, true), SKV_TYPE_Q6_K);
    assert_int_equal(skv_quant_mix_type(q3, "token_embd.weight", 32, 4, true), SKV_TYPE_Q3_K);
    assert_int_equal(skv_quant_mix_type(q3, "token_embd.weight", 32, 4, false), SKV_TYPE_Q6_K);
    assert_int_equal(skv_quant_mix_type(q3, "blk.1.attn_v.weight", 32, 4, true), SKV_TYPE_Q5_K);
    assert_int_equal(skv_quant_mix_type(q3, "blk.2.attn_v.weight", 32, 4, true), SKV_TYPE_Q4_K);
    assert_int_equal(skv_quant_mix_type(q3, "blk.1.ffn_down.weight", 32, 4, true), SKV_TYPE_Q5_K);
    assert_int_equal(skv_quant_mix_type(q3, "blk.2.ffn_down.weight", 32, 4, true), SKV_TYPE_Q4_K);
    assert_int_equal(skv_quant_mix_type(q3, "blk.0.ffn_down.weight", 15, 4, true), SKV_TYPE_Q4_K);
    assert_int_equal(skv_quant_mix_type(q3, "blk.9.attn_output.weight", 32, 4, true),
                     SKV_TYPE_Q4_K);
    assert_int_equal(skv_quant_mix_type(q3, "blk.9.attn_qkv.weight", 32, 4, true), SKV_TYPE_Q4_K);
    assert_int_equal(skv_quant_mix_type(q3, "blk.9.ffn_gate.weight", 32, 4, true), SKV_TYPE_Q3_K);
    assert_int_equal(skv_quant_mix_type(q3, "blk.9.attn_k.weight", 32, 4, true), SKV_TYPE_Q3_K);
    assert_int_equal(skv_quant_mix_ftype(q3), 12);
    /* Q4_K_M's fused q/k/v (phi3's attn_qkv): Q5_K, as llama-quantize */
    assert_int_equal(skv_quant_mix_type(m, "blk.4.attn_qkv.weight", 8, 1, true), SKV_TYPE_Q5_K);
    assert_int_equal(skv_quant_mix_ftype(m), 15);
    assert_int_equal(skv_quant_mix_ftype(SKV_QMIX_NONE), 0);
}

/* ---- a hand-built file -------------------------------------------------------------------- */

enum { NL = 8, COLS = 256, ROWS = 4 };
static const char *roles[] = {"attn_q", "attn_v", "ffn_down", "ffn_up"};

static uint64_t rs = 12345;
static float rnd(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rs >> 11) * 0x1p-53 - 0.5);
}

typedef struct file {
    char names[NL * 4 + 3][48];
    float *data[NL * 4 + 3];
    int n;
} file;

static void add_cols(file *f, skv_gguf_writer *w, const char *name, int nd, int64_t cols,
                     int64_t rows) {
    int i = f->n++;
    snprintf(f->names[i], sizeof f->names[i], "%s", name);
    int64_t ne[2] = {cols, rows};
    size_t nv = (size_t)(nd == 1 ? cols : cols * rows);
    f->data[i] = malloc(nv * sizeof(float));
    for (size_t j = 0; j < nv; j++) f->data[i][j] = nd == 1 ? 1.0f : rnd();
    assert_int_equal(skv_gguf_writer_add_tensor(w, f->names[i], SKV_TYPE_F32, nd, ne, f->data[i]),
                     SKV_OK);
}

static void add(file *f, skv_gguf_writer *w, const char *name, int nd, int64_t rows) {
    add_cols(f, w, name, nd, COLS, rows);
}

/* heads / kv_heads: llama.attention.head_count(_kv) to write (0: none). */
static char *write_file_heads(file *f, bool with_output, int heads, int kv_heads) {
    memset(f, 0, sizeof *f);
    skv_gguf_writer *w = skv_gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(skv_gguf_writer_set_str(w, "general.architecture", "llama"), SKV_OK);
    if (heads) {
        assert_int_equal(skv_gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)heads),
                         SKV_OK);
        assert_int_equal(
            skv_gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)kv_heads),
            SKV_OK);
    }
    add(f, w, "token_embd.weight", 2, 16);
    for (int l = 0; l < NL; l++)
        for (int r = 0; r < 4; r++) {
            char name[48];
            snprintf(name, sizeof name, "blk.%d.%s.weight", l, roles[r]);
            add(f, w, name, 2, ROWS);
        }
    add(f, w, "output_norm.weight", 1, 1);
    if (with_output) add(f, w, "output.weight", 2, 16);
    char *path = strdup(test_tmp_path(".gguf"));
    skv_err err = {0};
    assert_int_equal(skv_gguf_writer_write(w, path, &err), SKV_OK);
    skv_gguf_writer_free(w);
    return path;
}

static char *write_file(file *f, bool with_output) {
    return write_file_heads(f, with_output, 0, 0);
}

static skv_type expected(const char *name, bool with_output) {
    if (!strcmp(name, "output_norm.weight")) return SKV_TYPE_F32;
    if (!strcmp(name, "output.weight")) return SKV_TYPE_Q6_K;
    if (!strcmp(name, "token_embd.weight")) return with_output ? SKV_TYPE_Q4_K : SKV_TYPE_Q6_K;
    int l;
    char role[32];
    assert_int_equal(sscanf(name, "blk.%d.%31[a-z_]", &l, role), 2);
    bool wide = l == 0 || l == 3 || l == 6 || l == 7; /* NL = 8: 8/8 = 1, 7*8/8 = 7 */
    if ((!strcmp(role, "attn_v") || !strcmp(role, "ffn_down")) && wide) return SKV_TYPE_Q6_K;
    return SKV_TYPE_Q4_K;
}

static int64_t int_key(const skv_gguf *g, const char *key) {
    int64_t i = skv_gguf_find_key(g, key), v = -1;
    assert_true(i >= 0);
    assert_true(skv_gguf_kv_int(g, i, &v));
    return v;
}

/* rms of (file tensor i - original) relative to the original's rms. */
static double rel_rms(const skv_gguf_tensor *t, const float *x) {
    int64_t n = t->ne[0] * (t->n_dims > 1 ? t->ne[1] : 1);
    float *y = malloc((size_t)n * sizeof *y);
    for (int64_t r = 0; r < n / t->ne[0]; r++)
        skv_dequantize_row(t->type, (const char *)t->data + r * skv_row_bytes(t->type, t->ne[0]),
                           y + r * t->ne[0], t->ne[0]);
    double e = 0, s = 0;
    for (int64_t i = 0; i < n; i++) {
        e += pow((double)y[i] - x[i], 2);
        s += (double)x[i] * x[i];
    }
    free(y);
    return sqrt(e / s);
}

static void check_mix(bool with_output) {
    file f;
    char *in = write_file(&f, with_output);
    double err_sum[2] = {0, 0};
    for (int simple = 0; simple < 2; simple++) {
        char *out = strdup(test_tmp_path(".gguf"));
        skv_quantize_opts o = {.mix = SKV_QMIX_Q4_K_M, .n_threads = 2, .simple = simple};
        skv_quantize_report rep;
        skv_err err = {0};
        assert_int_equal(skv_quantize_model_opts(in, out, &o, &rep, &err), SKV_OK);
        skv_gguf *g = skv_gguf_open(out, &err);
        assert_non_null(g);
        assert_int_equal(int_key(g, "general.file_type"), 15); /* llama.cpp's MOSTLY_Q4_K_M */
        assert_int_equal(skv_gguf_n_tensors(g), f.n);
        int n6 = 0, n4 = 0;
        for (int i = 0; i < f.n; i++) {
            const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
            assert_string_equal(t->name, f.names[i]);
            skv_type want = expected(t->name, with_output);
            assert_int_equal(t->type, want);
            n6 += want == SKV_TYPE_Q6_K;
            n4 += want == SKV_TYPE_Q4_K;
            double r = rel_rms(t, f.data[i]);
            /* Uniform data in [-0.5, 0.5): rms 1/sqrt(12) = 0.289. Q4_K steps of at most
             * 1/15 of a sub-block's range (<= 1) err by step/sqrt(12) rms: <= 6.7% of the data's
             * rms; Q6_K steps of 1/32 of max |x| (<= 0.5): <= 1.6%. */
            if (want == SKV_TYPE_F32) assert_true(r == 0.0);
            if (want == SKV_TYPE_Q6_K) assert_true(r < 0.017);
            if (want == SKV_TYPE_Q4_K) assert_true(r < 0.07);
            if (getenv("SKV_TEST_VERBOSE"))
                printf("# %s %s %.4f\n", simple ? "simple" : "search", t->name, r);
            err_sum[simple] += r;
        }
        assert_int_equal(rep.n_by_type[SKV_TYPE_Q6_K], n6);
        assert_int_equal(rep.n_by_type[SKV_TYPE_Q4_K], n4);
        assert_int_equal(n6, 2 * 4 + (with_output ? 1 : 1)); /* 4 wide layers x 2 roles + output */
        skv_gguf_close(g);
        unlink(out);
        free(out);
    }
    assert_true(err_sum[0] < err_sum[1]); /* the search beats min/max over the whole file */
    unlink(in);
    free(in);
    for (int i = 0; i < f.n; i++) free(f.data[i]);
}

static void test_mix_file_untied(void **s) {
    (void)s;
    check_mix(true);
}

static void test_mix_file_tied(void **s) {
    (void)s;
    check_mix(false);
}

/* Rows the K-quants cannot take: a multiple of 32 (288) falls back to the 32-block type above
 * what the mix asked (Q6_K -> Q8_0, Q4_K -> Q5_0), of neither (100) to F16; the 256-wide ones
 * keep the mix. Read back: each
 * tensor's type, and its values within the fallback type's error. The CLI says how many matrices
 * fell back to which type. */
static void test_mix_fallback(void **s) {
    (void)s;
    file f;
    memset(&f, 0, sizeof f);
    skv_gguf_writer *w = skv_gguf_writer_new();
    assert_non_null(w);
    assert_int_equal(skv_gguf_writer_set_str(w, "general.architecture", "llama"), SKV_OK);
    add_cols(&f, w, "token_embd.weight", 2, 288, 16); /* the tied output: Q6_K asked */
    add_cols(&f, w, "blk.0.attn_q.weight", 2, 288, 4);
    add_cols(&f, w, "blk.0.attn_v.weight", 2, 288, 4); /* layer 0: Q6_K asked */
    add_cols(&f, w, "blk.0.ffn_up.weight", 2, 256, 4);
    add_cols(&f, w, "blk.0.ffn_down.weight", 2, 100, 4);
    add_cols(&f, w, "output_norm.weight", 1, 288, 1);
    char *in = strdup(test_tmp_path(".gguf")), *out = strdup(test_tmp_path(".gguf"));
    skv_err err = {0};
    assert_int_equal(skv_gguf_writer_write(w, in, &err), SKV_OK);
    skv_gguf_writer_free(w);

    skv_quantize_opts o = {.mix = SKV_QMIX_Q4_K_M, .n_threads = 2};
    skv_quantize_report rep;
    assert_int_equal(skv_quantize_model_opts(in, out, &o, &rep, &err), SKV_OK);
    assert_int_equal(rep.n_fallback, 4);
    assert_int_equal(rep.n_fallback_by_type[SKV_TYPE_Q8_0], 2);
    assert_int_equal(rep.n_fallback_by_type[SKV_TYPE_Q5_0], 1);
    assert_int_equal(rep.n_fallback_by_type[SKV_TYPE_F16], 1);
    assert_non_null(strstr(rep.fallback_names, "blk.0.ffn_down.weight"));
    assert_null(strstr(rep.fallback_names, "ffn_up"));
    const skv_type want[] = {SKV_TYPE_Q8_0, SKV_TYPE_Q5_0, SKV_TYPE_Q8_0,
                             SKV_TYPE_Q4_K, SKV_TYPE_F16,  SKV_TYPE_F32};
    skv_gguf *g = skv_gguf_open(out, &err);
    assert_non_null(g);
    assert_int_equal(skv_gguf_n_tensors(g), f.n);
    for (int i = 0; i < f.n; i++) {
        const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
        assert_string_equal(t->name, f.names[i]);
        assert_int_equal(t->type, want[i]);
        /* uniform data in [-0.5, 0.5), rms 0.289: Q8_0 steps of max|x|/127 (<= 0.0039) err by
         * step/sqrt(12) rms, <= 0.4% of it; Q5_0 steps of max|x|/16 (<= 0.031): 3.1%; F16 by at
         * most 2^-11 relative; Q4_K as in check_mix */
        double bound = want[i] == SKV_TYPE_Q8_0   ? 0.0045
                       : want[i] == SKV_TYPE_Q5_0 ? 0.036
                       : want[i] == SKV_TYPE_F16  ? 4.9e-4
                                                  : 0.07;
        if (want[i] == SKV_TYPE_F32) bound = 0;
        double r = rel_rms(t, f.data[i]);
        if (getenv("SKV_TEST_VERBOSE"))
            fprintf(stderr, "# %s %s %.5f\n", t->name, skv_type_name(t->type), r);
        assert_true(r <= bound);
    }
    skv_gguf_close(g);
    unlink(out);

    char *o2 = test_cli_expect(0, "quantize %s %s q4_k_m -t 1 2>&1", in, out);
    assert_non_null(strstr(o2, "4 matrices cannot take q4_k_m"));
    assert_non_null(strstr(o2, "written in f16 (1), q5_0 (1), q8_0 (2) instead"));
    assert_non_null(strstr(o2, "4 fell back to f16 (1), q5_0 (1), q8_0 (2)"));
    assert_non_null(strstr(o2, "matrices: 1 f16, 1 q5_0, 2 q8_0, 1 q4_k"));
    free(o2);
    unlink(in);
    unlink(out);
    free(in);
    free(out);
    for (int i = 0; i < f.n; i++) free(f.data[i]);
}

/* The CLI: `quantize ... q4_k_m` prints the mix, `info` shows it. */
static void test_mix_cli(void **s) {
    (void)s;
    file f;
    char *in = write_file(&f, true);
    char *out = strdup(test_tmp_path(".gguf"));
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s quantize %s %s Q4_K_M -t 1 2>&1", test_cli(), in, out);
    int st;
    char *o = test_run(cmd, &st);
    assert_int_equal(st, 0);
    assert_non_null(strstr(o, "matrices: 25 q4_k, 9 q6_k"));
    free(o);
    unlink(in);
    unlink(out);
    free(in);
    free(out);
    for (int i = 0; i < f.n; i++) free(f.data[i]);
}

/* The type the Q2_K_M or Q3_K_M mix gives tensor n of the hand-built file (8 layers: n_layer/16
 * = 0, so no ffn_down of Q3_K_M's takes Q5_K); tied: token_embd is the output; gqa4: 4 or more
 * query heads per kv head. */
static skv_type low_mix_expected(skv_quant_mix mix, const char *n, bool tied, bool gqa4) {
    if (!strcmp(n, "output_norm.weight")) return SKV_TYPE_F32;
    if (!strcmp(n, "output.weight") || (tied && !strcmp(n, "token_embd.weight")))
        return SKV_TYPE_Q6_K;
    int l = -1;
    sscanf(n, "blk.%d.", &l);
    if (mix == SKV_QMIX_Q2_K_M)
        return strstr(n, ".attn_v.")     ? (gqa4 ? SKV_TYPE_Q4_K : SKV_TYPE_Q3_K)
               : strstr(n, ".ffn_down.") ? SKV_TYPE_Q3_K
                                         : SKV_TYPE_Q2_K;
    return strstr(n, ".attn_v.")     ? (l < 2 ? SKV_TYPE_Q5_K : SKV_TYPE_Q4_K)
           : strstr(n, ".ffn_down.") ? SKV_TYPE_Q4_K
                                     : SKV_TYPE_Q3_K;
}

/* The Q2_K_M and Q3_K_M mixes on the hand-built file: every tensor's type by its role (Q2_K_M's
 * attn_v by the file's heads per kv head: none written, 12 / 4, 32 / 8), the file type (10, 12),
 * each matrix back within its type's error. */
static void test_low_mixes_file(void **s) {
    (void)s;
    const int heads[3][2] = {{0, 0}, {12, 4}, {32, 8}};
    for (int mi = 0; mi < 2; mi++)
        for (int k = 0; k < 3; k++) {
            const skv_quant_mix mix = mi ? SKV_QMIX_Q3_K_M : SKV_QMIX_Q2_K_M;
            if (mi && k == 2) continue;
            file f;
            char *in = write_file_heads(&f, k != 1, heads[k][0], heads[k][1]);
            char *out = strdup(test_tmp_path(".gguf"));
            skv_quantize_opts o = {.mix = mix, .n_threads = 2};
            skv_quantize_report rep;
            skv_err err = {0};
            assert_int_equal(skv_quantize_model_opts(in, out, &o, &rep, &err), SKV_OK);
            skv_gguf *g = skv_gguf_open(out, &err);
            assert_non_null(g);
            /* llama.cpp's MOSTLY_Q2_K, MOSTLY_Q3_K_M */
            assert_int_equal(int_key(g, "general.file_type"), mi ? 12 : 10);
            for (int i = 0; i < f.n; i++) {
                const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
                const skv_type want = low_mix_expected(mix, t->name, k == 1, k == 2);
                if (t->type != want)
                    fail_msg("%s: %s, want %s", t->name, skv_type_name(t->type),
                             skv_type_name(want));
                /* uniform data: steps of a sub-block's range over 3 (Q2_K), 7 (Q3_K), 15 (Q4_K),
                 * 31 (Q5_K), 1/32 of max |x| (Q6_K), each erring by about step / sqrt(12) rms */
                const double r = rel_rms(t, f.data[i]);
                const double bound = want == SKV_TYPE_F32    ? 0.0
                                     : want == SKV_TYPE_Q2_K ? 0.40
                                     : want == SKV_TYPE_Q3_K ? 0.17
                                     : want == SKV_TYPE_Q4_K ? 0.07
                                     : want == SKV_TYPE_Q5_K ? 0.035
                                                             : 0.017;
                if (!(r <= bound))
                    fail_msg("%s: rms error %.4f of the data's, over %.3f", t->name, r, bound);
            }
            skv_gguf_close(g);
            unlink(out);
            unlink(in);
            free(out);
            free(in);
            for (int i = 0; i < f.n; i++) free(f.data[i]);
        }
    char *o2 = test_cli_expect(2, "quantize a.gguf b.gguf q2_k_x 2>&1");
    assert_non_null(strstr(o2, "q2_k_m, q3_k_m, q4_k_m"));
    free(o2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_more_bits_rule),  cmocka_unit_test(test_mix_types),
        cmocka_unit_test(test_mix_file_untied), cmocka_unit_test(test_mix_file_tied),
        cmocka_unit_test(test_mix_cli),         cmocka_unit_test(test_mix_fallback),
        cmocka_unit_test(test_low_mixes_file),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
