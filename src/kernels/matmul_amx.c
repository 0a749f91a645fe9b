/* matmul_amx.c — the prefill of F16 and BF16 weights in panels on AMX tiles (tdpbf16ps: a 16 x 16
 * float tile += 16 rows x 32 bf16 times 32 bf16 x 16 columns, 8192 multiply-adds per
 * instruction, where an AVX-512 FMA does 16). Built with the AVX512_BF16 flags and -mamx-tile
 * -mamx-bf16; matmul.c calls in only when the CPU has AMX-BF16 and the OS granted the tile state
 * (skv_kernels_use_amx), for products of at least SKV_MM_AMX_MIN_ROWS x rows with work.
 *
 * The tiles multiply bf16 (8 significant bits) exactly into float sums, so the operands are
 * split into bf16 parts that add up to them:
 *   F16 W: w = wh + wl exactly (an f16 has 11 significant bits: wh the top 8, wl the rest);
 *          x = xh + xm + xl exactly (each the remainder rounded to bf16: 24 bits in three parts
 *          of 8; subnormal parts, below 2^-126, are flushed: x under ~2^-110 loses its tail);
 *          y = sum over k of wh.xl + wh.xm + wh.xh + wl.xh + wl.xm, each product exact, summed in
 *          float (the dropped wl.xl is below 2^-24 of |w x|). So the result is a float sum of
 *          the exact products like the FMA path's, five times as many roundings in another order:
 *          not the same bits as the AVX-512/AVX2 code, within its float accumulation error.
 *   BF16 W: one part each, x rounded to bf16 as the vdpbf16ps code does (matmul_avx512bf16.c).
 * The tiles flush subnormal inputs and results to zero, as vdpbf16ps does.
 *
 * Each output's chain runs over k in order, the parts in the order above, whatever the thread
 * split and the number of rows (from SKV_MM_AMX_MIN_ROWS up): the same bits for any m that takes
 * this path, and for any thread count.
 *
 * Layout: x's parts are rows of xq (skv_act_rows_amx: part p of row i at xq + i * xq_stride +
 * p * 2 * kp, kp = n_in rounded up to 32, zero padded), read in place as A tiles (16 rows of 64
 * bytes); W's parts are made B tiles per block of KCA columns and 32 W rows (two panels), in
 * the interleaved pairs the instruction wants (row j of a tile: (w[r][2j], w[r][2j + 1]) for
 * r = 0..15), once for all of the thread's x rows. Tiles 0-3 the 32 x 32 outputs, 4-5 x rows,
 * 6-7 W: per 32 columns 12 tile loads and 20 products (F16). */
#include "kernels.h"

#if defined(SKV_HAVE_MATMUL_AMX) && defined(__AVX512F__) && defined(__AVX512BW__) &&               \
    defined(__AVX512VL__) && defined(__AVX512DQ__) && defined(__AVX512BF16__) &&                   \
    (defined(__AMX_TILE__) || defined(__AMXTILE__)) &&                                             \
    (defined(__AMX_BF16__) || defined(__AMXBF16__)) && defined(__F16C__)

#include "amx_util.h"
#include "avx512_util.h"
#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

#define PANEL SKV_MM_PANEL
#define KCA   640 /* columns per block at most (as the FMA code): 2 panels' W tiles 80 KB */
#define MCA   256 /* x rows per block: their parts in L2 (256 x 512 columns x 3 parts: 768 KB) */
#define NTA   (KCA / 32)

_Static_assert(PANEL == 16, "a B tile is 16 W rows");

int skv_act_amx_parts(skv_type wt) {
    return wt == SKV_TYPE_F16 ? 3 : 1;
}

void skv_act_rows_amx(const float *x, void *dst, int n, int parts) {
    uint16_t *d = dst;
    const int kp = (n + 31) & ~31;
    for (int k = 0; k < kp; k += 16) {
        __m512 v = _mm512_maskz_loadu_ps(lanes(n - k), x + k);
        for (int p = 0; p < parts; p++) {
            const __m512 part = bf16_near(v); /* the remainders never pass bf16's range */
            _mm256_storeu_si256((__m256i *)(void *)(d + (size_t)p * kp + k), bf16_bits(part));
            v = remainder_of(v, part);
        }
    }
}

/* The B tiles of one panel (pw: its first element; n columns) for columns [k0, k0 + 32 nt):
 * tile t at hi + 512 t (and lo + 512 t for F16's remainders), zeros past column n. */
static void b_tiles(skv_type wt, const uint16_t *pw, int n, int k0, int nt, uint16_t *hi,
                    uint16_t *lo) {
    for (int t = 0; t < nt; t++)
        for (int j = 0; j < 16; j++) {
            const int k = k0 + 32 * t + 2 * j;
            __m512i *h = (__m512i *)(void *)(hi + 512 * t + 32 * j);
            if (wt == SKV_TYPE_BF16) { /* as the vdpbf16ps code reads its pairs */
                _mm512_store_si512(h,
                                   k < n ? bf16_load_pair(pw, k / 2, n) : _mm512_setzero_si512());
                continue;
            }
            const __m256i a =
                k < n ? _mm256_loadu_si256((const __m256i *)(const void *)(pw + (size_t)k * PANEL))
                      : _mm256_setzero_si256();
            const __m256i b =
                k + 1 < n ? _mm256_loadu_si256(
                                (const __m256i *)(const void *)(pw + (size_t)(k + 1) * PANEL))
                          : _mm256_setzero_si256();
            __m512 ah, al, bh, bl;
            split_f16(_mm512_cvtph_ps(a), &ah, &al);
            split_f16(_mm512_cvtph_ps(b), &bh, &bl);
            _mm512_store_si512(h, tile_row_f(ah, bh));
            _mm512_store_si512((__m512i *)(void *)(lo + 512 * t + 32 * j), tile_row_f(al, bl));
        }
}

