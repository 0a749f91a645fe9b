/* test_arch.c — the real architectures (llama with rope_freqs, qwen2, qwen3, phi3, mistral3):
 *   - logits of the shared fixtures (llama.cpp's, F32) within 2e-3, and the float64 reference
 *     (tests/ref_forward.c) against the same fixtures;
 *   - batched prefill = token by token;
 *   - the RoPE descriptor: SIMD = scalar, composition (what re-rotation relies on);
 *   - compressed cache = dense cache with the dropped entries masked, original and rerotate
 *     positions, f32 and f16 caches, on a NEOX model (qwen2) and on a rope_freqs model (llama3);
 *   - rerotated keys = keys freshly rotated at their new index;
 *   - malformed files: a clear error, never a crash. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "context.h"
#include "gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "model/synth.h"
#include "ref_forward.h"
#include "rope.h"
#include "sparsekv.h"
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const ARCHS[] = {"llama3", "qwen2", "qwen3", "phi3"};
#define N_ARCHS 4

static bool verbose(void) {
    return getenv("SKV_TEST_VERBOSE") != NULL;
}

static const char *fixture(const char *name, const char *ext) {
    static char rel[128];
    snprintf(rel, sizeof rel, "archs/%s-tiny.%s", name, ext);
    return test_model_path(rel);
}

/* The fixture's token ids (a JSON array of integers, or an object holding one). */
static int read_ids(const char *name, int32_t *ids, int cap) {
    size_t sz;
    char *s = test_read_file(fixture(name, "ids.json"), &sz);
    assert_non_null(s);
    int n = 0;
    const char *p = strchr(s, '[');
    assert_non_null(p);
    p++;
    while (*p && *p != ']' && n < cap) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) {
            p++;
            continue;
        }
        ids[n++] = (int32_t)v;
        p = end;
    }
    free(s);
    return n;
}

static skv_model *load_weights(const char *name) {
    skv_err err = {0};
    skv_model *m = skv_model_load_weights(fixture(name, "gguf"), &err);
    if (!m) fprintf(stderr, "%s: %s\n", name, err.msg);
    assert_non_null(m);
    return m;
}

static skv_context *new_ctx(const skv_model *m, skv_type kv, int threads, int capture) {
    return test_context(m, kv, 512, threads, capture);
}

/* ---- fixtures ---------------------------------------------------------------------------- */

static void test_fixture_logits(void **state) {
    (void)state;
    for (int a = 0; a < N_ARCHS; a++) {
        skv_model *m = load_weights(ARCHS[a]);
        const int V = skv_model_hparams(m)->n_vocab;
        int32_t ids[400];
        int n = read_ids(ARCHS[a], ids, 400);
        assert_int_equal(n, 300);
        size_t sz;
        float *want = test_read_file(fixture(ARCHS[a], "logits.f32"), &sz);
        assert_non_null(want);
        assert_int_equal(sz, (size_t)n * V * sizeof(float));
        float *got = malloc(sz);
        skv_context *ctx = new_ctx(m, SKV_TYPE_F32, 2, 0);
        test_feed(ctx, ids, n, SKV_LOGITS_ALL, got);
        double worst = test_max_abs_diff(got, want, (size_t)n * V);
        fprintf(stderr, "  %s-tiny: max |logit - llama.cpp| over %d x %d = %.3g\n", ARCHS[a], n, V,
                worst);
        assert_true(worst < 2e-3);
        skv_context_free(ctx);
        free(got);
        free(want);
        skv_model_free(m);
    }
}

/* The float64 reference against the same fixtures (its first 64 positions): the reference is
 * right before the engine is checked against it below. */
static void test_reference_matches_fixtures(void **state) {
    (void)state;
    const int n = 64;
    for (int a = 0; a < N_ARCHS; a++) {
        ref_model *rm = ref_model_load(fixture(ARCHS[a], "gguf"));
        assert_non_null(rm);
        int V = ref_model_n_vocab(rm);
        int32_t ids[400];
        read_ids(ARCHS[a], ids, 400);
        size_t sz;
        float *want = test_read_file(fixture(ARCHS[a], "logits.f32"), &sz);
        double *ref = malloc((size_t)n * V * sizeof(double));
        ref_forward(rm, ids, n, ref, NULL, NULL);
        double worst = 0;
        for (size_t i = 0; i < (size_t)n * V; i++) worst = fmax(worst, fabs(ref[i] - want[i]));
        fprintf(stderr, "  %s-tiny: float64 reference vs llama.cpp (64 positions) = %.3g\n",
                ARCHS[a], worst);
        assert_true(worst < 1e-4);
        free(ref);
        free(want);
        ref_model_free(rm);
    }
}

/* One batch = one token at a time = batches of 7, on every architecture and cache type. */
static void test_batched_equals_stepwise(void **state) {
    (void)state;
    const int n = 40;
    const skv_type types[] = {SKV_TYPE_F32, SKV_TYPE_F16, SKV_TYPE_Q8_0};
    for (int a = 0; a < N_ARCHS; a++) {
        skv_model *m = load_weights(ARCHS[a]);
        const int V = skv_model_hparams(m)->n_vocab;
        int32_t ids[400];
        read_ids(ARCHS[a], ids, 400);
        float *all = malloc((size_t)n * V * sizeof(float)), *one = malloc((size_t)V * 4);
        for (int ti = 0; ti < 3; ti++) {
            skv_context *b = new_ctx(m, types[ti], 2, 0), *s = new_ctx(m, types[ti], 1, 0),
                        *c = new_ctx(m, types[ti], 2, 0);
            test_feed(b, ids, n, SKV_LOGITS_ALL, all);
            double worst = 0;
            for (int i = 0; i < n; i++) {
                test_feed(s, ids + i, 1, SKV_LOGITS_LAST, one);
                for (int j = 0; j < V; j++)
                    worst = fmax(worst, fabs((double)one[j] - all[(size_t)i * V + j]));
            }
            for (int i = 0; i < n; i += 7) {
                int k = n - i < 7 ? n - i : 7;
                test_feed(c, ids + i, k, SKV_LOGITS_LAST, one);
                for (int j = 0; j < V; j++)
                    worst = fmax(worst, fabs((double)one[j] - all[(size_t)(i + k - 1) * V + j]));
            }
            if (verbose())
                fprintf(stderr, "  %s %s: batched vs stepwise %.3g\n", ARCHS[a],
                        skv_type_name(types[ti]), worst);
            /* f32: float arithmetic order only. A quantized cache: a 1e-7 difference between
             * the batched and the per-token attention kernels can flip the rounding of a later
             * layer's stored K or V by one step (f16: 2^-11 relative; q8_0: 1/127 of a block's
             * max), so the bound is that of the storage */
            const double tol = ti == 0 ? 1e-4 : ti == 1 ? 2e-3 : 2e-2;
            assert_true(worst < tol);
            skv_context_free(b);
            skv_context_free(s);
            skv_context_free(c);
        }
        free(all);
        free(one);
        skv_model_free(m);
    }
}

