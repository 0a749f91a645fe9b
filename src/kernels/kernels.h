/* kernels.h — the numeric building blocks: element types and block formats, matrix products,
 * norms, RoPE, softmax, attention.
 *
 * Every kernel has a plain C reference (suffix _ref, in kernels.c / quant.c / matmul.c: the truth
 * the tests compare against) and fast paths at AVX2 (vec_avx2.c, matmul_avx2.c,
 * attn_prefill_avx2.c) and AVX-512 (vec_avx512.c, matmul_avx512.c, matmul_avx512vnni.c,
 * matmul_avx512bf16.c, attn_prefill_avx512.c) picked at run time by CPU detection.
 * Unsuffixed names dispatch. Results do not depend on the thread count beyond float rounding. */
#ifndef SKV_KERNELS_H
#define SKV_KERNELS_H

#include "common.h"
#include "threads.h"

#include <float.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- element types and block formats (exact ggml layouts) ---------------------------------- */

#define SKV_QK8_0 32 /* Q8_0: { f16 d; int8 q[32]; }            34 bytes / 32 values */
#define SKV_QK4_0 32 /* Q4_0: { f16 d; uint8 q[16]; }           18 bytes / 32 values */
#define SKV_QK5_0 32 /* Q5_0: { f16 d; uint8 qh[4]; uint8 q[16]; } 22 bytes / 32 values */
/* Q4_1: { f16 d, m; uint8 q[16]; } 20 bytes, Q5_1: { f16 d, m; uint8 qh[4]; uint8 q[16]; } 24:
 * value d * code + m (codes 0..15 / 0..31, laid out as Q4_0's / Q5_0's) */
#define SKV_QK_K 256 /* K-quants: super-blocks of 256 values               */
/* Q4_K: { f16 d; f16 dmin; uint8 scales[12]; uint8 qs[128]; }           144 bytes */
/* Q5_K: { f16 d; f16 dmin; uint8 scales[12]; uint8 qh[32]; uint8 qs[128]; } 176 bytes */
/* Q6_K: { uint8 ql[128]; uint8 qh[64]; int8 scales[16]; f16 d; }        210 bytes */
/* Q3_K: { uint8 hmask[32]; uint8 qs[64]; uint8 scales[12]; f16 d; }     110 bytes (quant.c) */
/* Q2_K: { uint8 scales[16]; uint8 qs[64]; f16 d; f16 dmin; }             84 bytes (quant.c) */

bool skv_type_supported(skv_type t);
/* Values per block (1 for F32/F16/BF16) and bytes per block. 0 for unsupported types. */
int skv_type_block_size(skv_type t);
size_t skv_type_block_bytes(skv_type t);
/* Bytes of a row of n values; 0 when n is not a multiple of the block size. */
size_t skv_row_bytes(skv_type t, int64_t n);
/* Whether skv_quantize_row can write this type. */
bool skv_type_can_quantize(skv_type t);

float skv_f16_to_f32(uint16_t h);
uint16_t skv_f32_to_f16(float f); /* round to nearest even */
float skv_bf16_to_f32(uint16_t h);
uint16_t skv_f32_to_bf16(float f); /* round to nearest even */

/* Rows of F16 (little-endian halves at any alignment) from and to floats: the same values as
 * skv_f32_to_f16 / skv_f16_to_f32 element by element (round to nearest even), except that a
 * signalling NaN half comes out as a quiet NaN float (as F16C gives it); F16C where the CPU has
 * it. */
void skv_f16_row_from_f32(void *dst, const float *src, int64_t n);
void skv_f16_row_to_f32(float *dst, const void *src, int64_t n);

/* n must be a multiple of the type's block size. Q4_K/Q5_K/Q6_K blocks are searched for the
 * scales and mins of least importance-weighted rounding error (quant.c); skv_quantize_row_simple
 * writes them with the plain min/max scales instead (faster; the yardstick). Other types: the
 * same bytes from both. F16 rows go through skv_f16_row_from_f32 / skv_f16_row_to_f32. */
void skv_dequantize_row(skv_type t, const void *src, float *dst, int64_t n);
void skv_quantize_row(skv_type t, const float *src, void *dst, int64_t n);
void skv_quantize_row_simple(skv_type t, const float *src, void *dst, int64_t n);
/* Q3_K super-blocks rewritten as Q6_K ones of the same values, bit for bit: code + 32 as the
 * 6-bit code, the 6-bit scale as the int8 one, the same f16 d. The kernels read Q3_K only from
 * k16 records: a loaded model holds its Q3_K matrices there, or (without the records' kernels)
 * this way (skv_type_held). */
void skv_q3_k_to_q6_k(const void *src, void *dst, int64_t n_blocks);
/* IQ4_NL's and IQ4_XS's grid: a code c (0..15) stands for grid[c] times the block's scale. */
extern const int8_t skv_iq4_grid[16];
/* The type of the rows a matrix stored in t is held in when not in k16 records: Q6_K for Q3_K
 * (which the kernels do not read as rows), else t. */
skv_type skv_type_held(skv_type t);
/* Whether the SIMD kernels read matrices of type t from k16 records only (Q3_K, Q2_K, IQ4_XS):
 * a loaded model holds them there wherever records are read (also with SKV_NO_HUGE and
 * unpacked); rows of them go to the scalar code (Q2_K, IQ4_XS) or give NaN (Q3_K,
 * skv_matmul_group). */
