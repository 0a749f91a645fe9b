/* synth.c — random-weight GGUF models with real models' shapes, and the streamed GGUF writer
 * they (and the model rewriter) use to keep memory bounded. */
#include "synth.h"

#include "arch.h"

#include "kernels/kernels.h"
#include "threads.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- presets ------------------------------------------------------------------------------ */

typedef struct preset {
    skv_synth_shape shape;
    skv_synth_arch arch;
} preset;

static const preset presets[] = {
    {{"tiny", "test shape: 2 layers, dim 64, 4/2 heads, untied output", 512, 128, 128, 64, 2, 4, 2,
      128, 10000.0f, 1e-5f, false},
     {0}},
    {{"stories15m", "llama2.c TinyStories 15M", 32000, 256, 256, 288, 6, 6, 6, 768, 10000.0f, 1e-5f,
      true},
     {0}},
    {{"stories110m", "llama2.c TinyStories 110M", 32000, 1024, 1024, 768, 12, 12, 12, 2048,
      10000.0f, 1e-5f, true},
     {0}},
    {{"smollm2-135m", "SmolLM2-135M", 49152, 8192, 8192, 576, 30, 9, 3, 1536, 100000.0f, 1e-5f,
      true},
     {0}},
    {{"smollm2-360m", "SmolLM2-360M", 49152, 8192, 8192, 960, 32, 15, 5, 2560, 100000.0f, 1e-5f,
      true},
     {0}},
    {{"qwen2.5-0.5b-like",
      "Qwen2.5-0.5B shapes as a llama model (real Qwen2 has q/k/v biases; these have none)", 151936,
      32768, 8192, 896, 24, 14, 2, 4864, 1000000.0f, 1e-6f, true},
     {0}},
    {{"llama-3.2-1b",
      "Llama-3.2-1B: llama with Llama 3.1+ RoPE frequency factors (rope_freqs.weight); context "
      "131072, written as 8192 unless --ctx",
      128256, 131072, 8192, 2048, 16, 32, 8, 8192, 500000.0f, 1e-5f, true},
     {.rope_freqs = true}},
    {{"qwen2.5-0.5b", "Qwen2.5-0.5B as architecture qwen2: q/k/v biases, NEOX RoPE", 151936, 32768,
      8192, 896, 24, 14, 2, 4864, 1000000.0f, 1e-6f, true},
     {.arch = "qwen2", .qkv_bias = true}},
    {{"qwen3-0.6b",
      "Qwen3-0.6B as architecture qwen3: per-head q/k RMSNorm, head_dim 128 (16 x 128 != "
      "1024), NEOX RoPE",
      151936, 40960, 8192, 1024, 28, 16, 8, 3072, 1000000.0f, 1e-6f, true},
     {.arch = "qwen3", .head_dim = 128, .qk_norm = true}},
    {{"phi-3-mini", "Phi-3-mini-4k as architecture phi3: fused attn_qkv and [gate | up], NEOX RoPE",
      32064, 4096, 4096, 3072, 32, 32, 32, 8192, 10000.0f, 1e-5f, false},
     {.arch = "phi3", .fused = true}},
    {{"tiny-longrope",
      "test shape: tiny as a phi3 with LongRoPE (original context 256 of 512, 12 of 16 "
      "dimensions turned)",
      512, 512, 512, 64, 2, 4, 2, 128, 10000.0f, 1e-5f, false},
     {.arch = "phi3", .fused = true, .n_rot = 12, .longrope = true, .n_ctx_orig = 256}},
    {{"tiny-yarn", "test shape: tiny as a qwen2 with YaRN (factor 4 over 128 of 512 positions)",
      512, 512, 512, 64, 2, 4, 2, 128, 10000.0f, 1e-6f, false},
     {.arch = "qwen2", .qkv_bias = true, .yarn = 4.0f, .n_ctx_orig = 128}},
    {{"phi-3.5-mini",
      "Phi-3.5-mini as architecture phi3: Phi-3-mini's shapes with LongRoPE (rope_factors_long / "
      "_short, original context 4096; the factors a smooth ramp, not the published ones)",
      32064, 131072, 131072, 3072, 32, 32, 32, 8192, 10000.0f, 1e-5f, false},
     {.arch = "phi3", .fused = true, .longrope = true, .n_ctx_orig = 4096}},
    {{"phi-4-mini",
      "Phi-4-mini as architecture phi3: GQA 24/8, partial rotary (96 of 128 dimensions), "
      "LongRoPE (original context 4096), tied output",
      200064, 131072, 131072, 3072, 32, 24, 8, 8192, 10000.0f, 1e-5f, true},
     {.arch = "phi3", .fused = true, .n_rot = 96, .longrope = true, .n_ctx_orig = 4096}},
};

int skv_synth_n_presets(void) {
    return (int)(sizeof presets / sizeof presets[0]);
}

const skv_synth_shape *skv_synth_preset_at(int i) {
    return i >= 0 && i < skv_synth_n_presets() ? &presets[i].shape : NULL;
}

const skv_synth_shape *skv_synth_preset(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < skv_synth_n_presets(); i++)
        if (strcasecmp(presets[i].shape.name, name) == 0) return &presets[i].shape;
    return NULL;
}

