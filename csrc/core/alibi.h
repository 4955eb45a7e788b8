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
 */
#ifndef WAVEPE_ALIBI_H
#define WAVEPE_ALIBI_H

#include <stdint.h>

#include "isa.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct wavepe_alibi_args {
    int64_t heads, m, n;     /* bias is (heads, m, n) */
    int64_t q_offset;        /* position of query row 0 */
    int causal;
    const void *slopes;      /* (heads,) of the output dtype */
    void *out;               /* (heads, m, n); rows of n contiguous */
    int64_t out_stride_h;    /* elements */
    int64_t out_stride_m;    /* elements */
} wavepe_alibi_args;

/* Sizes and pointers sane, products within range: WAVEPE_OK or an error. */
int wavepe_alibi_validate(const wavepe_alibi_args *a);

/* Fill rows [row_begin, row_end) of the flattened (heads * m) row space. */
void wavepe_alibi_f32(wavepe_isa isa, const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end);
void wavepe_alibi_f64(wavepe_isa isa, const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end);
void wavepe_alibi_f32_scalar(const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end);
void wavepe_alibi_f64_scalar(const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end);
void wavepe_alibi_f32_avx2(const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end);
void wavepe_alibi_f64_avx2(const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end);
void wavepe_alibi_f32_avx512(const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end);
void wavepe_alibi_f64_avx512(const wavepe_alibi_args *a, int64_t row_begin, int64_t row_end);

/* pe (len, d) row-major of float32 / float64; base > 0, d >= 1. */
int wavepe_sinusoidal_f32(int64_t len, int64_t d, int64_t offset, double base, float *pe);
int wavepe_sinusoidal_f64(int64_t len, int64_t d, int64_t offset, double base, double *pe);

#ifdef __cplusplus
}
#endif
#endif
