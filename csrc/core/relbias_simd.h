/* relbias_simd.h: the vector kernels of relbias, written once (simd_type.h)
 * and instantiated per ISA by relbias_<isa>.c (avx2, avx512, neon) for float,
 * double, bfloat16 and float16; not a public header.
 *
 * Half types (S = uint16_t, T = float, simd_type.h) are read and written as
 * they are and computed in float32: q, grad and table rows are widened as
 * they are loaded (S_LOADU, S_BCAST), the forward's packed panels are float32
 * (the table is widened while it is packed), and every output element is
 * rounded once (half.h).  Outputs that the kernels build up over several
 * passes -- a dq row (tiles, then the edge rows, then clamping) and a dT row
 * (every block of queries) -- accumulate in a float32 scratch row and are
 * rounded when complete; the forward's 6-row q blocks are widened once into a
 * scratch tile that every chunk's GEMM tile reads.  The scratch is small
 * (the rows of one call's blocks, or its own dT rows), never a tensor.
 *
 * Geometry.  A query at position p reads table row t = p - n - r_lo for key
 * n, so a run of keys is a run of table rows read backwards.  Table rows are
 * grouped in chunks of NR = 2 * VL consecutive rows (16 for float32 on AVX2,
 * 32 on AVX-512, 8 on NEON).
 *
 * Forward (bias = Q · T_windowᵀ, each row written reversed).  For a block of
 * MR = 6 query rows and one chunk c, the tile G[i][k] = q_i · T[c*NR + k] is a
 * 6 x NR GEMM tile: per head dimension j, 6 broadcasts of q and 2 loads of
 * the packed panel (the chunk's rows transposed: NR distances contiguous per
 * j), 12 FMAs.  Row i of the tile goes to keys p_i - r_lo - c*NR - k, i.e.
 * reversed into the output row (one lane permute per vector).  The sum over j
 * runs only over [jlo, jhi) of the chunk (its first and last nonzero column);
 * an all-zero chunk costs stores only.  Blocks are processed in groups that
 * share each panel while it is hot in L1.  Keys whose distance falls outside
 * the table, or after the query with causal, are plain fills.  This is the
 * flop count of a causal Q·Kᵀ restricted to the support, with no rel-shift
 * GEMM over M + N - 1 distances and no M x N scratch.
 *
 * dq (= skew(grad) · T).  Same block of 6 rows; the tile is 6 rows x NR head
 * dimensions, the sum runs over table rows t (the keys p_i - r_lo - t, read
 * backwards from grad), skipping chunks whose nonzero columns miss the tile.
 * Table rows that only some rows of the block read (at most MR - 1 at each
 * end) are added by a plain loop, so the order of every sum depends only on
 * the aligned block, not on how callers split the rows.
 *
 * dT (= skew(grad)ᵀ · Q).  Tiles of 6 table rows x NR head dimensions, summed
 * over the (g, m) query rows that read all 6 rows; q is walked in blocks that
 * stay in L2 while every tile of the thread's rows passes over them.  Tiles
 * are aligned to multiples of 6 table rows whatever [begin, end) is, so the
 * result does not depend on the split either.
 */

#include <stdint.h>
#include <stdlib.h>

#include "checked.h"
#include "relbias.h"
#include "simd_type.h"

#ifndef RB_IMPL_ONCE
#define RB_IMPL_ONCE
#define RB_MR 6
#define RB_GROUP 8
#define RB_CAT_(a, b) a##b
#define RB_CAT(a, b) RB_CAT_(a, b)
static inline int64_t rb_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t rb_max64(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t rb_clip64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }
static inline int64_t rb_align64(int64_t bytes) { return (bytes + 63) & ~(int64_t)63; }

/* Blocks of MR query rows.  With M >= MR a block is MR consecutive rows of one
 * matrix, aligned to multiples of MR (rows past M alias the block's first
 * row); its makeup never depends on [begin, end), only which rows are stored.
 * With M < MR (decoding, a few queries per head) a block is the same row m of
 * up to MR matrices: the rows then share positions, so every tile is fully
 * used instead of carrying MR - M dummy rows per matrix. */
typedef struct {
    int64_t g[RB_MR], m[RB_MR];
    int stored[RB_MR]; /* row in [begin, end) (aliases and rows outside: 0) */
} rb_rows;

typedef struct {
    int64_t begin, end, row; /* M >= MR: next flat row */
    int64_t m, g;            /* M < MR: next row m, next matrix g (-1: not started) */
} rb_cursor;

static inline void rb_cursor_init(rb_cursor *c, int64_t begin, int64_t end) {
    c->begin = begin;
    c->end = end;
    c->row = begin;
    c->m = 0;
    c->g = -1;
}

static int rb_next_block(const wavepe_relbias_args *a, rb_cursor *c, rb_rows *out) {
    const int64_t M = a->m;
    if (M >= RB_MR) {
        if (c->row >= c->end) return 0;
        const int64_t g = c->row / M, m0 = (c->row % M) / RB_MR * RB_MR;
        for (int i = 0; i < RB_MR; ++i) {
            const int64_t m = m0 + i, flat = g * M + m;
            out->g[i] = g;
            out->m[i] = m < M ? m : m0;
            out->stored[i] = m < M && flat >= c->begin && flat < c->end;
        }
        c->row = rb_min64(g * M + rb_min64(m0 + RB_MR, M), c->end);
        return 1;
    }
    for (; c->m < M; ++c->m, c->g = -1) {
        /* matrices g whose row m is in range: begin <= g * M + m < end */
        const int64_t g_lo = (rb_max64(c->begin - c->m, 0) + M - 1) / M;
        const int64_t g_hi = (rb_max64(c->end - c->m, 0) + M - 1) / M;
        if (c->g < g_lo) c->g = g_lo;
        if (c->g >= g_hi) continue;
        for (int i = 0; i < RB_MR; ++i) {
            const int stored = c->g + i < g_hi;
            out->g[i] = stored ? c->g + i : c->g;
            out->m[i] = c->m;
            out->stored[i] = stored;
        }
        c->g += RB_MR;
        return 1;
    }
    return 0;
}
#endif

#define RB_NR (2 * VL)
/* the scalar reference of a kernel, for this element type (relbias.h) */
#define RB_SCALAR(name) WP_CAT(WP_CAT(name##_, WP_TNAME), _scalar)

