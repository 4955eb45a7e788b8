/* rope_simd.h: RoPE on vectors, written once (simd_type.h) and instantiated
 * per ISA by rope_<isa>.c (avx2, avx512, neon) for float, double, bfloat16
 * and float16.  Half types are stored as they are and computed in float32
 * (the table, the FMAs): each row is widened as it is loaded (S_LOADU) and
 * every output rounded once to its type as it is stored (S_STOREU, half.h),
 * so a bf16/fp16 call reads and writes half the bytes of a float32 one and
 * makes no float32 copy.
 *
 * Same rows and tables as the scalar kernels (rope_rows.h).  Per row:
 *   1. the cos/sin table of its positions: angles pos * inv_freq in double,
 *      a vector sincos in double (vecmath.h; libm beyond its argument range)
 *      -- for float32 tables once per run of consecutive positions, then the
 *      angle-addition recurrence (build_table) --, times scale, sin negated
 *      for the inverse;
 *   2. a sweep over the heads of q and k, two heads at a time (rotate_heads:
 *      each table vector is loaded once for both, and two streams of rows
 *      are in flight; measured on an AVX2 EPYC (Zen 2), q and k of
 *      (1, 8, 4096, 128), 2 threads, against clone() in the same run:
 *      float32 1.23 -> 1.16x, fp16 1.33 -> 1.31x, bf16 with the parity split
 *      below 1.60 -> 1.44x); two loads, two FMAs and two stores per vector.
 * In layout INTERLEAVED the table holds one entry per element,
 * c = (cos, cos), s = (-sin, +sin) per pair, so that
 * y = x * c + swap_pairs(x) * s is one shuffle and one FMA per vector.
 * bfloat16 (WP_STORAGE_PAIRS, simd_type.h) instead loads 2 VL elements split
 * by parity, which costs less than widening 2 vectors and packing them back
 * (two bit operations in, a shift and a blend out: the rotation is compute-
 * bound in bf16 where it is memory-bound in float32).  Interleaved, the even
 * elements are the a of each pair and the odd ones the b, so the table holds
 * one entry per pair as in layout HALF; in layout HALF the two halves split
 * alike, and each full block of 2 VL pairs of the table is stored even pairs
 * first (table_order), so that the lanes meet their own cos and sin.
 * Every output element is a*c - round(b*s) or b*c + round(a*s) with one fused
 * rounding, in the vector body and in the scalar tails alike.
 */
#include <math.h>
#include <string.h>

#include "rope.h"
#include "rope_rows.h"
#include "simd_type.h"

#ifndef WAVEPE_ROPE_SIMD_ONCE
#define WAVEPE_ROPE_SIMD_ONCE
#define BLOCK WAVEPE_ROPE_POS_BLOCK
#define CHUNK WAVEPE_ROPE_PAIR_CHUNK

/* Each head's run of block rows starts on fresh pages, so the next head's row
 * is prefetched while the current one is rotated (below).  Stores stay
 * ordinary: non-temporal stores were ~10% faster into reused output memory,
 * but 10-20% slower into freshly mapped pages (the kernel zeroes them through
 * the cache, and a streaming store then evicts those dirty lines: two writes
 * per line), which is what a large torch.empty from glibc's allocator hands
 * out on every call. */

/* float32 tables: the largest angle the cos/sin recurrence runs to (build_table) */
#define ROPE_RECURRENCE_MAX_ANGLE 1048576.0 /* 2^20 */

/* The head vector (b, h, l) of tensor t, where heads past q's last continue
 * with k's (q head Hq is k head 0): prefetched while the heads before it are
 * rotated, so that each head's run of block
 * rows (a new pair of pages) starts warm instead of waiting for the hardware
 * prefetcher to pick the new stream up.  Measured once the prefetch reached
 * the binary (simd_x86.h: GCC had deleted it), AVX2 EPYC, q and k of
 * (1, 8, 4096, 128), 2 threads: float32 1.37 -> 1.22x clone(), bf16 1.79 ->
 * 1.66x, fp16 1.52 -> 1.36x; (1, 32, 4096, 128) unchanged within noise. */
static inline void rope_prefetch_head(const wavepe_rope_args *a, int t, int64_t b, int64_t h, int64_t l,
                                      int64_t elem) {
    if (t == 0 && h >= a->q.heads) t = 1, h -= a->q.heads;
    const wavepe_rope_tensor *ten = t == 0 ? &a->q : &a->k;
    if (h >= ten->heads) return;
    const char *next = (const char *)ten->in + rope_in_at(ten, b, h, l) * elem;
    for (int64_t off = 0; off < a->head_dim * elem; off += 64) wp_prefetch(next + off);
}
#endif