/* The engine against the float64 reference on tokens the fixtures do not hold (reversed). */
static void test_engine_vs_reference(void **state) {
    (void)state;
    const int n = 48;
    for (int a = 0; a < N_ARCHS; a++) {
        skv_model *m = load_weights(ARCHS[a]);
        ref_model *rm = ref_model_load(fixture(ARCHS[a], "gguf"));
        const int V = skv_model_hparams(m)->n_vocab;
        int32_t ids[400], rev[64];
        int nid = read_ids(ARCHS[a], ids, 400);
        for (int i = 0; i < n; i++) rev[i] = ids[nid - 1 - 3 * i];
        float *got = malloc((size_t)n * V * sizeof(float));
        double *ref = malloc((size_t)n * V * sizeof(double));
        skv_context *ctx = new_ctx(m, SKV_TYPE_F32, 2, 0);
        test_feed(ctx, rev, n, SKV_LOGITS_ALL, got);
        ref_forward(rm, rev, n, ref, NULL, NULL);
        double worst = 0;
        for (size_t i = 0; i < (size_t)n * V; i++) worst = fmax(worst, fabs(got[i] - ref[i]));
        if (verbose()) fprintf(stderr, "  %s: engine vs float64 %.3g\n", ARCHS[a], worst);
        assert_true(worst < 2e-4);
        skv_context_free(ctx);
        free(got);
        free(ref);
        ref_model_free(rm);
        skv_model_free(m);
    }
}

/* ---- RoPE -------------------------------------------------------------------------------- */

static double urand(uint64_t *s) {
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*s >> 11) / 9007199254740992.0 * 2 - 1;
}

/* SIMD table application = scalar, both modes, full and partial rotation, odd sizes; tables
 * compose (embedding at a then turning by b = embedding at a + b) with factors, scaling and
 * LongRoPE's attn_factor (in the embedding only). */
static void test_rope_modes(void **state) {
    (void)state;
    uint64_t seed = 7;
    float factors[64];
    for (int i = 0; i < 64; i++) factors[i] = (float)(1.0 + 7.0 * i / 64);
    const int hds[] = {8, 12, 64, 80, 128};
    for (int mode = 0; mode < 2; mode++)
        for (size_t hi = 0; hi < sizeof hds / sizeof hds[0]; hi++)
            for (int part = 0; part < 3; part++) {
                int hd = hds[hi], n_rot = part == 0 ? hd : part == 1 ? hd / 2 : 2 * (hd / 3 / 2);
                if (n_rot < 2) continue;
                skv_rope_spec r = skv_rope_plain((skv_rope_mode)mode, hd, n_rot, 500000.0);
                r.factors = part == 2 ? factors : NULL;
                r.freq_scale = part == 1 ? 0.25 : 1.0;
                r.attn_factor = part == 2 ? 1.25 : 1.0; /* LongRoPE's scale of an embedding */
                float x[128], y[128], z[128], cs[128], cs2[128];
                for (int i = 0; i < hd; i++) x[i] = y[i] = z[i] = (float)urand(&seed);
                double pos = 1 + 300 * fabs(urand(&seed));
                skv_rope_table(&r, cs, pos);
                skv_rope_apply_table_ref(&r, x, cs);
                skv_rope_apply_table(&r, y, cs); /* SIMD when the CPU has it */
                for (int i = 0; i < hd; i++) assert_float_equal(x[i], y[i], 1e-6);
                /* the rotated tail stays untouched */
                for (int i = n_rot; i < hd; i++) assert_true(x[i] == z[i]);
                /* an embedding's table is the turn's times attn_factor */
                skv_rope_turn_table(&r, cs2, pos);
                for (int i = 0; i < n_rot; i++)
                    assert_float_equal(cs[i], (float)(r.attn_factor * cs2[i]), 1e-6);
                /* composition (embed, then turn on), against the one-step double embedding */
                memcpy(y, z, sizeof z);
                skv_rope_turn_table(&r, cs2, 17.0);
                skv_rope_apply_table(&r, y, cs);
                skv_rope_apply_table(&r, y, cs2);
                skv_rope_rotate_ref(&r, z, pos + 17.0);
                for (int i = 0; i < hd; i++) assert_float_equal(y[i], z[i], 2e-5);
            }
    /* the pairing itself: NEOX turns (0, n/2) at frequency 0 by pos radians */
    skv_rope_spec r = skv_rope_plain(SKV_ROPE_NEOX, 8, 8, 10000.0);
    float v[8] = {1, 0, 0, 0, 0, 0, 0, 0};
    skv_rope_rotate_ref(&r, v, 1.0);
    assert_float_equal(v[0], cos(1.0), 1e-6);
    assert_float_equal(v[4], sin(1.0), 1e-6);
    assert_true(v[1] == 0 && v[2] == 0 && v[3] == 0);
    skv_rope_spec ra = skv_rope_plain(SKV_ROPE_ADJACENT, 8, 8, 10000.0);
    float w[8] = {1, 0, 0, 0, 0, 0, 0, 0};
    skv_rope_rotate_ref(&ra, w, 1.0);
    assert_float_equal(w[1], sin(1.0), 1e-6);
    assert_true(w[4] == 0);
}

