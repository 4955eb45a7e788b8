/* attention_engine_pairs.h: the paired-bf16 matrix engine of the CPU attention (attention_engine.h's
 * interface): bfloat16 on an ISA with a bf16 dot product (the vocabulary's WP_HAS_DPBF16: avx512bf16's
 * vdpbf16ps; the amx ISA's too, where its tiles do not run).  The scores q . k (forward, and the
 * backward's recomputed P), the bias window q . T (the table is in q's dtype: bf16 too), the forward's
 * P V and the backward's dP = dO . V^T come from the stored bf16 elements themselves, paired along d (or
 * along the keys for P V); the algorithm's other products are the float32 micro-kernels (attention_mk.h).
 * Part of attention_simd.h's template.
 *
 * Scores from bf16 pairs (mk_dp): the query rows and the keys packed as they
 * are stored, two elements of d per 32-bit lane (an odd d's last pair padded
 * with a zero on both sides), unscaled; scale is applied to the sums.  Every
 * product q_c k_c is exact in float32 (8-bit significands), so a score
 * differs from the float32 path's only in rounding: there each product is
 * fl(scale q_c) k_c added by a chain of d fused multiply-adds; here the sum of
 * d exact products is accumulated in ceil(d/2) steps of two float32 additions,
 * then multiplied by scale and added to the bias in one fused multiply-add.
 * Both are within the usual d * 2^-24 * sum |scale q_c k_c| of the exact
 * score (+ one rounding of the bias sum); the bias window q . T (over a
 * strip's nonzero columns, pairs of the bf16 table) likewise.  Non-finite values: the products
 * of the same elements, so a NaN or inf in q or k gives what the float32 path
 * gives; a finite product beyond float32's range (|q_c k_c| > 3.4e38, which
 * bf16's range allows) is inf here where fl(scale q_c) k_c may not be.
 * P V (the wide forward's; what GPU kernels do too): each softmax weight
 * p_j in [0, 1] is rounded to bf16 (relative error <= 2^-8: 8 significant bits) and multiplied by
 * the stored values two keys per step, so an output row moves by at most
 * 2^-8 sum_j p_j |v_j| / l <= 2^-8 max_j |v_j| from the float32 path's (the
 * row sum l is of the unrounded weights), before its one rounding to bf16.
 * A key a row cannot see never shares a pair with one it sees (pairs are
 * formed only inside the keys the row sees; odd ends go through row_pv). */

/* One step of a 6 x NR tile of bf16 pairs (mk_dp, mk_dpv): row t's pair A<t> times the panel's b0, b1. */
#define MK_DP_STEP(A0, A1, A2, A3, A4, A5)                                                           \
    do {                                                                                          \
        vi32 x_;                                                                                  \
        x_ = vbf16x2_set1(A0), c00 = V(dpbf16)(c00, x_, b0), c01 = V(dpbf16)(c01, x_, b1);        \
        x_ = vbf16x2_set1(A1), c10 = V(dpbf16)(c10, x_, b0), c11 = V(dpbf16)(c11, x_, b1);        \
        x_ = vbf16x2_set1(A2), c20 = V(dpbf16)(c20, x_, b0), c21 = V(dpbf16)(c21, x_, b1);        \
        x_ = vbf16x2_set1(A3), c30 = V(dpbf16)(c30, x_, b0), c31 = V(dpbf16)(c31, x_, b1);        \
        x_ = vbf16x2_set1(A4), c40 = V(dpbf16)(c40, x_, b0), c41 = V(dpbf16)(c41, x_, b1);        \
        x_ = vbf16x2_set1(A5), c50 = V(dpbf16)(c50, x_, b0), c51 = V(dpbf16)(c51, x_, b1);        \
    } while (0)

/* C[t][0..NR) = init[t][0..NR) (or 0) + scale * sum_k2 dot(ap[k2*6 + t], bp[k2*NR + 0..NR)), t < 6,
 * where dot(a, b) = a.lo * b.lo + a.hi * b.hi of two bf16 pairs (vf32_dpbf16).  edge (NULL: none)
 * replaces A's first step (edge[0..6)) and last step (edge[6..12)). */
