/* test_matmul.c — skv_matmul against float64 loops over the dequantized weights, for every
 * weight type at odd sizes, on 1, 2 and 3 threads, with the SIMD paths and forced scalar.
 * Weights are quantized with the simple quantizer (skv_quantize_row_simple): the products need
 * valid rows, not the best ones (test_quant checks those), and the search was half this test's
 * time under ASan. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "kernels/kernels.h"
#include "support.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Float weights: only float32 accumulation error, relative to sum |x||w|. */
#define TOL_ACCUM 1e-5
/* Quantized weights against the same 8-bit activations in float64: float rounding only. */
#define TOL_QACT 2e-5

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static double urand(void) { /* [0, 1) */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) * 0x1p-53;
}

/* Activations with a few outlier channels, like a transformer's. */
static void fill_x(float *x, int m, int n) {
    for (int i = 0; i < m * n; i++) {
        double v = 2.0 * urand() - 1.0;
        if (i % n == 7 || urand() < 0.01) v *= 20.0;
        x[i] = (float)v;
    }
}

static void fill_w(float *w, int rows, int n) {
    for (int r = 0; r < rows; r++) {
        double scale = 0.02 + 0.2 * urand();
        for (int k = 0; k < n; k++) w[(size_t)r * n + k] = (float)(scale * (2.0 * urand() - 1.0));
    }
}

typedef struct mm_case {
    skv_type t;
    int m, n_out, n_in;
} mm_case;

/* Runs one case on every pool and both SIMD settings; checks against float64 loops. */
static void run_case(const mm_case *c, skv_pool *pools[3]) {
    const int m = c->m, n_out = c->n_out, n_in = c->n_in;
    size_t rb = skv_row_bytes(c->t, n_in);
    assert_true(rb > 0);
    float *x = malloc(sizeof(float) * m * n_in);
    float *wf = malloc(sizeof(float) * n_out * n_in);
    float *wd = malloc(sizeof(float) * n_out * n_in); /* dequantized */
    uint8_t *w = malloc(rb * n_out);
    double *ref = malloc(sizeof(double) * m * n_out);  /* float x */
    double *refq = malloc(sizeof(double) * m * n_out); /* 8-bit x */
    double *bound = malloc(sizeof(double) * m * n_out);
    double *boundq = malloc(sizeof(double) * m * n_out);
    float *y = malloc(sizeof(float) * m * n_out);
    float *y0 = malloc(sizeof(float) * m * n_out);
    assert_non_null(x);
    assert_non_null(y0);
    fill_x(x, m, n_in);
    fill_w(wf, n_out, n_in);
    for (int r = 0; r < n_out; r++) {
        skv_quantize_row_simple(c->t, wf + (size_t)r * n_in, w + r * rb, n_in);
        skv_dequantize_row(c->t, w + r * rb, wd + (size_t)r * n_in, n_in);
    }
    int bs = skv_act_block(c->t);
    size_t arb = bs ? skv_act_row_bytes(n_in, bs) : 0;
    uint8_t *act = bs ? aligned_alloc(32, arb) : NULL;
    float *xq = malloc(sizeof(float) * n_in);
    for (int i = 0; i < m; i++) {
        const float *xi = x + (size_t)i * n_in;
        if (bs) { /* the 8-bit activations, dequantized */
            skv_quantize_act_row(xi, act, n_in, bs);
            const float *d = (const float *)(act + skv_act_off_d(n_in));
            for (int k = 0; k < n_in; k++) xq[k] = d[k / bs] * (float)((int8_t *)act)[k];
        }
        for (int r = 0; r < n_out; r++) {
            const float *wr = wd + (size_t)r * n_in;
            double s = 0.0, sq = 0.0, a = 0.0, aq = 0.0, qerr = 0.0;
            for (int k = 0; k < n_in; k++) {
                s += (double)xi[k] * wr[k];
                a += fabs((double)xi[k] * wr[k]);
                if (bs) {
                    sq += (double)xq[k] * wr[k];
                    aq += fabs((double)xq[k] * wr[k]);
                    /* rounding x to the nearest step errs by at most half a step (d / 2) */
                    const float *d = (const float *)(act + skv_act_off_d(n_in));
                    qerr += 0.5 * d[k / bs] * fabs((double)wr[k]) * (1.0 + 1e-6);
                }
            }
            ref[(size_t)i * n_out + r] = s;
            refq[(size_t)i * n_out + r] = sq;
            bound[(size_t)i * n_out + r] = bs ? qerr + TOL_QACT * a : TOL_ACCUM * a + 1e-30;
            boundq[(size_t)i * n_out + r] = TOL_QACT * aq + 1e-30;
        }
    }
    size_t pb = skv_panels_bytes(c->t, n_out, n_in);
    assert_true(bs ? pb == 0 : pb == skv_row_bytes(c->t, n_in) * (size_t)((n_out + 15) / 16 * 16));
    void *panels = pb ? malloc(pb) : NULL;
    if (pb) {
        assert_non_null(panels);
        skv_panels_pack(c->t, w, n_out, n_in, panels);
    }
    size_t ws = skv_matmul_work_size(c->t, m, n_in);
    uint8_t *work_mem = malloc(ws + 1);
    assert_non_null(work_mem);
    for (int simd = 1; simd >= 0; simd--) {
        skv_kernels_force_ref(!simd);
        for (int p = 0; p < 3; p++) {
            for (int i = 0; i < m * n_out; i++) y[i] = NAN;
            /* An odd address: the kernels align inside the work buffer themselves. */
            skv_matmul(pools[p], y, x, m, w, c->t, n_out, n_in, ws ? work_mem + 1 : NULL);
            for (int i = 0; i < m * n_out; i++) {
                double e = fabs((double)y[i] - ref[i]);
                if (!(e <= bound[i]))
                    fail_msg("%s m=%d n_out=%d n_in=%d simd=%d pool=%d: y[%d]=%.9g ref=%.9g "
                             "err %.3g > %.3g",
                             skv_type_name(c->t), m, n_out, n_in, simd, p, i, y[i], ref[i], e,
                             bound[i]);
                if (bs) {
                    double eq = fabs((double)y[i] - refq[i]);
                    if (!(eq <= boundq[i]))
                        fail_msg("%s m=%d n_out=%d n_in=%d simd=%d pool=%d: y[%d]=%.9g vs "
                                 "8-bit-x ref %.9g err %.3g > %.3g",
                                 skv_type_name(c->t), m, n_out, n_in, simd, p, i, y[i], refq[i], eq,
                                 boundq[i]);
                }
            }
            /* The split over threads does not change a single bit. */
            if (p == 0)
                memcpy(y0, y, sizeof(float) * m * n_out);
            else
                assert_memory_equal(y0, y, sizeof(float) * m * n_out);
            /* Nor do panels (what a loaded model holds) instead of raw rows (BF16 panels with
             * vdpbf16ps have their own test: test_bf16_dot). */
            if (panels) {
                for (int i = 0; i < m * n_out; i++) y[i] = NAN;
                skv_kernels_bf16_dot(false);
                skv_kernels_amx(false); /* AMX: its own test, test_amx */
                skv_matmul_panels(pools[p], y, x, m, panels, c->t, n_out, n_in,
                                  ws ? work_mem + 1 : NULL);
                skv_kernels_bf16_dot(true);
                skv_kernels_amx(true);
                if (memcmp(y0, y, sizeof(float) * m * n_out) != 0)
                    fail_msg("%s m=%d n_out=%d n_in=%d simd=%d pool=%d: panels differ from rows",
                             skv_type_name(c->t), m, n_out, n_in, simd, p);
            }
        }
    }
    skv_kernels_force_ref(false);
    free(panels);
    free(work_mem);
    free(act);
    free(xq);
    free(x);
    free(wf);
    free(wd);
    free(w);
    free(ref);
    free(refq);
    free(bound);
    free(boundq);
    free(y);
    free(y0);
}

static skv_pool *pools[3];

static int setup(void **state) {
    (void)state;
    for (int i = 0; i < 3; i++) pools[i] = i == 0 ? NULL : skv_pool_new(i + 1);
    return pools[1] && pools[2] ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    for (int i = 0; i < 3; i++) skv_pool_free(pools[i]);
    return 0;
}

/* vdpbf16ps decode (gemv_bf16: 2 half streams per thread and an odd last panel): for n_out whose
 * thread shares have 1-13 panels, even and odd, with a partial last panel in either half, on
 * 1-3 threads, every row of one x row the same bits as in a batch of 2, and nothing written past
 * the last row. */
