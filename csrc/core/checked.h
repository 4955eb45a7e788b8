/* checked.h: size arithmetic that reports overflow instead of wrapping, and
 * the status codes and error reports of every validator.
 *
 * Every entry point that takes sizes from a caller validates them with these
 * helpers before touching memory: a product of dimensions that does not fit in
 * int64 (or whose byte count does not fit in ptrdiff_t) is an error, never a
 * silently wrapped allocation.  A validator returns a wavepe_status and, when
 * given a wavepe_error, says in words which argument broke which rule (with
 * its value), so that every front end raises the same clear message.
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

/* Why a validator rejected its arguments: one sentence naming the argument
 * (as the Python API spells it) and showing its value, e.g.
 * "q_offset=4611686018427387904 is beyond the supported positions (|q_offset| <= 2^60)". */
typedef struct wavepe_error {
    char message[256];
} wavepe_error;

/* Write the reason into *err (when err is not NULL; printf format) and return status. */
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
int wavepe_fail(wavepe_error *err, int status, const char *fmt, ...);

/* Positions and relative distances of every family stay within +-2^60, so that
 * any sum of a few of them (a distance plus a tile, an offset plus a length)
 * is exact in int64. */
#define WAVEPE_POSITION_LIMIT ((int64_t)1 << 60)

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

/* A value that is a position, a distance or a count of them: |value| <= 2^60,
 * else WAVEPE_E_OVERFLOW with a message naming `name`. */
int wavepe_check_position(wavepe_error *err, const char *name, int64_t value);

/* A tensor `name` of n dims (sizes, element strides of any sign, elem_size
 * bytes): sizes >= 0, its element count and every element offset
 * sum_i (size_i - 1) |stride_i| addressable in ptrdiff_t bytes.  A view with
 * a zero size addresses nothing and always passes (after the size checks). */
int wavepe_check_view(wavepe_error *err, const char *name, int n, const int64_t *sizes, const int64_t *strides,
                      int64_t elem_size);

/* The product of n sizes times elem_size addressable (names the product, e.g.
 * "batch * M * k_len"), else WAVEPE_E_OVERFLOW / WAVEPE_E_NEGATIVE_SIZE. */
int wavepe_check_numel(wavepe_error *err, const char *what, int n, const int64_t *dims, int64_t elem_size);

/* 64-byte aligned scratch memory (a cache line; what SIMD kernels want) and
 * its release; NULL when out of memory.  Free with wavepe_aligned_free only. */
void *wavepe_aligned_alloc(size_t bytes);
void wavepe_aligned_free(void *p);

#ifdef __cplusplus
}
#endif
#endif
