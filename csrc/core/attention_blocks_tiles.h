/* attention_blocks_tiles.h: the tile engine of the CPU attention (attention_engine.h's block operations):
 * the amx ISA's bf16 / fp16 kernels multiply whole blocks on tiles (tiles.h: AMX, or its emulation).  Part
 * of attention_simd.h's template, included once per instantiation that has tiles (ATTN_BLOCKS_FILE).
 *
 * The products of whole blocks on tiles (tiles.h) -- the forward's
 * scores S = Q K^T, bias windows G = Q T_win^T and O += P V, the backward's recomputed S and dP = dO V^T
 * -- with the operands packed once per block (tiles_* below); the online softmax and the masks are the
 * vector kernels', and so are the backward's accumulating products except for bf16 (ATTN_TILES_BWD).
 * P is rounded to the input type for P V (as mk_dpv rounds it to bf16: an output moves by at most
 * 2^-8 max|v| for bf16, 2^-11 for fp16; ATTN_TILE_P_SCALE).  An entry of S, G or dP is one row's
 * product with one key's: what a row cannot see is selected away after, whatever it holds.  P V is
 * not: it sums over the keys, so a NaN or inf in a value a row cannot see would reach it (0 * inf)
 * where the vector kernels' row ranges never let it; a key block with a non-finite unmasked value
 * runs the vector kernels (dQ += dS K likewise for a non-finite key).  Whether the plan's type
 * has tiles at all: p->tiles (attention.c). */
#include "tiles.h"
#if defined(WP_TYPE_BF16)
#define ATTN_TILE_TYPE WAVEPE_TILE_BF16
#define ATTN_TILE_P_SCALE 1.0f
#define ATTN_TILE_P_STORE(p, v) vf32_storeu_bf16_rne(p, v) /* P: its NaN bits unread */
#define ATTN_TILE_P_STORE2(p, lo, hi) vf32x2_storeu_bf16_rne(p, lo, hi) /* 2 VL weights, lo's first */
/* log2 of the largest weight group_softmax's one pass lets through (weights taken against a row's running
 * maximum, which a later block's scores may pass): 16, so O = sum p v (float32) overflows only for values
 * within 2^-4 of float32's range more readily than with weights <= 1 */
#define ATTN_TILE_P_ROOM 4
/* bf16's backward runs its accumulating products on tiles too (tiles_block_backward): dV^T += dO^T P,
 * dK^T += Q^T dS, dQ += dS K, and a table's dQ += dG T_win and dT_win^T += Q^T dG (tiles_table_backward),
 * with P and dS rounded to bf16 (relative error <= 2^-8, as GPU kernels round them; float32
 * accumulation).  fp16's dS would have to be scaled per block to stay normal
 * float16 (its range is unknown before the block's dP): fp16 keeps those products on the vector kernels. */
#define ATTN_TILES_BWD
#else
#define ATTN_TILE_TYPE WAVEPE_TILE_F16
/* fp16's P is rounded scaled by 2^14 (O scaled to match around the product: powers of two, exact), so
 * that weights down to 2^-28 stay normal float16: the tiles read denormals as zero, which would drop
 * every weight below 2^-14 -- all of them, where attention is spread over tens of thousands of keys */
#define ATTN_TILE_P_SCALE 16384.0f
#define ATTN_TILE_P_STORE(p, v) S_STOREU(p, V(mul)(v, V(set1)(ATTN_TILE_P_SCALE)))
#define ATTN_TILE_P_STORE2(p, lo, hi) (ATTN_TILE_P_STORE(p, lo), ATTN_TILE_P_STORE((p) + VL, hi))
#define ATTN_TILE_P_ROOM 1 /* weights <= 2: times the scale 2^15, below float16's largest (65504) */
#endif

static inline int FN(half_finite)(uint16_t h) {
#if defined(WP_TYPE_BF16)
    return (h & 0x7F80u) != 0x7F80u;
#else
    return (h & 0x7C00u) != 0x7C00u;
#endif
}

static inline int64_t FN(up16)(int64_t x) { return (x + 15) / 16 * 16; }

/* Rows [0, n) (stride rs, d elements) as an A operand: dst[i * lda + c], zero past d and for rows n .. n16.
 * (A row's products reach only that row's results: a NaN or inf in it needs no care.) */
static void FN(tiles_rows)(uint16_t *dst, int64_t lda, const S *src, int64_t rs, int64_t n, int64_t n16, int64_t d) {
    for (int64_t i = 0; i < n16; ++i) {
        uint16_t *o = dst + i * lda;
        if (i >= n) {
            memset(o, 0, sizeof(uint16_t) * (size_t)lda);
            continue;
        }
        memcpy(o, src + i * rs, sizeof(uint16_t) * (size_t)d);
        memset(o + d, 0, sizeof(uint16_t) * (size_t)(lda - d));
    }
}

/* norms[t] = the largest L1 norm of rows [16 t, 16 t + 16) of a (n16 rows of lda half elements, lda a
 * multiple of VL): NaN where a row holds a NaN, inf where one holds an inf and no NaN. */
static void FN(tiles_row_norms)(float *norms, const uint16_t *a, int64_t lda, int64_t n16) {
    for (int64_t t = 0; t < n16 / 16; ++t) {
        float top = 0.0f;
        for (int64_t i = 16 * t; i < 16 * t + 16; ++i) {
            const S *row = (const S *)(const void *)(a + i * lda);
            VT acc = V(zero)();
            for (int64_t c = 0; c < lda; c += VL) acc = V(add)(acc, V(abs)(S_LOADU(row + c)));
            const float n = (float)V(hsum)(acc);
            top = n > top || n != n ? n : top;
        }
        norms[t] = top;
    }
}

/* Rows [0, nk) of a row-major half matrix (stride ks, d elements) transposed in pairs, the B operand of a
 * product against them, strip after strip: dst[TILES_AT_T(k2, j, k2pad)] (tiles.h's wavepe_tile_b_index,
 * ldb 16, ldbs 16 k2pad) = (row j's elements 2 k2, 2 k2 + 1), zero past d (k2 < k2pad) and for rows nk ..
 * ncols. */
