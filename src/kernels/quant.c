/* quant.c — the weight block formats (ggml's exact byte layouts): dequantize and quantize
 * rows, the 8-bit activation rows of the integer matrix products, and the scalar dot of a
 * weight row with such an activation row (the portable path and the tests' yardstick).
 *
 * All multi-byte fields are little-endian as in GGUF; they are read byte by byte so the code
 * does not depend on the host's byte order or on alignment. */
#include "kernels.h"

#include <float.h>
#include <math.h>
#include <string.h>

static inline float ld_f16(const uint8_t *p) {
    return skv_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
}

static inline void st_f16(uint8_t *p, uint16_t h) {
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* The smallest half >= v (v >= 0, finite): scales stored as f16 must not shrink the range the
 * quantizer planned for, or values would clip. */
static uint16_t f16_round_up(double v) {
    uint16_t h = skv_f32_to_f16((float)v);
    while ((double)skv_f16_to_f32(h) < v && (h & 0x7c00u) != 0x7c00u) h++;
    return h;
}

/* Q4_K / Q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes. The
 * first four sub-blocks use the low 6 bits of bytes 0-3 (scale) and 4-7 (min); the last four
 * keep their low 4 bits in bytes 8-11 (scale low, min high nibble) and their top 2 bits in the
 * top bits of bytes 0-3 (scale) and 4-7 (min). */
static inline void k_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

static void k_pack_scales(uint8_t *s, const int sc[8], const int m[8]) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
}

/* ---- dequantize --------------------------------------------------------------------------- */

static void deq_q8_0(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 2 + SKV_QK8_0, y += SKV_QK8_0) {
        float d = ld_f16(b);
        for (int j = 0; j < SKV_QK8_0; j++) y[j] = d * (float)(int8_t)b[2 + j];
    }
}

/* Q4_0: byte j holds element j in its low nibble and element j + 16 in its high nibble. */
static void deq_q4_0(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 2 + SKV_QK4_0 / 2, y += SKV_QK4_0) {
        float d = ld_f16(b);
        for (int j = 0; j < SKV_QK4_0 / 2; j++) {
            y[j] = d * (float)((b[2 + j] & 15) - 8);
            y[j + 16] = d * (float)((b[2 + j] >> 4) - 8);
        }
    }
}

/* Code j (0..31) of a Q5_0 / Q5_1 block whose qh starts at byte h: the low 4 bits as Q4_0 keeps
 * them (nibble j % 16 of qs, the low one for j < 16; qs follows qh), the fifth bit j of qh (a
 * little-endian uint32). Q5_0: value = d * (code - 16). */
static inline int q5_code(const uint8_t *blk, int h, int j) {
    const uint32_t qh = (uint32_t)blk[h] | (uint32_t)blk[h + 1] << 8 | (uint32_t)blk[h + 2] << 16 |
                        (uint32_t)blk[h + 3] << 24;
    const int lo = j < 16 ? blk[h + 4 + j] & 15 : blk[h + 4 + j - 16] >> 4;
    return lo | (int)(qh >> j & 1) << 4;
}
static inline int q5_0_code(const uint8_t *blk, int j) {
    return q5_code(blk, 2, j);
}
/* Code j of a Q4_1 / Q5_1 (five) block: value d * code + m. */
static inline int q_1_code(const uint8_t *blk, bool five, int j) {
    return five ? q5_code(blk, 4, j) : j < 16 ? blk[4 + j] & 15 : blk[4 + j - 16] >> 4;
}

static void deq_q5_0(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 22, y += SKV_QK5_0) {
        const float d = ld_f16(b);
        for (int j = 0; j < SKV_QK5_0; j++) y[j] = d * (float)(q5_0_code(b, j) - 16);
    }
}

static void deq_q_1(const uint8_t *b, float *y, int64_t nb, bool five) {
    for (int64_t i = 0; i < nb; i++, b += five ? 24 : 20, y += 32) {
        const float d = ld_f16(b), m = ld_f16(b + 2);
        for (int j = 0; j < 32; j++) y[j] = d * (float)q_1_code(b, five, j) + m;
    }
}

/* Q4_K: value = d * sc * q - dmin * m. qs holds 64 values per 32 bytes: byte l of chunk c has
 * sub-block 2c element l in its low nibble and sub-block 2c+1 element l in its high nibble. */
static void deq_q4_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 144) {
        float d = ld_f16(b), dmin = ld_f16(b + 2);
        const uint8_t *sc = b + 4, *qs = b + 16;
        for (int c = 0; c < 4; c++, qs += 32, y += 64) {
            int s0, m0, s1, m1;
            k_scale_min(sc, 2 * c, &s0, &m0);
            k_scale_min(sc, 2 * c + 1, &s1, &m1);
            float d0 = d * (float)s0, o0 = dmin * (float)m0;
            float d1 = d * (float)s1, o1 = dmin * (float)m1;
            for (int l = 0; l < 32; l++) {
                y[l] = d0 * (float)(qs[l] & 15) - o0;
                y[l + 32] = d1 * (float)(qs[l] >> 4) - o1;
            }
        }
    }
}

/* Q5_K: Q4_K plus a fifth bit: qh[l] bit 2c is the high bit of sub-block 2c element l, bit
 * 2c+1 that of sub-block 2c+1. */
static void deq_q5_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 176) {
        float d = ld_f16(b), dmin = ld_f16(b + 2);
        const uint8_t *sc = b + 4, *qh = b + 16, *qs = b + 48;
        for (int c = 0; c < 4; c++, qs += 32, y += 64) {
            int s0, m0, s1, m1;
            k_scale_min(sc, 2 * c, &s0, &m0);
            k_scale_min(sc, 2 * c + 1, &s1, &m1);
            float d0 = d * (float)s0, o0 = dmin * (float)m0;
            float d1 = d * (float)s1, o1 = dmin * (float)m1;
            for (int l = 0; l < 32; l++) {
                int q0 = (qs[l] & 15) | (((qh[l] >> (2 * c)) & 1) << 4);
                int q1 = (qs[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4);
                y[l] = d0 * (float)q0 - o0;
                y[l + 32] = d1 * (float)q1 - o1;
            }
        }
    }
}

/* Q6_K element e (0..255) of a super-block: its 6-bit code (0..63; value = d * sc[e/16] *
 * (code - 32)). Each half of 128 uses 64 ql bytes and 32 qh bytes: with h = e / 128, r = e %
 * 128, l = r % 32 and quarter k = r / 32, the low 4 bits are the low (k = 0, 1) or high
 * (k = 2, 3) nibble of ql[64h + l + 32 (k & 1)] and the top 2 bits are bits 2k, 2k+1 of
 * qh[32h + l]. */
static inline int q6_code(const uint8_t *ql, const uint8_t *qh, int e) {
    int h = e >> 7, r = e & 127, l = r & 31, k = r >> 5;
    int lo = ql[64 * h + l + 32 * (k & 1)];
    lo = (k & 2) ? lo >> 4 : lo & 15;
    return lo | (((qh[32 * h + l] >> (2 * k)) & 3) << 4);
}

static void deq_q6_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 210, y += SKV_QK_K) {
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        float d = ld_f16(b + 208);
        for (int g = 0; g < 16; g++) {
            float ds = d * (float)sc[g];
            for (int e = 16 * g; e < 16 * g + 16; e++) y[e] = ds * (float)(q6_code(ql, qh, e) - 32);
        }
    }
}

/* Q6_K: ORs code (0..63) into element e's bits (q6_code's places; the bits start as zero). */
static inline void q6_set(uint8_t *ql, uint8_t *qh, int e, int code) {
    int h = e >> 7, r = e & 127, l = r & 31, k = r >> 5;
    ql[64 * h + l + 32 * (k & 1)] |= (uint8_t)((k & 2) ? (code & 15) << 4 : (code & 15));
    qh[32 * h + l] |= (uint8_t)((code >> 4) << (2 * k));
}

/* Q3_K: { uint8 hmask[32]; uint8 qs[64]; uint8 scales[12]; f16 d; } 110 bytes; value d *
 * scale[e / 16] * code, code in -4..3, scale in -32..31. Element e (0..255) of a super-block: with
 * n = e / 128, c = (e / 32) % 4 and l = e % 32, bits 2c, 2c+1 of qs[32n + l] are the code's low
 * two bits and bit 4n + c of hmask[l] its third (code = low + 4 hbit - 4). Scale j is stored as
 * j + 32 in 6 bits: the low 4 in scales[j] (j < 8, low nibble) or scales[j - 8] (high nibble),
 * the top 2 in bits 2 (j / 4), +1 of scales[8 + j % 4]. */
#define Q3_K_BYTES 110

static inline int q3_code(const uint8_t *b, int e) {
    int n = e >> 7, c = (e >> 5) & 3, l = e & 31;
    int low = (b[32 + 32 * n + l] >> (2 * c)) & 3, hbit = (b[l] >> (4 * n + c)) & 1;
    return low + 4 * hbit - 4;
}

static inline int q3_scale(const uint8_t *b, int j) {
    const uint8_t *sc = b + 96;
    int lo = j < 8 ? sc[j] & 15 : sc[j - 8] >> 4, hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
    return (lo | hi << 4) - 32;
}

/* Writes a Q3_K block from its codes (-4..3), scales (-32..31) and d. */
static void q3_pack(uint8_t *b, const int8_t *code, const int *scale, uint16_t hd) {
    memset(b, 0, Q3_K_BYTES);
    for (int e = 0; e < SKV_QK_K; e++) {
        int q = code[e] + 4, n = e >> 7, c = (e >> 5) & 3, l = e & 31;
        b[32 + 32 * n + l] |= (uint8_t)((q & 3) << (2 * c));
        b[l] |= (uint8_t)((q >> 2) << (4 * n + c));
    }
    for (int j = 0; j < 16; j++) {
        int u = scale[j] + 32;
        b[96 + (j & 7)] |= (uint8_t)((u & 15) << (j < 8 ? 0 : 4));
        b[96 + 8 + j % 4] |= (uint8_t)((u >> 4) << (2 * (j / 4)));
    }
    st_f16(b + 108, hd);
}

static void deq_q3_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += Q3_K_BYTES, y += SKV_QK_K) {
        float d = ld_f16(b + 108);
        for (int j = 0; j < 16; j++) {
            float ds = d * (float)q3_scale(b, j);
            for (int e = 16 * j; e < 16 * j + 16; e++) y[e] = ds * (float)q3_code(b, e);
        }
    }
}

/* Q2_K: { uint8 scales[16]; uint8 qs[64]; f16 d; f16 dmin; } 84 bytes; group j (16 values) has
 * the scale scales[j] & 15 and the min scales[j] >> 4, value d * scale * code - dmin * min, code
 * 0..3. Element e (0..255): with n = e / 128, c = (e / 32) % 4 and l = e % 32, bits 2c, 2c+1 of
 * qs[32n + l] (Q3_K's low plane). */
#define Q2_K_BYTES 84

static inline int q2_code(const uint8_t *b, int e) {
    return b[16 + 32 * (e >> 7) + (e & 31)] >> (2 * ((e >> 5) & 3)) & 3;
}

/* Writes a Q2_K block from its codes (0..3), scales and mins (0..15), d and dmin. */
static void q2_pack(uint8_t *b, const uint8_t *code, const int *sc, const int *m, uint16_t hd,
                    uint16_t hmin) {
    memset(b, 0, Q2_K_BYTES);
    for (int j = 0; j < 16; j++) b[j] = (uint8_t)(sc[j] | m[j] << 4);
    for (int e = 0; e < SKV_QK_K; e++)
        b[16 + 32 * (e >> 7) + (e & 31)] |= (uint8_t)(code[e] << (2 * ((e >> 5) & 3)));
    st_f16(b + 80, hd);
    st_f16(b + 82, hmin);
}

static void deq_q2_k(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += Q2_K_BYTES, y += SKV_QK_K) {
        const float d = ld_f16(b + 80), dmin = ld_f16(b + 82);
        for (int j = 0; j < 16; j++) {
            const float dl = d * (float)(b[j] & 15), ml = dmin * (float)(b[j] >> 4);
            for (int e = 16 * j; e < 16 * j + 16; e++) y[e] = dl * (float)q2_code(b, e) - ml;
        }
    }
}

/* IQ4_NL / IQ4_XS: each code is a 4-bit index into this grid (ggml's kvalues_iq4nl), denser
 * near 0 where weights cluster. IQ4_NL: { f16 d; qs[16] } per 32 values, the nibbles in Q4_0's
 * order, value d * grid[code]. IQ4_XS: { f16 d; uint16 scales_h; scales_l[4]; qs[128] } per
 * 256, sub-block j (32 values, qs[16 j..16 j + 15] in Q4_0's order) scaled by d * (ls_j - 32),
 * ls_j 6 bits: the low 4 in nibble j % 2 of scales_l[j / 2], the top 2 in bits 2 j, 2 j + 1 of
 * scales_h. */
