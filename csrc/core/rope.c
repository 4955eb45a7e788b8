/* rope.c: validation, the scalar reference kernels and dispatch of RoPE.
 *
 * The scalar kernels are the readable reference: cos and sin from libm on the
 * double angle, rounded once (times scale) into the output type, and the
 * rotation written as the formula.  They share the row space and the per-row
 * cos/sin table with the vector kernels (rope_rows.h, rope_simd.h).
 */
#include "rope.h"

#include <math.h>
#include <stddef.h>

#include "checked.h"
#include "isa_dispatch.h"
#include "rope_rows.h"

/* ---- validation ------------------------------------------------------- */

/* |stride| * (size - 1) summed over dims, plus `tail`, within int64 and,
 * times elem_size, within ptrdiff_t: every element offset is addressable. */
static int extent_ok(int n, const int64_t *sizes, const int64_t *strides, int64_t tail, int64_t elem_size) {
    int64_t total = tail;
    for (int i = 0; i < n; ++i) {
        if (sizes[i] == 0) return WAVEPE_OK; /* no element is ever addressed */
        if (strides[i] == INT64_MIN) return WAVEPE_E_OVERFLOW;
        const int64_t s = strides[i] < 0 ? -strides[i] : strides[i];
        int64_t span;
        if (wavepe_mul_overflow(s, sizes[i] - 1, &span) || wavepe_add_overflow(total, span, &total))
            return WAVEPE_E_OVERFLOW;
    }
    int64_t bytes;
    if (wavepe_mul_overflow(total, elem_size, &bytes) || (uint64_t)bytes > (uint64_t)PTRDIFF_MAX)
        return WAVEPE_E_OVERFLOW;
    return WAVEPE_OK;
}

static int tensor_ok(const wavepe_rope_args *a, const wavepe_rope_tensor *t) {
    if (t->heads < 0) return WAVEPE_E_NEGATIVE_SIZE;
    const int64_t dims[4] = {a->batch, t->heads, a->len, a->head_dim};
    int64_t numel;
    int status = wavepe_checked_numel(4, dims, 8, &numel);
    if (status != WAVEPE_OK || numel == 0) return status;
    if (t->in == NULL || t->out == NULL) return WAVEPE_E_NULL;
    const int64_t sizes[3] = {a->batch, t->heads, a->len};
    const int64_t in_strides[3] = {t->in_stride_b, t->in_stride_h, t->in_stride_l};
    const int64_t out_strides[3] = {t->out_stride_b, t->out_stride_h, t->out_stride_l};
    status = extent_ok(3, sizes, in_strides, a->head_dim - 1, 8);
    if (status != WAVEPE_OK) return status;
    return extent_ok(3, sizes, out_strides, a->head_dim - 1, 8);
}

int wavepe_rope_validate(const wavepe_rope_args *a) {
    if (a->batch < 0 || a->len < 0 || a->head_dim < 0 || a->q.heads < 0 || a->k.heads < 0)
        return WAVEPE_E_NEGATIVE_SIZE;
    if (a->head_dim % 2 != 0) return WAVEPE_E_INVALID;
    if (a->rotary_pairs < 0 || a->rotary_pairs > a->head_dim / 2) return WAVEPE_E_INVALID;
    if (a->layout != WAVEPE_ROPE_HALF && a->layout != WAVEPE_ROPE_INTERLEAVED) return WAVEPE_E_INVALID;
    if (!isfinite(a->scale)) return WAVEPE_E_INVALID;
    int status = tensor_ok(a, &a->q);
    if (status != WAVEPE_OK) return status;
    status = tensor_ok(a, &a->k);
    if (status != WAVEPE_OK) return status;
    if (a->rotary_pairs > 0) {
        if (a->inv_freq == NULL) return WAVEPE_E_NULL;
        for (int64_t i = 0; i < a->rotary_pairs; ++i)
            if (!isfinite(a->inv_freq[i])) return WAVEPE_E_INVALID;
    }
    if (a->positions == NULL) {
        int64_t last;
        if (wavepe_add_overflow(a->offset, a->len, &last)) return WAVEPE_E_OVERFLOW;
    } else if (a->batch > 0 && a->len > 0) {
        const int64_t sizes[2] = {a->batch, a->len};
        const int64_t strides[2] = {a->pos_stride_b, a->pos_stride_l};
        status = extent_ok(2, sizes, strides, 0, (int64_t)sizeof(int64_t));
        if (status != WAVEPE_OK) return status;
    }
    return WAVEPE_OK;
}

int64_t wavepe_rope_rows(const wavepe_rope_args *a) { return a->batch * rope_blocks_per_batch(a); }

/* ---- scalar kernels --------------------------------------------------- */

/* One template per output type T.  The table holds, for the positions of a
 * row and one chunk of pairs, cos * scale and (+-)sin * scale rounded to T. */
#define ROPE_SCALAR(T, SUFFIX)                                                                   \
    static void rotate_row_##SUFFIX(const wavepe_rope_args *a, const T *x, T *y, int64_t i0,     \
                                    int64_t nc, const T *c, const T *s) {                        \
        if (a->layout == WAVEPE_ROPE_HALF) {                                                     \
            const int64_t half = a->head_dim / 2;                                                \
            for (int64_t i = 0; i < nc; ++i) {                                                   \
                const T xa = x[i0 + i], xb = x[half + i0 + i];                                   \
                y[i0 + i] = xa * c[i] - xb * s[i];                                               \
                y[half + i0 + i] = xb * c[i] + xa * s[i];                                        \
            }                                                                                    \
        } else {                                                                                 \
            for (int64_t i = 0; i < nc; ++i) {                                                   \
                const int64_t j = 2 * (i0 + i);                                                  \
                const T xa = x[j], xb = x[j + 1];                                                \
                y[j] = xa * c[i] - xb * s[i];                                                    \
                y[j + 1] = xb * c[i] + xa * s[i];                                                \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
                                                                                                 \
    static void pass_row_##SUFFIX(const rope_pass *p, T scale, const T *x, T *y) {               \
        if (x == y && scale == (T)1) return; /* in place, nothing to change */                  \
        for (int64_t j = p->lo1; j < p->hi1; ++j) y[j] = x[j] * scale;                           \
        for (int64_t j = p->lo2; j < p->hi2; ++j) y[j] = x[j] * scale;                           \
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
                            const T *x = (const T *)ten->in + rope_in_at(ten, r.b, h, l);        \
                            T *y = (T *)ten->out + rope_out_at(ten, r.b, h, l);                  \
                            rotate_row_##SUFFIX(a, x, y, i0, nc, cos_t[p], sin_t[p]);            \
                            if (i0 == 0) pass_row_##SUFFIX(&pass, scale, x, y);                  \
                        }                                                                        \
                    }                                                                            \
                }                                                                                \
            }                                                                                    \
        }                                                                                        \
    }

ROPE_SCALAR(float, f32)
ROPE_SCALAR(double, f64)

/* ---- dispatch --------------------------------------------------------- */

void wavepe_rope_f32(wavepe_isa isa, const wavepe_rope_args *a, int64_t row_begin, int64_t row_end) {
    WAVEPE_ISA_CALL(isa, wavepe_rope_f32, (a, row_begin, row_end));
}

void wavepe_rope_f64(wavepe_isa isa, const wavepe_rope_args *a, int64_t row_begin, int64_t row_end) {
    WAVEPE_ISA_CALL(isa, wavepe_rope_f64, (a, row_begin, row_end));
}
