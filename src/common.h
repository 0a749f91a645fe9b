/* common.h — internal helpers shared by every source file (never installed). */
#ifndef SKV_COMMON_H
#define SKV_COMMON_H

#include "sparsekv.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdlib.h>

/* Fills err (when not NULL) with status and a printf-style message; returns status. */
skv_status skv_err_set(skv_err *err, skv_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Puts a printf-style prefix before err's present message ("prefix: message", or the prefix
 * alone when there is none) and sets status; returns status. For a caller that names what
 * failed around a callee's own words. */
skv_status skv_err_prefix(skv_err *err, skv_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Overflow-checked arithmetic for sizes read from files: false on overflow. */
static inline int skv_mul_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline int skv_add_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

#define SKV_MIN(a, b) ((a) < (b) ? (a) : (b))
#define SKV_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Python's round(): half to even. */
long skv_round_half_even(double x);

#endif
