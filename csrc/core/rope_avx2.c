/* rope_avx2.c: RoPE on AVX2+FMA vectors (8 floats / 4 doubles).
 *
 * Same rows and tables as the scalar kernels (rope_rows.h).  Per row:
 *   1. the cos/sin table of its positions: angles pos * inv_freq in double,
 *      a vector sincos (vecmath_avx2.h; libm beyond its argument range),
 *      times scale, sin negated for the inverse;
 *   2. a sequential sweep over every head of q and k: two loads, two FMAs and
 *      two stores per vector, so the op runs at memory speed.
 * In layout INTERLEAVED the table holds one entry per element,
 * c = (cos, cos), s = (-sin, +sin) per pair, so that
 * y = x * c + swap_adjacent(x) * s is one shuffle and one FMA per vector.
 * Every output element is a*c - round(b*s) or b*c + round(a*s) with one fused
 * rounding, in the vector body and in the scalar tails alike.
 */
#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "rope.h"
#include "rope_rows.h"
#include "vecmath_avx2.h"

#define BLOCK WAVEPE_ROPE_POS_BLOCK
#define CHUNK WAVEPE_ROPE_PAIR_CHUNK

/* ---- large inputs ----------------------------------------------------- */

/* Inputs this large stream from memory; each head's run of block rows starts
 * on fresh pages, so the next head's row is prefetched while the current one
 * is rotated (below).  Stores stay ordinary: non-temporal stores were ~10%
 * faster into reused output memory, but 10-20% slower into freshly mapped
 * pages (the kernel zeroes them through the cache, and a streaming store
 * then evicts those dirty lines: two writes per line), which is what a large
 * torch.empty from glibc's allocator hands out on every call. */
#define LARGE_MIN_BYTES ((int64_t)32 << 20)

static int is_large(const wavepe_rope_args *a, int64_t elem) {
    const double bytes = (double)a->batch * (double)(a->q.heads + a->k.heads) * (double)a->len *
                         (double)a->head_dim * (double)elem;
    return bytes >= (double)LARGE_MIN_BYTES;
}

/* The head vector (b, h + 1, l), or the first k head after the last q head:
 * prefetched while (b, h, l) is rotated, so that each head's run of block
 * rows (a new pair of pages) starts warm instead of waiting for the hardware
 * prefetcher to pick the new stream up (up to ~10% in A/B runs into reused
 * output memory; within the noise into fresh pages). */
static inline void prefetch_next_head(const wavepe_rope_args *a, int t, int64_t b, int64_t h, int64_t l,
                                      int64_t elem) {
    const wavepe_rope_tensor *ten = t == 0 ? &a->q : &a->k;
    const char *next;
    if (h + 1 < ten->heads) next = (const char *)ten->in + rope_in_at(ten, b, h + 1, l) * elem;
    else if (t == 0 && a->k.heads > 0) next = (const char *)a->k.in + rope_in_at(&a->k, b, 0, l) * elem;
    else return;
    for (int64_t off = 0; off < a->head_dim * elem; off += 64) _mm_prefetch(next + off, _MM_HINT_T0);
}

/* ---- float32 ---------------------------------------------------------- */

typedef struct table_f32 {
    _Alignas(32) float c[BLOCK][2 * CHUNK];
    _Alignas(32) float s[BLOCK][2 * CHUNK];
} table_f32;

/* sin and cos of 8 double angles as floats; libm for lanes out of range. */
static inline void sincos8_f32(__m256d ang_lo, __m256d ang_hi, __m256 *s, __m256 *c) {
    const __m256d lim = _mm256_set1_pd(WP_SINCOS_MAX_ARG), abs_mask = _mm256_set1_pd(-0.0);
    const int big = _mm256_movemask_pd(_mm256_cmp_pd(_mm256_andnot_pd(abs_mask, ang_lo), lim, _CMP_NLT_UQ)) |
                    _mm256_movemask_pd(_mm256_cmp_pd(_mm256_andnot_pd(abs_mask, ang_hi), lim, _CMP_NLT_UQ));
    if (!big) {
        wp_sincos_pd_to_ps(ang_lo, ang_hi, s, c);
        return;
    }
    _Alignas(32) double ang[8];
    _Alignas(32) float sv[8], cv[8];
    _mm256_store_pd(ang, ang_lo);
    _mm256_store_pd(ang + 4, ang_hi);
    for (int i = 0; i < 8; ++i) {
        sv[i] = (float)sin(ang[i]);
        cv[i] = (float)cos(ang[i]);
    }
    *s = _mm256_load_ps(sv);
    *c = _mm256_load_ps(cv);
}