bool skv_type_records_only(skv_type t);

/* ---- matrix products ----------------------------------------------------------------------
 * y[m, n_out] = x[m, n_in] · W^T, W[n_out, n_in] rows stored in type wt (a GGUF tensor with
 * ne[0] = n_in, ne[1] = n_out). Quantized W is used block by block (activations quantized to
 * 8 bits, integer dot products); it is never dequantized whole. work must hold
 * skv_matmul_work_size(wt, m, n_in) bytes (any alignment; 0 bytes for F32 and F16 weights, then
 * work may be NULL; BF16: the activations rounded to bf16 for vdpbf16ps, used by the panels;
 * F16 and BF16 where the CPU has AMX and m >= SKV_MM_AMX_MIN_ROWS: x's bf16 parts for the AMX
 * prefill of panels, which without work takes the vector code). Parallel over pool (may be
 * NULL). The result of each row of x is the same bits whatever m (batched prefill ==
 * token-by-token decode) and whatever the thread count, except for F16/BF16 panels on AMX
 * (skv_kernels_use_amx): the same bits for any m from SKV_MM_AMX_MIN_ROWS, within float rounding
 * of fewer rows' (the vector code). */
size_t skv_matmul_work_size(skv_type wt, int m, int n_in);
void skv_matmul(skv_pool *pool, float *y, const float *x, int m, const void *w, skv_type wt,
                int n_out, int n_in, void *work);
/* Decode (one x row) streams W once and asks for it this many bytes ahead of its loads:
 * software prefetch in the float panels' gemvs, the Q8_0, Q4_*, Q5_* and Q6_K records' and the
 * K-quant raw rows'. The Q4_K, Q8_0, Q4_0, Q5_0, Q4_1 and Q5_1 records' decode (gemv_k16;
 * gemv_hex_rec at VNNI, gemv_q8_rec at AVX2) reads 4 streams, 1-3 KB ahead by the CPU
 * (skv_kernels_k16_ahead; SKV_K16_PREFETCH=0: one stream, Q4_K without prefetch, the 32-value types
 * on this distance). Not in the VNNI Q8_0/Q4_0 rows' gemv_hex (measured slower with it); the AVX2
 * Q8_0/Q4_0 rows' gemv_q8 keeps its own PFD. The hardware prefetcher alone left the AMX Xeon at 2
 * threads 5-23% slower: smollm2-135m F16 tg128 108 -> 129 t/s, qwen2.5-0.5b BF16 30 -> 34,
 * Q8_0 56.5 -> 60; llama-3.2-1b Q6_K 30 -> 35, Q5_K 33.5 -> 40.5 (rows); its F16 was at the read
 * bandwidth already. 512 bytes gained nothing, 4096-8192 a little less than 2048. */
#define SKV_GEMV_PREFETCH 2048
/* Prefetch of the line off bytes past p: an address computed as an integer, since it may lie
 * past W's end (a prefetch never faults). Needs <immintrin.h>. */
#define SKV_PREFETCH_AT(p, off) _mm_prefetch((const char *)((uintptr_t)(p) + (off)), _MM_HINT_T0)
/* ... SKV_GEMV_PREFETCH + off bytes past p. */
#define SKV_PREFETCH_AHEAD(p, off) SKV_PREFETCH_AT(p, SKV_GEMV_PREFETCH + (off))

/* Float W (F32/F16/BF16) in panels: rows in groups of SKV_MM_PANEL, each group stored column by
 * column (element (r, k) at index (r / 16 * n_in + k) * 16 + r % 16), the last group padded
 * with zero rows. The fast kernels read it front to back in decode and in prefill (raw rows
 * need a transpose), so a loaded model keeps its float matrices this way. Results are the same
 * bits as from the raw rows, except for BF16 where the CPU has AVX512_BF16 (and
 * skv_kernels_use_bf16): panels then take vdpbf16ps on x rounded to bf16 (work as for
 * skv_matmul; without work, the float path). skv_panels_bytes is 0 for other types, SIZE_MAX
 * on overflow. */
#define SKV_MM_PANEL 16
size_t skv_panels_bytes(skv_type wt, int n_out, int n_in);
void skv_panels_pack(skv_type wt, const void *w, int n_out, int n_in, void *dst);
void skv_matmul_panels(skv_pool *pool, float *y, const float *x, int m, const void *panels,
                       skv_type wt, int n_out, int n_in, void *work);
