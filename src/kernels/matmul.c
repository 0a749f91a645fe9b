/* matmul.c — y[m, n_out] = x[m, n_in] · W^T: the reference, the work size, the split over the
 * pool, and the portable scalar path. The fast kernels are in matmul_avx2.c, matmul_avx512.c,
 * matmul_avx512vnni.c, matmul_avx512bf16.c and matmul_amx.c.
 *
 * Threads split W's rows (each streams its own weights) in chunks of SKV_MM_ROW_ALIGN rows;
 * when there are fewer chunks than threads and m is large, the rows of x are split too, and for
 * float W in panels with many x rows the rows of x instead (mm_split says when). In
 * decode (one x row) the threads instead take chunks of rows from a counter as they go. Products
 * of one x (skv_matmul_group) run in one pool run. Every output element is computed by the same
 * sequence of operations whichever thread gets it and however many rows x has, so results
 * depend neither on the thread count nor on m. The one exception: F16/BF16 panels on AMX tiles
 * (matmul_amx.c) from SKV_MM_AMX_MIN_ROWS x rows, whose own sequence is the same for any such m
 * and thread split, and within float rounding of the vector code's that fewer rows take. */
#include "kernels.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* Activation rows start 64-byte aligned inside work. */
#define WORK_ALIGN 64

static uint8_t *align_work(void *work) {
    uintptr_t p = (uintptr_t)work;
    return (uint8_t *)((p + WORK_ALIGN - 1) & ~(uintptr_t)(WORK_ALIGN - 1));
}

size_t skv_act_bf16_row_bytes(int n) {
    return ((size_t)(n + 1) / 2 * 4 + 63) & ~(size_t)63;
}

/* The AMX prefill's rows of x (skv_act_rows_amx): its bf16 parts, each n rounded up to 32, in
 * an odd number of cache lines (a tile's 16 rows 2^k lines apart share few L1 sets: with
 * SmolLM2's 1536 columns, 144 lines, 4 sets; matmul_bench f16 576 x 1536, m = 512, 1 thread
 * 208 -> 245 GFLOP/s, 2 threads 518 -> 585). */
static size_t act_amx_row_bytes(skv_type wt, int n) {
#ifdef SKV_HAVE_MATMUL_AMX
    const size_t lines = (size_t)skv_act_amx_parts(wt) * (((size_t)n + 31) / 32);
    return 64 * (lines | 1);
#else
    (void)wt, (void)n;
    return 0;
#endif
}

/* Float panels take AMX (F16, BF16) from SKV_MM_AMX_MIN_ROWS x rows where the CPU has it. */
static bool amx_type(skv_type wt) {
#ifdef SKV_HAVE_MATMUL_AMX
    return (wt == SKV_TYPE_F16 || wt == SKV_TYPE_BF16) && skv_simd_has_amx();
#else
    (void)wt;
    return false;
#endif
}

size_t skv_matmul_work_size(skv_type wt, int m, int n_in) {
    int bs = skv_act_block(wt);
    if (m <= 0 || n_in <= 0) return 0;
    const bool amx = amx_type(wt) && m >= SKV_MM_AMX_MIN_ROWS;
    if (wt != SKV_TYPE_BF16 && !amx && (bs == 0 || n_in % bs)) return 0;
    size_t row = amx                   ? act_amx_row_bytes(wt, n_in)
                 : wt == SKV_TYPE_BF16 ? skv_act_bf16_row_bytes(n_in)
                                       : skv_act_row_bytes(n_in, bs);
    uint64_t total;
    /* AMX reads x 32 rows at a time: up to 31 rows past m */
    if (!skv_mul_ok((uint64_t)m + (amx ? 31 : 0), row, &total) ||
        !skv_add_ok(total, WORK_ALIGN, &total) || total > SIZE_MAX)
        return SIZE_MAX; /* the caller's allocation fails cleanly */
    return (size_t)total;
}

