/* rope.c: the scalar reference kernels, dispatch and the plan of RoPE (the
 * rules are in rope.h).
 *
 * The scalar kernels are the readable reference: cos and sin from libm on the
 * double angle, rounded once (times scale) into the compute type, and the
 * rotation written as the formula.  bfloat16 / float16 elements are widened
 * to float32, rotated in float32 and rounded once to their type (half.h).  They share the row space and the per-row
 * cos/sin table with the vector kernels (rope_rows.h, rope_simd.h).
 */
#include "rope.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "checked.h"
#include "half.h"
#include "isa_dispatch.h"
#include "rope_rows.h"

int64_t wavepe_rope_rows(const wavepe_rope_args *a) { return a->batch * rope_blocks_per_batch(a); }

/* ---- scalar kernels --------------------------------------------------- */

/* Storage of the types without a conversion. */
#define ROPE_SAME(x) (x)

/* One template per storage type S, computed in T (S itself, or float for the
 * half types; TO_T / TO_S convert one element).  The table holds, for the
 * positions of a row and one chunk of pairs, cos * scale and (+-)sin * scale
 * rounded to T. */
#define ROPE_SCALAR(S, T, SUFFIX, TO_T, TO_S)                                                    \
    static void rotate_row_##SUFFIX(const wavepe_rope_args *a, const S *x, S *y, int64_t i0,     \
                                    int64_t nc, const T *c, const T *s) {                        \
        if (a->layout == WAVEPE_ROPE_HALF) {                                                     \
            const int64_t half = a->head_dim / 2;                                                \
            for (int64_t i = 0; i < nc; ++i) {                                                   \
                const T xa = TO_T(x[i0 + i]), xb = TO_T(x[half + i0 + i]);                       \
                y[i0 + i] = TO_S(xa * c[i] - xb * s[i]);                                         \
                y[half + i0 + i] = TO_S(xb * c[i] + xa * s[i]);                                  \
            }                                                                                    \
        } else {                                                                                 \
            for (int64_t i = 0; i < nc; ++i) {                                                   \
                const int64_t j = 2 * (i0 + i);                                                  \
                const T xa = TO_T(x[j]), xb = TO_T(x[j + 1]);                                    \
                y[j] = TO_S(xa * c[i] - xb * s[i]);                                              \
                y[j + 1] = TO_S(xb * c[i] + xa * s[i]);                                          \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
                                                                                                 \
    static void pass_row_##SUFFIX(const rope_pass *p, T scale, const S *x, S *y) {               \
        if (x == y && scale == (T)1) return; /* in place, nothing to change */                  \
        for (int64_t j = p->lo1; j < p->hi1; ++j) y[j] = TO_S(TO_T(x[j]) * scale);               \
        for (int64_t j = p->lo2; j < p->hi2; ++j) y[j] = TO_S(TO_T(x[j]) * scale);               \
    }                                                                                            \
                                                                                                 \
    void wavepe_rope_##SUFFIX##_scalar(const wavepe_rope_args *a, int64_t row_begin,             \
                                       int64_t row_end) {                                        \
        T cos_t[WAVEPE_ROPE_POS_BLOCK][WAVEPE_ROPE_PAIR_CHUNK];                                  \
        T sin_t[WAVEPE_ROPE_POS_BLOCK][WAVEPE_ROPE_PAIR_CHUNK];                                  \
        const rope_pass pass = rope_passthrough(a);                                              \
        const T scale = (T)a->scale;                                                             \
        const double sin_sign = a->inverse ? -1.0 : 1.0;                                         \
        const wavepe_rope_tensor *tensors[2] = {&a->q, &a->k};                                   \
        for (int64_t row = row_begin; row < row_end; ++row) {                                    \
            const rope_row r = rope_row_at(a, row);                                              \
            /* one sweep per chunk of pairs; the first also copies the rest */                   \
            for (int64_t i0 = 0; i0 == 0 || i0 < a->rotary_pairs; i0 += WAVEPE_ROPE_PAIR_CHUNK) { \
                const int64_t left = a->rotary_pairs - i0;                                       \
                const int64_t nc = left < WAVEPE_ROPE_PAIR_CHUNK ? left : WAVEPE_ROPE_PAIR_CHUNK; \
                for (int64_t p = 0; p < r.n; ++p) {                                              \
                    const double pos = rope_position(a, r.b, r.l0 + p);                          \
                    for (int64_t i = 0; i < nc; ++i) {                                           \
                        const double angle = pos * a->inv_freq[i0 + i];                          \
                        cos_t[p][i] = (T)(cos(angle) * a->scale);                                \
                        sin_t[p][i] = (T)(sin_sign * sin(angle) * a->scale);                     \
                    }                                                                            \
                }                                                                                \
                for (int t = 0; t < 2; ++t) {                                                    \
                    const wavepe_rope_tensor *ten = tensors[t];                                  \
                    for (int64_t h = 0; h < ten->heads; ++h) {                                   \
                        for (int64_t p = 0; p < r.n; ++p) {                                      \
                            const int64_t l = r.l0 + p;                                          \
                            const S *x = (const S *)ten->in + rope_in_at(ten, r.b, h, l);        \
                            S *y = (S *)ten->out + rope_out_at(ten, r.b, h, l);                  \
                            rotate_row_##SUFFIX(a, x, y, i0, nc, cos_t[p], sin_t[p]);            \
                            if (i0 == 0) pass_row_##SUFFIX(&pass, scale, x, y);                  \
                        }                                                                        \
                    }                                                                            \
                }                                                                                \
            }                                                                                    \
        }                                                                                        \
    }

ROPE_SCALAR(float, float, f32, ROPE_SAME, ROPE_SAME)
ROPE_SCALAR(double, double, f64, ROPE_SAME, ROPE_SAME)
ROPE_SCALAR(uint16_t, float, bf16, wp_bf16_to_f32, wp_f32_to_bf16)
ROPE_SCALAR(uint16_t, float, f16, wp_f16_to_f32, wp_f32_to_f16)

/* ---- dispatch --------------------------------------------------------- */

void wavepe_rope_f32(wavepe_isa isa, const wavepe_rope_args *a, int64_t row_begin, int64_t row_end) {
    WAVEPE_ISA_CALL(isa, wavepe_rope_f32, (a, row_begin, row_end));
}

void wavepe_rope_f64(wavepe_isa isa, const wavepe_rope_args *a, int64_t row_begin, int64_t row_end) {
    WAVEPE_ISA_CALL(isa, wavepe_rope_f64, (a, row_begin, row_end));
}

void wavepe_rope_bf16(wavepe_isa isa, const wavepe_rope_args *a, int64_t row_begin, int64_t row_end) {
    WAVEPE_ISA_CALL(isa, wavepe_rope_bf16, (a, row_begin, row_end));
}

void wavepe_rope_f16(wavepe_isa isa, const wavepe_rope_args *a, int64_t row_begin, int64_t row_end) {
    WAVEPE_ISA_CALL(isa, wavepe_rope_f16, (a, row_begin, row_end));
}

/* ---- plan ------------------------------------------------------------------- */

struct wavepe_rope_plan {
    wavepe_rope_args a;
    wavepe_isa isa;
};

int wavepe_rope_plan_create(wavepe_isa isa, const wavepe_rope_args *a, wavepe_rope_plan **out, wavepe_error *err) {
    *out = NULL;
    const int status = wavepe_rope_validate(a, err);
    if (status != WAVEPE_OK) return status;
    if (a->dtype != WAVEPE_F32 && a->dtype != WAVEPE_F64 && a->dtype != WAVEPE_BF16 && a->dtype != WAVEPE_F16)
        return wavepe_fail(err, WAVEPE_E_INVALID, "the CPU kernels take float32, float64, bfloat16 or float16, got %s",
                           wavepe_dtype_name(a->dtype));
    const int rotates = wavepe_rope_rows(a) > 0 && a->head_dim > 0 && a->q.heads + a->k.heads > 0;
    if (rotates) /* only then are the frequencies read (rope.h: the rules do not read data) */
        for (int64_t i = 0; i < a->rotary_pairs; ++i)
            if (!isfinite(a->inv_freq[i]))
                return wavepe_fail(err, WAVEPE_E_INVALID, "inv_freq must be finite, got inv_freq[%lld] = %g",
                                   (long long)i, a->inv_freq[i]);
    wavepe_rope_plan *p = malloc(sizeof *p);
    if (p == NULL) return wavepe_fail(err, WAVEPE_E_NOMEM, "out of memory for a rope plan");
    p->a = *a;
    p->isa = isa;
    *out = p;
    return WAVEPE_OK;
}

int64_t wavepe_rope_units(const wavepe_rope_plan *p, int phase) {
    if (phase != 0 || p->a.head_dim == 0 || p->a.q.heads + p->a.k.heads == 0) return 0;
    return wavepe_rope_rows(&p->a);
}

int64_t wavepe_rope_grain(const wavepe_rope_plan *p, int phase) {
    (void)phase;
    /* ~64k output elements per task: tiny problems on one thread */
    const int64_t row_elems = WAVEPE_ROPE_POS_BLOCK * (p->a.q.heads + p->a.k.heads) * p->a.head_dim;
    return row_elems >= 65536 ? 1 : 65536 / (row_elems > 0 ? row_elems : 1);
}

int wavepe_rope_run(wavepe_rope_plan *p, int phase, int64_t begin, int64_t end) {
    if (phase != 0 || begin >= end) return WAVEPE_OK;
    switch (p->a.dtype) {
    case WAVEPE_F64: wavepe_rope_f64(p->isa, &p->a, begin, end); break;
    case WAVEPE_BF16: wavepe_rope_bf16(p->isa, &p->a, begin, end); break;
    case WAVEPE_F16: wavepe_rope_f16(p->isa, &p->a, begin, end); break;
    default: wavepe_rope_f32(p->isa, &p->a, begin, end); break;
    }
    return WAVEPE_OK;
}

void wavepe_rope_plan_free(wavepe_rope_plan *p) { free(p); }