/* Q4_K W in k16 records, the layout the AVX2 and AVX-512 VNNI kernels read without unpacking: rows
 * in groups of 16 (the last padded with zero rows), per group and super-block s one record of
 * SKV_K16_RECORD bytes at index (row / 16) * (n_in / 256) + s:
 *   q[8][4][16][4]   sub-block j, byte e of group gp of row k: code 32j + 4gp + e in the low
 *                    nibble, code 32j + 4gp + 16 + e in the high one
 *   sc[8][16]        the 6-bit scale of sub-block j of row k
 *   mn[4][16][2]     the 6-bit mins of sub-blocks 2p and 2p + 1 of row k
 *   d[16], dmin[16]  f16
 * (2.8% more bytes than the rows.) Q5_K W likewise (SKV_K16_Q5K_RECORD bytes): the Q4_K record of
 * the codes' low 4 bits, then their fifth bits:
 *   h[8][4][2]       sub-block j, group gp: a uint64 for the low nibbles (bit 4k + e: the fifth
 *                    bit of the low-nibble code of byte e of row k) and one for the high nibbles
 * (2.3% more bytes than the rows.)
 * Q8_0 W in k16 records too (the AVX2 and AVX-512 levels):
 * per group of 16 rows and block b of 32 values one record of SKV_K16_Q8_RECORD bytes at index
 * (row / 16) * (n_in / 32) + b:
 *   d[16]            f16, row k's scale
 *   q[2][8][8][4]    octet h (rows 8h..8h+7), group g, row k: codes 4g..4g+3 of row 8h + k
 * (the rows' bytes): 4 codes of each of 8 rows in one vector, met by 4 x codes broadcast, and
 * the 8 rows' scales one load, where rows need a transpose and 8 scale loads per block.
 * Q4_0 W in k16 records too (the AVX2 and AVX-512 levels), a Q8_0 record with its codes in
 * nibbles: per group of 16 rows and block b of 32 values one record of SKV_K16_Q4_RECORD bytes at
 * index (row / 16) * (n_in / 32) + b:
 *   d[16]            f16, row k's scale
 *   q[8][8][4]       group g, row k: codes 4g..4g+3 (the stored 0..15, value d * (code - 8)) of
 *                    row k in the low nibbles, of row 8 + k in the high ones
 * (the rows' bytes): one load and a mask or a shift give each octet's Q8_0-record vector.
 * Q5_0 W in k16 records too (the AVX2 and AVX-512 levels): a Q4_0 record of the codes' low 4
 * bits (the stored code 0..31, value d * (code - 16)), then their fifth bits:
 *   h[8]             group g: a little-endian uint64 whose bit i is the fifth bit of the code in
 *                    the low nibble of q[g]'s byte i, bit 32 + i of the one in its high nibble
 * (the rows' bytes): 32 bits a mask register (AVX-512) or a shuffle and a compare (AVX2) make
 * 32 bytes of 0x10 or 0.
 * Q4_1 and Q5_1 W in k16 records too (read by the AVX2 code at both SIMD levels): a Q4_0 / Q5_0
 * record with the 16 rows' mins m (f16) after their scales d (value d * code + m). Q4_1:
 *   d[16], m[16], q[8][8][4] (as Q4_0's)            SKV_K16_Q41_RECORD bytes
 * Q5_1:
 *   d[16], m[16], q[8][8][4], h[8] (as Q5_0's)      SKV_K16_Q51_RECORD bytes
 * (the rows' bytes).
 * Q6_K W in k16 records too (where the Q6_K kernels in use are the AVX2 ones: not at the AVX-512
 * VNNI level, whose Q6_K code reads rows): per group of 16 rows and super-block s one record of
 * SKV_K16_Q6_RECORD bytes (the rows' bytes) at index (row / 16) * (n_in / 256) + s. Scale
 * groups 2p and 2p + 1 (16 codes each) form pair p; its vector j (0..7) holds, for each row k
 * of octet h (rows 8h..8h+7), codes 2j, 2j + 1 of group 2p and 2j, 2j + 1 of group 2p + 1, so
 * that vpmaddubsw's two sums of a row belong to the two groups and meet the scale pair in
 * vpmaddwd:
 *   per pair p, SKV_K16_Q6_PAIR bytes from p * SKV_K16_Q6_PAIR (read front to back):
 *     sc[2][8][2]      octet h, row k: the int8 scales of groups 2p, 2p + 1
 *     qh[2][2][8][4]   half f, octet h, row k: the top 2 bits of vectors 4f .. 4f + 3 at bits
 *                      0-1, 2-3, 4-5, 6-7
 *     ql[4][2][8][4]   vector jj < 4, octet h, row k: the low 4 bits of vector jj's code in the
 *                      low nibble, of vector jj + 4's in the high one
 *   d[16]              f16, after the 8 pairs
 * Results are the same bits as from the rows at every SIMD level (a level without record
 * kernels unpacks rows, skv_k16_unpack_rows, and uses its own code). skv_k16_bytes is 0 for
 * other types, SIZE_MAX on overflow. */
#define SKV_K16_RECORD 2368
enum { SKV_K16_Q = 0, SKV_K16_SC = 2048, SKV_K16_MN = 2176, SKV_K16_D = 2304, SKV_K16_DMIN = 2336 };
#define SKV_K16_Q5K_RECORD 2880
#define SKV_K16_Q5K_H      2368
#define SKV_K16_Q8_RECORD  544
enum { SKV_K16_Q8_D = 0, SKV_K16_Q8_Q = 32 };
#define SKV_K16_Q4_RECORD 288
enum { SKV_K16_Q4_D = 0, SKV_K16_Q4_Q = 32 };
#define SKV_K16_Q5_RECORD 352
enum { SKV_K16_Q5_D = 0, SKV_K16_Q5_Q = 32, SKV_K16_Q5_H = 288 };
#define SKV_K16_Q41_RECORD 320
#define SKV_K16_Q51_RECORD 384
enum { SKV_K16_Q1_D = 0, SKV_K16_Q1_M = 32, SKV_K16_Q1_Q = 64, SKV_K16_Q51_H = 320 };
#define SKV_K16_Q6_RECORD 3360
#define SKV_K16_Q6_PAIR   416
enum { SKV_K16_Q6_SC = 0, SKV_K16_Q6_QH = 32, SKV_K16_Q6_QL = 160, SKV_K16_Q6_D = 3328 };
/* Q3_K W in k16 records (at every SIMD level, read by the AVX2 code): the Q6_K record's pairs,
 * vectors and scales, with each code + 4 (0..7) in two planes instead of Q6_K's four bits and two:
 *   per pair p, SKV_K16_Q3_PAIR bytes from p * SKV_K16_Q3_PAIR:
 *     sc[2][8][2]      as Q6_K's: the int8 scales (-32..31)
 *     lo[2][2][8][4]   half f, octet h, row k: the low 2 bits of vectors 4f .. 4f + 3 at bits
 *                      0-1, 2-3, 4-5, 6-7 (as Q6_K's qh)
 *     hi[2][8][4]      octet h, row k: the third bits of vectors 0 .. 7 at bits 0 .. 7
 *   d[16]              f16, after the 8 pairs
 * 114 bytes a row's super-block (Q3_K's 110, Q6_K's 210). The kernels take code + 4 + 28 as the
 * Q6_K code (Q6_K's code - 32 is the Q3_K code): the products of the Q6_K rows of the same
 * values (skv_q3_k_to_q6_k), the same bits. Q3_K is computed only from records (the scalar level
 * unpacks them to those Q6_K rows). */
