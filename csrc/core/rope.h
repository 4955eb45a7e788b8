/* rope.h: rotary position embedding (RoPE) of q and k in one call.
 *
 * Pair i (0 <= i < d/2) of a head vector x is (x[i], x[i + d/2]) in layout
 * HALF (Hugging Face's rotate_half) and (x[2i], x[2i + 1]) in INTERLEAVED
 * (RoFormer).  With angle = pos * inv_freq[i], formed in double:
 *
 *   forward  (a, b) -> (a cos - b sin,  b cos + a sin) * scale
 *   inverse  (a, b) -> (a cos + b sin,  b cos - a sin) * scale   (rotation by -angle)
 *
 * Only pairs i < rotary_pairs rotate (p-RoPE keeps the highest frequencies,
 * the smallest i); the other dimensions are copied, times scale.  `inverse`
 * is the adjoint of the forward map, i.e. its backward (and its inverse when
 * scale = 1).  `scale` is YaRN's attention factor (1 otherwise).
 *
 * q is (B, Hq, L, d) and k is (B, Hk, L, d) (Hk = 0: no k), each given by
 * element strides for B, H and L; the d elements of a head vector are
 * contiguous.  Outputs have their own strides.  An output may be its input
 * (same pointer, same strides: in place); any other overlap is undefined.
 *
 * Positions: pos(b, l) = positions[b * pos_stride_b + l * pos_stride_l] when
 * positions is not NULL (pos_stride_b = 0 broadcasts one (L,) row over the
 * batch), else offset + l.
 *
 * This header is the family's contract for every device: the parameters
 * (wavepe_rope_args) and their rules (wavepe_rope_validate), used by the CPU
 * plan and the CUDA launcher alike.  Element type: `dtype`, F32 / F64 / BF16 /
 * F16 on every device (half types are read and written as they are and
 * computed in float32, each output rounded once); inv_freq and the angles are
 * float64 everywhere.
 *
 * Work split.  cos and sin depend only on (position, pair), so the kernels
 * compute them once per position and reuse them for every head of q and k:
 * the transcendental work is O(B L rotary_pairs), the rotation O(B (Hq+Hk) L d).
 * The row space for threading is (batch, block of WAVEPE_ROPE_POS_BLOCK
 * positions): row = b * ceil(L / WAVEPE_ROPE_POS_BLOCK) + block.  A row
 * builds its cos/sin table on the stack (no allocation) and sweeps every head
 * of q and k over those positions, which streams contiguous memory when L is
 * the inner dimension of a head.
 */
#ifndef WAVEPE_ROPE_H
#define WAVEPE_ROPE_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "checked.h"
#include "dtype.h"
#include "isa.h"
#include "settings.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum wavepe_rope_layout {
    WAVEPE_ROPE_HALF = 0,       /* pairs (i, i + d/2) */
    WAVEPE_ROPE_INTERLEAVED = 1 /* pairs (2i, 2i + 1) */
} wavepe_rope_layout;

/* Positions per row of the row space (the cos/sin table covers one block). */
#define WAVEPE_ROPE_POS_BLOCK 32
/* Pairs per cos/sin table; longer heads are swept in chunks of this many. */
#define WAVEPE_ROPE_PAIR_CHUNK 64

/* One (B, H, L, d) input and its output; strides in elements. */
typedef struct wavepe_rope_tensor {
    int64_t heads;
    const void *in;
    int64_t in_stride_b, in_stride_h, in_stride_l;
    void *out;
    int64_t out_stride_b, out_stride_h, out_stride_l;
} wavepe_rope_tensor;

/* The settings (settings.h), in the one argument order of every layer:
 *   offset        position of row 0 when no positions tensor is given (positions: offset + l)
 *   rotary_pairs  pairs rotated, 0 .. d/2 (the first ones of inv_freq are read)
 *   layout        wavepe_rope_layout (the kind LAYOUT: the schema spells it "half" / "interleaved")
 *   scale         multiplies every output element; finite
 *   inverse       nonzero: rotate by -angle */
typedef int wavepe_setting_LAYOUT;
#define WAVEPE_ROPE_SETTINGS(X) \
    X(INT, offset, 0)           \
    X(INT, rotary_pairs, 0)     \
    X(LAYOUT, layout, 0)        \
    X(REAL, scale, 1.0)         \
    X(BOOL, inverse, 0)

