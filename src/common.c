/* common.c — errors, clock, rounding: the few helpers every file needs. */
#include "common.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

skv_status skv_err_set(skv_err *err, skv_status status, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->status = status;
    }
    return status;
}

skv_status skv_err_prefix(skv_err *err, skv_status status, const char *fmt, ...) {
    if (err) {
        char why[sizeof err->msg];
        memcpy(why, err->msg, sizeof why);
        why[sizeof why - 1] = '\0';
        char head[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(head, sizeof head, fmt, ap);
        va_end(ap);
        /* head, then ": " and as much of the callee's words as fit (cut, not overflowed) */
        size_t n = strlen(head);
        memcpy(err->msg, head, n + 1);
        if (why[0] && n + 2 < sizeof err->msg) {
            memcpy(err->msg + n, ": ", 2);
            n += 2;
            const size_t w = SKV_MIN(strlen(why), sizeof err->msg - 1 - n);
            memcpy(err->msg + n, why, w);
            err->msg[n + w] = '\0';
        }
        err->status = status;
    }
    return status;
}

const char *skv_status_str(skv_status s) {
    switch (s) {
    case SKV_OK:
        return "ok";
    case SKV_ERR_INVALID_ARG:
        return "invalid argument";
    case SKV_ERR_IO:
        return "i/o error";
    case SKV_ERR_FORMAT:
        return "malformed file";
    case SKV_ERR_UNSUPPORTED:
        return "unsupported";
    case SKV_ERR_NOMEM:
        return "out of memory";
    case SKV_ERR_STATE:
        return "invalid state";
    case SKV_ERR_NUMERIC:
        return "non-finite result";
    }
    return "unknown status";
}

double skv_time_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

long skv_round_half_even(double x) {
    double r = nearbyint(x); /* default rounding mode is to nearest, ties to even */
    return (long)r;
}

const char *skv_version(void) {
    return SKV_VERSION;
}

int skv_version_number(void) {
    return SKV_VERSION_NUMBER;
}