#define SKV_K16_Q3_RECORD 1824
#define SKV_K16_Q3_PAIR   224
enum { SKV_K16_Q3_SC = 0, SKV_K16_Q3_LO = 32, SKV_K16_Q3_HI = 160, SKV_K16_Q3_D = 1792 };
/* Q2_K W in k16 records (at every SIMD level): the Q3_K record's pairs without the third bits,
 * each scale byte as the file's (scale 0..15 in the low nibble, min 0..15 in the high one):
 *   per pair p, SKV_K16_Q2_PAIR bytes from p * SKV_K16_Q2_PAIR:
 *     scm[2][8][2]     octet h, row k, group 2p + e: the file's scale byte of that group
 *     lo[2][2][8][4]   as Q3_K's: the codes (0..3), value d sc code - dmin m
 *   d[16], dmin[16]    f16, after the 8 pairs
 * (84 bytes a row's super-block, the file's.) The kernels take the codes as Q6_K's, U = sum sc
 * (codes . x) and M = sum m (x's group sums): acc = fma(U, d dx, acc), fma(M, -dmin dx, acc), so
 * the Q6_K prefill tiles serve (sc and the mins' pairs from the records), and the same bits. */
#define SKV_K16_Q2_RECORD 1344
#define SKV_K16_Q2_PAIR   160
enum { SKV_K16_Q2_SCM = 0, SKV_K16_Q2_LO = 32, SKV_K16_Q2_D = 1280, SKV_K16_Q2_DMIN = 1312 };
/* IQ4_NL W in k16 records too (read by the AVX2 code at both SIMD levels): a Q4_0 record whose
 * nibbles are grid indices (SKV_K16_Q4_RECORD bytes, the rows' bytes). IQ4_XS W: per group of 16
 * rows and super-block s one record of SKV_K16_IQ4XS_RECORD bytes at index
 * (row / 16) * (n_in / 256) + s:
 *   d[16]            f16, row k's super-block scale
 *   sc[8][16]        int8, sub-block j, row k: ls_j - 32 (-32..31)
 *   q[8][256]        sub-block j: a Q4_0 record's nibbles (group g, row k: indices 4g..4g+3 of
 *                    row k low, of row 8 + k high)
 * (138 bytes a row's super-block, the file's 136): a sub-block's scales are one 8-byte load per
 * octet and its indices the Q4_0 record's, so one kernel serves both types. */
#define SKV_K16_IQ4XS_RECORD 2208
enum { SKV_K16_IQ4XS_D = 0, SKV_K16_IQ4XS_SC = 32, SKV_K16_IQ4XS_Q = 160 };
size_t skv_k16_bytes(skv_type wt, int n_out, int n_in);
/* n_out rows w of type wt (Q4_K, Q5_K, Q8_0, Q4_0, Q5_0, Q4_1, Q5_1, Q6_K, Q3_K, Q2_K, IQ4_NL or
 * IQ4_XS) into records (dst: skv_k16_bytes); _ref is the plain C version, code by code, which the
 * AVX2 Q4_K one (matmul_avx2.c) and the word-wise Q6_K, Q3_K, Q2_K and Q4_0 ones match byte for
 * byte. */
void skv_k16_pack(skv_type wt, const void *w, int n_out, int n_in, void *dst);
void skv_k16_pack_ref(skv_type wt, const void *w, int n_out, int n_in, void *dst);
/* Rows [r0, r1) as rows of type wt, into dst (r1 - r0 rows). */
void skv_k16_unpack_rows(skv_type wt, const void *k16, int n_in, int r0, int r1, void *dst);
/* Rows [r0, r1) of Q3_K records as the Q6_K rows of the same values (what the kernels compute
 * them as; skv_q3_k_to_q6_k of skv_k16_unpack_rows). */
void skv_k16_unpack_rows_q6(const void *k16, int n_in, int r0, int r1, void *dst);
/* Whether a model loaded now should keep its matrices of type wt as k16 records: Q4_K, Q5_K, Q8_0,
 * Q4_0, Q5_0, Q4_1, Q5_1, IQ4_NL, IQ4_XS and Q3_K at the AVX2 and AVX-512 levels, Q6_K where its
 * kernels are the AVX2 ones (not with AVX-512 VNNI), whose decode and prefill read them as they are
 * (the scalar level unpacks rows). */