const int8_t skv_iq4_grid[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                 1,    13,   25,  38,  53,  69,  89,  113};

#define IQ4_XS_BYTES 136

static inline int iq4_code(const uint8_t *qs, int c) {
    return c < 16 ? qs[c] & 15 : qs[c - 16] >> 4;
}

/* IQ4_XS: sub-block j's (0..7) scale factor ls_j - 32 (-32..31). */
static int iq4_xs_scale(const uint8_t *b, int j) {
    const int lo = b[4 + j / 2] >> 4 * (j % 2) & 15, hi = (b[2] | b[3] << 8) >> 2 * j & 3;
    return (lo | hi << 4) - 32;
}

static void deq_iq4_nl(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += 18, y += 32) {
        const float d = ld_f16(b);
        for (int c = 0; c < 32; c++) y[c] = d * (float)skv_iq4_grid[iq4_code(b + 2, c)];
    }
}

static void deq_iq4_xs(const uint8_t *b, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, b += IQ4_XS_BYTES) {
        const float d = ld_f16(b);
        for (int j = 0; j < 8; j++, y += 32) {
            const float dl = d * (float)iq4_xs_scale(b, j);
            for (int c = 0; c < 32; c++)
                y[c] = dl * (float)skv_iq4_grid[iq4_code(b + 8 + 16 * j, c)];
        }
    }
}

void skv_q3_k_to_q6_k(const void *src, void *dst, int64_t nb) {
    const uint8_t *b = src;
    uint8_t *o = dst;
    for (int64_t i = 0; i < nb; i++, b += Q3_K_BYTES, o += 210) {
        memset(o, 0, 192);
        for (int e = 0; e < SKV_QK_K; e++) q6_set(o, o + 128, e, q3_code(b, e) + 32);
        for (int j = 0; j < 16; j++) o[192 + j] = (uint8_t)(int8_t)q3_scale(b, j);
        o[208] = b[108];
        o[209] = b[109];
    }
}

void skv_dequantize_row(skv_type t, const void *src, float *dst, int64_t n) {
    const uint8_t *b = src;
    int bs = skv_type_block_size(t);
    if (bs <= 0 || n <= 0 || n % bs) return;
    int64_t nb = n / bs;
    switch (t) {
    case SKV_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case SKV_TYPE_F16:
        skv_f16_row_to_f32(dst, b, n);
        break;
    case SKV_TYPE_BF16:
        for (int64_t i = 0; i < n; i++)
            dst[i] = skv_bf16_to_f32((uint16_t)(b[2 * i] | b[2 * i + 1] << 8));
        break;
    case SKV_TYPE_Q8_0:
        deq_q8_0(b, dst, nb);
        break;
    case SKV_TYPE_Q4_0:
        deq_q4_0(b, dst, nb);
        break;
    case SKV_TYPE_Q5_0:
        deq_q5_0(b, dst, nb);
        break;
    case SKV_TYPE_Q4_1:
        deq_q_1(b, dst, nb, false);
        break;
    case SKV_TYPE_Q5_1:
        deq_q_1(b, dst, nb, true);
        break;
    case SKV_TYPE_Q4_K:
        deq_q4_k(b, dst, nb);
        break;
    case SKV_TYPE_Q5_K:
        deq_q5_k(b, dst, nb);
        break;
    case SKV_TYPE_Q6_K:
        deq_q6_k(b, dst, nb);
        break;
    case SKV_TYPE_Q3_K:
        deq_q3_k(b, dst, nb);
        break;
    case SKV_TYPE_Q2_K:
        deq_q2_k(b, dst, nb);
        break;
    case SKV_TYPE_IQ4_NL:
        deq_iq4_nl(b, dst, nb);
        break;
    case SKV_TYPE_IQ4_XS:
        deq_iq4_xs(b, dst, nb);
        break;
    default:
        break;
    }
}

/* ---- quantize ----------------------------------------------------------------------------- */

/* float -> int8 code without undefined behaviour for NaN and out-of-range values. */
static inline int8_t sat_i8(float v) {
    if (!(v >= -127.0f)) return v != v ? 0 : -127;
    return v > 127.0f ? 127 : (int8_t)v;
}

/* trunc(v) clamped to [0, top]; NaN gives 0. */
static inline int trunc_code(float v, int top) {
    return v >= (float)top ? top : v > 0.0f ? (int)v : 0;
}

/* Q8_0 as ggml's reference: d = amax / 127, q = round(x / d) (half away from zero). */
static void quant_q8_0(const float *x, uint8_t *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SKV_QK8_0, b += 2 + SKV_QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < SKV_QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        st_f16(b, skv_f32_to_f16(d));
        for (int j = 0; j < SKV_QK8_0; j++) b[2 + j] = (uint8_t)sat_i8(roundf(x[j] * id));
    }
}

/* The first of 32 values with the largest magnitude, with its sign (0 for none above 0). */
static float signed_max32(const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

/* Q4_0 as ggml's reference: the value of largest magnitude (with its sign) maps to code 0,
 * d = max / -8, q = min(15, trunc(x / d + 8.5)). */
static void quant_q4_0(const float *x, uint8_t *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SKV_QK4_0, b += 2 + SKV_QK4_0 / 2) {
        float d = signed_max32(x) / -8.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        st_f16(b, skv_f32_to_f16(d));
        for (int j = 0; j < SKV_QK4_0 / 2; j++) {
            int q0 = trunc_code(x[j] * id + 8.5f, 15), q1 = trunc_code(x[j + 16] * id + 8.5f, 15);
            b[2 + j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

/* Q5_0 as ggml's reference: as Q4_0 with 32 levels, d = max / -16, q = min(31, trunc(x / d +
 * 16.5)), the fifth bits gathered in qh. */
static void quant_q5_0(const float *x, uint8_t *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SKV_QK5_0, b += 22) {
        const float d = signed_max32(x) / -16.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        st_f16(b, skv_f32_to_f16(d));
        uint32_t qh = 0;
        for (int j = 0; j < SKV_QK5_0 / 2; j++) {
            const int q0 = trunc_code(x[j] * id + 16.5f, 31);
            const int q1 = trunc_code(x[j + 16] * id + 16.5f, 31);
            b[6 + j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
        }
        for (int k = 0; k < 4; k++) b[2 + k] = (uint8_t)(qh >> 8 * k);
    }
}

/* Q4_1 / Q5_1 (five) as ggml's reference: m = the block's min, d = (max - min) / 15 (31),
 * q = min(15 (31), trunc((x - min) / d + 0.5)). */
static void quant_q_1(const float *x, uint8_t *b, int64_t nb, bool five) {
    const int top = five ? 31 : 15;
    for (int64_t i = 0; i < nb; i++, x += 32, b += five ? 24 : 20) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < 32; j++) {
            min = fminf(min, x[j]);
            max = fmaxf(max, x[j]);
        }
        const float d = (max - min) / (float)top, id = d != 0.0f ? 1.0f / d : 0.0f;
        st_f16(b, skv_f32_to_f16(d));
        st_f16(b + 2, skv_f32_to_f16(min));
        uint8_t *qs = b + (five ? 8 : 4);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            const int q0 = trunc_code((x[j] - min) * id + 0.5f, top);
            const int q1 = trunc_code((x[j + 16] - min) * id + 0.5f, top);
            qs[j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
        }
        for (int k = 0; five && k < 4; k++) b[4 + k] = (uint8_t)(qh >> 8 * k);
    }
}

static inline int clampi(long v, int lo, int hi) {
    return v < lo ? lo : v > hi ? hi : (int)v;
}

/* The K-quants' simple, safe quantizer: each of the ng sub-blocks (of 256 / ng values) covers
 * [min(0, lo), hi] with an offset rounded down (its min code rounded up) and a step rounded up,
 * so no value clips and every error is at most half a step. Codes 0..nmax, scale and min codes
 * 0..cmax (Q4_K / Q5_K: 8 sub-blocks, nmax 15 / 31, cmax 63; Q2_K: 16, 3, 15). */
static void k_affine(const float *x, int ng, int nmax, int cmax, uint16_t *hd_out,
                     uint16_t *hmin_out, int *sc, int *m, uint8_t codes[SKV_QK_K]) {
    const int gs = SKV_QK_K / ng;
    double lo[16], hi[16], need[16], mmax = 0.0, nd = 0.0;
    for (int j = 0; j < ng; j++) {
        lo[j] = 0.0;
        hi[j] = 0.0;
        for (int l = 0; l < gs; l++) {
            double v = isfinite(x[gs * j + l]) ? x[gs * j + l] : 0.0;
            lo[j] = v < lo[j] ? v : lo[j];
            hi[j] = v > hi[j] ? v : hi[j];
        }
        mmax = -lo[j] > mmax ? -lo[j] : mmax;
    }
    uint16_t hmin = mmax > 0.0 ? f16_round_up(mmax / (double)cmax) : 0;
    double dmin = skv_f16_to_f32(hmin);
    for (int j = 0; j < ng; j++) {
        m[j] = dmin > 0.0 ? clampi((long)ceil(-lo[j] / dmin), 0, cmax) : 0;
        need[j] = hi[j] + dmin * m[j];
        nd = need[j] > nd ? need[j] : nd;
    }
    uint16_t hd = nd > 0.0 ? f16_round_up(nd / ((double)nmax * (double)cmax)) : 0;
    double d = skv_f16_to_f32(hd);
    for (int j = 0; j < ng; j++)
        sc[j] = d > 0.0 ? clampi((long)ceil(need[j] / (nmax * d)), 0, cmax) : 0;
    /* Codes against the scale and offset exactly as the dequantizer forms them (floats). */
    float df = (float)d, dminf = (float)dmin;
    for (int j = 0; j < ng; j++) {
        float step = df * (float)sc[j], off = dminf * (float)m[j];
        float inv = step > 0.0f ? 1.0f / step : 0.0f;
        for (int l = 0; l < gs; l++) {
            float v = isfinite(x[gs * j + l]) ? x[gs * j + l] : 0.0f;
            codes[gs * j + l] = (uint8_t)clampi(lrintf((v + off) * inv), 0, nmax);
        }
    }
    *hd_out = hd;
    *hmin_out = hmin;
}

/* Q4_K / Q5_K (nmax = 15 / 31), simple: the header (d, dmin, packed scales) and the codes. */
static void quant_k_affine(const float *x, uint8_t *hdr, int nmax, uint8_t codes[SKV_QK_K]) {
    int sc[8], m[8];
    uint16_t hd, hmin;
    k_affine(x, 8, nmax, 63, &hd, &hmin, sc, m, codes);
    st_f16(hdr, hd);
    st_f16(hdr + 2, hmin);
    k_pack_scales(hdr + 4, sc, m);
}

static void pack_q4_k(uint8_t *b, const uint8_t codes[SKV_QK_K]) {
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            b[16 + 32 * c + l] = (uint8_t)(codes[64 * c + l] | codes[64 * c + 32 + l] << 4);
}

static void pack_q5_k(uint8_t *b, const uint8_t codes[SKV_QK_K]) {
    uint8_t *qh = b + 16, *qs = b + 48;
    memset(qh, 0, 32);
    for (int c = 0; c < 4; c++) {
        for (int l = 0; l < 32; l++) {
            int q0 = codes[64 * c + l], q1 = codes[64 * c + 32 + l];
            qs[32 * c + l] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
            qh[l] |= (uint8_t)(((q0 >> 4) << (2 * c)) | ((q1 >> 4) << (2 * c + 1)));
        }
    }
}

static void quant_q4_k(const float *x, uint8_t *b, int64_t nb) {
    uint8_t codes[SKV_QK_K];
    for (int64_t i = 0; i < nb; i++, x += SKV_QK_K, b += 144) {
        quant_k_affine(x, b, 15, codes);
        pack_q4_k(b, codes);
    }
}

static void quant_q5_k(const float *x, uint8_t *b, int64_t nb) {
    uint8_t codes[SKV_QK_K];
    for (int64_t i = 0; i < nb; i++, x += SKV_QK_K, b += 176) {
        quant_k_affine(x, b, 31, codes);
        pack_q5_k(b, codes);
    }
}

/* Q6_K: per sub-block of 16, the value of largest magnitude maps to code 0 (scale = max /
 * -32), like Q4_0; the 16 scales become int8 multiples of d rounded away from zero (so no value
 * clips on that side). */
/* The step of each sub-block of 16 that maps its value of largest magnitude to code lo (< 0),
 * non-finite values as 0; returns the largest |step|. */
static double sub_steps16(const float *x, double lo, double step[16]) {
    double smax = 0.0;
    for (int g = 0; g < 16; g++) {
        double amax = 0.0, max = 0.0;
        for (int l = 0; l < 16; l++) {
            double v = isfinite(x[16 * g + l]) ? x[16 * g + l] : 0.0;
            if (fabs(v) > amax) {
                amax = fabs(v);
                max = v;
            }
        }
        step[g] = max / lo;
        smax = fabs(step[g]) > smax ? fabs(step[g]) : smax;
    }
    return smax;
}

static void quant_q6_k(const float *x, uint8_t *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SKV_QK_K, b += 210) {
        double scale[16], smax = sub_steps16(x, -32.0, scale);
        uint16_t hd = smax > 0.0 ? f16_round_up(smax / 127.0) : 0;
        double d = skv_f16_to_f32(hd);
        float df = (float)d;
        uint8_t *ql = b, *qh = b + 128;
        int8_t *sc = (int8_t *)(b + 192);
        memset(ql, 0, 128 + 64);
        for (int g = 0; g < 16; g++) {
            long s = 0;
            if (d > 0.0) s = scale[g] < 0 ? -(long)ceil(-scale[g] / d) : (long)ceil(scale[g] / d);
            sc[g] = (int8_t)clampi(s, -127, 127);
            float step = df * (float)sc[g], inv = step != 0.0f ? 1.0f / step : 0.0f;
            for (int e = 16 * g; e < 16 * g + 16; e++) {
                float v = isfinite(x[e]) ? x[e] : 0.0f;
                q6_set(ql, qh, e, clampi(lrintf(v * inv), -32, 31) + 32);
            }
        }
        st_f16(b + 208, hd);
    }
}

/* ---- K-quants: the weighted search ------------------------------------------------------------
 * The simple quantizers above cover each sub-block's whole range, so one outlier makes the step
 * of all 32 (or 16) values coarse. The K-quant format stores a scale and a min per sub-block so
 * that they can be fitted instead: these quantizers minimise the importance-weighted squared
 * rounding error sum w_i (x_i - y_i)^2 of each sub-block, with w_i = rms + |x_i| (rms of the
 * super-block: larger weights count more, small ones still count; no imatrix), then round the
 * sub-block scales to their 6- or 8-bit codes, trying the neighbouring codes, and finally keep the
 * simple quantizer's block if it is better by that measure, so a super-block's weighted error is
 * never larger than before.
 * Measured (rms error vs min/max): -11% (Q4_K), -11% (Q5_K), -13% (Q6_K) on stories260K's real
 * weights; KL of a random stories110m-shaped model's logits vs F32 at Q4_K: 0.0836 against 0.0985.
 * Uniform weights measured lower still on random (Gaussian) weights (KL 0.0761), x^2 higher
 * (0.0917); magnitude weighting is kept for trained weights, whose large values matter more. */

/* round-half-even of v clamped to [lo, hi] (|lo|, |hi| < 2^22), without a libm call: adding and
 * subtracting 1.5 * 2^23 leaves the nearest integer in float rounding. NaN gives lo. */
static inline int round_clamp(float v, int lo, int hi) {
    v = v > (float)lo ? v : (float)lo;
    v = v < (float)hi ? v : (float)hi;
    return (int)((v + 0x1.8p23f) - 0x1.8p23f);
}

#ifndef Q6_STEPS
#define Q6_STEPS 6
#define Q6_STEP  0.5f
#endif
#ifndef K_STEPS_UP
#define K_STEPS_DOWN 4
#define K_STEPS_UP   8
#define K_STEP       0.25f
#endif

/* Sub-block importance weights (non-finite values count as 0 with weight 0). */
static void k_weights(const float *x, int n, float *w) {
    double ss = 0.0;
    for (int i = 0; i < n; i++)
        if (isfinite(x[i])) ss += (double)x[i] * x[i];
    float r2 = (float)(ss / n);
    float r = sqrtf(r2);
    for (int i = 0; i < n; i++) w[i] = isfinite(x[i]) ? r + fabsf(x[i]) : 0.0f;
}

static inline float fin(float v) {
    return isfinite(v) ? v : 0.0f;
}

/* Weighted least squares of x ~ a * q + b over n values; b <= 0 (the format stores -b >= 0).
 * False when the fit is degenerate or a <= 0. */
static bool fit_affine(const float *x, const float *w, const uint8_t *q, int n, float *a,
                       float *b) {
    double sw = 0, sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int i = 0; i < n; i++) {
        double wi = w[i], qi = q[i], xi = fin(x[i]);
        sw += wi;
        sq += wi * qi;
        sqq += wi * qi * qi;
        sx += wi * xi;
        sqx += wi * qi * xi;
    }
    double det = sw * sqq - sq * sq, aa, bb;
    if (det > 1e-12 * sw * sqq) {
        aa = (sw * sqx - sq * sx) / det;
        bb = (sqq * sx - sq * sqx) / det;
    } else {
        aa = 0.0;
        bb = 1.0;
    }
    if (bb > 0.0) { /* min must be >= 0: fit the scale alone */
        bb = 0.0;
        aa = sqq > 0.0 ? sqx / sqq : 0.0;
    }
    if (!(aa > 0.0) || !isfinite(aa) || !isfinite(bb)) return false;
    *a = (float)aa;
    *b = (float)bb;
    return true;
}

