/* attn_prefill_simd.h — the body of the blocked prefill attention (see attn_prefill.h), written
 * once over a vector of VL floats: included by attn_prefill_avx2.c (VL = 8) and
 * attn_prefill_avx512.c (VL = 16), which define the V_* / VI_* operations and SKV_AP_FN, and by
 * attn_prefill_amx.c (VL = 16 and SKV_AP_AMX: both products of an F16 cache on AMX tiles, the
 * section "the AMX variant" below; other bits).
 *
 * Query rows (token-major, the g heads of a token adjacent) go in blocks of SKV_AP_ROWS, keys in
 * chunks of SKV_AP_KEYS. Rows live in vector lanes throughout, so nothing is ever summed
 * horizontally, and every lane does the same operations whatever VL is: both widths give the
 * same bits.
 *   Q^T [hd][ROWS]  the block's queries, transposed, pre-scaled by scale * log2(e)
 *   S^T [KEYS][ROWS] = K_chunk · Q^T: tiles of TK keys x 3 row vectors (TK = 4 at 8 lanes: 12
 *                    accumulators of 16 registers; 8 at 16 lanes: 24 of 32, per head dimension 3
 *                    row loads and 8 key broadcasts feed 24 FMAs; the attention ~9% faster on a
 *                    2-FMA-port Xeon than with 4). Each score is one chain over the head
 *                    dimension whatever TK is, so both widths still give the same bits
 *   online softmax per row in base 2, vectorized over VL rows: running max, sum, and the
 *                    factor that rescales what earlier chunks accumulated
 *   O^T [hd][ROWS]  = O^T * alpha + V_chunk^T · P^T: tiles of TK value columns x 3 row vectors
 * and finally out = O / sum, transposed back. A causal row only sees n_vis of its token: each
 * tile runs to the largest count among its rows and masks the rest. */
#include "attn_prefill.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define AI static inline __attribute__((always_inline))
#ifdef __clang__
#define UNROLL _Pragma("clang loop unroll(full)")
#else
#define UNROLL _Pragma("GCC unroll 16")
#endif

enum {
    MB = SKV_AP_ROWS,      /* rows per block; the stride of the transposed buffers */
    KC = SKV_AP_KEYS,      /* keys per chunk */
    TV = 3,                /* row vectors (of VL rows) per micro-tile */
    TK = VL >= 16 ? 8 : 4, /* keys per score tile, value columns per output tile */
};
_Static_assert(MB % (VL * TV) == 0 && KC % TK == 0, "blocking");
_Static_assert(VL % TK == 0, "pv_tile's TK columns at a time: hd is a multiple of VL");

/* 2^x for x <= 0. x = k + f with |f| <= 1/2; 2^f from the Taylor series of e^(f ln 2) to degree
 * 6 (relative error below 1.3e-7); 2^k built in the exponent field (V_SCALE2 where there is
 * one: the same bits, every result being normal). Inputs below -125 (also -inf) give 2^-125:
 * negligible beside the row maximum's weight of exactly 1, and never NaN. */
AI V exp2_neg(V x) {
    x = V_MAX(x, V_SET1(-125.0f));
    V kf = V_ROUND(x);
    V f = V_SUB(x, kf);
    V p = V_SET1(1.5403530393381609e-4f);
    p = V_FMA(p, f, V_SET1(1.3333558146428443e-3f));
    p = V_FMA(p, f, V_SET1(9.6181291076284772e-3f));
    p = V_FMA(p, f, V_SET1(5.5504108664821580e-2f));
    p = V_FMA(p, f, V_SET1(2.4022650695910071e-1f));
    p = V_FMA(p, f, V_SET1(6.9314718055994531e-1f));
    p = V_FMA(p, f, V_SET1(1.0f));
#ifdef V_SCALE2
    return V_SCALE2(p, kf); /* p * 2^k in one instruction: the same bits (normal results) */
#else
    VI e = VI_SLLI(VI_ADD(V_CVTI(kf), VI_SET1(127)), 23);
    return V_MUL(p, VI_AS_V(e));
#endif
}