/* ---- masking equivalence and rerotation ---------------------------------------------------- */

typedef struct mask_case {
    const char *policy;
    skv_protocol protocol;
    double keep;
    skv_position_mode positions;
} mask_case;

/* Prefill T (+W under the engine protocol), compress, feed the window (seed) and N greedy
 * tokens, all logits compared with the float64 reference that sees the dense sequence with the
 * dropped entries masked (and, in rerotate mode, the new rotation indices). Returns the worst
 * difference; *effect gets masked-vs-dense (the compression must matter). */
static double run_mask_case(const skv_model *m, const ref_model *rm, const int32_t *ids,
                            const mask_case *mc, skv_type kv, double *effect) {
    const int T = 40, W = 8, N = 6;
    const bool engine = mc->protocol == SKV_PROTOCOL_ENGINE;
    skv_context *ctx = new_ctx(m, kv, 2, engine ? W : 0);
    const int n_prefill = engine ? T + W : T;
    test_feed(ctx, ids, n_prefill, SKV_LOGITS_NONE, NULL);
    skv_compress_params p = skv_compress_default_params();
    p.policy = mc->policy;
    p.keep_frac = mc->keep;
    p.protocol = mc->protocol;
    p.window_tokens = engine ? NULL : ids + T;
    p.n_window = W;
    p.window_keep = 4;
    p.positions = mc->positions;
    p.seed = 11;
    skv_compress_info info;
    skv_err err = {0};
    skv_status st = skv_compress(ctx, &p, &info, &err);
    if (st) fprintf(stderr, "compress: %s\n", err.msg);
    assert_int_equal(st, SKV_OK);
    double worst = test_masked_decode(ctx, rm, ids, T, W, N, engine,
                                      mc->positions == SKV_POSITIONS_REROTATE, effect);
    skv_compress_info_free(&info);
    skv_context_free(ctx);
    return worst;
}

/* Every case of run_mask_case on one model (label: its name in messages). */
static void mask_equivalence_of(const char *label, const skv_model *m, const ref_model *rm,
                                const int32_t *ids) {
    const mask_case cases[] = {
        {"attention", SKV_PROTOCOL_SEED, 0.3, SKV_POSITIONS_ORIGINAL},
        {"random", SKV_PROTOCOL_SEED, 0.5, SKV_POSITIONS_ORIGINAL},
        {"snapkv", SKV_PROTOCOL_ENGINE, 0.4, SKV_POSITIONS_ORIGINAL},
        {"sink_recent", SKV_PROTOCOL_SEED, 0.3, SKV_POSITIONS_REROTATE},
        {"attention", SKV_PROTOCOL_SEED, 0.3, SKV_POSITIONS_REROTATE},
        {"pyramid", SKV_PROTOCOL_ENGINE, 0.5, SKV_POSITIONS_REROTATE},
    };
    const skv_type types[] = {SKV_TYPE_F32, SKV_TYPE_F16};
    for (int ti = 0; ti < 2; ti++) {
        /* f16 rounds every cached K and V (relative 2^-11); the reference keeps them exact */
        const double tol = ti == 0 ? 2e-4 : 3e-2;
        double worst_all = 0, effect_min = INFINITY;
        for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
            double effect;
            double worst = run_mask_case(m, rm, ids, &cases[i], types[ti], &effect);
            if (verbose())
                fprintf(stderr, "    %s %s %s %s: engine vs masked %.3g, masked vs dense %.3g\n",
                        label, skv_type_name(types[ti]), cases[i].policy,
                        cases[i].positions == SKV_POSITIONS_REROTATE ? "rerotate" : "original",
                        worst, effect);
            if (worst > tol || effect < 10 * tol)
                fail_msg("%s %s %s: engine vs masked reference %.3g (tol %g), effect %.3g", label,
                         skv_type_name(types[ti]), cases[i].policy, worst, tol, effect);
            worst_all = fmax(worst_all, worst);
            effect_min = fmin(effect_min, effect);
        }
        fprintf(stderr, "  %s %s cache: compressed vs masked dense max %.3g (min effect %.3g)\n",
                label, skv_type_name(types[ti]), worst_all, effect_min);
    }
}

/* A shared fixture with its float64 reference and token ids. */
typedef struct fixture_set {
    skv_model *m;
    ref_model *rm;
    int32_t ids[400];
    char label[32]; /* "<arch>-tiny" */
} fixture_set;

static void fixture_open(fixture_set *f, const char *arch) {
    f->m = load_weights(arch);
    f->rm = ref_model_load(fixture(arch, "gguf"));
    read_ids(arch, f->ids, 400);
    snprintf(f->label, sizeof f->label, "%s-tiny", arch);
}

static void fixture_close(fixture_set *f) {
    ref_model_free(f->rm);
    skv_model_free(f->m);
}

static void mask_equivalence(const char *arch) {
    fixture_set f;
    fixture_open(&f, arch);
    mask_equivalence_of(f.label, f.m, f.rm, f.ids);
    fixture_close(&f);
}

static void test_mask_equivalence_neox(void **state) {
    (void)state;
    mask_equivalence("qwen2");
}

static void test_mask_equivalence_rope_freqs(void **state) {
    (void)state;
    mask_equivalence("llama3");
}

/* After rerotate, entry j of a head (originally at position p) holds RoPE(unrotated key, j):
 * the unrotated key comes from the dense cache rotated back by -p in float64, with the
 * reference's own RoPE (NEOX pairs, rope_freqs factors). */