static inline void FN(mk_dp)(int64_t kc2, const uint32_t *restrict ap, const uint32_t *restrict bp,
                             const uint32_t *edge, T scale, T *restrict c, int64_t ldc, const T *const *init) {
    VT c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = V(zero)();
    for (int64_t k = 0; k < kc2; ++k) {
        const vi32 b0 = vbf16x2_loadu(bp), b1 = vbf16x2_loadu(bp + VL);
        const uint32_t *at = ap + k * ATTN_MR;
        if (edge != NULL && (k == 0 || k == kc2 - 1)) at = edge + (k == 0 ? 0 : ATTN_MR);
        MK_DP_STEP(at[0], at[1], at[2], at[3], at[4], at[5]);
        bp += NR;
    }
    const VT vs = V(set1)(scale);
#define MK_DP_OUT(t, x0, x1)                                                                      \
    if (init != NULL) {                                                                           \
        V(storeu)(c + t * ldc, V(fmadd)(vs, x0, V(loadu)(init[t])));                               \
        V(storeu)(c + t * ldc + VL, V(fmadd)(vs, x1, V(loadu)(init[t] + VL)));                     \
    } else {                                                                                      \
        V(storeu)(c + t * ldc, V(mul)(vs, x0));                                                    \
        V(storeu)(c + t * ldc + VL, V(mul)(vs, x1));                                               \
    }
    MK_DP_OUT(0, c00, c01)
    MK_DP_OUT(1, c10, c11)
    MK_DP_OUT(2, c20, c21)
    MK_DP_OUT(3, c30, c31)
    MK_DP_OUT(4, c40, c41)
    MK_DP_OUT(5, c50, c51)
#undef MK_DP_OUT
}

/* C[t][0..NR) += sum_k2 dot(a[t*a_st + k2], bp[k2*NR + 0..NR)) for t < rows (1..6): a holds rows of
 * bf16 pairs (P rounded, keys 2 k2 and 2 k2 + 1), bp pair panels of NR columns (pack_panels_dp). */
static inline void FN(mk_dpv)(int64_t kc2, const uint32_t *a, int64_t a_st, const uint32_t *restrict bp, T *c,
                              int64_t ldc, int rows) {
    const uint32_t *a0 = a, *a1 = rows > 1 ? a + a_st : a, *a2 = rows > 2 ? a + 2 * a_st : a;
    const uint32_t *a3 = rows > 3 ? a + 3 * a_st : a, *a4 = rows > 4 ? a + 4 * a_st : a;
    const uint32_t *a5 = rows > 5 ? a + 5 * a_st : a;
    VT c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
    c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = V(zero)();
    for (int64_t k = 0; k < kc2; ++k) {
        const vi32 b0 = vbf16x2_loadu(bp + k * NR), b1 = vbf16x2_loadu(bp + k * NR + VL);
        MK_DP_STEP(a0[k], a1[k], a2[k], a3[k], a4[k], a5[k]);
    }
    MK_ACC(0, c00, c01)
    MK_ACC(1, c10, c11)
    MK_ACC(2, c20, c21)
    MK_ACC(3, c30, c31)
    MK_ACC(4, c40, c41)
    MK_ACC(5, c50, c51)
}
#undef MK_DP_STEP

/* Elements c and c + 1 of a stored bf16 row as one pair (c + 1 == d: a zero). */
static inline uint32_t FN(bf16_pair)(const S *row, int64_t c, int64_t d) {
    return (uint32_t)row[c] | (c + 1 < d ? (uint32_t)row[c + 1] << 16 : 0u);
}

/* dst[c2*6 + t] = the pair (rows[t][2 c2], rows[t][2 c2 + 1]) for t < nrows,
 * 0 for the other rows; c2 < ceil(d/2).  Unscaled, as stored. */
static void FN(pack_rows_dp)(uint32_t *restrict dst, const S *const *rows, int nrows, int64_t d) {
    const int64_t d2 = (d + 1) / 2;
    for (int t = 0; t < ATTN_MR; ++t)
        for (int64_t c2 = 0; c2 < d2; ++c2) dst[c2 * ATTN_MR + t] = t < nrows ? FN(bf16_pair)(rows[t], 2 * c2, d) : 0u;
}

/* Keys [0, nk) as pack_strips does, in pairs: dst[(s*d2 + c2)*NR + lane] =
 * the pair (c = 2 c2, 2 c2 + 1) of key s*NR + lane; keys past nk are zero. */
static void FN(pack_strips_dp)(uint32_t *restrict dst, const S *src, int64_t ks, int64_t nk, int64_t d) {
    const int64_t nstrip = (nk + NR - 1) / NR, d2 = (d + 1) / 2;
    for (int64_t s = 0; s < nstrip; ++s) {
        uint32_t *out = dst + s * d2 * NR;
        for (int64_t lane = 0; lane < NR; ++lane) {
            const int64_t j = s * NR + lane;
            if (j >= nk) {
                for (int64_t c2 = 0; c2 < d2; ++c2) out[c2 * NR + lane] = 0u;
                continue;
            }
            const S *row = src + j * ks;
            for (int64_t c2 = 0; c2 < d2; ++c2) out[c2 * NR + lane] = FN(bf16_pair)(row, 2 * c2, d);
        }
    }
}

/* Rows [0, nk) of a row-major bf16 matrix as pack_panels' column panels, two
 * rows per step: dst[(s*ldp2 + j2)*NR + c] = the pair (row 2 j2, row 2 j2 + 1)
 * of column s*NR + c, zero past column d, past row nk and for the rows whose
 * key mask kpm[j] is not 0 (kpm may be NULL).  The B operand of mk_dpv. */