/* ---- workspace -------------------------------------------------------------- */

/* Table rows [*t_begin, *t_end) that this call can read at all. */
static void FN(rb_needed_rows)(const wavepe_relbias_args *a, int64_t *t_begin, int64_t *t_end) {
    *t_begin = *t_end = 0;
    if (a->batch == 0 || a->m == 0 || a->n == 0 || a->rows == 0) return;
    int64_t r_min = a->q_offset - (a->n - 1);
    const int64_t r_max = a->q_offset + a->m - 1;
    if (a->causal && r_min < 0) r_min = 0;
    *t_begin = rb_clip64(r_min - a->r_lo, 0, a->rows);
    *t_end = rb_clip64(r_max - a->r_lo + 1, *t_begin, a->rows);
}

/* The chunks the call reads: c0 .. c0 + count - 1.  The workspace holds only
 * these (a huge learned table costs nothing beyond the call's window). */
static int64_t FN(rb_window)(const wavepe_relbias_args *a, int64_t *c0) {
    int64_t t_begin, t_end;
    FN(rb_needed_rows)(a, &t_begin, &t_end);
    *c0 = t_begin / RB_NR;
    return t_begin < t_end ? (t_end - 1) / RB_NR - *c0 + 1 : 0;
}

/* Layout: (jlo, jhi) int64 pairs per window chunk, then (64-byte aligned
 * offset) the panels: per chunk d x NR elements, panel[j][k] = T[c*NR + k][j]. */
static inline int64_t *FN(rb_ranges)(const wavepe_relbias_args *a) { return (int64_t *)a->workspace; }

static inline T *FN(rb_panels)(const wavepe_relbias_args *a, int64_t count) {
    return (T *)((char *)a->workspace + rb_align64(16 * count));
}

int64_t WP_CAT(FN(wavepe_relbias), _workspace_bytes)(const wavepe_relbias_args *a, unsigned kernels) {
    if (!(kernels & (WAVEPE_RELBIAS_FORWARD | WAVEPE_RELBIAS_GRAD_Q))) return 0;
    int64_t c0;
    const int64_t chunks = FN(rb_window)(a, &c0);
    int64_t total = rb_align64(16 * chunks), panels;
    if (kernels & WAVEPE_RELBIAS_FORWARD) {
        if (wavepe_mul_overflow(chunks, RB_NR * (int64_t)sizeof(T), &panels) ||
            wavepe_mul_overflow(panels, a->d, &panels) || wavepe_add_overflow(total, panels, &total))
            return WAVEPE_E_OVERFLOW;
    }
    return total < 64 ? 64 : total; /* never 0: the kernels tell "no workspace" by NULL */
}

int64_t WP_CAT(FN(wavepe_relbias), _chunks)(const wavepe_relbias_args *a) {
    int64_t c0;
    return FN(rb_window)(a, &c0);
}

/* First and last nonzero column of a row, +1 for the last; (d, 0) if none.
 * NaN counts as nonzero (unordered compare). */
static void FN(rb_row_extent)(const S *row, int64_t d, int64_t *first, int64_t *end) {
    int64_t j = 0;
    *first = d;
    *end = 0;
    for (; j + VL <= d; j += VL) {
        const int mask = (int)M(bits)(V(cmpneq)(S_LOADU(row + j), V(zero)()));
        if (mask) {
            *first = j + __builtin_ctz((unsigned)mask);
            break;
        }
    }
    if (*first == d)
        for (; j < d; ++j)
            if (S_TO_T(row[j]) != 0 || S_TO_T(row[j]) != S_TO_T(row[j])) {
                *first = j;
                break;
            }
    if (*first == d) return;
    j = d;
    for (; j - VL >= *first; j -= VL) {
        const int mask = (int)M(bits)(V(cmpneq)(S_LOADU(row + j - VL), V(zero)()));
        if (mask) {
            *end = j - VL + 32 - __builtin_clz((unsigned)mask);
            return;
        }
    }
    for (; j > *first; --j)
        if (S_TO_T(row[j - 1]) != 0 || S_TO_T(row[j - 1]) != S_TO_T(row[j - 1])) {
            *end = j;
            return;
        }
    *end = *first + 1;
}

void WP_CAT(FN(wavepe_relbias), _prepare)(const wavepe_relbias_args *a, unsigned kernels, int64_t begin,
                                              int64_t end) {
    int64_t c0;
    const int64_t count = FN(rb_window)(a, &c0);
    const S *table = (const S *)a->table;
    int64_t *ranges = FN(rb_ranges)(a);
    T *panels = FN(rb_panels)(a, count);
    const int64_t d = a->d;
    for (int64_t k = rb_max64(begin, 0); k < end && k < count; ++k) {
        const int64_t t0 = (c0 + k) * RB_NR, rows_here = rb_min64(RB_NR, a->rows - t0);
        int64_t jlo = d, jhi = 0;
        for (int64_t i = 0; i < rows_here; ++i) {
            int64_t f, e;
            FN(rb_row_extent)(table + (t0 + i) * d, d, &f, &e);
            jlo = rb_min64(jlo, f);
            jhi = rb_max64(jhi, e);
        }
        if (jlo >= jhi) jlo = jhi = 0;
        ranges[2 * k] = jlo;
        ranges[2 * k + 1] = jhi;
        if (!(kernels & WAVEPE_RELBIAS_FORWARD)) continue;
        /* NR distances contiguous per head dimension (in T: half tables widened here); rows past the table are 0 */
        T *panel = panels + k * d * RB_NR;
        for (int64_t j = jlo; j < jhi; ++j)
            for (int64_t i = 0; i < RB_NR; ++i)
                panel[j * RB_NR + i] = i < rows_here ? S_TO_T(table[(t0 + i) * d + j]) : 0;
    }
}

/* ---- small vector helpers ------------------------------------------------------ */

/* Fill p[0 .. count) with v.  stream: large outputs, where the fill (the causal
 * upper triangle, the distances beyond the support) is pure store bandwidth:
 * non-temporal stores skip reading every line before overwriting it. */
