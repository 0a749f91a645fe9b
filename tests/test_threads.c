/* test_threads.c — the pool runs fn on every thread exactly once per call, with the right
 * ith/nth, over many back-to-back calls, and tears down cleanly. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "threads.h"

#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#define MAX_T 8

typedef struct record {
    atomic_int calls[MAX_T]; /* per ith */
    atomic_int bad_nth;
    atomic_int bad_ith;
    int nth_expected;
    int64_t slot[MAX_T]; /* each thread writes only its own slot (plain stores) */
    int64_t value;
} record;

static void record_fn(void *arg, int ith, int nth) {
    record *r = arg;
    if (nth != r->nth_expected) atomic_fetch_add(&r->bad_nth, 1);
    if (ith < 0 || ith >= nth || ith >= MAX_T) {
        atomic_fetch_add(&r->bad_ith, 1);
        return;
    }
    atomic_fetch_add(&r->calls[ith], 1);
    r->slot[ith] += r->value * (ith + 1);
}

static void check_pool(int n) {
    skv_pool *pool = skv_pool_new(n);
    assert_non_null(pool);
    assert_int_equal(skv_pool_size(pool), n);
    record r;
    memset(&r, 0, sizeof r);
    r.nth_expected = n;
    const int runs = 3000;
    for (int k = 1; k <= runs; k++) {
        /* Now and then idle long enough that the workers go to sleep on the futex. */
        if (k % 500 == 0) usleep(3000);
        r.value = k; /* plain write between runs: must be visible to the workers */
        skv_pool_run(pool, record_fn, &r);
        /* The call returns only after every thread finished: its slot is already updated. */
        int64_t tri = (int64_t)k * (k + 1) / 2;
        for (int i = 0; i < n; i++) assert_true(r.slot[i] == tri * (i + 1));
    }
    for (int i = 0; i < n; i++) assert_int_equal(atomic_load(&r.calls[i]), runs);
    for (int i = n; i < MAX_T; i++) assert_int_equal(atomic_load(&r.calls[i]), 0);
    assert_int_equal(atomic_load(&r.bad_nth), 0);
    assert_int_equal(atomic_load(&r.bad_ith), 0);
    skv_pool_free(pool);
}

static void test_pool_1(void **state) {
    (void)state;
    check_pool(1);
}

static void test_pool_2(void **state) {
    (void)state;
    check_pool(2);
}

static void test_pool_3(void **state) {
    (void)state;
    check_pool(3); /* more threads than this machine may have cores */
}

static void test_null_pool(void **state) {
    (void)state;
    record r;
    memset(&r, 0, sizeof r);
    r.nth_expected = 1;
    r.value = 5;
    skv_pool_run(NULL, record_fn, &r);
    assert_int_equal(atomic_load(&r.calls[0]), 1);
    assert_true(r.slot[0] == 5);
    assert_int_equal(skv_pool_size(NULL), 1);
    skv_pool_free(NULL);
}

static void test_default_size(void **state) {
    (void)state;
    int cores = skv_n_cores();
    assert_true(cores >= 1);
    skv_pool *pool = skv_pool_new(0);
    assert_non_null(pool);
    assert_int_equal(skv_pool_size(pool), cores);
    skv_pool_free(pool);
}

/* Pools created and freed repeatedly, some never run, some idle long enough to sleep. */
static void test_create_free_cycles(void **state) {
    (void)state;
    for (int k = 0; k < 50; k++) {
        skv_pool *pool = skv_pool_new(1 + k % 4);
        assert_non_null(pool);
        if (k % 3) {
            record r;
            memset(&r, 0, sizeof r);
            r.nth_expected = 1 + k % 4;
            r.value = 1;
            skv_pool_run(pool, record_fn, &r);
            for (int i = 0; i < r.nth_expected; i++) assert_int_equal(atomic_load(&r.calls[i]), 1);
        }
        skv_pool_free(pool);
    }
}

/* Work split by ith/nth covers every index exactly once (the way the kernels use the pool). */
typedef struct split {
    int n;
    atomic_int *hits;
} split;

static void split_fn(void *arg, int ith, int nth) {
    split *s = arg;
    int per = (s->n + nth - 1) / nth;
    int lo = ith * per, hi = lo + per < s->n ? lo + per : s->n;
    for (int i = lo; i < hi; i++) atomic_fetch_add(&s->hits[i], 1);
}

static void test_split_cover(void **state) {
    (void)state;
    atomic_int hits[1000];
    skv_pool *pool = skv_pool_new(3);
    assert_non_null(pool);
    for (int n = 0; n < 1000; n += 37) {
        for (int i = 0; i < 1000; i++) atomic_init(&hits[i], 0);
        split s = {n, hits};
        skv_pool_run(pool, split_fn, &s);
        for (int i = 0; i < 1000; i++) assert_int_equal(atomic_load(&hits[i]), i < n ? 1 : 0);
    }
    skv_pool_free(pool);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pool_1),       cmocka_unit_test(test_pool_2),
        cmocka_unit_test(test_pool_3),       cmocka_unit_test(test_null_pool),
        cmocka_unit_test(test_default_size), cmocka_unit_test(test_create_free_cycles),
        cmocka_unit_test(test_split_cover),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