typedef struct ap_ctx {
    float *out;
    const float *q;
    size_t out_stride, q_stride, rb;
    const uint8_t *k, *v;
    const int *n_vis;
    skv_type t;
    int g, hd;
    float qscale;
    /* work regions (64-byte aligned) */
    float *qt;    /* [hd][MB] */
    float *st;    /* [KC][MB] */
    float *ot;    /* [hd][MB] */
    float *mx;    /* [MB] running max (base 2) */
    float *sum;   /* [MB] running sum */
    float *alpha; /* [MB] this chunk's rescale of earlier sums and outputs */
    int32_t *cnt; /* [MB] visible entries of each row */
    float *kc;    /* [KC][hd] F16 keys converted */
    float *vc;    /* [KC][hd] F16 values converted */
#ifdef SKV_AP_AMX
    uint16_t *qb; /* [3][MB/16][hd/32][16][32] the block's queries in bf16 parts, B tiles */
    uint16_t *kh; /* [KC][hd] the chunk's keys, high bf16 part (A tiles) */
    uint16_t *kl; /* [KC][hd] ... and the rest */
    uint16_t *vh; /* [hd][KC] the chunk's values transposed, high part (A tiles) */
    uint16_t *vl; /* [hd][KC] ... and the rest */
    uint16_t *pb; /* [2][3][KC/32][16][32] two row vectors' weights in parts, B tiles */
#endif
} ap_ctx;

/* st[j][r] = sum_c K[j][c] qt[c][r] for keys j < lim (rounded up to TK; the extra keys repeat
 * key lim-1, so nothing past it is read) and the tile's rv row vectors. */
AI void qk_tile(int rv, const float *qt, float *st, const float *kb, int hd, int lim) {
    for (int j = 0; j < lim; j += TK) {
        const float *kr[TK];
        UNROLL for (int x = 0; x < TK; x++) kr[x] = kb + (size_t)SKV_MIN(j + x, lim - 1) * hd;
        V acc[TK][TV];
        UNROLL for (int x = 0; x < TK; x++) UNROLL for (int w = 0; w < rv; w++) acc[x][w] =
            V_ZERO();
        for (int c = 0; c < hd; c++) {
            V a[TV];
            UNROLL for (int w = 0; w < rv; w++) a[w] = V_LOAD(qt + (size_t)c * MB + VL * w);
            UNROLL for (int x = 0; x < TK; x++) {
                V b = V_SET1(kr[x][c]);
                UNROLL for (int w = 0; w < rv; w++) acc[x][w] = V_FMA(a[w], b, acc[x][w]);
            }
        }
        UNROLL for (int x = 0; x < TK; x++) UNROLL for (int w = 0; w < rv; w++)
            V_STORE(st + (size_t)(j + x) * MB + VL * w, acc[x][w]);
    }
}

/* Online softmax of VL rows over this chunk's keys j < lim: scores of keys a row does not see
 * (j >= cnt - j0) count as -inf; st receives the weights 2^(s - max). */