static void rerotate_keys_of(const char *label, const skv_model *m, const ref_model *rm,
                             const int32_t *ids, skv_type kv) {
    const int T = 48;
    const skv_hparams *hp = skv_model_hparams(m);
    const int L = hp->n_layer, H = hp->n_head_kv, HD = hp->head_dim;
    skv_context *ctx = new_ctx(m, kv, 2, 0);
    test_feed(ctx, ids, T, SKV_LOGITS_NONE, NULL);
    const skv_cache *c = skv_context_cache_const(ctx);
    float *dense = malloc((size_t)L * H * T * HD * sizeof(float));
    skv_err err = {0};
    for (int i = 0; i < L * H; i++)
        assert_int_equal(
            skv_cache_head_read(c, i / H, i % H, dense + (size_t)i * T * HD, NULL, NULL, &err),
            SKV_OK);
    skv_compress_params p = skv_compress_default_params();
    p.policy = "random";
    p.keep_frac = 0.4;
    p.positions = SKV_POSITIONS_REROTATE;
    p.seed = 5;
    skv_compress_info info;
    assert_int_equal(skv_compress(ctx, &p, &info, &err), SKV_OK);
    float *k = malloc((size_t)T * HD * sizeof *k);
    int32_t pos[64];
    double *x = malloc((size_t)HD * sizeof *x);
    double worst = 0;
    int moved = 0;
    for (int i = 0; i < L * H; i++) {
        int n = skv_cache_head_len(c, i / H, i % H);
        assert_int_equal(skv_cache_head_read(c, i / H, i % H, k, NULL, pos, &err), SKV_OK);
        for (int j = 0; j < n; j++) {
            double scale = 0;
            for (int e = 0; e < HD; e++) {
                x[e] = dense[((size_t)i * T + pos[j]) * HD + e];
                scale = fmax(scale, fabs(x[e]));
            }
            ref_turn(rm, x, -(double)pos[j]); /* unrotate (LongRoPE's scale stays) */
            ref_turn(rm, x, (double)j);       /* as embedded fresh at the new index */
            for (int e = 0; e < HD; e++)
                worst = fmax(worst, fabs(k[(size_t)j * HD + e] - x[e]) / fmax(1.0, scale));
            moved += pos[j] != j;
        }
    }
    fprintf(stderr, "  %s %s cache: rerotated key vs fresh RoPE max rel %.3g\n", label,
            skv_type_name(kv), worst);
    /* f32: float rounding of one rotation; f16: one more rounding to half precision; q8_0: the
     * re-rotated key quantized again (up to 1/254 of its block's largest value; the reference
     * starts from the dequantized stored key) */
    assert_true(worst < (kv == SKV_TYPE_F32 ? 2e-6 : kv == SKV_TYPE_F16 ? 2e-3 : 1e-2));
    assert_true(moved > 0);
    skv_compress_info_free(&info);
    free(x);
    free(k);
    free(dense);
    skv_context_free(ctx);
}

static void rerotate_keys(const char *arch, skv_type kv) {
    fixture_set f;
    fixture_open(&f, arch);
    rerotate_keys_of(f.label, f.m, f.rm, f.ids, kv);
    fixture_close(&f);
}

static void test_rerotate_fresh(void **state) {
    (void)state;
    rerotate_keys("qwen2", SKV_TYPE_F32);
    rerotate_keys("qwen2", SKV_TYPE_F16);
    rerotate_keys("llama3", SKV_TYPE_F32);
    rerotate_keys("llama3", SKV_TYPE_F16);
}

/* ---- malformed architectures --------------------------------------------------------------- */

typedef struct mutation {
    const char *base;        /* fixture name */
    const char *path;        /* or a model file */
    const char *drop_tensor; /* tensor to leave out */
    const char *set_u32_key; /* u32 key to set */
    uint32_t set_u32;
    const char *set_str_key; /* string key to set */
    const char *set_str;
    const char *shrink;            /* tensor whose ne[0] loses one element */
    const char *dup_from, *dup_to; /* add a copy of a tensor under a new name */
    const char *zero;              /* tensor whose values become 0 */
} mutation;

static float zeros[64];

/* Writes a mutated copy of a fixture; returns its path (static buffer). */
static const char *write_mutated(const mutation *mu) {
    skv_err err = {0};
    skv_gguf *g = skv_gguf_open(mu->path ? mu->path : fixture(mu->base, "gguf"), &err);
    assert_non_null(g);
    skv_gguf_writer *w = skv_gguf_writer_new();
    assert_int_equal(skv_gguf_writer_copy_kv(w, g, NULL), SKV_OK);
    if (mu->set_u32_key)
        assert_int_equal(skv_gguf_writer_set_u32(w, mu->set_u32_key, mu->set_u32), SKV_OK);
    if (mu->set_str_key)
        assert_int_equal(skv_gguf_writer_set_str(w, mu->set_str_key, mu->set_str), SKV_OK);
    for (int64_t i = 0; i < skv_gguf_n_tensors(g); i++) {
        const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
        if (mu->drop_tensor && !strcmp(t->name, mu->drop_tensor)) continue;
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        if (mu->shrink && !strcmp(t->name, mu->shrink)) ne[0]--;
        const void *data = t->data;
        if (mu->zero && !strcmp(t->name, mu->zero)) data = zeros;
        assert_int_equal(skv_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, ne, data),
                         SKV_OK);
        if (mu->dup_from && !strcmp(t->name, mu->dup_from))
            assert_int_equal(
                skv_gguf_writer_add_tensor(w, mu->dup_to, t->type, t->n_dims, ne, t->data), SKV_OK);
    }
    const char *path = test_tmp_path(".gguf");
    assert_int_equal(skv_gguf_writer_write(w, path, &err), SKV_OK);
    skv_gguf_writer_free(w);
    skv_gguf_close(g);
    return path;
}

