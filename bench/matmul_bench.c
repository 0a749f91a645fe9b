/* matmul_bench.c — skv_matmul against the machine's measured limits.
 *
 * For each weight type and each matrix of a smollm2-135m-shaped model (576x576, 1536x576,
 * 576x1536, 49152x576; rows x columns of W) plus one that K-quants can use (16384x1536):
 * prefill (m = 512) in GFLOP/s as a percentage of the measured FMA peak, and decode (m = 1)
 * in GB/s of weights read as a percentage of the measured read bandwidth. Decode rotates
 * through copies of W so that it streams from memory, as a model's weights do (float W in panels,
 * as a loaded model holds it); the small
 * matrices still finish in microseconds, so their decode figures are noisy.
 *
 *   build: cc -O2 -mavx2 -mfma -Iinclude -Isrc bench/matmul_bench.c build/libsparsekv.a \
 *              -lm -pthread
 *   usage: matmul_bench [threads] [--decode | --prefill] [--wall] [--cold] [--hot] [--llama-1b]
 *                       [type ...]
 *          (default: 2 threads, both, per-thread CPU time, all types; --cold: prefill reads
 *          W from memory too, a new copy each run, as a model's layers do; --hot: decode reads
 *          one copy of W, 50 products per timing, from the caches where W fits: the kernel's
 *          compute ceiling, which tells a spilling or slow loop from a memory-bound one (four
 *          such loops were found so, session 33); --llama-1b: the four shapes of llama-3.2-1b
 *          instead, 2048x2048, 512x2048, 8192x2048, 2048x8192) */
#include "kernels/kernels.h"
#include "kernels/roofline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The machine may be shared with other busy processes, so wall time says little. Each thread
 * reads its own CPU clock (exact for itself) in a probe call before and after the measured
 * call; the time is the largest per-thread difference: it leaves out the time a thread sat
 * descheduled, but counts spinning while it waits for the other thread. Best of many runs. */
static skv_pool *g_pool;
static double g_t[64];