static double affine_err(const float *x, const float *w, int n, int nmax, float a, float b,
                         uint8_t *q) {
    double e = 0.0;
    float inv = a > 0.0f ? 1.0f / a : 0.0f;
    for (int i = 0; i < n; i++) {
        float v = fin(x[i]);
        int c = round_clamp((v - b) * inv, 0, nmax);
        if (q) q[i] = (uint8_t)c;
        double r = (double)a * c + b - v;
        e += w[i] * r * r;
    }
    return e;
}

/* The best (scale, -min) of one sub-block of n (32, or Q2_K's 16) values: candidate grids that
 * stretch or shrink the range [min(0, lo), hi] over nmax steps, each refitted by least squares on
 * its codes, the best polished by two rounds of re-coding and refitting. */
static void search_affine(const float *x, const float *w, int n, int nmax, float *scale,
                          float *mn) {
    float lo = 0.0f, hi = 0.0f;
    for (int i = 0; i < n; i++) {
        float v = fin(x[i]);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    *scale = 0.0f;
    *mn = -lo;
    if (!(hi > lo)) return;
    float best_a = (hi - lo) / (float)nmax, best_b = lo;
    double best = affine_err(x, w, n, nmax, best_a, best_b, NULL);
    uint8_t q[32];
    for (int k = -K_STEPS_DOWN; k <= K_STEPS_UP; k++) {
        float a0 = (hi - lo) / ((float)nmax + K_STEP * (float)k), inv = 1.0f / a0;
        for (int i = 0; i < n; i++) q[i] = (uint8_t)round_clamp((fin(x[i]) - lo) * inv, 0, nmax);
        float a, b;
        if (!fit_affine(x, w, q, n, &a, &b)) continue;
        double e = affine_err(x, w, n, nmax, a, b, NULL);
        if (e < best) {
            best = e;
            best_a = a;
            best_b = b;
        }
    }
    for (int it = 0; it < 2; it++) {
        float a, b;
        affine_err(x, w, n, nmax, best_a, best_b, q);
        if (!fit_affine(x, w, q, n, &a, &b)) break;
        double e = affine_err(x, w, n, nmax, a, b, NULL);
        if (!(e < best)) break;
        best = e;
        best_a = a;
        best_b = b;
    }
    *scale = best_a;
    *mn = -best_b;
}

/* Weighted error of the n values of a sub-block with codes sc, m against d, dmin as the
 * dequantizer forms them. */
static double k_sub_err(const float *x, const float *w, int n, int nmax, float d, float dmin,
                        int sc, int m) {
    return affine_err(x, w, n, nmax, d * (float)sc, -(dmin * (float)m), NULL);
}

/* Sub-block codes sc, m (0..cmax) near s / d and mn / dmin: the best of the 3 x 3 around them. */
static void k_pick_codes(const float *x, const float *w, int n, int nmax, int cmax, float d,
                         float dmin, float s, float mn, int *sc_out, int *m_out) {
    int sc0 = d > 0.0f ? clampi(lrintf(s / d), 0, cmax) : 0;
    int m0 = dmin > 0.0f ? clampi(lrintf(mn / dmin), 0, cmax) : 0;
    int bs = sc0, bm = m0;
    double best = k_sub_err(x, w, n, nmax, d, dmin, sc0, m0);
    for (int ds = -1; ds <= 1; ds++)
        for (int dm = -1; dm <= 1; dm++) {
            int sc = sc0 + ds, m = m0 + dm;
            if ((!ds && !dm) || sc < 0 || sc > cmax || m < 0 || m > cmax) continue;
            double e = k_sub_err(x, w, n, nmax, d, dmin, sc, m);
            if (e < best) {
                best = e;
                bs = sc;
                bm = m;
            }
        }
    *sc_out = bs;
    *m_out = bm;
}

/* Header (d, dmin, packed scales) and 256 codes of one Q4_K/Q5_K super-block, searched. */
static void quant_k_search(const float *x, const float *w, uint8_t *hdr, int nmax,
                           uint8_t codes[SKV_QK_K]) {
    float s[8], mn[8], smax = 0.0f, mmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        search_affine(x + 32 * j, w + 32 * j, 32, nmax, &s[j], &mn[j]);
        smax = s[j] > smax ? s[j] : smax;
        mmax = mn[j] > mmax ? mn[j] : mmax;
    }
    uint16_t hd = skv_f32_to_f16(smax / 63.0f), hmin = skv_f32_to_f16(mmax / 63.0f);
    float d = skv_f16_to_f32(hd), dmin = skv_f16_to_f32(hmin);
    int sc[8], m[8];
    for (int j = 0; j < 8; j++)
        k_pick_codes(x + 32 * j, w + 32 * j, 32, nmax, 63, d, dmin, s[j], mn[j], &sc[j], &m[j]);
    st_f16(hdr, hd);
    st_f16(hdr + 2, hmin);
    k_pack_scales(hdr + 4, sc, m);
    for (int j = 0; j < 8; j++)
        affine_err(x + 32 * j, w + 32 * j, 32, nmax, d * (float)sc[j], -(dmin * (float)m[j]),
                   codes + 32 * j);
}

/* Weighted squared error of a super-block of type t against x. */
static double block_err(skv_type t, const uint8_t *blk, const float *x, const float *w) {
    float y[SKV_QK_K];
    skv_dequantize_row(t, blk, y, SKV_QK_K);
    double e = 0.0;
    for (int i = 0; i < SKV_QK_K; i++) {
        double r = (double)y[i] - fin(x[i]);
        e += w[i] * r * r;
    }
    return isfinite(e) ? e : INFINITY;
}

static void quant_k_best(skv_type t, const float *x, uint8_t *b, int64_t nb) {
    size_t bb = t == SKV_TYPE_Q4_K ? 144 : 176;
    int nmax = t == SKV_TYPE_Q4_K ? 15 : 31;
    uint8_t codes[SKV_QK_K], alt[176];
    float w[SKV_QK_K];
    for (int64_t i = 0; i < nb; i++, x += SKV_QK_K, b += bb) {
        k_weights(x, SKV_QK_K, w);
        quant_k_search(x, w, b, nmax, codes);
        if (t == SKV_TYPE_Q4_K)
            pack_q4_k(b, codes);
        else
            pack_q5_k(b, codes);
        /* The simple block as the fallback: never worse than before. */
        quant_k_affine(x, alt, nmax, codes);
        if (t == SKV_TYPE_Q4_K)
            pack_q4_k(alt, codes);
        else
            pack_q5_k(alt, codes);
        if (block_err(t, alt, x, w) < block_err(t, b, x, w)) memcpy(b, alt, bb);
    }
}

/* Q2_K, simple: k_affine over 16 sub-blocks of 16, 2-bit codes, 4-bit scales and mins. */
static void quant_q2_k(const float *x, uint8_t *b, int64_t nb) {
    uint8_t codes[SKV_QK_K];
    int sc[16], m[16];
    uint16_t hd, hmin;
    for (int64_t i = 0; i < nb; i++, x += SKV_QK_K, b += Q2_K_BYTES) {
        k_affine(x, 16, 3, 15, &hd, &hmin, sc, m, codes);
        q2_pack(b, codes, sc, m, hd, hmin);
    }
}

/* Q2_K, searched as Q4_K (quant_k_search) over sub-blocks of 16: each one's best scale and min,
 * d and dmin from the largest over 15, each sub-block's codes the best of the 3 x 3 around its
 * own; the simple block where it errs less. */
