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

#include <stdint.h>

#include "isa.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum wavepe_rope_layout {
    WAVEPE_ROPE_HALF = 0,       /* pairs (i, i + d/2) */
    WAVEPE_ROPE_INTERLEAVED = 1 /* pairs (2i, 2i + 1) */
} wavepe_rope_layout;

/* Positions per row of the row space (the cos/sin table covers one block). */
#define WAVEPE_ROPE_POS_BLOCK 16
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

typedef struct wavepe_rope_args {
    int64_t batch, len, head_dim; /* B, L, d (d even) */
    wavepe_rope_tensor q, k;      /* k.heads = 0: no k (its pointers are then ignored) */
    const double *inv_freq;       /* (d/2,) angular frequencies; the first rotary_pairs are read */
    int64_t rotary_pairs;         /* 0 .. d/2 */
    int layout;                   /* wavepe_rope_layout */
    int inverse;                  /* nonzero: rotate by -angle */
    double scale;                 /* multiplies every output element */
    const int64_t *positions;     /* NULL: offset + l */
    int64_t pos_stride_b, pos_stride_l;
    int64_t offset;
} wavepe_rope_args;

/* Sizes, strides, pointers and values sane: WAVEPE_OK or an error
 * (negative sizes; odd d, rotary_pairs outside [0, d/2], unknown layout,
 * non-finite scale or inv_freq: WAVEPE_E_INVALID; an element offset or a
 * position that overflows int64 / ptrdiff_t: WAVEPE_E_OVERFLOW; NULL data
 * where elements exist: WAVEPE_E_NULL). */
int wavepe_rope_validate(const wavepe_rope_args *a);

/* Number of rows of the row space: B * ceil(L / WAVEPE_ROPE_POS_BLOCK). */
int64_t wavepe_rope_rows(const wavepe_rope_args *a);

/* Process rows [row_begin, row_end).  float32 kernels read and write float,
 * float64 kernels double; inv_freq and the angles are double in both. */
void wavepe_rope_f32(wavepe_isa isa, const wavepe_rope_args *a, int64_t row_begin, int64_t row_end);
void wavepe_rope_f64(wavepe_isa isa, const wavepe_rope_args *a, int64_t row_begin, int64_t row_end);
void wavepe_rope_f32_scalar(const wavepe_rope_args *a, int64_t row_begin, int64_t row_end);
void wavepe_rope_f64_scalar(const wavepe_rope_args *a, int64_t row_begin, int64_t row_end);
void wavepe_rope_f32_avx2(const wavepe_rope_args *a, int64_t row_begin, int64_t row_end);
void wavepe_rope_f64_avx2(const wavepe_rope_args *a, int64_t row_begin, int64_t row_end);
void wavepe_rope_f32_avx512(const wavepe_rope_args *a, int64_t row_begin, int64_t row_end);
void wavepe_rope_f64_avx512(const wavepe_rope_args *a, int64_t row_begin, int64_t row_end);

#ifdef __cplusplus
}
#endif
#endif