void skv_matmul_ref(float *y, const float *x, int m, const void *w, skv_type wt, int n_out,
                    int n_in) {
    /* Dequantize in chunks of 256 values (a multiple of every block size) to stay on the
     * stack; accumulate in double. */
    enum { CH = 256 };
    float buf[CH];
    size_t rb = skv_row_bytes(wt, n_in);
    int bs = skv_type_block_size(wt);
    if (rb == 0 || m <= 0 || n_out <= 0) return;
    size_t chunk_bytes = (size_t)(CH / bs) * skv_type_block_bytes(wt);
    for (int i = 0; i < m; i++) {
        const float *xi = x + (size_t)i * n_in;
        for (int r = 0; r < n_out; r++) {
            const uint8_t *wr = (const uint8_t *)w + (size_t)r * rb;
            double acc = 0.0;
            for (int k0 = 0, c = 0; k0 < n_in; k0 += CH, c++) {
                int len = n_in - k0 < CH ? n_in - k0 : CH;
                skv_dequantize_row(wt, wr + (size_t)c * chunk_bytes, buf, len);
                for (int k = 0; k < len; k++) acc += (double)xi[k0 + k] * (double)buf[k];
            }
            y[(size_t)i * n_out + r] = (float)acc;
        }
    }
}

/* ---- scalar path -------------------------------------------------------------------------- */

/* buf[k] = element k * 16 of a panel from p: one row's columns (float types). */
static void panel_column(skv_type wt, const uint8_t *p, int len, float *buf) {
    const size_t st = SKV_MM_PANEL * (wt == SKV_TYPE_F32 ? 4 : 2);
    for (int k = 0; k < len; k++, p += st) {
        if (wt == SKV_TYPE_F32) {
            memcpy(buf + k, p, 4);
            continue;
        }
        uint16_t h = (uint16_t)(p[0] | p[1] << 8);
        buf[k] = wt == SKV_TYPE_F16 ? skv_f16_to_f32(h) : skv_bf16_to_f32(h);
    }
}

/* Float weights: W row chunks converted once and used for every x row; float accumulation
 * per chunk of CH values (the same order for every thread split). */
static void scalar_float_block(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    enum { CH = 256 };
    float buf[CH];
    const size_t rb = skv_row_bytes(mm->wt, mm->n_in), es = mm->wt == SKV_TYPE_F32 ? 4 : 2;
    for (int r = r0; r < r1; r++) {
        const uint8_t *wr = (const uint8_t *)mm->w + (size_t)r * rb;
        for (int i = i0; i < i1; i++) mm->y[(size_t)i * mm->n_out + r] = 0.0f;
        for (int k0 = 0; k0 < mm->n_in; k0 += CH) {
            int len = mm->n_in - k0 < CH ? mm->n_in - k0 : CH;
            if (mm->w_panels) {
                const uint8_t *p = (const uint8_t *)mm->w +
                                   ((size_t)(r / SKV_MM_PANEL) * (size_t)mm->n_in + (size_t)k0) *
                                       SKV_MM_PANEL * es +
                                   (size_t)(r % SKV_MM_PANEL) * es;
                panel_column(mm->wt, p, len, buf);
            } else {
                skv_dequantize_row(mm->wt, wr + (size_t)k0 * es, buf, len);
            }
            for (int i = i0; i < i1; i++) {
                const float *xi = mm->x + (size_t)i * mm->n_in + k0;
                float s = 0.0f;
                for (int k = 0; k < len; k++) s += xi[k] * buf[k];
                mm->y[(size_t)i * mm->n_out + r] += s;
            }
        }
    }
}