const skv_synth_arch *skv_synth_arch_of(const skv_synth_shape *shape) {
    static const skv_synth_arch plain = {0};
    for (int i = 0; i < skv_synth_n_presets(); i++)
        if (shape == &presets[i].shape) return &presets[i].arch;
    return &plain;
}

static int shape_head_dim(const skv_synth_shape *s, const skv_synth_arch *a) {
    return a->head_dim > 0 ? a->head_dim : s->n_embd / s->n_head;
}

static const char *shape_arch(const skv_synth_arch *a) {
    return a->arch ? a->arch : "llama";
}

uint64_t skv_synth_n_params(const skv_synth_shape *s) {
    return skv_synth_n_params_arch(s, skv_synth_arch_of(s));
}

uint64_t skv_synth_n_params_arch(const skv_synth_shape *s, const skv_synth_arch *a) {
    uint64_t hd = (uint64_t)shape_head_dim(s, a);
    uint64_t e = (uint64_t)s->n_embd, q = (uint64_t)s->n_head * hd,
             kv = (uint64_t)s->n_head_kv * hd, ff = (uint64_t)s->n_ff;
    uint64_t layer = 2 * e + e * q + 2 * e * kv + q * e + 3 * e * ff;
    if (a->qkv_bias) layer += q + 2 * kv;
    if (a->qk_norm) layer += 2 * hd;
    uint64_t n = (uint64_t)s->n_layer * layer + e + (uint64_t)s->n_vocab * e;
    if (!s->tied) n += (uint64_t)s->n_vocab * e;
    if (a->rope_freqs) n += (a->n_rot > 0 ? (uint64_t)a->n_rot : hd) / 2;
    if (a->longrope) n += 2 * (a->n_rot > 0 ? (uint64_t)a->n_rot / 2 : hd / 2);
    return n;
}

void skv_synth_longrope_factors(float *lng, float *shrt, int n_rot, double scale) {
    const int h = n_rot / 2;
    for (int i = 0; i < h; i++) {
        double x = h > 1 ? (double)i / (h - 1) : 0;
        shrt[i] = (float)(1 + 0.1 * x * x);
        lng[i] = (float)(1 + (scale > 1 ? scale - 1 : 0) * x * x);
    }
}

double skv_synth_longrope_attn_factor(double scale, int n_ctx_orig) {
    return scale > 1 && n_ctx_orig > 1 ? sqrt(1 + log(scale) / log((double)n_ctx_orig)) : 1.0;
}

/* Llama 3.1+ "llama3" RoPE scaling as published with the models (factor 32, low frequency
 * factor 1, high frequency factor 4, original context 8192): wavelengths shorter than
 * 8192 / 4 keep their frequency, longer than 8192 / 1 are divided by 32, and the band between
 * is interpolated. out[i] is the divisor of frequency i. */