static void test_bf16_gemv_halves(void **s) {
    (void)s;
    if (!skv_kernels_use_bf16()) skip();
    skv_kernels_amx(false);
    const int n_outs[] = {1, 16, 37, 50, 64, 120, 130, 200}, n_in = 67, PAD = 16;
    for (int oi = 0; oi < (int)(sizeof n_outs / sizeof *n_outs); oi++) {
        const int N_OUT = n_outs[oi];
        const size_t rb = skv_row_bytes(SKV_TYPE_BF16, n_in);
        float *x = malloc(sizeof(float) * 2 * n_in), *wf = malloc(sizeof(float) * n_in);
        float *y2 = malloc(sizeof(float) * 2 * N_OUT), *y1 = malloc(sizeof(float) * (N_OUT + PAD));
        uint8_t *w = malloc(rb * N_OUT);
        void *panels = malloc(skv_panels_bytes(SKV_TYPE_BF16, N_OUT, n_in));
        uint8_t *work = malloc(skv_matmul_work_size(SKV_TYPE_BF16, 2, n_in));
        assert_true(x && wf && y2 && y1 && w && panels && work);
        fill_x(x, 2, n_in);
        for (int r = 0; r < N_OUT; r++) {
            fill_w(wf, 1, n_in);
            skv_quantize_row_simple(SKV_TYPE_BF16, wf, w + r * rb, n_in);
        }
        skv_panels_pack(SKV_TYPE_BF16, w, N_OUT, n_in, panels);
        skv_matmul_panels(pools[0], y2, x, 2, panels, SKV_TYPE_BF16, N_OUT, n_in, work);
        for (int p = 0; p < 3; p++) { /* threads */
            for (int r = 0; r < N_OUT + PAD; r++) y1[r] = -12345.0f;
            skv_matmul_panels(pools[p], y1, x, 1, panels, SKV_TYPE_BF16, N_OUT, n_in, work);
            for (int r = 0; r < N_OUT; r++)
                if (memcmp(&y1[r], &y2[r], sizeof(float)) != 0)
                    fail_msg("bf16 gemv n_out=%d, %d threads: y[%d] = %.9g, batch %.9g", N_OUT,
                             p + 1, r, y1[r], y2[r]);
            for (int r = N_OUT; r < N_OUT + PAD; r++)
                if (y1[r] != -12345.0f)
                    fail_msg("bf16 gemv n_out=%d, %d threads: wrote y[%d]", N_OUT, p + 1, r);
        }
        free(x), free(wf), free(y2), free(y1), free(w), free(panels), free(work);
    }
    skv_kernels_amx(true);
}

/* The integer sums at their bounds: every weight code at its top (Q8_0 127, Q4_0 / Q4_1 15, Q5_0
 * / Q5_1 31: all qh bits set; Q3_K 3 with every scale at 31, against its Q6_K rows; Q2_K 3 with
 * every scale at 15, mins 0) against x
 * codes all +127 (even rows of x) or all -127 (odd rows),
 * from rows and from k16 records, decode and prefill, every level: the same bits, and the value
 * (+-n_in times the code's value, to float rounding). Catches 16-bit sums that the random data of
 * test_k16 never brings near 2^15 (Q4 records' vpmaddubsw sums reach 30480 per block; Q5 codes
 * would pass it). */
static void test_k16_extremes(void **s) {
    (void)s;
    enum { N_IN = 512, N_OUT = 32, M = 4 };
    const skv_type types[] = {SKV_TYPE_Q8_0,   SKV_TYPE_Q4_0, SKV_TYPE_Q5_0, SKV_TYPE_Q4_1,
                              SKV_TYPE_Q5_1,   SKV_TYPE_Q3_K, SKV_TYPE_Q5_K, SKV_TYPE_IQ4_NL,
                              SKV_TYPE_IQ4_XS, SKV_TYPE_Q2_K};
    float x[M * N_IN], y[M * N_OUT], y16[M * N_OUT];
    for (int i = 0; i < M; i++)
        for (int k = 0; k < N_IN; k++) x[i * N_IN + k] = i % 2 ? -1.0f : 1.0f;
    for (int ti = 0; ti < 10; ti++) {
        const skv_type t = types[ti], rt = t == SKV_TYPE_Q3_K ? SKV_TYPE_Q6_K : t;
        const size_t rb = skv_row_bytes(t, N_IN), bb = skv_type_block_bytes(t);
        uint8_t *w = malloc(rb * N_OUT), *k16 = malloc(skv_k16_bytes(t, N_OUT, N_IN));
        /* d = 2^-7 (m = 0): a code's value is exact; Q8_0 127, Q4_0 7, Q5_0 15, Q4_1 15, Q5_1 31,
         * Q3_K 31 x 3, Q5_K 63 x 31 (dmin 0); IQ4 index 0 (-127: |w| x |x| pairs of 32258),
         * IQ4_XS with every ls at 0 (-32); Q2_K 15 x 3 (scale bytes 0x0f: mins 0) */
        const bool iq4 = t == SKV_TYPE_IQ4_NL || t == SKV_TYPE_IQ4_XS;
        const float top = t == SKV_TYPE_IQ4_NL   ? -127.0f
                          : t == SKV_TYPE_IQ4_XS ? 4064.0f
                          : t == SKV_TYPE_Q8_0   ? 127.0f
                          : t == SKV_TYPE_Q4_0   ? 7.0f
                          : t == SKV_TYPE_Q5_1   ? 31.0f
                          : t == SKV_TYPE_Q3_K   ? 93.0f
                          : t == SKV_TYPE_Q5_K   ? 1953.0f
                          : t == SKV_TYPE_Q2_K   ? 45.0f
                                                 : 15.0f; /* Q4_1, and Q5_0's 31 - 16 */
        for (size_t b = 0; b < rb * N_OUT / bb; b++) {
            uint8_t *blk = w + b * bb;
            memset(blk, iq4 ? 0 : t == SKV_TYPE_Q8_0 ? 0x7f : 0xff, bb);
            const uint16_t d = skv_f32_to_f16(0.0078125f);
            memcpy(blk + (t == SKV_TYPE_Q3_K ? 108 : t == SKV_TYPE_Q2_K ? 80 : 0), &d, 2);
            if (t == SKV_TYPE_Q4_1 || t == SKV_TYPE_Q5_1 || t == SKV_TYPE_Q5_K)
                memset(blk + 2, 0, 2); /* m = 0 */
            if (t == SKV_TYPE_Q2_K) {  /* scales 15, mins 0, dmin 0 */
                memset(blk, 0x0f, 16);
                memset(blk + 82, 0, 2);
            }
        }
        skv_k16_pack(t, w, N_OUT, N_IN, k16);
        uint8_t *wr = w; /* the rows the product of the records must match */
        if (rt != t) {
            wr = malloc(skv_row_bytes(rt, N_IN) * N_OUT);
            skv_q3_k_to_q6_k(w, wr, (int64_t)N_OUT * N_IN / 256);
        }
        void *work = malloc(skv_matmul_work_size(t, M, N_IN));
        for (int simd = 1; simd >= 0; simd--) {
            skv_kernels_force_ref(!simd);
            for (int m = 1; m <= M; m += M - 1) {
                skv_matmul(pools[2], y, x, m, wr, rt, N_OUT, N_IN, work);
                skv_matmul_k16(pools[2], y16, x, m, k16, t, N_OUT, N_IN, work);
                /* IQ4_XS and Q2_K rows take the scalar code, whose float steps differ: the value
                 * below */
                if (!skv_type_records_only(t) || !simd)
                    assert_memory_equal(y, y16, sizeof(float) * (size_t)m * N_OUT);
                for (int i = 0; i < m; i++) {
                    const float want = (i % 2 ? -1.0f : 1.0f) * N_IN * top * 0.0078125f;
                    for (int r = 0; r < N_OUT; r++)
                        assert_true(fabsf(y[i * N_OUT + r] - want) <= 1e-4f * fabsf(want) &&
                                    fabsf(y16[i * N_OUT + r] - want) <= 1e-4f * fabsf(want));
                }
            }
        }
        skv_kernels_force_ref(false);
        free(work);
        if (wr != w) free(wr);
        free(w);
        free(k16);
    }
}

/* skv_k16_next_prep names the preparation that a replay of the prefill loops (as gemm_k16 and
 * gemm_hex run them) does next, and none after the last; its groups and blocks stay inside W. */
static void test_k16_next_prep(void **s) {
    (void)s;
    static const int n_outs[] = {1, 15, 16, 17, 31, 33, 45, 64, 100, 200};
    static const int nblks[] = {1, 2, 3, 17}, kbss[] = {2, 16}, mcss[] = {4, 96};
    static const int xr[][2] = {{0, 3}, {0, 4}, {0, 97}, {5, 101}};
    enum { MAXP = 4096 };
    static int prep[MAXP][4]; /* g, ng, b0, nb */
    int checked = 0;
    for (size_t a = 0; a < sizeof n_outs / sizeof *n_outs; a++)
        for (size_t b = 0; b < sizeof nblks / sizeof *nblks; b++)
            for (size_t c = 0; c < 2; c++)
                for (int tg = 1; tg <= 2; tg++)
                    for (size_t d = 0; d < 2; d++)
                        for (size_t e = 0; e < sizeof xr / sizeof *xr; e++)
                            for (int r0 = 0; r0 < n_outs[a]; r0 += 16)
                                for (int q = 0; q < 3; q++) {
                                    const int n_out = n_outs[a], nblk = nblks[b], kbs = kbss[c];
                                    const int mcs = mcss[d], i0 = xr[e][0], i1 = xr[e][1];
                                    const int r1 = q == 0   ? n_out
                                                   : q == 1 ? SKV_MIN(n_out, r0 + 16)
                                                            : SKV_MIN(n_out, r0 + 48);
                                    const int nkb = (nblk + kbs - 1) / kbs;
                                    int np = 0;
                                    /* the loops' preparations, in order */
                                    for (int mc0 = i0; mc0 < i1; mc0 += mcs)
                                        for (int r = r0; r < r1; r += 16 * tg)
                                            for (int kb = 0; kb < nkb; kb++) {
                                                const int nr = SKV_MIN(r1 - r, 16 * tg);
                                                assert_true(np < MAXP);
                                                prep[np][0] = r / 16, prep[np][1] = (nr + 15) / 16;
                                                prep[np][2] = kb * kbs;
                                                prep[np][3] = SKV_MIN(nblk - kb * kbs, kbs);
                                                np++;
                                            }
                                    int k = 0;
                                    for (int mc0 = i0; mc0 < i1; mc0 += mcs)
                                        for (int r = r0; r < r1; r += 16 * tg)
                                            for (int kb = 0; kb < nkb; kb++, k++) {
                                                int g, ng, b0, nb;
                                                const bool more = skv_k16_next_prep(
                                                    mc0, mcs, i1, r, tg, r0, r1, kb, nkb, kbs, nblk,
                                                    &g, &ng, &b0, &nb);
                                                assert_int_equal(more, k + 1 < np);
                                                if (!more) continue;
                                                assert_int_equal(g, prep[k + 1][0]);
                                                assert_int_equal(ng, prep[k + 1][1]);
                                                assert_int_equal(b0, prep[k + 1][2]);
                                                assert_int_equal(nb, prep[k + 1][3]);
                                                assert_true(g + ng <= (n_out + 15) / 16);
                                                assert_true(b0 >= 0 && nb > 0 && b0 + nb <= nblk);
                                                checked++;
                                            }
                                }
    assert_true(checked > 10000);
}