#define TILES_AT_T(k2, j, k2pad) wavepe_tile_b_index(k2, j, 16, 16 * (k2pad))
static void FN(tiles_pairs_t)(uint32_t *dst, const S *src, int64_t ks, int64_t nk, int64_t ncols, int64_t d,
                              int64_t k2pad) {
    /* A pair is 32 bits: with an even row stride the rows are rows of pairs, and whole blocks of them turn by
     * the vocabulary's float transposes (moves of bits, no arithmetic: any half value passes unchanged); the
     * element-by-element loop packed each key block once per query block and took a fifth of the tile
     * forward's vector time (perf, Zen 4) */
    const int64_t jv = ks % 2 == 0 ? nk / WP_TB_F32 * WP_TB_F32 : 0, full = d / 2 / WP_TB_F32 * WP_TB_F32;
    for (int64_t j0 = 0; j0 < jv; j0 += WP_TB_F32)
        for (int64_t k2 = 0; k2 < full; k2 += WP_TB_F32)
            vf32_transpose((const float *)(const void *)(src + j0 * ks) + k2, ks / 2,
                           (float *)(void *)(dst + TILES_AT_T(k2, j0, k2pad)), 16); /* (j0 % 16 + 8 <= 16) */
    for (int64_t j = 0; j < ncols; ++j) {
        const S *row = src + j * ks;
        for (int64_t k2 = j < jv ? full : 0; k2 < k2pad; ++k2) {
            const int64_t c = 2 * k2;
            uint32_t pair = 0;
            if (j < nk && c < d) pair = (uint32_t)row[c] | (c + 1 < d ? (uint32_t)row[c + 1] << 16 : 0u);
            dst[TILES_AT_T(k2, j, k2pad)] = pair;
        }
    }
}

/* Value rows [0, nk) (stride vs, d elements) in pairs along the keys, the B operand of P V, strip after
 * strip: dst[wavepe_tile_b_index(j2, c, 16, ATTN_TPS)] (tiles.h) = (row 2 j2's element c, row 2 j2 + 1's),
 * zero past d (c < ldd, a multiple of 16), past nk (j2 < npairs <= ATTN_BNMAX / 2) and for keys whose
 * additive mask kpm is not 0 (kpm may be NULL).  Returns whether every other element is finite. */
#define ATTN_TPS (ATTN_BNMAX / 2 * 16)
static int FN(tiles_pairs_v)(uint32_t *dst, int64_t ldd, const S *src, int64_t vs, int64_t nk, int64_t npairs,
                             int64_t d, const T *kpm) {
    static const uint16_t zero[32] = {0};
#if defined(WP_TYPE_BF16)
    const uint16_t expo = 0x7F80;
#else
    const uint16_t expo = 0x7C00;
#endif
    int finite = 1;
    const int64_t d32 = d / 32 * 32; /* columns interleaved 32 at a time (vbf16x2_interleave: bits only) */
    for (int64_t j2 = 0; j2 < npairs; ++j2) {
        const S *r[2];
        for (int i = 0; i < 2; ++i) {
            const int64_t j = 2 * j2 + i;
            r[i] = j < nk && (kpm == NULL || kpm[j] == (T)0) ? src + j * vs : NULL;
        }
        for (int64_t c0 = 0; c0 < d32; c0 += 32) {
            const uint16_t *x0 = r[0] != NULL ? (const uint16_t *)r[0] + c0 : zero;
            const uint16_t *x1 = r[1] != NULL ? (const uint16_t *)r[1] + c0 : zero;
            finite &= vhalf32_finite(x0, expo) & vhalf32_finite(x1, expo);
            vbf16x2_interleave(dst + wavepe_tile_b_index(j2, c0, 16, ATTN_TPS),
                               dst + wavepe_tile_b_index(j2, c0 + 16, 16, ATTN_TPS), x0, x1);
        }
        for (int64_t c = d32; c < ldd; ++c) {
            const uint16_t a = r[0] != NULL && c < d ? r[0][c] : 0, b = r[1] != NULL && c < d ? r[1][c] : 0;
            finite &= FN(half_finite)(a) & FN(half_finite)(b);
            dst[wavepe_tile_b_index(j2, c, 16, ATTN_TPS)] = (uint32_t)a | (uint32_t)b << 16;
        }
    }
    return finite;
}

/* out = A B for block rows [0, nrows) of A (w->tlda per row) and the key block's transposed pairs b (keys
 * in columns): S (a = w->ta, b = w->tk, out = w->tsc) or the backward's dP (w->tdo, w->tv, w->tdp).  Row i
 * sees keys [jl[i], jv[i]) of kb (jv = 0: none): 32 rows at a time, over the columns some see.  With S, the
 * rows' bias windows are left to tiles_windows, tile by tile as the rows' groups need them. */
static void FN(tiles_scores)(const FN(work) * w, int64_t nrows, const int64_t *jl, const int64_t *jv,
                             const uint16_t *a, const uint32_t *b, float *out) {
    for (int64_t r0 = 0; r0 < nrows; r0 += 32) {
        const int64_t r1 = r0 + 32 < nrows ? r0 + 32 : nrows;
        int64_t lo = INT64_MAX, hi = 0;
        for (int64_t i = r0; i < r1; ++i)
            if (jv[i] > 0) {
                lo = jl[i] < lo ? jl[i] : lo;
                hi = jv[i] > hi ? jv[i] : hi;
            }
        if (hi == 0) continue;
        const int64_t c0 = lo / 16 * 16, c1 = FN(up16)(hi);
        wavepe_tile_gemm(ATTN_TILE_TYPE, FN(up16)(r1 - r0), c1 - c0, w->tk2, a + r0 * w->tlda, w->tlda,
                         b + TILES_AT_T(0, c0, w->tk2), 16, 16 * w->tk2, out + r0 * ATTN_TSLD + c0, ATTN_TSLD, 0);
    }
}

/* Row i of the block's bias windows in w->tg: two 16-row tiles, in turn (a tile's window is computed just
 * before the groups that read it, into lines the group before last read: from L1, where a window for every
 * row of the block, written a tile after another and read later, came from L2 -- the wavelet forward
 * 0.89-0.98x the time on an Emerald Rapids). */
static inline int64_t FN(window_row)(int64_t i) { return i / 16 % 2 * 16 + i % 16; }

/* The bias windows of block rows [i0, i1) where the plan has a table (rows of at most two 16-row tiles:
 * one group's), unless computed already in this key block: G = A T_win^T (A = w->ta, the rows of
 * tiles_scores' S) into w->tg (window_row), each tile's first packed table row into w->tgp.  Row i, at
 * position pos[i], sees keys [., jv[i]) of kb; nrows rows in all.  Tiles are computed in increasing order:
 * one before the last computed is not recomputed (its rows' groups are done); a key block starts with
 * w->tg_next = 0. */