AI void softmax_rows(const ap_ctx *a, int r, int j0, int lim) {
    const V ninf = V_SET1(-INFINITY);
    const VI cv = VI_SUB(VI_LOAD(a->cnt + r), VI_SET1(j0)), one = VI_SET1(1);
    float *s = a->st + r;
    /* every row of the vector sees keys j < vis (the masks below only matter from there on) */
    int vis = INT32_MAX;
    for (int i = 0; i < VL; i++) vis = SKV_MIN(vis, a->cnt[r + i] - j0);
    vis = SKV_MAX(0, SKV_MIN(vis, lim));
    /* the maximum in four independent chains (one max per 4-cycle latency otherwise; the
     * maximum is exact, so the order does not change it: same bits unless a score is NaN, a
     * row that gives meaningless output either way) */
    V m4[4] = {ninf, ninf, ninf, ninf};
    int j = 0;
    for (; j + 4 <= vis; j += 4)
        for (int u = 0; u < 4; u++) m4[u] = V_MAX(m4[u], V_LOAD(s + (size_t)(j + u) * MB));
    VI jv = VI_SET1(j);
    for (; j < lim; j++, jv = VI_ADD(jv, one))
        m4[0] = V_MAX(m4[0], V_SEL(VI_GT(cv, jv), V_LOAD(s + (size_t)j * MB), ninf));
    const V cm = V_MAX(V_MAX(m4[0], m4[1]), V_MAX(m4[2], m4[3]));
    const V mold = V_LOAD(a->mx + r), mnew = V_MAX(mold, cm);
    /* A row that has seen nothing yet keeps max -inf; subtracting 0 then keeps things finite. */
    const V muse = V_SEL(V_NE(mnew, ninf), mnew, V_ZERO());
    const V al = exp2_neg(V_SUB(mold, muse));
    V tot = V_ZERO();
    for (j = 0; j < vis; j++) {
        const V p = exp2_neg(V_SUB(V_LOAD(s + (size_t)j * MB), muse));
        V_STORE(s + (size_t)j * MB, p);
        tot = V_ADD(tot, p);
    }
    for (jv = VI_SET1(j); j < lim; j++, jv = VI_ADD(jv, one)) {
        const V p =
            V_SEL(VI_GT(cv, jv), exp2_neg(V_SUB(V_LOAD(s + (size_t)j * MB), muse)), V_ZERO());
        V_STORE(s + (size_t)j * MB, p);
        tot = V_ADD(tot, p);
    }
    V_STORE(a->sum + r, V_FMA(V_LOAD(a->sum + r), al, tot));
    V_STORE(a->mx + r, mnew);
    V_STORE(a->alpha + r, al);
}

/* ot[c][r] = ot[c][r] * alpha[r] + sum_{j < lim} st[j][r] V[j][c] for the tile's rv row
 * vectors, TK value columns at a time. Keys j >= full are past some row's count: a row that does
 * not see key j (weight exactly 0) keeps its sum as it is rather than adding 0 * V[j][c], which
 * is NaN when an entry it must not see holds an infinity (an F16 cache saturates at 65504). */
AI void pv_tile(int rv, const float *st, const float *vb, int hd, int full, int lim, float *ot,
                const float *alpha) {
    V al[TV];
    UNROLL for (int w = 0; w < rv; w++) al[w] = V_LOAD(alpha + VL * w);
    for (int c0 = 0; c0 < hd; c0 += TK) {
        V acc[TK][TV];
        UNROLL for (int x = 0; x < TK; x++) UNROLL for (int w = 0; w < rv; w++) acc[x][w] =
            V_ZERO();
        const float *vr = vb + c0;
        int j = 0;
        for (; j < full; j++, vr += hd) {
            V p[TV];
            UNROLL for (int w = 0; w < rv; w++) p[w] = V_LOAD(st + (size_t)j * MB + VL * w);
            UNROLL for (int x = 0; x < TK; x++) {
                const V b = V_SET1(vr[x]);
                UNROLL for (int w = 0; w < rv; w++) acc[x][w] = V_FMA(p[w], b, acc[x][w]);
            }
        }
        /* (the same loop with the select: one body taking a `masked` flag ran ~5% slower at
         * 8 lanes in attn_prefill_bench, f16 causal 88 -> 83 GFLOP/s) */
        for (; j < lim; j++, vr += hd) {
            V p[TV];
            UNROLL for (int w = 0; w < rv; w++) p[w] = V_LOAD(st + (size_t)j * MB + VL * w);
            UNROLL for (int x = 0; x < TK; x++) {
                const V b = V_SET1(vr[x]);
                UNROLL for (int w = 0; w < rv; w++) acc[x][w] =
                    V_SEL(V_NE(p[w], V_ZERO()), V_FMA(p[w], b, acc[x][w]), acc[x][w]);
            }
        }
        UNROLL for (int x = 0; x < TK; x++) UNROLL for (int w = 0; w < rv; w++) {
            float *o = ot + (size_t)(c0 + x) * MB + VL * w;
            V_STORE(o, V_FMA(V_LOAD(o), al[w], acc[x][w]));
        }
    }
}

