/* checked.c: status strings, error reports and the checked element counts. */
#include "checked.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

const char *wavepe_status_str(int status) {
    switch (status) {
    case WAVEPE_OK: return "ok";
    case WAVEPE_E_NEGATIVE_SIZE: return "a size is negative";
    case WAVEPE_E_OVERFLOW: return "sizes overflow: their product does not fit in memory addressing";
    case WAVEPE_E_INVALID: return "a value is outside its domain";
    case WAVEPE_E_NULL: return "a required pointer is NULL";
    case WAVEPE_E_NOMEM: return "out of memory";
    }
    return "unknown status";
}

int wavepe_fail(wavepe_error *err, int status, const char *fmt, ...) {
    if (err != NULL) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->message, sizeof err->message, fmt, ap);
        va_end(ap);
    }
    return status;
}

int wavepe_checked_numel(int n, const int64_t *dims, int64_t elem_size, int64_t *count) {
    int64_t total = 1;
    for (int i = 0; i < n; ++i) {
        if (dims[i] < 0) return WAVEPE_E_NEGATIVE_SIZE;
        if (wavepe_mul_overflow(total, dims[i], &total)) return WAVEPE_E_OVERFLOW;
    }
    int64_t bytes;
    if (elem_size <= 0) return WAVEPE_E_INVALID;
    if (wavepe_mul_overflow(total, elem_size, &bytes) || (uint64_t)bytes > (uint64_t)PTRDIFF_MAX)
        return WAVEPE_E_OVERFLOW;
    if (count != NULL) *count = total;
    return WAVEPE_OK;
}

int wavepe_check_position(wavepe_error *err, const char *name, int64_t value) {
    if (value > WAVEPE_POSITION_LIMIT || value < -WAVEPE_POSITION_LIMIT)
        return wavepe_fail(err, WAVEPE_E_OVERFLOW,
                           "%s=%lld is beyond the supported range of positions (|%s| <= 2^60)", name,
                           (long long)value, name);
    return WAVEPE_OK;
}

/* "(2, 3, 4)" into buf. */
static const char *shape_text(char *buf, size_t size, int n, const int64_t *v) {
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used < size; ++i) {
        const int w = snprintf(buf + used, size - used, "%s%lld", i ? ", " : "", (long long)v[i]);
        if (w < 0) break;
        used += (size_t)w;
    }
    return buf;
}

int wavepe_check_numel(wavepe_error *err, const char *what, int n, const int64_t *dims, int64_t elem_size) {
    const int status = wavepe_checked_numel(n, dims, elem_size, NULL);
    if (status == WAVEPE_OK) return WAVEPE_OK;
    char shape[96];
    shape_text(shape, sizeof shape, n, dims);
    if (status == WAVEPE_E_NEGATIVE_SIZE)
        return wavepe_fail(err, status, "%s has a negative size: (%s)", what, shape);
    if (status == WAVEPE_E_INVALID) return wavepe_fail(err, status, "%s: element size %lld", what, (long long)elem_size);
    return wavepe_fail(err, status, "%s: (%s) elements of %lld bytes overflow memory addressing", what, shape,
                       (long long)elem_size);
}

int wavepe_check_view(wavepe_error *err, const char *name, int n, const int64_t *sizes, const int64_t *strides,
                      int64_t elem_size) {
    int status = wavepe_check_numel(err, name, n, sizes, elem_size);
    if (status != WAVEPE_OK) return status;
    for (int i = 0; i < n; ++i)
        if (sizes[i] == 0) return WAVEPE_OK;
    int64_t span = 0, bytes;
    for (int i = 0; i < n; ++i) {
        int64_t part;
        if (strides[i] == INT64_MIN) goto overflow;
        if (wavepe_mul_overflow(sizes[i] - 1, strides[i] < 0 ? -strides[i] : strides[i], &part) ||
            wavepe_add_overflow(span, part, &span))
            goto overflow;
    }
    if (wavepe_mul_overflow(span + 1, elem_size, &bytes) || (uint64_t)bytes > (uint64_t)PTRDIFF_MAX) goto overflow;
    return WAVEPE_OK;
overflow : {
    char shape[96], st[96];
    return wavepe_fail(err, WAVEPE_E_OVERFLOW, "%s: a (%s) view with strides (%s) overflows memory addressing",
                       name, shape_text(shape, sizeof shape, n, sizes), shape_text(st, sizeof st, n, strides));
}
}

void *wavepe_aligned_alloc(size_t bytes) {
    /* by hand: C11's aligned_alloc wants a size multiple of the alignment and
     * posix_memalign is not C11.  The original pointer sits just below. */
    if (bytes > SIZE_MAX - 64 - sizeof(void *)) return NULL;
    unsigned char *raw = malloc(bytes + 64 + sizeof(void *));
    if (raw == NULL) return NULL;
    const uintptr_t p = ((uintptr_t)(raw + sizeof(void *)) + 63) & ~(uintptr_t)63;
    ((void **)p)[-1] = raw;
    return (void *)p;
}

void wavepe_aligned_free(void *p) {
    if (p != NULL) free(((void **)p)[-1]);
}