static void FN(tiles_windows)(FN(work) * w, const FN(kblock) * kb, int64_t nrows, const int64_t *pos,
                              const int64_t *jv, int64_t i0, int64_t i1) {
    const uint16_t *a = w->ta;
    const wavepe_attention_plan *p = w->p;
    if (p->bias != ATTN_BIAS_TABLE || p->prows == 0) return;
    const int64_t t_lo = i0 / 16 > w->tg_next ? i0 / 16 : w->tg_next, t_hi = (i1 - 1) / 16 + 1;
    for (int64_t tile = t_lo; tile < t_hi; ++tile) {
        const int64_t r0 = tile * 16, r1 = r0 + 16 < nrows ? r0 + 16 : nrows;
        int64_t pmin = INT64_MAX, pmax = INT64_MIN, hi = 0;
        for (int64_t i = r0; i < r1; ++i)
            if (jv[i] > 0) {
                pmin = pos[i] < pmin ? pos[i] : pmin;
                pmax = pos[i] > pmax ? pos[i] : pmax;
                hi = jv[i] > hi ? jv[i] : hi;
            }
        w->tgp[tile] = INT64_MIN; /* no bias */
        if (hi == 0) continue;
        const int64_t first = p->pr_hi - pmax + kb->n0, last = p->pr_hi - pmin + kb->n0 + hi - 1;
        int64_t c_lo = first < 0 ? 0 : first, c_hi = last + 1 < p->prows ? last + 1 : p->prows;
        /* the strips at either end that no weight can see are left out (attn_strip_negligible; the bf16
         * wavelet forward at L = 4096 in 0.92x the time, bit-identical there) */
        const double qbound = (double)w->tqn[tile] * fabs(p->a.scale);
        while (c_lo < c_hi && attn_strip_negligible(p, c_lo / NR, qbound, ATTN_NEGLIGIBLE)) c_lo = (c_lo / NR + 1) * NR;
        while (c_hi > c_lo && attn_strip_negligible(p, (c_hi - 1) / NR, qbound, ATTN_NEGLIGIBLE))
            c_hi = (c_hi - 1) / NR * NR;
        if (c_hi <= c_lo) continue;
        int64_t clo = INT64_MAX, chi = 0; /* the columns of d some of these table rows use */
        for (int64_t st = c_lo / NR; st <= (c_hi - 1) / NR; ++st)
            if (p->strip_chi[st] > p->strip_clo[st]) {
                clo = p->strip_clo[st] < clo ? p->strip_clo[st] : clo;
                chi = p->strip_chi[st] > chi ? p->strip_chi[st] : chi;
            }
        if (chi <= clo) continue;
        const int64_t k2lo = clo / 2 / 16 * 16, k2hi = FN(up16)((chi + 1) / 2), k2pad = w->tk2;
        /* the product writes table rows [c16, c16 + its width) (c16: c_lo rounded down to a strip of the
         * table's tile layout) at window column c - base, base = first rounded down likewise where it is >= 0;
         * a row reads [o, o + its group's keys rounded to NR) with o = pr_hi - pos + n0 - base in [0, 32)
         * (tiles_group_rows; a group of ATTN_MR rows may reach into the next tile): the rest of that is zero
         * (rows past the table) */
        const int64_t c16 = c_lo / 16 * 16, base = first < 0 ? first : first / 16 * 16;
        int64_t read = hi;
        for (int64_t i = r0 < ATTN_MR ? 0 : r0 - ATTN_MR; i < r1 + ATTN_MR && i < nrows; ++i)
            read = jv[i] > read ? jv[i] : read;
        float *g = w->tg + FN(window_row)(r0) * ATTN_TGW;
        const int64_t w0 = c16 - base, w1 = w0 + FN(up16)(c_hi - c16), end = 32 + (read + NR - 1) / NR * NR;
        for (int64_t i = 0; i < 16; ++i) {
            memset(g + i * ATTN_TGW, 0, sizeof(float) * (size_t)w0);
            if (w1 < end) memset(g + i * ATTN_TGW + w1, 0, sizeof(float) * (size_t)(end - w1));
        }
        wavepe_tile_gemm(ATTN_TILE_TYPE, 16, FN(up16)(c_hi - c16), k2hi - k2lo, a + r0 * w->tlda + 2 * k2lo, w->tlda,
                         p->tvnni + TILES_AT_T(k2lo, c16, k2pad), 16, 16 * k2pad, g + w0, ATTN_TGW, 0);
        w->tgp[tile] = base;
    }
    w->tg_next = t_hi > w->tg_next ? t_hi : w->tg_next;
}

/* Group gi's scores (block rows gi * 6 ..) where the block's products left them, as group_softmax reads
 * them: S and the rows' bias windows (a table: scale * (S + G)), or S and ALiBi's rows (scale * S + bias). */
static void FN(tiles_group_rows)(FN(work) * w, const FN(group) * g, int64_t gi, const FN(kblock) * kb,
                                 const int64_t *jv, int64_t jmax, FN(score_rows) * sr) {
    const wavepe_attention_plan *p = w->p;
    const T *alibi[ATTN_MR];
    const int has_alibi = p->bias == ATTN_BIAS_ALIBI && FN(group_bias)(w, g, kb, jv, jmax, alibi);
    const int table = p->bias == ATTN_BIAS_TABLE && p->prows > 0;
    /* each entry stored once: GCC 12 at -O3 (loop distribution) moved a loop storing NULL into every
     * sr->win[t] after the stores of the windows that replaced it (make ctest-release caught it) */
    sr->scale = (T)p->a.scale;
    for (int t = 0; t < ATTN_MR; ++t) {
        const int tt = t < g->rows ? t : 0; /* rows past the group's: its first (their jv is 0) */
        const int64_t i = gi * ATTN_MR + tt, first = table ? w->tgp[i / 16] : INT64_MIN;
        sr->src[t] = w->tsc + i * ATTN_TSLD;
        sr->win[t] = first != INT64_MIN
                         ? w->tg + FN(window_row)(i) * ATTN_TGW + (p->pr_hi - g->pos[tt] + kb->n0 - first)
                         : NULL;
        sr->post[t] = has_alibi ? alibi[t] : NULL;
    }
}

/* The key block's operands on tiles: keys transposed in pairs (w->tk) and, for the forward, values in
 * pairs along the keys (w->tv); for the backward (transposed) values in w->tv.  Returns 0 when an
 * unmasked value is not finite (the block then runs the vector kernels). */
static int FN(tiles_pack_block)(FN(work) * w, const FN(kblock) * kb, int backward) {
    const int64_t d = w->p->a.d, ncols = FN(up16)(kb->nk);
    FN(tiles_pairs_t)(w->tk, kb->k, kb->ks, kb->nk, ncols, d, w->tk2);
    if (backward) {
        FN(tiles_pairs_t)(w->tv, kb->v, kb->vs, kb->nk, ncols, d, w->tk2);
        return 1;
    }
    return FN(tiles_pairs_v)(w->tv, w->p->dpad, kb->v, kb->vs, kb->nk, (kb->nk + 31) / 32 * 16, d,
                             kb->masked ? w->kpm : NULL);
}

/* Point w->tk / w->tv at key block kb's tile operands for (b, kv head hk): from the thread's cache when the
 * block starts a slot (packed there first if it is not yet: the whole block, keys up to n, so that every
 * query block that reaches it can read it -- keys past what its rows see meet only P = 0 and columns of S
 * nobody reads), else packed into the scratch.  Returns 0 when the block must run the vector kernels. */
