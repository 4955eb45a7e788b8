/* relbias_avx2_impl.h: the AVX2 kernels of relbias, written once for both
 * dtypes.  Included by relbias_avx2.c with RB_T (element), RB_V (vector),
 * RB_LANES and the RB_* vector operations defined; not a public header.
 *
 * Geometry.  A query at position p reads table row t = p - n - r_lo for key
 * n, so a run of keys is a run of table rows read backwards.  Table rows are
 * grouped in chunks of NR = 2 * LANES consecutive rows (16 for float32).
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

#define RB_NR (2 * RB_LANES)

/* ---- workspace -------------------------------------------------------------- */

/* Table rows [*t_begin, *t_end) that this call can read at all. */
static void RB_SUF(rb_needed_rows)(const wavepe_relbias_args *a, int64_t *t_begin, int64_t *t_end) {
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
static int64_t RB_SUF(rb_window)(const wavepe_relbias_args *a, int64_t *c0) {
    int64_t t_begin, t_end;
    RB_SUF(rb_needed_rows)(a, &t_begin, &t_end);
    *c0 = t_begin / RB_NR;
    return t_begin < t_end ? (t_end - 1) / RB_NR - *c0 + 1 : 0;
}

/* Layout: (jlo, jhi) int64 pairs per window chunk, then (64-byte aligned
 * offset) the panels: per chunk d x NR elements, panel[j][k] = T[c*NR + k][j]. */
static inline int64_t *RB_SUF(rb_ranges)(const wavepe_relbias_args *a) { return (int64_t *)a->workspace; }

static inline RB_T *RB_SUF(rb_panels)(const wavepe_relbias_args *a, int64_t count) {
    return (RB_T *)((char *)a->workspace + rb_align64(16 * count));
}

int64_t RB_CAT(RB_SUF(wavepe_relbias), _workspace_bytes)(const wavepe_relbias_args *a, unsigned kernels) {
    if (!(kernels & (WAVEPE_RELBIAS_FORWARD | WAVEPE_RELBIAS_GRAD_Q))) return 0;
    int64_t c0;
    const int64_t chunks = RB_SUF(rb_window)(a, &c0);
    int64_t total = rb_align64(16 * chunks), panels;
    if (kernels & WAVEPE_RELBIAS_FORWARD) {
        if (wavepe_mul_overflow(chunks, RB_NR * (int64_t)sizeof(RB_T), &panels) ||
            wavepe_mul_overflow(panels, a->d, &panels) || wavepe_add_overflow(total, panels, &total))
            return WAVEPE_E_OVERFLOW;
    }
    return total < 64 ? 64 : total; /* never 0: the kernels tell "no workspace" by NULL */
}

int64_t RB_CAT(RB_SUF(wavepe_relbias), _chunks)(const wavepe_relbias_args *a) {
    int64_t c0;
    return RB_SUF(rb_window)(a, &c0);
}

/* First and last nonzero column of a row, +1 for the last; (d, 0) if none.
 * NaN counts as nonzero (unordered compare). */
static void RB_SUF(rb_row_extent)(const RB_T *row, int64_t d, int64_t *first, int64_t *end) {
    int64_t j = 0;
    *first = d;
    *end = 0;
    for (; j + RB_LANES <= d; j += RB_LANES) {
        const int mask = RB_NONZERO_MASK(RB_LOAD(row + j));
        if (mask) {
            *first = j + __builtin_ctz((unsigned)mask);
            break;
        }
    }
    if (*first == d)
        for (; j < d; ++j)
            if (row[j] != 0 || row[j] != row[j]) {
                *first = j;
                break;
            }
    if (*first == d) return;
    j = d;
    for (; j - RB_LANES >= *first; j -= RB_LANES) {
        const int mask = RB_NONZERO_MASK(RB_LOAD(row + j - RB_LANES));
        if (mask) {
            *end = j - RB_LANES + 32 - __builtin_clz((unsigned)mask);
            return;
        }
    }
    for (; j > *first; --j)
        if (row[j - 1] != 0 || row[j - 1] != row[j - 1]) {
            *end = j;
            return;
        }
    *end = *first + 1;
}

void RB_CAT(RB_SUF(wavepe_relbias), _prepare)(const wavepe_relbias_args *a, unsigned kernels, int64_t begin,
                                              int64_t end) {
    int64_t c0;
    const int64_t count = RB_SUF(rb_window)(a, &c0);
    const RB_T *table = (const RB_T *)a->table;
    int64_t *ranges = RB_SUF(rb_ranges)(a);
    RB_T *panels = RB_SUF(rb_panels)(a, count);
    const int64_t d = a->d;
    for (int64_t k = rb_max64(begin, 0); k < end && k < count; ++k) {
        const int64_t t0 = (c0 + k) * RB_NR, rows_here = rb_min64(RB_NR, a->rows - t0);
        int64_t jlo = d, jhi = 0;
        for (int64_t i = 0; i < rows_here; ++i) {
            int64_t f, e;
            RB_SUF(rb_row_extent)(table + (t0 + i) * d, d, &f, &e);
            jlo = rb_min64(jlo, f);
            jhi = rb_max64(jhi, e);
        }
        if (jlo >= jhi) jlo = jhi = 0;
        ranges[2 * k] = jlo;
        ranges[2 * k + 1] = jhi;
        if (!(kernels & WAVEPE_RELBIAS_FORWARD)) continue;
        /* NR distances contiguous per head dimension; rows past the table are 0 */
        RB_T *panel = panels + k * d * RB_NR;
        for (int64_t j = jlo; j < jhi; ++j)
            for (int64_t i = 0; i < RB_NR; ++i) panel[j * RB_NR + i] = i < rows_here ? table[(t0 + i) * d + j] : 0;
    }
}

/* ---- small vector helpers ------------------------------------------------------ */

/* Fill p[0 .. count) with v.  stream: large outputs, where the fill (the causal
 * upper triangle, the distances beyond the support) is pure store bandwidth:
 * non-temporal stores skip reading every line before overwriting it. */
static inline void RB_SUF(rb_fill_stream)(RB_T *p, int64_t count, RB_T v, int stream) {
    const RB_V vv = RB_SET1(v);
    int64_t i = 0;
    if (stream && count >= 16 * RB_LANES) {
        for (; ((uintptr_t)(p + i) & 31) != 0; ++i) p[i] = v;
        for (; i + RB_LANES <= count; i += RB_LANES) RB_STREAM(p + i, vv);
        for (; i < count; ++i) p[i] = v;
        return;
    }
    for (; i + 2 * RB_LANES <= count; i += 2 * RB_LANES) {
        RB_STORE(p + i, vv);
        RB_STORE(p + i + RB_LANES, vv);
    }
    for (; i + RB_LANES <= count; i += RB_LANES) RB_STORE(p + i, vv);
    for (; i < count; ++i) p[i] = v;
}

static inline void RB_SUF(rb_fill)(RB_T *p, int64_t count, RB_T v) { RB_SUF(rb_fill_stream)(p, count, v, 0); }

static inline RB_T RB_SUF(rb_dot)(const RB_T *x, const RB_T *y, int64_t d) {
    RB_V s0 = RB_ZERO(), s1 = RB_ZERO();
    int64_t j = 0;
    for (; j + 2 * RB_LANES <= d; j += 2 * RB_LANES) {
        s0 = RB_FMA(RB_LOAD(x + j), RB_LOAD(y + j), s0);
        s1 = RB_FMA(RB_LOAD(x + j + RB_LANES), RB_LOAD(y + j + RB_LANES), s1);
    }
    for (; j + RB_LANES <= d; j += RB_LANES) s0 = RB_FMA(RB_LOAD(x + j), RB_LOAD(y + j), s0);
    RB_T s = RB_HSUM(RB_ADD(s0, s1));
    for (; j < d; ++j) s += x[j] * y[j];
    return s;
}

static inline RB_T RB_SUF(rb_sum)(const RB_T *x, int64_t count) {
    RB_V s0 = RB_ZERO(), s1 = RB_ZERO();
    int64_t i = 0;
    for (; i + 2 * RB_LANES <= count; i += 2 * RB_LANES) {
        s0 = RB_ADD(s0, RB_LOAD(x + i));
        s1 = RB_ADD(s1, RB_LOAD(x + i + RB_LANES));
    }
    RB_T s = RB_HSUM(RB_ADD(s0, s1));
    for (; i < count; ++i) s += x[i];
    return s;
}

/* y += alpha * x over d elements */
static inline void RB_SUF(rb_axpy)(RB_T *y, RB_T alpha, const RB_T *x, int64_t d) {
    const RB_V va = RB_SET1(alpha);
    int64_t j = 0;
    for (; j + RB_LANES <= d; j += RB_LANES) RB_STORE(y + j, RB_FMA(va, RB_LOAD(x + j), RB_LOAD(y + j)));
    for (; j < d; ++j) y[j] += alpha * x[j];
}

/* Table rows [*ta, *tb) that a query at p reads (empty: ta == tb == 0), and the
 * key split of the row (relbias.h). */
static inline wavepe_relbias_row_split RB_SUF(rb_row_rows)(const wavepe_relbias_args *a, int64_t p, int64_t *ta,
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
    const RB_T *q[RB_MR];
    RB_T *out[RB_MR];        /* NULL: row not stored (outside the range or the matrix) */
    int64_t key_of_t0[RB_MR]; /* p - r_lo: the key that reads table row 0 */
    int64_t ta[RB_MR], tb[RB_MR];
    int64_t c_lo, c_hi;      /* chunks the block's tiles cover */
} RB_SUF(rb_fblock);

static inline void RB_SUF(rb_fwd_store_row)(const RB_SUF(rb_fblock) *b, int i, int64_t t0, RB_V lo, RB_V hi) {
    RB_T *out = b->out[i];
    if (out == NULL) return;
    const int64_t ta = b->ta[i], tb = b->tb[i], key0 = b->key_of_t0[i];
    if (t0 >= ta && t0 + RB_NR <= tb) {
        RB_T *dst = out + (key0 - (t0 + RB_NR - 1));
        RB_STORE(dst, RB_REV(hi));
        RB_STORE(dst + RB_LANES, RB_REV(lo));
        return;
    }
    RB_T tmp[RB_NR];
    RB_STORE(tmp, lo);
    RB_STORE(tmp + RB_LANES, hi);
    const int64_t from = rb_max64(t0, ta), to = rb_min64(t0 + RB_NR, tb);
    for (int64_t t = from; t < to; ++t) out[key0 - t] = tmp[t - t0];
}

#define RB_FMA_ROW(qi, c0, c1)                                                                   \
    do {                                                                                         \
        const RB_V x_ = RB_BCAST((qi) + j);                                                      \
        c0 = RB_FMA(x_, b0, c0);                                                                 \
        c1 = RB_FMA(x_, b1, c1);                                                                 \
    } while (0)

static void RB_SUF(rb_fwd_tile)(const RB_SUF(rb_fblock) *b, int64_t c, const RB_T *panel, int64_t jlo,
                                int64_t jhi) {
    RB_V c00 = RB_ZERO(), c01 = RB_ZERO(), c10 = RB_ZERO(), c11 = RB_ZERO(), c20 = RB_ZERO(), c21 = RB_ZERO();
    RB_V c30 = RB_ZERO(), c31 = RB_ZERO(), c40 = RB_ZERO(), c41 = RB_ZERO(), c50 = RB_ZERO(), c51 = RB_ZERO();
    const RB_T *q0 = b->q[0], *q1 = b->q[1], *q2 = b->q[2], *q3 = b->q[3], *q4 = b->q[4], *q5 = b->q[5];
    const RB_T *pb = panel + jlo * RB_NR;
    for (int64_t j = jlo; j < jhi; ++j, pb += RB_NR) {
        const RB_V b0 = RB_LOAD(pb), b1 = RB_LOAD(pb + RB_LANES);
        RB_FMA_ROW(q0, c00, c01);
        RB_FMA_ROW(q1, c10, c11);
        RB_FMA_ROW(q2, c20, c21);
        RB_FMA_ROW(q3, c30, c31);
        RB_FMA_ROW(q4, c40, c41);
        RB_FMA_ROW(q5, c50, c51);
    }
    const int64_t t0 = c * RB_NR;
    RB_SUF(rb_fwd_store_row)(b, 0, t0, c00, c01);
    RB_SUF(rb_fwd_store_row)(b, 1, t0, c10, c11);
    RB_SUF(rb_fwd_store_row)(b, 2, t0, c20, c21);
    RB_SUF(rb_fwd_store_row)(b, 3, t0, c30, c31);
    RB_SUF(rb_fwd_store_row)(b, 4, t0, c40, c41);
    RB_SUF(rb_fwd_store_row)(b, 5, t0, c50, c51);
}

static void RB_SUF(rb_fwd_group)(const wavepe_relbias_args *a, const RB_SUF(rb_fblock) *blocks, int nb) {
    int64_t c_lo = INT64_MAX, c_hi = INT64_MIN;
    for (int k = 0; k < nb; ++k)
        if (blocks[k].c_lo < blocks[k].c_hi) {
            c_lo = rb_min64(c_lo, blocks[k].c_lo);
            c_hi = rb_max64(c_hi, blocks[k].c_hi);
        }
    int64_t c0;
    const int64_t count = RB_SUF(rb_window)(a, &c0);
    const int64_t *ranges = RB_SUF(rb_ranges)(a);
    const RB_T *panels = RB_SUF(rb_panels)(a, count);
    for (int64_t c = c_lo; c < c_hi; ++c) {
        const RB_T *panel = panels + (c - c0) * a->d * RB_NR;
        const int64_t jlo = ranges[2 * (c - c0)], jhi = ranges[2 * (c - c0) + 1];
        for (int k = 0; k < nb; ++k)
            if (c >= blocks[k].c_lo && c < blocks[k].c_hi) RB_SUF(rb_fwd_tile)(&blocks[k], c, panel, jlo, jhi);
    }
}

void RB_SUF(wavepe_relbias)(const wavepe_relbias_args *a, int64_t begin, int64_t end) {
    if (a->m == 0 || a->n == 0) return;
    const RB_T *table = (const RB_T *)a->table;
    /* outputs well beyond the caches: stream the fills (see rb_fill_stream) */
    const int stream = a->batch * a->m * a->n * (int64_t)sizeof(RB_T) >= ((int64_t)32 << 20);
    RB_SUF(rb_fblock) blocks[RB_GROUP];
    int nb = 0;
    rb_cursor cur;
    rb_rows rows;
    rb_cursor_init(&cur, begin, end);
    while (rb_next_block(a, &cur, &rows)) {
        RB_SUF(rb_fblock) *b = &blocks[nb];
        b->c_lo = INT64_MAX;
        b->c_hi = INT64_MIN;
        /* rows not stored compute on row 0's q (a valid row), results dropped */
        const RB_T *q_any = (const RB_T *)a->q + rows.g[0] * a->q_stride_g + rows.m[0] * a->q_stride_m;
        for (int i = 0; i < RB_MR; ++i) {
            b->q[i] = q_any;
            b->out[i] = NULL;
            b->ta[i] = b->tb[i] = b->key_of_t0[i] = 0;
            if (!rows.stored[i]) continue;
            const int64_t g = rows.g[i], m = rows.m[i], p = a->q_offset + m;
            const RB_T *q = (const RB_T *)a->q + g * a->q_stride_g + m * a->q_stride_m;
            RB_T *out = (RB_T *)a->bias + g * a->bias_stride_g + m * a->bias_stride_m;
            b->q[i] = q;
            b->out[i] = out;
            b->key_of_t0[i] = p - a->r_lo;
            const wavepe_relbias_row_split s = RB_SUF(rb_row_rows)(a, p, &b->ta[i], &b->tb[i]);
            /* the keys outside the table segment: fills */
            const RB_T beyond = a->clamp ? RB_SUF(rb_dot)(q, table + (a->rows - 1) * a->d, a->d) : 0;
            const RB_T before = a->clamp ? RB_SUF(rb_dot)(q, table, a->d) : 0;
            RB_SUF(rb_fill_stream)(out, s.n_tab_begin, beyond, stream);
            RB_SUF(rb_fill_stream)(out + s.n_tab_end, s.n_zero_begin - s.n_tab_end, before, stream);
            RB_SUF(rb_fill_stream)(out + s.n_zero_begin, a->n - s.n_zero_begin, 0, stream);
            if (b->ta[i] < b->tb[i]) {
                b->c_lo = rb_min64(b->c_lo, b->ta[i] / RB_NR);
                b->c_hi = rb_max64(b->c_hi, (b->tb[i] - 1) / RB_NR + 1);
            }
        }
        if (b->c_lo < b->c_hi && ++nb == RB_GROUP) {
            RB_SUF(rb_fwd_group)(a, blocks, nb);
            nb = 0;
        }
    }
    if (nb) RB_SUF(rb_fwd_group)(a, blocks, nb);
    if (stream) _mm_sfence(); /* streamed stores visible before the caller's synchronisation */
}

/* ---- dq -------------------------------------------------------------------------- */

typedef struct {
    const RB_T *grad[RB_MR];  /* grad row; rows past the matrix alias row 0 */
    RB_T *dq[RB_MR];          /* NULL: row not stored */
    int64_t key_of_t0[RB_MR];
    int64_t ta[RB_MR], tb[RB_MR];
    int64_t ia, ib;           /* table rows every row of the block reads (may be empty) */
} RB_SUF(rb_qblock);

/* acc += skew(grad)[rows of b, t] * T[t, j0 .. j0 + NR) over t in [t_from, t_to):
 * g_i points at grad_i of the key reading t_from; later rows are read backwards */
#define RB_DQ_LOOP(LOAD0, LOAD1)                                                                 \
    for (int64_t k = 0; k < t_to - t_from; ++k) {                                                \
        const RB_T *tp = tbase + k * d;                                                          \
        const RB_V b0 = LOAD0, b1 = LOAD1;                                                       \
        RB_V x_;                                                                                 \
        x_ = RB_BCAST(g0 - k); c00 = RB_FMA(x_, b0, c00); c01 = RB_FMA(x_, b1, c01);            \
        x_ = RB_BCAST(g1 - k); c10 = RB_FMA(x_, b0, c10); c11 = RB_FMA(x_, b1, c11);            \
        x_ = RB_BCAST(g2 - k); c20 = RB_FMA(x_, b0, c20); c21 = RB_FMA(x_, b1, c21);            \
        x_ = RB_BCAST(g3 - k); c30 = RB_FMA(x_, b0, c30); c31 = RB_FMA(x_, b1, c31);            \
        x_ = RB_BCAST(g4 - k); c40 = RB_FMA(x_, b0, c40); c41 = RB_FMA(x_, b1, c41);            \
        x_ = RB_BCAST(g5 - k); c50 = RB_FMA(x_, b0, c50); c51 = RB_FMA(x_, b1, c51);            \
    }

#define RB_DQ_STORE(i, c0, c1)                                                                   \
    do {                                                                                         \
        RB_T *dst_ = b->dq[i];                                                                   \
        if (dst_ != NULL) {                                                                      \
            if (full) {                                                                          \
                RB_STORE(dst_ + j0, c0);                                                         \
                RB_STORE(dst_ + j0 + RB_LANES, c1);                                              \
            } else {                                                                             \
                RB_MASKSTORE(dst_ + j0, mask0, c0);                                              \
                RB_MASKSTORE(dst_ + j0 + RB_LANES, mask1, c1);                                   \
            }                                                                                    \
        }                                                                                        \
    } while (0)

static void RB_SUF(rb_dq_tile)(const wavepe_relbias_args *a, const RB_SUF(rb_qblock) *b, int64_t j0) {
    const int64_t d = a->d, width = rb_min64(RB_NR, d - j0);
    const int full = width == RB_NR;
    const __m256i mask0 = RB_MASK(rb_min64(width, RB_LANES)), mask1 = RB_MASK(rb_max64(width - RB_LANES, 0));
    int64_t c0;
    RB_SUF(rb_window)(a, &c0);
    const int64_t *ranges = RB_SUF(rb_ranges)(a); /* indexed by chunk - c0 */
    const RB_T *table = (const RB_T *)a->table;
    RB_V c00 = RB_ZERO(), c01 = RB_ZERO(), c10 = RB_ZERO(), c11 = RB_ZERO(), c20 = RB_ZERO(), c21 = RB_ZERO();
    RB_V c30 = RB_ZERO(), c31 = RB_ZERO(), c40 = RB_ZERO(), c41 = RB_ZERO(), c50 = RB_ZERO(), c51 = RB_ZERO();
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
        const RB_T *tbase = table + t_from * d + j0;
        const RB_T *g0 = b->grad[0] + (b->key_of_t0[0] - t_from), *g1 = b->grad[1] + (b->key_of_t0[1] - t_from);
        const RB_T *g2 = b->grad[2] + (b->key_of_t0[2] - t_from), *g3 = b->grad[3] + (b->key_of_t0[3] - t_from);
        const RB_T *g4 = b->grad[4] + (b->key_of_t0[4] - t_from), *g5 = b->grad[5] + (b->key_of_t0[5] - t_from);
        if (full) {
            RB_DQ_LOOP(RB_LOAD(tp), RB_LOAD(tp + RB_LANES))
        } else {
            RB_DQ_LOOP(RB_MASKLOAD(tp, mask0), RB_MASKLOAD(tp + RB_LANES, mask1))
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
static void RB_SUF(rb_dq_rest)(const wavepe_relbias_args *a, const RB_SUF(rb_qblock) *b) {
    const int64_t d = a->d;
    const RB_T *table = (const RB_T *)a->table;
    const int common = b->ia < b->ib;
    for (int i = 0; i < RB_MR; ++i) {
        RB_T *dq = b->dq[i];
        if (dq == NULL) continue;
        const RB_T *grad = b->grad[i];
        const int64_t key0 = b->key_of_t0[i];
        if (!common) RB_SUF(rb_fill)(dq, d, 0);
        const int64_t ta = b->ta[i], tb = b->tb[i];
        const int64_t mid_a = common ? b->ia : tb, mid_b = common ? b->ib : tb;
        for (int64_t t = ta; t < mid_a; ++t) RB_SUF(rb_axpy)(dq, grad[key0 - t], table + t * d, d);
        for (int64_t t = rb_max64(mid_b, ta); t < tb; ++t) RB_SUF(rb_axpy)(dq, grad[key0 - t], table + t * d, d);
        if (a->clamp) {
            const wavepe_relbias_row_split s = wavepe_relbias_split_row(a, b->key_of_t0[i] + a->r_lo);
            const RB_T beyond = RB_SUF(rb_sum)(grad, s.n_tab_begin);
            const RB_T before = RB_SUF(rb_sum)(grad + s.n_tab_end, s.n_zero_begin - s.n_tab_end);
            RB_SUF(rb_axpy)(dq, beyond, table + (a->rows - 1) * d, d);
            RB_SUF(rb_axpy)(dq, before, table, d);
        }
    }
}

static void RB_SUF(rb_dq_group)(const wavepe_relbias_args *a, const RB_SUF(rb_qblock) *blocks, int nb) {
    /* head-dimension tiles outermost: the table columns of one tile stay in
     * cache while every block of the group passes over them */
    for (int64_t j0 = 0; j0 < a->d; j0 += RB_NR)
        for (int k = 0; k < nb; ++k)
            if (blocks[k].ia < blocks[k].ib) RB_SUF(rb_dq_tile)(a, &blocks[k], j0);
    for (int k = 0; k < nb; ++k) RB_SUF(rb_dq_rest)(a, &blocks[k]);
}

void RB_SUF(wavepe_relbias_grad_q)(const wavepe_relbias_args *a, int64_t begin, int64_t end) {
    if (a->m == 0 || a->d == 0) return;
    RB_SUF(rb_qblock) blocks[RB_GROUP];
    int nb = 0;
    rb_cursor cur;
    rb_rows rows;
    rb_cursor_init(&cur, begin, end);
    while (rb_next_block(a, &cur, &rows)) {
        RB_SUF(rb_qblock) *b = &blocks[nb];
        b->ia = INT64_MIN;
        b->ib = INT64_MAX;
        int common = 1;
        for (int i = 0; i < RB_MR; ++i) {
            /* every row of the block, stored or not, shapes the common table rows,
             * so that sums do not depend on how callers split the rows */
            const int64_t g = rows.g[i], m = rows.m[i], p = a->q_offset + m;
            b->grad[i] = (const RB_T *)a->grad + g * a->grad_stride_g + m * a->grad_stride_m;
            b->key_of_t0[i] = p - a->r_lo;
            RB_SUF(rb_row_rows)(a, p, &b->ta[i], &b->tb[i]);
            b->dq[i] = rows.stored[i] ? (RB_T *)a->dq + g * a->dq_stride_g + m * a->dq_stride_m : NULL;
            if (b->ta[i] >= b->tb[i]) common = 0;
            b->ia = rb_max64(b->ia, b->ta[i]);
            b->ib = rb_min64(b->ib, b->tb[i]);
        }
        if (!common || b->ia >= b->ib) b->ia = b->ib = 0;
        if (++nb == RB_GROUP) {
            RB_SUF(rb_dq_group)(a, blocks, nb);
            nb = 0;
        }
    }
    if (nb) RB_SUF(rb_dq_group)(a, blocks, nb);
}

/* ---- dT ---------------------------------------------------------------------------- */

/* Query rows m (of one batch entry) whose key for table row t exists:
 * 0 <= q_offset + m - r_lo - t < N, and r = r_lo + t >= 0 with causal. */
static inline void RB_SUF(rb_rows_reading)(const wavepe_relbias_args *a, int64_t t, int64_t *m_from,
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
        const RB_T *gp = gbase + k * g_step, *qp = qbase + k * q_step;                           \
        const RB_V b0 = LOAD0, b1 = LOAD1;                                                       \
        RB_V x_;                                                                                 \
        x_ = RB_BCAST(gp - o0); c00 = RB_FMA(x_, b0, c00); c01 = RB_FMA(x_, b1, c01);           \
        x_ = RB_BCAST(gp - o1); c10 = RB_FMA(x_, b0, c10); c11 = RB_FMA(x_, b1, c11);           \
        x_ = RB_BCAST(gp - o2); c20 = RB_FMA(x_, b0, c20); c21 = RB_FMA(x_, b1, c21);           \
        x_ = RB_BCAST(gp - o3); c30 = RB_FMA(x_, b0, c30); c31 = RB_FMA(x_, b1, c31);           \
        x_ = RB_BCAST(gp - o4); c40 = RB_FMA(x_, b0, c40); c41 = RB_FMA(x_, b1, c41);           \
        x_ = RB_BCAST(gp - o5); c50 = RB_FMA(x_, b0, c50); c51 = RB_FMA(x_, b1, c51);           \
    }

#define RB_DT_LOAD_ACC(i, c0, c1)                                                                \
    do {                                                                                         \
        if (dst[i] != NULL) {                                                                    \
            c0 = full ? RB_LOAD(dst[i] + j0) : RB_MASKLOAD(dst[i] + j0, mask0);                  \
            c1 = full ? RB_LOAD(dst[i] + j0 + RB_LANES) : RB_MASKLOAD(dst[i] + j0 + RB_LANES, mask1); \
        }                                                                                        \
    } while (0)

#define RB_DT_STORE_ACC(i, c0, c1)                                                               \
    do {                                                                                         \
        if (dst[i] != NULL) {                                                                    \
            if (full) {                                                                          \
                RB_STORE(dst[i] + j0, c0);                                                       \
                RB_STORE(dst[i] + j0 + RB_LANES, c1);                                            \
            } else {                                                                             \
                RB_MASKSTORE(dst[i] + j0, mask0, c0);                                            \
                RB_MASKSTORE(dst[i] + j0 + RB_LANES, mask1, c1);                                 \
            }                                                                                    \
        }                                                                                        \
    } while (0)

/* dT rows t0 .. t0+5 (those in dst[] not NULL) += sum over m in [m_from, m_to)
 * of grad[g, m, key(m, t0 + i)] * q[g, m, j0 .. j0 + NR).  off[i] = i for the
 * rows that exist, 0 (an alias of row t0) for the others. */
static void RB_SUF(rb_dt_tile)(const wavepe_relbias_args *a, RB_T *const dst[RB_MR], const int64_t off[RB_MR],
                               int64_t g, int64_t t0, int64_t m_from, int64_t m_to, int64_t j0) {
    const int64_t width = rb_min64(RB_NR, a->d - j0);
    const int full = width == RB_NR;
    const __m256i mask0 = RB_MASK(rb_min64(width, RB_LANES)), mask1 = RB_MASK(rb_max64(width - RB_LANES, 0));
    const int64_t o0 = off[0], o1 = off[1], o2 = off[2], o3 = off[3], o4 = off[4], o5 = off[5];
    /* gbase: grad[g, m_from, key(m_from, t0)]; the key grows with m, so the step is stride + 1 */
    const RB_T *gbase = (const RB_T *)a->grad + g * a->grad_stride_g + m_from * a->grad_stride_m +
                        (a->q_offset + m_from - a->r_lo - t0);
    const RB_T *qbase = (const RB_T *)a->q + g * a->q_stride_g + m_from * a->q_stride_m + j0;
    const int64_t g_step = a->grad_stride_m + 1, q_step = a->q_stride_m;
    RB_V c00 = RB_ZERO(), c01 = RB_ZERO(), c10 = RB_ZERO(), c11 = RB_ZERO(), c20 = RB_ZERO(), c21 = RB_ZERO();
    RB_V c30 = RB_ZERO(), c31 = RB_ZERO(), c40 = RB_ZERO(), c41 = RB_ZERO(), c50 = RB_ZERO(), c51 = RB_ZERO();
    RB_DT_LOAD_ACC(0, c00, c01);
    RB_DT_LOAD_ACC(1, c10, c11);
    RB_DT_LOAD_ACC(2, c20, c21);
    RB_DT_LOAD_ACC(3, c30, c31);
    RB_DT_LOAD_ACC(4, c40, c41);
    RB_DT_LOAD_ACC(5, c50, c51);
    if (full) {
        RB_DT_LOOP(RB_LOAD(qp), RB_LOAD(qp + RB_LANES))
    } else {
        RB_DT_LOOP(RB_MASKLOAD(qp, mask0), RB_MASKLOAD(qp + RB_LANES, mask1))
    }
    RB_DT_STORE_ACC(0, c00, c01);
    RB_DT_STORE_ACC(1, c10, c11);
    RB_DT_STORE_ACC(2, c20, c21);
    RB_DT_STORE_ACC(3, c30, c31);
    RB_DT_STORE_ACC(4, c40, c41);
    RB_DT_STORE_ACC(5, c50, c51);
}

void RB_SUF(wavepe_relbias_grad_table)(const wavepe_relbias_args *a, int64_t begin, int64_t end) {
    const int64_t d = a->d;
    RB_T *dtable = (RB_T *)a->dtable;
    if (begin >= end || d == 0) return;
    RB_SUF(rb_fill)(dtable + begin * d, (end - begin) * d, 0);
    if (a->batch == 0 || a->m == 0 || a->n == 0) return;
    /* query rows per block: q of one block (~64 KiB) stays in L2 while every
     * tile of [begin, end) passes over it */
    const int64_t kb = rb_max64(16, 65536 / (d * (int64_t)sizeof(RB_T)));
    const int64_t tile_first = begin / RB_MR * RB_MR;
    for (int64_t g = 0; g < a->batch; ++g) {
        for (int64_t mb = 0; mb < a->m; mb += kb) {
            const int64_t me = rb_min64(mb + kb, a->m);
            /* table rows some query of [mb, me) reads: t in (p - r_lo - N, p - r_lo] */
            const int64_t t_lo = a->q_offset + mb - a->r_lo - a->n + 1, t_hi = a->q_offset + me - 1 - a->r_lo;
            const int64_t from = rb_max64(tile_first, (rb_max64(t_lo, begin) / RB_MR) * RB_MR);
            for (int64_t t0 = from; t0 < end && t0 <= t_hi; t0 += RB_MR) {
                RB_T *dst[RB_MR];
                int64_t off[RB_MR], lo[RB_MR], hi[RB_MR];
                int64_t m_from = mb, m_to = me;
                int any = 0;
                for (int i = 0; i < RB_MR; ++i) {
                    const int64_t t = t0 + i;
                    const int exists = t < a->rows;
                    off[i] = exists ? i : 0;
                    dst[i] = exists && t >= begin && t < end ? dtable + t * d : NULL;
                    any |= dst[i] != NULL;
                    RB_SUF(rb_rows_reading)(a, exists ? t : t0, &lo[i], &hi[i]);
                    lo[i] = rb_clip64(lo[i], mb, me);
                    hi[i] = rb_clip64(hi[i], lo[i], me);
                    m_from = rb_max64(m_from, lo[i]);
                    m_to = rb_min64(m_to, hi[i]);
                }
                if (!any) continue;
                if (m_from < m_to)
                    for (int64_t j0 = 0; j0 < d; j0 += RB_NR)
                        RB_SUF(rb_dt_tile)(a, dst, off, g, t0, m_from, m_to, j0);
                else
                    m_from = m_to = me; /* nothing common: all rows below are edges */
                /* queries that read only some rows of the tile */
                for (int i = 0; i < RB_MR; ++i) {
                    if (dst[i] == NULL) continue;
                    const int64_t t = t0 + i;
                    for (int64_t m = lo[i]; m < hi[i]; ++m) {
                        if (m >= m_from && m < m_to) continue;
                        const RB_T *grad = (const RB_T *)a->grad + g * a->grad_stride_g + m * a->grad_stride_m;
                        const RB_T *q = (const RB_T *)a->q + g * a->q_stride_g + m * a->q_stride_m;
                        RB_SUF(rb_axpy)(dst[i], grad[a->q_offset + m - a->r_lo - t], q, d);
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
            const RB_T *grad = (const RB_T *)a->grad + g * a->grad_stride_g + m * a->grad_stride_m;
            const RB_T *q = (const RB_T *)a->q + g * a->q_stride_g + m * a->q_stride_m;
            const wavepe_relbias_row_split s = wavepe_relbias_split_row(a, a->q_offset + m);
            if (own_last) RB_SUF(rb_axpy)(dtable + (a->rows - 1) * d, RB_SUF(rb_sum)(grad, s.n_tab_begin), q, d);
            if (own_first)
                RB_SUF(rb_axpy)(dtable, RB_SUF(rb_sum)(grad + s.n_tab_end, s.n_zero_begin - s.n_tab_end), q, d);
        }
}

#undef RB_NR
#undef RB_FMA_ROW
#undef RB_DQ_LOOP
#undef RB_DQ_STORE
#undef RB_DT_LOOP
#undef RB_DT_LOAD_ACC
#undef RB_DT_STORE_ACC