/* Whether the table holds one (cos, sin) per pair (else one per element, interleaved). */
static inline int FN(pair_table)(const wavepe_rope_args *a) {
#if defined(WP_STORAGE_PAIRS)
    (void)a;
    return 1;
#else
    return a->layout == WAVEPE_ROPE_HALF;
#endif
}

typedef struct FN(table) {
    _Alignas(64) T c[BLOCK][2 * CHUNK];
    _Alignas(64) T s[BLOCK][2 * CHUNK];
} FN(table);

/* cos * scale and (+-)sin * scale of position p, table entries [i, i + VL), into the table. */
static inline void FN(table_put)(const wavepe_rope_args *a, FN(table) * t, int64_t p, int64_t i, VT s, VT c) {
    const VT scale = V(set1)((T)a->scale);
    const VT sin_flip = V(set1)(a->inverse ? (T)-0.0 : (T)0.0);
    c = V(mul)(c, scale);
    s = V(xor)(V(mul)(s, scale), sin_flip);
    if (FN(pair_table)(a)) {
        V(store)(&t->c[p][i], c);
        V(store)(&t->s[p][i], s);
    } else {
        const VT pair_sign = V(interleave_lo)(V(set1)((T)-0.0), V(zero)()); /* (-0, +0) per pair */
        V(store)(&t->c[p][2 * i], V(interleave_lo)(c, c));
        V(store)(&t->c[p][2 * i + VL], V(interleave_hi)(c, c));
        V(store)(&t->s[p][2 * i], V(xor)(V(interleave_lo)(s, s), pair_sign));
        V(store)(&t->s[p][2 * i + VL], V(xor)(V(interleave_hi)(s, s), pair_sign));
    }
}

/* sin and cos in double of the WP_VL_F64 angles pos * f[0 .. WP_VL_F64) (vecmath's
 * vf64_sincos, about 1 double ulp; libm beyond its argument range). */
static inline void FN(sincos_f64)(double pos, const double *f, vf64 *s, vf64 *c) {
    const vf64 ang = vf64_mul(vf64_set1(pos), vf64_loadu(f));
    if (!(mf64_bits(vf64_cmpge(vf64_abs(ang), vf64_set1(WP_SINCOS_MAX_ARG))) | mf64_bits(vf64_isnan(ang)))) {
        vf64_sincos(ang, s, c);
        return;
    }
    _Alignas(64) double sv[WP_VL_F64], cv[WP_VL_F64];
    for (int i = 0; i < WP_VL_F64; ++i) {
        sv[i] = sin(pos * f[i]);
        cv[i] = cos(pos * f[i]);
    }
    *s = vf64_load(sv);
    *c = vf64_load(cv);
}

#if defined(WP_COMPUTE_F32)
/* float32 tables (float32, bfloat16, float16 data).  Positions usually follow each other
 * (always without a positions tensor), and then the angle-addition formulas give
 * cos/sin((pos + 1) f) from cos/sin(pos f) and cos/sin(f) in four double FMAs instead of a
 * sincos per position: each step adds a few double ulps, so after the block's 15 steps the
 * values are within ~1e-14 of the exact ones, far below float's rounding; rounded to float
 * once.  The recurrence rotates by the exact f where the contract (rope.h) rounds each angle
 * pos * f to double, a difference of an ulp of the angle: it runs only while the angles stay
 * below 2^20 (an ulp of 2^-32 rad, 1/250 of float's rounding at 1); larger ones, and a
 * position that does not follow its predecessor, are computed directly by vf64_sincos. */