/* IQ4_XS and Q2_K rows go to the scalar code at every level (the SIMD code reads records only):
 * their product y is replaced by the records' decode of each x row alone, the yardstick that
 * every other way of computing the records must match bit for bit, after checking that it is
 * the rows' product to float rounding: 1e-4 of the row's largest sum of |x w| (Q2_K's outputs
 * are differences of two terms, each as large as that sum, which both ways round in another
 * order); NaN where the rows' is. */
static void rec_decode_rows(skv_pool *pool, float *y, const float *x, int m, const void *k16,
                            skv_type t, int n_out, int n_in, void *work) {
    float *yr = malloc(sizeof(float) * (size_t)m * n_out), *wd = malloc(sizeof(float) * n_in);
    uint8_t *row = malloc(skv_row_bytes(t, n_in));
    double *mag = calloc((size_t)m, sizeof(double)); /* [m]: the row's largest sum of |x w| */
    for (int r = 0; r < n_out; r++) {
        skv_k16_unpack_rows(t, k16, n_in, r, r + 1, row);
        skv_dequantize_row(t, row, wd, n_in);
        for (int i = 0; i < m; i++) {
            double a = 0.0;
            for (int k = 0; k < n_in; k++)
                if (isfinite(x[(size_t)i * n_in + k]))
                    a += fabs((double)x[(size_t)i * n_in + k] * wd[k]);
            mag[i] = a > mag[i] ? a : mag[i];
        }
    }
    memcpy(yr, y, sizeof(float) * (size_t)m * n_out);
    skv_kernels_k16_prefetch(0);
    for (int i = 0; i < m; i++)
        skv_matmul_k16(pool, y + (size_t)i * n_out, x + (size_t)i * n_in, 1, k16, t, n_out, n_in,
                       work);
    skv_kernels_k16_prefetch(-1);
    for (int i = 0; i < m; i++)
        for (int r = 0; r < n_out; r++) {
            const float a = yr[i * n_out + r], b = y[i * n_out + r];
            if (isnan(a) ? !isnan(b) : !(fabs((double)a - b) <= 1e-4 * mag[i]))
                fail_msg("%s row %d output %d: records %.9g, rows %.9g", skv_type_name(t), i, r,
                         (double)b, (double)a);
        }
    free(mag);
    free(row);
    free(wd);
    free(yr);
}

/* Q4_K, Q5_K, Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, Q6_K and Q3_K in k16 records: unpacking gives back the
 * rows byte for byte (any row range), and the products are the same bits as from the rows (Q3_K:
 * its Q6_K rows, skv_q3_k_to_q6_k, which skv_k16_unpack_rows_q6 gives too), for any m, thread count
 * and SIMD level (the SIMD kernels read the records; the scalar level unpacks them); all but Q6_K
 * and Q3_K decode with and without the prefetched streams (skv_kernels_k16_prefetch). Ragged groups
 * (n_out % 16), several tiles and column blocks, NaN rows of x. */
static void test_k16(void **s) {
    (void)s;
    /* 200 rows: a thread unpacks more than one chunk of 64 where the level has no k16 code;
     * 65792 columns (257 super-blocks, with 17 rows and few x rows): more than decode keeps
     * x's sums for on its stack */
    /* the 32-value types also at 32 (one block) and 1056 (33 blocks: a last column block of one
     * in prefill) */
    const int n_outs[] = {1, 17, 45, 64, 200}, n_ins[] = {256, 512, 2304, 65792, 32, 1056},
              ms[] = {1, 2, 3, 7, 33, 200};
    const skv_type types[] = {SKV_TYPE_Q4_K, SKV_TYPE_Q8_0,   SKV_TYPE_Q6_K,   SKV_TYPE_Q4_0,
                              SKV_TYPE_Q5_0, SKV_TYPE_Q4_1,   SKV_TYPE_Q5_1,   SKV_TYPE_Q3_K,
                              SKV_TYPE_Q5_K, SKV_TYPE_IQ4_NL, SKV_TYPE_IQ4_XS, SKV_TYPE_Q2_K};
    for (int ti = 0; ti < 12; ti++)
        for (int oi = 0; oi < 5; oi++)
            for (int ni = 0; ni < 6; ni++) {
                const skv_type t = types[ti];
                if (n_ins[ni] % skv_type_block_size(t)) continue;
                const int n_out = n_outs[oi], n_in = n_ins[ni], M = n_in > 4096 ? 3 : 200;
                /* 65792 also with 64 rows of Q4_K (decode's four streams with x's pairs per
                 * step), Q4_0 and Q5_1 (the streams past the x sums kept on the stack) */
                if (n_in > 4096 && n_out != 17 &&
                    !(n_out == 64 &&
                      (t == SKV_TYPE_Q4_K || t == SKV_TYPE_Q4_0 || t == SKV_TYPE_Q5_1)))
                    continue;
                const size_t rb = skv_row_bytes(t, n_in);
                const size_t kb = skv_k16_bytes(t, n_out, n_in);
                /* Q4_K records are 2.8% larger than the rows, Q5_K ones 2.3% (180 bytes a row's
                 * super-block), Q3_K ones 3.6% (114), IQ4_XS ones 1.5% (138); the others (Q2_K
                 * too) hold the rows' bytes */
                assert_int_equal(
                    kb, t == SKV_TYPE_Q4_K
                            ? (size_t)(n_out + 15) / 16 * (n_in / 256) * SKV_K16_RECORD
                        : t == SKV_TYPE_Q5_K   ? (size_t)(n_out + 15) / 16 * (n_in / 256) * 16 * 180
                        : t == SKV_TYPE_Q3_K   ? (size_t)(n_out + 15) / 16 * (n_in / 256) * 16 * 114
                        : t == SKV_TYPE_IQ4_XS ? (size_t)(n_out + 15) / 16 * (n_in / 256) * 16 * 138
                                               : (size_t)(n_out + 15) / 16 * 16 * rb);
                float *x = malloc(sizeof(float) * M * n_in), *wf = malloc(sizeof(float) * n_in);
                uint8_t *w = malloc(rb * n_out), *k16 = malloc(kb),
                        *back = malloc(kb > rb * n_out ? kb : rb * n_out);
                float *y = malloc(sizeof(float) * M * n_out),
                      *y16 = malloc(sizeof(float) * M * n_out);
                for (int r = 0; r < n_out; r++) {
                    fill_w(wf, 1, n_in);
                    for (int k = 0; k < n_in; k++) wf[k] *= 1.0f + 0.37f * (float)((r * 7 + k) % 5);
                    skv_quantize_row_simple(t, wf, w + r * rb, n_in);
                }
                fill_x(x, M, n_in);
                x[(size_t)(M > 5 ? 5 : M - 1) * n_in + 3] = NAN;
                skv_k16_pack_ref(t, w, n_out, n_in, back); /* the plain C packer: the same bytes */
                skv_k16_pack(t, w, n_out, n_in, k16);
                assert_memory_equal(back, k16, kb);
                skv_k16_unpack_rows(t, k16, n_in, 0, n_out, back);
                assert_memory_equal(back, w, rb * n_out);
                skv_k16_unpack_rows(t, k16, n_in, n_out / 2, n_out, back);
                assert_memory_equal(back, w + rb * (n_out / 2), rb * (n_out - n_out / 2));
                /* the rows the products must match: Q3_K's are Q6_K ones of the same values */
                const skv_type rt = t == SKV_TYPE_Q3_K ? SKV_TYPE_Q6_K : t;
                uint8_t *wr = w;
                if (rt != t) {
                    const size_t rb6 = skv_row_bytes(rt, n_in);
                    wr = malloc(rb6 * n_out);
                    skv_q3_k_to_q6_k(w, wr, (int64_t)n_out * (n_in / 256));
                    uint8_t *un = malloc(rb6 * n_out);
                    skv_k16_unpack_rows_q6(k16, n_in, 1, n_out, un);
                    assert_memory_equal(un, wr + rb6, rb6 * (n_out - 1));
                    free(un);
                }
                void *work = malloc(skv_matmul_work_size(t, M, n_in));
                if (rt != t) { /* Q3_K rows: no kernel reads them, and no result passes for one */
                    skv_matmul(pools[0], y, x, 1, w, t, n_out, n_in, work);
                    for (int r = 0; r < n_out; r++) assert_true(isnan(y[r]));
                }
                for (int simd = 1; simd >= 0; simd--) {
                    skv_kernels_force_ref(!simd);
                    for (int mi = 0; mi < 6; mi++)
                        for (int p = 0; p < 3; p++) {
                            const int m = ms[mi];
                            /* the scalar code's largest cases only outside ASan, where they
                             * were a quarter of the whole suite's time */
                            const int scalar_cap = (SKV_TEST_SANITIZED ? 7 : 33) * 64 * 2304;
                            if (m > M || m * n_out * n_in > (simd ? 200 * 64 * 2304 : scalar_cap))
                                continue;
                            skv_matmul(pools[p], y, x, m, wr, rt, n_out, n_in, work);
                            if (skv_type_records_only(t) && rt == t && simd) /* rows: scalar */
                                rec_decode_rows(pools[0], y, x, m, k16, t, n_out, n_in, work);
                            /* decode both ways (not Q6_K's), whichever this CPU picks */
                            const int n_st = simd && m < 3 && rt != SKV_TYPE_Q6_K ? 2 : 1;
                            for (int st = 0; st < n_st; st++) {
                                const int mode = n_st == 2 ? st : -1;
                                skv_kernels_k16_prefetch(mode);
                                memset(y16, 0xff, sizeof(float) * m * n_out);
                                skv_matmul_k16(pools[p], y16, x, m, k16, t, n_out, n_in, work);
                                if (memcmp(y, y16, sizeof(float) * m * n_out) != 0)
                                    fail_msg("%s k16 m=%d n_out=%d n_in=%d simd=%d pool %d "
                                             "prefetch mode %d: other bits",
                                             skv_type_name(t), m, n_out, n_in, simd, p, mode);
                            }
                            skv_kernels_k16_prefetch(-1);
                        }
                }
                skv_kernels_force_ref(false);
                free(work);
                if (wr != w) free(wr);
                free(x);
                free(wf);
                free(w);
                free(k16);
                free(back);
                free(y);
                free(y16);
            }
}

