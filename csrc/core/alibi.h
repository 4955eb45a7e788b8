/* alibi.h: ALiBi bias (Press et al., 2022) and the sinusoidal absolute table.
 *
 * ALiBi:  bias[h, i, j] = -slope[h] * (pos_q(i) - j),  pos_q(i) = q_offset + i,
 * for key positions j = 0 .. n-1.  causal: entries with j > pos_q(i) are 0
 * (never computed: the attention masks them anyway).  Not causal: the
 * symmetric -slope * |pos_q(i) - j|.
 *
 * Sinusoidal (Vaswani et al., 2017):  pe[p, 2i] = sin(pos * base^(-2i/d)),
 * pe[p, 2i + 1] = cos(same), pos = offset + p.  Built once per model, so it
 * has only a scalar path (computed in double, rounded once).
 *
 * This header is the ALiBi bias's contract for every device: wavepe_alibi_args
 * and wavepe_alibi_validate, used by the CPU plan and the CUDA launcher.
 */
#ifndef WAVEPE_ALIBI_H
#define WAVEPE_ALIBI_H

#include <stdint.h>
#include <string.h>

#include "checked.h"
#include "dtype.h"
#include "isa.h"
#include "settings.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The settings (settings.h), in the one argument order of every layer:
 *   q_offset  position of query row 0 (keys sit at 0 .. n-1)
 *   causal    0 above the diagonal, -slope * (pos_q - j) on and below it; else -slope * |pos_q - j| */
#define WAVEPE_ALIBI_SETTINGS(X) \
    X(INT, q_offset, 0)          \
    X(BOOL, causal, 0)

typedef struct wavepe_alibi_args {
    int dtype;               /* wavepe_dtype of slopes and out (F32 / F64 / BF16 / F16) */
    int64_t heads, m, n;     /* bias is (heads, m, n) */
    WAVEPE_ALIBI_SETTINGS(WAVEPE_SETTING_FIELD)
    const void *slopes;      /* (heads,) of the output dtype */
    void *out;               /* (heads, m, n); rows of n contiguous */
    int64_t out_stride_h;    /* elements */
    int64_t out_stride_m;    /* elements */
} wavepe_alibi_args;

/* Every field 0 / NULL but the settings, which take their defaults. */
static inline wavepe_alibi_args wavepe_alibi_args_defaults(void) {
    wavepe_alibi_args a;
    memset(&a, 0, sizeof a);
    WAVEPE_ALIBI_SETTINGS(WAVEPE_SETTING_DEFAULT)
    return a;
}

/* Sizes, positions and pointers sane: WAVEPE_OK, or a status with *err (may
 * be NULL) naming the argument and its value.  Positions pos_q - j must stay
 * within +-2^60 (q_offset, q_len, k_len). */
static inline int wavepe_alibi_validate(const wavepe_alibi_args *a, wavepe_error *err) {
    const int64_t elem = wavepe_dtype_size(a->dtype);
    if (elem == 0) return wavepe_fail(err, WAVEPE_E_INVALID, "dtype=%d is not an element type", a->dtype);
    const int64_t sizes[3] = {a->heads, a->m, a->n};
    static const char *const names[3] = {"heads", "q_len", "k_len"};
    for (int i = 0; i < 3; ++i)
        if (sizes[i] < 0)
            return wavepe_fail(err, WAVEPE_E_NEGATIVE_SIZE, "%s must be >= 0, got %lld", names[i], (long long)sizes[i]);
    int status;
    if ((status = wavepe_check_position(err, "q_offset", a->q_offset)) ||
        (status = wavepe_check_position(err, "q_len", a->m)) || (status = wavepe_check_position(err, "k_len", a->n)))
        return status;
    /* at most 2^60 entries whatever the type: a larger bias is a mistake, said here rather than by
     * an allocator (its count fits in int64: each size is within 2^60 and the view check runs next) */
    int64_t count = 0;
    if (wavepe_checked_numel(3, sizes, 8, &count) != WAVEPE_OK)
        return wavepe_fail(err, WAVEPE_E_OVERFLOW,
                           "the bias (heads, q_len, k_len) = (%lld, %lld, %lld) overflows: more than 2^60 elements",
                           (long long)a->heads, (long long)a->m, (long long)a->n);
    const int64_t st[3] = {a->out_stride_h, a->out_stride_m, 1};
    if ((status = wavepe_check_view(err, "the bias (heads, q_len, k_len)", 3, sizes, st, elem))) return status;
    if (a->heads > 0 && a->m > 0 && a->n > 0 && (a->slopes == NULL || a->out == NULL))
        return wavepe_fail(err, WAVEPE_E_NULL, "slopes and out must not be NULL");
    return WAVEPE_OK;
}

/* ---- plans: what callers use (CPU) ------------------------------------------------
 * One phase (0) over the (heads * m) rows; same shape as every family's plan. */
typedef struct wavepe_alibi_plan wavepe_alibi_plan;
int wavepe_alibi_plan_create(wavepe_isa isa, const wavepe_alibi_args *a, wavepe_alibi_plan **plan, wavepe_error *err);
int64_t wavepe_alibi_units(const wavepe_alibi_plan *plan, int phase);
int64_t wavepe_alibi_grain(const wavepe_alibi_plan *plan, int phase);
int wavepe_alibi_run(wavepe_alibi_plan *plan, int phase, int64_t begin, int64_t end);
void wavepe_alibi_plan_free(wavepe_alibi_plan *plan);

/* Fill rows [row_begin, row_end) of the flattened (heads * m) row space.  The
 * bf16 / f16 variants read and write the 16-bit types (uint16_t storage,
 * float32 arithmetic, each element rounded once). */
void wavepe_alibi_f32(wavepe_isa isa, const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end);
void wavepe_alibi_f64(wavepe_isa isa, const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end);
void wavepe_alibi_bf16(wavepe_isa isa, const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end);
void wavepe_alibi_f16(wavepe_isa isa, const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end);
/* The variants behind the dispatch, one set per kernel_isa of isa_table.h
 * (avx512bf16 and amx run avx512's; the vector ones exist in builds for
 * their architecture only). */
#define WAVEPE_ALIBI_KERNELS_(ID, name, arch, l32, l64, bf16, blocks, kernel_isa, ...) \
    void wavepe_alibi_f32_##kernel_isa(const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end); \
    void wavepe_alibi_f64_##kernel_isa(const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end); \
    void wavepe_alibi_bf16_##kernel_isa(const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end); \
    void wavepe_alibi_f16_##kernel_isa(const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end);
WAVEPE_ISA_TABLE(WAVEPE_ALIBI_KERNELS_, _)
#undef WAVEPE_ALIBI_KERNELS_

/* pe (len, d) row-major of float32 / float64; base > 0, d >= 1; positions
 * offset .. offset + len - 1 within +-2^60.  *err (may be NULL) says why a
 * call was rejected. */
/* The rules of a table of elem_size-byte elements (WAVEPE_OK or why not). */
int wavepe_sinusoidal_validate(int64_t len, int64_t d, int64_t offset, double base, int64_t elem_size,
                               wavepe_error *err);
int wavepe_sinusoidal_f32(int64_t len, int64_t d, int64_t offset, double base, float *pe, wavepe_error *err);
int wavepe_sinusoidal_f64(int64_t len, int64_t d, int64_t offset, double base, double *pe, wavepe_error *err);

#ifdef __cplusplus
}
#endif
#endif
