/* checked.c: status strings and the checked element count. */
#include "checked.h"

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