static void run_type(skv_type t, const int *n_ins, int n_n_in) {
    static const int ms[] = {1, 2, 3, 7, 33};
    static const int n_outs[] = {1, 3, 17, 64};
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 4; b++)
            for (int k = 0; k < n_n_in; k++) {
                /* keep the largest products few */
                if (ms[a] * n_outs[b] * n_ins[k] > 33 * 17 * 2400) continue;
                mm_case c = {t, ms[a], n_outs[b], n_ins[k]};
                run_case(&c, pools);
            }
    /* Many x rows: several tiles, more than one row block, ragged edges. */
    mm_case big = {t, 301, 19, n_ins[n_n_in > 1 ? 1 : 0]};
    run_case(&big, pools);
    if (skv_act_block(t)) {
        /* quantized: two x blocks times several column blocks, ragged rows */
        mm_case wide = {t, 200, 19, n_ins[n_n_in - 1]};
        run_case(&wide, pools);
    }
    if (!skv_act_block(t)) {
        /* float: two column blocks, panels ending inside a thread; then two x blocks (MC = 192
         * rows) times two column blocks; then x rows split over 3 threads (mm_split's x_split:
         * "big" above splits them over 2); then decode over many panels per thread (2 halves
         * at both levels, with an odd last panel and a partial last panel) */
        const mm_case more[] = {{t, 13, 37, 1100}, {t, 200, 37, 1300}, {t, 768, 37, 288},
                                {t, 1, 150, 288},  {t, 1, 63, 600},    {t, 1, 80, 288}};
        for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) run_case(&more[i], pools);
    }
}

static const int n_in_float[] = {5, 32, 288, 600};
static const int n_in_q32[] = {32, 288, 2080}; /* 2080: 2 column blocks (AVX-512), 3 (AVX2) */
static const int n_in_qk[] = {256, 512, 2304}; /* 2304: two column blocks */

static void test_f32(void **s) {
    (void)s;
    run_type(SKV_TYPE_F32, n_in_float, 4);
}
static void test_f16(void **s) {
    (void)s;
    run_type(SKV_TYPE_F16, n_in_float, 4);
}
static void test_bf16(void **s) {
    (void)s;
    run_type(SKV_TYPE_BF16, n_in_float, 4);
}
static void test_q8_0(void **s) {
    (void)s;
    run_type(SKV_TYPE_Q8_0, n_in_q32, 3);
}
static void test_q4_0(void **s) {
    (void)s;
    run_type(SKV_TYPE_Q4_0, n_in_q32, 3);
}
static void test_q5_0(void **s) {
    (void)s;
    run_type(SKV_TYPE_Q5_0, n_in_q32, 3);
}
static void test_q4_1(void **s) {
    (void)s;
    run_type(SKV_TYPE_Q4_1, n_in_q32, 3);
}
static void test_q5_1(void **s) {
    (void)s;
    run_type(SKV_TYPE_Q5_1, n_in_q32, 3);
}
static void test_q4_k(void **s) {
    (void)s;
    run_type(SKV_TYPE_Q4_K, n_in_qk, 3);
}
static void test_q5_k(void **s) {
    (void)s;
    run_type(SKV_TYPE_Q5_K, n_in_qk, 3);
}
static void test_q6_k(void **s) {
    (void)s;
    run_type(SKV_TYPE_Q6_K, n_in_qk, 3);
}
static void test_iq4_nl(void **s) {
    (void)s;
    run_type(SKV_TYPE_IQ4_NL, n_in_q32, 3);
}
static void test_iq4_xs(void **s) {
    (void)s;
    run_type(SKV_TYPE_IQ4_XS, n_in_qk, 3);
}
static void test_q2_k(void **s) {
    (void)s;
    run_type(SKV_TYPE_Q2_K, n_in_qk, 3);
}

/* A row's result does not depend on how many rows are multiplied together: prefill (many rows)
 * and decode (one row at a time) give the same bits, for every type, SIMD or scalar. */
static void test_rows_independent(void **s) {
    (void)s;
    const skv_type ts[] = {SKV_TYPE_F32,    SKV_TYPE_F16,  SKV_TYPE_BF16, SKV_TYPE_Q8_0,
                           SKV_TYPE_Q4_0,   SKV_TYPE_Q5_0, SKV_TYPE_Q4_1, SKV_TYPE_Q5_1,
                           SKV_TYPE_Q4_K,   SKV_TYPE_Q5_K, SKV_TYPE_Q6_K, SKV_TYPE_IQ4_NL,
                           SKV_TYPE_IQ4_XS, SKV_TYPE_Q2_K};
    const int n_ins[] = {7,   64,   600, 2304,
                         256, 2560, 288, 2080}; /* float: any; quantized: blocks (odd counts too) */
    enum { M = 13, N_OUT = 11 };
    for (int ti = 0; ti < 14; ti++) {
        skv_type t = ts[ti];
        for (int ni = 0; ni < 8; ni++) {
            int n_in = n_ins[ni];
            size_t rb = skv_row_bytes(t, n_in);
            if (rb == 0) continue;
            float *x = malloc(sizeof(float) * M * n_in), *wf = malloc(sizeof(float) * n_in);
            uint8_t *w = malloc(rb * N_OUT);
            float y[M * N_OUT], y1[N_OUT];
            fill_x(x, M, n_in);
            for (int r = 0; r < N_OUT; r++) {
                fill_w(wf, 1, n_in);
                skv_quantize_row_simple(t, wf, w + r * rb, n_in);
            }
            size_t ws = skv_matmul_work_size(t, M, n_in);
            void *work = ws ? malloc(ws) : NULL;
            for (int simd = 1; simd >= 0; simd--) {
                skv_kernels_force_ref(!simd);
                skv_matmul(pools[1], y, x, M, w, t, N_OUT, n_in, work);
                for (int i = 0; i < M; i++) {
                    skv_matmul(pools[1], y1, x + (size_t)i * n_in, 1, w, t, N_OUT, n_in, work);
                    if (memcmp(y1, y + i * N_OUT, sizeof y1) != 0)
                        fail_msg("%s n_in=%d simd=%d: row %d alone differs from row %d of %d",
                                 skv_type_name(t), n_in, simd, i, i, M);
                }
            }
            skv_kernels_force_ref(false);
            free(work);
            free(x);
            free(wf);
            free(w);
        }
    }
}

/* skv_matmul_group gives each part the same bits as a call of its own, for every layout, m (one
 * row: the parts' rows taken from one counter; more: tiles of W rows from one counter, except
 * float panels on the FMA code and parts with too few rows: each split on its own), thread count
 * and SIMD level; parts of unequal sizes, not multiples of 16, an empty one, more parts than one
 * pool run takes (SKV_MM_GROUP_MAX), BF16 panels without work (the float path). */