static inline void FN(rb_fill_stream)(T *p, int64_t count, T v, int stream) {
    const VT vv = V(set1)(v);
    int64_t i = 0;
    if (stream && count >= 16 * VL) {
        for (; (uintptr_t)(p + i) % (VL * sizeof(T)) != 0; ++i) p[i] = v; /* stream needs aligned vectors */
        for (; i + VL <= count; i += VL) V(stream)(p + i, vv);
        for (; i < count; ++i) p[i] = v;
        return;
    }
    for (; i + 2 * VL <= count; i += 2 * VL) {
        V(storeu)(p + i, vv);
        V(storeu)(p + i + VL, vv);
    }
    for (; i + VL <= count; i += VL) V(storeu)(p + i, vv);
    for (; i < count; ++i) p[i] = v;
}

static inline void FN(rb_fill)(T *p, int64_t count, T v) { FN(rb_fill_stream)(p, count, v, 0); }

/* Fill the output p[0 .. count) (storage S) with v, rounded once. */
static inline void FN(rb_fill_out)(S *p, int64_t count, T v, int stream) {
#ifdef WP_STORAGE_HALF /* storage S differs from the compute type T */
    /* v rounded once; its bits twice per 32-bit lane, stored as float vectors (moves only: no
     * arithmetic touches the pattern, so its bits arrive as they are) */
    const S s = T_TO_S(v);
    int64_t i = 0;
    if (count >= 2 * VL) {
        uint32_t pattern[VL];
        for (int k = 0; k < VL; ++k) pattern[k] = (uint32_t)s | (uint32_t)s << 16;
        const VT pv = V(loadu)((const float *)(const void *)pattern);
        if ((uintptr_t)p % sizeof(float) != 0) p[i++] = s; /* float stores want float alignment (NEON's do) */
        if (stream && count >= 32 * VL) {
            for (; (uintptr_t)(p + i) % (VL * sizeof(float)) != 0; ++i) p[i] = s; /* stream needs aligned vectors */
            for (; i + 2 * VL <= count; i += 2 * VL) V(stream)((float *)(void *)(p + i), pv);
        } else {
            for (; i + 2 * VL <= count; i += 2 * VL) V(storeu)((float *)(void *)(p + i), pv);
        }
    }
    for (; i < count; ++i) p[i] = s;
#else
    FN(rb_fill_stream)(p, count, v, stream);
#endif
}

/* Lanes [0, n) of p (n in [0, VL]), zero elsewhere, widened; nothing past p + n is read. */
static inline VT FN(rb_loadu_n)(const S *p, int64_t n) {
#ifdef WP_STORAGE_HALF
    S tmp[VL] = {0};
    for (int64_t i = 0; i < n; ++i) tmp[i] = p[i];
    return S_LOADU(tmp);
#else
    return V(loadu_n)(p, n);
#endif
}

static inline T FN(rb_dot)(const S *x, const S *y, int64_t d) {
    VT s0 = V(zero)(), s1 = V(zero)();
    int64_t j = 0;
    for (; j + 2 * VL <= d; j += 2 * VL) {
        s0 = V(fmadd)(S_LOADU(x + j), S_LOADU(y + j), s0);
        s1 = V(fmadd)(S_LOADU(x + j + VL), S_LOADU(y + j + VL), s1);
    }
    for (; j + VL <= d; j += VL) s0 = V(fmadd)(S_LOADU(x + j), S_LOADU(y + j), s0);
    T s = V(hsum)(V(add)(s0, s1));
    for (; j < d; ++j) s += S_TO_T(x[j]) * S_TO_T(y[j]);
    return s;
}

/* Whether x[0 .. count) holds no NaN and no inf (x * 0 is NaN exactly for those). */
static inline int FN(rb_finite)(const S *x, int64_t count) {
    VT acc = V(zero)();
    int64_t i = 0;
    for (; i + VL <= count; i += VL) acc = V(add)(acc, V(mul)(S_LOADU(x + i), V(zero)()));
    T s = V(hsum)(acc);
    for (; i < count; ++i) s += S_TO_T(x[i]) * (T)0;
    return s == (T)0;
}

static inline T FN(rb_sum)(const S *x, int64_t count) {
    VT s0 = V(zero)(), s1 = V(zero)();
    int64_t i = 0;
    for (; i + 2 * VL <= count; i += 2 * VL) {
        s0 = V(add)(s0, S_LOADU(x + i));
        s1 = V(add)(s1, S_LOADU(x + i + VL));
    }
    T s = V(hsum)(V(add)(s0, s1));
    for (; i < count; ++i) s += S_TO_T(x[i]);
    return s;
}

/* y += alpha * x over d elements (y in T: an output or a float32 accumulator row) */
static inline void FN(rb_axpy)(T *y, T alpha, const S *x, int64_t d) {
    const VT va = V(set1)(alpha);
    int64_t j = 0;
    for (; j + VL <= d; j += VL) V(storeu)(y + j, V(fmadd)(va, S_LOADU(x + j), V(loadu)(y + j)));
    for (; j < d; ++j) y[j] += alpha * S_TO_T(x[j]);
}

#ifdef WP_STORAGE_HALF
/* x[0 .. d) widened into y (a scratch row in T) */
static inline void FN(rb_widen)(T *y, const S *x, int64_t d) {
    int64_t j = 0;
    for (; j + VL <= d; j += VL) V(storeu)(y + j, S_LOADU(x + j));
    for (; j < d; ++j) y[j] = S_TO_T(x[j]);
}

/* x[0 .. d) (a float32 accumulator row) rounded once into y */
static inline void FN(rb_round)(S *y, const T *x, int64_t d) {
    int64_t j = 0;
    for (; j + VL <= d; j += VL) S_STOREU(y + j, V(loadu)(x + j));
    for (; j < d; ++j) y[j] = T_TO_S(x[j]);
}
#endif

/* Table rows [*ta, *tb) that a query at p reads (empty: ta == tb == 0), and the
 * key split of the row (relbias.h). */
static inline wavepe_relbias_row_split FN(rb_row_rows)(const wavepe_relbias_args *a, int64_t p, int64_t *ta,
                                                         int64_t *tb) {
    const wavepe_relbias_row_split s = wavepe_relbias_split_row(a, p);
    if (s.n_tab_begin < s.n_tab_end) {
        *ta = p - a->r_lo - (s.n_tab_end - 1);
        *tb = p - a->r_lo - s.n_tab_begin + 1;
    } else {
        *ta = *tb = 0;
    }
    return s;
}