static void build_table_f32(const wavepe_rope_args *a, const rope_row *r, int64_t i0, int64_t nc,
                            table_f32 *t) {
    const __m256 scale = _mm256_set1_ps((float)a->scale);
    const __m256 sin_flip = _mm256_set1_ps(a->inverse ? -0.0f : 0.0f);
    const __m256 pair_sign = _mm256_setr_ps(-0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f, -0.0f, 0.0f);
    const double *inv = a->inv_freq + i0;
    _Alignas(32) double inv_tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    const int64_t full = nc & ~(int64_t)7;
    if (nc > full) memcpy(inv_tail, inv + full, (size_t)(nc - full) * sizeof(double));
    for (int64_t p = 0; p < r->n; ++p) {
        const __m256d pos = _mm256_set1_pd(rope_position(a, r->b, r->l0 + p));
        for (int64_t i = 0; i < nc; i += 8) {
            const double *f = i < full ? inv + i : inv_tail; /* zero-padded tail: same code path */
            __m256 s, c;
            sincos8_f32(_mm256_mul_pd(pos, _mm256_loadu_pd(f)), _mm256_mul_pd(pos, _mm256_loadu_pd(f + 4)), &s,
                        &c);
            c = _mm256_mul_ps(c, scale);
            s = _mm256_xor_ps(_mm256_mul_ps(s, scale), sin_flip);
            if (a->layout == WAVEPE_ROPE_HALF) {
                _mm256_store_ps(&t->c[p][i], c);
                _mm256_store_ps(&t->s[p][i], s);
            } else {
                const __m256 c_lo = _mm256_unpacklo_ps(c, c), c_hi = _mm256_unpackhi_ps(c, c);
                const __m256 s_lo = _mm256_unpacklo_ps(s, s), s_hi = _mm256_unpackhi_ps(s, s);
                _mm256_store_ps(&t->c[p][2 * i], _mm256_permute2f128_ps(c_lo, c_hi, 0x20));
                _mm256_store_ps(&t->c[p][2 * i + 8], _mm256_permute2f128_ps(c_lo, c_hi, 0x31));
                _mm256_store_ps(&t->s[p][2 * i], _mm256_xor_ps(_mm256_permute2f128_ps(s_lo, s_hi, 0x20), pair_sign));
                _mm256_store_ps(&t->s[p][2 * i + 8],
                                _mm256_xor_ps(_mm256_permute2f128_ps(s_lo, s_hi, 0x31), pair_sign));
            }
        }
    }
}

static inline void rotate_half_f32(const float *x, float *y, int64_t half, int64_t i0, int64_t nc,
                                   const float *c, const float *s) {
    const float *xa = x + i0, *xb = x + half + i0;
    float *ya = y + i0, *yb = y + half + i0;
    int64_t i = 0;
    for (; i + 8 <= nc; i += 8) {
        const __m256 a = _mm256_loadu_ps(xa + i), b = _mm256_loadu_ps(xb + i);
        const __m256 vc = _mm256_load_ps(c + i), vs = _mm256_load_ps(s + i);
        const __m256 oa = _mm256_fmsub_ps(a, vc, _mm256_mul_ps(b, vs));
        const __m256 ob = _mm256_fmadd_ps(b, vc, _mm256_mul_ps(a, vs));
        _mm256_storeu_ps(ya + i, oa);
        _mm256_storeu_ps(yb + i, ob);
    }
    for (; i < nc; ++i) {
        const float a = xa[i], b = xb[i];
        ya[i] = fmaf(a, c[i], -(b * s[i]));
        yb[i] = fmaf(b, c[i], a * s[i]);
    }
}

static inline void rotate_interleaved_f32(const float *x, float *y, int64_t i0, int64_t nc, const float *c,
                                          const float *s) {
    const float *xo = x + 2 * i0;
    float *yo = y + 2 * i0;
    const int64_t n = 2 * nc;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 v = _mm256_loadu_ps(xo + j);
        const __m256 swapped = _mm256_permute_ps(v, 0xB1); /* (b, a) per pair */
        _mm256_storeu_ps(yo + j,
                         _mm256_fmadd_ps(v, _mm256_load_ps(c + j), _mm256_mul_ps(swapped, _mm256_load_ps(s + j))));
    }
    for (; j < n; j += 2) {
        const float a = xo[j], b = xo[j + 1];
        yo[j] = fmaf(a, c[j], b * s[j]);
        yo[j + 1] = fmaf(b, c[j + 1], a * s[j + 1]);
    }
}

static inline void pass_row_f32(const rope_pass *p, float scale, const float *x, float *y) {
    if (x == y && scale == 1.0f) return;
    for (int64_t j = p->lo1; j < p->hi1; ++j) y[j] = x[j] * scale;
    for (int64_t j = p->lo2; j < p->hi2; ++j) y[j] = x[j] * scale;
}