/* Scores, softmax and values of one tile of rv row vectors starting at row vector w0: keys
 * j < lim of the chunk, all rows of the tile seeing keys j < full. */
AI void tile(int rv, const ap_ctx *a, int w0, const float *kb, const float *vb, int j0, int full,
             int lim) {
    int r = VL * w0;
    qk_tile(rv, a->qt + r, a->st + r, kb, a->hd, lim);
    for (int w = 0; w < rv; w++) softmax_rows(a, r + VL * w, j0, lim);
    pv_tile(rv, a->st + r, vb, a->hd, full, lim, a->ot + r, a->alpha + r);
}

#ifdef SKV_AP_AMX
/* ---- the AMX variant (attn_prefill_amx.c): both products on tiles --------------------------
 * F16 keys and values split exactly into two bf16 parts (amx_util.h split_f16), the scaled
 * queries (split3) and the softmax weights (pair_rows3) into three; each product is the five exact
 * partial products of the F16 matmul (hi.lo3, hi.mid, hi.hi, lo.hi, lo.mid: the dropped lo.lo3 is
 * below 2^-24 of the term), summed in float tiles. Other bits than the vector code, within its
 * float rounding. A row whose scores are already infinite or NaN (a NaN query, an infinite key it
 * sees) gives a meaningless finite output here as in the vector code (exp2_neg's clamp), but not
 * the same one. Row vectors go in pairs: tiles 0-3 hold four independent 16 x 16 sums (two groups
 * of keys or value columns times the two row vectors), 4-5 the A parts, 6-7 the B parts (per
 * step of 32: 12 tile loads for 20 products, as in matmul_amx.c). */

enum { QT = SKV_AP_ROWS / 16 }; /* row vectors per block */

/* The B tiles of the block's queries: row i of tile (p, w, s) pairs head dimensions
 * 32s + 2i, 32s + 2i + 1 of rows 16w .. 16w + 15, part p. */
static void amx_queries(ap_ctx *a, int nw) {
    const int hd = a->hd, ns = hd / 32;
    const size_t part = (size_t)QT * ns * 512;
    for (int w = 0; w < nw; w++)
        for (int c = 0; c < hd; c += 2) {
            V x[3], y[3];
            split3(V_LOAD(a->qt + (size_t)c * MB + 16 * w), x);
            split3(V_LOAD(a->qt + (size_t)(c + 1) * MB + 16 * w), y);
            uint16_t *d = a->qb + ((size_t)w * ns + (size_t)(c / 32)) * 512 + 16 * (size_t)(c % 32);
            for (int p = 0; p < 3; p++)
                _mm512_store_si512((__m512i *)(void *)(d + p * part), tile_row_f(x[p], y[p]));
        }
}

/* The chunk's keys [j0, j0 + nk) in parts (rows from nk to the next multiple of 32 zero) and its
 * values transposed 16 x 16 at a time. False, converting nothing, when an entry is infinite or
 * NaN: a weight 0 times it is NaN in a tile, so such a chunk takes the vector code, which skips
 * the keys a row does not see. */