static void FN(build_table)(const wavepe_rope_args *a, const rope_row *r, const double *inv, int64_t nc,
                            FN(table) * t) {
    _Alignas(64) double inv_tail[VL] = {0};
    const int64_t full = nc / VL * VL;
    if (nc > full) memcpy(inv_tail, inv + full, (size_t)(nc - full) * sizeof(double));
    for (int64_t i = 0; i < nc; i += VL) {
        const double *f = i < full ? inv + i : inv_tail; /* zero-padded tail: same code path */
        vf64 ds_lo, dc_lo, ds_hi, dc_hi, s_lo, c_lo, s_hi, c_hi;
        FN(sincos_f64)(1.0, f, &ds_lo, &dc_lo);
        FN(sincos_f64)(1.0, f + WP_VL_F64, &ds_hi, &dc_hi);
        double fmax = 0.0;
        for (int j = 0; j < VL; ++j) fmax = fabs(f[j]) > fmax ? fabs(f[j]) : fmax;
        double prev = 0.0;
        for (int64_t p = 0; p < r->n; ++p) {
            const double pos = rope_position(a, r->b, r->l0 + p);
            if (p > 0 && pos == prev + 1.0 && fabs(pos) * fmax < ROPE_RECURRENCE_MAX_ANGLE) {
                const vf64 cl = vf64_fmsub(c_lo, dc_lo, vf64_mul(s_lo, ds_lo));
                const vf64 ch = vf64_fmsub(c_hi, dc_hi, vf64_mul(s_hi, ds_hi));
                s_lo = vf64_fmadd(s_lo, dc_lo, vf64_mul(c_lo, ds_lo));
                s_hi = vf64_fmadd(s_hi, dc_hi, vf64_mul(c_hi, ds_hi));
                c_lo = cl, c_hi = ch;
            } else {
                FN(sincos_f64)(pos, f, &s_lo, &c_lo);
                FN(sincos_f64)(pos, f + WP_VL_F64, &s_hi, &c_hi);
            }
            prev = pos;
            FN(table_put)(a, t, p, i, vf32_from_f64x2(s_lo, s_hi), vf32_from_f64x2(c_lo, c_hi));
        }
    }
}
#else
static void FN(build_table)(const wavepe_rope_args *a, const rope_row *r, const double *inv, int64_t nc,
                            FN(table) * t) {
    _Alignas(64) double inv_tail[VL] = {0};
    const int64_t full = nc / VL * VL;
    if (nc > full) memcpy(inv_tail, inv + full, (size_t)(nc - full) * sizeof(double));
    for (int64_t p = 0; p < r->n; ++p) {
        const double pos = rope_position(a, r->b, r->l0 + p);
        for (int64_t i = 0; i < nc; i += VL) {
            vf64 s, c; /* T is double: VL = WP_VL_F64 */
            FN(sincos_f64)(pos, i < full ? inv + i : inv_tail, &s, &c); /* zero-padded tail: same code path */
            FN(table_put)(a, t, p, i, s, c);
        }
    }
}
#endif

/* The frequencies of pairs [i0, i0 + nc) in the order of the table: as they
 * are, but for bf16 in layout HALF, where each full block of 2 VL pairs is
 * stored even pairs first (the parity split of its data).  Returns inv_freq
 * itself or buf. */
static const double *FN(table_order)(const wavepe_rope_args *a, int64_t i0, int64_t nc, double *buf) {
#if defined(WP_STORAGE_PAIRS)
    if (a->layout == WAVEPE_ROPE_HALF && nc >= 2 * VL) {
        const double *inv = a->inv_freq + i0;
        int64_t i = 0;
        for (; i + 2 * VL <= nc; i += 2 * VL)
            for (int j = 0; j < VL; ++j) buf[i + j] = inv[i + 2 * j], buf[i + VL + j] = inv[i + 2 * j + 1];
        for (; i < nc; ++i) buf[i] = inv[i];
        return buf;
    }
#else
    (void)nc, (void)buf;
#endif
    return a->inv_freq + i0;
}

/* rotate_half and rotate_interleaved turn nh = 1 or 2 head vectors of the
 * same position (x[h] -> y[h]) with one pass over the table row: the cos/sin
 * vectors are loaded once for both (callers pass nh as a constant, so each
 * use compiles to straight code). */