static void scalar_quant_block(const skv_mm *mm, int i0, int i1, int r0, int r1) {
    size_t rb = skv_row_bytes(mm->wt, mm->n_in);
    for (int r = r0; r < r1; r++) {
        const uint8_t *wr = (const uint8_t *)mm->w + (size_t)r * rb;
        for (int i = i0; i < i1; i++)
            mm->y[(size_t)i * mm->n_out + r] =
                skv_vec_dot_act(mm->wt, wr, mm->xq + (size_t)i * mm->xq_stride, mm->n_in);
    }
}

/* ---- threading ---------------------------------------------------------------------------- */

typedef struct mm_task {
    skv_mm mm;
    bool simd;        /* the AVX2 kernels (activation quantization, and the products below) */
    bool avx512;      /* the AVX-512 products */
    bool k_int;       /* K-quants: x's group sums as int32 (skv_act_rows_k_int) */
    bool k_order;     /* ... and the codes in K order (the VNNI level's Q4_K/Q5_K rows) */
    bool u_codes;     /* activation codes + 128 (skv_act_unsigned) */
    bool bf16;        /* BF16 panels with vdpbf16ps: xq holds x rounded to bf16 */
    bool amx;         /* F16/BF16 panels on AMX tiles: xq holds x's bf16 parts */
    bool k16_kernels; /* k16 records read as they are (the SIMD levels; Q6_K: AVX2 code only) */
} mm_task;

/* Products of one x run together (skv_matmul_group): one pool run, no thread waits between
 * them. */
typedef struct mm_group {
    mm_task t[SKV_MM_GROUP_MAX];
    int n;
    int end[SKV_MM_GROUP_MAX];  /* decode: product j's rows are [end[j - 1], end[j]) of all */
    atomic_int next;            /* decode, prefill by tiles: the next row of all to take */
    int tile;                   /* prefill by tiles: W rows per tile (0: mm_split's shares) */
    int vend[SKV_MM_GROUP_MAX]; /* ... product j's tiles are [vend[j - 1], vend[j]) of all */
} mm_group;

/* Thread ith's rectangle: W rows split in chunks of SKV_MM_ROW_ALIGN over nr threads, x rows
 * over nth / nr groups (only when W has too few chunks and m is large enough). Float W in panels
 * splits x rows instead (x_split) when each thread gets at least SKV_MM_X_SPLIT_ROWS of them and
 * W is read no more often than with W rows apart (the kernels take x in blocks of ~256 rows and
 * read the W they own once per block): each thread then packs only its own x rows (pack_x),
 * where with W rows apart every thread packed all of them. Intel Xeon (AMX class), smollm2-135m
 * F16 pp512, 2 threads, 3 alternated rounds: 1016/1104/1088 -> 1153/1164/1155 t/s;
 * SKV_SIMD=avx2 784/717/777 -> 810/774/802; BF16 (vdpbf16ps, no pack_x) unchanged. */
#define SKV_MM_X_SPLIT_ROWS 128
static bool x_split(const skv_mm *mm, int nth) {
    if (!mm->w_panels || nth < 2 || mm->m < SKV_MM_X_SPLIT_ROWS * nth) return false;
    const int per = (mm->m + nth - 1) / nth; /* x rows of the largest share */
    return nth * ((per + 255) / 256) <= (mm->m + 255) / 256;
}

static void mm_split(const skv_mm *mm, int ith, int nth, int *i0, int *i1, int *r0, int *r1) {
    int chunks = (mm->n_out + SKV_MM_ROW_ALIGN - 1) / SKV_MM_ROW_ALIGN;
    int nr = nth < chunks ? nth : chunks;
    if (x_split(mm, nth)) nr = 1;
    int nm = nth / nr;
    if (nm > 1 && mm->m < nm * SKV_MM_MIN_ROWS_PER_THREAD) {
        nm = mm->m / SKV_MM_MIN_ROWS_PER_THREAD;
        if (nm < 1) nm = 1;
    }
    if (ith >= nr * nm) {
        *i0 = *i1 = *r0 = *r1 = 0;
        return;
    }
    int jr = ith % nr, jm = ith / nr;
    int c0 = (int)((int64_t)chunks * jr / nr), c1 = (int)((int64_t)chunks * (jr + 1) / nr);
    *r0 = c0 * SKV_MM_ROW_ALIGN;
    *r1 = c1 * SKV_MM_ROW_ALIGN < mm->n_out ? c1 * SKV_MM_ROW_ALIGN : mm->n_out;
    *i0 = (int)((int64_t)mm->m * jm / nm);
    *i1 = (int)((int64_t)mm->m * (jm + 1) / nm);
}

