/* alibi.c: scalar ALiBi rows, the sinusoidal table, and dispatch. */
#include "alibi.h"

#include <math.h>

#include "checked.h"
#include "isa_dispatch.h"

int wavepe_alibi_validate(const wavepe_alibi_args *a) {
    const int64_t dims[3] = {a->heads, a->m, a->n};
    int status = wavepe_checked_numel(3, dims, 8, NULL);
    if (status != WAVEPE_OK) return status;
    int64_t last_pos;
    if (wavepe_add_overflow(a->q_offset, a->m, &last_pos)) return WAVEPE_E_OVERFLOW;
    if (a->heads * a->m * a->n > 0 && (a->slopes == NULL || a->out == NULL)) return WAVEPE_E_NULL;
    return WAVEPE_OK;
}

#define ALIBI_SCALAR(T, NAME)                                                                    \
    void NAME(const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end) {                  \
        const T *slopes = (const T *)a->slopes;                                                  \
        for (int64_t row = row_begin; row < row_end; ++row) {                                    \
            const int64_t h = row / a->m, i = row % a->m;                                        \
            T *out = (T *)a->out + h * a->out_stride_h + i * a->out_stride_m;                    \
            const int64_t pos = a->q_offset + i;                                                 \
            const T neg_slope = -slopes[h];                                                      \
            for (int64_t j = 0; j < a->n; ++j) {                                                 \
                const int64_t dist = pos - j;                                                    \
                if (a->causal)                                                                   \
                    out[j] = dist >= 0 ? neg_slope * (T)dist : (T)0;                             \
                else                                                                             \
                    out[j] = neg_slope * (T)(dist >= 0 ? dist : -dist);                          \
            }                                                                                    \
        }                                                                                        \
    }

ALIBI_SCALAR(float, wavepe_alibi_f32_scalar)
ALIBI_SCALAR(double, wavepe_alibi_f64_scalar)

void wavepe_alibi_f32(wavepe_isa isa, const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end) {
    WAVEPE_ISA_CALL(isa, wavepe_alibi_f32, (a, row_begin, row_end));
}

void wavepe_alibi_f64(wavepe_isa isa, const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end) {
    WAVEPE_ISA_CALL(isa, wavepe_alibi_f64, (a, row_begin, row_end));
}

/* ---- sinusoidal ------------------------------------------------------- */

static int sinusoidal_check(int64_t len, int64_t d, int64_t offset, double base, const void *pe) {
    const int64_t dims[2] = {len, d};
    const int status = wavepe_checked_numel(2, dims, 8, NULL);
    if (status != WAVEPE_OK) return status;
    if (!(base > 0.0) || isinf(base) || d < 1) return WAVEPE_E_INVALID;
    int64_t last;
    if (wavepe_add_overflow(offset, len, &last)) return WAVEPE_E_OVERFLOW;
    if (len > 0 && pe == NULL) return WAVEPE_E_NULL;
    return WAVEPE_OK;
}

#define SINUSOIDAL(T, NAME)                                                                      \
    int NAME(int64_t len, int64_t d, int64_t offset, double base, T *pe) {                       \
        const int status = sinusoidal_check(len, d, offset, base, pe);                           \
        if (status != WAVEPE_OK) return status;                                                  \
        const wavepe_fpenv env = wavepe_fpenv_enter();                                           \
        for (int64_t p = 0; p < len; ++p) {                                                      \
            const double pos = (double)(offset + p);                                             \
            for (int64_t c = 0; c < d; ++c) {                                                    \
                const int64_t i = c / 2;                                                         \
                const double angle = pos * pow(base, -2.0 * (double)i / (double)d);             \
                pe[p * d + c] = (T)((c % 2 == 0) ? sin(angle) : cos(angle));                     \
            }                                                                                    \
        }                                                                                        \
        wavepe_fpenv_leave(env);                                                                 \
        return WAVEPE_OK;                                                                        \
    }

SINUSOIDAL(float, wavepe_sinusoidal_f32)
SINUSOIDAL(double, wavepe_sinusoidal_f64)