/* x rows (A tiles 4, 5 at a, 16 rows apart) times W (B tiles 6, 7) into the outputs 0-3. */
#define A_TIMES_B(a)                                                                               \
    do {                                                                                           \
        _tile_loadd(4, (a), sx);                                                                   \
        _tile_loadd(5, (a) + 16 * sx, sx);                                                         \
        _tile_dpbf16ps(0, 4, 6);                                                                   \
        _tile_dpbf16ps(1, 4, 7);                                                                   \
        _tile_dpbf16ps(2, 5, 6);                                                                   \
        _tile_dpbf16ps(3, 5, 7);                                                                   \
    } while (0)

void skv_matmul_amx(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    const int n = mm->n_in, kp = (n + 31) & ~31;
    const bool f16 = mm->wt == SKV_TYPE_F16;
    const size_t ldy = (size_t)mm->n_out, sx = mm->xq_stride, part = 2 * (size_t)kp;
    const uint16_t *w = mm->w;
    /* W's tiles, [part][panel][tile]: 80 KB, too much for a thread's stack */
    uint16_t(*bt)[2][NTA * 512] = aligned_alloc(64, sizeof(uint16_t[2][2][NTA * 512]));
    if (!bt) { /* the vector code needs no buffer (other bits, as with fewer rows) */
        skv_matmul_avx512(mm, i0, i1, r0, r1);
        return;
    }
    float stage[32 * 32] __attribute__((aligned(64))); /* outputs past i1 or r1 */
    tiles_configure();
    const int nkb = (kp + KCA - 1) / KCA, kc = (kp / 32 + nkb - 1) / nkb * 32; /* even blocks */
    for (int ib = i0; ib < i1; ib += MCA) {
        const int ie = i1 - ib < MCA ? i1 : ib + MCA;
        for (int k0 = 0; k0 < kp; k0 += kc) {
            const int nt = (kp - k0 < kc ? kp - k0 : kc) / 32, first = k0 == 0;
            for (int r = r0; r < r1; r += 32) {
                for (int q = 0; q < 2; q++) {
                    if (r + q * PANEL < r1)
                        b_tiles(mm->wt, w + (size_t)(r / PANEL + q) * PANEL * n, n, k0, nt,
                                bt[0][q], bt[1][q]);
                    else
                        memset(bt[0][q], 0, sizeof bt[0][q]), memset(bt[1][q], 0, sizeof bt[1][q]);
                }
                for (int i = ib; i < ie; i += 32) {
                    const int mi = ie - i < 32 ? ie - i : 32, nr = r1 - r < 32 ? r1 - r : 32;
                    const bool edge = mi < 32 || nr < 32;
                    float *c = edge ? stage : mm->y + (size_t)i * ldy + r;
                    const size_t ldc = edge ? 32 : ldy;
                    if (edge && !first)
                        for (int ii = 0; ii < 32; ii++)
                            for (int rr = 0; rr < 32; rr++)
                                stage[ii * 32 + rr] =
                                    ii < mi && rr < nr ? mm->y[(size_t)(i + ii) * ldy + r + rr] : 0;
                    TILE_MEMORY();
                    if (first) {
                        _tile_zero(0);
                        _tile_zero(1);
                        _tile_zero(2);
                        _tile_zero(3);
                    } else {
                        _tile_loadd(0, c, ldc * 4);
                        _tile_loadd(1, c + 16, ldc * 4);
                        _tile_loadd(2, c + 16 * ldc, ldc * 4);
                        _tile_loadd(3, c + 16 * ldc + 16, ldc * 4);
                    }
                    const uint8_t *a = mm->xq + (size_t)i * sx + 2 * (size_t)k0;
                    for (int t = 0; t < nt; t++, a += 64) {
                        _tile_loadd(6, bt[0][0] + 512 * t, 64);
                        _tile_loadd(7, bt[0][1] + 512 * t, 64);
                        if (f16) {
                            A_TIMES_B(a + 2 * part); /* wh.xl */
                            A_TIMES_B(a + part);     /* wh.xm */
                        }
                        A_TIMES_B(a); /* wh.xh */
                        if (f16) {
                            _tile_loadd(6, bt[1][0] + 512 * t, 64);
                            _tile_loadd(7, bt[1][1] + 512 * t, 64);
                            _tile_dpbf16ps(0, 4, 6); /* wl.xh: x rows still in 4, 5 */
                            _tile_dpbf16ps(1, 4, 7);
                            _tile_dpbf16ps(2, 5, 6);
                            _tile_dpbf16ps(3, 5, 7);
                            A_TIMES_B(a + part); /* wl.xm */
                        }
                    }
                    _tile_stored(0, c, ldc * 4);
                    _tile_stored(1, c + 16, ldc * 4);
                    _tile_stored(2, c + 16 * ldc, ldc * 4);
                    _tile_stored(3, c + 16 * ldc + 16, ldc * 4);
                    if (edge)
                        for (int ii = 0; ii < mi; ii++)
                            memcpy(mm->y + (size_t)(i + ii) * ldy + r, stage + ii * 32,
                                   sizeof(float) * (size_t)nr);
                }
            }
        }
    }
    _tile_release();
    free(bt);
}

#else
/* Built without the AMX flags: nothing here (the Makefile passes them on x86-64). */
typedef int skv_matmul_amx_empty;
#endif