void skv_synth_llama3_rope_freqs(float *out, int head_dim, float theta) {
    const double factor = 32, lo = 1, hi = 4, orig = 8192;
    for (int i = 0; i < head_dim / 2; i++) {
        double freq = pow((double)theta, -2.0 * i / head_dim);
        double wavelen = 2 * M_PI / freq;
        if (wavelen < orig / hi)
            out[i] = 1.0f;
        else if (wavelen > orig / lo)
            out[i] = (float)factor;
        else {
            double smooth = (orig / wavelen - lo) / (hi - lo);
            out[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
}

uint32_t skv_ftype_of(skv_type t) {
    switch (t) {
    case SKV_TYPE_F32:
        return 0;
    case SKV_TYPE_F16:
        return 1;
    case SKV_TYPE_Q4_0:
        return 2;
    case SKV_TYPE_Q4_1:
        return 3;
    case SKV_TYPE_Q5_0:
        return 8;
    case SKV_TYPE_Q5_1:
        return 9;
    case SKV_TYPE_Q8_0:
        return 7;
    case SKV_TYPE_Q4_K:
        return 14; /* Q4_K_S: every matrix in Q4_K */
    case SKV_TYPE_Q5_K:
        return 16; /* Q5_K_S */
    case SKV_TYPE_Q6_K:
        return 18;
    case SKV_TYPE_Q3_K:
        return 11; /* Q3_K_S: every matrix in Q3_K */
    case SKV_TYPE_Q2_K:
        return 10; /* Q2_K */
    case SKV_TYPE_IQ4_NL:
        return 25;
    case SKV_TYPE_IQ4_XS:
        return 30;
    case SKV_TYPE_BF16:
        return 32;
    default:
        return 0;
    }
}

uint32_t skv_ftype_label(skv_type asked, uint32_t mix_ftype, const int n_by_type[SKV_TYPE_COUNT]) {
    const int k_types = n_by_type[SKV_TYPE_Q2_K] + n_by_type[SKV_TYPE_Q3_K] +
                        n_by_type[SKV_TYPE_Q4_K] + n_by_type[SKV_TYPE_Q5_K] +
                        n_by_type[SKV_TYPE_Q6_K];
    const bool took = mix_ftype ? k_types > 0 : n_by_type[asked] > 0;
    int most = -1;
    for (int t = 0; t < SKV_TYPE_COUNT; t++)
        if (n_by_type[t] > 0 && (most < 0 || n_by_type[t] > n_by_type[most])) most = t;
    if (!took && most >= 0) return skv_ftype_of((skv_type)most);
    return mix_ftype ? mix_ftype : skv_ftype_of(asked);
}

skv_type skv_matrix_type_for(skv_type want, int64_t cols) {
    if (skv_row_bytes(want, cols) > 0) return want;
    /* K-quant super-blocks (256) often do not divide a row (288, 576, 896...): the type of
     * blocks of 32 nearest above in bits takes such rows, as llama-quantize v0.5.0 chooses (a
     * Q4_K_M file of Qwen2.5-0.5B the size of its): Q2_K's (2.6 bits a weight) and Q3_K's
     * (3.4) Q4_0 (4.5), Q4_K's (4.5) Q5_0 (5.5), Q5_K's (5.5) Q5_1 (6), Q6_K's (6.6) Q8_0
     * (8.5); IQ4_XS's IQ4_NL, its grid per 32 values. */
    if (skv_type_block_size(want) == SKV_QK_K && skv_row_bytes(SKV_TYPE_Q8_0, cols) > 0) {
        switch (want) {
        case SKV_TYPE_Q2_K:
        case SKV_TYPE_Q3_K:
            return SKV_TYPE_Q4_0;
        case SKV_TYPE_Q4_K:
            return SKV_TYPE_Q5_0;
        case SKV_TYPE_Q5_K:
            return SKV_TYPE_Q5_1;
        case SKV_TYPE_IQ4_XS:
            return SKV_TYPE_IQ4_NL;
        default:
            return SKV_TYPE_Q8_0;
        }
    }
    return want == SKV_TYPE_F32 ? SKV_TYPE_F32 : SKV_TYPE_F16;
}

/* ---- streamed writer ---------------------------------------------------------------------- */

#define STREAM_CHUNK_BYTES ((size_t)8 << 20)

static bool tensor_geometry(const skv_stream_tensor *t, uint64_t *rows, size_t *row_bytes) {
    if (t->n_dims < 1 || t->n_dims > SKV_GGUF_MAX_DIMS) return false;
    uint64_t r = 1;
    for (int d = 1; d < t->n_dims; d++)
        if (t->ne[d] <= 0 || !skv_mul_ok(r, (uint64_t)t->ne[d], &r)) return false;
    *row_bytes = skv_row_bytes(t->type, t->ne[0]);
    *rows = r;
    return *row_bytes > 0;
}

static skv_status pwrite_all(int fd, const void *buf, size_t n, uint64_t off) {
    const char *p = buf;
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return SKV_ERR_IO;
        p += k;
        n -= (size_t)k;
        off += (uint64_t)k;
    }
    return SKV_OK;
}

skv_status skv_gguf_write_streamed(skv_gguf_writer *w, const skv_stream_tensor *t, int64_t n,
                                   skv_stream_fill_fn fill, void *ctx, const char *path,
                                   skv_err *err) {
    if (!w || (n > 0 && !t) || n < 0 || !path)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "write_streamed: missing argument");
    /* The temporary file is renamed over path below: check path itself first. */
    skv_status chk = skv_gguf_writer_check_output(w, path, err);
    if (chk != SKV_OK) return chk;
    uint64_t zero_bytes = 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t rows, bytes;
        size_t rb;
        if (!t[i].name || !tensor_geometry(&t[i], &rows, &rb) || !skv_mul_ok(rows, rb, &bytes) ||
            bytes > SIZE_MAX / 2)
            return skv_err_set(err, SKV_ERR_INVALID_ARG,
                               "tensor '%s' has an invalid shape or type for writing",
                               t[i].name ? t[i].name : "(null)");
        if (!t[i].data) {
            if (!fill)
                return skv_err_set(err, SKV_ERR_INVALID_ARG,
                                   "tensor '%s' has no data and no fill function", t[i].name);
            zero_bytes = SKV_MAX(zero_bytes, bytes);
        }
    }

    /* Reads of a never-written private anonymous mapping all hit the kernel's zero page, so the
     * writer can lay out gigabytes of placeholder data without that memory existing. */
    void *zero = NULL;
    if (zero_bytes > 0) {
        zero = mmap(NULL, (size_t)zero_bytes, PROT_READ,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (zero == MAP_FAILED)
            return skv_err_set(err, SKV_ERR_NOMEM, "cannot map %llu bytes of placeholder data",
                               (unsigned long long)zero_bytes);
    }

    skv_status st = SKV_OK;
    char *tmp = NULL;
    void *chunk = NULL;
    skv_gguf *g = NULL;
    int fd = -1;
    for (int64_t i = 0; i < n && st == SKV_OK; i++) {
        st = skv_gguf_writer_add_tensor(w, t[i].name, t[i].type, t[i].n_dims, t[i].ne,
                                        t[i].data ? t[i].data : zero);
        if (st != SKV_OK) skv_err_set(err, st, "cannot add tensor '%s' to the writer", t[i].name);
    }
    if (st != SKV_OK) goto done;

    size_t plen = strlen(path);
    tmp = malloc(plen + 32);
    if (!tmp) {
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        goto done;
    }
    snprintf(tmp, plen + 32, "%s.part%ld", path, (long)getpid());
    st = skv_gguf_writer_write_as(w, tmp, path, err); /* messages name the user's path */
    if (st != SKV_OK) goto done;
    if (zero_bytes == 0) {
        if (rename(tmp, path) != 0)
            st = skv_err_set(err, SKV_ERR_IO, "cannot move the new file into '%s': %s", path,
                             strerror(errno));
        goto done;
    }

    /* Where did the writer put each tensor? Ask the reader, then overwrite those bytes. */
    g = skv_gguf_open(tmp, err);
    if (!g) {
        st = err ? err->status : SKV_ERR_FORMAT;
        goto done;
    }
    size_t file_size = 0;
    const char *base = skv_gguf_file_data(g, &file_size);
    fd = open(tmp, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        st = skv_err_set(err, SKV_ERR_IO, "cannot reopen the new '%s': %s", path, strerror(errno));
        goto done;
    }
    chunk = malloc(STREAM_CHUNK_BYTES);
    if (!chunk) {
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < n && st == SKV_OK; i++) {
        if (t[i].data) continue;
        int64_t gi = skv_gguf_find_tensor(g, t[i].name);
        const skv_gguf_tensor *gt = gi >= 0 ? skv_gguf_tensor_at(g, gi) : NULL;
        uint64_t rows;
        size_t rb;
        tensor_geometry(&t[i], &rows, &rb);
        if (!gt || gt->size != rows * rb) {
            st = skv_err_set(err, SKV_ERR_FORMAT, "tensor '%s' is missing from the written file",
                             t[i].name);
            break;
        }
        uint64_t off = (uint64_t)((const char *)gt->data - base);
        uint64_t per = SKV_MAX((uint64_t)1, STREAM_CHUNK_BYTES / rb);
        void *buf = chunk;
        void *big = NULL;
        if (rb > STREAM_CHUNK_BYTES) { /* one row larger than the chunk: rare, allocate it */
            big = malloc(rb);
            if (!big) {
                st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory for a %zu-byte row", rb);
                break;
            }
            buf = big;
        }
        for (uint64_t r = 0; r < rows && st == SKV_OK; r += per) {
            uint64_t k = SKV_MIN(per, rows - r);
            st = fill(ctx, i, (int64_t)r, (int64_t)k, buf, err);
            if (st == SKV_OK && pwrite_all(fd, buf, (size_t)(k * rb), off + r * rb) != SKV_OK)
                st = skv_err_set(err, SKV_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
        }
        free(big);
    }
    if (st == SKV_OK && close(fd) != 0)
        st = skv_err_set(err, SKV_ERR_IO, "cannot write '%s': %s", path, strerror(errno));
    fd = -1;
    if (st == SKV_OK && rename(tmp, path) != 0)
        st = skv_err_set(err, SKV_ERR_IO, "cannot move the new file into '%s': %s", path,
                         strerror(errno));
done:
    if (fd >= 0) close(fd);
    skv_gguf_close(g);
    free(chunk);
    if (st != SKV_OK && tmp) unlink(tmp);
    free(tmp);
    if (zero) munmap(zero, (size_t)zero_bytes);
    return st;
}

/* ---- synthetic weights -------------------------------------------------------------------- */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t name_hash(const char *s) { /* FNV-1a */
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* One row of N(0, std^2)-ish values: the sum of four 16-bit uniforms from one draw (Irwin-Hall,
 * variance 1/3 before scaling), cheap and bounded (|x| < 2*sqrt(3)*std) so nothing explodes. */
static void gen_row(float *dst, int64_t n, uint64_t stream, float std) {
    skv_rng rng;
    skv_rng_seed(&rng, stream);
    const float scale = std * 1.7320508f / 65536.0f; /* sqrt(3) / 2^16 */
    for (int64_t i = 0; i < n; i++) {
        uint64_t x = skv_rng_next(&rng);
        uint32_t s = (uint32_t)(x & 0xffff) + (uint32_t)((x >> 16) & 0xffff) +
                     (uint32_t)((x >> 32) & 0xffff) + (uint32_t)(x >> 48);
        /* s + 2 (the four half-ulp offsets) is centred at 4 * 32768 */
        dst[i] = ((float)s + 2.0f - 131072.0f) * scale;
    }
}

typedef struct synth_tensor_info {
    char name[64];
    uint64_t hash;
    float std;
} synth_tensor_info;

typedef struct synth_fill_ctx {
    const skv_stream_tensor *t;
    const synth_tensor_info *info;
    uint64_t seed;
    skv_pool *pool;
    float *scratch; /* [n_threads, max_cols] */
    int64_t max_cols;
    /* the current job */
    int64_t ti, row0, n_rows;
    void *dst;
} synth_fill_ctx;

static void synth_fill_task(void *arg, int ith, int nth) {
    synth_fill_ctx *c = arg;
    const skv_stream_tensor *t = &c->t[c->ti];
    int64_t cols = t->ne[0];
    size_t rb = skv_row_bytes(t->type, cols);
    float *row = c->scratch + (size_t)ith * (size_t)c->max_cols;
    int64_t a = c->n_rows * ith / nth, b = c->n_rows * (ith + 1) / nth;
    for (int64_t r = a; r < b; r++) {
        uint64_t stream = mix64(c->seed ^ mix64(c->info[c->ti].hash + (uint64_t)(c->row0 + r)));
        char *out = (char *)c->dst + (size_t)r * rb;
        if (t->type == SKV_TYPE_F32) {
            gen_row((float *)(void *)out, cols, stream, c->info[c->ti].std);
        } else {
            gen_row(row, cols, stream, c->info[c->ti].std);
            skv_quantize_row(t->type, row, out, cols);
        }
    }
}

static skv_status synth_fill(void *ctx, int64_t ti, int64_t row0, int64_t n_rows, void *dst,
                             skv_err *err) {
    synth_fill_ctx *c = ctx;
    c->ti = ti;
    c->row0 = row0;
    c->n_rows = n_rows;
    c->dst = dst;
    skv_pool_run(c->pool, synth_fill_task, c);
    return SKV_OK;
}

/* Normal pieces are every string over this alphabet, shortest first, so each piece of length
 * k > 1 is the merge of two shorter pieces and the vocabulary is a consistent BPE. */
static const char *const piece_alphabet[] = {"\xe2\x96\x81",
                                             "e",
                                             "t",
                                             "a",
                                             "o",
                                             "i",
                                             "n",
                                             "s",
                                             "h",
                                             "r",
                                             "d",
                                             "l",
                                             "u",
                                             "c",
                                             "m",
                                             "w",
                                             "f",
                                             "g",
                                             "y",
                                             "p",
                                             "b",
                                             "v",
                                             "k",
                                             "j",
                                             "x",
                                             "q",
                                             "z",
                                             "E",
                                             "T",
                                             "A",
                                             "O",
                                             "I",
                                             "N",
                                             "S",
                                             "H",
                                             "R",
                                             "D",
                                             "L",
                                             "U",
                                             "C",
                                             "M",
                                             "W",
                                             "F",
                                             "G",
                                             "Y",
                                             "P",
                                             "B",
                                             "V",
                                             "K",
                                             "J",
                                             "X",
                                             "Q",
                                             "Z",
                                             "0",
                                             "1",
                                             "2",
                                             "3",
                                             "4",
                                             "5",
                                             "6",
                                             "7",
                                             "8",
                                             "9",
                                             ",",
                                             ".",
                                             "'"};
#define N_ALPHA ((uint64_t)(sizeof piece_alphabet / sizeof piece_alphabet[0]))

/* Writes normal piece number k into buf (>= 64 bytes); returns its length. */
static size_t piece_of(uint64_t k, char *buf) {
    int len = 1;
    uint64_t count = N_ALPHA;
    while (k >= count) {
        k -= count;
        count *= N_ALPHA;
        len++;
    }
    size_t n = 0;
    char digits[8][4];
    for (int i = len - 1; i >= 0; i--) {
        strcpy(digits[i], piece_alphabet[k % N_ALPHA]);
        k /= N_ALPHA;
    }
    for (int i = 0; i < len; i++) {
        size_t l = strlen(digits[i]);
        memcpy(buf + n, digits[i], l);
        n += l;
    }
    buf[n] = 0;
    return n;
}

static skv_status set_vocab(skv_gguf_writer *w, int n_vocab, skv_err *err) {
    size_t nv = (size_t)n_vocab;
    const char **strs = malloc(nv * sizeof *strs);
    char *pool = malloc(nv * 32);
    float *scores = malloc(nv * sizeof *scores);
    int32_t *types = malloc(nv * sizeof *types);
    skv_status st = SKV_OK;
    if (!strs || !pool || !scores || !types) {
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory for a %d-token vocabulary", n_vocab);
        goto done;
    }
    char *p = pool;
    for (int i = 0; i < n_vocab; i++) {
        strs[i] = p;
        if (i == 0) {
            strcpy(p, "<unk>");
            types[i] = 2; /* unknown */
        } else if (i < 3) {
            strcpy(p, i == 1 ? "<s>" : "</s>");
            types[i] = 3; /* control */
        } else if (i < 259) {
            snprintf(p, 32, "<0x%02X>", i - 3);
            types[i] = 6; /* byte */
        } else {
            piece_of((uint64_t)(i - 259), p);
            types[i] = 1; /* normal */
        }
        scores[i] = i < 259 ? 0.0f : -(float)(i - 259);
        p += strlen(p) + 1;
    }
    if ((st = skv_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama")) ||
        (st = skv_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", strs, NULL, nv)) ||
        (st = skv_gguf_writer_set_arr(w, "tokenizer.ggml.scores", SKV_GGUF_FLOAT32, scores, nv)) ||
        (st = skv_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", SKV_GGUF_INT32, types, nv)) ||
        (st = skv_gguf_writer_set_u32(w, "tokenizer.ggml.unknown_token_id", 0)) ||
        (st = skv_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1)) ||
        (st = skv_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2)) ||
        (st = skv_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true)) ||
        (st = skv_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", false)))
        skv_err_set(err, st, "out of memory writing the vocabulary");
done:
    free(strs);
    free(pool);
    free(scores);
    free(types);
    return st;
}

static skv_status check_shape(const skv_synth_shape *s, const skv_synth_arch *sa, int n_ctx,
                              skv_err *err) {
    if (s->n_vocab < 259 || s->n_vocab > (1 << 24))
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "synthetic vocabulary size %d is outside [259, 16777216]", s->n_vocab);
    if (s->n_embd <= 0 || s->n_layer <= 0 || s->n_head <= 0 || s->n_head_kv <= 0 || s->n_ff <= 0 ||
        n_ctx <= 0 || s->n_embd > (1 << 20) || s->n_ff > (1 << 22) || s->n_layer > 4096 ||
        sa->head_dim < 0 || sa->head_dim > 4096 || s->n_head > 4096)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "shape '%s' has a non-positive or huge size",
                           s->name ? s->name : "custom");
    if ((!sa->head_dim && s->n_embd % s->n_head) || s->n_head % s->n_head_kv ||
        shape_head_dim(s, sa) % 2)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "shape '%s': n_embd %d must split into %d heads of even size and "
                           "%d query heads into %d kv groups",
                           s->name ? s->name : "custom", s->n_embd, s->n_head, s->n_head,
                           s->n_head_kv);
    if (!(s->rope_theta > 0) || !(s->norm_eps > 0))
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "rope_theta and norm_eps must be positive");
    const skv_arch *a = skv_arch_find(shape_arch(sa));
    if (!a)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "shape '%s': unknown architecture '%s'",
                           s->name ? s->name : "custom", shape_arch(sa));
    /* the file must be one the loader accepts */
    if ((sa->qkv_bias && a->qkv_bias == SKV_NEED_NO) ||
        (!sa->qkv_bias && a->qkv_bias == SKV_NEED_REQUIRED) ||
        (sa->qk_norm != (a->qk_norm == SKV_NEED_REQUIRED)) || (sa->fused != a->gate_up_fused) ||
        (sa->rope_freqs && a->rope_freqs == SKV_NEED_NO) ||
        (sa->longrope && a->rope_longrope == SKV_NEED_NO) ||
        ((sa->yarn_beta_fast > 0 || sa->yarn_beta_slow > 0 || sa->yarn_log_mul > 0) &&
         !a->yarn_keys) ||
        (sa->attn_temp > 0 && !a->attn_temp))
        return skv_err_set(
            err, SKV_ERR_INVALID_ARG,
            "shape '%s': biases, q/k norms, fusion, RoPE factors or keys do not match "
            "architecture '%s'",
            s->name ? s->name : "custom", a->name);
    if (sa->n_rot < 0 || sa->n_rot % 2 || sa->n_rot > shape_head_dim(s, sa) ||
        ((sa->longrope || sa->yarn > 0) != (sa->n_ctx_orig > 0)) || (sa->longrope && sa->yarn > 0))
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "shape '%s': n_rot %d must be even and at most head_dim %d, and "
                           "n_ctx_orig (%d) set for LongRoPE or YaRN (one of them) only",
                           s->name ? s->name : "custom", sa->n_rot, shape_head_dim(s, sa),
                           sa->n_ctx_orig);
    return SKV_OK;
}