static void expect_refused(mutation mu, skv_status st, const char *substring) {
    const char *path = write_mutated(&mu);
    skv_err err = {0};
    skv_model *m = skv_model_load_weights(path, &err);
    if (m || err.status != st || !strstr(err.msg, substring))
        fprintf(stderr, "  %s: got status %d: %s\n", mu.base ? mu.base : mu.path, err.status,
                err.msg);
    assert_null(m);
    assert_int_equal(err.status, st);
    assert_non_null(strstr(err.msg, substring));
    unlink(path);
}

static void test_malformed(void **state) {
    (void)state;
    /* a missing bias of one layer (required by qwen2) */
    expect_refused((mutation){.base = "qwen2", .drop_tensor = "blk.1.attn_k.bias"}, SKV_ERR_FORMAT,
                   "missing tensor 'blk.1.attn_k.bias'");
    /* an optional bias (llama) present in one layer only */
    expect_refused((mutation){.base = "llama3",
                              .dup_from = "output_norm.weight",
                              .dup_to = "blk.0.attn_output.bias"},
                   SKV_ERR_FORMAT, "'blk.1.attn_output.bias' is missing but layer 0 has it");
    /* key_length that does not fit the projections */
    expect_refused(
        (mutation){.base = "llama3", .set_u32_key = "llama.attention.key_length", .set_u32 = 96},
        SKV_ERR_FORMAT, "tensor 'blk.0.attn_q.weight' has shape [256, 256], expected [256, 384]");
    expect_refused(
        (mutation){.base = "phi3", .set_u32_key = "phi3.attention.key_length", .set_u32 = 48},
        SKV_ERR_FORMAT, "'phi3.rope.dimension_count' = 64 is out of range [2, 48]");
    /* no key_length and a head count that does not divide the embedding */
    expect_refused(
        (mutation){.base = "llama3", .set_u32_key = "llama.attention.head_count", .set_u32 = 6},
        SKV_ERR_FORMAT, "not a multiple of the head count 6");
    expect_refused(
        (mutation){.base = "qwen3", .set_u32_key = "qwen3.attention.value_length", .set_u32 = 64},
        SKV_ERR_UNSUPPORTED, "value length 64 differs from key length 128");
    /* rope_freqs of the wrong length, or with a zero factor */
    expect_refused((mutation){.base = "llama3", .shrink = "rope_freqs.weight"}, SKV_ERR_FORMAT,
                   "tensor 'rope_freqs.weight' has shape [31, 1], expected [32]");
    expect_refused((mutation){.base = "llama3", .zero = "rope_freqs.weight"}, SKV_ERR_FORMAT,
                   "'rope_freqs.weight' has a factor that is not positive");
    /* rope_freqs where the architecture has none */
    expect_refused(
        (mutation){.base = "qwen2", .dup_from = "blk.0.attn_k.bias", .dup_to = "rope_freqs.weight"},
        SKV_ERR_UNSUPPORTED,
        "tensor 'rope_freqs.weight' is not part of architecture "
        "'qwen2'");
    /* LongRoPE factors where the architecture has none */
    expect_refused((mutation){.base = "qwen2",
                              .dup_from = "blk.0.attn_k.bias",
                              .dup_to = "rope_factors_long.weight"},
                   SKV_ERR_UNSUPPORTED,
                   "tensor 'rope_factors_long.weight' is not part of architecture 'qwen2'");
    /* unknown architecture, unknown RoPE scaling, mixture of experts */
    expect_refused(
        (mutation){.base = "phi3", .set_str_key = "general.architecture", .set_str = "gemma2"},
        SKV_ERR_UNSUPPORTED,
        "architecture 'gemma2' is not supported (sparsekv runs llama, qwen2, qwen3, "
        "phi3, mistral3)");
    expect_refused(
        (mutation){.base = "phi3", .set_str_key = "phi3.rope.scaling.type", .set_str = "dynamic"},
        SKV_ERR_UNSUPPORTED, "RoPE scaling type 'dynamic' is not supported");
    expect_refused(
        (mutation){.base = "phi3", .set_str_key = "phi3.rope.scaling.type", .set_str = "longrope"},
        SKV_ERR_FORMAT, "RoPE scaling type 'longrope' needs the tensors rope_factors_long.weight");
    expect_refused((mutation){.base = "llama3", .set_u32_key = "llama.expert_count", .set_u32 = 8},
                   SKV_ERR_UNSUPPORTED, "mixture of experts");
    /* fused and separate projections mixed up */
    expect_refused((mutation){.base = "phi3", .drop_tensor = "blk.2.attn_qkv.weight"},
                   SKV_ERR_FORMAT, "'blk.2.attn_qkv.weight' is missing but layer 0 has it");
    expect_refused((mutation){.base = "qwen3", .drop_tensor = "blk.1.attn_q_norm.weight"},
                   SKV_ERR_FORMAT, "missing tensor 'blk.1.attn_q_norm.weight'");
    /* the CLI says so and exits 2 */
    mutation mu = {.base = "qwen2", .drop_tensor = "blk.2.attn_v.bias"};
    const char *path = write_mutated(&mu);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s logits -m %s --tokens 1,2,3 -o /dev/null 2>&1", test_cli(), path);
    int status;
    char *out = test_run(cmd, &status);
    assert_int_equal(status, 2);
    assert_non_null(strstr(out, "missing tensor 'blk.2.attn_v.bias'"));
    free(out);
    unlink(path);
}

/* ---- RoPE scaling: LongRoPE (Phi-3.5, Phi-3-*-128k, Phi-4-mini) and YaRN ------------------- */

/* A synthetic model of architecture a (test_synth_tiny) written to path[4096] and loaded. */
static skv_model *synth_load(const skv_synth_arch *a, int n_ctx_train, uint64_t seed, char *path) {
    snprintf(path, 4096, "%s", test_synth_tiny(a, n_ctx_train, seed));
    skv_err err = {0};
    skv_model *m = skv_model_load_weights(path, &err);
    if (!m) fprintf(stderr, "%s\n", err.msg);
    assert_non_null(m);
    return m;
}