static void quant_q2_k_best(const float *x, uint8_t *b, int64_t nb) {
    float w[SKV_QK_K], s[16], mn[16];
    uint8_t codes[SKV_QK_K], alt[Q2_K_BYTES];
    int sc[16], m[16];
    for (int64_t i = 0; i < nb; i++, x += SKV_QK_K, b += Q2_K_BYTES) {
        k_weights(x, SKV_QK_K, w);
        float smax = 0.0f, mmax = 0.0f;
        for (int j = 0; j < 16; j++) {
            search_affine(x + 16 * j, w + 16 * j, 16, 3, &s[j], &mn[j]);
            smax = s[j] > smax ? s[j] : smax;
            mmax = mn[j] > mmax ? mn[j] : mmax;
        }
        const uint16_t hd = skv_f32_to_f16(smax / 15.0f), hmin = skv_f32_to_f16(mmax / 15.0f);
        const float d = skv_f16_to_f32(hd), dmin = skv_f16_to_f32(hmin);
        for (int j = 0; j < 16; j++) {
            k_pick_codes(x + 16 * j, w + 16 * j, 16, 3, 15, d, dmin, s[j], mn[j], &sc[j], &m[j]);
            affine_err(x + 16 * j, w + 16 * j, 16, 3, d * (float)sc[j], -(dmin * (float)m[j]),
                       codes + 16 * j);
        }
        q2_pack(b, codes, sc, m, hd, hmin);
        quant_q2_k(x, alt, 1);
        if (block_err(SKV_TYPE_Q2_K, alt, x, w) < block_err(SKV_TYPE_Q2_K, b, x, w))
            memcpy(b, alt, Q2_K_BYTES);
    }
}

/* Q6_K and Q3_K, one sub-block of 16: x ~ a * q, q in [lo, hi] (-32..31, -4..3), a of either
 * sign. Candidates map the value of largest magnitude to codes near lo or hi; each is refitted
 * on its codes. */
static double sym_err(const float *x, const float *w, float a, int lo, int hi, int8_t *q) {
    double e = 0.0;
    float inv = a != 0.0f ? 1.0f / a : 0.0f;
    for (int i = 0; i < 16; i++) {
        float v = fin(x[i]);
        int c = round_clamp(v * inv, lo, hi);
        if (q) q[i] = (int8_t)c;
        double r = (double)a * c - v;
        e += w[i] * r * r;
    }
    return e;
}

/* The candidates step by (levels / 128) codes, Q6_STEPS each way: 0.5 for Q6_K, 1/16 for Q3_K. */
static float search_sym(const float *x, const float *w, int lo, int hi) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 16; i++) {
        float v = fin(x[i]);
        if (fabsf(v) > amax) {
            amax = fabsf(v);
            max = v;
        }
    }
    if (amax == 0.0f) return 0.0f;
    const float step = Q6_STEP * (float)(hi - lo + 1) / 64.0f;
    float best_a = max / (float)lo;
    double best = sym_err(x, w, best_a, lo, hi, NULL);
    int8_t q[16];
    for (int k = -Q6_STEPS; k <= Q6_STEPS; k++) {
        for (int side = 0; side < 2; side++) {
            float t = side ? (float)hi + step * (float)k : (float)lo + step * (float)k;
            float a0 = max / t;
            sym_err(x, w, a0, lo, hi, q);
            double sqx = 0, sqq = 0;
            for (int i = 0; i < 16; i++) {
                sqx += (double)w[i] * q[i] * fin(x[i]);
                sqq += (double)w[i] * q[i] * q[i];
            }
            if (!(sqq > 0.0)) continue;
            float a = (float)(sqx / sqq);
            double e = sym_err(x, w, a, lo, hi, NULL);
            if (e < best) {
                best = e;
                best_a = a;
            }
        }
    }
    return best_a;
}

/* The 16 searched sub-block steps s[] as integer multiples sc[] (within [-smax_code, smax_code]
 * and [slo, shi]) of one f16 d, each multiple tried +-1 for the least weighted error; codes out. */
static uint16_t sym_scales(const float *x, const float *w, const float *s, int smax_code, int slo,
                           int shi, int lo, int hi, int *sc, int8_t *codes) {
    float smax = 0.0f;
    for (int g = 0; g < 16; g++) smax = fabsf(s[g]) > smax ? fabsf(s[g]) : smax;
    uint16_t hd = skv_f32_to_f16(smax / (float)smax_code);
    float d = skv_f16_to_f32(hd);
    for (int g = 0; g < 16; g++) {
        const float *xg = x + 16 * g, *wg = w + 16 * g;
        int c0 = d > 0.0f ? clampi(lrintf(s[g] / d), slo, shi) : 0, bc = c0;
        double best = sym_err(xg, wg, d * (float)c0, lo, hi, NULL);
        for (int dc = -1; dc <= 1; dc += 2) {
            int c = c0 + dc;
            if (c < slo || c > shi) continue;
            double e = sym_err(xg, wg, d * (float)c, lo, hi, NULL);
            if (e < best) {
                best = e;
                bc = c;
            }
        }
        sc[g] = bc;
        sym_err(xg, wg, d * (float)bc, lo, hi, codes + 16 * g);
    }
    return hd;
}

static void quant_q6_k_best(const float *x, uint8_t *b, int64_t nb) {
    float w[SKV_QK_K], s[16];
    int sc[16];
    int8_t q[SKV_QK_K];
    uint8_t alt[210];
    for (int64_t i = 0; i < nb; i++, x += SKV_QK_K, b += 210) {
        k_weights(x, SKV_QK_K, w);
        for (int g = 0; g < 16; g++) s[g] = search_sym(x + 16 * g, w + 16 * g, -32, 31);
        uint16_t hd = sym_scales(x, w, s, 127, -127, 127, -32, 31, sc, q);
        memset(b, 0, 128 + 64);
        for (int g = 0; g < 16; g++) b[192 + g] = (uint8_t)(int8_t)sc[g];
        for (int e = 0; e < SKV_QK_K; e++) q6_set(b, b + 128, e, q[e] + 32);
        st_f16(b + 208, hd);
        quant_q6_k(x, alt, 1); /* the simple block as the fallback */
        if (block_err(SKV_TYPE_Q6_K, alt, x, w) < block_err(SKV_TYPE_Q6_K, b, x, w))
            memcpy(b, alt, 210);
    }
}

/* Q3_K, simple: per sub-block of 16 the value of largest magnitude maps to code -4 (scale = max
 * / -4); the 16 scales become 6-bit multiples of d rounded away from zero, d = max |scale| / 31
 * rounded up (no scale passes 31 in magnitude, so no value clips on that side). */
static void quant_q3_k(const float *x, uint8_t *b, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += SKV_QK_K, b += Q3_K_BYTES) {
        double scale[16], smax = sub_steps16(x, -4.0, scale);
        uint16_t hd = smax > 0.0 ? f16_round_up(smax / 31.0) : 0;
        double d = skv_f16_to_f32(hd);
        int sc[16];
        int8_t code[SKV_QK_K];
        for (int g = 0; g < 16; g++) {
            long s = 0;
            if (d > 0.0) s = scale[g] < 0 ? -(long)ceil(-scale[g] / d) : (long)ceil(scale[g] / d);
            sc[g] = clampi(s, -32, 31);
            float step = (float)d * (float)sc[g], inv = step != 0.0f ? 1.0f / step : 0.0f;
            for (int e = 16 * g; e < 16 * g + 16; e++)
                code[e] = (int8_t)clampi(lrintf(fin(x[e]) * inv), -4, 3);
        }
        q3_pack(b, code, sc, hd);
    }
}

static void quant_q3_k_best(const float *x, uint8_t *b, int64_t nb) {
    float w[SKV_QK_K], s[16];
    int sc[16];
    int8_t q[SKV_QK_K];
    uint8_t alt[Q3_K_BYTES];
    for (int64_t i = 0; i < nb; i++, x += SKV_QK_K, b += Q3_K_BYTES) {
        k_weights(x, SKV_QK_K, w);
        for (int g = 0; g < 16; g++) s[g] = search_sym(x + 16 * g, w + 16 * g, -4, 3);
        uint16_t hd = sym_scales(x, w, s, 31, -32, 31, -4, 3, sc, q);
        q3_pack(b, q, sc, hd);
        quant_q3_k(x, alt, 1); /* the simple block as the fallback */
        if (block_err(SKV_TYPE_Q3_K, alt, x, w) < block_err(SKV_TYPE_Q3_K, b, x, w))
            memcpy(b, alt, Q3_K_BYTES);
    }
}

/* ---- IQ4_NL / IQ4_XS: a scale per 32 values for the fixed grid -------------------------------
 * The grid is not uniform: a value's code is the grid point nearest x / d, and d is searched.
 * Candidates map the block's largest magnitude onto either end of the grid (-127, 113) and a
 * few points inside it; each candidate's codes then get their weighted least-squares d, and the
 * best pair wins. */
#define IQ4_TRIES 7 /* candidates per end: the end and 2, 4, ... 12 grid units inside */

/* The midpoints between neighbouring grid values. */
static const float iq4_mid[15] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                                  7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f};

/* The grid index nearest v (ties to the lower; NaN to 0): the midpoints below v counted, without
 * branches (a binary search mispredicted about half its steps: quantize to iq4_xs / iq4_nl
 * ran 1.4x slower, the same bytes). */
static int iq4_nearest(float v) {
    int n = 0;
    for (int k = 0; k < 15; k++) n += v > iq4_mid[k];
    return n;
}

/* Codes of x[32] for scale d into q; the least-squares scale for those codes into *best_d and
 * its weighted error (sum of w (x - d grid)^2, up to the constant sum of w x^2) returned. */
static double iq4_fit(const float *x, const float *w, float d, uint8_t *q, float *best_d) {
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    double sxg = 0.0, sgg = 0.0;
    for (int i = 0; i < 32; i++) {
        q[i] = (uint8_t)iq4_nearest(fin(x[i]) * id);
        const double g = skv_iq4_grid[q[i]];
        sxg += (double)w[i] * fin(x[i]) * g;
        sgg += (double)w[i] * g * g;
    }
    if (sgg <= 0.0) {
        *best_d = d;
        return 0.0;
    }
    *best_d = (float)(sxg / sgg);
    return -sxg * sxg / sgg;
}

/* The unrounded scale that fits x[32] (weights w) on the grid best, 0 for an all-zero block. */
static float iq4_search(const float *x, const float *w) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < 32; i++)
        if (fabsf(fin(x[i])) > amax) amax = fabsf(fin(x[i])), max = fin(x[i]);
    if (amax == 0.0f) return 0.0f;
    float best = 0.0f;
    double best_err = INFINITY;
    for (int end = 0; end < 2; end++)
        for (int k = 0; k < IQ4_TRIES; k++) {
            const float top = end ? 113.0f - 2.0f * (float)k : -127.0f + 2.0f * (float)k;
            uint8_t q[32];
            float d;
            const double e = iq4_fit(x, w, max / top, q, &d);
            if (e < best_err && isfinite(d)) best_err = e, best = d;
        }
    return best;
}

/* The codes of x[32] for the stored scale d, as nibbles in Q4_0's order into qs[16]. */
static void iq4_codes(const float *x, float d, uint8_t *qs) {
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(iq4_nearest(fin(x[j]) * id) | iq4_nearest(fin(x[j + 16]) * id) << 4);
}

static void quant_iq4_nl(const float *x, uint8_t *b, int64_t nb) {
    float w[32];
    for (int64_t i = 0; i < nb; i++, x += 32, b += 18) {
        k_weights(x, 32, w);
        const uint16_t h = skv_f32_to_f16(iq4_search(x, w));
        st_f16(b, h);
        iq4_codes(x, skv_f16_to_f32(h), b + 2);
    }
}

/* Weighted squared error of x[32] against d grid[codes of qs]. */
static double iq4_block_err(const float *x, const float *w, float d, const uint8_t *qs) {
    double e = 0.0;
    for (int c = 0; c < 32; c++) {
        const double r = (double)fin(x[c]) - (double)d * skv_iq4_grid[iq4_code(qs, c)];
        e += w[c] * r * r;
    }
    return e;
}

/* IQ4_XS: each sub-block's best scale s_j, then the super-block's d with s_j ~ d (ls_j - 32):
 * the largest |s_j| maps to -32 or to 31 (whichever errs less), the others round; the codes
 * follow the stored scales. */
static void quant_iq4_xs(const float *x, uint8_t *b, int64_t nb) {
    float w[SKV_QK_K], sj[8];
    uint8_t try_b[IQ4_XS_BYTES];
    for (int64_t i = 0; i < nb; i++, x += SKV_QK_K, b += IQ4_XS_BYTES) {
        k_weights(x, SKV_QK_K, w);
        float smax = 0.0f;
        for (int j = 0; j < 8; j++) {
            sj[j] = iq4_search(x + 32 * j, w + 32 * j);
            if (fabsf(sj[j]) > fabsf(smax)) smax = sj[j];
        }
        double best = INFINITY;
        for (int end = 0; end < 2; end++) {
            const uint16_t h = skv_f32_to_f16(smax / (end ? 31.0f : -32.0f));
            const float d = skv_f16_to_f32(h);
            memset(try_b, 0, sizeof try_b);
            st_f16(try_b, h);
            double err = 0.0;
            for (int j = 0; j < 8; j++) {
                const int ls = d != 0.0f ? round_clamp(sj[j] / d, -32, 31) : 0;
                try_b[4 + j / 2] |= (uint8_t)(((ls + 32) & 15) << 4 * (j % 2));
                const unsigned sh = (unsigned)((ls + 32) >> 4) << 2 * j;
                try_b[2] |= (uint8_t)sh, try_b[3] |= (uint8_t)(sh >> 8);
                iq4_codes(x + 32 * j, d * (float)ls, try_b + 8 + 16 * j);
                err += iq4_block_err(x + 32 * j, w + 32 * j, d * (float)ls, try_b + 8 + 16 * j);
            }
            if (end == 0 || err < best) best = err, memcpy(b, try_b, IQ4_XS_BYTES);
        }
    }
}