static bool amx_chunk(ap_ctx *a, int j0, int nk) {
    const int hd = a->hd, n32 = (nk + 31) & ~31;
    const __m512i ex = _mm512_set1_epi16(0x7c00); /* an f16 infinity or NaN: exponent all ones */
    __mmask32 bad = 0;
    for (int j = 0; j < nk; j++)
        for (int c = 0; c < hd; c += 32) {
            const size_t o = (size_t)(j0 + j) * a->rb + 2 * (size_t)c;
            bad |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(_mm512_loadu_si512(a->k + o), ex), ex);
            bad |= _mm512_cmpeq_epi16_mask(_mm512_and_si512(_mm512_loadu_si512(a->v + o), ex), ex);
        }
    if (bad) return false;
    V h0, l0, h1, l1;
    for (int j = 0; j < n32; j++)
        for (int c = 0; c < hd; c += 32) {
            const uint8_t *p = a->k + (size_t)(j0 + j) * a->rb + 2 * (size_t)c;
            split_f16_finite(j < nk ? V_LOAD_F16(p) : V_ZERO(), &h0, &l0);
            split_f16_finite(j < nk ? V_LOAD_F16(p + 32) : V_ZERO(), &h1, &l1);
            _mm512_store_si512((__m512i *)(void *)(a->kh + (size_t)j * hd + c), bf16_two(h0, h1));
            _mm512_store_si512((__m512i *)(void *)(a->kl + (size_t)j * hd + c), bf16_two(l0, l1));
        }
    for (int jb = 0; jb < n32; jb += 32)
        for (int c = 0; c < hd; c += 16) {
            V t[16], u[16]; /* keys jb .. jb + 15 and the 16 after them */
            for (int i = 0; i < 16; i++) {
                const uint8_t *p = a->v + (size_t)(j0 + jb + i) * a->rb + 2 * (size_t)c;
                t[i] = jb + i < nk ? V_LOAD_F16(p) : V_ZERO();
                u[i] = jb + 16 + i < nk ? V_LOAD_F16(p + 16 * a->rb) : V_ZERO();
            }
            transpose16(t); /* t[x]: column c + x */
            transpose16(u);
            for (int x = 0; x < 16; x++) {
                split_f16_finite(t[x], &h0, &l0);
                split_f16_finite(u[x], &h1, &l1);
                const size_t o = (size_t)(c + x) * KC + (size_t)jb;
                _mm512_store_si512((__m512i *)(void *)(a->vh + o), bf16_two(h0, h1));
                _mm512_store_si512((__m512i *)(void *)(a->vl + o), bf16_two(l0, l1));
            }
        }
    return true;
}

/* Tiles 0-3 += A (tiles 4, 5: two groups of 16 along the output's first axis) times B (tiles 6,
 * 7: two row vectors): 0 = 4.6, 1 = 4.7, 2 = 5.6, 3 = 5.7, four independent sums. */
#define FOUR()                                                                                     \
    do {                                                                                           \
        _tile_dpbf16ps(0, 4, 6);                                                                   \
        _tile_dpbf16ps(1, 4, 7);                                                                   \
        _tile_dpbf16ps(2, 5, 6);                                                                   \
        _tile_dpbf16ps(3, 5, 7);                                                                   \
    } while (0)

/* One step of 32 along the sum of the four outputs: A's two parts at ah and al (the second group
 * `next` halves on, stride ld bytes), B's three parts of the two row vectors at b0 and b1 (parts
 * `part` halves apart). Five products per output, hi.lo3, hi.mid, hi.hi, lo.hi, lo.mid. */
AI void amx_step(const uint16_t *ah, const uint16_t *al, size_t next, size_t ld, const uint16_t *b0,
                 const uint16_t *b1, size_t part) {
    _tile_loadd(4, ah, ld);
    _tile_loadd(5, ah + next, ld);
    _tile_loadd(6, b0 + 2 * part, 64);
    _tile_loadd(7, b1 + 2 * part, 64);
    FOUR();
    _tile_loadd(6, b0 + part, 64);
    _tile_loadd(7, b1 + part, 64);
    FOUR();
    _tile_loadd(6, b0, 64);
    _tile_loadd(7, b1, 64);
    FOUR();
    _tile_loadd(4, al, ld);
    _tile_loadd(5, al + next, ld);
    FOUR();
    _tile_loadd(6, b0 + part, 64);
    _tile_loadd(7, b1 + part, 64);
    FOUR();
}

/* Row vectors w0 and w1 (w1 = w0 when there is one: its sums are made and dropped) over the
 * chunk's keys j < lim (lim >= 1, the larger of the two's). */