/* n token ids in [3, 299) from a seed. */
static void random_ids(int32_t *ids, int n, uint64_t seed) {
    for (int i = 0; i < n; i++) ids[i] = 3 + (int)((urand(&seed) + 1) / 2 * 296);
}

/* The logits of ids[0, n) in a fresh f32 context of n_ctx positions (into got[n, n_vocab]),
 * against the float64 reference (as set up by the caller); returns the largest difference. */
static double engine_vs_ref(const skv_model *m, const ref_model *rm, const int32_t *ids, int n,
                            int n_ctx, float *got) {
    const size_t V = (size_t)skv_model_hparams(m)->n_vocab;
    double *ref = malloc(n * V * sizeof(double));
    skv_context *ctx = test_context(m, SKV_TYPE_F32, n_ctx, 2, 0);
    test_feed(ctx, ids, n, SKV_LOGITS_ALL, got);
    ref_forward(rm, ids, n, ref, NULL, NULL);
    double worst = 0;
    for (size_t i = 0; i < n * V; i++) worst = fmax(worst, fabs(got[i] - ref[i]));
    skv_context_free(ctx);
    free(ref);
    return worst;
}

/* A scaled model against the float64 reference: n tokens' logits (2e-4), then compression in
 * both position modes against the masked reference and rerotated keys against fresh ones. */
static void check_against_ref(const char *label, const skv_model *m, const char *path, int n,
                              uint64_t seed) {
    ref_model *rm = ref_model_load(path);
    int32_t ids[400];
    random_ids(ids, 400, seed);
    float *got = malloc((size_t)n * skv_model_hparams(m)->n_vocab * sizeof(float));
    double worst = engine_vs_ref(m, rm, ids, n, 512, got);
    fprintf(stderr, "  %s: engine vs float64 %.3g\n", label, worst);
    assert_true(worst < 2e-4);
    mask_equivalence_of(label, m, rm, ids);
    rerotate_keys_of(label, m, rm, ids, SKV_TYPE_F32);
    free(got);
    ref_model_free(rm);
}

/* A synthetic phi3 of context_length 512 whose short factors serve 256 positions, 24 of 32
 * dimensions turned: a context of n_ctx 512 turns by the long factors, one of 256 or less by the
 * short ones, both times attn_factor; the float64 reference reads the same file on its own.
 * Against llama.cpp (dev check, not in the suite): 6.3e-6 short, 7.5e-6 long
 * (docs/ARCHITECTURES.md). */
static void test_longrope(void **state) {
    (void)state;
    char path[4096];
    const skv_synth_arch arch = {
        .arch = "phi3", .fused = true, .n_rot = 24, .longrope = true, .n_ctx_orig = 256};
    skv_model *m = synth_load(&arch, 512, 5, path);
    const skv_hparams *hp = skv_model_hparams(m);
    assert_int_equal(hp->rope_scaling, SKV_ROPE_SCALING_LONGROPE);
    assert_int_equal(hp->n_ctx_orig, 256);
    assert_int_equal(hp->n_rot, 24);
    assert_int_equal(hp->rope_mode, SKV_ROPE_NEOX);
    /* the converters' sqrt(1 + ln(512 / 256) / ln(256)) */
    assert_float_equal(hp->rope_attn_factor, sqrt(1 + log(2.0) / log(256.0)), 1e-6);
    ref_model *rm = ref_model_load(path);
    const int n = 64;
    int32_t ids[400];
    random_ids(ids, 400, 9);
    float *got[2];
    const int n_ctx[2] = {512, 256}; /* long, short */
    for (int c = 0; c < 2; c++) {
        got[c] = malloc((size_t)n * hp->n_vocab * sizeof(float));
        ref_model_set_n_ctx(rm, n_ctx[c]);
        double worst = engine_vs_ref(m, rm, ids, n, n_ctx[c], got[c]);
        fprintf(stderr, "  longrope n_ctx %d (%s factors): engine vs float64 %.3g\n", n_ctx[c],
                c == 0 ? "long" : "short", worst);
        assert_true(worst < 2e-4);
    }
    /* the two sets give other logits: the choice is not a no-op */
    assert_true(test_max_abs_diff(got[0], got[1], (size_t)n * hp->n_vocab) > 1e-2);
    /* compression, original and rerotate positions, f32 and f16 caches (n_ctx 512: long), and
     * rerotated keys = keys embedded fresh at their new index (attn_factor applied once) */
    ref_model_set_n_ctx(rm, 512);
    mask_equivalence_of("phi3-longrope", m, rm, ids);
    rerotate_keys_of("phi3-longrope", m, rm, ids, SKV_TYPE_F32);
    rerotate_keys_of("phi3-longrope", m, rm, ids, SKV_TYPE_F16);
    rerotate_keys_of("phi3-longrope", m, rm, ids, SKV_TYPE_Q8_0);
    free(got[0]);
    free(got[1]);
    ref_model_free(rm);
    skv_model_free(m);

    /* malformed: one set without the other, a wrong length, a zero factor, with YaRN
     * (test_malformed: the factors in an architecture without them) */
    expect_refused((mutation){.path = path, .drop_tensor = "rope_factors_short.weight"},
                   SKV_ERR_FORMAT,
                   "tensor 'rope_factors_long.weight' is present but 'rope_factors_short.weight' "
                   "is missing");
    expect_refused((mutation){.path = path, .shrink = "rope_factors_long.weight"}, SKV_ERR_FORMAT,
                   "tensor 'rope_factors_long.weight' has shape [11, 1], expected [12]");
    expect_refused((mutation){.path = path, .zero = "rope_factors_short.weight"}, SKV_ERR_FORMAT,
                   "tensor 'rope_factors_short.weight' has a factor that is not positive");
    expect_refused(
        (mutation){.path = path, .set_str_key = "phi3.rope.scaling.type", .set_str = "yarn"},
        SKV_ERR_UNSUPPORTED, "LongRoPE factors (rope_factors_long/short) with RoPE scaling 'yarn'");
    /* llama.cpp's type name is taken with the tensors, refused without them */
    mutation named = {.path = path, .set_str_key = "phi3.rope.scaling.type", .set_str = "longrope"};
    char p2[4096];
    snprintf(p2, sizeof p2, "%s", write_mutated(&named)); /* (a static buffer: copied) */
    skv_err err2 = {0};
    skv_model *m2 = skv_model_load_weights(p2, &err2);
    assert_non_null(m2);
    assert_int_equal(skv_model_hparams(m2)->rope_scaling, SKV_ROPE_SCALING_LONGROPE);
    skv_model_free(m2);
    expect_refused((mutation){.path = p2, .drop_tensor = "rope_factors_long.weight"},
                   SKV_ERR_FORMAT, "tensor 'rope_factors_short.weight' is present but");
    unlink(p2);
    unlink(path);
}