bool skv_k16_wanted(skv_type wt);
void skv_matmul_k16(skv_pool *pool, float *y, const float *x, int m, const void *k16, skv_type wt,
                    int n_out, int n_in, void *work);
/* Several products of one x at once (a layer's q, k and v; gate and up): y_j[m, n_out_j] =
 * x[m, n_in] . W_j^T for the n parts, all of type wt in one layout. Up to SKV_MM_GROUP_MAX parts
 * at a time: x is quantized once (work as for skv_matmul; BF16 panels without work take the
 * float path) and the pool runs once, so no thread waits between the products. The same bits as
 * one call per part. The y_j must not overlap each other or x; parts with n_out <= 0 are
 * skipped; panels of a quantized type and k16 records of a type without them do nothing (as
 * skv_matmul_panels and skv_matmul_k16); Q3_K other than in records gives NaN outputs. */
#define SKV_MM_GROUP_MAX 3
typedef enum skv_mm_layout { SKV_MM_ROWS, SKV_MM_PANELS, SKV_MM_K16 } skv_mm_layout;
typedef struct skv_mm_part {
    float *y;      /* [m, n_out] */
    const void *w; /* W_j in the group's layout */
    int n_out;
} skv_mm_part;
void skv_matmul_group(skv_pool *pool, const skv_mm_part *parts, int n, const float *x, int m,
                      skv_type wt, skv_mm_layout layout, int n_in, void *work);
/* Reference: dequantize each row, float64 accumulation. Single thread. */
void skv_matmul_ref(float *y, const float *x, int m, const void *w, skv_type wt, int n_out,
                    int n_in);

/* Activations quantized to 8 bits for the integer products (the rows of matmul's work buffer).
 * A row of n values in blocks of bs = skv_act_block(wt) (32 for Q8_0, Q4_*, Q5_* weights, 256 for
 * K-quants), at 32-byte aligned offsets:
 *   int8 q[n]; float d[n / bs]; float s[n / 16]
 * value = d * q with d = amax / 127 per block, q rounded to nearest; s[g] = d * (sum of q over
 * the g-th group of 16 values), which serves the offset and min terms of Q4_0 and K-quants (the
 * SIMD K-quant code reads s as int32 sums instead: skv_act_rows_k_int). */
int skv_act_block(skv_type wt); /* 0 for float weights */
/* 127 / amax, which maps a block onto [-127, 127]; 0 when amax is 0 or so small (below about
 * 3.7e-37) that the quotient overflows. Such a block gets zero codes (its values are 0 to within
 * d = amax / 127) where an infinite factor made codes of -128 (AVX2: the conversion of an
 * infinity) or +-127 and the conversion of a NaN (scalar). Both versions use this. */
static inline float skv_act_inv_scale(float amax) {
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    return id <= FLT_MAX ? id : 0.0f;
}
static inline size_t skv_act_off_d(int64_t n) {
    return ((size_t)n + 31) & ~(size_t)31;
}
static inline size_t skv_act_off_s(int64_t n, int bs) {
    return skv_act_off_d(n) + ((4 * ((size_t)n / (size_t)bs) + 31) & ~(size_t)31);
}
static inline size_t skv_act_row_bytes(int64_t n, int bs) {
    return skv_act_off_s(n, bs) + ((4 * ((size_t)n / 16) + 31) & ~(size_t)31);
}
void skv_quantize_act_row(const float *x, void *dst, int64_t n, int bs);
/* Bytes of one activation row of n values rounded to bf16 for the vdpbf16ps products (pairs in
 * 32-bit words, an odd n padded; a multiple of 64). */
size_t skv_act_bf16_row_bytes(int n);
/* Scalar dot of weight row w (type wt, n values) with an activation row quantized with
 * bs = skv_act_block(wt): integer sums per block, scaled in float. */
float skv_vec_dot_act(skv_type wt, const void *w, const void *act, int64_t n);

/* One matrix product as matmul.c hands it to its kernels (internal). */
typedef struct skv_mm {
    float *y;       /* [m, n_out] */
    const float *x; /* [m, n_in] */
    const void *w;  /* [n_out] rows of w_stride bytes, panels (w_panels) or k16 records (w_k16) */
    uint8_t *xq;    /* [m] activation rows of xq_stride bytes (quantized W, and BF16 panels with
                     * vdpbf16ps: x rounded to bf16) */
    size_t w_stride, xq_stride;
    skv_type wt;
    int m, n_out, n_in;
    bool w_panels;     /* float W in panels (skv_panels_pack) */
    bool w_k16;        /* Q4_K, Q5_K, Q8_0, Q4_*, Q5_*, Q6_K or Q3_K W in k16 records (skv_k16_pack)
                        */
    skv_type w_rec;    /* where the Q6_K code (wt Q6_K) reads Q3_K or Q2_K records: that type;
                          else unused (kernels.h's records) */
    bool k16_prefetch; /* Q4_K, Q5_K, Q8_0, Q4_*, Q5_* records' decode:
                          skv_kernels_use_k16_prefetch() */
} skv_mm;
/* Threads get W rows in multiples of this (the fast kernels' panel width), and x rows only in
 * groups of at least SKV_MM_MIN_ROWS_PER_THREAD. */