static int FN(tiles_block_operands)(FN(work) * w, const FN(kblock) * kb, int64_t b, int64_t hk) {
    const int64_t slot = kb->n0 / ATTN_FBN;
    if (w->kvc == NULL || kb->n0 % ATTN_FBN != 0 || slot >= w->kvc_slots) {
        w->tk = w->tk0, w->tv = w->tv0;
        return FN(tiles_pack_block)(w, kb, 0);
    }
    const int64_t bh = b * w->p->a.kv_heads + hk;
    if (bh != w->kvc_bh) {
        memset(w->kvc_state, 0, (size_t)w->kvc_slots);
        w->kvc_bh = bh;
    }
    w->tk = w->kvc + slot * w->kvc_stride;
    w->tv = w->tk + w->tk2 * ATTN_BNMAX;
    if (w->kvc_state[slot] == 0) {
        FN(kblock) whole = *kb;
        const int64_t n = w->p->a.n;
        whole.nk = n - kb->n0 < ATTN_FBN ? n - kb->n0 : ATTN_FBN;
        w->kvc_state[slot] = FN(tiles_pack_block)(w, &whole, 0) ? 1 : 2;
    }
    return w->kvc_state[slot] == 1;
}

#if defined(WP_TYPE_F16)
/* rows x cols of o (rows of stride cols) times the power of two f: exact. */
static void FN(tiles_scale_rows)(T *o, int64_t rows, int64_t cols, T f) {
    const VT vf = V(set1)(f);
    for (int64_t i = 0; i < rows * cols; i += VL) V(storeu)(o + i, V(mul)(V(loadu)(o + i), vf));
}
#endif

/* One key block of the forward on tiles for every group of the query block: S and G by tiles, each
 * group's softmax (group_softmax), P rounded into w->tp, then O += P V by tiles. */
static void FN(tiles_block_forward)(FN(work) * w, FN(group) * groups, int64_t ngroups, const FN(kblock) * kb) {
    const wavepe_attention_plan *p = w->p;
    const int64_t dpad = p->dpad, nrows = (ngroups - 1) * ATTN_MR + groups[ngroups - 1].rows;
    int64_t jl[ATTN_FBM + ATTN_MR], jv[ATTN_FBM + ATTN_MR], pos[ATTN_FBM + ATTN_MR], jmax = 0;
    for (int64_t gi = 0; gi < ngroups; ++gi) {
        const int64_t m = FN(valid_keys)(&groups[gi], kb, jl + gi * ATTN_MR, jv + gi * ATTN_MR);
        jmax = m > jmax ? m : jmax;
        for (int t = 0; t < ATTN_MR; ++t) pos[gi * ATTN_MR + t] = groups[gi].pos[t < groups[gi].rows ? t : 0];
    }
    if (jmax == 0) return;
    FN(tiles_scores)(w, nrows, jl, jv, w->ta, w->tk, w->tsc);
    w->tg_next = 0; /* the block's bias windows: tiles_windows, group by group */
    const int64_t kcols = (jmax + 31) / 32 * 32; /* P V's K: pairs of keys, 16 at a time */
    for (int64_t gi = 0; gi < ngroups; ++gi) {
        const FN(group) *g = &groups[gi];
        const int64_t *gl = jl + gi * ATTN_MR, *gv = jv + gi * ATTN_MR;
        int64_t gmax = 0;
        for (int t = 0; t < ATTN_MR; ++t) gmax = gv[t] > gmax ? gv[t] : gmax;
        T *mst = w->mst + gi * ATTN_MR, *lst = w->lst + gi * ATTN_MR, *o = w->o + gi * ATTN_MR * dpad;
        uint16_t *pg = w->tp + gi * ATTN_MR * ATTN_TPLD; /* the group's P, rounded once by group_softmax */
        if (gmax > 0) {
            FN(score_rows) sr;
            FN(tiles_windows)(w, kb, nrows, pos, jv, gi * ATTN_MR, gi * ATTN_MR + g->rows);
            FN(tiles_group_rows)(w, g, gi, kb, gv, gmax, &sr);
            FN(group_softmax)(p, kb, w->kpm, gl, gv, gmax, &sr, NULL, mst, lst, o, pg, kcols);
        }
        if (gmax == 0) /* no key seen (group_softmax zeroes the P of a row past the group's: its jv is 0) */
            for (int t = 0; t < ATTN_MR; ++t) memset(pg + t * ATTN_TPLD, 0, sizeof(uint16_t) * (size_t)kcols);
    }
    const int64_t rows16 = FN(up16)(nrows);
    for (int64_t i = ngroups * ATTN_MR; i < rows16; ++i) memset(w->tp + i * ATTN_TPLD, 0, sizeof(uint16_t) * (size_t)kcols);
#if defined(WP_TYPE_F16)
    FN(tiles_scale_rows)(w->o, rows16, dpad, ATTN_TILE_P_SCALE);
#endif
    wavepe_tile_gemm(ATTN_TILE_TYPE, rows16, dpad, kcols / 2, w->tp, ATTN_TPLD, w->tv, 16, ATTN_TPS, w->o, dpad, 1);
#if defined(WP_TYPE_F16)
    FN(tiles_scale_rows)(w->o, rows16, dpad, (T)1 / ATTN_TILE_P_SCALE);
#endif
}

/* The tile path's scratch of one thread (work_alloc, where the plan's blocks run on tiles): one allocation,
 * w->tblock; on failure nothing is left allocated here. */