/* ---- forward ------------------------------------------------------------------- */

typedef struct {
    const T *q[RB_MR];    /* the row (half types: its widened copy in the call's scratch tile) */
    S *out[RB_MR];        /* NULL: row not stored (outside the range or the matrix) */
    int64_t key_of_t0[RB_MR]; /* p - r_lo: the key that reads table row 0 */
    int64_t ta[RB_MR], tb[RB_MR];
    int64_t c_lo, c_hi;      /* chunks the block's tiles cover */
} FN(rb_fblock);

static inline void FN(rb_fwd_store_row)(const FN(rb_fblock) *b, int i, int64_t t0, VT lo, VT hi) {
    S *out = b->out[i];
    if (out == NULL) return;
    const int64_t ta = b->ta[i], tb = b->tb[i], key0 = b->key_of_t0[i];
    if (t0 >= ta && t0 + RB_NR <= tb) {
        S *dst = out + (key0 - (t0 + RB_NR - 1));
        S_STOREU2(dst, V(reverse)(hi), V(reverse)(lo));
        return;
    }
    T tmp[RB_NR];
    V(storeu)(tmp, lo);
    V(storeu)(tmp + VL, hi);
    const int64_t from = rb_max64(t0, ta), to = rb_min64(t0 + RB_NR, tb);
    for (int64_t t = from; t < to; ++t) out[key0 - t] = T_TO_S(tmp[t - t0]);
}

#define RB_FMA_ROW(qi, c0, c1)                                                                   \
    do {                                                                                         \
        const VT x_ = V(bcast)((qi) + j);                                                      \
        c0 = V(fmadd)(x_, b0, c0);                                                                 \
        c1 = V(fmadd)(x_, b1, c1);                                                                 \
    } while (0)

static void FN(rb_fwd_tile)(const FN(rb_fblock) *b, int64_t c, const T *panel, int64_t jlo,
                                int64_t jhi) {
    VT c00 = V(zero)(), c01 = V(zero)(), c10 = V(zero)(), c11 = V(zero)(), c20 = V(zero)(), c21 = V(zero)();
    VT c30 = V(zero)(), c31 = V(zero)(), c40 = V(zero)(), c41 = V(zero)(), c50 = V(zero)(), c51 = V(zero)();
    const T *q0 = b->q[0], *q1 = b->q[1], *q2 = b->q[2], *q3 = b->q[3], *q4 = b->q[4], *q5 = b->q[5];
    const T *pb = panel + jlo * RB_NR;
    for (int64_t j = jlo; j < jhi; ++j, pb += RB_NR) {
        const VT b0 = V(loadu)(pb), b1 = V(loadu)(pb + VL);
        RB_FMA_ROW(q0, c00, c01);
        RB_FMA_ROW(q1, c10, c11);
        RB_FMA_ROW(q2, c20, c21);
        RB_FMA_ROW(q3, c30, c31);
        RB_FMA_ROW(q4, c40, c41);
        RB_FMA_ROW(q5, c50, c51);
    }
    const int64_t t0 = c * RB_NR;
    FN(rb_fwd_store_row)(b, 0, t0, c00, c01);
    FN(rb_fwd_store_row)(b, 1, t0, c10, c11);
    FN(rb_fwd_store_row)(b, 2, t0, c20, c21);
    FN(rb_fwd_store_row)(b, 3, t0, c30, c31);
    FN(rb_fwd_store_row)(b, 4, t0, c40, c41);
    FN(rb_fwd_store_row)(b, 5, t0, c50, c51);
}

static void FN(rb_fwd_group)(const wavepe_relbias_args *a, const FN(rb_fblock) *blocks, int nb) {
    int64_t c_lo = INT64_MAX, c_hi = INT64_MIN;
    for (int k = 0; k < nb; ++k)
        if (blocks[k].c_lo < blocks[k].c_hi) {
            c_lo = rb_min64(c_lo, blocks[k].c_lo);
            c_hi = rb_max64(c_hi, blocks[k].c_hi);
        }
    int64_t c0;
    const int64_t count = FN(rb_window)(a, &c0);
    const int64_t *ranges = FN(rb_ranges)(a);
    const T *panels = FN(rb_panels)(a, count);
    for (int64_t c = c_lo; c < c_hi; ++c) {
        const T *panel = panels + (c - c0) * a->d * RB_NR;
        const int64_t jlo = ranges[2 * (c - c0)], jhi = ranges[2 * (c - c0) + 1];
        for (int k = 0; k < nb; ++k)
            if (c >= blocks[k].c_lo && c < blocks[k].c_hi) FN(rb_fwd_tile)(&blocks[k], c, panel, jlo, jhi);
    }
}

