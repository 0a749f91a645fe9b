/* roofline.h — the machine's two ceilings, measured: FMA throughput (GFLOP/s) and memory read
 * bandwidth (GB/s), on a given number of threads. The benchmark divides what the engine achieves
 * by these to show how close to the machine's limits it runs.
 *
 * The FMA loop uses the widest registers the CPU has (AVX-512: 16 floats per instruction; AVX2 +
 * FMA: 8; 2 FLOPs per lane), whatever level the kernels were told to run at, so percentages are
 * of the machine's real ceiling; on a CPU without AVX2 both measures fall back to scalar loops. */
#ifndef SKV_ROOFLINE_H
#define SKV_ROOFLINE_H

#include "common.h"
#include "threads.h"

#include <stddef.h>

/* "avx512f", "avx2+fma" or "scalar": which FMA loop the peak below runs. */
const char *skv_roofline_impl(void);

/* Peak FMA GFLOP/s of all of pool's threads running at once (pool NULL = one thread): the best
 * of several runs of about run_ms each. */
double skv_roofline_fma_gflops(skv_pool *pool, double run_ms);

/* Read bandwidth GB/s (1e9 bytes/s) of all of pool's threads streaming through buf (bytes, each
 * thread its own slice; make it much larger than the last-level cache, and touch it first): the
 * best of 2 x reps full passes, each thread reading its slice as one sequential stream and as
 * eight, by turns (which is faster depends on the machine; the scalar loop reads one). */
double skv_roofline_read_gbs(skv_pool *pool, const void *buf, size_t bytes, int reps);

/* A buffer of bytes for skv_roofline_read_gbs (and benchmarks' weights) laid out as a loaded
 * model's weights are (model.c): on a 2 MB boundary with transparent huge pages advised, every
 * page written, so that the ceiling is measured on the kind of memory decode reads. NULL when
 * out of memory; free() it. */
void *skv_roofline_buffer(size_t bytes);

#endif
