/* attn_prefill_avx2.c — the AVX2/FMA/F16C blocked prefill attention (see attn_prefill.h).
 *
 * Query rows (token-major, the g heads of a token adjacent) go in blocks of SKV_AP_ROWS, keys in
 * chunks of SKV_AP_KEYS. Rows live in vector lanes throughout, so nothing is ever summed
 * horizontally:
 *   Q^T [hd][ROWS]  the block's queries, transposed, pre-scaled by scale * log2(e)
 *   S^T [KEYS][ROWS] = K_chunk · Q^T: tiles of 4 keys x 24 rows (12 accumulators; per head
 *                    dimension 3 row loads and 4 key broadcasts feed 12 FMAs)
 *   online softmax per row in base 2, vectorized over 8 rows: running max, sum, and the
 *                    factor that rescales what earlier chunks accumulated
 *   O^T [hd][ROWS]  = O^T * alpha + V_chunk^T · P^T: tiles of 4 value columns x 24 rows
 * and finally out = O / sum, transposed back. A causal row only sees n_vis of its token: each
 * 24-row tile runs to the largest count among its rows and masks the rest. */
#include "attn_prefill.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)

#include <immintrin.h>
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
    MB = SKV_AP_ROWS, /* rows per block; the stride of the transposed buffers */
    KC = SKV_AP_KEYS, /* keys per chunk */
    TV = 3,           /* row vectors (of 8) per micro-tile */
    TK = 4,           /* keys per score tile, value columns per output tile */
};
_Static_assert(MB % (8 * TV) == 0 && KC % TK == 0, "blocking");

/* 2^x for x <= 0. x = k + f with |f| <= 1/2; 2^f from the Taylor series of e^(f ln 2) to degree
 * 6 (relative error below 1.3e-7); 2^k built in the exponent field. Inputs below -125 (also
 * -inf) give 2^-125: negligible beside the row maximum's weight of exactly 1, and never NaN. */