void wavepe_rope_f32_avx2(const wavepe_rope_args *a, int64_t row_begin, int64_t row_end) {
    table_f32 table;
    const rope_pass pass = rope_passthrough(a);
    const float scale = (float)a->scale;
    const int large = is_large(a, (int64_t)sizeof(float));
    const int64_t half = a->head_dim / 2;
    const wavepe_rope_tensor *tensors[2] = {&a->q, &a->k};
    for (int64_t row = row_begin; row < row_end; ++row) {
        const rope_row r = rope_row_at(a, row);
        for (int64_t i0 = 0; i0 == 0 || i0 < a->rotary_pairs; i0 += CHUNK) {
            const int64_t left = a->rotary_pairs - i0;
            const int64_t nc = left < CHUNK ? left : CHUNK;
            build_table_f32(a, &r, i0, nc, &table);
            for (int t = 0; t < 2; ++t) {
                const wavepe_rope_tensor *ten = tensors[t];
                for (int64_t h = 0; h < ten->heads; ++h) {
                    for (int64_t p = 0; p < r.n; ++p) {
                        const int64_t l = r.l0 + p;
                        const float *x = (const float *)ten->in + rope_in_at(ten, r.b, h, l);
                        float *y = (float *)ten->out + rope_out_at(ten, r.b, h, l);
                        if (large) prefetch_next_head(a, t, r.b, h, l, (int64_t)sizeof(float));
                        if (a->layout == WAVEPE_ROPE_HALF)
                            rotate_half_f32(x, y, half, i0, nc, table.c[p], table.s[p]);
                        else
                            rotate_interleaved_f32(x, y, i0, nc, table.c[p], table.s[p]);
                        if (i0 == 0) pass_row_f32(&pass, scale, x, y);
                    }
                }
            }
        }
    }
}

/* ---- float64 ---------------------------------------------------------- */

typedef struct table_f64 {
    _Alignas(32) double c[BLOCK][2 * CHUNK];
    _Alignas(32) double s[BLOCK][2 * CHUNK];
} table_f64;

static inline void sincos4_f64(__m256d ang, __m256d *s, __m256d *c) {
    const __m256d big = _mm256_cmp_pd(_mm256_andnot_pd(_mm256_set1_pd(-0.0), ang),
                                      _mm256_set1_pd(WP_SINCOS_MAX_ARG), _CMP_NLT_UQ);
    if (!_mm256_movemask_pd(big)) {
        wp_sincos_pd(ang, s, c);
        return;
    }
    _Alignas(32) double av[4], sv[4], cv[4];
    _mm256_store_pd(av, ang);
    for (int i = 0; i < 4; ++i) {
        sv[i] = sin(av[i]);
        cv[i] = cos(av[i]);
    }
    *s = _mm256_load_pd(sv);
    *c = _mm256_load_pd(cv);
}

static void build_table_f64(const wavepe_rope_args *a, const rope_row *r, int64_t i0, int64_t nc,
                            table_f64 *t) {
    const __m256d scale = _mm256_set1_pd(a->scale);
    const __m256d sin_flip = _mm256_set1_pd(a->inverse ? -0.0 : 0.0);
    const __m256d pair_sign = _mm256_setr_pd(-0.0, 0.0, -0.0, 0.0);
    const double *inv = a->inv_freq + i0;
    _Alignas(32) double inv_tail[4] = {0, 0, 0, 0};
    const int64_t full = nc & ~(int64_t)3;
    if (nc > full) memcpy(inv_tail, inv + full, (size_t)(nc - full) * sizeof(double));
    for (int64_t p = 0; p < r->n; ++p) {
        const __m256d pos = _mm256_set1_pd(rope_position(a, r->b, r->l0 + p));
        for (int64_t i = 0; i < nc; i += 4) {
            const double *f = i < full ? inv + i : inv_tail;
            __m256d s, c;
            sincos4_f64(_mm256_mul_pd(pos, _mm256_loadu_pd(f)), &s, &c);
            c = _mm256_mul_pd(c, scale);
            s = _mm256_xor_pd(_mm256_mul_pd(s, scale), sin_flip);
            if (a->layout == WAVEPE_ROPE_HALF) {
                _mm256_store_pd(&t->c[p][i], c);
                _mm256_store_pd(&t->s[p][i], s);
            } else {
                const __m256d c_lo = _mm256_unpacklo_pd(c, c), c_hi = _mm256_unpackhi_pd(c, c);
                const __m256d s_lo = _mm256_unpacklo_pd(s, s), s_hi = _mm256_unpackhi_pd(s, s);
                _mm256_store_pd(&t->c[p][2 * i], _mm256_permute2f128_pd(c_lo, c_hi, 0x20));
                _mm256_store_pd(&t->c[p][2 * i + 4], _mm256_permute2f128_pd(c_lo, c_hi, 0x31));
                _mm256_store_pd(&t->s[p][2 * i], _mm256_xor_pd(_mm256_permute2f128_pd(s_lo, s_hi, 0x20), pair_sign));
                _mm256_store_pd(&t->s[p][2 * i + 4],
                                _mm256_xor_pd(_mm256_permute2f128_pd(s_lo, s_hi, 0x31), pair_sign));
            }
        }
    }
}

