/* bench_args.h — what the benchmark programs share (header only: bench_lib_ab links no library). */
#ifndef SKV_BENCH_ARGS_H
#define SKV_BENCH_ARGS_H

#include <stdbool.h>
#include <stdlib.h>

/* A whole decimal in [lo, hi] into *out, or false. */
static inline bool bench_parse_int(const char *s, long lo, long hi, int *out) {
    char *end;
    if (*s < '0' || *s > '9') return false; /* strtol would take spaces and signs */
    const long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi) return false;
    *out = (int)v;
    return true;
}

#endif