bool skv_type_can_quantize(skv_type t) {
    switch (t) {
    case SKV_TYPE_F32:
    case SKV_TYPE_F16:
    case SKV_TYPE_BF16:
    case SKV_TYPE_Q8_0:
    case SKV_TYPE_Q4_0:
    case SKV_TYPE_Q5_0:
    case SKV_TYPE_Q4_1:
    case SKV_TYPE_Q5_1:
    case SKV_TYPE_Q4_K:
    case SKV_TYPE_Q5_K:
    case SKV_TYPE_Q6_K:
    case SKV_TYPE_Q3_K:
    case SKV_TYPE_Q2_K:
    case SKV_TYPE_IQ4_NL:
    case SKV_TYPE_IQ4_XS:
        return true;
    default:
        return false;
    }
}

static void quantize_row(skv_type t, const float *src, void *dst, int64_t n, bool simple) {
    uint8_t *b = dst;
    int bs = skv_type_block_size(t);
    if (bs <= 0 || n <= 0 || n % bs || !skv_type_can_quantize(t)) return;
    int64_t nb = n / bs;
    switch (t) {
    case SKV_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case SKV_TYPE_F16:
        skv_f16_row_from_f32(b, src, n);
        break;
    case SKV_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) st_f16(b + 2 * i, skv_f32_to_bf16(src[i]));
        break;
    case SKV_TYPE_Q8_0:
        quant_q8_0(src, b, nb);
        break;
    case SKV_TYPE_Q4_0:
        quant_q4_0(src, b, nb);
        break;
    case SKV_TYPE_Q5_0:
        quant_q5_0(src, b, nb);
        break;
    case SKV_TYPE_Q4_1:
        quant_q_1(src, b, nb, false);
        break;
    case SKV_TYPE_Q5_1:
        quant_q_1(src, b, nb, true);
        break;
    case SKV_TYPE_Q4_K:
        if (simple)
            quant_q4_k(src, b, nb);
        else
            quant_k_best(SKV_TYPE_Q4_K, src, b, nb);
        break;
    case SKV_TYPE_Q5_K:
        if (simple)
            quant_q5_k(src, b, nb);
        else
            quant_k_best(SKV_TYPE_Q5_K, src, b, nb);
        break;
    case SKV_TYPE_Q6_K:
        if (simple)
            quant_q6_k(src, b, nb);
        else
            quant_q6_k_best(src, b, nb);
        break;
    case SKV_TYPE_Q3_K:
        if (simple)
            quant_q3_k(src, b, nb);
        else
            quant_q3_k_best(src, b, nb);
        break;
    case SKV_TYPE_Q2_K:
        if (simple)
            quant_q2_k(src, b, nb);
        else
            quant_q2_k_best(src, b, nb);
        break;
    case SKV_TYPE_IQ4_NL:
        quant_iq4_nl(src, b, nb);
        break;
    case SKV_TYPE_IQ4_XS:
        quant_iq4_xs(src, b, nb);
        break;
    default:
        break;
    }
}

void skv_quantize_row(skv_type t, const float *src, void *dst, int64_t n) {
    quantize_row(t, src, dst, n, false);
}

void skv_quantize_row_simple(skv_type t, const float *src, void *dst, int64_t n) {
    quantize_row(t, src, dst, n, true);
}

/* ---- 8-bit activations and their scalar dot products -------------------------------------- */

int skv_act_block(skv_type wt) {
    switch (wt) {
    case SKV_TYPE_Q8_0:
    case SKV_TYPE_Q4_0:
    case SKV_TYPE_Q5_0:
    case SKV_TYPE_Q4_1:
    case SKV_TYPE_Q5_1:
    case SKV_TYPE_IQ4_NL:
    case SKV_TYPE_IQ4_XS: /* scales per 32 values */
        return 32;
    case SKV_TYPE_Q4_K:
    case SKV_TYPE_Q5_K:
    case SKV_TYPE_Q6_K:
    case SKV_TYPE_Q3_K: /* records only (kernels.h) */
    case SKV_TYPE_Q2_K: /* records only at the SIMD levels */
        return SKV_QK_K;
    default:
        return 0;
    }
}

/* Rounds half to even (nearbyintf) and computes id = 127 / amax exactly like the AVX2 version,
 * so both produce the same bytes. A block holding an infinity or a NaN gets d = NaN (and zero
 * codes), so that the products come out NaN instead of silently finite. */
void skv_quantize_act_row(const float *x, void *dst, int64_t n, int bs) {
    int8_t *q = dst;
    float *d = (float *)((uint8_t *)dst + skv_act_off_d(n));
    float *s = (float *)((uint8_t *)dst + skv_act_off_s(n, bs));
    for (int64_t b = 0; b < n / bs; b++) {
        const float *xb = x + b * bs;
        int8_t *qb = q + b * bs;
        float amax = 0.0f;
        bool bad = false;
        for (int j = 0; j < bs; j++) {
            amax = fmaxf(amax, fabsf(xb[j]));
            bad |= !isfinite(xb[j]);
        }
        if (bad) {
            d[b] = NAN;
            memset(qb, 0, (size_t)bs);
            for (int g = 0; g < bs / 16; g++) s[b * (bs / 16) + g] = NAN;
            continue;
        }
        float db = amax / 127.0f, id = skv_act_inv_scale(amax);
        d[b] = db;
        for (int j = 0; j < bs; j++) qb[j] = sat_i8(nearbyintf(xb[j] * id));
        for (int g = 0; g < bs / 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += qb[16 * g + j];
            s[b * (bs / 16) + g] = db * (float)sum;
        }
    }
}

float skv_vec_dot_act(skv_type wt, const void *w, const void *act, int64_t n) {
    const uint8_t *b = w;
    const int8_t *q = act;
    int bs = skv_act_block(wt);
    if (bs == 0 || n % bs || n % skv_type_block_size(wt)) return 0.0f;
    const float *d = (const float *)((const uint8_t *)act + skv_act_off_d(n));
    float acc = 0.0f;
    int64_t nb = n / bs;
    switch (wt) {
    case SKV_TYPE_Q8_0:
        for (int64_t i = 0; i < nb; i++, b += 34, q += 32) {
            int sum = 0;
            for (int j = 0; j < 32; j++) sum += (int8_t)b[2 + j] * q[j];
            acc += ld_f16(b) * d[i] * (float)sum;
        }
        break;
    case SKV_TYPE_Q4_0:
        for (int64_t i = 0; i < nb; i++, b += 18, q += 32) {
            int sum = 0;
            for (int j = 0; j < 16; j++)
                sum += ((b[2 + j] & 15) - 8) * q[j] + ((b[2 + j] >> 4) - 8) * q[j + 16];
            acc += ld_f16(b) * d[i] * (float)sum;
        }
        break;
    case SKV_TYPE_Q5_0:
        for (int64_t i = 0; i < nb; i++, b += 22, q += 32) {
            int sum = 0;
            for (int j = 0; j < 32; j++) sum += (q5_0_code(b, j) - 16) * q[j];
            acc += ld_f16(b) * d[i] * (float)sum;
        }
        break;
    case SKV_TYPE_Q4_1:
    case SKV_TYPE_Q5_1: { /* d dx (codes . x) + m dx (sum of x's codes) */
        const bool five = wt == SKV_TYPE_Q5_1;
        for (int64_t i = 0; i < nb; i++, b += five ? 24 : 20, q += 32) {
            int sum = 0, xs = 0;
            for (int j = 0; j < 32; j++) {
                sum += q_1_code(b, five, j) * q[j];
                xs += q[j];
            }
            acc += ld_f16(b) * d[i] * (float)sum + ld_f16(b + 2) * d[i] * (float)xs;
        }
        break;
    }
    case SKV_TYPE_Q4_K:
    case SKV_TYPE_Q5_K: {
        size_t bb = wt == SKV_TYPE_Q4_K ? 144 : 176;
        for (int64_t i = 0; i < nb; i++, b += bb, q += SKV_QK_K) {
            const uint8_t *qh = b + 16, *qs = b + (wt == SKV_TYPE_Q4_K ? 16 : 48);
            int sumi = 0, summ = 0;
            for (int j = 0; j < 8; j++) {
                int sc, m, dot = 0, sq = 0;
                k_scale_min(b + 4, j, &sc, &m);
                int c = j / 2, hi = j & 1;
                for (int l = 0; l < 32; l++) {
                    int code = hi ? qs[32 * c + l] >> 4 : qs[32 * c + l] & 15;
                    if (wt == SKV_TYPE_Q5_K) code |= ((qh[l] >> j) & 1) << 4;
                    dot += code * q[32 * j + l];
                    sq += q[32 * j + l];
                }
                sumi += sc * dot;
                summ += m * sq;
            }
            acc += d[i] * (ld_f16(b) * (float)sumi - ld_f16(b + 2) * (float)summ);
        }
        break;
    }
    case SKV_TYPE_Q2_K: /* as Q4_K: d sum sc (codes . x) - dmin sum m (x's group sums) */
        for (int64_t i = 0; i < nb; i++, b += Q2_K_BYTES, q += SKV_QK_K) {
            int sumi = 0, summ = 0;
            for (int j = 0; j < 16; j++) {
                int dot = 0, sq = 0;
                for (int e = 16 * j; e < 16 * j + 16; e++) {
                    dot += q2_code(b, e) * q[e];
                    sq += q[e];
                }
                sumi += (b[j] & 15) * dot;
                summ += (b[j] >> 4) * sq;
            }
            acc += d[i] * (ld_f16(b + 80) * (float)sumi - ld_f16(b + 82) * (float)summ);
        }
        break;
    case SKV_TYPE_IQ4_NL:
        for (int64_t i = 0; i < nb; i++, b += 18, q += 32) {
            int sum = 0;
            for (int c = 0; c < 32; c++) sum += skv_iq4_grid[iq4_code(b + 2, c)] * q[c];
            acc += ld_f16(b) * d[i] * (float)sum;
        }
        break;
    case SKV_TYPE_IQ4_XS: /* per 32 values: (d (ls - 32), exact in float) dx (codes . x) */
        for (int64_t i = 0; i < nb; i++, q += 32) {
            const uint8_t *sb = b + (size_t)(i / 8) * IQ4_XS_BYTES;
            const int j = (int)(i % 8);
            int sum = 0;
            for (int c = 0; c < 32; c++) sum += skv_iq4_grid[iq4_code(sb + 8 + 16 * j, c)] * q[c];
            acc += ld_f16(sb) * (float)iq4_xs_scale(sb, j) * d[i] * (float)sum;
        }
        break;
    case SKV_TYPE_Q6_K:
        for (int64_t i = 0; i < nb; i++, b += 210, q += SKV_QK_K) {
            const int8_t *sc = (const int8_t *)(b + 192);
            int sumi = 0;
            for (int g = 0; g < 16; g++) {
                int dot = 0;
                for (int e = 16 * g; e < 16 * g + 16; e++)
                    dot += (q6_code(b, b + 128, e) - 32) * q[e];
                sumi += sc[g] * dot;
            }
            acc += ld_f16(b + 208) * d[i] * (float)sumi;
        }
        break;
    default:
        break;
    }
    return acc;
}

/* ---- k16 records (Q4_K, Q6_K, Q8_0, Q4_*, Q5_*) -----------------------------------------------
 * kernels.h describes the layout. Packing and unpacking are exact inverses (the 12 packed scale
 * bytes use all their 96 bits). */

_Static_assert(SKV_K16_DMIN + 32 == SKV_K16_RECORD, "the record's parts fill it");
_Static_assert(SKV_K16_Q5K_H == SKV_K16_RECORD && SKV_K16_Q5K_H + 512 == SKV_K16_Q5K_RECORD,
               "the Q5_K record is the Q4_K one and the fifth bits");

_Static_assert(SKV_K16_Q8_Q + 512 == SKV_K16_Q8_RECORD, "the Q8_0 record's parts fill it");

_Static_assert(SKV_K16_Q1_Q + 256 == SKV_K16_Q41_RECORD && SKV_K16_Q41_RECORD == 16 * 20 &&
                   SKV_K16_Q1_Q + 256 == SKV_K16_Q51_H &&
                   SKV_K16_Q51_H + 64 == SKV_K16_Q51_RECORD && SKV_K16_Q51_RECORD == 16 * 24,
               "the Q4_1 and Q5_1 records' parts fill them, with the rows' bytes");