typedef struct wavepe_rope_args {
    int dtype;                    /* wavepe_dtype of the tensors (F32 / F64 / BF16 / F16) */
    int64_t batch, len, head_dim; /* B, L, d (d even) */
    wavepe_rope_tensor q, k;      /* k.heads = 0: no k (its pointers are then ignored) */
    const double *inv_freq;       /* (d/2,) angular frequencies */
    const int64_t *positions;     /* NULL: offset + l */
    int64_t pos_stride_b, pos_stride_l;
    WAVEPE_ROPE_SETTINGS(WAVEPE_SETTING_FIELD)
} wavepe_rope_args;

/* Every field 0 / NULL but the settings, which take their defaults. */
static inline wavepe_rope_args wavepe_rope_args_defaults(void) {
    wavepe_rope_args a;
    memset(&a, 0, sizeof a);
    WAVEPE_ROPE_SETTINGS(WAVEPE_SETTING_DEFAULT)
    return a;
}

/* ---- the rules ------------------------------------------------------------------
 * Sizes, strides, pointers and values sane: WAVEPE_OK, or a status with *err
 * (may be NULL) naming the argument and its value: negative sizes; odd d,
 * rotary_pairs outside [0, d/2], unknown layout, non-finite scale
 * (WAVEPE_E_INVALID); an element offset or a position that overflows int64 /
 * ptrdiff_t (WAVEPE_E_OVERFLOW); NULL data where elements exist
 * (WAVEPE_E_NULL).  Reads no data (the pointers may be a device's): the CPU
 * plan also checks that inv_freq[:rotary_pairs] is finite. */
static inline int wavepe_rope_tensor_validate_(const wavepe_rope_args *a, const wavepe_rope_tensor *t, const char *name,
                                               int64_t elem, wavepe_error *err) {
    if (t->heads < 0) return wavepe_fail(err, WAVEPE_E_NEGATIVE_SIZE, "%s heads must be >= 0, got %lld", name, (long long)t->heads);
    const int64_t dims[4] = {a->batch, t->heads, a->len, a->head_dim};
    const int64_t in_st[4] = {t->in_stride_b, t->in_stride_h, t->in_stride_l, 1};
    const int64_t out_st[4] = {t->out_stride_b, t->out_stride_h, t->out_stride_l, 1};
    int status = wavepe_check_view(err, name, 4, dims, in_st, elem);
    if (status == WAVEPE_OK) status = wavepe_check_view(err, name, 4, dims, out_st, elem);
    if (status != WAVEPE_OK) return status;
    const int any = a->batch > 0 && t->heads > 0 && a->len > 0 && a->head_dim > 0;
    if (any && (t->in == NULL || t->out == NULL)) return wavepe_fail(err, WAVEPE_E_NULL, "%s data is NULL", name);
    return WAVEPE_OK;
}