static int FN(tiles_work_alloc)(FN(work) * w, const wavepe_attention_plan *p, int64_t rows, int64_t bwd) {
    const int64_t d = p->a.d, dpad = p->dpad;
    const int64_t rows16 = (rows + 15) / 16 * 16;
    w->tk2 = ((d + 1) / 2 + 15) / 16 * 16;
    w->tlda = 2 * w->tk2;
    /* pieces in 4-byte units, 64-byte aligned: ta, tdo, tk, tv, tsc, tdp, tp, tg; then the backward's
     * accumulating products (ATTN_TILES_BWD): tqt, tdot, tds, tpr, tpp, tdsp, tkp, dvt, dkt, tgw, tgwp, tdt */
    int64_t tsizes[20] = {rows16 * w->tk2, bwd ? rows16 * w->tk2 : 0, w->tk2 * ATTN_BNMAX,
                          bwd ? w->tk2 * ATTN_BNMAX : ATTN_BNMAX / 2 * dpad, rows16 * ATTN_TSLD,
                          bwd ? rows16 * ATTN_TSLD : 0, bwd ? 0 : rows16 * ATTN_TPLD / 2, 32 * ATTN_TGW};
#if defined(ATTN_TILES_BWD)
    if (bwd) {
        int64_t head; /* the head's transposed rows: nqb blocks of dpad x ATTN_BBM half elements */
        if (wavepe_mul_overflow(p->nqb, dpad * (ATTN_BBM / 2), &head)) return WAVEPE_E_OVERFLOW;
        const int table = p->tpairs != NULL && p->prows > 0, dtable = table && p->a.dtable != NULL;
        const int64_t more[12] = {head, head, ATTN_BBM * ATTN_BNMAX / 2, ATTN_BNMAX, ATTN_BBM / 2 * ATTN_BNMAX,
                                  ATTN_BBM / 2 * ATTN_BNMAX, ATTN_BNMAX / 2 * dpad, dpad * ATTN_BBN, dpad * ATTN_BBN,
                                  table ? ATTN_BBM / 2 * ATTN_TWW : 0, dtable ? ATTN_BBM / 2 * ATTN_TWW : 0,
                                  dtable ? dpad * ATTN_TWW : 0};
        memcpy(tsizes + 8, more, sizeof(more));
    }
#endif
    int64_t ttotal = 0;
    for (int i = 0; i < 20; ++i) {
        tsizes[i] = (tsizes[i] + 15) / 16 * 16;
        if (wavepe_add_overflow(ttotal, tsizes[i], &ttotal) || ttotal > (int64_t)(PTRDIFF_MAX / 4))
            return WAVEPE_E_OVERFLOW;
    }
    char *tb = wavepe_scratch_alloc((size_t)ttotal * 4);
    if (tb == NULL) return WAVEPE_E_NOMEM;
    /* the forward's S, P and bias windows (tsc, tp, tg) are written before they are read, or read only in
     * lanes that are selected away (group_softmax, tiles_scores' margins): not cleared */
    memset(tb, 0, (size_t)(bwd ? ttotal : tsizes[0] + tsizes[1] + tsizes[2] + tsizes[3]) * 4);
    w->tblock = tb;
    int64_t off = 0;
    w->ta = (uint16_t *)(tb + off * 4), off += tsizes[0];
    w->tdo = tsizes[1] ? (uint16_t *)(tb + off * 4) : NULL, off += tsizes[1];
    w->tk = (uint32_t *)(tb + off * 4), off += tsizes[2];
    w->tv = (uint32_t *)(tb + off * 4), off += tsizes[3];
    w->tsc = (float *)(tb + off * 4), off += tsizes[4];
    w->tdp = tsizes[5] ? (float *)(tb + off * 4) : NULL, off += tsizes[5];
    w->tp = tsizes[6] ? (uint16_t *)(tb + off * 4) : NULL, off += tsizes[6];
    w->tg = (float *)(tb + off * 4), off += tsizes[7];
    w->tk0 = w->tk, w->tv0 = w->tv, w->kvc_bh = -1;
    w->kvc_stride = bwd ? 0 : tsizes[2] + tsizes[3]; /* kv_cache_alloc's slot: a tk and a tv */
#if defined(ATTN_TILES_BWD)
    if (bwd) {
        w->tqt = (uint16_t *)(tb + off * 4), off += tsizes[8];
        w->tdot = (uint16_t *)(tb + off * 4), off += tsizes[9];
        w->tds = (uint16_t *)(tb + off * 4), off += tsizes[10];
        w->tpr = (uint16_t *)(tb + off * 4), off += tsizes[11];
        w->tpp = (uint32_t *)(tb + off * 4), off += tsizes[12];
        w->tdsp = (uint32_t *)(tb + off * 4), off += tsizes[13];
        w->tkp = (uint32_t *)(tb + off * 4), off += tsizes[14];
        w->dvt = (float *)(tb + off * 4), off += tsizes[15];
        w->dkt = (float *)(tb + off * 4), off += tsizes[16];
        w->tgw = tsizes[17] ? (uint16_t *)(tb + off * 4) : NULL, off += tsizes[17];
        w->tgwp = tsizes[18] ? (uint32_t *)(tb + off * 4) : NULL, off += tsizes[18];
        w->tdt = tsizes[19] ? (float *)(tb + off * 4) : NULL;
    }
#endif
    return WAVEPE_OK;
}

/* The forward's cache of packed key blocks (tiles_block_operands), for a thread that may run several units
 * (query blocks; a single one would pack each block once anyway): at most ATTN_KV_CACHE_BYTES, not with a
 * key-padding mask (a block's packing depends on it); without it where memory is short. */
static void FN(kv_cache_alloc)(FN(work) * w) {
    const wavepe_attention_plan *p = w->p;
    const int64_t slots = (p->a.n + ATTN_FBN - 1) / ATTN_FBN, stride = w->kvc_stride;
    if (w->tblock == NULL || stride == 0 || p->a.key_padding_mask != NULL || slots > ATTN_KV_CACHE_BYTES / 4 / stride)
        return;
    w->kvc = wavepe_scratch_alloc((size_t)(slots * stride) * 4);
    w->kvc_state = malloc((size_t)slots);
    if (w->kvc == NULL || w->kvc_state == NULL) {
        wavepe_scratch_free(w->kvc);
        free(w->kvc_state);
        w->kvc = NULL, w->kvc_state = NULL;
        return;
    }
    w->kvc_slots = slots;
}

/* The packing pack_query_groups left for later. */
static void FN(pack_groups_late)(FN(work) * w, FN(group) * groups, int64_t ngroups) {
    const wavepe_attention_args *a = &w->p->a;
    for (int64_t gi = 0; gi < ngroups; ++gi) {
        const S *rp[ATTN_MR];
        for (int t = 0; t < ATTN_MR; ++t)
            rp[t] = w->groups_q + (gi * ATTN_MR + (t < groups[gi].rows ? t : 0)) * a->q_strides[2];
        FN(pack_group)(w, &groups[gi], gi, rp, groups[gi].rows, a->d, (T)a->scale);
    }
    w->groups_late = 0;
}

#if defined(ATTN_TILES_BWD)
/* The head's q and dO rows transposed per query block (w->tqt, w->tdot: [qi][c][t] = row qi ATTN_BBM + t's
 * element c), the A operands of dK^T += Q^T dS and dV^T += dO^T P, made once per head: a transposition per
 * (query block, key block) pair would cost as much as its products.  A row whose q or dO holds a NaN or
 * inf is zero in both, as in qpan / dopan (flag_bad_rows): bad_rows_backward adds its terms over the keys
 * it sees. */