static bool skip_non_tokenizer(const char *key) {
    return strncmp(key, "tokenizer.", 10) != 0;
}

/* Opens a vocab-only GGUF and returns its vocabulary size (tokenizer.ggml.tokens). */
static skv_gguf *open_vocab(const char *path, int *n_vocab, skv_err *err) {
    skv_gguf *g = skv_gguf_open(path, err);
    if (!g) return NULL;
    int64_t i = skv_gguf_find_key(g, "tokenizer.ggml.tokens");
    uint64_t n = i >= 0 ? skv_gguf_arr_len(g, i) : 0;
    if (i < 0 || skv_gguf_arr_type(g, i) != SKV_GGUF_STRING || n < 1 || n > (1 << 24)) {
        skv_err_set(err, SKV_ERR_FORMAT,
                    "'%s' has no tokenizer.ggml.tokens array of strings to take a vocabulary "
                    "from",
                    path);
        skv_gguf_close(g);
        return NULL;
    }
    *n_vocab = (int)n;
    return g;
}

skv_status skv_synth_write(const skv_synth_shape *shape, const skv_synth_params *params,
                           const char *path, skv_err *err) {
    return skv_synth_write_ex(shape, NULL, params, NULL, path, err);
}

skv_status skv_synth_write_ex(const skv_synth_shape *shape, const skv_synth_arch *sa,
                              const skv_synth_params *p, const char *vocab_path, const char *path,
                              skv_err *err) {
    if (!shape || !p || !path)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "synth_write: missing argument");
    if (!skv_type_can_quantize(p->type))
        return skv_err_set(err, SKV_ERR_UNSUPPORTED, "cannot write weights of type %s",
                           skv_type_name(p->type) ? skv_type_name(p->type) : "(unknown)");
    int n_ctx = p->n_ctx > 0 ? p->n_ctx : shape->n_ctx;
    skv_synth_shape sh = *shape; /* n_vocab may come from the vocabulary file */
    const skv_synth_shape *s = &sh;
    skv_gguf *vg = NULL;
    if (!sa) sa = skv_synth_arch_of(shape);
    if (vocab_path && !(vg = open_vocab(vocab_path, &sh.n_vocab, err))) return err->status;
    skv_status st = check_shape(s, sa, n_ctx, err);
    if (st != SKV_OK) {
        skv_gguf_close(vg);
        return st;
    }

    const char *arch = shape_arch(sa);
    const int64_t e = s->n_embd, hd = shape_head_dim(s, sa), q = s->n_head * hd,
                  kv = s->n_head_kv * hd, ff = s->n_ff;
    const int64_t n_rot = sa->n_rot > 0 ? sa->n_rot : hd;
    const int64_t n_t = 1 + 14 * (int64_t)s->n_layer + 5;
    skv_stream_tensor *t = calloc((size_t)n_t, sizeof *t);
    synth_tensor_info *info = calloc((size_t)n_t, sizeof *info);
    float *ones = malloc((size_t)SKV_MAX(e, hd) * sizeof *ones);
    float *freqs = malloc((size_t)(hd / 2 + 1) * sizeof *freqs);
    float *lrf = malloc((size_t)(hd + 2) * sizeof *lrf); /* LongRoPE [long | short] */
    skv_gguf_writer *w = skv_gguf_writer_new();
    skv_pool *pool = NULL;
    synth_fill_ctx fc = {0};
    if (!t || !info || !ones || !freqs || !lrf || !w) {
        st = skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int64_t i = 0; i < SKV_MAX(e, hd); i++) ones[i] = 1.0f;
    skv_synth_llama3_rope_freqs(freqs, (int)n_rot, s->rope_theta); /* one per turned pair */
    const double lr_scale = sa->longrope ? (double)s->n_ctx_train / sa->n_ctx_orig : 1;
    skv_synth_longrope_factors(lrf, lrf + n_rot / 2, (int)n_rot, lr_scale);

    int64_t k = 0;
    /* r == 0: a norm of ones (or data: a fixed vector); r < 0: a random bias vector */