AI __m256 exp2_neg(__m256 x) {
    x = _mm256_max_ps(x, _mm256_set1_ps(-125.0f));
    __m256 kf = _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 f = _mm256_sub_ps(x, kf);
    __m256 p = _mm256_set1_ps(1.5403530393381609e-4f);
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.3333558146428443e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(9.6181291076284772e-3f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(5.5504108664821580e-2f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(2.4022650695910071e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(6.9314718055994531e-1f));
    p = _mm256_fmadd_ps(p, f, _mm256_set1_ps(1.0f));
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(kf), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
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
} ap_ctx;

/* st[j][r] = sum_c K[j][c] qt[c][r] for keys j < lim (rounded up to TK; the extra keys repeat
 * key lim-1, so nothing past it is read) and the tile's rv row vectors. */
AI void qk_tile(int rv, const float *qt, float *st, const float *kb, int hd, int lim) {
    for (int j = 0; j < lim; j += TK) {
        const float *kr[TK];
        UNROLL for (int x = 0; x < TK; x++) kr[x] = kb + (size_t)SKV_MIN(j + x, lim - 1) * hd;
        __m256 acc[TK][TV];
        UNROLL for (int x = 0; x < TK; x++) UNROLL for (int w = 0; w < rv; w++) acc[x][w] =
            _mm256_setzero_ps();
        for (int c = 0; c < hd; c++) {
            __m256 a[TV];
            UNROLL for (int w = 0; w < rv; w++) a[w] = _mm256_load_ps(qt + (size_t)c * MB + 8 * w);
            UNROLL for (int x = 0; x < TK; x++) {
                __m256 b = _mm256_broadcast_ss(kr[x] + c);
                UNROLL for (int w = 0; w < rv; w++) acc[x][w] = _mm256_fmadd_ps(a[w], b, acc[x][w]);
            }
        }
        UNROLL for (int x = 0; x < TK; x++) UNROLL for (int w = 0; w < rv; w++)
            _mm256_store_ps(st + (size_t)(j + x) * MB + 8 * w, acc[x][w]);
    }
}

/* Online softmax of 8 rows over this chunk's keys j < lim: scores of keys a row does not see
 * (j >= cnt - j0) count as -inf; st receives the weights 2^(s - max). */
AI void softmax8(const ap_ctx *a, int r, int j0, int lim) {
    const __m256 ninf = _mm256_set1_ps(-INFINITY);
    __m256i cv =
        _mm256_sub_epi32(_mm256_load_si256((const __m256i *)(a->cnt + r)), _mm256_set1_epi32(j0));
    float *s = a->st + r;
    __m256 cm = ninf;
    __m256i jv = _mm256_setzero_si256();
    const __m256i one = _mm256_set1_epi32(1);
    for (int j = 0; j < lim; j++, jv = _mm256_add_epi32(jv, one)) {
        __m256 vis = _mm256_castsi256_ps(_mm256_cmpgt_epi32(cv, jv));
        cm = _mm256_max_ps(cm, _mm256_blendv_ps(ninf, _mm256_load_ps(s + (size_t)j * MB), vis));
    }
    __m256 mold = _mm256_load_ps(a->mx + r);
    __m256 mnew = _mm256_max_ps(mold, cm);
    /* A row that has seen nothing yet keeps max -inf; subtracting 0 then keeps things finite. */
    __m256 muse = _mm256_andnot_ps(_mm256_cmp_ps(mnew, ninf, _CMP_EQ_OQ), mnew);
    __m256 al = exp2_neg(_mm256_sub_ps(mold, muse));
    __m256 tot = _mm256_setzero_ps();
    jv = _mm256_setzero_si256();
    for (int j = 0; j < lim; j++, jv = _mm256_add_epi32(jv, one)) {
        __m256 vis = _mm256_castsi256_ps(_mm256_cmpgt_epi32(cv, jv));
        __m256 p =
            _mm256_and_ps(exp2_neg(_mm256_sub_ps(_mm256_load_ps(s + (size_t)j * MB), muse)), vis);
        _mm256_store_ps(s + (size_t)j * MB, p);
        tot = _mm256_add_ps(tot, p);
    }
    _mm256_store_ps(a->sum + r, _mm256_fmadd_ps(_mm256_load_ps(a->sum + r), al, tot));
    _mm256_store_ps(a->mx + r, mnew);
    _mm256_store_ps(a->alpha + r, al);
}

/* ot[c][r] = ot[c][r] * alpha[r] + sum_{j < lim} st[j][r] V[j][c] for the tile's rv row
 * vectors, TK value columns at a time. */
AI void pv_tile(int rv, const float *st, const float *vb, int hd, int lim, float *ot,
                const float *alpha) {
    __m256 al[TV];
    UNROLL for (int w = 0; w < rv; w++) al[w] = _mm256_load_ps(alpha + 8 * w);
    for (int c0 = 0; c0 < hd; c0 += TK) {
        __m256 acc[TK][TV];
        UNROLL for (int x = 0; x < TK; x++) UNROLL for (int w = 0; w < rv; w++) acc[x][w] =
            _mm256_setzero_ps();
        const float *vr = vb + c0;
        for (int j = 0; j < lim; j++, vr += hd) {
            __m256 p[TV];
            UNROLL for (int w = 0; w < rv; w++) p[w] = _mm256_load_ps(st + (size_t)j * MB + 8 * w);
            UNROLL for (int x = 0; x < TK; x++) {
                __m256 b = _mm256_broadcast_ss(vr + x);
                UNROLL for (int w = 0; w < rv; w++) acc[x][w] = _mm256_fmadd_ps(p[w], b, acc[x][w]);
            }
        }
        UNROLL for (int x = 0; x < TK; x++) UNROLL for (int w = 0; w < rv; w++) {
            float *o = ot + (size_t)(c0 + x) * MB + 8 * w;
            _mm256_store_ps(o, _mm256_fmadd_ps(_mm256_load_ps(o), al[w], acc[x][w]));
        }
    }
}

/* Scores, softmax and values of one tile of rv row vectors starting at row vector w0. */
AI void tile(int rv, const ap_ctx *a, int w0, const float *kb, const float *vb, int j0, int lim) {
    int r = 8 * w0;
    qk_tile(rv, a->qt + r, a->st + r, kb, a->hd, lim);
    for (int w = 0; w < rv; w++) softmax8(a, r + 8 * w, j0, lim);
    pv_tile(rv, a->st + r, vb, a->hd, lim, a->ot + r, a->alpha + r);
}

/* Rows j0 .. j0+nk-1 of an F16 K or V into floats. */
static void f16_rows(float *dst, const uint8_t *src, size_t rb, int j0, int nk, int hd) {
    for (int j = 0; j < nk; j++) {
        const uint8_t *s = src + (size_t)(j0 + j) * rb;
        float *d = dst + (size_t)j * hd;
        for (int c = 0; c < hd; c += 8)
            _mm256_store_ps(d + c, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 2 * c))));
    }
}