_Static_assert(SKV_K16_Q5_Q + 256 == SKV_K16_Q5_H && SKV_K16_Q5_H + 64 == SKV_K16_Q5_RECORD &&
                   SKV_K16_Q5_RECORD == 16 * 22,
               "the Q5_0 record's parts fill it, with the rows' bytes");
_Static_assert(SKV_K16_Q4_Q + 256 == SKV_K16_Q4_RECORD && SKV_K16_Q4_RECORD == 16 * 18,
               "the Q4_0 record's parts fill it, with the rows' bytes");

_Static_assert(SKV_K16_Q6_QH == SKV_K16_Q6_SC + 32 && SKV_K16_Q6_QL == SKV_K16_Q6_QH + 128 &&
                   SKV_K16_Q6_PAIR == SKV_K16_Q6_QL + 256 && SKV_K16_Q6_D == 8 * SKV_K16_Q6_PAIR &&
                   SKV_K16_Q6_D + 32 == SKV_K16_Q6_RECORD && SKV_K16_Q6_RECORD == 16 * 210,
               "the Q6_K record's parts fill it, with the rows' bytes");
_Static_assert(SKV_K16_IQ4XS_SC == SKV_K16_IQ4XS_D + 32 &&
                   SKV_K16_IQ4XS_Q == SKV_K16_IQ4XS_SC + 128 &&
                   SKV_K16_IQ4XS_Q + 8 * 256 == SKV_K16_IQ4XS_RECORD,
               "the IQ4_XS record's parts fill it");
_Static_assert(SKV_K16_Q2_LO == SKV_K16_Q2_SCM + 32 && SKV_K16_Q2_PAIR == SKV_K16_Q2_LO + 128 &&
                   SKV_K16_Q2_D == 8 * SKV_K16_Q2_PAIR && SKV_K16_Q2_DMIN == SKV_K16_Q2_D + 32 &&
                   SKV_K16_Q2_DMIN + 32 == SKV_K16_Q2_RECORD && SKV_K16_Q2_RECORD == 16 * 84,
               "the Q2_K record's parts fill it, with the rows' bytes");
_Static_assert(SKV_K16_Q3_LO == SKV_K16_Q3_SC + 32 && SKV_K16_Q3_HI == SKV_K16_Q3_LO + 128 &&
                   SKV_K16_Q3_PAIR == SKV_K16_Q3_HI + 64 && SKV_K16_Q3_D == 8 * SKV_K16_Q3_PAIR &&
                   SKV_K16_Q3_D + 32 == SKV_K16_Q3_RECORD,
               "the Q3_K record's parts fill it");

static size_t k16_record_bytes(skv_type wt) {
    return wt == SKV_TYPE_Q4_K     ? SKV_K16_RECORD
           : wt == SKV_TYPE_Q5_K   ? SKV_K16_Q5K_RECORD
           : wt == SKV_TYPE_Q8_0   ? SKV_K16_Q8_RECORD
           : wt == SKV_TYPE_Q4_0   ? SKV_K16_Q4_RECORD
           : wt == SKV_TYPE_Q5_0   ? SKV_K16_Q5_RECORD
           : wt == SKV_TYPE_Q4_1   ? SKV_K16_Q41_RECORD
           : wt == SKV_TYPE_Q5_1   ? SKV_K16_Q51_RECORD
           : wt == SKV_TYPE_Q6_K   ? SKV_K16_Q6_RECORD
           : wt == SKV_TYPE_Q3_K   ? SKV_K16_Q3_RECORD
           : wt == SKV_TYPE_Q2_K   ? SKV_K16_Q2_RECORD
           : wt == SKV_TYPE_IQ4_NL ? SKV_K16_Q4_RECORD
           : wt == SKV_TYPE_IQ4_XS ? SKV_K16_IQ4XS_RECORD
                                   : 0;
}

/* Values per record: a Q8_0 / Q4_0 / IQ4_NL block, or a K-quant / IQ4_XS super-block. */
static int k16_unit(skv_type wt) {
    return skv_type_block_size(wt);
}

size_t skv_k16_bytes(skv_type wt, int n_out, int n_in) {
    const int unit = k16_unit(wt);
    const size_t rec = k16_record_bytes(wt);
    if (!rec || n_out <= 0 || n_in <= 0 || n_in % unit) return 0;
    const uint64_t groups = ((uint64_t)n_out + 15) / 16;
    uint64_t total;
    if (!skv_mul_ok(groups * (uint64_t)(n_in / unit), rec, &total) || total > SIZE_MAX)
        return SIZE_MAX;
    return (size_t)total;
}

/* Q6_K: where code c (0..255) of a super-block lies in the record, for row k of its group: the
 * byte of its low 4 bits and the nibble (0 low, 4 high), the byte of its top 2 bits and their
 * shift. Pair p = c / 32, group parity gp = c / 16 % 2, vector j = c % 16 / 2 (code 2j + e). */
static void q6_place(int c, int k, int *ql, int *ql_shift, int *qh, int *qh_shift) {
    const int p = c / 32, gp = c / 16 % 2, j = c % 16 / 2, e = c % 2, h = k / 8, row = k % 8;
    const int b = 4 * row + 2 * gp + e; /* the byte within the octet's 32 */
    *ql = SKV_K16_Q6_PAIR * p + SKV_K16_Q6_QL + 64 * (j % 4) + 32 * h + b;
    *ql_shift = j < 4 ? 0 : 4;
    *qh = SKV_K16_Q6_PAIR * p + SKV_K16_Q6_QH + 64 * (j / 4) + 32 * h + b;
    *qh_shift = 2 * (j % 4);
}

/* Row k's super-block b into its Q6_K record: q6_put_ref's bytes, whole 32-bit lanes at a time
 * (a loaded model's tied Q6_K output is ~270M codes: code by code took seconds): the 256 codes
 * as the format stores them, then per pair p and vector j the row's lane (codes 2j, 2j + 1 of
 * group 2p, then of 2p + 1), and from 8 lanes the row's 4 QL and 2 QH words. */
static void q6_put(uint8_t *rec, int k, const uint8_t *b) {
    uint8_t code[SKV_QK_K];
    for (int half = 0; half < 2; half++) {
        const uint8_t *ql = b + 64 * half, *qh = b + 128 + 32 * half;
        uint8_t *c = code + 128 * half;
        for (int l = 0; l < 32; l++) {
            c[l] = (uint8_t)((ql[l] & 15) | (qh[l] & 3) << 4);
            c[l + 32] = (uint8_t)((ql[l + 32] & 15) | (qh[l] >> 2 & 3) << 4);
            c[l + 64] = (uint8_t)((ql[l] >> 4) | (qh[l] >> 4 & 3) << 4);
            c[l + 96] = (uint8_t)((ql[l + 32] >> 4) | (qh[l] >> 6 & 3) << 4);
        }
    }
    const int h = k / 8, row = k % 8;
    for (int p = 0; p < 8; p++) {
        uint32_t v[8];
        for (int j = 0; j < 8; j++) {
            const uint8_t *c0 = code + 32 * p + 2 * j, *c1 = c0 + 16;
            v[j] = (uint32_t)c0[0] | (uint32_t)c0[1] << 8 | (uint32_t)c1[0] << 16 |
                   (uint32_t)c1[1] << 24;
        }
        uint8_t *pr = rec + SKV_K16_Q6_PAIR * p;
        for (int jj = 0; jj < 4; jj++) {
            const uint32_t lo = (v[jj] & 0x0f0f0f0fu) | (v[jj + 4] & 0x0f0f0f0fu) << 4;
            memcpy(pr + SKV_K16_Q6_QL + 64 * jj + 32 * h + 4 * row, &lo, 4);
        }
        for (int f = 0; f < 2; f++) {
            uint32_t top = 0;
            for (int jj = 0; jj < 4; jj++) top |= (v[4 * f + jj] >> 4 & 0x03030303u) << 2 * jj;
            memcpy(pr + SKV_K16_Q6_QH + 64 * f + 32 * h + 4 * row, &top, 4);
        }
        memcpy(pr + SKV_K16_Q6_SC + 16 * h + 2 * row, b + 192 + 2 * p, 2);
    }
    memcpy(rec + SKV_K16_Q6_D + 2 * k, b + 208, 2);
}

/* The same code by code, through q6_place: the layout's definition. */
static void q6_put_ref(uint8_t *rec, int k, const uint8_t *b) {
    for (int c = 0; c < SKV_QK_K; c++) {
        int ql, qls, qh, qhs;
        q6_place(c, k, &ql, &qls, &qh, &qhs);
        const int code = q6_code(b, b + 128, c);
        rec[ql] |= (uint8_t)((code & 15) << qls);
        rec[qh] |= (uint8_t)((code >> 4) << qhs);
    }
    for (int grp = 0; grp < 16; grp++)
        rec[SKV_K16_Q6_PAIR * (grp / 2) + SKV_K16_Q6_SC + 16 * (k / 8) + 2 * (k % 8) + grp % 2] =
            b[192 + grp];
    memcpy(rec + SKV_K16_Q6_D + 2 * k, b + 208, 2);
}

static void q6_get(const uint8_t *rec, int k, uint8_t *b) {
    memset(b, 0, 192);
    for (int c = 0; c < SKV_QK_K; c++) {
        int ql, qls, qh, qhs;
        q6_place(c, k, &ql, &qls, &qh, &qhs);
        const int code = (rec[ql] >> qls & 15) | (rec[qh] >> qhs & 3) << 4;
        /* the inverse of q6_code */
        const int h = c / 128, l = c % 32, q = c % 128 / 32;
        b[64 * h + l + 32 * (q & 1)] |= (uint8_t)((code & 15) << (q & 2 ? 4 : 0));
        b[128 + 32 * h + l] |= (uint8_t)((code >> 4) << 2 * q);
    }
    for (int grp = 0; grp < 16; grp++)
        b[192 + grp] =
            rec[SKV_K16_Q6_PAIR * (grp / 2) + SKV_K16_Q6_SC + 16 * (k / 8) + 2 * (k % 8) + grp % 2];
    memcpy(b + 208, rec + SKV_K16_Q6_D + 2 * k, 2);
}

/* Q3_K and Q2_K records (pairs of pair bytes, their low planes at lo_off): the byte of code c's
 * (0..255) low 2 bits, for row k of its group, and their shift. Pair p = c / 32, group parity
 * gp = c / 16 % 2, vector j = c % 16 / 2 (code 2j + e), as Q6_K's (q6_place). */
static void lo_place(int c, int k, int pair, int lo_off, int *lo, int *lo_shift) {
    const int p = c / 32, gp = c / 16 % 2, j = c % 16 / 2, e = c % 2, h = k / 8, row = k % 8;
    *lo = pair * p + lo_off + 64 * (j / 4) + 32 * h + 4 * row + 2 * gp + e;
    *lo_shift = 2 * (j % 4);
}

/* Q3_K: lo_place, and the byte of code c's third bit and its shift. */
static void q3_place(int c, int k, int *lo, int *lo_shift, int *hi, int *hi_shift) {
    const int p = c / 32, gp = c / 16 % 2, j = c % 16 / 2, e = c % 2, h = k / 8, row = k % 8;
    lo_place(c, k, SKV_K16_Q3_PAIR, SKV_K16_Q3_LO, lo, lo_shift);
    *hi = SKV_K16_Q3_PAIR * p + SKV_K16_Q3_HI + 32 * h + 4 * row + 2 * gp + e;
    *hi_shift = j;
}

static inline int q3_rec_sc_at(int grp, int k) {
    return SKV_K16_Q3_PAIR * (grp / 2) + SKV_K16_Q3_SC + 16 * (k / 8) + 2 * (k % 8) + grp % 2;
}

/* Row k's Q3_K super-block b into its record, code by code through q3_place. */
static void q3r_put_ref(uint8_t *rec, int k, const uint8_t *b) {
    for (int c = 0; c < SKV_QK_K; c++) {
        int lo, los, hi, his;
        q3_place(c, k, &lo, &los, &hi, &his);
        const int q = q3_code(b, c) + 4;
        rec[lo] |= (uint8_t)((q & 3) << los);
        rec[hi] |= (uint8_t)((q >> 2) << his);
    }
    for (int grp = 0; grp < 16; grp++)
        rec[q3_rec_sc_at(grp, k)] = (uint8_t)(int8_t)q3_scale(b, grp);
    memcpy(rec + SKV_K16_Q3_D + 2 * k, b + 108, 2);
}

/* Row lanes of pair p of a super-block's 256 codes (one byte each) in the Q6_K / Q3_K / Q2_K
 * records' order: lane j holds codes 2j, 2j + 1 of group 2p, then of group 2p + 1. */
static void pair_lanes(const uint8_t *code, int p, uint32_t v[8]) {
    for (int j = 0; j < 8; j++) {
        const uint8_t *c0 = code + 32 * p + 2 * j, *c1 = c0 + 16;
        v[j] =
            (uint32_t)c0[0] | (uint32_t)c0[1] << 8 | (uint32_t)c1[0] << 16 | (uint32_t)c1[1] << 24;
    }
}