/* The level's code for one rectangle of the product. */
static void mm_block(const mm_task *t, const skv_mm *mm, int i0, int i1, int r0, int r1) {
#ifdef SKV_HAVE_MATMUL_AVX2
#ifdef SKV_HAVE_MATMUL_AMX
    if (t->amx) {
        skv_matmul_amx(mm, i0, i1, r0, r1);
        return;
    }
#endif
    if (t->bf16) {
        skv_matmul_avx512_bf16(mm, i0, i1, r0, r1);
        return;
    }
    if (t->avx512) {
        skv_matmul_avx512(mm, i0, i1, r0, r1);
        return;
    }
    if (t->simd) {
        skv_matmul_avx2(mm, i0, i1, r0, r1);
        return;
    }
#endif
    if (skv_act_block(mm->wt))
        scalar_quant_block(mm, i0, i1, r0, r1);
    else
        scalar_float_block(mm, i0, i1, r0, r1);
}

/* k16 records at a level without their kernels (a model loaded at a SIMD level, then
 * skv_kernels_force_ref): rows unpacked K16_CHUNK at a time,
 * each chunk a product of its own (y shifted to its first row): the same bits as from the rows. */
#define K16_CHUNK 64
/* a row on the stack: Q4_K and Q4_0 to 16384 values, Q5_K 13312, Q8_0 8672, Q6_K 11008 */
#define K16_ONE_ROW 9216
static void mm_k16_unpacked(const mm_task *t, int i0, int i1, int r0, int r1) {
    const skv_type rt = skv_type_held(t->mm.wt);
    const size_t rb = skv_row_bytes(rt, t->mm.n_in);
    int chunk = K16_CHUNK;
    uint8_t one[K16_ONE_ROW], *rows = malloc(rb * K16_CHUNK), *heap = rows;
    if (!rows && rb <= sizeof one) rows = one, chunk = 1; /* a row at a time: the same bits */
    if (!rows) { /* no memory for one wider row: outputs that cannot pass for results */
        for (int r = r0; r < r1; r++)
            for (int i = i0; i < i1; i++) t->mm.y[(size_t)i * t->mm.n_out + r] = NAN;
        return;
    }
    for (int c0 = r0; c0 < r1; c0 += chunk) {
        const int c1 = r1 - c0 < chunk ? r1 : c0 + chunk;
        if (rt != t->mm.wt)
            skv_k16_unpack_rows_q6(t->mm.w, t->mm.n_in, c0, c1, rows);
        else
            skv_k16_unpack_rows(t->mm.wt, t->mm.w, t->mm.n_in, c0, c1, rows);
        skv_mm mm = t->mm;
        mm.w = rows;
        mm.wt = rt;
        mm.w_stride = rb;
        mm.w_k16 = false;
        mm.y = t->mm.y + c0;
        mm_block(t, &mm, i0, i1, 0, c1 - c0);
    }
    free(heap);
}

static void mm_rect(const mm_task *t, int i0, int i1, int r0, int r1) {
    if (t->mm.w_k16 && !t->k16_kernels)
        mm_k16_unpacked(t, i0, i1, r0, r1);
    else
        mm_block(t, &t->mm, i0, i1, r0, r1);
}