static void FN(tiles_transpose_head)(FN(work) * w, int64_t b, int64_t h) {
    const wavepe_attention_plan *p = w->p;
    const wavepe_attention_args *a = &p->a;
    const int64_t d = a->d, dpad = p->dpad, blk = dpad * ATTN_BBM;
    memset(w->tqt, 0, sizeof(uint16_t) * (size_t)(p->nqb * blk));
    memset(w->tdot, 0, sizeof(uint16_t) * (size_t)(p->nqb * blk));
    for (int64_t m = 0; m < a->m; ++m) {
        const uint16_t *q = (const uint16_t *)((const S *)a->q + attn_off(a->q_strides, b, h, m));
        const uint16_t *go = (const uint16_t *)((const S *)a->dout + attn_off(a->dout_strides, b, h, m));
        int finite = 1;
        for (int64_t c = 0; c < d; ++c) finite &= FN(half_finite)(q[c]) & FN(half_finite)(go[c]);
        if (!finite) continue;
        uint16_t *qt = w->tqt + (m / ATTN_BBM) * blk + m % ATTN_BBM, *gt = w->tdot + (m / ATTN_BBM) * blk + m % ATTN_BBM;
        for (int64_t c = 0; c < d; ++c) {
            qt[c * ATTN_BBM] = q[c];
            gt[c * ATTN_BBM] = go[c];
        }
    }
}

/* dst[j * ldd + c] += src[c * lds + j] for j < rows, c < cols: whole 8 x 8 blocks by register transposes (a
 * strided element loop here was a sixth of the tile backward's vector time; perf, Zen 4), the edges by it. */
static void FN(tiles_add_transposed)(T *dst, int64_t ldd, const float *src, int64_t lds, int64_t rows, int64_t cols) {
    enum { B = WP_TB_F32 };
    const int64_t rb = rows / B * B, cb = cols / B * B;
    float tmp[B * B];
    for (int64_t j0 = 0; j0 < rb; j0 += B)
        for (int64_t c0 = 0; c0 < cb; c0 += B) {
            vf32_transpose(src + c0 * lds + j0, lds, tmp, B);
            for (int r = 0; r < B; ++r)
                for (int i = 0; i < B; ++i) dst[(j0 + r) * ldd + c0 + i] += tmp[r * B + i];
        }
    for (int64_t j = 0; j < rows; ++j)
        for (int64_t c = j < rb ? cb : 0; c < cols; ++c) dst[j * ldd + c] += src[c * lds + j];
}

/* src's first `valid` entries (a multiple of VL, the rest of [0, n) zero) rounded to the type into dst[0, n). */
static void FN(tiles_round_row)(uint16_t *dst, const T *src, int64_t valid, int64_t n) {
    int64_t j = 0;
    for (; j < valid && j < n; j += VL) vf32_storeu_bf16_rne(dst + j, V(loadu)(src + j)); /* NaN bits unread */
    if (j < n) memset(dst + j, 0, sizeof(uint16_t) * (size_t)(n - j));
}

/* The accumulating products of one (query block qi, key block) pair on tiles, from the block's P (w->s) and
 * dS (w->ds: scaled, zero where a row sees no key, up to `valid` columns): dV^T += dO^T P and dK^T += Q^T dS
 * into w->dvt, w->dkt, and dQ += dS K into w->dqa where the block's keys are finite (w->tk_finite).  Each
 * sums over the block's rows (or keys) with the entries a row cannot see zero: no row ranges needed. */
static void FN(tiles_block_backward)(FN(work) * w, int64_t qi, int64_t rows, int64_t jvb, int64_t valid) {
    const int64_t dpad = w->p->dpad, d16 = FN(up16)(w->p->a.d);
    const int64_t kcols = (jvb + 31) / 32 * 32, keys16 = FN(up16)(jvb), rows32 = (rows + 31) / 32 * 32;
    uint16_t *pa = w->tpr, *pb = w->tpr + ATTN_BNMAX;
    for (int64_t t = 0; t < rows32; t += 2) {
        uint16_t *da = w->tds + t * ATTN_BNMAX, *db = da + ATTN_BNMAX;
        FN(tiles_round_row)(da, w->ds + t * ATTN_SLD, t < rows ? valid : 0, kcols);
        FN(tiles_round_row)(db, w->ds + (t + 1) * ATTN_SLD, t + 1 < rows ? valid : 0, kcols);
        FN(tiles_round_row)(pa, w->s + t * ATTN_SLD, t < rows ? valid : 0, keys16);
        FN(tiles_round_row)(pb, w->s + (t + 1) * ATTN_SLD, t + 1 < rows ? valid : 0, keys16);
        uint32_t *pp = w->tpp + (t / 2) * ATTN_BNMAX, *dp = w->tdsp + (t / 2) * ATTN_BNMAX;
        for (int64_t j = 0; j < keys16; ++j) {
            pp[j] = (uint32_t)pa[j] | (uint32_t)pb[j] << 16;
            dp[j] = (uint32_t)da[j] | (uint32_t)db[j] << 16;
        }
    }
    const int64_t head = qi * dpad * ATTN_BBM;
    wavepe_tile_gemm(ATTN_TILE_TYPE, d16, keys16, rows32 / 2, w->tdot + head, ATTN_BBM, w->tpp, ATTN_BNMAX, 16,
                     w->dvt, ATTN_BBN, 1);
    wavepe_tile_gemm(ATTN_TILE_TYPE, d16, keys16, rows32 / 2, w->tqt + head, ATTN_BBM, w->tdsp, ATTN_BNMAX, 16,
                     w->dkt, ATTN_BBN, 1);
    if (w->tk_finite)
        wavepe_tile_gemm(ATTN_TILE_TYPE, FN(up16)(rows), d16, kcols / 2, w->tds, ATTN_BNMAX, w->tkp, 16, ATTN_TPS,
                         w->dqa, dpad, 1);
}

/* The table's products of one (query block qi, key block) pair on tiles, from the block's dS (w->ds: scaled,
 * the gradient of the bias the rows met; zero where a row sees no key, jv[t] columns a row): each row's dS
 * skewed onto the packed table rows it met, dG[t][p - e] = dS[t][j] for p = pr_hi - pos_t + n0 + j (e: the
 * block's first such row rounded down to a pair), rounded to bf16 (w->tgw); then dQ += dG T_win per 16 rows
 * (the windows and d columns tiles_scores' bias windows use), and with a table gradient dT_win^T += Q^T dG
 * over the block's rows into dt_slot (packed rows, as the vector kernels').  Rows are at consecutive
 * positions pos0 + t; what a row did not meet is zero in dG, and rows past the table are zero in tpairs. */