/* A pair's two LO words of a row from its 8 lanes (codes' low 2 bits), to lo (32 * h + 4 * row
 * past the planes' start). */
static void put_lo_words(uint8_t *lo, const uint32_t v[8]) {
    for (int f = 0; f < 2; f++) {
        uint32_t w = 0;
        for (int jj = 0; jj < 4; jj++) w |= (v[4 * f + jj] & 0x03030303u) << 2 * jj;
        memcpy(lo + 64 * f, &w, 4);
    }
}

/* The same bytes a 32-bit lane at a time (q6_put's walk): the 256 codes + 4, then per pair p and
 * vector j the row's lane, and from 8 lanes the row's 2 LO words and its HI word. */
static void q3r_put(uint8_t *rec, int k, const uint8_t *b) {
    uint8_t code[SKV_QK_K];
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                code[128 * n + 32 * c + l] =
                    (uint8_t)((b[32 + 32 * n + l] >> 2 * c & 3) | (b[l] >> (4 * n + c) & 1) << 2);
    const int h = k / 8, row = k % 8;
    for (int p = 0; p < 8; p++) {
        uint32_t v[8], hi = 0;
        pair_lanes(code, p, v);
        for (int j = 0; j < 8; j++) hi |= (v[j] >> 2 & 0x01010101u) << j;
        uint8_t *pr = rec + SKV_K16_Q3_PAIR * p;
        put_lo_words(pr + SKV_K16_Q3_LO + 32 * h + 4 * row, v);
        memcpy(pr + SKV_K16_Q3_HI + 32 * h + 4 * row, &hi, 4);
        for (int e = 0; e < 2; e++)
            pr[SKV_K16_Q3_SC + 16 * h + 2 * row + e] = (uint8_t)(int8_t)q3_scale(b, 2 * p + e);
    }
    memcpy(rec + SKV_K16_Q3_D + 2 * k, b + 108, 2);
}

static void q3r_get(const uint8_t *rec, int k, uint8_t *b) {
    int8_t code[SKV_QK_K];
    int scale[16];
    for (int c = 0; c < SKV_QK_K; c++) {
        int lo, los, hi, his;
        q3_place(c, k, &lo, &los, &hi, &his);
        code[c] = (int8_t)((rec[lo] >> los & 3) + 4 * (rec[hi] >> his & 1) - 4);
    }
    for (int grp = 0; grp < 16; grp++) scale[grp] = (int8_t)rec[q3_rec_sc_at(grp, k)];
    q3_pack(b, code, scale,
            (uint16_t)(rec[SKV_K16_Q3_D + 2 * k] | rec[SKV_K16_Q3_D + 2 * k + 1] << 8));
}

/* Q2_K records (kernels.h): where row k's scale byte of group grp lies. */
static inline int q2_rec_scm_at(int grp, int k) {
    return SKV_K16_Q2_PAIR * (grp / 2) + SKV_K16_Q2_SCM + 16 * (k / 8) + 2 * (k % 8) + grp % 2;
}

/* Row k's Q2_K super-block b into its record, code by code through lo_place. */
static void q2r_put_ref(uint8_t *rec, int k, const uint8_t *b) {
    for (int c = 0; c < SKV_QK_K; c++) {
        int lo, los;
        lo_place(c, k, SKV_K16_Q2_PAIR, SKV_K16_Q2_LO, &lo, &los);
        rec[lo] |= (uint8_t)(q2_code(b, c) << los);
    }
    for (int grp = 0; grp < 16; grp++) rec[q2_rec_scm_at(grp, k)] = b[grp];
    memcpy(rec + SKV_K16_Q2_D + 2 * k, b + 80, 2);
    memcpy(rec + SKV_K16_Q2_DMIN + 2 * k, b + 82, 2);
}

/* The same bytes a 32-bit lane at a time (q3r_put's walk without the third bits). */
static void q2r_put(uint8_t *rec, int k, const uint8_t *b) {
    uint8_t code[SKV_QK_K];
    for (int n = 0; n < 2; n++)
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++)
                code[128 * n + 32 * c + l] = (uint8_t)(b[16 + 32 * n + l] >> 2 * c & 3);
    const int h = k / 8, row = k % 8;
    for (int p = 0; p < 8; p++) {
        uint32_t v[8];
        pair_lanes(code, p, v);
        uint8_t *pr = rec + SKV_K16_Q2_PAIR * p;
        put_lo_words(pr + SKV_K16_Q2_LO + 32 * h + 4 * row, v);
        memcpy(pr + SKV_K16_Q2_SCM + 16 * h + 2 * row, b + 2 * p, 2);
    }
    memcpy(rec + SKV_K16_Q2_D + 2 * k, b + 80, 2);
    memcpy(rec + SKV_K16_Q2_DMIN + 2 * k, b + 82, 2);
}

static void q2r_get(const uint8_t *rec, int k, uint8_t *b) {
    memset(b, 0, Q2_K_BYTES);
    for (int c = 0; c < SKV_QK_K; c++) {
        int lo, los;
        lo_place(c, k, SKV_K16_Q2_PAIR, SKV_K16_Q2_LO, &lo, &los);
        b[16 + 32 * (c >> 7) + (c & 31)] |= (uint8_t)((rec[lo] >> los & 3) << 2 * ((c >> 5) & 3));
    }
    for (int grp = 0; grp < 16; grp++) b[grp] = rec[q2_rec_scm_at(grp, k)];
    memcpy(b + 80, rec + SKV_K16_Q2_D + 2 * k, 2);
    memcpy(b + 82, rec + SKV_K16_Q2_DMIN + 2 * k, 2);
}

/* Row k's block as the Q6_K block of the same values. */
static void q3r_get_q6(const uint8_t *rec, int k, uint8_t *b) {
    uint8_t q3[Q3_K_BYTES];
    q3r_get(rec, k, q3);
    skv_q3_k_to_q6_k(q3, b, 1);
}

/* The packers' common walk: per 16-row group and block of k16_unit values one record, zeroed
 * (rows past n_out stay zero), then put(record, row k of the group, the row's block) for each
 * row there is. */
typedef void (*k16_put_fn)(uint8_t *rec, int k, const uint8_t *blk);
static void k16_pack_with(skv_type wt, const void *w, int n_out, int n_in, void *dst,
                          k16_put_fn put) {
    const int unit = k16_unit(wt), nb = n_in / unit;
    const size_t blk = skv_row_bytes(wt, unit), rec_bytes = k16_record_bytes(wt);
    uint8_t *rec = dst;
    for (int g = 0; g < (n_out + 15) / 16; g++)
        for (int b = 0; b < nb; b++, rec += rec_bytes) {
            memset(rec, 0, rec_bytes);
            for (int k = 0; k < 16 && 16 * g + k < n_out; k++)
                put(rec, k, (const uint8_t *)w + ((size_t)(16 * g + k) * nb + b) * blk);
        }
}

/* A Q8_0 row's block into its record: scales and codes moved, nothing changed. */
static void q8_put(uint8_t *rec, int k, const uint8_t *blk) {
    memcpy(rec + SKV_K16_Q8_D + 2 * k, blk, 2);
    for (int q = 0; q < 8; q++)
        memcpy(rec + SKV_K16_Q8_Q + 256 * (k / 8) + 32 * q + 4 * (k % 8), blk + 2 + 4 * q, 4);
}

static void q8_get(const uint8_t *rec, int k, uint8_t *blk) {
    memcpy(blk, rec + SKV_K16_Q8_D + 2 * k, 2);
    for (int q = 0; q < 8; q++)
        memcpy(blk + 2 + 4 * q, rec + SKV_K16_Q8_Q + 256 * (k / 8) + 32 * q + 4 * (k % 8), 4);
}

/* A Q4_0 row's block into its record: code c of the block (byte c % 16 of qs, the low nibble for
 * c < 16) goes to byte c % 4 of row k % 8's dword in vector c / 4, its nibble k / 8. A dword at a
 * time: vector g's 4 codes are bytes 4 (g % 4) .. 4 (g % 4) + 3 of qs, their low nibbles for
 * g < 4, their high ones after (the record starts zeroed: k16_pack_with). Q5_0's low 4 bits
 * likewise, from its qs. */
static void nibbles_put(uint8_t *q_rec, int k, const uint8_t *qs) {
    for (int g = 0; g < 8; g++) {
        uint32_t q, r;
        memcpy(&q, qs + 4 * (g % 4), 4);
        q = (g < 4 ? q : q >> 4) & 0x0f0f0f0fu;
        uint8_t *dst = q_rec + 32 * g + 4 * (k % 8);
        memcpy(&r, dst, 4);
        r |= q << 4 * (k / 8);
        memcpy(dst, &r, 4);
    }
}

static void q4_put(uint8_t *rec, int k, const uint8_t *blk) {
    memcpy(rec + SKV_K16_Q4_D + 2 * k, blk, 2);
    nibbles_put(rec + SKV_K16_Q4_Q, k, blk + 2);
}

/* The fifth bits of codes 4g..4g+3 (bits 4g..4g+3 of the block's qh) to bits 4 (k % 8) .. + 3
 * of h[g], 32 higher for k >= 8 (Q5_0, Q5_1 records). Code by code in rec_codes_get. */
static void fifth_bits_put(uint8_t *h_rec, int k, const uint8_t *qh4) {
    const uint32_t qh =
        (uint32_t)qh4[0] | (uint32_t)qh4[1] << 8 | (uint32_t)qh4[2] << 16 | (uint32_t)qh4[3] << 24;
    for (int g = 0; g < 8; g++) {
        const int bit = 4 * (k % 8) + 32 * (k / 8);
        h_rec[8 * g + bit / 8] |= (uint8_t)((qh >> 4 * g & 15) << bit % 8);
    }
}

/* Q5_0: the scale, the low 4 bits as Q4_0's, the fifth bits; Q4_1 / Q5_1: the Q4_0 / Q5_0
 * record's parts after the two scale arrays. */
static void q5_put(uint8_t *rec, int k, const uint8_t *blk) {
    memcpy(rec + SKV_K16_Q5_D + 2 * k, blk, 2);
    nibbles_put(rec + SKV_K16_Q5_Q, k, blk + 6);
    fifth_bits_put(rec + SKV_K16_Q5_H, k, blk + 2);
}

static void q41_put(uint8_t *rec, int k, const uint8_t *blk) {
    memcpy(rec + SKV_K16_Q1_D + 2 * k, blk, 2);
    memcpy(rec + SKV_K16_Q1_M + 2 * k, blk + 2, 2);
    nibbles_put(rec + SKV_K16_Q1_Q, k, blk + 4);
}

static void q51_put(uint8_t *rec, int k, const uint8_t *blk) {
    memcpy(rec + SKV_K16_Q1_D + 2 * k, blk, 2);
    memcpy(rec + SKV_K16_Q1_M + 2 * k, blk + 2, 2);
    nibbles_put(rec + SKV_K16_Q1_Q, k, blk + 8);
    fifth_bits_put(rec + SKV_K16_Q51_H, k, blk + 4);
}

/* Row k's block back from a record: the nibbles at q, the fifth bits at h (none: h < 0) into
 * the block's qh at qh_at, qs at qs_at. */
static void rec_codes_get(const uint8_t *rec, int k, int q, int h, uint8_t *blk, int qh_at,
                          int qs_at) {
    for (int c = 0; c < 32; c++) {
        const int i = 4 * (k % 8) + c % 4; /* the byte of vector c / 4 */
        const int lo = rec[q + 32 * (c / 4) + i] >> 4 * (k / 8) & 15;
        blk[qs_at + c % 16] |= (uint8_t)(lo << 4 * (c / 16));
        if (h < 0) continue;
        const int bit = i + 32 * (k / 8);
        blk[qh_at + c / 8] |= (uint8_t)((rec[h + 8 * (c / 4) + bit / 8] >> bit % 8 & 1) << c % 8);
    }
}

static void q41_get(const uint8_t *rec, int k, uint8_t *blk) {
    memcpy(blk, rec + SKV_K16_Q1_D + 2 * k, 2);
    memcpy(blk + 2, rec + SKV_K16_Q1_M + 2 * k, 2);
    memset(blk + 4, 0, 16);
    rec_codes_get(rec, k, SKV_K16_Q1_Q, -1, blk, 0, 4);
}

static void q51_get(const uint8_t *rec, int k, uint8_t *blk) {
    memcpy(blk, rec + SKV_K16_Q1_D + 2 * k, 2);
    memcpy(blk + 2, rec + SKV_K16_Q1_M + 2 * k, 2);
    memset(blk + 4, 0, 20);
    rec_codes_get(rec, k, SKV_K16_Q1_Q, SKV_K16_Q51_H, blk, 4, 8);
}