static inline void FN(rotate_half)(const S *const *x, S *const *y, int nh, int64_t half, int64_t i0, int64_t nc,
                                   const T *c, const T *s) {
    int64_t i = 0;
#if defined(WP_STORAGE_PAIRS)
    for (; i + 2 * VL <= nc; i += 2 * VL) { /* split by parity; the table's block is even pairs first */
        const VT vc0 = V(load)(c + i), vs0 = V(load)(s + i), vc1 = V(load)(c + i + VL), vs1 = V(load)(s + i + VL);
        for (int h = 0; h < nh; ++h) {
            VT va0, va1, vb0, vb1;
            S_LOADU_PAIRS(x[h] + i0 + i, &va0, &va1);
            S_LOADU_PAIRS(x[h] + half + i0 + i, &vb0, &vb1);
            S_STOREU_PAIRS(y[h] + i0 + i, V(fmsub)(va0, vc0, V(mul)(vb0, vs0)), V(fmsub)(va1, vc1, V(mul)(vb1, vs1)));
            S_STOREU_PAIRS(y[h] + half + i0 + i, V(fmadd)(vb0, vc0, V(mul)(va0, vs0)),
                           V(fmadd)(vb1, vc1, V(mul)(va1, vs1)));
        }
    }
#else
    for (; i + 2 * VL <= nc; i += 2 * VL) { /* two vectors a step: one store each where the ISA packs them */
        const VT vc0 = V(load)(c + i), vs0 = V(load)(s + i), vc1 = V(load)(c + i + VL), vs1 = V(load)(s + i + VL);
        for (int h = 0; h < nh; ++h) {
            const S *xa = x[h] + i0 + i, *xb = x[h] + half + i0 + i;
            const VT va0 = S_LOADU(xa), vb0 = S_LOADU(xb), va1 = S_LOADU(xa + VL), vb1 = S_LOADU(xb + VL);
            S_STOREU2(y[h] + i0 + i, V(fmsub)(va0, vc0, V(mul)(vb0, vs0)), V(fmsub)(va1, vc1, V(mul)(vb1, vs1)));
            S_STOREU2(y[h] + half + i0 + i, V(fmadd)(vb0, vc0, V(mul)(va0, vs0)), V(fmadd)(vb1, vc1, V(mul)(va1, vs1)));
        }
    }
#endif
    for (; i + VL <= nc; i += VL) {
        const VT vc = V(load)(c + i), vs = V(load)(s + i);
        for (int h = 0; h < nh; ++h) {
            const VT va = S_LOADU(x[h] + i0 + i), vb = S_LOADU(x[h] + half + i0 + i);
            S_STOREU(y[h] + i0 + i, V(fmsub)(va, vc, V(mul)(vb, vs)));
            S_STOREU(y[h] + half + i0 + i, V(fmadd)(vb, vc, V(mul)(va, vs)));
        }
    }
    for (; i < nc; ++i)
        for (int h = 0; h < nh; ++h) {
            const T va = S_TO_T(x[h][i0 + i]), vb = S_TO_T(x[h][half + i0 + i]);
            y[h][i0 + i] = T_TO_S(T_FMA(va, c[i], -(vb * s[i])));
            y[h][half + i0 + i] = T_TO_S(T_FMA(vb, c[i], va * s[i]));
        }
}

static inline void FN(rotate_interleaved)(const S *const *x, S *const *y, int nh, int64_t i0, int64_t nc, const T *c,
                                          const T *s) {
#if defined(WP_STORAGE_PAIRS)
    int64_t i = 0; /* pairs; the table has one entry per pair */
    for (; i + VL <= nc; i += VL) {
        const VT vc = V(load)(c + i), vs = V(load)(s + i);
        for (int h = 0; h < nh; ++h) {
            VT va, vb;
            S_LOADU_PAIRS(x[h] + 2 * (i0 + i), &va, &vb);
            S_STOREU_PAIRS(y[h] + 2 * (i0 + i), V(fmsub)(va, vc, V(mul)(vb, vs)), V(fmadd)(vb, vc, V(mul)(va, vs)));
        }
    }
    for (; i < nc; ++i)
        for (int h = 0; h < nh; ++h) {
            const S *xo = x[h] + 2 * (i0 + i);
            S *yo = y[h] + 2 * (i0 + i);
            const T va = S_TO_T(xo[0]), vb = S_TO_T(xo[1]);
            yo[0] = T_TO_S(T_FMA(va, c[i], -(vb * s[i])));
            yo[1] = T_TO_S(T_FMA(vb, c[i], va * s[i]));
        }
#else
    const int64_t n = 2 * nc;
    int64_t j = 0;
    for (; j + 2 * VL <= n; j += 2 * VL) {
        const VT vc0 = V(load)(c + j), vs0 = V(load)(s + j), vc1 = V(load)(c + j + VL), vs1 = V(load)(s + j + VL);
        for (int h = 0; h < nh; ++h) {
            const VT v0 = S_LOADU(x[h] + 2 * i0 + j), v1 = S_LOADU(x[h] + 2 * i0 + j + VL);
            S_STOREU2(y[h] + 2 * i0 + j, V(fmadd)(v0, vc0, V(mul)(V(swap_pairs)(v0), vs0)),
                      V(fmadd)(v1, vc1, V(mul)(V(swap_pairs)(v1), vs1)));
        }
    }
    for (; j + VL <= n; j += VL) {
        const VT vc = V(load)(c + j), vs = V(load)(s + j);
        for (int h = 0; h < nh; ++h) {
            const VT v = S_LOADU(x[h] + 2 * i0 + j);
            S_STOREU(y[h] + 2 * i0 + j, V(fmadd)(v, vc, V(mul)(V(swap_pairs)(v), vs)));
        }
    }
    for (; j < n; j += 2)
        for (int h = 0; h < nh; ++h) {
            const S *xo = x[h] + 2 * i0;
            S *yo = y[h] + 2 * i0;
            const T va = S_TO_T(xo[j]), vb = S_TO_T(xo[j + 1]);
            yo[j] = T_TO_S(T_FMA(va, c[j], vb * s[j]));
            yo[j + 1] = T_TO_S(T_FMA(vb, c[j + 1], va * s[j + 1]));
        }
#endif
}