#define SKV_MM_ROW_ALIGN           16
#define SKV_MM_MIN_ROWS_PER_THREAD 16
/* F16/BF16 panels take the AMX tiles from this many x rows (smollm2 F16 pp16 at 2 threads: 530
 * t/s on the tiles, 600 on the FMA code; pp32 900 vs 820). */
#define SKV_MM_AMX_MIN_ROWS 32
#if defined(__x86_64__) || defined(__i386__)
#define SKV_HAVE_MATMUL_AVX2 1
#endif
#if defined(__x86_64__) /* AMX: 64-bit mode only */
#define SKV_HAVE_MATMUL_AMX 1
#endif
#ifdef SKV_HAVE_MATMUL_AVX2
/* matmul_avx2.c: the outputs of x rows [i0, i1) and W rows [r0, r1); xq already filled. Only
 * when the CPU has AVX2/FMA/F16C. */
void skv_matmul_avx2(const skv_mm *mm, int i0, int i1, int r0, int r1);
/* Same bytes as skv_quantize_act_row. */
void skv_quantize_act_row_avx2(const float *x, void *dst, int64_t n, int bs);
void skv_k16_pack_avx2(const void *w, int n_out, int n_in, void *dst);
/* matmul_avx512.c: the same with AVX-512 (F/BW/VL/DQ) for float W; quantized W goes to
 * skv_matmul_avx512_vnni when the CPU has VNNI, else to the AVX2 code. Only when the CPU has
 * AVX-512. Float results are the same bits as skv_matmul_avx2's. */
void skv_matmul_avx512(const skv_mm *mm, int i0, int i1, int r0, int r1);
/* matmul_avx512vnni.c: quantized W with VNNI (vpdpbusd), the same bits for any m and thread
 * split; K-quants also the same bits as the AVX2 code's (both compute one exact-integer formula,
 * matmul_avx2.c). */
void skv_matmul_avx512_vnni(const skv_mm *mm, int i0, int i1, int r0, int r1);
/* matmul_avx512bf16.c: BF16 W in panels with vdpbf16ps, x rows already rounded to bf16 in xq
 * (skv_act_rows_bf16, rows of skv_act_bf16_row_bytes). Other bits than the float path (x is
 * rounded), the same for any m and thread split. */
void skv_matmul_avx512_bf16(const skv_mm *mm, int i0, int i1, int r0, int r1);
void skv_act_rows_bf16(const float *x, void *dst, int n);
#ifdef SKV_HAVE_MATMUL_AMX
/* matmul_amx.c: F16 and BF16 W in panels on AMX tiles (the CPU has AMX-BF16, skv_kernels_use_amx),
 * x rows already split into skv_act_amx_parts(wt) bf16 parts in xq (skv_act_rows_amx: part p of
 * a row at byte 2 * p * kp, kp = n_in rounded up to 32, zero padded), 31 rows readable past m
 * (their values reach only outputs that are dropped). F16: a float sum of the exact products
 * like the FMA code's, other bits (more roundings, in another order); BF16: x rounded to bf16 as
 * vdpbf16ps's. The same bits for any m from SKV_MM_AMX_MIN_ROWS and any thread split. */
void skv_matmul_amx(const skv_mm *mm, int i0, int i1, int r0, int r1);
void skv_act_rows_amx(const float *x, void *dst, int n, int parts);
int skv_act_amx_parts(skv_type wt);
#endif
/* The activation rows that the AVX2 and AVX-512 levels read for K-quant weights (matmul_avx2.c):
 * the float group sums replaced by the exact integer sums of each 16 codes (int32), and, with
 * k_order (the VNNI level's Q4_K/Q5_K rows; not k16 records, whose codes are in natural order),
 * the codes in "K order": in every 128 values, values [32, 64) and [64, 96) swapped (as a
 * 64-byte load of Q4_K/Q5_K nibbles holds them). */
void skv_act_rows_k_int(uint8_t *row, int64_t n, bool k_order);
/* Whether the AVX-512 level reads the activation rows of an m-row product with weights of type
 * wt as unsigned codes (code + 128, what vpdpbusd takes); skv_act_rows_unsigned makes them so. */
bool skv_act_unsigned(skv_type wt, int m);
void skv_act_rows_unsigned(uint8_t *q, int64_t n);
#endif

/* ---- vector kernels (dispatching; each has a _ref twin) ------------------------------------ */

/* out[n] = x[n] / rms(x) * w[n]; out may alias x. */
void skv_rmsnorm(float *out, const float *x, const float *w, int n, float eps);
void skv_rmsnorm_ref(float *out, const float *x, const float *w, int n, float eps);

/* In-place RoPE of one head vector x[head_dim] at position pos, llama "normal" mode: rotates
 * adjacent pairs (x[2i], x[2i+1]) by pos * theta^(-2i/n_rot) for 2i < n_rot. pos may be
 * negative (used to re-rotate by a delta). */
void skv_rope(float *x, int head_dim, int n_rot, double pos, float theta);
void skv_rope_ref(float *x, int head_dim, int n_rot, double pos, float theta);

/* The same rotation in two steps, for when one position serves many vectors (every head of a
 * token, every key moved by the same distance): cs[n_rot] receives cos/sin pairs
 * (cs[2i] = cos, cs[2i+1] = sin of pos * theta^(-2i/n_rot), angles in double); apply rotates
 * the pairs (x[2i], x[2i+1]) of one vector by them. n_rot even, <= head_dim. */