static void q4_get(const uint8_t *rec, int k, uint8_t *blk) {
    memcpy(blk, rec + SKV_K16_Q4_D + 2 * k, 2);
    memset(blk + 2, 0, 16);
    rec_codes_get(rec, k, SKV_K16_Q4_Q, -1, blk, 0, 2);
}

static void q5_get(const uint8_t *rec, int k, uint8_t *blk) {
    memcpy(blk, rec + SKV_K16_Q5_D + 2 * k, 2);
    memset(blk + 2, 0, 20);
    rec_codes_get(rec, k, SKV_K16_Q5_Q, SKV_K16_Q5_H, blk, 2, 6);
}

/* IQ4_XS: the scale, each sub-block's ls - 32 as a byte, its indices as Q4_0's nibbles. */
static void iq4xs_put(uint8_t *rec, int k, const uint8_t *b) {
    memcpy(rec + SKV_K16_IQ4XS_D + 2 * k, b, 2);
    for (int j = 0; j < 8; j++) {
        rec[SKV_K16_IQ4XS_SC + 16 * j + k] = (uint8_t)(int8_t)iq4_xs_scale(b, j);
        nibbles_put(rec + SKV_K16_IQ4XS_Q + 256 * j, k, b + 8 + 16 * j);
    }
}

static void iq4xs_get(const uint8_t *rec, int k, uint8_t *b) {
    memset(b, 0, 136);
    memcpy(b, rec + SKV_K16_IQ4XS_D + 2 * k, 2);
    unsigned sh = 0;
    for (int j = 0; j < 8; j++) {
        const int ls = (int8_t)rec[SKV_K16_IQ4XS_SC + 16 * j + k] + 32;
        b[4 + j / 2] |= (uint8_t)((ls & 15) << 4 * (j % 2));
        sh |= (unsigned)(ls >> 4 & 3) << 2 * j;
        rec_codes_get(rec, k, SKV_K16_IQ4XS_Q + 256 * j, -1, b, 0, 8 + 16 * j);
    }
    b[2] = (uint8_t)sh;
    b[3] = (uint8_t)(sh >> 8);
}

/* q4_put code by code (skv_k16_pack_ref: the yardstick of the word-wise one). */
static void q4_put_ref(uint8_t *rec, int k, const uint8_t *blk) {
    memcpy(rec + SKV_K16_Q4_D + 2 * k, blk, 2);
    for (int c = 0; c < 32; c++) {
        const int code = c < 16 ? blk[2 + c] & 15 : blk[2 + c - 16] >> 4;
        rec[SKV_K16_Q4_Q + 32 * (c / 4) + 4 * (k % 8) + c % 4] |= (uint8_t)(code << 4 * (k / 8));
    }
}

/* A Q4_K or Q5_K row's super-block into its record, code by code (skv_k16_pack_avx2 makes the
 * same for Q4_K). Q5_K's code e has its fifth bit at bit e / 32 of qh[e % 32]. */
static void qk_put_ref(uint8_t *rec, int k, const uint8_t *b, bool q5) {
    uint8_t code[SKV_QK_K];
    const uint8_t *qs = b + (q5 ? 48 : 16);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            code[64 * c + l] = qs[32 * c + l] & 15;
            code[64 * c + 32 + l] = qs[32 * c + l] >> 4;
        }
    for (int e = 0; q5 && e < SKV_QK_K; e++)
        code[e] |= (uint8_t)((b[16 + e % 32] >> e / 32 & 1) << 4);
    for (int j = 0; j < 8; j++) {
        for (int gp = 0; gp < 4; gp++)
            for (int e = 0; e < 4; e++) {
                const int lo = code[32 * j + 4 * gp + e], hi = code[32 * j + 4 * gp + 16 + e];
                rec[SKV_K16_Q + 256 * j + 64 * gp + 4 * k + e] =
                    (uint8_t)((lo & 15) | (hi & 15) << 4);
                if (!q5) continue;
                const int at = SKV_K16_Q5K_H + 16 * (4 * j + gp), bit = 4 * k + e;
                rec[at + bit / 8] |= (uint8_t)((lo >> 4) << bit % 8);
                rec[at + 8 + bit / 8] |= (uint8_t)((hi >> 4) << bit % 8);
            }
        int sc, m;
        k_scale_min(b + 4, j, &sc, &m);
        rec[SKV_K16_SC + 16 * j + k] = (uint8_t)sc;
        rec[SKV_K16_MN + 32 * (j / 2) + 2 * k + j % 2] = (uint8_t)m;
    }
    memcpy(rec + SKV_K16_D + 2 * k, b, 2);
    memcpy(rec + SKV_K16_DMIN + 2 * k, b + 2, 2);
}

static void q4k_put_ref(uint8_t *rec, int k, const uint8_t *b) {
    qk_put_ref(rec, k, b, false);
}

static void q5k_put_ref(uint8_t *rec, int k, const uint8_t *b) {
    qk_put_ref(rec, k, b, true);
}

void skv_k16_pack_ref(skv_type wt, const void *w, int n_out, int n_in, void *dst) {
    if (wt == SKV_TYPE_Q8_0)
        k16_pack_with(wt, w, n_out, n_in, dst, q8_put);
    else if (wt == SKV_TYPE_Q4_0)
        k16_pack_with(wt, w, n_out, n_in, dst, q4_put_ref);
    else if (wt == SKV_TYPE_Q5_0)
        k16_pack_with(wt, w, n_out, n_in, dst, q5_put);
    else if (wt == SKV_TYPE_Q4_1)
        k16_pack_with(wt, w, n_out, n_in, dst, q41_put);
    else if (wt == SKV_TYPE_Q5_1)
        k16_pack_with(wt, w, n_out, n_in, dst, q51_put);
    else if (wt == SKV_TYPE_Q4_K)
        k16_pack_with(wt, w, n_out, n_in, dst, q4k_put_ref);
    else if (wt == SKV_TYPE_Q5_K)
        k16_pack_with(wt, w, n_out, n_in, dst, q5k_put_ref);
    else if (wt == SKV_TYPE_Q6_K)
        k16_pack_with(wt, w, n_out, n_in, dst, q6_put_ref);
    else if (wt == SKV_TYPE_Q3_K)
        k16_pack_with(wt, w, n_out, n_in, dst, q3r_put_ref);
    else if (wt == SKV_TYPE_Q2_K)
        k16_pack_with(wt, w, n_out, n_in, dst, q2r_put_ref);
    else if (wt == SKV_TYPE_IQ4_NL)
        k16_pack_with(wt, w, n_out, n_in, dst, q4_put_ref);
    else if (wt == SKV_TYPE_IQ4_XS)
        k16_pack_with(wt, w, n_out, n_in, dst, iq4xs_put);
}

void skv_k16_pack(skv_type wt, const void *w, int n_out, int n_in, void *dst) {
#ifdef SKV_HAVE_MATMUL_AVX2
    if (wt == SKV_TYPE_Q4_K && skv_kernels_use_simd()) {
        skv_k16_pack_avx2(w, n_out, n_in, dst);
        return;
    }
#endif
    if (wt == SKV_TYPE_Q6_K)
        k16_pack_with(wt, w, n_out, n_in, dst, q6_put);
    else if (wt == SKV_TYPE_Q3_K)
        k16_pack_with(wt, w, n_out, n_in, dst, q3r_put);
    else if (wt == SKV_TYPE_Q2_K)
        k16_pack_with(wt, w, n_out, n_in, dst, q2r_put);
    else if (wt == SKV_TYPE_Q4_0 || wt == SKV_TYPE_IQ4_NL)
        k16_pack_with(wt, w, n_out, n_in, dst, q4_put);
    else
        skv_k16_pack_ref(wt, w, n_out, n_in, dst);
}

/* The unpackers' walk, the packers' in reverse: get(record, row k of its group, the block). */
typedef void (*k16_get_fn)(const uint8_t *rec, int k, uint8_t *blk);
static void k16_unpack_as(skv_type wt, skv_type out, const void *k16, int n_in, int r0, int r1,
                          void *dst, k16_get_fn get) {
    const int unit = k16_unit(wt), nb = n_in / unit;
    const size_t blk = skv_row_bytes(out, unit), rec_bytes = k16_record_bytes(wt);
    for (int r = r0; r < r1; r++)
        for (int b = 0; b < nb; b++)
            get((const uint8_t *)k16 + ((size_t)(r / 16) * (size_t)nb + (size_t)b) * rec_bytes,
                r % 16, (uint8_t *)dst + ((size_t)(r - r0) * (size_t)nb + (size_t)b) * blk);
}

static void k16_unpack_with(skv_type wt, const void *k16, int n_in, int r0, int r1, void *dst,
                            k16_get_fn get) {
    k16_unpack_as(wt, wt, k16, n_in, r0, r1, dst, get);
}

void skv_k16_unpack_rows_q6(const void *k16, int n_in, int r0, int r1, void *dst) {
    k16_unpack_as(SKV_TYPE_Q3_K, SKV_TYPE_Q6_K, k16, n_in, r0, r1, dst, q3r_get_q6);
}

static void q4k_get(const uint8_t *rec, int k, uint8_t *b);
static void q5k_get(const uint8_t *rec, int k, uint8_t *b);

void skv_k16_unpack_rows(skv_type wt, const void *k16, int n_in, int r0, int r1, void *dst) {
    if (wt == SKV_TYPE_Q8_0)
        k16_unpack_with(wt, k16, n_in, r0, r1, dst, q8_get);
    else if (wt == SKV_TYPE_Q4_0)
        k16_unpack_with(wt, k16, n_in, r0, r1, dst, q4_get);
    else if (wt == SKV_TYPE_Q5_0)
        k16_unpack_with(wt, k16, n_in, r0, r1, dst, q5_get);
    else if (wt == SKV_TYPE_Q4_1)
        k16_unpack_with(wt, k16, n_in, r0, r1, dst, q41_get);
    else if (wt == SKV_TYPE_Q5_1)
        k16_unpack_with(wt, k16, n_in, r0, r1, dst, q51_get);
    else if (wt == SKV_TYPE_Q4_K)
        k16_unpack_with(wt, k16, n_in, r0, r1, dst, q4k_get);
    else if (wt == SKV_TYPE_Q5_K)
        k16_unpack_with(wt, k16, n_in, r0, r1, dst, q5k_get);
    else if (wt == SKV_TYPE_Q6_K)
        k16_unpack_with(wt, k16, n_in, r0, r1, dst, q6_get);
    else if (wt == SKV_TYPE_Q3_K)
        k16_unpack_with(wt, k16, n_in, r0, r1, dst, q3r_get);
    else if (wt == SKV_TYPE_Q2_K)
        k16_unpack_with(wt, k16, n_in, r0, r1, dst, q2r_get);
    else if (wt == SKV_TYPE_IQ4_NL)
        k16_unpack_with(wt, k16, n_in, r0, r1, dst, q4_get);
    else if (wt == SKV_TYPE_IQ4_XS)
        k16_unpack_with(wt, k16, n_in, r0, r1, dst, iq4xs_get);
}

static void qk_get(const uint8_t *rec, int k, uint8_t *b, bool q5) {
    uint8_t code[SKV_QK_K];
    int sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        for (int gp = 0; gp < 4; gp++)
            for (int e = 0; e < 4; e++) {
                const uint8_t q = rec[SKV_K16_Q + 256 * j + 64 * gp + 4 * k + e];
                const int at = SKV_K16_Q5K_H + 16 * (4 * j + gp), bit = 4 * k + e;
                code[32 * j + 4 * gp + e] =
                    (uint8_t)((q & 15) | (q5 ? (rec[at + bit / 8] >> bit % 8 & 1) << 4 : 0));
                code[32 * j + 4 * gp + 16 + e] =
                    (uint8_t)((q >> 4) | (q5 ? (rec[at + 8 + bit / 8] >> bit % 8 & 1) << 4 : 0));
            }
        sc[j] = rec[SKV_K16_SC + 16 * j + k];
        m[j] = rec[SKV_K16_MN + 32 * (j / 2) + 2 * k + j % 2];
    }
    memcpy(b, rec + SKV_K16_D + 2 * k, 2);
    memcpy(b + 2, rec + SKV_K16_DMIN + 2 * k, 2);
    k_pack_scales(b + 4, sc, m);
    uint8_t *qs = b + (q5 ? 48 : 16);
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            qs[32 * c + l] = (uint8_t)((code[64 * c + l] & 15) | (code[64 * c + 32 + l] & 15) << 4);
    if (!q5) return;
    memset(b + 16, 0, 32);
    for (int e = 0; e < SKV_QK_K; e++) b[16 + e % 32] |= (uint8_t)((code[e] >> 4) << e / 32);
}

static void q4k_get(const uint8_t *rec, int k, uint8_t *b) {
    qk_get(rec, k, b, false);
}

static void q5k_get(const uint8_t *rec, int k, uint8_t *b) {
    qk_get(rec, k, b, true);
}
