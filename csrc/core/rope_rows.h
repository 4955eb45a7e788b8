/* rope_rows.h: the row space of the rope kernels (internal to rope*.c).
 *
 * Shared by the scalar and the vector files so that all walk exactly the same
 * rows, positions and head vectors.
 */
#ifndef WAVEPE_ROPE_ROWS_H
#define WAVEPE_ROPE_ROWS_H

#include <stdint.h>

#include "rope.h"

/* One row: batch index b and the positions l0 .. l0 + n - 1 (n >= 1). */
typedef struct rope_row {
    int64_t b, l0, n;
} rope_row;

static inline int64_t rope_blocks_per_batch(const wavepe_rope_args *a) {
    return (a->len + WAVEPE_ROPE_POS_BLOCK - 1) / WAVEPE_ROPE_POS_BLOCK;
}

static inline rope_row rope_row_at(const wavepe_rope_args *a, int64_t row) {
    const int64_t blocks = rope_blocks_per_batch(a);
    rope_row r;
    r.b = row / blocks;
    r.l0 = (row % blocks) * WAVEPE_ROPE_POS_BLOCK;
    r.n = a->len - r.l0 < WAVEPE_ROPE_POS_BLOCK ? a->len - r.l0 : WAVEPE_ROPE_POS_BLOCK;
    return r;
}

/* The position of (b, l) as the double the angle is formed from. */
static inline double rope_position(const wavepe_rope_args *a, int64_t b, int64_t l) {
    if (a->positions == NULL) return (double)(a->offset + l);
    return (double)a->positions[b * a->pos_stride_b + l * a->pos_stride_l];
}

/* Element offsets of head vector (b, h, l) in a tensor's input and output. */
static inline int64_t rope_in_at(const wavepe_rope_tensor *t, int64_t b, int64_t h, int64_t l) {
    return b * t->in_stride_b + h * t->in_stride_h + l * t->in_stride_l;
}

static inline int64_t rope_out_at(const wavepe_rope_tensor *t, int64_t b, int64_t h, int64_t l) {
    return b * t->out_stride_b + h * t->out_stride_h + l * t->out_stride_l;
}

/* The dimensions that do not rotate: [lo1, hi1) and [lo2, hi2) of a head vector. */
typedef struct rope_pass {
    int64_t lo1, hi1, lo2, hi2;
} rope_pass;

static inline rope_pass rope_passthrough(const wavepe_rope_args *a) {
    const int64_t half = a->head_dim / 2, rp = a->rotary_pairs;
    rope_pass p;
    if (a->layout == WAVEPE_ROPE_HALF) {
        p.lo1 = rp, p.hi1 = half, p.lo2 = half + rp, p.hi2 = a->head_dim;
    } else {
        p.lo1 = 2 * rp, p.hi1 = a->head_dim, p.lo2 = a->head_dim, p.hi2 = a->head_dim;
    }
    return p;
}

#endif