void skv_rope_angles(float *cs, int n_rot, double pos, float theta);
void skv_rope_apply(float *x, int n_rot, const float *cs);

/* In-place softmax of x[n] (max-subtracted). */
void skv_softmax(float *x, int n);
void skv_softmax_ref(float *x, int n);

/* acc[n] += softmax(scale * x[n]) in double, each term the bits skv_softmax gives the row scaled
 * (float products) at the same level; x is scratch. The window scores' mean of probabilities. */
void skv_softmax_sum(double *acc, float *x, int n, float scale);
void skv_softmax_sum_ref(double *acc, float *x, int n, float scale);

/* out[n] = silu(gate[n]) * up[n]. out may alias gate. */
void skv_swiglu(float *out, const float *gate, const float *up, int n);
void skv_swiglu_ref(float *out, const float *gate, const float *up, int n);

float skv_dot_f32(const float *a, const float *b, int n);
float skv_dot_f32_ref(const float *a, const float *b, int n); /* float64 accumulation */

/* ---- attention ---------------------------------------------------------------------------
 * g query heads (one kv group) of one token over one kv head's n entries:
 *   out[i] = sum_j softmax_j(scale * q[i] · k[j]) v[j]
 * q: [g, d]; k, v: [n, d] rows of kv_type; out: [g, d]. Online softmax in one pass over K and V
 * (no n-sized buffer). n == 0 writes zeros. */
/* As skv_attn_group, and lse[g] (may be NULL) receives each head's log-sum-exp of the scaled
 * scores (-inf when n == 0). Results over disjoint ranges of K/V then merge exactly:
 * out = sum_c exp(lse_c - L) out_c with L = log sum_c exp(lse_c) (split-K decode). */
void skv_attn_group_lse(float *out, float *lse, const float *q, int g, int d, const void *k,
                        const void *v, skv_type kv_type, int n, float scale);
void skv_attn_group(float *out, const float *q, int g, int d, const void *k, const void *v,
                    skv_type kv_type, int n, float scale);
void skv_attn_group_ref(float *out, const float *q, int g, int d, const void *k, const void *v,
                        skv_type kv_type, int n, float scale);

/* What the padded rows of a partial last decode-attention tile read as V: zeros (weight 0 times
 * a value must be 0, and 0 x inf in row n-1 would be NaN). F32 rows of up to 2048 values, Q8_0
 * zeros included (scale 0); the SIMD paths repeat row n-1 for longer rows. */
extern const uint8_t skv_zero_row[8192];

/* AVX2/FMA/F16C paths (vec_avx2.c). Only call when the CPU has them (the dispatchers above
 * check); attention needs d % 8 == 0, n >= 1 and kv_type F32, F16 or Q8_0 (d % 32 == 0). */
void skv_rmsnorm_avx2(float *out, const float *x, const float *w, int n, float eps);
void skv_rope_avx2(float *x, int head_dim, int n_rot, double pos, float theta);
/* Applies a rope.h table (skv_rope_table) to x: neox 0 = adjacent pairs, 1 = NEOX halves. */
void skv_rope_apply_avx2(float *x, int n_rot, int neox, const float *cs);
void skv_softmax_avx2(float *x, int n);
void skv_softmax_sum_avx2(double *acc, float *x, int n, float scale);
void skv_swiglu_avx2(float *out, const float *gate, const float *up, int n);
float skv_dot_f32_avx2(const float *a, const float *b, int n);
void skv_f16_row_from_f32_avx2(void *dst, const float *src, int64_t n);
void skv_f16_row_to_f32_avx2(float *dst, const void *src, int64_t n);
void skv_attn_group_avx2(float *out, float *lse, const float *q, int g, int d, const void *k,
                         const void *v, skv_type kv_type, int n, float scale);

/* AVX-512 paths (vec_avx512.c), at the avx512 level only; the same contracts as the AVX2 ones,
 * attention with d % 16 == 0. */
void skv_rmsnorm_avx512(float *out, const float *x, const float *w, int n, float eps);
void skv_rope_apply_avx512(float *x, int n_rot, int neox, const float *cs);
void skv_softmax_avx512(float *x, int n);
void skv_softmax_sum_avx512(double *acc, float *x, int n, float scale);
void skv_swiglu_avx512(float *out, const float *gate, const float *up, int n);
void skv_attn_group_avx512(float *out, float *lse, const float *q, int g, int d, const void *k,
                           const void *v, skv_type kv_type, int n, float scale);

/* SIMD levels, in order. The public names are skv_simd_level() & co. in sparsekv.h. */
typedef enum skv_simd_id {
    SKV_SIMD_SCALAR = 0, /* the plain C references */
    SKV_SIMD_AVX2 = 1,   /* AVX2 + FMA + F16C */
    SKV_SIMD_AVX512 = 2, /* AVX-512 F + BW + VL + DQ (VNNI where present) */
} skv_simd_id;
/* "scalar", "avx2", "avx512". */
const char *skv_simd_name(skv_simd_id id);
/* The widest level the CPU and OS support (SKV_SIMD ignored): what the roofline measures. */
skv_simd_id skv_simd_cpu_id(void);
/* The level the dispatchers use: the CPU's, capped by what this build has kernels for and
 * lowered by SKV_SIMD / SKV_FORCE_SCALAR; chosen once per process. */
skv_simd_id skv_simd_active_id(void);