static inline int wavepe_rope_validate(const wavepe_rope_args *a, wavepe_error *err) {
    const int64_t elem = wavepe_dtype_size(a->dtype);
    if (elem == 0) return wavepe_fail(err, WAVEPE_E_INVALID, "dtype=%d is not an element type", a->dtype);
    const int64_t sizes[3] = {a->batch, a->len, a->head_dim};
    static const char *const names[3] = {"batch", "length", "head_dim"};
    for (int i = 0; i < 3; ++i)
        if (sizes[i] < 0)
            return wavepe_fail(err, WAVEPE_E_NEGATIVE_SIZE, "%s must be >= 0, got %lld", names[i], (long long)sizes[i]);
    if (a->head_dim % 2 != 0)
        return wavepe_fail(err, WAVEPE_E_INVALID, "head_dim must be even for RoPE, got %lld", (long long)a->head_dim);
    if (a->rotary_pairs < 0 || a->rotary_pairs > a->head_dim / 2)
        return wavepe_fail(err, WAVEPE_E_INVALID, "rotary_pairs must be in [0, head_dim/2 = %lld], got %lld",
                           (long long)(a->head_dim / 2), (long long)a->rotary_pairs);
    if (a->layout != WAVEPE_ROPE_HALF && a->layout != WAVEPE_ROPE_INTERLEAVED)
        return wavepe_fail(err, WAVEPE_E_INVALID, "layout=%d is neither half (0) nor interleaved (1)", a->layout);
    if (!isfinite(a->scale)) return wavepe_fail(err, WAVEPE_E_INVALID, "scale must be finite, got %g", a->scale);
    int status = wavepe_rope_tensor_validate_(a, &a->q, "q", elem, err);
    if (status == WAVEPE_OK) status = wavepe_rope_tensor_validate_(a, &a->k, "k", elem, err);
    if (status != WAVEPE_OK) return status;
    const int any = a->batch > 0 && a->len > 0 && a->head_dim > 0 && (a->q.heads > 0 || a->k.heads > 0);
    if (any && a->rotary_pairs > 0 && a->inv_freq == NULL) return wavepe_fail(err, WAVEPE_E_NULL, "inv_freq is NULL");
    if (a->positions == NULL) {
        int64_t last;
        if (wavepe_add_overflow(a->offset, a->len, &last))
            return wavepe_fail(err, WAVEPE_E_OVERFLOW, "positions: offset=%lld + length %lld overflows int64",
                               (long long)a->offset, (long long)a->len);
    } else if (any) {
        const int64_t dims[2] = {a->batch, a->len}, st[2] = {a->pos_stride_b, a->pos_stride_l};
        if ((status = wavepe_check_view(err, "positions", 2, dims, st, (int64_t)sizeof(int64_t)))) return status;
    }
    return WAVEPE_OK;
}

/* ---- plans: what callers use (CPU) ------------------------------------------------
 * Validates *a (copied) and that inv_freq[:rotary_pairs] is finite; one
 * phase (0) whose units are the rows below.  Same shape as the other
 * families' plans (relbias.h, attention.h). */
typedef struct wavepe_rope_plan wavepe_rope_plan;
int wavepe_rope_plan_create(wavepe_isa isa, const wavepe_rope_args *a, wavepe_rope_plan **plan, wavepe_error *err);
int64_t wavepe_rope_units(const wavepe_rope_plan *plan, int phase);
int64_t wavepe_rope_grain(const wavepe_rope_plan *plan, int phase);
int wavepe_rope_run(wavepe_rope_plan *plan, int phase, int64_t begin, int64_t end);
void wavepe_rope_plan_free(wavepe_rope_plan *plan);

/* Number of rows of the row space: B * ceil(L / WAVEPE_ROPE_POS_BLOCK). */
int64_t wavepe_rope_rows(const wavepe_rope_args *a);

/* Process rows [row_begin, row_end).  float32 kernels read and write float,
 * float64 kernels double, bf16 / f16 kernels the 16-bit types (uint16_t
 * storage, float32 arithmetic); inv_freq and the angles are double in all. */
void wavepe_rope_f32(wavepe_isa isa, const wavepe_rope_args *a, int64_t row_begin, int64_t row_end);
void wavepe_rope_f64(wavepe_isa isa, const wavepe_rope_args *a, int64_t row_begin, int64_t row_end);
void wavepe_rope_bf16(wavepe_isa isa, const wavepe_rope_args *a, int64_t row_begin, int64_t row_end);
void wavepe_rope_f16(wavepe_isa isa, const wavepe_rope_args *a, int64_t row_begin, int64_t row_end);
/* The variants behind the dispatch, one set per kernel_isa of isa_table.h
 * (avx512bf16 and amx run avx512's; the vector ones exist in builds for
 * their architecture only). */
#define WAVEPE_ROPE_KERNELS_(ID, name, arch, l32, l64, bf16, blocks, kernel_isa, ...) \
    void wavepe_rope_f32_##kernel_isa(const wavepe_rope_args *a, int64_t row_begin, int64_t row_end);  \
    void wavepe_rope_f64_##kernel_isa(const wavepe_rope_args *a, int64_t row_begin, int64_t row_end);  \
    void wavepe_rope_bf16_##kernel_isa(const wavepe_rope_args *a, int64_t row_begin, int64_t row_end); \
    void wavepe_rope_f16_##kernel_isa(const wavepe_rope_args *a, int64_t row_begin, int64_t row_end);
WAVEPE_ISA_TABLE(WAVEPE_ROPE_KERNELS_, _)
#undef WAVEPE_ROPE_KERNELS_

#ifdef __cplusplus
}
#endif
#endif