void FN(wavepe_relbias)(const wavepe_relbias_args *a, int64_t begin, int64_t end) {
    if (a->m == 0 || a->n == 0) return;
    const S *table = (const S *)a->table;
    /* outputs well beyond the caches: stream the fills (see rb_fill_stream) */
    const int stream = a->batch * a->m * a->n * (int64_t)sizeof(S) >= ((int64_t)32 << 20);
#ifdef WP_STORAGE_HALF
    /* the group's q rows widened once (RB_GROUP blocks x MR rows of d); without it, the scalar way */
    T *qtile = (T *)malloc(sizeof(T) * (size_t)(RB_GROUP * RB_MR) * (size_t)(a->d > 0 ? a->d : 1));
    if (qtile == NULL) {
        RB_SCALAR(wavepe_relbias)(a, begin, end);
        return;
    }
#endif
    FN(rb_fblock) blocks[RB_GROUP];
    int nb = 0;
    rb_cursor cur;
    rb_rows rows;
    rb_cursor_init(&cur, begin, end);
    while (rb_next_block(a, &cur, &rows)) {
        FN(rb_fblock) *b = &blocks[nb];
        b->c_lo = INT64_MAX;
        b->c_hi = INT64_MIN;
        /* rows not stored compute on row 0's q (a valid row), results dropped */
        const S *q_any = (const S *)a->q + rows.g[0] * a->q_stride_g + rows.m[0] * a->q_stride_m;
        for (int i = 0; i < RB_MR; ++i) {
            const S *q = q_any;
            if (rows.stored[i]) q = (const S *)a->q + rows.g[i] * a->q_stride_g + rows.m[i] * a->q_stride_m;
#ifdef WP_STORAGE_HALF
            T *slot = qtile + (int64_t)(nb * RB_MR + i) * a->d;
            FN(rb_widen)(slot, q, a->d);
            b->q[i] = slot;
#else
            b->q[i] = q;
#endif
            b->out[i] = NULL;
            b->ta[i] = b->tb[i] = b->key_of_t0[i] = 0;
            if (!rows.stored[i]) continue;
            const int64_t g = rows.g[i], m = rows.m[i], p = a->q_offset + m;
            S *out = (S *)a->bias + g * a->bias_stride_g + m * a->bias_stride_m;
            b->out[i] = out;
            b->key_of_t0[i] = p - a->r_lo;
            const wavepe_relbias_row_split s = FN(rb_row_rows)(a, p, &b->ta[i], &b->tb[i]);
            /* the keys outside the table segment: fills */
            const T beyond = a->clamp ? FN(rb_dot)(q, table + (a->rows - 1) * a->d, a->d) : 0;
            const T before = a->clamp ? FN(rb_dot)(q, table, a->d) : 0;
            FN(rb_fill_out)(out, s.n_tab_begin, beyond, stream);
            FN(rb_fill_out)(out + s.n_tab_end, s.n_zero_begin - s.n_tab_end, before, stream);
            FN(rb_fill_out)(out + s.n_zero_begin, a->n - s.n_zero_begin, 0, stream);
            if (b->ta[i] < b->tb[i]) {
                b->c_lo = rb_min64(b->c_lo, b->ta[i] / RB_NR);
                b->c_hi = rb_max64(b->c_hi, (b->tb[i] - 1) / RB_NR + 1);
            }
        }
        if (b->c_lo < b->c_hi && ++nb == RB_GROUP) {
            FN(rb_fwd_group)(a, blocks, nb);
            nb = 0;
        }
    }
    if (nb) FN(rb_fwd_group)(a, blocks, nb);
#ifdef WP_STORAGE_HALF
    free(qtile);
#endif
    if (stream) wp_stream_fence(); /* streamed stores visible before the caller's synchronisation */
    /* A query row holding NaN or inf: the formula multiplies it by every
     * in-table entry, zeros included (NaN * 0 = NaN), while the tiles above
     * skip columns and chunks that are zero; redo such rows the scalar way so
     * that every ISA gives the oracle's answer (docs/DEVELOPING.md). */
    for (int64_t row = begin; row < end; ++row) {
        const int64_t g = row / a->m, m = row % a->m;
        if (!FN(rb_finite)((const S *)a->q + g * a->q_stride_g + m * a->q_stride_m, a->d))
            RB_SCALAR(wavepe_relbias)(a, row, row + 1);
    }
}

/* ---- dq -------------------------------------------------------------------------- */

typedef struct {
    const S *grad[RB_MR];  /* grad row; rows past the matrix alias row 0 */
    T *dq[RB_MR];          /* NULL: row not stored; half types: a float32 accumulator row */
    S *dq_out[RB_MR];      /* half types: where dq[i] is rounded to once complete */
    int64_t key_of_t0[RB_MR];
    int64_t ta[RB_MR], tb[RB_MR];
    int64_t ia, ib;           /* table rows every row of the block reads (may be empty) */
} FN(rb_qblock);

/* acc += skew(grad)[rows of b, t] * T[t, j0 .. j0 + NR) over t in [t_from, t_to):
 * g_i points at grad_i of the key reading t_from; later rows are read backwards */
#define RB_DQ_LOOP(LOAD0, LOAD1)                                                                 \
    for (int64_t k = 0; k < t_to - t_from; ++k) {                                                \
        const S *tp = tbase + k * d;                                                          \
        const VT b0 = LOAD0, b1 = LOAD1;                                                       \
        VT x_;                                                                                 \
        x_ = S_BCAST(g0 - k); c00 = V(fmadd)(x_, b0, c00); c01 = V(fmadd)(x_, b1, c01);            \
        x_ = S_BCAST(g1 - k); c10 = V(fmadd)(x_, b0, c10); c11 = V(fmadd)(x_, b1, c11);            \
        x_ = S_BCAST(g2 - k); c20 = V(fmadd)(x_, b0, c20); c21 = V(fmadd)(x_, b1, c21);            \
        x_ = S_BCAST(g3 - k); c30 = V(fmadd)(x_, b0, c30); c31 = V(fmadd)(x_, b1, c31);            \
        x_ = S_BCAST(g4 - k); c40 = V(fmadd)(x_, b0, c40); c41 = V(fmadd)(x_, b1, c41);            \
        x_ = S_BCAST(g5 - k); c50 = V(fmadd)(x_, b0, c50); c51 = V(fmadd)(x_, b1, c51);            \
    }

#define RB_DQ_STORE(i, c0, c1)                                                                   \
    do {                                                                                         \
        T *dst_ = b->dq[i];                                                                   \
        if (dst_ != NULL) {                                                                      \
            if (full) {                                                                          \
                V(storeu)(dst_ + j0, c0);                                                         \
                V(storeu)(dst_ + j0 + VL, c1);                                              \
            } else {                                                                             \
                V(storeu_n)(dst_ + j0, c0, n0);                                              \
                V(storeu_n)(dst_ + j0 + VL, c1, n1);                                   \
            }                                                                                    \
        }                                                                                        \
    } while (0)