/* YaRN (rope.scaling.type yarn: Qwen2.5 / Qwen3 long-context files) on a qwen2 and a llama:
 * factor 4 over 256 trained positions, so the ramp between kept and interpolated frequencies
 * falls inside the 16 pairs; against the float64 reference (Hugging Face's definition), with
 * compression and rerotation. The reference's ramp follows the same published formula, so the
 * check of the formula itself is the llama.cpp comparison (dev check, not in the suite): 1.4e-5
 * over 200 tokens, 5.3e-5 over 1000 (docs/ARCHITECTURES.md). */
static void test_yarn(void **state) {
    (void)state;
    /* the third: a llama with rope_freqs divisors and 16 of 32 dimensions turned under YaRN */
    const char *archs[] = {"qwen2", "llama", "llama"};
    for (int a = 0; a < 3; a++) {
        char path[4096], label[32];
        const skv_synth_arch arch = {.arch = archs[a],
                                     .qkv_bias = a == 0,
                                     .rope_freqs = a == 2,
                                     .n_rot = a == 2 ? 16 : 0,
                                     .yarn = 4.0f,
                                     .n_ctx_orig = 256};
        skv_model *m = synth_load(&arch, 1024, 7, path);
        const skv_hparams *hp = skv_model_hparams(m);
        assert_int_equal(hp->rope_scaling, SKV_ROPE_SCALING_YARN);
        assert_int_equal(hp->n_ctx_orig, 256);
        assert_float_equal(hp->rope_freq_scale, 0.25, 1e-7);
        assert_float_equal(hp->rope_attn_factor, 1 + 0.1 * log(4.0), 1e-6);
        snprintf(label, sizeof label, "%s-yarn%s", archs[a], a == 2 ? "-freqs-partial" : "");
        check_against_ref(label, m, path, 64, 13);
        skv_model_free(m);
        unlink(path);
    }
}

/* mistral3 (Ministral 3, Mistral Small 3.1+): llama's block with YaRN's betas and log
 * multiplier from the file and Llama 4's query temperature, 1 + s ln(floor(p / n_ctx_orig) + 1)
 * at the logical position p (n_ctx_orig 32 here, so positions 32.. and 64.. scale up); against the
 * float64 reference (which scales the scores), then compression in original and rerotate
 * positions (the temperature stays with the logical position). Against llama.cpp (dev check):
 * 1.4e-5 to 4.2e-5 over 300 tokens (docs/ARCHITECTURES.md). */
static void test_mistral3(void **state) {
    (void)state;
    char path[4096];
    const skv_synth_arch arch = {.arch = "mistral3",
                                 .yarn = 4.0f,
                                 .yarn_beta_fast = 16.0f,
                                 .yarn_beta_slow = 2.0f,
                                 .yarn_log_mul = 0.5f,
                                 .attn_temp = 0.1f,
                                 .n_ctx_orig = 32};
    skv_model *m = synth_load(&arch, 1024, 11, path);
    const skv_hparams *hp = skv_model_hparams(m);
    assert_string_equal(hp->arch, "mistral3");
    assert_int_equal(hp->rope_mode, SKV_ROPE_ADJACENT);
    assert_int_equal(hp->rope_scaling, SKV_ROPE_SCALING_YARN);
    assert_float_equal(hp->attn_temp_scale, 0.1, 1e-7);
    /* get_mscale(4, 1) / get_mscale(4, 0.5) */
    assert_float_equal(hp->rope_attn_factor, (1 + 0.1 * log(4.0)) / (1 + 0.05 * log(4.0)), 1e-6);
    check_against_ref("mistral3", m, path, 100, 17);
    skv_model_free(m);
    /* a temperature that is no number is refused, as the other hyperparameters */
    expect_refused((mutation){.path = path,
                              .set_str_key = "mistral3.attention.temperature_scale",
                              .set_str = "warm"},
                   SKV_ERR_FORMAT,
                   "hyperparameter 'mistral3.attention.temperature_scale' is missing a valid "
                   "value");
    unlink(path);
}