static void amx_tile(const ap_ctx *a, int w0, int w1, int j0, int lim) {
    const int hd = a->hd, ns = hd / 32, n16 = (lim + 15) / 16, n32 = (lim + 31) / 32;
    const int r0 = 16 * w0, r1 = 16 * w1, two_rv = w1 != w0;
    const size_t ldm = MB * sizeof(float), qpart = (size_t)QT * ns * 512;
    const size_t ppart = (size_t)(KC / 32) * 512;

    /* scores st[j][r ..] of keys j < 16 n16, two groups of 16 keys at a time (a lone last group
     * computed twice) */
    TILE_MEMORY();
    for (int kg = 0; kg < n16; kg += 2) {
        const int two = kg + 1 < n16;
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        for (int s = 0; s < ns; s++) {
            const size_t o = (size_t)kg * 16 * hd + 32 * (size_t)s;
            amx_step(a->kh + o, a->kl + o, two ? 16 * (size_t)hd : 0, 2 * (size_t)hd,
                     a->qb + ((size_t)w0 * ns + (size_t)s) * 512,
                     a->qb + ((size_t)w1 * ns + (size_t)s) * 512, qpart);
        }
        float *c = a->st + (size_t)kg * 16 * MB;
        _tile_stored(0, c + r0, ldm);
        if (two_rv) _tile_stored(1, c + r1, ldm);
        if (two) _tile_stored(2, c + 16 * MB + r0, ldm);
        if (two && two_rv) _tile_stored(3, c + 16 * MB + r1, ldm);
    }
    TILE_MEMORY();

    for (int v = 0; v <= two_rv; v++) {
        const int r = v ? r1 : r0;
        uint16_t *pb = a->pb + (size_t)v * 3 * ppart;
        softmax_rows(a, r, j0, lim);
        /* the weights as B tiles, keys from lim on 0 */
        for (int j = lim; j < 32 * n32; j++) V_STORE(a->st + (size_t)j * MB + r, V_ZERO());
        for (int j = 0; j < 32 * n32; j += 2) {
            __m512i rows[3];
            pair_rows3(V_LOAD(a->st + (size_t)j * MB + r), V_LOAD(a->st + (size_t)(j + 1) * MB + r),
                       rows);
            uint16_t *d = pb + (size_t)(j / 32) * 512 + 16 * (size_t)(j % 32);
            for (int p = 0; p < 3; p++)
                _mm512_store_si512((__m512i *)(void *)(d + p * ppart), rows[p]);
        }
        /* what earlier chunks accumulated, rescaled */
        const V al = V_LOAD(a->alpha + r);
        for (int c = 0; c < hd; c++) {
            float *o = a->ot + (size_t)c * MB + r;
            V_STORE(o, V_MUL(V_LOAD(o), al));
        }
    }
    TILE_MEMORY();

    /* ot[c][r ..] += sum_j V[j][c] P[j][r ..], two groups of 16 columns at a time */
    const uint16_t *p0 = a->pb, *p1 = a->pb + (two_rv ? 3 * ppart : 0);
    for (int cg = 0; cg < hd; cg += 32) {
        float *o = a->ot + (size_t)cg * MB;
        _tile_loadd(0, o + r0, ldm);
        _tile_loadd(1, o + r1, ldm);
        _tile_loadd(2, o + 16 * MB + r0, ldm);
        _tile_loadd(3, o + 16 * MB + r1, ldm);
        for (int s = 0; s < n32; s++) {
            const size_t v = (size_t)cg * KC + 32 * (size_t)s;
            amx_step(a->vh + v, a->vl + v, 16 * KC, 2 * KC, p0 + (size_t)s * 512,
                     p1 + (size_t)s * 512, ppart);
        }
        _tile_stored(0, o + r0, ldm);
        _tile_stored(2, o + 16 * MB + r0, ldm);
        if (two_rv) {
            _tile_stored(1, o + r1, ldm);
            _tile_stored(3, o + 16 * MB + r1, ldm);
        }
    }
    TILE_MEMORY();
}
#undef FOUR
#endif /* SKV_AP_AMX */