/* Decode (one x row) streams W from memory, and the threads' shares of the bandwidth differ
 * from token to token: equal shares leave the first done waiting. So the threads take chunks of
 * rows as they go (a row's result does not depend on which thread computes it), each a share of
 * the rows left (guided scheduling): long runs at first, short ones at the end, so that the
 * threads finish close together. Not below DECODE_MIN rows: stories260K's 64-row matrices split
 * in two were 10% slower to decode than whole. */
#define DECODE_MIN 64
/* the records' decode (gemv_k16, gemv_hex_rec, gemv_q8_rec, ...) starts at whole 16-row groups */
_Static_assert(SKV_MM_ROW_ALIGN % 16 == 0 && DECODE_MIN % 16 == 0, "rows split in whole groups");

/* Prefill takes W rows by tiles too, from a shared counter, each tile with every x row: the
 * threads' speeds differ (in a VM, a vCPU loses stretches of milliseconds to the host), and with
 * fixed halves the first done waits for the other. Quantized W costs nothing more this way (x is
 * quantized once, each W row is prepared once either way). Float W in panels on the FMA code keeps
 * its shares (mm_split), since each tile would pack its x again (gemm_float's pack_x); on AMX
 * tiles or vdpbf16ps (no pack_x) it keeps them where its x rows split (x_split); so does W with
 * too few rows to deal out. Zen 1 VM (~11% stolen), smollm2 pp256 at 2 threads, 6 alternated
 * rounds, medians: Q8_0 87 -> 102 t/s, Q4_K 148 -> 156; qwen2.5 Q4_K 40.3 -> 39.5; the rounds
 * spread +-25% there, so within the noise. F16 in tiles, against shares (Zen 1, calm, 5 rounds):
 * smollm2 pp32 249 vs 279, pp128 278 vs 306; qwen2.5 pp128 87 vs 90. */
#define PREFILL_TILES_PER_THREAD 4
static int prefill_tiles(mm_group *g, int nth) {
    int units = 0;
    if (nth < 2 || g->t[0].mm.m < 2) return 0;
    for (int j = 0; j < g->n; j++) {
        const mm_task *t = &g->t[j];
        if (x_split(&t->mm, nth) || (t->mm.w_panels && !t->amx && !t->bf16)) return 0;
        units += (t->mm.n_out + SKV_MM_ROW_ALIGN - 1) / SKV_MM_ROW_ALIGN;
    }
    if (units < PREFILL_TILES_PER_THREAD * nth) return 0;
    const int tile = units / (PREFILL_TILES_PER_THREAD * nth) * SKV_MM_ROW_ALIGN;
    for (int j = 0; j < g->n; j++) {
        const int n_tiles = (g->t[j].mm.n_out + tile - 1) / tile;
        g->vend[j] = (j ? g->vend[j - 1] : 0) + n_tiles * tile;
    }
    return tile;
}

static void mm_worker(void *arg, int ith, int nth) {
    mm_group *g = arg;
    if (g->t[0].mm.m == 1 && nth > 1) {
        const int n = g->end[g->n - 1];
        int r0 = atomic_load_explicit(&g->next, memory_order_relaxed), c, j;
        for (;;) {
            do {
                if (r0 >= n) return;
                for (j = 0; r0 >= g->end[j]; j++) {
                }
                c = (n - r0) / (2 * nth) / SKV_MM_ROW_ALIGN * SKV_MM_ROW_ALIGN;
                if (c < DECODE_MIN) c = DECODE_MIN;
                if (c > g->end[j] - r0) c = g->end[j] - r0; /* within one product */
            } while (!atomic_compare_exchange_weak_explicit(
                &g->next, &r0, r0 + c, memory_order_relaxed, memory_order_relaxed));
            const int base = j ? g->end[j - 1] : 0;
            mm_rect(&g->t[j], 0, 1, r0 - base, r0 - base + c);
            r0 = atomic_load_explicit(&g->next, memory_order_relaxed);
        }
    }
    if (g->tile > 0) { /* prefill: tiles of W rows, all x rows each (prefill_tiles) */
        for (;;) {
            const int v = atomic_fetch_add_explicit(&g->next, g->tile, memory_order_relaxed);
            int j = 0;
            while (j < g->n && v >= g->vend[j]) j++;
            if (j == g->n) return;
            const int r0 = v - (j ? g->vend[j - 1] : 0), n_out = g->t[j].mm.n_out;
            mm_rect(&g->t[j], 0, g->t[j].mm.m, r0, r0 + g->tile < n_out ? r0 + g->tile : n_out);
        }
    }
    for (int j = 0; j < g->n; j++) {
        int i0, i1, r0, r1;
        mm_split(&g->t[j].mm, ith, nth, &i0, &i1, &r0, &r1);
        if (i0 < i1 && r0 < r1) mm_rect(&g->t[j], i0, i1, r0, r1);
    }
}