enum { G_PARTS = SKV_MM_GROUP_MAX + 1 };
static void test_group(void **s) {
    (void)s;
    const skv_type ts[] = {SKV_TYPE_F16,  SKV_TYPE_BF16, SKV_TYPE_F32,  SKV_TYPE_Q8_0,
                           SKV_TYPE_Q4_K, SKV_TYPE_Q6_K, SKV_TYPE_Q4_0, SKV_TYPE_Q5_0};
    const int n_outs[2][G_PARTS] = {{200, 37, 0, 48}, {64, 512, 16, 100}}, ms[] = {1, 2, 9};
    enum { N_IN = 512, M = 9, MAX_OUT = 512 };
    for (int ti = 0; ti < 8; ti++)
        for (int shape = 0; shape < 2; shape++) {
            const skv_type t = ts[ti];
            const int *no = n_outs[shape];
            const size_t rb = skv_row_bytes(t, N_IN);
            float *x = malloc(sizeof(float) * M * N_IN), *wf = malloc(sizeof(float) * N_IN);
            uint8_t *w[G_PARTS], *lay[G_PARTS];
            float *y[G_PARTS], *yg[G_PARTS];
            const bool panels = skv_panels_bytes(t, MAX_OUT, N_IN) > 0,
                       k16 = skv_k16_bytes(t, MAX_OUT, N_IN) > 0; /* Q4_K, Q8_0, Q6_K */
            for (int j = 0; j < G_PARTS; j++) {
                w[j] = malloc(rb * MAX_OUT);
                for (int r = 0; r < no[j]; r++) {
                    fill_w(wf, 1, N_IN);
                    skv_quantize_row_simple(t, wf, w[j] + r * rb, N_IN);
                }
                size_t lb = panels ? skv_panels_bytes(t, MAX_OUT, N_IN)
                            : k16  ? skv_k16_bytes(t, MAX_OUT, N_IN)
                                   : 1;
                lay[j] = malloc(lb);
                if (panels && no[j]) skv_panels_pack(t, w[j], no[j], N_IN, lay[j]);
                if (k16 && no[j]) skv_k16_pack(t, w[j], no[j], N_IN, lay[j]);
                y[j] = malloc(sizeof(float) * M * MAX_OUT);
                yg[j] = malloc(sizeof(float) * M * MAX_OUT);
            }
            fill_x(x, M, N_IN);
            const size_t ws = skv_matmul_work_size(t, M, N_IN); /* 0 for F16 (M < 32), F32 */
            void *work_buf = malloc(ws ? ws : 1);
            for (int simd = 1; simd >= 0; simd--) {
                skv_kernels_force_ref(!simd);
                for (int layout = 0; layout < 2; layout++)
                    for (int nowork = 0; nowork < (t == SKV_TYPE_BF16 ? 2 : 1); nowork++) {
                        if (layout == 1 && !panels && !k16) continue;
                        void *work = nowork ? NULL : work_buf;
                        for (int mi = 0; mi < 3; mi++)
                            for (int p = 0; p < 3; p++) {
                                const int m = ms[mi];
                                skv_mm_part parts[G_PARTS];
                                for (int j = 0; j < G_PARTS; j++) {
                                    /* outputs left unwritten differ between the two */
                                    memset(y[j], 0x7f, sizeof(float) * M * MAX_OUT);
                                    memset(yg[j], 0xff, sizeof(float) * M * MAX_OUT);
                                    parts[j] = (skv_mm_part){yg[j], layout ? lay[j] : w[j], no[j]};
                                    if (layout == 0)
                                        skv_matmul(pools[p], y[j], x, m, w[j], t, no[j], N_IN,
                                                   work);
                                    else if (panels)
                                        skv_matmul_panels(pools[p], y[j], x, m, lay[j], t, no[j],
                                                          N_IN, work);
                                    else
                                        skv_matmul_k16(pools[p], y[j], x, m, lay[j], t, no[j], N_IN,
                                                       work);
                                }
                                skv_matmul_group(pools[p], parts, G_PARTS, x, m, t,
                                                 layout == 0 ? SKV_MM_ROWS
                                                 : panels    ? SKV_MM_PANELS
                                                             : SKV_MM_K16,
                                                 N_IN, work);
                                for (int j = 0; j < G_PARTS; j++)
                                    if (memcmp(y[j], yg[j], sizeof(float) * (size_t)m * no[j]) != 0)
                                        fail_msg("%s group layout %d work %d m=%d pool %d simd=%d: "
                                                 "part %d (%d rows) differs",
                                                 skv_type_name(t), layout, !nowork, m, p, simd, j,
                                                 no[j]);
                            }
                    }
            }
            skv_kernels_force_ref(false);
            for (int j = 0; j < G_PARTS; j++) {
                free(w[j]);
                free(lay[j]);
                free(y[j]);
                free(yg[j]);
            }
            free(work_buf);
            free(x);
            free(wf);
        }
}

/* A NaN or an infinity in a row of x makes that row's outputs NaN (or infinite) for every
 * weight type, SIMD or scalar, and leaves the other rows alone. */
static void test_nonfinite_x(void **s) {
    (void)s;
    const skv_type ts[] = {SKV_TYPE_F32,  SKV_TYPE_F16,  SKV_TYPE_BF16, SKV_TYPE_Q8_0,
                           SKV_TYPE_Q4_0, SKV_TYPE_Q5_0, SKV_TYPE_Q4_1, SKV_TYPE_Q5_1,
                           SKV_TYPE_Q4_K, SKV_TYPE_Q5_K, SKV_TYPE_Q6_K};
    enum { M = 5, N_OUT = 9, N_IN = 512 };
    float x[M * N_IN], wf[N_IN], y[M * N_OUT];
    for (int ti = 0; ti < 11; ti++) {
        size_t rb = skv_row_bytes(ts[ti], N_IN);
        uint8_t *w = malloc(rb * N_OUT);
        for (int r = 0; r < N_OUT; r++) {
            fill_w(wf, 1, N_IN);
            skv_quantize_row_simple(ts[ti], wf, w + r * rb, N_IN);
        }
        size_t ws = skv_matmul_work_size(ts[ti], M, N_IN);
        void *work = ws ? malloc(ws) : NULL;
        for (int simd = 1; simd >= 0; simd--) {
            skv_kernels_force_ref(!simd);
            for (int m = 1; m <= M; m += M - 1) {
                fill_x(x, m, N_IN);
                x[(m - 1) * N_IN + 300] = simd ? NAN : INFINITY;
                skv_matmul(pools[2], y, x, m, w, ts[ti], N_OUT, N_IN, work);
                for (int i = 0; i < m * N_OUT; i++)
                    assert_true(i / N_OUT == m - 1 ? !isfinite(y[i]) : isfinite(y[i]));
            }
        }
        skv_kernels_force_ref(false);
        free(work);
        free(w);
    }
}

/* The order the SIMD float kernels document: each output one FMA chain over k in order. An
 * independent scalar loop with fmaf must give the same bits, for one x row and for many. (BF16
 * panels without work take this path even where the CPU has vdpbf16ps.) */
static void test_float_order(void **s) {
    (void)s;
    if (!skv_kernels_use_simd()) skip();
    const skv_type ts[] = {SKV_TYPE_F32, SKV_TYPE_F16, SKV_TYPE_BF16};
    enum { M = 200, N_OUT = 37, N_IN = 1100 }; /* 200: more than one block of x rows (192) */
    float *x = malloc(sizeof(float) * M * N_IN), *wf = malloc(sizeof(float) * N_OUT * N_IN);
    float *wd = malloc(sizeof(float) * N_IN), y[M * N_OUT];
    uint8_t *w = malloc(4 * N_OUT * N_IN);
    assert_true(x && wf && wd && w);
    fill_x(x, M, N_IN);
    fill_w(wf, N_OUT, N_IN);
    for (int ti = 0; ti < 3; ti++) {
        size_t rb = skv_row_bytes(ts[ti], N_IN);
        for (int r = 0; r < N_OUT; r++)
            skv_quantize_row_simple(ts[ti], wf + r * N_IN, w + r * rb, N_IN);
        size_t pb = skv_panels_bytes(ts[ti], N_OUT, N_IN);
        void *panels = malloc(pb);
        assert_non_null(panels);
        skv_panels_pack(ts[ti], w, N_OUT, N_IN, panels);
        for (int run = 0; run < 6; run++) {
            const int ms[3] = {1, 14, M}, m = ms[run % 3]; /* rows, then panels; 1, 14, M x rows */
            if (run < 3)
                skv_matmul(pools[2], y, x, m, w, ts[ti], N_OUT, N_IN, NULL);
            else
                skv_matmul_panels(pools[2], y, x, m, panels, ts[ti], N_OUT, N_IN, NULL);
            for (int r = 0; r < N_OUT; r++) {
                skv_dequantize_row(ts[ti], w + r * rb, wd, N_IN);
                for (int i = 0; i < m; i++) {
                    float a = 0.0f;
                    for (int k = 0; k < N_IN; k++) a = fmaf(x[i * N_IN + k], wd[k], a);
                    if (memcmp(&a, &y[i * N_OUT + r], sizeof a) != 0)
                        fail_msg("%s %s m=%d y[%d][%d] = %.9g, the fmaf chain gives %.9g",
                                 skv_type_name(ts[ti]), run < 3 ? "rows" : "panels", m, i, r,
                                 y[i * N_OUT + r], a);
                }
            }
        }
        free(panels);
    }
    /* decode over many panels (the two-stream loop, the odd last panel, a ragged last one):
     * 7 panels (101 outputs) on one, two and three threads */
    enum { N_OUT2 = 101, N_IN2 = 77 };
    float y2[N_OUT2];
    for (int ti = 0; ti < 3; ti++) {
        size_t rb = skv_row_bytes(ts[ti], N_IN2);
        for (int r = 0; r < N_OUT2; r++)
            skv_quantize_row_simple(ts[ti], wf + (r % N_OUT) * N_IN + r, w + r * rb, N_IN2);
        void *panels = malloc(skv_panels_bytes(ts[ti], N_OUT2, N_IN2));
        assert_non_null(panels);
        skv_panels_pack(ts[ti], w, N_OUT2, N_IN2, panels);
        for (int p = 0; p < 3; p++) {
            skv_matmul_panels(pools[p], y2, x, 1, panels, ts[ti], N_OUT2, N_IN2, NULL);
            for (int r = 0; r < N_OUT2; r++) {
                skv_dequantize_row(ts[ti], w + r * rb, wd, N_IN2);
                float a = 0.0f;
                for (int k = 0; k < N_IN2; k++) a = fmaf(x[k], wd[k], a);
                if (memcmp(&a, &y2[r], sizeof a) != 0)
                    fail_msg("%s panels m=1 pool %d y[%d] = %.9g, the fmaf chain gives %.9g",
                             skv_type_name(ts[ti]), p, r, y2[r], a);
            }
        }
        free(panels);
    }
    free(x);
    free(wf);
    free(wd);
    free(w);
}