static void probe_task(void *arg, int ith, int nth) {
    (void)arg;
    (void)nth;
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    g_t[ith] = (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static double t_before[64];

static int g_wall; /* --wall: plain wall-clock time instead (for an otherwise idle machine) */
static double w_before;

static void tstart(void) {
    if (g_wall) {
        w_before = skv_time_ms();
        return;
    }
    skv_pool_run(g_pool, probe_task, NULL);
    memcpy(t_before, g_t, sizeof g_t);
}

static double tstop(void) {
    if (g_wall) return skv_time_ms() - w_before;
    skv_pool_run(g_pool, probe_task, NULL);
    double m = 0;
    for (int i = 0; i < skv_pool_size(g_pool); i++)
        m = g_t[i] - t_before[i] > m ? g_t[i] - t_before[i] : m;
    return m;
}

/* Weights as a loaded model holds them: float in panels, Q4_K, Q5_K, Q8_0, Q4_*, Q5_*, Q6_K,
 * Q3_K in k16 records where skv_k16_wanted says so, others as stored. */
static void mm(skv_pool *pool, float *y, const float *x, int m, const void *w, skv_type t,
               int n_out, int n_in, void *work) {
    if (skv_panels_bytes(t, n_out, n_in))
        skv_matmul_panels(pool, y, x, m, w, t, n_out, n_in, work);
    else if (skv_k16_wanted(t) && skv_k16_bytes(t, n_out, n_in))
        skv_matmul_k16(pool, y, x, m, w, t, n_out, n_in, work);
    else
        skv_matmul(pool, y, x, m, w, t, n_out, n_in, work);
}

/* Best of repeated products; with copies > 1 each one reads the next copy of W (wb bytes
 * apart), so that W comes from memory as in a model. */
static double best_ms(skv_pool *pool, float *y, const float *x, int m, const uint8_t *w, size_t wb,
                      int copies, skv_type t, int n_out, int n_in, void *work, double budget_ms) {
    double best = 1e30, spent = 0;
    int reps = 0;
    while (reps < 3 || (spent < budget_ms && reps < 200)) {
        tstart();
        mm(pool, y, x, m, w + wb * (size_t)(reps % copies), t, n_out, n_in, work);
        double dt = tstop();
        best = dt < best ? dt : best;
        spent += dt;
        reps++;
    }
    return best;
}

int main(int argc, char **argv) {
    int nth = argc > 1 ? atoi(argv[1]) : 2;
    skv_type types[8];
    int n_types = 0;
    int do_prefill = 1, do_decode = 1, llama = 0, cold = 0, hot = 0;
    for (int i = 2; i < argc && n_types < 8; i++) {
        if (strcmp(argv[i], "--wall") == 0)
            g_wall = 1;
        else if (strcmp(argv[i], "--decode") == 0)
            do_prefill = 0;
        else if (strcmp(argv[i], "--prefill") == 0)
            do_decode = 0;
        else if (strcmp(argv[i], "--cold") == 0)
            cold = 1;
        else if (strcmp(argv[i], "--hot") == 0)
            hot = 1;
        else if (strcmp(argv[i], "--llama-1b") == 0)
            llama = 1;
        else if (skv_type_from_name(argv[i], &types[n_types]))
            n_types++;
    }
    if (n_types == 0) {
        const skv_type all[] = {SKV_TYPE_F32,  SKV_TYPE_F16,  SKV_TYPE_BF16, SKV_TYPE_Q8_0,
                                SKV_TYPE_Q4_0, SKV_TYPE_Q4_K, SKV_TYPE_Q5_K, SKV_TYPE_Q6_K};
        memcpy(types, all, sizeof all);
        n_types = 8;
    }
    skv_pool *pool = nth > 1 ? skv_pool_new(nth) : NULL;
    g_pool = pool;
    double peak = skv_roofline_fma_gflops(pool, 100); /* the widest registers the CPU has */
    size_t bw_bytes = (size_t)512 << 20;
    char *bw_buf = skv_roofline_buffer(bw_bytes); /* in huge pages, as the weights */
    if (!bw_buf) return 1;
    double bw = skv_roofline_read_gbs(pool, bw_buf, bw_bytes, 15); /* as bench --roofline */
    free(bw_buf);
    printf("threads %d  simd %s  timing %s  FMA peak (%s) %.1f GFLOP/s  read bandwidth %.1f GB/s\n",
           nth, skv_kernels_use_simd() ? skv_simd_name(skv_simd_active_id()) : "scalar",
           g_wall ? "wall" : "thread-cpu", skv_roofline_impl(), peak, bw);
    if (hot)
        printf("decode --hot: one copy of W, from the caches where it fits (%%bw over 100%% is "
               "their bandwidth, or the kernel's own ceiling)\n");

    /* smollm2-135m's four matrix shapes, and a large one that K-quants can use too; or
     * llama-3.2-1b's four (attention q/o, k/v, ffn gate/up, ffn down) */
    const int small[5][2] = {{576, 576}, {1536, 576}, {576, 1536}, {49152, 576}, {16384, 1536}};
    const int large[4][2] = {{2048, 2048}, {512, 2048}, {8192, 2048}, {2048, 8192}};
    const int(*shapes)[2] = llama ? large : small, n_shapes = llama ? 4 : 5;
    const int M = 512, max_in = llama ? 8192 : 1536;
    float *x = malloc(sizeof(float) * M * max_in);
    float *y = malloc(sizeof(float) * M * 49152);
    float *row = malloc(sizeof(float) * max_in);
    for (int i = 0; i < M * max_in; i++)
        x[i] = (float)((int)((i * 7919LL) % 2001) - 1000) / 1000.0f;
    for (int i = 0; i < max_in; i++) row[i] = (float)((i * 31) % 201 - 100) / 1000.0f;
    printf("%-6s %-12s %14s %8s %14s %8s\n", "type", "W (out x in)", "m=512 GFLOP/s", "%peak",
           "m=1 GB/s", "%bw");
    for (int ti = 0; ti < n_types; ti++) {
        skv_type t = types[ti];
        for (int s = 0; s < n_shapes; s++) {
            int n_out = shapes[s][0], n_in = shapes[s][1];
            size_t rb = skv_row_bytes(t, n_in);
            if (rb == 0) { /* K-quants need n_in % 256 == 0 */
                printf("%-6s %5dx%-6d %14s\n", skv_type_name(t), n_out, n_in, "n/a");
                continue;
            }
            /* Decode reads each matrix once per token from memory, not from cache: rotate
             * through enough copies to overflow the last-level cache. */
            size_t wb = rb * n_out, pb = skv_panels_bytes(t, n_out, n_in);
            const size_t kb = skv_k16_wanted(t) ? skv_k16_bytes(t, n_out, n_in) : 0;
            if (kb) pb = kb; /* k16 records, as a loaded model holds them at this level */
            int copies = hot && !cold ? 1 : (int)(((size_t)256 << 20) / wb) + 1;
            /* in huge pages, as a loaded model's weights */
            uint8_t *w = skv_roofline_buffer((pb ? pb : wb) * copies);
            if (!w) return 1;
            for (int r = 0; r < n_out; r++) skv_quantize_row(t, row, w + rb * r, n_in);
            if (pb) { /* panels or k16 records: packed from a copy of the rows */
                uint8_t *rows = malloc(wb);
                memcpy(rows, w, wb);
                if (kb)
                    skv_k16_pack(t, rows, n_out, n_in, w);
                else
                    skv_panels_pack(t, rows, n_out, n_in, w);
                free(rows);
                wb = pb;
            }
            for (int c = 1; c < copies; c++) memcpy(w + wb * c, w, wb);
            size_t ws = skv_matmul_work_size(t, M, n_in);
            void *work = ws ? malloc(ws) : NULL;
            double budget = s >= 3 || llama ? 3000 : 1500;
            double ms = do_prefill ? best_ms(pool, y, x, M, w, wb, cold ? copies : 1, t, n_out,
                                             n_in, work, budget)
                                   : 1e30;
            double gf = 2.0 * M * n_out * n_in / (ms * 1e6);
            double ms1 = 1e30;
            for (int rep = 0; rep < 20 * do_decode * hot; rep++) { /* one copy, 50 a timing */
                tstart();
                for (int k = 0; k < 50; k++) mm(pool, y, x, 1, w, t, n_out, n_in, work);
                const double dt = tstop() / 50;
                ms1 = dt < ms1 ? dt : ms1;
            }
            for (int rep = 0; rep < 3 * do_decode * !hot; rep++)
                for (int c = 0; c < copies; c++) {
                    tstart();
                    mm(pool, y, x, 1, w + wb * c, t, n_out, n_in, work);
                    double dt = tstop();
                    ms1 = dt < ms1 ? dt : ms1;
                }
            double gbs = (double)wb / (ms1 * 1e6);
            printf("%-6s %5dx%-6d %14.1f %7.0f%% %14.1f %7.0f%%\n", skv_type_name(t), n_out, n_in,
                   gf, 100 * gf / peak, gbs, 100 * gbs / bw);
            fflush(stdout);
            free(work);
            free(w);
        }
    }
    free(x);
    free(y);
    free(row);
    skv_pool_free(pool);
    return 0;
}