/* Rows j0 .. j0+nk-1 of an F16 K or V into floats. */
static void f16_rows(float *dst, const uint8_t *src, size_t rb, int j0, int nk, int hd) {
    for (int j = 0; j < nk; j++) {
        const uint8_t *s = src + (size_t)(j0 + j) * rb;
        float *d = dst + (size_t)j * hd;
        for (int c = 0; c < hd; c += VL) V_STORE(d + c, V_LOAD_F16(s + 2 * c));
    }
}

/* off[i] = where row row0 + i of the flattened (token, head) rows starts, in floats from the
 * buffer's start (token stride `stride`, a head's hd values adjacent), i < VL. */
AI void rows_at(size_t off[VL], size_t stride, int64_t row0, int g, int hd) {
    int64_t tok = row0 / g;
    int h = (int)(row0 % g);
    for (int i = 0; i < VL; i++) {
        off[i] = (size_t)tok * stride + (size_t)h * hd;
        if (++h == g) h = 0, tok++;
    }
}

/* Rows [r0, r0 + nr) of the flattened (token, head) rows, nr <= MB. */
static void block(ap_ctx *a, int64_t r0, int nr) {
    const int hd = a->hd, g = a->g;
    int nw = (nr + VL - 1) / VL; /* row vectors */
    int maxcnt = 0;
    int64_t tok = r0 / g;
    for (int r = 0, h = (int)(r0 % g); r < VL * nw; r++) {
        /* padding rows: zero queries (below), counts as the last real row (harmless) */
        a->cnt[r] = r < nr ? SKV_MAX(a->n_vis[tok], 0) : a->cnt[nr - 1];
        if (++h == g) h = 0, tok++;
        maxcnt = SKV_MAX(maxcnt, a->cnt[r]);
        a->mx[r] = -INFINITY, a->sum[r] = 0.0f;
    }
    /* qt = the rows' queries, scaled and transposed VL x VL at a time: whole-row vector loads
     * (a block's queries were often just written by the other thread; one scalar load per
     * value waited on each line in turn: ~10% of the attention in a SmolLM2 prefill) */
    const V qs = V_SET1(a->qscale);
    size_t off[VL]; /* where the VL rows' queries (or outputs) start */
    for (int r = 0; r < VL * nw; r += VL) {
        rows_at(off, a->q_stride, r0 + r, g, hd);
        for (int c = 0; c < hd; c += VL) {
            V t[VL];
            for (int i = 0; i < VL; i++)
                t[i] = r + i < nr ? V_MUL(V_LOADU(a->q + off[i] + c), qs) : V_ZERO();
            V_TRANSPOSE(t);
            for (int j = 0; j < VL; j++) V_STORE(a->qt + (size_t)(c + j) * MB + r, t[j]);
        }
    }
    for (int c = 0; c < hd; c++) memset(a->ot + (size_t)c * MB, 0, sizeof(float) * VL * nw);
#ifdef SKV_AP_AMX
    amx_queries(a, nw);
#endif

    for (int j0 = 0; j0 < maxcnt; j0 += KC) {
        int nk = SKV_MIN(KC, maxcnt - j0);
#ifdef SKV_AP_AMX
        if (amx_chunk(a, j0, nk)) {
            for (int w = 0; w < nw; w += 2) {
                const int w1 = w + 1 < nw ? w + 1 : w;
                int tmax = 0;
                for (int r = VL * w; r < VL * (w1 + 1); r++) tmax = SKV_MAX(tmax, a->cnt[r]);
                if (tmax > j0) amx_tile(a, w, w1, j0, SKV_MIN(nk, tmax - j0));
            }
            continue;
        }
#endif
        const float *kb, *vb;
        if (a->t == SKV_TYPE_F16) {
            f16_rows(a->kc, a->k, a->rb, j0, nk, hd);
            f16_rows(a->vc, a->v, a->rb, j0, nk, hd);
            kb = a->kc, vb = a->vc;
        } else {
            kb = (const float *)(a->k + (size_t)j0 * a->rb);
            vb = (const float *)(a->v + (size_t)j0 * a->rb);
        }
        for (int w0 = 0; w0 < nw; w0 += TV) {
            int rv = SKV_MIN(TV, nw - w0), tmax = 0, tmin = INT32_MAX;
            for (int r = VL * w0; r < VL * (w0 + rv); r++) {
                tmax = SKV_MAX(tmax, a->cnt[r]);
                tmin = SKV_MIN(tmin, a->cnt[r]);
            }
            int lim = SKV_MIN(nk, tmax - j0), full = SKV_MAX(0, SKV_MIN(lim, tmin - j0));
            if (lim <= 0) continue; /* no row of the tile sees this chunk */
            if (rv == 3)
                tile(3, a, w0, kb, vb, j0, full, lim);
            else if (rv == 2)
                tile(2, a, w0, kb, vb, j0, full, lim);
            else
                tile(1, a, w0, kb, vb, j0, full, lim);
        }
    }

    /* out = O * (1 / sum), transposed back VL x VL at a time */
    for (int r = 0; r < nr; r += VL) {
        const V s = V_LOAD(a->sum + r);
        const V inv = V_SEL(V_GT(s, V_ZERO()), V_DIV(V_SET1(1.0f), s), V_ZERO());
        rows_at(off, a->out_stride, r0 + r, g, hd);
        for (int c = 0; c < hd; c += VL) {
            V t[VL];
            for (int j = 0; j < VL; j++)
                t[j] = V_MUL(V_LOAD(a->ot + (size_t)(c + j) * MB + r), inv);
            V_TRANSPOSE(t);
            for (int i = 0; i < VL && r + i < nr; i++) V_STOREU(a->out + off[i] + c, t[i]);
        }
    }
}