static void quant_worker(void *arg, int ith, int nth) {
    const mm_task *t = arg;
    const skv_mm *mm = &t->mm;
    int bs = skv_act_block(mm->wt);
    int i0 = (int)((int64_t)mm->m * ith / nth), i1 = (int)((int64_t)mm->m * (ith + 1) / nth);
    for (int i = i0; i < i1; i++) {
        const float *xi = mm->x + (size_t)i * mm->n_in;
        uint8_t *dst = (uint8_t *)mm->xq + (size_t)i * mm->xq_stride;
#ifdef SKV_HAVE_MATMUL_AVX2
#ifdef SKV_HAVE_MATMUL_AMX
        if (t->amx) {
            skv_act_rows_amx(xi, dst, mm->n_in, skv_act_amx_parts(mm->wt));
            continue;
        }
#endif
        if (t->bf16) {
            skv_act_rows_bf16(xi, dst, mm->n_in);
            continue;
        }
        if (t->simd) {
            skv_quantize_act_row_avx2(xi, dst, mm->n_in, bs);
            if (t->k_int) skv_act_rows_k_int(dst, mm->n_in, t->k_order);
            if (t->u_codes) skv_act_rows_unsigned(dst, mm->n_in);
            continue;
        }
#endif
        skv_quantize_act_row(xi, dst, mm->n_in, bs);
    }
}

size_t skv_panels_bytes(skv_type wt, int n_out, int n_in) {
    if (skv_act_block(wt) || skv_row_bytes(wt, 1) == 0 || n_out <= 0 || n_in <= 0) return 0;
    uint64_t groups = ((uint64_t)n_out + SKV_MM_PANEL - 1) / SKV_MM_PANEL, total;
    if (!skv_mul_ok(groups * SKV_MM_PANEL, skv_row_bytes(wt, n_in), &total) || total > SIZE_MAX)
        return SIZE_MAX;
    return (size_t)total;
}

/* One group of up to 16 rows, column by column; T is the element type (2 or 4 bytes). */
#define PACK_GROUP(T)                                                                              \
    do {                                                                                           \
        const T *src = (const T *)w + (size_t)r0 * n_in;                                           \
        T *out = (T *)d;                                                                           \
        for (int k = 0; k < n_in; k++, out += SKV_MM_PANEL) {                                      \
            int j = 0;                                                                             \
            for (; j < nr; j++) memcpy(out + j, src + (size_t)j * n_in + k, sizeof(T));            \
            for (; j < SKV_MM_PANEL; j++) memset(out + j, 0, sizeof(T));                           \
        }                                                                                          \
    } while (0)

void skv_panels_pack(skv_type wt, const void *w, int n_out, int n_in, void *dst) {
    const size_t es = skv_row_bytes(wt, 1);
    uint8_t *d = dst;
    for (int r0 = 0; r0 < n_out; r0 += SKV_MM_PANEL, d += es * SKV_MM_PANEL * (size_t)n_in) {
        const int nr = n_out - r0 < SKV_MM_PANEL ? n_out - r0 : SKV_MM_PANEL;
        if (es == 2)
            PACK_GROUP(uint16_t);
        else
            PACK_GROUP(uint32_t);
    }
}