#define ADD_DATA(nm, c, r, vec)                                                                    \
    do {                                                                                           \
        snprintf(info[k].name, sizeof info[k].name, "%s", nm);                                     \
        t[k].name = info[k].name;                                                                  \
        t[k].ne[0] = (c);                                                                          \
        t[k].ne[1] = (r) > 0 ? (r) : 1;                                                            \
        t[k].ne[2] = t[k].ne[3] = 1;                                                               \
        if ((r) <= 0) { /* a vector, always f32 */                                                 \
            t[k].n_dims = 1;                                                                       \
            t[k].type = SKV_TYPE_F32;                                                              \
            t[k].data = (r) == 0 ? (vec) : NULL;                                                   \
            info[k].hash = name_hash(nm);                                                          \
            info[k].std = 0.1f;                                                                    \
        } else {                                                                                   \
            t[k].n_dims = 2;                                                                       \
            t[k].type = skv_matrix_type_for(p->type, (c));                                         \
            info[k].hash = name_hash(nm);                                                          \
            info[k].std = 1.0f / sqrtf((float)(c));                                                \
        }                                                                                          \
        fc.max_cols = SKV_MAX(fc.max_cols, (int64_t)(c));                                          \
        k++;                                                                                       \
    } while (0)
#define ADD(nm, c, r) ADD_DATA(nm, c, r, ones)
    ADD("token_embd.weight", e, s->n_vocab);
    if (sa->rope_freqs) ADD_DATA("rope_freqs.weight", n_rot / 2, 0, freqs);
    if (sa->longrope) {
        ADD_DATA("rope_factors_long.weight", n_rot / 2, 0, lrf);
        ADD_DATA("rope_factors_short.weight", n_rot / 2, 0, lrf + n_rot / 2);
    }
    for (int l = 0; l < s->n_layer; l++) {
        char nm[64];
#define LNAME(x) (snprintf(nm, sizeof nm, "blk.%d." x, l), nm)
        ADD(LNAME("attn_norm.weight"), e, 0);
        if (sa->fused) {
            ADD(LNAME("attn_qkv.weight"), e, q + 2 * kv);
        } else {
            ADD(LNAME("attn_q.weight"), e, q);
            ADD(LNAME("attn_k.weight"), e, kv);
            ADD(LNAME("attn_v.weight"), e, kv);
        }
        if (sa->qkv_bias) {
            ADD(LNAME("attn_q.bias"), q, -1);
            ADD(LNAME("attn_k.bias"), kv, -1);
            ADD(LNAME("attn_v.bias"), kv, -1);
        }
        if (sa->qk_norm) {
            ADD(LNAME("attn_q_norm.weight"), hd, 0);
            ADD(LNAME("attn_k_norm.weight"), hd, 0);
        }
        ADD(LNAME("attn_output.weight"), q, e);
        ADD(LNAME("ffn_norm.weight"), e, 0);
        if (sa->fused) {
            ADD(LNAME("ffn_up.weight"), e, 2 * ff);
        } else {
            ADD(LNAME("ffn_gate.weight"), e, ff);
            ADD(LNAME("ffn_up.weight"), e, ff);
        }
        ADD(LNAME("ffn_down.weight"), ff, e);
#undef LNAME
    }
    ADD("output_norm.weight", e, 0);
    if (!s->tied) ADD("output.weight", e, s->n_vocab);
