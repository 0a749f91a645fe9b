/* threads.h — a small fixed pthread pool: run fn(arg, ith, nth) on nth threads and wait.
 * Why our own pool rather than OpenMP: explicit ownership (one pool per context), no hidden
 * global runtime that oversubscribes when several contexts or the caller run threads, and
 * ASan/valgrind-clean teardown. */
#ifndef SKV_THREADS_H
#define SKV_THREADS_H

typedef struct skv_pool skv_pool;
typedef void (*skv_task_fn)(void *arg, int ith, int nth);

/* n_threads <= 0 means skv_n_cores(). Returns NULL on failure. */
skv_pool *skv_pool_new(int n_threads);
void skv_pool_free(skv_pool *pool);
int skv_pool_size(const skv_pool *pool);
/* Runs fn on every thread (the caller is thread 0) and returns when all have finished.
 * pool may be NULL: then fn(arg, 0, 1) runs on the caller. Not reentrant. */
void skv_pool_run(skv_pool *pool, skv_task_fn fn, void *arg);
/* The cores this process may run on: online ones in its affinity mask. */
int skv_n_cores(void);

/* Work (multiply-adds) below which a task runs on the caller alone: waking the workers costs
 * more than it saves, and a worker another process keeps off its core would stall the run for
 * a scheduler time slice (a toy model decoding at 2 threads beside one busy process ran ~50x
 * slower than at 1 thread). */
#define SKV_POOL_MIN_WORK (1 << 17)

#endif