#ifdef SKV_HAVE_MATMUL_AVX2
/* Whether the kernels of a level (simd: AVX2 or above, avx512: the AVX-512 products) read
 * wt's k16 records as they are: all of the SIMD code for Q4_K, Q5_K, Q8_0, Q4_0, Q5_0, Q4_1, Q5_1,
 * IQ4_NL, IQ4_XS, Q3_K and Q2_K, the AVX2 code only for Q6_K (the VNNI level's Q6_K kernels read
 * rows). skv_k16_wanted and the tasks ask this.
 */
static bool k16_readable(skv_type wt, bool simd, bool avx512) {
    if (!simd || skv_k16_bytes(wt, 16, skv_type_block_size(wt)) == 0) return false;
    return wt != SKV_TYPE_Q6_K || !(avx512 && skv_simd_has_vnni());
}
#endif

static void mm_task_init(mm_task *t, float *y, const float *x, int m, const void *w, skv_type wt,
                         skv_mm_layout layout, int n_out, int n_in) {
    memset(t, 0, sizeof *t);
    const bool panels = layout == SKV_MM_PANELS;
    t->mm.w_panels = panels;
    t->mm.w_k16 = layout == SKV_MM_K16;
    t->mm.y = y;
    t->mm.x = x;
    t->mm.w = w;
    t->mm.wt = wt;
    t->mm.m = m;
    t->mm.n_out = n_out;
    t->mm.n_in = n_in;
    t->mm.w_stride = skv_row_bytes(wt, n_in);
#ifdef SKV_HAVE_MATMUL_AVX2
    /* rows of a type the SIMD code reads from records only: the scalar code (IQ4_XS, Q2_K; Q3_K
     * rows never get here, skv_matmul_group) */
    t->simd = skv_kernels_use_simd() && (!skv_type_records_only(wt) || t->mm.w_k16);
    t->avx512 = t->simd && skv_simd_active_id() >= SKV_SIMD_AVX512;
    t->k_int = t->simd && (wt == SKV_TYPE_Q4_K || wt == SKV_TYPE_Q5_K || wt == SKV_TYPE_Q6_K ||
                           wt == SKV_TYPE_Q3_K || wt == SKV_TYPE_Q2_K);
    t->k_order = t->k_int && t->avx512 && skv_simd_has_vnni() &&
                 skv_type_held(wt) != SKV_TYPE_Q6_K && !t->mm.w_k16;
    t->u_codes = t->avx512 && skv_act_unsigned(wt, m);
    t->bf16 = panels && wt == SKV_TYPE_BF16 && skv_kernels_use_bf16();
    t->amx = panels && m >= SKV_MM_AMX_MIN_ROWS && amx_type(wt) && skv_kernels_use_amx();
    if (t->amx) t->bf16 = false;
    t->k16_kernels = t->mm.w_k16 && k16_readable(wt, t->simd, t->avx512); /* else unpacked */
    t->mm.k16_prefetch =
        t->k16_kernels && skv_type_held(wt) != SKV_TYPE_Q6_K && skv_kernels_use_k16_prefetch();
#endif
}

