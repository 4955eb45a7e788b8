/* alibi.c: scalar ALiBi rows, the sinusoidal table, dispatch and the plan
 * (the rules are in alibi.h). */
#include "alibi.h"

#include <math.h>
#include <stdlib.h>

#include "checked.h"
#include "half.h"
#include "isa_dispatch.h"

/* Storage S, computed in T (S itself; float for bfloat16 / float16, whose
 * slopes are widened and each element rounded once, half.h). */
#define ALIBI_SAME(x) (x)
#define ALIBI_SCALAR(S, T, NAME, TO_T, TO_S)                                                     \
    void NAME(const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end) {                  \
        const S *slopes = (const S *)a->slopes;                                                  \
        for (int64_t row = row_begin; row < row_end; ++row) {                                    \
            const int64_t h = row / a->m, i = row % a->m;                                        \
            S *out = (S *)a->out + h * a->out_stride_h + i * a->out_stride_m;                    \
            const int64_t pos = a->q_offset + i;                                                 \
            const T neg_slope = -TO_T(slopes[h]);                                                \
            for (int64_t j = 0; j < a->n; ++j) {                                                 \
                const int64_t dist = pos - j;                                                    \
                if (a->causal)                                                                   \
                    out[j] = TO_S(dist >= 0 ? neg_slope * (T)dist : (T)0);                       \
                else                                                                             \
                    out[j] = TO_S(neg_slope * (T)(dist >= 0 ? dist : -dist));                    \
            }                                                                                    \
        }                                                                                        \
    }

ALIBI_SCALAR(float, float, wavepe_alibi_f32_scalar, ALIBI_SAME, ALIBI_SAME)
ALIBI_SCALAR(double, double, wavepe_alibi_f64_scalar, ALIBI_SAME, ALIBI_SAME)
ALIBI_SCALAR(uint16_t, float, wavepe_alibi_bf16_scalar, wp_bf16_to_f32, wp_f32_to_bf16)
ALIBI_SCALAR(uint16_t, float, wavepe_alibi_f16_scalar, wp_f16_to_f32, wp_f32_to_f16)

void wavepe_alibi_f32(wavepe_isa isa, const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end) {
    WAVEPE_ISA_CALL(isa, wavepe_alibi_f32, (a, row_begin, row_end));
}

void wavepe_alibi_f64(wavepe_isa isa, const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end) {
    WAVEPE_ISA_CALL(isa, wavepe_alibi_f64, (a, row_begin, row_end));
}

void wavepe_alibi_bf16(wavepe_isa isa, const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end) {
    WAVEPE_ISA_CALL(isa, wavepe_alibi_bf16, (a, row_begin, row_end));
}

void wavepe_alibi_f16(wavepe_isa isa, const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end) {
    WAVEPE_ISA_CALL(isa, wavepe_alibi_f16, (a, row_begin, row_end));
}

/* ---- sinusoidal ------------------------------------------------------- */

int wavepe_sinusoidal_validate(int64_t len, int64_t d, int64_t offset, double base, int64_t elem_size,
                               wavepe_error *err) {
    const int64_t dims[2] = {len, d};
    int status = wavepe_check_numel(err, "the table (length, dim)", 2, dims, elem_size);
    if (status != WAVEPE_OK) return status;
    if (!(base > 0.0) || isinf(base)) return wavepe_fail(err, WAVEPE_E_INVALID, "base must be finite and > 0, got %g", base);
    if (d < 1) return wavepe_fail(err, WAVEPE_E_INVALID, "dim must be >= 1, got %lld", (long long)d);
    int64_t last;
    if ((status = wavepe_check_position(err, "offset", offset))) return status;
    if (wavepe_add_overflow(offset, len, &last) || (status = wavepe_check_position(err, "offset + length", last)))
        return wavepe_fail(err, WAVEPE_E_OVERFLOW,
                           "offset=%lld + length=%lld is beyond the supported range of positions (|offset + length| <= 2^60)",
                           (long long)offset, (long long)len);
    return WAVEPE_OK;
}

#define SINUSOIDAL(T, NAME)                                                                      \
    int NAME(int64_t len, int64_t d, int64_t offset, double base, T *pe, wavepe_error *err) {    \
        const int status = wavepe_sinusoidal_validate(len, d, offset, base, (int64_t)sizeof(T), err); \
        if (status != WAVEPE_OK) return status;                                                  \
        if (len > 0 && pe == NULL) return wavepe_fail(err, WAVEPE_E_NULL, "the output is NULL"); \
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

/* ---- plan ------------------------------------------------------------------- */

struct wavepe_alibi_plan {
    wavepe_alibi_args a;
    wavepe_isa isa;
};

int wavepe_alibi_plan_create(wavepe_isa isa, const wavepe_alibi_args *a, wavepe_alibi_plan **out, wavepe_error *err) {
    *out = NULL;
    const int status = wavepe_alibi_validate(a, err);
    if (status != WAVEPE_OK) return status;
    if (a->dtype != WAVEPE_F32 && a->dtype != WAVEPE_F64 && a->dtype != WAVEPE_BF16 && a->dtype != WAVEPE_F16)
        return wavepe_fail(err, WAVEPE_E_INVALID, "the CPU kernels take float32, float64, bfloat16 or float16, got %s",
                           wavepe_dtype_name(a->dtype));
    wavepe_alibi_plan *p = malloc(sizeof *p);
    if (p == NULL) return wavepe_fail(err, WAVEPE_E_NOMEM, "out of memory for an alibi plan");
    p->a = *a;
    p->isa = isa;
    *out = p;
    return WAVEPE_OK;
}

int64_t wavepe_alibi_units(const wavepe_alibi_plan *p, int phase) {
    return phase == 0 && p->a.n > 0 ? p->a.heads * p->a.m : 0;
}

int64_t wavepe_alibi_grain(const wavepe_alibi_plan *p, int phase) {
    (void)phase;
    return p->a.n >= 65536 ? 1 : 65536 / (p->a.n > 0 ? p->a.n : 1);
}

int wavepe_alibi_run(wavepe_alibi_plan *p, int phase, int64_t begin, int64_t end) {
    if (phase != 0 || begin >= end) return WAVEPE_OK;
    switch (p->a.dtype) {
    case WAVEPE_F64: wavepe_alibi_f64(p->isa, &p->a, begin, end); break;
    case WAVEPE_BF16: wavepe_alibi_bf16(p->isa, &p->a, begin, end); break;
    case WAVEPE_F16: wavepe_alibi_f16(p->isa, &p->a, begin, end); break;
    default: wavepe_alibi_f32(p->isa, &p->a, begin, end); break;
    }
    return WAVEPE_OK;
}

void wavepe_alibi_plan_free(wavepe_alibi_plan *p) { free(p); }