/* Linear RoPE scaling turns position p like position p / factor. */
static void test_linear_scaling(void **state) {
    (void)state;
    mutation mu = {.base = "phi3", .set_str_key = "phi3.rope.scaling.type", .set_str = "linear"};
    const char *p1 = write_mutated(&mu);
    char path[512];
    snprintf(path, sizeof path, "%s", p1);
    skv_err err = {0};
    /* the factor key is a float: add it with a second rewrite */
    skv_gguf *g = skv_gguf_open(path, &err);
    assert_non_null(g);
    skv_gguf_writer *w = skv_gguf_writer_new();
    assert_int_equal(skv_gguf_writer_copy_kv(w, g, NULL), SKV_OK);
    assert_int_equal(skv_gguf_writer_set_f32(w, "phi3.rope.scaling.factor", 4.0f), SKV_OK);
    for (int64_t i = 0; i < skv_gguf_n_tensors(g); i++) {
        const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
        assert_int_equal(skv_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data),
                         SKV_OK);
    }
    const char *p2 = test_tmp_path(".gguf");
    assert_int_equal(skv_gguf_writer_write(w, p2, &err), SKV_OK);
    skv_gguf_writer_free(w);
    skv_gguf_close(g);
    unlink(path);
    skv_model *m = skv_model_load_weights(p2, &err);
    assert_non_null(m);
    assert_float_equal(skv_model_hparams(m)->rope_freq_scale, 0.25, 1e-7);
    ref_model *rm = ref_model_load(p2);
    const int n = 24, V = skv_model_hparams(m)->n_vocab;
    int32_t ids[400];
    read_ids("phi3", ids, 400);
    float *got = malloc((size_t)n * V * sizeof(float));
    double *ref = malloc((size_t)n * V * sizeof(double));
    skv_context *ctx = new_ctx(m, SKV_TYPE_F32, 1, 0);
    test_feed(ctx, ids, n, SKV_LOGITS_ALL, got);
    ref_forward(rm, ids, n, ref, NULL, NULL);
    double worst = 0;
    for (size_t i = 0; i < (size_t)n * V; i++) worst = fmax(worst, fabs(got[i] - ref[i]));
    assert_true(worst < 2e-4);
    skv_context_free(ctx);
    free(got);
    free(ref);
    ref_model_free(rm);
    skv_model_free(m);
    unlink(p2);
}

/* hparams of each fixture as its README table states them. */
static void test_hparams(void **state) {
    (void)state;
    struct {
        const char *name;
        int head_dim, n_head_kv, n_rot;
        skv_rope_mode mode;
        bool bias, qk_norm, factors;
    } want[] = {
        {"llama3", 64, 2, 64, SKV_ROPE_ADJACENT, false, false, true},
        {"qwen2", 64, 2, 64, SKV_ROPE_NEOX, true, false, false},
        {"qwen3", 128, 2, 128, SKV_ROPE_NEOX, false, true, false},
        {"phi3", 64, 4, 64, SKV_ROPE_NEOX, false, false, false},
    };
    for (int i = 0; i < N_ARCHS; i++) {
        skv_model *m = load_weights(want[i].name);
        const skv_hparams *hp = skv_model_hparams(m);
        assert_string_equal(hp->arch, want[i].name[0] == 'l' ? "llama" : want[i].name);
        assert_int_equal(hp->n_embd, 256);
        assert_int_equal(hp->n_layer, 3);
        assert_int_equal(hp->head_dim, want[i].head_dim);
        assert_int_equal(hp->n_head_kv, want[i].n_head_kv);
        assert_int_equal(hp->n_rot, want[i].n_rot);
        assert_int_equal(hp->rope_mode, want[i].mode);
        assert_int_equal(hp->qkv_bias, want[i].bias);
        assert_int_equal(hp->qk_norm, want[i].qk_norm);
        assert_int_equal(hp->rope_freq_factors, want[i].factors);
        assert_false(hp->tied_output);
        assert_true(hp->norm_eps == 1e-6f);
        skv_model_free(m);
    }
}

/* The full load (vocabulary included) and the CLI on every fixture: `sparsekv logits
 * --tokens-file <name>.ids.json` lands within 2e-3 of llama.cpp. */
static void test_cli_logits(void **state) {
    (void)state;
    for (int a = 0; a < N_ARCHS; a++) {
        skv_err err = {0};
        skv_model *m = skv_model_load(fixture(ARCHS[a], "gguf"), &err);
        if (!m) fprintf(stderr, "%s: %s\n", ARCHS[a], err.msg);
        assert_non_null(m);
        const size_t V = (size_t)skv_model_hparams(m)->n_vocab;
        assert_int_equal(skv_vocab_n_tokens(skv_model_vocab(m)), (int)V);
        skv_model_free(m);
        const char *out = test_tmp_path(".f32");
        char outp[512], gguf[512], cmd[2048];
        snprintf(outp, sizeof outp, "%s", out);
        snprintf(gguf, sizeof gguf, "%s", fixture(ARCHS[a], "gguf")); /* static buffer */
        snprintf(cmd, sizeof cmd, "%s logits -m %s --tokens-file %s -o %s >/dev/null", test_cli(),
                 gguf, fixture(ARCHS[a], "ids.json"), outp);
        int status;
        free(test_run(cmd, &status));
        assert_int_equal(status, 0);
        size_t sz, szw;
        float *got = test_read_file(outp, &sz);
        float *want = test_read_file(fixture(ARCHS[a], "logits.f32"), &szw);
        assert_non_null(got);
        assert_int_equal(sz, szw);
        assert_int_equal(sz, 300 * V * sizeof(float));
        double worst = 0;
        for (size_t i = 0; i < sz / sizeof(float); i++) worst = fmax(worst, fabs(got[i] - want[i]));
        if (verbose()) fprintf(stderr, "  CLI %s: %.3g\n", ARCHS[a], worst);
        assert_true(worst < 2e-3);
        free(got);
        free(want);
        unlink(outp);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hparams),
        cmocka_unit_test(test_rope_modes),
        cmocka_unit_test(test_fixture_logits),
        cmocka_unit_test(test_reference_matches_fixtures),
        cmocka_unit_test(test_engine_vs_reference),
        cmocka_unit_test(test_batched_equals_stepwise),
        cmocka_unit_test(test_linear_scaling),
        cmocka_unit_test(test_longrope),
        cmocka_unit_test(test_yarn),
        cmocka_unit_test(test_mistral3),
        cmocka_unit_test(test_rerotate_fresh),
        cmocka_unit_test(test_mask_equivalence_neox),
        cmocka_unit_test(test_mask_equivalence_rope_freqs),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_cli_logits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