static void FN(tiles_table_backward)(FN(work) * w, int64_t qi, int64_t m0, int64_t rows, const FN(kblock) * kb,
                                     const int64_t *jv, T *dt_slot) {
    const wavepe_attention_plan *p = w->p;
    const int64_t d = p->a.d, dpad = p->dpad, pos0 = p->a.q_offset + m0, rows32 = (rows + 31) / 32 * 32;
    int64_t hi = 0;
    for (int64_t t = 0; t < rows; ++t) hi = jv[t] > hi ? jv[t] : hi;
    if (hi == 0) return;
    const int64_t e = FN(floor_div)(p->pr_hi - (pos0 + rows - 1) + kb->n0, 2) * 2;
    const int64_t width = p->pr_hi - pos0 + kb->n0 + hi - e; /* the window [e, e + width) */
    const int64_t zero = width + 64 < ATTN_TWW ? width + 64 : ATTN_TWW;
    for (int64_t t = 0; t < rows32; ++t) {
        uint16_t *g = w->tgw + t * ATTN_TWW;
        memset(g, 0, sizeof(uint16_t) * (size_t)zero);
        if (t >= rows || jv[t] == 0) continue;
        g += p->pr_hi - (pos0 + t) + kb->n0 - e;
        const T *ds = w->ds + t * ATTN_SLD; /* zero from jv[t] to the next multiple of VL */
        for (int64_t j = 0; j < jv[t]; j += VL) vf32_storeu_bf16_rne(g + j, V(loadu)(ds + j));
    }
    /* dQ += dG T_win, 16 rows at a time */
    for (int64_t r0 = 0; r0 < rows; r0 += 16) {
        const int64_t r1 = r0 + 16 < rows ? r0 + 16 : rows;
        int64_t thi = 0;
        for (int64_t t = r0; t < r1; ++t) thi = jv[t] > thi ? jv[t] : thi;
        if (thi == 0) continue;
        const int64_t first = p->pr_hi - (pos0 + r1 - 1) + kb->n0, last = p->pr_hi - (pos0 + r0) + kb->n0 + thi - 1;
        const int64_t c_lo = first < 0 ? 0 : first, c_hi = last + 1 < p->prows ? last + 1 : p->prows;
        if (c_hi <= c_lo) continue;
        int64_t clo = INT64_MAX, chi = 0; /* the columns of d these table rows use */
        for (int64_t st = c_lo / NR; st <= (c_hi - 1) / NR; ++st)
            if (p->strip_chi[st] > p->strip_clo[st]) {
                clo = p->strip_clo[st] < clo ? p->strip_clo[st] : clo;
                chi = p->strip_chi[st] > chi ? p->strip_chi[st] : chi;
            }
        if (chi <= clo) continue;
        const int64_t c_e = c_lo / 2 * 2, k2 = FN(up16)((c_hi - c_e + 1) / 2), n_lo = clo / 16 * 16;
        wavepe_tile_gemm(ATTN_TILE_TYPE, 16, FN(up16)(chi) - n_lo, k2, w->tgw + r0 * ATTN_TWW + (c_e - e), ATTN_TWW,
                         p->tpairs + c_e / 2 * dpad + n_lo, dpad, 16, w->dqa + r0 * dpad + n_lo, dpad, 1);
    }
    if (dt_slot == NULL) return;
    /* dT_win^T = Q^T dG: A the head's transposed rows, B dG in pairs of rows */
    const int64_t w16 = FN(up16)(width);
    for (int64_t t = 0; t < rows32; t += 2) {
        const uint16_t *ga = w->tgw + t * ATTN_TWW, *gb = ga + ATTN_TWW;
        uint32_t *pr = w->tgwp + t / 2 * ATTN_TWW;
        for (int64_t j = 0; j < w16; ++j) pr[j] = (uint32_t)ga[j] | (uint32_t)gb[j] << 16;
    }
    wavepe_tile_gemm(ATTN_TILE_TYPE, FN(up16)(d), w16, rows32 / 2, w->tqt + qi * dpad * ATTN_BBM, ATTN_BBM, w->tgwp,
                     ATTN_TWW, 16, w->tdt, ATTN_TWW, 0);
    const int64_t i_lo = e < 0 ? -e : 0, i_hi = e + width < p->prows ? width : p->prows - e;
    for (int64_t i = i_lo; i < i_hi; ++i)
        for (int64_t c = 0; c < d; ++c) dt_slot[(e + i) * dpad + c] += w->tdt[c * ATTN_TWW + i];
}
#endif

/* ---- the block operations (attention_engine.h) ----------------------------------------------------- */

static inline int FN(blk_p16)(void) { return 1; }
static inline VT FN(blk_weights16)(VT arg) { return V(exp2_weights16)(arg); }
static inline void FN(blk_p_store)(uint16_t *p, VT e) { ATTN_TILE_P_STORE(p, e); }
static inline void FN(blk_p_store2)(uint16_t *p, VT lo, VT hi) { ATTN_TILE_P_STORE2(p, lo, hi); }
static inline T FN(blk_p_room)(void) { return (T)ATTN_TILE_P_ROOM; }

static inline void FN(blk_work_init)(FN(work) * w) {
    (void)w;
    /* the kernel's first product loads the tile configuration afresh: whatever ran on this thread since the
     * last kernel (oneDNN's AMX kernels in torch, say) may have loaded its own */
    wavepe_tiles_release();
}

static inline int FN(blk_work_alloc)(FN(work) * w, const wavepe_attention_plan *p, int64_t rows, int64_t bwd,
                                     int narrow) {
    if (!p->tiles || narrow || p->kind == ATTN_KIND_DECODE) return WAVEPE_OK;
    return FN(tiles_work_alloc)(w, p, rows, bwd);
}

static inline void FN(blk_work_free)(FN(work) * w) {
    wavepe_scratch_free(w->tblock);
    wavepe_scratch_free(w->kvc);
    free(w->kvc_state);
    wavepe_tiles_release(); /* the kernel's end on this thread */
}

static inline void FN(blk_fwd_begin)(FN(work) * w, int64_t units, int64_t more) {
    if (units >= 2 || more >= 2) FN(kv_cache_alloc)(w); /* (a call may run more units than its range) */
}

static inline int FN(blk_defer_groups)(FN(work) * w, const S *qbase, int late) {
    w->groups_late = late && w->ta != NULL;
    w->groups_q = qbase;
    return w->groups_late;
}

static inline void FN(blk_pack_rows)(FN(work) * w, const S *qbase, int64_t qs, int64_t rows) {
    const wavepe_attention_plan *p = w->p;
    /* the same rows as the tiles' A operand (where the plan has tiles): the blocks may run on tiles */
    w->tiles_rows = w->ta != NULL;
    if (w->tiles_rows) {
        FN(tiles_rows)(w->ta, w->tlda, qbase, qs, rows, FN(up16)(rows), p->a.d);
        if (p->bias == ATTN_BIAS_TABLE && p->prows > 0) FN(tiles_row_norms)(w->tqn, w->ta, w->tlda, FN(up16)(rows));
    }
}

static inline int FN(blk_rows_on_tiles)(const FN(work) * w) { return w->tiles_rows; }