/* Rows [r0, r0 + nr) of the flattened (token, head) rows, nr <= MB. */
static void block(ap_ctx *a, int64_t r0, int nr) {
    const int hd = a->hd, g = a->g;
    int nw = (nr + 7) / 8; /* row vectors */
    int maxcnt = 0;
    for (int r = 0; r < 8 * nw; r++) {
        float *qt = a->qt + r;
        if (r < nr) {
            int64_t row = r0 + r, i = row / g;
            const float *qr = a->q + (size_t)i * a->q_stride + (size_t)(row % g) * hd;
            a->cnt[r] = a->n_vis[i] > 0 ? a->n_vis[i] : 0;
            for (int c = 0; c < hd; c++) qt[(size_t)c * MB] = qr[c] * a->qscale;
        } else { /* padding rows: zero queries, counts as the last real row (harmless) */
            a->cnt[r] = a->cnt[nr - 1];
            for (int c = 0; c < hd; c++) qt[(size_t)c * MB] = 0.0f;
        }
        maxcnt = SKV_MAX(maxcnt, a->cnt[r]);
        a->mx[r] = -INFINITY, a->sum[r] = 0.0f;
    }
    for (int c = 0; c < hd; c++) memset(a->ot + (size_t)c * MB, 0, sizeof(float) * 8 * nw);

    for (int j0 = 0; j0 < maxcnt; j0 += KC) {
        int nk = SKV_MIN(KC, maxcnt - j0);
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
            int rv = SKV_MIN(TV, nw - w0), tmax = 0;
            for (int r = 8 * w0; r < 8 * (w0 + rv); r++) tmax = SKV_MAX(tmax, a->cnt[r]);
            int lim = SKV_MIN(nk, tmax - j0);
            if (lim <= 0) continue; /* no row of the tile sees this chunk */
            if (rv == 3)
                tile(3, a, w0, kb, vb, j0, lim);
            else if (rv == 2)
                tile(2, a, w0, kb, vb, j0, lim);
            else
                tile(1, a, w0, kb, vb, j0, lim);
        }
    }

    for (int r = 0; r < nr; r++) {
        int64_t row = r0 + r, i = row / g;
        float *o = a->out + (size_t)i * a->out_stride + (size_t)(row % g) * hd;
        float inv = a->sum[r] > 0.0f ? 1.0f / a->sum[r] : 0.0f;
        const float *ot = a->ot + r;
        for (int c = 0; c < hd; c++) o[c] = ot[(size_t)c * MB] * inv;
    }
}

void skv_attn_prefill_avx2(float *out, size_t out_stride, const float *q, size_t q_stride, int n,
                           int g, int hd, const void *k, const void *v, skv_type kv_type,
                           const int *n_vis, float scale, void *work) {
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
    /* The regions in the order and sizes of avx2_floats() in attn_prefill.c. */
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
    a.vc = w;
    int64_t rows = (int64_t)n * g;
    for (int64_t r0 = 0; r0 < rows; r0 += MB) block(&a, r0, (int)SKV_MIN((int64_t)MB, rows - r0));
}

#else
/* Built without AVX2/FMA/F16C: nothing here, attn_prefill.c does not call into this file. */
typedef int skv_attn_prefill_avx2_empty;
#endif
