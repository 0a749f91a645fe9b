/* threads.c — a fixed pthread pool with low-latency dispatch.
 *
 * A decode step makes a few hundred pool calls of tens of microseconds each, so a call must
 * cost microseconds, not a mutex/condvar round trip. Workers wait for a new generation number
 * by spinning (up to SPIN_MS) and then sleeping on a futex; the caller counts finished workers down
 * and waits the same way. Sleeper counts let the waking side skip the wake syscall when
 * nobody sleeps. All shared state is C11 atomics (sequentially consistent where a sleeper
 * count pairs with the value it guards), so TSan sees every happens-before edge. */
#include "threads.h"

#include "common.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* A waiter spins before it sleeps, as long as it takes to bridge the gaps between the
 * back-to-back calls of a decode step: in a VM those include the other vCPU's stolen time, and
 * a futex wake there can cost as much as the call it starts (Zen 1 VM, smollm2 Q8_0 decode at 2
 * threads: 2400-16000 futex calls per 64 tokens, at times half the speed of one thread; with
 * this, 16-230). First with pauses, then for the rest of the budget yielding the core (a thread
 * that should run on it, when there are more threads than cores, gets it). Counted in time, not
 * in pauses: a pause takes from a few cycles to ~140 (Skylake and later). */
#define SPIN_MS       1.0
#define SPIN_PAUSE_MS 0.05
/* Pauses between two reads of the clock (a vDSO call of ~20-50 ns). */
#define SPIN_CHUNK 32

/* Spins until *addr != val (returns true, *v the new value) or the budget runs out. */
static bool spin_change(atomic_uint *addr, unsigned val, unsigned *v) {
    const double t0 = skv_time_ms();
    for (;;) {
        for (int i = 0; i < SPIN_CHUNK; i++) {
            *v = atomic_load_explicit(addr, memory_order_acquire);
            if (*v != val) return true;
            cpu_relax();
        }
        const double dt = skv_time_ms() - t0;
        if (dt > SPIN_MS) return false;
        if (dt > SPIN_PAUSE_MS) sched_yield();
    }
}

/* Sleeps while *addr == val (may wake spuriously; callers re-check). */
static void wait_on(atomic_uint *addr, unsigned val) {
#ifdef __linux__
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
#else
    (void)addr;
    (void)val;
    sched_yield();
#endif
}

static void wake_all(atomic_uint *addr) {
#ifdef __linux__
    syscall(SYS_futex, (unsigned *)addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
#else
    (void)addr;
#endif
}

struct skv_pool {
    int n;                   /* threads including the caller */
    pthread_t *threads;      /* [n - 1] workers */
    struct worker_arg *args; /* [n - 1] */
    skv_task_fn fn;          /* published by the release store of gen */
    void *arg;
    bool stop;
    atomic_uint gen;          /* bumped once per run (and once to stop) */
    atomic_uint pending;      /* workers that have not finished the current run */
    atomic_int gen_sleepers;  /* workers asleep (or about to sleep) on gen */
    atomic_int done_sleeping; /* 1 while the caller sleeps on pending */
};

typedef struct worker_arg {
    skv_pool *pool;
    int ith;
} worker_arg;

/* Waits until *addr != val; returns the new value. */
static unsigned wait_change(atomic_uint *addr, unsigned val, atomic_int *sleepers) {
    unsigned v;
    if (spin_change(addr, val, &v)) return v;
    for (;;) {
        atomic_fetch_add(sleepers, 1); /* seq_cst: pairs with the waker's store + load */
        v = atomic_load(addr);
        if (v == val) wait_on(addr, val);
        atomic_fetch_sub(sleepers, 1);
        v = atomic_load_explicit(addr, memory_order_acquire);
        if (v != val) return v;
    }
}

static void *worker_main(void *p) {
    worker_arg *wa = p;
    skv_pool *pool = wa->pool;
    unsigned seen = 0;
    for (;;) {
        seen = wait_change(&pool->gen, seen, &pool->gen_sleepers);
        if (pool->stop) break;
        pool->fn(pool->arg, wa->ith, pool->n);
        if (atomic_fetch_sub(&pool->pending, 1) == 1 && /* seq_cst: pairs with done_sleeping */
            atomic_load(&pool->done_sleeping) > 0)
            wake_all(&pool->pending);
    }
    return NULL;
}

int skv_n_cores(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
#ifdef __linux__
    cpu_set_t set; /* a container's cpuset or a taskset: threads past it would take turns */
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) >= 1 &&
        (n < 1 || CPU_COUNT(&set) < n))
        n = CPU_COUNT(&set);
#endif
    return n < 1 ? 1 : n > SKV_MAX_THREADS ? SKV_MAX_THREADS : (int)n;
}

skv_pool *skv_pool_new(int n_threads) {
    if (n_threads <= 0) n_threads = skv_n_cores();
    if (n_threads > SKV_MAX_THREADS) return NULL;
    skv_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n = n_threads;
    atomic_init(&pool->gen, 0);
    atomic_init(&pool->pending, 0);
    atomic_init(&pool->gen_sleepers, 0);
    atomic_init(&pool->done_sleeping, 0);
    if (n_threads == 1) return pool;
    size_t nw = (size_t)n_threads - 1;
    pool->threads = malloc(nw * sizeof(pthread_t));
    pool->args = malloc(nw * sizeof(worker_arg));
    if (!pool->threads || !pool->args) {
        pool->n = 1;
        skv_pool_free(pool);
        return NULL;
    }
    worker_arg *wa = pool->args;
    for (size_t i = 0; i < nw; i++) {
        wa[i].pool = pool;
        wa[i].ith = (int)i + 1;
        if (pthread_create(&pool->threads[i], NULL, worker_main, &wa[i]) != 0) {
            pool->n = (int)i + 1; /* the workers started so far; stop and join them */
            skv_pool_free(pool);
            return NULL;
        }
    }
    return pool;
}

void skv_pool_free(skv_pool *pool) {
    if (!pool) return;
    if (pool->n > 1) {
        pool->stop = true;
        atomic_fetch_add_explicit(&pool->gen, 1, memory_order_release);
        if (atomic_load(&pool->gen_sleepers) > 0) wake_all(&pool->gen);
        for (int i = 0; i < pool->n - 1; i++) pthread_join(pool->threads[i], NULL);
    }
    free(pool->threads);
    free(pool->args);
    free(pool);
}

int skv_pool_size(const skv_pool *pool) {
    return pool ? pool->n : 1;
}

void skv_pool_run(skv_pool *pool, skv_task_fn fn, void *arg) {
    if (!pool || pool->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    atomic_store_explicit(&pool->pending, (unsigned)pool->n - 1, memory_order_relaxed);
    atomic_fetch_add(&pool->gen, 1); /* seq_cst: publishes fn/arg/pending, orders vs sleepers */
    if (atomic_load(&pool->gen_sleepers) > 0) wake_all(&pool->gen);
    fn(arg, 0, pool->n);
    unsigned left = atomic_load_explicit(&pool->pending, memory_order_acquire);
    while (left != 0 && spin_change(&pool->pending, left, &left)) {
    }
    while (left != 0) {
        atomic_store(&pool->done_sleeping, 1);
        left = atomic_load(&pool->pending);
        if (left != 0) wait_on(&pool->pending, left);
        atomic_store(&pool->done_sleeping, 0);
        left = atomic_load_explicit(&pool->pending, memory_order_acquire);
    }
}