static inline int FN(blk_fwd_block)(FN(work) * w, FN(group) * groups, int64_t ngroups, const FN(kblock) * kb,
                                    int64_t b, int64_t hk, int wide) {
    if (wide && w->tiles_rows && FN(tiles_block_operands)(w, kb, b, hk)) {
        FN(tiles_block_forward)(w, groups, ngroups, kb);
        return 1;
    }
    if (w->groups_late) FN(pack_groups_late)(w, groups, ngroups);
    return 0;
}

/* Which of the backward's products leave the vector kernels for the tiles.  Whenever a unit's rows are on
 * tiles (w->tiles_rows) its scores and dP are tile products (tile_backward), so the groups' packed rows
 * (pack_query_groups, dO's) go unused; with ATTN_TILES_BWD its dV and dK sums too, so do the query and dO
 * panels -- unless a table's dT stays on the vector kernels (its window buffers absent). */
static inline int FN(blk_bwd_sums_on_tiles)(const FN(work) * w) {
#if defined(ATTN_TILES_BWD)
    return w->ta != NULL; /* what pack_query_groups sets w->tiles_rows to */
#else
    (void)w;
    return 0;
#endif
}

static inline int FN(blk_bwd_table_on_tiles)(const FN(work) * w, const T *dt_slot) {
#if defined(ATTN_TILES_BWD)
    return w->ta != NULL && w->tgw != NULL && (dt_slot == NULL || w->tdt != NULL);
#else
    (void)w, (void)dt_slot;
    return 0;
#endif
}

static inline void FN(blk_bwd_head)(FN(work) * w, int64_t b, int64_t h) {
#if defined(ATTN_TILES_BWD)
    if (w->tqt != NULL) FN(tiles_transpose_head)(w, b, h);
#else
    (void)w, (void)b, (void)h;
#endif
}

static inline int FN(blk_bwd_pack_block)(FN(work) * w, const FN(kblock) * kb) {
    if (w->ta == NULL) return 0;
    FN(tiles_pack_block)(w, kb, 1);
    return 1;
}

static inline int FN(blk_bwd_key_block)(FN(work) * w, const FN(kblock) * kb, int scores_tiled) {
#if defined(ATTN_TILES_BWD)
    if (w->tqt == NULL) return 0;
    const int64_t dpad = w->p->dpad;
    w->tk_finite = FN(tiles_pairs_v)(w->tkp, dpad, kb->k, kb->ks, kb->nk, (kb->nk + 31) / 32 * 16, w->p->a.d,
                                     kb->masked ? w->kpm : NULL);
    memset(w->dkt, 0, sizeof(float) * (size_t)(dpad * ATTN_BBN));
    memset(w->dvt, 0, sizeof(float) * (size_t)(dpad * ATTN_BBN));
    return scores_tiled && w->tk_finite;
#else
    (void)w, (void)kb, (void)scores_tiled;
    return 0;
#endif
}

static inline void FN(blk_bwd_dout_rows)(FN(work) * w, const S *doblk, int64_t dos, int64_t rows) {
    if (w->tiles_rows) FN(tiles_rows)(w->tdo, w->tlda, doblk, dos, rows, FN(up16)(rows), w->p->a.d);
}

static inline void FN(blk_bwd_key_block_end)(FN(work) * w, T *dk, T *dv, int64_t nk) {
#if defined(ATTN_TILES_BWD)
    const int64_t d = w->p->a.d;
    if (w->tqt != NULL) { /* the tiles' dK^T, dV^T (dka, dva: the rows bad_rows_backward added) */
        FN(tiles_add_transposed)(dk, d, w->dkt, ATTN_BBN, nk, d);
        FN(tiles_add_transposed)(dv, d, w->dvt, ATTN_BBN, nk, d);
    }
#else
    (void)w, (void)dk, (void)dv, (void)nk;
#endif
}

/* S (with the bias windows) and dP of the whole block on tiles: each entry is one query row's (or dO row's)
 * product with one key's (value's), and the entries a row cannot see are selected away after. */
static inline int FN(blk_bwd_products)(FN(work) * w, int64_t m0, int64_t rows, const int64_t *jl_all,
                                       const int64_t *jv_all, int64_t *pos) {
    if (!w->tiles_rows) return 0;
    for (int64_t i = 0; i < rows; ++i) pos[i] = w->p->a.q_offset + m0 + i;
    FN(tiles_scores)(w, rows, jl_all, jv_all, w->ta, w->tk, w->tsc);
    FN(tiles_scores)(w, rows, jl_all, jv_all, w->tdo, w->tv, w->tdp);
    w->tg_next = 0; /* the block's bias windows: tiles_windows, group by group */
    return 1;
}

/* The block's products, computed above; the group's bias windows now. */
static inline void FN(blk_bwd_group_rows)(FN(work) * w, const FN(group) * g, int64_t gi, const FN(kblock) * kb,
                                          int64_t rows, const int64_t *pos, const int64_t *jv_all,
                                          const int64_t *jv, int64_t jmax, FN(score_rows) * sr,
                                          const T **dpr) {
    FN(tiles_windows)(w, kb, rows, pos, jv_all, gi * ATTN_MR, gi * ATTN_MR + g->rows);
    FN(tiles_group_rows)(w, g, gi, kb, jv, jmax, sr);
    for (int t = 0; t < ATTN_MR; ++t) dpr[t] = w->tdp + (gi * ATTN_MR + (t < g->rows ? t : 0)) * ATTN_TSLD;
}

static inline int FN(blk_bwd_dq_tiled)(const FN(work) * w, int tiled) {
#if defined(ATTN_TILES_BWD)
    return tiled && w->tk_finite;
#else
    (void)w, (void)tiled;
    return 0;
#endif
}

static inline int64_t FN(blk_bwd_sums)(FN(work) * w, int64_t m0, int64_t rows, int64_t jvb, int64_t jbround,
                                       const FN(kblock) * kb, const int64_t *jv_all, T *dt_slot, int tiled,
                                       int table_tiled) {
#if defined(ATTN_TILES_BWD)
    int64_t vector_keys = jvb;
    if (tiled) {
        FN(tiles_block_backward)(w, m0 / ATTN_BBM, rows, jvb, jbround);
        vector_keys = 0;
    }
    if (table_tiled) FN(tiles_table_backward)(w, m0 / ATTN_BBM, m0, rows, kb, jv_all, dt_slot);
    return vector_keys;
#else
    (void)w, (void)m0, (void)rows, (void)jbround, (void)kb, (void)jv_all, (void)dt_slot, (void)tiled,
        (void)table_tiled;
    return jvb;
#endif
}

/* this file's own macros: it is included again for the next type */
#undef ATTN_TILES_BWD
#undef TILES_AT_T
#undef ATTN_TPS
#undef ATTN_TILE_TYPE
#undef ATTN_TILE_P_SCALE
#undef ATTN_TILE_P_STORE
#undef ATTN_TILE_P_STORE2
#undef ATTN_TILE_P_ROOM