void skv_matmul_group(skv_pool *pool, const skv_mm_part *parts, int n, const float *x, int m,
                      skv_type wt, skv_mm_layout layout, int n_in, void *work) {
    for (; n > SKV_MM_GROUP_MAX; n -= SKV_MM_GROUP_MAX, parts += SKV_MM_GROUP_MAX)
        skv_matmul_group(pool, parts, SKV_MM_GROUP_MAX, x, m, wt, layout, n_in, work);
    if (n <= 0 || m <= 0 || n_in <= 0 || skv_row_bytes(wt, n_in) == 0) return;
    if (wt == SKV_TYPE_Q3_K && layout != SKV_MM_K16) { /* records only: no results to give */
        for (int j = 0; j < n; j++)
            for (size_t e = 0; e < (size_t)m * (size_t)SKV_MAX(parts[j].n_out, 0); e++)
                parts[j].y[e] = NAN;
        return;
    }
    if ((layout == SKV_MM_PANELS && skv_act_block(wt)) ||
        (layout == SKV_MM_K16 && skv_k16_bytes(wt, 16, skv_type_block_size(wt)) == 0))
        return;
    mm_group g;
    g.n = 0;
    for (int j = 0; j < n; j++) {
        if (parts[j].n_out <= 0) continue;
        mm_task_init(&g.t[g.n], parts[j].y, x, m, parts[j].w, wt, layout, parts[j].n_out, n_in);
        g.end[g.n] = (g.n ? g.end[g.n - 1] : 0) + parts[j].n_out;
        g.n++;
    }
    if (g.n == 0) return;
    atomic_init(&g.next, 0);
    mm_task *t = &g.t[0];
    for (int j = 1; j < g.n; j++) { /* one decision for the group (the switches may move) */
        g.t[j].amx = t->amx;
        g.t[j].bf16 = t->bf16;
    }
    if (t->amx && !work) /* AMX needs x's parts in work: without it, the float path */
        for (int j = 0; j < g.n; j++) g.t[j].amx = false;
    if (t->bf16 && !work) /* vdpbf16ps needs x rounded in work: without it, the float path */
        for (int j = 0; j < g.n; j++) g.t[j].bf16 = false;
    int bs = skv_act_block(wt);
    if (bs || t->bf16 || t->amx) { /* x quantized once, into work, for every product */
        t->mm.xq = align_work(work);
        t->mm.xq_stride = t->amx    ? act_amx_row_bytes(wt, n_in)
                          : t->bf16 ? skv_act_bf16_row_bytes(n_in)
                                    : skv_act_row_bytes(n_in, bs);
        /* One row is quickest on the caller; many rows are quantized in parallel. */
        if (m < 2 * skv_pool_size(pool))
            quant_worker(t, 0, 1);
        else
            skv_pool_run(pool, quant_worker, t);
        for (int j = 1; j < g.n; j++) {
            g.t[j].mm.xq = t->mm.xq;
            g.t[j].mm.xq_stride = t->mm.xq_stride;
        }
    }
    g.tile = prefill_tiles(&g, skv_pool_size(pool));
    skv_pool_run(pool, mm_worker, &g);
}

static void matmul_run(skv_pool *pool, float *y, const float *x, int m, const void *w, skv_type wt,
                       skv_mm_layout layout, int n_out, int n_in, void *work) {
    const skv_mm_part part = {y, w, n_out};
    skv_matmul_group(pool, &part, 1, x, m, wt, layout, n_in, work);
}

void skv_matmul(skv_pool *pool, float *y, const float *x, int m, const void *w, skv_type wt,
                int n_out, int n_in, void *work) {
    matmul_run(pool, y, x, m, w, wt, SKV_MM_ROWS, n_out, n_in, work);
}

void skv_matmul_panels(skv_pool *pool, float *y, const float *x, int m, const void *panels,
                       skv_type wt, int n_out, int n_in, void *work) {
    matmul_run(pool, y, x, m, panels, wt, SKV_MM_PANELS, n_out, n_in, work);
}

bool skv_k16_wanted(skv_type wt) {
#ifdef SKV_HAVE_MATMUL_AVX2
    return k16_readable(wt, skv_kernels_use_simd(), skv_kernels_use_avx512());
#else
    (void)wt;
    return false;
#endif
}

void skv_matmul_k16(skv_pool *pool, float *y, const float *x, int m, const void *k16, skv_type wt,
                    int n_out, int n_in, void *work) {
    matmul_run(pool, y, x, m, k16, wt, SKV_MM_K16, n_out, n_in, work);
}