static void FN(pack_panels_dp)(uint32_t *restrict dst, int64_t ldp2, const S *src, int64_t vs, int64_t nk, int64_t d,
                               const T *kpm) {
    const S zero[NR] = {0};
    S pad[2][NR];
    for (int64_t j = 0; j < nk; j += 2) {
        const S *r[2];
        for (int i = 0; i < 2; ++i)
            r[i] = j + i < nk && (kpm == NULL || kpm[j + i] == (T)0) ? src + (j + i) * vs : NULL;
        for (int64_t c0 = 0; c0 < d; c0 += NR) {
            const S *x[2];
            for (int i = 0; i < 2; ++i) {
                x[i] = r[i] != NULL ? r[i] + c0 : zero;
                if (r[i] != NULL && d - c0 < NR) { /* the last panel's columns past d: zeros */
                    for (int64_t c = 0; c < NR; ++c) pad[i][c] = c0 + c < d ? r[i][c0 + c] : 0;
                    x[i] = pad[i];
                }
            }
            uint32_t *out = dst + ((c0 / NR) * ldp2 + j / 2) * NR;
            vbf16x2_interleave(out, out + 16, x[0], x[1]);
        }
    }
}

/* rows_times_panels' product from bf16 pairs (mk_dpv): C[t] += sum_{jl[t] <= j < jv[t]} P[t][j] v_j with
 * P = the group's rows of w->s rounded to bf16 (into w->pp) and the values as pair panels (w->vpp).
 * A pair (2 j2, 2 j2 + 1) enters a row's product only when the row sees both keys: the pairs every row
 * sees for all rows at once, then each row's other pairs, and a row's odd first or last key alone
 * (row_pv, float32 P and the stored value row). */
static void FN(rows_times_pairs)(FN(work) * w, const FN(group) * g, const FN(kblock) * kb, const int64_t jl[ATTN_MR],
                                 const int64_t jv[ATTN_MR], T *c, int64_t ldc) {
    const int64_t d = w->p->a.d, lda2 = ATTN_SLD / 2, ldp2 = ATTN_FBN / 2;
    uint16_t *ph = (uint16_t *)w->pp;
    for (int t = 0; t < g->rows; ++t) /* the weights the row's pairs read, rounded once */
        for (int64_t j = jl[t] / VL * VL; j < jv[t]; j += VL)
            S_STOREU(ph + t * ATTN_SLD + j, V(loadu)(w->s + t * ATTN_SLD + j));
    int64_t lmax, hmin;
    FN(shared_keys)(g, jl, jv, &lmax, &hmin);
    int64_t A = (lmax + 1) / 2 * 2, B = hmin / 2 * 2; /* the pairs every row sees: [A, B) */
    if (hmin <= lmax || B <= A) A = B = 0;
    if (B > A)
        for (int64_t c0 = 0; c0 < d; c0 += NR)
            FN(mk_dpv)((B - A) / 2, w->pp + A / 2, lda2, w->vpp + c0 * ldp2 + A / 2 * NR, c + c0, ldc, g->rows);
    for (int t = 0; t < g->rows; ++t) {
        const int64_t r[2][2] = {{jl[t], B > A ? A : jv[t]}, {B > A ? B : 0, B > A ? jv[t] : 0}};
        const T *srow = w->s + t * ATTN_SLD;
        T *crow = c + t * ldc;
        for (int k = 0; k < 2; ++k) {
            const int64_t r0 = r[k][0], r1 = r[k][1], e0 = (r0 + 1) / 2 * 2, e1 = r1 / 2 * 2;
            if (r1 <= r0) continue;
            if (e1 <= e0) { /* no whole pair: the keys one by one */
                FN(row_pv)(srow + r0, r1 - r0, kb->v + r0 * kb->vs, kb->vs, d, crow, kb->masked ? w->kpm + r0 : NULL);
                continue;
            }
            if (r0 < e0) FN(row_pv)(srow + r0, 1, kb->v + r0 * kb->vs, kb->vs, d, crow, kb->masked ? w->kpm + r0 : NULL);
            for (int64_t c0 = 0; c0 < d; c0 += NR)
                FN(mk_dpv)((e1 - e0) / 2, w->pp + t * lda2 + e0 / 2, 0, w->vpp + c0 * ldp2 + e0 / 2 * NR, crow + c0, 0,
                           1);
            if (e1 < r1)
                FN(row_pv)(srow + e1, 1, kb->v + e1 * kb->vs, kb->vs, d, crow, kb->masked ? w->kpm + e1 : NULL);
        }
    }
}