static void FN(rb_dq_tile)(const wavepe_relbias_args *a, const FN(rb_qblock) *b, int64_t j0) {
    const int64_t d = a->d, width = rb_min64(RB_NR, d - j0);
    const int full = width == RB_NR;
    const int64_t n0 = rb_min64(width, VL), n1 = rb_max64(width - VL, 0); /* lanes of a partial tile */
    int64_t c0;
    FN(rb_window)(a, &c0);
    const int64_t *ranges = FN(rb_ranges)(a); /* indexed by chunk - c0 */
    const S *table = (const S *)a->table;
    VT c00 = V(zero)(), c01 = V(zero)(), c10 = V(zero)(), c11 = V(zero)(), c20 = V(zero)(), c21 = V(zero)();
    VT c30 = V(zero)(), c31 = V(zero)(), c40 = V(zero)(), c41 = V(zero)(), c50 = V(zero)(), c51 = V(zero)();
    /* runs of consecutive chunks whose nonzero columns meet [j0, j0 + width) */
    const int64_t c_last = (b->ib - 1) / RB_NR;
    for (int64_t c = b->ia / RB_NR; c <= c_last;) {
        const int64_t jlo = ranges[2 * (c - c0)], jhi = ranges[2 * (c - c0) + 1];
        if (!(jlo < jhi && jlo < j0 + width && jhi > j0)) {
            ++c;
            continue;
        }
        int64_t c_end = c + 1;
        while (c_end <= c_last) {
            const int64_t lo = ranges[2 * (c_end - c0)], hi = ranges[2 * (c_end - c0) + 1];
            if (!(lo < hi && lo < j0 + width && hi > j0)) break;
            ++c_end;
        }
        const int64_t t_from = rb_max64(c * RB_NR, b->ia), t_to = rb_min64(c_end * RB_NR, b->ib);
        const S *tbase = table + t_from * d + j0;
        const S *g0 = b->grad[0] + (b->key_of_t0[0] - t_from), *g1 = b->grad[1] + (b->key_of_t0[1] - t_from);
        const S *g2 = b->grad[2] + (b->key_of_t0[2] - t_from), *g3 = b->grad[3] + (b->key_of_t0[3] - t_from);
        const S *g4 = b->grad[4] + (b->key_of_t0[4] - t_from), *g5 = b->grad[5] + (b->key_of_t0[5] - t_from);
        if (full) {
            RB_DQ_LOOP(S_LOADU(tp), S_LOADU(tp + VL))
        } else {
            RB_DQ_LOOP(FN(rb_loadu_n)(tp, n0), FN(rb_loadu_n)(tp + VL, n1))
        }
        c = c_end;
    }
    RB_DQ_STORE(0, c00, c01);
    RB_DQ_STORE(1, c10, c11);
    RB_DQ_STORE(2, c20, c21);
    RB_DQ_STORE(3, c30, c31);
    RB_DQ_STORE(4, c40, c41);
    RB_DQ_STORE(5, c50, c51);
}

/* Rows of the block: the terms outside the common table rows, and clamping. */
static void FN(rb_dq_rest)(const wavepe_relbias_args *a, const FN(rb_qblock) *b) {
    const int64_t d = a->d;
    const S *table = (const S *)a->table;
    const int common = b->ia < b->ib;
    for (int i = 0; i < RB_MR; ++i) {
        T *dq = b->dq[i];
        if (dq == NULL) continue;
        const S *grad = b->grad[i];
        const int64_t key0 = b->key_of_t0[i];
        if (!common) FN(rb_fill)(dq, d, 0);
        const int64_t ta = b->ta[i], tb = b->tb[i];
        const int64_t mid_a = common ? b->ia : tb, mid_b = common ? b->ib : tb;
        for (int64_t t = ta; t < mid_a; ++t) FN(rb_axpy)(dq, S_TO_T(grad[key0 - t]), table + t * d, d);
        for (int64_t t = rb_max64(mid_b, ta); t < tb; ++t) FN(rb_axpy)(dq, S_TO_T(grad[key0 - t]), table + t * d, d);
        if (a->clamp) {
            const wavepe_relbias_row_split s = wavepe_relbias_split_row(a, b->key_of_t0[i] + a->r_lo);
            const T beyond = FN(rb_sum)(grad, s.n_tab_begin);
            const T before = FN(rb_sum)(grad + s.n_tab_end, s.n_zero_begin - s.n_tab_end);
            FN(rb_axpy)(dq, beyond, table + (a->rows - 1) * d, d);
            FN(rb_axpy)(dq, before, table, d);
        }
#ifdef WP_STORAGE_HALF
        FN(rb_round)(b->dq_out[i], dq, d); /* complete: rounded once */
#endif
    }
}

static void FN(rb_dq_group)(const wavepe_relbias_args *a, const FN(rb_qblock) *blocks, int nb) {
    /* head-dimension tiles outermost: the table columns of one tile stay in
     * cache while every block of the group passes over them */
    for (int64_t j0 = 0; j0 < a->d; j0 += RB_NR)
        for (int k = 0; k < nb; ++k)
            if (blocks[k].ia < blocks[k].ib) FN(rb_dq_tile)(a, &blocks[k], j0);
    for (int k = 0; k < nb; ++k) FN(rb_dq_rest)(a, &blocks[k]);
}

void FN(wavepe_relbias_grad_q)(const wavepe_relbias_args *a, int64_t begin, int64_t end) {
    if (a->m == 0 || a->d == 0) return;
#ifdef WP_STORAGE_HALF
    /* float32 accumulator rows for the group's dq rows; without them, the scalar way */
    T *acc = (T *)malloc(sizeof(T) * (size_t)(RB_GROUP * RB_MR) * (size_t)a->d);
    if (acc == NULL) {
        RB_SCALAR(wavepe_relbias_grad_q)(a, begin, end);
        return;
    }
#endif
    FN(rb_qblock) blocks[RB_GROUP];
    int nb = 0;
    rb_cursor cur;
    rb_rows rows;
    rb_cursor_init(&cur, begin, end);
    while (rb_next_block(a, &cur, &rows)) {
        FN(rb_qblock) *b = &blocks[nb];
        b->ia = INT64_MIN;
        b->ib = INT64_MAX;
        int common = 1;
        for (int i = 0; i < RB_MR; ++i) {
            /* every row of the block, stored or not, shapes the common table rows,
             * so that sums do not depend on how callers split the rows */
            const int64_t g = rows.g[i], m = rows.m[i], p = a->q_offset + m;
            b->grad[i] = (const S *)a->grad + g * a->grad_stride_g + m * a->grad_stride_m;
            b->key_of_t0[i] = p - a->r_lo;
            FN(rb_row_rows)(a, p, &b->ta[i], &b->tb[i]);
            b->dq_out[i] = rows.stored[i] ? (S *)a->dq + g * a->dq_stride_g + m * a->dq_stride_m : NULL;
#ifdef WP_STORAGE_HALF
            b->dq[i] = rows.stored[i] ? acc + (int64_t)(nb * RB_MR + i) * a->d : NULL;
#else
            b->dq[i] = b->dq_out[i];
#endif
            if (b->ta[i] >= b->tb[i]) common = 0;
            b->ia = rb_max64(b->ia, b->ta[i]);
            b->ib = rb_min64(b->ib, b->tb[i]);
        }
        if (!common || b->ia >= b->ib) b->ia = b->ib = 0;
        if (++nb == RB_GROUP) {
            FN(rb_dq_group)(a, blocks, nb);
            nb = 0;
        }
    }
    if (nb) FN(rb_dq_group)(a, blocks, nb);
#ifdef WP_STORAGE_HALF
    free(acc);
#endif
    /* rows whose incoming gradient holds NaN or inf over the keys that read
     * the table: the scalar way, as in the forward */
    for (int64_t row = begin; row < end; ++row) {
        const int64_t g = row / a->m, m = row % a->m;
        const wavepe_relbias_row_split sp = wavepe_relbias_split_row(a, a->q_offset + m);
        const S *grad = (const S *)a->grad + g * a->grad_stride_g + m * a->grad_stride_m;
        if (!FN(rb_finite)(grad + sp.n_tab_begin, sp.n_tab_end - sp.n_tab_begin))
            RB_SCALAR(wavepe_relbias_grad_q)(a, row, row + 1);
    }
}