/* The dimensions that do not rotate: copied (scale 1, bit for bit) or times scale. */
static inline void FN(pass_row)(const rope_pass *p, T scale, const S *x, S *y) {
    if (scale == (T)1) {
        if (x == y) return;
        memcpy(y + p->lo1, x + p->lo1, (size_t)(p->hi1 - p->lo1) * sizeof(S));
        memcpy(y + p->lo2, x + p->lo2, (size_t)(p->hi2 - p->lo2) * sizeof(S));
        return;
    }
    for (int64_t j = p->lo1; j < p->hi1; ++j) y[j] = T_TO_S(S_TO_T(x[j]) * scale);
    for (int64_t j = p->lo2; j < p->hi2; ++j) y[j] = T_TO_S(S_TO_T(x[j]) * scale);
}

/* The heads of a row's positions, two at a time (nh = 2: one table pass for
 * both), the last one alone where their number is odd; with pass (the first
 * chunk of pairs) the dimensions that do not rotate too. */
static void FN(rotate_heads)(const wavepe_rope_args *a, const FN(table) * table, const rope_row *r, int t,
                             int64_t h, int nh, int64_t i0, int64_t nc, const rope_pass *pass) {
    const wavepe_rope_tensor *ten = t == 0 ? &a->q : &a->k;
    for (int64_t p = 0; p < r->n; ++p) {
        const int64_t l = r->l0 + p;
        const S *x[2] = {NULL, NULL};
        S *y[2] = {NULL, NULL};
        for (int j = 0; j < nh; ++j) {
            x[j] = (const S *)ten->in + rope_in_at(ten, r->b, h + j, l);
            y[j] = (S *)ten->out + rope_out_at(ten, r->b, h + j, l);
            rope_prefetch_head(a, t, r->b, h + nh + j, l, (int64_t)sizeof(S)); /* the next nh heads */
        }
        if (a->layout == WAVEPE_ROPE_HALF) {
            if (nh == 2) FN(rotate_half)(x, y, 2, a->head_dim / 2, i0, nc, table->c[p], table->s[p]);
            else FN(rotate_half)(x, y, 1, a->head_dim / 2, i0, nc, table->c[p], table->s[p]);
        } else {
            if (nh == 2) FN(rotate_interleaved)(x, y, 2, i0, nc, table->c[p], table->s[p]);
            else FN(rotate_interleaved)(x, y, 1, i0, nc, table->c[p], table->s[p]);
        }
        if (pass != NULL)
            for (int j = 0; j < nh; ++j) FN(pass_row)(pass, (T)a->scale, x[j], y[j]);
    }
}

void FN(wavepe_rope)(const wavepe_rope_args *a, int64_t row_begin, int64_t row_end) {
    FN(table) table;
    _Alignas(64) double inv_buf[CHUNK];
    const rope_pass pass = rope_passthrough(a);
    /* the dimensions that do not rotate go with the first chunk, where there are any (two calls of memcpy
     * for nothing per row were 8 % of a bf16 rope's time) */
    const rope_pass *with_pass = pass.hi1 > pass.lo1 || pass.hi2 > pass.lo2 ? &pass : NULL;
    for (int64_t row = row_begin; row < row_end; ++row) {
        const rope_row r = rope_row_at(a, row);
        for (int64_t i0 = 0; i0 == 0 || i0 < a->rotary_pairs; i0 += CHUNK) {
            const int64_t left = a->rotary_pairs - i0;
            const int64_t nc = left < CHUNK ? left : CHUNK;
            FN(build_table)(a, &r, FN(table_order)(a, i0, nc, inv_buf), nc, &table);
            for (int t = 0; t < 2; ++t) {
                const int64_t heads = t == 0 ? a->q.heads : a->k.heads;
                for (int64_t h = 0; h < heads; h += 2)
                    FN(rotate_heads)(a, &table, &r, t, h, heads - h >= 2 ? 2 : 1, i0, nc, i0 == 0 ? with_pass : NULL);
            }
        }
    }
}

#include "simd_type_end.h"
