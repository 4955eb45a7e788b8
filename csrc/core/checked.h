/* checked.h: size arithmetic that reports overflow instead of wrapping.
 *
 * Every entry point that takes sizes from a caller validates them with these
 * helpers before touching memory: a product of dimensions that does not fit in
 * int64 (or whose byte count does not fit in ptrdiff_t) is an error, never a
 * silently wrapped allocation.
 */
#ifndef WAVEPE_CHECKED_H
#define WAVEPE_CHECKED_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes shared by every validating entry point of the core. */
typedef enum wavepe_status {
    WAVEPE_OK = 0,
    WAVEPE_E_NEGATIVE_SIZE = -1,   /* a size or count below zero */
    WAVEPE_E_OVERFLOW = -2,        /* a product of sizes overflows int64 / ptrdiff_t */
    WAVEPE_E_INVALID = -3,         /* a value out of its domain (NaN, <= 0, unknown enum) */
    WAVEPE_E_NULL = -4,            /* a NULL pointer where data is required */
    WAVEPE_E_NOMEM = -5            /* scratch allocation failed */
} wavepe_status;

const char *wavepe_status_str(int status);

/* *out = a * b; returns 1 on overflow (then *out is unspecified). */
static inline int wavepe_mul_overflow(int64_t a, int64_t b, int64_t *out) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_mul_overflow(a, b, out);
#else
    if (a != 0 && (b > INT64_MAX / a || b < INT64_MIN / a)) return 1;
    *out = a * b;
    return 0;
#endif
}

/* *out = a + b; returns 1 on overflow. */
static inline int wavepe_add_overflow(int64_t a, int64_t b, int64_t *out) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_add_overflow(a, b, out);
#else
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b)) return 1;
    *out = a + b;
    return 0;
#endif
}

/* Product of n non-negative dims times elem_size, checked against PTRDIFF_MAX.
 * Returns WAVEPE_OK and the element count in *count (may be NULL). */
int wavepe_checked_numel(int n, const int64_t *dims, int64_t elem_size, int64_t *count);

#ifdef __cplusplus
}
#endif
#endif