static inline void rotate_half_f64(const double *x, double *y, int64_t half, int64_t i0, int64_t nc,
                                   const double *c, const double *s) {
    const double *xa = x + i0, *xb = x + half + i0;
    double *ya = y + i0, *yb = y + half + i0;
    int64_t i = 0;
    for (; i + 4 <= nc; i += 4) {
        const __m256d a = _mm256_loadu_pd(xa + i), b = _mm256_loadu_pd(xb + i);
        const __m256d vc = _mm256_load_pd(c + i), vs = _mm256_load_pd(s + i);
        _mm256_storeu_pd(ya + i, _mm256_fmsub_pd(a, vc, _mm256_mul_pd(b, vs)));
        _mm256_storeu_pd(yb + i, _mm256_fmadd_pd(b, vc, _mm256_mul_pd(a, vs)));
    }
    for (; i < nc; ++i) {
        const double a = xa[i], b = xb[i];
        ya[i] = fma(a, c[i], -(b * s[i]));
        yb[i] = fma(b, c[i], a * s[i]);
    }
}

static inline void rotate_interleaved_f64(const double *x, double *y, int64_t i0, int64_t nc, const double *c,
                                          const double *s) {
    const double *xo = x + 2 * i0;
    double *yo = y + 2 * i0;
    const int64_t n = 2 * nc;
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const __m256d v = _mm256_loadu_pd(xo + j);
        const __m256d swapped = _mm256_permute_pd(v, 0x5);
        _mm256_storeu_pd(yo + j,
                         _mm256_fmadd_pd(v, _mm256_load_pd(c + j), _mm256_mul_pd(swapped, _mm256_load_pd(s + j))));
    }
    for (; j < n; j += 2) {
        const double a = xo[j], b = xo[j + 1];
        yo[j] = fma(a, c[j], b * s[j]);
        yo[j + 1] = fma(b, c[j + 1], a * s[j + 1]);
    }
}

static inline void pass_row_f64(const rope_pass *p, double scale, const double *x, double *y) {
    if (x == y && scale == 1.0) return;
    for (int64_t j = p->lo1; j < p->hi1; ++j) y[j] = x[j] * scale;
    for (int64_t j = p->lo2; j < p->hi2; ++j) y[j] = x[j] * scale;
}

void wavepe_rope_f64_avx2(const wavepe_rope_args *a, int64_t row_begin, int64_t row_end) {
    table_f64 table;
    const rope_pass pass = rope_passthrough(a);
    const int large = is_large(a, (int64_t)sizeof(double));
    const int64_t half = a->head_dim / 2;
    const wavepe_rope_tensor *tensors[2] = {&a->q, &a->k};
    for (int64_t row = row_begin; row < row_end; ++row) {
        const rope_row r = rope_row_at(a, row);
        for (int64_t i0 = 0; i0 == 0 || i0 < a->rotary_pairs; i0 += CHUNK) {
            const int64_t left = a->rotary_pairs - i0;
            const int64_t nc = left < CHUNK ? left : CHUNK;
            build_table_f64(a, &r, i0, nc, &table);
            for (int t = 0; t < 2; ++t) {
                const wavepe_rope_tensor *ten = tensors[t];
                for (int64_t h = 0; h < ten->heads; ++h) {
                    for (int64_t p = 0; p < r.n; ++p) {
                        const int64_t l = r.l0 + p;
                        const double *x = (const double *)ten->in + rope_in_at(ten, r.b, h, l);
                        double *y = (double *)ten->out + rope_out_at(ten, r.b, h, l);
                        if (large) prefetch_next_head(a, t, r.b, h, l, (int64_t)sizeof(double));
                        if (a->layout == WAVEPE_ROPE_HALF)
                            rotate_half_f64(x, y, half, i0, nc, table.c[p], table.s[p]);
                        else
                            rotate_interleaved_f64(x, y, i0, nc, table.c[p], table.s[p]);
                        if (i0 == 0) pass_row_f64(&pass, a->scale, x, y);
                    }
                }
            }
        }
    }
}
#else
typedef int wavepe_rope_avx2_unused;
#endif
