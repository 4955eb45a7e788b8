/* harness.h: what the tile harnesses (tile_overhead.c, tile_profile.c) share: a clock, random bf16 operands,
 * the arguments of a causal bf16 attention, and running a plan's two phases on the calling thread. */
#ifndef WAVEPE_BENCH_HARNESS_H
#define WAVEPE_BENCH_HARNESS_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "attention.h"
#include "half.h"

/* CLOCK_MONOTONIC in seconds */
static inline double harness_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* n bf16 values uniform in amplitude * [-1/2, 1/2] (rand(): seed with srand) */
static inline uint16_t *random_bf16(int64_t n, float amplitude) {
    uint16_t *x = malloc(sizeof(uint16_t) * (size_t)n);
    if (x == NULL) exit(2);
    for (int64_t i = 0; i < n; ++i) x[i] = wp_f32_to_bf16(amplitude * ((float)rand() / (float)RAND_MAX - 0.5f));
    return x;
}

/* the plan's phases, every unit, here */
static inline int run_plan(wavepe_attention_plan *p) {
    for (int phase = 0; phase < 2; ++phase) {
        const int st = wavepe_attention_run(p, phase, 0, wavepe_attention_units(p, phase));
        if (st != WAVEPE_OK) return st;
    }
    return WAVEPE_OK;
}

/* The benchmarks' attention: bf16, batch 1, H heads (as many key heads) of L rows and d columns, causal,
 * scale 1 / sqrt(d), contiguous (H, L, d) operands, no bias; the backward's dout and gradients left to set. */
static inline wavepe_attention_args harness_causal_bf16(int64_t H, int64_t L, int64_t d, const uint16_t *q,
                                                        const uint16_t *k, const uint16_t *v, uint16_t *out,
                                                        float *lse) {
    wavepe_attention_args a = wavepe_attention_args_defaults();
    a.dtype = WAVEPE_BF16;
    a.batch = 1, a.heads = H, a.kv_heads = H, a.m = L, a.n = L, a.d = d, a.causal = 1;
    a.scale = 1.0 / sqrt((double)d);
    a.q = q, a.k = k, a.v = v, a.out = out, a.lse = lse;
    const int64_t strides[3] = {H * L * d, L * d, d};
    memcpy(a.q_strides, strides, sizeof strides), memcpy(a.k_strides, strides, sizeof strides);
    memcpy(a.v_strides, strides, sizeof strides), memcpy(a.out_strides, strides, sizeof strides);
    memcpy(a.dout_strides, strides, sizeof strides);
    return a;
}

#endif