/* Whether the CPU has AVX-512 VNNI (vpdpbusd / vpdpwssd), which the AVX-512 integer products
 * need. */
bool skv_simd_has_vnni(void);
/* Whether the CPU has AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16). */
bool skv_simd_has_bf16(void);
/* True when BF16 panels take vdpbf16ps: the avx512 level, a CPU with AVX512_BF16, and not
 * switched off by skv_kernels_bf16_dot(false) (tests: to reach the float path too). */
bool skv_kernels_use_bf16(void);
void skv_kernels_bf16_dot(bool on);
/* Whether the CPU has AMX-TILE and AMX-BF16 (with AVX512_BF16) and the OS granted this process
 * the tile state (SKV_NO_AMX=1, read once, says no). */
bool skv_simd_has_amx(void);
/* True when F16/BF16 panels take the AMX prefill (matmul_amx.c): the avx512 level, AMX present,
 * not switched off by skv_kernels_amx(false) (tests: to compare with the FMA code). */
bool skv_kernels_use_amx(void);
void skv_kernels_amx(bool on);

/* True when the AVX2/FMA/F16C paths are in use (level >= avx2 and not forced off). */
bool skv_kernels_use_simd(void);
/* True when the AVX-512 paths are in use (level avx512 and not forced off). */
bool skv_kernels_use_avx512(void);
/* Which implementation the dispatchers chose: "avx512" with "+vnni", "+bf16" and "+amx" where
 * the CPU has them (and AMX is on), "avx2+fma+f16c" or "scalar". */
const char *skv_kernels_impl(void);
/* How the Q4_K, Q8_0, Q4_0, Q5_0, Q4_1 and Q5_1 records' decode (gemv_k16, gemv_hex_rec /
 * gemv_q8_rec: m < 3 x rows) read W: true, each thread's 16-row groups as K16_STREAMS runs read at
 * once, every line asked for skv_kernels_k16_ahead() bytes ahead (by the CPU, kernels.c: 3 KB on
 * Zen 1-2, 2 KB on Zen 5, 1 KB on Intel and others); false, one group after the other on the
 * hardware prefetcher alone. The same bits either way. The default is true (on Zen 3 and 4, AMD
 * family 0x19, not measured: 2 KB as Zen 5); SKV_K16_PREFETCH=0|1 (read once) overrides it, and
 * skv_kernels_k16_prefetch(mode) overrides both (tests, benchmarks: mode 1 or 0; -1 gives the
 * choice back). Measured, llama-3.2-1b Q4_K tg at 2 threads: AMX Xeon, one group 38.4 t/s,
 * streams 49.3; Zen 5, one group 48.4, streams 58.4; Zen 1 (the settings taking turns token by
 * token in one process, bench/decode_ab.c), the build committed: one group 17.1, streams 3 KB
 * ahead 22.0 (1 thread 10.1 and 13.0). An earlier Zen 1 finding that the prefetch cost 20-30% came
 * from separate builds, and on Zen 1 this loop's speed depends on the code gcc makes of it by
 * +-30%: in the build before this one, streams 1 KB ahead ran at 13.1-13.5 against one
 * group's 16.4-17.3; in another, where the distance was read from memory, at 12.5 against 10.7. */
bool skv_kernels_use_k16_prefetch(void);
void skv_kernels_k16_prefetch(int mode);
/* Bytes ahead of its loads the Q4_K, Q8_0, Q4_0, Q5_0, Q4_1 and Q5_1 records' decode prefetches in
 * streams; 0 when it reads one stream. */
int skv_kernels_k16_ahead(void);
/* ... when it does, by the CPU: set once with the SIMD level (before any product can run), read
 * by the kernels from memory; bench/decode_ab.c changes it between forward calls, never while
 * a product runs (the pool's hand-off orders the write before the workers' reads). On Zen 1 that
 * loop ran 30% faster reading its distance from here than with the same distance as a constant or a
 * local variable (the code gcc 12 makes of the streams differs, in ways not understood: spills of
 * accumulators on the stack sat at the top of the slow ones' profiles). */
extern int skv_k16_ahead_cpu;
/* Force the scalar reference paths (tests, benchmarks). */
void skv_kernels_force_ref(bool on);

/* The preparation after the current one in a prefill loop over k16 records (the VNNI gemms
 * fetch its records ahead, quant_x86.h): x blocks [mc0, i1) in steps of mcs > W rows [r0, r1)
 * in steps of 16 tg rows (r0 a multiple of 16) > column blocks kb < nkb of kbs blocks (nblk in
 * all). False after the last; else 16-row groups [*g, *g + *ng) and blocks [*b0, *b0 + *nb). */
static inline bool skv_k16_next_prep(int mc0, int mcs, int i1, int r, int tg, int r0, int r1,
                                     int kb, int nkb, int kbs, int nblk, int *g, int *ng, int *b0,
                                     int *nb) {
    const int last = kb == nkb - 1;
    const int rn = !last ? r : r + 16 * tg < r1 ? r + 16 * tg : r0;
    if (last && rn == r0 && mc0 + mcs >= i1) return false;
    *b0 = last ? 0 : (kb + 1) * kbs;
    *nb = nblk - *b0 < kbs ? nblk - *b0 : kbs;
    *g = rn / 16;
    *ng = (r1 - rn < 16 * tg ? r1 - rn + 15 : 16 * tg) / 16;
    return true;
}

#endif