/* ---- the K-quant formula, by hand ----------------------------------------------------------
 * The SIMD levels (AVX2 and AVX-512 VNNI alike) compute a K-quant output as, per super-block s,
 * two exact integers U_s = sum_j sc_j (codes . x codes over sub-block j) and M_s = sum_h mn_h
 * (x codes summed over group h of 16), then acc = fma(U_s, d dx, acc); acc = fma(M_s, dm dx,
 * acc). Here that is done with plain C loops over codes decoded from the block layouts below,
 * and every level must give exactly these bits. Some W rows have every code and scale at its
 * largest and some x rows are all +1 or all -1 (codes +-127), the sums the kernels add in 16
 * bits at their largest; one x row holds a NaN. */

static int f16_bits(const uint8_t *p) {
    return p[0] | p[1] << 8;
}

/* Codes (unsigned), per-value scale and min multipliers of one super-block; d and dm. */
static void k_decode(skv_type t, const uint8_t *b, int code[256], int sc[256], int mn[256],
                     float *d, float *dm) {
    if (t == SKV_TYPE_Q6_K) { /* ql[128] qh[64] sc[16] d */
        for (int h = 0; h < 2; h++)
            for (int l = 0; l < 32; l++) {
                const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
                code[128 * h + l] = (ql[l] & 15) | ((qh[l] >> 0) & 3) << 4;
                code[128 * h + 32 + l] = (ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4;
                code[128 * h + 64 + l] = (ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4;
                code[128 * h + 96 + l] = (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4;
            }
        for (int v = 0; v < 256; v++) sc[v] = mn[v] = (int8_t)b[192 + v / 16];
        *d = skv_f16_to_f32((uint16_t)f16_bits(b + 208));
        *dm = -32.0f * *d;
        return;
    }
    const int q5 = t == SKV_TYPE_Q5_K;
    const uint8_t *s = b + 4, *qh = b + 16, *qs = b + (q5 ? 48 : 16);
    for (int j = 0; j < 8; j++) { /* 6-bit scale and min of sub-block j */
        const int a = j < 4 ? s[j] & 63 : (s[j + 4] & 15) | (s[j - 4] >> 6) << 4;
        const int m = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | (s[j] >> 6) << 4;
        for (int v = 32 * j; v < 32 * j + 32; v++) sc[v] = a, mn[v] = m;
    }
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
            code[64 * c + l] = (qs[32 * c + l] & 15) | (q5 ? ((qh[l] >> (2 * c)) & 1) << 4 : 0);
            code[64 * c + 32 + l] =
                (qs[32 * c + l] >> 4) | (q5 ? ((qh[l] >> (2 * c + 1)) & 1) << 4 : 0);
        }
    *d = skv_f16_to_f32((uint16_t)f16_bits(b));
    *dm = -skv_f16_to_f32((uint16_t)f16_bits(b + 2));
}

static float k_formula(skv_type t, const uint8_t *w, const uint8_t *act, int n) {
    const size_t bb = t == SKV_TYPE_Q4_K ? 144 : t == SKV_TYPE_Q5_K ? 176 : 210;
    const int8_t *q = (const int8_t *)act;
    const float *dx = (const float *)(act + skv_act_off_d(n));
    float acc = 0.0f;
    for (int s = 0; s < n / 256; s++) {
        int code[256], sc[256], mn[256];
        float d, dm;
        k_decode(t, w + (size_t)s * bb, code, sc, mn, &d, &dm);
        int64_t u = 0, m = 0;
        for (int v = 0; v < 256; v++) {
            u += (int64_t)sc[v] * code[v] * q[256 * s + v];
            m += (int64_t)mn[v] * q[256 * s + v];
        }
        assert_true(u == (int32_t)u); /* the kernels' int32 */
        acc = fmaf((float)u, d * dx[s], acc);
        acc = fmaf((float)m, dm * dx[s], acc);
    }
    return acc;
}

static void test_k_formula(void **s) {
    (void)s;
    if (!skv_kernels_use_simd()) skip();
    const skv_type ts[] = {SKV_TYPE_Q4_K, SKV_TYPE_Q5_K, SKV_TYPE_Q6_K};
    enum { M = 200, N_OUT = 37, N_IN = 1536 }; /* 200: more than one block of x rows */
    float *x = malloc(sizeof(float) * M * N_IN), *wf = malloc(sizeof(float) * N_OUT * N_IN);
    float *wd = malloc(sizeof(float) * N_IN), *y = malloc(sizeof(float) * M * N_OUT);
    uint8_t *w = malloc(210 * (N_IN / 256) * N_OUT);
    const size_t arb = skv_act_row_bytes(N_IN, 256);
    uint8_t *act = aligned_alloc(32, arb),
            *work = malloc(skv_matmul_work_size(SKV_TYPE_Q6_K, M, N_IN));
    assert_true(x && wf && wd && y && w && act && work);
    fill_x(x, M, N_IN);
    for (int k = 0; k < N_IN; k++) x[k] = 1.0f, x[N_IN + k] = -1.0f;
    x[4 * N_IN + 100] = NAN;
    fill_w(wf, N_OUT, N_IN);
    for (int ti = 0; ti < 3; ti++) {
        const skv_type t = ts[ti];
        const size_t rb = skv_row_bytes(t, N_IN), bb = rb / (N_IN / 256);
        for (int r = 0; r < N_OUT; r++) {
            skv_quantize_row_simple(t, wf + r * N_IN, w + r * rb, N_IN);
            if (r % 6 == 5) /* all codes, scales and mins at their largest (Q6_K: +127 / -128) */
                for (int sb = 0; sb < N_IN / 256; sb++) {
                    uint8_t *b = w + r * rb + sb * bb;
                    const uint16_t d = skv_f32_to_f16(0.01f), dmin = skv_f32_to_f16(0.02f);
                    memset(b, 0xff, bb);
                    if (t == SKV_TYPE_Q6_K) {
                        memset(b + 192, r % 12 == 5 ? 0x80 : 0x7f, 16);
                        memcpy(b + 208, &d, 2);
                    } else {
                        memcpy(b, &d, 2);
                        memcpy(b + 2, &dmin, 2);
                    }
                }
            /* the decoder above reads the blocks as the library's dequantizer does */
            skv_dequantize_row(t, w + r * rb, wd, N_IN);
            for (int sb = 0; sb < N_IN / 256; sb++) {
                int code[256], sc[256], mn[256];
                float d, dm;
                k_decode(t, w + r * rb + sb * bb, code, sc, mn, &d, &dm);
                for (int v = 0; v < 256; v++) {
                    const double a = (double)d * sc[v] * code[v], b = (double)dm * mn[v];
                    assert_true(fabs(a + b - wd[256 * sb + v]) <= 1e-6 * (fabs(a) + fabs(b)));
                }
            }
        }
        const uint8_t *k16 = NULL;
        uint8_t *k16_mem = NULL;
        if (t == SKV_TYPE_Q4_K) {
            k16_mem = malloc(skv_k16_bytes(t, N_OUT, N_IN));
            assert_non_null(k16_mem);
            skv_k16_pack(t, w, N_OUT, N_IN, k16_mem);
            k16 = k16_mem;
        }
        const int ms[] = {1, 2, 3, 5, 7, M}; /* 5: a 2-row tile */
        for (int mi = 0; mi < 6; mi++)
            for (int layout = 0; layout < (k16 ? 2 : 1); layout++) {
                const int m = ms[mi];
                if (layout)
                    skv_matmul_k16(pools[2], y, x, m, k16, t, N_OUT, N_IN, work);
                else
                    skv_matmul(pools[2], y, x, m, w, t, N_OUT, N_IN, work);
                for (int i = 0; i < m; i++) {
                    skv_quantize_act_row(x + i * N_IN, act, N_IN, 256);
                    for (int r = 0; r < N_OUT; r++) {
                        const float want = k_formula(t, w + r * rb, act, N_IN);
                        if (isnan(want) ? !isnan(y[i * N_OUT + r])
                                        : memcmp(&want, &y[i * N_OUT + r], sizeof want) != 0)
                            fail_msg("%s%s m=%d y[%d][%d] = %.9g, the formula gives %.9g",
                                     skv_type_name(t), layout ? " k16" : "", m, i, r,
                                     y[i * N_OUT + r], want);
                    }
                }
            }
        free(k16_mem);
    }
    free(x);
    free(wf);
    free(wd);
    free(y);
    free(w);
    free(act);
    free(work);
}

/* x rounded to bf16 (nearest even), independently of the library's converter. */
static double bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    float r;
    memcpy(&r, &u, 4);
    return r;
}

/* BF16 panels with vdpbf16ps (where the CPU has AVX512_BF16): the product of x rounded to bf16
 * with the weights, within float accumulation error of a float64 loop; each row the same bits
 * alone or in a batch, on any thread count; NaN in x stays in its row. Sizes: odd n_in (a padded
 * pair), several column blocks (320 pairs each), more than one row block (192 rows), x rows
 * split over 2 threads (mm_split's x_split), enough panels for decode's 2 streams per thread and
 * an odd one. */
static void test_bf16_dot(void **s) {
    (void)s;
    if (!skv_kernels_use_bf16()) skip();
    skv_kernels_amx(false); /* the vdpbf16ps code (AMX: test_amx) */
    /* n_out 130: 9 panels, so that decode (2 threads here) streams both halves of a share with an
     * odd panel; test_bf16_gemv_halves covers 1-3 threads and more shapes */
    const int n_ins[] = {7, 64, 601, 1301}, ms[] = {13, 400}, n_outs[] = {37, 130};
    for (int ni = 0; ni < 4; ni++)
        for (int mi = 0; mi < 4; mi++) {
            const int n_in = n_ins[ni], m = ms[mi % 2], N_OUT = n_outs[mi / 2];
            if (N_OUT > 37 && (n_in > 601 || m > 13)) continue; /* keep the test quick */
            size_t rb = skv_row_bytes(SKV_TYPE_BF16, n_in), pb;
            float *x = malloc(sizeof(float) * m * n_in), *wf = malloc(sizeof(float) * n_in);
            float *wd = malloc(sizeof(float) * N_OUT * n_in);
            float *y = malloc(sizeof(float) * m * N_OUT), *y1 = malloc(sizeof(float) * N_OUT);
            float *y2 = malloc(sizeof(float) * m * N_OUT);
            uint8_t *w = malloc(rb * N_OUT);
            pb = skv_panels_bytes(SKV_TYPE_BF16, N_OUT, n_in);
            void *panels = malloc(pb);
            size_t ws = skv_matmul_work_size(SKV_TYPE_BF16, m, n_in);
            uint8_t *work = malloc(ws + 1);
            assert_true(x && wf && wd && y && y1 && y2 && w && panels && work && ws > 0);
            fill_x(x, m, n_in);
            for (int r = 0; r < N_OUT; r++) {
                fill_w(wf, 1, n_in);
                skv_quantize_row_simple(SKV_TYPE_BF16, wf, w + r * rb, n_in);
                skv_dequantize_row(SKV_TYPE_BF16, w + r * rb, wd + (size_t)r * n_in, n_in);
            }
            skv_panels_pack(SKV_TYPE_BF16, w, N_OUT, n_in, panels);
            x[(size_t)(m - 1) * n_in + n_in / 2] = NAN;
            skv_matmul_panels(pools[0], y, x, m, panels, SKV_TYPE_BF16, N_OUT, n_in, work + 1);
            for (int i = 0; i < m; i++)
                for (int r = 0; r < N_OUT; r++) {
                    double ref = 0, mag = 0;
                    for (int k = 0; k < n_in; k++) {
                        double p = bf16_round(x[(size_t)i * n_in + k]) * wd[(size_t)r * n_in + k];
                        ref += p, mag += fabs(p);
                    }
                    float got = y[i * N_OUT + r];
                    if (i == m - 1) {
                        assert_true(isnan(got));
                        continue;
                    }
                    if (!(fabs(got - ref) <= TOL_ACCUM * mag + 1e-30))
                        fail_msg("bf16 dot n_in=%d m=%d y[%d][%d] = %.9g, bf16-x ref %.9g", n_in, m,
                                 i, r, got, ref);
                }
            for (int p = 1; p < 3; p++) { /* threads */
                skv_matmul_panels(pools[p], y2, x, m, panels, SKV_TYPE_BF16, N_OUT, n_in, work);
                assert_true(memcmp(y, y2, sizeof(float) * (m - 1) * N_OUT) == 0);
            }
            for (int i = 0; i < m; i += 7) { /* decode: one row */
                skv_matmul_panels(pools[1], y1, x + (size_t)i * n_in, 1, panels, SKV_TYPE_BF16,
                                  N_OUT, n_in, work);
                if (i < m - 1 && memcmp(y1, y + i * N_OUT, sizeof(float) * N_OUT) != 0)
                    fail_msg("bf16 dot n_in=%d: row %d alone differs from row %d of %d", n_in, i, i,
                             m);
            }
            free(x), free(wf), free(wd), free(y), free(y1), free(y2), free(w), free(panels);
            free(work);
        }
    skv_kernels_amx(true);
}

/* Error of y against the float64 sum ref, in units of the products' root sum of squares (scale
 * free: a float chain over n products errs by about 2^-24 sqrt(n) of it). */
static double rss_error(float y, double ref, double rss) {
    return fabs((double)y - ref) / (rss + 1e-300);
}

/* F16 and BF16 panels on AMX tiles (where the CPU has AMX-BF16, matmul_amx.c). F16: x split in
 * three bf16 parts and w in two, the products all but the smallest: within float accumulation
 * error of a float64 loop, as the FMA code is (its error measured on the same products: the RMS
 * of AMX's at most 3x the FMA code's, so a part left out, an error of 2^-17 per product, fails).
 * BF16: x rounded to bf16, as vdpbf16ps's. Both: the same bits on 1-3 threads and for a row in
 * any batch of SKV_MM_AMX_MIN_ROWS or more; a NaN in x gives NaN in its row's outputs, an
 * infinity in x or W non-finite ones (NaN where the FMA code has an infinity: 0 x inf among the
 * parts), the other outputs finite. Sizes: odd n_in (zero-padded tiles), more than one column
 * block (640), n_out off 32 (edge tiles), m off 32, x rows split over threads. */
static void test_amx(void **s) {
    (void)s;
    if (!skv_kernels_use_amx()) skip();
    const skv_type ts[] = {SKV_TYPE_F16, SKV_TYPE_BF16};
    const int n_ins[] = {7, 64, 600, 1301, 2080}, ms[] = {32, 45, 300}, n_outs[] = {16, 37, 130};
    for (int ti = 0; ti < 2; ti++)
        for (int ni = 0; ni < 5; ni++)
            for (int mi = 0; mi < 3; mi++)
                for (int oi = 0; oi < 3; oi++) {
                    const skv_type t = ts[ti];
                    const int n_in = n_ins[ni], m = ms[mi], n_out = n_outs[oi];
                    if (m == 300 && n_out == 130 && n_in > 600) continue; /* keep it quick */
                    const size_t rb = skv_row_bytes(t, n_in), pb = skv_panels_bytes(t, n_out, n_in);
                    const size_t ws = skv_matmul_work_size(t, m, n_in), ny = (size_t)m * n_out;
                    float *x = malloc(sizeof(float) * m * n_in), *wf = malloc(sizeof(float) * n_in);
                    float *wd = malloc(sizeof(float) * n_out * n_in),
                          *y = malloc(sizeof(float) * ny);
                    float *y2 = malloc(sizeof(float) * ny), *yf = malloc(sizeof(float) * ny);
                    uint8_t *w = malloc(rb * n_out), *work = malloc(ws + 1);
                    void *panels = malloc(pb);
                    assert_true(x && wf && wd && y && y2 && yf && w && work && panels && ws > 0);
                    fill_x(x, m, n_in);
                    for (int r = 0; r < n_out; r++) {
                        fill_w(wf, 1, n_in);
                        if (r == 3 && n_in > 3) wf[n_in - 2] = INFINITY;
                        skv_quantize_row_simple(t, wf, w + r * rb, n_in);
                        skv_dequantize_row(t, w + r * rb, wd + (size_t)r * n_in, n_in);
                    }
                    skv_panels_pack(t, w, n_out, n_in, panels);
                    x[(size_t)(m - 1) * n_in + n_in / 2] = NAN;
                    x[(size_t)(m - 2) * n_in] = -INFINITY;
                    skv_matmul_panels(pools[0], y, x, m, panels, t, n_out, n_in, work + 1);
                    skv_kernels_amx(false); /* the FMA (or vdpbf16ps) code on the same products */
                    skv_matmul_panels(pools[0], yf, x, m, panels, t, n_out, n_in, work + 1);
                    skv_kernels_amx(true);
                    double e_amx = 0, e_fma = 0;
                    int finite = 0;
                    for (int i = 0; i < m; i++)
                        for (int r = 0; r < n_out; r++) {
                            double ref = 0, ss = 0;
                            for (int k = 0; k < n_in; k++) {
                                const float xv = x[(size_t)i * n_in + k];
                                const double p = (t == SKV_TYPE_BF16 ? bf16_round(xv) : xv) *
                                                 (double)wd[(size_t)r * n_in + k];
                                ref += p, ss += p * p;
                            }
                            const float got = y[(size_t)i * n_out + r];
                            if (isnan(ref)) {
                                if (!isnan(got))
                                    fail_msg("amx %s y[%d][%d] = %g, want NaN", skv_type_name(t), i,
                                             r, got);
                                continue;
                            }
                            if (!isfinite(ref)) {
                                if (isfinite(got))
                                    fail_msg("amx %s y[%d][%d] = %g, want non-finite (%g)",
                                             skv_type_name(t), i, r, got, ref);
                                continue;
                            }
                            if (!isfinite(got))
                                fail_msg("amx %s n_in=%d m=%d y[%d][%d] = %g, ref %.9g",
                                         skv_type_name(t), n_in, m, i, r, got, ref);
                            const double ea = rss_error(got, ref, sqrt(ss)),
                                         ef = rss_error(yf[(size_t)i * n_out + r], ref, sqrt(ss));
                            e_amx += ea * ea, e_fma += ef * ef, finite++;
                            if (!(ea <= 1e-5))
                                fail_msg("amx %s n_in=%d m=%d y[%d][%d] = %.9g, ref %.9g",
                                         skv_type_name(t), n_in, m, i, r, got, ref);
                        }
                    e_amx = sqrt(e_amx / finite), e_fma = sqrt(e_fma / finite);
                    /* the tiles ran: F16 sums in another order than the FMA code's */
                    if (t == SKV_TYPE_F16 && n_in >= 600)
                        assert_true(memcmp(y, yf, sizeof(float) * (size_t)(m - 2) * n_out) != 0);
                    /* a float chain's error; n_in 7 and 64 can be exact on both sides */
                    if (!(e_amx <= 3 * e_fma + 0x1p-24))
                        fail_msg(
                            "amx %s n_in=%d m=%d n_out=%d: RMS error %.3g, the FMA code's %.3g",
                            skv_type_name(t), n_in, m, n_out, e_amx, e_fma);
                    for (int p = 1; p < 3; p++) { /* threads */
                        skv_matmul_panels(pools[p], y2, x, m, panels, t, n_out, n_in, work);
                        assert_true(memcmp(y, y2, sizeof(float) * (size_t)(m - 2) * n_out) == 0);
                    }
                    /* rows [i0, i0 + 32) as a product of their own: the same bits */
                    const int i0 = m - 2 - SKV_MM_AMX_MIN_ROWS;
                    if (i0 >= 0) {
                        skv_matmul_panels(pools[1], y2, x + (size_t)i0 * n_in, SKV_MM_AMX_MIN_ROWS,
                                          panels, t, n_out, n_in, work);
                        if (memcmp(y2, y + (size_t)i0 * n_out,
                                   sizeof(float) * SKV_MM_AMX_MIN_ROWS * n_out) != 0)
                            fail_msg("amx %s n_in=%d: rows %d.. alone differ from a batch of %d",
                                     skv_type_name(t), n_in, i0, m);
                    }
                    /* as one of a group of products (skv_matmul_group: x split once, one
                     * decision for all): the same bits as alone */
                    const skv_mm_part parts[2] = {{y2, panels, n_out}, {yf, panels, n_out - 5}};
                    skv_matmul_group(pools[2], parts, 2, x, m, t, SKV_MM_PANELS, n_in, work);
                    assert_true(memcmp(y, y2, sizeof(float) * ny) == 0);
                    for (int i = 0; i < m - 2; i++)
                        assert_true(memcmp(y + (size_t)i * n_out, yf + (size_t)i * (n_out - 5),
                                           sizeof(float) * (size_t)(n_out - 5)) == 0);
                    free(x), free(wf), free(wd), free(y), free(y2), free(yf), free(w);
                    free(work), free(panels);
                }
}

/* The AMX prefill reads x's parts 32 rows at a time: up to 31 rows past m, which
 * skv_matmul_work_size leaves room for. With work ending where an unmapped page begins, every
 * m (1 to 3 tiles, ragged) and odd n_in runs without a fault, and gives the same bits as with
 * room to spare. */
static void test_amx_work_end(void **s) {
    (void)s;
    if (!skv_kernels_use_amx()) skip();
    const long page = sysconf(_SC_PAGESIZE);
    const skv_type ts[] = {SKV_TYPE_F16, SKV_TYPE_BF16};
    enum { N_OUT = 37 };
    for (int ti = 0; ti < 2; ti++)
        for (int m = SKV_MM_AMX_MIN_ROWS; m <= 97; m += 13)
            for (int n_in = 7; n_in <= 700; n_in += 231) {
                const skv_type t = ts[ti];
                const size_t rb = skv_row_bytes(t, n_in), ws = skv_matmul_work_size(t, m, n_in);
                const size_t span = (ws + (size_t)page - 1) / (size_t)page * (size_t)page;
                uint8_t *map = mmap(NULL, span + (size_t)page, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
                assert_true(map != MAP_FAILED);
                assert_int_equal(mprotect(map + span, (size_t)page, PROT_NONE), 0);
                float *x = malloc(sizeof(float) * m * n_in), *wf = malloc(sizeof(float) * n_in);
                float *y = malloc(sizeof(float) * m * N_OUT),
                      *y2 = malloc(sizeof(float) * m * N_OUT);
                uint8_t *w = malloc(rb * N_OUT), *roomy = malloc(ws + 4096);
                void *panels = malloc(skv_panels_bytes(t, N_OUT, n_in));
                assert_true(x && wf && y && y2 && w && roomy && panels);
                fill_x(x, m, n_in);
                for (int r = 0; r < N_OUT; r++) {
                    fill_w(wf, 1, n_in);
                    skv_quantize_row_simple(t, wf, w + r * rb, n_in);
                }
                skv_panels_pack(t, w, N_OUT, n_in, panels);
                skv_matmul_panels(pools[2], y, x, m, panels, t, N_OUT, n_in, map + span - ws);
                skv_matmul_panels(pools[2], y2, x, m, panels, t, N_OUT, n_in, roomy);
                assert_true(memcmp(y, y2, sizeof(float) * m * N_OUT) == 0);
                munmap(map, span + (size_t)page);
                free(x), free(wf), free(y), free(y2), free(w), free(roomy), free(panels);
            }
}

/* The reference itself against a hand-computed product. */
static void test_ref_hand(void **s) {
    (void)s;
    const float x[2 * 3] = {1, 2, 3, -1, 0.5f, 4};
    const float w[2 * 3] = {1, 0, -1, 0.25f, 2, 8};
    float y[4];
    skv_matmul_ref(y, x, 2, w, SKV_TYPE_F32, 2, 3);
    assert_true(y[0] == -2.0f && y[1] == 28.25f && y[2] == -5.0f && y[3] == 32.75f);
    float y2[4];
    skv_matmul(NULL, y2, x, 2, w, SKV_TYPE_F32, 2, 3, NULL);
    assert_memory_equal(y, y2, sizeof y);
}

/* Work size: none for float weights, at least m activation rows for quantized ones. */
static void test_work_size(void **s) {
    (void)s;
    /* F16: no work, except for the AMX prefill (x's three bf16 parts, 31 rows past m) */
    if (skv_simd_has_amx()) {
        assert_true(skv_matmul_work_size(SKV_TYPE_F16, 512, 576) >= (512 + 31) * 3 * 576 * 2);
        assert_true(skv_matmul_work_size(SKV_TYPE_F16, 32, 7) >= (32 + 31) * 3 * 32 * 2);
        assert_true(skv_matmul_work_size(SKV_TYPE_BF16, 32, 7) >= (32 + 31) * 64);
        assert_int_equal(skv_matmul_work_size(SKV_TYPE_F16, SKV_MM_AMX_MIN_ROWS - 1, 576), 0);
    } else {
        assert_int_equal(skv_matmul_work_size(SKV_TYPE_F16, 512, 576), 0);
    }
    /* BF16: x rounded to bf16 for the vdpbf16ps panels, in pairs (odd n padded), rows of 64
     * bytes or more */
    assert_int_equal(skv_act_bf16_row_bytes(7), 64);
    assert_int_equal(skv_act_bf16_row_bytes(33), 128);
    assert_true(skv_matmul_work_size(SKV_TYPE_BF16, 3, 7) >= 3 * 64);
    assert_true(skv_matmul_work_size(SKV_TYPE_BF16, 5, 1301) >= 5 * skv_act_bf16_row_bytes(1301));
    assert_true(skv_matmul_work_size(SKV_TYPE_Q8_0, 3, 64) >= 3 * skv_act_row_bytes(64, 32));
    assert_true(skv_matmul_work_size(SKV_TYPE_Q4_K, 2, 512) >= 2 * skv_act_row_bytes(512, 256));
    assert_int_equal(skv_matmul_work_size(SKV_TYPE_Q8_0, 1, 33), 0); /* not whole blocks */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ref_hand),
        cmocka_unit_test(test_work_size),
        cmocka_unit_test(test_rows_independent),
        cmocka_unit_test(test_group),
        cmocka_unit_test(test_k16),
        cmocka_unit_test(test_k16_extremes),
        cmocka_unit_test(test_k16_next_prep),
        cmocka_unit_test(test_float_order),
        cmocka_unit_test(test_k_formula),
        cmocka_unit_test(test_bf16_dot),
        cmocka_unit_test(test_bf16_gemv_halves),
        cmocka_unit_test(test_amx),
        cmocka_unit_test(test_amx_work_end),
        cmocka_unit_test(test_nonfinite_x),
        cmocka_unit_test(test_f32),
        cmocka_unit_test(test_f16),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_q8_0),
        cmocka_unit_test(test_q4_0),
        cmocka_unit_test(test_q5_0),
        cmocka_unit_test(test_q4_1),
        cmocka_unit_test(test_q5_1),
        cmocka_unit_test(test_q4_k),
        cmocka_unit_test(test_q5_k),
        cmocka_unit_test(test_q6_k),
        cmocka_unit_test(test_iq4_nl),
        cmocka_unit_test(test_iq4_xs),
        cmocka_unit_test(test_q2_k),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