static inline FN(eng_scratch) FN(eng_scratch_sizes)(int64_t d, int64_t dpad, int64_t rpad, int bwd, int narrow) {
    const int64_t d2 = (d + 1) / 2; /* pairs of d */
    FN(eng_scratch) e = {0};
    e.qb = rpad * d2;
    e.kpb = narrow ? 0 : ATTN_BNMAX * d2;
    e.dob = bwd ? rpad * d2 : 0;
    e.vpb = bwd ? ATTN_BBN * d2 : 0;
    e.vpp = narrow || bwd ? 0 : (ATTN_FBN / 2) * dpad;
    e.pp = bwd ? 0 : ATTN_MR * ATTN_SLD / 2;
    return e;
}

static inline void FN(eng_pack_group)(FN(work) * w, FN(group) * g, int64_t gi, const S *const *rp, int nrows,
                                      int64_t d) {
    uint32_t *qb = w->qb + gi * ATTN_MR * ((d + 1) / 2);
    FN(pack_rows_dp)(qb, rp, nrows, d);
    g->qb = qb;
}

static inline void FN(eng_pack_dout_group)(FN(work) * w, int64_t gi, const S *const *rp, int nrows, int64_t d) {
    FN(pack_rows_dp)(w->dob + gi * ATTN_MR * ((d + 1) / 2), rp, nrows, d);
}

static inline void FN(eng_pack_fwd_block)(FN(work) * w, const FN(kblock) * kb) {
    const int64_t d = w->p->a.d;
    FN(pack_strips_dp)(w->kpb, kb->k, kb->ks, kb->nk, d);
    FN(pack_panels_dp)(w->vpp, ATTN_FBN / 2, kb->v, kb->vs, kb->nk, d, kb->masked ? w->kpm : NULL);
}

static inline void FN(eng_pack_bwd_block)(FN(work) * w, const FN(kblock) * kb) {
    const int64_t d = w->p->a.d;
    FN(pack_strips_dp)(w->kpb, kb->k, kb->ks, kb->nk, d);
    FN(pack_strips_dp)(w->vpb, kb->v, kb->vs, kb->nk, d);
}

static inline void FN(eng_score_strip)(const FN(work) * w, const FN(group) * g, int64_t st, const T *const *init,
                                       T *out, int64_t ldo) {
    const int64_t d2 = (w->p->a.d + 1) / 2;
    FN(mk_dp)(d2, g->qb, w->kpb + st * d2 * NR, NULL, (T)w->p->a.scale, out, ldo, init);
}

/* The pairs holding columns [clo, chi); a half of an edge pair outside them is masked off in q (the table
 * is zero there, but an inf in q times 0 would be NaN). */
static inline void FN(eng_window_strip)(const wavepe_attention_plan *p, const FN(group) * g, int64_t st,
                                        int64_t clo, int64_t chi, T *out, int64_t ldo) {
    const uint32_t *tp = (const uint32_t *)p->tpack;
    const int64_t d2 = (p->a.d + 1) / 2;
    const int64_t c2lo = clo / 2, c2hi = (chi + 1) / 2;
    const uint32_t mlo = clo % 2 ? 0xFFFF0000u : 0xFFFFFFFFu, mhi = chi % 2 ? 0x0000FFFFu : 0xFFFFFFFFu;
    uint32_t edge[2 * ATTN_MR];
    const int split = (mlo & mhi) != 0xFFFFFFFFu;
    for (int t = 0; split && t < ATTN_MR; ++t) {
        edge[t] = g->qb[c2lo * ATTN_MR + t] & mlo & (c2hi - c2lo == 1 ? mhi : 0xFFFFFFFFu);
        edge[ATTN_MR + t] = g->qb[(c2hi - 1) * ATTN_MR + t] & mhi & (c2hi - c2lo == 1 ? mlo : 0xFFFFFFFFu);
    }
    FN(mk_dp)(c2hi - c2lo, g->qb + c2lo * ATTN_MR, tp + (st * d2 + c2lo) * NR, split ? edge : NULL, (T)p->a.scale,
              out, ldo, NULL);
}

/* dP = dO . V^T from the stored pairs (exact products, as the scores) */
static inline void FN(eng_dp_strip)(const FN(work) * w, int64_t gi, int64_t st, T *out, int64_t ldo) {
    const int64_t d2 = (w->p->a.d + 1) / 2;
    FN(mk_dp)(d2, w->dob + gi * ATTN_MR * d2, w->vpb + st * d2 * NR, NULL, (T)1, out, ldo, NULL);
}

static inline void FN(eng_group_pv)(FN(work) * w, const FN(group) * g, const FN(kblock) * kb,
                                    const int64_t jl[ATTN_MR], const int64_t jv[ATTN_MR], T *o, int64_t ldo) {
    FN(rows_times_pairs)(w, g, kb, jl, jv, o, ldo);
}
