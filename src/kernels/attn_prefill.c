/* attn_prefill.c — dispatch and the portable reference of the blocked prefill attention (the
 * SIMD kernel is attn_prefill_simd.h, built at 8 lanes in attn_prefill_avx2.c, at 16 in
 * attn_prefill_avx512.c, and at 16 with both products on AMX tiles in attn_prefill_amx.c). */
#include "attn_prefill.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Floats of each SIMD work region (either width), in this order (each rounded up to 16 floats
 * so every region stays 64-byte aligned): packed Q^T [hd][ROWS], scores [KEYS][ROWS], O^T
 * [hd][ROWS], row max / sum / rescale / count [ROWS] each, converted K and V chunks [KEYS][hd]
 * each. */
static size_t round16(size_t x) {
    return (x + 15) & ~(size_t)15;
}

static size_t simd_floats(int hd) {
    size_t r = SKV_AP_ROWS, d = (size_t)hd;
    return round16(d * r) * 2 + round16((size_t)SKV_AP_KEYS * r) + round16(r) * 4 +
           round16((size_t)SKV_AP_KEYS * d) * 2;
}

/* After them, the AMX variant's bf16 regions (in halves of a float; in every caller's work, on
 * any CPU, as AMX can be switched on and off at run time: ~110 KB at hd 64, ~230 KB at 128): the
 * queries' three parts [3][ROWS][hd], the chunk's keys and transposed values in two parts each
 * [4][KEYS][hd], two row vectors' weights in three parts [2][3][KEYS][16]. */
static size_t amx_halves(int hd) {
    const size_t d = ((size_t)hd + 31) & ~(size_t)31;
    return 3 * (size_t)SKV_AP_ROWS * d + 4 * (size_t)SKV_AP_KEYS * d + 96 * (size_t)SKV_AP_KEYS;
}

/* The reference's work: one K and one V row in float, running max and sum of each head. */
static size_t ref_floats(int g, int hd) {
    return 2 * (size_t)hd + 2 * (size_t)g;
}

size_t skv_attn_prefill_work_size(int n, int g, int hd) {
    (void)n; /* blocks of rows and chunks of keys are fixed */
    if (g <= 0 || hd <= 0) return 0;
    size_t a = simd_floats(hd) + amx_halves(hd) / 2, b = ref_floats(g, hd);
    return sizeof(float) * (a > b ? a : b) + 64; /* + 64: room to align */
}

static bool kv_ok(skv_type t) {
    return t == SKV_TYPE_F32 || t == SKV_TYPE_F16;
}

/* Row j of K or V as floats: the stored row itself for F32, else converted into buf. */
static const float *kv_row(skv_type t, const uint8_t *base, size_t rb, int j, int hd, float *buf) {
    const uint8_t *r = base + (size_t)j * rb;
    if (t == SKV_TYPE_F32) return (const float *)r;
    for (int c = 0; c < hd; c++) {
        uint16_t h;
        memcpy(&h, r + 2 * (size_t)c, 2);
        buf[c] = skv_f16_to_f32(h);
    }
    return buf;
}

/* Token by token, key by key: online softmax per head in float (a new maximum rescales what
 * was accumulated). Each K/V row is converted once per token for all g heads. */
bool skv_attn_prefill_ref(float *out, size_t out_stride, const float *q, size_t q_stride, int n,
                          int g, int hd, const void *k, const void *v, skv_type kv_type,
                          const int *n_vis, float scale, void *work) {
    if (!kv_ok(kv_type)) return false;
    if (n <= 0 || g <= 0 || hd <= 0) return true;
    size_t rb = skv_row_bytes(kv_type, hd);
    float *w = (float *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
    float *kbuf = w, *vbuf = w + hd, *mx = w + 2 * (size_t)hd, *sum = mx + g;
    for (int i = 0; i < n; i++) {
        const float *qi = q + (size_t)i * q_stride;
        float *oi = out + (size_t)i * out_stride;
        memset(oi, 0, sizeof(float) * (size_t)g * hd);
        for (int h = 0; h < g; h++) mx[h] = -INFINITY, sum[h] = 0.0f;
        for (int j = 0; j < n_vis[i]; j++) {
            const float *kr = kv_row(kv_type, k, rb, j, hd, kbuf);
            const float *vr = kv_row(kv_type, v, rb, j, hd, vbuf);
            for (int h = 0; h < g; h++) {
                const float *qh = qi + (size_t)h * hd;
                float *acc = oi + (size_t)h * hd;
                float s = 0.0f;
                for (int c = 0; c < hd; c++) s += qh[c] * kr[c];
                s *= scale;
                if (s > mx[h]) {
                    float r = expf(mx[h] - s);
                    for (int c = 0; c < hd; c++) acc[c] *= r;
                    sum[h] *= r;
                    mx[h] = s;
                }
                float p = expf(s - mx[h]);
                sum[h] += p;
                for (int c = 0; c < hd; c++) acc[c] += p * vr[c];
            }
        }
        for (int h = 0; h < g; h++) {
            float inv = sum[h] > 0.0f ? 1.0f / sum[h] : 0.0f;
            for (int c = 0; c < hd; c++) oi[(size_t)h * hd + c] *= inv;
        }
    }
    return true;
}

bool skv_attn_prefill(float *out, size_t out_stride, const float *q, size_t q_stride, int n, int g,
                      int hd, const void *k, const void *v, skv_type kv_type, const int *n_vis,
                      float scale, void *work) {
    if (!kv_ok(kv_type)) return false;
    if (n <= 0 || g <= 0 || hd <= 0) return true;
#if defined(__x86_64__) || defined(__i386__)
    if (skv_kernels_use_simd() && hd % 8 == 0) {
        void *w = (void *)(((uintptr_t)work + 63) & ~(uintptr_t)63);
#ifdef SKV_HAVE_MATMUL_AMX
        if (kv_type == SKV_TYPE_F16 && hd % 32 == 0 && skv_kernels_use_amx()) {
            skv_attn_prefill_amx(out, out_stride, q, q_stride, n, g, hd, k, v, kv_type, n_vis,
                                 scale, w);
            return true;
        }
#endif
        if (skv_simd_active_id() >= SKV_SIMD_AVX512 && hd % 16 == 0) {
            skv_attn_prefill_avx512(out, out_stride, q, q_stride, n, g, hd, k, v, kv_type, n_vis,
                                    scale, w);
            return true;
        }
        skv_attn_prefill_avx2(out, out_stride, q, q_stride, n, g, hd, k, v, kv_type, n_vis, scale,
                              w);
        return true;
    }
#endif
    return skv_attn_prefill_ref(out, out_stride, q, q_stride, n, g, hd, k, v, kv_type, n_vis, scale,
                                work);
}