/* ---- dT ---------------------------------------------------------------------------- */

/* Query rows m (of one batch entry) whose key for table row t exists:
 * 0 <= q_offset + m - r_lo - t < N, and r = r_lo + t >= 0 with causal. */
static inline void FN(rb_rows_reading)(const wavepe_relbias_args *a, int64_t t, int64_t *m_from,
                                           int64_t *m_to) {
    const int64_t r = a->r_lo + t;
    if (a->causal && r < 0) {
        *m_from = *m_to = 0;
        return;
    }
    *m_from = rb_clip64(r - a->q_offset, 0, a->m);
    *m_to = rb_clip64(r - a->q_offset + a->n, *m_from, a->m);
}

#define RB_DT_LOOP(LOAD0, LOAD1)                                                                 \
    for (int64_t k = 0; k < m_to - m_from; ++k) {                                                \
        const S *gp = gbase + k * g_step, *qp = qbase + k * q_step;                           \
        const VT b0 = LOAD0, b1 = LOAD1;                                                       \
        VT x_;                                                                                 \
        x_ = S_BCAST(gp - o0); c00 = V(fmadd)(x_, b0, c00); c01 = V(fmadd)(x_, b1, c01);           \
        x_ = S_BCAST(gp - o1); c10 = V(fmadd)(x_, b0, c10); c11 = V(fmadd)(x_, b1, c11);           \
        x_ = S_BCAST(gp - o2); c20 = V(fmadd)(x_, b0, c20); c21 = V(fmadd)(x_, b1, c21);           \
        x_ = S_BCAST(gp - o3); c30 = V(fmadd)(x_, b0, c30); c31 = V(fmadd)(x_, b1, c31);           \
        x_ = S_BCAST(gp - o4); c40 = V(fmadd)(x_, b0, c40); c41 = V(fmadd)(x_, b1, c41);           \
        x_ = S_BCAST(gp - o5); c50 = V(fmadd)(x_, b0, c50); c51 = V(fmadd)(x_, b1, c51);           \
    }

#define RB_DT_LOAD_ACC(i, c0, c1)                                                                \
    do {                                                                                         \
        if (dst[i] != NULL) {                                                                    \
            c0 = full ? V(loadu)(dst[i] + j0) : V(loadu_n)(dst[i] + j0, n0);                  \
            c1 = full ? V(loadu)(dst[i] + j0 + VL) : V(loadu_n)(dst[i] + j0 + VL, n1); \
        }                                                                                        \
    } while (0)

#define RB_DT_STORE_ACC(i, c0, c1)                                                               \
    do {                                                                                         \
        if (dst[i] != NULL) {                                                                    \
            if (full) {                                                                          \
                V(storeu)(dst[i] + j0, c0);                                                       \
                V(storeu)(dst[i] + j0 + VL, c1);                                            \
            } else {                                                                             \
                V(storeu_n)(dst[i] + j0, c0, n0);                                            \
                V(storeu_n)(dst[i] + j0 + VL, c1, n1);                                 \
            }                                                                                    \
        }                                                                                        \
    } while (0)

/* dT rows t0 .. t0+5 (those in dst[] not NULL) += sum over m in [m_from, m_to)
 * of grad[g, m, key(m, t0 + i)] * q[g, m, j0 .. j0 + NR).  off[i] = i for the
 * rows that exist, 0 (an alias of row t0) for the others. */
static void FN(rb_dt_tile)(const wavepe_relbias_args *a, T *const dst[RB_MR], const int64_t off[RB_MR],
                               int64_t g, int64_t t0, int64_t m_from, int64_t m_to, int64_t j0) {
    const int64_t width = rb_min64(RB_NR, a->d - j0);
    const int full = width == RB_NR;
    const int64_t n0 = rb_min64(width, VL), n1 = rb_max64(width - VL, 0); /* lanes of a partial tile */
    const int64_t o0 = off[0], o1 = off[1], o2 = off[2], o3 = off[3], o4 = off[4], o5 = off[5];
    /* gbase: grad[g, m_from, key(m_from, t0)]; the key grows with m, so the step is stride + 1 */
    const S *gbase = (const S *)a->grad + g * a->grad_stride_g + m_from * a->grad_stride_m +
                        (a->q_offset + m_from - a->r_lo - t0);
    const S *qbase = (const S *)a->q + g * a->q_stride_g + m_from * a->q_stride_m + j0;
    const int64_t g_step = a->grad_stride_m + 1, q_step = a->q_stride_m;
    VT c00 = V(zero)(), c01 = V(zero)(), c10 = V(zero)(), c11 = V(zero)(), c20 = V(zero)(), c21 = V(zero)();
    VT c30 = V(zero)(), c31 = V(zero)(), c40 = V(zero)(), c41 = V(zero)(), c50 = V(zero)(), c51 = V(zero)();
    RB_DT_LOAD_ACC(0, c00, c01);
    RB_DT_LOAD_ACC(1, c10, c11);
    RB_DT_LOAD_ACC(2, c20, c21);
    RB_DT_LOAD_ACC(3, c30, c31);
    RB_DT_LOAD_ACC(4, c40, c41);
    RB_DT_LOAD_ACC(5, c50, c51);
    if (full) {
        RB_DT_LOOP(S_LOADU(qp), S_LOADU(qp + VL))
    } else {
        RB_DT_LOOP(FN(rb_loadu_n)(qp, n0), FN(rb_loadu_n)(qp + VL, n1))
    }
    RB_DT_STORE_ACC(0, c00, c01);
    RB_DT_STORE_ACC(1, c10, c11);
    RB_DT_STORE_ACC(2, c20, c21);
    RB_DT_STORE_ACC(3, c30, c31);
    RB_DT_STORE_ACC(4, c40, c41);
    RB_DT_STORE_ACC(5, c50, c51);
}