void SKV_AP_FN(float *out, size_t out_stride, const float *q, size_t q_stride, int n, int g, int hd,
               const void *k, const void *v, skv_type kv_type, const int *n_vis, float scale,
               void *work) {
    ap_ctx a = {
        .out = out,
        .q = q,
        .out_stride = out_stride,
        .q_stride = q_stride,
        .rb = skv_row_bytes(kv_type, hd),
        .k = k,
        .v = v,
        .n_vis = n_vis,
        .t = kv_type,
        .g = g,
        .hd = hd,
        .qscale = scale * 1.44269504088896341f,
    };
    /* The regions in the order and sizes of simd_floats() in attn_prefill.c. */
    size_t dr = ((size_t)hd * MB + 15) & ~(size_t)15, sr = (size_t)KC * MB, mr = (MB + 15) & ~15;
    float *w = work;
    a.qt = w, w += dr;
    a.st = w, w += sr;
    a.ot = w, w += dr;
    a.mx = w, w += mr;
    a.sum = w, w += mr;
    a.alpha = w, w += mr;
    a.cnt = (int32_t *)w, w += mr;
    a.kc = w, w += ((size_t)KC * hd + 15) & ~(size_t)15;
    a.vc = w, w += ((size_t)KC * hd + 15) & ~(size_t)15;
#ifdef SKV_AP_AMX
    uint16_t *u = (uint16_t *)w; /* sizes: amx_halves() in attn_prefill.c, each a multiple of 32 */
    a.qb = u, u += (size_t)3 * MB * hd;
    a.kh = u, u += (size_t)KC * hd;
    a.kl = u, u += (size_t)KC * hd;
    a.vh = u, u += (size_t)KC * hd;
    a.vl = u, u += (size_t)KC * hd;
    a.pb = u;
    tiles_configure();
#endif
    int64_t rows = (int64_t)n * g;
    for (int64_t r0 = 0; r0 < rows; r0 += MB) block(&a, r0, (int)SKV_MIN((int64_t)MB, rows - r0));
#ifdef SKV_AP_AMX
    _tile_release();
#endif
}