#undef ADD
#undef ADD_DATA

    int n_by_type[SKV_TYPE_COUNT] = {0}; /* matrices by the type they are written in */
    for (int64_t i = 0; i < k; i++)
        if (t[i].n_dims == 2) n_by_type[t[i].type]++;
    char gname[160], key[128];
    snprintf(gname, sizeof gname, "synthetic %s (random weights, seed %llu)",
             s->name ? s->name : "custom", (unsigned long long)p->seed);
#define AKEY(x) (snprintf(key, sizeof key, "%s." x, arch), key)
    if ((st = skv_gguf_writer_set_str(w, "general.architecture", arch)) ||
        (st = skv_gguf_writer_set_str(w, "general.name", gname)) ||
        (st = skv_gguf_writer_set_u32(w, "general.file_type",
                                      skv_ftype_label(p->type, 0, n_by_type))) ||
        (st = skv_gguf_writer_set_u32(w, AKEY("context_length"), (uint32_t)n_ctx)) ||
        (st = skv_gguf_writer_set_u32(w, AKEY("embedding_length"), (uint32_t)e)) ||
        (st = skv_gguf_writer_set_u32(w, AKEY("feed_forward_length"), (uint32_t)ff)) ||
        (st = skv_gguf_writer_set_u32(w, AKEY("block_count"), (uint32_t)s->n_layer)) ||
        (st = skv_gguf_writer_set_u32(w, AKEY("attention.head_count"), (uint32_t)s->n_head)) ||
        (st =
             skv_gguf_writer_set_u32(w, AKEY("attention.head_count_kv"), (uint32_t)s->n_head_kv)) ||
        (st = skv_gguf_writer_set_u32(w, AKEY("rope.dimension_count"), (uint32_t)n_rot)) ||
        (st = skv_gguf_writer_set_f32(w, AKEY("rope.freq_base"), s->rope_theta)) ||
        (st = skv_gguf_writer_set_f32(w, AKEY("attention.layer_norm_rms_epsilon"), s->norm_eps)) ||
        (st = skv_gguf_writer_set_u32(w, AKEY("vocab_size"), (uint32_t)s->n_vocab)) ||
        (sa->head_dim &&
         ((st = skv_gguf_writer_set_u32(w, AKEY("attention.key_length"), (uint32_t)hd)) ||
          (st = skv_gguf_writer_set_u32(w, AKEY("attention.value_length"), (uint32_t)hd)))) ||
        (sa->n_ctx_orig > 0 &&
         (st = skv_gguf_writer_set_u32(w, AKEY("rope.scaling.original_context_length"),
                                       (uint32_t)sa->n_ctx_orig))) ||
        (sa->longrope && (st = skv_gguf_writer_set_f32(
                              w, AKEY("rope.scaling.attn_factor"),
                              (float)skv_synth_longrope_attn_factor(lr_scale, sa->n_ctx_orig)))) ||
        (sa->yarn > 0 &&
         ((st = skv_gguf_writer_set_str(w, AKEY("rope.scaling.type"), "yarn")) ||
          (st = skv_gguf_writer_set_f32(w, AKEY("rope.scaling.factor"), sa->yarn)))) ||
        (sa->yarn_beta_fast > 0 &&
         (st = skv_gguf_writer_set_f32(w, AKEY("rope.scaling.yarn_beta_fast"),
                                       sa->yarn_beta_fast))) ||
        (sa->yarn_beta_slow > 0 &&
         (st = skv_gguf_writer_set_f32(w, AKEY("rope.scaling.yarn_beta_slow"),
                                       sa->yarn_beta_slow))) ||
        (sa->yarn_log_mul > 0 &&
         (st = skv_gguf_writer_set_f32(w, AKEY("rope.scaling.yarn_log_multiplier"),
                                       sa->yarn_log_mul))) ||
        (sa->attn_temp > 0 &&
         (st = skv_gguf_writer_set_f32(w, AKEY("attention.temperature_scale"), sa->attn_temp))) ||
        (st = skv_gguf_writer_set_u64(w, "sparsekv.synth.seed", p->seed))) {
        skv_err_set(err, st, "out of memory writing metadata");
        goto done;
    }
#undef AKEY
    if (vg) {
        if ((st = skv_gguf_writer_copy_kv(w, vg, skip_non_tokenizer)) != SKV_OK) {
            skv_err_set(err, st, "out of memory copying the vocabulary");
            goto done;
        }
    } else if ((st = set_vocab(w, s->n_vocab, err)) != SKV_OK)
        goto done;

    pool = skv_pool_new(p->n_threads);
    int nth = pool ? skv_pool_size(pool) : 0;
    fc.scratch = nth > 0 ? malloc((size_t)nth * (size_t)fc.max_cols * sizeof(float)) : NULL;
    if (!pool || !fc.scratch) {
        st = skv_err_set(err, SKV_ERR_NOMEM, "cannot start %d worker threads", p->n_threads);
        goto done;
    }
    fc.t = t;
    fc.info = info;
    fc.seed = p->seed;
    fc.pool = pool;
    st = skv_gguf_write_streamed(w, t, k, synth_fill, &fc, path, err);
done:
    skv_pool_free(pool);
    free(fc.scratch);
    skv_gguf_writer_free(w);
    skv_gguf_close(vg);
    free(freqs);
    free(lrf);
    free(ones);
    free(info);
    free(t);
    return st;
}