/* dT rows [begin, end) into acc (row t at acc + (t - begin) * d, in T): the
 * table rows themselves for float / double, a float32 scratch for half types. */
static void FN(rb_dt_rows)(const wavepe_relbias_args *a, int64_t begin, int64_t end, T *acc) {
    const int64_t d = a->d;
    FN(rb_fill)(acc, (end - begin) * d, 0);
    if (a->batch == 0 || a->m == 0 || a->n == 0) return;
    /* query rows per block: q of one block (~64 KiB) stays in L2 while every
     * tile of [begin, end) passes over it */
    const int64_t kb = rb_max64(16, 65536 / (d * (int64_t)sizeof(S)));
    const int64_t tile_first = begin / RB_MR * RB_MR;
    for (int64_t g = 0; g < a->batch; ++g) {
        for (int64_t mb = 0; mb < a->m; mb += kb) {
            const int64_t me = rb_min64(mb + kb, a->m);
            /* table rows some query of [mb, me) reads: t in (p - r_lo - N, p - r_lo] */
            const int64_t t_lo = a->q_offset + mb - a->r_lo - a->n + 1, t_hi = a->q_offset + me - 1 - a->r_lo;
            const int64_t from = rb_max64(tile_first, (rb_max64(t_lo, begin) / RB_MR) * RB_MR);
            for (int64_t t0 = from; t0 < end && t0 <= t_hi; t0 += RB_MR) {
                T *dst[RB_MR];
                int64_t off[RB_MR], lo[RB_MR], hi[RB_MR];
                int64_t m_from = mb, m_to = me;
                int any = 0;
                for (int i = 0; i < RB_MR; ++i) {
                    const int64_t t = t0 + i;
                    const int exists = t < a->rows;
                    off[i] = exists ? i : 0;
                    dst[i] = exists && t >= begin && t < end ? acc + (t - begin) * d : NULL;
                    any |= dst[i] != NULL;
                    FN(rb_rows_reading)(a, exists ? t : t0, &lo[i], &hi[i]);
                    lo[i] = rb_clip64(lo[i], mb, me);
                    hi[i] = rb_clip64(hi[i], lo[i], me);
                    m_from = rb_max64(m_from, lo[i]);
                    m_to = rb_min64(m_to, hi[i]);
                }
                if (!any) continue;
                if (m_from < m_to)
                    for (int64_t j0 = 0; j0 < d; j0 += RB_NR)
                        FN(rb_dt_tile)(a, dst, off, g, t0, m_from, m_to, j0);
                else
                    m_from = m_to = me; /* nothing common: all rows below are edges */
                /* queries that read only some rows of the tile */
                for (int i = 0; i < RB_MR; ++i) {
                    if (dst[i] == NULL) continue;
                    const int64_t t = t0 + i;
                    for (int64_t m = lo[i]; m < hi[i]; ++m) {
                        if (m >= m_from && m < m_to) continue;
                        const S *grad = (const S *)a->grad + g * a->grad_stride_g + m * a->grad_stride_m;
                        const S *q = (const S *)a->q + g * a->q_stride_g + m * a->q_stride_m;
                        FN(rb_axpy)(dst[i], S_TO_T(grad[a->q_offset + m - a->r_lo - t]), q, d);
                    }
                }
            }
        }
    }
    if (!a->clamp) return;
    /* clamped distances accumulate into the edge rows */
    const int own_first = begin <= 0 && 0 < end, own_last = begin <= a->rows - 1 && a->rows - 1 < end;
    if (!own_first && !own_last) return;
    for (int64_t g = 0; g < a->batch; ++g)
        for (int64_t m = 0; m < a->m; ++m) {
            const S *grad = (const S *)a->grad + g * a->grad_stride_g + m * a->grad_stride_m;
            const S *q = (const S *)a->q + g * a->q_stride_g + m * a->q_stride_m;
            const wavepe_relbias_row_split s = wavepe_relbias_split_row(a, a->q_offset + m);
            if (own_last) FN(rb_axpy)(acc + (a->rows - 1 - begin) * d, FN(rb_sum)(grad, s.n_tab_begin), q, d);
            if (own_first) /* begin == 0 */
                FN(rb_axpy)(acc, FN(rb_sum)(grad + s.n_tab_end, s.n_zero_begin - s.n_tab_end), q, d);
        }
}

void FN(wavepe_relbias_grad_table)(const wavepe_relbias_args *a, int64_t begin, int64_t end) {
    const int64_t d = a->d;
    if (begin >= end || d == 0) return;
#ifdef WP_STORAGE_HALF
    /* accumulate the rows in float32, round each element once at the end; without the scratch, the scalar way */
    T *acc = (T *)malloc(sizeof(T) * (size_t)(end - begin) * (size_t)d);
    if (acc == NULL) {
        RB_SCALAR(wavepe_relbias_grad_table)(a, begin, end);
        return;
    }
    FN(rb_dt_rows)(a, begin, end, acc);
    FN(rb_round)((S *)a->dtable + begin * d, acc, (end - begin) * d);
    free(acc);
#else
    FN(rb_dt_rows)(a, begin, end, (T *)a->dtable + begin * d);
#endif
}

#undef RB_NR
#undef RB_SCALAR
#undef RB_FMA_ROW
#undef RB_DQ_LOOP
#undef RB_DQ_STORE
#undef RB_DT_LOOP
#undef RB_DT_LOAD_ACC
#undef RB_DT_STORE_ACC
#include "simd_type_end.h"
